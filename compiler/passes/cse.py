"""Common-subexpression elimination over a Program, and operation counts.

Each straight-line segment (a maximal run of Assigns; a Newton body is a segment of its own) is
handled as one unit: every assignment is inlined into its readers (``xreplace``), then a single
``sympy.cse`` runs over everything the segment must deliver together — the symbols read later
(results, derivatives, status, later statements) and, for a Newton body, the residual and the
Jacobian. The segment becomes the common subexpressions (``cse/0``, ``cse/1``, ... from a counter
over the whole program, so names never depend on hash order; a Newton body counts ``ncse/0``, ...
on its own, so the same solve is the same statement in every program of a model) followed by the
delivered symbols,
which keep their names. A delivered symbol whose value is itself a common subexpression takes
that subexpression's place (no copies). Assignments nothing reads disappear. Before the
``sympy.cse``, the inlined expressions get their strong zeros (:mod:`modelc.passes.gates`: no
``0 * inf`` where a gate such as ``macaulay(f)`` is 0 and a norm is tiny).
"""
from __future__ import annotations

from dataclasses import replace

import sympy as sp
from sympy.logic.boolalg import Boolean

from modelc.errors import InternalError
from modelc.functions import safe_div, safe_sqrt
from modelc.ir import Assign, LinearSolve, Newton, Program, Statement
from modelc.ir.program import inlined_body
from modelc.ir.analysis import reads
from modelc.passes.gates import Gates
from modelc.passes.symbols import Counter, is_partial_symbol
from modelc.symdag import cse as cse_exprs
from modelc.symdag import FreeSymbols, free_symbols, rebuilt, rebuilt_like, xreplace


def cse(program: Program) -> Program:
    """``program`` with common subexpressions shared across outputs and derivatives."""
    counter = Counter()
    final = set()
    for comps in list(program.results.values()) + [e for b in program.derivatives.values() for e in b]:
        for e in comps:
            final |= sp.sympify(e).free_symbols
    final |= set(program.status.values())
    body = list(program.body)
    after: list[set] = [set()] * len(body)  # symbols read after statement k (conservative)
    acc = set(final)
    free = FreeSymbols()
    for k in range(len(body) - 1, -1, -1):
        after[k] = set(acc)
        acc |= reads(body[k], free)
    out: list[Statement] = []
    segment: list[Statement] = []  # Assigns and LinearSolves: one CSE unit (see _segment)
    known: dict = {}  # the differences named so far (_share_differences), for the later segments
    gates = Gates(u for st in body if isinstance(st, Newton) for u in st.unknowns)
    exports = _Exports(Counter("nx"))
    solves: list[tuple[int, Newton, dict]] = []  # (place in out, the solve, the differences before it)
    for k, st in enumerate(body):
        if not isinstance(st, Newton):
            segment.append(st)
            continue
        if segment:
            out += _segment(segment, (), after[k - 1], counter, known, gates, exports)[0]
            segment = []
        exports.add(len(solves), st, gates)
        solves.append((len(out), st, dict(known)))
        out.append(st)  # reduced below, once the segments after it have chosen its exports
    if segment:
        out += _segment(segment, (), after[len(body) - 1], counter, known, gates, exports)[0]
    # (an export only the losing try of a segment's reduction took is read by nothing: not delivered,
    # or the C backend would store it at every iteration)
    read = set(final) | set().union(*(reads(s, free) for s in out if not isinstance(s, Newton)))
    for i, (place, st, before) in enumerate(solves):
        # its own counter: a Newton solve comes out the same in every program that holds it
        # (value, Jacobian, tangent), so the backends emit it once per module as a helper; it may
        # read the differences named before it, its own stay inside it
        out[place] = _newton(st, Counter("ncse"), before, gates,
                             [(s, node) for s, node in exports.chosen.get(i, []) if s in read])
    new = replace(program, body=tuple(out))
    return program if _same(new.body, program.body) else new


