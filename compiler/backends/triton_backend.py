"""Program -> the body of a generated Triton kernel.

One program instance handles ``BLOCK`` batch points (``offs``), masked against ``n``. Every input
component is loaded once, every output and Jacobian entry (zeros included) stored once; everything
in between lives in registers. Each array moves as one ``[BLOCK, W]`` tile (``W`` its row length padded
to a power of two) split into / assembled from components with ``tl.split`` / ``tl.join`` (see
:class:`_Rows`: few memory ops per array keep GPU compile times reasonable); rows of up to 64 values
are computed and stored 4 columns at a time (in float32 two such chunks are stored together: 32
bytes), which keeps register pressure down. Layout: see :mod:`modelc.backends.layout`; row offsets
are int64.

Kernel signature (every variant, so launches are uniform; :func:`kernel_signature`)::

    kernel(IN0, ..., INk, P, Y, J, CV, IT, RN, O, n, in0_stride, ..., ink_stride, p_stride, y_stride,
           j_stride, <c_NAME: constexpr for each baked parameter component>, V: constexpr,
           DTYPE: constexpr, EPS: constexpr, BLOCK: constexpr)

Each input variable is read where it lies: ``INv`` points to its ``(B, size)`` rows (components
contiguous, row stride ``inv_stride``; 0 for an input broadcast over the batch), in the order of the
runtime's input axis, so a call packs nothing. ``CV`` (bool), ``IT`` (int32) and ``RN`` (the kernel
dtype) receive each point's status (implicit programs; unit stride), as the C entry points write it.
A point whose inputs hold a NaN or an infinity gets NaN outputs and derivatives and is not converged
(``ir.analysis.marks_nonfinite``; affine programs propagate NaN by themselves), so the call needs no
check of its own on the host. ``O`` points to the call's Newton options (rtol, atol, max_iter in the
kernel dtype; negative: the spec's value), ``V`` is the bit of the variant asked for.

``EPS`` is the machine epsilon of ``DTYPE`` (Newton's relative tolerance is floored at a few EPS).

The value-only variant ignores ``J`` (and computes no derivative); explicit programs ignore ``CV``,
``IT`` and ``RN``.
Parameters come from ``P`` (kernel dtype, row stride 0 when shared), never as Python floats (a float
argument becomes fp32 on a GPU). Baked parameters are constexpr arguments turned into constants of
the kernel dtype, so the compiler folds them.

Newton: a ``while`` loop whose scalar condition is "some point of this block still updates"; the
per-point mask ``converged`` freezes converged points; ``iterations`` counts a point's updates. The
step (Jacobian, solve, update) is under ``if todo > 0:`` after the test, so the evaluation that ends
the solve builds none (without a line search). The Newton body is re-evaluated once after the loop
(values assigned inside a Triton loop do not leave it).
"""
from __future__ import annotations

import re

import sympy as sp

from modelc import ir
from modelc.errors import InternalError
from modelc.backends.layout import Layout
from modelc.backends.names import Namer, sanitize
from modelc.backends.statements import (RTOL_FLOOR_EPS, Emitter, Helpers, call_lines, jacobian_groups,
                                        status_symbols, with_variants, wrapped)
from modelc.backends.triton_math import ROW_WIDTHS
from modelc.backends.triton_printer import TritonPrinter
from modelc.passes.expand_solve import at_risk, back, factor, forward
from modelc.passes.schedule import schedule


def baked_arg(sym: sp.Symbol) -> str:
    """The constexpr argument name of a baked parameter component."""
    return "c_" + sanitize(sym.name)[2:] if sym.name.startswith("$") else "c_" + sanitize(sym.name)


class _Elimination:
    """An elimination done by a helper (:meth:`TritonEmitter.eliminate`): the call site's name of the
    tuple it returned (``var``), the helper's name and its :class:`Factor` in the helper's own symbols,
    and each of those symbols' position in the tuple."""

    def __init__(self, var: str, helper: str, F, index: dict):
        self.var, self.helper, self.F, self.index = var, helper, F, index


