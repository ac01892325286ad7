"""Bound calls (``model.bind``): ``bound()`` re-evaluates on the tensors given at bind time, whatever
they hold now, into one result. Oracle: the regular call on the same tensors (bit-identical), after
in-place changes of the inputs, the parameters and the Newton options; NaN inputs fail their points;
inputs that cannot be read in place, and the PyTorch backend, take the regular path. The C and Triton
backends take the fast path (Triton: under the interpreter here)."""
from __future__ import annotations

import math

import pytest
import torch

from modelc.runtime import cbuild
from test_callpath import BACKENDS, KERNELS, _inputs, mods  # noqa: F401


def _same(a, b):
    """Bit-identical results, NaN (failed points) included."""
    pairs = [(a.outputs.tensor, b.outputs.tensor)]
    if a._jacobian is not None or b._jacobian is not None:
        pairs.append((a.jacobian.tensor, b.jacobian.tensor))
    if a.status is not None:
        pairs += [(getattr(a.status, f), getattr(b.status, f)) for f in ("converged", "iterations", "residual_norm")]
    for x, y in pairs:
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bound_call_sees_inplace_changes(mods, backend):
    m = mods["plastic"].Model(backend=backend)
    inputs = _inputs(m, (37,), seed=3)
    bound = m.bind(inputs, "tangent")
    assert bound.fast == (backend in KERNELS)
    g = torch.Generator().manual_seed(4)
    for step in range(3):  # a strain history written into the same tensors
        inputs["forces/E"].add_(1e-3 * torch.randn(inputs["forces/E"].shape, generator=g, dtype=torch.float64))
        got = bound()
        assert got is bound.result
        want = m(inputs, "tangent")
        _same(got, want)
        assert bool((want.status.iterations >= 1).any())  # some points flow
        inputs["old_state/internal/ep"].copy_(want["state/internal/ep"])


@pytest.mark.parametrize("backend", KERNELS)
def test_bound_call_follows_parameters_and_solver_options(mods, backend):
    m = mods["plastic"].Model(backend=backend)
    inputs = _inputs(m, (20,), seed=5)
    inputs["forces/E"].mul_(3)
    bound = m.bind(inputs, True)
    assert bound.fast
    m.set_parameters(sigma_y=50.0)
    _same(bound(), m(inputs, True))
    m.set_solver(max_iter=1)
    got = bound()
    want = m(inputs, True)
    _same(got, want)
    assert not bool(want.status.converged.all())  # one iteration is not enough somewhere
    m.set_solver(max_iter=None)
    _same(bound(), m(inputs, True))
    assert bool(bound.result.status.converged.all())


@pytest.mark.parametrize("backend", KERNELS)
def test_bound_call_fails_nan_points(mods, backend):
    m = mods["plastic"].Model(backend=backend)
    inputs = _inputs(m, (11,), seed=6)
    bound = m.bind(inputs, "tangent")
    inputs["forces/E"][4, 2] = math.nan
    r = bound()
    assert r.outputs.tensor[4].isnan().all() and r.jacobian.tensor[4].isnan().all()
    assert not bool(r.status.converged[4]) and bool(r.status.converged[torch.arange(11) != 4].all())
    _same(r, m(inputs, "tangent"))


@pytest.mark.skipif("c" not in BACKENDS, reason="needs a C compiler")
def test_inputs_copied_by_the_call_take_the_regular_path(mods):
    m = mods["plastic"].Model(backend="c")
    inputs = _inputs(m, (9,), seed=7)
    inputs["forces/E"] = inputs["forces/E"].t().contiguous().t()  # components not contiguous: copied
    bound = m.bind(inputs, "tangent")
    assert not bound.fast
    inputs["forces/E"].mul_(2)
    _same(bound(), m(inputs, "tangent"))


@pytest.mark.skipif("c" not in BACKENDS, reason="needs a C compiler")
def test_bind_checks_like_a_call(mods):
    from modelc.errors import InputError

    m = mods["plastic"].Model(backend="c")
    inputs = _inputs(m, (4,), seed=8)
    del inputs["forces/E"]
    with pytest.raises(InputError, match="forces/E"):
        m.bind(inputs, "tangent")
    with pytest.raises(InputError, match="max_iter"):
        m.bind(_inputs(m, (4,), seed=8), "tangent", solver={"max_iter": -1})


@pytest.mark.skipif("c" not in BACKENDS, reason="needs a C compiler")
def test_bound_call_follows_grad_requested_after_bind(mods):
    """An input that requires grad after bind: bound() is the regular call through autograd (a new
    result; a gradient reaches the input), with the same numbers as a fresh call."""
    m = mods["plastic"].Model(backend="c")
    inputs = _inputs(m, (6,), seed=9)
    inputs["forces/E"].mul_(3)
    bound = m.bind(inputs, False)
    assert bound.fast
    inputs["forces/E"].requires_grad_(True)
    got = bound()
    assert got is not bound.result
    want = m(inputs)
    torch.testing.assert_close(got["state/S"], want["state/S"], rtol=0, atol=0)
    got["state/S"].sum().backward()
    assert inputs["forces/E"].grad is not None and bool(inputs["forces/E"].grad.abs().sum() > 0)
