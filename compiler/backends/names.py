"""Identifiers for SymPy symbols in generated code.

Symbol names in the IR are qualified variable names (``state/S[3]``, ``$E``); generated code needs
Python identifiers. :class:`Namer` maps each symbol to an identifier, unique within one generated
function, assigned in the (deterministic) order symbols are first seen, so that the same program
always gives the same names (independent of ``PYTHONHASHSEED``):

- inputs, outputs, parameters and model intermediates keep a readable name (``state/S[3]`` ->
  ``state_S_3``, ``$E`` -> ``p_E``);
- temporaries get short names (:func:`short_base`): partial-derivative symbols
  ``d(of)/d(wrt)@model`` become ``d1``, ``d2``, ... and linear-solve temporaries
  ``<prefix>.<what>[i,j]#<version>`` become ``<prefix>_<version>`` (``ls1_17``). Long derivative
  names made the generated modules several times larger (and slower to parse and compile) without
  helping a reader; ``modelc compile --dump-ir`` still lists the full names.
"""
from __future__ import annotations

import re

import sympy as sp

from modelc.runtime.paths import RESERVED as _RESERVED, sanitize

__all__ = ["Namer", "sanitize", "short_base"]

_SOLVE_TEMP = re.compile(r"^([A-Za-z]\w*)\..*#(\d+)$")


def short_base(name: str) -> str | None:
    """The short identifier base of a temporary's symbol name (``d`` for a derivative symbol, the
    solve prefix plus version for a linear-solve temporary), or None for a name kept readable."""
    if name.startswith("d(") and ")/d(" in name:
        return "d"
    m = _SOLVE_TEMP.match(name)
    if m:
        return f"{m.group(1)}_{m.group(2)}"
    return None


class Namer:
    """Symbol -> identifier, unique, in first-seen order; temporaries get short names (see the module
    docstring). ``short=False`` keeps every name readable (the former behaviour)."""

    def __init__(self, reserved: frozenset[str] = frozenset(), short: bool = True):
        self._names: dict[sp.Symbol, str] = {}
        self._used: set[str] = set(reserved)
        self._short = short
        self.short = short
        self._n_deriv = 0

    def __call__(self, sym: sp.Symbol) -> str:
        name = self._names.get(sym)
        if name is None:
            base = short_base(sym.name) if self._short else None
            if base == "d":
                self._n_deriv += 1
                base = f"d{self._n_deriv}"
            elif base is None:
                base = sanitize(sym.name)
            name, k = base, 1
            while name in self._used:
                k += 1
                name = f"{base}_{k}"
            self._names[sym] = name
            self._used.add(name)
        return name

    def bind(self, sym: sp.Symbol, text: str) -> None:
        """Print ``sym`` as ``text`` (an expression of the generated code, e.g. ``F[3]``: an element
        of a helper's tuple argument)."""
        if sym in self._names:
            raise ValueError(f"{sym} already has the name {self._names[sym]}")
        self._names[sym] = text

    def fresh(self, base: str) -> str:
        """A new identifier not tied to a symbol (loop counters, temporaries)."""
        name, k = base, 1
        while name in self._used:
            k += 1
            name = f"{base}_{k}"
        self._used.add(name)
        return name