class TritonEmitter(Emitter):
    share_factors = True  # (PyTorch: torch.linalg from 4 unknowns on; C: its own, mc_lu_solve + mc_lu_apply)

    # -- linear solves through helpers ----------------------------------------------------------
    # A solve larger than 1x1 is unrolled over its structural nonzeros (modelc.passes.expand_solve):
    # one helper eliminates the matrix and returns its factors as a tuple; per pattern of structural
    # zeros of a right-hand side, a forward helper carries a column through the row exchanges and
    # eliminations and a back helper back-substitutes it. Each is emitted once per
    # module (identical text, one helper: the Newton step and the tangent eliminate the same
    # structure) and inlined by Triton, so the arithmetic is that of the unrolled solve, column by
    # column. Unrolled inline, chaboche2_coupled's kernels and Newton helper were ~11,000 lines.

    def solver_helpers(self) -> Helpers | None:
        return self.helpers

    def solve(self, A, B, targets, prefix: str) -> None:
        if self.helpers is None or len(A) < 2:
            super().solve(A, B, targets, prefix)
            return
        self.substitute(self.eliminate(A, prefix), B, targets, prefix)

    def _temp(self, what: str) -> sp.Symbol:
        """A fresh symbol of this function (printed ``<prefix>_<k>``)."""
        self.n_temps += 1
        return sp.Symbol(f"{what}#{self.n_temps}", real=True)

    def _operand(self, e, what: str):
        """``e`` as a number or a symbol: an expression is assigned to a fresh symbol first."""
        e = sp.sympify(e)
        if e.is_Number or isinstance(e, sp.Symbol):
            return e
        sym = self._temp(what)
        self.assign(sym, e)
        return sym

    def _helper_lines(self, name: str, params: list[str], doc: str, em: "TritonEmitter", outs: list[str]) -> list[str]:
        return (["", "@triton.jit"] + wrapped(f"def {name}(", params + ["DTYPE: tl.constexpr"], "):")
                + [f'    """{doc}"""'] + ["    " + line for line in em.p.prologue()] + em.lines
                + wrapped("    return (", outs, ")"))

    def eliminate(self, A, prefix: str):
        if self.helpers is None:
            return super().eliminate(A, prefix)
        n = len(A)
        risk = at_risk(A, prefix, self.defs)  # decided on the actual entries, as inline
        args, P = [], [[sp.S.Zero] * n for _ in range(n)]
        for i in range(n):
            for j in range(n):
                e = self._operand(A[i][j], f"{prefix}.a[{i},{j}]")
                if e.is_Number:
                    P[i][j] = e
                else:
                    P[i][j] = sp.Symbol(f"a{i}_{j}", real=True)
                    args.append((P[i][j], self.namer(e)))
        namer = Namer(short=self.namer.short)
        em = TritonEmitter(self.p.sibling(namer), namer, self.pivoting)
        params = [namer(p) for p, _ in args]
        assigns, F = factor(P, "f", pivoting=self.pivoting, at_risk=risk)
        for a in assigns:
            em.assign(a.target, a.value)
        outs: list[sp.Symbol] = []
        for k in range(n):
            outs += [s for _, s in F.swaps[k]] + [l for _, l in F.elims[k]]
        outs += [F.a[i][j] for i in range(n) for j in range(i + 1, n)] + list(F.inv)
        outs = list(dict.fromkeys(o for o in outs if isinstance(o, sp.Symbol)))
        nz = sum(1 for row in P for e in row if not (e.is_Number and e == 0))
        doc = (f"Elimination of a {n}x{n} system ({nz} structural nonzeros, row-major parameters): "
               "its factors, as a tuple (modelc.passes.expand_solve.factor).")
        out_names = [namer(o) for o in outs]
        key = ("eliminate", *params, *em.p.prologue(), *em.lines, *out_names)
        k = sum(1 for v in self.helpers.solvers.values() if re.fullmatch(r"_triton_lu\d+", v[0])) + 1
        name = self.helpers.solver(f"_triton_lu{k}", key,
                                   lambda nm: self._helper_lines(nm, params, doc, em, out_names))
        var = self.namer.fresh(f"{prefix}_lu")
        for line in call_lines([var], name, [a for _, a in args] + ["DTYPE"]):
            self.line(line)
        return _Elimination(var, name, F, {o: i for i, o in enumerate(outs)})

    def substitute(self, F, B, targets, prefix: str) -> None:
        if not isinstance(F, _Elimination):
            super().substitute(F, B, targets, prefix)
            return
        n = F.F.n
        m = len(B[0]) if n else 0
        # every column's forward pass, then every column's back substitution: the factors' L part
        # is dead before the first back substitution, as in one unrolled solve of all columns
        def fwd(ps):
            assigns, y = forward(F.F, [[p] for p in ps], "s")
            return assigns, [row[0] for row in y]

        def bwd(ps):
            xs = [sp.Symbol(f"x{i}", real=True) for i in range(n)]
            body, res = [], list(xs)
            for a in back(F.F, [[p] for p in ps], [[x] for x in xs], "s"):
                if a.target in xs:
                    res[xs.index(a.target)] = a.value  # the solution itself, not a copy of it
                else:
                    body.append(a)
            return body, res

        ys = []
        for c in range(m):
            col = [self._operand(B[i][c], f"{prefix}.b[{i},{c}]") for i in range(n)]
            ys.append(self._pass(F, "forward", col, fwd, [self._temp(f"{prefix}.y[{i},{c}]") for i in range(n)]))
        for c in range(m):
            self._pass(F, "back", ys[c], bwd, [targets[i][c] for i in range(n)])

    def _pass(self, F: "_Elimination", kind: str, col: list, run, got: list) -> list:
        """One half of a substitution (``kind``: "forward" or "back") of one column ``col`` (numbers
        and symbols of this function) through its helper: the helper's text from ``run`` applied to
        its parameters; the results' symbols of this function are ``got`` (numbers stay numbers)."""
        namer = Namer(short=self.namer.short)
        tup = namer.fresh("F")
        for sym, i in F.index.items():
            namer.bind(sym, f"{tup}[{i}]")
        em = TritonEmitter(self.p.sibling(namer), namer, self.pivoting)
        ps = [e if e.is_Number else sp.Symbol(f"{'b' if kind == 'forward' else 'y'}{i}", real=True)
              for i, e in enumerate(col)]
        params = [tup] + [namer(p) for p in ps if not p.is_Number]
        assigns, out = run(ps)
        results = list(out)
        for a in assigns:
            em.assign(a.target, a.value)
        outs = [r for r in results if not r.is_Number]
        out_names = [em.p.doprint(r) for r in outs]
        what = "row exchanges and eliminations" if kind == "forward" else "back substitution"
        doc = f"A right-hand side's {what} (its structural nonzeros) through {F.helper}."
        key = (kind, F.helper, *params, *em.p.prologue(), *em.lines, *out_names)
        k = len([1 for v in self.helpers.solvers.values() if v[0].startswith(f"{F.helper}_{kind}")]) + 1
        name = self.helpers.solver(f"{F.helper}_{kind}{k}", key,
                                   lambda nm: self._helper_lines(nm, params, doc, em, out_names))
        args = [self.namer(e) for e in col if not e.is_Number]
        mine = [g for g, r in zip(got, results) if not r.is_Number]
        if mine:
            for line in call_lines([self.namer(g) for g in mine], name, [F.var] + args + ["DTYPE"]):
                self.line(line)
        final = []
        for g, r in zip(got, results):
            if r.is_Number:
                if kind == "back":
                    self.assign(g, r)
                final.append(r)
            else:
                final.append(g)
        return final

    def helper_args(self) -> list[str]:
        # the baked parameters' constexpr arguments too: a power of them stays a compile-time one
        return ["o_rtol", "o_atol", "o_maxit", "mask", "DTYPE", "EPS", "BLOCK", *self._constexpr_args()]

    def _constexpr_args(self) -> list[str]:
        return sorted(set(self.p.constexpr.values()))

    def helper_function(self, name: str, params: list[str], em: Emitter) -> list[str]:
        sig = params + ["o_rtol", "o_atol", "o_maxit", "mask", "DTYPE: tl.constexpr", "EPS: tl.constexpr",
                        "BLOCK: tl.constexpr"] + [f"{a}: tl.constexpr" for a in self._constexpr_args()]
        return ["", "@triton.jit", *wrapped(f"def {name}(", sig, "):"),
                '    """Newton solve (shared by the kernels): the unknowns, converged, iterations, '
                'residual norm."""', "    # constants of the kernel dtype",
                *("    " + line for line in em.p.prologue()), *em.lines]

    def newton(self, st: ir.Newton, k: int, helper: bool = False) -> None:
        res, du, rn0 = self.newton_symbols(st, k)
        n = self.namer
        names = ", ".join(v.name for v in st.unknowns)
        self.comment(f"Newton solve {k} for {names}: per-point mask, converged points stop changing")
        for u, g in zip(st.unknowns, st.guess):
            self.line(f"{n(u)} = {self.p.doprint(g)} + tl.zeros([BLOCK], dtype=DTYPE)")
        past = "~mask" if helper else "offs >= n"
        self.line(f"{n(st.converged)} = {past}  # lanes past the batch count as converged")
        self.line(f"{n(st.iterations)} = tl.zeros([BLOCK], dtype=tl.int32)")
        self.line(f"{n(st.residual_norm)} = tl.zeros([BLOCK], dtype=DTYPE)")
        self.line(f"{n(rn0)} = tl.zeros([BLOCK], dtype=DTYPE)")
        # tolerances and iteration limit: the caller's (o_*), negative: the spec's
        self.line(f"{n(self.rtol_symbol(k))} = tl.maximum(tl.where(o_rtol >= 0, o_rtol, "
                  f"{self.p.doprint(sp.Float(st.solver.rtol, 17))}), {float(RTOL_FLOOR_EPS)!r} * EPS)")
        self.line(f"{n(self.atol_symbol(k))} = tl.where(o_atol >= 0, o_atol, "
                  f"{self.p.doprint(sp.Float(st.solver.atol, 17))})")
        maxit = self.namer.fresh(f"maxit{k}")
        self.line(f"{maxit} = tl.where(o_maxit >= 0, o_maxit, {int(st.solver.max_iter)})")
        it = self.namer.fresh(f"it{k}")
        todo = self.namer.fresh(f"todo{k}")
        upd = self.namer.fresh(f"update{k}")
        ls = self.line_search_symbols(st, k) if st.solver.line_search else None
        if ls is not None:  # statements.LineSearch: the accepted point, its step, the fraction tried
            self.line_search_start(st, ls, lambda v: f"tl.full([BLOCK], {v}, DTYPE)")
        self.line(f"{it} = 0")
        self.line(f"{todo} = tl.sum(mask.to(tl.int32), axis=0)")
        self.line(f"while {todo} > 0:")
        self.depth += 1
        self.statements(st.body)
        for r, e in zip(res, st.residual):
            self.assign(r, e)
        self.assign(st.residual_norm, self.residual_norm(res))
        self.line(f"{n(rn0)} = tl.where({it} == 0, {n(st.residual_norm)}, {n(rn0)})")
        parts, test = self.convergence_parts(st, rn0, k)
        for sym, e in parts:
            self.assign(sym, e)
        self.line(f"{n(st.converged)} = {n(st.converged)} | {self.p.doprint(test)}")
        if ls is None:  # at most maxit steps a point, none from a residual that is not finite (as the interpreter)
            self.line(f"{upd} = (~{n(st.converged)}) & ({it} < {maxit}) & ({n(st.residual_norm)} < float(\"inf\"))")
        else:  # at most maxit accepted steps a point (a halved step is not one), none from a non-finite residual
            for sym, e in self.line_search_tests(st, ls, sp.Not(st.converged)):
                self.assign(sym, e)
            self.line(f"{upd} = (~{n(st.converged)}) & ({n(ls.back)} | (({n(st.iterations)} < {maxit}) & "
                      f"({n(st.residual_norm)} < float(\"inf\"))))")
        if ls is None:
            # the step only while a point of the block updates: the evaluation that ends the solve
            # builds no Jacobian and solves nothing (as the C backend's SPLIT_MIN_UNKNOWNS)
            self.line(f"{todo} = tl.sum({upd}.to(tl.int32), axis=0)")
            self.line(f"if {todo} > 0:")
            self.depth += 1
            self.newton_step(st, k, res, du)
            for u, d in zip(st.unknowns, du):
                self.line(f"{n(u)} = tl.where({upd}, {n(u)} + {n(d)}, {n(u)})")
            self.line(f"{n(st.iterations)} = {n(st.iterations)} + {upd}.to(tl.int32)")
            self.depth -= 1
            self.line(f"{it} += 1")
        else:
            self.newton_step(st, k, res, du)
            self.line_search_update(st, ls, du, upd, "tl")
            self.line(f"{it} += 1")
            self.line(f"{todo} = tl.sum({upd}.to(tl.int32), axis=0)")
        self.depth -= 1
        if st.body and not helper:  # a helper returns the unknowns and status only
            self.comment("the Newton body at the solution (loop-local values do not leave the loop)")
            self.statements(st.body)


