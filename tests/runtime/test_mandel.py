"""modelc.runtime.mandel: conversions checked against full-index contractions (einsum) and closed forms."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from rt_helpers import BATCH, DEVICES, DTYPE, DTYPES, FAST, SEED, gen, rand, tol

from modelc.errors import InputError
from modelc.runtime import mandel as M


def sym(a):
    return 0.5 * (a + a.transpose(-1, -2))


def minor_sym(c):
    return 0.25 * (c + c.transpose(-4, -3) + c.transpose(-2, -1) + c.transpose(-4, -3).transpose(-2, -1))


def iso_full(lam, mu, dtype=torch.float64, device="cpu"):
    """Isotropic stiffness lam d_ij d_kl + mu (d_ik d_jl + d_il d_jk), index by index."""
    d = torch.eye(3, dtype=dtype, device=device)
    return (lam * torch.einsum("ij,kl->ijkl", d, d)
            + mu * (torch.einsum("ik,jl->ijkl", d, d) + torch.einsum("il,jk->ijkl", d, d)))


@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_sr2_round_trips_and_double_contraction(device, batch, dtype, seed):
    g = gen(seed)
    a = sym(rand(g, *batch, 3, 3, dtype=dtype, device=device))
    b = sym(rand(g, *batch, 3, 3, dtype=dtype, device=device))
    ma, mb = M.full_to_sr2(a), M.full_to_sr2(b)
    assert ma.shape == (*batch, 6) and ma.dtype == dtype and ma.device.type == device
    torch.testing.assert_close(M.sr2_to_full(ma), a, **tol(dtype))
    torch.testing.assert_close((ma * mb).sum(-1), torch.einsum("...ij,...ij->...", a, b), **tol(dtype))
    # component layout: (xx, yy, zz, s2*yz, s2*xz, s2*xy)
    s2 = math.sqrt(2)
    expect = torch.stack([a[..., 0, 0], a[..., 1, 1], a[..., 2, 2], s2 * a[..., 1, 2], s2 * a[..., 0, 2],
                          s2 * a[..., 0, 1]], -1)
    torch.testing.assert_close(ma, expect, **tol(dtype))
    x = rand(g, *batch, 6, dtype=dtype, device=device)
    torch.testing.assert_close(M.full_to_sr2(M.sr2_to_full(x)), x, **tol(dtype))


@FAST
@given(dtype=DTYPE, seed=SEED)
def test_full_to_sr2_takes_the_symmetric_part_and_wr2_the_skew_part(dtype, seed):
    a = rand(gen(seed), 4, 3, 3, dtype=dtype)
    torch.testing.assert_close(M.sr2_to_full(M.full_to_sr2(a)), sym(a), **tol(dtype))
    torch.testing.assert_close(M.sr2_to_full(M.full_to_sr2(a)) + M.wr2_to_full(M.full_to_wr2(a)), a, **tol(dtype))


@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_ssr4_acts_on_sr2_as_a_matrix_product(device, batch, dtype, seed):
    g = gen(seed)
    c = minor_sym(rand(g, *batch, 3, 3, 3, 3, dtype=dtype, device=device))
    e = sym(rand(g, *batch, 3, 3, dtype=dtype, device=device))
    m = M.full_to_ssr4(c)
    assert m.shape == (*batch, 6, 6)
    lhs = (m @ M.full_to_sr2(e).unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(lhs, M.full_to_sr2(torch.einsum("...ijkl,...kl->...ij", c, e)), **tol(dtype))
    torch.testing.assert_close(M.ssr4_to_full(m), c, **tol(dtype))
    x = rand(g, *batch, 6, 6, dtype=dtype, device=device)
    torch.testing.assert_close(M.full_to_ssr4(M.ssr4_to_full(x)), x, **tol(dtype))
    # A : C : B == mandel(A) . M . mandel(B)
    a = sym(rand(g, *batch, 3, 3, dtype=dtype, device=device))
    full = torch.einsum("...ij,...ijkl,...kl->...", a, c, e)
    mand = (M.full_to_sr2(a).unsqueeze(-2) @ m @ M.full_to_sr2(e).unsqueeze(-1))[..., 0, 0]
    torch.testing.assert_close(mand, full, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_identity_tensors_against_index_definitions(dtype):
    d = torch.eye(3, dtype=dtype)
    isym = 0.5 * (torch.einsum("ik,jl->ijkl", d, d) + torch.einsum("il,jk->ijkl", d, d))
    ivol = torch.einsum("ij,kl->ijkl", d, d) / 3
    torch.testing.assert_close(M.identity_sr2(dtype), M.full_to_sr2(d), **tol(dtype))
    torch.testing.assert_close(M.identity_sym(dtype), M.full_to_ssr4(isym), **tol(dtype))
    torch.testing.assert_close(M.identity_vol(dtype), M.full_to_ssr4(ivol), **tol(dtype))
    torch.testing.assert_close(M.identity_dev(dtype), M.full_to_ssr4(isym - ivol), **tol(dtype))
    e = sym(rand(gen(3), 3, 3, dtype=dtype))
    dev = e - torch.trace(e) / 3 * d
    torch.testing.assert_close(M.identity_dev(dtype) @ M.full_to_sr2(e), M.full_to_sr2(dev), **tol(dtype))
    for f in (M.identity_sr2, M.identity_sym, M.identity_vol, M.identity_dev):
        assert f(dtype).dtype == dtype
    assert M.identity_sym().dtype == torch.float64  # float64 by default


def test_isotropic_stiffness_closed_forms():
    lam, mu = 1.7, 0.6
    m = M.full_to_ssr4(iso_full(lam, mu))
    k = lam + 2 * mu / 3
    torch.testing.assert_close(m, 3 * k * M.identity_vol() + 2 * mu * M.identity_dev(), rtol=1e-13, atol=1e-13)
    d = M.ssr4_to_voigt(m, "stiffness")
    expect = torch.zeros(6, 6, dtype=torch.float64)
    expect[:3, :3] = lam
    expect[range(3), range(3)] = lam + 2 * mu
    expect[range(3, 6), range(3, 6)] = mu  # engineering shear: tau = mu * gamma
    torch.testing.assert_close(d, expect, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(M.ssr4_to_voigt(m, "stiffness", "abaqus"), expect, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("order", ["neml2", "abaqus"])
@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_voigt_work_tangent_and_round_trips(device, order, batch, dtype, seed):
    g = gen(seed)
    s = sym(rand(g, *batch, 3, 3, dtype=dtype, device=device))
    e = sym(rand(g, *batch, 3, 3, dtype=dtype, device=device))
    c = minor_sym(rand(g, *batch, 3, 3, 3, 3, dtype=dtype, device=device))
    sv = M.sr2_to_voigt(M.full_to_sr2(s), "stress", order)
    ev = M.sr2_to_voigt(M.full_to_sr2(e), "strain", order)
    # work s:e is the plain dot product of stress and engineering-strain Voigt vectors
    torch.testing.assert_close((sv * ev).sum(-1), torch.einsum("...ij,...ij->...", s, e), **tol(dtype))
    # stiffness: sigma_v = D @ strain_v
    d = M.ssr4_to_voigt(M.full_to_ssr4(c), "stiffness", order)
    sig = M.sr2_to_voigt(M.full_to_sr2(torch.einsum("...ijkl,...kl->...ij", c, e)), "stress", order)
    torch.testing.assert_close((d @ ev.unsqueeze(-1)).squeeze(-1), sig, **tol(dtype))
    # round trips
    x = rand(g, *batch, 6, dtype=dtype, device=device)
    y = rand(g, *batch, 6, 6, dtype=dtype, device=device)
    for kind in ("stress", "strain"):
        torch.testing.assert_close(M.voigt_to_sr2(M.sr2_to_voigt(x, kind, order), kind, order), x, **tol(dtype))
    for kind in ("stiffness", "compliance"):
        torch.testing.assert_close(M.voigt_to_ssr4(M.ssr4_to_voigt(y, kind, order), kind, order), y, **tol(dtype))


def test_voigt_component_orders_and_compliance():
    a = sym(rand(gen(1), 3, 3))
    mand = M.full_to_sr2(a)
    neml2 = torch.stack([a[0, 0], a[1, 1], a[2, 2], 2 * a[1, 2], 2 * a[0, 2], 2 * a[0, 1]])
    abaqus = torch.stack([a[0, 0], a[1, 1], a[2, 2], 2 * a[0, 1], 2 * a[0, 2], 2 * a[1, 2]])
    torch.testing.assert_close(M.sr2_to_voigt(mand, "strain"), neml2)
    torch.testing.assert_close(M.sr2_to_voigt(mand, "strain", "abaqus"), abaqus)
    torch.testing.assert_close(M.sr2_to_voigt(mand, "stress", "abaqus"),
                               torch.stack([a[0, 0], a[1, 1], a[2, 2], a[0, 1], a[0, 2], a[1, 2]]))
    # compliance: strain_v = S @ sigma_v with S from the inverse of the Mandel stiffness
    m = M.full_to_ssr4(iso_full(1.3, 0.8))
    sm = torch.linalg.inv(m)
    for order in ("neml2", "abaqus"):
        s_v = M.ssr4_to_voigt(sm, "compliance", order)
        d_v = M.ssr4_to_voigt(m, "stiffness", order)
        torch.testing.assert_close(s_v @ d_v, torch.eye(6, dtype=torch.float64))
        sig = M.sr2_to_voigt(mand, "stress", order)
        eps = M.sr2_to_voigt(sm @ mand, "strain", order)
        torch.testing.assert_close(s_v @ sig, eps)


@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_wr2_is_the_cross_product_and_round_trips(batch, dtype, seed):
    g = gen(seed)
    w = rand(g, *batch, 3, dtype=dtype)
    v = rand(g, *batch, 3, dtype=dtype)
    wf = M.wr2_to_full(w)
    torch.testing.assert_close(wf, -wf.transpose(-1, -2), **tol(dtype))
    torch.testing.assert_close((wf @ v.unsqueeze(-1)).squeeze(-1), torch.linalg.cross(w, v), **tol(dtype))
    torch.testing.assert_close(M.full_to_wr2(wf), w, **tol(dtype))


@pytest.mark.parametrize("fn, shape", [
    (M.sr2_to_full, (3, 5)), (M.full_to_sr2, (6,)), (M.ssr4_to_full, (6,)), (M.full_to_ssr4, (6, 6)),
    (M.wr2_to_full, (6,)), (M.full_to_wr2, (3,)), (M.sr2_to_voigt, (3, 3)), (M.voigt_to_sr2, (5,)),
    (M.ssr4_to_voigt, (6, 5)), (M.voigt_to_ssr4, (36,)),
])
def test_wrong_shape_is_an_input_error(fn, shape):
    with pytest.raises(InputError, match=rf"{fn.__name__}: expected .*got shape {tuple(shape)}".replace("(", r"\(")
                       .replace(")", r"\)")):
        fn(torch.zeros(shape))


def test_non_float_and_non_tensor_inputs_are_rejected():
    with pytest.raises(InputError, match="floating-point.*int64"):
        M.sr2_to_full(torch.zeros(6, dtype=torch.int64))
    with pytest.raises(InputError, match="expected a torch.Tensor.*list"):
        M.full_to_sr2([[0.0] * 3] * 3)


@pytest.mark.parametrize("fn, kw, bad", [
    (M.sr2_to_voigt, "kind", "stiffness"), (M.sr2_to_voigt, "order", "abq"), (M.voigt_to_sr2, "kind", "x"),
    (M.voigt_to_sr2, "order", "NEML2"), (M.ssr4_to_voigt, "kind", "strain"), (M.ssr4_to_voigt, "order", "a"),
    (M.voigt_to_ssr4, "kind", "stress"), (M.voigt_to_ssr4, "order", ""),
])
def test_unknown_voigt_kind_or_order_is_named(fn, kw, bad):
    shape = (6, 6) if "ssr4" in fn.__name__ else (6,)
    with pytest.raises(InputError, match=f"unknown .*{bad!r}"):
        fn(torch.zeros(shape), **{kw: bad})


def test_runtime_and_symbolic_twins_agree():
    """The compiler's symbolic modelc.mandel and this module use the same conventions."""
    pytest.importorskip("modelc.mandel")
    import itertools

    from modelc import mandel as S

    g = gen(11)
    x, c, w = rand(g, 6), rand(g, 6, 6), rand(g, 3)
    a, c4 = rand(g, 3, 3), rand(g, 3, 3, 3, 3)
    f = M.sr2_to_full(x)
    sf = S.sr2_to_full([float(v) for v in x])
    assert all(abs(float(sf[(i, j)]) - float(f[i, j])) < 1e-14 for i in range(3) for j in range(3))
    sc = S.ssr4_to_full([float(v) for v in c.flatten()])
    fc = M.ssr4_to_full(c)
    assert all(abs(float(sc[k]) - float(fc[k])) < 1e-14 for k in itertools.product(range(3), repeat=4))
    sw = S.wr2_to_full([float(v) for v in w])
    fw = M.wr2_to_full(w)
    assert all(abs(float(sw[(i, j)]) - float(fw[i, j])) < 1e-14 for i in range(3) for j in range(3))
    full_a = {(i, j): float(a[i, j]) for i in range(3) for j in range(3)}
    torch.testing.assert_close(torch.tensor([float(v) for v in S.full_to_sr2(full_a)], dtype=torch.float64),
                               M.full_to_sr2(a))
    torch.testing.assert_close(torch.tensor([float(v) for v in S.full_to_wr2(full_a)], dtype=torch.float64),
                               M.full_to_wr2(a))
    full_c = {k: float(c4[k]) for k in itertools.product(range(3), repeat=4)}
    torch.testing.assert_close(torch.tensor([float(v) for v in S.full_to_ssr4(full_c)], dtype=torch.float64),
                               M.full_to_ssr4(c4).flatten())
