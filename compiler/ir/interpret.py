"""A slow, simple reference interpreter of Program IR over batches (the test oracle).

Every statement is evaluated with ``sympy.lambdify`` over NumPy arrays of the batch shape, one
scalar component at a time, in program order (a later assignment to a symbol replaces the earlier
value). ``Newton``: per-point mask; each iteration evaluates the body, the residual and the
Jacobian at every point, and updates only the points that have not converged
(||R|| <= atol, or every |R_i| <= rtol |terms of R_i| -- the
``residual_scale`` test of the backends, rtol floored at ``RTOL_FLOOR_EPS`` machine epsilons --
or, without a residual scale, ||R|| <= rtol ||R0||; 2-norms). Points that fail (iteration limit, singular or
non-finite Jacobian) get NaN unknowns (``on_failure == "substep"`` needs the step, which a Program
does not see: the interpreter treats it as ``"nan"``). ``LinearSolve``: ``numpy.linalg.solve`` per
point (NaN where the matrix is not finite or singular).

Shapes: an input or parameter of type T is an array of ``batch + T.base_shape`` (parameters may
also be plain numbers or omitted, then their default is used); ``results[name]`` has
``batch + base_shape``; ``derivatives[(out, in)]`` has ``batch + (out.size, in.size)``.
Torch tensors in give torch tensors out (same dtype); computation is in NumPy.
"""
from __future__ import annotations

import functools
import itertools
from typing import Mapping

import numpy as np
import sympy as sp

from modelc.errors import InputError
from modelc.ir import FINITE_MAX, LINE_SEARCH_C, RTOL_FLOOR_EPS, Assign, LinearSolve, Newton, Program, export_values


def interpret(program: Program, inputs: Mapping[str, object], params: Mapping[str, object] | None = None,
              *, solves: list | None = None, stop_slack: float = 0.0, stop_rows=None, stops: list | None = None):
    """Evaluate ``program``: ``(results, derivatives, status)`` dicts of arrays. ``solves``: a list
    that receives the ``(A, B)`` arrays of every :class:`LinearSolve`, in program order (what
    :func:`skeel_condition` reads). ``stop_slack`` (signed): after a converged Newton of one unknown,
    move the unknown by ``stop_slack * residual_scale / |dR/du|`` -- as far from the root as a
    stopping test with that relative tolerance allows -- to see what the stopping test can cost the
    results computed after it (the tests' float32 bounds). ``stop_rows`` (an int per batch entry):
    instead, after every converged Newton with a residual scale, move each entry's unknowns to the
    root of ``R = stop_slack * scale_k e_k`` (to first order, ``du = J^-1 e_k stop_slack scale_k``)
    for its row ``k`` (no move where ``k`` is negative or beyond the system): the same for a system
    of any size, one residual at the edge of its stopping test at a time (``stop_slack`` may then be
    one value per entry). ``stops``: a list that receives, for every Newton with a residual scale,
    ``(unknowns, J, scale)`` at its solution: the unknown symbols' names, the Jacobian ``dR/du``
    ``(batch, n, n)`` and the residual scale (the magnitudes of each residual's terms that the
    stopping test compares with, ``(batch, n)``): how far a stopping test at a given relative
    tolerance may leave the unknowns from the root is ``tol |J^-1| scale``."""
    params = dict(params or {})
    torch_out = None
    arrays = {}
    for v in program.inputs:
        if v.name not in inputs:
            raise InputError(f"program '{program.name}': missing input '{v.name}'")
        arrays[v.name] = _np(inputs[v.name])
        torch_out = torch_out or _torch_like(inputs[v.name])
    unknown = set(inputs) - {v.name for v in program.inputs}
    if unknown:
        raise InputError(f"program '{program.name}': unknown inputs {sorted(unknown)}")
    dtype = np.result_type(*[a.dtype for a in arrays.values()]) if arrays else np.float64
    pvals = {}
    for p in program.parameters:
        if p.name in params:
            pvals[p.name] = _np(params.pop(p.name))
            torch_out = torch_out or _torch_like(pvals[p.name])
        elif p.default is not None:
            pvals[p.name] = np.asarray(p.default, dtype=dtype).reshape(p.type.base_shape)
        else:
            raise InputError(f"program '{program.name}': parameter '{p.name}' has no default and no value")
    if params:
        raise InputError(f"program '{program.name}': unknown parameters {sorted(params)}")

    batch = np.broadcast_shapes(*[a.shape[:a.ndim - v.type.base_dim] for v in program.inputs
                                  for a in [arrays[v.name]]],
                                *[a.shape[:a.ndim - p.type.base_dim] for p in program.parameters
                                  for a in [pvals[p.name]]])
    env: dict[sp.Symbol, np.ndarray] = {}
    for v in program.inputs:
        _bind(env, v.symbols, arrays[v.name], v.type.base_dim, batch, dtype)
    for p in program.parameters:
        _bind(env, p.symbols, pvals[p.name], p.type.base_dim, batch, dtype)

    for st in program.body:
        _run(st, env, batch, dtype)
        if stop_rows is not None and isinstance(st, Newton) and st.residual_scale:
            _slack_rows(st, env, batch, dtype, stop_slack, np.asarray(stop_rows))
        elif np.any(stop_slack) and isinstance(st, Newton) and len(st.unknowns) == 1 and st.residual_scale:
            _slack(st, env, batch, dtype, stop_slack)
        if isinstance(st, Newton):  # after any slack: at the unknowns the later statements read
            _exports(st, env, batch, dtype)
        if stops is not None and isinstance(st, Newton) and st.residual_scale:
            stops.append(_stop(st, env, batch, dtype))
        if solves is not None and isinstance(st, LinearSolve):
            solves.append((_matrix(st.A, env, batch, dtype), _matrix(st.B, env, batch, dtype)))

    results = {name: _stack([_eval(e, env, batch, dtype) for e in comps], batch,
                            program_var(program, name).type.base_shape)
               for name, comps in program.results.items()}
    derivatives = {}
    for (o, i), block in program.derivatives.items():
        rows = [np.stack([_eval(e, env, batch, dtype) for e in row], axis=-1) for row in block]
        derivatives[(o, i)] = np.stack(rows, axis=-2)
    status = {k: env[s] for k, s in program.status.items()}
    if torch_out is not None:
        conv = torch_out
        results = {k: conv(v) for k, v in results.items()}
        derivatives = {k: conv(v) for k, v in derivatives.items()}
        status = {k: conv(v) for k, v in status.items()}
    return results, derivatives, status


