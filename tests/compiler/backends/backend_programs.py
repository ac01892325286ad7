"""Programs built by hand for the backend tests (independent of the front end and the passes)."""
from __future__ import annotations

import sympy as sp

from modelc import ir
from modelc.ir import Assign, LinearSolve, Newton, Program, SolverOptions, Variable, Parameter
from modelc.runtime.types import R2, SR2, Scalar, Vec


def elastic() -> tuple[Program, Program]:
    """Linear isotropic elasticity, Mandel: S = lam tr(E) I + 2 mu E; d S / d E a 6x6 block."""
    E_in = Variable("forces/E", SR2, "strain")
    S_out = Variable("state/S", SR2, "stress")
    pE = Parameter("E", Scalar, (210e3,), "MPa", "Young's modulus")
    pnu = Parameter("nu", Scalar, (0.3,), "", "Poisson's ratio")
    (Ym,), (nu,) = pE.symbols, pnu.symbols
    e = E_in.symbols
    lam, mu = sp.Symbol("lam", real=True), sp.Symbol("mu", real=True)
    tr = sp.Symbol("trE", real=True)
    S = S_out.symbols
    body = [Assign(lam, Ym * nu / ((1 + nu) * (1 - 2 * nu))), Assign(mu, Ym / (2 * (1 + nu))),
            Assign(tr, e[0] + e[1] + e[2])]
    body += [Assign(S[i], (lam * tr if i < 3 else 0) + 2 * mu * e[i]) for i in range(6)]
    value = Program("elastic", (E_in,), (pE, pnu), (S_out,), tuple(body), {"state/S": S})
    block = tuple(tuple((lam if (i < 3 and j < 3) else 0) + (2 * mu if i == j else 0) for j in range(6))
                  for i in range(6))
    full = Program("elastic", (E_in,), (pE, pnu), (S_out,), tuple(body), {"state/S": S},
                   {("state/S", "forces/E"): block})
    return value, full


def elastic_numpy(strain, E, nu):
    import numpy as np

    lam = E * nu / ((1 + nu) * (1 - 2 * nu))
    mu = E / (2 * (1 + nu))
    C = 2 * mu * np.eye(6)
    C[:3, :3] += lam
    return strain @ C.T, C


def newton_system(n: int, name: str) -> tuple[Program, Program]:
    """R(u) = M u + c u^3 - b = 0 (elementwise cube), M tridiagonal-ish with coupling, c a parameter.

    Inputs forces/b (n scalars as one variable each, to exercise layouts) and old_state/u (guess);
    output state/u; derivative d u / d b = J^-1 from the implicit-function theorem.
    """
    bs = [Variable(f"forces/b{i}", Scalar) for i in range(n)]
    olds = [Variable(f"old_state/u{i}", Scalar) for i in range(n)]
    outs = [Variable(f"state/u{i}", Scalar) for i in range(n)]
    pc = Parameter("c", Scalar, (0.5,), "", "cubic coefficient")
    (c,) = pc.symbols
    u = [o.symbols[0] for o in outs]
    b = [v.symbols[0] for v in bs]
    M = matrix(n)
    res = tuple(sum(M[i][j] * u[j] for j in range(n)) + c * u[i] ** 3 - b[i] for i in range(n))
    jac = tuple(tuple(sp.diff(r, uj) for uj in u) for r in res)
    conv, its, rn = (sp.Symbol(f"{name}/status/{k}", real=True) for k in ("converged", "iterations", "norm"))
    nt = Newton(tuple(u), tuple(o.symbols[0] for o in olds), (), res, jac,
                SolverOptions(rtol=1e-12, atol=1e-12, max_iter=30), conv, its, rn)
    status = {"converged": conv, "iterations": its, "residual_norm": rn}
    inputs = tuple(bs) + tuple(olds)
    results = {o.name: (o.symbols[0],) for o in outs}
    value = Program(name, inputs, (pc,), tuple(outs), (nt,), results, {}, status)
    dudb = [[sp.Symbol(f"d{i}_{j}", real=True) for j in range(n)] for i in range(n)]
    ls = LinearSolve(jac, tuple(tuple(sp.S.One if i == j else sp.S.Zero for j in range(n)) for i in range(n)),
                     tuple(tuple(r) for r in dudb))
    derivs = {(outs[i].name, bs[j].name): ((dudb[i][j],),) for i in range(n) for j in range(n)}
    full = Program(name, inputs, (pc,), tuple(outs), (nt, ls), results, derivs, status)
    return value, full


def matrix(n: int) -> list[list[int]]:
    """A diagonally dominant coupling matrix with a few long-range entries."""
    M = [[0] * n for _ in range(n)]
    for i in range(n):
        M[i][i] = 4
        if i + 1 < n:
            M[i][i + 1] = 1
            M[i + 1][i] = -1
        if i + 3 < n:
            M[i][i + 3] = 1
    return M


def linear_solve() -> tuple[Program, Program]:
    """x = A^-1 b for a 3x3 A with a structurally zero diagonal entry A[0][0] (inputs: R2 A, Vec b)."""
    A_in = Variable("forces/A", R2)
    b_in = Variable("forces/b", Vec)
    x_out = Variable("state/x", Vec)
    a = A_in.symbols
    A = ((0, a[1], a[2]), (a[3], a[4], 0), (a[6], 0, a[8]))
    x = x_out.symbols
    ls = LinearSolve(tuple(tuple(sp.sympify(v) for v in row) for row in A),
                     tuple((bi,) for bi in b_in.symbols), tuple((xi,) for xi in x))
    p = Program("solve3", (A_in, b_in), (), (x_out,), (ls,), {"state/x": x})
    return p, p


