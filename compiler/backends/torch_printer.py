"""SymPy -> PyTorch expressions over batch tensors (one ``(batch,)`` tensor per scalar component).

Literals are plain Python floats (``repr``, round-trip exact): PyTorch treats a Python scalar as
"weakly typed", so ``x * 0.1`` keeps ``x``'s dtype (float64 stays float64, float32 stays float32).
Functions that need tensor arguments go through the small helpers of the generated module
(``_where``, ``_minimum``, ``_maximum``, ``_tpow``), which accept Python floats too.
"""
from __future__ import annotations

import math

import sympy as sp

from modelc.backends.printer import ExprPrinter


class TorchPrinter(ExprPrinter):
    backend = "torch"
    ABS = "torch.abs"
    UNARY = {
        sp.exp: "torch.exp", sp.log: "torch.log", sp.sin: "torch.sin", sp.cos: "torch.cos",
        sp.tan: "torch.tan", sp.tanh: "torch.tanh", sp.sinh: "torch.sinh", sp.cosh: "torch.cosh",
        sp.atan: "torch.atan", sp.asin: "torch.asin", sp.acos: "torch.acos", sp.erf: "torch.erf",
    }

    def literal(self, value: float) -> str:
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else '(-float("inf"))'
        text = repr(float(value))
        return f"({text})" if value < 0 else text

    def boolean(self, value: bool) -> str:
        return "True" if value else "False"

    def where(self, cond: str, a: str, b: str) -> str:
        return f"_where({cond}, {a}, {b})"

    def minimum(self, a: str, b: str) -> str:
        return f"_minimum({a}, {b})"

    def maximum(self, a: str, b: str) -> str:
        return f"_maximum({a}, {b})"

    def sqrt(self, a: str) -> str:
        return f"torch.sqrt({a})"

    def pow(self, base: str, exp: str) -> str:
        return f"_tpow({base}, {exp})"
