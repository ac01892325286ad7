"""modelc.runtime.tensors: typed batched tensors, views, and name-aligned batch broadcasting."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rt_helpers import BATCH, DEVICES, DTYPE, FAST, SEED, gen, rand, tol

from modelc.errors import InputError
from modelc.runtime import R2, SR2, SSR4, TYPES, WR2, Scalar, TypedTensor, Vec, align, broadcast_batch
from modelc.runtime import mandel as M


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(batch=BATCH, dtype=DTYPE, tname=st.sampled_from(sorted(TYPES)))
def test_batch_and_base_shapes(device, batch, dtype, tname):
    t = TYPES[tname]
    x = TypedTensor(torch.zeros((*batch, *t.base_shape), dtype=dtype, device=device), tname)
    assert x.type is t and x.batch_shape == batch and x.base_shape == t.base_shape
    assert x.batch_dim == len(batch) and x.dtype == dtype and x.device.type == device
    assert x.named_shape is None


@FAST
@given(batch=BATCH, seed=SEED, tname=st.sampled_from(sorted(TYPES)))
def test_batch_views_share_storage_and_writes_land(batch, seed, tname):
    t = TYPES[tname]
    g = gen(seed)
    data = rand(g, *batch, *t.base_shape)
    x = TypedTensor(data, t)
    # expand: a new leading dim of 2
    e = x.batch_expand(2, *batch)
    assert e.batch_shape == (2, *batch) and same_storage(e.data, data)
    torch.testing.assert_close(e.data[1], data)
    # reshape: flatten the batch
    n = 1
    for s in batch:
        n *= s
    r = x.batch_reshape(n)
    assert r.batch_shape == (n,) and same_storage(r.data, data)
    r.data[-1] = 7.0
    assert (data.reshape(n, -1)[-1] == 7.0).all()
    # index: the first element along the first batch dim
    if batch:
        i = x.batch_index(0)
        assert i.batch_shape == batch[1:] and i.base_shape == t.base_shape and same_storage(i.data, data)
        i.data.fill_(-3.0)
        assert (data[0] == -3.0).all()
        s = x.batch_index((Ellipsis, slice(0, 1)))
        assert s.batch_shape == (*batch[:-1], 1) and same_storage(s.data, data)


def test_batch_index_keeps_names_of_sliced_dims():
    x = TypedTensor(torch.zeros(2, 3, 4, 6), SR2, ("a", "b", "c"))
    assert x.batch_index((0,)).batch_names == ("b", "c")
    assert x.batch_index((slice(None), 1)).batch_names == ("a", "c")
    assert x.batch_index((Ellipsis, 2)).batch_names == ("a", "b")
    assert x.batch_index((None,)).batch_names is None
    assert x.batch_expand(2, 3, 4).batch_names == ("a", "b", "c")
    assert x.batch_reshape(6, 4).batch_names is None


def test_rejected_constructions_and_views():
    with pytest.raises(InputError, match=r"SR2 tensor needs trailing \(base\) shape \(6,\), got shape \(3, 5\)"):
        TypedTensor(torch.zeros(3, 5), SR2)
    with pytest.raises(InputError, match="unknown tensor type 'SR3'"):
        TypedTensor(torch.zeros(6), "SR3")
    with pytest.raises(InputError, match="expected a torch.Tensor, got list"):
        TypedTensor([1.0], Scalar)
    with pytest.raises(InputError, match="1 batch names .* 2 batch dims"):
        TypedTensor(torch.zeros(2, 3), Scalar, ("points",))
    with pytest.raises(InputError, match="duplicate batch dimension names"):
        TypedTensor(torch.zeros(2, 3), Scalar, ("p", "p"))
    for bad in ("", "a b", "a/b", "it's", "a\nb"):
        with pytest.raises(InputError, match="bad batch dimension name"):
            TypedTensor(torch.zeros(2), Scalar, (bad,))
    x = TypedTensor(torch.zeros(4, 3, 6).transpose(0, 1), SR2)
    with pytest.raises(InputError, match=r"cannot reshape the batch dims \(3, 4\) .* without a copy"):
        x.batch_reshape(12)
    with pytest.raises(InputError, match="views only.*Tensor"):
        x.batch_index(torch.tensor([0, 1]))
    with pytest.raises(InputError, match="too many batch indices"):
        x.batch_index((0, 0, 0))
    with pytest.raises(AttributeError, match="immutable"):
        x.type = Scalar


@FAST
@given(s=st.integers(1, 4), p=st.integers(1, 4), dtype=DTYPE, seed=SEED)
def test_named_dims_broadcast_by_name(s, p, dtype, seed):
    g = gen(seed)
    e_raw = rand(g, s, dtype=dtype)
    eps_raw = rand(g, p, 6, dtype=dtype)
    E = TypedTensor(e_raw, Scalar, ("samples",))
    eps = TypedTensor(eps_raw, SR2, ("points",))
    a = E * eps
    assert a.type == SR2 and a.batch_names == ("samples", "points") and a.batch_shape == (s, p)
    oracle = torch.stack([torch.stack([e_raw[i] * eps_raw[j] for j in range(p)]) for i in range(s)])
    torch.testing.assert_close(a.data, oracle, **tol(dtype))
    b = eps * E
    assert b.batch_names == ("points", "samples")
    torch.testing.assert_close(b.data, oracle.transpose(0, 1), **tol(dtype))
    # same name on both sides: elementwise, no new dim
    c = eps + eps
    assert c.batch_names == ("points",)
    torch.testing.assert_close(c.data, 2 * eps_raw, **tol(dtype))
    # an unbatched, unnamed operand combines with anything
    one = TypedTensor(torch.ones(6, dtype=dtype), SR2)
    d = eps - one
    assert d.batch_names == ("points",)
    torch.testing.assert_close(d.data, eps_raw - 1, **tol(dtype))


@FAST
@given(nx=st.integers(1, 3), ny=st.integers(1, 3), nz=st.integers(1, 3), seed=SEED)
def test_three_names_overlapping(nx, ny, nz, seed):
    g = gen(seed)
    a_raw = rand(g, nx, ny, 6)
    b_raw = rand(g, nz, ny, 6)
    a = TypedTensor(a_raw, SR2, ("x", "y"))
    b = TypedTensor(b_raw, SR2, ("z", "y"))
    c = a.ddot(b)
    assert c.type == Scalar and c.batch_names == ("x", "y", "z") and c.batch_shape == (nx, ny, nz)
    oracle = torch.einsum("xya,zya->xyz", a_raw, b_raw)
    torch.testing.assert_close(c.data, oracle)
    names, shape = broadcast_batch(a, b)
    assert names == ("x", "y", "z") and shape == (nx, ny, nz)
    names, views = align(a, b)
    assert views[1].batch_names == names and views[1].batch_shape == (1, ny, nz)
    assert same_storage(views[1].data, b_raw)


@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_unnamed_dims_broadcast_like_torch_and_contractions(batch, dtype, seed):
    g = gen(seed)
    c_raw = rand(g, *batch, 6, 6, dtype=dtype)
    e_raw = rand(g, 6, dtype=dtype)
    c, e = TypedTensor(c_raw, SSR4), TypedTensor(e_raw, SR2)
    s = c @ e
    assert s.type == SR2 and s.batch_shape == batch
    full = torch.einsum("...ijkl,...kl->...ij", M.ssr4_to_full(c_raw), M.sr2_to_full(e_raw))
    torch.testing.assert_close(s.data, M.full_to_sr2(full), **tol(dtype))
    cc = c @ c
    assert cc.type == SSR4
    torch.testing.assert_close(cc.data, c_raw @ c_raw, **tol(dtype))
    w = e.ddot(s)
    torch.testing.assert_close(w.data, torch.einsum("ij,...ij->...", M.sr2_to_full(e_raw), full), **tol(dtype))
    k = TypedTensor(rand(g, *batch, dtype=dtype), Scalar)
    torch.testing.assert_close((k * e).data, k.data[..., None] * e_raw, **tol(dtype))
    torch.testing.assert_close((e / 2.0).data, e_raw / 2, **tol(dtype))
    torch.testing.assert_close((1.0 - e).data, 1 - e_raw, **tol(dtype))
    torch.testing.assert_close((-e).data, -e_raw, **tol(dtype))
    # torch functions see the raw data
    assert torch.allclose(s, s.data) and isinstance(torch.sin(s), torch.Tensor)


def test_rejected_combinations_name_what_is_wrong():
    eps = TypedTensor(torch.zeros(5, 6), SR2, ("points",))
    with pytest.raises(InputError, match="batch dimension 'points' has size 5 in one operand and 4"):
        eps + TypedTensor(torch.zeros(4, 6), SR2, ("points",))
    with pytest.raises(InputError, match=r"named batch dims .*points.* unnamed batch dims of shape \(5,\)"):
        eps + TypedTensor(torch.zeros(5, 6), SR2)
    with pytest.raises(InputError, match="cannot add a SR2 and a Vec"):
        eps + TypedTensor(torch.zeros(3), Vec)
    with pytest.raises(InputError, match="ddot needs two SR2 tensors, got SR2 and R2"):
        eps.ddot(TypedTensor(torch.zeros(3, 3), R2))
    with pytest.raises(InputError, match="SSR4 @ SR2 .* got SR2 @ SR2"):
        eps @ eps
    with pytest.raises(InputError, match="SSR4 @ SR2 .* got SSR4 @ WR2"):
        TypedTensor(torch.zeros(6, 6), SSR4) @ TypedTensor(torch.zeros(3), WR2)
    with pytest.raises(InputError, match="wrap it in TypedTensor"):
        eps + torch.zeros(6)
    with pytest.raises(InputError, match="would be lost"):
        eps.align_to(("samples",))
    with pytest.raises(InputError, match="name them first"):
        TypedTensor(torch.zeros(5, 6), SR2).align_to(("points",))
    with pytest.raises(InputError, match="do not broadcast"):
        broadcast_batch(TypedTensor(torch.zeros(5, 6), SR2), TypedTensor(torch.zeros(4, 6), SR2))


def test_remaining_view_and_arithmetic_forms():
    raw = rand(gen(5), 2, 3, 4, 6)
    x = TypedTensor(raw, SR2)
    n = x.named("a", "b", "c")
    assert n.named_shape == {"a": 2, "b": 3, "c": 4} and n.unnamed().batch_names is None
    assert same_storage(n.data, raw) and same_storage(n.unnamed().data, raw)
    # an int on the first and on the last dim: the middle name survives
    m = n.batch_index((0, Ellipsis, 1))
    assert m.batch_names == ("b",) and torch.equal(m.data, raw[0, :, 1])
    # align to a superset of names in another order, expanded to sizes
    al = n.align_to(("c", "d", "a", "b"), sizes=(4, 5, 2, 3))
    assert al.batch_shape == (4, 5, 2, 3) and same_storage(al.data, raw)
    torch.testing.assert_close(al.data[3, 4, 1, 2], raw[1, 2, 3])
    assert x.batch_expand((5, 2, 3, 4)).batch_shape == (5, 2, 3, 4)
    assert x.batch_reshape((6, 4)).batch_shape == (6, 4)
    torch.testing.assert_close((2.0 * x).data, 2 * raw)
    torch.testing.assert_close((1.0 + x).data, 1 + raw)
    k = TypedTensor(rand(gen(6), 2, 3, 4), Scalar, ("a", "b", "c"))
    torch.testing.assert_close((k * n).data, k.data[..., None] * raw)
    assert (k * n).batch_names == ("a", "b", "c") and (k * n).type == SR2


@FAST
@given(s=st.integers(1, 3), p=st.integers(1, 3), seed=SEED)
def test_scalar_on_the_left_keeps_operand_order_and_names(s, p, seed):
    g = gen(seed)
    E = TypedTensor(rand(g, s) + 3, Scalar, ("samples",))
    eps = TypedTensor(rand(g, p, 6) + 3, SR2, ("points",))
    for res, oracle in ((E - eps, E.data[:, None, None] - eps.data[None]),
                        (E / eps, E.data[:, None, None] / eps.data[None])):
        assert res.type == SR2 and res.batch_names == ("samples", "points")
        torch.testing.assert_close(res.data, oracle)
    u = TypedTensor(torch.tensor([1.0, 2.0]), Scalar) / TypedTensor(torch.full((2, 6), 4.0), SR2)
    assert repr(u) == "TypedTensor(SR2, batch=(2,), torch.float32, cpu)"
    torch.testing.assert_close(u.data, torch.tensor([0.25, 0.5])[:, None].expand(2, 6))


def test_broadcast_shapes_agrees_with_torch():
    """The runtime's own broadcast (torch's imports SymPy) gives torch's answer and its error."""
    from modelc.runtime.tensors import broadcast_shapes

    gen = torch.Generator().manual_seed(1)
    for _ in range(300):
        shapes = [tuple(int(d) for d in torch.randint(0, 4, (int(torch.randint(0, 4, (1,), generator=gen)),),
                                                      generator=gen)) for _ in range(3)]
        try:
            want = torch.broadcast_shapes(*shapes)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                broadcast_shapes(*shapes)
        else:
            assert broadcast_shapes(*shapes) == want
    assert broadcast_shapes() == torch.Size([])
