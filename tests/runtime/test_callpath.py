"""The call path: ``out=`` (an earlier result written in place), inputs read where they lie
(broadcast and strided inputs, no packing), and clear errors with nothing written on a mismatch.
Oracles: the same call with fresh outputs (bit-identical), and the generated PyTorch code."""
from __future__ import annotations

import math

import pytest
import torch

from modelc.errors import InputError
from modelc.runtime.model import interpreting
from rt_helpers import HAVE_CC, IN_CI

BACKENDS = ("c", "torch") if HAVE_CC or IN_CI else ("torch",)
if interpreting():  # the Triton kernels on CPU tensors (tests/conftest.py); on a GPU: the tests below
    BACKENDS += ("triton",)
KERNELS = tuple(b for b in BACKENDS if b != "torch")  # the backends that read inputs where they lie


@pytest.fixture(scope="module")
def mods():
    from modelc.generated import elastic, j2_voce_af  # implicit: results carry a status

    return {"plastic": j2_voce_af, "elastic": elastic}


def _inputs(m, bs, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name in m.input_axis.variable_names:
        t = m.input_axis.type_of(name)
        if name == "forces/t":
            out[name] = torch.ones(bs, dtype=dtype)
        elif name.startswith("old_"):
            out[name] = torch.zeros(*bs, *t.base_shape, dtype=dtype)
        else:
            out[name] = 2e-3 * torch.randn(*bs, *t.base_shape, generator=g, dtype=dtype)
    return out


def _equal(a, b):
    """Equal values, NaN where the other has NaN (a failed point's outputs are NaN)."""
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def _same(a, b):
    _equal(a.outputs.tensor, b.outputs.tensor)
    assert (a._jacobian is None) == (b._jacobian is None)
    if a._jacobian is not None:
        _equal(a.jacobian.tensor, b.jacobian.tensor)
    if a.status is not None:
        for f in ("converged", "iterations", "residual_norm"):
            _equal(getattr(a.status, f), getattr(b.status, f))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("derivatives", [False, "tangent", True, [("state/S", "forces/E")]])
def test_out_writes_in_place_and_equals_fresh(mods, backend, derivatives):
    m = mods["plastic"].Model(backend=backend)
    first = m(_inputs(m, (5, 7), 1), derivatives=derivatives)
    ptrs = [first.outputs.tensor.data_ptr(), first.status.converged.data_ptr()]
    if derivatives:
        ptrs.append(first.jacobian.tensor.data_ptr())
    first.outputs.tensor.fill_(math.nan)  # poisoned: every entry must be written again
    if derivatives:
        first.jacobian.tensor.fill_(math.nan)
    x = _inputs(m, (5, 7), 2)
    again = m(x, derivatives=derivatives, out=first)
    assert again is first
    assert [first.outputs.tensor.data_ptr(), first.status.converged.data_ptr()] + (
        [first.jacobian.tensor.data_ptr()] if derivatives else []) == ptrs
    _same(first, m(x, derivatives=derivatives))
    assert bool((first.status.iterations >= 1).any())  # plastic points: the Newton ran


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_with_a_broadcast_constant_jacobian(mods, backend):
    """elastic: the Jacobian depends on the parameters only and comes back broadcast (stride 0); out=
    writes its one point (shared parameters) or the whole block (per-point parameters)."""
    m = mods["elastic"].Model(backend=backend)
    x = _inputs(m, (9,), 3)
    first = m(x, derivatives=True)
    assert first.jacobian.tensor.stride(0) == 0
    again = m(_inputs(m, (9,), 4), derivatives=True, out=first)
    _same(again, m(_inputs(m, (9,), 4), derivatives=True))
    E = torch.linspace(1e5, 2e5, 9, dtype=torch.float64)
    full = m(x, derivatives=True, E=E)
    assert full.jacobian.tensor.stride(0) != 0
    full.jacobian.tensor.fill_(math.nan)
    m(x, derivatives=True, out=full)  # shared parameters into a full buffer
    _same(full, m(x, derivatives=True))


@pytest.mark.parametrize("backend", KERNELS)
def test_inputs_are_read_where_they_lie(mods, backend, monkeypatch):
    """A broadcast input (stride 0), a strided view of a wider tensor and a 2-d batch give the same
    numbers as contiguous copies; the C and Triton calls pack nothing (no (B, nx) buffer is made)
    and leave the NaN/infinity check to the kernel (no reduction and no host round trip per input)."""
    from modelc.runtime import callpath, model as runtime_model

    m = mods["plastic"].Model(backend=backend)

    def refused(*a, **k):
        raise AssertionError("the call packed its inputs or checked them on the host")

    monkeypatch.setattr(callpath, "pack", refused)
    monkeypatch.setattr(runtime_model, "nonfinite_rows", refused)
    x = _inputs(m, (6, 4), 5)
    wide = torch.randn(6, 4, 10, dtype=torch.float64)
    wide[..., 2:8] = x["forces/E"]
    x2 = dict(x, **{"forces/E": wide[..., 2:8], "forces/t": torch.tensor(1.0, dtype=torch.float64)})
    views, bs = callpath.input_views(m, x2)
    assert views[m.input_axis.variable_names.index("forces/E")].data_ptr() == wide[..., 2:8].data_ptr()
    assert views[m.input_axis.variable_names.index("forces/t")].stride(0) == 0
    want = m({k: v.contiguous() if k != "forces/t" else torch.ones(6, 4, dtype=torch.float64)
              for k, v in x2.items()}, derivatives="tangent")
    _same(m(x2, derivatives="tangent"), want)
    monkeypatch.undo()  # the PyTorch function takes its inputs packed
    ref = mods["plastic"].Model(backend="torch")(x2, derivatives="tangent")
    assert float((want.outputs.tensor - ref.outputs.tensor).abs().max()) <= 1e-10 * float(
        ref.outputs.tensor.abs().max())


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_mismatch_is_a_clear_error_and_writes_nothing(mods, backend):
    m = mods["plastic"].Model(backend=backend)
    x = _inputs(m, (8,), 6)
    res = m(x, derivatives="tangent")
    before = [res.outputs.tensor.clone(), res.jacobian.tensor.clone(), res.status.converged.clone()]
    other = _inputs(m, (8,), 7)

    def unchanged():
        after = [res.outputs.tensor, res.jacobian.tensor, res.status.converged]
        assert all(torch.equal(a, b) for a, b in zip(before, after))

    cases = [
        (dict(inputs=_inputs(m, (9,), 7)), "shape"),
        (dict(inputs=other, derivatives=False), "with derivatives"),
        (dict(inputs=other, derivatives=True), "other rows or columns"),
        (dict(inputs=other, out_model=mods["elastic"].Model(backend=backend)), "result of model"),
        (dict(inputs=other, out_obj=res.outputs), "must be the result"),
    ]
    for kw, match in cases:
        target = kw.get("out_obj", res)
        if "out_model" in kw:
            e = kw["out_model"]
            target = e(_inputs(e, (8,), 1), derivatives=True)
        with pytest.raises(InputError, match=match):
            m(kw["inputs"], derivatives=kw.get("derivatives", "tangent"), out=target)
        unchanged()
    m32 = mods["plastic"].Model(backend=backend, dtype=torch.float32)
    with pytest.raises(InputError, match="dtype"):
        m32(_inputs(m32, (8,), 7, torch.float32), derivatives="tangent", out=res)
    unchanged()
    meta = mods["plastic"].Model(backend="torch", device="meta") if backend == "torch" else None
    if meta is not None:
        with pytest.raises(InputError, match="device|on meta|on cpu"):
            meta({k: v.to("meta") for k, v in other.items()}, derivatives="tangent", out=res)
        unchanged()


def test_a_module_older_than_the_triton_calling_convention_is_refused(mods):
    """A module generated before the kernel read its inputs where they lie (TRITON_ABI 1) would be
    launched with the wrong arguments: the Triton backend refuses it by name, with the fix."""
    old = type("Model", (mods["elastic"].Model,), {"TRITON_ABI": 1})
    with pytest.raises(InputError, match=r"elastic: its generated module predates .* regenerate it with `modelc compile`"):
        old(backend="triton")
    assert old(backend="torch")({"forces/E": torch.zeros(2, 6, dtype=torch.float64)}).outputs.tensor.shape == (2, 6)


# --------------------------------------------------------------------------------------------------
# On a GPU: the same call path with compiled kernels (a GPU machine runs these with
# MODELC_TEST_DEVICE=cuda, benchmarks/gpu_session.sh; here they are skipped, and the tests above run
# the Triton path under the interpreter)
# --------------------------------------------------------------------------------------------------
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available() or interpreting(), reason="needs a CUDA device and compiled Triton kernels "
                               "(MODELC_TEST_DEVICE=cuda)")