def _newton(st: Newton, counter: Counter, known: dict, gates: Gates, exports=()) -> Newton:
    """``st`` reduced; ``exports``: (symbol, subexpression of the inlined residual or scale) that
    the statements after it read (:class:`_Exports`), delivered with the residual."""
    n = len(st.residual)
    ns = len(st.residual_scale)
    nc = len(st.curvature)
    extra = (tuple(st.residual) + tuple(e for row in st.jacobian for e in row) + tuple(st.residual_scale)
             + tuple(st.curvature) + tuple(node for _, node in exports))
    body, reduced = _segment(list(st.body), extra, set(), counter, known, gates)
    body, reduced = _hoist_invariants(body, reduced, set(st.unknowns), counter)
    residual = tuple(reduced[:n])
    jac = tuple(tuple(reduced[n + i * n + j] for j in range(n)) for i in range(n))
    scale = tuple(reduced[n + n * n:n + n * n + ns])
    curvature = tuple(reduced[n + n * n + ns:n + n * n + ns + nc])
    handed = tuple(Assign(sym, value) for (sym, _), value in zip(exports, reduced[n + n * n + ns + nc:]))
    return replace(st, body=tuple(body), residual=residual, jacobian=jac, residual_scale=scale,
                   curvature=curvature, exports=handed)


class _Exports:
    """What a Newton solve hands to the statements after it (:attr:`modelc.ir.Newton.exports`).

    The evaluation that ends a solve is made at the unknowns' final values, and the statements after
    it (the outputs, the tangent's implicit-function solve) evaluate much of the residual again
    there: j2_voce_af's 1/(1 + g dgamma) (a division) and Voce exponential, perzyna_iso's rate
    y**n. Each subexpression of a solve's inlined residual or residual scale (the values its
    convergence test reads, which every iteration computes, the last one included) that a later
    segment's inlined expressions hold is replaced there by a symbol of its own, the largest such
    subexpressions first, and the solve delivers it with its residual. None from a solve with a
    line search (its last evaluation may be a rejected trial point). Only a function call (exp, a
    power) or a reciprocal that reads something other than parameters (a baked parameter's
    expression is a constant of the C code): the C backend stores an export at every iteration,
    and what is built of them is cheaper to compute again. And none that holds a norm or a safe
    division (``safe_sqrt``, ``safe_div``): at a nearly hydrostatic strain the deviator is rounding
    noise, and a flow direction made of the solve's norm and the segment's own components (another
    rounding of the same noise) is not a unit vector: float32 tangents of j2_voce_af_coupled came
    out 2.5 off the elastic stiffness (tests/models/test_tiny_deviator.py); handing the components
    too did not help, their arithmetic after differentiation is not the residual's.

    Measured (1e5 points, tangent, ``benchmarks.c_ab --fresh``, several runs, against the session's
    start; benchmarks/results/20261129T153500Z-cpu-c-ab-exports-gpow.md): j2_voce_af and
    j2_voce_af_coupled level within a build's placement (0.95x-1.01x), perzyna_iso (with its
    guess's mc_gpow) 1.04x-1.08x faster. Every subexpression of three
    operations or more that holds a costly one (j2_voce_af: 27, the flow direction's components,
    squares and strain differences among them) measured 1.04x the time of none, before it was known
    that two copies of one library differ by up to 1.13x on the machine measured."""

    def __init__(self, counter: Counter):
        self.counter = counter
        self.nodes: dict[sp.Expr, int] = {}  # subexpression -> the solve (its index) that computes it
        self.taken: dict[sp.Expr, sp.Symbol] = {}
        self.chosen: dict[int, list[tuple[sp.Symbol, sp.Expr]]] = {}
        self._worth: dict[sp.Expr, bool] = {}

    def add(self, index: int, st: Newton, gates: Gates) -> None:
        if st.solver.line_search:
            return
        flat = inlined_body(st)
        seen: set = set()
        for e in tuple(st.residual) + tuple(st.residual_scale):
            e = sp.sympify(e)
            stack = [gates(xreplace(e, flat) if flat else e)]
            while stack:
                x = stack.pop()
                if x in seen or x.is_Atom or not x.args:
                    continue
                seen.add(x)
                self.nodes[x] = index
                stack.extend(x.args)

    def worth(self, x) -> bool:
        w = self._worth.get(x)
        if w is None:
            w = self._worth[x] = (
                isinstance(x, sp.Expr) and not isinstance(x, Boolean) and not x.is_number
                and any(not y.name.startswith("$") for y in x.free_symbols)
                and (isinstance(x, sp.Function) or (x.is_Pow and x.exp.is_number and x.exp == -1))
                and not x.has(safe_sqrt, safe_div))
        return w

    def take(self, e):
        """``e`` with the subexpressions the solves compute replaced by their exports' symbols."""
        if not self.nodes:
            return e
        memo: dict = {}

        def walk(x):
            if x.is_Atom or not x.args:
                return x
            out = memo.get(x)
            if out is not None:
                return out
            index = self.nodes.get(x)
            if index is not None and self.worth(x):
                out = self.taken.get(x)
                if out is None:
                    out = self.taken[x] = next(self.counter)
                    self.chosen.setdefault(index, []).append((out, x))
            else:
                args = tuple(walk(a) for a in x.args)
                out = rebuilt_like(x, args) if args != x.args else x
            memo[x] = out
            return out

        return walk(e)


