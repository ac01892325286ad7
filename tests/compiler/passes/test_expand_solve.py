"""The unrolled linear solve (modelc.passes.expand_solve) on its own: its assignments are evaluated with
NumPy (SymPy lambdify, one statement at a time) on a batch of fresh random systems and compared with
numpy.linalg.solve. Covers the pivoting contract of the module docstring: static structural ordering
(zero structural diagonal), per-point partial pivoting where a pivot is not anchored (tiny dynamic
pivot), the guard on static pivots lost to cancellation, and every mode agreeing on benign systems."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from modelc.passes.expand_solve import GUARD, anchored, expand_solve, factor, max_of, structural_matching, substitute
from modelc.errors import ModelcError

MODES = ("auto", "partial", "none")


def _run(assigns, env: dict) -> dict:
    """Evaluate the assignments in order on a batch (every value a (batch,) array)."""
    env = dict(env)
    batch = len(next(iter(env.values())))
    for a in assigns:
        syms = sorted(a.value.free_symbols, key=lambda s: s.name)
        f = sp.lambdify(syms, a.value, modules="numpy")
        with np.errstate(all="ignore"):
            v = f(*[env[s] for s in syms])
        env[a.target] = np.broadcast_to(np.asarray(v), (batch,))
    return env


BATCH = 16


def _system(pattern: np.ndarray, m: int, tag: str):
    """Symbolic A (entries a_ij where pattern is True, else 0), B (dense), targets."""
    n = len(pattern)
    A = [[sp.Symbol(f"{tag}a{i}_{j}", real=True) if pattern[i][j] else sp.S.Zero for j in range(n)]
         for i in range(n)]
    B = [[sp.Symbol(f"{tag}b{i}_{c}", real=True) for c in range(m)] for i in range(n)]
    X = [[sp.Symbol(f"{tag}x{i}_{c}", real=True) for c in range(m)] for i in range(n)]
    return A, B, X


def _solve(A, B, X, Aval: np.ndarray, Bval: np.ndarray, mode: str) -> np.ndarray:
    n, m = len(A), len(B[0])
    env = {}
    for i in range(n):
        for j in range(n):
            if isinstance(A[i][j], sp.Symbol):
                env[A[i][j]] = Aval[:, i, j]
        for c in range(m):
            env[B[i][c]] = Bval[:, i, c]
    env = _run(expand_solve(A, B, X, "t", pivoting=mode), env)
    return np.stack([np.stack([env[X[i][c]] for c in range(m)], -1) for i in range(n)], 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n,m", [(1, 1), (2, 3), (4, 1), (5, 3)])
def test_all_modes_match_numpy_on_random_sparse_systems(mode, n, m):
    rng = np.random.default_rng(100 * n + m)
    pattern = rng.random((n, n)) < 0.6
    perm = rng.permutation(n)
    pattern[np.arange(n), perm] = True  # structurally nonsingular, diagonal often structurally zero
    A, B, X = _system(pattern, m, "r")
    Aval = rng.standard_normal((BATCH, n, n)) * pattern
    Aval[:, np.arange(n), perm] += 3.0  # well conditioned whatever the ordering
    Bval = rng.standard_normal((BATCH, n, m))
    x = _solve(A, B, X, Aval, Bval, mode)
    ref = np.linalg.solve(Aval, Bval)
    np.testing.assert_allclose(x, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_one_factorization_serves_several_right_hand_sides(mode):
    """factor() once, substitute() twice (what a module prints for the tangent and Jacobian
    variants of one implicit model): each set of right-hand sides is solved as numpy solves it and
    with exactly the numbers expand_solve gives for it alone (the same operations in the same order)."""
    rng = np.random.default_rng(7)
    n = 6
    pattern = rng.random((n, n)) < 0.5
    perm = rng.permutation(n)
    pattern[np.arange(n), perm] = True
    A, B1, X1 = _system(pattern, 2, "f")
    _, B2, X2 = _system(pattern, 3, "g")
    Aval = rng.standard_normal((BATCH, n, n)) * pattern
    Aval[:, np.arange(n), perm] += 3.0
    B1val, B2val = rng.standard_normal((BATCH, n, 2)), rng.standard_normal((BATCH, n, 3))
    env = {A[i][j]: Aval[:, i, j] for i in range(n) for j in range(n) if isinstance(A[i][j], sp.Symbol)}
    env.update({B1[i][c]: B1val[:, i, c] for i in range(n) for c in range(2)})
    env.update({B2[i][c]: B2val[:, i, c] for i in range(n) for c in range(3)})
    fa, F = factor(A, "lu", pivoting=mode)
    assigns = fa + substitute(F, B1, X1, "s1") + substitute(F, B2, X2, "s2")
    assert len({a.target for a in assigns}) == len(assigns)  # every value assigned once
    out = _run(assigns, env)
    for Bs, Xs, Bv, m in ((B1, X1, B1val, 2), (B2, X2, B2val, 3)):
        x = np.stack([np.stack([out[Xs[i][c]] for c in range(m)], -1) for i in range(n)], 1)
        np.testing.assert_allclose(x, np.linalg.solve(Aval, Bv), rtol=1e-10, atol=1e-10)
        alone = _solve(A, Bs, Xs, Aval, Bv, mode)
        assert np.array_equal(x, alone)
    # the elimination is in the factorization only: substituting prints no pivot or multiplier
    subst = substitute(F, B2, X2, "s3")
    assert not any(".inv[" in a.target.name or ".l[" in a.target.name for a in subst)


def test_zero_structural_diagonal_is_fixed_by_the_static_ordering():
    pattern = np.array([[0, 1, 1], [1, 0, 0], [0, 1, 1]], dtype=bool)
    assert structural_matching(pattern.tolist()) is not None
    A, B, X = _system(pattern, 2, "z")
    rng = np.random.default_rng(1)
    Aval = rng.standard_normal((BATCH, 3, 3)) * pattern
    Bval = rng.standard_normal((BATCH, 3, 2))
    ref = np.linalg.solve(Aval, Bval)
    for mode in MODES:  # even without any dynamic pivoting
        np.testing.assert_allclose(_solve(A, B, X, Aval, Bval, mode), ref, rtol=1e-9, atol=1e-9)


def _eps_system(anchor: bool):
    e = sp.Symbol("e", real=True)
    b0, b1 = sp.symbols("b0 b1", real=True)
    x = sp.symbols("x0 x1", real=True)
    a00 = 1 + e if anchor else e
    return e, [[a00, sp.S.One], [sp.S.One, sp.S.One]], [[b0], [b1]], [[x[0]], [x[1]]], (b0, b1)


def _solve_eps(anchor: bool, evals: np.ndarray, mode: str):
    e, A, B, X, (b0, b1) = _eps_system(anchor)
    rng = np.random.default_rng(7)
    bv = rng.standard_normal((2, len(evals)))
    env = _run(expand_solve(A, B, X, "p", pivoting=mode), {e: evals, b0: bv[0], b1: bv[1]})
    x = np.stack([env[X[0][0]], env[X[1][0]]], -1)
    a00 = (1 + evals) if anchor else evals
    M = np.zeros((len(evals), 2, 2))
    M[:, 0, 0], M[:, 0, 1], M[:, 1, 0], M[:, 1, 1] = a00, 1, 1, 1
    return x, np.linalg.solve(M, bv.T[..., None])[..., 0]


def test_tiny_dynamic_pivot_is_pivoted_per_point():
    evals = np.array([1e-30, -1e-20, 1e-9, 0.5, 2.0, 0.0, 1e-300, -3.0])
    for mode in ("auto", "partial"):  # e has no constant term: auto pivots dynamically here
        x, ref = _solve_eps(False, evals, mode)
        np.testing.assert_allclose(x, ref, rtol=1e-12, atol=1e-12)
    x, ref = _solve_eps(False, evals, "none")  # the static order alone is catastrophic here
    bad = ~np.isclose(x, ref, rtol=1e-6, atol=1e-6).all(-1)
    assert bad[[0, 1, 5, 6]].all()


def test_guard_turns_a_cancelled_static_pivot_into_nan():
    evals = np.array([-1.0, -1.0 + 1e-14, 0.5, 3.0, -0.25, 1e-3])
    x, ref = _solve_eps(True, evals, "auto")  # 1 + e is anchored: static pivot, guarded
    assert np.isnan(x[:2]).all()  # pivot 0 and ~1e-14 < GUARD * |a01|: never silently wrong
    np.testing.assert_allclose(x[2:], ref[2:], rtol=1e-12)
    x, ref = _solve_eps(True, evals[1:], "partial")  # dynamic pivoting solves it
    np.testing.assert_allclose(x[:1], ref[:1], rtol=1e-6)
    assert GUARD < 1e-10


def test_anchored_follows_definitions():
    u, v, w = sp.symbols("u v w", real=True)
    assert anchored(1 + u) and anchored(sp.Float(2.5)) and not anchored(u) and not anchored(2 * u)
    assert not anchored(sp.S.Zero)
    defs = {v: w, w: 1 - u * v}
    assert anchored(v, defs) and not anchored(v, {v: u * w})


def test_auto_emits_far_fewer_selects_on_anchored_systems():
    n, m = 7, 14
    u = sp.symbols(f"u0:{n * n}", real=True)
    A = [[(1 + u[i * n + j]) if i == j else u[i * n + j] for j in range(n)] for i in range(n)]
    B = [[sp.Symbol(f"b{i}_{c}", real=True) for c in range(m)] for i in range(n)]
    X = [[sp.Symbol(f"x{i}_{c}", real=True) for c in range(m)] for i in range(n)]

    def selects(mode):
        return sum(1 for a in expand_solve(A, B, X, "c", pivoting=mode) if a.value.has(sp.Piecewise))

    assert selects("none") == 0
    assert selects("auto") <= n  # one guarded reciprocal per step at most
    assert selects("partial") > 20 * selects("auto")


def test_errors_name_the_solve():
    x = sp.Symbol("x", real=True)
    with pytest.raises(ModelcError, match="ls9.*structurally singular"):
        expand_solve([[x, x], [0, 0]], [[x], [x]], [[x], [x]], "ls9")
    with pytest.raises(ModelcError, match="pivoting mode"):
        expand_solve([[x]], [[x]], [[x]], "ls9", pivoting="full")


def test_max_of_is_sympy_max():
    """The shortcut gives SymPy's evaluated Max, node for node, on fresh random argument lists:
    |symbols| of every sign assumption (the positive ones fold, so SymPy's comparisons run), with
    repeats, numbers and comparable sums mixed in (SymPy's own path)."""
    rng = np.random.default_rng()
    kinds = [dict(real=True), dict(), dict(nonzero=True, real=True), dict(integer=True),
             dict(positive=True), dict(nonpositive=True)]
    for trial in range(30):
        syms = [sp.Symbol(f"s{i}", **kinds[int(rng.integers(len(kinds)))]) for i in range(int(rng.integers(1, 9)))]
        args = [sp.Abs(syms[int(rng.integers(len(syms)))]) for _ in range(int(rng.integers(1, 12)))]
        if trial % 3 == 1:
            args.append(sp.Integer(int(rng.integers(1, 4))))
        if trial % 3 == 2:  # comparable with args[0]: SymPy drops args[0]
            args += [sp.Abs(syms[0] + syms[-1]), args[0] + 1]
        assert sp.srepr(max_of(args)) == sp.srepr(sp.Max(*args)), args


@pytest.mark.parametrize("mode", MODES)
def test_forward_then_back_is_substitute_column_by_column(mode):
    """forward() and back() (the halves the Triton backend's helpers print, one right-hand side at a
    time, every column's forward pass first) do the operations of substitute() on all the columns
    at once, and give its numbers to round-off (a sum's terms are ordered by their symbols' names)."""
    from modelc.passes.expand_solve import back, forward

    rng = np.random.default_rng(11)
    n, m = 6, 3
    pattern = rng.random((n, n)) < 0.5
    perm = rng.permutation(n)
    pattern[np.arange(n), perm] = True
    A, B, X = _system(pattern, m, "h")
    Aval = rng.standard_normal((BATCH, n, n)) * pattern
    Aval[:, np.arange(n), perm] += 3.0
    Bval = rng.standard_normal((BATCH, n, m))
    Bval[:, 0, 1] = 0.0
    B[0][1] = sp.S.Zero  # a structural zero in one column
    env = {A[i][j]: Aval[:, i, j] for i in range(n) for j in range(n) if isinstance(A[i][j], sp.Symbol)}
    env.update({B[i][c]: Bval[:, i, c] for i in range(n) for c in range(m) if isinstance(B[i][c], sp.Symbol)})
    fa, F = factor(A, "lu", pivoting=mode)
    whole = _run(fa + substitute(F, B, X, "s"), env)
    assigns, ys = list(fa), []
    for c in range(m):
        fw, y = forward(F, [[B[i][c]] for i in range(n)], f"f{c}")
        assigns += fw
        ys.append(y)
    Xc = [[sp.Symbol(f"xc{i}_{c}", real=True) for c in range(m)] for i in range(n)]
    for c in range(m):
        assigns += back(F, ys[c], [[Xc[i][c]] for i in range(n)], f"k{c}")
    ops = sum(sp.count_ops(a.value) for a in assigns)
    assert ops == sum(sp.count_ops(a.value) for a in fa + substitute(F, B, X, "s"))
    halves = _run(assigns, env)
    for i in range(n):
        for c in range(m):
            np.testing.assert_allclose(halves[Xc[i][c]], whole[X[i][c]], rtol=1e-13, atol=1e-13)
    x = np.stack([np.stack([halves[Xc[i][c]] for c in range(m)], -1) for i in range(n)], 1)
    np.testing.assert_allclose(x, np.linalg.solve(Aval, Bval), rtol=1e-10, atol=1e-10)
