"""Adaptive sub-stepping of a compiled model's call (``on_failure="substep"``): the points whose
Newton failed are re-run with the step cut into 2, 4, ... ``max_substeps`` sub-steps, and the
Jacobian follows through the sub-steps by the chain rule. Called by
:meth:`modelc.runtime.model.CompiledModel._call`."""
from __future__ import annotations

import torch

from modelc.runtime.errors import InputError
from modelc.runtime.labeled import LabeledMatrix, sub_matrix


def substep(model, X, P, Y, J, ST, derivatives, shared, overrides, old_forces=None):
    """Retry the failed points with the step cut into 2, 4, ... ``max_substeps`` sub-steps.

    Sub-step ``j`` of ``n`` moves every force linearly from its old value to its new one
    (``forces/x`` at ``a_j = j/n``, ``old_forces/x`` at ``a_{j-1}``); ``old_state/x`` is the
    previous sub-step's ``state/x``; other inputs are unchanged. The Jacobian follows by the
    chain rule: ``dX_j/dX = L_j + S dY_{j-1}/dX`` and ``dY_j/dX = J_j dX_j/dX``, with ``L_j``
    the interpolation and ``S`` the state -> old state wiring; with ``derivatives="total"`` the
    parameter columns follow ``dY_j/dP = J_j,X dX_j/dP + J_j,P`` with ``dX_j/dP = S dY_{j-1}/dP``.
    A force without an ``old_forces/`` input needs its old value from the caller (``old_forces=``)."""
    ax, ay = model.input_axis, model.output_axis
    nx = ax.size
    dt = X.dtype
    ok = ST[:, 0] > 0.5
    fail = torch.nonzero(~ok).flatten()
    substeps = torch.ones(X.shape[0], dtype=torch.int32, device=X.device)
    old_forces = old_forces or {}
    pairs = []  # (forces span, old value getter, old_forces span or None)
    for name in ax.variable_names:
        if not name.startswith("forces/"):
            continue
        old = "old_" + name
        if old in ax:
            pairs.append((ax.span(name), ax.span(old)))
        elif name in old_forces:
            pairs.append((ax.span(name), None))
        else:
            raise InputError(f"model {model.NAME}: sub-stepping needs the previous value of {name}: "
                             f"pass old_forces={{{name!r}: ...}}")
    state = [(ay.span(s), ax.span(o)) for s, o in model.STATE]
    n, tried = 2, 1
    while fail.numel() and n <= model.max_substeps:
        Xf = X[fail]
        Pf = P if shared else P[fail]
        start = Xf.clone()  # the values at a = 0
        for (a, b), old in pairs:
            if old is not None:
                start[:, a:b] = Xf[:, old[0]:old[1]]
            else:
                name = next(nm for nm in ax.variable_names if ax.span(nm) == (a, b))
                v = torch.as_tensor(old_forces[name], dtype=dt, device=X.device)
                start[:, a:b] = v.reshape(-1, b - a).expand(X.shape[0], b - a)[fail]
        Xj = Xf.clone()
        good = torch.ones(fail.numel(), dtype=torch.bool, device=X.device)
        its = torch.zeros(fail.numel(), dtype=ST.dtype, device=X.device)
        D = None  # d X_j / d X (len(fail), nx, nx)
        Yj = Jj = STj = None
        for j in range(1, n + 1):
            a1, a0 = j / n, (j - 1) / n
            Lj = torch.zeros(nx, nx, dtype=dt, device=X.device)
            keep = torch.ones(nx, dtype=torch.bool, device=X.device)
            for (a, b), old in pairs:
                Xj[:, a:b] = start[:, a:b] + a1 * (Xf[:, a:b] - start[:, a:b])
                idx = torch.arange(a, b, device=X.device)
                Lj[idx, idx] = a1
                keep[a:b] = False
                if old is not None:
                    Xj[:, old[0]:old[1]] = start[:, a:b] + a0 * (Xf[:, a:b] - start[:, a:b])
                    oidx = torch.arange(old[0], old[1], device=X.device)
                    Lj[idx, oidx] = 1 - a1
                    Lj[oidx, idx] = a0
                    Lj[oidx, oidx] = 1 - a0
                    keep[old[0]:old[1]] = False
            for (ys, xs) in state:
                keep[xs[0]:xs[1]] = False
                if j > 1:
                    Xj[:, xs[0]:xs[1]] = Yj[:, ys[0]:ys[1]]
                else:
                    idx = torch.arange(xs[0], xs[1], device=X.device)
                    Lj[idx, idx] = 1
            kidx = torch.nonzero(keep).flatten()
            Lj[kidx, kidx] = 1
            if derivatives:
                Dj = torch.zeros(fail.numel(), nx, J.shape[-1], dtype=dt, device=X.device)
                Dj[:, :, :nx] = Lj
                if j > 1:
                    for (ys, xs) in state:
                        Dj[:, xs[0]:xs[1], :] += Jj[:, ys[0]:ys[1], :]
            Yj, Jn, STj = model.evaluate(Xj.clone(), Pf, derivatives, shared=shared, overrides=overrides)
            good &= STj[:, 0] > 0.5
            its += STj[:, 1]
            if derivatives:
                Jj = torch.bmm(Jn[:, :, :nx], Dj)  # d Y_j / d X (original inputs)
                Jj[:, :, nx:] += Jn[:, :, nx:]  # and d Y_j / d P directly (variant "total")
        Y[fail[good]] = Yj[good]
        if derivatives:
            J[fail[good]] = Jj[good]
        ST[fail[good], 0] = 1.0
        ST[fail[good], 1] = its[good]
        ST[fail[good], 2] = STj[good, 2]
        substeps[fail[good]] = n
        fail = fail[~good]
        tried, n = n, n * 2
    substeps[fail] = tried  # a point that still fails: the most it was cut into (1: never retried)
    return Y, J, ST, substeps