def _width(n: int) -> tuple[int, int]:
    """(bits, width): the power of two >= max(n, 2) that a row of ``n`` values is padded to."""
    bits = max(1, (max(n, 2) - 1).bit_length())
    return bits, 1 << bits


ROW_CALL_INLINE = 4  # a stored row of more values has its _mc_row call on lines of its own
STORE_CHUNK = 4  # columns per store for rows of at most CHUNKED_ROW_MAX values (see _Rows.store)
#: what a thread stores at once of a chunked row: STORE_CHUNK float64 columns, or two chunks of
#: float32 (triton_body's pair_stores). A sector is 32 bytes. Timed on an H200 (4e6 points,
#: benchmarks/results/20261127T153317Z-cuda-gpu-library-h200-ab-chunk8.md): rows stored 8 columns at
#: a time ran the radial returns' float32 tangent kernels 1.7-1.9x faster than 4 (0.23-0.27 of the
#: copy bandwidth -> 0.39-0.51), and in float64 j2_voce_af's value and tangent 9% slower (more spills).
STORE_BYTES = 32
if STORE_CHUNK * 8 != STORE_BYTES:  # pair_stores: a chunk is one float64 store, two chunks one float32 store
    raise InternalError(f"STORE_CHUNK {STORE_CHUNK} is not {STORE_BYTES} bytes of float64")
