"""Analyses of the Program IR: what a statement reads and writes, liveness pruning, and whether a
Jacobian depends on the inputs at all (constant-Jacobian analysis)."""
from __future__ import annotations

from typing import Iterable

import sympy as sp

from modelc.ir.program import Assign, LinearSolve, Program, Statement, view
from modelc.symdag import FreeSymbols


def reads(st: Statement, free: FreeSymbols | None = None) -> set[sp.Symbol]:
    """The symbols a statement reads from before it (a Newton's own body and unknowns excluded).
    ``free``: a memo to share between the statements of one pass (their expressions share subtrees)."""
    fs = free if free is not None else FreeSymbols()
    if isinstance(st, Assign):
        return set(fs(st.value))
    if isinstance(st, LinearSolve):
        return fs.union(e for m in (st.A, st.B) for row in m for e in row)
    inner = set(st.unknowns)
    out = set()
    for a in st.body:
        out |= fs(a.value) - inner
        inner.add(a.target)
    for e in (list(st.residual) + [e for row in st.jacobian for e in row] + list(st.residual_scale)
              + list(st.curvature) + [x.value for x in st.exports]):
        out |= fs(e) - inner
    for g in st.guess:
        out |= fs(g)
    return out


def writes(st: Statement) -> set[sp.Symbol]:
    if isinstance(st, Assign):
        return {st.target}
    if isinstance(st, LinearSolve):
        return {t for row in st.targets for t in row}
    return set(st.unknowns) | {st.converged, st.iterations, st.residual_norm} | {x.target for x in st.exports}


def prune(body: Iterable[Statement], live: set[sp.Symbol]) -> tuple[Statement, ...]:
    """``body`` without the statements whose results nothing in ``live`` (or later) reads; a
    LinearSolve keeps only the right-hand-side columns whose solutions are read."""
    live = set(live)
    out = []
    free = FreeSymbols()
    for st in reversed(list(body)):
        w = writes(st)
        if not w & live:
            continue
        if isinstance(st, LinearSolve):
            keep = [j for j in range(len(st.targets[0]) if st.targets else 0)
                    if any(row[j] in live for row in st.targets)]
            if len(keep) < len(st.targets[0]):
                st = LinearSolve(A=st.A, B=tuple(tuple(row[j] for j in keep) for row in st.B),
                                 targets=tuple(tuple(row[j] for j in keep) for row in st.targets))
                w = writes(st)
        out.append(st)
        live -= w
        live |= reads(st, free)
    return tuple(reversed(out))


def constant_jacobian(program: Program) -> bool:
    """Whether ``program`` (explicit: no Newton) has a Jacobian that depends on no input, only on the
    parameters (linear elasticity): the runtime then computes it for one point and returns it
    broadcast over the batch when the parameters are shared."""
    if not program.derivatives or any(not isinstance(st, Assign) for st in program.body):
        return False
    varying = {s for v in program.inputs for s in v.symbols}
    free = FreeSymbols()
    for st in program.body:  # symbols whose value depends on an input, in program order
        if reads(st, free) & varying:
            varying |= writes(st)
    return not any(sp.sympify(e).free_symbols & varying
                   for block in program.derivatives.values() for row in block for e in row)


def constant_variants(program: Program) -> tuple[str, ...]:
    """The variants of ``program`` whose Jacobian depends on the parameters only (see
    :func:`constant_jacobian`)."""
    return tuple(v.name for v in program.variants if v.derivatives and constant_jacobian(view(program, v.name)))


def marks_nonfinite(program: Program) -> bool:
    """Whether a point whose inputs hold a NaN or an infinity must be marked failed explicitly (NaN
    outputs and derivatives, not converged): every model but an affine one (no Newton, a constant
    Jacobian), whose outputs carry the NaN by themselves."""
    return bool(program.status) or not constant_variants(program)


def exponent_parameters(program: Program) -> tuple[str, ...]:
    """The parameters of ``program`` that make up the exponent of a general power (``y**n``,
    ``powr(a, n - 1)``, ``powr_shift(P, a, n - 1)``) whose exponent holds nothing but parameters
    and numbers: with an integer value known when the C library is built, such a power is binary
    powering instead of an exp and a log (the runtime's exponent specialization,
    ``Model(specialize=...)``, docs/backends.md). In the order of ``program.parameters``."""
    from modelc.functions import powr, powr_shift

    owner = {s: p.name for p in program.parameters for s in p.symbols}
    found: set[str] = set()
    seen: set = set()

    def exponent(e) -> None:
        free = e.free_symbols
        if free and free <= set(owner):
            found.update(owner[s] for s in free)

    def walk(e) -> None:
        stack = [e]
        while stack:
            x = stack.pop()
            if x in seen or not isinstance(x, sp.Basic) or x.is_Atom:
                continue
            seen.add(x)
            if isinstance(x, sp.Pow) and not x.exp.is_Number:
                exponent(x.exp)
            elif isinstance(x, powr):
                exponent(x.args[1])
            elif isinstance(x, powr_shift):
                exponent(x.args[2])
            stack.extend(x.args)

    def body(statements) -> None:
        for st in statements:
            if isinstance(st, Assign):
                walk(st.value)
            elif isinstance(st, LinearSolve):
                for row in (*st.A, *st.B):
                    for e in row:
                        walk(e)
            else:
                body(st.body)
                for e in (*st.guess, *st.residual, *(e for row in st.jacobian for e in row),
                          *st.residual_scale, *st.curvature):
                    walk(e)

    body(program.body)
    for exprs in program.results.values():
        for e in exprs:
            walk(e)
    for block in program.derivatives.values():
        for row in block:
            for e in row:
                walk(e)
    return tuple(p.name for p in program.parameters if p.name in found)
