"""Program -> the body of a generated PyTorch function.

Layout (the same as the Triton kernel's): ``X`` is ``(B, nx)`` (the input axis' flat storage), ``P`` is
``(1, np)`` (shared parameters) or ``(B, np)`` (per point), and the function returns ``(Y, J, ST)``:
``Y`` ``(B, ny)``, ``J`` ``(B, ny, nx)`` or None, ``ST`` ``(B, 3)`` = (converged, iterations, residual
norm) or None for an explicit program. Every scalar component is a ``(B,)`` tensor (a column view of
``X``), so the generated code is elementwise torch ops on batch tensors.

Linear systems with ``n >= TORCH_LINALG_MIN_N`` unknowns go through ``torch.linalg.solve_ex``
(LAPACK's partially pivoted LU, per point), or, for a matrix that several solves share, one
``lu_factor_ex`` and a ``lu_solve`` per solve, on rows scaled by powers of two
(``runtime.model.t_rowscale``: scaled partial pivoting, exactly); smaller ones are unrolled like the
Triton kernel's.

Newton: a Python loop over iterations on the whole batch with a per-point mask ``converged``; a
converged point's unknowns stop changing; the loop ends when every point converged or after
``max_iter`` updates (one host sync per iteration). """
from __future__ import annotations

import sympy as sp

from modelc import ir
from modelc.backends.layout import Layout
from modelc.backends.names import Namer
from modelc.backends.statements import (RTOL_FLOOR_EPS, Emitter, Helpers, jacobian_groups, status_symbols,
                                        with_variants, wrapped)
from modelc.backends.torch_printer import TorchPrinter


# Systems with at least this many unknowns are solved with torch.linalg.solve_ex on a gathered
# (B, n, n) matrix instead of unrolled elimination: a handful of batched ops instead of O(n^3)
# elementwise ones (much less code, and faster on CPU for n >= 4, see the module docstring).
# solve_ex never raises: a singular point gets non-finite values and fails to converge.
TORCH_LINALG_MIN_N = 4


class _LU:
    """A matrix factored once by ``torch.linalg.lu_factor_ex`` for the solves that share it: the
    names of its factors and pivots."""

    def __init__(self, lu: str, piv: str, scale: str):
        self.lu, self.piv, self.scale = lu, piv, scale


