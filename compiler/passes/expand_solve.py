"""Unrolled, sparsity-aware Gaussian elimination: a :class:`~modelc.ir.LinearSolve` (or a Newton step)
expanded into straight-line assignments that both backends print like any other code. Every solve
factors its matrix once and carries all right-hand sides through the same elimination (the Newton
step has one, the implicit-function-theorem tangent one per input component). :func:`factor` and
:func:`substitute` are the two halves, for solves that share a matrix (an implicit model's tangent,
Jacobian and total variants each solve with its ``dR/du``: the backends print its elimination once,
:meth:`modelc.backends.statements.Emitter.guarded`).

Pivoting strategy (documented contract; ``pivoting=`` selects it, default ``"auto"``):

1. **Static row ordering from the structure** (all modes). A maximum bipartite matching of rows to
   columns on the structural nonzeros puts a structurally nonzero entry on every diagonal position,
   so a zero structural diagonal (e.g. a saddle-point block) costs nothing at run time. A system
   without such a matching is structurally singular: an error naming the solve.
2. **Per-point partial pivoting, where it can matter** (``"auto"``). At step ``k`` the candidate pivot
   rows are the remaining rows whose entry in column ``k`` is structurally nonzero (after fill-in). A
   step is *at risk* when its static pivot row was moved there by the matching (its own diagonal was
   structurally zero) or when the pivot entry is not *anchored*: after following symbol definitions,
   it has no nonzero constant term (a backward-Euler residual ``u - u_old - dt f(u)`` has diagonal
   ``1 - dt df/du``: anchored; ``[[eps, 1], [1, 1]]`` is not). At-risk steps with candidates get a
   tournament of ``where``-swaps that brings the candidate with the largest ``|a[p][k]|`` to row
   ``k`` per point (swapped rows take the union of both sparsity patterns). Other steps keep the
   static pivot, **guarded**: a point whose pivot is smaller than ``GUARD`` (1e-12) times the largest
   other entry of its own (updated) row — a pivot lost to cancellation — gets a NaN reciprocal, so
   its solution is NaN (a Newton point then fails to converge and is reported, a tangent is NaN).
   The guard is row-relative so that rows in different units (a stress-like complementarity row
   below strain-like rows) do not trip it; it is meaningful in float64 (in float32 a cancelled pivot
   keeps ~1e-7 of noise and is not caught). It costs O(row) operations per step instead of two
   ``where`` per candidate and per column. Why this is enough for the library: a converged Newton
   point is checked on the residual itself, so a poor linear solve can only slow Newton down (and a
   point that fails is reported); the static pivots of backward-Euler residuals are ``1 + O(dt)``.
   ``"partial"`` (the former behaviour) pivots dynamically at every step with candidates; ``"none"``
   uses the static order only (no guard).
3. Elimination touches only structurally nonzero entries (fill-in is tracked); the reciprocal of each
   pivot is computed once; back substitution skips structural zeros.

Tests: tests/compiler/passes/test_expand_solve.py (zero structural diagonal, a tiny dynamic
pivot, the guard, agreement of all modes with numpy on random systems) and
tests/compiler/backends/test_triton_backend.py (the ``pivot2`` system through the generated kernels).

The expansion works on SymPy symbols: every produced value is a fresh symbol named
``<prefix>.<what>[i,j]#<version>`` (printed short, see :mod:`modelc.backends.names`); entries that are
numbers or symbols are used directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import sympy as sp

from modelc.errors import ModelcError
from modelc.ir import Assign


PIVOTING_MODES = ("auto", "partial", "none")
GUARD = 1e-12  # "auto": a static pivot below GUARD * max |a[k][j]|, j > k (its own row) gives NaN


def _is_zero(e: sp.Expr) -> bool:
    return bool(e.is_Number and e == 0)


def anchored(e: sp.Expr, defs: Mapping[sp.Symbol, sp.Expr] | None = None, depth: int = 8) -> bool:
    """Whether ``e`` (following ``defs`` through bare symbols) has a nonzero constant term."""
    e = sp.sympify(e)
    for _ in range(depth):
        if isinstance(e, sp.Symbol) and defs is not None and e in defs:
            e = sp.sympify(defs[e])
        else:
            break
    if e.is_Number:
        return e != 0
    if isinstance(e, sp.Add):
        c, _ = e.as_coeff_Add()
        return bool(c.is_Number and c != 0)
    return False


def max_of(args: Sequence[sp.Expr]) -> sp.Expr:
    """``sympy.Max(*args)``, without its pairwise comparisons where they cannot decide anything.

    Max compares every pair of arguments (each an assumptions query, a relational and a
    ``factor_terms``: ~0.1 s per guard of an 18-unknown system). When every argument is ``|s|``
    of a Symbol ``s`` (so of unknown sign: ``Abs`` folds a symbol known to be nonnegative or
    nonpositive), no pair of distinct arguments is comparable, nothing is dropped, and the
    evaluated Max is ``Max(*args, evaluate=False)``: the same argument set in the same order."""
    if all(isinstance(a, sp.Abs) and isinstance(a.args[0], sp.Symbol) for a in args):
        return sp.Max(*args, evaluate=False)
    return sp.Max(*args)


def _mode(pivoting: str | bool) -> str:
    if pivoting is True:
        return "partial"
    if pivoting is False:
        return "none"
    if pivoting not in PIVOTING_MODES:
        raise ModelcError(f"unknown pivoting mode {pivoting!r} (expected one of {', '.join(PIVOTING_MODES)})")
    return pivoting


def structural_matching(nonzero: Sequence[Sequence[bool]]) -> list[int] | None:
    """Row index for each column such that ``nonzero[row][col]`` (augmenting paths, deterministic),
    or None if no perfect matching exists."""
    n = len(nonzero)
    row_of_col: list[int | None] = [None] * n

    def augment(r: int, seen: set[int]) -> bool:
        for c in range(n):
            if nonzero[r][c] and c not in seen:
                seen.add(c)
                if row_of_col[c] is None or augment(row_of_col[c], seen):
                    row_of_col[c] = r
                    return True
        return False

    # Prefer the identity: first let every row with a nonzero diagonal keep it.
    for c in range(n):
        if nonzero[c][c]:
            row_of_col[c] = c
    for r in range(n):
        if r not in row_of_col and not augment(r, set()):
            return None
    return [int(r) for r in row_of_col]  # type: ignore[arg-type]


class _Builder:
    def __init__(self, prefix: str):
        self.prefix = prefix
        self.out: list[Assign] = []
        self.version = 0

    def value(self, what: str, expr: sp.Expr, boolean: bool = False) -> sp.Expr:
        """``expr`` itself if it is a number or a symbol, else a fresh symbol assigned to it."""
        if expr.is_Number or isinstance(expr, sp.Symbol):
            return expr
        self.version += 1
        sym = sp.Symbol(f"{self.prefix}.{what}#{self.version}") if boolean else \
            sp.Symbol(f"{self.prefix}.{what}#{self.version}", real=True)
        self.out.append(Assign(sym, expr))
        return sym


@dataclass
class Factor:
    """The elimination of one matrix, to be applied to right-hand sides by :func:`substitute`:
    ``perm`` (the static row order), per step ``k`` its ``swaps`` (``(p, s)``: rows ``k`` and ``p``
    exchanged where ``s``) and ``elims`` (``(p, l)``: row ``p`` minus ``l`` times row ``k``), the
    upper triangle ``a`` and the pivots' reciprocals ``inv``."""
    n: int
    perm: list[int]
    swaps: list[list[tuple[int, sp.Expr]]]
    elims: list[list[tuple[int, sp.Expr]]]
    a: list[list[sp.Expr]]
    inv: list[sp.Expr]


