"""The transient driver: a batch of material points through a strain-controlled history.

Row 0 of the history is the initial state (zero strain, stress and internal state; not evaluated).
Step ``n >= 1`` evaluates the model once, from the previous converged step::

    forces/E     = strain[n]        old_forces/E = strain[n-1]
    forces/t     = time[n]          old_forces/t = time[n-1]
    old_state/x  = state/x of step n-1 (zero at row 0)

Only the inputs the model declares are passed. A point that does not converge (or returns a
non-finite output) is marked ``converged = False`` with NaN outputs at that step and every later one
(it is fed the neutral initial state from then on, so it cannot slow the batch's Newton loops down);
:meth:`RunResult.summary` says which points failed and where, and the caller never has to scan arrays.

Everything this module assumes about a compiled model's API sits in the small "adapter" section
below (:func:`variable_shapes`, :func:`output_tensor`, :func:`tangent_block`, :func:`step_status`,
:func:`call_model`), so that a change of that API is a change in one place.
"""
from __future__ import annotations

import difflib
import io
import math
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, runtime_checkable

import numpy as np
import torch

from modelc.errors import InputError
from modelc.runtime.histories import History, as_history
from modelc.runtime.types import TensorType, tensor_type

__all__ = ["run_history", "RunResult", "Carry", "NonConvergenceWarning", "save_results", "plot_results", "ALIASES",
           "STRESS", "STRAIN", "TIME"]

STRESS, STRAIN, TIME = "state/S", "forces/E", "forces/t"

#: Friendly result keys (the names used by the NEML2 reference files) for state variables, keyed on
#: the last component of the variable's name. An alias is added only when exactly one variable maps to it.
ALIASES: dict[str, str] = {
    "ep": "equivalent_plastic_strain",
    "equivalent_plastic_strain": "equivalent_plastic_strain",
    "Ep": "plastic_strain",
    "plastic_strain": "plastic_strain",
    "X": "back_stress",
    "back_stress": "back_stress",
    "gamma_rate": "flow_rate",
    "gammadot": "flow_rate",
    "flow_rate": "flow_rate",
}


# ---------------------------------------------------------------------------------------------------
# What the driver needs from a compiled model (modelc.runtime.model.CompiledModel satisfies it).


@runtime_checkable
class ModelLike(Protocol):
    """The part of a compiled model the driver uses (plus ``input_axis``/``output_axis``, or
    ``input_names``/``input_types`` and the same for outputs; see :func:`variable_shapes`)."""

    parameter_info: Mapping[str, Any]  # name -> info with .default (``parameters`` in older models)

    def __call__(self, inputs: dict[str, torch.Tensor], derivatives: bool = False,
                 **params: torch.Tensor) -> Any: ...


# --- adapter: the only functions that touch the compiled model's API --------------------------------

def _base_shape(t: Any) -> tuple[int, ...]:
    if isinstance(t, TensorType) or hasattr(t, "base_shape"):
        return tuple(t.base_shape)
    if isinstance(t, str):
        return tensor_type(t).base_shape
    if isinstance(t, int):  # a storage size
        return () if t == 1 else (t,)
    return tuple(t)


def variable_shapes(model: Any, side: str) -> dict[str, tuple[int, ...]]:
    """``{name: base shape}`` of the model's inputs (``side="input"``) or outputs, in order.

    Names come from ``model.<side>_names`` or ``model.<side>_axis.variable_names``; types from
    ``model.<side>_types`` (name -> TensorType / type name) or the LabeledAxis (``axis.type_of``).
    """
    axis = getattr(model, f"{side}_axis", None)
    names = getattr(model, f"{side}_names", None)
    names = [str(n) for n in (names if names is not None else axis.variable_names)]
    types = getattr(model, f"{side}_types", None)
    if types is not None:
        return {n: _base_shape(types[n]) for n in names}
    return {n: _base_shape(axis.type_of(n)) for n in names}


def _raw(x: Any) -> torch.Tensor:
    """A torch tensor from a typed/labeled view (``.tensor`` or ``.data``) or a tensor."""
    if isinstance(x, torch.Tensor):
        return x
    for attr in ("tensor", "data"):
        if isinstance(getattr(x, attr, None), torch.Tensor):
            return getattr(x, attr)
    return torch.as_tensor(x)


