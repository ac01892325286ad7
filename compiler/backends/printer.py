"""The expression printer shared by the backends: an explicit rule for every SymPy node it accepts.

Every node is dispatched through :attr:`ExprPrinter.RULES` (class -> method name). A node without a
rule raises :class:`~modelc.errors.InternalError` naming the node: nothing is printed "plausibly".
Backends (:mod:`.torch_printer`, :mod:`.triton_printer`) subclass this and supply the spellings that
differ between them (literals, ``where``, ``minimum``, math functions, general powers).

Conventions, identical in both backends:

- every constant sub-expression (``expr.is_number``) is evaluated once, in float64, and printed as a
  literal through :meth:`literal` (the Triton printer makes it a typed constant of the kernel dtype);
- integer powers are expanded to multiplications (Triton rejects ``**``), half-integer powers use
  ``sqrt``; other powers go to :meth:`pow`;
- every binary operation is parenthesised (no reliance on precedence tables);
- a sum, product, ``min`` or ``max`` of more than :data:`CHUNK` operands is printed in groups of at
  most ``CHUNK`` (a sum of 2500 terms, one chain of additions, overflowed Python's compiler, and
  Triton's code generator recurses once per operation); up to ``CHUNK`` operands print as one chain;
- ``Piecewise`` becomes nested ``where``; a Piecewise without a final ``True`` clause is NaN outside its
  conditions.
"""
from __future__ import annotations

import math
from typing import Callable

import sympy as sp
from sympy.logic.boolalg import BooleanFalse, BooleanTrue

from modelc.errors import InternalError

MAX_EXPANDED_POWER = 16  # integer powers up to this are expanded to products
CHUNK = 32  # the most operands of one printed chain of +, *, min or max (longer ones are grouped)


def _grouped(items: list, join: Callable[[list], str]) -> str:
    """``join(items)`` for at most :data:`CHUNK` items; otherwise the items joined in consecutive
    groups of ``CHUNK``, and those results grouped again, so no chain is longer than ``CHUNK``."""
    while len(items) > CHUNK:
        items = [join(items[i:i + CHUNK]) for i in range(0, len(items), CHUNK)]
    return join(items)


def _functions_table() -> dict:
    """The custom functions of modelc (``modelc.functions.FUNCTIONS``), if that module exists."""
    try:
        from modelc.functions import FUNCTIONS  # type: ignore[import-not-found]
    except ImportError:
        return {}
    return dict(FUNCTIONS)


