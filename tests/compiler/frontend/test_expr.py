"""modelc.frontend.expr on its own: the whitelist of ``parse`` (each refused construct a located error
with its caret), error locations in characters on the right line, exact SymPy literals, the strict and
non-strict selections of where/if-else, diff of a Scalar, old() through the scope's hook, helper
expansion (memoised, arity, recursion), name and call errors with their hints, ``did_you_mean`` and
the Markdown tables."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from fe_util import caret
from modelc.errors import SpecError
from modelc.frontend.expr import (BUILTINS, CONSTANTS, SPECIAL, Binding, Helper, Scope, Source, build_expr,
                                  did_you_mean, markdown, parse)
from modelc.frontend.tensor import TValue
from modelc.ir import Loc, Variable, component_symbols
from modelc.runtime.types import SR2, Scalar

X, Y, P = sp.Symbol("forces/x", real=True), sp.Symbol("forces/y", real=True), sp.Symbol("$E", real=True)
ES = component_symbols("forces/e", SR2)


def _scope() -> Scope:
    """x, y: Scalar inputs; e: an SR2 input; E: a parameter; out: an output; k: a define."""
    s = Scope()
    s.names["x"] = Binding("input", TValue.scalar(X), Variable("forces/x", Scalar))
    s.names["y"] = Binding("input", TValue.scalar(Y), Variable("forces/y", Scalar))
    s.names["e"] = Binding("input", TValue(SR2, ES), Variable("forces/e", SR2))
    s.names["E"] = Binding("parameter", TValue.scalar(P))
    s.names["out"] = Binding("output", TValue.scalar(sp.Symbol("state/out", real=True)),
                             Variable("state/out", Scalar))
    s.names["k"] = Binding("define", TValue.scalar(2 * X))
    return s


def _build(text: str, scope: Scope | None = None, loc: Loc | None = None) -> TValue:
    return build_expr(text, loc or Loc("f.yaml", 3, 7, text.split("\n")[0]), scope or _scope())


def _error(text: str, scope: Scope | None = None) -> SpecError:
    with pytest.raises(SpecError) as info:
        _build(text, scope)
    return info.value


@pytest.mark.parametrize("text, message, under, hint", [
    ("x % 2", "operator Mod is not allowed in expressions", "x % 2", ""),
    ("x // 2", "operator FloorDiv is not allowed in expressions", "x // 2", "use / for division"),
    ("e @ e", "operator MatMult is not allowed in expressions", "e @ e", "use ddot(A, B) or dot(A, B)"),
    ("not x", "operator Not is not allowed in expressions", "not x", ""),
    ("x == y", "comparison Eq is not allowed; use >, >=, < or <=", "x == y", ""),
    ("x and y", "'and'/'or' is not allowed in expressions", "x and y", ""),
    ("0 < x < 1", "chained comparisons are not allowed; nest where() instead", "0 < x < 1", ""),
    ("e[0:2]", "a slice is not allowed in expressions", "0:2", ""),
    ("exp(*x)", "'*' unpacking is not allowed in expressions", "*x", ""),
    ("(z := 1)", "':=' is not allowed in expressions", "z := 1", ""),
    ("x + True", "bool constants are not allowed in expressions (only numbers)", "True", ""),
    ("2j * x", "complex constants are not allowed in expressions (only numbers)", "2j", ""),
    ("x * 1e400", "this number is beyond the largest float64 (1.79769e+308)", "1e400", ""),
    ("x + __class__", "name '__class__' is not allowed in expressions", "__class__", ""),
    ("x +", "invalid expression syntax (invalid syntax)", None, ""),
    ("  ", "empty expression", None, ""),
])
def test_parse_refuses_what_is_not_whitelisted(text, message, under, hint):
    with pytest.raises(SpecError) as info:
        parse(Source(text, Loc("f.yaml", 3, 7, text)))
    err = info.value
    assert err.message == message and err.hint == hint
    assert (err.loc.file, err.loc.line, err.loc.col) == ("f.yaml", 3, 7)
    if under is not None:
        assert caret(err) == under


def test_error_positions_are_characters_on_the_offending_line():
    s = _scope()
    s.names["αβ"] = Binding("input", TValue.scalar(Y), Variable("forces/y", Scalar))
    text = "αβ + undefined"  # two 2-byte characters before the culprit: the caret counts characters
    err = _error(text, s)
    assert err.message == "undefined name 'undefined'"
    assert err.span == (5, 14) and caret(err) == "undefined"
    assert (err.loc.line, err.loc.col, err.loc.text) == (3, 7, text)
    # a multi-line expression: the error is on the expression's second line, from its column 1
    with pytest.raises(SpecError) as info:
        build_expr("x +\n  αβ * nope", Loc("f.yaml", 10, 9, "x +"), s)
    err = info.value
    assert (err.loc.line, err.loc.col, err.loc.text) == (11, 1, "  αβ * nope")
    assert err.span == (7, 11) and caret(err) == "nope"


def test_float_literals_are_the_float64_they_spell():
    """Every float literal is the float64 Python reads from its text, as the printers will write it
    (float(evalf(30))): fresh random 17-digit literals, of which about 1 in 1500 came out an ulp off
    when the literal's repr was read at 56 bits and rounded again."""
    rng = np.random.default_rng()
    for v in rng.uniform(-1e3, 1e3, 3000).tolist() + [457.8552835376573]:
        assert float(_build(repr(v)).expr.evalf(30)) == v


