"""Lowering: a (differentiated) Model becomes a Program.

Statements, in evaluation order:

- every leaf's outputs: ``Assign(component symbol, expression)`` — component symbols are named by
  qualified variable names, so the wiring between models is free;
- with ``derivatives=True`` only: every non-numeric partial-derivative entry of every model
  (``d(o)/d(i)@model``, leaf partials and chain-rule totals alike, see ``differentiate``); the
  blocks by parameters (pseudo-inputs ``$p``) are results only with ``parameters=True`` or when
  ``select`` names them, else pruned like any dead statement;
- an implicit model: one :class:`~modelc.ir.Newton` (body = its residual system lowered with the
  unknowns as inputs, pruned to what the residual and the Jacobian dR/du need) and, with
  ``derivatives=True``, the residual system again at the solution, then
  ``LinearSolve(dR/du, -dR/dx)`` whose targets are the implicit model's partial symbols du/dx.

A symbol is assigned at most once per straight-line segment (segments are separated by Newton
statements); two different values for one symbol in a segment are a composition error. Dead
statements are removed at the end (nothing is computed that no result, derivative or status reads).
"""
from __future__ import annotations

from typing import Iterable

import sympy as sp

from modelc.errors import CompositionError, InternalError
from modelc.functions import ifpos
from modelc.ir import FINITE_MAX, Assign, LinearSolve, Model, Newton, Program, Statement, Variable
from modelc.ir.analysis import prune, reads, writes  # noqa: F401 (reads/writes: re-exported)
from modelc.passes.differentiate import differentiable
from modelc.passes.symbols import named, partial_symbol, ref, status_symbols
from modelc.symdag import Diff, FreeSymbols, xreplace


def lower(model: Model, *, derivatives: bool,
          select: tuple[tuple[str, ...], tuple[str, ...]] | None = None, parameters: bool = False) -> Program:
    """The Program evaluating ``model`` (and, if asked, d outputs / d inputs).

    ``select = (of, wrt)`` (with ``derivatives``) keeps only the blocks d of / d wrt (a tangent; a
    parameter ``p`` is named ``$p`` in ``wrt``): the rest, down to the columns of the implicit
    models' linear solves that only they read, is pruned. ``parameters=True`` (without ``select``)
    adds d outputs / d every parameter to d outputs / d inputs (``Program.jacobian_wrt`` then lists
    every input and every ``$p``)."""
    if _needs_partials(model, derivatives):  # precondition: the driver differentiates first
        raise InternalError(f"lower: model {model.name} is not differentiated (run passes.differentiate "
                            "before lowering; the driver owns the order)")
    em = _Emitter()
    em.model(model, derivatives)
    results = {o.name: tuple(o.symbols) for o in model.outputs}
    derivs = {}
    if derivatives:
        outs = {o.name: o for o in model.outputs}
        ins = {x.name: x for x in (differentiable(model) if (parameters or select) else model.inputs)}
        for p in model.partials:
            if select is not None and not (p.of in select[0] and p.wrt in select[1]):
                continue
            if p.of in outs and p.wrt in ins:
                derivs[(p.of, p.wrt)] = tuple(
                    tuple(ref(model.name, a, b, sp.sympify(e)) for b, e in zip(ins[p.wrt].symbols, row))
                    for a, row in zip(outs[p.of].symbols, p.block))
    status = {}
    if len(em.newtons) == 1:
        n = em.newtons[0]
        status = {"converged": n.converged, "iterations": n.iterations, "residual_norm": n.residual_norm}
    elif em.newtons:
        c, i, r = (named(f"{model.name}/status/{k}") for k in ("converged", "iterations", "residual_norm"))
        em.body.append(Assign(c, sp.And(*[n.converged for n in em.newtons])))
        em.body.append(Assign(i, sp.Max(*[n.iterations for n in em.newtons])))
        em.body.append(Assign(r, sp.Max(*[n.residual_norm for n in em.newtons])))
        status = {"converged": c, "iterations": i, "residual_norm": r}
    live = set()
    for block in list(results.values()) + [e for b in derivs.values() for e in b]:
        for e in block:
            live |= sp.sympify(e).free_symbols
    live |= set(status.values())
    body = prune(em.body, live)
    rows = cols = None
    if derivatives and select is not None:
        unknown = [n for n in select[0] if n not in {o.name for o in model.outputs}] + \
                  [n for n in select[1] if n not in {x.name for x in differentiable(model)}]
        if unknown:
            raise InternalError(f"model {model.name}: the selected derivative blocks name {unknown}, which "
                                "are not its outputs / inputs (the driver checks this first)")
        rows = tuple(o.name for o in model.outputs if o.name in select[0])
        cols = tuple(x.name for x in differentiable(model) if x.name in select[1])
    elif derivatives and parameters:
        cols = tuple(x.name for x in differentiable(model))
    return Program(name=model.name, inputs=model.inputs, parameters=model.parameters,
                   outputs=model.outputs, body=body, results=results, derivatives=derivs, status=status,
                   jacobian_of=rows, jacobian_wrt=cols, doc=model.doc, loc=model.loc,
                   initial=model.initial)


