"""Programs -> one C99 translation unit (``templates/c_source.c.j2``): the code of a model, compiled
by the system C compiler (:mod:`modelc.runtime.cbuild`) and called through ``ctypes`` (backend ``"c"``).
What does not depend on the model (vector math, the LU routine, loads and stores, the argument block)
is the runtime's ``modelc_kernel.h``: a source includes it by one line, which the runtime replaces
by the header's text before compiling (:func:`modelc.runtime.cheader.standalone`); :func:`point_source`
(for ``modelc export``) writes it inline.

Points run in blocks of ``MC_W`` lanes (the header chooses by dtype, instruction set and Newton:
8 to 32; ``-DMC_W=1`` is the scalar build). Every
straight-line run of statements becomes one loop over the lanes of a block (``MC_SIMD MC_LANES``)
that the C compiler vectorizes: a value used by a later loop lives in a lane array ``v_<name>[MC_W]``,
everything else in registers. A Newton solve is one ``static`` function per module, called by every
variant that contains it (value, Jacobian, tangent); it iterates until no lane of the block is active
(masked updates, per-lane convergence) and solves ``J du = -R`` in the iteration's lane loop,
unrolled over the Jacobian's structural nonzeros with the other backends' ``"auto"`` pivoting
(:mod:`modelc.passes.expand_solve`; up to ``UNROLL_MAX`` unknowns, beyond: the header's LU routine).
A linear solve of two or more unknowns (the implicit-function theorem) fills lane matrices and calls
the header's one LU routine, which works on all lanes at once. One source serves both dtypes: ``real`` is ``double``, or
``float`` with ``-DMC_FLOAT32``. Every read of a parameter is ``MC_P(column, value)``: the runtime
can build the same source with chosen columns as compile-time constants (baked parameters,
docs/backends.md).

Exported, per variant (``value``, ``jacobian``, ``tangent`` when declared, ``total``: d outputs / d
(inputs, parameters), when generated)::

    void mc_<variant>(int64_t n, const int64_t *args, int threads);

``args`` (see the template's ``mc_unpack``): one pointer and one row stride per input variable, in
the order of the runtime's input axis (its components contiguous: inputs are read where they lie, a
stride 0 broadcasts), the parameters
(row stride 0 when shared), the outputs ``Y`` and the Jacobian ``J`` (row strides; ``J`` rows of
``ny x nx`` or, for the tangent, ``nty x ntx`` entries, every entry written), and for implicit
models the status: converged (``uint8``), iterations (``int32``), residual norm (``real``); then the
Newton options and the flags (``MC_STREAM``: streaming stores, set by the runtime for outputs larger
than the cache). A point whose inputs hold a NaN or an infinity is failed by the kernel itself (NaN
outputs and Jacobian, not converged), except in affine models (``ir.analysis.marks_nonfinite``).

Semantics match the PyTorch backend point for point: Newton iteration ``it = 0, 1, ...`` evaluates
the residual, records ``||R0||`` at ``it = 0``, tests the shared criterion
(:meth:`~modelc.backends.statements.Emitter.convergence`) and stops when converged or at
``it = max_iter``, else solves and updates. A point whose Newton did not converge gets NaN outputs
and a NaN Jacobian row block.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from collections import Counter

import sympy as sp
from sympy.logic.boolalg import Boolean

from modelc import __version__, ir
from modelc.backends.c_printer import CPrinter, guess_powers
from modelc.backends.layout import Layout
from modelc.backends.names import Namer
from modelc.backends.statements import (RTOL_FLOOR_EPS, Emitter, jacobian_groups, status_symbols, with_variants,
                                        wrapped)
from modelc.runtime import cheader
from modelc.errors import InternalError
from modelc.passes.expand_solve import expand_solve, halley_step

# C keywords and the names the generated code uses itself (never given to a symbol)
_C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while real l n a b i0 nl it i j k m p q t u d f r sw mc_any mc_go mc_act mc_ok mc_args
mc_redo mc_fail
MC_NAN MC_INF MC_EPS MC_W MC_SIMD MC_SIMD_ANY MC_LANES MC_INLINE NIN NP NY exp log sin cos tan tanh
sinh cosh atan asin acos erf sqrt pow fabs floor NAN INFINITY asinh acosh atanh log1p expm1 atan2 mc_min mc_max mc_exp mc_log mc_pow
mc_sinh mc_cosh
mc_lu_solve mc_lu_apply mc_unpack mc_value mc_jacobian mc_tangent mc_total mc_maxit
""".split())


@dataclass
class _Loop:
    """One loop over the lanes. ``ops``: ``(target symbol or None, C lvalue or None, value)``; a value
    is a SymPy expression (its symbols are loaded from their lane arrays when the loop does not
    define them first) or raw C text over names the loop already has."""

    ops: list = field(default_factory=list)
    pragma: str = "MC_SIMD"
    mask: int = 0  # the variants that run it (0 or the block's every variant: unguarded)
    masks: list | None = None  # per op, when loops of different masks were fused (see _fuse)


@dataclass
class _Call:
    """Lines between lane loops (a Newton call, an LU solve): the symbols they read from and define
    in lane arrays; ``lines`` may be a function of the arrays (symbol -> array name)."""

    lines: object
    defines: tuple[sp.Symbol, ...] = ()
    reads: tuple[sp.Symbol, ...] = ()
    mask: int = 0


class _Code:
    """Emission state of one module: names, C types and the shared Newton functions."""

    def __init__(self, programs, layout: Layout | None = None):
        # parameter symbol -> its column: every load of it is MC_P(column, value), a constant when
        # the runtime bakes that column into the library (the template's MC_BAKED_FLAGS)
        self.param_column = dict(layout.param_columns()) if layout is not None else {}
        self.namer = Namer(_C_RESERVED)
        self.p = CPrinter(self.namer)
        self.base = Emitter(self.p, self.namer)  # the shared Newton pieces (criterion, norm)
        self.types = _types(programs)
        self.newtons: dict[ir.Newton, str] = {}  # the statement -> its function's name
        self.fallbacks: dict[ir.Newton, str] = {}  # the statement -> its LU function (unrolled steps)
        self.functions: list[str] = []
        self.defs: dict[sp.Symbol, sp.Expr] = {}  # values assigned so far (unrolled solves' pivots)
        self.widest = 0  # statements in the largest lane loop emitted so far (see WIDE_LOOP)

    def name(self, s: sp.Symbol) -> str:
        return self.namer(s)

    def ctype(self, s: sp.Symbol) -> str:
        return self.types.get(s, "real")

    def load(self, s: sp.Symbol, home: str) -> str:
        """The C expression of lane ``l``'s ``s`` from its lane array ``home``."""
        c = self.param_column.get(s)
        return f"{home}[l]" if c is None else f"MC_P({c}, {home}[l])"

    def expr(self, e) -> str:
        return self.p.doprint(sp.sympify(e))


def _types(programs) -> dict[sp.Symbol, str]:
    """Symbol -> ``int`` (booleans) or ``real``; assigned both: ``real`` (it holds both)."""
    types: dict[sp.Symbol, str] = {}

    def note(target, value):
        value = sp.sympify(value)
        if isinstance(value, sp.Symbol):
            t = types.get(value, "real")
        else:
            t = "int" if isinstance(value, Boolean) else "real"
        old = types.setdefault(target, t)
        if old != t:
            types[target] = "real"

    for prog in programs:
        for st in prog.body:
            if isinstance(st, ir.Assign):
                note(st.target, st.value)
            elif isinstance(st, ir.Newton):
                for a in st.body:
                    note(a.target, a.value)
                for x in st.exports:
                    note(x.target, x.value)
                types[st.converged] = types[st.iterations] = "int"
    return types


def _reads(e) -> set:
    if isinstance(e, str):
        return set()
    if isinstance(e, tuple):  # (C format, expressions)
        return set().union(*(_reads(x) for x in e[1]))
    return sp.sympify(e).free_symbols


def _text(code: "_Code", e, inline: dict | None = None) -> str:
    """C text of an op's value; ``inline``: symbols printed as their own value (read once)."""
    if isinstance(e, str):
        return e
    if isinstance(e, tuple):
        return e[0].format(*(_text(code, x, inline) for x in e[1]))
    if inline and e in inline:
        return code.expr(inline[e])
    return code.expr(e)