def test_literals_are_exact_sympy_numbers():
    assert _build("1/3").expr == sp.Rational(1, 3)            # integer division stays exact
    assert _build("2**-1").expr == sp.Rational(1, 2)
    assert _build("3").expr == sp.Integer(3) and _build("3").expr.is_Integer
    v = _build("0.1").expr
    assert v.is_Float and v == sp.Float("0.1")                   # from the decimal text
    assert _build("pi/2").expr == sp.pi / 2
    assert _build("-x + +y").expr == Y - X
    assert _build("E*x**2").expr == P * X**2


@pytest.mark.parametrize("cond, sel", [
    # x, y = (2, 1), (1, 2), (1, 1): which branch; equality picks the first one only when non-strict
    ("x > y", ("a", "b", "b")), ("x >= y", ("a", "b", "a")),
    ("x < y", ("b", "a", "b")), ("x <= y", ("b", "a", "a")),
])
def test_where_and_if_else_select_strictly_or_not(cond, sel):
    for text in (f"where({cond}, 10, 20)", f"10 if {cond} else 20"):
        v = _build(text)
        assert v.type is Scalar
        for (xv, yv), s in zip(((2, 1), (1, 2), (1, 1)), sel):
            assert v.expr.xreplace({X: xv, Y: yv}) == (10 if s == "a" else 20), (text, xv, yv)
    # a tensor selection acts component-wise, with one condition
    t = _build(f"where({cond}, e, 3*e)")
    assert t.type is SR2
    for (xv, yv), s in zip(((2, 1), (1, 2), (1, 1)), sel):
        assert [c.xreplace({X: xv, Y: yv}) for c in t.comps] == [c * (1 if s == "a" else 3) for c in ES]


def test_diff_of_a_scalar_is_its_closed_form():
    assert sp.simplify(_build("diff(E*x**3 + y, x)").expr - 3 * P * X**2) == 0
    assert sp.simplify(_build("diff(E*x**3 + y, E)").expr - X**3) == 0  # w.r.t. a parameter
    assert _build("diff(y, x)").expr == 0
    g = _build("diff(ddot(e, e), e)")  # the Mandel gradient of e:e is 2e
    assert g.type is SR2 and all(sp.expand(a - 2 * b) == 0 for a, b in zip(g.comps, ES))
    err = _error("diff(x, out)")
    assert "'out' is an output of this model" in err.message and caret(err) == "out"
    err = _error("diff(x, pi)")
    assert err.message.startswith("diff(f, x) differentiates w.r.t. a variable or a named define; 'pi'")


def test_old_goes_through_the_scopes_hook():
    s, seen = _scope(), []

    def old(b: Binding) -> TValue:
        seen.append(b.var.name)
        return b.value.map(lambda c: sp.Symbol("old_" + c.name, real=True))

    s.old = old
    assert _build("x - old(x)", s).expr == X - sp.Symbol("old_forces/x", real=True)
    assert _build("old(out)", s).expr == sp.Symbol("old_state/out", real=True)  # an output's old value is readable
    assert seen == ["forces/x", "state/out"]
    err = _error("old(E)", s)
    assert err.message == "old() takes a variable (an input, output or unknown), 'E' is a parameter"
    assert caret(err) == "E"
    assert _error("old(2*x)", s).message == "old()'s argument must be the name of a variable"
    err = _error("old(x)")  # no hook: the scope has no previous values
    assert err.message == "old(x) takes a variable of the model (an input, output or unknown)"


def _helper(name: str, params: tuple[str, ...], body: str) -> Helper:
    src = Source(body, Loc("f.yaml", 1, 10, body))
    return Helper(name, params, parse(src), src)


def test_helpers_bind_their_arguments_and_expand_once_per_call():
    s = _scope()
    s.helpers["f"] = _helper("f", ("a", "b"), "a*b + 1")
    assert sp.expand(_build("f(x, 2) + f(x, 2) + f(y, 2)", s).expr - (2 * (2 * X + 1) + 2 * Y + 1)) == 0
    assert len(s.expanded) == 2  # f(x, 2) once, f(y, 2) once
    err = _error("f(x)", s)
    assert err.message == "f() takes 2 arguments (a, b), got 1" and caret(err) == "f(x)"
    s.helpers["g"] = _helper("g", ("a",), "h(a)")
    s.helpers["h"] = _helper("h", ("a",), "g(a) + 1")
    err = _error("g(x)", s)
    assert err.message == "helper g() calls itself (g -> h -> g): recursion is not supported"
    assert "'out' is an output of this model" in _error("f(out, 1)", s).message


