"""The call path's shortcuts change no number: a single-input model reads its input in place (no
copy into X), and a shared parameter row of plain numbers is built once and rebuilt on
set_parameters; a tensor parameter is re-read on every call (it may be changed in place)."""
from __future__ import annotations

import torch

from library_helpers import compiled_module


def test_single_input_is_read_in_place_and_gives_the_same_numbers():
    m = compiled_module("elastic").Model(backend="torch")
    E = 1e-3 * torch.randn(5, 7, 6, dtype=torch.float64)
    X, bs = m._inputs_tensor({"forces/E": E})
    assert X.data_ptr() == E.data_ptr() and bs == (5, 7)
    strided = E.transpose(0, 1)  # not contiguous: still correct (a copy where needed)
    got = m({"forces/E": strided})["state/S"]
    want = m({"forces/E": strided.contiguous()})["state/S"]
    assert torch.equal(got, want) and got.shape == (7, 5, 6)


def test_parameter_row_follows_set_parameters_and_in_place_tensors():
    m = compiled_module("elastic").Model(backend="torch")
    E = 1e-3 * torch.randn(4, 6, dtype=torch.float64)
    s1 = m({"forces/E": E})["state/S"]
    m.set_parameters(E=2 * 200000.0)  # the library default is 2e5 MPa
    s2 = m({"forces/E": E})["state/S"]
    # S = lambda tr(eps) + 2 mu eps: a component where the two terms nearly cancel keeps the absolute
    # rounding of the terms (a few ulp of the largest stress), not a relative 1e-14 of itself
    # (a fresh random input failed at 1.3e-14 relative with atol=0 on one component)
    tol = dict(rtol=1e-14, atol=1e-14 * float(s1.abs().max()) * 3)
    torch.testing.assert_close(s2, 2 * s1 * (m.parameter_info["E"].default[0] / 200000.0), **tol)
    youngs = torch.tensor(200000.0, dtype=torch.float64)
    m.set_parameters(E=youngs)
    s3 = m({"forces/E": E})["state/S"]
    youngs.mul_(3.0)  # changed in place: the next call sees it
    s4 = m({"forces/E": E})["state/S"]
    torch.testing.assert_close(s4, 3 * s3, **tol)
    assert torch.equal(m({"forces/E": E}, E=200000.0)["state/S"], s3)  # a call override wins


def test_a_constant_jacobian_is_computed_once_and_broadcast():
    """Linear elasticity's tangent depends on the parameters only: with shared parameters it is one
    matrix returned as a stride-0 view over the batch, equal to the per-point computation (and to
    Hooke's law's closed form); with per-point parameters every point gets its own."""
    mod = compiled_module("elastic")
    assert set(mod.Model.CONSTANT_JACOBIAN) == {"jacobian", "tangent"}
    assert compiled_module("j2_linear_iso").Model.CONSTANT_JACOBIAN == ()
    E = 1e-3 * torch.randn(9, 6, dtype=torch.float64)
    for backend in ("torch", "c"):
        try:
            m = mod.Model(backend=backend)
        except Exception as exc:  # no C compiler here
            assert backend == "c", exc
            continue
        out = m({"forces/E": E}, derivatives="tangent")
        C = out.jacobian["state/S", "forces/E"]
        assert C.shape == (9, 6, 6) and C.stride(0) == 0
        X, _ = m._inputs_tensor({"forces/E": E})
        P, _ = m._param_tensor({}, torch.Size([9]))
        per_point = m.evaluate(X, P, "tangent")[1]
        assert torch.equal(C, per_point)
        lam, mu = 200000.0 * 0.3 / (1.3 * 0.4), 200000.0 / 2.6
        one = torch.tensor([1.0, 1, 1, 0, 0, 0], dtype=torch.float64)
        hooke = lam * torch.outer(one, one) \
            + 2 * mu * torch.eye(6, dtype=torch.float64)
        torch.testing.assert_close(C[0], hooke, rtol=1e-14, atol=1e-9)
        torch.testing.assert_close(out["state/S"], E @ hooke.T, rtol=1e-13, atol=1e-9)
        youngs = torch.linspace(1e5, 3e5, 9, dtype=torch.float64)
        varied = m({"forces/E": E}, derivatives="tangent", E=youngs).jacobian["state/S", "forces/E"]
        assert varied.stride(0) != 0
        torch.testing.assert_close(varied, C * (youngs / 200000.0)[:, None, None], rtol=1e-13, atol=1e-9)
