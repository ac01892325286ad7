"""The differentiable driver's history as one autograd node: a forward that records the outputs and
the per-step derivatives, and a backward that runs the adjoint recursion over the steps in a loop of
a few tensor operations each.

:func:`modelc.runtime.history_grad.simulate` makes one autograd node per step (each step a
differentiable model call, with ``torch.where`` masks, stacks and views around it): some hundreds of
microseconds a step of Python and graph bookkeeping at a few points, for what is, when every point
converges, a fixed recursion. :func:`run` does that recursion directly:

- forward (no graph): each step is one model call asking for the same derivatives the per-step
  node asks for (``"total"`` when a parameter requires grad, else the inputs' Jacobian: so the same
  variant and the same numbers); its outputs go into one buffer ``Y (steps, batch, ny)`` and the
  columns of its Jacobian the backward needs (by the old state, and by the parameters that require
  grad) into ``J (steps, batch, ny, k)``;
- backward, with ``lambda`` the adjoint of the outputs of step ``n``::

      lambda_n    += dL/dy_n
      g_p         += lambda_n^T J_n[:, :, parameters]        (per point; summed over a shared one)
      lambda_{n-1} = lambda_n^T J_n[:, :, old state]         (into the outputs the old state is)

  and the initial state's gradient is ``lambda_0 + dL/dy_0`` on its columns.

It serves runs with every point converging at every step and parameters that are numbers, tensors
or TypedTensors over one named dim (a population of samples: batch (points, samples)). With
``checkpoint=`` it keeps no Jacobian and the backward computes each step's again from the recorded
outputs (``recompute``: memory the outputs' only). With ``sensitivities=`` (nothing requiring grad)
it makes no node: d outputs / d parameter are carried forward from the recorded Jacobian columns.
Anything else (and a run in which a point fails, found in the forward: then the per-step path runs
it from the start) is :func:`simulate`'s per-step path, whose numbers these are (tested: values and
sensitivities bit for bit, gradients to round-off, and against central differences in
tests/runtime/test_history_grad.py). On the C backend the forward's steps 2 .. run the entry point
directly on precomputed arguments (:class:`_Direct`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from modelc.runtime import autograd
from modelc.runtime.driver import history_forces


def applies(sensitivities: Any) -> bool:
    """Whether :func:`run` may serve a :func:`simulate` call (before the forward shows whether
    every point converges, what batch the parameters bring and whether anything requires grad)."""
    return torch.is_grad_enabled() or bool(sensitivities)


def run(model, ins, outs, strain: torch.Tensor, time: torch.Tensor, state: dict[str, torch.Tensor],
        params: dict[str, Any], recompute: bool = False,
        sensitivities: tuple[str, ...] = (), temperature: torch.Tensor | None = None
        ) -> dict[str, torch.Tensor] | None:
    """:func:`simulate`'s result for these arguments (as its per-step path computes it), or None
    when nothing requires grad, a point fails at some step, or parameters over named dims bring
    more than one named dim after the points (the caller then takes that path). ``recompute``
    (``simulate(..., checkpoint=k)``): keep no Jacobian; the backward computes each step's again
    from the recorded outputs (one more forward, memory the outputs' only). ``sensitivities``
    (scalar parameter names, nothing requiring grad): no autograd node; d outputs / d parameter at
    every step, carried forward from the recorded Jacobian columns (:func:`_forward_sensitivities`)."""
    from modelc.runtime.tensors import TypedTensor

    named = {k: v for k, v in params.items() if isinstance(v, TypedTensor)}
    leaves = autograd._leaves(model, {}, params) if torch.is_grad_enabled() else []  # (require grad)
    leaves += [(k, v.data) for k, v in named.items() if v.data.requires_grad and torch.is_grad_enabled()]
    starts = [(n, v) for n, v in state.items() if v.requires_grad and torch.is_grad_enabled()]
    if sensitivities:
        if leaves or starts or named:  # (both a graph and sensitivities: the per-step path)
            return None
        leaves = [(name, None) for name in sensitivities]  # the columns to record
        recompute = False  # (their Jacobian is what is carried forward)
    elif not leaves and not starts:
        return None
    steps, points = strain.shape[0], strain.shape[1]
    if steps < 2 or points == 0:  # (histories are checked to have both; kept for direct callers)
        return None
    axis = model.output_axis
    ny = axis.size
    derivatives = "total" if leaves else True  # (what the per-step node asks for)
    olds = [n for n in ins if n.startswith("old_state/")]
    Y = J = cols = plain = bs = None
    names = ("points",) if named else None

    def value(name: str, v: torch.Tensor):
        return TypedTensor(v, model.input_axis.type_of(name), batch_names=names if name in olds
                           else ("points",)) if named else v

    def call(n: int):
        """The model's call of step ``n``, its old state read from the recorded row ``n - 1``."""
        inputs = history_forces(strain, time, temperature, n)
        for name in olds:
            out = "state/" + name[len("old_state/"):]
            inputs[name] = state[out].detach() if n == 1 else _row(Y[n - 1], axis, out, outs)
        if Y is None or not named:
            return model({name: value(name, inputs[name]) for name in ins}, derivatives, **params)
        # the batch is known: plain tensors aligned as the named call aligned them
        return model({name: v if name in olds else v.reshape(points, 1, *v.shape[1:]).expand(*bs, *v.shape[1:])
                      for name, v in inputs.items() if name in ins}, derivatives, **plain)

    def columns(r) -> torch.Tensor:
        return r.jacobian.tensor.reshape(-1, ny, r.jacobian.tensor.shape[-1]).index_select(2, cols)

    direct = None
    with torch.no_grad():
        for n in range(1, steps):
            if direct is not None:  # the C entry point on precomputed words (history_buffers._CSteps)
                if not direct.step(n):
                    return None
                continue
            r = call(n)
            y = r.outputs.tensor
            ok = torch.isfinite(y).all()
            if r.status is not None:
                ok &= r.status.converged.all()
            if not bool(ok):
                return None
            if Y is None:  # the batch (points, and a named dim the parameters bring), the columns
                bs = r.outputs.batch_shape
                if named and (r.batch_names is None or len(bs) != 2 or r.batch_names[0] != "points"
                              or any(v.batch_names != r.batch_names[1:] for v in named.values())):
                    return None  # (several named dims, or a parameter over more than one)
                names = r.batch_names
                plain = {k: v.data if k in named else v for k, v in params.items()}  # (S,): broadcast over points
                Y = torch.empty((steps, *bs, ny), dtype=model.dtype, device=model.device)
                for name in outs:  # row 0: the initial state, broadcast over a named dim
                    a, b = axis.span(name)
                    v = state[name].detach().reshape(points, *([1] * (len(bs) - 1)), b - a)
                    Y[0, ..., a:b] = v.expand(*bs, b - a)
                col = r.jacobian.col_axis
                spans = [col.span(name) for name in olds] + [col.span(name) for name, _ in leaves]
                cols = torch.cat([torch.arange(a, b) for a, b in spans]).to(model.device)
                if not recompute:
                    J = torch.empty((steps, y.numel() // ny, ny, len(cols)), dtype=model.dtype, device=model.device)
            Y[n] = y
            if J is not None:
                J[n] = columns(r)
            if n == 1 and steps > 4:
                direct = _Direct.make(model, ins, outs, strain, time, temperature, Y, J, cols, derivatives,
                                      plain if named else params, tuple(bs), recompute)

    def jacobian_at(n: int) -> torch.Tensor:
        """Step ``n``'s Jacobian columns again, from the recorded outputs (``recompute``)."""
        with torch.no_grad():
            if direct is not None and n >= 2:
                return direct.recompute(n)
            return columns(call(n))

    if sensitivities:
        return _forward_sensitivities(model, outs, olds, sensitivities, Y, J)
    layout = _Layout(model, outs, olds, leaves, starts, tuple(Y.shape[1:-1]), set(named))
    layout.Y, layout.J, layout.jacobian_at = Y, J, jacobian_at
    Yg = _History.apply(layout, *[v for _, v in leaves], *[v for _, v in starts])
    result = {}
    for name, shape in outs.items():
        a, b = axis.span(name)
        result[name] = Yg[..., a:b].reshape(*Yg.shape[:-1], *shape)
    result["converged"] = torch.ones(Yg.shape[:-1], dtype=torch.bool, device=model.device)
    return result


class _Direct:
    """Steps 2 .. of :func:`run` on the C backend: the variant's entry point on a row of argument
    words (:class:`~modelc.runtime.history_buffers._CSteps`) over the inputs as contiguous rows of
    the history (the strain and time tiled over a named dim once), the old state read from the
    previous row of ``Y``, the outputs written into its row, the Jacobian into a scratch block whose
    needed columns are copied into ``J`` (or, with ``recompute``, computed again in the backward by
    a second table writing into scratch outputs), the status into scratch rows checked with numpy.
    Same kernel, same values: the numbers of the model's call."""

    def __init__(self, forward, again, Y2, J, cols, Jrow, status, held):
        self.forward, self.again, self.Y2, self.J, self.cols, self.Jrow = forward, again, Y2, J, cols, Jrow
        self.status, self.held = status, held  # (held: what the words point into)
        self.Yh = Y2.numpy()
        self.conv = None if status is None else status[0].numpy()

    @classmethod
    def make(cls, model, ins, outs, strain, time, temperature, Y, J, cols, derivatives, params, bs,
             recompute: bool) -> "_Direct | None":
        from modelc.runtime.history_buffers import _CSteps

        if model.backend != "c" or model.device.type != "cpu":
            return None
        request = model._derivative_request(derivatives)
        steps, ny = Y.shape[0], Y.shape[-1]
        B = Y[0].numel() // ny
        Y2 = Y.reshape(steps, B, ny)
        if len(bs) > 1:  # the forces tiled over the named dim, as rows of B points
            def tile(v):
                return v.reshape(steps, bs[0], *([1] * (len(bs) - 1)), *v.shape[2:]).expand(
                    steps, *bs, *v.shape[2:]).reshape(steps, B, *v.shape[2:]).contiguous()
            strain, time = tile(strain), tile(time)
            temperature = None if temperature is None else tile(temperature)
        axis = model.output_axis
        olds = {name: axis.span("state/" + name[len("old_state/"):]) for name in ins if name.startswith("old_state/")}

        def inputs_at(n: int) -> dict[str, torch.Tensor]:
            given = history_forces(strain, time, temperature, n)
            for name, (a, b) in olds.items():
                given[name] = Y2[n - 1, :, a:b].reshape(B, *outs["state/" + name[len("old_state/"):]])
            return {name: given[name] for name in ins}

        Jrow = torch.empty((B, *model._jacobian_shape(request[0])), dtype=model.dtype)
        status = None if not model.IMPLICIT else (torch.empty(B, dtype=torch.bool), torch.empty(B, dtype=torch.int32),
                                                  torch.empty(B, dtype=model.dtype))
        forward = _CSteps.make(model, steps, inputs_at, lambda n: (Y2[n], Jrow, status), request[0], params, bs)
        again = None
        if forward is not None and recompute:
            Yr = torch.empty((B, ny), dtype=model.dtype)
            again = _CSteps.make(model, steps, inputs_at, lambda n: (Yr, Jrow, status), request[0], params, bs)
            if again is None:
                return None
        if forward is None:
            return None
        return cls(forward, again, Y2, J, cols, Jrow, status, (strain, time, temperature))

    def step(self, n: int) -> bool:
        """Run step ``n``; whether every point converged with finite outputs (its row of ``J`` then filled)."""
        self.forward.run(n)
        if not (np.isfinite(self.Yh[n]).all() and (self.conv is None or self.conv.all())):
            return False
        if self.J is not None:
            torch.index_select(self.Jrow, 2, self.cols, out=self.J[n])
        return True

    def recompute(self, n: int) -> torch.Tensor:
        """Step ``n``'s Jacobian columns again (its outputs into scratch: the recorded row stays)."""
        self.again.run(n)
        return self.Jrow.index_select(2, self.cols)


def _forward_sensitivities(model, outs, olds, names, Y, J) -> dict[str, torch.Tensor]:
    """The outputs and ``d(<output>)/d(<parameter>)`` (steps, batch, *base) of a recorded history:
    ``D_n = J_n[:, :, parameters] + sum over old state x of J_n[:, :, old x] D_{n-1}[x's rows]``,
    from ``D_0 = 0``, the same products in the same order as the per-step path's
    (``history_grad._Sensitivities``): the same numbers."""
    axis = model.output_axis
    steps, B, ny, k = J.shape
    npar = len(names)
    at, a = {}, 0  # each old-state input's columns in J's selection
    for name in olds:
        size = axis.span("state/" + name[len("old_state/"):])
        at[name] = (a, a + size[1] - size[0])
        a += size[1] - size[0]
    order = [(o, "old_" + o) for o in outs if "old_" + o in at]  # (the per-step path's order)
    D = torch.zeros((B, ny, npar), dtype=J.dtype, device=J.device)
    rows = [D]
    for n in range(1, steps):
        Dn = J[n][:, :, k - npar:].clone()
        for o, old in order:
            c0, c1 = at[old]
            ya, yb = axis.span(o)
            Dn += torch.bmm(J[n][:, :, c0:c1], D[:, ya:yb, :])
        D = Dn
        rows.append(D)
    S = torch.stack(rows)
    result = {}
    for o, base in outs.items():
        a, b = axis.span(o)
        result[o] = Y[..., a:b].reshape(*Y.shape[:-1], *base)
        for i, p in enumerate(names):
            result[f"d({o})/d({p})"] = S[:, :, a:b, i].reshape(steps, B, *base)
    result["converged"] = torch.ones(Y.shape[:-1], dtype=torch.bool, device=Y.device)
    return result


def _row(y: torch.Tensor, axis, name: str, outs) -> torch.Tensor:
    """Output ``name``'s values in one row ``y (*batch, ny)`` of the history, shape (*batch, *base)."""
    a, b = axis.span(name)
    return y[..., a:b].reshape(*y.shape[:-1], *outs[name])


class _Layout:
    """Where the backward finds and puts things: the old-state columns of ``J`` and the output
    columns they are the old values of, the leaves' columns and shapes, the batch ``bs`` (points,
    then the named dim parameters over ``named`` bring, if any)."""

    def __init__(self, model, outs, olds, leaves, starts, bs, named):
        axis = model.output_axis
        self.model, self.bs, self.outs = model, bs, outs
        into, k = [], 0
        for name in olds:
            a, b = axis.span("state/" + name[len("old_state/"):])
            into += list(range(a, b))
            k += b - a
        self.n_old = k
        self.into = torch.tensor(into, dtype=torch.long, device=model.device)
        self.params = []  # (name, first column in J's selection, last + 1, leaf shape, over a named dim)
        for name, v in leaves:
            size = 1
            for s in autograd._base_shape(model, name):
                size *= s
            self.params.append((name, k, k + size, v.shape, name in named))
            k += size
        self.starts = [(name, *axis.span(name), v.shape) for name, v in starts]


class _History(torch.autograd.Function):
    """The history's outputs ``Y (steps, batch, ny)`` as a function of the parameters and initial
    state that require grad; backward: the adjoint recursion (module doc)."""

    @staticmethod
    def forward(ctx, layout: _Layout, *leaves):
        ctx.layout = layout
        ctx.save_for_backward(layout.J, *leaves)  # (saved as tensors are: hooks see J, as the per-step J)
        ctx.jacobian_at = layout.jacobian_at  # (when J is None: each step's computed again)
        Y, layout.J, layout.Y, layout.jacobian_at = layout.Y, None, None, None
        return Y

    @staticmethod
    def backward(ctx, gY):
        L = ctx.layout
        n_leaves = len(L.params) + len(L.starts)
        if gY is None:
            return (None,) * (1 + n_leaves)
        J, *leaves = ctx.saved_tensors
        at = (lambda n: J[n]) if J is not None else ctx.jacobian_at
        J1 = at(1)
        steps, B, ny = gY.shape[0], J1.shape[0], J1.shape[1]
        gY = gY.to(J1.dtype).reshape(steps, B, ny)
        lam = torch.zeros((B, ny), dtype=J1.dtype, device=J1.device)
        gp = torch.zeros((B, J1.shape[-1] - L.n_old), dtype=J1.dtype, device=J1.device)
        for n in range(steps - 1, 0, -1):
            lam = lam + gY[n]
            v = (lam.unsqueeze(-1) * (J1 if n == 1 else at(n))).sum(dim=1)  # (B, k): lambda_n^T J_n
            gp += v[:, L.n_old:]
            lam = torch.zeros_like(lam).index_copy_(1, L.into, v[:, :L.n_old])
        lam = lam + gY[0]
        grads = []
        model = L.model
        for name, a, b, shape, named in L.params:
            g = gp[:, a - L.n_old:b - L.n_old].reshape(*L.bs, *autograd._base_shape(model, name))
            if named:  # (samples, *base): summed over the points
                g = g.sum(dim=0)
            grads.append(g if tuple(g.shape) == tuple(shape) else g.sum_to_size(shape))
        for name, a, b, shape in L.starts:
            g = lam[:, a:b].reshape(*L.bs, *L.outs[name])
            if len(L.bs) > 1:  # the initial state is per point: summed over a named dim
                g = g.sum(dim=tuple(range(1, len(L.bs))))
            grads.append(g if tuple(g.shape) == tuple(shape) else g.sum_to_size(shape))
        if torch.is_grad_enabled():  # create_graph=True: no second derivatives through J
            grads = [autograd._FirstOrderOnly.apply(g, model.NAME, *leaves) for g in grads]
        return (None, *grads)