def _needs_partials(model: Model, derivatives: bool) -> bool:
    def implicit_undiff(m: Model) -> bool:
        if m.is_implicit:
            return not m.submodels or not m.submodels[0].partials
        return any(implicit_undiff(s) for s in m.submodels)
    def leaf_undiff(m: Model) -> bool:
        # structurally zero blocks are absent, so no partials is right for outputs that are constant
        # (e.g. ``y: pi``); only a leaf whose equations read an input or parameter must have some
        if m.is_implicit:
            return False
        if m.is_composed:
            return any(leaf_undiff(s) for s in m.submodels)
        if m.partials or m.differentiated:
            return False
        syms = {s for x in differentiable(m) for s in x.symbols}
        return any(sp.sympify(c).free_symbols & syms for eq in m.equations for c in eq.components)
    return (derivatives and not model.partials and leaf_undiff(model)) or implicit_undiff(model)


class _Emitter:
    def __init__(self):
        self.body: list[Statement] = []
        self.assigned: dict[sp.Symbol, sp.Expr] = {}
        self.newtons: list[Newton] = []

    def assign(self, target: sp.Symbol, value) -> None:
        value = sp.sympify(value)
        if target in self.assigned:
            if self.assigned[target] == value:
                return
            raise CompositionError(f"'{target.name}' is computed twice, differently ({self.assigned[target]} "
                                   f"and {value}): two models inside the composition provide it")
        self.assigned[target] = value
        self.body.append(Assign(target, value))

    def guess(self, m: Model, unknown: sp.Symbol, value: sp.Expr) -> sp.Symbol:
        """The symbol ``<model>/guess/<unknown>``, assigned ``value``."""
        target = named(f"{m.name}/guess/{unknown.name}")
        self.assign(target, value)
        return target

    def model(self, m: Model, derivatives: bool) -> None:
        if m.is_implicit:
            self.implicit(m, derivatives)
            return
        if m.is_composed:
            for s in m.submodels:
                self.model(s, derivatives)
        else:
            for eq in m.equations:
                for s, c in zip(eq.var.symbols, eq.components):
                    self.assign(s, c)
        if derivatives:
            self.partials(m)

    def partials(self, m: Model) -> None:
        variables = _variables(m)
        for p in m.partials:
            of, wrt = variables[p.of], variables[p.wrt]
            for a, row in zip(of.symbols, p.block):
                for b, e in zip(wrt.symbols, row):
                    e = sp.sympify(e)
                    if not (e.is_Number or e.is_Symbol):
                        self.assign(partial_symbol(m.name, a, b), e)

    def implicit(self, m: Model, derivatives: bool) -> None:
        system = m.submodels[0]
        unknowns = m.implicit.unknowns
        residuals = system.outputs
        blocks = {(p.of, p.wrt): p.block for p in system.partials}
        svars = _variables(system)

        def rows(wrt: Iterable[Variable], sign: int = 1) -> tuple[tuple[sp.Expr, ...], ...]:
            out = []
            for rv in residuals:
                for r, a in enumerate(rv.symbols):
                    row = []
                    for x in wrt:
                        blk = blocks.get((rv.name, x.name))
                        for c, b in enumerate(x.symbols):
                            row.append(sp.S.Zero if blk is None
                                       else sign * ref(system.name, a, b, sp.sympify(blk[r][c])))
                    out.append(tuple(row))
            return tuple(out)

        jac = rows([svars[u.name] if u.name in svars else u for u in unknowns])
        _check_structure(m, jac)
        res = tuple(s for rv in residuals for s in rv.symbols)
        scale = _residual_scale(m, system)
        inner = _Emitter()
        inner.model(system, True)
        live = (set(res) | set().union(*(e.free_symbols for row in jac for e in row))
                | set().union(*(e.free_symbols for e in scale)))
        body = prune(inner.body, live)
        if any(not isinstance(st, Assign) for st in body):
            raise InternalError(f"the residual system of '{m.name}' lowered to non-Assign statements")
        conv, its, norm = status_symbols(m.name)
        guess = tuple(sp.sympify(c) for g in m.implicit.guess for c in g.components)
        usyms = tuple(s for u in unknowns for s in u.symbols)
        if len(guess) != len(usyms):
            raise InternalError(f"implicit model '{m.name}': {len(guess)} guess components for "
                                f"{len(usyms)} unknowns")
        # a guess that is an expression is assigned before the solve, in the segment before it, so
        # that CSE shares its subexpressions (it often reads the trial state the body reads too)
        guess = tuple(g if g.is_Atom else self.guess(m, u, g) for u, g in zip(usyms, guess))
        curvature = ()
        if m.implicit.solver.method == "halley":
            if len(usyms) != 1:
                raise InternalError(f"implicit model '{m.name}': a Halley solve has one scalar unknown")
            curvature = (_curvature(body, jac[0][0], usyms[0]),)
        newton = Newton(unknowns=usyms, guess=guess, body=body, residual=res, jacobian=jac,
                        solver=m.implicit.solver, converged=conv, iterations=its, residual_norm=norm,
                        residual_scale=scale, curvature=curvature)
        self.body.append(newton)
        self.newtons.append(newton)
        self.assigned = {}  # a new straight-line segment starts after the Newton statement
        for s in usyms:
            self.assigned[s] = s
        if derivatives and m.partials:
            self.model(system, True)  # the residual system again, at the solution
            wrt = []
            for p in m.partials:
                if p.wrt not in [x.name for x in wrt]:
                    wrt.append(next(x for x in differentiable(m) if x.name == p.wrt))
            B = rows(wrt, -1)
            targets = tuple(tuple(partial_symbol(m.name, a, b) for x in wrt for b in x.symbols)
                            for a in usyms)
            self.body.append(LinearSolve(A=jac, B=B, targets=targets))