def _hoist_invariants(body: list[Assign], reduced: list, unknowns: set, counter: Counter):
    """Loop-invariant code motion for a Newton body: every maximal subexpression (of at least two
    operations) of an iteration-dependent statement, residual or Jacobian entry that does not depend
    on the unknowns becomes an assignment of its own (``ncse/k``), which the backends compute once
    before the iterations (the trial stress inside the Armstrong-Frederick direction, the invariant
    terms of the residual scale). Nothing is reassociated (a sum or product keeps its terms in their
    order: grouping its invariant terms changed float32 tangents by 1e-4), so the arithmetic is that
    of the inline expression. Each new assignment is placed right before its first reader; its
    operands are all defined by then."""
    free = FreeSymbols()  # memoized: the statements share subexpressions
    varying = set(unknowns)
    for a in body:
        if free(sp.sympify(a.value)) & varying:
            varying.add(a.target)
    memo: dict[sp.Expr, sp.Symbol] = {}
    pending: list[Assign] = []
    hoisted: dict[sp.Expr, sp.Expr] = {}  # each distinct subexpression once (a DAG, not a tree)

    def name(e):
        s = memo.get(e)
        if s is None:
            s = memo[e] = next(counter)
            pending.append(Assign(s, e))
        return s

    def liftable(e) -> bool:
        return (isinstance(e, sp.Expr) and not isinstance(e, Boolean) and not e.is_Atom
                and bool(free(e)) and sp.count_ops(e) >= 2)

    def hoist(e):
        if e.is_Atom or not e.args:
            return e
        out = hoisted.get(e)
        if out is None:
            out = hoisted[e] = _hoist(e)
        return out

    def _hoist(e):
        if not (free(e) & varying):
            return name(e) if liftable(e) else e
        args = [hoist(a) for a in e.args]
        if tuple(args) == e.args:
            return e
        return rebuilt(e, args)

    out: list[Assign] = []
    for a in body:
        if a.target in varying:
            value = hoist(sp.sympify(a.value))
            out += pending
            pending.clear()
            a = Assign(a.target, value) if value is not a.value else a
        out.append(a)
    reduced = [hoist(sp.sympify(r)) for r in reduced]
    return out + pending, reduced


def _segment(stmts: list[Statement], extra, live_out: set, counter: Counter, known: dict, gates: Gates,
             exports: "_Exports | None" = None):
    """(statements, reduced extra expressions) for one straight-line segment.

    A segment may hold linear solves (the implicit-function theorem's ``dR/du X = -dR/dx``): they
    are part of the unit, their matrices reduced with everything else. Without that, the residual
    system evaluated at the solution (for A and B) and the outputs evaluated after the solve were
    two CSE units, and a tangent call of j2_voce_af computed the flow direction and its norm (a
    sqrt) twice. After the common ``cse``, each statement is placed after the last
    solve whose solution it reads (its *level*), and before the next one. ``known``: the
    differences named before the segment (:func:`_share_differences`), updated with its own."""
    flat: dict[sp.Symbol, sp.Expr] = {}
    nested: dict[sp.Symbol, sp.Expr] = {}
    solves: list[LinearSolve] = []
    for a in stmts:
        if isinstance(a, LinearSolve):
            solves.append(a)
            continue
        if a.target in flat:
            raise InternalError(f"cse: '{a.target}' is assigned twice in one straight-line segment")
        value = sp.sympify(a.value)
        flat[a.target] = xreplace(value, flat) if flat else value
        nested[a.target] = _inline_products(value, nested) if nested else value
    keep = [a.target for a in stmts if isinstance(a, Assign) and a.target in live_out]
    matrices = [sp.sympify(e) for ls in solves for m in (ls.A, ls.B) for row in m for e in row]
    exprs = ([flat[t] for t in keep] + [xreplace(e, flat) if flat else e for e in matrices]
             + [xreplace(sp.sympify(e), flat) for e in extra])
    if not exprs:
        return [], []
    first = counter.n
    alt = [nested[t] for t in keep] + exprs[len(keep):]
    exprs, alt = [gates(e) for e in exprs], [gates(e) for e in alt]  # strong zeros (modelc.passes.gates)
    if exports is not None:  # what the solves before the segment hand to it
        exprs, alt = [exports.take(e) for e in exprs], [exports.take(e) for e in alt]
    best = None
    tries = [(c, False) for c in ([exprs, alt] if alt != exprs else [exprs])]
    tries.append((None, True))  # the cheaper of the two, with common factors taken out of sums
    for candidate, factor in tries:
        candidate = best[1] if candidate is None else candidate
        counter.n = first
        named_c = dict(known)
        r, red = _reduce(candidate, counter, named_c, factor)
        ops = _ops(r, red)
        if best is None or ops < best[0]:
            best = (ops, candidate, r, red, named_c, counter.n)
    _, exprs, replacements, reduced, named, counter.n = best
    known.update(named)
    # a kept symbol whose value is a common subexpression takes its place
    rename = {}
    free = free_symbols(exprs)  # the inlined expressions share subtrees: walk each once
    for t, r in zip(keep, reduced):
        if (isinstance(r, sp.Symbol) and r.name.startswith(counter.prefix + "/") and r not in rename
                and t not in free):
            rename[r] = t
    stmts_out = [Assign(rename.get(s, s), e.xreplace(rename)) for s, e in replacements]
    for t, r in zip(keep, reduced):
        if rename.get(r) is t:
            continue
        stmts_out.append(Assign(t, r.xreplace(rename)))
    tail = [r.xreplace(rename) for r in reduced[len(keep):]]
    if not solves:
        return stmts_out, tail
    return _place(stmts_out, solves, tail[:len(matrices)]), tail[len(matrices):]


