"""The differentiable driver's history as one autograd node (modelc.runtime.history_adjoint): the
values are the per-step path's bit for bit and the gradients agree with it to round-off (the
oracle: ``simulate`` with ``history_adjoint.applies`` patched to refuse, which builds one node per
step), for parameters shared and per point, a trainable parameter of the model, the initial state,
several outputs in the loss, an explicit model, on every backend; a run in which a point fails is
the per-step path's; a second derivative is refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from modelc.errors import InputError
from modelc.runtime import history_adjoint
from modelc.runtime.history_grad import simulate
from modelc.runtime.model import interpreting
from rt_helpers import HAVE_CC, IN_CI

BACKENDS = ("c", "torch") if HAVE_CC or IN_CI else ("torch",)
if interpreting():  # the Triton kernels on CPU tensors (tests/conftest.py)
    BACKENDS += ("triton",)


def _history(rng, steps=12, batch=3, scale=2e-3):
    strain = np.zeros((steps, batch, 6))
    strain[1:] = np.cumsum(rng.normal(scale=scale, size=(steps - 1, batch, 6)), axis=0)
    time = np.cumsum(rng.uniform(0.1, 1.0, size=(steps, batch)), axis=0)
    return {"time": time, "strain": strain}


def _both(monkeypatch, model, hist, leaves: dict, loss, **kw):
    """(one node, per step): each a pair (outputs, gradients of ``loss`` by ``leaves``); ``served``
    lists what ``run`` returned (None: it handed the run to the per-step path); on the C backend
    steps 2 .. must have run on the entry point directly (``_Direct``)."""
    served, direct = [], []
    run = history_adjoint.run
    monkeypatch.setattr(history_adjoint, "run", lambda *a, **k: served.append(run(*a, **k)) or served[-1])
    make = history_adjoint._Direct.make.__func__
    monkeypatch.setattr(history_adjoint._Direct, "make",
                        classmethod(lambda cls, *a: direct.append(make(cls, *a)) or direct[-1]))
    out = []
    for refuse in (False, True):
        for v in leaves.values():
            v.grad = None
        with monkeypatch.context() as mp:
            if refuse:
                mp.setattr(history_adjoint, "applies", lambda *a: False)
            r = simulate(model, hist, **kw)
            loss(r).backward()
        out.append((r, {k: v.grad.clone() for k, v in leaves.items()}))
    if served and served[0] is not None and len(hist["time"]) > 4:
        assert (direct[0] is not None) == (model.backend == "c")
    return out[0], out[1], served


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_node_equals_the_per_step_graph(monkeypatch, backend):
    from modelc.generated import j2_voce_af

    rng = np.random.default_rng()
    hist = _history(rng)
    model = j2_voce_af.Model(backend=backend).trainable("g")
    sy = torch.tensor(110.0, dtype=torch.float64, requires_grad=True)
    C = torch.tensor(rng.uniform(8e3, 12e3, size=3), dtype=torch.float64, requires_grad=True)  # per point
    X0 = torch.tensor(rng.normal(scale=5.0, size=(3, 6)), dtype=torch.float64, requires_grad=True)
    w = torch.as_tensor(rng.normal(size=(12, 3, 6)))
    leaves = {"sigma_y": sy, "C": C, "X0": X0, "g": model.params.g}

    def loss(r):
        return (r["state/S"] * w).sum() + 1e4 * r["state/internal/ep"].sum()

    (fast, gf), (slow, gs), served = _both(monkeypatch, model, hist, leaves, loss, params={"sigma_y": sy, "C": C},
                                           initial_state={"state/internal/X": X0})
    assert served and served[0] is not None, "the history ran as one node"
    for k in slow:
        assert torch.equal(fast[k].detach(), slow[k].detach()), k
    assert float(fast["state/internal/ep"].max()) > 0  # plastic
    for k in leaves:
        torch.testing.assert_close(gf[k], gs[k], rtol=1e-11, atol=1e-12 * float(gs[k].abs().max()), msg=k)
        assert float(gs[k].abs().max()) > 0, k


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_population_over_a_named_dim(monkeypatch, backend):
    """Parameters over a named ``samples`` dim (how the calibration example fits several materials
    in one run): outputs (steps, points, samples, ...), each sample's gradient its own, the
    initial state's summed over the samples, as the per-step path gives them."""
    from modelc.generated import perzyna_iso
    from modelc.runtime.tensors import TypedTensor

    rng = np.random.default_rng()
    hist = _history(rng, steps=10, batch=3)
    sy = torch.tensor(rng.uniform(80.0, 120.0, size=4), dtype=torch.float64, requires_grad=True)
    K = torch.tensor(2000.0, dtype=torch.float64, requires_grad=True)
    Ep0 = torch.tensor(rng.normal(scale=1e-4, size=(3, 6)), dtype=torch.float64, requires_grad=True)
    w = torch.as_tensor(rng.normal(size=(10, 3, 4, 6)))
    (fast, gf), (slow, gs), served = _both(
        monkeypatch, perzyna_iso.Model(backend=backend), hist, {"sy": sy, "K": K, "Ep0": Ep0},
        lambda r: (r["state/S"] * w).sum(),
        params={"sigma_y": TypedTensor(sy, "Scalar", batch_names=("samples",)), "K": K},
        initial_state={"state/internal/Ep": Ep0})
    assert served[0] is not None and fast["state/S"].shape == (10, 3, 4, 6)
    for k in slow:
        assert torch.equal(fast[k].detach(), slow[k].detach()), k
    for k in gs:
        torch.testing.assert_close(gf[k], gs[k], rtol=1e-11, atol=1e-12 * float(gs[k].abs().max()), msg=k)
        assert float(gs[k].abs().min()) > 0, k


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_explicit_model_and_a_gradient_by_one_output(monkeypatch, backend):
    from modelc.generated import elastic

    rng = np.random.default_rng()
    hist = _history(rng, steps=6, batch=4)
    E = torch.tensor(2e5, dtype=torch.float64, requires_grad=True)
    (fast, gf), (slow, gs), served = _both(monkeypatch, elastic.Model(backend=backend), hist, {"E": E},
                                           lambda r: r["state/S"][3, 1, 0], params={"E": E})
    assert served[0] is not None
    assert torch.equal(fast["state/S"].detach(), slow["state/S"].detach())
    torch.testing.assert_close(gf["E"], gs["E"], rtol=1e-12, atol=0)
    # the closed form: S = E/(1+nu) (eps + nu/(1-2nu) tr(eps) I): d S_xx / d E = S_xx / E
    torch.testing.assert_close(gf["E"], fast["state/S"][3, 1, 0].detach() / 2e5, rtol=1e-12, atol=0)