CHUNKED_ROW_MAX = 64
#: columns per store for longer rows (a full Jacobian): a [BLOCK, W] tile is stored through shared
#: memory, BLOCK * W * 8 bytes in float64; whole, j2_perfect's 13x14 Jacobian (W 256) asked for 256 KB
#: on sm_90 and failed to launch on an H200 (227 KB is the most a block gets); 32 columns: 32 KB, and
#: j2_voce_af's Jacobian kernel compiled in 10.5 s against 9.4 s whole (Triton 3.6, run side by side)
LONG_CHUNK = 32


class _Rows:
    """Whole-row loads and stores: one ``tl.load``/``tl.store`` of a ``[BLOCK, W]`` tile per array
    (short rows are stored a few columns at a time, see :meth:`store`).

    Why: Triton's coalescing pass walks the whole data-flow slice of every memory operation, so a
    kernel with one load/store per component (hundreds for a Jacobian) took minutes to compile for
    a GPU. A tile is split into its columns with ``tl.split`` (and assembled with ``tl.join``), a
    binary tree over a ``[BLOCK, 2, ..., 2]`` reshape; in that tree, leaf ``m`` is column
    ``bitrev(m)``. The trees are the module's helpers ``_mc_cols<W>``/``_mc_pcols<W>`` and
    ``_mc_row<W>`` (:mod:`modelc.backends.triton_math`), which Triton inlines. Everything stays in
    registers.

    ``detach`` (the kernels of large coupled systems, see :func:`_detach`): every load and store goes
    through a loop of one trip (``range(0, zero + 1)``, ``zero`` a kernel argument the runtime passes
    as 0) whose pointer is carried by the loop (``p += zero``): the module's ``_mc_load`` and
    ``_mc_store`` helpers (:mod:`modelc.backends.triton_math`), inlined by Triton. The coalescing pass then skips the
    slice of that operation (it computes one only for a pointer defined by an operation, and a
    loop-carried value is a block argument), which cost time quadratic in the kernel's size for
    every memory operation: 97% of a 26 s compile of j2_voce_af_coupled's tangent kernel (sm_90,
    MLIR_ENABLE_TIMING). The slice only serves to widen an access to what related accesses allow;
    here each thread's accesses are its own row, so the same loads and stores come out (PTX compared
    in float64 and float32, tests/compiler/backends/test_triton_backend_sm90.py; a launch specialises
    ``zero`` as divisible by 16, so the pointers' alignment is kept as well). The GPU compile of
    chaboche2_coupled's float64 tangent kernel went from 146 s to 17 s, its value kernel from 28 s
    to 7 s; what a one-trip loop costs at run time is a compare and a branch per access (not yet
    timed on a GPU)."""

    def __init__(self, em: "TritonEmitter", detach: bool = False):
        self.em = em
        self.k = 0
        self.last_tile = None  # the name of what the last load() read whole (tile, or a scalar's value)
        self.detach = detach

    def load_line(self, name: str, ptr: str, mask: str, other: str, shape: str) -> None:
        """``name = tl.load(ptr, mask, other)`` (``detach``: ``_mc_load``, which
        fills with 0.0; ``shape``: the loaded tensor's)."""
        if not self.detach:
            self.em.line(f"{name} = tl.load({ptr}, mask={mask}, other={other})")
            return
        if other != "0.0":
            raise InternalError(f"a detached load fills with 0.0, not {other}")
        self.em.line(f"{name} = _mc_load({ptr}, {mask}, zero)  # one trip: see _Rows (detach)")

    def store_line(self, ptr: str, value: str, mask: str) -> None:
        """``tl.store(ptr, value, mask)`` (through a one-trip loop for ``detach``)."""
        if not self.detach:
            self.em.line(f"tl.store({ptr}, {value}, mask={mask})")
            return
        self.em.line(f"_mc_store({ptr}, {value}, {mask}, zero)  # one trip: see _Rows (detach)")

    def _tmp(self, base: str) -> str:
        self.k += 1
        return self.em.namer.fresh(f"_{base}{self.k}")

    def load(self, ptr: str, stride: str, n: int, targets: list[str], other: str = "0.0") -> None:
        """Load a ``(B, n)`` array's rows into the names ``targets`` (one per column)."""
        if n == 1:  # a scalar variable: one value per point, no tile
            t = self.last_tile = self._tmp("x")
            self.load_line(t, f"{ptr} + row * {stride}", "mask", other, "[BLOCK]")
            self.em.line(f"{targets[0]} = {t}")
            return
        bits, W = _width(n)
        tile = self.last_tile = self._tmp("tile")
        self.load_line(tile, f"{ptr} + row[:, None] * {stride} + tl.arange(0, {W})[None, :]",
                       f"mask[:, None] & (tl.arange(0, {W})[None, :] < {n})", other, f"[BLOCK, {W}]")
        self._columns(f"_mc_cols{W}", [tile, "BLOCK"], W, targets)

    def _columns(self, helper: str, args: list[str], W: int, targets: list[str]) -> None:
        """``targets`` (then ``_`` for the padding) = the columns of a tile (``helper``: its
        ``_mc_cols<W>`` or ``_mc_pcols<W>``, a ``tl.split`` tree)."""
        if W not in ROW_WIDTHS:
            raise InternalError(f"a loaded row pads to {W} values, which has no {helper} helper")
        for line in call_lines(list(targets) + ["_"] * (W - len(targets)), helper, args):
            self.em.line(line)

    def load_row(self, ptr: str, n: int, targets: list[str], other: str = "0.0") -> None:
        """One row of ``n`` values for the whole program (0-d scalars) into ``targets``: :meth:`load`
        without ``row``."""
        if n == 1:
            self.em.line(f"{targets[0]} = tl.load({ptr})")
            return
        bits, W = _width(n)
        tile = self._tmp("tile")
        self.load_line(tile, f"{ptr} + tl.arange(0, {W})", f"tl.arange(0, {W}) < {n}", other, f"[{W}]")
        self._columns(f"_mc_pcols{W}", [tile], W, targets)

    def store(self, ptr: str, stride: str, values: list[str], index=None) -> None:
        """Rows of up to ``CHUNKED_ROW_MAX`` values are stored ``STORE_CHUNK`` columns at a time (a
        whole-row tile keeps every value and the join tree live at once: for a 6x6 tangent that was
        255 registers and ~0.4 KB of spills per thread on sm_90, chunked 55 and none); longer rows
        (a full Jacobian) are stored ``LONG_CHUNK`` columns at a time, since chunking them finer multiplies
        the GPU compile time (j2_voce_af: 64 s -> 559 s) and a whole row needs too much shared memory
        (see ``LONG_CHUNK``). Measured with benchmarks/gpu_kernels.py. ``index(k)``, when given, maps the
        text of the values' positions ``k`` (a ``[1, W]`` int tensor) to their columns in the row."""
        if CHUNKED_ROW_MAX >= len(values) > STORE_CHUNK:
            for start in range(0, len(values), STORE_CHUNK):
                self._store(ptr, stride, values[start:start + STORE_CHUNK], start, index)
            return
        if len(values) > LONG_CHUNK:
            for start in range(0, len(values), LONG_CHUNK):
                self._store(ptr, stride, values[start:start + LONG_CHUNK], start, index)
            return
        self._store(ptr, stride, values, 0, index)

    def store_chunk(self, ptr: str, stride: str, values: list[str], start: int) -> None:
        """One chunk of a row (at most ``STORE_CHUNK`` values, from column ``start``; two in float32,
        see :data:`STORE_BYTES`), stored on its own: see :meth:`store`."""
        if len(values) > 2 * STORE_CHUNK:
            raise InternalError(f"store_chunk: {len(values)} values, more than two chunks ({STORE_CHUNK})")
        self._store(ptr, stride, values, start)

    def _store(self, ptr: str, stride: str, values: list[str], start: int, index=None) -> None:
        n = len(values)
        bits, W = _width(n)
        em = self.em
        if W not in ROW_WIDTHS:
            raise InternalError(f"a stored row of {n} values pads to {W}, which has no _mc_row helper")
        zero = None
        if W > n:  # the padding of a row whose width is not a power of two
            zero = self._tmp("zero")
            em.line(f"{zero} = tl.zeros([BLOCK], dtype=DTYPE)")
        leaves = values + [zero] * (W - n)
        tile = f"_mc_row{W}({', '.join(leaves)}, BLOCK)"
        if W > ROW_CALL_INLINE:  # a long row: its values on lines of their own, 4 to a line
            tile = self._tmp("row")
            em.line(f"{tile} = _mc_row{W}(")
            for i in range(0, W, 4):
                em.line("    " + ", ".join(leaves[i:i + 4]) + ("," if i + 4 < W else ", BLOCK)"))
        cols = f"tl.arange(0, {W})[None, :]"
        if index is not None:
            k = self._tmp("k")
            em.line(f"{k} = {cols} + {start}" if start else f"{k} = {cols}")
            where = index(k)
        else:
            where = f"{start} + {cols}" if start else cols
        self.store_line(f"{ptr} + row[:, None] * {stride} + {where}", tile, f"mask[:, None] & ({cols} < {n})")


