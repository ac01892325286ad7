"""Positive factors out of safe square roots and safe divisions, by the parameters' declared bounds.

A radial return writes its trial stress ``s = 2 G dev(E - old(Ep))`` and then ``norm(s)`` and
``safe_div(1, norm(s)) s``. Expanded to components, the norm is ``safe_sqrt(4 G^2 (x0^2 + ...))``
(``x = dev(E - old(Ep))``) and the chain rule through it carries ``G^2`` into every derivative
term, where the sums over the deviator's components (``2/3 x0 - 1/3 x1 - 1/3 x2`` = ``x0``, as
the deviator's trace is zero) stay separate products and never collect. With the factor out,
``norm(s) = 2 G safe_sqrt(x0^2 + ...)``, the derivative of the inner sum is a linear combination
of ``x``'s components that SymPy collects by itself into ``x0``'s (the same expression, which
``cse`` then shares), and ``safe_div(1, 2 G r) 2 G x`` is ``safe_div(1, r) x``: the expert's
``n = x / |x|``. perzyna_iso's program has 16% fewer operations.

The two rules, for ``c`` a product of factors each positive for every parameter value the bounds
allow (the runtime refuses any other value before a kernel runs; see
:meth:`modelc.runtime.model.CompiledModel._check_param_row`):

- ``safe_sqrt(c**2 q) = c safe_sqrt(q)`` (also ``c**k`` for any real ``k``: the factor's base is
  positive); the factors common to a sum's terms (:func:`_common`), with its rational content;
- ``safe_div(a, c r) = safe_div(a, r) / c``.

Both keep the safe functions' values everywhere (0 where the inner ``q`` or ``r`` is 0) and their
derivatives (``c safe_div(1, 2 safe_sqrt(q))`` is the chain rule of the original at ``q > 0``, and 0
at ``q = 0`` like it). Only scalar parameters with bounds count; a parameter without bounds, an
input or a state variable has no known sign, and nothing is pulled out because of it.
"""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
import math

import sympy as sp

from modelc.functions import safe_div, safe_sqrt
from modelc.ir import Model
from modelc.runtime.checks import Interval
from modelc.runtime.types import Scalar

__all__ = ["factor_positive", "positive", "simplify"]

# a symbol's range (lo, lo_open, hi, hi_open), floats; inside _range an interval carries exact ends
# (Fractions or +-inf: an infinite end is open), the largest magnitude summed into its lower end
# (see _MARGIN) and whether it is "clean" (see _positive)
_Range = tuple
#: a lower end above 0 counts only when it is at least this fraction of the magnitudes summed into it,
#: so that a kernel's rounding cannot take the factor to 0 (a float32 kernel's included): ``10 a - 1``
#: for ``a`` in ``[0.1, 1]`` is 5.6e-17 > 0 in exact arithmetic over the float 0.1, but 0 in the
#: float arithmetic a kernel does at a = 0.1 (a factor taken out of safe_div there would divide by
#: the 0 where the original gave 0)
_MARGIN = Fraction(1, 2 ** 16)


def factor_positive(model: Model) -> Model:
    """``model`` with positive factors taken out of its ``safe_sqrt`` and ``safe_div`` (see the
    module doc); the same model where there are none."""
    ranges = _parameter_ranges(model)
    if not ranges:
        return model
    memo: dict = {}
    return _model(model, lambda e: _rewrite(e, ranges, memo))


def simplify(e: sp.Expr, ranges: dict[sp.Symbol, _Range]) -> sp.Expr:
    """``e`` with the two rules applied everywhere in it, for symbols in ``ranges`` (a symbol's
    ``(lo, lo_open, hi, hi_open)``)."""
    return _rewrite(sp.sympify(e), ranges, {})


def positive(e: sp.Expr, ranges: dict[sp.Symbol, _Range]) -> bool:
    """Whether ``e`` is positive for every value of its symbols inside ``ranges`` (False when that
    is not known: a symbol without a range, or a form the interval arithmetic does not follow)."""
    return _positive(_range(sp.sympify(e), ranges))


def _positive(r) -> bool:
    """A lower end clear of 0 by the margin, or 0, not reached, and *clean*: approached without
    rounding, so that a kernel's float value is positive wherever the real one is (a symbol, a number
    times one, a sum of a number and one symbol times a power of two: the float sum of two floats is
    positive when the exact one is, as ``1 + nu`` for nu > -1; a sum, product or power of positive
    clean parts). ``3 a + b - 1`` for a > 0, b >= 1 also has lower end 0 not reached, but at a =
    1e-30, b = 1 the kernel's sum is 0. Underflow and overflow (values near 1e-308 or 1e308) are
    outside what this promises."""
    return r is not None and ((r[0] > 0 and r[0] >= _MARGIN * r[4]) or (r[0] == 0 and r[1] and r[5]))