def _check_structure(m: Model, jac) -> None:
    """A Newton system whose Jacobian is structurally singular (no assignment of residual components
    to unknown components through nonzero entries) can never be solved: a SpecError at the model
    naming the unknowns no residual reads, or the residuals that read no unknown."""
    from modelc.backends.linsolve import structural_matching
    from modelc.errors import SpecError

    nonzero = [[not (sp.sympify(e).is_zero is True) for e in row] for row in jac]
    if structural_matching(nonzero) is not None:
        return

    def comp(v: Variable, k: int) -> str:
        return v.name if v.type.size == 1 else f"{v.name}[{k}]"

    unknowns = [comp(u, k) for u in m.implicit.unknowns for k in range(u.type.size)]
    residuals = [(eq, comp(eq.var, k)) for eq in m.implicit.residuals for k in range(eq.var.type.size)]
    unread = [unknowns[j] for j in range(len(unknowns)) if not any(row[j] for row in nonzero)]
    blind = [(eq, name) for (eq, name), row in zip(residuals, nonzero) if not any(row)]
    if unread:
        what = f"no residual depends on the unknown(s) {', '.join(unread)}"
    elif blind:
        what = f"the residual(s) of {', '.join(n for _, n in blind)} depend on no unknown"
    else:
        what = (f"its residuals cannot determine every unknown ({', '.join(unknowns)}): some unknowns "
                "appear in too few residuals")
    loc = blind[0][0].loc if blind and blind[0][0].loc is not None else m.loc
    raise SpecError(f"implicit model '{m.name}': the Newton system is structurally singular: {what}", loc,
                    hint="each unknown needs a residual that depends on it (dR/du must be invertible); a "
                         "residual that reads a variable computed from the unknowns needs its provider "
                         "under `uses:`")


