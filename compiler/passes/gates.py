"""Strong zeros: where a product's gate is exactly 0, the product is 0, not ``0 * inf = NaN``.

A radial return's plastic strain is ``dgamma n`` with ``dgamma = macaulay(f) / h`` and the flow
direction ``n = safe_div(1, |s|) s``; its derivative carries ``macaulay(f) s s / |s|**3`` (and
``heaviside(f) ...``), and a coupled return map's Jacobian carries ``dt gamma d n / d s`` with the same
``1 / |s|**3``. In the elastic range the gate (``macaulay(f)``, ``heaviside(f)``, the flow rate
``gamma`` that the Newton solve leaves at exactly 0, a Perzyna rate ``powr(macaulay(f) / eta, n)``)
is 0, and so is the product in exact arithmetic. In floating point too, as long as the other factor
is finite; but ``|s|**-3`` overflows when the deviator is tiny: in float32 below ``|s| ~ 1e-13`` (a
hydrostatic strain's rounding, a stress control iterating to zero stress), and times ``E**3`` (MPa)
below ``|s| ~ 1e-8``. Then the elastic tangent came out NaN while the step said converged: up to
half the float32 tangents of ten of the twelve bundled models at random near-hydrostatic strains
(``tests/models/test_tiny_deviator.py``). float64 overflows only below ``|s| ~ 1e-103``.

:class:`Gates` rewrites an expression (the CSE pass calls it on each inlined expression of a
segment, where every factor is explicit): in a product of a gate ``g`` and a factor with at least
:data:`SINGULAR` reciprocal powers of a norm, each reciprocal ``a`` (``safe_div(x, |s|**k)``, a
negative power of a norm) becomes ``ifzero(g, 0, a)``. Where ``g`` is 0 the product is then a
product of finite numbers and 0; elsewhere it is the same arithmetic as before (same bits). A NaN
gate keeps the reciprocal (NaN in, NaN out). The reciprocals are the few atoms the whole tangent is
built from (``safe_div(1, r**2)``, ``safe_div(1, 2 r)``), so after the CSE the cost is a handful of
selects per gate, and nothing else about the expressions changes. (Placed before the inlining, on
the lowered program's assignments, the selects stood between the CSE and the products it factors:
chaboche2_coupled's tangent took 20% longer; a select around each gated product, 1.85x for
j2_linear_iso's: benchmarks/results/20261128T153256Z-cpu-strong-zeros.md.)

The strong zero is exact for any factor (a product with an exact 0 is 0 whenever the other factor
is finite in exact arithmetic, which a reciprocal of a norm is where the norm is not 0; at a 0 norm
``safe_div`` gives 0); the gates are the factors likely to be exactly 0 over a range of inputs, where
a select pays: ``macaulay(f)``, ``heaviside(f)``, ``powr(a, b)`` (0 at ``a = 0``, and where it
underflows), a positive power or a multiple of a gate, and a Newton solve's unknowns (a
complementarity ``min(gamma, -f)`` leaves the flow rate at exactly 0 in the elastic range).

What is left: a factor with a single reciprocal (a unit direction ``s / |s|``, bounded, or its
first derivative ``~ 1 / |s|``) overflows float32 only below ``|s| ~ 1e-38``, or ``~ 1e-23`` times
``E**3`` in MPa, and is not masked.
"""
from __future__ import annotations

import sympy as sp

from modelc.functions import heaviside, ifzero, macaulay, powr, safe_div, safe_sqrt
from modelc.symdag import rebuilt_like

__all__ = ["Gates", "SINGULAR"]

#: the reciprocal powers of a norm from which a factor counts as one that may overflow
SINGULAR = 2
_SAME = object()  # memo: the node is unchanged