def _reduce(exprs: list, counter: Counter, differences: dict, factor: bool = False):
    """``differences``: the differences of symbols named so far, updated with those this reduction
    names first (:func:`_share_differences`)."""
    differences, exprs = _share_differences(exprs, counter, differences)
    if factor:
        exprs = _factor_sums(exprs)
    exprs = _share_powers(exprs)
    replacements, reduced = cse_exprs(exprs, counter)  # sympy.cse(..., order="canonical"), faster
    replacements = differences + replacements
    replacements, reduced = _hoist_power_bases(replacements, reduced, counter)
    return _inline_numbers(*_share_reciprocals(replacements, reduced))


def _inline_numbers(replacements, reduced):
    """Common subexpressions without symbols (``sqrt(2)``, ``2 + exp(1)``, ``log(3)``) put back where
    they are used. The printers fold a constant into one literal; named, it was a variable of the
    generated code holding a Python float, which PyTorch's functions refuse (``sqrt(2)**x``: its
    derivative's ``torch.log(cse_0)`` raised TypeError, and ``torch.where(cse_0 > 0, ...)`` did), and a
    Newton solve carried it from lane array to lane array as if it varied."""
    consts: dict = {}
    out = []
    for s, e in replacements:
        if consts:
            e = xreplace(e, consts)
        if isinstance(e, sp.Expr) and e.is_number:
            consts[s] = e
        else:
            out.append((s, e))
    if not consts:
        return replacements, reduced
    return out, [xreplace(r, consts) for r in reduced]


def _share_reciprocals(replacements, reduced):
    """Negative integer powers from a reciprocal already computed: where ``s = 1/b`` is a common
    subexpression, a later ``b**-k`` (``x / (b*b*b)``) becomes ``s**k`` (``x * (s*s*s)``), products
    instead of a division each (a vector division costs ~10 multiplications). ``cse`` does not see
    ``1/b`` inside ``b**-3``. The tangent of perzyna_iso divided by ``2(1 + nu)``, its square and
    its cube; j2_voce_af's Newton step by ``1 + g dgamma`` and its powers. Each rewrite changes the
    result by an ulp or so (a product of roundings for one division's)."""
    recip: dict[sp.Expr, sp.Symbol] = {}
    memo: dict = {}

    def rewrite(e):
        if e.is_Atom or not e.args:
            return e
        out = memo.get(e)
        if out is not None:
            return out
        args = tuple(rewrite(a) for a in e.args)
        out = rebuilt(e, args) if args != e.args else e
        if out.is_Pow and out.exp.is_Integer and out.exp <= -2 and out.base in recip:
            out = sp.Pow(recip[out.base], -out.exp, evaluate=False)
        memo[e] = out
        return out

    # a reciprocal defined after a higher power of its base moves up, right before that power's
    # first statement (it reads only the base, which that statement reads too)
    defs = {}
    for k, (target, value) in enumerate(replacements):
        if value.is_Pow and value.exp == -1 and value.base not in defs:
            defs[value.base] = k
    if not defs:
        return replacements, reduced
    first: dict[int, list[int]] = {}
    for k, (target, value) in enumerate(replacements):
        for node in sp.preorder_traversal(value):
            if node.is_Pow and node.exp.is_Integer and node.exp <= -2 and defs.get(node.base, -1) > k:
                first.setdefault(k, []).append(defs.pop(node.base))
    moved = {i for ks in first.values() for i in ks}
    order = []
    for k in range(len(replacements)):
        order += first.get(k, [])
        if k not in moved:
            order.append(k)
    out = []
    for k in order:
        target, value = replacements[k]
        value = rewrite(value) if recip else value
        out.append((target, value))
        if value.is_Pow and value.exp == -1 and value.base not in recip:
            recip[value.base] = target
            memo.clear()
    return out, [rewrite(r) for r in reduced] if recip else reduced


