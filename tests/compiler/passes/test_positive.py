"""passes.positive: positive factors (by the parameters' bounds) out of safe_sqrt and safe_div.

Checked against: the interval rules by hand (which expressions the bounds make positive); the
rewritten expressions evaluated against the originals, values and derivatives, on fresh random
points inside the bounds and at the safe functions' zeros; and the library's radial returns
through the whole pipeline with and without the pass, in the reference interpreter (outputs,
tangent and Jacobian to 1e-12), with the operation counts it saves."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from modelc import driver
from modelc.functions import safe_div, safe_sqrt
from modelc.ir.interpret import interpret
from modelc.passes.cse import cse
from modelc.passes.differentiate import differentiate
from modelc.passes.lower import lower
from modelc.passes.positive import factor_positive, positive, simplify

LIBRARY = Path(__file__).resolve().parents[3] / "spec" / "library.yaml"

E, nu, sy, K, free = sp.symbols("$E $nu $sigma_y $K x")
RANGES = {E: (0.0, True, math.inf, True), nu: (-1.0, True, 0.5, True), sy: (0.0, False, math.inf, True)}


@pytest.mark.parametrize("expr, want", [
    (E, True), (nu, False), (sy, False), (free, False), (sp.Integer(3), True), (-E, False),
    (1 + nu, True), (2 * nu + 2, True), (1 - 2 * nu, True), (nu + sp.Rational(1, 2), False),
    (E / (2 * (1 + nu)), True), (E ** 2, True), (sp.sqrt(E), True), (1 / (1 - 2 * nu), True),
    (sy + 1, True), (E - 1, False), (E * free, False), (K, False), (E + K, False),
    (sy * E, False), (sy * E + 1, True),  # sigma_y may be 0, and then so is the product
])
def test_positive_follows_the_bounds(expr, want):
    assert positive(expr, RANGES) is want


def test_huge_bounds_are_followed_without_overflow():
    """A bound of 1e300 squared (or to the 1024th) is beyond a float: the ends are exact rationals
    (this raised OverflowError, a traceback from `modelc compile`, before), and a non-integer power
    is a float power moved outward."""
    a = sp.Symbol("$a")
    ranges = {a: (0.0, True, 1e300, True), nu: RANGES[nu]}
    for e in (a ** 2, a ** -2, a ** 1024, a ** sp.Rational(5, 2), a ** sp.Float(2.5), sp.sqrt(a) * (1 + nu) ** -3):
        assert positive(e, ranges) is True, e
    assert simplify(safe_div(1, a ** 2 * free), ranges) == safe_div(1, free) / a ** 2
    assert positive(a ** 2 - 1, ranges) is False


def test_a_lower_end_above_zero_by_rounding_only_is_not_positive():
    """10 a - 1 with a in [0.1, 1] is 5.6e-17 at the float 0.1 in exact arithmetic, but 0 in the
    float arithmetic a kernel does there: taken out of safe_div it would divide by that 0 where the
    original returns 0. Such a factor stays in; a lower end clear of 0 (a - 1/20), or 0 and not
    reached (1 + nu, nu > -1), counts."""
    a = sp.Symbol("$a")
    ranges = {a: (0.1, False, 1.0, False), nu: RANGES[nu]}
    assert 10 * 0.1 - 1 == 0.0  # the kernel's arithmetic at the lower bound
    for e in (10 * a - 1, 3 * a - sp.Float(0.3), a - sp.Rational(1, 10), (10 * a - 1) ** 2, (10 * a - 1) * E):
        assert positive(e, ranges) is False, e
    assert simplify(safe_div(free, (10 * a - 1) * free), ranges) == safe_div(free, (10 * a - 1) * free)
    for e in (a - sp.Rational(1, 20), 1 + nu, 2 * nu + 2, 1 - 2 * nu, (1 + nu) * (1 - 2 * nu) * a):
        assert positive(e, ranges) is True, e


def test_a_limit_at_zero_counts_only_when_rounding_cannot_reach_it():
    """A lower end of 0 that is not reached is positive when the kernel's float value cannot round to
    0 on the way: 1 + nu, 2 nu + 2, 1 - 2 nu (a number and a power of two times a symbol: the float
    sum of two floats is positive when the exact one is), and sums, products and powers of such.
    3 a + b - 1 (a > 0, b >= 1) is 0 in floats at a = 1e-30, b = 1: it stays inside. So do
    3 nu + 3 and 0.7 (nu + 1), which SymPy writes 0.7 nu + 0.7: not a power of two times nu (they
    are positive in floats, but not by this argument)."""
    a, b = sp.symbols("$a $b")
    ranges = {a: (0.0, True, math.inf, True), b: (1.0, False, math.inf, True), nu: RANGES[nu], E: RANGES[E]}
    assert 3 * 1e-30 + 1.0 - 1 == 0.0
    assert sp.expand(sp.Float(0.7) * (nu + 1)).is_Add
    for e in (3 * a + b - 1, sp.expand(sp.Float(0.7) * (nu + 1)), 3 * nu + 3, (3 * a + b - 1) * E):
        assert positive(e, ranges) is False, e
    for e in (1 + nu, 2 * nu + 2, 1 - 2 * nu, E + a, (1 + nu) * (1 - 2 * nu) / E, sp.sqrt(2 * nu + 2) * a):
        assert positive(e, ranges) is True, e


def _random_expression(rng, symbols, depth):
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.7:
            return symbols[rng.integers(len(symbols))]
        return [sp.Integer(int(rng.integers(-3, 6))), sp.Rational(int(rng.integers(-5, 6)), int(rng.integers(1, 8))),
                sp.Float([0.1, 0.3, 0.7, 1.5, 3.0][rng.integers(5)])][rng.integers(3)]
    k = rng.random()
    left, right = _random_expression(rng, symbols, depth - 1), _random_expression(rng, symbols, depth - 1)
    if k < 0.4:
        return left + right
    if k < 0.8:
        return left * right
    return left ** [2, -1, -2, sp.Rational(1, 2), sp.Rational(-1, 2), 3, sp.Float(2.5)][rng.integers(7)]


def _corners(lo, lo_open, hi, hi_open, dtype, rng):
    """Values a call may pass in ``dtype``: each finite bound (the next number past an open one, as the
    runtime's check allows) and random values between; magnitudes kept within 1e-8 .. 1e6, away from
    underflow and overflow (outside what the pass promises)."""
    inf = dtype(np.inf)
    out = []
    if math.isfinite(lo):
        v = dtype(lo)
        out.append(np.nextafter(v, inf) if lo_open else v)
    if math.isfinite(hi):
        v = dtype(hi)
        out.append(np.nextafter(v, -inf) if hi_open else v)
    a, b = max(lo, -1e6), min(hi, 1e6)
    out += [dtype(x) for x in rng.uniform(a, b, 4)]
    return [v if not (lo >= 0 and v < 1e-8) else dtype(1e-8) for v in out]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_what_it_calls_positive_is_positive_in_floats(dtype):
    """Fresh random expressions (sums, products, powers of three bounded symbols and numbers): wherever
    the pass says positive, the expression evaluated in ``dtype`` at the bounds and between them is
    positive (or under/overflows: not this pass's promise)."""
    rng = np.random.default_rng()
    syms = sp.symbols("$a $b $c")
    kinds = [(0.0, True, math.inf, True), (-1.0, True, 0.5, True), (0.1, False, 1.0, False), (0.7, True, 1.0, False),
             (1.0, False, math.inf, True), (1e-3, True, 1e6, True), (2.0, False, 20.0, False)]
    checked = 0
    for _ in range(400):
        ranges = {s: kinds[rng.integers(len(kinds))] for s in syms}
        e = _random_expression(rng, syms, 3)
        if not positive(e, ranges):
            continue
        checked += 1
        # every Float as the exact value of its double: lambdify prints Floats to 15 digits, which is
        # not the double a kernel computes with
        f = sp.lambdify(syms, e.xreplace({x: sp.Rational(float(x)) for x in e.atoms(sp.Float)}), "numpy")
        pts = {s: _corners(*ranges[s], dtype, rng) for s in syms}
        for _ in range(20):
            vals = [pts[s][rng.integers(len(pts[s]))] for s in syms]
            with np.errstate(all="ignore"):
                v = dtype(f(*vals))
            tiny = np.finfo(dtype).tiny
            assert v > 0 or not np.isfinite(v) or abs(v) < tiny * 1e8 or _underflows(e, syms, vals), (e, vals, v)
    assert checked > 50


def _underflows(e, syms, vals) -> bool:
    """Whether some power or product inside ``e`` leaves the float range at these values (the
    exact value is positive and representable only in higher precision)."""
    exact = e.subs(dict(zip(syms, [sp.Float(float(v), 30) for v in vals])))
    return bool(exact > 0) and (abs(float(exact)) < 1e-30 or abs(float(exact)) > 1e30)


def _value(e, vals):
    return float(e.subs(vals))


def test_rewrites_keep_values_and_derivatives():
    """norm(2 G x) and safe_div(1, norm(2 G x)) 2 G x_0 (a radial return's |s| and n_0), written as
    the front end expands them; values and d/dx_k equal to 1e-13 at random points in the bounds, and
    both 0 where x = 0."""
    x = sp.symbols("x0:3")
    G = E / (2 * nu + 2)
    s = [2 * G * xi for xi in x]
    norm = safe_sqrt(sum(si ** 2 for si in s))
    n0 = safe_div(1, norm) * s[0]
    exprs = [norm, n0, safe_sqrt(sy ** 2 * x[0] ** 2), safe_div(x[1], E * x[0] * (1 - 2 * nu))]
    new = [simplify(e, RANGES) for e in exprs]
    assert new[0] == 2 * G * safe_sqrt(sum(xi ** 2 for xi in x))  # the factor is out, in the same form
    assert new[1] == safe_div(1, safe_sqrt(sum(xi ** 2 for xi in x))) * x[0]  # and cancelled
    assert new[2] == exprs[2]  # sigma_y may be 0: not positive, nothing moves
    rng = np.random.default_rng()
    for _ in range(20):
        vals = {E: rng.uniform(1e3, 3e5), nu: rng.uniform(-0.99, 0.49), sy: rng.uniform(0, 500)}
        vals.update({xi: rng.normal() for xi in x})
        for a, b in zip(exprs, new):
            assert _value(b, vals) == pytest.approx(_value(a, vals), rel=1e-13, abs=1e-300)
            for xi in x:
                da, db = _value(sp.diff(a, xi), vals), _value(sp.diff(b, xi), vals)
                assert db == pytest.approx(da, rel=1e-12, abs=1e-12 * max(1.0, abs(da)))
    zero = {E: 2e5, nu: 0.3, sy: 10.0, x[0]: 0, x[1]: 0, x[2]: 0}
    for a, b in zip(exprs, new):
        assert _value(a, zero) == _value(b, zero) == 0
        assert all(_value(sp.diff(b, xi), zero) == _value(sp.diff(a, xi), zero) for xi in x)


def _program(spec, name, with_pass):
    model = driver.resolve_model(spec, name)
    if with_pass:
        model = factor_positive(model)
    return cse(lower(differentiate(model), derivatives=True, parameters=True))


def _ops(program):
    return sum(sp.count_ops(st.value) for st in program.body if hasattr(st, "value"))


def _inputs(program, rng, B=64):
    out = {}
    for v in program.inputs:
        shape = (B, *v.type.base_shape)
        if v.name == "forces/t":
            out[v.name] = np.full(shape, 1.0)
        elif v.name.startswith("old_forces/t") or v.name.endswith("gamma_rate"):
            out[v.name] = np.zeros(shape)
        elif v.name == "forces/E":
            out[v.name] = rng.normal(scale=2e-3, size=shape)
        else:
            out[v.name] = np.abs(rng.normal(scale=1e-4, size=shape))
    return out


@pytest.mark.parametrize("name, saved", [("perzyna_iso", 0.12), ("j2_linear_iso", 0.10), ("j2_perfect", 0.10),
                                         ("norton", 0.10), ("j2_voce_af", 0.0)])
def test_library_models_agree_and_lose_operations(name, saved):
    """The whole pipeline with and without the pass, in the reference interpreter on fresh random
    strains (half the points flow): every output to 1e-12 and every derivative block, parameters
    included, to 1e-11 of its largest entry; the radial returns whose trial stress is
    2 G dev(...) lose at least ``saved`` of their operations (j2_voce_af's direction is that of
    s_tr - dev(X)/(1 + g dgamma), which has no common factor: the same program)."""
    spec = driver.load_spec(LIBRARY)
    old, new = _program(spec, name, False), _program(spec, name, True)
    if saved:
        assert _ops(new) <= (1 - saved) * _ops(old), (_ops(new), _ops(old))
    else:
        assert _ops(new) == _ops(old)
    x = _inputs(old, np.random.default_rng())
    (r1, d1, s1), (r2, d2, s2) = interpret(old, x), interpret(new, x)
    for k in r1:
        np.testing.assert_allclose(r2[k], r1[k], rtol=1e-12, atol=1e-12 * np.abs(r1[k]).max())
    assert d1.keys() == d2.keys()
    for k in d1:
        np.testing.assert_allclose(d2[k], d1[k], rtol=1e-11, atol=1e-11 * np.max(np.abs(d1[k])) + 1e-300)


def test_a_model_without_bounds_is_left_as_it_is():
    """No bounds, no known sign: the pass returns the very model it was given."""
    from modelc.ir import Equation, Model, Parameter, Variable
    from modelc.runtime.types import Scalar

    y = Variable("state/y", Scalar)
    xv = Variable("forces/x", Scalar)
    m = Model("m", (xv,), (y,), (Parameter("E", Scalar, (1.0,)),),
              (Equation(y, (safe_sqrt(E ** 2 * xv.symbols[0] ** 2),)),))
    assert factor_positive(m) is m
