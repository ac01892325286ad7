"""The transient driver: a batch of material points through a strain- or mixed-controlled history.

Row 0 of the history is the initial state (zero strain, stress and internal state; not evaluated).
Step ``n >= 1`` evaluates the model once, from the previous converged step::

    forces/E     = strain[n]        old_forces/E = strain[n-1]
    forces/t     = time[n]          old_forces/t = time[n-1]
    forces/T     = temperature[n]   old_forces/T = temperature[n-1]   (a history with 'temperature')
    old_state/x  = state/x of step n-1 (zero at row 0)

Only the inputs the model declares are passed. Where the history prescribes stress on some
components (its ``control`` mask, :mod:`modelc.runtime.histories`), the step instead solves for
those strain components by Newton on the consistent tangent (:mod:`modelc.runtime.control`), and
the result's ``strain`` holds the solved strain. A point that does not converge (or returns a
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
import json
import math
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, runtime_checkable

import numpy as np
import torch

from modelc.runtime import history_buffers
from modelc.runtime.errors import InputError
from modelc.runtime.control import ControlOptions, solve_mixed
from modelc.runtime.histories import History, as_history
from modelc.runtime.plots import plot_results
from modelc.runtime.types import TensorType, tensor_type

__all__ = ["run_history", "RunResult", "Carry", "NonConvergenceWarning", "save_results", "load_results",
           "plot_results", "ALIASES", "STRESS", "STRAIN", "TIME"]

STRESS, STRAIN, TIME = "state/S", "forces/E", "forces/t"
#: NEML2's names of the temperature (and its previous row's): a history's optional 'temperature' drives them
TEMPERATURE, OLD_TEMPERATURE = "forces/T", "old_forces/T"

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


def tangent_request(model: Any) -> Any:
    """The ``derivatives=`` argument asking for d stress / d strain only: the pair list for a
    compiled model (its tangent variant computes just that block), ``True`` for other models."""
    return [(STRESS, STRAIN)] if hasattr(model, "TANGENT") else True


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
    """The driver's result: a ``dict`` of numpy arrays, each held once (``np.savez(path, **result)``
    writes each once), plus :attr:`failed` (point -> first failed step) and :meth:`summary`. The
    outputs of a run recorded in place (:mod:`modelc.runtime.history_buffers`) are strided views of
    the one buffer the model wrote them into (``np.ascontiguousarray`` gives a packed copy).

    :attr:`aliases` maps other names of an array to the key it is stored under (a model variable's
    name such as ``state/S`` to its friendly name ``stress``); ``result[alias]``, ``alias in result``
    and ``result.get(alias)`` resolve them."""

    failed: dict[int, int]
    aliases: dict[str, str]
    #: the Newton options the run used, each with where it came from (``model.solver_info()``)
    solver: dict[str, Any]

    def __init__(self, arrays: dict[str, np.ndarray], failed: dict[int, int],
                 aliases: Mapping[str, str] | None = None, solver: Mapping[str, Any] | None = None):
        super().__init__(arrays)
        self.failed = failed
        self.aliases = dict(aliases or {})
        self.solver = dict(solver or {})

    def __getitem__(self, key: str) -> np.ndarray:
        if not dict.__contains__(self, key) and key in self.aliases:
            key = self.aliases[key]
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self.aliases

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def with_aliases(self) -> dict[str, np.ndarray]:
        """A plain dict holding every array under its key and under each of its aliases (the same
        array objects: nothing is copied)."""
        out = dict(self)
        out.update({alias: dict.__getitem__(self, key) for alias, key in self.aliases.items()})
        return out

    def carry(self, outputs: Iterable[str]) -> Carry:
        """The state after the last row (for ``run_history(..., initial=...)``)."""
        return Carry({n: self[n][-1] for n in outputs}, self["converged"][-1].copy(), self["strain"][-1].copy())

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
    strain: np.ndarray | None = None  # (batch, 6): the last row's strain, solved where stress-controlled

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
    """Write results to an ``.npz`` file atomically (no partial file on failure): each array once,
    and the aliases (a :class:`RunResult`'s) as JSON text in the array ``aliases``."""
    from modelc.runtime.outputs import check_output_file, write_atomic_bytes

    p = check_output_file(path, "results file")
    buf = io.BytesIO()
    arrays = dict(results)
    aliases = getattr(results, "aliases", None)
    if aliases:
        arrays["aliases"] = np.array(json.dumps(aliases, sort_keys=True))
    if getattr(results, "solver", None):
        arrays["solver"] = np.array(json.dumps(results.solver, sort_keys=True))
    np.savez_compressed(buf, **arrays)
    return write_atomic_bytes(p, buf.getvalue(), "results file")


def load_results(path: "str | os.PathLike[str]") -> RunResult:
    """Read a results file written by :func:`save_results` (or ``modelc run``) as a
    :class:`RunResult`: every array, with its aliases resolved again."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: results file not found")
    with np.load(p, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    aliases = json.loads(str(arrays.pop("aliases"))) if "aliases" in arrays else {}
    solver = json.loads(str(arrays.pop("solver"))) if "solver" in arrays else {}
    conv = arrays.get("converged")
    failed = {}
    if conv is not None:
        for pt in np.flatnonzero(~conv.all(axis=0)):
            failed[int(pt)] = int(np.argmin(conv[:, pt]))
    return RunResult(arrays, failed, aliases, solver)


# ---------------------------------------------------------------------------------------------------
# The driver


def run_history(model: Any, history: "Mapping[str, Any] | History | str | os.PathLike[str]", *,
                solver: Mapping[str, Any] | None = None, **kwargs) -> RunResult:
    """:func:`drive` ``model`` through ``history``; ``solver`` (``rtol``, ``atol``, ``max_iter``)
    overrides the model's Newton options for this run (:mod:`modelc.runtime.solver`). The options
    used are recorded in :attr:`RunResult.solver` (and saved with the results). The other keyword
    arguments are :func:`drive`'s."""
    if solver and not hasattr(model, "set_solver"):
        raise InputError(f"run_history: solver= needs a generated modelc model, got {type(model).__name__}")
    if not solver:
        result = drive(model, history, **kwargs)
        if hasattr(model, "solver_info"):
            result.solver = model.solver_info()
        return result
    saved = model.solver_options()
    try:
        model.set_solver(**solver)
        result = drive(model, history, **kwargs)
        result.solver = model.solver_info()
    finally:  # the run's options do not stay on the object
        model.set_solver(**{k: saved.get(k) for k in ("rtol", "atol", "max_iter")})
    return result


def drive(model: Any, history: "Mapping[str, Any] | History | str | os.PathLike[str]", *,
          params: Mapping[str, Any] | None = None, dtype: torch.dtype | None = None,
          device: "str | torch.device | None" = None, backend: str | None = None,
          tangent_steps: Iterable[int] | None = None, progress: bool = True,
          initial: "Carry | None" = None,
          initial_state: Mapping[str, Any] | None = None,
          control: ControlOptions = ControlOptions()) -> RunResult:
    """Drive ``model`` through a ``history`` (mapping, History or .npz path): strain-controlled, or
    mixed (stress targets where its ``control`` mask is True; see :mod:`modelc.runtime.histories`).

    ``params``: parameter overrides, each a number or one value per point. ``dtype``/``device``
    default to the model's own (``model.dtype``/``model.device``), else float64 on the CPU.
    ``backend``: checked against the backend the model was built for (``model.backend``).
    ``tangent_steps``: steps (1 .. steps-1) at which to record d stress / d strain.
    ``control``: tolerances of the mixed-control Newton (:class:`~modelc.runtime.control.ControlOptions`).

    Returns a :class:`RunResult` with ``time``, ``strain`` (the solved strain under mixed control),
    ``labels``, ``stress`` (steps, batch, 6), every other output under its alias in :data:`ALIASES`
    (``equivalent_plastic_strain``, ...) or else its name (``state/internal/ep``; the variable
    names resolve as aliases), ``converged``, ``iterations``, ``residual_norm`` (steps, batch), with
    stress control also ``control`` (steps, batch, 6) and ``control_iterations`` (steps, batch), and
    with ``tangent_steps`` given, ``tangent`` (k, batch, 6, 6) and ``tangent_steps`` (k,). Outputs
    are NaN where a point did not converge (the model's Newton, or the stress targets); then a
    :class:`NonConvergenceWarning` carries :meth:`RunResult.summary`.

    ``initial`` (a :class:`Carry`) continues a run chunk by chunk (``modelc.runtime.distributed``):
    row 0 of ``history`` is then the previous chunk's last row, and the state and live points start
    from it instead of zero; :attr:`RunResult.failed` lists only the points that fail in this chunk.

    Otherwise row 0's state is the model's declared initial values (``initial:`` in the spec, from
    the run's parameters, so a per-point parameter gives per-point initial values; undeclared state
    is zero), and ``initial_state`` (``state/x`` or its alias -> one value, or one per point)
    overrides them.
    """
    hist = as_history(history)
    built_for = getattr(model, "backend", None)
    if backend is not None and built_for is not None and backend != built_for:
        raise InputError(f"the model was built for backend {built_for!r}, not {backend!r}: build it "
                         f"with backend={backend!r}")
    dtype = dtype or getattr(model, "dtype", None) or torch.float64
    device = torch.device(device or getattr(model, "device", None) or "cpu")
    in_shapes, out_shapes = variable_shapes(model, "input"), variable_shapes(model, "output")
    _check_wiring(in_shapes, out_shapes, hist.temperature is not None)
    call_params = _params(model, params, hist.batch, dtype, device)
    t_steps = _tangent_steps(tangent_steps, hist.steps)

    steps, batch = hist.steps, hist.batch
    mixed = hist.mixed
    strain = torch.as_tensor(hist.strain, dtype=dtype, device=device)
    if mixed:  # row n: the strain solved at step n (written; the history's own array is not)
        strain = strain.clone()
    time = torch.as_tensor(hist.time, dtype=dtype, device=device)
    temperature = None if hist.temperature is None else torch.as_tensor(hist.temperature, dtype=dtype,
                                                                          device=device)
    if mixed:
        targets = torch.as_tensor(hist.stress, dtype=dtype, device=device)
        controls = torch.as_tensor(hist.control, device=device)
        # each point's largest prescribed stress: the scale its targets are met to (rtol of it)
        target_scale = targets.abs().amax(dim=(0, 2))
        ctl_rows = [torch.zeros(batch, dtype=torch.int64, device=device)]
    state = {n: torch.zeros((batch, *s), dtype=dtype, device=device)
             for n, s in out_shapes.items()}
    alive = torch.ones(batch, dtype=torch.bool, device=device)
    if initial is not None:  # --- a chunk of a longer run: start from the carried state ---
        if initial_state is not None:
            raise InputError("run_history: pass either initial= (a Carry continuing a run) or "
                             "initial_state= (the state at row 0), not both")
        state, alive = initial.tensors(state, dtype, device)
        if mixed and initial.strain is not None:  # row 0's stress-controlled strain is the one solved for
            carried = torch.as_tensor(np.asarray(initial.strain), dtype=dtype, device=device)
            if carried.shape != strain[0].shape:
                raise InputError(f"the carried strain has shape {tuple(carried.shape)}, expected "
                                 f"{tuple(strain[0].shape)} (batch, 6)")
            strain[0] = carried
    else:
        state.update(_initial_state(model, out_shapes, batch, call_params, initial_state, dtype, device))
    rows: dict[str, list[torch.Tensor]] = {n: [v.clone()] for n, v in state.items()}
    conv_rows = [alive.clone()]
    its_rows = [torch.zeros(batch, dtype=torch.int64, device=device)]
    res_rows = [torch.zeros(batch, dtype=torch.float64, device=device)]
    tangents: list[torch.Tensor] = []
    failed: dict[int, int] = {}

    bar = _progress_bar(steps - 1, progress, _model_name(model))
    start, done = 1, None  # done: the rows recorded in place (modelc.runtime.history_buffers)
    if history_buffers.applies(model, dtype, device, alive):
        ctl = history_buffers.Control(targets, controls, target_scale, control) if mixed else None
        done = history_buffers.record(model, in_shapes, out_shapes, strain, time, state, t_steps,
                                      call_params, bar, ctl, temperature)
        start, tangents = done.stop, list(done.tangents)
        state = {name: v[-1] for name, v in done.outputs.items()}
        rows, conv_rows, its_rows, res_rows = {name: [] for name in state}, [], [], []
        if mixed:
            ctl_rows = []
    # results are written into the buffers of the call before the previous one (out=): two per kind
    # of call, so a step never overwrites the result its inputs may still be read from
    reuse, buffers = reuses_results(model), {}
    for n in range(start, steps):
        inputs = _step_inputs(in_shapes, strain, time, state, n, alive, temperature)
        want_tangent = n in t_steps
        old_forces = {"forces/E": strain[n - 1]} if "old_forces/E" not in in_shapes else None
        ctrl = controls[n] & alive.unsqueeze(-1) if mixed else None
        if ctrl is not None and bool(ctrl.any()):
            step = mixed_step(model, inputs, strain, targets[n], ctrl, n, alive, call_params,
                              old_forces, batch, control, target_scale)
            result, strain[n] = step.result, step.strain
            ctl_ok = step.converged | ~ctrl.any(dim=-1)
            ctl_rows.append(step.iterations)
        else:
            key = (want_tangent, n % 2)
            result = call_model(model, inputs, tangent_request(model) if want_tangent else False,
                                call_params, old_forces, out=buffers.get(key) if reuse else None)
            buffers[key] = result
            ctl_ok = None
            if mixed:
                ctl_rows.append(torch.zeros(batch, dtype=torch.int64, device=device))
        conv, its, res = step_status(result, batch, device)
        if ctl_ok is not None:
            conv = conv & ctl_ok
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
        if mixed:  # a failed point has no solved strain on its stress-controlled components
            strain[n] = torch.where(controls[n] & ~ok.unsqueeze(-1), math.nan, strain[n])
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

    arrays: dict[str, np.ndarray] = {"time": hist.time,
                                     "strain": strain.cpu().numpy().astype(np.float64) if mixed else hist.strain,
                                     "labels": np.array(hist.labels)}
    if hist.temperature is not None:
        arrays["temperature"] = hist.temperature
    aliases = _aliases(out_shapes)
    for name, vals in rows.items():
        arrays[aliases.get(name, name)] = _rows(done and done.outputs[name], vals)
    if mixed:
        arrays["control"] = hist.control
        arrays["control_iterations"] = _rows(done and done.control_iterations, ctl_rows)
    arrays["converged"] = _rows(done and done.converged, conv_rows)
    arrays["iterations"] = _rows(done and done.iterations, its_rows)
    arrays["residual_norm"] = _rows(done and done.residual_norm, res_rows)
    if t_steps:
        arrays["tangent"] = torch.stack(tangents).cpu().numpy()
        arrays["tangent_steps"] = np.array(t_steps, dtype=np.int64)
    result = RunResult(arrays, failed, aliases)
    if failed:  # never silent: the caller hears about it without scanning arrays
        warnings.warn(result.summary(), NonConvergenceWarning, stacklevel=2)
    return result


def _rows(first: torch.Tensor | None, rows: list[torch.Tensor]) -> np.ndarray:
    """One array of a history: the rows recorded in place (``first``, (k, batch, ...), or None)
    followed by the rows of the step loop. A run recorded in place from end to end returns its
    outputs as views of the buffer they were written into (copying them out of its rows would cost
    more than the run at a few hundred points: they are strided, not C-contiguous, arrays)."""
    parts = ([] if first is None else [first]) + ([torch.stack(rows)] if rows else [])
    return (parts[0] if len(parts) == 1 else torch.cat(parts)).cpu().numpy()


def _model_name(model: Any) -> str:
    return getattr(model, "NAME", None) or getattr(model, "name", None) or type(model).__name__


def _col(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.reshape(mask.shape + (1,) * (like.dim() - 1))


def _check_wiring(ins: Mapping[str, tuple[int, ...]], outs: Mapping[str, tuple[int, ...]],
                  temperature: bool = False) -> None:
    """Every input of the model is driven: the forces the history gives (strain, time, and the
    temperature when it has one) and the old state from the model's own outputs."""
    if STRESS not in outs:
        raise InputError(f"the model has no output '{STRESS}' (stress), so a strain-controlled history "
                         f"cannot drive it; its outputs: {', '.join(outs) or 'none'}")
    if STRAIN not in ins:
        raise InputError(f"the model has no input '{STRAIN}' (total strain), so a strain-controlled "
                         f"history cannot drive it; its inputs: {', '.join(ins) or 'none'}")
    forces = {STRAIN: (6,), TIME: (), "old_forces/E": (6,), "old_forces/t": ()}
    if temperature:
        forces.update({TEMPERATURE: (), OLD_TEMPERATURE: ()})
    for name, shape in ins.items():
        if name in (TEMPERATURE, OLD_TEMPERATURE) and not temperature:
            raise InputError(f"the model reads '{name}' (the temperature): give the history a 'temperature' "
                             f"array (steps, batch)")
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


def declared_initial(model: Any, batch: int, params: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
    """The model's declared initial state values (``state/x`` -> (batch, *base)); {} when it has none."""
    fn = getattr(model, "initial_values", None)
    return dict(fn(batch, **(params or {}))) if fn is not None else {}


def _initial_state(model: Any, out_shapes: Mapping[str, tuple[int, ...]], batch: int,
                   params: Mapping[str, torch.Tensor] | None, given: Mapping[str, Any] | None,
                   dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    """Row 0's state: the declared initial values, then the caller's ``initial_state`` (by name or
    alias, broadcast to (batch, *base))."""
    out = {n: v.to(dtype=dtype, device=device) for n, v in declared_initial(model, batch, params).items()
           if n in out_shapes}
    by_alias = {a: n for n, a in _aliases(out_shapes).items()}
    for name, value in (given or {}).items():
        key = name if name in out_shapes else by_alias.get(name)
        if key is None:
            close = difflib.get_close_matches(name, list(out_shapes) + list(by_alias), n=1)
            raise InputError(f"initial_state names {name!r}, which is not an output of the model"
                             + (f"; did you mean '{close[0]}'?" if close else "")
                             + f" (its outputs: {', '.join(out_shapes)})")
        shape = (batch, *out_shapes[key])
        try:
            v = torch.as_tensor(value, dtype=dtype, device=device)
            out[key] = v.expand(shape).clone()
        except (RuntimeError, TypeError, ValueError):
            raise InputError(f"initial_state[{name!r}]: expected one value or one per point, "
                             f"broadcastable to {shape} (batch, base shape)") from None
        if not bool(torch.isfinite(out[key]).all()):
            raise InputError(f"initial_state[{name!r}] has non-finite values")
    return out


def history_forces(strain: torch.Tensor, time: torch.Tensor, temperature: torch.Tensor | None,
                   n: int) -> dict[str, torch.Tensor]:
    """The forces of step ``n`` from a history's rows: ``forces/x`` from row n, ``old_forces/x`` from
    row n - 1 (strain, time, and the temperature when the history has it)."""
    vals = {STRAIN: strain[n], TIME: time[n], "old_forces/E": strain[n - 1], "old_forces/t": time[n - 1]}
    if temperature is not None:
        vals.update({TEMPERATURE: temperature[n], OLD_TEMPERATURE: temperature[n - 1]})
    return vals


def _step_inputs(shapes: Mapping[str, tuple[int, ...]], strain: torch.Tensor, time: torch.Tensor,
                 state: Mapping[str, torch.Tensor], n: int, alive: torch.Tensor,
                 temperature: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Inputs of step n. Failed points get the neutral initial state (zero strain and state, the
    same time and temperature) so that their NaNs never enter a Newton loop."""
    vals = history_forces(strain, time, temperature, n)
    out: dict[str, torch.Tensor] = {}
    all_alive = bool(alive.all())
    for name in shapes:
        v = vals[name] if name in vals else state["state/" + name[len("old_state/"):]]
        if name not in (TIME, "old_forces/t", TEMPERATURE, OLD_TEMPERATURE) and not all_alive:
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


def _aliases(outs: Iterable[str]) -> dict[str, str]:
    """``{variable name: friendly key}``: ``state/S`` is ``stress``; a state variable whose last name
    component is in :data:`ALIASES` gets that alias when no other variable maps to it."""
    wanted: dict[str, list[str]] = {}
    for name in outs:
        if name.startswith("state/") and name != STRESS and name.rsplit("/", 1)[-1] in ALIASES:
            wanted.setdefault(ALIASES[name.rsplit("/", 1)[-1]], []).append(name)
    out = {STRESS: "stress"}
    out.update({names[0]: alias for alias, names in wanted.items() if len(names) == 1})
    return out


def mixed_step(model: Any, inputs: dict[str, torch.Tensor], strain: torch.Tensor, target: torch.Tensor,
                ctrl: torch.Tensor, n: int, alive: torch.Tensor, params: Any, old_forces: Any, batch: int,
                options: ControlOptions, scale: torch.Tensor):
    """Solve step ``n`` for the stress-controlled strain components (``ctrl``), starting from the
    previous step's strain there; failed points keep the neutral zero strain."""
    guess = torch.where(ctrl, strain[n - 1], strain[n])
    guess = torch.where(alive.unsqueeze(-1), guess, torch.zeros_like(guess))
    request = tangent_request(model)

    def evaluate(E: torch.Tensor):
        result = call_model(model, {**inputs, STRAIN: E}, request, params, old_forces)
        conv, _, _ = step_status(result, batch, E.device)
        S = output_tensor(result, STRESS).to(E.dtype).reshape(batch, 6)
        return result, S, tangent_block(result, STRESS, STRAIN).to(E.dtype), conv

    return solve_mixed(evaluate, guess, target, ctrl, options, scale)


def _progress_bar(total: int, enabled: bool, desc: str) -> Any:
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, leave=False)
