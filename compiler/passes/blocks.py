"""Derivative blocks regrouped as rows times columns, after CSE (the ``blocks`` stage).

The chain rule writes each entry of a tangent block as a sum over the paths from the input to the
output, and CSE then shares what the entries have in common *as written*: j2_voce_af's
d(state/S)/d(forces/E) came out as ``k_ij + c*(P_ij + a_i*b_j + m_i*d_j)``, where ``d_j`` (the
solution of the implicit-function theorem's 1 x 1 system) is itself ``b_j/A``: six operations an
entry and a statement per entry of d(Ep)/d(E) on the way. An expert writes the same tangent as
``K_ij + w_i*b_j``: the two rank-one terms share their column factor ``b_j`` and the outer factor
``c`` goes into the row vector ``w_i``, once per row.

This pass finds that form: the statements that only derivative blocks read (and 1 x 1 linear
solves, as a division by the shared reciprocal of ``A``) are inlined into the entries, products
always and sums where at most one entry of a block reads them (a sum read across a row or a column,
such as a deviatoric flow direction's component, stays one symbol); each entry is expanded into a
sum of products and regrouped by :func:`modelc.passes.cse.take_out_factors`, which takes out first the factor that the fewest
entries of the block hold (a column's or a row's own factor before one that every entry holds), so
what is left inside is shared by ``cse`` along the other index. The regrouped statements replace
the old ones only when they take fewer operations (``count_ops``), and an entry whose expansion
would exceed :data:`MAX_TERMS` leaves the program as it is (a coupled system's blocks read the
solution of its n x n solve: they stay small and keep their form).

Measured on the library (operations a tangent call takes, 2026-11-29): j2_linear_iso 313 -> 156,
perzyna_iso 466 -> 298, j2_voce_af 655 -> 522, j2_perfect 327 -> 171, norton 451 -> 278; a full
Jacobian call 30-45% fewer; the coupled twins and gtn unchanged. At 1e5 points that made the C
tangent calls of perzyna_iso and j2_perfect 2-5% faster and the others level
(docs/performance.md): their time is the Newton's and the tangent's stores, not its arithmetic.

The rewrite is algebra over products and sums: each product of the expanded form holds the same
factors it held before (a gate such as ``ifzero(dgamma, 0, ...)`` stays a factor of every product
it multiplied), so a point's value changes only by rounding, and no new division appears.
"""
from __future__ import annotations

from collections import Counter as Tally
from dataclasses import replace

import sympy as sp

from modelc.errors import InternalError
from modelc.ir import Assign, LinearSolve, Newton, Program, Statement
from modelc.ir.analysis import reads
from modelc.passes.cse import _factors, _inline_numbers, take_out_factors
from modelc.passes.symbols import Counter
from modelc.symdag import FreeSymbols, cse as cse_exprs, expanded_terms, xreplace

#: the most products an entry may expand into; beyond it the program is left as it is
MAX_TERMS = 256