def skeel_condition(A: np.ndarray) -> np.ndarray:
    """Skeel's condition number ``|| |A^-1| |A| ||_inf`` per point (``A``: ``(..., n, n)``).

    It bounds how far componentwise relative errors of size ``e`` in ``A`` and the right-hand side
    (round-off in computing the entries, and a backward-stable elimination) move the solution:
    ``|dX| <= e |A^-1| (|A| |X| + |B|) <= 2 e cond_S(A) |X|`` to first order (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2nd ed., Thm. 7.4). Unlike the 2-norm condition number it
    does not change when residual rows or unknowns are rescaled (MPa rows beside strain rows), so it
    measures the formulation, not its units. Singular or non-finite points give ``inf``."""
    out = np.full(A.shape[:-2], np.inf)
    good = np.all(np.isfinite(A), axis=(-2, -1))
    for idx in zip(*np.nonzero(good)) if A.ndim > 2 else ([()] if good else []):
        try:
            inv = np.linalg.inv(A[idx])
        except np.linalg.LinAlgError:
            continue
        out[idx] = np.max(np.sum(np.abs(inv) @ np.abs(A[idx]), axis=-1))
    return out


def program_var(program: Program, name: str):
    for v in program.outputs + program.inputs:
        if v.name == name:
            return v
    raise KeyError(name)


# --------------------------------------------------------------------------------------------------
def _run(st, env, batch, dtype) -> None:
    if isinstance(st, Assign):
        env[st.target] = _eval(st.value, env, batch, dtype)
    elif isinstance(st, LinearSolve):
        A = _matrix(st.A, env, batch, dtype)
        B = _matrix(st.B, env, batch, dtype)
        X = _solve(A, B)
        for i, row in enumerate(st.targets):
            for j, t in enumerate(row):
                env[t] = X[..., i, j]
    elif isinstance(st, Newton):
        _newton(st, env, batch, dtype)
    else:  # pragma: no cover
        raise TypeError(f"unknown statement {st!r}")


