"""The custom (non-smooth and special) scalar functions of modelc, declared once each.

Every entry of :data:`FUNCTIONS` carries, on adjacent lines: the SymPy ``Function`` subclass with an
explicit derivative (``fdiff``), the number of arguments, its value and derivative at the kink
(``kink_doc``), its PyTorch, Triton and C spellings (``str.format`` templates over the printed
arguments ``{0}``, ``{1}``, ...), and a NumPy reference implementation (``numpy``, for tests and
``lambdify``). The printers take the spellings from here; nothing else knows these functions.

Conventions (the derivation is the point of the table):

- No derivative ever produces ``DiracDelta``: the derivative of a step (``heaviside``, ``sign``) is 0
  by rule; ``abs'`` is ``sign``; ``macaulay'`` is ``heaviside``.
- ``heaviside(0) = 0``; ``sign(0) = 0``; ``macaulay'(0) = heaviside(0) = 0``; ``abs'(0) = 0``.
- ``max(a, b)`` at a tie ``a == b`` differentiates as its FIRST argument (d/da = 1, d/db = 0);
  ``min(a, b)`` likewise takes the first argument at a tie.
- ``safe_sqrt(x) = sqrt(max(x, 0))`` with derivative ``safe_div(1, 2 safe_sqrt(x))``: 0 for x <= 0.
- ``safe_div(a, b) = a / b`` for ``b != 0`` and 0 for ``b == 0``, derivatives ``safe_div(1, b)`` and
  ``-safe_div(a, b**2)``: 0 at ``b == 0``. Used by ``norm`` and the J2 flow direction so that
  ``dev(s) / |dev(s)|`` at ``s = 0`` is 0 (and its derivative 0) instead of NaN. The printed form
  guards the denominator with a second ``where`` so no inf/NaN is ever formed, even in the branch
  that is discarded.
- ``ifpos(d, a, b)`` is ``a`` if ``d > 0`` else ``b``; ``ifnonneg(d, a, b)`` is ``a`` if ``d >= 0``
  else ``b`` (comparisons ``x > y`` etc. in spec conditionals become these with ``d = x - y``). Their
  derivatives w.r.t. ``a``/``b`` are steps (never with two numeric branches: those fold to steps).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import sympy as sp


class _LazyNumpy:
    """numpy, imported on first use: the reference implementations (``FunctionRule.numpy``) run in
    tests and ``lambdify`` only, and compiling a model should not pay numpy's import (~0.1 s of
    every cold ``modelc compile``)."""

    def __getattr__(self, name: str):
        import numpy

        return getattr(numpy, name)


np = _LazyNumpy()


def _np(name: str) -> Callable:
    """numpy's function ``name``, looked up at the call."""
    def call(*args, **kwargs):
        return getattr(np, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = f"numpy.{name}"
    return call


_ZERO = sp.S.Zero
_ONE = sp.S.One


def _num(x) -> bool:
    return isinstance(x, sp.Number)


class _RealFunction(sp.Function):
    """Base of modelc's custom functions: real-valued, folded on numeric arguments. On constant
    arguments that do not fold (``abs_(pi)``, ``safe_sqrt(sqrt(2) - 1)``) ``evalf`` runs the
    function's reference implementation (:data:`FUNCTIONS`, double precision), so a printer can
    write the constant as a number."""

    is_real = True
    is_extended_real = True
    is_finite = True

    def _eval_evalf(self, prec):
        args = [a.evalf(prec) for a in self.args]
        rule = FUNCTIONS.get(type(self).__name__)
        if rule is None or not all(a.is_Number for a in args):
            return None
        with np.errstate(all="ignore"):
            value = float(rule.numpy(*(float(a) for a in args)))
        return sp.Float(value, precision=prec) if value == value else sp.nan


class heaviside(_RealFunction):
    """H(x) = 1 for x > 0, 0 for x <= 0 (H(0) = 0). H' = 0 (never DiracDelta)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if _num(x):
            return _ONE if x > 0 else _ZERO
        if x.is_positive:
            return _ONE
        if x.is_nonpositive:
            return _ZERO
        return None

    def fdiff(self, argindex=1):
        return _ZERO


class sign(_RealFunction):
    """sign(x) in {-1, 0, 1}, sign(0) = 0; sign' = 0 (never DiracDelta)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if _num(x):
            return sp.Integer(int(bool(x > 0)) - int(bool(x < 0)))
        return None

    def fdiff(self, argindex=1):
        return _ZERO


class abs_(_RealFunction):
    """|x|; derivative sign(x) (0 at x = 0)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if _num(x):
            return abs(x)
        return None

    def fdiff(self, argindex=1):
        return sign(self.args[0])


class macaulay(_RealFunction):
    """<x> = max(x, 0); derivative heaviside(x) (0 at x = 0)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if _num(x):
            return x if x > 0 else _ZERO
        if x.is_nonnegative:
            return x
        if x.is_nonpositive:
            return _ZERO
        return None

    def fdiff(self, argindex=1):
        return heaviside(self.args[0])


class max_(_RealFunction):
    """max(a, b); at a tie the derivative follows the first argument: d/da = 1 - H(b - a)."""

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if _num(a) and _num(b):
            return a if a >= b else b
        if a == b:
            return a
        return None

    def fdiff(self, argindex=1):
        a, b = self.args
        return _ONE - heaviside(b - a) if argindex == 1 else heaviside(b - a)


class min_(_RealFunction):
    """min(a, b); at a tie the derivative follows the first argument: d/da = 1 - H(a - b)."""

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if _num(a) and _num(b):
            return a if a <= b else b
        if a == b:
            return a
        return None

    def fdiff(self, argindex=1):
        a, b = self.args
        return _ONE - heaviside(a - b) if argindex == 1 else heaviside(a - b)


class safe_div(_RealFunction):
    """a / b for b != 0, 0 for b == 0; derivatives safe_div(1, b) and -safe_div(a, b**2)."""

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if a == _ZERO or b == _ZERO:
            return _ZERO
        if _num(b) or b.is_nonzero:
            return a / b
        return None

    def fdiff(self, argindex=1):
        a, b = self.args
        return safe_div(_ONE, b) if argindex == 1 else -safe_div(a, b**2)


class safe_sqrt(_RealFunction):
    """sqrt(max(x, 0)); derivative safe_div(1, 2 safe_sqrt(x)): 0 for x <= 0 (no inf at 0)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if _num(x):
            return sp.sqrt(x) if x > 0 else _ZERO
        if x.is_positive:
            return sp.sqrt(x)
        return None

    def fdiff(self, argindex=1):
        return safe_div(_ONE, 2 * safe_sqrt(self.args[0]))


def _fold_select(d, a, b, step):
    if _num(d) and d is not sp.nan:
        return a if step(d) else b
    if getattr(d, "is_number", False):  # a constant condition (sqrt(2)**x's derivative guards on
        # sqrt(2) > 0): decided on its float64 value, as the printers evaluate every constant;
        # left as a where(), the PyTorch code's condition was a Python bool (TypeError)
        try:
            value = complex(d.evalf(30))
        except TypeError:  # no numeric value (abs_ of a complex constant)
            value = complex(math.nan)
        if value.imag == 0 and not math.isnan(value.real):
            return a if step(value.real) else b
        return None  # a complex or undefined constant (log(-2)) decides nothing: it stays, and the
        # frontend's check or the printer refuses it by name, never a TypeError from float()
    if a == b:
        return a
    if _num(a) and _num(b):  # no where() with two constant branches: a step instead
        h = heaviside(d) if step is _pos else _ONE - heaviside(-d)
        return b + (a - b) * h
    return None


def _pos(d) -> bool:
    return bool(d > 0)


def _nonneg(d) -> bool:
    return bool(d >= 0)


class ifpos(_RealFunction):
    """a if d > 0 else b. d/dd = 0, d/da = H(d), d/db = 1 - H(d)."""

    nargs = 3

    @classmethod
    def eval(cls, d, a, b):
        return _fold_select(d, a, b, _pos)

    def fdiff(self, argindex=1):
        d = self.args[0]
        return (_ZERO, heaviside(d), _ONE - heaviside(d))[argindex - 1]


class ifnonneg(_RealFunction):
    """a if d >= 0 else b. d/dd = 0, d/da = 1 - H(-d), d/db = H(-d)."""

    nargs = 3

    @classmethod
    def eval(cls, d, a, b):
        return _fold_select(d, a, b, _nonneg)

    def fdiff(self, argindex=1):
        d = self.args[0]
        return (_ZERO, _ONE - heaviside(-d), heaviside(-d))[argindex - 1]


class ifzero(_RealFunction):
    """a if g == 0 else b (b where g is NaN). d/dg = 0, d/da = ifzero(g, 1, 0), d/db = ifzero(g, 0, 1).

    Internal: :mod:`modelc.passes.gates` writes ``ifzero(g, 0, r)`` for each reciprocal ``r`` of a
    norm in a product of a gate ``g`` (``macaulay(f)``, ``heaviside(f)``, a Newton unknown) and a
    factor that overflows as the norm goes to 0 (``x x / |x|**3``): where the gate is exactly 0 the
    product is 0 in exact arithmetic, but ``0 * inf`` is NaN in floating point. It appears after
    differentiation only."""

    nargs = 3

    @classmethod
    def eval(cls, g, a, b):
        if _num(g):
            return a if g == 0 else b
        if a == b:
            return a
        return None

    def fdiff(self, argindex=1):
        g = self.args[0]
        return (_ZERO, ifzero(g, _ONE, _ZERO), ifzero(g, _ZERO, _ONE))[argindex - 1]


class powr(_RealFunction):
    """a**b for a non-integer (or symbolic) exponent b, with a >= 0.

    SymPy differentiates ``Pow(a, b)`` as ``b*a**b*a'/a``, which is 0/0 = NaN at a = 0 (e.g. the
    Perzyna rate (<f>/eta)**n in the elastic range). Here d/da = b*powr(a, b - 1) (0 at a = 0 for
    b > 1) and d/db = powr(a, b)*log(a) for a > 0, 0 at a = 0 (the limit for b > 0).
    """

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if b.is_Integer:
            return a**b
        if a == _ZERO and (b.is_positive or (_num(b) and b > 0)):
            return _ZERO
        if _num(a) and _num(b) and a >= 0:
            return a**b
        return None

    def fdiff(self, argindex=1):
        a, b = self.args
        if argindex == 1:
            return b * powr(a, b - 1)
        return ifpos(a, powr(a, b) * sp.log(a), _ZERO)


class powr_shift(_RealFunction):
    """``powr(a, e)`` computed from ``P = powr(a, e + 1)`` as ``P / a`` (``a != 0``); at ``a = 0``
    the value of ``powr(0, e)``: 0 for e > 0, 1 for e = 0, inf for e < 0 (NaN for a NaN e).

    Internal: :mod:`modelc.passes.cse` writes it where an expression needs both powers of one base
    with exponents one apart (a power law and its derivative, ``y**n`` and ``n*y**(n - 1)``), so
    the two cost one exp and one log and a division instead of two exps. It appears after
    differentiation only; as a function of three arguments its derivatives are those of P / a
    (d/dP = 1/a, d/da = -P/a**2, d/de = 0; 0 at a = 0 by safe_div). The division adds one
    rounding to the power's own error."""

    nargs = 3

    def fdiff(self, argindex=1):
        P, a, _ = self.args
        return (safe_div(_ONE, a), -safe_div(P, a * a), _ZERO)[argindex - 1]