class ExprPrinter:
    """Base printer. ``namer`` maps symbols to identifiers."""

    backend = "base"
    # SymPy function class -> name of the backend's elementwise function (single argument).
    UNARY: dict[type, str] = {}

    RULES: dict[type, str] = {
        sp.Add: "_print_Add",
        sp.Mul: "_print_Mul",
        sp.Pow: "_print_Pow",
        sp.Piecewise: "_print_Piecewise",
        sp.Abs: "_print_Abs",
        sp.Max: "_print_Max",
        sp.Min: "_print_Min",
        sp.sign: "_print_sign",
        sp.StrictLessThan: "_print_Relational",
        sp.LessThan: "_print_Relational",
        sp.StrictGreaterThan: "_print_Relational",
        sp.GreaterThan: "_print_Relational",
        sp.Equality: "_print_Relational",
        sp.Unequality: "_print_Relational",
        sp.And: "_print_And",
        sp.Or: "_print_Or",
        sp.Not: "_print_Not",
        sp.Heaviside: "_print_Heaviside",
    }

    def __init__(self, namer: Callable[[sp.Symbol], str]):
        self.namer = namer
        self.custom = _functions_table()

    # -- entry point --------------------------------------------------------------------------
    def doprint(self, expr) -> str:
        return self._print(sp.sympify(expr))

    def _print(self, expr) -> str:
        if isinstance(expr, sp.Symbol):
            return self.namer(expr)
        if isinstance(expr, (BooleanTrue, BooleanFalse)):
            return self.boolean(bool(expr))
        if isinstance(expr, sp.Expr) and expr.is_number:
            return self._number(expr)
        method = self.RULES.get(type(expr))
        if method is not None:
            return getattr(self, method)(expr)
        if type(expr) in self.UNARY:
            (arg,) = expr.args
            return self.call(self.UNARY[type(expr)], self._print(arg))
        name = getattr(type(expr), "__name__", "")
        if isinstance(expr, sp.Function) and name in self.custom:
            return self._print_custom(name, expr)
        raise InternalError(
            f"the {self.backend} printer has no rule for {type(expr).__name__} (in {sp.sstr(expr)})")

    # -- hooks every backend defines ----------------------------------------------------------
    def literal(self, value: float) -> str:
        raise NotImplementedError

    def boolean(self, value: bool) -> str:
        raise NotImplementedError

    def where(self, cond: str, a: str, b: str) -> str:
        raise NotImplementedError

    def minimum(self, a: str, b: str) -> str:
        raise NotImplementedError

    def maximum(self, a: str, b: str) -> str:
        raise NotImplementedError

    def sqrt(self, a: str) -> str:
        raise NotImplementedError

    def pow(self, base: str, exp: str) -> str:
        raise NotImplementedError

    def sibling(self, namer) -> "ExprPrinter":
        """A printer of the same backend and settings with its own names (a helper function's)."""
        return type(self)(namer)

    def call(self, fn: str, *args: str) -> str:
        return f"{fn}({', '.join(args)})"

    # -- numbers ------------------------------------------------------------------------------
    def _number(self, expr: sp.Expr) -> str:
        try:
            value = float(expr.evalf(30))
        except TypeError:
            raise InternalError(f"the {self.backend} printer cannot print the constant {expr}") from None
        if expr.has(sp.zoo, sp.nan) or (math.isnan(value) and expr is not sp.nan):
            raise InternalError(f"the {self.backend} printer met an undefined constant: {expr}")
        return self.literal(value)

    # -- arithmetic ---------------------------------------------------------------------------
    def _print_Add(self, expr: sp.Add) -> str:
        terms = []  # (negated, text)
        for term in expr.args:
            coeff, rest = term.as_coeff_Mul()
            if coeff.is_Number and coeff < 0:
                terms.append((True, self._print(-term)))
            else:
                terms.append((False, self._print(term)))

        def join(group: list) -> tuple:
            out = "".join((f" - {t}" if i else f"-{t}") if neg else (f" + {t}" if i else t)
                          for i, (neg, t) in enumerate(group))
            return False, f"({out})"

        return _grouped(terms, join)[1]

    def _print_Mul(self, expr: sp.Mul) -> str:
        coeff, rest = expr.as_coeff_Mul()
        # every constant factor into the one coefficient (1/3 sqrt(6) p is 0.816... * p: one literal,
        # rounded once, not 0.333... * p * 2.449...)
        consts = [f for f in sp.Mul.make_args(rest) if f.is_number]
        if consts:
            coeff = sp.Float(sp.Mul(coeff, *consts).evalf(30), 30)
            rest = sp.Mul(*[f for f in sp.Mul.make_args(rest) if not f.is_number], evaluate=False)
        sign = ""
        if coeff.is_Number and coeff < 0:
            sign, coeff = "-", -coeff
        num: list[str] = []
        den: list[str] = []
        if coeff != 1:
            num.append(self._print(coeff))
        for f in sp.Mul.make_args(rest):
            if f.is_Pow and f.exp.is_Number and f.exp < 0:
                den.append(self._print(sp.Pow(f.base, -f.exp, evaluate=False)))
            else:
                num.append(self._print(f))
        text = self._product(num) if num else self._print(sp.S.One)
        if den:
            text = f"{text} / {den[0] if len(den) == 1 else '(' + self._product(den) + ')'}"
        return f"({sign}{text})" if (sign or len(num) + len(den) > 1) else text

    @staticmethod
    def _product(factors: list) -> str:
        """``a * b * c`` (unparenthesised, as the caller places it); more than :data:`CHUNK`
        factors in parenthesised groups."""
        return _grouped(factors, lambda g: "(" + " * ".join(g) + ")")[1:-1]

    def _print_Pow(self, expr: sp.Pow) -> str:
        base, exp = expr.base, expr.exp
        if base is sp.E:
            return self._print(sp.exp(exp))
        if exp.is_Integer or (exp.is_Rational and exp.q == 2):
            n2 = int(exp * 2)  # twice the exponent: an integer
            if abs(n2) <= 2 * MAX_EXPANDED_POWER:
                b = self._print(base)
                whole, half = divmod(abs(n2), 2)
                factors = [b] * whole + ([self.sqrt(b)] if half else [])
                text = factors[0] if len(factors) == 1 else "(" + " * ".join(factors) + ")"
                return f"({self._print(sp.S.One)} / {text})" if n2 < 0 else text
        return self.pow(self._print(base), self._print(exp))

    # -- conditionals and non-smooth functions --------------------------------------------------
    def _print_Piecewise(self, expr: sp.Piecewise) -> str:
        pieces = list(expr.args)
        if pieces[-1].cond == sp.true:
            acc = self._print(pieces.pop().expr)
        else:
            acc = self.literal(float("nan"))
        for piece in reversed(pieces):
            acc = self.where(self._print(piece.cond), self._print(piece.expr), acc)
        return acc

    def _print_Abs(self, expr) -> str:
        return self.call(self.ABS, self._print(expr.args[0]))

    def _print_Max(self, expr) -> str:
        return _grouped([self._print(a) for a in expr.args], lambda g: self._fold(self.maximum, g))

    def _print_Min(self, expr) -> str:
        return _grouped([self._print(a) for a in expr.args], lambda g: self._fold(self.minimum, g))

    @staticmethod
    def _fold(op, args: list) -> str:
        acc = args[0]
        for a in args[1:]:
            acc = op(acc, a)
        return acc

    def _print_sign(self, expr) -> str:
        x = self._print(expr.args[0])
        one, zero = self._print(sp.S.One), self._print(sp.S.Zero)
        return self.where(f"({x} > {zero})", one,
                          self.where(f"({x} < {zero})", self._print(-sp.S.One), zero))

    def _print_Heaviside(self, expr) -> str:
        # Heaviside(x, h0): 1 for x > 0, 0 for x < 0, h0 at 0 (SymPy's default h0 is 1/2).
        x = self._print(expr.args[0])
        h0 = expr.args[1] if len(expr.args) > 1 else sp.Rational(1, 2)
        one, zero = self._print(sp.S.One), self._print(sp.S.Zero)
        return self.where(f"({x} > {zero})", one, self.where(f"({x} < {zero})", zero, self._print(h0)))

    _REL = {sp.StrictLessThan: "<", sp.LessThan: "<=", sp.StrictGreaterThan: ">",
            sp.GreaterThan: ">=", sp.Equality: "==", sp.Unequality: "!="}

    def _print_Relational(self, expr) -> str:
        return f"({self._print(expr.lhs)} {self._REL[type(expr)]} {self._print(expr.rhs)})"

    def _print_And(self, expr) -> str:
        return "(" + " & ".join(self._print(a) for a in expr.args) + ")"

    def _print_Or(self, expr) -> str:
        return "(" + " | ".join(self._print(a) for a in expr.args) + ")"

    def _print_Not(self, expr) -> str:
        return f"(~{self._print(expr.args[0])})"

    # -- custom functions (modelc.functions.FUNCTIONS) -------------------------------------------
    def _print_custom(self, name: str, expr) -> str:
        entry = self.custom[name]
        spelling = getattr(entry, self.backend, None)
        if spelling is None and isinstance(entry, dict):
            spelling = entry.get(self.backend)
        if spelling is None:
            raise InternalError(f"function {name} has no {self.backend} spelling in modelc.functions")
        args = [self._print(a) for a in expr.args]
        if callable(spelling):
            return spelling(*args)
        return spelling.format(*args)