def _newton(st: Newton, env, batch, dtype) -> None:
    o = st.solver
    u = [_eval(g, env, batch, dtype).copy() for g in st.guess]
    converged = np.zeros(batch, dtype=bool)
    failed = np.zeros(batch, dtype=bool)
    iterations = np.zeros(batch, dtype=np.int64)
    norm0 = None
    # backtracking line search (o.line_search halvings at most): the point the step starts from, its
    # direction, the fraction of it tried and the residual norm there (inf: the first point is kept)
    u_prev, d_prev = list(u), [np.zeros_like(x) for x in u]
    alpha, norm_prev = np.ones(batch, dtype=dtype), np.full(batch, np.inf, dtype=dtype)
    for it in itertools.count():
        local = dict(env)
        local.update(zip(st.unknowns, u))
        for a in st.body:
            local[a.target] = _eval(a.value, local, batch, dtype)
        R = np.stack([_eval(r, local, batch, dtype) for r in st.residual], axis=-1)
        with np.errstate(over="ignore", invalid="ignore"):
            norm = np.sqrt(np.sum(R * R, axis=-1))
        if norm0 is None:
            norm0 = norm
        if st.residual_scale:  # the backends' test: every residual zero to rtol of its own terms
            rtol = max(o.rtol, RTOL_FLOOR_EPS * float(np.finfo(dtype).eps))
            scale = np.stack([np.abs(_eval(r, local, batch, dtype)) for r in st.residual_scale], axis=-1)
            small = np.all(np.abs(R) <= rtol * scale, axis=-1)
        else:
            small = (norm <= o.rtol * norm0) & (norm0 < FINITE_MAX)  # as the backends
        now = ~failed & ((norm <= o.atol) | small)
        converged |= now
        final_norm = norm if it == 0 else np.where(converged & ~now, final_norm, norm)
        back = np.zeros(batch, dtype=bool)
        if o.line_search:  # too little decrease (or a residual that is not finite): halve the step
            with np.errstate(over="ignore", invalid="ignore"):
                enough = norm * norm <= (1 - 2 * LINE_SEARCH_C * alpha) * norm_prev * norm_prev
            back = ~converged & ~failed & ~enough & (alpha > 2.0 ** -o.line_search)
        failed |= ~np.isfinite(norm) & ~back
        # a point stops after max_iter steps; the trials of a halved step do not count
        active = ~converged & ~failed & (back | (iterations < o.max_iter))
        if not active.any():
            break
        J = _matrix(st.jacobian, local, batch, dtype)
        du = _solve(J, -R[..., None])[..., 0]
        if st.curvature:  # Halley (see modelc.passes.expand_solve.halley_step)
            r, j = R[..., 0], J[..., 0, 0]
            q = r * _eval(st.curvature[0], local, batch, dtype)
            with np.errstate(all="ignore"):
                halley = (-2 * r * j) / (2 * (j * j) - q)
            du = np.where(np.abs(q) <= j * j, halley, du[..., 0])[..., None].astype(dtype)
        # plain Newton takes a step that is not finite, as the backends do, and stops at the
        # residual after it; a line search stops now (halving it gives no finite step)
        if o.line_search:  # from the last accepted point: its step halved, or the new full step
            bad = active & ~back & ~np.all(np.isfinite(du), axis=-1)
            failed |= bad
            active &= ~bad
            u_prev = [np.where(back, up, x) for up, x in zip(u_prev, u)]
            d_prev = [np.where(back, dp, du[..., k]) for k, dp in enumerate(d_prev)]
            # a point that stops keeps 0: its residual never decreases, and it must not halve again
            alpha = np.where(back, alpha * dtype.type(0.5), np.where(active, dtype.type(1), dtype.type(0)))
            alpha = alpha.astype(dtype)
            norm_prev = np.where(back, norm_prev, norm).astype(dtype)
            du = np.stack([alpha * dp for dp in d_prev], axis=-1)
            u = list(u_prev)
        for k in range(len(u)):
            u[k] = np.where(active, u[k] + du[..., k], u[k])
        iterations += active & ~back
    ok = converged
    for k, s in enumerate(st.unknowns):
        env[s] = np.where(ok, u[k], np.nan).astype(dtype)
    env[st.converged] = ok
    env[st.iterations] = iterations
    env[st.residual_norm] = final_norm.astype(dtype)


def _exports(st: Newton, env, batch, dtype) -> None:
    """``st.exports`` evaluated at the unknowns as the solve left them in ``env`` (NaN where it did not
    converge, so whatever reads an export is NaN there too)."""
    if not st.exports:
        return
    for x in export_values(st):
        env[x.target] = _eval(x.value, env, batch, dtype)