def output_tensor(result: Any, name: str) -> torch.Tensor:
    """Output ``name`` of a call's result, shape batch + base."""
    return _raw(result[name])


def tangent_block(result: Any, out_name: str, in_name: str) -> torch.Tensor:
    """d out / d in from a call with ``derivatives=True``, shape (batch, out size, in size)."""
    t = _raw(result.jacobian[out_name, in_name])  # LabeledMatrix: typed (batch, 6, 6) view
    return t.reshape(t.shape[0], -1, t.shape[-1]) if t.dim() >= 3 else t.reshape(t.shape[0], -1, 1)


def step_status(result: Any, batch: int, device: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(converged bool, iterations int64, residual_norm float64), each (batch,), from ``result.status``;
    an explicit model (no status) converges in 0 iterations."""
    status = getattr(result, "status", None)
    if status is None:
        return (torch.ones(batch, dtype=torch.bool, device=device),
                torch.zeros(batch, dtype=torch.int64, device=device),
                torch.zeros(batch, dtype=torch.float64, device=device))

    def get(attr: str, dtype: torch.dtype, fill: float) -> torch.Tensor:
        v = getattr(status, attr, None)
        v = torch.full((batch,), fill, dtype=dtype, device=device) if v is None else _raw(v)
        return v.to(device=device, dtype=dtype).reshape(-1).expand(batch)

    return get("converged", torch.bool, 1), get("iterations", torch.int64, 0), \
        get("residual_norm", torch.float64, 0.0)


def call_model(model: Any, inputs: dict[str, torch.Tensor], derivatives: bool,
               params: dict[str, torch.Tensor] | None,
               old_forces: dict[str, torch.Tensor] | None = None, out: Any = None) -> Any:
    """One evaluation: ``model(inputs, derivatives=..., **parameter overrides)``. ``old_forces``
    (the previous step's value of each force the model has no ``old_forces/`` input for) is passed
    to models that sub-step failed points (``on_failure="substep"``), which need it to cut the step.
    ``out``: an earlier result to write into (models that :func:`reuses_results` only)."""
    kw = dict(params or {})
    if out is not None:
        kw["out"] = out
    with torch.no_grad():  # numbers only (modelc.runtime.history_grad is the differentiable driver)
        if old_forces and getattr(model, "on_failure", "nan") == "substep":
            return model(inputs, derivatives=derivatives, old_forces=old_forces, **kw)
        return model(inputs, derivatives=derivatives, **kw)


def reuses_results(model: Any) -> bool:
    """Whether ``model`` takes ``out=`` (a modelc compiled model does)."""
    from modelc.runtime.model import CompiledModel

    return isinstance(model, CompiledModel)


# ---------------------------------------------------------------------------------------------------
# Results


class NonConvergenceWarning(RuntimeWarning):
    """Some points of a run did not converge (their outputs are NaN from the failed step on)."""


class RunResult(dict):
    """The driver's result: a ``dict`` of numpy arrays (``np.savez(path, **result)`` works), plus
    :attr:`failed` (point -> first failed step) and :meth:`summary`."""

    failed: dict[int, int]

    def __init__(self, arrays: dict[str, np.ndarray], failed: dict[int, int]):
        super().__init__(arrays)
        self.failed = failed

    def carry(self, outputs: Iterable[str]) -> Carry:
        """The state after the last row (for ``run_history(..., initial=...)``)."""
        return Carry({n: self[n][-1] for n in outputs}, self["converged"][-1].copy())

    @property
    def ok(self) -> bool:
        """True when every point converged at every step."""
        return not self.failed

    def summary(self) -> str:
        """One line when all is well; otherwise which points failed, from which step (and time)."""
        conv = self["converged"]
        steps, batch = conv.shape[0] - 1, conv.shape[1]
        if not self.failed:
            return f"all {batch} point(s) converged at all {steps} step(s)"
        bad_pairs = int((~conv[1:]).sum())
        parts = [f"point {p} ({self['labels'][p]}) from step {s} (t = {self['time'][s, p]:g})"
                 for p, s in sorted(self.failed.items())[:10]]
        more = f"; and {len(self.failed) - 10} more" if len(self.failed) > 10 else ""
        return (f"{len(self.failed)} of {batch} point(s) did not converge ({bad_pairs} of "
                f"{steps * batch} point-steps are NaN): " + "; ".join(parts) + more)


@dataclass(frozen=True)
class Carry:
    """Where a run stands after its last row: every output (``state``, name -> (batch, *shape)) and
    which points are still live (``alive``, (batch,) bool). :meth:`RunResult.carry` makes one;
    ``run_history(..., initial=carry)`` continues from it bit for bit."""

    state: Mapping[str, np.ndarray]
    alive: np.ndarray

    def tensors(self, like: Mapping[str, torch.Tensor], dtype: torch.dtype,
                device: torch.device) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        missing = [n for n in like if n not in self.state]
        if missing:
            raise InputError(f"the carried state lacks output(s) {', '.join(missing)} of the model")
        state = {}
        for n, z in like.items():
            v = torch.as_tensor(np.asarray(self.state[n]), device=device).to(dtype)
            if v.shape != z.shape:
                raise InputError(f"carried '{n}' has shape {tuple(v.shape)}, expected {tuple(z.shape)}")
            state[n] = v
        return state, torch.as_tensor(np.asarray(self.alive, dtype=bool), device=device)


def save_results(results: Mapping[str, np.ndarray], path: "str | os.PathLike[str]") -> Path:
    """Write results to an ``.npz`` file atomically (no partial file on failure)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez_compressed(buf, **dict(results))
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, p)
    return p


# ---------------------------------------------------------------------------------------------------
# The driver


def run_history(model: Any, history: "Mapping[str, Any] | History | str | os.PathLike[str]", *,
                params: Mapping[str, Any] | None = None, dtype: torch.dtype | None = None,
                device: "str | torch.device | None" = None, backend: str | None = None,
                tangent_steps: Iterable[int] | None = None, progress: bool = True,
                initial: "Carry | None" = None) -> RunResult:
    """Drive ``model`` through a strain-controlled ``history`` (mapping, History or .npz path).

    ``params``: parameter overrides, each a number or one value per point. ``dtype``/``device``
    default to the model's own (``model.dtype``/``model.device``), else float64 on the CPU.
    ``backend``: checked against the backend the model was built for (``model.backend``).
    ``tangent_steps``: steps (1 .. steps-1) at which to record d stress / d strain.

    Returns a :class:`RunResult` with ``time``, ``strain``, ``labels``, ``stress`` (steps, batch, 6),
    every output by its name (``state/internal/ep``, ...) and by its alias in :data:`ALIASES`,
    ``converged``, ``iterations``, ``residual_norm`` (steps, batch), and with ``tangent_steps``
    given, ``tangent`` (k, batch, 6, 6) and ``tangent_steps`` (k,). Outputs are NaN where a point did
    not converge; then a :class:`NonConvergenceWarning` carries :meth:`RunResult.summary`.

    ``initial`` (a :class:`Carry`) continues a run chunk by chunk (``modelc.runtime.distributed``):
    row 0 of ``history`` is then the previous chunk's last row, and the state and live points start
    from it instead of zero; :attr:`RunResult.failed` lists only the points that fail in this chunk.
    """
    hist = as_history(history)
    built_for = getattr(model, "backend", None)
    if backend is not None and built_for is not None and backend != built_for:
        raise InputError(f"the model was built for backend {built_for!r}, not {backend!r}: build it "
                         f"with backend={backend!r}")
    dtype = dtype or getattr(model, "dtype", None) or torch.float64
    device = torch.device(device or getattr(model, "device", None) or "cpu")
    in_shapes, out_shapes = variable_shapes(model, "input"), variable_shapes(model, "output")
    _check_wiring(in_shapes, out_shapes)
    call_params = _params(model, params, hist.batch, dtype, device)
    t_steps = _tangent_steps(tangent_steps, hist.steps)

    steps, batch = hist.steps, hist.batch
    strain = torch.as_tensor(hist.strain, dtype=dtype, device=device)
    time = torch.as_tensor(hist.time, dtype=dtype, device=device)
    state = {n: torch.zeros((batch, *s), dtype=dtype, device=device)
             for n, s in out_shapes.items()}
    alive = torch.ones(batch, dtype=torch.bool, device=device)
    if initial is not None:  # --- a chunk of a longer run: start from the carried state ---
        state, alive = initial.tensors(state, dtype, device)
    rows: dict[str, list[torch.Tensor]] = {n: [v.clone()] for n, v in state.items()}
    conv_rows = [alive.clone()]
    its_rows = [torch.zeros(batch, dtype=torch.int64, device=device)]
    res_rows = [torch.zeros(batch, dtype=torch.float64, device=device)]
    tangents: list[torch.Tensor] = []
    failed: dict[int, int] = {}

    bar = _progress_bar(steps - 1, progress, _model_name(model))
    # results are written into the buffers of the call before the previous one (out=): two per kind
    # of call, so a step never overwrites the result its inputs may still be read from
    reuse, buffers = reuses_results(model), {}
    for n in range(1, steps):
        inputs = _step_inputs(in_shapes, strain, time, state, n, alive)
        want_tangent = n in t_steps
        old_forces = {"forces/E": strain[n - 1]} if "old_forces/E" not in in_shapes else None
        key = (want_tangent, n % 2)
        result = call_model(model, inputs, want_tangent, call_params, old_forces,
                            out=buffers.get(key) if reuse else None)
        buffers[key] = result
        conv, its, res = step_status(result, batch, device)
        outs = {name: output_tensor(result, name).to(dtype).reshape(batch, *shape)
                for name, shape in out_shapes.items()}
        finite = torch.ones(batch, dtype=torch.bool, device=device)
        for v in outs.values():
            finite &= torch.isfinite(v.reshape(batch, -1)).all(dim=1)
        was_alive = alive
        ok = conv & finite & alive
        for p in (alive & ~ok).nonzero().flatten().tolist():
            failed[p] = n
        alive = alive & ok
        for name, v in outs.items():
            v = torch.where(_col(ok, v), v, torch.full_like(v, math.nan))
            state[name] = v
            rows[name].append(v)
        conv_rows.append(ok)
        its_rows.append(torch.where(was_alive, its, torch.zeros_like(its)))
        res_rows.append(torch.where(was_alive, res, torch.full_like(res, math.nan)))
        if want_tangent:
            tan = tangent_block(result, STRESS, STRAIN).to(dtype)
            tangents.append(torch.where(_col(ok, tan), tan, torch.full_like(tan, math.nan)))
        if bar is not None:
            bar.update(1)
            if failed:
                bar.set_postfix(failed=len(failed))
    if bar is not None:
        bar.close()

    arrays: dict[str, np.ndarray] = {"time": hist.time, "strain": hist.strain,
                                     "labels": np.array(hist.labels)}
    for name, vals in rows.items():
        arrays[name] = torch.stack(vals).cpu().numpy()
    arrays["stress"] = arrays[STRESS]
    arrays.update(_aliases(arrays, out_shapes))
    arrays["converged"] = torch.stack(conv_rows).cpu().numpy()
    arrays["iterations"] = torch.stack(its_rows).cpu().numpy()
    arrays["residual_norm"] = torch.stack(res_rows).cpu().numpy()
    if t_steps:
        arrays["tangent"] = torch.stack(tangents).cpu().numpy()
        arrays["tangent_steps"] = np.array(t_steps, dtype=np.int64)
    result = RunResult(arrays, failed)
    if failed:  # never silent: the caller hears about it without scanning arrays
        warnings.warn(result.summary(), NonConvergenceWarning, stacklevel=2)
    return result


def _model_name(model: Any) -> str:
    return getattr(model, "NAME", None) or getattr(model, "name", None) or type(model).__name__


def _col(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.reshape(mask.shape + (1,) * (like.dim() - 1))


def _check_wiring(ins: Mapping[str, tuple[int, ...]], outs: Mapping[str, tuple[int, ...]]) -> None:
    if STRESS not in outs:
        raise InputError(f"the model has no output '{STRESS}' (stress), so a strain-controlled history "
                         f"cannot drive it; its outputs: {', '.join(outs) or 'none'}")
    if STRAIN not in ins:
        raise InputError(f"the model has no input '{STRAIN}' (total strain), so a strain-controlled "
                         f"history cannot drive it; its inputs: {', '.join(ins) or 'none'}")
    forces = {STRAIN: (6,), TIME: (), "old_forces/E": (6,), "old_forces/t": ()}
    for name, shape in ins.items():
        if name in forces:
            if shape != forces[name]:
                raise InputError(f"model input '{name}' has base shape {shape}, expected {forces[name]}")
        elif name.startswith("old_state/"):
            new = "state/" + name[len("old_state/"):]
            if new not in outs:
                raise InputError(f"model input '{name}' has no matching output '{new}', so the driver "
                                 f"cannot carry it from one step to the next")
            if outs[new] != shape:
                raise InputError(f"model input '{name}' has base shape {shape} but output '{new}' has "
                                 f"{outs[new]}")
        else:
            raise InputError(f"model input '{name}' is not driven by a strain-controlled history (it "
                             f"provides {', '.join(forces)} and old_state/* from the model's state)")


def _step_inputs(shapes: Mapping[str, tuple[int, ...]], strain: torch.Tensor, time: torch.Tensor,
                 state: Mapping[str, torch.Tensor], n: int, alive: torch.Tensor) -> dict[str, torch.Tensor]:
    """Inputs of step n. Failed points get the neutral initial state (zero strain and state, the
    same time) so that their NaNs never enter a Newton loop."""
    vals = {STRAIN: strain[n], TIME: time[n], "old_forces/E": strain[n - 1], "old_forces/t": time[n - 1]}
    out: dict[str, torch.Tensor] = {}
    all_alive = bool(alive.all())
    for name in shapes:
        v = vals[name] if name in vals else state["state/" + name[len("old_state/"):]]
        if name not in (TIME, "old_forces/t") and not all_alive:
            v = torch.where(_col(alive, v), v, torch.zeros_like(v))
        out[name] = v
    return out


def _params(model: Any, params: Mapping[str, Any] | None, batch: int, dtype: torch.dtype,
            device: torch.device) -> dict[str, torch.Tensor] | None:
    if not params:
        return None
    info = getattr(model, "parameter_info", None)
    known = list(info if info is not None else (getattr(model, "parameters", {}) or {}))
    out: dict[str, torch.Tensor] = {}
    for name, value in params.items():
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise InputError(f"unknown parameter '{name}'{hint} (the model's parameters: "
                             f"{', '.join(known) or 'none'})")
        if isinstance(value, torch.Tensor) and value.requires_grad:
            raise InputError(f"parameter '{name}' requires grad, but run_history returns numpy arrays: use "
                             "modelc.runtime.simulate (the differentiable driver) for gradients")
        try:
            t = torch.as_tensor(value, dtype=dtype, device=device)
        except (TypeError, ValueError):
            raise InputError(f"parameter '{name}': expected a number or one number per point, "
                             f"got {value!r}") from None
        if t.dim() > 1 or (t.dim() == 1 and t.shape[0] not in (1, batch)):
            raise InputError(f"parameter '{name}': expected a number or {batch} values (one per "
                             f"point), got shape {tuple(t.shape)}")
        if not bool(torch.isfinite(t).all()):
            raise InputError(f"parameter '{name}' is not finite: {value!r}")
        out[name] = t.reshape(()) if t.numel() == 1 else t
    return out


def _tangent_steps(steps: Iterable[int] | None, nrows: int) -> list[int]:
    if steps is None:
        return []
    out = sorted({int(s) for s in steps})
    bad = [s for s in out if not 1 <= s < nrows]
    if bad:
        raise InputError(f"tangent step(s) {bad} out of range: the history's steps are 1..{nrows - 1} "
                         f"(row 0 is the initial state and is not evaluated)")
    return out


def _aliases(arrays: Mapping[str, np.ndarray], outs: Iterable[str]) -> dict[str, np.ndarray]:
    wanted: dict[str, list[str]] = {}
    for name in outs:
        if name.startswith("state/") and name.rsplit("/", 1)[-1] in ALIASES:
            wanted.setdefault(ALIASES[name.rsplit("/", 1)[-1]], []).append(name)
    return {alias: arrays[names[0]] for alias, names in wanted.items()
            if len(names) == 1 and alias not in arrays}


def _progress_bar(total: int, enabled: bool, desc: str) -> Any:
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, leave=False)


# ---------------------------------------------------------------------------------------------------
# Plot


def plot_results(results: Mapping[str, np.ndarray], path: "str | os.PathLike[str]", *,
                 title: str | None = None, component: int = 0) -> Path:
    """Stress-strain curves (one per point), von Mises stress against strain, and equivalent plastic
    strain against time when present (else stress against time); written with matplotlib's Agg
    backend (.png, .svg or .pdf from the file name)."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install 'modelc[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comp = ("xx", "yy", "zz", "yz", "xz", "xy")[component]
    strain, stress = results["strain"][..., component], results["stress"][..., component]
    if component >= 3:  # Mandel shear carries sqrt 2: plot the tensor components
        strain, stress = strain / math.sqrt(2.0), stress / math.sqrt(2.0)
    time = results["time"]
    batch = strain.shape[1]
    labels = [str(x) for x in results.get("labels", [f"point {i}" for i in range(batch)])]
    conv = results.get("converged", np.ones(time.shape, dtype=bool))
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, batch))
    first_bad = np.where(conv.all(axis=0), 0, np.argmin(conv, axis=0))  # 0: never failed

    # von Mises stress signed by the plotted deviatoric component: shows the hysteresis that the
    # pressure part hides in sigma_xx (under uniaxial strain it is sigma_xx - sigma_yy)
    full = results["stress"]
    dev = full - full[..., :3].mean(axis=-1, keepdims=True) * np.array([1, 1, 1, 0, 0, 0])
    vm = np.sqrt(1.5 * (dev * dev).sum(axis=-1)) * np.where(dev[..., component] < 0, -1.0, 1.0)

    fig, (ax1, axv, ax2) = plt.subplots(1, 3, figsize=(16, 4.8), layout="constrained")
    for ax, y, ylabel, sub in ((ax1, stress, rf"stress $\sigma_{{{comp}}}$", "stress-strain"),
                               (axv, vm, rf"von Mises stress, signed as $\sigma'_{{{comp}}}$",
                                "equivalent stress-strain")):
        for i in range(batch):
            ax.plot(strain[:, i], y[:, i], color=colors[i], lw=1.6, label=labels[i])
            if first_bad[i] > 0:  # the last converged state of a point that then failed
                k = first_bad[i] - 1
                ax.plot(strain[k, i], y[k, i], "X", color="crimson", ms=9, zorder=5)
        ax.set_xlabel(rf"strain $\varepsilon_{{{comp}}}$")
        ax.set_ylabel(ylabel)
        ax.set_title(sub)
        ax.axhline(0.0, color="0.8", lw=0.8, zorder=0)
        ax.axvline(0.0, color="0.8", lw=0.8, zorder=0)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(plt.MaxNLocator(nbins=5))

    same_span = np.allclose(time[-1], time[-1, 0]) and np.allclose(time[0], time[0, 0])
    t_plot = time if same_span else (time - time[0]) / (time[-1] - time[0])
    ep = results.get("equivalent_plastic_strain")
    y, ylabel = (ep, "equivalent plastic strain") if ep is not None else \
        (stress, rf"stress $\sigma_{{{comp}}}$")
    for i in range(batch):
        ax2.plot(t_plot[:, i], y[:, i], color=colors[i], lw=1.6)
        if first_bad[i] > 0:
            ax2.plot(t_plot[first_bad[i] - 1, i], y[first_bad[i] - 1, i], "X", color="crimson", ms=9)
    ax2.set_xlabel("time" if same_span else "time / total time of the point")
    ax2.set_ylabel(ylabel)
    ax2.set_title(f"{ylabel} vs time")
    ax2.grid(alpha=0.3)

    if batch <= 12:
        fig.legend(*ax1.get_legend_handles_labels(), loc="outside right center", fontsize=8,
                   title="points", title_fontsize=8, frameon=False)
    else:
        sm = plt.cm.ScalarMappable(cmap="viridis", norm=plt.Normalize(0, batch - 1))
        fig.colorbar(sm, ax=(ax1, axv, ax2), label="point index")
    failed = int((~conv.all(axis=0)).sum())
    sup = title or "modelc run"
    if failed:
        sup += f"  ({failed} point(s) did not converge: X marks each one's last converged state)"
    fig.suptitle(sup)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p