# --------------------------------------------------------------------------------------------------
# smooth elementary functions: hyperbolic and their inverses, log1p, expm1, atan2
# --------------------------------------------------------------------------------------------------
class _Elementary(_RealFunction):
    """A smooth elementary function of one argument, folded on numbers by SymPy's own (``_sympy``)
    when the value is a finite real; outside its real domain the value is NaN at run time."""

    nargs = 1
    _sympy: Callable = staticmethod(sp.sinh)

    @classmethod
    def eval(cls, x):
        if _num(x):
            v = cls._sympy(x)
            if v.is_Number:
                return v
            if v.is_real and v.is_finite:  # e.g. sinh(2): a float, so no SymPy function reaches a printer
                return v.evalf(17)
        return None


class sinh_(_Elementary):
    """sinh(x); derivative cosh(x)."""

    _sympy = staticmethod(sp.sinh)

    def fdiff(self, argindex=1):
        return cosh_(self.args[0])


class cosh_(_Elementary):
    """cosh(x); derivative sinh(x)."""

    _sympy = staticmethod(sp.cosh)

    def fdiff(self, argindex=1):
        return sinh_(self.args[0])


class tanh_(_Elementary):
    """tanh(x); derivative 1 - tanh(x)**2."""

    _sympy = staticmethod(sp.tanh)

    def fdiff(self, argindex=1):
        return _ONE - tanh_(self.args[0]) ** 2


