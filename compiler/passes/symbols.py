"""Names of the symbols the passes introduce (beyond variables and parameters), in one place.

All go through the registry of :mod:`modelc.ir` (``component_symbols``), so the same name always
gives the same symbol and naming never depends on hash order.

- ``d(of)/d(wrt)@model``: entry (of, wrt) of ``model``'s partial-derivative block, where ``of`` and
  ``wrt`` are component symbol names (``d(state/S[0])/d(forces/E[1])@elastic``). For a leaf model
  this is its partial derivative; for a composed model the total derivative over its sub-models; for
  an implicit model d unknown / d input (assigned by a LinearSolve).
- ``model/converged``, ``model/iterations``, ``model/residual_norm``: per-point Newton status.
- ``cse/k``: common subexpressions, numbered in emission order over the whole program; ``ncse/k``
  inside a Newton solve, ``nx/k`` its exports, ``dcse/k`` the derivative blocks' statements
  regrouped after CSE (:mod:`modelc.passes.blocks`).
"""
from __future__ import annotations

import sympy as sp

from modelc.ir import component_symbols
from modelc.runtime.types import Scalar


def named(name: str) -> sp.Symbol:
    """The registry's scalar symbol called ``name``."""
    return component_symbols(name, Scalar)[0]


def partial_symbol(model: str, of: sp.Symbol, wrt: sp.Symbol) -> sp.Symbol:
    return named(f"d({of.name})/d({wrt.name})@{model}")


def is_partial_symbol(s: sp.Basic) -> bool:
    """Whether ``s`` is a partial-derivative entry's symbol (``d(of)/d(wrt)@model``)."""
    return isinstance(s, sp.Symbol) and s.name.startswith("d(") and ")/d(" in s.name


def ref(model: str, of: sp.Symbol, wrt: sp.Symbol, entry: sp.Expr) -> sp.Expr:
    """How other code refers to a partial-derivative entry: numbers and lone symbols (a variable,
    a parameter, another partial symbol) inline, anything else by its partial symbol (assigned by
    lowering, or by a LinearSolve for implicit models). So no statement merely copies a symbol."""
    return entry if (entry.is_Number or entry.is_Symbol) else partial_symbol(model, of, wrt)


def status_symbols(model: str) -> tuple[sp.Symbol, sp.Symbol, sp.Symbol]:
    """(converged, iterations, residual_norm) of the Newton solve of implicit model ``model``."""
    return tuple(named(f"{model}/{k}") for k in ("converged", "iterations", "residual_norm"))


def residual_name(model: str, unknown: str) -> str:
    """The variable holding the residual of ``unknown`` in implicit model ``model``."""
    return f"{model}/residual/{unknown}"


def local_name(model: str, var: str) -> str:
    """The private name, inside implicit model ``model``, of a variable its ``uses`` provide (so the
    residual's copy of e.g. ``state/S`` never clashes with the outer composition's)."""
    return f"{model}/{var}"


class Counter:
    """``cse/0``, ``cse/1``, ...: deterministic names for common subexpressions."""

    def __init__(self, prefix: str = "cse"):
        self.prefix = prefix
        self.n = 0

    def __iter__(self):
        return self

    def __next__(self) -> sp.Symbol:
        s = named(f"{self.prefix}/{self.n}")
        self.n += 1
        return s
