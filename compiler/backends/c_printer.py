"""SymPy -> C99 expressions over per-point scalars (the C backend's printer).

It subclasses the shared :class:`~modelc.backends.printer.ExprPrinter` (not SymPy's
``C99CodePrinter``) so that the C backend follows exactly the conventions of the other two: an
explicit rule for every node (anything else raises :class:`~modelc.errors.InternalError`), constants
evaluated once in float64, integer powers expanded to multiplications, every binary operation
parenthesised, custom functions spelled from :data:`modelc.functions.FUNCTIONS` (their ``c`` field).

C specifics this printer owns:

- **typed literals**: the source is compiled once per dtype with ``real`` a ``typedef`` of ``double``
  or ``float``; every literal is printed as ``((real)<repr>)`` so a float32 build computes in float32
  (a bare ``0.1`` is a double and would promote the whole expression);
- math functions come from ``<tgmath.h>`` (type-generic: ``sqrt`` of a ``float`` is ``sqrtf``), except
  ``exp``, ``log``, ``pow``, the hyperbolic functions and their inverses, ``expm1``, ``log1p`` and ``atan2``:
  ``mc_exp``, ``mc_log``, ... of the header, libm in the scalar build and branch-free inline
  versions that vectorize in the SIMD build;
- ``minimum``/``maximum`` propagate NaN like ``torch.minimum``/``torch.maximum`` (``mc_min``/``mc_max``
  of the generated preamble; C's ``fmin``/``fmax`` would drop a NaN);
- ``Piecewise`` is a nested ``?:``; booleans are ``int`` 0/1 (``&``, ``|``, ``== 0``: branch-free).
"""
from __future__ import annotations

import math

import sympy as sp

from modelc.backends.printer import ExprPrinter


class GuessPow(sp.Function):
    """``base**exp`` in a Newton solve's first guess (:func:`guess_powers`): printed ``mc_gpow`` of
    the header, pow to about 1e-7 relative without a division, where a power elsewhere is ``mc_pow``
    (a few ulp). The guess only seeds the solve: its result and stopping test are the exact
    residual's. A C node only: no other backend meets it."""

    nargs = 2


def guess_powers(e):
    """``e`` with its powers of a non-integer (and not half-integer) or symbolic exponent, and its
    ``powr``, as :class:`GuessPow`; the rest of the expression as it was."""
    from modelc.functions import powr
    from modelc.symdag import rebuilt

    memo: dict = {}

    def walk(x):
        if x.is_Atom or not x.args:
            return x
        out = memo.get(x)
        if out is None:
            args = tuple(walk(a) for a in x.args)
            out = rebuilt(x, args) if args != x.args else x
            if isinstance(out, (sp.Pow, powr)) and out.args[0] is not sp.E and not out.args[0].is_number:
                k = out.args[1]
                if not (k.is_Integer or (k.is_Rational and k.q == 2)):
                    out = GuessPow(*out.args)
            memo[x] = out
        return out

    return walk(sp.sympify(e))


class CPrinter(ExprPrinter):
    backend = "c"
    ABS = "fabs"
    UNARY = {
        sp.exp: "mc_exp", sp.log: "mc_log", sp.sin: "sin", sp.cos: "cos", sp.tan: "tan", sp.tanh: "mc_tanh",
        sp.sinh: "mc_sinh", sp.cosh: "mc_cosh", sp.atan: "atan", sp.asin: "asin", sp.acos: "acos",
        sp.erf: "erf",
    }

    RULES = {**ExprPrinter.RULES, GuessPow: "_print_GuessPow"}

    def _print_GuessPow(self, expr) -> str:
        return f"mc_gpow({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def literal(self, value: float) -> str:
        if math.isnan(value):
            return "MC_NAN"
        if math.isinf(value):
            return "MC_INF" if value > 0 else "(-MC_INF)"
        return f"((real){float(value)!r})"

    def boolean(self, value: bool) -> str:
        return "1" if value else "0"

    def where(self, cond: str, a: str, b: str) -> str:
        return f"({cond} ? {a} : {b})"

    def minimum(self, a: str, b: str) -> str:
        return f"mc_min({a}, {b})"

    def maximum(self, a: str, b: str) -> str:
        return f"mc_max({a}, {b})"

    def sqrt(self, a: str) -> str:
        return f"sqrt({a})"

    def pow(self, base: str, exp: str) -> str:
        return f"mc_pow({base}, {exp})"

    # booleans are int 0/1: bitwise & | keep a lane loop branch-free (&& || short-circuit, and the
    # vectorizer gives up on the _Bool conversions they leave)
    def _print_And(self, expr) -> str:
        return "(" + " & ".join(self._print(a) for a in expr.args) + ")"

    def _print_Or(self, expr) -> str:
        return "(" + " | ".join(self._print(a) for a in expr.args) + ")"

    def _print_Not(self, expr) -> str:
        return f"({self._print(expr.args[0])} == 0)"