def _emit_loops(code: _Code, items, arrays: dict[sp.Symbol, str], full: int = 0) -> list[str]:
    """C lines for a sequence of lane loops and calls. ``arrays`` maps every symbol a loop may load
    to its lane array (``v_x``, read as ``v_x[l]``); a symbol defined in one loop and read by a later
    one gets an array ``v_<name>[MC_W]`` (declared first) and is stored there. Consecutive items of
    one mask other than 0 and ``full`` run under ``if (V & mask)``.

    Consecutive loops (nothing between them) are fused into one, whatever their masks: a value
    computed for every variant and read by the tangent's statements stays in a register instead of
    going through a lane array. Inside a fused loop, assignments are unguarded (pure arithmetic:
    an entry point's ``V`` is a constant, and the C compiler drops what that variant never reads)
    and each store runs under its own statement's mask."""
    items = _fuse(items, full)
    later: list[set] = [set() for _ in items]  # symbols read by the items after k
    acc: set = set()
    for k in range(len(items) - 1, -1, -1):
        later[k] = set(acc)
        it = items[k]
        if isinstance(it, _Loop):
            defined: set = set()
            reads: set = set()
            for tgt, _, e in it.ops:
                reads |= _reads(e) - defined
                if tgt is not None:
                    defined.add(tgt)
            acc = (acc - defined) | reads
        else:
            acc = (acc - set(it.defines)) | set(it.reads)
    homes = dict(arrays)
    decls: dict[str, list[str]] = {}  # C type -> the lane arrays of that type (declared first)
    body: list[str] = []
    guard = 0

    def enter(mask: int) -> None:
        nonlocal guard
        mask = 0 if mask == full else mask
        if mask != guard:
            if guard:
                body.append("}")
            if mask:
                body.append(f"if (V & {mask}) {{")
            guard = mask

    def emit(lines) -> None:
        body.extend(("    " + x if guard else x) for x in lines)

    for k, it in enumerate(items):
        if isinstance(it, _Call):
            for s in it.defines:
                if s not in homes:
                    homes[s] = f"v_{code.name(s)}"
                    decls.setdefault(code.ctype(s), []).append(f"v_{code.name(s)}[MC_W]")
            enter(it.mask)
            emit(it.lines(homes) if callable(it.lines) else it.lines)
            continue
        defined: dict[sp.Symbol, None] = {}
        loads: dict[sp.Symbol, None] = {}
        for tgt, _, e in it.ops:
            for s in sorted(_reads(e), key=sp.default_sort_key):
                if s not in defined and s not in loads:
                    if s not in homes:
                        raise InternalError(f"C backend: {s} is read before it is assigned")
                    if homes[s]:  # "": a C name in scope (no load)
                        loads[s] = None
            if tgt is not None:
                defined[tgt] = None
        stores = [s for s in defined if s in later[k]]
        for s in stores:
            if s not in homes:
                homes[s] = f"v_{code.name(s)}"
                decls.setdefault(code.ctype(s), []).append(f"v_{code.name(s)}[MC_W]")
        lines = [f"const {code.ctype(s)} {code.name(s)} = {code.load(s, homes[s])};" for s in loads]
        declared = set(loads)
        masks = it.masks or [it.mask] * len(it.ops)
        own = {}  # a defined symbol -> the mask of its statement

        def when(m: int, it=it) -> str:  # a store's own guard inside a fused loop
            return "" if m in (0, full, it.mask) else f"if (V & {m}) "

        # a derivative read once, by a store of this loop and nothing later, is computed in that
        # store (a Jacobian entry written where it is computed: one line instead of two, the same
        # code for the C compiler; named model variables keep their line)
        uses = Counter(x for _, _, e in it.ops for x in _reads(e))
        inline = {tgt: e for tgt, _, e in it.ops if tgt is not None and tgt.name.startswith("d(")
                  and uses[tgt] == 1 and tgt not in later[k]
                  and any(t is None and (v == tgt or (isinstance(v, tuple) and tgt in v[1]))
                          for t, _, v in it.ops)}
        for (tgt, lhs, e), m in zip(it.ops, masks):
            if tgt in inline:
                continue
            text = _text(code, e, inline)
            if tgt is None:
                lines.append(f"{when(m)}{lhs} = {text};")
            elif tgt in declared:
                raise InternalError(f"C backend: {tgt} is assigned twice in one lane loop")
            else:
                declared.add(tgt)
                own[tgt] = m
                lines.append(f"const {code.ctype(tgt)} {code.name(tgt)} = {text};")
        lines += [f"{when(own[s])}{homes[s]}[l] = {code.name(s)};" for s in stores]
        if not lines:
            continue
        code.widest = max(code.widest, len(lines))
        enter(it.mask)
        emit([f"{it.pragma} MC_LANES {{"] + ["    " + x for x in lines] + ["}"])
    enter(0)
    return [x.rstrip() for t, arrays in decls.items() for x in wrapped(f"{t} ", arrays, ";")] + body