def regroup(program: Program, select: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> Program:
    """The ``blocks`` stage: a declared tangent's blocks (``select``) regrouped, then every block
    (the full Jacobian's, which read much of what the tangent's did), then the tangent's again (the
    second round shares statements with the Jacobian's that the third makes the tangent's own
    again). Without a declared tangent, every block once. Measured on the library (operations a
    call, tangent / full Jacobian): j2_voce_af 655 -> 522 / 1658 -> 1166, perzyna_iso 466 -> 298 /
    772 -> 565, j2_linear_iso 313 -> 156 / 655 -> 394 (the tangent's blocks alone, once: 535, 302,
    170 for the tangent, but the full Jacobian's took more than before)."""
    if select is None:
        return regroup_blocks(program)
    return regroup_blocks(regroup_blocks(regroup_blocks(program, select)), select)


def regroup_blocks(program: Program, select: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> Program:
    """``program`` with the derivative blocks ``select`` (``(of, wrt)`` names: a declared tangent's;
    None: every block) regrouped (see the module docstring), or ``program`` itself where that saves
    nothing. The statements the other blocks read stay as they are."""
    keys = [k for k in program.derivatives if select is None or (k[0] in select[0] and k[1] in select[1])]
    if not keys:
        return program
    body = list(program.body)
    free = FreeSymbols()
    removable = _derivative_only(program, body, free)
    if not removable:
        return program
    counter = Counter("dcse")
    counter.n = 1 + max((int(t.name.rsplit("/", 1)[1]) for st in body if isinstance(st, Assign)
                         for t in (st.target,) if t.name.startswith("dcse/")), default=-1)
    defs, cost = {}, {}
    for k in removable:
        st = body[k]
        if isinstance(st, Assign):
            defs[st.target] = sp.sympify(st.value)
            cost[st.target] = sp.count_ops(st.value)
        else:  # a 1 x 1 solve: x_j = B_j * (1/A)
            a = sp.sympify(st.A[0][0])
            r = next(counter)
            defs[r] = 1 / a
            cost[r] = 1 + sp.count_ops(a)
            for t, b in zip(st.targets[0], st.B[0]):
                defs[t] = sp.sympify(b) * r
                cost[t] = 1 + sp.count_ops(b)
    entries = [[sp.sympify(e) for row in program.derivatives[key] for e in row] for key in keys]
    # (defs are in program order, each reads only earlier ones: one pass, no recursion down a chain
    # of statements as long as a large model's)
    below: dict = {}
    for s, v in defs.items():
        acc = set()
        for x in free(v):
            if x in defs:
                acc.add(x)
                acc |= below[x]
        below[s] = frozenset(acc)

    def reach(e) -> set:
        acc = set()
        for x in free(e):
            if x in defs:
                acc.add(x)
                acc |= below[x]
        return acc

    used = set().union(*(reach(e) for es in entries for e in es))
    old_ops = sum(cost[s] for s in used) + sum(sp.count_ops(e) for es in entries for e in es)
    per_block: dict[sp.Symbol, int] = {}
    for es in entries:
        count = Tally(s for e in es for s in reach(e))
        for s, k in count.items():
            per_block[s] = max(per_block.get(s, 0), k)

    def inlined(s) -> bool:
        v = defs[s]
        if v.is_Add:
            return per_block.get(s, 0) <= 1
        # products, and whole powers; a division or a function call stays one value, computed once
        return v.is_Mul or v.is_Symbol or (v.is_Pow and v.exp.is_Integer and v.exp > 0)

    flat_defs: dict = {}  # each def with the defs it reads inlined where they are (program order)
    for s, v in defs.items():
        rule = {x: flat_defs[x] for x in free(v) if x in defs and inlined(x)}
        flat_defs[s] = xreplace(v, rule) if rule else v

    def inline(e):
        rule = {x: flat_defs[x] for x in free(e) if x in defs and inlined(x)}
        return xreplace(e, rule) if rule else e

    new_entries = []
    for es in entries:
        flat = [inline(e) for e in es]
        if any(expanded_terms(e, MAX_TERMS) >= MAX_TERMS for e in flat):
            return program
        flat = [sp.expand(e, power_exp=False, power_base=False, log=False) for e in flat]
        rare = Tally(f for e in flat for f in {f for t in sp.Add.make_args(e) for f in _factors(t)})
        new_entries.append([take_out_factors(list(sp.Add.make_args(e)), _rarest(rare)) for e in flat])
    kept: list[sp.Symbol] = []
    todo = sorted(free.union(e for es in new_entries for e in es) & defs.keys(), key=str)
    seen = set(todo)
    while todo:
        s = todo.pop()
        kept.append(s)
        for x in free(flat_defs[s]):
            if x in defs and x not in seen:
                seen.add(x)
                todo.append(x)
    order = {s: k for k, s in enumerate(defs)}
    kept.sort(key=order.__getitem__)
    flat_entries = [e for es in new_entries for e in es]
    replacements, reduced = _inline_numbers(*cse_exprs(flat_entries + [flat_defs[s] for s in kept], counter))
    new_ops = sum(sp.count_ops(v) for _, v in replacements) + sum(sp.count_ops(v) for v in reduced)
    if new_ops >= old_ops:
        return program
    # the kept sums under new names (the old statements may still serve other blocks); a kept sum
    # whose value is a common subexpression is that subexpression (no copy)
    renamed = {s: v if v.is_Symbol else next(counter) for s, v in zip(kept, reduced[len(flat_entries):])}
    statements = [Assign(s, xreplace(v, renamed)) for s, v in replacements]
    statements += [Assign(renamed[s], xreplace(v, renamed)) for s, v in zip(kept, reduced[len(flat_entries):])
                   if not v.is_Symbol]
    derivatives, at = dict(program.derivatives), 0
    for key in keys:
        rows = []
        for row in program.derivatives[key]:
            rows.append(tuple(xreplace(reduced[at + j], renamed) for j in range(len(row))))
            at += len(row)
        derivatives[key] = tuple(rows)
    out = replace(program, body=tuple(body + _ordered(statements, free)), derivatives=derivatives)
    return _prune(out, set(removable), FreeSymbols())


def _prune(program: Program, candidates: set[int], free: FreeSymbols) -> Program:
    """``program`` without the statements at ``candidates`` (Assigns and 1 x 1 solves) that nothing
    reads any more."""
    live: set = set()
    for comps in list(program.results.values()) + [row for b in program.derivatives.values() for row in b]:
        live |= free.union(sp.sympify(e) for e in comps)
    live |= set(program.status.values())
    body = list(program.body)
    keep = [True] * len(body)
    for k in range(len(body) - 1, -1, -1):
        st = body[k]
        written = {st.target} if isinstance(st, Assign) else (
            {t for row in st.targets for t in row} if isinstance(st, LinearSolve) else None)
        if k in candidates and not (written & live):
            keep[k] = False
            continue
        live |= reads(st, free)
    return replace(program, body=tuple(st for st, k in zip(body, keep) if k))


def _derivative_only(program: Program, body: list[Statement], free: FreeSymbols) -> list[int]:
    """Indices of the statements only derivative blocks read (Assigns and 1 x 1 linear solves), in
    program order: nothing else (results, status, a Newton solve, another linear solve, a
    statement they read) reads them."""
    need: set = set()
    for comps in program.results.values():
        need |= free.union(sp.sympify(e) for e in comps)
    need |= set(program.status.values())
    out = []
    for k in range(len(body) - 1, -1, -1):
        st = body[k]
        if isinstance(st, Assign):
            if st.target in need:
                need |= free(sp.sympify(st.value))
            else:
                out.append(k)
        elif (isinstance(st, LinearSolve) and len(st.A) == 1
              and not any(t in need for row in st.targets for t in row)):
            out.append(k)
        elif isinstance(st, (LinearSolve, Newton)):
            need |= reads(st, free)
        else:
            raise InternalError(f"blocks: unexpected statement {type(st).__name__}")
    # (the backward pass saw every reader before the statement it reads: nothing kept reads one)
    kept_reads = set()
    for k, st in enumerate(body):
        if k not in out:
            kept_reads |= reads(st, free)
    if any(isinstance(body[k], Assign) and body[k].target in kept_reads for k in out):
        raise InternalError("blocks: a statement only derivatives read is read by a kept one")
    return sorted(out)


def _rarest(rare: Tally):
    """``take_out_factors``' choice here: of the factors two terms or more hold, the one the fewest
    entries of the block hold (ties: the most terms, then the name)."""
    def pick(count: dict):
        shared = [f for f, k in count.items() if k >= 2]
        return min(shared, key=lambda f: (rare[f], -count[f], sp.default_sort_key(f))) if shared else None
    return pick


def _ordered(statements: list[Assign], free: FreeSymbols) -> list[Assign]:
    """``statements`` in an order where each follows those it reads (their order otherwise)."""
    defined = {s.target: k for k, s in enumerate(statements)}
    deps = [{defined[x] for x in free(sp.sympify(s.value)) if x in defined} for s in statements]
    out, done = [], set()

    def visit(k, stack=()):
        if k in done:
            return
        if k in stack:
            raise InternalError("blocks: the regrouped statements read each other in a cycle")
        for d in sorted(deps[k]):
            visit(d, stack + (k,))
        done.add(k)
        out.append(statements[k])

    for k in range(len(statements)):
        visit(k)
    return out