def triton_body(program: ir.Program, layout: Layout, baked: frozenset[str], *, pivoting: str = "auto",
                short_names: bool = True, helpers: Helpers | None = None) -> tuple[list[str], list[str]]:
    """The kernel's lines (without the ``def`` line) and the names of its constexpr baked args; the
    kernel's ``V: tl.constexpr`` is the bit of the variant asked for (each variant compiles to its
    own kernel holding only its code). ``pivoting``: see :mod:`modelc.passes.expand_solve`;
    ``short_names``: see :mod:`modelc.backends.names`."""
    program = with_variants(program)
    namer = Namer(short=short_names)
    pcols = list(zip(layout.param_columns(), layout.param_names_by_column()))
    pr = TritonPrinter(namer, {sym: baked_arg(sym) for (sym, _), pname in pcols if pname in baked})
    em = TritonEmitter(pr, namer, pivoting, helpers)
    em.depth = 1
    rows = _Rows(em, detach=_detach(program))
    head: list[str] = []
    em.comment("inputs: one tile load per input variable where it lies, split into components (each read once)")
    zeros = []  # per input variable: 0 per point, NaN where one of its values is NaN or infinite
    for v, (var, _) in enumerate(layout.axis_inputs()):
        rows.load(f"IN{v}", f"in{v}_stride", len(var.symbols), [namer(sym) for sym in var.symbols])
        zeros.append(f"{rows.last_tile} * 0.0" if len(var.symbols) == 1 else f"tl.sum({rows.last_tile} * 0.0, axis=1)")
    fin = None
    if zeros and ir.analysis.marks_nonfinite(program):
        fin = namer.fresh("fin")
        em.comment("the points whose inputs are all finite (x * 0 is NaN for a NaN or an infinity); the others fail")
        em.line(f"{fin} = ({' + '.join(zeros)}) == 0.0")
    em.comment("parameters: one row for every point (P_SHARED: scalars), a row per point, or baked in")
    baked_args: list[str] = []
    loaded = [(sym, col) for (sym, col), pname in pcols if pname not in baked]
    if loaded:
        # shared, the parameters are scalars: a value per program, not per point (no registers per
        # point; j2_voce_af's float64 kernels 168 -> 155-158 registers, norton's 143-147 -> 128)
        for shared in (True, False):
            em.line("if P_SHARED:" if shared else "else:")
            em.depth += 1
            names = ["_"] * layout.np
            for sym, col in loaded:
                names[col] = namer(sym)
            if shared:
                rows.load_row("P", layout.np, names)
            else:
                rows.load("P", "p_stride", layout.np, names)
            em.depth -= 1
    for (sym, col), pname in pcols:
        if pname in baked:
            arg = baked_arg(sym)
            baked_args.append(arg)
            em.line(f"{namer(sym)} = tl.full([], {arg}, DTYPE)")
    status = status_symbols(program)
    ok = pr.doprint(status["converged"]) if status else None
    if fin is not None:  # what every store is guarded by: converged, and finite inputs
        ok = fin if ok is None else f"({ok} & {fin})"
    nan = pr.literal(float("nan")) if ok else ""

    param_syms = {sym for (sym, _), _ in pcols}

    def block(expr) -> str:
        # constants and parameter-only values can be 0-d (baked, or shared): broadcast them to the block
        val = _guard(pr.doprint(expr), ok, nan)
        flat = ok is None and (expr.is_Number or expr.free_symbols <= param_syms)
        return f"({val} + tl.zeros([BLOCK], dtype=DTYPE))" if flat else val

    outs = dict(layout.output_entries(program))

    y_chunks, chunks = _chunks(program, layout, outs, {status["converged"]} if status else set())
    groups = jacobian_groups(program, layout)

    def dtype_branch(dtype, emit) -> None:
        """``emit()`` under ``if DTYPE == dtype:`` (a constexpr: the other dtype's kernel has none of
        it), or bare for ``dtype`` None."""
        if dtype is None:
            emit()
            return
        em.line(f"if DTYPE == {dtype}:  # {STORE_BYTES} bytes a store (see pair_stores)")
        em.depth += 1
        emit()
        em.depth -= 1

    def store_outputs(start, es, dtype=None) -> None:
        if start is None:
            em.comment("outputs: every entry written once" + ("; NaN where Newton did not converge" if ok else ""))
            rows.store("Y", "y_stride", [block(e) for e in es])
            return
        em.comment(f"outputs {start} .. {start + len(es) - 1}" + ("; NaN where Newton did not converge" if ok else ""))
        dtype_branch(dtype, lambda: rows.store_chunk("Y", "y_stride", [block(e) for e in es], start))

    # The outputs are stored as soon as the statements they read are done, before a derivative
    # variant's statements, and so is each chunk of a tangent's row (see _Rows.store): their
    # values need no register afterwards. The statements are scheduled for that order
    # (modelc.passes.schedule): the outputs' statements first, then each chunk's, depth first.
    # sm_90, float64 tangent kernels: the outputs early 142-200 -> 128-180 registers; scheduled
    # with the chunks early (and CSE's named differences), 116-168
    # (benchmarks/results/20261125T203016Z-sm90-kernels-schedule.md).
    tangent_bit = next((v.bit for v in program.variants if v.name == "tangent"), 1)
    program = schedule(program, [syms for *_, syms in y_chunks] + [syms for _, syms in chunks], tangent_bit)

    def last_writer(symbols):
        return max((k for k, st in enumerate(program.body) if ir.analysis.writes(st) & symbols), default=None)

    after: dict[int, list] = {}

    def pair_stores(items, emit, before) -> None:
        """One row's chunks ``(start, entries, k)``, in order (``k``: the statement after which the
        chunk's values are all computed; None: before any), each stored as soon as it is computed:
        ``emit(start, entries, dtype)`` after statement ``k`` (for None, ``before(start, entries,
        dtype)``). A chunk is :data:`STORE_CHUNK` columns, 32 bytes in float64; in float32 that is
        16 bytes, half a sector, so there two neighbouring chunks that make one 8-column piece of
        the row are stored together, at the later of their two ``k`` (the first chunk's values
        live until then: float32 registers are half as many). Timed on an H200, the float32
        tangent kernels of the radial returns ran 1.7-1.9x faster that way (see :data:`STORE_BYTES`)."""
        def at(k, start, es, dtype) -> None:
            if k is None:
                before(start, es, dtype)
            else:
                after.setdefault(k, []).append(lambda: emit(start, es, dtype))

        i = 0
        while i < len(items):
            start, es, k = items[i]
            if not (i + 1 < len(items) and start % (2 * STORE_CHUNK) == 0 and items[i + 1][0] == start + STORE_CHUNK):
                at(k, start, es, None)  # a chunk alone (the row's last): the same in both dtypes
                i += 1
                continue
            (_, second, k2) = items[i + 1]
            at(k, start, es, "tl.float64")
            at(k2, start + STORE_CHUNK, second, "tl.float64")
            at(k if k2 is None else k2 if k is None else max(k, k2), start, es + second, "tl.float32")
            i += 2

    for start, es, syms in y_chunks:
        if start is None:
            last = last_writer(syms)
            if last is None:
                store_outputs(start, es)
            else:
                after.setdefault(last, []).append(lambda es=es: store_outputs(None, es))
    pair_stores([(start, es, last_writer(syms)) for start, es, syms in y_chunks if start is not None],
                store_outputs, store_outputs)
    early: dict[str, list] = {}  # variant stored chunk by chunk -> its chunks of constants only (stored last)
    for v in dict.fromkeys(v for (v, _, _), _ in chunks):
        early[v.name] = []

        def store_chunk(start, es, dtype, v=v):
            em.line(f"if V & {v.bit}:  # {v.name}: entries {start} .. {start + len(es) - 1} of d outputs / d inputs")
            em.depth += 1
            dtype_branch(dtype, lambda: rows.store_chunk("J", "j_stride", [block(e) for e in es], start))
            em.depth -= 1

        pair_stores([(start, es, last_writer(syms)) for (w, start, es), syms in chunks if w is v], store_chunk,
                    lambda start, es, dtype, v=v: early[v.name].append((start, es, dtype)))
    em.guarded(program, {k: (lambda fs=fs: [f() for f in fs]) for k, fs in after.items()})
    for group in groups:
        if early.get(group[0][0].name) == []:  # every chunk already stored
            continue
        names = ", ".join(v.name for v, _, _ in group)
        em.line(f"if V & {sum(v.bit for v, _, _ in group)}:  # {names}")
        em.depth += 1
        em.comment(f"d outputs / d inputs of the {names} variant(s): every entry written once, zeros "
                   "included")
        (nty, ntx), wide = group[0][1], group[-1][1][1]
        depth = em.depth
        for k, (v, shape, _) in enumerate(group):
            view = ir.view(program, v.name)
            entries = [((r, c), e) for (r, c), e in layout.jacobian_entries(view) if k == 0 or c >= ntx]
            if not entries:
                continue
            if k:  # the next variant's columns (total: the parameters), entry (r, c) at r * wide + c
                em.line(f"if V & {v.bit}:")
                em.depth += 1
            if len(group) == 1:
                if v.name in early:  # chunks stored as computed; those of constants only here
                    for start, es, dtype in early[v.name]:
                        dtype_branch(dtype, lambda start=start, es=es: rows.store_chunk(
                            "J", "j_stride", [block(e) for e in es], start))
                else:
                    rows.store("J", "j_stride", [block(e) for _, e in entries])
            elif k == 0:  # rows of this variant's width, or of the widest when that is the one asked for
                extra = wide - ntx
                rows.store("J", "j_stride", [block(e) for _, e in entries],
                           lambda q: f"{q} + ({q} // {ntx}) * ({extra} * (V // {group[-1][0].bit}))")
            else:
                cols = shape[1] - ntx
                rows.store("J", "j_stride", [block(e) for _, e in entries],
                           lambda q: f"({q} // {cols}) * {shape[1]} + {ntx} + {q} % {cols}")
        em.depth = depth - 1
    if status:  # last: stored right after the solve, perzyna_iso's tangent took 168 registers, not 144
        em.comment("status: converged (bool), iterations (int32), residual norm")
        rows.store_line("CV + row", ok, "mask")
        rows.store_line("IT + row", f"({pr.doprint(status['iterations'])}).to(tl.int32)", "mask")
        rows.store_line("RN + row", f"{pr.doprint(status['residual_norm'])} + tl.zeros([BLOCK], dtype=DTYPE)", "mask")
    head.append("pid = tl.program_id(0)")
    head.append("offs = pid * BLOCK + tl.arange(0, BLOCK)")
    head.append("mask = offs < n")
    head.append("row = offs.to(tl.int64)")
    head.append("# Newton options of the call (rtol, atol, max_iter; negative: the spec's)")
    head.append("o_rtol = tl.load(O)")
    head.append("o_atol = tl.load(O + 1)")
    head.append("o_maxit = tl.load(O + 2).to(tl.int32)")
    head.append("# constants of the kernel dtype (a bare float literal would be fp32)")
    head += pr.prologue()
    return ["    " + h for h in head] + em.lines, baked_args


