"""The transient driver's steps written in place: a compiled model writes each step's outputs and
status straight into buffers that hold the whole history, and reads the next step's old state
from them where it lies.

:func:`modelc.runtime.driver.drive` records a history step by step: per step it labels the inputs,
calls the model, checks every output for NaN, masks failed points and appends each output's row to
a list it stacks at the end. For a small batch that bookkeeping (a few dozen tensor operations,
~200 us a step) costs several times the model's own call. While every point is alive none of it
changes a number, so :func:`record` does only what a step needs:

- one buffer ``Y (steps, batch, ny)`` for the outputs (row 0 the initial state) and one per status
  field; step ``n`` is a call with ``out=`` a result over ``Y[n]`` (written in place: nothing is
  copied, nothing allocated), whose ``old_state/`` inputs are column views of ``Y[n - 1]`` (read
  where they lie: a planned call on the C and Triton backends, see docs/backends.md);
- one check per step: every point converged and every output finite;
- on the C backend no call at all: the entry point runs on a precomputed row of argument words
  (:class:`_CSteps`);
- a step with stress-controlled components runs the driver's control Newton
  (:func:`~modelc.runtime.control.solve_mixed`, the same guess and options), its evaluations on the
  C tangent entry point the same way (:class:`_Mixed`), and writes the solved step into the rows.

The first step at which a point fails ends it: the rows before that step are handed back and the
driver evaluates that step again the regular way (same inputs, same kernel: same numbers), masking
and carrying the failed point as it always does. A run without failures is recorded here from end
to end; its arrays are those the regular loop makes (tested, bit for bit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch

from modelc.runtime import callpath
from modelc.runtime import driver as _driver
from modelc.runtime.bufferpool import kept_empty
from modelc.runtime.cbuild import pack_args
from modelc.runtime.control import ControlOptions, solve_mixed


@dataclass(frozen=True)
class Recorded:
    """Rows ``0 .. stop - 1`` of a history (``stop`` is the step the driver goes on from: the
    history's length when every step was recorded here)."""

    stop: int
    outputs: dict[str, torch.Tensor]  # name -> (stop, batch, *base shape)
    converged: torch.Tensor           # (stop, batch) bool
    iterations: torch.Tensor          # (stop, batch) int64
    residual_norm: torch.Tensor       # (stop, batch) float64
    tangents: list[torch.Tensor]      # (batch, 6, 6) of the tangent steps before ``stop``
    control_iterations: torch.Tensor | None = None  # (stop, batch) int64, stress-controlled runs


def applies(model: Any, dtype: torch.dtype, device: torch.device, alive: torch.Tensor) -> bool:
    """Whether :func:`record` can step ``model``: a compiled model (it takes ``out=``) run in its
    own dtype on its own device, every point alive at row 0."""
    return (_driver.reuses_results(model) and dtype == model.dtype and device == model.device
            and bool(alive.all()))


@dataclass(frozen=True)
class Control:
    """The stress-controlled part of a history, as the driver holds it: targets and mask
    ``(steps, batch, 6)``, each point's stress scale ``(batch,)`` and the control Newton's options."""

    targets: torch.Tensor
    mask: torch.Tensor
    scale: torch.Tensor
    options: ControlOptions


def result_over(model: Any, Y: torch.Tensor, status: tuple[torch.Tensor, ...] | None) -> Any:
    """A result of ``model`` (no derivatives) over the buffers ``Y (batch, ny)`` and ``status``
    (converged, iterations, residual norm; each (batch,)), to be passed as ``out=``."""
    return model._result(Y, None, status, torch.Size([Y.shape[0]]), None)


def record(model: Any, in_shapes: Mapping[str, tuple[int, ...]], out_shapes: Mapping[str, tuple[int, ...]],
           strain: torch.Tensor, time: torch.Tensor, state: Mapping[str, torch.Tensor],
           tangent_steps: list[int], params: Any, bar: Any, control: Control | None = None,
           temperature: torch.Tensor | None = None) -> Recorded:
    """Step ``model`` through the strain history ``strain (steps, batch, 6)`` / ``time (steps, batch)``
    from the row-0 ``state`` (output name -> (batch, *shape)) until a point fails or the history
    ends; ``tangent_steps`` and ``params`` as in :func:`~modelc.runtime.driver.drive`. With
    ``control``, the stress-controlled components of ``strain[n]`` are solved (and written there) at
    each step that has any, as the driver's step loop solves them. ``temperature (steps, batch)``:
    the history's, for a model that reads ``forces/T``."""
    steps, batch = strain.shape[0], strain.shape[1]
    dtype, device = model.dtype, model.device
    axis = model.output_axis
    # (a long history's outputs are tens of MB, written once: on the CPU in huge pages where the
    # system grants them, which fault in several times faster; modelc.runtime.bufferpool)
    Y = kept_empty((steps, batch, axis.size), dtype) if device.type == "cpu" else \
        torch.empty((steps, batch, axis.size), dtype=dtype, device=device)
    rows = {}  # output name -> (steps, batch, *shape) view of Y
    for name, shape in out_shapes.items():
        a, b = axis.span(name)
        rows[name] = Y[:, :, a:b].reshape(steps, batch, *shape)
        rows[name][0] = state[name]
    status = None
    if model.IMPLICIT:
        status = (torch.ones((steps, batch), dtype=torch.bool, device=device),
                  torch.zeros((steps, batch), dtype=torch.int32, device=device),
                  torch.zeros((steps, batch), dtype=dtype, device=device))
    # each input: the (steps, batch, ...) tensor it is a row of, and how many steps back
    given = {_driver.STRAIN: (strain, 0), _driver.TIME: (time, 0), "old_forces/E": (strain, 1),
             "old_forces/t": (time, 1)}
    if temperature is not None:
        given.update({_driver.TEMPERATURE: (temperature, 0), _driver.OLD_TEMPERATURE: (temperature, 1)})
    given.update({name: (rows["state/" + name[len("old_state/"):]], 1) for name in in_shapes
                  if name.startswith("old_state/")})
    sources = [(name, *given[name]) for name in in_shapes]

    def inputs_at(n: int) -> dict[str, torch.Tensor]:
        return {name: src[n - back] for name, src, back in sources}

    substeps = "old_forces/E" not in in_shapes
    tangents: list[torch.Tensor] = []
    want = set(tangent_steps)
    direct = None
    if steps > 3:
        direct = _CSteps.make(model, steps, inputs_at, lambda n: (Y[n], None, None if status is None else
                                                                  tuple(t[n] for t in status)), "value", params)
    mixed = None if control is None else _Mixed(model, steps, inputs_at, control, params, batch)
    ctl_its = None if control is None else torch.zeros((steps, batch), dtype=torch.int64, device=device)
    host = device.type == "cpu"  # (checks with numpy on the CPU: a third of torch's fixed cost)
    Yh = Y.numpy() if host else None
    conv_h = status[0].numpy() if host and status is not None else None

    def finished(n: int) -> bool:
        """Whether every point of step ``n`` converged and every output is finite."""
        if host:
            return bool(np.isfinite(Yh[n]).all()) and (conv_h is None or bool(conv_h[n].all()))
        ok = torch.isfinite(Y[n]).all()
        if status is not None:
            ok &= status[0][n].all()
        return bool(ok)

    # the steps with stress-controlled components (known up front: no device sync per step)
    controlled = [False] * steps if control is None else control.mask.reshape(steps, -1).any(dim=1).tolist()
    stop = steps
    for n in range(1, steps):
        st = None if status is None else (status[0][n], status[1][n], status[2][n])

        def call(derivatives, out=None):  # the model's call of step n (its inputs made here only)
            old_forces = {_driver.STRAIN: strain[n - 1]} if substeps else None
            return _driver.call_model(model, inputs_at(n), derivatives, params, old_forces, out=out)

        tangent = None
        if controlled[n]:  # solve for the stress-controlled strain
            old_forces = {_driver.STRAIN: strain[n - 1]} if substeps else None
            E, its, met, tangent = mixed.step(n, strain, inputs_at(n), old_forces, control.mask[n], Y[n], st,
                                              n in want)
            ok = finished(n) and bool(met.all())
            if ok:
                strain[n], ctl_its[n] = E, its
        elif n in want:  # a fresh result with the tangent: its outputs and status copied into row n
            result = call(_driver.tangent_request(model))
            _copy_result(result, Y[n], st)
            tangent = _driver.tangent_block(result, _driver.STRESS, _driver.STRAIN).to(dtype)
            ok = finished(n)
        elif direct is not None:  # no tensor made: the entry point on row n of the words
            direct.run(n)
            ok = finished(n)
            if not ok and model.on_failure == "substep":  # the call sub-steps what failed
                call(False, out=result_over(model, Y[n], st))
                ok = finished(n)
        else:
            call(False, out=result_over(model, Y[n], st))
            ok = finished(n)
        if not ok:  # the driver takes over from this step
            stop = n
            break
        if n in want:
            tangents.append(tangent)
        if bar is not None:
            bar.update(1)
    conv = torch.ones((stop, batch), dtype=torch.bool, device=device) if status is None else status[0][:stop]
    its = torch.zeros((stop, batch), dtype=torch.int64, device=device) if status is None else \
        status[1][:stop].to(torch.int64)
    res = torch.zeros((stop, batch), dtype=torch.float64, device=device) if status is None else \
        status[2][:stop].to(torch.float64)
    # (a run handed over part-way keeps copies of its rows, not the whole history's buffer)
    outputs = {name: v[:stop] if stop == steps else v[:stop].clone() for name, v in rows.items()}
    return Recorded(stop, outputs, conv, its, res, tangents, None if ctl_its is None else ctl_its[:stop])


def _copy_result(result: Any, Y: torch.Tensor, status) -> None:
    """A result's outputs and status into row buffers (``model._copy_into``, as ``out=`` copies)."""
    from modelc.runtime.model import _copy_into

    st = result.status
    _copy_into(callpath.Buffers(Y, None, status), result.outputs.tensor, None,
               None if st is None else (st.converged, st.iterations, st.residual_norm))


class _Mixed:
    """A step with stress-controlled components: :func:`~modelc.runtime.control.solve_mixed`, as the
    driver's step loop runs it (from the same guess, with the same options). Its model evaluations
    (each with the tangent d stress / d strain) are, on the C backend, the tangent entry point on a
    row of argument words whose strain is a scratch buffer (:class:`_CSteps`), writing into scratch
    outputs, tangent and status (a tangent that depends on the parameters only, which a call computes
    for one point and broadcasts, is computed here for every point: the control Newton reads it per
    point); otherwise, or for a model that sub-steps, the driver's own mixed step."""

    def __init__(self, model: Any, steps: int, inputs_at, control: Control, params: Any, batch: int):
        self.model, self.control, self.params, self.batch = model, control, params, batch
        self.direct = None
        if (steps > 3 and model.backend == "c" and model.TANGENT == ((_driver.STRESS,), (_driver.STRAIN,))
                and model.on_failure != "substep"):
            dtype, device = model.dtype, model.device
            self.E = torch.empty((batch, 6), dtype=dtype, device=device)
            self.Y = torch.empty((batch, model.output_axis.size), dtype=dtype, device=device)
            self.J = torch.empty((batch, 6, 6), dtype=dtype, device=device)
            self.status = None if not model.IMPLICIT else (
                torch.empty(batch, dtype=torch.bool, device=device),
                torch.empty(batch, dtype=torch.int32, device=device), torch.empty(batch, dtype=dtype, device=device))
            a, b = model.output_axis.span(_driver.STRESS)
            self.S = self.Y[:, a:b]
            self.ok = self.status[0] if self.status is not None else torch.ones(batch, dtype=torch.bool, device=device)

            def at(n: int) -> dict[str, torch.Tensor]:
                return {**inputs_at(n), _driver.STRAIN: self.E}
            self.direct = _CSteps.make(model, steps, at, lambda n: (self.Y, self.J, self.status), "tangent", params)

    def step(self, n: int, strain: torch.Tensor, inputs, old_forces, ctrl, Yn, st, want: bool):
        """Solve step ``n``: (strain, control iterations, targets met, tangent if ``want``), with the
        outputs and status of the solved strain written into ``Yn`` and ``st``."""
        c = self.control
        if self.direct is None:
            alive = torch.ones(self.batch, dtype=torch.bool, device=strain.device)
            step = _driver.mixed_step(self.model, inputs, strain, c.targets[n], ctrl, n, alive, self.params,
                                      old_forces, self.batch, c.options, c.scale)
            _copy_result(step.result, Yn, st)
            tangent = _driver.tangent_block(step.result, _driver.STRESS, _driver.STRAIN).to(Yn.dtype) if want else None
            return step.strain, step.iterations, step.converged, tangent

        def evaluate(E: torch.Tensor):
            self.E.copy_(E)
            self.direct.run(n)
            return None, self.S, self.J, self.ok

        guess = torch.where(ctrl, strain[n - 1], strain[n])  # (the driver's; every point is alive here)
        step = solve_mixed(evaluate, guess, c.targets[n], ctrl, c.options, c.scale)
        Yn.copy_(self.Y)
        if st is not None:
            for dst, value in zip(st, self.status):
                dst.copy_(value)
        return step.strain, step.iterations, step.converged, self.J.clone() if want else None


class _CSteps:
    """Step ``n``'s C call with no tensor made: an entry point on a row of a table of argument
    words. Every word of a step's arguments (``cbuild.pack_args``: the inputs' addresses and row
    strides, the parameter row, the outputs', Jacobian's and status's addresses, the Newton options)
    is the same affine function of ``n`` (each input and output is row ``n`` or ``n - 1`` of a
    tensor that holds the whole history, or a buffer of its own), so the words of steps 1 and 2,
    packed as the call packs them, give every step's; step 3's, packed too, checks it. The
    parameters and options are read once: the run's (the driver changes neither during a run)."""

    def __init__(self, fn, table: np.ndarray, held: tuple, batch: int, threads: int):
        self.fn, self.table, self.batch, self.threads = fn, table, batch, threads
        self.held = held  # what the words point into: the parameter row (the rest the caller holds)
        self.outputs_at = None  # step n -> the (Y, J, status) buffers it writes
        self.addr, self.row = table.ctypes.data, table.strides[0]

    @classmethod
    def make(cls, model: Any, steps: int, inputs_at, outputs_at, variant: str, params,
             batch_shape: tuple[int, ...] | None = None) -> "_CSteps | None":
        """For a C model, else None (then each step is the model's call). Steps ``1 .. steps - 1``;
        ``inputs_at(n)``: step ``n``'s inputs by name; ``outputs_at(n)``: its ``(Y, J, status)``;
        ``batch_shape``: what the parameters broadcast against (default: the outputs' rows)."""
        if model.backend != "c":
            return None
        Y = outputs_at(1)[0]
        batch = Y.shape[0]
        if batch == 0:
            return None
        with torch.no_grad():
            P, _ = model._param_tensor(params or {}, torch.Size(batch_shape or [batch]))
        P = P.contiguous()
        opts = model._solver_triple()
        words = []
        for n in (1, 2, 3):
            given = inputs_at(n)
            views, _ = callpath.input_views(model, given)
            for name, v in zip(model.input_axis.variable_names, views):
                if v.untyped_storage().data_ptr() != given[name].untyped_storage().data_ptr():
                    return None  # a copy, not the tensor itself: no fixed step in its address
            Yn, Jn, st = outputs_at(n)
            words.append(np.asarray(pack_args(views, P, Yn, Jn, st, opts), dtype=np.int64))
        step = words[1] - words[0]
        if not np.array_equal(words[2], words[1] + step):
            return None
        table = words[0][None, :] + np.arange(steps - 1, dtype=np.int64)[:, None] * step[None, :]
        made = cls(model._c_library(P).entry_point(variant), np.ascontiguousarray(table), (P,), batch,
                   torch.get_num_threads())
        made.outputs_at = outputs_at
        return made

    def run(self, n: int) -> None:
        self.fn(self.batch, self.addr + (n - 1) * self.row, self.threads)
