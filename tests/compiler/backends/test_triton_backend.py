"""Generated modules of hand-built programs: Triton kernel (interpreter) vs generated PyTorch vs an
independent oracle (closed forms, torch.linalg, Newton with autograd), float32 and float64, with
outputs poisoned (NaN) beforehand so an unwritten element shows."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from backend_programs import elastic_numpy, generated, matrix

DTYPES = [torch.float64, torch.float32]
TOL = {torch.float64: 1e-11, torch.float32: 2e-4}


def launch(mod, X, P, derivatives, dtype, shared=True, **consts):
    """Call a kernel directly on NaN-poisoned outputs."""
    import triton.language as tl

    B, nx = X.shape
    ny = sum(math.prod(_shape(v.type)) for v in mod.Model.OUTPUTS)
    Y = torch.full((B, ny), float("nan"), dtype=dtype)
    J = torch.full((B, ny, nx), float("nan"), dtype=dtype)
    ST = torch.full((B, 3), float("nan"), dtype=dtype)
    V = mod.Model.VARIANTS["jacobian" if derivatives else "value"]
    block = 8  # several programs, last one partial
    O = torch.tensor([-1.0, -1.0, -1.0], dtype=dtype)  # the spec's Newton options
    mod._kernel[(triton_cdiv(B, block),)](X, P, Y, J, ST, O, B, X.stride(0), 0 if shared else P.stride(0), Y.stride(0),
                                          J.stride(0), 3, **consts, V=V,
                                DTYPE=tl.float64 if dtype == torch.float64 else tl.float32,
                                EPS=torch.finfo(dtype).eps, BLOCK=block)
    return Y, J, ST


def triton_cdiv(a, b):
    return (a + b - 1) // b


def _shape(tname):
    from modelc.runtime.types import TYPES

    return TYPES[tname].base_shape or (1,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_elastic_matches_closed_form_both_backends(gen_dir, dtype):
    mod = generated("elastic", gen_dir)
    g = torch.Generator().manual_seed(1)
    B = 13
    strain = torch.randn(B, 6, generator=g, dtype=torch.float64) * 1e-3
    E, nu = 1000 + 1e5 * torch.rand(1, generator=g).item(), 0.1 + 0.3 * torch.rand(1, generator=g).item()
    S_ref, C_ref = elastic_numpy(strain.numpy(), E, nu)
    for backend in ("torch", "triton"):
        m = mod.Model(dtype=dtype, backend=backend, E=E, nu=nu)
        out = m({"forces/E": strain.to(dtype)}, derivatives=True)
        scale = np.abs(S_ref).max()
        assert np.allclose(out["state/S"].double().numpy(), S_ref, rtol=TOL[dtype], atol=TOL[dtype] * scale)
        J = out.jacobian["state/S", "forces/E"].double().numpy()
        assert np.allclose(J, np.broadcast_to(C_ref, J.shape), rtol=TOL[dtype], atol=TOL[dtype] * E)
        assert out.status is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_implicit_kernels_write_every_element(gen_dir, dtype):
    mod = generated("newton3", gen_dir)
    B = 11
    X = torch.cat([torch.randn(B, 3, dtype=dtype), torch.zeros(B, 3, dtype=dtype)], 1)
    P = torch.tensor([[0.5]], dtype=dtype)
    Y, J, ST = launch(mod, X, P, True, dtype)
    Yt, Jt, STt = mod._torch_eval(X, P, mod.Model.VARIANTS["jacobian"])
    for a, b in ((Y, Yt), (J, Jt)):
        assert not a.isnan().any()
        assert torch.allclose(a, b, rtol=10 * TOL[dtype], atol=10 * TOL[dtype])
    assert (ST[:, 0] == 1).all() and (ST[:, 1] >= 1).all() and (ST[:, 2] >= 0).all()
    assert torch.equal(ST[:, 0], STt[:, 0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_write_every_element(gen_dir, dtype):
    mod = generated("elastic", gen_dir)
    X = torch.randn(11, 6, dtype=dtype)
    P = torch.tensor([[2e5, 0.3]], dtype=dtype)
    Y, J, _ = launch(mod, X, P, True, dtype)
    Yt, Jt, _ = mod._torch_eval(X, P, mod.Model.VARIANTS["jacobian"])
    assert not Y.isnan().any() and not J.isnan().any()
    assert torch.allclose(Y, Yt, rtol=TOL[dtype]) and torch.allclose(J, Jt, rtol=TOL[dtype])
    Y, J, _ = launch(mod, X, P, False, dtype)
    assert not Y.isnan().any() and J.isnan().all()  # the value kernel computes no derivative


def _newton_oracle(b, c, n):
    """Solve M u + c u^3 = b per point with torch.autograd Jacobians (float64), and du/db = J^-1."""
    M = torch.tensor(matrix(n), dtype=torch.float64)
    u = torch.zeros_like(b)
    for _ in range(60):
        R = u @ M.T + c * u ** 3 - b
        Jm = M + torch.diag_embed(3 * c * u ** 2)
        u = u - torch.linalg.solve(Jm, R.unsqueeze(-1)).squeeze(-1)
    Jm = M + torch.diag_embed(3 * c * u ** 2)
    return u, torch.linalg.inv(Jm)


@pytest.mark.parametrize("n", [1, 3, 13])
@pytest.mark.parametrize("dtype", DTYPES)
def test_newton_systems(gen_dir, n, dtype):
    mod = generated(f"newton{n}", gen_dir)
    g = torch.Generator().manual_seed(n)
    B = 9
    b = torch.randn(B, n, generator=g, dtype=torch.float64) * 3
    c = 0.2 + torch.rand(B, generator=g, dtype=torch.float64)  # a batched parameter
    u_ref, dudb_ref = _newton_oracle(b, c.unsqueeze(-1), n)
    inputs = {f"forces/b{i}": b[:, i].to(dtype) for i in range(n)}
    inputs.update({f"old_state/u{i}": torch.zeros(B, dtype=dtype) for i in range(n)})
    for backend in ("torch", "triton"):
        m = mod.Model(dtype=dtype, backend=backend)
        out = m(inputs, derivatives=True, c=c.to(dtype))
        assert out.status.all_converged, out.status.summary()
        assert int(out.status.iterations.max()) >= 2
        u = torch.stack([out[f"state/u{i}"] for i in range(n)], -1).double()
        tol = 1e-10 if dtype == torch.float64 else 1e-3
        assert torch.allclose(u, u_ref, atol=tol, rtol=tol)
        J = out.jacobian.tensor.double()
        col = {nm: m.input_axis.offset(nm) for nm in m.input_axis.variable_names}
        row = {nm: m.output_axis.offset(nm) for nm in m.output_axis.variable_names}
        for i in range(n):
            for j in range(n):
                assert torch.allclose(J[:, row[f"state/u{i}"], col[f"forces/b{j}"]], dudb_ref[:, i, j],
                                      atol=tol, rtol=tol)
            assert (J[:, row[f"state/u{i}"], col[f"old_state/u{i}"]] == 0).all()
        # value-only call: same outputs, no jacobian
        out_v = m(inputs, c=c.to(dtype))
        assert torch.equal(out_v.outputs.tensor, out.outputs.tensor)
        with pytest.raises(Exception, match="derivatives=True"):
            out_v.jacobian


def test_newton_failure_gives_nan_and_status(gen_dir):
    mod = generated("newton3", gen_dir)
    B = 5
    inputs = {f"forces/b{i}": torch.ones(B, dtype=torch.float64) for i in range(3)}
    inputs.update({f"old_state/u{i}": torch.zeros(B, dtype=torch.float64) for i in range(3)})
    inputs["forces/b1"] = torch.tensor([1.0, float("nan"), 1.0, 1.0, float("inf")], dtype=torch.float64)
    for backend in ("torch", "triton"):
        out = mod.Model(backend=backend)(inputs, derivatives=True)
        conv = out.status.converged
        assert conv.tolist() == [True, False, True, True, False]
        assert out["state/u0"][~conv].isnan().all() and not out["state/u0"][conv].isnan().any()
        assert out.jacobian.tensor[~conv].isnan().all()
        s = out.status.summary()
        assert "3 of 5 points converged" in s and "2 FAILED" in s and "1, 4" in s


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_solve_with_zero_structural_diagonal(gen_dir, dtype):
    mod = generated("solve3", gen_dir)
    g = torch.Generator().manual_seed(3)
    A = torch.randn(10, 3, 3, generator=g, dtype=torch.float64)
    A[:, 0, 0] = 0  # structurally zero in the program: only the static ordering can fix this
    A[:, 1, 2] = 0
    A[:, 2, 1] = 0
    b = torch.randn(10, 3, generator=g, dtype=torch.float64)
    x_ref = torch.linalg.solve(A, b)
    for backend in ("torch", "triton"):
        out = mod.Model(dtype=dtype, backend=backend)({"forces/A": A.to(dtype), "forces/b": b.to(dtype)})
        tol = 1e-10 if dtype == torch.float64 else 1e-3
        assert torch.allclose(out["state/x"].double(), x_ref, rtol=tol, atol=tol * x_ref.abs().max())


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_solve_tiny_pivot_needs_dynamic_pivoting(gen_dir, dtype):
    mod = generated("pivot2", gen_dir)
    eps = torch.tensor([1e-30, -1e-20, 1e-9, 0.5, 2.0, 0.0], dtype=torch.float64)
    b = torch.randn(6, 3, dtype=torch.float64)
    A = torch.zeros(6, 2, 2, dtype=torch.float64)
    A[:, 0, 0], A[:, 0, 1], A[:, 1, 0], A[:, 1, 1] = eps, 1, 1, 1
    x_ref = torch.linalg.solve(A, b[:, :2])
    # without pivoting the first row would give x = (b0 - x1) / eps: catastrophic for tiny eps
    for backend in ("torch", "triton"):
        out = mod.Model(dtype=dtype, backend=backend)({"forces/eps": eps.to(dtype), "forces/b": b.to(dtype)})
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        assert torch.allclose(out["state/x"][:, :2].double(), x_ref, rtol=tol, atol=tol)
        assert torch.equal(out["state/x"][:, 2], b[:, 2].to(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_baked_parameters_agree_with_runtime_parameters(gen_dir, dtype):
    runtime = generated("elastic", gen_dir)
    baked = generated("elastic", gen_dir, constant_params=("E", "nu"))
    assert baked.Model.BAKED == ("E", "nu")
    assert "c_E: tl.constexpr" in open(baked.__file__).read()
    strain = torch.randn(7, 6, dtype=dtype)
    a = runtime.Model(dtype=dtype, backend="triton", E=123e3, nu=0.27)({"forces/E": strain}, derivatives=True)
    b = baked.Model(dtype=dtype, backend="triton", E=123e3, nu=0.27)({"forces/E": strain}, derivatives=True)
    assert torch.allclose(a.outputs.tensor, b.outputs.tensor, rtol=TOL[dtype])
    assert torch.allclose(a.jacobian.tensor, b.jacobian.tensor, rtol=TOL[dtype])
    with pytest.raises(Exception, match="baked"):
        baked.Model(backend="triton")({"forces/E": torch.randn(7, 6, dtype=torch.float64)},
                                      E=torch.full((7,), 2e5, dtype=torch.float64))