def _newton_function(code: _Code, st: ir.Newton, fallback: bool = False) -> str:
    """The name of ``st``'s function, emitting it on first use: ``static void newton_k(inputs...,
    unknowns..., converged, iterations, residual norm)``, every argument a lane array.

    ``fallback``: ``newton_k_lu(inputs..., redo, unknowns..., ...)``, the same iteration with the step
    solved by ``mc_lu_solve`` (partial pivoting at every step), run only on the lanes whose ``redo``
    is set, from the guess (the block function calls it for the lanes whose converged flag the
    unrolled iteration left at 0); the other lanes keep what they hold. A Newton with a fallback
    (2 to ``UNROLL_MAX`` unknowns) is emitted once, as ``newton_k_iterate(..., V)``: ``V = 2`` the
    unrolled step, ``V = 1`` the LU on the lanes to redo; ``newton_k`` and ``newton_k_lu`` call it
    with that constant, so the C compiler keeps only each one's statements (the residual and the
    Jacobian are written once in the source, compiled twice as before)."""
    fname = (code.fallbacks if fallback else code.newtons).get(st)
    if fname is not None:
        return fname
    k = len(code.newtons) + 1
    fname = code.newtons[st] = f"newton_{k}"
    res, _, rn0 = code.base.newton_symbols(st, k)
    n = len(st.unknowns)
    both = 1 < n <= UNROLL_MAX  # the unrolled step and its LU fallback, from one body
    if both:
        code.fallbacks[st] = f"newton_{k}_lu"
    unknowns = set(st.unknowns)
    local = {a.target for a in st.body}
    # assignments that do not depend on the unknowns run once, before the iterations
    varying = set(unknowns)
    invariant, variant = [], []
    for a in st.body:
        if _reads(a.value) & varying:
            varying.add(a.target)
            variant.append(a)
        else:
            invariant.append(a)
    exprs = list(st.guess) + [a.value for a in st.body] + list(st.residual) + \
        [e for row in st.jacobian for e in row] + list(st.residual_scale) + list(st.curvature) + \
        [x.value for x in st.exports]
    ins = sorted(set().union(*(_reads(e) for e in exprs)) - local - unknowns, key=sp.default_sort_key)
    # (the exports: what the evaluation that ends the solve hands to the block, see ir.Newton.exports)
    outs = list(st.unknowns) + [st.converged, st.iterations, st.residual_norm] + [x.target for x in st.exports]
    in_args = [f"const {code.ctype(s)} *restrict v_{code.name(s)}" for s in ins]
    out_args = [f"{code.ctype(s)} *restrict v_{code.name(s)}" for s in outs]
    conv, its, rn, r0 = (code.name(s) for s in (st.converged, st.iterations, st.residual_norm, rn0))
    rtol, atol = code.base.rtol_symbol(k), code.base.atol_symbol(k)
    ok = sp.Symbol(f"nt{k}.ok", real=True)
    code.types[ok] = "int"
    # the variant bits of the shared body (one constant per entry function, see the docstring)
    LU, UNROLLED = (1, 2) if both else (0, 0)
    # before the iterations: the guess, the invariant assignments, the lanes' bookkeeping; the LU
    # fallback starts again only the lanes to redo, the others stay inactive, as they are
    if both:
        start = _Loop([(u, None, (f"(V & {LU}) && !mc_redo[l] ? v_{code.name(u)}[l] : {{0}}", (g,)))
                       for u, g in zip(st.unknowns, st.guess)])
        start.ops += [(a.target, None, a.value) for a in invariant]
        start.ops += [(None, f"v_{conv}[l]", f"(V & {LU}) && !mc_redo[l] ? v_{conv}[l] : 0"),
                      (None, f"v_{its}[l]", f"(V & {LU}) && !mc_redo[l] ? v_{its}[l] : 0"),
                      (None, "mc_act[l]", f"(V & {LU}) ? mc_redo[l] : 1")]
    else:
        start = _Loop([(u, None, g) for u, g in zip(st.unknowns, st.guess)])
        start.ops += [(a.target, None, a.value) for a in invariant]
        start.ops += [(None, f"v_{conv}[l]", "0"), (None, f"v_{its}[l]", "0"), (None, "mc_act[l]", "1")]
    start.ops += [(None, f"v_{code.name(x.target)}[l]", x.value) for x in st.exports
                  if not _reads(x.value) & varying]
    ls = code.base.line_search_symbols(st, k) if st.solver.line_search else None
    if ls is not None:  # statements.LineSearch: every lane from its first point, a full step
        start.ops += [(None, f"v_{code.name(ls.alpha)}[l]", "(real)1"),
                      (None, f"v_{code.name(ls.prev)}[l]", "MC_INF")]
        start.ops += [(None, f"v_{code.name(v)}[l]", code.name(u)) for v, u in zip(ls.u, st.unknowns)]
    # one iteration on every lane; a lane that has stopped keeps its unknowns and status. Without a
    # line search every lane is tested before the step is built: the Jacobian and the solve run
    # after the block's test, in a loop of their own, so the evaluation that ends the solve (all
    # lanes converged) builds none (SPLIT_MIN_UNKNOWNS)
    parts, test = code.base.convergence_parts(st, rn0, k)
    split = ls is None and n >= SPLIT_MIN_UNKNOWNS
    tested = _needed(variant, [*st.residual, test, *(e for _, e in parts), *(x.value for x in st.exports)]) \
        if split else variant
    step = _Loop([(a.target, None, a.value) for a in tested])
    step.ops += [(r, None, e) for r, e in zip(res, st.residual)]
    step.ops.append((st.residual_norm, None, code.base.residual_norm(res)))
    step.ops.append((rn0, None, f"it == 0 ? {rn} : v_{r0}[l]"))
    for sym, e in parts:
        code.types[sym] = "int"
        step.ops.append((sym, None, e))
    step.ops.append((ok, None, test))
    # every lane, active or not: a stopped lane's unknowns no longer change, nor do these values, so
    # after the last evaluation they are those at the solution
    # (an export that does not depend on the unknowns is stored once, before the iterations)
    step.ops += [(None, f"v_{code.name(x.target)}[l]", x.value) for x in st.exports if _reads(x.value) & varying]
    step.ops += [(None, f"v_{r0}[l]", r0), (None, "const int mc_was", "mc_act[l]"),
                 (None, f"v_{conv}[l]", f"mc_was ? {code.name(ok)} : v_{conv}[l]"),
                 (None, f"v_{rn}[l]", f"mc_was ? {rn} : v_{rn}[l]")]
    if ls is None:
        # a lane stops at mc_maxit steps, or at a residual that is not finite (it cannot recover:
        # the interpreter's failed point), instead of keeping its block iterating to mc_maxit
        step.ops += [(None, "const int mc_go", f"mc_was & ({code.name(ok)} == 0) & (it < mc_maxit) & ({rn} < MC_INF)"),
                     (None, "mc_act[l]", "mc_go")]
    else:  # at most mc_maxit accepted steps a lane; a halved step is not one
        step.ops += _line_search_test(code, st, ls, code.name(ok), rn)
    steps, update = [step], None
    go = "mc_act[l]" if split else "mc_go"  # (a later loop reads what the test stored)
    # the block's "any lane active?" (an omp simd reduction would keep the loop before it scalar)
    stop = _Call(["int mc_any = 0;", "MC_LANES mc_any |= mc_act[l];", "if (!mc_any) break;"])
    if split:
        chosen = set(map(id, tested))
        steps.append(stop)
        steps.append(_Loop([(a.target, None, a.value) for a in variant if id(a) not in chosen]))
    if n == 1:  # one unknown: the step in the same loop (no call, nothing staged)
        dx = sp.Symbol(f"nt{k}.dx", real=True)
        if st.curvature:  # a Halley step (one formula for every backend)
            steps[-1].ops += [(a.target, None, a.value)
                              for a in halley_step(res[0], st.jacobian[0][0], st.curvature[0], dx, f"nt{k}")]
        else:
            steps[-1].ops += _unrolled_solve(code, st.jacobian, ((-res[0],),), ((dx,),), f"nt{k}", code.defs)
        x = f"v_{code.name(st.unknowns[0])}[l]"
        if ls is None:
            steps[-1].ops += [(None, x, f"{go} ? {x} + {code.name(dx)} : {x}"),
                              (None, f"v_{its}[l]", f"v_{its}[l] + {go}")]
        else:
            step.ops += _line_search_step(code, st, ls, (code.name(dx),), "mc_back", its)
    else:
        if both:  # over the structural nonzeros, in the same loop (V & 2)
            dx = tuple(sp.Symbol(f"nt{k}.dx[{i}]", real=True) for i in range(n))
            defs = dict(code.defs)
            defs.update({a.target: a.value for a in st.body})
            unrolled = _Loop(_unrolled_solve(code, st.jacobian, tuple((-r,) for r in res), tuple((d,) for d in dx),
                                             f"nt{k}", defs), mask=UNROLLED)
            if ls is None:
                for u, d in zip(st.unknowns, dx):
                    x = f"v_{code.name(u)}[l]"
                    unrolled.ops.append((None, x, f"{go} ? {x} + {code.name(d)} : {x}"))
                unrolled.ops.append((None, f"v_{its}[l]", f"v_{its}[l] + {go}"))
            else:  # (fused with the step loop: mc_go and mc_back are in scope)
                unrolled.ops += _line_search_step(code, st, ls, tuple(code.name(d) for d in dx), "mc_back", its)
            steps.append(unrolled)
        staged = _Loop(mask=LU)  # the matrix and the right-hand side for mc_lu_solve (V & 1)
        for i in range(n):
            for j in range(n):
                staged.ops.append((None, f"mc_A[{i * n + j} * MC_W + l]", st.jacobian[i][j]))
            staged.ops.append((None, f"mc_B[{i} * MC_W + l]", -res[i]))
        steps.append(staged)
        update = _Loop([(None, "const int mc_go", "mc_act[l]")], mask=LU)
        if ls is None:
            for i, u in enumerate(st.unknowns):
                x = f"v_{code.name(u)}[l]"
                update.ops.append((None, x, f"mc_go ? {x} + mc_B[{i} * MC_W + l] : {x}"))
            update.ops.append((None, f"v_{its}[l]", f"v_{its}[l] + mc_go"))
        else:
            update.ops += _line_search_step(code, st, ls, tuple(f"mc_B[{i} * MC_W + l]" for i in range(n)),
                                            "mc_bk[l]", its)
    items = [start,
             # tolerances and iteration limit: the call's (a->rtol, ...), negative: the spec's
             _Call([f"const real {code.name(rtol)} = mc_max(a->rtol >= 0 ? a->rtol : "
                    f"{code.expr(sp.Float(st.solver.rtol, 17))}, ((real){float(RTOL_FLOOR_EPS)!r}) * MC_EPS);",
                    f"const real {code.name(atol)} = a->atol >= 0 ? a->atol : {code.expr(sp.Float(st.solver.atol, 17))};",
                    f"const int mc_maxit = a->maxit >= 0 ? a->maxit : {int(st.solver.max_iter)};",
                    "for (int it = 0; ; ++it) {", *(["MC_ITERATION_FENCE;"] if split else [])], (rtol, atol)),
             *steps]
    if not split:
        items.append(stop)
    if update is not None:
        items += [_Call([f"mc_lu_solve({n}, 1, mc_A, mc_B, 0);"], mask=LU), update]
    items.append(_Call(["}"]))
    arrays = {s: f"v_{code.name(s)}" for s in ins + list(st.unknowns)}
    arrays[rtol] = arrays[atol] = ""
    state = () if ls is None else (ls.alpha, ls.prev, *ls.u, *ls.d)
    arrays.update({s: f"v_{code.name(s)}" for s in state})
    lines = _emit_loops(code, items, arrays, full=LU | UNROLLED)
    decls = [(f"real mc_A[{n * n} * MC_W], mc_B[{n} * MC_W], " if n > 1 else "real ") + f"v_{r0}[MC_W];",
             "int mc_act[MC_W];"]
    if ls is not None:  # the line search's lane state
        decls += wrapped("real ", [f"v_{code.name(s)}[MC_W]" for s in state], ";")
        decls += ["int mc_bk[MC_W];"] if n > 1 else []
    what = ", ".join(u.name for u in st.unknowns)
    if not both:
        text = [f"/* Newton solve {k} for {what}: the lanes of a block iterate together until none is "
                "active */", *wrapped(f"static void {fname}(", in_args + out_args + ["const mc_args *restrict a"], ") {")]
        text += ["    " + x for x in decls + lines] + ["}"]
        code.functions.append("\n".join(text))
        return fname
    body = f"newton_{k}_iterate"
    names = [f"v_{code.name(s)}" for s in ins] + ["mc_redo"] + [f"v_{code.name(s)}" for s in outs] + ["a"]
    text = [f"/* Newton solve {k} for {what}: the lanes of a block iterate together until none is active.",
            f"   V = {UNROLLED}: every lane from the guess, the step unrolled over the Jacobian's structural "
            "nonzeros;",
            f"   V = {LU}: the lanes whose mc_redo is set, from the guess, the step by mc_lu_solve (partial "
            "pivoting) */",
            *wrapped(f"MC_INLINE void {body}(", in_args + ["const int *restrict mc_redo"] + out_args
                     + ["const mc_args *restrict a", "const int V"], ") {")]
    text += ["    " + x for x in decls + lines] + ["}"]
    text += [*wrapped(f"static void {fname}(", in_args + out_args + ["const mc_args *restrict a"], ") {"),
             *("    " + x for x in wrapped(f"{body}(", [x if x != "mc_redo" else "0" for x in names]
                                           + [str(UNROLLED)], ");")), "}",
             *wrapped(f"static void {fname}_lu(", in_args + ["const int *restrict mc_redo"] + out_args
                      + ["const mc_args *restrict a"], ") {"),
             *("    " + x for x in wrapped(f"{body}(", names + [str(LU)], ");")), "}"]
    code.functions.append("\n".join(text))
    return code.fallbacks[st] if fallback else fname