def kernel_signature(layout: Layout, baked_args: list[str]) -> str:
    """The generated kernel's parameter list (see the module docstring)."""
    k = len(layout.axis_inputs())
    return ", ".join([f"IN{v}" for v in range(k)] + ["P", "Y", "J", "CV", "IT", "RN", "O", "n"]
                     + [f"in{v}_stride" for v in range(k)] + ["p_stride", "y_stride", "j_stride", "zero"]
                     + [f"{a}: tl.constexpr" for a in baked_args]
                     + ["V: tl.constexpr", "DTYPE: tl.constexpr", "EPS: tl.constexpr", "BLOCK: tl.constexpr",
                        "P_SHARED: tl.constexpr"])


def _system_size(program: ir.Program) -> int:
    """The number of unknowns of the program's largest system: a Newton solve's unknowns or a linear
    solve's rows (0 for an explicit program; 1 for a radial return)."""
    return max([len(st.unknowns) for st in program.body if isinstance(st, ir.Newton)]
               + [len(st.A) for st in program.body if isinstance(st, ir.LinearSolve)], default=0)


#: the smallest system (:func:`_system_size`) whose kernels' loads and stores go through one-trip
#: loops (:func:`_detach`). Timed on an H200 (benchmarks/results/20261127T153325Z-cuda-gpu-library-
#: h200-ab-nodetach.md, 4e6 points): without them, the twins of 7 and 8 unknowns ran 10-26% faster
#: in float64 and 30-58% in float32, and compiled in 6-8 s (4 s detached); j2_voce_af_coupled (14)
#: ran its float64 value kernel at the same speed (its others were not reached in the time box) and its
#: tangent kernel took 51 s to compile against 10 s.
DETACH_MIN_UNKNOWNS = 12


