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
- one check per step: every point converged and every output finite.

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
from modelc.runtime.cbuild import pack_args


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


def applies(model: Any, dtype: torch.dtype, device: torch.device, mixed: bool, alive: torch.Tensor) -> bool:
    """Whether :func:`record` can step ``model``: a compiled model (it takes ``out=``) run in its
    own dtype on its own device, a strain-controlled history, every point alive at row 0."""
    return (_driver.reuses_results(model) and not mixed and dtype == model.dtype
            and device == model.device and bool(alive.all()))


def result_over(model: Any, Y: torch.Tensor, status: tuple[torch.Tensor, ...] | None) -> Any:
    """A result of ``model`` (no derivatives) over the buffers ``Y (batch, ny)`` and ``status``
    (converged, iterations, residual norm; each (batch,)), to be passed as ``out=``."""
    return model._result(Y, None, status, torch.Size([Y.shape[0]]), None)


def record(model: Any, in_shapes: Mapping[str, tuple[int, ...]], out_shapes: Mapping[str, tuple[int, ...]],
           strain: torch.Tensor, time: torch.Tensor, state: Mapping[str, torch.Tensor],
           tangent_steps: list[int], params: Any, bar: Any) -> Recorded:
    """Step ``model`` through the strain history ``strain (steps, batch, 6)`` / ``time (steps, batch)``
    from the row-0 ``state`` (output name -> (batch, *shape)) until a point fails or the history
    ends; ``tangent_steps`` and ``params`` as in :func:`~modelc.runtime.driver.drive`."""
    steps, batch = strain.shape[0], strain.shape[1]
    dtype, device = model.dtype, model.device
    axis = model.output_axis
    Y = torch.empty((steps, batch, axis.size), dtype=dtype, device=device)
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
    given.update({name: (rows["state/" + name[len("old_state/"):]], 1) for name in in_shapes
                  if name.startswith("old_state/")})
    sources = [(name, *given[name]) for name in in_shapes]
    substeps = "old_forces/E" not in in_shapes
    tangents: list[torch.Tensor] = []
    want = set(tangent_steps)
    direct = _CSteps.make(model, sources, Y, status, params) if steps > 3 else None
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

    stop = steps
    for n in range(1, steps):
        inputs = {name: src[n - back] for name, src, back in sources}
        old_forces = {_driver.STRAIN: strain[n - 1]} if substeps else None
        st = None if status is None else (status[0][n], status[1][n], status[2][n])

        def regular() -> None:  # the model's call, into row n
            _driver.call_model(model, inputs, False, params, old_forces, out=result_over(model, Y[n], st))

        if n in want:  # a fresh result with the tangent: its outputs and status copied into row n
            result = _driver.call_model(model, inputs, _driver.tangent_request(model), params, old_forces)
            Y[n].copy_(result.outputs.tensor.reshape(batch, -1))
            if st is not None:
                for dst, value in zip(st, (result.status.converged, result.status.iterations,
                                           result.status.residual_norm)):
                    dst.copy_(value.reshape(batch))
            ok = finished(n)
        elif direct is not None:
            direct.run(n)
            ok = finished(n)
            if not ok and model.on_failure == "substep":  # the call sub-steps what failed
                regular()
                ok = finished(n)
        else:
            regular()
            ok = finished(n)
        if not ok:  # the driver takes over from this step
            stop = n
            break
        if n in want:
            tangents.append(_driver.tangent_block(result, _driver.STRESS, _driver.STRAIN).to(dtype))
        if bar is not None:
            bar.update(1)
    conv = torch.ones((stop, batch), dtype=torch.bool, device=device) if status is None else status[0][:stop]
    its = torch.zeros((stop, batch), dtype=torch.int64, device=device) if status is None else \
        status[1][:stop].to(torch.int64)
    res = torch.zeros((stop, batch), dtype=torch.float64, device=device) if status is None else \
        status[2][:stop].to(torch.float64)
    # (a run handed over part-way keeps copies of its rows, not the whole history's buffer)
    outputs = {name: v[:stop] if stop == steps else v[:stop].clone() for name, v in rows.items()}
    return Recorded(stop, outputs, conv, its, res, tangents)


class _CSteps:
    """Step ``n``'s C call with no tensor made: the value entry point on a row of a table of argument
    words. Every word of a step's arguments (``cbuild.pack_args``: the inputs' addresses and row
    strides, the parameter row, the outputs' and status's addresses, the Newton options) is the
    same affine function of ``n`` (each input and output is row ``n`` or ``n - 1`` of a tensor
    that holds the whole history), so the words of steps 1 and 2, packed as the call packs them,
    give every step's; step 3's, packed too, checks it. The parameters and options are read once:
    the run's (the driver changes neither during a run)."""

    def __init__(self, fn, table: np.ndarray, P: torch.Tensor, Y: torch.Tensor, status, batch: int, threads: int):
        self.fn, self.table, self.batch, self.threads = fn, table, batch, threads
        self.P, self.Y, self.status = P, Y, status  # (what the words point into, held with them)
        self.addr, self.row = table.ctypes.data, table.strides[0]

    @classmethod
    def make(cls, model: Any, sources, Y: torch.Tensor, status, params) -> "_CSteps | None":
        """For a C model on the CPU, else None (then each step is the model's call)."""
        if model.backend != "c" or Y.shape[1] == 0:
            return None
        batch = Y.shape[1]
        with torch.no_grad():
            P, _ = model._param_tensor(params or {}, torch.Size([batch]))
        P = P.contiguous()
        opts = model._solver_triple()
        words = []
        for n in (1, 2, 3):
            views, _ = callpath.input_views(model, {name: src[n - back] for name, src, back in sources})
            for (_, src, _), v in zip(sources, views):
                if v.untyped_storage().data_ptr() != src.untyped_storage().data_ptr():
                    return None  # a copy, not a row of the history: no fixed step in its address
            st = None if status is None else tuple(t[n] for t in status)
            words.append(np.asarray(pack_args(views, P, Y[n], None, st, opts), dtype=np.int64))
        step = words[1] - words[0]
        if not np.array_equal(words[2], words[1] + step):
            return None
        table = words[0][None, :] + np.arange(Y.shape[0] - 1, dtype=np.int64)[:, None] * step[None, :]
        fn = model._c_library(P).entry_point("value")
        return cls(fn, np.ascontiguousarray(table), P, Y, status, batch, torch.get_num_threads())

    def run(self, n: int) -> None:
        self.fn(self.batch, self.addr + (n - 1) * self.row, self.threads)