def _needed(assigns: list, exprs: list) -> list:
    """The assignments of ``assigns`` (in order) that ``exprs`` read, directly or through others."""
    need = set().union(*(_reads(e) for e in exprs))
    keep = []
    for a in reversed(assigns):
        if a.target in need:
            need |= _reads(a.value)
            keep.append(a)
    return keep[::-1]


def _line_search_test(code: "_Code", st: ir.Newton, ls, ok: str, rn: str) -> list:
    """Step-loop ops of a line search (statements.LineSearch) after the convergence test ``ok``:
    ``mc_back`` (halve the step: too little decrease, and halved fewer than line_search times),
    ``mc_go`` (the lane moves: it halves, or it has made fewer than mc_maxit steps from a finite
    residual), and the accepted point, fraction and residual norm updated; ``mc_back`` kept in
    ``mc_bk`` for the LU update loop."""
    a, p = (f"v_{code.name(s)}[l]" for s in (ls.alpha, ls.prev))
    its = f"v_{code.name(st.iterations)}[l]"
    enough, e_ok = code.base.line_search_tests(st, ls, sp.true)[0]  # (the back test is spelled below)
    code.types[enough] = "int"
    floor = code.expr(sp.Float(2.0 ** -st.solver.line_search, 17))
    ops = [(enough, None, e_ok),
           (None, "const int mc_back", f"mc_was & ({ok} == 0) & ({code.name(enough)} == 0) & ({a} > {floor})"),
           (None, "const int mc_go", f"mc_was & ({ok} == 0) & (mc_back | (({its} < mc_maxit) & ({rn} < MC_INF)))"),
           (None, "mc_act[l]", "mc_go"), (None, "mc_bk[l]", "mc_back") if len(st.unknowns) > 1 else None]
    ops += [(None, f"v_{code.name(v)}[l]", f"mc_back ? v_{code.name(v)}[l] : v_{code.name(u)}[l]")
            for v, u in zip(ls.u, st.unknowns)]
    ops += [(None, a, f"mc_back ? ((real)0.5) * {a} : (real)1"), (None, p, f"mc_back ? {p} : {rn}")]
    return [o for o in ops if o is not None]


def _line_search_step(code: "_Code", st: ir.Newton, ls, dx: tuple[str, ...], back: str, its: str) -> list:
    """Ops moving the lanes that go (``mc_go``) to the accepted point plus ``alpha`` times its step: the
    step kept where the lane backtracks (``back``), else the new one ``dx``; an accepted step counts."""
    a = f"v_{code.name(ls.alpha)}[l]"
    ops = []
    for u, v, d, x in zip(st.unknowns, ls.u, ls.d, dx):
        dv = f"v_{code.name(d)}[l]"
        ops += [(None, dv, f"{back} ? {dv} : {x}"),
                (None, f"v_{code.name(u)}[l]", f"mc_go ? v_{code.name(v)}[l] + {a} * {dv} : v_{code.name(u)}[l]")]
    ops.append((None, f"v_{its}[l]", f"v_{its}[l] + (mc_go & !({back}))"))
    return ops


def _unrolled_solve(code: "_Code", A, B, targets, prefix: str, defs) -> list:
    """Lane-loop ops solving ``A X = B`` unrolled over the structural nonzeros with the
    ``"auto"`` pivoting of :func:`~modelc.passes.expand_solve.expand_solve` (the Triton kernel's
    arithmetic: static order, a per-point tournament only at pivots at risk, guarded static pivots);
    ``defs``: the values of the symbols assigned before (whether a pivot is anchored). A 1 x 1
    system (a radial return's step and tangent) is ``x = b * (1/a)``, the arithmetic of
    ``mc_lu_solve`` for n = 1: inline, it needs no call, no staged A and B, and does not split the
    lane loop. Larger linear solves call ``mc_lu_solve``; a Newton step up to ``UNROLL_MAX``
    unknowns comes here."""
    ops = []
    for assign in expand_solve(A, B, targets, prefix, pivoting="auto", defs=defs):
        for a in _guard_without_max(assign):
            if isinstance(a.value, sp.Symbol):  # (a Symbol is a Boolean to SymPy)
                if code.types.get(a.value) == "int":
                    code.types[a.target] = "int"
            elif isinstance(a.value, Boolean):
                code.types[a.target] = "int"
            ops.append((a.target, None, a.value))
    return ops


#: a Newton step of up to this many unknowns is unrolled over the Jacobian's structural nonzeros
#: (``_unrolled_solve``, in the iteration's lane loop, the Triton kernel's ``"auto"`` pivoting); the
#: lanes where it fails are solved again by ``newton_k_lu`` (``mc_lu_solve``, partial pivoting at
#: every step), so no point is lost to a guarded pivot. A larger system, and every other linear
#: solve (the tangent's, once per point), calls ``mc_lu_solve``. Measured: docs/backends.md.
UNROLL_MAX = 24
#: a Newton (without a line search) of this many unknowns or more tests its lanes in one loop and
#: builds the Jacobian and the step in the next, after the block's test: the evaluation that ends a
#: solve builds none. 1: every Newton (the radial returns gain too, docs/backends.md); the tests set
#: it higher to compare with the one loop it replaced
SPLIT_MIN_UNKNOWNS = 1


GUARD_CHUNK = 4  # comparisons per assignment of a pivot guard (lines of a few hundred characters)