def _exact_term(t) -> bool:
    """A symbol, or a power of two times one: a term the kernel computes without rounding."""
    if t.is_Symbol:
        return True
    if t.is_Mul and len(t.args) == 2 and t.args[0].is_Number and t.args[1].is_Symbol:
        c = abs(float(t.args[0]))
        return c != 0 and math.frexp(c)[0] == 0.5
    return False


def _parameter_ranges(model: Model) -> dict[sp.Symbol, _Range]:
    out: dict[sp.Symbol, _Range] = {}
    stack = [model]
    while stack:
        m = stack.pop()
        stack.extend(m.submodels)
        for p in m.parameters:
            if p.type is not Scalar or not p.bounds:
                continue
            iv = Interval.parse(p.bounds)
            out[p.symbols[0]] = (iv.lo, not iv.lo_closed, iv.hi, not iv.hi_closed)
    return out


def _range(e, ranges) -> _Range | None:
    """The interval of ``e``'s values over ``ranges`` (with the scale and cleanness of its lower end,
    see :func:`_positive`), in exact rational arithmetic over the doubles the kernels use (a bound's
    and a number's double value: 1/3 is 0.333...3148): ``Fraction`` ends, or +-inf. A float interval
    rounds its ends (a lower end rounded up past 0 looked positive) and overflowed (a bound of 1e300
    squared: a traceback instead of an answer). Powers with a non-integer exponent go through float
    ``**``, their ends moved outward by two ulps (toward 0 at worst, never across it)."""
    if e.is_Number:
        if not e.is_real or not e.is_finite:
            return None
        v = Fraction(float(e))  # the number the kernels compute with (1/3 as a double)
        return (v, False, v, False, abs(v), True)
    if e.is_Symbol:
        r = ranges.get(e)
        return None if r is None else _end_scale((_exact(r[0]), r[1], _exact(r[2]), r[3]), True)
    if e.is_Add:
        acc: _Range = (Fraction(0), False, Fraction(0), False, Fraction(0), True)
        parts = []
        for t in e.args:
            r = _range(t, ranges)
            if r is None:
                return None
            parts.append(r)
            lo, hi = _plus(acc[0], r[0]), _plus(acc[2], r[2])
            if lo is None or hi is None:
                return None
            acc = (lo, acc[1] or r[1], hi, acc[3] or r[3], max(acc[4], r[4]), True)
        two = len(e.args) == 2 and any(t.is_Number for t in e.args) and any(_exact_term(t) for t in e.args)
        clean = two or all(_positive(r) for r in parts)
        return (*acc[:5], clean)
    if e.is_Mul:
        acc = (Fraction(1), False, Fraction(1), False, Fraction(1), True)
        for f in e.args:
            r = _range(f, ranges)
            if r is None:
                return None
            acc = _times(acc, r)
            if acc is None:
                return None
        return acc
    if e.is_Pow and e.exp.is_Number and e.exp.is_real:
        b = _range(e.base, ranges)
        if not _positive(b):
            return None
        if e.exp > 0:
            lo, hi = _power(b[0], e.exp, down=True), _power(b[2], e.exp, down=False)
            return (lo, b[1], hi, b[3], _power(max(b[0], b[4]), e.exp, down=False), True)
        lo, hi = _power(b[2], e.exp, down=True), _power(b[0], e.exp, down=False)
        return _end_scale((lo, b[3], hi, b[1]), True)
    return None


def _end_scale(r, clean: bool) -> _Range:
    """``r`` with its lower end's own magnitude as the scale (no sum behind it), and ``clean``."""
    return (*r, Fraction(0) if isinstance(r[0], float) else abs(r[0]), clean)


def _exact(v: float):
    """A bound as an interval end: the float's exact value, or +-inf."""
    return v if math.isinf(v) else Fraction(v)


def _plus(x, y):
    """Two lower ends (or two upper ends) added; None for inf + (-inf)."""
    if isinstance(x, float) or isinstance(y, float):  # an infinite end
        if isinstance(x, float) and isinstance(y, float) and x != y:
            return None
        return x if isinstance(x, float) else y
    return x + y


def _product(x, y):
    """Two interval ends multiplied (0 times inf is 0: an end at 0 is attained as 0)."""
    if x == 0 or y == 0:
        return Fraction(0)
    if isinstance(x, float) or isinstance(y, float):
        return math.inf if (x > 0) == (y > 0) else -math.inf
    return x * y


