"""SymPy -> Triton expressions over blocks of batch points.

Differences from Python semantics that this printer owns (see DESIGN.md, toolchain facts):

- **typed literals**: a bare Python float in a kernel is an fp32 constant; every constant is instead
  hoisted to the kernel prologue as ``K<i> = tl.full([], value, DTYPE)`` (DTYPE: the kernel dtype, a
  constexpr), so float64 kernels keep float64 constants. :attr:`constants` lists them in first-use
  order (deterministic);
- no ``**``: integer powers are expanded by the base printer; other powers and functions that would
  need libdevice (unavailable under TRITON_INTERPRET) go to the math shim of the generated module
  (``_pow``, ``_tanh``, ...), written with ``tl.exp``/``tl.log`` only;
- ``tl.sqrt`` (not ``tl.sqrt_rn``, which is fp32-only).
"""
from __future__ import annotations

import math

import sympy as sp

from modelc.backends.printer import ExprPrinter


class TritonPrinter(ExprPrinter):
    backend = "triton"
    ABS = "tl.abs"
    UNARY = {
        sp.exp: "tl.exp", sp.log: "tl.log", sp.sin: "tl.sin", sp.cos: "tl.cos",
        sp.tanh: "_tanh", sp.sinh: "_sinh", sp.cosh: "_cosh",
    }

    def __init__(self, namer):
        super().__init__(namer)
        self.constants: dict[str, str] = {}  # value text -> constant name

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