def _guard_without_max(a: ir.Assign) -> list[ir.Assign]:
    """A pivot guard ``|p| >= c * Max(|o1|, |o2|, ...)`` as ``|p| >= c |o1| & |p| >= c |o2| & ...``:
    the same test (a NaN entry fails both: the reciprocal is NaN, as the elimination's arithmetic
    would make it anyway), but GCC does not vectorize a lane loop holding the NaN-propagating
    ``mc_max`` chain (nor ``fmax``), and it does vectorize comparisons. A long row's comparisons go
    ``GUARD_CHUNK`` to an assignment, each chunk and-ed with the one before. Any other assignment:
    itself alone."""
    v = a.value
    if isinstance(v, sp.GreaterThan) and isinstance(v.rhs, sp.Mul):
        coeff, rest = v.rhs.as_coeff_Mul()
        if isinstance(rest, sp.Max):
            tests = [sp.GreaterThan(v.lhs, coeff * o) for o in rest.args]
            out: list[ir.Assign] = []
            for k in range(0, len(tests), GUARD_CHUNK):
                part = tests[k:k + GUARD_CHUNK] + ([out[-1].target] if out else [])
                last = k + GUARD_CHUNK >= len(tests)
                sym = a.target if last else sp.Symbol(f"{a.target.name}.part{len(out)}")
                out.append(ir.Assign(sym, sp.And(*part)))
            return out
    return [a]


def _fuse(items, full: int) -> list:
    """``items`` with every run of consecutive lane loops (same pragma) made one loop; its ops keep
    their loops' masks (``_Loop.masks``), the loop runs for the union of them."""
    out: list = []
    for it in items:
        prev = out[-1] if out else None
        if (isinstance(it, _Loop) and isinstance(prev, _Loop) and prev.pragma == it.pragma
                and it.ops and prev.ops):
            masks = (prev.masks or [prev.mask] * len(prev.ops)) + (it.masks or [it.mask] * len(it.ops))
            union = prev.mask | it.mask
            out[-1] = _Loop(ops=prev.ops + it.ops, pragma=it.pragma, mask=full if union == full else union,
                            masks=[full if m in (0, full) else m for m in masks])
        else:
            out.append(it)
    return out


def _block_function(code: _Code, program: ir.Program, layout: Layout) -> str:
    """``MC_INLINE void block_eval(const mc_args *a, int64_t i0, int nl, int V)``: lanes ``0 .. nl-1``
    of the block at point ``i0`` for variant bit ``V`` (the lanes beyond repeat the last point: they
    compute, nothing is stored). Each entry point calls it with a constant ``V``: the C compiler
    inlines it and drops every guarded group the variant does not need."""
    variants = ir.variants_of(program)
    full = sum(v.bit for v in variants)
    masks = program.masks or (full,) * len(program.body)
    # each input variable (and the parameters) staged lane-major in one array, entry c of lane l at
    # v_x<v>[c * MC_W + l] (mc_load: 4 x 4 tiles transposed in registers where it can)
    homes, stage = {}, []
    # in a call whose data come from memory, the next block's rows are fetched while this one computes
    fetch = [f"    mc_prefetch_rows(a->x[{v}] + (i0 + MC_W) * a->xs[{v}], a->xs[{v}], {len(var.symbols)});"
             for v, (var, _) in enumerate(layout.axis_inputs())]
    if layout.param_columns():
        fetch.append(f"    if (a->ps) mc_prefetch_rows(a->p + (i0 + MC_W) * a->ps, a->ps, {layout.np});")
    # and the output lines the block after it starts writing (mc_prefetch_out)
    fetch += ["    mc_prefetch_out(a->y, a->ys, i0 + 2 * MC_W);", "    mc_prefetch_out(a->j, a->js, i0 + 2 * MC_W);"]
    stage += ["if (a->flags & MC_STREAM) {  /* the next block's inputs (mc_prefetch_rows), outputs (mc_prefetch_out) */",
              *fetch, "}"]
    for v, (var, _) in enumerate(layout.axis_inputs()):
        stage.append(f"real v_x{v}[{len(var.symbols)} * MC_W];")
        stage.append(f"mc_load(v_x{v}, a->x[{v}] + i0 * a->xs[{v}], a->xs[{v}], {len(var.symbols)}, nl);")
        homes.update({s: f"(v_x{v} + {c} * MC_W)" for c, s in enumerate(var.symbols)})
    params = layout.param_columns()
    if params:
        stage.append(f"real v_p[{layout.np} * MC_W];")
        stage.append(f"mc_load(v_p, a->p + i0 * a->ps, a->ps, {layout.np}, nl);")
        homes.update({s: f"(v_p + {c} * MC_W)" for s, c in params})
    status = status_symbols(program)
    ok = status.get("converged")
    check = ir.analysis.marks_nonfinite(program)
    if check:  # mc_z[l]: 0, or NaN when an input of lane l is NaN or infinite (x * 0 is NaN then)
        terms = [f"{home}[l] * (real)0" for v, (var, _) in enumerate(layout.axis_inputs())
                 for home in (f"(v_x{v} + {c} * MC_W)" for c in range(len(var.symbols)))]
        stage += ["real mc_z[MC_W];", "MC_SIMD MC_LANES {", "    real z = 0;"]
        stage += [f"    z += {t};" for t in terms] + ["    mc_z[l] = z;", "}"]
    stores = _Stores(program, layout, ok, check)
    # where each staged value is written: right after the last assignment of its symbol when that
    # comes after the status is known, else in a final loop
    last = {st.target: k for k, st in enumerate(program.body) if isinstance(st, ir.Assign)}
    ready = 0 if ok is None else max((k for k, st in enumerate(program.body) if ok in ir.analysis.writes(st)),
                                     default=len(program.body))
    items: list = []
    cur = _Loop(mask=full)
    n_ls = 0
    solves = _Solves(program, masks)
    # a Newton solve's first guess: its non-integer powers to about 1e-7 (mc_gpow, c_printer.GuessPow)
    guesses = {g for st in program.body if isinstance(st, ir.Newton) for g in st.guess if isinstance(g, sp.Symbol)}
    for k, (st, m) in enumerate(zip(program.body, masks)):
        if m != cur.mask and not isinstance(st, ir.Newton):
            items.append(cur)
            cur = _Loop(mask=m)
        if isinstance(st, ir.Assign):
            code.defs[st.target] = st.value
            cur.ops.append((st.target, None, guess_powers(st.value) if st.target in guesses else st.value))
            if last[st.target] == k and k >= ready:
                cur.ops += stores.at(st.target, m)
        elif isinstance(st, ir.LinearSolve) and len(st.A) == 1:
            # a scalar system (a radial return's one unknown): inline in the lane loop, which goes on
            n_ls += 1
            cur.ops += _unrolled_solve(code, st.A, st.B, st.targets, f"ls{n_ls}", code.defs)
        elif isinstance(st, ir.LinearSolve):
            n_ls += 1
            new, cur = solves.emit(st, m, f"mc_ls{n_ls}", cur, stage, homes)
            items += new
        elif isinstance(st, ir.Newton):
            fn = _newton_function(code, st)
            exprs = list(st.guess) + [a.value for a in st.body] + list(st.residual) + \
                [e for row in st.jacobian for e in row] + list(st.residual_scale) + list(st.curvature) + \
                [x.value for x in st.exports]
            local = {a.target for a in st.body} | set(st.unknowns)
            ins = tuple(sorted(set().union(*(_reads(e) for e in exprs)) - local, key=sp.default_sort_key))
            outs = tuple(st.unknowns) + (st.converged, st.iterations, st.residual_norm) + \
                tuple(x.target for x in st.exports)
            items += [cur, _Call(lambda h, fn=fn, args=ins + outs: wrapped(f"{fn}(", [h[s] for s in args] + ["a"], ");"),
                                 outs, ins, m)]
            if 1 < len(st.unknowns) <= UNROLL_MAX:  # the lanes it failed: again, through the LU
                lu = _newton_function(code, st, fallback=True)
                items.append(_Call(lambda h, fn=lu, ins=ins, outs=outs, conv=st.converged: [
                    "{  /* lanes whose unrolled Newton failed: again with the LU's partial pivoting */",
                    "    int mc_redo[MC_W], mc_fail = 0;",
                    f"    MC_LANES {{ mc_redo[l] = {h[conv]}[l] == 0; mc_fail |= mc_redo[l]; }}",
                    *("    " + x for x in wrapped(f"if (mc_fail) {fn}(", [h[s] for s in ins] + ["mc_redo"]
                                                   + [h[s] for s in outs] + ["a"], ");")),
                    "}"], outs, ins + outs, m))
            cur = _Loop(mask=m)
        else:
            raise InternalError(f"unknown statement {type(st).__name__}")
    items.append(cur)
    items += stores.rest(full)
    if ok is not None:
        items.append(_Loop([(None, "o_c[l]", ok), (None, "o_it[l]", status["iterations"]),
                            (None, "o_r[l]", status["residual_norm"])], mask=full))
    lines = _emit_loops(code, items, homes, full)
    body = stage + stores.declarations() + lines + stores.lines()
    head = "MC_INLINE void block_eval(const mc_args *restrict a, const int64_t i0, const int nl, const int V) {"
    return "\n".join([head] + ["    " + x for x in body] + ["}"])