class asinh_(_Elementary):
    """asinh(x) = log(x + sqrt(x**2 + 1)); derivative 1/sqrt(x**2 + 1)."""

    _sympy = staticmethod(sp.asinh)

    def fdiff(self, argindex=1):
        return _ONE / sp.sqrt(self.args[0] ** 2 + 1)


class acosh_(_Elementary):
    """acosh(x) for x >= 1 (NaN below); derivative 1/(sqrt(x - 1) sqrt(x + 1)), inf at x = 1."""

    _sympy = staticmethod(sp.acosh)

    def fdiff(self, argindex=1):
        x = self.args[0]
        return _ONE / (sp.sqrt(x - 1) * sp.sqrt(x + 1))


class atanh_(_Elementary):
    """atanh(x) for |x| < 1 (+-inf at +-1, NaN beyond); derivative 1/(1 - x**2)."""

    _sympy = staticmethod(sp.atanh)

    def fdiff(self, argindex=1):
        return _ONE / (1 - self.args[0] ** 2)


class log1p_(_Elementary):
    """log(1 + x), accurate for small x; for x > -1 (-inf at -1, NaN below); derivative 1/(1 + x)."""

    _sympy = staticmethod(lambda x: sp.log(1 + x))

    def fdiff(self, argindex=1):
        return _ONE / (1 + self.args[0])


