"""modelc.runtime.labeled: labeled vectors/matrices, views sharing storage, assembly, and errors."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rt_helpers import BATCH, DEVICES, DTYPE, FAST, SEED, gen, rand

from modelc.errors import InputError
from modelc.runtime import (R2, SR2, SSR4, WR2, LabeledAxis, LabeledMatrix, LabeledTensor, LabeledVector, Scalar,
                            TypedTensor, Vec)

VARS = [("forces/E", SR2), ("forces/t", Scalar), ("old_state/internal/ep", Scalar), ("old_state/S", SR2),
        ("state/F", R2), ("state/C", SSR4), ("state/w", WR2), ("state/v", Vec)]
AXIS = LabeledAxis.from_variables(VARS)


def shares(view: torch.Tensor, base: torch.Tensor) -> bool:
    """Same storage, and the view's first element lies inside the base's memory."""
    if view.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():
        return False
    lo = base.data_ptr()
    return lo <= view.data_ptr() < lo + base.untyped_storage().nbytes()


@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_vector_views_are_typed_share_storage_and_write_through(device, batch, dtype, seed):
    g = gen(seed)
    flat = rand(g, *batch, AXIS.size, dtype=dtype, device=device)
    x = LabeledVector(flat, AXIS)
    assert x.batch_shape == batch and x.base_shape == (AXIS.size,) and x.dtype == dtype
    for name, t in AXIS.variables:
        start, stop = AXIS.span(name)
        v = x[name]
        assert v.shape == (*batch, *t.base_shape) and shares(v, flat)
        torch.testing.assert_close(v.reshape(*batch, t.size), flat[..., start:stop], rtol=0, atol=0)
        torch.testing.assert_close(x.raw(name), flat[..., start:stop], rtol=0, atol=0)
        assert x.typed(name).type is t
        # a write through the view lands in the original, and only there
        before = flat.clone()
        v.fill_(11.0)
        assert (flat[..., start:stop] == 11.0).all()
        rest = torch.ones(AXIS.size, dtype=torch.bool, device=device)
        rest[start:stop] = False
        assert torch.equal(flat[..., rest], before[..., rest])
    # a sub-axis slice is a LabeledVector view over the sub-axis
    s = x.slice("old_state")
    assert isinstance(s, LabeledVector) and s.axis == AXIS.subaxis("old_state") and shares(s.tensor, flat)
    s.set("internal/ep", 5.0)
    assert (x["old_state/internal/ep"] == 5.0).all()
    assert x.raw("old_state").shape == (*batch, 7)


@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_set_writes_in_place_with_broadcasting(device, batch, dtype, seed):
    g = gen(seed)
    x = LabeledVector.zeros(AXIS, batch, dtype=dtype, device=device)
    storage = x.tensor.untyped_storage().data_ptr()
    vals = {n: rand(g, *batch, *t.base_shape, dtype=dtype, device=device) for n, t in AXIS.variables}
    for n, v in vals.items():
        x.set(n, v)
    for n, v in vals.items():
        torch.testing.assert_close(x[n], v, rtol=0, atol=0)
    e = rand(g, 6, dtype=dtype, device=device)  # no batch dims: broadcast over the batch
    x["forces/E"] = e
    torch.testing.assert_close(x["forces/E"], e.expand(*batch, 6), rtol=0, atol=0)
    x.set("state", 0.0)  # a sub-axis: the raw block
    assert (x.raw("state") == 0).all()
    assert x.tensor.untyped_storage().data_ptr() == storage


@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_matrix_blocks_and_views(device, batch, dtype, seed):
    rows = LabeledAxis.from_variables([("state/S", SR2), ("state/ep", Scalar), ("state/F", R2)])
    cols = LabeledAxis.from_variables([("forces/E", SR2), ("forces/t", Scalar), ("old_state/C", SSR4)])
    g = gen(seed)
    flat = rand(g, *batch, rows.size, cols.size, dtype=dtype, device=device)
    J = LabeledMatrix(flat, rows, cols)
    for r, tr in rows.variables:
        for c, tc in cols.variables:
            v = J[r, c]
            assert v.shape == (*batch, *tr.base_shape, *tc.base_shape) and shares(v, flat)
            (r0, r1), (c0, c1) = rows.span(r), cols.span(c)
            torch.testing.assert_close(v.reshape(*batch, tr.size, tc.size), flat[..., r0:r1, c0:c1], rtol=0, atol=0)
    b = J.block("state", "forces")
    assert isinstance(b, LabeledMatrix) and b.row_axis == rows.subaxis("state") and shares(b.tensor, flat)
    assert b.base_shape == (16, 7)
    b.set("S", "E", torch.eye(6, dtype=dtype, device=device))
    torch.testing.assert_close(J["state/S", "forces/E"], torch.eye(6, dtype=dtype, device=device).expand(*batch, 6, 6))
    J["state/ep", "forces/t"] = 2.5
    assert (flat[..., 6, 6] == 2.5).all()
    whole = J.block("", "old_state")
    assert whole.row_axis == rows and whole.base_shape == (rows.size, 36)
    assert J.slice("forces", dim=1).col_axis == cols.subaxis("forces")
    d = J.to_dict()
    assert set(d) == {(r, c) for r in rows.variable_names for c in cols.variable_names}
    assert all(shares(v, flat) for v in d.values())


@FAST
@given(batch=BATCH, dtype=DTYPE, seed=SEED)
def test_from_dict_to_dict_round_trip_and_batch_broadcast(batch, dtype, seed):
    g = gen(seed)
    vals = {n: rand(g, *batch, *t.base_shape, dtype=dtype) for n, t in AXIS.variables}
    vals["forces/t"] = rand(g, dtype=dtype)  # unbatched: broadcast
    x = LabeledVector.from_dict(AXIS, vals)
    assert x.batch_shape == batch and x.dtype == dtype
    out = x.to_dict()
    assert list(out) == list(AXIS.variable_names)
    for n, v in vals.items():
        torch.testing.assert_close(out[n], v.expand_as(out[n]), rtol=0, atol=0)
        assert shares(out[n], x.tensor)
    # a fresh copy: the input tensors are not aliased
    vals["forces/E"].fill_(99.0)
    assert not (x["forces/E"] == 99.0).any()
    y = LabeledVector.from_dict(AXIS, {"forces/E": vals["forces/E"]}, fill_missing=True)
    assert (y["state/C"] == 0).all()
    z = LabeledVector.from_dict(AXIS, {"forces/t": 1.0}, fill_missing=True, batch_shape=(2,), dtype=dtype)
    assert z.batch_shape == (2,) and z.dtype == dtype and (z["forces/t"] == 1).all()


@FAST
@given(s=st.integers(1, 3), p=st.integers(1, 4), seed=SEED)
def test_from_dict_aligns_named_batch_dims(s, p, seed):
    g = gen(seed)
    ax = LabeledAxis.from_variables([("E", Scalar), ("eps", SR2)])
    E = TypedTensor(rand(g, s), Scalar, ("samples",))
    eps = TypedTensor(rand(g, p, 6), SR2, ("points",))
    x = LabeledVector.from_dict(ax, {"eps": eps, "E": E})
    assert x.batch_names == ("points", "samples") and x.batch_shape == (p, s)
    torch.testing.assert_close(x["E"], E.data.expand(p, s))
    torch.testing.assert_close(x["eps"], eps.data[:, None, :].expand(p, s, 6))
    # set with a named value aligns it to this vector's names
    x.set("E", TypedTensor(torch.arange(s, dtype=torch.float64), Scalar, ("samples",)))
    torch.testing.assert_close(x["E"], torch.arange(s, dtype=torch.float64).expand(p, s))
    t = x.typed("eps")
    assert t.batch_names == ("points", "samples") and t.type == SR2


@FAST
@given(batch=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple), seed=SEED)
def test_batch_views(batch, seed):
    x = LabeledVector(rand(gen(seed), *batch, AXIS.size), AXIS)
    e = x.batch_expand(2, *batch)
    assert isinstance(e, LabeledVector) and e.batch_shape == (2, *batch) and shares(e.tensor, x.tensor)
    n = x.tensor.numel() // AXIS.size
    r = x.batch_reshape(n)
    assert r.batch_shape == (n,) and shares(r.tensor, x.tensor)
    i = x.batch_index(0)
    assert i.batch_shape == batch[1:] and shares(i.tensor, x.tensor)
    i["state/F"] = 4.0
    assert (x.tensor[0, ..., slice(*AXIS.span("state/F"))] == 4.0).all()
    j = x.batch_index((Ellipsis, slice(0, 1)))
    assert j.batch_shape == (*batch[:-1], 1)
    m = LabeledMatrix.zeros(AXIS, AXIS, batch)
    assert isinstance(m.batch_index(0), LabeledMatrix)
    c = x.clone()
    assert not shares(c.tensor, x.tensor) and torch.equal(c.tensor, x.tensor)
    assert x.to(torch.float32).dtype == torch.float32
    assert x.named(*[f"d{k}" for k in range(len(batch))]).batch_names == tuple(f"d{k}" for k in range(len(batch)))


def test_matrix_from_dict_absent_blocks_are_zero():
    rows = LabeledAxis.from_variables([("S", SR2), ("ep", Scalar)])
    cols = LabeledAxis.from_variables([("E", SR2), ("t", Scalar)])
    dSdE = rand(gen(0), 4, 6, 6)
    J = LabeledMatrix.from_dict(rows, cols, {("S", "E"): dSdE, ("ep", "t"): torch.ones(4, dtype=torch.float64)})
    assert J.batch_shape == (4,)
    torch.testing.assert_close(J["S", "E"], dSdE)
    assert (J["S", "t"] == 0).all() and (J["ep", "E"] == 0).all() and (J["ep", "t"] == 1).all()
    z = LabeledMatrix.from_dict(rows, cols, {}, (2,))
    assert z.batch_shape == (2,) and (z.tensor == 0).all()
    assert LabeledMatrix.empty(rows, cols, 3).batch_shape == (3,)
    assert LabeledVector.empty(rows, (2, 3), dtype=torch.float32).dtype == torch.float32
    assert isinstance(LabeledTensor(torch.zeros(2, 7, 7, 7), rows, rows, rows), LabeledTensor)


def test_typed_views_by_index_are_the_reshaped_views():
    """``get`` selects a scalar or a flat (SR2, vector) variable with one memoised basic index and
    reshapes anything else (R2, SSR4): either way the view is the flat one reshaped to the base
    shapes, with its strides and offset, on vectors and on every block of a matrix."""
    flat = torch.arange(2 * 3 * AXIS.size, dtype=torch.float64).reshape(2, 3, AXIS.size)
    x = LabeledVector(flat, AXIS)
    mat = LabeledMatrix(torch.arange(2 * AXIS.size * AXIS.size, dtype=torch.float64).reshape(2, AXIS.size, AXIS.size),
                        AXIS, AXIS)
    for _ in range(2):  # the second pass reads the memoised index
        for name, t in AXIS.variables:
            want = x.raw(name).view(2, 3, *t.base_shape)
            got = x[name]
            assert (got.shape, got.stride(), got.storage_offset()) == (want.shape, want.stride(), want.storage_offset())
            assert got.data_ptr() == want.data_ptr() and torch.equal(got, want)
            for col, u in AXIS.variables:
                want = mat.raw(name, col).view(2, *t.base_shape, *u.base_shape)
                got = mat[name, col]
                assert (got.shape, got.stride(), got.storage_offset()) == \
                    (want.shape, want.stride(), want.storage_offset()), (name, col)
                assert torch.equal(got, want)
    with pytest.raises(InputError, match="no variable or sub-axis"):
        x.get(["forces/E"])  # an unhashable name gets the same message as an unknown one


def test_rejected_inputs_name_the_variable():
    x = LabeledVector.zeros(AXIS, (3,))
    with pytest.raises(InputError, match="forces/E: dtype torch.float32 does not match torch.float64"):
        x.set("forces/E", torch.zeros(3, 6, dtype=torch.float32))
    with pytest.raises(InputError, match="forces/E: device meta does not match cpu"):
        x.set("forces/E", torch.zeros(3, 6, dtype=torch.float64, device="meta"))
    with pytest.raises(InputError, match=r"forces/E: value of shape \(2, 6\) does not broadcast to \(3, 6\)"):
        x.set("forces/E", torch.zeros(2, 6, dtype=torch.float64))
    with pytest.raises(InputError, match=r"state/S: value of shape \(3, 3\)"):
        LabeledVector.zeros(LabeledAxis.from_variables([("state/S", SR2)]), (3,)).set("state/S", torch.zeros(3, 3, dtype=torch.float64))
    with pytest.raises(InputError, match="forces/E: expected a tensor or a number, got list"):
        x.set("forces/E", [0.0] * 6)
    with pytest.raises(InputError, match="no variable or sub-axis 'forces/e'.*did you mean 'forces/E'"):
        x["forces/e"]
    with pytest.raises(InputError, match="'forces' is a sub-axis, not a variable"):
        x["forces"]
    with pytest.raises(InputError, match="'forces/E' is a variable of type SR2, not a sub-axis"):
        x.slice("forces/E")
    with pytest.raises(InputError, match="needs 1 names"):
        x["forces/E", "forces/t"]
    with pytest.raises(InputError, match="set takes 1 name"):
        x.set("forces/E", 1.0, 2.0)
    with pytest.raises(InputError, match="labeled dim 1 out of range"):
        x.slice("forces", dim=1)
    with pytest.raises(InputError, match=r"shape \(3, 5\) does not end in the axis sizes \(\d+,\)"):
        LabeledVector(torch.zeros(3, 5), AXIS)
    with pytest.raises(InputError, match="floating-point data, got dtype torch.int64"):
        LabeledVector(torch.zeros(AXIS.size, dtype=torch.int64), AXIS)
    with pytest.raises(InputError, match="wraps a torch.Tensor, got list"):
        LabeledVector([0.0], AXIS)
    with pytest.raises(InputError, match="one or more LabeledAxis"):
        LabeledTensor(torch.zeros(3))
    with pytest.raises(InputError, match="do not name the 1 batch dims"):
        LabeledVector(torch.zeros(3, AXIS.size), AXIS, ("a", "b"))
    with pytest.raises(InputError, match="bad batch dimension name 'a b'"):
        LabeledVector(torch.zeros(3, AXIS.size), AXIS, ("a b",))
    with pytest.raises(AttributeError, match="use set"):
        x.tensor = torch.zeros(3)
    with pytest.raises(InputError, match="without a copy"):
        LabeledVector(torch.zeros(3, 2, AXIS.size).transpose(0, 1), AXIS).batch_reshape(6)
    with pytest.raises(InputError, match="batch_index takes ints, slices"):
        x.batch_index(torch.tensor([0]))
    with pytest.raises(InputError, match="typed\\(\\) is for labeled vectors"):
        LabeledMatrix.zeros(AXIS, AXIS).typed("forces/E")
    named = TypedTensor(torch.zeros(3, 6, dtype=torch.float64), SR2, ("points",))
    with pytest.raises(InputError, match="forces/E: value has named batch dims \\('points',\\) but .* unnamed"):
        x.set("forces/E", named)


def test_rejected_assembly_names_the_variables():
    with pytest.raises(InputError, match=r"unknown variable\(s\) \['forces/X', 'forces'\]"):
        LabeledVector.from_dict(AXIS, {"forces/X": 1.0, "forces": 1.0})
    with pytest.raises(InputError, match=r"missing value\(s\) for \['forces/t'"):
        LabeledVector.from_dict(AXIS, {"forces/E": torch.zeros(6)})
    with pytest.raises(InputError, match="forces/t: dtype torch.float32 does not match torch.float64"):
        LabeledVector.from_dict(AXIS, {"forces/E": torch.zeros(6, dtype=torch.float64),
                                       "forces/t": torch.zeros((), dtype=torch.float32)}, fill_missing=True)
    with pytest.raises(InputError, match="forces/E: device meta does not match cpu"):
        LabeledVector.from_dict(AXIS, {"forces/E": torch.zeros(6, device="meta")}, fill_missing=True, device="cpu")
    with pytest.raises(InputError, match=r"forces/E: a SR2 tensor needs trailing \(base\) shape \(6,\)"):
        LabeledVector.from_dict(AXIS, {"forces/E": torch.zeros(3, 3)}, fill_missing=True)
    with pytest.raises(InputError, match="forces/E: expected a SR2 value, got a R2 TypedTensor"):
        LabeledVector.from_dict(AXIS, {"forces/E": TypedTensor(torch.zeros(3, 3), R2)}, fill_missing=True)
    with pytest.raises(InputError, match="forces/E: expected a tensor or a number, got str"):
        LabeledVector.from_dict(AXIS, {"forces/E": "0"}, fill_missing=True)
    with pytest.raises(InputError, match=r"batch shapes do not broadcast: forces/E\(2,\), forces/t\(3,\)"):
        LabeledVector.from_dict(AXIS, {"forces/E": torch.zeros(2, 6), "forces/t": torch.zeros(3)}, fill_missing=True)
    with pytest.raises(InputError, match="batch dimension 'points' has size 2 in one operand and 3"):
        LabeledVector.from_dict(AXIS, {"forces/E": TypedTensor(torch.zeros(2, 6), SR2, ("points",)),
                                       "forces/t": TypedTensor(torch.zeros(3), Scalar, ("points",))},
                                fill_missing=True)
    rows = LabeledAxis.from_variables([("S", SR2)])
    with pytest.raises(InputError, match="keyed by \\(row, col\\) names, got 'S'"):
        LabeledMatrix.from_dict(rows, rows, {"S": torch.zeros(6, 6)})
    with pytest.raises(InputError, match="no variable or sub-axis 'T'"):
        LabeledMatrix.from_dict(rows, rows, {("S", "T"): torch.zeros(6, 6)})
    with pytest.raises(InputError, match="block \\(S, S\\): expected a tensor, got float"):
        LabeledMatrix.from_dict(rows, rows, {("S", "S"): 1.0})
    with pytest.raises(InputError, match="block batch shapes do not broadcast"):
        r2 = LabeledAxis.from_variables([("S", SR2), ("p", Scalar)])
        LabeledMatrix.from_dict(r2, r2, {("S", "S"): torch.zeros(2, 6, 6), ("p", "p"): torch.zeros(3)})


def test_remaining_forms():
    x = LabeledVector.zeros(AXIS, (2,))
    x.set("forces/E", TypedTensor(torch.ones(6, dtype=torch.float64), SR2))  # unnamed TypedTensor
    assert (x["forces/E"] == 1).all()
    assert x.device == torch.device("cpu")
    assert repr(x) == f"LabeledVector(batch_shape=(2,), base_shape=({AXIS.size},), torch.float64, cpu)"
    t = LabeledVector(torch.zeros(3, 2, AXIS.size).transpose(0, 1), AXIS)
    c = t.contiguous()
    assert c.tensor.is_contiguous() and c.batch_reshape(6).batch_shape == (6,)
    assert x.batch_expand((3, 2)).batch_shape == (3, 2)
    ax = LabeledAxis([("a", Scalar), ("s", LabeledAxis([("b", SR2)]))])
    assert repr(ax) == "LabeledAxis([('a', Scalar), ('s', LabeledAxis([('b', SR2)]))])"


def test_assembly_and_views_are_differentiable():
    """Calibration needs gradients through assembly and typed views (autograd as the oracle)."""
    E = torch.tensor([2.0, 3.0], dtype=torch.float64, requires_grad=True)
    eps = rand(gen(2), 2, 6).requires_grad_(True)
    ax = LabeledAxis.from_variables([("E", Scalar), ("eps", SR2)])
    x = LabeledVector.from_dict(ax, {"E": E, "eps": eps})
    (x["E"][:, None] * x["eps"] ** 2).sum().backward()
    torch.testing.assert_close(E.grad, (eps ** 2).sum(-1).detach())
    torch.testing.assert_close(eps.grad, (2 * E[:, None] * eps).detach())
