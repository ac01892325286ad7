"""SymPy -> Triton expressions over blocks of batch points.

Differences from Python semantics that this printer owns (see DESIGN.md, toolchain facts):

- **typed literals**: a bare Python float in a kernel is an fp32 constant; every constant is instead
  hoisted to the kernel prologue as ``K<i> = tl.full([], value, DTYPE)`` (DTYPE: the kernel dtype, a
  constexpr), so float64 kernels keep float64 constants. :attr:`constants` lists them in first-use
  order (deterministic);
- no ``**``: integer powers are expanded by the base printer; other powers and functions that would
  need libdevice (unavailable under TRITON_INTERPRET) go to the math shim of the generated module
  (``_pow``) or to the accurate helpers of :mod:`modelc.backends.triton_math` (``_mc_tanh``, ...),
  written with ``tl.exp``/``tl.log`` only;
- ``tl.sqrt`` (not ``tl.sqrt_rn``, which is fp32-only).
"""
from __future__ import annotations

import math

import sympy as sp

from modelc.backends.printer import MAX_EXPANDED_POWER, ExprPrinter

#: the largest integer exponent _mc_powk computes by binary powering (the front end keeps integer
#: exponents up to 1024 as powers; derivatives lower them by one)
MAX_INT_POWER = 2047


class TritonPrinter(ExprPrinter):
    backend = "triton"
    ABS = "tl.abs"
    UNARY = {
        sp.exp: "tl.exp", sp.log: "tl.log", sp.sin: "tl.sin", sp.cos: "tl.cos",
        sp.tanh: "_mc_tanh", sp.sinh: "_mc_sinh", sp.cosh: "_mc_cosh",  # accurate near 0 (triton_math)
    }

    def __init__(self, namer, constexpr: dict[sp.Symbol, str] | None = None):
        super().__init__(namer)
        self.constants: dict[str, str] = {}  # value text -> constant name
        # baked parameter symbol -> its constexpr kernel argument: a power whose exponent is made of
        # them alone is computed by _mc_powk with the exponent known at compile time
        self.constexpr = dict(constexpr or {})

    def literal(self, value: float) -> str:
        if math.isnan(value):
            text = 'float("nan")'
        elif math.isinf(value):
            text = 'float("inf")' if value > 0 else 'float("-inf")'
        else:
            text = repr(float(value))
        name = self.constants.get(text)
        if name is None:
            name = self.constants[text] = f"K{len(self.constants)}"
        return name

    def prologue(self) -> list[str]:
        """The constant definitions, one line each, for the top of the kernel."""
        return [f"{name} = tl.full([], {text}, DTYPE)" for text, name in self.constants.items()]

    def boolean(self, value: bool) -> str:
        return "True" if value else "False"

    def where(self, cond: str, a: str, b: str) -> str:
        return f"tl.where({cond}, {a}, {b})"

    def minimum(self, a: str, b: str) -> str:
        return f"tl.minimum({a}, {b})"

    def maximum(self, a: str, b: str) -> str:
        return f"tl.maximum({a}, {b})"

    def sqrt(self, a: str) -> str:
        return f"tl.sqrt({a})"

    def pow(self, base: str, exp: str) -> str:
        return f"_pow({base}, {exp})"

    def sibling(self, namer) -> "TritonPrinter":
        return type(self)(namer, self.constexpr)

    def _print_Pow(self, expr: sp.Pow) -> str:
        text = self._constexpr_power(expr.base, expr.exp)
        if text is None and expr.exp.is_Integer and MAX_EXPANDED_POWER < abs(int(expr.exp)) <= MAX_INT_POWER:
            # an integer power beyond the expanded ones: binary powering with the exponent a
            # constexpr (exp(K log x) would be NaN for a negative base; torch.pow and mc_pow are not)
            text = f"_mc_powk({self._print(expr.base)}, {int(expr.exp)})"
        return text if text is not None else super()._print_Pow(expr)

    def _print_custom(self, name: str, expr) -> str:
        if name == "powr":
            text = self._constexpr_power(*expr.args)
            if text is not None:
                return text
        if name == "powr_shift":  # a baked exponent: binary powering, like powr's
            text = self._constexpr_power(expr.args[1], expr.args[2])
            if text is not None:
                return text
        return super()._print_custom(name, expr)

    def _constexpr_power(self, base, exp) -> str | None:
        """``_mc_powk(base, K)`` when the exponent is an expression of baked parameters only (a
        constexpr the helper branches on), else None."""
        free = exp.free_symbols
        if not free or not free <= set(self.constexpr) or exp.is_Number:
            return None
        k = self._constexpr_text(exp)
        return None if k is None else f"_mc_powk({self._print(base)}, {k})"

    def _constexpr_text(self, e) -> str | None:
        """``e`` as Python arithmetic on constexpr arguments and float literals (Triton folds it at
        compile time), or None for a node that has no such spelling."""
        if e.is_Symbol:
            return self.constexpr.get(e)
        if e.is_Number:
            return repr(float(e)) if e.is_finite else None
        parts = [self._constexpr_text(a) for a in e.args]
        if any(p is None for p in parts):
            return None
        if e.is_Add:
            return "(" + " + ".join(parts) + ")"
        if e.is_Mul:
            return "(" + " * ".join(parts) + ")"
        if e.is_Pow and e.exp.is_Integer and e.exp == -1:
            return f"(1.0 / {parts[0]})"
        return None