class expm1_(_Elementary):
    """exp(x) - 1, accurate for small x; derivative exp(x)."""

    _sympy = staticmethod(lambda x: sp.exp(x) - 1)

    def fdiff(self, argindex=1):
        return sp.exp(self.args[0])


class atan2_(_RealFunction):
    """atan2(y, x): the angle of (x, y) in (-pi, pi]; 0 at the origin. d/dy = x/(x**2 + y**2),
    d/dx = -y/(x**2 + y**2), both 0 at the origin (safe_div); the branch cut is y = 0, x < 0."""

    nargs = 2

    @classmethod
    def eval(cls, y, x):
        if _num(y) and _num(x):
            return _ZERO if y == 0 and x == 0 else sp.atan2(y, x).evalf(17)
        return None

    def fdiff(self, argindex=1):
        y, x = self.args
        r2 = x**2 + y**2
        return safe_div(x, r2) if argindex == 1 else safe_div(-y, r2)


# --------------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FunctionRule:
    """Everything modelc knows about one custom function.

    ``name``: the SymPy function's name (``cls.__name__``, what appears in printed IR);
    ``spelling``: what a spec author writes (``None``: internal, produced by the front end only);
    ``torch`` / ``triton`` / ``c``: ``str.format`` templates over the printed arguments (C: over
    ``real`` scalars, NaN handled like the PyTorch spelling);
    ``numpy``: a reference implementation on float arrays; ``kink_doc``: value and derivative at
    the kink, and which branch a tie takes.
    """

    name: str
    cls: type
    nargs: int
    spelling: str | None
    torch: str
    triton: str
    c: str
    numpy: Callable
    kink_doc: str
    #: Triton helpers the spelling calls (``modelc.backends.triton_math``: written with tl.exp/tl.log
    #: only, since libdevice does not run under TRITON_INTERPRET)
    triton_helpers: tuple[str, ...] = ()


def _where_np(c, a, b):
    return np.where(c, a, b)


def _safe_div_np(a, b):
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    return np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0)


def _powr_shift_np(P, a, e):
    P, a, e = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (P, a, e)))
    at0 = np.where(e > 0, 0.0, np.where(e == 0, 1.0, np.where(e < 0, np.inf, np.nan)))
    return np.where(a != 0, P / np.where(a != 0, a, 1.0), at0)