def _share_differences(exprs: list, counter: Counter, known: dict) -> tuple[list, list]:
    """Differences of two symbols that the sums hold with opposite coefficients, named once: where
    ``c*x - c*y`` occurs (with the same ``c``) in at least two sums, or once with ``c`` other than
    +-1, ``z = x - y`` becomes a statement and each such pair of terms ``c*z``. Returns (the new
    statements, the rewritten expressions).

    Symbolic differentiation distributes: the derivatives of ``dev(eps - old(Ep))`` hold
    ``4/9*eps_0 - 4/9*Ep_0`` and the like in dozens of entries, which ``cse`` cannot relate to the
    ``eps_0 - Ep_0`` of the value (a sum is shared only when its terms are identical). Named, the
    strain difference is one subtraction, each term one multiplication instead of two, and the
    inputs are dead once the differences are taken (a GPU kernel keeps fewer values live: issue 13).
    Pairs are chosen by how many sums hold them, most first, each symbol in one pair; rounds repeat
    while a choice is made, so differences of differences are found too (at most three rounds).
    ``c*(x - y)`` rounds once where ``c*x - c*y`` rounded twice.

    ``known``: pair -> (its first symbol, its difference) named before (an earlier segment's,
    before a Newton solve: the solve and what follows it read the same ``z`` instead of the inputs,
    which then die before the solve); used wherever found, and updated with the new ones."""
    statements: list = []
    for round_ in range(3):
        counts, scaled = _pair_counts(exprs)
        used: set = set()
        chosen: dict[frozenset, tuple] = {}
        if round_ == 0:
            for (x, y) in sorted(counts, key=lambda xy: (xy[0].name, xy[1].name)):
                pair = known.get(frozenset((x, y)))
                if pair is not None and x not in used and y not in used:
                    chosen[frozenset((x, y))] = pair
                    used |= {x, y}
        for (x, y), k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0].name, kv[0][1].name)):
            if (k >= 2 or (x, y) in scaled) and x not in used and y not in used:
                z = next(counter)
                statements.append((z, sp.Add(x, sp.Mul(-1, y, evaluate=False), evaluate=False)))
                chosen[frozenset((x, y))] = known[frozenset((x, y))] = (x, z)
                used |= {x, y}
        if not chosen:
            break
        exprs = _with_pairs(exprs, chosen)
    return statements, exprs


def _pair_counts(exprs: list) -> tuple[dict, set]:
    """(pair (x, y) -> how many distinct sums hold ``c*x - c*y`` with ``c > 0``, the pairs seen with
    a ``c`` other than 1)."""
    counts: dict[tuple, int] = {}
    scaled: set = set()
    seen: set = set()
    stack = [sp.sympify(e) for e in exprs]
    while stack:  # the expressions share subtrees: each distinct node once
        e = stack.pop()
        if e in seen or e.is_Atom or not e.args:
            continue
        seen.add(e)
        stack.extend(e.args)
        if not e.is_Add:
            continue
        terms = _symbol_terms(e)
        for i, (x, cx) in enumerate(terms):
            for y, cy in terms[i + 1:]:
                if cx == -cy:
                    key = (x, y) if cx > 0 else (y, x)
                    counts[key] = counts.get(key, 0) + 1
                    if abs(cx) != 1:
                        scaled.add(key)
    return counts, scaled


def _with_pairs(exprs: list, chosen: dict) -> list:
    """``exprs`` with every chosen pair of terms ``c*x - c*y`` written ``c*z`` (:func:`_paired`);
    the nodes above a rewrite are rebuilt the way they were built (:func:`~modelc.symdag.rebuilt_like`)."""
    memo: dict = {}

    def rewrite(e):
        if e.is_Atom or not e.args:
            return e
        out = memo.get(e)
        if out is None:
            args = tuple(rewrite(a) for a in e.args)
            if e.is_Add:
                args = _paired(args, chosen)
            out = rebuilt_like(e, args)
            if out.is_Add and len(out.args) == 1:
                out = out.args[0]
            memo[e] = out
        return out

    return [rewrite(sp.sympify(e)) for e in exprs]


