"""Differentiation: fill ``Model.partials`` (structurally zero blocks absent).

- **Leaf explicit model**: ``sympy.diff`` of every output component with respect to every input
  component it reads (on scalar components; no global ``simplify``).
- **Composed model**: the chain rule, assembled *only* from the sub-models' partials, by forward
  accumulation in evaluation order. With ``T(v, x)`` the total derivative of variable ``v`` with
  respect to composed input ``x`` and ``P_s(o, i)`` sub-model ``s``'s partial of its output ``o``
  with respect to its input ``i``::

      T(o, x) = sum_i P_s(o, i) T(i, x),     T(x, x) = I,   T(i, x) = 0 for other inputs i.

  Entries refer to the sub-model partials through their partial symbols (``d(o)/d(i)@s``, see
  :mod:`modelc.passes.symbols`) and to earlier totals through ``d(v)/d(x)@composed``, so nothing is
  duplicated: the composed model's ``partials`` holds ``T(v, x)`` for *every* variable its
  sub-models provide (outputs and intermediates), in evaluation order; lowering assigns each
  entry to its symbol. The seed's example y1 = f(x1, x2), y2 = g(y1, x3), y = h(y1, y2, x4) gives
  dy/dx1 = (h_y1 + h_y2 g_y1) f_x1 (tests check all four).
- **Implicit model** R(u, x) = 0 (resolved by composition: one sub-model, the residual system): the
  system is differentiated as a composed model, giving dR/du and dR/dx; the implicit model's own
  partials du/dx = -(dR/du)^-1 dR/dx are *symbols* (``d(u)/d(x)@model``) that lowering assigns with
  a LinearSolve after the Newton solve (implicit-function theorem; never through the iterations).
  Blocks are present for every unknown and every input some residual depends on.
- **Parameters** are differentiated like inputs: each parameter ``p`` takes part as the pseudo-input
  ``$p`` (:func:`param_variable`, whose symbols are the parameter's own), so leaf partials, the chain
  rule and the implicit-function theorem (du/dp = -(dR/du)^-1 dR/dp) give d outputs / d parameters
  with no rule of their own. Lowering computes these blocks only for a program that asks for them
  (``lower(..., parameters=True)`` or a tangent that lists parameters); others prune them.
"""
from __future__ import annotations

from dataclasses import replace

import sympy as sp

from modelc.ir import Model, Parameter, Partial, Variable
from modelc.passes.compose import is_resolved, resolve_implicit
from modelc.passes.symbols import partial_symbol, ref
from modelc.symdag import Diff, FreeSymbols, Identity, distinct_nodes, xreplace

Block = tuple[tuple[sp.Expr, ...], ...]


def differentiate(model: Model) -> Model:
    """``model`` with ``partials`` filled in (recursively for its sub-models)."""
    if model.is_implicit:
        return _implicit(model)
    if model.is_composed:
        return _composed(model)
    return _leaf(model)


def param_variable(p: Parameter) -> Variable:
    """Parameter ``p`` as the pseudo-input ``$<name>`` that derivative blocks name (its symbols are
    ``p.symbols``: a parameter's symbols carry the same ``$`` prefix, see ``ir.param_symbols``)."""
    return Variable("$" + p.name, p.type, p.doc)


def differentiable(model: Model) -> tuple[Variable, ...]:
    """What ``model``'s outputs are differentiated with respect to: its inputs, then its parameters."""
    return model.inputs + tuple(param_variable(p) for p in model.parameters)


def _done(model: Model, partials: tuple[Partial, ...], submodels: tuple[Model, ...] | None = None) -> Model:
    subs_same = submodels is None or all(a is b for a, b in zip(submodels, model.submodels))
    if subs_same and partials == model.partials and model.differentiated:
        return model
    if submodels is None:
        return replace(model, partials=partials, differentiated=True)
    return replace(model, partials=partials, submodels=submodels, differentiated=True)


def _leaf(model: Model) -> Model:
    partials = []
    free = FreeSymbols()  # memoized over shared subexpressions, like the derivatives
    diffs: dict[sp.Symbol, Diff] = {}
    for eq in model.equations:
        comps = [sp.sympify(c) for c in eq.components]
        frees = [free(c) for c in comps]
        every = free.union(comps)
        trace = _trace_reads(eq.var, comps, free, diffs)
        for x in differentiable(model):
            if not every & set(x.symbols):
                continue
            block = tuple(tuple(_diff(diffs, s, free)(c) if s in fc else sp.S.Zero for s in x.symbols)
                          for c, fc in zip(comps, frees))
            if any(e != 0 for row in block for e in row):
                traceless = trace is not None and not trace & set(x.symbols)
                partials.append(Partial(eq.var.name, x.name, block, traceless, _blind(x, block, comps)))
    return _done(model, tuple(partials))


