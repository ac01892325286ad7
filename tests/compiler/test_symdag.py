"""modelc.symdag: the memoized walks give SymPy's own results, node for node (``srepr``), on fresh
random expressions with shared subexpressions (every rule: Add, Mul, Pow, exp/log, modelc's
functions, and nodes the differentiator hands back to SymPy) and on the library's models."""
from __future__ import annotations

import os
import random

import pytest
import sympy as sp

from modelc import functions as F
from modelc.symdag import Diff, FreeSymbols, Identity, StrPrinterMemo, cse, free_symbols, xreplace

X = sp.symbols("x0:5", real=True)
SEED = int.from_bytes(os.urandom(4), "little")


def _random_exprs(rng: random.Random, n: int = 6, steps: int = 40) -> list[sp.Expr]:
    """``n`` expressions over X drawn from a pool that grows by combining earlier entries, so that
    subexpressions are shared (as the compiler's are)."""
    pool: list[sp.Expr] = list(X) + [sp.Integer(2), sp.Rational(1, 3), sp.Float(1.5)]

    def pick():
        return rng.choice(pool[-12:] if rng.random() < 0.6 else pool)

    unary = [sp.exp, sp.log, sp.sqrt, F.macaulay, F.heaviside, F.abs_, F.sign, F.safe_sqrt, F.tanh_,
             lambda a: sp.Abs(a),  # SymPy's own derivative rule (the fallback path)
             lambda a: sp.Piecewise((a, X[0] > 0), (a * a, True))]
    binary = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - 2 * b, lambda a, b: a / b,
              lambda a, b: a ** 2 * b, lambda a, b: a ** sp.Rational(3, 2), lambda a, b: a ** b,
              F.max_, F.min_, F.safe_div, lambda a, b: F.ifpos(a - b, a * b, b),
              lambda a, b: sp.Add(a, b, a * b, sp.Integer(3))]
    for _ in range(steps):
        if rng.random() < 0.3:
            e = rng.choice(unary)(pick())
        else:
            e = rng.choice(binary)(pick(), pick())
        if not e.is_Number:
            pool.append(e)
    return [pick() * pick() + pick() for _ in range(n)]


@pytest.mark.parametrize("trial", range(4))
def test_diff_is_sympy_diff_on_random_expressions(trial):
    rng = random.Random(SEED + trial)
    exprs = _random_exprs(rng)
    free = FreeSymbols()
    for s in X:
        d = Diff(s, free)
        for e in exprs:
            assert sp.srepr(d(e)) == sp.srepr(sp.diff(e, s)), f"seed {SEED + trial}: d/d{s} of {e}"


@pytest.mark.parametrize("trial", range(4))
def test_free_symbols_and_xreplace_are_sympys(trial):
    rng = random.Random(SEED + 100 + trial)
    exprs = _random_exprs(rng)
    fs = FreeSymbols()
    for e in exprs:
        assert fs(e) == e.free_symbols, f"seed {SEED + 100 + trial}: {e}"
    assert free_symbols(exprs) == set().union(*(e.free_symbols for e in exprs))
    y = sp.Symbol("y")
    rule = {X[0]: y + 1, X[1]: sp.exp(y), exprs[0]: y}
    for e in exprs:
        assert sp.srepr(xreplace(e, rule)) == sp.srepr(e.xreplace(rule)), f"seed {SEED + 100 + trial}"
    assert xreplace(exprs[1], {}) is exprs[1]


@pytest.mark.parametrize("trial", range(4))
def test_cse_is_sympy_cse(trial):
    rng = random.Random(SEED + 200 + trial)
    exprs = _random_exprs(rng, n=8)
    exprs += [sp.diff(exprs[0], X[0]), -exprs[1] - exprs[2], 1 / exprs[3] ** 2]

    def names():
        return sp.numbered_symbols("c")

    ours = cse(exprs, names())
    theirs = sp.cse(exprs, symbols=names(), order="canonical")
    assert sp.srepr(ours[0]) == sp.srepr(theirs[0]), f"seed {SEED + 200 + trial}"
    assert sp.srepr(ours[1]) == sp.srepr(theirs[1]), f"seed {SEED + 200 + trial}"


@pytest.mark.parametrize("trial", range(3))
def test_printer_is_sstr(trial):
    """Shared subexpressions printed once, the text as sympy.sstr's: also a lone Float (printed
    with its trailing zeros at the top level, stripped inside an expression)."""
    rng = random.Random(SEED + 300 + trial)
    exprs = _random_exprs(rng)
    scaled = sp.Float(0.25) * X[0]
    exprs += [scaled + exprs[0], scaled.args[0], sp.Float(0.1) * X[0], exprs[0] ** 2 + sp.Float(2.0)]
    printer = StrPrinterMemo()
    for e in exprs + exprs[::-1]:
        assert printer(e) == sp.sstr(e), f"seed {SEED + 300 + trial}"


def test_diff_handles_the_trivial_cases():
    x, y = X[0], X[1]
    d = Diff(x)
    assert d(x) == 1 and d(y) == 0 and d(sp.Integer(3)) == 0 and d(2.5) == 0
    assert d(y * sp.exp(x)) == y * sp.exp(x)
    with pytest.raises(TypeError, match="Symbol"):
        Diff(x + y)


def test_diff_is_sympy_diff_on_the_library_radial_returns():
    from modelc.driver import load_spec

    spec = load_spec(os.path.join(os.path.dirname(__file__), "..", "..", "spec", "library.yaml"))
    models = {m.name: m for m in spec.models}
    checked = 0
    for name in ("j2_voce_af_radial_return",):  # the largest; generated/ --check covers the rest
        m = models[name]
        free = FreeSymbols()
        syms = [s for v in m.inputs if v.name in ("forces/E", "old_state/internal/X") for s in v.symbols]
        syms += [s for p in m.parameters for s in p.symbols]
        for eq in m.equations:
            for c in eq.components:
                c = sp.sympify(c)
                for s in syms:
                    if s in c.free_symbols:
                        assert sp.srepr(Diff(s, free)(c)) == sp.srepr(sp.diff(c, s)), (name, eq.var.name, s)
                        checked += 1
    assert checked > 20