def _symbol_terms(add) -> list[tuple]:
    """(symbol, numeric coefficient) of the terms of the sum ``add`` that are a number times a symbol."""
    out = []
    for t in add.args:
        c, rest = t.as_coeff_Mul()
        if rest.is_Symbol:
            out.append((rest, c))
    return out


def _paired(args: tuple, chosen: dict) -> tuple:
    """The terms ``args`` of a sum with each chosen pair ``c*x - c*y`` replaced by ``c*z``, in the
    place of its first term."""
    terms = {}
    for i, t in enumerate(args):
        c, rest = t.as_coeff_Mul()
        if rest.is_Symbol:
            terms[rest] = (i, c)
    drop, put = set(), {}
    for x, (i, cx) in terms.items():
        for y, (j, cy) in terms.items():
            pair = chosen.get(frozenset((x, y))) if x != y else None
            if pair is None or cx != -cy or i in drop or j in drop:
                continue
            first, z = pair
            c = cx if first == x else cy
            drop |= {i, j}
            put[min(i, j)] = z if c == 1 else sp.Mul(c, z, evaluate=False)
    if not drop:
        return args
    return tuple(put.get(i, a) for i, a in enumerate(args) if i not in drop or i in put)


def _factor_sums(exprs: list) -> list:
    """Common factors of a sum's terms taken out: ``a*x + a*y + z`` becomes ``a*(x + y) + z``.
    Greedy, by the factor most terms share (ties: the first met, in the sum's canonical order),
    then again inside the bracket and over the remaining terms. Only whole non-numeric factors
    count (``a`` in ``2*a*x``; ``a**2`` and ``a`` are different factors).

    The chain rule and the product rule leave sums like ``H/|s|*c_i - m/|s|**2*c_i`` in every entry
    of a tangent (the derivative of ``macaulay(f)/|s|``, times a different ``c_i`` per entry):
    factored, each entry is ``c_i*(H/|s| - m/|s|**2)`` and ``cse`` shares the bracket, one
    multiplication per entry instead of two and a subtraction."""
    memo: dict = {}

    def rewrite(e):
        if e.is_Atom or not e.args:
            return e
        out = memo.get(e)
        if out is None:
            args = tuple(rewrite(a) for a in e.args)
            out = take_out_factors(list(args)) if e.is_Add else rebuilt_like(e, args)
            memo[e] = out
        return out

    return [rewrite(sp.sympify(e)) for e in exprs]


def _most_terms(count: dict):
    """The factor the most terms hold (the first met of those: dicts keep order), if two do."""
    best = max(count.values(), default=0)
    return next(f for f, k in count.items() if k == best) if best >= 2 else None


def take_out_factors(terms: list, pick=_most_terms):
    """The sum of ``terms`` with common factors taken out greedily: ``pick(count)`` (factor -> how
    many terms hold it, in the order met) chooses one held by two terms or more, or None to stop;
    then again inside the bracket and over the remaining terms. Only whole non-numeric factors
    count. A loop over the remaining terms, not a recursion: a sum of 2000 terms that pair up made
    1000 nested calls (Python's recursion limit); Add(f*(..), Add(g*(..), rest)) flattens to the
    same sum as Add(f*(..), g*(..), rest). Used by :func:`_factor_sums` (the most terms first) and
    :mod:`modelc.passes.blocks` (the factor the fewest entries of a block hold first)."""
    done = []
    fs = [_factors(t) for t in terms]
    sets = [set(ft) for ft in fs]
    while len(terms) >= 2:
        count: dict = {}
        for ft in fs:
            for f in ft:
                count[f] = count.get(f, 0) + 1
        f = pick(count)
        if f is None:
            break
        inner = [t for t, st in zip(terms, sets) if f in st]
        keep = [i for i, st in enumerate(sets) if f not in st]
        terms, fs, sets = [terms[i] for i in keep], [fs[i] for i in keep], [sets[i] for i in keep]
        done.append(sp.Mul(f, take_out_factors([sp.Mul(*[a for a in sp.Mul.make_args(t) if a != f])
                                                for t in inner], pick)))
    return sp.Add(*done, *terms)  # (one argument: that argument itself)