class TorchEmitter(Emitter):
    #: a matrix that several solves share (the variants' column groups: a Jacobian or total call
    #: needs more columns than the tangent) is factored once: from TORCH_LINALG_MIN_N unknowns by
    #: ``lu_factor_ex`` and a ``lu_solve`` per solve (the routines ``solve_ex`` runs inside: on
    #: torch 2.13's CPU the same numbers bit for bit, measured on 4 .. 19 unknowns); smaller ones by
    #: the unrolled elimination of the other backends
    share_factors = True

    def _gather(self, name: str, M) -> None:
        self.line(f"{name} = _matrix([")  # one row per line
        for row in M:
            self.line("    [" + ", ".join(self.p.doprint(e) for e in row) + "],")
        self.line("], X)")

    def _unpack(self, x: str, targets) -> None:
        for i, row in enumerate(targets):
            for j, t in enumerate(row):
                self.line(f"{self.namer(t)} = {x}[:, {i}, {j}]")

    def solve(self, A, B, targets, prefix: str) -> None:
        if len(A) < TORCH_LINALG_MIN_N:
            return super().solve(A, B, targets, prefix)
        a, b = self.namer.fresh(f"{prefix}_A"), self.namer.fresh(f"{prefix}_B")
        x, sc = self.namer.fresh(f"{prefix}_X"), self.namer.fresh(f"{prefix}_s")
        self._gather(a, A)
        self._gather(b, B)
        self.line(f"{sc} = _rowscale({a})")
        self.line(f"{x} = torch.linalg.solve_ex({a} * {sc}, {b} * {sc}, check_errors=False)[0]")
        self._unpack(x, targets)

    def eliminate(self, A, prefix: str):
        if len(A) < TORCH_LINALG_MIN_N:
            return super().eliminate(A, prefix)
        a = self.namer.fresh(f"{prefix}_A")
        F = _LU(*(self.namer.fresh(f"{prefix}_{part}") for part in ("LU", "piv", "s")))
        self._gather(a, A)
        self.line(f"{F.scale} = _rowscale({a})")
        self.line(f"{F.lu}, {F.piv} = torch.linalg.lu_factor_ex({a} * {F.scale}, check_errors=False)[:2]")
        return F

    def substitute(self, F, B, targets, prefix: str) -> None:
        if not isinstance(F, _LU):
            return super().substitute(F, B, targets, prefix)
        b, x = self.namer.fresh(f"{prefix}_B"), self.namer.fresh(f"{prefix}_X")
        self._gather(b, B)
        self.line(f"{x} = torch.linalg.lu_solve({F.lu}, {F.piv}, {b} * {F.scale})")
        self._unpack(x, targets)

    def helper_args(self) -> list[str]:
        return ["X", "O"]

    def helper_function(self, name: str, params: list[str], em: Emitter) -> list[str]:
        return ["", *wrapped(f"def {name}(", params + ["X", "O"], "):"),
                '    """Newton solve (shared by the variants): the unknowns, converged, iterations, '
                'residual norm."""', *em.lines, ""]

    def newton(self, st: ir.Newton, k: int, helper: bool = False) -> None:
        res, du, rn0 = self.newton_symbols(st, k)
        n = self.namer
        names = ", ".join(v.name for v in st.unknowns)
        self.comment(f"Newton solve {k} for {names}: per-point mask, converged points stop changing")
        for u, g in zip(st.unknowns, st.guess):
            self.line(f"{n(u)} = _batch({self.p.doprint(g)}, X)")
        self.line(f"{n(st.converged)} = torch.zeros(X.shape[0], dtype=torch.bool, device=X.device)")
        self.line(f"{n(st.iterations)} = torch.zeros(X.shape[0], dtype=torch.int32, device=X.device)")
        # tolerances and iteration limit: the caller's (O = rtol, atol, max_iter), negative: the spec's
        self.line(f"{n(self.rtol_symbol(k))} = max(O[0] if O[0] >= 0 else {float(st.solver.rtol)!r}, "
                  f"{RTOL_FLOOR_EPS} * torch.finfo(X.dtype).eps)")
        self.line(f"{n(self.atol_symbol(k))} = O[1] if O[1] >= 0 else {float(st.solver.atol)!r}")
        it, maxit = self.namer.fresh(f"it{k}"), self.namer.fresh(f"maxit{k}")
        self.line(f"{maxit} = int(O[2]) if O[2] >= 0 else {int(st.solver.max_iter)}")
        if st.solver.line_search:
            return self._newton_line_search(st, k, it, maxit)
        go = self.namer.fresh(f"go{k}")
        self.line(f"for {it} in range({maxit} + 1):")
        self.depth += 1
        self._evaluate(st, k, it)
        # a point stops at max_iter steps, or at a residual that is not finite (as the interpreter)
        self.line(f"{go} = ~{n(st.converged)} & ({n(st.residual_norm)} < float(\"inf\"))")
        self.line(f"if {it} == {maxit} or not bool({go}.any()):")
        self.line("    break")
        self.newton_step(st, k, res, du)
        for u, d in zip(st.unknowns, du):
            self.line(f"{n(u)} = torch.where({go}, {n(u)} + {n(d)}, {n(u)})")
        self.line(f"{n(st.iterations)} = {n(st.iterations)} + {go}.to(torch.int32)")
        self.depth -= 1

    def _evaluate(self, st: ir.Newton, k: int, it: str) -> None:
        """An iteration's first lines: the body, the residual, its norm (the first one kept) and
        the convergence test."""
        res, _, rn0 = self.newton_symbols(st, k)
        n = self.namer
        self.statements(st.body)
        for r, e in zip(res, st.residual):
            self.assign(r, e)
        self.assign(st.residual_norm, self.residual_norm(res))
        self.line(f"if {it} == 0:")
        self.line(f"    {n(rn0)} = {n(st.residual_norm)}")
        parts, test = self.convergence_parts(st, rn0, k)
        for sym, e in parts:
            self.assign(sym, e)
        self.line(f"{n(st.converged)} = {n(st.converged)} | {self.p.doprint(test)}")

    def _newton_line_search(self, st: ir.Newton, k: int, it: str, maxit: str) -> None:
        """The loop of :meth:`newton` with a backtracking line search (statements.LineSearch): at
        most ``maxit`` accepted steps a point, each halved at most ``line_search`` times."""
        res, du, _ = self.newton_symbols(st, k)
        ls = self.line_search_symbols(st, k)
        n = self.namer
        self.line_search_start(st, ls, lambda v: f"torch.full((X.shape[0],), {v}, dtype=X.dtype, device=X.device)")
        go = self.namer.fresh(f"go{k}")
        self.line(f"for {it} in range(({maxit} + 1) * {st.solver.line_search + 1}):")
        self.depth += 1
        self._evaluate(st, k, it)
        for sym, e in self.line_search_tests(st, ls, sp.Not(st.converged)):
            self.assign(sym, e)
        back = n(ls.back)
        # a point stops at max_iter accepted steps, or at an accepted residual that is not finite
        self.line(f"{go} = ~{n(st.converged)} & ({back} | (({n(st.iterations)} < {maxit}) & "
                  f"torch.isfinite({n(st.residual_norm)})))")
        self.line(f"if not bool({go}.any()):")
        self.line("    break")
        self.newton_step(st, k, res, du)
        self.line_search_update(st, ls, du, go, "torch")
        self.depth -= 1


