"""Scheduling: the statements of each straight-line segment in an order that keeps few values live.

Input: a Program split into variants (``Program.masks``) and the *sinks* of a backend, in the order
it wants them done: sets of symbols that it writes out together (the outputs' row, then a chunk
of the tangent's entries, ...). Output: the same statements and masks, reordered within each
segment (the statements between Newton solves; a Newton solve stays where it is). Statements
before a Newton solve that it does not need move after it first. Then, for each sink in turn, the
statements it needs are placed depth first, the operand with the larger dependency cone first
(Sethi-Ullman's rule, which for a tree needs the fewest registers); statements no sink reaches
follow in their former order. Two orders of the sinks are tried (as given; the one needing the
fewest statements not yet placed first) and the segment's former order is the third candidate:
the one with the fewest values of the backend's variant live at once is kept (:func:`_pressure`,
a count, not ptxas' allocation: every change here was measured with benchmarks/gpu_kernels.py).
Every dependency is kept: a statement is placed after everything it reads.

Why: :mod:`modelc.passes.variants` orders a segment by how many variants need a statement, so a
tangent kernel computed all 36 entries of ``dEp/dE`` before the first entry of ``dS/dE`` that reads
them, and a GPU thread held them all. Placed entry by entry next to the stores that read them,
those values die as soon as their chunk is written (sm_90, float64 tangent kernels, with CSE's
named differences: 128-180 -> 116-168 registers). The order changes no arithmetic: every
statement computes what it did.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

import sympy as sp

from modelc.errors import InternalError
from modelc.ir import Newton, Program
from modelc.ir.analysis import reads, writes
from modelc.symdag import FreeSymbols


def schedule(program: Program, sinks: Sequence[Iterable[sp.Symbol]], bit: int) -> Program:
    """``program`` with each segment reordered for ``sinks`` and the variant ``bit`` (see the module
    docstring)."""
    if not program.masks:
        raise InternalError(f"schedule: program {program.name} is not split into variants")
    sinks = [set(s) for s in sinks]
    free = FreeSymbols()
    body, masks = _defer(list(program.body), list(program.masks), free)
    out, out_masks, start = [], [], 0
    for k in range(len(body) + 1):
        if k < len(body) and not isinstance(body[k], Newton):
            continue
        later = set().union(*(reads(st, free) for st in body[k:]))
        order = _segment(body[start:k], masks[start:k], sinks, later, bit, free)
        out += [body[start + i] for i in order]
        out_masks += [masks[start + i] for i in order]
        if k < len(body):
            out.append(body[k])
            out_masks.append(masks[k])
        start = k + 1
    if out == list(program.body):
        return program
    return replace(program, body=tuple(out), masks=tuple(out_masks))


def _defer(body: list, masks: list[int], free: FreeSymbols) -> tuple[list, list[int]]:
    """Statements before a Newton solve that the solve does not need (even through others) moved
    to right after it, in their order: a value computed before the iterations and read only after
    them holds a register through the whole loop."""
    k = len(body)
    while k > 0:
        k -= 1
        if not isinstance(body[k], Newton):
            continue
        start = k
        while start > 0 and not isinstance(body[start - 1], Newton):
            start -= 1
        need = set(reads(body[k], free))
        keep, move = [], []
        for j in range(k - 1, start - 1, -1):
            if writes(body[j]) & need:
                need |= reads(body[j], free)
                keep.append(j)
            else:
                move.append(j)
        if move:
            order = sorted(keep) + [k] + sorted(move)
            body[start:k + 1] = [body[j] for j in order]
            masks[start:k + 1] = [masks[j] for j in order]
        k = start
    return body, masks


def _segment(stmts: list, masks: list[int], sinks: list[set], later: set, bit: int,
             free: FreeSymbols) -> list[int]:
    """The order of one segment: of the candidates (the former order; the sinks in the order given;
    the sink needing the fewest statements not yet placed first), the one that keeps the fewest
    values of variant ``bit`` live at once (:func:`_pressure`); the first on ties."""
    n = len(stmts)
    rd = [reads(st, free) for st in stmts]
    wr = [writes(st) for st in stmts]
    producer = {s: i for i in range(n) for s in wr[i]}
    deps = [sorted({producer[s] for s in rd[i] if s in producer and producer[s] != i}) for i in range(n)]
    for i, ds in enumerate(deps):
        if ds and ds[-1] >= i:
            raise InternalError("schedule: a statement reads a value defined after it")
    cone = [0] * n  # bit set of the statements each one needs (itself included)
    for i in range(n):
        c = 1 << i
        for j in deps[i]:
            c |= cone[j]
        cone[i] = c
    size = [c.bit_count() for c in cone]
    roots = [sorted({producer[s] for s in sink if s in producer}) for sink in sinks]
    roots.append(sorted({producer[s] for s in later if s in producer}))
    candidates = [list(range(n)), _depth_first(roots, deps, cone, size, n, greedy=False),
                  _depth_first(roots, deps, cone, size, n, greedy=True)]
    active = [bool(m & bit) for m in masks]
    return min(candidates, key=lambda order: _pressure(order, rd, wr, active, sinks, later))


def _depth_first(roots: list[list[int]], deps, cone, size, n: int, greedy: bool) -> list[int]:
    """The order placing each sink's statements (``roots``: its statements) depth first, the sinks
    in the order given or (``greedy``) the one with the fewest statements not yet placed first;
    then every statement not yet placed, in index order."""
    placed = [False] * n
    order: list[int] = []

    def place(root: int) -> None:
        stack = [(root, iter(sorted(deps[root], key=lambda j: (-size[j], j))))]
        while stack:
            i, it = stack[-1]
            j = next((j for j in it if not placed[j]), None)
            if j is not None:
                stack.append((j, iter(sorted(deps[j], key=lambda d: (-size[d], d)))))
                continue
            stack.pop()
            if not placed[i]:
                placed[i] = True
                order.append(i)

    todo = []  # (statements, bit set of their cones) of each sink
    for rs in roots:
        c = 0
        for i in rs:
            c |= cone[i]
        todo.append((rs, c))
    done = 0
    while todo:
        k = (min(range(len(todo)), key=lambda k: ((todo[k][1] & ~done).bit_count(), k)) if greedy else 0)
        rs, c = todo.pop(k)
        for i in rs:
            place(i)
        done |= c
    for i in range(n):
        place(i)
    return order


def _pressure(order: list[int], rd, wr, active, stores: list[set], later: set) -> int:
    """The most values live at once when the statements of one variant (``active``) run in
    ``order``: a value is live from its statement (the segment's start for one defined before it)
    to its last reader; a sink's symbols until its last one is computed (where the backend writes
    them out), symbols read after the segment to its end."""
    pos = {}
    last: dict = {}
    k = 0
    for i in order:
        if not active[i]:
            continue
        for s in rd[i]:
            last[s] = k
        for s in wr[i]:
            pos[s] = k
        k += 1
    for sink in stores:
        done = max((pos[s] for s in sink if s in pos), default=None)
        if done is not None:
            for s in sink:
                last[s] = max(last.get(s, -1), done)
    for s in later:
        if s in pos:  # (one defined before the segment and read after it is live throughout)
            last[s] = k
    delta = [0] * (k + 2)
    for s, end in last.items():
        begin = pos.get(s, 0)
        if end >= begin:
            delta[begin] += 1
            delta[end + 1] -= 1
    live = best = 0
    for d in delta:
        live += d
        best = max(best, live)
    return best