def _factors(t) -> list:
    return [a for a in sp.Mul.make_args(t) if not a.is_Number]


def _share_powers(exprs: list) -> list:
    """Powers of one base whose exponents are one apart, computed from the highest: where the
    expressions hold ``powr(a, e)`` and ``powr(a, e + 1)``, the lower one becomes
    ``powr_shift(powr(a, e + 1), a, e)`` (a division, :class:`modelc.functions.powr_shift`), down
    a chain (``e + 2``, ``e + 1``, ``e``), so ``cse`` then shares the one power. A power law and its
    derivatives (``y**n``, ``n*y**(n - 1)``, and ``n*(n - 1)*y**(n - 2)`` in a Halley step) cost one
    log and one exp instead of one of each per power: perzyna_iso's Newton iteration has one exp
    where it had three."""
    from modelc.functions import FUNCTIONS, powr_shift

    powr = FUNCTIONS["powr"].cls
    by_base: dict[sp.Expr, dict[sp.Expr, sp.Expr]] = {}
    seen: set = set()
    stack = [sp.sympify(e) for e in exprs]
    while stack:  # the expressions share subtrees: each distinct node once
        e = stack.pop()
        if e in seen or e.is_Atom:
            continue
        seen.add(e)
        if e.func is powr:
            by_base.setdefault(e.args[0], {})[e.args[1]] = e
        stack.extend(e.args)
    rule: dict[sp.Expr, sp.Expr] = {}
    for base, powers in by_base.items():
        memo: dict[sp.Expr, sp.Expr] = {}

        def value(exp, base=base, powers=powers, memo=memo):
            if exp not in memo:
                up = exp + 1
                memo[exp] = powr_shift(value(up), base, exp) if up in powers else powers[exp]
            return memo[exp]

        for exp, node in powers.items():
            if exp + 1 in powers:
                rule[node] = value(exp)
    if not rule:
        return exprs
    memo: dict = {}

    def rebuild(e):  # like xreplace, but a product kept whole (_inline_products) stays unevaluated
        if e in rule:
            return rule[e]
        if e.is_Atom or not e.args:
            return e
        out = memo.get(e)
        if out is None:
            args = tuple(rebuild(a) for a in e.args)
            out = rebuilt(e, args) if args != e.args else e
            memo[e] = out
        return out

    return [rebuild(sp.sympify(e)) for e in exprs]


def _ops(replacements, reduced) -> int:
    return sum(sp.count_ops(v) for _, v in replacements) + sum(sp.count_ops(v) for v in reduced)


def _inline_products(expr, rule: dict):
    """``expr.xreplace(rule)``, except that a derivative symbol (``d(...)``) whose value is a
    product stays one factor of the product it is read in (an unevaluated ``Mul``).

    The chain rule writes each entry of a composed derivative as P(o, u) * T(u, x): the sub-model's
    partial times a total derivative. Inlined and flattened, P's factors merge into every entry
    (perzyna_iso: ``2*E*n*N_i*dt*...*y**(n - 1)*du/dx_j``, eight factors in each of 30 entries), and
    ``cse`` does not find the common sub-product again; kept whole, P is one common subexpression.
    Flattening is better elsewhere (a coupled system's Newton body shares sub-products across
    residuals), so :func:`_segment` reduces both ways and keeps the one with fewer operations."""
    return xreplace(expr, rule, whole=is_partial_symbol)


def _place(assigns: list[Assign], solves: list[LinearSolve], matrices: list) -> list[Statement]:
    """``assigns`` (in dependency order) and the linear solves (their A and B entries, reduced, in
    ``matrices``): each assignment right before the first solve after every solve it reads."""
    level: dict[sp.Symbol, int] = {}
    for j, ls in enumerate(solves):
        for row in ls.targets:
            for t in row:
                level[t] = j + 1

    def of(e) -> int:
        return max((level.get(s, 0) for s in sp.sympify(e).free_symbols), default=0)

    groups: list[list[Statement]] = [[] for _ in range(len(solves) + 1)]
    for a in assigns:
        level[a.target] = of(a.value)
        groups[level[a.target]].append(a)
    out: list[Statement] = list(groups[0])
    k = 0
    for j, ls in enumerate(solves):
        na, nb = len(ls.A) * len(ls.A[0]), len(ls.B) * (len(ls.B[0]) if ls.B else 0)
        flat = matrices[k:k + na + nb]
        k += na + nb
        if any(of(e) > j for e in flat):
            raise InternalError("cse: a linear solve's matrix reads its own or a later solution")
        A = tuple(tuple(flat[r * len(ls.A[0]):(r + 1) * len(ls.A[0])]) for r in range(len(ls.A)))
        cb = len(ls.B[0]) if ls.B else 0
        B = tuple(tuple(flat[na + r * cb:na + (r + 1) * cb]) for r in range(len(ls.B)))
        out.append(LinearSolve(A=A, B=B, targets=ls.targets))
        out += groups[j + 1]
    return out