def test_a_run_in_which_a_point_fails_is_the_per_step_paths(monkeypatch):
    from modelc.generated import j2_voce_af

    rng = np.random.default_rng()
    hist = _history(rng, steps=8, batch=3)
    hist["strain"][5:, 1] += 0.05  # a jump the Newton cannot take in one iteration
    model = j2_voce_af.Model(backend="torch")
    model.set_solver(max_iter=2)
    sy = torch.tensor(100.0, dtype=torch.float64, requires_grad=True)
    (fast, gf), (slow, gs), served = _both(monkeypatch, model, hist, {"sy": sy},
                                           lambda r: r["state/S"].nan_to_num().sum(), params={"sigma_y": sy})
    assert served == [None] and not bool(fast["converged"].all())
    for k in slow:
        torch.testing.assert_close(fast[k].detach(), slow[k].detach(), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(gf["sy"], gs["sy"], rtol=0, atol=0, equal_nan=True)


def test_second_derivatives_are_refused():
    from modelc.generated import j2_linear_iso

    hist = _history(np.random.default_rng(), steps=5, batch=2)
    sy = torch.tensor(100.0, dtype=torch.float64, requires_grad=True)
    r = simulate(j2_linear_iso.Model(backend="torch"), hist, params={"sigma_y": sy})
    (g,) = torch.autograd.grad(r["state/S"].sum(), sy, create_graph=True)
    with pytest.raises(InputError, match="first derivatives only"):
        g.backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_keeps_no_jacobian_and_computes_it_again(monkeypatch, backend):
    """With ``checkpoint=`` the one node keeps no Jacobian (saved tensors: the leaves only) and the
    backward computes each step's again from the recorded outputs: the same gradient as keeping
    them (bit for bit) and as the per-step checkpointed graph (to round-off)."""
    from modelc.generated import j2_linear_iso

    rng = np.random.default_rng()
    hist = _history(rng, steps=10, batch=3)
    model = j2_linear_iso.Model(backend=backend)
    w = torch.as_tensor(rng.normal(size=(10, 3, 6)))
    sy = torch.tensor(95.0, dtype=torch.float64, requires_grad=True)

    def grad(checkpoint):
        sy.grad = None
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
            r = simulate(model, hist, params={"sigma_y": sy}, checkpoint=checkpoint)
        (r["state/S"] * w).sum().backward()
        return r, sy.grad.clone(), sum(saved)

    (kept, g_kept, n_kept), (again, g_again, n_again) = grad(None), grad(3)
    assert n_again <= 1 < 9 * 3 * 14 <= n_kept  # (the leaf; every step's Jacobian columns)
    assert torch.equal(again["state/S"].detach(), kept["state/S"].detach()) and torch.equal(g_again, g_kept)
    with monkeypatch.context() as mp:
        mp.setattr(history_adjoint, "applies", lambda *a: False)
        slow, g_slow, _ = grad(3)
    assert torch.equal(slow["state/S"].detach(), kept["state/S"].detach())
    torch.testing.assert_close(g_again, g_slow, rtol=1e-12, atol=0)
    assert float(g_slow) != 0



@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_sensitivities_from_the_recorded_history(monkeypatch, backend):
    """``sensitivities=`` (what ``modelc run --sensitivities`` writes): carried forward from the
    recorded Jacobian columns, the per-step path's numbers bit for bit, and the adjoint gradient of
    a weighted sum of an output (an independent route: the one-node backward)."""
    from modelc.generated import perzyna_iso

    rng = np.random.default_rng()
    hist = _history(rng, steps=9, batch=3)
    model = perzyna_iso.Model(backend=backend)
    served = []
    run = history_adjoint.run
    monkeypatch.setattr(history_adjoint, "run", lambda *a, **k: served.append(run(*a, **k)) or served[-1])
    with torch.no_grad():
        fast = simulate(model, hist, params={"K": 1500.0}, sensitivities=["sigma_y", "K"])
        with monkeypatch.context() as mp:
            mp.setattr(history_adjoint, "applies", lambda *a: False)
            slow = simulate(model, hist, params={"K": 1500.0}, sensitivities=["sigma_y", "K"])
    assert served and served[0] is not None
    assert sorted(fast) == sorted(slow) and "d(state/S)/d(sigma_y)" in fast
    for k in slow:
        assert torch.equal(fast[k], slow[k]), k
    assert float(fast["d(state/internal/ep)/d(sigma_y)"].abs().max()) > 0
    w = torch.as_tensor(rng.normal(size=(9, 3)))
    sy = torch.tensor(float(model.params.sigma_y), dtype=torch.float64, requires_grad=True)
    (simulate(model, hist, params={"K": 1500.0, "sigma_y": sy})["state/internal/ep"] * w).sum().backward()
    torch.testing.assert_close((fast["d(state/internal/ep)/d(sigma_y)"] * w).sum(), sy.grad, rtol=1e-11, atol=0)