def _slack(st: Newton, env, batch, dtype, slack: float) -> None:
    """Move a scalar Newton's solution by ``slack * scale / |dR/du|`` (see :func:`interpret`)."""
    local = dict(env)
    for a in st.body:
        local[a.target] = _eval(a.value, local, batch, dtype)
    J = _eval(st.jacobian[0][0], local, batch, dtype)
    scale = np.abs(_eval(st.residual_scale[0], local, batch, dtype))
    u = st.unknowns[0]
    with np.errstate(all="ignore"):
        du = np.where(J != 0, slack * scale / np.abs(J), 0.0)
    env[u] = env[u] + du


def _slack_rows(st: Newton, env, batch, dtype, slack, rows: np.ndarray) -> None:
    """Move each entry's unknowns by ``J^-1 e_k slack scale_k``, ``k = rows[entry]`` (see :func:`interpret`)."""
    _, J, scale = _stop(st, env, batch, dtype)
    n = J.shape[-1]
    rows = np.broadcast_to(rows, scale.shape[:-1])
    slack = np.broadcast_to(np.asarray(slack, dtype=scale.dtype), rows.shape)
    rhs = np.zeros(scale.shape, dtype=scale.dtype)
    idx = np.nonzero((rows >= 0) & (rows < n))
    rhs[idx + (rows[idx],)] = slack[idx] * scale[idx + (rows[idx],)]
    du = _solve(J, rhs[..., None])[..., 0]
    du = np.where(np.isfinite(du), du, 0.0)
    for j, u in enumerate(st.unknowns):
        env[u] = env[u] + du[..., j]


def _stop(st: Newton, env, batch, dtype) -> tuple:
    """``(unknown names, dR/du, residual scale)`` of a solved Newton (see :func:`interpret`)."""
    local = dict(env)
    for a in st.body:
        local[a.target] = _eval(a.value, local, batch, dtype)
    scale = np.stack([np.abs(_eval(r, local, batch, dtype)) for r in st.residual_scale], axis=-1)
    return tuple(u.name for u in st.unknowns), _matrix(st.jacobian, local, batch, dtype), scale


def _solve(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    X = np.full(A.shape[:-1] + B.shape[-1:], np.nan, dtype=A.dtype)
    good = np.all(np.isfinite(A), axis=(-2, -1)) & np.all(np.isfinite(B), axis=(-2, -1))
    for idx in zip(*np.nonzero(good)) if A.ndim > 2 else ([()] if good else []):
        try:
            X[idx] = np.linalg.solve(A[idx], B[idx])
        except np.linalg.LinAlgError:
            pass
    return X


def _matrix(rows, env, batch, dtype) -> np.ndarray:
    return np.stack([np.stack([_eval(e, env, batch, dtype) for e in row], axis=-1) for row in rows], axis=-2)


def _eval(expr, env, batch, dtype) -> np.ndarray:
    expr = sp.sympify(expr)
    syms = tuple(sorted(expr.free_symbols, key=lambda s: s.name))
    missing = [s.name for s in syms if s not in env]
    if missing:
        raise KeyError(f"interpret: {missing} read before assignment in {expr}")
    f = _lambdify(syms, expr)
    with np.errstate(all="ignore"):
        val = f(*[env[s] for s in syms])
    val = np.asarray(val)
    if val.dtype == bool:
        return np.broadcast_to(val, batch).copy()
    return np.broadcast_to(val.astype(dtype, copy=False), batch).copy()


@functools.lru_cache(maxsize=4096)
def _lambdify(syms, expr):
    return sp.lambdify(syms, expr, modules=[_namespace(), "numpy"], dummify=True)


@functools.lru_cache(maxsize=1)
def _namespace() -> dict:
    try:
        from modelc.functions import numpy_namespace
    except ImportError:  # pragma: no cover - the custom functions module is optional here
        return {}
    return numpy_namespace()


def _bind(env, symbols, arr, base_dim, batch, dtype) -> None:
    flat = arr.reshape(arr.shape[:arr.ndim - base_dim] + (-1,)) if base_dim else arr[..., None]
    for k, s in enumerate(symbols):
        env[s] = np.broadcast_to(flat[..., k], batch).astype(dtype)


def _stack(comps, batch, base_shape) -> np.ndarray:
    a = np.stack(comps, axis=-1)
    return a.reshape(tuple(batch) + tuple(base_shape))


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.result_type(np.asarray(x).dtype, np.float32)
                      if np.asarray(x).dtype.kind in "iub" else None)


def _torch_like(x):
    if not hasattr(x, "detach"):
        return None
    import torch

    return lambda a: torch.as_tensor(np.ascontiguousarray(a), device=x.device)