def _power_prints(exp) -> int:
    """How many times the printers write the base of ``base**exp`` (integer and half-integer
    powers up to MAX_EXPANDED_POWER are expanded to products, see modelc.backends.printer)."""
    from modelc.backends.printer import MAX_EXPANDED_POWER

    if not (exp.is_Integer or (exp.is_Rational and exp.q == 2)):
        return 1
    n2 = abs(int(exp * 2))
    return n2 // 2 + n2 % 2 if n2 <= 2 * MAX_EXPANDED_POWER else 1


def _hoist_power_bases(replacements, reduced, counter: Counter):
    """Expand integer powers before printing: the compound base of a power that the printers
    expand to a product (``(a - b)**2`` -> ``(a - b) * (a - b)``) becomes a common subexpression of
    its own, so each base is computed and printed once. A new assignment is placed right before
    the first statement that uses it (its operands are all defined by then)."""
    memo: dict[sp.Expr, sp.Symbol] = {}
    out: list[tuple[sp.Symbol, sp.Expr]] = []

    def hoist(e):
        if e.is_Atom or not e.args:
            return e
        args = tuple(hoist(a) for a in e.args)
        if args != e.args:  # rebuilt unevaluated: the same arithmetic as the expression printed inline
            e = rebuilt(e, args)
        if e.is_Pow and not e.base.is_Atom and _power_prints(e.exp) > 1:
            s = memo.get(e.base)
            if s is None:
                s = memo[e.base] = next(counter)
                out.append((s, e.base))
            return sp.Pow(s, e.exp, evaluate=False)
        return e

    for target, value in replacements:
        value = hoist(value)
        out.append((target, value))
    reduced = [hoist(r) for r in reduced]
    return out, reduced


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


# --------------------------------------------------------------------------------------------------
# operation counts
# --------------------------------------------------------------------------------------------------
_KIND = {"ADD": "adds", "SUB": "adds", "MUL": "muls", "NEG": "muls", "DIV": "divs", "POW": "pows"}
_KEYS = ("adds", "muls", "divs", "pows", "calls", "other")


def count_ops(program: Program) -> dict[str, int]:
    """Operation counts: ``adds muls divs pows calls other total`` over the straight-line code (a
    Newton body, residual and Jacobian counted once, i.e. per iteration, also under ``newton_*``),
    plus ``assigns``, ``newton_solves``, ``linear_solves`` and ``linear_solve_entries`` (nonzero
    entries of the matrices A, a measure of elimination work)."""
    total = dict.fromkeys(_KEYS, 0)
    newton = dict.fromkeys(_KEYS, 0)
    extra = {"assigns": 0, "newton_solves": 0, "linear_solves": 0, "linear_solve_entries": 0}
    for st in program.body:
        if isinstance(st, Assign):
            extra["assigns"] += 1
            _add(total, st.value)
        elif isinstance(st, LinearSolve):
            extra["linear_solves"] += 1
            extra["linear_solve_entries"] += sum(1 for row in st.A for e in row if e != 0)
            for m in (st.A, st.B):
                for row in m:
                    for e in row:
                        _add(total, e)
        else:
            extra["newton_solves"] += 1
            extra["assigns"] += len(st.body)
            exprs = [a.value for a in st.body] + list(st.residual) + [e for row in st.jacobian for e in row]
            for e in exprs + list(st.guess):
                _add(total, e)
            for e in exprs:
                _add(newton, e)
    out = dict(total)
    out["total"] = sum(total.values())
    out.update({f"newton_{k}": v for k, v in newton.items()})
    out["newton_total"] = sum(newton.values())
    out.update(extra)
    return out


def _add(acc: dict, expr) -> None:
    visual = sp.count_ops(sp.sympify(expr), visual=True)
    if visual == 0:
        return
    for term in sp.Add.make_args(visual):
        coeff, sym = term.as_coeff_Mul()
        name = str(sym)
        kind = _KIND.get(name)
        if kind is None:
            kind = "other" if name in ("AND", "OR", "NOT", "GT", "LT", "GE", "LE", "EQ", "NE") else "calls"
        acc[kind] += int(coeff)