# -- Identity: the same function, decided without multiplying out -----------------------------------

def _polys(rng: random.Random, depth: int):
    """A random rational expression over X and another form of the same function (distributed
    products, reordered sums, the same function applied to an equal argument)."""
    if depth == 0 or rng.random() < 0.2:
        leaf = rng.choice(list(X) + [sp.Integer(3), sp.Rational(-1, 2), sp.Rational(1, 10)])  # floats: below
        return leaf, leaf
    (a, a2), (b, b2) = _polys(rng, depth - 1), _polys(rng, depth - 1)
    k = rng.randrange(6)
    if k == 0:
        return a + b, b2 + a2
    plain = not (a2.has(sp.exp) or b2.has(sp.exp))  # SymPy folds exp(u)**2 into exp(2 u) as it builds
    if k == 1:
        return a * b, sp.expand(a2 * b2) if plain and sp.count_ops(a2 * b2) < 60 else b2 * a2
    if k == 2:
        return (a + b) ** 2, a2 ** 2 + 2 * a2 * b2 + b2 ** 2 if plain else (b2 + a2) * (a2 + b2)
    if k == 3:
        return a / (1 + b ** 2), a2 * (1 + b2 ** 2) ** -1
    if k == 4:
        return sp.exp(a * (b + 1)), sp.exp(a2 * b2 + a2)
    f = sp.Function("f")  # an unknown function of equal arguments
    return f(a, b), f(a2, b2)


@pytest.mark.parametrize("trial", range(4))
def test_identity_accepts_other_forms_of_the_same_function(trial):
    rng = random.Random(SEED + trial)
    same = Identity().same
    for _ in range(20):
        a, b = _polys(rng, 4)
        assert same(a, b), (SEED, a, b)


@pytest.mark.parametrize("trial", range(4))
def test_identity_refuses_different_functions(trial):
    """A small change anywhere is seen; on small rational functions SymPy's cancel agrees (the oracle)."""
    rng = random.Random(SEED + 100 + trial)
    same = Identity().same
    for _ in range(20):
        a, b = _polys(rng, 3)
        changed = b.xreplace({X[0]: X[0] + sp.Rational(1, 10**9)}) if X[0] in b.free_symbols else b + X[1] ** 7
        assert not same(a, changed), (SEED, a, changed)
        if sp.count_ops(a) < 40 and not a.has(sp.exp, sp.Function("f")):  # a rational function: cancel decides
            assert same(a, b) and sp.expand(sp.numer(sp.together(a - b))) == 0
            assert not same(a, changed) and sp.expand(sp.numer(sp.together(a - changed))) != 0


def test_identity_without_expanding_a_product_of_sums():
    """(x0 + ... + x4)**40 has 135,751 terms multiplied out; its two forms compare at once."""
    s = sp.Add(*X)
    a = s ** 40 * (s + 1)
    b = s ** 41 + (X[4] + X[3] + X[2] + X[1] + X[0]) ** 40
    assert Identity().same(a, b)
    assert not Identity().same(a, b + sp.Rational(1, 10**12))


def test_identity_where_the_atoms_hide_something():
    """A function of equal arguments is the same function, whatever the arguments' form; what a
    function hides (exp(u)**2 = exp(2 u)) is found by multiplying out a small pair only, and a
    large one counts as different (callers keep both: an R2 result rather than an SR2)."""
    same = Identity().same
    u = X[0] * (X[1] + 1)
    assert same(sp.exp(u), sp.exp(X[0] + X[0] * X[1]))
    assert not same(sp.exp(X[0]), sp.exp(X[1]))
    assert same((X[2] + sp.exp(u)) ** 2, X[2] ** 2 + 2 * X[2] * sp.exp(u) + sp.exp(2 * u))  # small: expanded
    big = sp.Add(*[X[i] * X[j] for i in range(5) for j in range(5)]) ** 3  # 15**3 terms: not expanded
    assert not same(big * (X[2] + sp.exp(u)) ** 2, big * sp.expand((X[2] + sp.exp(u)) ** 2))
    # float constants count exactly: forms built alike compare the same, as with expand
    c = sp.Float("0.1")
    assert same(c * X[0] * (X[1] + c), c * X[0] * X[1] + c * c * X[0])
    assert not same(c * X[0], sp.Float("0.1000000001") * X[0])


@pytest.mark.parametrize("trial", range(4))
def test_distinct_nodes_counts_the_dag(trial):
    """distinct_nodes is the number of different subexpressions (SymPy's own preorder walk, its
    results deduplicated, is the oracle), and it stops at cap + 1 without walking the rest. A chain
    h -> h*(h + 2) + h doubles the tree at each level and adds a few distinct nodes."""
    from sympy.core.traversal import preorder_traversal

    from modelc.symdag import distinct_nodes

    exprs = _random_exprs(random.Random(SEED + trial), n=3, steps=12)
    want = len(set(e for x in exprs for e in preorder_traversal(x)))
    assert distinct_nodes(exprs, 10**6) == want
    assert distinct_nodes(exprs, want - 1) == want
    assert distinct_nodes(exprs, want // 2) == want // 2 + 1
    h = X[0] + 1
    for _ in range(60):  # 2**60 nodes as a tree
        h = sp.Mul(h, h + 2, evaluate=False) + h
    assert distinct_nodes([h], 10**6) < 400