class _Solves:
    """The block function's linear solves of two or more unknowns, through the template LU. A matrix
    that several solves share (the column groups of the variants: the tangent's columns, then the
    Jacobian's and the total's) is staged and factored once, under the union of their variants: by
    the first solve when that one runs for all of them (``mc_lu_solve`` keeping each lane's pivots
    in the entry points that solve more columns), else on its own before it; the others solve
    through its factors (``mc_lu_apply``: the same operations on their columns, bit for bit)."""

    def __init__(self, program: ir.Program, masks):
        self.shared = Emitter._shared_matrices(program, masks)  # matrix -> the union of its solves' variants
        self.factored: dict = {}  # matrix -> the names of the arrays holding its factors and pivots
        self.later: dict = {}  # shared matrix -> the variants of its solves after the first
        for st, m in zip(program.body, masks):
            if isinstance(st, ir.LinearSolve) and st.A in self.shared:
                self.later[st.A] = (self.later[st.A] | m) if st.A in self.later else 0

    def emit(self, st: ir.LinearSolve, m: int, name: str, cur: _Loop, stage: list, homes: dict):
        """(items to append, the lane loop that goes on) for solve ``st`` of mask ``m``, ``cur`` being
        the open loop; its arrays are declared in ``stage`` and its targets' homes set."""
        n, mm = len(st.A), (len(st.B[0]) if st.B else 0)
        items, B = [], f"{name}_B"
        stage.append(f"real {B}[{n * mm} * MC_W];")
        first, union, kept = st.A not in self.factored, self.shared.get(st.A, m), st.A in self.shared
        if first:
            A, piv = f"{name}_A", (f"{name}_piv" if kept else "0")
            self.factored[st.A] = A, piv
            stage.append(f"real {A}[{n * n} * MC_W];" + (f" int {piv}[{n} * MC_W];" if kept else ""))
            if union != m:  # (the first solve does not run for every variant: factor on its own)
                items.append(cur)
                cur = _Loop(mask=union)
            cur.ops += [(None, f"{A}[{i * n + j} * MC_W + l]", st.A[i][j]) for i in range(n) for j in range(n)]
            if union != m:
                items += [cur, _Call([f"mc_lu_solve({n}, 0, {A}, 0, {piv});"], (), (), union)]
                cur = _Loop(mask=m)
        A, piv = self.factored[st.A]
        cur.ops += [(None, f"{B}[{i * mm + c} * MC_W + l]", st.B[i][c]) for i in range(n) for c in range(mm)]
        for i, row in enumerate(st.targets):
            for c, t in enumerate(row):
                homes[t] = f"({B} + {i * mm + c} * MC_W)"
        if first and union == m:
            keep = f"(V & {self.later[st.A]}) ? {piv} : 0" if kept else "0"
            call = f"mc_lu_solve({n}, {mm}, {A}, {B}, {keep});"
        else:
            call = f"mc_lu_apply({n}, {mm}, {A}, {piv}, {B});"
        return items + [cur, _Call([call], (), (), m)], _Loop(mask=m)