def factor(A: Sequence[Sequence[sp.Expr]], prefix: str, *, pivoting: str | bool = "auto",
           defs: Mapping[sp.Symbol, sp.Expr] | None = None,
           at_risk: Sequence[bool] | None = None) -> tuple[tuple[Assign, ...], Factor]:
    """Assignments that eliminate ``A`` (n x n) and the :class:`Factor` that :func:`substitute`
    applies to right-hand sides: one factorization for every set of right-hand sides (the tangent,
    Jacobian and total variants of an implicit model share their ``dR/du``). ``at_risk``: the
    steps :func:`at_risk` found for the matrix whose entries ``A`` stands for (a helper function
    eliminating its parameters decides as the inline elimination of the actual entries would);
    None: decided here from ``A`` and ``defs``."""
    bld = _Builder(prefix)
    F = _factor(bld, A, prefix, _mode(pivoting), defs, at_risk)
    return tuple(bld.out), F


def _order(A, prefix: str) -> list[int]:
    n = len(A)
    if any(len(row) != n for row in A):
        raise ModelcError(f"linear solve {prefix}: A must be n x n (got {len(A)} rows)")
    perm = structural_matching([[not _is_zero(sp.sympify(A[i][j])) for j in range(n)] for i in range(n)])
    if perm is None:
        raise ModelcError(f"linear solve {prefix}: the {n}x{n} system is structurally singular "
                          "(no ordering of its equations puts a nonzero on every diagonal entry)")
    return perm