class Gates:
    """The strong-zero rewrite of expressions whose symbols ``unknowns`` are Newton unknowns (gates
    themselves); memoized over the nodes of every expression it is given (one segment's share
    subtrees)."""

    def __init__(self, unknowns=()):
        self.unknowns = frozenset(unknowns)
        self._memo: dict = {}
        self._degree: dict = {}
        self._reciprocal: dict = {}
        self._gate: dict = {}

    def __call__(self, e):
        """``e`` with each reciprocal of a norm in a gated product that may overflow masked by the
        gate (module doc); ``e`` itself where there is none."""
        hit = self._memo.get(e)
        if hit is not None:  # (an unchanged node is the caller's own object: no rebuilt copy)
            return e if hit is _SAME else hit
        out = e
        if e.args and not e.is_Atom:
            args = tuple(self(a) for a in e.args)
            if any(a is not b for a, b in zip(args, e.args)):
                out = rebuilt_like(e, args)
        if isinstance(out, sp.Mul):
            gates = [a for a in out.args if self.is_gate(a)]
            if gates:
                if sum(self.reciprocal(a) for a in out.args if a not in gates) >= SINGULAR:
                    out = rebuilt_like(out, tuple(a if a in gates else self._masked(a, gates[0])
                                                   for a in out.args))
        self._memo[e] = _SAME if out is e else out
        return out

    def _masked(self, e, g):
        """``e`` with each of its reciprocals of a norm ``a`` made ``ifzero(g, 0, a)``."""
        if not self.reciprocal(e):
            return e
        if isinstance(e, (sp.Add, sp.Mul)):
            return rebuilt_like(e, tuple(self._masked(a, g) for a in e.args))
        if isinstance(e, sp.Pow) and e.exp.is_number and e.exp > 0:  # (a reciprocal, squared)
            return rebuilt_like(e, (self._masked(e.base, g), e.exp))
        return ifzero(g, sp.S.Zero, e)

    def is_gate(self, a) -> bool:
        """``a`` is likely to be exactly 0 over a range of inputs (module doc)."""
        hit = self._gate.get(a)
        if hit is None:
            if a in self.unknowns or isinstance(a, (macaulay, heaviside, powr)):
                hit = True
            elif isinstance(a, sp.Pow):
                hit = bool(a.exp.is_positive) and self.is_gate(a.base)
            elif isinstance(a, sp.Mul):
                hit = any(self.is_gate(f) for f in a.args)
            elif isinstance(a, safe_div):
                hit = self.is_gate(a.args[0])
            else:
                hit = False
            self._gate[a] = hit
        return hit

    def degree(self, e) -> float:
        """How many powers of a norm ``e`` is: ``safe_sqrt(q)`` 1, ``2 r`` 1, ``r*r`` 2; 0 without one."""
        hit = self._degree.get(e)
        if hit is None:
            if isinstance(e, safe_sqrt):
                hit = 1.0
            elif isinstance(e, sp.Pow) and e.exp.is_number:
                hit = float(e.exp) * self.degree(e.base)
            elif isinstance(e, sp.Mul):
                hit = sum(self.degree(a) for a in e.args)
            else:
                hit = max((self.degree(a) for a in e.args), default=0.0)
            self._degree[e] = hit
        return hit

    def reciprocal(self, e) -> float:
        """How many reciprocal powers of a norm ``e`` multiplies: ``safe_div(1, r*r)`` 2,
        ``x x safe_div(1, r**2) safe_div(1, 2 r)`` 3, ``safe_div(1, r) x`` 1 (a numerator's powers are
        not taken off: each factor is evaluated by itself, and it is their product that overflows)."""
        hit = self._reciprocal.get(e)
        if hit is None:
            if isinstance(e, safe_div):
                hit = self.reciprocal(e.args[0]) + max(self.degree(e.args[1]), 0.0)
            elif isinstance(e, sp.Pow) and e.exp.is_number:
                k = float(e.exp)
                hit = -k * max(self.degree(e.base), 0.0) if k < 0 else k * self.reciprocal(e.base)
            elif isinstance(e, sp.Mul):
                hit = sum(self.reciprocal(a) for a in e.args)
            else:
                hit = max((self.reciprocal(a) for a in e.args), default=0.0)
            self._reciprocal[e] = hit
        return hit