class _Stores:
    """The outputs and each variant's Jacobian: values staged lane-major in ``o_y`` / ``o_j``, then
    written to the caller's rows (``mc_store``: 4 x 4 tiles transposed in registers where it can,
    streaming stores at large batches). A tangent that returns every entry has a slot per entry; a
    Jacobian group with at least DENSE_FRACTION of its entries nonzero (and at most DENSE_MAX) is
    staged in the caller's layout, zeros included (``_dense_group``); a sparser one has one slot per
    distinct entry, shared by the variants that return it, and goes out point by point through a
    table of (slot, row, column). ``jacobian`` and ``total`` form one group: their d / d inputs
    entries sit at the same rows and columns (``total`` rows are wider), the parameter columns of
    ``total`` follow."""

    def __init__(self, program: ir.Program, layout: Layout, ok, check: bool):
        self.ok, self.layout, self.check = ok, layout, check
        self.y = list(layout.output_entries(program))
        self.slots: dict[sp.Expr, int] = {}
        # entry -> the further slots that hold it: in a variant that returns every entry of its
        # block (a tangent), an entry equal to another (a symmetric tangent's (i, j) and (j, i))
        # gets a slot of its own too, so the block is staged whole and goes out with mc_store.
        # (The dense groups' staging below could serve a whole tangent too; tried on 2026-11-29, the
        # tangent entries then staged among the Jacobian's statements and j2_voce_af's tangent call
        # measured 8% slower in one A/B, which this VM's library copies can also produce: kept as is.)
        self.copies: dict[sp.Expr, list[int]] = {}
        self.nslots = 0
        self.bits: dict[sp.Expr, int] = {}  # entry -> the variants that return it
        self.tables = []  # (the group's variants and shapes, [(slot, row, column)], entries per variant)
        self.reach: dict[int, int] = {}  # variant bit -> the slots below this bound hold its entries
        # a full Jacobian with at least DENSE_FRACTION of its entries nonzero is staged in its own
        # layout (entry (r, c) of variant v at slot r * columns + c, its zeros stored too) and goes
        # out whole with mc_store, like a tangent: entry -> [(variant bit, slot)], and per variant
        # (bit, rows x columns, the slots of its structural zeros)
        self.dense_slots: dict[sp.Expr, list[tuple[int, int]]] = {}
        self.dense: list[tuple[int, int, list[int]]] = []
        for group in jacobian_groups(program, layout):
            whole = len(group) == 1 and len(group[0][2]) == group[0][1][0] * group[0][1][1]
            if not whole and _dense(group):
                self._dense_group(group)
                continue
            table, counts = [], []
            for k, (v, _, entries) in enumerate(group):
                for (r, c), e in entries:
                    if e not in self.slots:
                        self.slots[e] = slot = self.nslots
                        self.nslots += 1
                    elif whole:
                        self.copies.setdefault(e, []).append(slot := self.nslots)
                        self.nslots += 1
                    else:
                        slot = self.slots[e]
                    self.bits[e] = self.bits.get(e, 0) | sum(w.bit for w, _, _ in group[k:])
                    table.append((slot, r, c))
                counts.append(len(table))
            self.tables.append(([(v, shape) for v, shape, _ in group], table, counts))
            for (v, _, _), n in zip(group, counts):  # the slots a variant's entries reach
                self.reach[v.bit] = max(self.reach.get(v.bit, 0), max((t[0] + 1 for t in table[:n]), default=0))
        self.staged: set = set()

    def _dense_group(self, group) -> None:
        inherited: list = []  # total's entries include the Jacobian's, at the same rows and columns
        for v, (nty, ntx), entries in group:
            every = inherited + list(entries)
            for (r, c), e in every:
                self.dense_slots.setdefault(e, []).append((v.bit, r * ntx + c))
            covered = {r * ntx + c for (r, c), _ in every}
            self.dense.append((v.bit, nty * ntx, [k for k in range(nty * ntx) if k not in covered]))
            self.reach[v.bit] = nty * ntx
            inherited = every

    def _dense_ops(self, sym, mask: int) -> list:
        """One staging store of ``sym`` for every dense variant that returns it: its slot a constant
        once the entry point's V is inlined (``(V == 4 ? 105 : 140)``: the Jacobian's row is 21
        entries, the total's 28)."""
        by_bit: dict[int, list[int]] = {}
        for bit, k in self.dense_slots.get(sym, ()):
            by_bit.setdefault(bit, []).append(k)
        ops = []
        for i in range(max(len(ks) for ks in by_bit.values())):  # (an entry equal to another: a slot each)
            places = [(bit, ks[i]) for bit, ks in by_bit.items() if i < len(ks)]
            bits = sum(bit for bit, _ in places)
            slot = str(places[-1][1])
            if len({k for _, k in places}) > 1:  # (the same place in every variant: no V in it)
                for bit, k in reversed(places[:-1]):
                    slot = f"V == {bit} ? {k} : {slot}"
                slot = f"({slot})"
            ops.append((None, f"{'' if mask & ~bits == 0 else f'if (V & {bits}) '}o_j[{slot} * MC_W + l]", self._value(sym)))
        return ops

    def _value(self, e):
        return ("{0} ? {1} : MC_NAN", (self.ok, e)) if self.ok is not None else e

    def at(self, sym: sp.Symbol, mask: int) -> list:
        """Staging ops for the outputs and entries that are ``sym`` itself (in the loop assigning it)."""
        ops = []
        for col, e in self.y:
            if e == sym and ("y", col) not in self.staged:
                self.staged.add(("y", col))
                ops.append((None, f"o_y[{col} * MC_W + l]", self._value(e)))
        if sym in self.slots and sym not in self.staged:
            self.staged.add(sym)
            cond = "" if mask & ~self.bits[sym] == 0 else f"if (V & {self.bits[sym]}) "
            for slot in [self.slots[sym], *self.copies.get(sym, ())]:
                ops.append((None, f"{cond}o_j[{slot} * MC_W + l]", self._value(sym)))
        if sym in self.dense_slots and ("dense", sym) not in self.staged:
            self.staged.add(("dense", sym))
            ops += self._dense_ops(sym, mask)
        return ops

    def rest(self, full: int) -> list:
        """Final loops (one per set of variants) for what was not staged where it was computed."""
        by_mask: dict[int, _Loop] = {}
        for col, e in self.y:
            if ("y", col) not in self.staged:
                by_mask.setdefault(full, _Loop(mask=full)).ops.append((None, f"o_y[{col} * MC_W + l]", self._value(e)))
        for e, slot in self.slots.items():
            if e not in self.staged:
                for k in [slot, *self.copies.get(e, ())]:
                    by_mask.setdefault(self.bits[e], _Loop(mask=self.bits[e])).ops.append(
                        (None, f"o_j[{k} * MC_W + l]", self._value(e)))
        for e, places in self.dense_slots.items():
            if ("dense", e) not in self.staged:
                bits = 0
                for bit, _ in places:
                    bits |= bit
                by_mask.setdefault(bits, _Loop(mask=bits)).ops.extend(self._dense_ops(e, bits))
        return [by_mask[m] for m in sorted(by_mask, key=lambda m: (-bin(m).count("1"), m))]

    def declarations(self) -> list[str]:
        out = [f"real o_y[{self.layout.ny} * MC_W];"]
        if self.tables or self.dense:
            size = max([self.nslots, 1] + [n for _, n, _ in self.dense])
            out.append(f"real o_j[{size} * MC_W];")
        if self.ok is not None:
            out += ["int o_c[MC_W], o_it[MC_W];", "real o_r[MC_W];"]
        return out

    def failed(self) -> list[str]:
        """A block with a NaN or infinite input (rare): those lanes fail (NaN outputs and entries,
        not converged), like a point whose Newton did not converge."""
        if not self.check:
            return []
        slots = (["o_y[k] = mc_z[k % MC_W] != mc_z[k % MC_W] ? MC_NAN : o_y[k];"] +
                 (["o_j[k] = mc_z[k % MC_W] != mc_z[k % MC_W] ? MC_NAN : o_j[k];"] if self.tables or self.dense else []))
        # only the entries of the entry point's variant (a constant once V is inlined): a tangent
        # call of j2_voce_af has 36 of the block's 522 slots, and the whole array (67 KB) cost each
        # block with such a lane microseconds
        reach = "0"
        for bit, n in sorted(self.reach.items(), key=lambda kv: -kv[0]):
            reach = f"V == {bit} ? {n} : {reach}"
        sizes = [str(self.layout.ny)] + ([f"({reach})"] if self.tables or self.dense else [])
        out = ["int mc_bad = 0;", "MC_LANES mc_bad |= mc_z[l] != mc_z[l];", "if (mc_bad) {"]
        out += [f"    for (int k = 0; k < {n} * MC_W; ++k) {line}" for n, line in zip(sizes, slots)]
        if self.ok is not None:
            out.append("    MC_LANES o_c[l] = mc_z[l] != mc_z[l] ? 0 : o_c[l];")
        return out + ["}"]

    def lines(self) -> list[str]:
        out = []
        for bit, n, zeros in self.dense:  # a dense Jacobian's structural zeros, before NaN marking
            if not zeros:
                continue
            value = "o_c[l] ? (real)0 : MC_NAN" if self.ok is not None else "(real)0"
            entries = [str(k) for k in zeros]
            out += [f"if (V == {bit}) {{", f"    static const int16_t jz{bit}[{len(zeros)}] = {{"]
            out += ["        " + ", ".join(entries[k:k + 16]) + "," for k in range(0, len(entries), 16)]
            out += ["    };", f"    for (int k = 0; k < {len(zeros)}; ++k) MC_LANES o_j[jz{bit}[k] * MC_W + l] = {value};", "}"]
        out += self.failed()
        out.append(f"mc_store(a->y + i0 * a->ys, a->ys, o_y, {self.layout.ny}, nl, a->flags & MC_STREAM);")
        for bit, n, _ in self.dense:
            out.append(f"if (V == {bit}) mc_store(a->j + i0 * a->js, a->js, o_j, {n}, nl, a->flags & MC_STREAM);")
        lane = []
        zero = ("o_c[l] ? (real)0 : MC_NAN" if self.ok is not None else
                "mc_z[l]" if self.check else "(real)0")  # mc_z: 0, NaN for a lane with a NaN input
        for t, (group, table, counts) in enumerate(self.tables):
            cond = " || ".join(f"V == {v.bit}" for v, _ in group)
            (nty, ntx) = group[0][1]
            if len(group) == 1 and [(r * ntx + c, s) for s, r, c in table] == [(k, k) for k in range(nty * ntx)]:
                # every entry, in slot order: the block goes out as it is
                out.append(f"if ({cond}) mc_store(a->j + i0 * a->js, a->js, o_j, {nty * ntx}, nl, a->flags & MC_STREAM);")
                continue

            def per_variant(values) -> str:  # a constant once the entry point's V is inlined
                text = str(values[-1])
                for (v, _), x in reversed(list(zip(group[:-1], values[:-1]))):
                    text = f"V == {v.bit} ? {x} : {text}"
                return text if len(values) == 1 else f"({text})"

            width = per_variant([w for _, (_, w) in group])
            size = per_variant([h * w for _, (h, w) in group])
            tab = f"jt{t}"
            # the table ({slot, row, column} per entry), eight entries to a line
            entries = [f"{{{s}, {r}, {c}}}" for s, r, c in table] or ["{0, 0, 0}"]
            rows = ["    " + ", ".join(entries[k:k + 8]) + "," for k in range(0, len(entries), 8)]
            out[0:0] = [f"static const int16_t {tab}[{len(entries)}][3] = {{"] + rows + ["};"]
            lane += [f"    if ({cond}) {{",
                     "        real *j = a->j + i * a->js;",
                     f"        for (int c = 0; c < {size}; ++c) j[c] = {zero};",
                     f"        for (int k = 0; k < {per_variant(counts)}; ++k)",
                     f"            j[{tab}[k][1] * {width} + {tab}[k][2]] = o_j[{tab}[k][0] * MC_W + l];",
                     "    }"]
        if lane:
            out += ["for (int l = 0; l < nl; ++l) {", "    const int64_t i = i0 + l;"] + lane + ["}"]
        if self.ok is not None:
            out.append("mc_store_status(a, i0, nl, o_c, o_it, o_r);")
        return out


#: a Jacobian group goes out whole (_Stores._dense_group) where every variant of it has at least this
#: share of its entries structurally nonzero; sparser ones go through the table of their entries
DENSE_FRACTION = 0.5
#: and at most this many entries a point (its staging and mc_store's are 2 x 16 x 8 bytes an entry on
#: the stack: 150 KB at 600; chaboche2_coupled's total, 950, keeps its table)
DENSE_MAX = 600


