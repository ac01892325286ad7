"""modelc.backends.torch_backend: the body of the generated PyTorch function, built from hand-made
Programs (backend_programs.py and below), exec'd with the runtime helpers the generated module
imports, and checked against closed forms and NumPy: outputs and Jacobians of an explicit program
(shared and per-point parameters, float64 and float32), a Newton solve with unrolled (n < 4) and
torch.linalg (n >= 4) linear solves, inline or as a helper, its status and NaN for points that do
not converge, the caller's Newton options, each variant's Jacobian, and ``put_lines``."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

from backend_programs import elastic, elastic_numpy, matrix, newton_system
from modelc.backends.layout import Layout
from modelc.backends.statements import Helpers
from modelc.backends.torch_backend import TORCH_LINALG_MIN_N, put_lines, torch_body
from modelc.ir import Assign, Parameter, Program, Variable
from modelc.passes.variants import split_variants, standard_variants
from modelc.runtime import model as rt
from modelc.runtime.types import Scalar

ENV = {"torch": torch, **rt.TORCH_HELPERS, "_batch": rt.t_batch, "_matrix": rt.t_matrix, "_put": rt.t_put,
       "_rowscale": rt.t_rowscale}


def _function(program: Program, helper: bool = False):
    """``(f(X, P, V, O), source)``: the generated function, with its Newton helpers when ``helper``."""
    helpers = Helpers("_torch_newton_") if helper else None
    lines = torch_body(program, Layout.of(program), helpers=helpers)
    src = "\n".join((helpers.lines if helpers else []) +
                    ["", "def _torch_eval(X, P, V, O=(-1.0, -1.0, -1)):", *lines]) + "\n"
    env = dict(ENV)
    exec(compile(src, "<torch_body>", "exec"), env)
    return env["_torch_eval"], src


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_explicit_program_outputs_and_jacobian(dtype):
    _, full = elastic()
    f, src = _function(full)
    rng = np.random.default_rng()
    B = 7
    strain = rng.normal(size=(B, 6)) * 1e-3
    X = torch.as_tensor(strain, dtype=dtype)
    tol = dict(rtol=1e-12, atol=1e-9) if dtype == torch.float64 else dict(rtol=2e-5, atol=1e-3)
    # shared parameters (1, np) and per-point parameters (B, np)
    for E, nu in ((np.full(B, 210e3), np.full(B, 0.3)), (rng.uniform(1e3, 3e5, B), rng.uniform(0.0, 0.45, B))):
        P = torch.as_tensor(np.stack([E, nu], axis=1), dtype=dtype)
        P = P[:1] if np.all(E == E[0]) else P
        Y, J, ST = f(X, P, 1)
        assert J is None and ST is None and Y.shape == (B, 6) and Y.dtype == dtype
        Y, J, ST = f(X, P, 4)
        assert ST is None and J.shape == (B, 6, 6) and J.dtype == dtype
        for b in range(B):
            S, C = elastic_numpy(strain[b], E[b], nu[b])
            np.testing.assert_allclose(Y[b].double().numpy(), S, **tol)
            np.testing.assert_allclose(J[b].double().numpy(), C, rtol=tol["rtol"], atol=tol["rtol"] * E[b])


def _newton_inputs(n: int, B: int, rng, dtype=torch.float64):
    b = rng.uniform(-2, 2, (B, n))
    X = torch.as_tensor(np.concatenate([b, np.zeros((B, n))], axis=1), dtype=dtype)  # guess u = 0
    return X, torch.tensor([[0.5]], dtype=dtype), b


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("helper", [False, True], ids=["inline", "helper"])
def test_newton_solution_status_and_tangent(n, helper):
    """R(u) = M u + c u^3 - b = 0: the solution has a zero residual (NumPy), the Jacobian d u / d b is
    (M + 3 c diag(u^2))^-1 and d u / d old_u is zero; n >= TORCH_LINALG_MIN_N goes to solve_ex."""
    _, full = newton_system(n, f"newton{n}")
    f, src = _function(full, helper)
    assert ("torch.linalg.solve_ex" in src) == (n >= TORCH_LINALG_MIN_N)
    rng = np.random.default_rng()
    X, P, b = _newton_inputs(n, 9, rng)
    Y, J, ST = f(X, P, 4)
    u = Y.numpy()
    M = np.array(matrix(n), dtype=float)
    np.testing.assert_allclose(u @ M.T + 0.5 * u ** 3 - b, 0, atol=1e-11)
    assert ST.shape == (9, 3) and ST[:, 0].tolist() == [1.0] * 9
    assert (ST[:, 1] >= 1).all() and (ST[:, 1] <= 30).all() and (ST[:, 2] <= 1e-11).all()
    assert J.shape == (9, n, 2 * n)
    for k in range(9):
        np.testing.assert_allclose(J[k, :, :n].numpy(), np.linalg.inv(M + 1.5 * np.diag(u[k] ** 2)), rtol=1e-10,
                                   atol=1e-13)
    assert (J[:, :, n:] == 0).all()
    Y1, J1, ST1 = f(X, P, 1)
    assert J1 is None and torch.equal(Y1, Y) and torch.equal(ST1, ST)


@pytest.mark.parametrize("n", [3, 5])
def test_points_that_do_not_converge_get_nan(n):
    """With one iteration allowed (the caller's max_iter), a point whose guess already solves the
    system converges at iteration 0 with its guess; the others are marked and get NaN."""
    _, full = newton_system(n, f"newton{n}")
    f, _ = _function(full, helper=True)
    rng = np.random.default_rng()
    B = 6
    X, P, _ = _newton_inputs(n, B, rng)
    M = np.array(matrix(n), dtype=float)
    exact = rng.uniform(-1, 1, (3, n))  # points 0-2: guess u0 with b = M u0 + c u0^3
    X[:3, :n] = torch.as_tensor(exact @ M.T + 0.5 * exact ** 3)
    X[:3, n:] = torch.as_tensor(exact)
    Y, J, ST = f(X, P, 4, (-1.0, -1.0, 1))
    assert ST[:, 0].tolist() == [1.0] * 3 + [0.0] * 3 and ST[:, 1].tolist() == [0.0] * 3 + [1.0] * 3
    np.testing.assert_allclose(Y[:3].numpy(), exact, rtol=1e-15)
    assert torch.isnan(Y[3:]).all() and torch.isnan(J[3:]).all() and torch.isfinite(J[:3]).all()


def test_caller_newton_options():
    """O = (rtol, atol, max_iter), negative: the spec's. A huge atol or rtol = 1 accepts the guess;
    rtol = atol = 0 is floored at a few ulps of the dtype, so float64 and float32 still converge
    (the spec's rtol 1e-12 is below float32's resolution)."""
    _, full = newton_system(3, "newton3")
    f, _ = _function(full)
    rng = np.random.default_rng()
    X, P, b = _newton_inputs(3, 8, rng)
    for O in ((-1.0, 1e300, -1), (1.0, -1.0, -1)):
        Y, _, ST = f(X, P, 1, O)
        assert (ST[:, 0] == 1).all() and (ST[:, 1] == 0).all() and (Y == 0).all()
    for dtype, O in ((torch.float64, (0.0, 0.0, -1)), (torch.float32, (-1.0, -1.0, -1))):
        Xd, Pd = X.to(dtype), P.to(dtype)
        Y, _, ST = f(Xd, Pd, 1, O)
        assert Y.dtype == dtype and (ST[:, 0] == 1).all(), ST
        u = Y.double().numpy()
        M = np.array(matrix(3), dtype=float)
        np.testing.assert_allclose(u @ M.T + 0.5 * u ** 3 - b, 0, atol=1e-11 if dtype == torch.float64 else 1e-5)


def _variant_program() -> Program:
    """y = a x^2 + sin z, w = b x z; the value, the tangent d w / d z, the Jacobian (by x, z) and the
    total (by x, z, $a, $b)."""
    xv, zv = Variable("forces/x", Scalar), Variable("forces/z", Scalar)
    yv, wv = Variable("state/y", Scalar), Variable("state/w", Scalar)
    pa, pb = Parameter("a", Scalar, (2.0,)), Parameter("b", Scalar, (3.0,))
    (x,), (z,), (y,), (w,), (a,), (b,) = (v.symbols for v in (xv, zv, yv, wv, pa, pb))
    t, dyx, dwz = (sp.Symbol(s, real=True) for s in ("t", "dyx", "dwz"))
    body = (Assign(t, x * x), Assign(y, a * t + sp.sin(z)), Assign(w, b * x * z), Assign(dyx, 2 * a * x),
            Assign(dwz, b * x))
    derivs = {("state/y", "forces/x"): ((dyx,),), ("state/y", "forces/z"): ((sp.cos(z),),),
              ("state/y", "$a"): ((t,),), ("state/w", "forces/x"): ((b * z,),),
              ("state/w", "forces/z"): ((dwz,),), ("state/w", "$b"): ((x * z,),)}
    p = Program("vp", (xv, zv), (pa, pb), (yv, wv), body, {"state/y": (y,), "state/w": (w,)}, derivs,
                jacobian_wrt=("forces/x", "forces/z", "$a", "$b"))
    return split_variants(p, standard_variants(p, (("state/w",), ("forces/z",))))


def test_each_variant_returns_its_own_jacobian():
    f, src = _function(_variant_program())
    rng = np.random.default_rng()
    B = 5
    xz = rng.uniform(-1, 1, (B, 2))
    ab = rng.uniform(0.5, 2, (B, 2))
    X, P = torch.as_tensor(xz), torch.as_tensor(ab)
    x, z, a, b = xz[:, 0], xz[:, 1], ab[:, 0], ab[:, 1]
    Y = np.stack([a * x * x + np.sin(z), b * x * z], axis=1)
    full = np.zeros((B, 2, 4))
    full[:, 0, 0], full[:, 0, 1], full[:, 0, 2] = 2 * a * x, np.cos(z), x * x
    full[:, 1, 0], full[:, 1, 1], full[:, 1, 3] = b * z, b * x, x * z
    want = {1: None, 2: full[:, 1:, 1:2], 4: full[:, :, :2], 8: full}
    for V, WJ in want.items():
        y, J, ST = f(X, P, V)
        assert ST is None
        np.testing.assert_allclose(y.numpy(), Y, rtol=1e-14, atol=1e-15)
        if WJ is None:
            assert J is None
        else:
            assert J.shape == WJ.shape, V
            np.testing.assert_allclose(J.numpy(), WJ, rtol=1e-14, atol=1e-15)
    # derivative-only statements are guarded by the variants that need them; none is value-only
    assert "if V & 14:  # tangent, jacobian, total" in src and "if V & 12:  # jacobian, total" in src
    assert "if V & 1:" not in src


@pytest.mark.parametrize("cols, want", [
    ([3, 4, 5, 6], "_put(T, range(3, 7), (a, b, c, d))"),
    ([2], "_put(T, (2,), (a,))"),
    ([0, 2, 5], "_put(T, (0, 2, 5), (a, b, c))"),
    ([4, 5], "_put(T, (4, 5), (a, b))"),
])
def test_put_lines_short(cols, want):
    values = ["a", "b", "c", "d"][:len(cols)]
    assert put_lines("T", cols, values) == [want]


def test_put_lines_wraps_long_rows_and_runs():
    """A long row is one statement over several lines, each at most the width, valid Python that puts
    every value in its column."""
    cols = list(range(1, 41))
    values = [f"(v[{c}] * 1.0)" for c in cols]
    lines = put_lines("T", cols, values, width=60)
    assert len(lines) > 3 and all(len(line) <= 60 for line in lines)
    assert lines[0] == "_put(T, range(1, 41), (" and lines[-1] == "))"
    T = torch.zeros(2, 42)
    v = {c: torch.full((2,), float(c)) for c in cols}
    exec("\n".join(lines), {"_put": rt.t_put, "T": T, "v": v})
    assert T[:, 1:41].tolist() == [list(map(float, cols))] * 2 and (T[:, 0] == 0).all() and (T[:, 41] == 0).all()
