"""Identifiers for SymPy symbols in generated code.

Symbol names in the IR are qualified variable names (``state/S[3]``, ``$E``); generated code needs
Python identifiers. :class:`Namer` maps each symbol to a readable identifier (``state_S_3``,
``p_E``), unique within one generated function, assigned in the (deterministic) order symbols are
first seen, so that the same program always gives the same names.
"""
from __future__ import annotations

import keyword
import re

import sympy as sp

_BAD = re.compile(r"[^0-9A-Za-z_]+")


def sanitize(name: str) -> str:
    """A readable identifier for ``name``: ``$E`` -> ``p_E``, ``state/S[3]`` -> ``state_S_3``."""
    if name.startswith("$"):
        name = "p_" + name[1:]
    ident = _BAD.sub("_", name).strip("_") or "v"
    if ident[0].isdigit():
        ident = "v_" + ident
    if keyword.iskeyword(ident) or ident in _RESERVED:
        ident = "v_" + ident
    return ident


# Names the generated function bodies use themselves (pointers, masks, modules, helpers).
_RESERVED = frozenset({
    "tl", "triton", "torch", "math", "X", "P", "Y", "J", "ST", "n", "offs", "mask", "pid", "BLOCK",
    "DTYPE", "EPS", "x_stride", "p_stride", "y_stride", "j_stride", "st_stride", "nan", "B",
})


class Namer:
    """Symbol -> identifier, unique, in first-seen order."""

    def __init__(self, reserved: frozenset[str] = frozenset()):
        self._names: dict[sp.Symbol, str] = {}
        self._used: set[str] = set(reserved)

    def __call__(self, sym: sp.Symbol) -> str:
        name = self._names.get(sym)
        if name is None:
            base = sanitize(sym.name)
            name, k = base, 1
            while name in self._used:
                k += 1
                name = f"{base}_{k}"
            self._names[sym] = name
            self._used.add(name)
        return name

    def fresh(self, base: str) -> str:
        """A new identifier not tied to a symbol (loop counters, temporaries)."""
        name, k = base, 1
        while name in self._used:
            k += 1
            name = f"{base}_{k}"
        self._used.add(name)
        return name