def _cuda_inputs(m, B, seed):
    return {k: v.to(device="cuda", dtype=m.dtype) for k, v in _inputs(m, (B,), seed).items()}


@needs_gpu
@pytest.mark.parametrize("name", ["j2_perfect", "perzyna_iso", "elastic"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cuda_triton_call_does_not_synchronise(name, dtype):
    """After the first call (which compiles), a call with fresh outputs, with out= or bound makes no
    synchronising CUDA call (torch's sync debug mode raises on one); the numbers are the PyTorch
    backend's on the same GPU."""
    import importlib

    mod = importlib.import_module(f"modelc.generated.{name}")
    m = mod.Model(dtype=dtype, device="cuda", backend="triton")
    x = _cuda_inputs(m, 1000, 1)
    first = m(x, derivatives="tangent")  # compiles
    m(x)
    bound = m.bind(x, "tangent")
    assert bound.fast == ("tangent" not in m.CONSTANT_JACOBIAN)  # (elastic's: the regular call, broadcast)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        r = m(x, derivatives="tangent")
        m(x, derivatives="tangent", out=first)
        v = m(x)
        bound()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    _same(bound.result, r)
    ref = mod.Model(dtype=dtype, device="cuda", backend="torch")(x, derivatives="tangent")
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for got in (r, first):
        scale = float(ref.outputs.tensor.abs().max())
        assert float((got.outputs.tensor - ref.outputs.tensor).abs().max()) <= tol * scale
        jscale = float(ref.jacobian.tensor.abs().max())
        assert float((got.jacobian.tensor - ref.jacobian.tensor).abs().max()) <= tol * jscale
    assert torch.equal(v.outputs.tensor, r.outputs.tensor)
    if r.status is not None:
        assert bool(r.status.converged.all())


@needs_gpu
def test_cuda_triton_fails_non_finite_inputs_in_the_kernel():
    """A NaN or an infinite input fails its point only (NaN outputs, not converged), without a
    host-side check."""
    from modelc.generated import perzyna_iso

    m = perzyna_iso.Model(device="cuda", backend="triton")
    x = _cuda_inputs(m, 64, 2)
    x["forces/E"][5, 1] = math.nan
    x["old_state/internal/ep"][9] = math.inf
    r = m(x, derivatives="tangent")
    bad = torch.zeros(64, dtype=torch.bool, device="cuda")
    bad[[5, 9]] = True
    assert torch.equal(~r.status.converged, bad)
    assert bool(r["state/S"][bad].isnan().all()) and bool(r.jacobian.tensor[bad].isnan().all())
    assert bool(r["state/S"][~bad].isfinite().all())


def test_an_input_on_another_cuda_device_is_refused(mods, monkeypatch):
    """Devices are compared with their index: for a model on cuda:0 (or "cuda", the current
    device), an input on cuda:1 is refused with the devices named; cuda:0 and "cuda" are one device
    while cuda:0 is current. Checked without a GPU (the check reads only dtype and device)."""
    from types import SimpleNamespace

    from modelc.runtime import callpath

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    dev = torch.device
    assert callpath.same_device(dev("cuda", 0), dev("cuda")) and callpath.same_device(dev("cuda"), dev("cuda", 0))
    assert not callpath.same_device(dev("cuda", 1), dev("cuda", 0))
    assert not callpath.same_device(dev("cuda", 1), dev("cuda")) and not callpath.same_device(dev("cpu"), dev("cuda"))
    m = mods["elastic"].Model(backend="torch")
    for model_dev in (dev("cuda", 0), dev("cuda")):
        m.device = model_dev
        m._check_tensor("input forces/E", SimpleNamespace(dtype=m.dtype, device=dev("cuda", 0)))
        with pytest.raises(InputError, match=r"input forces/E is on cuda:1, the model on cuda"):
            m._check_tensor("input forces/E", SimpleNamespace(dtype=m.dtype, device=dev("cuda", 1)))


# -- planned calls: a call with inputs of a kind checked before goes straight to the C kernel ----------
PLANNED = KERNELS  # the C backend, and the Triton kernels (under the interpreter here, or on a GPU)


def _regular(m, x, derivatives, **params):
    """The same call through the checked path (a ``solver=`` argument, even empty, takes it)."""
    return m(x, derivatives=derivatives, solver={}, **params)


def _no_checks(monkeypatch):
    """Make the checked path's input handling fail loudly: a planned call must not reach it."""
    from modelc.runtime import callpath

    def refused(*a, **k):
        raise AssertionError("a planned call went through input_views")

    monkeypatch.setattr(callpath, "input_views", refused)


@pytest.mark.parametrize("backend", PLANNED)
@pytest.mark.parametrize("derivatives", [False, "tangent", True, "total"])
@pytest.mark.parametrize("bs", [(7,), (3, 5)])
def test_a_planned_call_equals_the_checked_call(mods, backend, derivatives, bs, monkeypatch):
    """The second call with inputs of the same kind (shapes, strides, dtype) runs from the plan the
    first one left: fresh values every call (nothing of the first call's data is kept), the same bits
    as the checked path, and within 1e-10 of the generated PyTorch code (an independent printer)."""
    m = mods["plastic"].Model(backend=backend)
    m(_inputs(m, bs, 20), derivatives=derivatives)
    assert [p for p in m._plans.values() if p is not None], "the first call left no plan"
    ref_model = mods["plastic"].Model(backend="torch")
    for seed in (21, 22):
        x = _inputs(m, bs, seed)
        x["old_state/internal/ep"] = 1e-3 * torch.rand(bs, generator=torch.Generator().manual_seed(seed),
                                                       dtype=torch.float64)
        with monkeypatch.context() as mp:
            _no_checks(mp)
            got = m(x, derivatives=derivatives)
        _same(got, _regular(m, x, derivatives))
        assert got.outputs.batch_shape == torch.Size(bs) and got.producer == (m.NAME, m.SPEC_HASH)
        ref = ref_model(x, derivatives=derivatives)
        assert torch.allclose(got.outputs.tensor, ref.outputs.tensor, rtol=1e-10, atol=1e-12)
        if derivatives:
            assert got.jacobian.row_axis == ref.jacobian.row_axis and got.jacobian.col_axis == ref.jacobian.col_axis
            assert torch.allclose(got.jacobian.tensor, ref.jacobian.tensor, rtol=1e-9, atol=1e-9)
        assert bool(got.status.converged.all()) and int(got.status.iterations.max()) > 0  # plastic points
    # into out= (the transient driver's and double-buffering hosts' call): planned as well, written in
    # place, the same bits; a result of another batch shape is the regular call's error, nothing written
    target = m(_inputs(m, bs, 23), derivatives=derivatives)
    wrong = m(_inputs(m, (2,), 24), derivatives=derivatives)
    before = wrong.outputs.tensor.clone()
    with monkeypatch.context() as mp:
        _no_checks(mp)
        assert m(x, derivatives=derivatives, out=target) is target
        _same(target, got)
        with pytest.raises(InputError, match="shape"):
            m(x, derivatives=derivatives, out=wrong)
    _equal(wrong.outputs.tensor, before)


@pytest.mark.parametrize("backend", PLANNED)
def test_planned_calls_take_parameter_overrides(mods, backend, monkeypatch):
    """Overrides (a number, a shared tensor, one value per point) ride on the plan: written over a
    copy of the model's own parameter row, fresh values every call, the same bits as the checked
    path and as a model built with those values; a bad override is the checked path's error; an
    override that requires grad makes a result that back-propagates (the regular path)."""
    m = mods["plastic"].Model(backend=backend)
    m(_inputs(m, (6,), 50), derivatives="tangent", sigma_y=300.0)
    g = torch.Generator().manual_seed(51)
    for seed in (52, 53):
        x = _inputs(m, (6,), seed)
        per_point = 150.0 + 200.0 * torch.rand(6, generator=g, dtype=torch.float64)
        C = torch.tensor(float(1e4 + 3e4 * torch.rand(1, generator=g)), dtype=torch.float64)
        with monkeypatch.context() as mp:
            _no_checks(mp)
            got = m(x, derivatives="tangent", sigma_y=per_point, C=C)
            number = m(x, derivatives="tangent", sigma_y=float(per_point[0]))
        _same(got, _regular(m, x, "tangent", sigma_y=per_point, C=C))
        # (a model given the tensors builds its row from them at each call: not the override path)
        _same(got, mods["plastic"].Model(backend=backend, sigma_y=per_point, C=C)(x, derivatives="tangent"))
        _same(number, mods["plastic"].Model(backend=backend, sigma_y=float(per_point[0]))(x, derivatives="tangent"))
        assert int(got.status.iterations.max()) > 0
    with monkeypatch.context() as mp:
        _no_checks(mp)
        with pytest.raises(InputError, match=r"parameter sigma_y = nan \(at index \(2,\)\) is not finite"):
            m(x, derivatives="tangent", sigma_y=torch.tensor([1.0, 2, math.nan, 4, 5, 6], dtype=torch.float64))
        with pytest.raises(InputError, match="does not broadcast"):
            m(x, derivatives="tangent", sigma_y=torch.ones(4, dtype=torch.float64))
        with pytest.raises(InputError, match="unknown parameter"):
            m(x, derivatives="tangent", sigma_z=1.0)
    sy = torch.tensor(250.0, dtype=torch.float64, requires_grad=True)
    out = m(x, derivatives="tangent", sigma_y=sy)
    assert out["state/S"].grad_fn is not None


@pytest.mark.parametrize("backend", PLANNED)
def test_planned_inputs_are_read_where_they_lie(mods, backend, monkeypatch):
    """A strided view of a wider tensor and a broadcast scalar are planned with their row strides
    (offset and stride 0): the planned call reads the new tensors' data, not the first call's."""
    m = mods["plastic"].Model(backend=backend)

    def kind(seed):
        x = _inputs(m, (9,), seed)
        wide = torch.randn(9, 10, dtype=torch.float64)
        wide[:, 3:9] = x["forces/E"]
        return dict(x, **{"forces/E": wide[:, 3:9], "forces/t": torch.tensor(1.0, dtype=torch.float64).expand(9)})

    m(kind(30), derivatives="tangent")
    x = kind(31)
    with monkeypatch.context() as mp:
        _no_checks(mp)
        got = m(x, derivatives="tangent")
    _same(got, _regular(m, {k: v.contiguous() for k, v in x.items()}, "tangent"))


@pytest.mark.parametrize("backend", PLANNED)
def test_what_a_plan_cannot_serve_takes_the_checked_path(mods, backend):
    """Each of these second calls differs from the planned kind (or the plan cannot serve it) and
    must give what the checked path gives, errors included: inputs that require grad (a result
    that back-propagates), another dtype (the checked path's error), a missing input, a number
    input, components that are not contiguous (read from a copy: no plan), a block of the
    Jacobian (no plan), and parameters changed in place since the plan was made."""
    m = mods["plastic"].Model(backend=backend)
    x = _inputs(m, (6,), 40)
    m(x, derivatives="tangent")
    g = {k: v.clone().requires_grad_(k == "forces/E") for k, v in x.items()}
    out = m(g, derivatives="tangent")
    assert out["state/S"].grad_fn is not None
    with pytest.raises(InputError, match="dtype|float32"):
        m({k: v.float() for k, v in x.items()}, derivatives="tangent")
    with pytest.raises(InputError, match="missing input"):
        m({k: v for k, v in x.items() if k != "forces/t"}, derivatives="tangent")
    _same(m(dict(x, **{"forces/t": 1.0}), derivatives="tangent"),
          _regular(m, dict(x, **{"forces/t": torch.ones(6, dtype=torch.float64)}), "tangent"))
    odd = dict(x, **{"forces/E": x["forces/E"].t().contiguous().t()})  # column-major: a copy is read
    m(odd, derivatives="tangent")
    _same(m(odd, derivatives="tangent"), _regular(m, x, "tangent"))
    block = [("state/S", "forces/E")] if m.TANGENT is None else [("state/internal/ep", "forces/E")]
    m(x, derivatives=block)
    _same(m(x, derivatives=block), _regular(m, x, block))
    assert any(p is None for p in m._plans.values())  # the copy's kind and the block: not planned
    fresh = m(x, derivatives="tangent")
    m.params.sigma_y.mul_(1.5)  # in place: the parameter row is rebuilt, the plan still serves
    changed = m(x, derivatives="tangent")
    assert not torch.equal(changed.outputs.tensor, fresh.outputs.tensor)
    _same(changed, mods["plastic"].Model(backend=backend, sigma_y=float(m.params.sigma_y))(x, derivatives="tangent"))


@pytest.mark.parametrize("backend", PLANNED)
def test_planned_calls_fail_non_finite_points_and_sub_step(mods, backend, monkeypatch):
    """A NaN input in a planned call fails that point in the kernel (NaN outputs, not converged),
    the others untouched; with ``on_failure="substep"`` a planned call whose points did not
    converge is redone by the checked path, which sub-steps them (as a first call would)."""
    m = mods["plastic"].Model(backend=backend)
    x = _inputs(m, (5,), 50)
    m(x, derivatives="tangent")
    bad = dict(x, **{"forces/E": x["forces/E"].clone()})
    bad["forces/E"][2, 1] = math.nan
    with monkeypatch.context() as mp:
        _no_checks(mp)
        got = m(bad, derivatives="tangent")
    assert got.status.converged.tolist() == [True, True, False, True, True]
    assert bool(got.outputs.tensor[2].isnan().all()) and bool(got.jacobian.tensor[2].isnan().all())
    _same(got, _regular(m, bad, "tangent"))
    s = mods["plastic"].Model(backend=backend, on_failure="substep")
    hard = dict(x, **{"forces/E": 40 * x["forces/E"]})
    old = {"forces/E": torch.zeros_like(x["forces/E"])}
    first = s(hard, derivatives="tangent", solver={"max_iter": 2}, old_forces=old)  # checked, few iterations
    s.set_solver(max_iter=2)
    s(hard, derivatives="tangent", old_forces=old)
    assert [p for p in s._plans.values() if p is not None]
    ran = []
    run_plan = s._run_plan
    monkeypatch.setattr(s, "_run_plan", lambda *a: ran.append(run_plan(*a)) or ran[-1])
    again = s(hard, derivatives="tangent", old_forces=old)  # planned; redone by the checked path
    assert ran == [None]  # the plan ran, saw the failed points and left the call to the checked path
    assert first.status.substeps is not None and int(first.status.substeps.max()) > 1
    _same(again, first)
    assert torch.equal(again.status.substeps, first.status.substeps)


@pytest.mark.parametrize("backend", PLANNED)
def test_a_planned_constant_jacobian_is_computed_once_and_broadcast(mods, backend, monkeypatch):
    """Linear elasticity (an affine model: its kernel leaves NaN to propagate, its Jacobian depends
    on the parameters only) is planned too: the outputs of every point, the Jacobian of one point
    broadcast over the batch (stride 0), bit for bit the checked path's, into fresh buffers and into
    ``out=`` (a broadcast one and a full one); a NaN input gives NaN outputs at that point only."""
    m = mods["elastic"].Model(backend=backend)
    bs = (9,)
    m(_inputs(m, bs, 60), derivatives=True)
    x = _inputs(m, bs, 61)
    x["forces/E"][4, 2] = math.nan
    with monkeypatch.context() as mp:
        _no_checks(mp)
        got = m(x, derivatives=True)
    want = _regular(m, x, True)
    _same(got, want)
    assert got.jacobian.tensor.stride(0) == 0 and bool(got.jacobian.tensor.isfinite().all())
    assert bool(got.outputs.tensor[4].isnan().any()) and bool(got.outputs.tensor[[0, 1, 2, 3, 5, 6, 7, 8]].isfinite().all())
    E = m.params.E.item()
    assert math.isclose(float(got.jacobian["state/S", "forces/E"][0, 3, 3]), E / (1 + m.params.nu.item()), rel_tol=1e-12)
    full = m(x, derivatives=True)
    full._jacobian = type(full._jacobian).trusted(full.jacobian.tensor.clone(), (full.jacobian.row_axis, full.jacobian.col_axis))
    for target in (m(_inputs(m, bs, 62), derivatives=True), full):
        with monkeypatch.context() as mp:
            _no_checks(mp)
            assert m(x, derivatives=True, out=target) is target
        _same(target, want)