def _dense(group) -> bool:
    count = 0
    for _, (nty, ntx), entries in group:
        count += len(entries)  # (a later variant of the group holds the earlier ones' entries too)
        if count < DENSE_FRACTION * nty * ntx or nty * ntx > DENSE_MAX:
            return False
    return True


def _template():
    from modelc.backends.module import _template as load

    return load("c_source.c.j2")


def _include() -> str:
    """The lines that take in the runtime's ``modelc_kernel.h`` (what every model's source shares; the
    runtime writes its text in place before compiling, :func:`modelc.runtime.cheader.standalone`),
    then check that the installed header is the one this source was generated for."""
    abi = cheader.kernel_abi()
    return "\n".join([cheader.KERNEL_INCLUDE, f"#if MC_KERNEL_ABI != {abi}",
                      f'#error "this source needs modelc_kernel.h ABI {abi}: regenerate it with the installed modelc"',
                      "#endif"])


def _doc(program: ir.Program, layout: Layout, v: ir.Variant) -> str:
    if not v.derivatives:
        return f"{program.name}: outputs only"
    nty, ntx = layout.jacobian_shape(ir.view(program, v.name))
    what = {"jacobian": "d outputs / d inputs", "total": "d outputs / d (inputs, parameters)"}.get(
        v.name, f"the tangent d({', '.join(v.of or ())}) / d({', '.join(v.wrt or ())})")
    return f"{program.name}: outputs and {what} ({nty} x {ntx} per point)"


def part_of(variant: str) -> int:
    """Which of the source's two parts holds a variant's entry point: 0 for ``value`` and
    ``tangent`` (what a step needs), 1 for ``jacobian`` and ``total`` (full derivatives, autograd).
    The runtime builds part 0 when the library is first needed and part 1 on the first call that
    asks for it (``-DMC_PART=k``; :mod:`modelc.runtime.cbuild`): j2_voce_af's first build takes
    1.0 s instead of 5.7 s, chaboche2_coupled's about 13 s instead of 32 s."""
    return 0 if variant in ("value", "tangent") else 1


#: a source whose blocks hold many values at once says so, and the runtime builds it for 512-bit
#: vectors where the CPU has them (``runtime/cbuild.py``, ``WIDE_FLAGS``): ``#define MC_WIDE 2`` for
#: a Newton over a system of two or more unknowns (its elimination keeps the matrix live; float64
#: and float32, whose blocks then take 16 points), ``1`` for a lane loop of more than this many lines
#: (loads, statements, stores; j2_voce_af's tangent block 1,213: float64 only), else ``0``. GCC's
#: tuning for AVX-512 CPUs prefers 256-bit vectors, so a 16-point float64 block was four registers a
#: value and such blocks spilled; with two a value: the coupled systems 1.1-1.6x faster,
#: j2_voce_af 1.1x; float32 systems in 16-point blocks of one 512-bit vector a value 1.2-1.3x. The
#: smaller scalar Newtons (norton 659, perzyna_iso 723) were level or up to 13% slower, and so were
#: the closed forms (elastic 13-25% slower) and the float32 radial returns
#: (benchmarks/results/20261127T181116Z-cpu-wide-vectors.md)
WIDE_LOOP = 900


def _wide(program: ir.Program, code: _Code) -> int:
    """``MC_WIDE`` of ``program``'s source: 2, 1 or 0 (see :data:`WIDE_LOOP`)."""
    if any(isinstance(st, ir.Newton) and len(st.unknowns) > 1 for st in program.body):
        return 2
    return int(code.widest > WIDE_LOOP)


def c_source(program: ir.Program) -> str:
    """The C translation unit of a model: one entry point ``mc_<variant>`` per variant the program
    serves (``value``, ``jacobian``; ``tangent`` when declared, ``total``), each the one block
    function with its variant bit (module docstring), in two parts (:func:`part_of`). Compile with
    ``-DMC_FLOAT32`` for float32, ``-DMC_W=1`` for the scalar build, ``-DMC_PART=k`` for part k
    alone (without it, every entry point)."""
    program = with_variants(program)
    layout = Layout.of(program)
    code = _Code([program], layout)
    code.functions.append(_block_function(code, program, layout))
    variants = [{"name": v.name, "bit": v.bit, "doc": _doc(program, layout, v), "part": part_of(v.name)}
                for v in program.variants]
    # what the runtime checks a call's tensors against (runtime/cbuild.py, CLibrary): a row narrower
    # than the library reads would be read or written past its end
    widths = " ".join([f"x={','.join(str(len(var.symbols)) for var, _ in layout.axis_inputs())}"] + [
        f"{v.name}={nty * ntx}" for v in program.variants if v.derivatives
        for nty, ntx in [layout.jacobian_shape(ir.view(program, v.name))]])
    text = _template().render(model=program.name, version=__version__, n_inputs=max(len(layout.inputs), 1),
                              nx=layout.nx, ny=layout.ny, np=layout.np, functions=code.functions,
                              variants=variants, newton=int(bool(program.status)), kernel=_include(),
                              widths=widths, wide=_wide(program, code))
    if "\\" in text or "'''" in text:
        raise InternalError(f"model {program.name}: the C source contains a backslash or triple quote")
    return text


def point_source(program: ir.Program, derivative: str) -> str:
    """The per-point C code of a model for other C layers (:mod:`modelc.export`), without the batch
    entry points: the skeleton's preamble and block function built for one lane (``MC_W`` 1, libm;
    ``real`` is ``double`` unless ``-DMC_FLOAT32``), then two static functions with the layouts of
    :mod:`modelc.backends.layout`::

        static void point_value(const real *x, const real *p, real *y, real *j, real *st);
        static void point_derivative(const real *x, const real *p, real *y, real *j, real *st);

    ``x`` holds the inputs at their input-axis offsets (``NX`` values), ``p`` the parameters (``NP``).
    ``point_value`` writes the outputs ``y`` (``j`` unused); ``point_derivative`` also writes the
    derivative block of variant ``derivative`` of ``program`` into ``j`` (row-major,
    ``Layout.jacobian_shape``: the full ``NY x NX`` Jacobian or a declared tangent). ``st``
    (converged, iterations, residual norm) is written by implicit models only; a point that did not
    converge gets NaN outputs."""
    program = with_variants(program)
    layout = Layout.of(program)
    bits = {v.name: v.bit for v in program.variants}
    if derivative not in bits:
        raise InternalError(f"program {program.name} has no variant {derivative!r}")
    code = _Code([program], layout)
    code.functions.append(_block_function(code, program, layout))
    text = _template().render(model=program.name, version=__version__, n_inputs=max(len(layout.inputs), 1),
                              nx=layout.nx, ny=layout.ny, np=layout.np, functions=code.functions,
                              variants=[], newton=0, wide=0, kernel=cheader.kernel_header().rstrip("\n"))
    offsets = [o for _, o in layout.axis_inputs()]
    status = bool(program.status)
    lines = ["#define MC_W 1", text, ""]
    for name, bit in (("point_value", bits["value"]), ("point_derivative", bits[derivative])):
        lines += [f"static void {name}(const real *x, const real *p, real *y, real *j, real *st) {{",
                  "    mc_args a;",
                  "    uint8_t conv = 1;",
                  "    int32_t iters = 0;",
                  "    real rnorm = 0;"]
        for v, o in enumerate(offsets):
            lines += [f"    a.x[{v}] = x + {o};", f"    a.xs[{v}] = 0;"]
        lines += ["    a.p = p;", "    a.ps = 0;", "    a.y = y;", "    a.ys = 0;", "    a.j = j;", "    a.js = 0;",
                  "    a.conv = &conv;", "    a.iters = &iters;", "    a.rnorm = &rnorm;",
                  "    a.rtol = -1;", "    a.atol = -1;", "    a.maxit = -1;  /* the spec's Newton options */",
                  "    a.flags = 0;",
                  f"    block_eval(&a, 0, 1, {bit});"]
        lines += (["    st[0] = (real)conv;", "    st[1] = (real)iters;", "    st[2] = rnorm;"] if status
                  else ["    (void)st;"])
        lines += ["}", ""]
    return "\n".join(lines)