def _detach(program: ir.Program) -> bool:
    """Whether the kernel's loads and stores go through one-trip loops (:class:`_Rows`, ``detach``):
    for a system of :data:`DETACH_MIN_UNKNOWNS` unknowns or more, whose kernels are large enough for
    Triton's coalescing pass to dominate the GPU compile. Smaller ones keep the straight form, which
    runs faster (see :data:`DETACH_MIN_UNKNOWNS`) and compiles in seconds either way."""
    return _system_size(program) >= DETACH_MIN_UNKNOWNS


#: ptxas' register cap (``maxnreg``) for the float64 kernels of coupled systems. Without a cap, ptxas
#: compiled the largest float64 kernels (j2_voce_af_coupled, chaboche2_coupled) for full occupancy,
#: 32 registers per thread with 2048 threads per SM, and spilled 3x more than at 255: j2_voce_af_coupled's
#: value kernel 17.6 KB of spill stores at 32 registers, 5.9 KB at 255 (sm_90). Timed on an H200
#: (benchmarks/results/20261126T235715Z-cuda-gpu-library-h200.md, 4e6 points): 255 registers run
#: j2_voce_af_coupled 5.8-6.2x faster than no cap and 2.6x faster than 128; chaboche2_coupled 4.7-5.5x
#: and 2.3-2.7x; the small twins (255 registers either way) 1.2-1.8x faster than at 128; gtn the
#: same at 128 and 255.
LARGE_KERNEL_MAXNREG = 255
#: ... and for the value and tangent kernels of the others (one unknown at most: the radial returns,
#: elastic). On the H200 a cap of 128 ran j2_voce_af's value and tangent kernels 13% and 8% faster
#: than ptxas' own choice (155 and 158 registers, no spills; 128 with 20-26 words of local memory),
#: perzyna_iso's tangent 20% faster (142 -> 128 registers), and the kernels already at or under 128
#: registers at the same speed within 4% (elastic, perzyna_iso's value; benchmarks/results/
#: 20261126T234630Z-cuda-gpu-library-h200.md and 20261126T235715Z-...). Their full-Jacobian kernels
#: (every output by every input) are large: uncapped, ptxas gave j2_voce_af's 32 registers and 20 KB
#: of spills, the others 255 registers; at 128 they spill 1.6-8.3 KB (sm_90): they take the large cap.
SMALL_KERNEL_MAXNREG = 128
SMALL_KERNEL_VARIANTS = ("value", "tangent")


