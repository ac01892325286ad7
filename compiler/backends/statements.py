"""Program statements -> lines of a generated function body, shared by both backends.

An :class:`Emitter` walks a Program's statements in order: an :class:`~modelc.ir.Assign` is one line;
a :class:`~modelc.ir.LinearSolve` is expanded by :func:`~modelc.passes.expand_solve.expand_solve` into
assignments; a :class:`~modelc.ir.Newton` is a loop whose shape the backend decides
(:meth:`Emitter.newton`). The loop's linear solve ``J du = -R`` is expanded the same way.
"""
from __future__ import annotations

import sympy as sp

from modelc import ir
from modelc.passes.expand_solve import expand_solve
from modelc.backends.names import Namer
from modelc.backends.printer import ExprPrinter
from modelc.errors import InternalError
from modelc.functions import FUNCTIONS

_abs = FUNCTIONS["abs_"].cls


RTOL_FLOOR_EPS = 32  # the relative Newton tolerance is at least this many machine epsilons


class Emitter:
    """``pivoting``: the linear solves' strategy (see :mod:`modelc.passes.expand_solve`)."""

    def __init__(self, printer: ExprPrinter, namer: Namer, pivoting: str = "auto"):
        self.p = printer
        self.namer = namer
        self.pivoting = pivoting
        self.defs: dict[sp.Symbol, sp.Expr] = {}  # latest value assigned to each symbol
        self.lines: list[str] = []
        self.depth = 1  # inside a function
        self.n_solves = 0
        self.n_newton = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def comment(self, text: str) -> None:
        self.line(f"# {text}")

    def assign(self, target: sp.Symbol, value: sp.Expr) -> None:
        self.defs[target] = value
        self.line(f"{self.namer(target)} = {self.p.doprint(value)}")

    def statements(self, stmts) -> None:
        for st in stmts:
            if isinstance(st, ir.Assign):
                self.assign(st.target, st.value)
            elif isinstance(st, ir.LinearSolve):
                self.n_solves += 1
                n = len(st.A)
                self.comment(f"linear solve {self.n_solves}: {n}x{n}, {len(st.B[0]) if n else 0} "
                             "right-hand side(s), unrolled over structural nonzeros")
                self.solve(st.A, st.B, st.targets, f"ls{self.n_solves}")
            elif isinstance(st, ir.Newton):
                self.n_newton += 1
                self.newton(st, self.n_newton)
            else:
                raise InternalError(f"unknown statement {type(st).__name__}")

    # -- Newton: shared pieces ---------------------------------------------------------------
    def newton_symbols(self, st: ir.Newton, k: int):
        """Symbols of the loop's residuals, increments, residual norm and the first norm."""
        res = tuple(sp.Symbol(f"nt{k}.r[{i}]", real=True) for i in range(len(st.unknowns)))
        du = tuple(sp.Symbol(f"nt{k}.du[{i}]", real=True) for i in range(len(st.unknowns)))
        rn0 = sp.Symbol(f"nt{k}.rnorm0", real=True)
        return res, du, rn0

    def newton_step(self, st: ir.Newton, k: int, res, du) -> None:
        """Lines computing ``du`` from ``J du = -R`` (residuals already assigned to ``res``)."""
        self.solve(st.jacobian, tuple((-r,) for r in res), tuple((d,) for d in du), f"nt{k}")

    def solve(self, A, B, targets, prefix: str) -> None:
        """Lines solving ``A X = B`` into ``targets`` (default: unrolled elimination)."""
        for a in expand_solve(A, B, targets, prefix, pivoting=self.pivoting, defs=self.defs):
            self.assign(a.target, a.value)

    def convergence(self, st: ir.Newton, rn0: sp.Symbol, k: int) -> sp.Expr:
        """||R|| <= atol, or (with ``residual_scale``) every |R_i| <= rtol_eff * scale_i, or (without)
        ||R|| <= rtol_eff ||R0||; ``rtol_eff = max(rtol, RTOL_FLOOR_EPS * eps(dtype))`` (assigned by
        the backend): a float64 tolerance like 1e-12 cannot be met in float32, so the relative
        tolerance is floored at a few ulps of the kernel dtype."""
        rn = st.residual_norm
        res, _, _ = self.newton_symbols(st, k)
        # rn0 < 3e38 (finite in float32 too): a point whose first residual is inf never "converges" by rtol
        tests = [sp.LessThan(rn, sp.Float(st.solver.atol, 17))]
        if st.residual_scale:
            # scaled test (see ir.Newton.residual_scale): every residual is zero to within rtol_eff of
            # the magnitude of its own terms. Unlike rtol * ||R0|| it does not mix units (a residual in
            # MPa next to one in strain), and it is reachable in float32 (NaN compares false).
            tests.append(sp.And(*[sp.LessThan(_abs(r), self.rtol_symbol(k) * s)
                                  for r, s in zip(res, st.residual_scale)]))
        else:
            tests.append(sp.And(sp.LessThan(rn, self.rtol_symbol(k) * rn0),
                                sp.StrictLessThan(rn0, sp.Float(3.0e38, 17))))
        return sp.Or(*tests)

    def rtol_symbol(self, k: int) -> sp.Symbol:
        return sp.Symbol(f"nt{k}.rtol", real=True)

    def residual_norm(self, res) -> sp.Expr:
        return sp.sqrt(sp.Add(*[r * r for r in res]))

    def newton(self, st: ir.Newton, k: int) -> None:
        raise NotImplementedError


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