def _curvature(body, jacobian: sp.Expr, unknown: sp.Symbol) -> sp.Expr:
    """d2R/du2 of a one-unknown solve: dR/du with the body's assignments inlined (an expression of
    the unknown and the solve's inputs), differentiated once more by the memoized
    :class:`~modelc.symdag.Diff` the derivatives pass uses (the custom functions' own rules). CSE shares it with the residual and the
    Jacobian it is evaluated beside."""
    flat: dict[sp.Symbol, sp.Expr] = {}
    for a in body:
        flat[a.target] = xreplace(sp.sympify(a.value), flat) if flat else sp.sympify(a.value)
    return Diff(unknown)(xreplace(sp.sympify(jacobian), flat))


def _residual_scale(m: Model, system: Model) -> tuple[sp.Expr, ...]:
    """Per residual component, the magnitude round-off in it is measured against (see
    ``ir.Newton.residual_scale``): a running-error style bound of its defining expression, where a
    sum counts the magnitudes of its terms, a product multiplies them, and a variable defined inside
    the residual system counts the magnitude of its definition (a few levels deep), so that
    ``f = sqrt(2/3) (seff - sigma_y - k)`` is measured against ``|seff| + |sigma_y| + |k|``, not
    against its own (possibly cancelled) value; a power ``x^n`` counts ``|x^n| + |n x^(n-1)| M(x)``,
    ``min(a, b)`` / ``max(a, b)`` count ``M(a) + M(b)``, ``macaulay(a)`` and ``abs(a)`` count ``M(a)``.
    An expression that does not depend on the unknowns (a time step ``t - old(t)``, a trial stress)
    counts its own value: it is the same at every iterate, so its rounding is no iteration noise
    (counting its terms made ``dt`` weigh ``|t| + |old(t)|``, hundreds of times ``dt`` late in a
    history, and let float32 solves stop far from the root).
    """
    from modelc.functions import FUNCTIONS

    absf = FUNCTIONS["abs_"].cls
    # the value is one of the arguments (or 0): min, max, macaulay = max(x, 0), abs = max(x, -x)
    selects = (FUNCTIONS["min_"].cls, FUNCTIONS["max_"].cls, sp.Min, sp.Max, FUNCTIONS["macaulay"].cls, absf)
    leaf = next((s for s in system.submodels if s.name == f"{m.name}/residual"), None)  # see compose
    if leaf is None:
        return ()
    defs: dict[sp.Symbol, sp.Expr] = {}  # symbol -> its defining component, across the system

    def collect(model: Model) -> None:
        for sub in model.submodels:
            collect(sub)
        for eq in model.equations:
            defs.update(zip(eq.var.symbols, (sp.sympify(c) for c in eq.components)))

    collect(system)
    free = FreeSymbols()
    constants = {s: d for s, d in defs.items() if not free(d)}
    # what changes from one Newton iteration to the next: the unknowns and what is computed from them
    variant = {s for u in m.implicit.unknowns for s in u.symbols}
    grew = True
    while grew:
        grew = False
        for s, d in defs.items():
            if s not in variant and free(d) & variant:
                variant.add(s)
                grew = True

    memo: dict[tuple[sp.Expr, int], sp.Expr] = {}  # each distinct subexpression once per depth (a DAG)

    def mag(e: sp.Expr, depth: int) -> sp.Expr:
        hit = memo.get((e, depth))
        if hit is None:
            hit = memo[(e, depth)] = _mag(e, depth)
        return hit

    def _mag(e: sp.Expr, depth: int) -> sp.Expr:
        if not free(e):  # a constant: its magnitude, folded (never abs_ of a number)
            return sp.Abs(e)
        if e.is_Symbol:
            return mag(defs[e], depth - 1) if (depth > 0 and e in defs) else absf(e)
        if not free(e) & variant:
            # fixed during the solve (dt = t - old(t), a trial stress): its own rounding is the same
            # at every iterate, it moves the root but adds no noise; its magnitude is its value
            e = xreplace(e, constants)
            factors = sp.Mul.make_args(e)  # constant factors folded (never abs_ of a number)
            const = sp.Mul(*[f for f in factors if not free(f)])
            return sp.Abs(const) * absf(sp.Mul(*[f for f in factors if free(f)]))
        if e.is_Add:
            return sp.Add(*[mag(a, depth) for a in e.args])
        if e.is_Mul:
            return sp.Mul(*[mag(a, depth) for a in e.args])
        if e.is_Pow and e.exp.is_Integer and e.exp > 0:
            return mag(e.base, depth) ** e.exp
        if e.func in selects:  # min(a, b), max(a, b), <a>, |a|: the magnitudes of the arguments
            return sp.Add(*[mag(a, depth) for a in e.args])
        if not (e.is_Pow or e.func is FUNCTIONS["powr"].cls):
            return absf(e)  # a function's value: its own scale
        # a power x^n: first-order error propagation |x^n| + |n x^(n-1)| M(x) (a relative error in x
        # grows n-fold); parameters are exact inputs (no round-off to propagate)
        extra = []
        for j, x in enumerate(e.args):
            if free(x) and not (x.is_Symbol and x.name.startswith("$")):
                d = sp.Dummy()
                args = list(e.args)
                args[j] = d
                dg = sp.diff(e.func(*args), d).xreplace({d: x})
                extra.append(absf(dg) * mag(x, depth))
        return absf(e) + sp.Add(*extra)

    by_var = {eq.var.name: eq.components for eq in leaf.equations}
    out = [finite_or_zero(mag(sp.sympify(c), 4)) for rv in system.outputs for c in by_var.get(rv.name, ())]
    return tuple(out) if len(out) == sum(rv.type.size for rv in system.outputs) else ()


def finite_or_zero(scale: sp.Expr) -> sp.Expr:
    """``scale`` where it is below ``ir.FINITE_MAX``, else 0 (and 0 for NaN). An iterate far off
    overflows its scale before (or without) its residual: ``|R| <= rtol * inf`` held for any R, and
    the stopping test accepted garbage (float32 norton with n = 17 at its first guess, 1e28 MPa;
    chaboche2_coupled on 2% strain steps). With 0 only an exact root passes; the Newton goes on."""
    if not FreeSymbols()(scale):
        return scale
    return ifpos(sp.Float(FINITE_MAX, 17) - scale, scale, sp.S.Zero)


def _variables(m: Model) -> dict[str, Variable]:
    out = {}
    for s in (m,) + m.submodels:
        for v in differentiable(s) + s.outputs:
            out.setdefault(v.name, v)
    if m.implicit is not None:
        for v in m.implicit.unknowns:
            out.setdefault(v.name, v)
    return out