def kernel_maxnreg(program: ir.Program) -> dict[str, int]:
    """The register cap the generated module asks its float64 launches for, per variant
    (``Model.TRITON_MAXNREG_F64``; float32 launches take none: the cap raised the small twins'
    float32 kernels from 128 registers to 147-161, where ptxas' own choice had no spills, and on the
    H200 a cap of 128 ran the radial returns' float32 value kernels 8-10% slower, their tangents
    8-11% faster): :data:`LARGE_KERNEL_MAXNREG` for a coupled system (a system of more than one
    unknown, :func:`_system_size`) and for every full-Jacobian kernel, else
    :data:`SMALL_KERNEL_MAXNREG`."""
    small = _system_size(program) <= 1
    return {v.name: SMALL_KERNEL_MAXNREG if small and v.name in SMALL_KERNEL_VARIANTS else LARGE_KERNEL_MAXNREG
            for v in program.variants}


def aot_attrs(arg_names, sig: dict[str, str]) -> dict:
    """The argument attributes a launch on torch's tensors gives a generated kernel (``attrs`` of
    ``ASTSource``): pointers 16-byte aligned, and ``zero`` (always 0) divisible by 16."""
    return {(i,): [["tt.divisibility", 16]] for i, a in enumerate(arg_names) if sig[a][0] == "*" or a == "zero"}


def aot_signature(arg_names, dt: str) -> dict[str, str]:
    """Triton's signature of a generated kernel with parameters ``arg_names`` (its ``arg_names``) for
    a compilation without a launch (``triton.compile(ASTSource(kernel, signature, constexprs))``, as
    benchmarks/gpu_kernels.py and the sm_90 tests do): ``dt`` ("fp64" or "fp32") is the kernel dtype."""
    sig = {}
    for a in arg_names:
        if a == "CV":
            sig[a] = "*i1"
        elif a == "IT":
            sig[a] = "*i32"
        elif a in ("P", "Y", "J", "RN", "O") or (a.startswith("IN") and a[2:].isdigit()):
            sig[a] = "*" + dt
        elif a in ("n", "zero") or a.endswith("_stride"):
            sig[a] = "i32"
        else:
            sig[a] = "constexpr"
    return sig


def _chunks(program: ir.Program, layout: Layout, outs: dict, conv: set):
    """What the kernel stores as soon as it is computed: ``(y_chunks, chunks)``, the outputs' row as
    ``(start, entries, symbols read)`` (one item, start None, for a row stored whole) and the chunked
    Jacobian rows (a tangent's; a lone Jacobian's of up to ``CHUNKED_ROW_MAX`` entries) as
    ``((variant, start, entries), symbols read)``. ``conv``: what every guarded store reads."""
    def reads(es):
        return set().union(conv, *(sp.sympify(e).free_symbols for e in es))

    ny = layout.ny
    if CHUNKED_ROW_MAX >= ny > STORE_CHUNK:  # the outputs' row a chunk at a time (_Rows.store)
        y = [[outs[c] for c in range(i, min(i + STORE_CHUNK, ny))] for i in range(0, ny, STORE_CHUNK)]
        y_chunks = [(i * STORE_CHUNK, es, reads(es)) for i, es in enumerate(y)]
    else:
        es = [outs[c] for c in range(ny)]
        y_chunks = [(None, es, reads(es))]
    chunks = []
    for group in jacobian_groups(program, layout):
        v = group[0][0]
        values = [e for _, e in layout.jacobian_entries(ir.view(program, v.name))]
        if len(group) == 1 and CHUNKED_ROW_MAX >= len(values) > STORE_CHUNK:
            for i in range(0, len(values), STORE_CHUNK):
                es = values[i:i + STORE_CHUNK]
                chunks.append(((v, i, es), reads(es) - conv))
    return y_chunks, chunks


def _guard(val: str, ok: str | None, nan: str) -> str:
    return val if ok is None else f"tl.where({ok}, {val}, {nan})"