@pytest.mark.parametrize("text, message, under, hint", [
    ("exp + 1", "'exp' is a function; call it as exp(...)", "exp", ""),
    ("xx * 2", "undefined name 'xx'", "xx", "did you mean 'x'?"),
    ("qwerty", "undefined name 'qwerty'", "qwerty", "declare it as an input, parameter or define entry"),
    ("expp(x)", "unknown function 'expp'", "expp", "did you mean 'exp'?"),
    ("where(x > 0, 1)", "where() takes 3 arguments, got 2", "where(x > 0, 1)", "usage: where(cond, a, b)"),
    ("exp(x, y)", "exp() takes 1 argument, got 2", "exp(x, y)", ""),
    ("(x, y)", "a tuple is not a value", "(x, y)", ""),
    ("x > y", "a comparison is only allowed as the condition of where(cond, a, b)", "x > y", ""),
    ("where(e > 0, 1, 2)", "a comparison needs Scalars, got SR2", "e", ""),
    ("e[0, 1]", "an index must be a letter (Einstein notation), e.g. eps[i,j]", "0", ""),
    ("e[i,j] / e", "cannot divide by a SR2: the divisor must be a Scalar", "e", ""),
    ("e[i,j] * e", "cannot multiply an index expression by a tensor without indices", "e",
     "index both operands, e.g. C[i,j,k,l]*e[k,l]"),
    ("out + 1", "'out' is an output of this model: its equation defines it, so it has no value to read here",
     "out", "old(out) is its value at the previous step; to reuse its expression, name it under 'define:'"),
])
def test_name_and_call_errors_are_located_with_their_hints(text, message, under, hint):
    err = _error(text)
    assert err.message == message and err.hint == hint
    assert caret(err) == under
    assert err.span == (text.rindex(under), text.rindex(under) + len(under))  # the last one, where repeated
    assert str(err).startswith("f.yaml:3:7: error: ")


def test_did_you_mean():
    assert did_you_mean("e", {"E", "eps", "x"}) == "did you mean 'E'?"   # same letters, other case first
    assert did_you_mean("sigma_y", {"sigma_Y", "sigma_y0"}) == "did you mean 'sigma_Y'?"
    assert did_you_mean("sigmay", {"sigma_y", "x"}) == "did you mean 'sigma_y'?"
    assert did_you_mean("zzz", {"sigma_y", "x"}) == ""
    assert did_you_mean("a", set()) == ""


def test_markdown_lists_every_builtin_special_form_and_constant():
    md = markdown()
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(rows) == len(BUILTINS) + len(SPECIAL) + len(CONSTANTS)
    assert "| `exp` | 1 | exponential (Scalar) |" in rows
    assert ("| `ddot` | 2 | double contraction: SR2:SR2, R2:R2 (Scalar), SSR4:SR2, SR2:SSR4 (SR2), "
            "SSR4:SSR4 (SSR4) |") in rows
    assert "| `pi` | the number pi |" in rows
    # a '|' in a doc would split the cell: it is escaped
    abs_row = next(r for r in rows if r.startswith("| `abs` |"))
    assert abs_row.startswith("| `abs` | 1 | &#124;x&#124;;") and abs_row.count("|") == 4
    assert md.index("| special form | meaning |") < md.index("| constant | meaning |")


# --------------------------------------------------------------------------------------------------
# interp: a piecewise-linear table


def _interp_fn(knots, values):
    """The value and derivative of interp over those (float) knots and values, evaluated exactly at a
    float64 x (SymPy, every digit: lambdify would print the knots with 15)."""
    text = f"interp(x, [{', '.join(map(repr, knots))}], [{', '.join(map(repr, values))}])"
    expr = _build(text).expr
    dexpr = sp.diff(expr, X)
    return (lambda x: float(expr.subs(X, sp.Float(x, 53)))), (lambda x: float(dexpr.subs(X, sp.Float(x, 53))))