def _blind(x: Variable, block: Block, comps=()) -> bool:
    """Whether every row of ``block`` (d o / d x, ``x`` an SR2) sums to zero over its first three
    columns: ``o`` reads the deviator of ``x`` only (a J2 flow direction
    ``dev(M)/|dev(M)|`` of the Mandel stress ``M``). A row too large counts as not zero.

    First, without expanding: ``o``'s components ``comps`` with ``x`` shifted by ``c I`` (``c`` a
    fresh symbol added to its three normal components) no longer read ``c`` once SymPy has
    collected the terms it collects anyway (``dev(x)`` cancels the shift linearly): then ``o``
    does not change along ``I`` and every such row sum is zero. Otherwise each row sum is tested
    for zero (``symdag.Identity``)."""
    if x.type.name != "SR2":
        return False
    if comps:
        c = sp.Dummy("c")
        shift = {s: s + c for s in x.symbols[:3]}
        free = FreeSymbols()
        if all(c not in free(xreplace(sp.sympify(e), shift)) for e in comps):
            return True
    same = Identity().same
    for row in block:
        s = sp.Add(*row[:3])
        if s == 0:
            continue
        if distinct_nodes((s,), _TRACE_NODES) > _TRACE_NODES or not same(s, 0):
            return False
    return True


_TRACE_NODES = 2000  # traces and row sums with more distinct subexpressions are not examined (bounds
# the derivatives taken; a DAG count: sympy.count_ops walks the tree, minutes on shared subexpressions)


def _trace_reads(var: Variable, comps: list, free: FreeSymbols, diffs: dict) -> set | None:
    """The symbols the trace of an SR2 output really reads: those whose derivative of the trace is
    not identically zero (None: not an SR2, or too large). ``Ep = old(Ep) + dgamma*s/|s|`` with
    ``s = 2*G*dev(eps - old(Ep))``: the trace reads ``old(Ep)`` only, so d Ep / d eps and
    d Ep / d dgamma are traceless. Decided by ``symdag.Identity``, never by multiplying out (an
    ``expand`` of the trace of ``(tr(a) + tr(b) + s + a:b)**12 a`` ran for minutes); it may miss
    a cancellation hidden inside a function (the partial is then not marked: safe), and invents
    one with probability below 1e-30."""
    if var.type.name != "SR2":
        return None
    tr = sp.Add(*comps[:3])
    if distinct_nodes((tr,), _TRACE_NODES) > _TRACE_NODES:
        return None
    same = Identity().same
    return {s for s in free(tr) if not same(_diff(diffs, s, free)(tr), 0)}


def _diff(diffs: dict, s: sp.Symbol, free: FreeSymbols) -> Diff:
    """d/ds, one per symbol for the whole model (sympy.diff's result; shared subexpressions once)."""
    d = diffs.get(s)
    if d is None:
        d = diffs[s] = Diff(s, free)
    return d


def _composed(model: Model) -> Model:
    subs = tuple(differentiate(s) for s in model.submodels)
    xs = differentiable(model)
    inputs = {x.name: x for x in xs}
    totals: dict[tuple[str, str], Block] = {}  # (v, x) -> refs of T(v, x) entries
    traceless: set[tuple[str, str]] = set()  # the (v, x) whose T(v, x) is traceless
    blind: set[tuple[str, str]] = set()  # the (v, x) whose T(v, x) is blind to x's trace
    values = _Values()  # what the refs stand for (to compare entries)
    partials = []
    for s in subs:
        by_out: dict[str, list[Partial]] = {}
        for p in s.partials:
            by_out.setdefault(p.of, []).append(p)
        svars = {v.name: v for v in differentiable(s) + s.outputs}
        for o in s.outputs:
            for x in xs:
                acc = None
                flags, blinds = [], []
                for p in by_out.get(o.name, ()):
                    refs = values.refs(s.name, o, svars[p.wrt], p.block)
                    if p.wrt == x.name:
                        term = refs
                        blinds.append(p.blind)
                    elif (p.wrt, x.name) in totals:
                        total = totals[(p.wrt, x.name)]
                        # one rewrite or the other, never both: P' T' = P T + 3 a c^T
                        if (p.wrt, x.name) in traceless:
                            refs = _without_trace(refs, p.block)
                        elif p.blind:
                            total = _without_common(total, values)
                        term = _matmul(refs, total)
                        blinds.append((p.wrt, x.name) in blind)
                    else:
                        continue
                    flags.append(p.traceless)
                    acc = term if acc is None else _add(acc, term)
                if acc is None or all(e == 0 for row in acc for e in row):
                    continue
                flat = all(flags) and o.type.name == "SR2"
                deaf = all(blinds) and inputs[x.name].type.name == "SR2"
                partials.append(Partial(o.name, x.name, acc, flat, deaf))
                totals[(o.name, x.name)] = values.refs(model.name, o, inputs[x.name], acc)
                if flat:
                    traceless.add((o.name, x.name))
                if deaf:
                    blind.add((o.name, x.name))
    return _done(model, tuple(partials), subs)