FUNCTIONS: dict[str, FunctionRule] = {r.name: r for r in (
    FunctionRule(
        "heaviside", heaviside, 1, "heaviside",
        torch="_heaviside({0})",
        triton="tl.where({0} > 0.0, 1.0, 0.0)",
        c="({0} > 0 ? 1 : 0)",
        numpy=lambda x: np.where(np.asarray(x) > 0, 1.0, 0.0),
        kink_doc="heaviside(0) = 0; derivative 0 everywhere (including at 0)"),
    FunctionRule(
        "sign", sign, 1, "sign",
        torch="torch.sign({0})",
        triton="_mc_sign({0})",
        c="mc_sign({0})",
        numpy=_np("sign"),
        triton_helpers=("_mc_sign",),
        kink_doc="sign(0) = 0; derivative 0 everywhere (including at 0)"),
    FunctionRule(
        "abs_", abs_, 1, "abs",
        torch="torch.abs({0})",
        triton="tl.abs({0})",
        c="fabs({0})",
        numpy=_np("abs"),
        kink_doc="abs(0) = 0; derivative sign(x), so 0 at x = 0"),
    FunctionRule(
        "macaulay", macaulay, 1, "macaulay",
        torch="torch.clamp({0}, min=0.0)",
        triton="_mc_pos({0})",
        c="mc_pos({0})",
        numpy=lambda x: np.maximum(x, 0.0),
        kink_doc="macaulay(0) = 0; derivative heaviside(x), so 0 at x = 0",
        triton_helpers=("_mc_pos",)),
    FunctionRule(
        "max_", max_, 2, "max",
        torch="_ge({0}, {1})",
        triton="_mc_ge({0}, {1})",
        c="mc_ge({0}, {1})",
        numpy=lambda a, b: np.where(np.asarray(a) >= b, a, np.where(np.asarray(a) < b, b, np.add(a, b))),
        triton_helpers=("_mc_ge",),
        kink_doc="max(a, a) = a; at a tie the derivative is the first argument's: d/da = 1, d/db = 0; "
                 "NaN if either argument is NaN"),
    FunctionRule(
        "min_", min_, 2, "min",
        torch="_le({0}, {1})",
        triton="_mc_le({0}, {1})",
        c="mc_le({0}, {1})",
        numpy=lambda a, b: np.where(np.asarray(a) <= b, a, np.where(np.asarray(a) > b, b, np.add(a, b))),
        triton_helpers=("_mc_le",),
        kink_doc="min(a, a) = a; at a tie the derivative is the first argument's: d/da = 1, d/db = 0; "
                 "NaN if either argument is NaN"),
    FunctionRule(
        "safe_div", safe_div, 2, "safe_div",
        torch="_sdiv({0}, {1})",
        triton="_mc_sdiv({0}, {1})",
        c="mc_sdiv({0}, {1})",
        numpy=_safe_div_np,
        triton_helpers=("_mc_sdiv",),
        kink_doc="safe_div(a, 0) = 0; both derivatives 0 at b = 0 (safe_div(1, b), -safe_div(a, b**2))"),
    FunctionRule(
        "safe_sqrt", safe_sqrt, 1, "safe_sqrt",
        torch="torch.sqrt(torch.clamp({0}, min=0.0))",
        triton="tl.sqrt(_mc_pos({0}))",
        c="sqrt(mc_pos({0}))",
        numpy=lambda x: np.sqrt(np.maximum(x, 0.0)),
        kink_doc="safe_sqrt(x) = 0 for x <= 0; derivative safe_div(1, 2 safe_sqrt(x)), 0 for x <= 0",
        triton_helpers=("_mc_pos",)),
    FunctionRule(
        "powr", powr, 2, None,
        torch="torch.pow({0}, {1})",
        triton="tl.exp({1} * tl.log({0}))",
        c="mc_pow({0}, {1})",
        numpy=lambda a, b: np.power(np.asarray(a, dtype=float), b),
        kink_doc="a**b for a >= 0 (NaN for a < 0); at a = 0: value 0 (b > 0), d/da = b*0**(b-1) "
                 "(0 for b > 1), d/db = 0"),
    FunctionRule(
        "powr_shift", powr_shift, 3, None,
        torch="_powr_shift({0}, {1}, {2})",
        triton="_mc_powr_shift({0}, {1}, {2})",
        c="mc_powr_shift({0}, {1}, {2})",
        numpy=lambda P, a, e: _powr_shift_np(P, a, e),
        triton_helpers=("_mc_powr_shift",),
        kink_doc="internal (powr(a, e) = P / a, P = powr(a, e + 1)); at a = 0 the value of powr(0, e): "
                 "0, 1 or inf by the sign of e; derivatives those of P / a, 0 at a = 0"),
    FunctionRule(
        "ifpos", ifpos, 3, None,
        torch="torch.where({0} > 0.0, {1}, {2})",
        triton="tl.where({0} > 0.0, {1}, {2})",
        c="({0} > 0 ? {1} : {2})",
        numpy=lambda d, a, b: _where_np(np.asarray(d) > 0, a, b),
        kink_doc="ifpos(0, a, b) = b (the condition d > 0 is false at 0); d/da = heaviside(d)"),
    FunctionRule(
        "ifnonneg", ifnonneg, 3, None,
        torch="torch.where({0} >= 0.0, {1}, {2})",
        triton="tl.where({0} >= 0.0, {1}, {2})",
        c="({0} >= 0 ? {1} : {2})",
        numpy=lambda d, a, b: _where_np(np.asarray(d) >= 0, a, b),
        kink_doc="ifnonneg(0, a, b) = a (the condition d >= 0 is true at 0); d/da = 1 - heaviside(-d)"),
    FunctionRule(
        "ifzero", ifzero, 3, None,
        torch="torch.where({0} == 0.0, {1}, {2})",
        triton="tl.where({0} == 0.0, {1}, {2})",
        c="({0} == 0 ? {1} : {2})",
        numpy=lambda g, a, b: _where_np(np.asarray(g) == 0, a, b),
        kink_doc="ifzero(0, a, b) = a, ifzero(NaN, a, b) = b; d/da = ifzero(g, 1, 0)"),
    *(FunctionRule(f"{fn}_", cls, 1, fn, torch=f"torch.{fn}({{0}})", triton=f"_mc_{fn}({{0}})",
                   c=f"mc_{fn}({{0}})",  # (vectorizable: the C header)
                   numpy=_np({"asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh"}.get(fn, fn)),
                   kink_doc=kink, triton_helpers=(f"_mc_{fn}",))
      for fn, cls, kink in (
        ("sinh", sinh_, "smooth; Triton: 0.5*(u + u/(u + 1)) with u = expm1(|x|) (no cancellation at small x)"),
        ("cosh", cosh_, "smooth; Triton: 0.5*(e + 1/e), e = exp(|x|)"),
        ("tanh", tanh_, "smooth; +-1 for |x| > 20 (exactly, in float64 and float32); Triton: u/(u + 2) "
                        "with u = expm1(2|x|)"),
        ("asinh", asinh_, "smooth, odd; Triton: log1p(|x| + x**2/(1 + sqrt(1 + x**2))), log(2|x|) for "
                          "|x| > 1e8"),
        ("acosh", acosh_, "acosh(1) = 0 with derivative inf; NaN for x < 1 (no clamping: a value below 1 "
                          "is a modelling error that must show)"),
        ("atanh", atanh_, "atanh(+-1) = +-inf; NaN for |x| > 1; Triton: 0.5*log1p(2x/(1 - x))"),
        ("log1p", log1p_, "log1p(-1) = -inf, NaN for x < -1; Triton: log(u)*x/(u - 1), u = 1 + x "
                          "(exact at small x)"),
        ("expm1", expm1_, "smooth; Triton: (u - 1)*x/log(u), u = exp(x) (exact at small x)"),
      )),
    FunctionRule(
        "atan2_", atan2_, 2, "atan2",
        torch="_atan2({0}, {1})",
        triton="_mc_atan2({0}, {1})",
        c="mc_atan2({0}, {1})",  # (vectorizable: the C header)
        numpy=_np("arctan2"),
        kink_doc="atan2(y, x) in (-pi, pi]: atan2(0, 0) = 0 with both derivatives 0 (safe_div); on the "
                 "cut y = 0, x < 0 the value is pi (from y = +0)",
        triton_helpers=("_mc_atan2",)),
)}

#: spec spelling -> rule, for the functions a spec author may call directly.
BY_SPELLING: dict[str, FunctionRule] = {r.spelling: r for r in FUNCTIONS.values() if r.spelling}


def rule_for(expr: sp.Basic) -> FunctionRule | None:
    """The rule of a SymPy node if it is one of ours (``None`` otherwise)."""
    return FUNCTIONS.get(type(expr).__name__) if isinstance(expr, _RealFunction) else None


def numpy_namespace() -> dict[str, Callable]:
    """A ``sympy.lambdify`` module mapping for the custom functions: ``lambdify(x, e,
    modules=[numpy_namespace(), "numpy"])``."""
    return {name: rule.numpy for name, rule in FUNCTIONS.items()}