def at_risk(A: Sequence[Sequence[sp.Expr]], prefix: str,
            defs: Mapping[sp.Symbol, sp.Expr] | None = None) -> list[bool]:
    """Per elimination step, whether its pivot is at risk (see the module docstring: moved there by
    the structural matching, or not anchored)."""
    perm = _order(A, prefix)
    return [perm[k] != k or not anchored(A[perm[k]][k], defs) for k in range(len(A))]


def _factor(bld: "_Builder", A, prefix: str, mode: str, defs, risk: Sequence[bool] | None = None) -> Factor:
    n = len(A)
    perm = _order(A, prefix)
    a = [[bld.value(f"a[{i},{j}]", sp.sympify(A[i][j])) for j in range(n)] for i in range(n)]
    if risk is None:
        risk = at_risk(A, prefix, defs)
    elif len(risk) != n:
        raise ModelcError(f"linear solve {prefix}: {len(risk)} pivot decisions for {n} steps")
    a = [a[perm[k]] for k in range(n)]

    inv: list[sp.Expr] = [sp.S.Zero] * n
    swaps: list[list[tuple[int, sp.Expr]]] = [[] for _ in range(n)]
    elims: list[list[tuple[int, sp.Expr]]] = [[] for _ in range(n)]
    for k in range(n):
        cands = [p for p in range(k + 1, n) if not _is_zero(a[p][k])]
        dynamic = mode == "partial" or (mode == "auto" and risk[k])
        guard: sp.Expr | None = None
        if dynamic and cands:
            for p in cands:  # tournament: row k ends up with the largest |a[.][k]|
                s = bld.value(f"swap[{k},{p}]", sp.StrictGreaterThan(sp.Abs(a[p][k]), sp.Abs(a[k][k])),
                              boolean=True)
                if s is sp.false:
                    continue
                swaps[k].append((p, s))
                for j in range(k, n):
                    if _is_zero(a[k][j]) and _is_zero(a[p][j]):
                        continue
                    hi, lo = a[k][j], a[p][j]
                    a[k][j] = bld.value(f"a[{k},{j}]", sp.Piecewise((lo, s), (hi, True)))
                    a[p][j] = bld.value(f"a[{p},{j}]", sp.Piecewise((hi, s), (lo, True)))
        elif mode == "auto" and cands:
            others = [sp.Abs(a[k][j]) for j in range(k + 1, n) if not _is_zero(a[k][j])]
            if others:
                test = sp.GreaterThan(sp.Abs(a[k][k]), sp.Float(GUARD, 17) * max_of(others))
                # a constant pivot (test already decided) needs no run-time guard
                if not isinstance(test, sp.logic.boolalg.BooleanAtom):
                    guard = bld.value(f"ok[{k}]", test, boolean=True)
        if guard is None:
            inv[k] = bld.value(f"inv[{k}]", 1 / a[k][k])
        else:
            inv[k] = bld.value(f"inv[{k}]", sp.Piecewise((1 / a[k][k], guard)))
        for p in cands:
            l = bld.value(f"l[{p},{k}]", a[p][k] * inv[k])
            elims[k].append((p, l))
            a[p][k] = sp.S.Zero
            for j in range(k + 1, n):
                if not _is_zero(a[k][j]):
                    a[p][j] = bld.value(f"a[{p},{j}]", a[p][j] - l * a[k][j])
    return Factor(n, perm, swaps, elims, a, inv)


def substitute(F: Factor, B: Sequence[Sequence[sp.Expr]], targets: Sequence[Sequence[sp.Symbol]],
               prefix: str) -> tuple[Assign, ...]:
    """Assignments that solve ``A X = B`` with ``A`` eliminated as ``F`` (:func:`factor`) and
    assign ``X[i][j]`` to ``targets[i][j]``: each right-hand side goes through the factorization's
    row exchanges and eliminations in the order they were made, then back substitution, so the
    result is the same arithmetic as :func:`expand_solve`'s (:func:`forward`, then :func:`back`)."""
    bld = _Builder(prefix)
    _back(bld, F, _forward(bld, F, B, prefix), targets)
    return tuple(bld.out)


def forward(F: Factor, B: Sequence[Sequence[sp.Expr]], prefix: str) -> tuple[tuple[Assign, ...], list[list[sp.Expr]]]:
    """The first half of :func:`substitute`: assignments carrying ``B`` through the row exchanges and
    eliminations of ``F``, and the result (numbers or symbols), which :func:`back` takes."""
    bld = _Builder(prefix)
    y = _forward(bld, F, B, prefix)
    return tuple(bld.out), y


def back(F: Factor, Y: Sequence[Sequence[sp.Expr]], targets: Sequence[Sequence[sp.Symbol]],
         prefix: str) -> tuple[Assign, ...]:
    """The second half of :func:`substitute`: back substitution of :func:`forward`'s result into
    ``targets``."""
    bld = _Builder(prefix)
    _back(bld, F, [list(row) for row in Y], targets)
    return tuple(bld.out)