def torch_body(program: ir.Program, layout: Layout, *, pivoting: str = "auto",
               short_names: bool = True, helpers: Helpers | None = None) -> list[str]:
    """The lines of ``def _torch_eval(X, P, V, O):`` (without the ``def`` line): ``V`` is the bit of
    the variant asked for (:class:`~modelc.ir.Variant`), ``O`` the Newton options (rtol, atol,
    max_iter; negative: the spec's); the options as for
    :func:`modelc.backends.triton_backend.triton_body` (``pivoting`` applies to unrolled solves)."""
    program = with_variants(program)
    namer = Namer(short=short_names)
    em = TorchEmitter(TorchPrinter(namer), namer, pivoting, helpers)
    em.comment("inputs: column views of X")
    for sym, col in layout.input_columns():
        em.line(f"{namer(sym)} = X[:, {col}]")
    em.comment("parameters: column views of P ((1, np) shared or (B, np) per point)")
    for sym, col in layout.param_columns():
        em.line(f"{namer(sym)} = P[:, {col}]")
    em.guarded(program)
    em.comment("outputs")
    em.line(f"Y = torch.empty((X.shape[0], {layout.ny}), dtype=X.dtype, device=X.device)")
    entries = list(layout.output_entries(program))
    for line in put_lines("Y", [c for c, _ in entries], [em.p.doprint(e) for _, e in entries]):
        em.line(line)
    em.line("J = None")
    for group in jacobian_groups(program, layout):
        _jacobian(em, group)
    status = status_symbols(program)
    if status:
        em.comment("status; a point that did not converge gets NaN outputs, never a plausible value")
        em.line("ST = torch.empty((X.shape[0], 3), dtype=X.dtype, device=X.device)")
        for i, key in enumerate(("converged", "iterations", "residual_norm")):
            em.line(f"ST[:, {i}] = {em.p.doprint(status[key])}")
        ok = em.p.doprint(status["converged"])
        em.line(f"Y[~{ok}] = float(\"nan\")")
        em.line("if J is not None:")
        em.line(f"    J[~{ok}] = float(\"nan\")")
    else:
        em.line("ST = None")
    em.line("return Y, J, ST")
    return em.lines


def _jacobian(em: Emitter, group) -> None:
    """``J`` of one group of variants (:func:`jacobian_groups`): allocated at the width of the variant
    asked for, then each variant's entries under its own test (a later variant returns the earlier
    ones' entries too)."""
    names = ", ".join(v.name for v, _, _ in group)
    em.line(f"if V & {sum(v.bit for v, _, _ in group)}:  # {names}")
    em.depth += 1
    em.comment(f"d outputs / d inputs of the {names} variant(s) (structurally zero entries stay zero)")
    shape = ", ".join(map(str, group[-1][1]))
    if len(group) > 1:  # the width of the variant asked for
        shape = str(group[-1][1])
        for v, s, _ in reversed(group[:-1]):
            shape = f"{s} if V == {v.bit} else {shape}"
        shape = f"*({shape})"
    em.line(f"J = torch.zeros((X.shape[0], {shape}), dtype=X.dtype, device=X.device)")
    depth = em.depth
    for k, (v, _, entries) in enumerate(group):
        if k and entries:
            em.line(f"if V & {sum(w.bit for w, _, _ in group[k:])}:")
            em.depth += 1
        for r in dict.fromkeys(r for (r, _), _ in entries):  # row by row, in the entries' order
            row = [(c, e) for (q, c), e in entries if q == r]
            for line in put_lines(f"J[:, {r}]", [c for c, _ in row], [em.p.doprint(e) for _, e in row]):
                em.line(line)
    em.depth = depth - 1


def put_lines(target: str, cols: list[int], values: list[str], width: int = 100) -> list[str]:
    """``_put(target, cols, values)`` (``target[:, c] = v`` for each pair, the runtime's ``t_put``):
    one statement per row of outputs or of a Jacobian, its values wrapped at ``width`` characters."""
    if len(cols) > 2 and cols == list(range(cols[0], cols[-1] + 1)):
        where = f"range({cols[0]}, {cols[-1] + 1})"
    else:
        where = f"({', '.join(map(str, cols))}{',' if len(cols) == 1 else ''})"
    line = f"_put({target}, {where}, ({', '.join(values)}{',' if len(values) == 1 else ''}))"
    if len(line) <= width:
        return [line]
    lines, cur = [f"_put({target}, {where}, ("], "   "
    for v in values:
        if len(cur) + len(v) + 2 > width and cur.strip():
            lines.append(cur)
            cur = "   "
        cur += f" {v},"
    return lines + [cur, "))"]
