"""Program statements -> lines of a generated function body, shared by both backends.

An :class:`Emitter` walks a Program's statements in order: an :class:`~modelc.ir.Assign` is one line;
a :class:`~modelc.ir.LinearSolve` is expanded by :func:`~modelc.passes.expand_solve.expand_solve` into
assignments; a :class:`~modelc.ir.Newton` is a loop whose shape the backend decides
(:meth:`Emitter.newton`). The loop's linear solve ``J du = -R`` is expanded the same way.

With a :class:`Helpers` registry (what module emission passes), a Newton solve is emitted once per
module as a helper function of its own (:meth:`Emitter.helper`) and every variant (value, Jacobian,
tangent) calls it: the CSE pass numbers a Newton body on its own, so the value, Jacobian and
tangent programs of a model hold the same Newton statement. The helper's arguments are what the
solve reads (sorted by name); it returns the unknowns and the status (converged, iterations,
residual norm): nothing else of a solve is read after it (``ir.Program``'s rule).
"""
from __future__ import annotations

import sympy as sp

from modelc import ir
from modelc.ir import FINITE_MAX, LINE_SEARCH_C, RTOL_FLOOR_EPS
from modelc.passes.expand_solve import expand_solve, factor, halley_step, substitute
from modelc.backends.names import Namer
from modelc.backends.printer import ExprPrinter
from modelc.errors import InternalError
from modelc.functions import FUNCTIONS
from modelc.ir.analysis import reads

_abs = FUNCTIONS["abs_"].cls



#: generated lines longer than this are wrapped (signatures, calls, long tests)
WIDTH = 100
#: residuals per line of a Newton convergence test of more than this many (each with the
#: expression of its scale; :meth:`Emitter.convergence_parts`)
CONVERGENCE_CHUNK = 2


def _fill(items: list[str], indent: str = "    ") -> list[str]:
    """The items, comma-separated, on lines of at most :data:`WIDTH` characters (greedy), each
    ending in a comma."""
    lines, cur = [], ""
    for it in items:
        if cur and len(indent) + len(cur) + len(it) + 2 > WIDTH:
            lines.append(indent + cur.rstrip())
            cur = ""
        cur += it + ", "
    return lines + [indent + cur.rstrip()] if cur else lines


def wrapped(head: str, items: list[str], tail: str) -> list[str]:
    """``head`` + the comma-separated items + ``tail``: one line when it fits :data:`WIDTH`, else
    the items on lines of their own (one level deeper than ``head``, filled to the width), ``tail``
    after the last."""
    line = head + ", ".join(items) + tail
    if len(line) <= WIDTH or not items:
        return [line]
    body = _fill(items, " " * (len(head) - len(head.lstrip())) + "    ")
    return [head] + body[:-1] + [body[-1][:-1] + tail]


def call_lines(targets: list[str], name: str, args: list[str]) -> list[str]:
    """``targets = name(args)``, on several lines (:func:`wrapped`) when long."""
    line = f"{', '.join(targets)} = {name}({', '.join(args)})"
    if len(line) <= WIDTH:
        return [line]
    if len(targets) == 1:
        head = [f"{targets[0]} = {name}("]
    else:
        one = f"({', '.join(targets)}) = {name}("
        head = [one] if len(one) <= WIDTH else ["("] + _fill(targets) + [f") = {name}("]
    inline = head[-1] + ", ".join(args) + ")"
    if len(inline) <= WIDTH:  # the targets were what did not fit
        return head[:-1] + [inline]
    body = _fill(args)
    return head + body[:-1] + [body[-1][:-1] + ")"]