def _forward(bld: "_Builder", F: Factor, B, prefix: str) -> list[list[sp.Expr]]:
    n = F.n
    m = len(B[0]) if n else 0
    if len(B) != n or any(len(row) != m for row in B):
        raise ModelcError(f"linear solve {prefix}: B must have {n} rows of {m} columns")
    b = [[bld.value(f"b[{i},{c}]", sp.sympify(B[i][c])) for c in range(m)] for i in range(n)]
    b = [b[F.perm[k]] for k in range(n)]
    for k in range(n):
        for p, s in F.swaps[k]:
            for c in range(m):
                if _is_zero(b[k][c]) and _is_zero(b[p][c]):
                    continue
                hi, lo = b[k][c], b[p][c]
                b[k][c] = bld.value(f"b[{k},{c}]", sp.Piecewise((lo, s), (hi, True)))
                b[p][c] = bld.value(f"b[{p},{c}]", sp.Piecewise((hi, s), (lo, True)))
        for p, l in F.elims[k]:
            for c in range(m):
                if not _is_zero(b[k][c]):
                    b[p][c] = bld.value(f"b[{p},{c}]", b[p][c] - l * b[k][c])
    return b


def _back(bld: "_Builder", F: Factor, b, targets) -> None:
    n = F.n
    m = len(b[0]) if n else 0
    a, inv = F.a, F.inv
    x: list[list[sp.Expr]] = [[sp.S.Zero] * m for _ in range(n)]
    for i in reversed(range(n)):
        for c in range(m):
            acc = b[i][c]
            for j in range(i + 1, n):
                if not _is_zero(a[i][j]) and not _is_zero(x[j][c]):
                    acc = acc - a[i][j] * x[j][c]
            x[i][c] = bld.value(f"x[{i},{c}]", acc * inv[i])
    for i in range(n):
        for c in range(m):
            bld.out.append(Assign(targets[i][c], x[i][c]))


def expand_solve(A: Sequence[Sequence[sp.Expr]], B: Sequence[Sequence[sp.Expr]],
                 targets: Sequence[Sequence[sp.Symbol]], prefix: str, *,
                 pivoting: str | bool = "auto",
                 defs: Mapping[sp.Symbol, sp.Expr] | None = None) -> tuple[Assign, ...]:
    """Assignments that solve ``A X = B`` and assign ``X[i][j]`` to ``targets[i][j]``
    (:func:`factor`, then :func:`substitute`).

    ``pivoting``: ``"auto"`` (default), ``"partial"`` or ``"none"`` (True/False mean "partial"/"none"),
    see the module docstring; ``defs``: values of symbols assigned before the solve (to see through
    symbols when deciding whether a pivot is anchored)."""
    mode = _mode(pivoting)
    n = len(A)
    m = len(B[0]) if n else 0
    if any(len(row) != n for row in A) or len(B) != n or any(len(row) != m for row in B):
        raise ModelcError(f"linear solve {prefix}: A must be n x n and B n x m (got {len(A)} rows)")
    bld = _Builder(prefix)
    F = _factor(bld, A, prefix, mode, defs)
    _back(bld, F, _forward(bld, F, B, prefix), targets)
    return tuple(bld.out)


def halley_step(r: sp.Expr, J: sp.Expr, H: sp.Expr, target: sp.Symbol, prefix: str) -> tuple[Assign, ...]:
    """Assignments of a scalar Halley step to ``target``, every backend's one formula: with the
    residual ``r``, its derivative ``J`` and second derivative ``H`` at the iterate, the Newton step
    ``dn = -r * (1/J)`` (the arithmetic of :func:`expand_solve` for n = 1) and

        du = -2 r J / (2 J^2 - r H)   where |r H| <= J^2,   else du = dn.

    Halley's step is the Newton step times 1 / (1 - r H / (2 J^2)); the guard keeps that factor in
    [2/3, 2] (far from a root, or where H is not finite, the step is Newton's), so the denominator
    is at least J^2. Near a simple root the iteration converges cubically: one residual evaluation
    fewer than Newton from a guess a few percent off, for a few extra operations per step.
    Tests: tests/compiler/passes/test_halley.py."""
    bld = _Builder(prefix)
    j = bld.value("J", sp.sympify(J))
    inv = bld.value("inv", 1 / j)
    dn = bld.value("newton", -r * inv)
    q = bld.value("rH", r * H)
    jj = bld.value("JJ", j * j)
    step = (-2 * r * j) / (2 * jj - q)
    bld.out.append(Assign(target, sp.Piecewise((step, sp.LessThan(sp.Abs(q), jj)), (dn, True))))
    return tuple(bld.out)