class _Values:
    """The refs a composition's chain rule writes, and the entries they stand for: the sub-models'
    partials and the composition's own totals, so that two refs can be compared by value (resolved
    through the totals down to the sub-models' entries)."""

    def __init__(self):
        self.of: dict[sp.Symbol, sp.Expr] = {}
        self.memo: dict[sp.Expr, sp.Expr] = {}

    def refs(self, model: str, of: Variable, wrt: Variable, block: Block) -> Block:
        out = _refs(model, of, wrt, block)
        for ref_row, row in zip(out, block):
            for r, e in zip(ref_row, row):
                if isinstance(r, sp.Symbol) and r is not e and r != e:
                    self.of[r] = sp.sympify(e)
        return out

    def __call__(self, e: sp.Expr) -> sp.Expr:
        got = self.memo.get(e)
        if got is None:
            got = e
            for _ in range(8):  # a total refers to totals before it: a few levels at most
                nxt = got.xreplace(self.of)
                if nxt == got:
                    break
                got = nxt
            self.memo[e] = got
        return got


def _without_common(total: Block, values: _Values) -> Block:
    """T(v, x) for a product P(o, v) T(v, x) whose P(o, v) is blind to v's trace (its columns 0-2
    sum to zero in every row): any multiple of (1, 1, 1, 0, 0, 0)^T can be taken from a column of T
    without changing the product. Each column takes away the value that most of its first three
    entries hold (at least two, nonzero, compared by what they stand for), which zeroes them: inside
    a coupled return map, d M / d Ep = -C has columns (-lambda - 2G, -lambda, -lambda, 0, 0, 0), and
    d NM / d Ep = P(NM, M) T(M, Ep) no longer multiplies lambda by columns of P(NM, M) that sum to
    zero. ``values``: what the refs stand for."""
    if len(total) != 6:
        return total
    out = [list(row) for row in total]
    for j in range(len(total[0])):
        head = _shared_out([total[k][j] for k in range(3)], [values(sp.sympify(total[k][j])) for k in range(3)])
        for k, e in enumerate(head):
            out[k][j] = e
    return tuple(tuple(row) for row in out)


def _shared_out(refs: list, vals: list) -> tuple:
    """Three entries (``refs``, standing for ``vals``) less the value that at least two of them
    share (nonzero): those become zero, the other ``ref - ref_of_the_shared``. Unchanged where no
    value is shared. What :func:`_without_trace` does to a row and :func:`_without_common` to a
    column."""
    common = [v for v in vals if v != 0 and vals.count(v) >= 2]
    if not common:
        return tuple(refs)
    m = vals.index(common[0])
    return tuple(sp.S.Zero if v == common[0] else r - refs[m] for r, v in zip(refs, vals))


def _without_trace(refs: Block, block: Block) -> Block:
    """P(o, v) for a product P(o, v) T(v, x) whose T(v, x) is traceless (its rows 0-2 sum to zero in
    every column): any multiple of (1, 1, 1, 0, 0, 0) can be taken from a row of P without changing
    the product. Each row takes away the value that most of its first three entries hold (at least
    two, nonzero), which zeroes them: the elasticity's P(S, Ep) rows (-lambda - 2G, -lambda, -lambda)
    become (-2G, 0, 0), and the tangent loses lambda * tr(dEp/deps) (zero, computed in 18 products
    and as many sums). ``refs``: the entries as the chain rule refers to them; ``block``: their values
    (compared for equality)."""
    return tuple(_shared_out(list(ref_row[:3]), [sp.sympify(e) for e in row[:3]]) + tuple(ref_row[3:])
                 for ref_row, row in zip(refs, block))


def _implicit(model: Model) -> Model:
    if not is_resolved(model):
        model = resolve_implicit(model, {})
        if not model.is_implicit:  # explicit outputs split off: a composition
            return differentiate(model)
    system = differentiate(model.submodels[0])
    wrt = {p.wrt for p in system.partials if p.of in {v.name for v in system.outputs}}
    partials = tuple(
        Partial(u.name, x.name, tuple(tuple(partial_symbol(model.name, a, b) for b in x.symbols)
                                      for a in u.symbols))
        for u in model.implicit.unknowns for x in differentiable(model) if x.name in wrt)
    return _done(model, partials, (system,))


# --------------------------------------------------------------------------------------------------
# small block algebra over SymPy entries (zeros skipped, so structure is kept)
# --------------------------------------------------------------------------------------------------
def _refs(model: str, of: Variable, wrt: Variable, block: Block) -> Block:
    return tuple(tuple(ref(model, a, b, sp.sympify(e)) for b, e in zip(wrt.symbols, row))
                 for a, row in zip(of.symbols, block))


def _matmul(a: Block, b: Block) -> Block:
    cols = len(b[0])
    return tuple(tuple(sp.Add(*[a_rk * b[k][c] for k, a_rk in enumerate(row) if a_rk != 0 and b[k][c] != 0])
                       for c in range(cols)) for row in a)


def _add(a: Block, b: Block) -> Block:
    return tuple(tuple(x + y for x, y in zip(ra, rb)) for ra, rb in zip(a, b))