def test_interp_is_numpys_interp_on_fresh_random_tables():
    """Values against numpy.interp (the independent oracle) below, inside, at and above the knots of
    random tables; the derivative against the right-hand slope of the segment that holds x (0 outside
    [x0, x_n)), so at a knot it is one segment's slope, never two summed."""
    rng = np.random.default_rng()
    for _ in range(20):
        n = int(rng.integers(2, 7))
        knots = np.cumsum(rng.uniform(0.1, 100.0, n)) + rng.uniform(-500, 500)
        values = rng.normal(0, 1e3, n)
        f, df = _interp_fn(knots.tolist(), values.tolist())
        xs = np.concatenate([knots, rng.uniform(knots[0] - 50, knots[-1] + 50, 40), [knots[0] - 1e-3]])
        want = np.interp(xs, knots, values)
        got = np.array([float(f(x)) for x in xs])
        slopes = np.diff(values) / np.diff(knots)
        seg = np.searchsorted(knots, xs, side="right") - 1  # x in [x_seg, x_seg+1)
        inside = (seg >= 0) & (seg < n - 1)
        want_d = np.where(inside, slopes[np.clip(seg, 0, n - 2)], 0.0)
        # numpy's roundings: of the values, and of x - x_i (relative to |x|) carried by the slope
        bound = 4 * 2.0 ** -53 * (np.abs(values).max() + np.abs(want_d) * 2 * np.abs(xs))
        err = np.abs(got - want)
        assert np.all(err <= bound), (err / bound).max()
        assert np.all(got[:n] == values) and np.all(got[xs < knots[0]] == values[0])  # the table exactly
        got_d = np.array([float(df(x)) for x in xs])
        np.testing.assert_allclose(got_d, want_d, rtol=1e-14, atol=0)


def test_interp_values_may_be_parameters_and_differentiate_to_hat_functions():
    expr = _build("interp(x, [0, 1, 3], [E, 2*E, 0])").expr
    hat = sp.diff(expr, P)  # d/dE of y0 hat0 + y1 hat1 with y0 = E, y1 = 2 E
    for x, want in ((-1.0, 1.0), (0.0, 1.0), (0.5, 1.5), (1.0, 2.0), (2.0, 1.0), (3.0, 0.0), (9.0, 0.0)):
        assert float(hat.subs(X, x)) == want
    assert float(expr.subs({X: 0.25, P: 4.0})) == 5.0


@pytest.mark.parametrize("text, message, under, hint", [
    ("interp(x, [1], [2])", "interp needs at least 2 knots, got 1", "[1]", ""),
    ("interp(x, [1, 2], [2])", "interp has 1 values for 2 knots", "[2]", "one value per knot"),
    ("interp(x, [0, 2, 2], [1, 2, 3])", "interp's knots must increase strictly: 2 follows 2", "2", ""),
    ("interp(x, [-1e308, 1e308], [1, 2])", "interp's knots -1e+308 and 1e+308 are further apart than the "
     "largest float64", "1e308", ""),
    ("interp(x, [0, y], [1, 2])", "an interp knot must be a number", "y",
     "knots are fixed when the spec loads, so that their order is checked; the values may be parameters"),
    ("interp(x, 1, [1, 2])", "interp's knots must be a list [a, b, ...]", "1",
     "interp(x, [x0, x1, ...], [y0, y1, ...])"),
    ("interp(e, [0, 1], [1, 2])", "interp(x, knots, values) needs a Scalar x, got SR2", "e", ""),
    ("interp(x, [0, 1], [1, e])", "an interp value must be a Scalar, got SR2", "e", ""),
    ("x + [1, 2][0]", "a list is not allowed in expressions", "[1, 2]",
     "a list is only interp's knots or values: interp(x, [x0, x1], [y0, y1])"),
])
def test_interp_errors_are_located(text, message, under, hint):
    err = _error(text)
    assert err.message == message and err.hint == hint
    assert caret(err) == under


def test_nested_interp_is_a_table_in_two_variables():
    """A yield stress table in the plastic strain at two temperatures (Abaqus' *PLASTIC with a
    temperature column) is interp over y of interps over x: against numpy.interp done the same
    way, at random points inside and outside both ranges."""
    rng = np.random.default_rng()
    xs, ys = [0.0, 0.01, 0.05, 0.2], [293.0, 773.0]
    table = rng.uniform(100.0, 400.0, (2, 4))
    rows = [f"interp(x, {xs}, {[float(v) for v in table[k]]})" for k in range(2)]
    expr = _build(f"interp(y, {ys}, [{rows[0]}, {rows[1]}])").expr
    for x, y in zip(rng.uniform(-0.05, 0.3, 30), rng.uniform(200.0, 900.0, 30)):
        inner = [np.interp(x, xs, table[k]) for k in range(2)]
        want = np.interp(y, ys, inner)
        got = float(expr.subs({X: sp.Float(x, 53), Y: sp.Float(y, 53)}))
        assert abs(got - want) <= 1e-12 * abs(want)


def test_interp_knots_may_be_constant_expressions():
    expr = _build("interp(x, [-1, 2**3, 4*pi], [1, 10, 0])").expr
    assert float(expr.subs(X, 3.5)) == 5.5 and float(expr.subs(X, 20.0)) == 0.0