class Helpers:
    """The Newton helpers of one module and one backend, in first-use order: (statement, name,
    lines of the whole function, the definitions its emission recorded)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.items: list[tuple[ir.Newton, str, list[str], dict]] = []
        #: linear-solve helpers (the Triton backend's eliminations and substitutions): the text that
        #: identifies one (its signature and body, without its name) -> (name, lines of the function)
        self.solvers: dict[tuple[str, ...], tuple[str, list[str]]] = {}

    def find(self, st: ir.Newton):
        return next((item for item in self.items if item[0] == st), None)

    def solver(self, name: str, key: tuple[str, ...], make) -> str:
        """The name of the linear-solve helper whose text (without its name) is ``key``: an earlier
        one of the same text, or a new one called ``name`` whose lines are ``make(name)``."""
        item = self.solvers.get(key)
        if item is None:
            item = self.solvers[key] = (name, make(name))
        return item[0]

    @property
    def lines(self) -> list[str]:
        return [line for _, lines in self.solvers.values() for line in lines] + \
            [line for item in self.items for line in item[2]]


class LineSearch:
    """A Newton solve's backtracking line search (``SolverOptions.line_search`` halvings at most), as
    every backend emits it: one residual evaluation per iteration, as without it. An iteration
    evaluates the residual at the current point (the last accepted point plus ``alpha`` times its
    step); if the decrease is too small (:meth:`Emitter.line_search_tests`), the next point is the
    accepted one plus half of that (``back``: the Newton step computed at the rejected point is not
    used); otherwise the current point is accepted and the next is it plus a full Newton step. A
    halved step does not count as an iteration, and a point stops at an accepted residual that is not
    finite (halved ``line_search`` times: it cannot recover; the interpreter's failed point). Per point: ``alpha`` (the fraction of the step
    tried), ``prev`` (the residual norm at the accepted point), ``u`` (that point), ``d`` (its step)."""

    def __init__(self, alpha, prev, ok, back, u, d):
        self.alpha, self.prev, self.ok, self.back, self.u, self.d = alpha, prev, ok, back, u, d


class Emitter:
    """``pivoting``: the linear solves' strategy (see :mod:`modelc.passes.expand_solve`);
    ``helpers``: emit Newton solves as shared helper functions (None: inline)."""

    #: print the elimination of a matrix that several linear solves of a program share (the
    #: variants' implicit-function-theorem solves with one ``dR/du``) once, under the union of their
    #: variants (:meth:`guarded`), instead of once per solve
    share_factors = False

    def __init__(self, printer: ExprPrinter, namer: Namer, pivoting: str = "auto",
                 helpers: Helpers | None = None):
        self.p = printer
        self.namer = namer
        self.pivoting = pivoting
        self.helpers = helpers
        self.defs: dict[sp.Symbol, sp.Expr] = {}  # latest value assigned to each symbol
        self.lines: list[str] = []
        self.depth = 1  # inside a function
        self.n_solves = 0
        self.n_newton = 0
        self.n_factors = 0
        self.n_temps = 0  # fresh temporaries of this function (backends that need them)
        self.factors: dict = {}  # matrix (LinearSolve.A) -> (name, its printed Factor)
        self._shared: dict = {}  # matrix -> the variants of its solves (guarded, share_factors)

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def comment(self, text: str) -> None:
        self.line(f"# {text}")

    def assign(self, target: sp.Symbol, value: sp.Expr) -> None:
        self.defs[target] = value
        self.line(f"{self.namer(target)} = {self.p.doprint(value)}")

    def guarded(self, program: ir.Program, after: dict | None = None) -> None:
        """The program's statements, each group of one mask under ``if V & mask:`` (``V``: the
        variant bit the generated function or kernel is called with; a Triton ``constexpr``, so the
        kernel of each variant holds only its own code). ``after``: statement index -> a callable
        that emits lines for every variant once that statement is done, right after it (a guarded
        group is closed there and opened again after the lines)."""
        full = sum(v.bit for v in ir.variants_of(program))
        masks = program.masks or (full,) * len(program.body)
        after = after or {}
        shared = self._shared = self._shared_matrices(program, masks) if self.share_factors else {}
        k = 0
        while k < len(program.body):
            m = masks[k]
            end = k + 1
            while end < len(program.body) and masks[end] == m and end - 1 not in after:
                end += 1
            for st in program.body[k:end]:
                # a shared matrix is eliminated once, for all its solves, under the union of their
                # variants: inside the group of its first solve when that group is for all of them
                # (statements()), else before that group. Then its entries, needed by every variant
                # of the solves, are computed in an earlier group (groups are ordered by how many
                # variants need them), and so is anything they read.
                union = shared.get(st.A) if isinstance(st, ir.LinearSolve) else None
                if union is not None and st.A not in self.factors and m != union:
                    names = ", ".join(v.name for v in program.variants if v.bit & union)
                    self.shared_factor(st.A, None if union == full else f"if V & {union}:  # {names}")
            if m != full:
                names = ", ".join(v.name for v in program.variants if v.bit & m)
                self.line(f"if V & {m}:  # {names}")
                self.depth += 1
                self.statements(program.body[k:end])
                self.depth -= 1
            else:
                self.statements(program.body[k:end])
            if end - 1 in after:
                after[end - 1]()
            k = end

    def statements(self, stmts) -> None:
        for st in stmts:
            if isinstance(st, ir.Assign):
                self.assign(st.target, st.value)
            elif isinstance(st, ir.LinearSolve):
                self.n_solves += 1
                n = len(st.A)
                if st.A in self._shared and st.A not in self.factors:  # (see guarded)
                    self.shared_factor(st.A, None)
                F = self.factors.get(st.A)
                if F is not None:
                    name, F = F
                    self.comment(f"linear solve {self.n_solves}: {n}x{n}, {len(st.B[0]) if n else 0} "
                                 f"right-hand side(s) through elimination {name}")
                    self.substitute(F, st.B, st.targets, f"ls{self.n_solves}")
                    continue
                self.comment(f"linear solve {self.n_solves}: {n}x{n}, {len(st.B[0]) if n else 0} "
                             "right-hand side(s), unrolled over structural nonzeros")
                self.solve(st.A, st.B, st.targets, f"ls{self.n_solves}")
            elif isinstance(st, ir.Newton):
                self.n_newton += 1
                if self.helpers is None:
                    self.newton(st, self.n_newton)
                else:
                    self.call_helper(st)
                for x in ir.export_values(st):  # evaluated again at the solution (loop values do not leave the loop)
                    self.assign(x.target, x.value)
            else:
                raise InternalError(f"unknown statement {type(st).__name__}")

    @staticmethod
    def _shared_matrices(program: ir.Program, masks) -> dict:
        """Matrix -> the union of the masks of its solves, for matrices of more than one solve
        (larger than 1x1: a scalar "elimination" is one reciprocal)."""
        users: dict = {}
        for st, m in zip(program.body, masks):
            if isinstance(st, ir.LinearSolve) and len(st.A) > 1:
                users.setdefault(st.A, []).append(m)
        out = {}
        for A, ms in users.items():
            if len(ms) > 1:
                union = 0
                for m in ms:
                    union |= m
                out[A] = union
        return out

    def shared_factor(self, A, guard: str | None) -> None:
        """Lines eliminating ``A`` once for all the solves that share it, under ``guard`` (an
        ``if V & mask:`` line; None: where the lines go already runs for those variants)."""
        self.n_factors += 1
        name = f"lu{self.n_factors}"
        n = len(A)
        if guard:
            self.line(guard)
            self.depth += 1
        self.comment(f"elimination {name}: {n}x{n}, shared by the linear solves below, unrolled over "
                     "structural nonzeros")
        F = self.eliminate(A, name)
        if guard:
            self.depth -= 1
        self.factors[A] = (name, F)

    def eliminate(self, A, prefix: str):
        """Lines eliminating ``A``; returns what :meth:`substitute` takes (default: the unrolled
        elimination's :class:`~modelc.passes.expand_solve.Factor`)."""
        assigns, F = factor(A, prefix, pivoting=self.pivoting, defs=self.defs)
        for a in assigns:
            self.assign(a.target, a.value)
        return F

    def substitute(self, F, B, targets, prefix: str) -> None:
        """Lines solving with an elimination of :meth:`eliminate` into ``targets``."""
        for a in substitute(F, B, targets, prefix):
            self.assign(a.target, a.value)

    # -- Newton: shared pieces ---------------------------------------------------------------
    def newton_symbols(self, st: ir.Newton, k: int):
        """Symbols of the loop's residuals, increments, residual norm and the first norm."""
        res = tuple(sp.Symbol(f"nt{k}.r[{i}]", real=True) for i in range(len(st.unknowns)))
        du = tuple(sp.Symbol(f"nt{k}.du[{i}]", real=True) for i in range(len(st.unknowns)))
        rn0 = sp.Symbol(f"nt{k}.rnorm0", real=True)
        return res, du, rn0

    def newton_step(self, st: ir.Newton, k: int, res, du) -> None:
        """Lines computing ``du`` from ``J du = -R`` (residuals already assigned to ``res``), or the
        Halley step of a solve with a ``curvature`` (:func:`~modelc.passes.expand_solve.halley_step`)."""
        if not st.curvature:
            self.solve(st.jacobian, tuple((-r,) for r in res), tuple((d,) for d in du), f"nt{k}")
            return
        for a in halley_step(res[0], st.jacobian[0][0], st.curvature[0], du[0], f"nt{k}"):
            self.assign(a.target, a.value)

    def line_search_symbols(self, st: ir.Newton, k: int) -> "LineSearch":
        """The per-point state of a line search (``st.solver.line_search > 0``)."""
        n = len(st.unknowns)
        return LineSearch(sp.Symbol(f"nt{k}.ls_a", real=True), sp.Symbol(f"nt{k}.ls_p", real=True),
                          sp.Symbol(f"nt{k}.ls_ok"), sp.Symbol(f"nt{k}.ls_back"),
                          tuple(sp.Symbol(f"nt{k}.ls_u[{i}]", real=True) for i in range(n)),
                          tuple(sp.Symbol(f"nt{k}.ls_d[{i}]", real=True) for i in range(n)))

    @staticmethod
    def line_search_tests(st: ir.Newton, ls: "LineSearch", go) -> list[tuple[sp.Symbol, sp.Expr]]:
        """``(ls.ok, enough decrease)`` and ``(ls.back, halve the step)`` for a point that ``go``
        (it has not converged). ``ok``: ``||R||^2 <= (1 - 2 c a) ||R_prev||^2`` (false for a residual
        that is not finite; ``R_prev`` is inf before the first step). ``back``: not ok, and the step
        was halved fewer than ``st.solver.line_search`` times. See :class:`LineSearch`."""
        rn = st.residual_norm
        floor = sp.Float(2.0 ** -st.solver.line_search, 17)
        return [(ls.ok, sp.LessThan(rn * rn, (1 - 2 * sp.Float(LINE_SEARCH_C, 17) * ls.alpha) * (ls.prev * ls.prev))),
                (ls.back, sp.And(go, sp.Not(ls.ok), sp.StrictGreaterThan(ls.alpha, floor)))]

    def line_search_start(self, st: ir.Newton, ls: "LineSearch", full) -> None:
        """Lines before the loop of a batched backend: every point from its guess (the accepted
        point), the fraction 1, the norm there inf (the guess is accepted), no step yet; ``full(v)``
        spells a batch of the value ``v`` in the backend's dtype."""
        n = self.namer
        self.line(f"{n(ls.alpha)} = {full('1.0')}")
        inf = 'float("inf")'
        self.line(f"{n(ls.prev)} = {full(inf)}")
        for v, u in zip(ls.u, st.unknowns):
            self.line(f"{n(v)} = {n(u)}")
        for d in ls.d:
            self.line(f"{n(d)} = {full('0.0')}")

    def line_search_update(self, st: ir.Newton, ls: "LineSearch", du, go: str, lib: str) -> None:
        """Lines of a batched backend (``lib``: ``torch`` or ``tl``) after the Newton step ``du``: a
        point that halves keeps its accepted point and step, another accepts where it is with the new
        step; the points that ``go`` move to the accepted point plus the fraction of the step, and an
        accepted step counts as an iteration. A point that stops keeps the fraction 0, so that its
        unchanged residual, which never decreases, does not make it halve again."""
        n, back, where = self.namer, self.namer(ls.back), f"{lib}.where"
        for v, u in zip(ls.u, st.unknowns):
            self.line(f"{n(v)} = {where}({back}, {n(v)}, {n(u)})")
        for v, d in zip(ls.d, du):
            self.line(f"{n(v)} = {where}({back}, {n(v)}, {n(d)})")
        # a point that stops gets the fraction 0: it never halves again (never restarts)
        self.line(f"{n(ls.alpha)} = {where}({back}, 0.5 * {n(ls.alpha)}, {where}({go}, 1.0, 0.0))")
        self.line(f"{n(ls.prev)} = {where}({back}, {n(ls.prev)}, {n(st.residual_norm)})")
        for u, v, d in zip(st.unknowns, ls.u, ls.d):
            self.line(f"{n(u)} = {where}({go}, {n(v)} + {n(ls.alpha)} * {n(d)}, {n(u)})")
        self.line(f"{n(st.iterations)} = {n(st.iterations)} + ({go} & ~{back}).to({lib}.int32)")

    def solve(self, A, B, targets, prefix: str) -> None:
        """Lines solving ``A X = B`` into ``targets`` (default: unrolled elimination)."""
        for a in expand_solve(A, B, targets, prefix, pivoting=self.pivoting, defs=self.defs):
            self.assign(a.target, a.value)

    def convergence(self, st: ir.Newton, rn0: sp.Symbol, k: int) -> sp.Expr:
        """||R|| <= atol, or (with ``residual_scale``) every |R_i| <= rtol_eff * scale_i, or (without)
        ||R|| <= rtol_eff ||R0||; ``rtol_eff = max(rtol, RTOL_FLOOR_EPS * eps(dtype))`` and ``atol``
        are assigned by the backend (:meth:`rtol_symbol`, :meth:`atol_symbol`): the spec's values, or
        the caller's at run time (the options argument: rtol, atol, max_iter; negative = the spec's): a float64 tolerance like 1e-12 cannot be met in float32, so the relative
        tolerance is floored at a few ulps of the kernel dtype."""
        rn = st.residual_norm
        res, _, _ = self.newton_symbols(st, k)
        # rn0 < FINITE_MAX (3e38, finite in float32 too): a point whose first residual is inf never
        # "converges" by rtol
        tests = [sp.LessThan(rn, self.atol_symbol(k))]
        if st.residual_scale:
            # scaled test (see ir.Newton.residual_scale): every residual is zero to within rtol_eff of
            # the magnitude of its own terms. Unlike rtol * ||R0|| it does not mix units (a residual in
            # MPa next to one in strain), and it is reachable in float32 (NaN compares false; a scale
            # that overflowed is 0, see passes.lower._residual_scale).
            tests.append(sp.And(*[sp.LessThan(_abs(r), self.rtol_symbol(k) * s)
                                  for r, s in zip(res, st.residual_scale)]))
        else:
            tests.append(sp.And(sp.LessThan(rn, self.rtol_symbol(k) * rn0), self._finite(rn0)))
        return sp.Or(*tests)

    def convergence_parts(self, st: ir.Newton, rn0: sp.Symbol, k: int) -> tuple[list, sp.Expr]:
        """(assignments, test): :meth:`convergence`'s test, with a scaled test of more than
        :data:`CONVERGENCE_CHUNK` residuals built up over boolean assignments of that many residuals
        each (``nt<k>.scaled<g>``), so that no generated line holds them all (chaboche2_coupled's
        was 2,729 characters; a residual's scale is an expression of its own). The same test: the
        assignments are ``scaled_g = scaled_{g-1} & ...``."""
        res, _, _ = self.newton_symbols(st, k)
        if not st.residual_scale or len(res) <= CONVERGENCE_CHUNK:
            return [], self.convergence(st, rn0, k)
        parts, prev = [], None
        for g, i in enumerate(range(0, len(res), CONVERGENCE_CHUNK)):
            terms = [sp.LessThan(_abs(r), self.rtol_symbol(k) * sc)
                     for r, sc in zip(res[i:i + CONVERGENCE_CHUNK], st.residual_scale[i:i + CONVERGENCE_CHUNK])]
            sym = sp.Symbol(f"nt{k}.scaled{g}")
            parts.append((sym, sp.And(*([prev] if prev is not None else []), *terms)))
            prev = sym
        return parts, sp.Or(sp.LessThan(st.residual_norm, self.atol_symbol(k)), prev)

    @staticmethod
    def _finite(rn: sp.Symbol) -> sp.Expr:
        return sp.StrictLessThan(rn, sp.Float(FINITE_MAX, 17))

    def rtol_symbol(self, k: int) -> sp.Symbol:
        return sp.Symbol(f"nt{k}.rtol", real=True)

    def atol_symbol(self, k: int) -> sp.Symbol:
        return sp.Symbol(f"nt{k}.atol", real=True)

    def residual_norm(self, res) -> sp.Expr:
        return sp.sqrt(sp.Add(*[r * r for r in res]))

    def newton(self, st: ir.Newton, k: int) -> None:
        raise NotImplementedError

    # -- Newton helpers ----------------------------------------------------------------------
    def call_helper(self, st: ir.Newton) -> None:
        """One line calling the module's helper for ``st`` (emitted on first use)."""
        args = sorted(reads(st), key=lambda s: s.name)
        outs = list(st.unknowns) + [st.converged, st.iterations, st.residual_norm]
        item = self.helpers.find(st)
        if item is None:
            name = f"{self.helpers.prefix}{len(self.helpers.items) + 1}"
            namer = Namer(short=self.namer.short)
            em = type(self)(self.p.sibling(namer), namer, self.pivoting, self.solver_helpers())
            em.defs = dict(self.defs)  # the same pivoting decisions as an inline solve
            params = [namer(a) for a in args]
            em.newton(st, 1, helper=True)
            for line in wrapped("return (", [namer(o) for o in outs], ")"):
                em.line(line)
            item = (st, name, self.helper_function(name, params, em), em.defs)
            self.helpers.items.append(item)
        self.defs.update(item[3])
        self.comment(f"Newton solve for {', '.join(u.name for u in st.unknowns)} (helper {item[1]})")
        for line in call_lines([self.namer(o) for o in outs], item[1], [self.namer(a) for a in args] + self.helper_args()):
            self.line(line)

    def helper_function(self, name: str, params: list[str], em: "Emitter") -> list[str]:
        """The helper's lines, ``def`` included (backend-specific)."""
        raise NotImplementedError

    def helper_args(self) -> list[str]:
        """Arguments every helper takes after the solve's inputs (backend-specific)."""
        return []

    def solver_helpers(self) -> Helpers | None:
        """What a Newton helper's emitter gets as its ``helpers``: the registry of the module's
        linear-solve helpers where the backend has them (Triton), else None."""
        return None


def with_variants(program: ir.Program) -> ir.Program:
    """``program`` split into its variants (:mod:`modelc.passes.variants`); a program that computes
    one thing (built by hand, or lowered for one selection) serves ``value`` and its derivatives."""
    if program.variants:
        return program
    from modelc.passes.variants import split_variants

    return split_variants(program, ir.variants_of(program))


def jacobian_groups(program: ir.Program, layout):
    """The Jacobians a program's variants return, grouped for emission: a list of groups, each a list
    of ``(variant, (rows, columns), entries)`` where ``entries`` are the structurally nonzero
    ``((row, column), expression)`` that variant returns beyond the earlier ones of its group.
    ``jacobian`` and ``total`` form one group (total's first columns are the Jacobian's: same rows,
    columns and entries, total's rows wider); every other variant is a group of its own."""
    def entries(v):
        view = ir.view(program, v.name)
        return layout.jacobian_shape(view), [(rc, e) for rc, e in layout.jacobian_entries(view)
                                             if not (e.is_Number and e == 0)]

    derivs = [v for v in program.variants if v.derivatives]
    found = {v.name: entries(v) for v in derivs}
    chain = [v for v in derivs if v.name in ("jacobian", "total")]
    if len(chain) == 2 and not set(found["jacobian"][1]) <= set(found["total"][1]):
        chain = []  # (not for lowered programs)
    groups = []
    for v in derivs:
        if v in chain[1:]:
            continue
        group, seen = [], set()
        for w in (chain if v in chain else [v]):
            shape, es = found[w.name]
            group.append((w, shape, [(rc, e) for rc, e in es if rc not in seen]))
            seen |= {rc for rc, _ in es}
        groups.append(group)
    return groups


def status_symbols(program: ir.Program) -> dict[str, sp.Symbol]:
    """The program's combined status symbols (``converged``, ``iterations``, ``residual_norm``), or
    ``{}`` for an explicit program. With no ``status`` given, a single Newton statement's own symbols
    are used."""
    if program.status:
        return dict(program.status)
    newtons = [s for s in program.body if isinstance(s, ir.Newton)]
    if not newtons:
        return {}
    if len(newtons) > 1:
        raise InternalError(f"program {program.name}: several Newton solves but no combined status")
    nt = newtons[0]
    return {"converged": nt.converged, "iterations": nt.iterations, "residual_norm": nt.residual_norm}
