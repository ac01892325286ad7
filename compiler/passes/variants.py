"""Variants: one Program serves every call a model answers (value, tangent, Jacobian, total).

Input: the CSE'd program computing everything any variant returns (outputs, every derivative
block by inputs and parameters). Output: the same statements, each tagged (``Program.masks``) with
the bits of the variants that need it, so that every backend emits the model once and guards each
group of statements by the variant asked for (``if V & 6:``): a value call computes no derivative,
a tangent call only what its blocks read. Before this pass the compiler made four Programs per
model and the backends printed each (most of a generated module was the same code four times).

- Liveness is computed backwards once per variant (from its results, derivative blocks and the
  status). A statement no variant needs is dropped.
- A :class:`~modelc.ir.LinearSolve` (the implicit function theorem's ``dR/du X = -dR/dx``) is split
  by right-hand-side columns into one solve per set of variants that needs them: a tangent call
  solves for its own columns only. The groups share the matrix: the Triton backend eliminates it
  once for all of them (``Emitter.share_factors``), and so does the C backend (the template LU
  keeps its pivots; the later groups go through ``mc_lu_apply``), so a call that needs several
  groups (Jacobian, total) factors it once; the PyTorch backend (torch.linalg from 4 unknowns on)
  solves each group on its own.
- Within each straight-line segment (between Newton solves) statements are stably sorted by
  how many variants need them, most first, then by mask: a statement's operands are needed by
  every variant that needs it, so this order respects every dependency, and each variant's
  statements form few contiguous guarded groups.
"""
from __future__ import annotations

from dataclasses import replace

import sympy as sp

from modelc.errors import InternalError
from modelc.ir import Assign, LinearSolve, Newton, Program, Statement, Variant
from modelc.ir.analysis import reads, writes
from modelc.ir.program import VARIANT_BITS, selects


def standard_variants(program: Program, tangent: tuple[tuple[str, ...], tuple[str, ...]] | None
                      ) -> tuple[Variant, ...]:
    """value, jacobian, total (when ``program`` has parameter columns) and, when declared, the
    tangent ``(of, wrt)`` (a parameter ``p`` named ``$p``)."""
    out = [Variant("value", VARIANT_BITS["value"], False)]
    if tangent is not None:
        out.append(Variant("tangent", VARIANT_BITS["tangent"], True, tuple(tangent[0]), tuple(tangent[1])))
    out.append(Variant("jacobian", VARIANT_BITS["jacobian"], True))
    if program.jacobian_wrt is not None:
        out.append(Variant("total", VARIANT_BITS["total"], True, None, tuple(program.jacobian_wrt)))
    return tuple(out)


def split_variants(program: Program, variants: tuple[Variant, ...]) -> Program:
    """``program`` serving ``variants``: statements tagged with the variants that need them."""
    if program.masks:
        raise InternalError(f"split_variants: program {program.name} is already split")
    body = list(program.body)
    need: list[int] = [0] * len(body)
    columns: list[list[int]] = [[0] * (len(st.targets[0]) if st.targets else 0) if isinstance(st, LinearSolve)
                                else [] for st in body]
    for v in variants:
        live = _roots(program, v)
        for k in range(len(body) - 1, -1, -1):
            st = body[k]
            if isinstance(st, LinearSolve):
                cols = [j for j in range(len(columns[k])) if any(row[j] in live for row in st.targets)]
                if not cols:
                    continue
                for j in cols:
                    columns[k][j] |= v.bit
                    live -= {row[j] for row in st.targets}
                live |= set().union(*(sp.sympify(e).free_symbols for row in st.A for e in row))
                live |= set().union(*(sp.sympify(row[j]).free_symbols for row in st.B for j in cols))
                need[k] |= v.bit
                continue
            if isinstance(st, Newton) or writes(st) & live:
                need[k] |= v.bit
                live -= writes(st)
                live |= reads(st)
    out: list[Statement] = []
    masks: list[int] = []
    for st, m, cols in zip(body, need, columns):
        if not m:
            continue
        if isinstance(st, LinearSolve):
            for group in sorted(set(cols) - {0}, key=lambda g: (-bin(g).count("1"), g)):
                keep = [j for j, g in enumerate(cols) if g == group]
                out.append(LinearSolve(A=st.A, B=tuple(tuple(row[j] for j in keep) for row in st.B),
                                       targets=tuple(tuple(row[j] for j in keep) for row in st.targets)))
                masks.append(group)
            continue
        out.append(st)
        masks.append(m)
    out, masks = _group(out, masks)
    derivs = {k: b for k, b in program.derivatives.items() if any(selects(v, *k) for v in variants)}
    return replace(program, body=tuple(out), masks=tuple(masks), variants=tuple(variants),
                   derivatives=derivs)


def _roots(program: Program, v: Variant) -> set[sp.Symbol]:
    live = set(program.status.values())
    for comps in program.results.values():
        for e in comps:
            live |= sp.sympify(e).free_symbols
    for key, block in program.derivatives.items():
        if selects(v, *key):
            for row in block:
                for e in row:
                    live |= sp.sympify(e).free_symbols
    return live


def _group(body: list[Statement], masks: list[int]) -> tuple[list[Statement], list[int]]:
    """Within each segment (statements between Newton solves), the statements needed by the most
    variants first, then by mask (stable): see the module docstring for why this keeps the order
    of every dependency."""
    out: list[tuple[Statement, int]] = []
    segment: list[tuple[Statement, int]] = []

    def flush():
        segment.sort(key=lambda sm: (-bin(sm[1]).count("1"), sm[1]))
        out.extend(segment)
        segment.clear()

    for st, m in zip(body, masks):
        if isinstance(st, Newton):
            flush()
            out.append((st, m))
        else:
            segment.append((st, m))
    flush()
    return [s for s, _ in out], [m for _, m in out]