def pivot2() -> tuple[Program, Program]:
    """[[eps, 1], [1, 1]] x = b: needs a per-point row swap when eps is tiny."""
    e_in = Variable("forces/eps", Scalar)
    b_in = Variable("forces/b", Vec)
    x_out = Variable("state/x", Vec)
    (eps,) = e_in.symbols
    b = b_in.symbols
    x = x_out.symbols
    ls = LinearSolve(((eps, sp.S.One), (sp.S.One, sp.S.One)), ((b[0],), (b[1],)), ((x[0],), (x[1],)))
    body = (ls, Assign(x[2], b[2]))
    p = Program("pivot2", (e_in, b_in), (), (x_out,), body, {"state/x": x})
    return p, p


def newton_pivot() -> tuple[Program, Program]:
    """R = (eps u0 + u1 - b0, u0 + u1 + c u1^3 - b1) = 0, eps an input: the Jacobian
    [[eps, 1], [1, 1 + 3 c u1^2]] has a pivot that is not anchored (no constant term), so the
    unrolled elimination pivots per point at run time. For eps = 0: u1 = b0, u0 = b1 - b0 - c b0^3."""
    ev, bv = Variable("forces/eps", Scalar), Variable("forces/b", Vec)
    olds = [Variable(f"old_state/u{i}", Scalar) for i in range(2)]
    outs = [Variable(f"state/u{i}", Scalar) for i in range(2)]
    pc = Parameter("c", Scalar, (0.5,), "", "cubic coefficient")
    (c,), (eps,), b = pc.symbols, ev.symbols, bv.symbols
    u = [o.symbols[0] for o in outs]
    res = (eps * u[0] + u[1] - b[0], u[0] + u[1] + c * u[1] ** 3 - b[1])
    jac = tuple(tuple(sp.diff(r, uj) for uj in u) for r in res)
    conv, its, rn = (sp.Symbol(f"newton_pivot/status/{k}", real=True) for k in ("converged", "iterations", "norm"))
    nt = Newton(tuple(u), tuple(o.symbols[0] for o in olds), (), res, jac,
                SolverOptions(rtol=1e-12, atol=1e-12, max_iter=40), conv, its, rn)
    status = {"converged": conv, "iterations": its, "residual_norm": rn}
    inputs = (ev, bv) + tuple(olds)
    results = {o.name: (o.symbols[0],) for o in outs}
    p = Program("newton_pivot", inputs, (pc,), tuple(outs), (nt,), results, {}, status)
    return p, p


ALL = {"elastic": elastic, "newton_pivot": newton_pivot, "newton1": lambda: newton_system(1, "newton1"),
       "newton3": lambda: newton_system(3, "newton3"), "newton13": lambda: newton_system(13, "newton13"),
       "solve3": linear_solve, "pivot2": pivot2}
del ir


_MODULES: dict = {}


def generated(name: str, folder, **options):
    """Emit, write and import the generated module of hand-built program ``name`` (memoised)."""
    from modelc.options import CompileOptions
    from modelc.backends.module import emit_module, write_atomic
    from modelc.cache import import_file

    key = (name, tuple(sorted(options.items())))
    if key not in _MODULES:
        value, full = ALL[name]()
        src = emit_module(full, options=CompileOptions(**options))
        tag = "_".join(f"{k}{len(v)}" for k, v in sorted(options.items()))
        path = folder / f"{name}{'_' + tag if tag else ''}.py"
        write_atomic(path, src)
        _MODULES[key] = import_file(path, f"backend_test_{path.stem}")
    return _MODULES[key]


def ode_program(max_iter: int = 4, on_failure: str = "substep") -> tuple[Program, Program]:
    """Backward Euler for du/dx = exp(-u): R = u - old_u - (x - old_x) exp(-u) (for sub-stepping)."""
    xv, oxv, ouv = Variable("forces/x", Scalar), Variable("old_forces/x", Scalar), Variable("old_state/u", Scalar)
    uv = Variable("state/u", Scalar)
    x, ox, ou, u = xv.symbols[0], oxv.symbols[0], ouv.symbols[0], uv.symbols[0]
    R = u - ou - (x - ox) * sp.exp(-u)
    conv, its, rn = (sp.Symbol(f"ode/status/{k}", real=True) for k in ("converged", "iterations", "norm"))
    nt = Newton((u,), (ou,), (), (R,), ((sp.diff(R, u),),),
                SolverOptions(rtol=1e-12, atol=1e-12, max_iter=max_iter, on_failure=on_failure,
                              max_substeps=64), conv, its, rn)
    status = {"converged": conv, "iterations": its, "residual_norm": rn}
    inputs = (xv, oxv, ouv)
    value = Program("ode", inputs, (), (uv,), (nt,), {"state/u": (u,)}, {}, status)
    d = [sp.Symbol(f"du_d{k}", real=True) for k in ("x", "ox", "ou")]
    ls = LinearSolve(((sp.diff(R, u),),), ((-sp.diff(R, x), -sp.diff(R, ox), -sp.diff(R, ou)),), (tuple(d),))
    derivs = {("state/u", "forces/x"): ((d[0],),), ("state/u", "old_forces/x"): ((d[1],),),
              ("state/u", "old_state/u"): ((d[2],),)}
    full = Program("ode", inputs, (), (uv,), (nt, ls), {"state/u": (u,)}, derivs, status)
    return value, full


ALL["ode"] = ode_program