def substep_tangent(model, X, P, Y, J, ST, shared, overrides, old_forces):
    """Sub-stepping for a tangent-variant call: the failed points (few) are re-run on their own
    with the full Jacobian, which the chain rule through the sub-steps needs, and the tangent
    rows and columns are taken from it."""
    fail = torch.nonzero(ST[:, 0] <= 0.5).flatten()
    B, k = X.shape[0], fail.numel()
    Xf, Pf = X[fail], (P if shared else P[fail])
    Yf, STf = Y[fail], ST[fail]
    # the full Jacobian, with the parameter columns when the tangent lists parameters
    variant = "total" if any(n not in model.input_axis for n in model.TANGENT[1]) else "jacobian"
    axes = model.total_axes if variant == "total" else (model.output_axis, model.input_axis)
    Jf = torch.full((k, axes[0].size, axes[1].size), float("nan"), dtype=X.dtype, device=X.device)
    olds = None
    if old_forces:  # per-point old values follow their points
        olds = {}
        for name, v in old_forces.items():
            size = model.input_axis.type_of(name).size if name in model.input_axis else 1
            v = torch.as_tensor(v, dtype=X.dtype, device=X.device).reshape(-1, size)
            olds[name] = v.expand(B, size)[fail] if v.shape[0] in (1, B) else v
    Yf, Jf, STf, sub_f = substep(model, Xf, Pf, Yf, Jf, STf, variant, shared, overrides, olds)
    full = LabeledMatrix(Jf, *axes)
    Y, J, ST = Y.clone(), J.clone(), ST.clone()
    Y[fail], ST[fail] = Yf, STf
    J[fail] = sub_matrix(full, *model.tangent_axes).tensor
    substeps = torch.ones(B, dtype=torch.int32, device=X.device)
    substeps[fail] = sub_f
    return Y, J, ST, substeps