def _power(x, k, down: bool):
    """``x ** k`` for an end ``x >= 0`` of a positive base: exact for an integer ``k``; otherwise
    float ``**`` with the result moved two ulps down (``down``) or up; 0 ** k for k < 0 and
    inf ** k for k > 0 are inf, inf ** k for k < 0 is 0."""
    if isinstance(x, float) or x == 0:
        big = isinstance(x, float)
        return math.inf if big == (k > 0) else Fraction(0)
    if k.is_Integer:
        return x ** int(k)
    try:
        v = float(x) ** float(k)
    except OverflowError:
        v = math.inf
    for _ in range(2):
        v = math.nextafter(v, 0.0 if down else math.inf)
    return v if math.isinf(v) else Fraction(v)


def _times(a: _Range, b: _Range) -> _Range | None:
    """The product of two intervals, where one is a point (a number) or both are nonnegative."""
    for x, y in ((a, b), (b, a)):
        if x[0] == x[2] and not x[1] and not x[3]:  # a number
            c = x[0]
            if c == 0:
                return (Fraction(0), False, Fraction(0), False, Fraction(0), True)
            if c > 0:
                return (_product(y[0], c), y[1], _product(y[2], c), y[3], _product(y[4], c), y[5])
            return _end_scale((_product(y[2], c), y[3], _product(y[0], c), y[1]), False)
    if a[0] >= 0 and b[0] >= 0:
        # the lower end is reached where both factors reach theirs, or where either reaches 0
        reached0 = (a[0] == 0 and not a[1]) or (b[0] == 0 and not b[1])
        return (_product(a[0], b[0]), (a[1] or b[1]) and not reached0, _product(a[2], b[2]), a[3] or b[3],
                _product(max(a[0], a[4]), max(b[0], b[4])), _positive(a) and _positive(b))
    return None


def _rewrite(e, ranges, memo):
    if e.is_Atom or not e.args:
        return e
    out = memo.get(e)
    if out is not None:
        return out
    args = tuple(_rewrite(a, ranges, memo) for a in e.args)
    out = e.func(*args) if args != e.args else e
    if isinstance(out, safe_sqrt):
        out = _sqrt(out.args[0], ranges)
    elif isinstance(out, safe_div):
        out = _div(*out.args, ranges)
    memo[e] = out
    return out


def _sqrt(x, ranges):
    """``safe_sqrt(x)`` with the positive factors common to the terms of ``x`` outside:
    ``c**(k/2)`` for each positive ``c**k``, and the root of the terms' common rational factor.
    The factors keep the form they have in ``x`` (``2*nu + 2`` stays that, not ``2*(nu + 1)``), so
    they cancel against the same factors elsewhere (the tensor whose norm this is)."""
    terms = sp.Add.make_args(x)
    common = _common(terms, ranges)
    content = sp.Integer(1)
    if x.is_Add:
        content, _ = x.primitive()
    elif terms[0].is_Mul and terms[0].args[0].is_Rational and terms[0].args[0] > 0:
        content = terms[0].args[0]
    if not common and content == 1:
        return safe_sqrt(x)
    c = content * sp.Mul(*[sp.Pow(b, k) for b, k in common.items()])
    inside = sp.Add(*[t / c for t in terms])
    return sp.sqrt(content) * sp.Mul(*[sp.Pow(b, k / 2) for b, k in common.items()]) * safe_sqrt(inside)


def _common(terms, ranges) -> dict:
    """``{base: exponent}`` of the powers of positive bases that every term has as a factor (the
    smallest exponent when all are positive, the largest when all are negative)."""
    maps = []
    for t in terms:
        d: dict = {}
        for f in sp.Mul.make_args(t):
            if f.is_Number:
                continue
            b, k = f.as_base_exp()
            if k.is_Number and k.is_real:
                d[b] = d.get(b, 0) + k
        maps.append(d)
    out = {}
    for b in maps[0]:
        ks = [m.get(b) for m in maps]
        if any(k is None for k in ks) or not positive(b, ranges):
            continue
        if all(k > 0 for k in ks):
            out[b] = min(ks)
        elif all(k < 0 for k in ks):
            out[b] = max(ks)
    return out


def _div(a, b, ranges):
    """``safe_div(a, b)`` with the positive factors of ``b`` divided out."""
    pos, rest = [], []
    for f in sp.Mul.make_args(b):
        (pos if positive(f, ranges) else rest).append(f)
    if not pos:
        return safe_div(a, b)
    return safe_div(a, sp.Mul(*rest)) / sp.Mul(*pos)


def _model(m: Model, f) -> Model:
    def eqs(equations):
        return tuple(replace(q, components=tuple(f(sp.sympify(c)) for c in q.components)) for q in equations)

    implicit = m.implicit
    if implicit is not None:
        implicit = replace(implicit, residuals=eqs(implicit.residuals), guess=eqs(implicit.guess))
    new = replace(m, equations=eqs(m.equations), implicit=implicit,
                  submodels=tuple(_model(s, f) for s in m.submodels), initial=eqs(m.initial))
    return m if new == m else new
