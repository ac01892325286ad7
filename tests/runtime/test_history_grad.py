"""The differentiable transient driver (modelc.runtime.history_grad): the same numbers as run_history,
gradients w.r.t. parameters and the initial state against central differences of the whole
history, checkpointed recomputation (same gradient, Jacobians not kept), forward sensitivities
equal to the adjoint, named samples of parameters, stress control (the strain solved for and its
derivative; closed forms and differences), and `modelc run --sensitivities`."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from library_helpers import central_difference_bound, compiled, reference, reference_params  # noqa: E402

from modelc.errors import InputError  # noqa: E402
from modelc.runtime.driver import run_history  # noqa: E402
from modelc.runtime.history_grad import simulate  # noqa: E402
from modelc.runtime.tensors import TypedTensor  # noqa: E402

NAME, STEPS = "j2_voce_af", 30


def _history(points=(0, 2)):
    ref = reference(NAME)
    return {"time": ref["time"][:STEPS, list(points)], "strain": ref["strain"][:STEPS, list(points)]}


@pytest.fixture(scope="module")
def model():
    return compiled(NAME, "c", torch.float64)


def test_values_equal_run_history(model):
    hist = _history()
    got = simulate(model, hist)
    want = run_history(model, hist, progress=False)
    for k in ("state/S", "state/internal/ep", "state/internal/X"):
        np.testing.assert_array_equal(got[k].numpy(), want[k])
    assert bool(got["converged"].all())


def test_gradients_through_the_history_match_central_differences(model):
    p = reference_params(NAME)
    hist = _history()
    w = torch.randn(STEPS, 2, 6, dtype=torch.float64)
    X0 = torch.full((2, 6), 0.0, dtype=torch.float64)
    X0[:, 0], X0[:, 1] = 20.0, -10.0  # a back stress to start from

    def loss(sy, C, x0, checkpoint=None):
        r = simulate(model, hist, params={"sigma_y": sy, "C": C}, initial_state={"state/internal/X": x0},
                     checkpoint=checkpoint)
        return (r["state/S"] * w).sum()

    sy = torch.tensor(p["sigma_y"], dtype=torch.float64, requires_grad=True)
    C = torch.tensor(p["C"], dtype=torch.float64, requires_grad=True)
    x0 = X0.clone().requires_grad_()
    loss(sy, C, x0).backward()
    grads = [sy.grad.clone(), C.grad.clone(), x0.grad.clone()]
    with torch.no_grad():
        scale = float((simulate(model, hist, params={"sigma_y": sy, "C": C}, initial_state={"state/internal/X": X0})
                       ["state/S"] * w).abs().sum())  # the loss's magnitude, for its rounding
        for k, h in ((0, 1e-3), (1, 1e-1)):
            a, b = [sy, C], [sy, C]
            a = [v + h if i == k else v for i, v in enumerate(a)]
            b = [v - h if i == k else v for i, v in enumerate(b)]
            fd = (loss(*a, X0) - loss(*b, X0)) / (2 * h)
            assert abs(float(fd - grads[k])) <= central_difference_bound(fd, scale, h), (k, fd, grads[k])
        for j in (0, 1, 3):
            d = torch.zeros_like(X0)
            d[1, j] = 1e-3
            fd = (loss(sy, C, X0 + d) - loss(sy, C, X0 - d)) / 2e-3
            assert abs(float(fd - grads[2][1, j])) <= central_difference_bound(fd, scale, 1e-3), (j, fd, grads[2])
    for v in (sy, C, x0):
        v.grad = None
    loss(sy, C, x0, checkpoint=7).backward()  # recomputed chunk by chunk: the same gradient
    for a, b in zip((sy.grad, C.grad, x0.grad), grads):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=0)


def test_checkpointing_keeps_no_jacobian_outside_its_chunks(model):
    """Bytes saved for the backward outside checkpointed regions: every step's Jacobian without
    checkpoint=, none with it (they are recomputed chunk by chunk)."""
    sy = torch.tensor(reference_params(NAME)["sigma_y"], dtype=torch.float64, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    for ck in (None, 5):
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            r = simulate(model, _history(), params={"sigma_y": sy}, checkpoint=ck)
        r["state/S"].sum().backward()
        if ck is None:
            big = sum(saved)
            per_step_J = 2 * model.output_axis.size * 8  # at least one column per point and output
            assert big > (STEPS - 1) * per_step_J
        else:
            assert sum(saved) < big / 10


def test_forward_sensitivities_equal_the_adjoint_gradient(model):
    sy = torch.tensor(reference_params(NAME)["sigma_y"], dtype=torch.float64, requires_grad=True)
    w = torch.randn(STEPS, 2, dtype=torch.float64)
    (simulate(model, _history(), params={"sigma_y": sy})["state/internal/ep"] * w).sum().backward()
    with torch.no_grad():
        s = simulate(model, _history(), sensitivities=["sigma_y"])
    assert s["d(state/S)/d(sigma_y)"].shape == (STEPS, 2, 6)
    torch.testing.assert_close((s["d(state/internal/ep)/d(sigma_y)"] * w).sum(), sy.grad, rtol=1e-12, atol=0)


def test_parameter_samples_run_as_one_batch(model):
    """sigma_y over a named samples dim: outputs (steps, points, samples), each sample equal to its
    own run, and each sample's gradient its own."""
    sy = torch.tensor([180.0, 240.0, 300.0], dtype=torch.float64, requires_grad=True)
    r = simulate(model, _history(), params={"sigma_y": TypedTensor(sy, "Scalar", batch_names=("samples",))})
    assert r["state/S"].shape == (STEPS, 2, 3, 6)
    r["state/S"][..., 1, 0].sum().backward()
    for k in range(3):
        one = torch.tensor(float(sy[k].detach()), dtype=torch.float64, requires_grad=True)
        rk = simulate(model, _history(), params={"sigma_y": one})
        torch.testing.assert_close(r["state/S"][:, :, k].detach(), rk["state/S"].detach(), rtol=1e-13, atol=1e-10)
        rk["state/S"][..., 0].sum().backward() if k == 1 else None
        if k == 1:
            torch.testing.assert_close(sy.grad[1], one.grad, rtol=1e-12, atol=0)
    assert sy.grad[0] == 0 and sy.grad[2] == 0


def test_bad_arguments_are_clear(model):
    with pytest.raises(InputError, match="initial_state names 'state/Q'"):
        simulate(model, _history(), initial_state={"state/Q": torch.zeros(2)})
    with pytest.raises(InputError, match="checkpoint must be"):
        simulate(model, _history(), checkpoint=0)
    with pytest.raises(InputError, match="use modelc.runtime.simulate"):
        run_history(model, _history(), params={"sigma_y": torch.tensor(200.0, dtype=torch.float64,
                                                                        requires_grad=True)}, progress=False)


def _uniaxial_stress(rng, steps=25, batch=3):
    """Uniaxial stress, the xx strain driven (tension then partial unloading, or compression) with
    random amplitudes (yield never exactly on a step, where a difference quotient would average the
    two sides of the kink), the other five stresses held at zero."""
    t = np.linspace(0.0, 1.0, steps)
    amp = rng.uniform(2e-3, 5e-3, batch) * rng.choice([-1.0, 1.0], batch)
    strain = np.zeros((steps, batch, 6))
    strain[:, :, 0] = np.interp(t, [0, 0.6, 1], [0, 1, rng.uniform(0.2, 0.8)])[:, None] * amp
    return {"time": np.repeat(t[:, None], batch, axis=1), "strain": strain, "stress": np.zeros((steps, batch, 6)),
            "control": np.array([0, 1, 1, 1, 1, 1], bool)}


def _fd_check(m, hist, names, weights, h_rel=1e-6, tol=1e-6, initial_state=None):
    """Gradients of a random weighted sum of every step's outputs (and of the solved strain) by
    ``names`` against central differences of whole simulate runs, as log-sensitivities p dL/dp:
    each within ``tol`` of its own size plus ``tol`` of the largest one (a parameter the loss barely
    feels, Voce's R on a mostly elastic history, has a difference quotient of the loss's noise)."""
    P = {k: torch.tensor(float(m.parameter_info[k].default[0]), dtype=torch.float64, requires_grad=True)
         for k in names}

    def loss(p):
        r = simulate(m, hist, params=p, initial_state=initial_state)
        assert bool(r["converged"].all())
        return sum((r[k] * w).sum() for k, w in weights.items()), r

    L, r = loss(P)
    L.backward()
    fd = {}
    with torch.no_grad():
        for k, v in P.items():
            h = h_rel * abs(float(v))
            fd[k] = float(loss({**P, k: v + h})[0] - loss({**P, k: v - h})[0]) / (2 * h) * float(v)
    top = max(abs(x) for x in fd.values())
    for k, v in P.items():
        got = float(v.grad) * float(v.detach())
        assert abs(got - fd[k]) <= tol * (abs(fd[k]) + top), (k, fd[k], got, top)
    return r


def test_stress_control_values_equal_run_history_and_gradients_match_differences(model):
    """A uniaxial stress test, the calibration experiment: simulate solves each step's lateral strains
    with the driver's control Newton (the same numbers as run_history, bit for bit, and the strain
    it solved for in 'strain'), then carries the implicit-function theorem's derivative of that
    strain, so gradients by every parameter of the stress and of the lateral strain match central
    differences of whole histories."""
    rng = np.random.default_rng()
    hist = _uniaxial_stress(rng)
    want = run_history(model, hist, progress=False)
    got = simulate(model, hist)
    for k, w in (("state/S", "stress"), ("state/internal/ep", "state/internal/ep"), ("strain", "strain")):
        np.testing.assert_array_equal(got[k].numpy(), np.asarray(want[w]))
    assert np.asarray(want["state/internal/ep"])[-1].min() > 1e-4 and np.abs(got["strain"][-1, :, 1].numpy()).min() > 1e-4
    S, E = got["state/S"], got["strain"]
    weights = {"state/S": torch.randn_like(S), "strain": 1e5 * torch.randn_like(E)}  # both O(1) per entry
    _fd_check(model, hist, [p.name for p in model.PARAMETERS], weights)


def test_stress_control_with_temperature_tables():
    """A bar held at zero axial strain, free laterally, heated (docs/zoo/thermo_j2.yaml): the thermal
    stress meets the yield stress table; gradients by table values and the expansion coefficient."""
    import modelc

    m = modelc.load(Path(__file__).resolve().parents[2] / "docs" / "zoo" / "thermo_j2.yaml",
                    "thermo_j2_return").Model(dtype=torch.float64, backend="c")
    rng = np.random.default_rng()
    steps, batch = 21, 2
    t = np.linspace(0.0, 1.0, steps)
    T = 293.0 + np.outer(np.interp(t, [0, 0.7, 1], [0, 1, 0.5]), rng.uniform(400.0, 600.0, batch))
    hist = {"time": np.repeat(t[:, None], batch, axis=1), "strain": np.zeros((steps, batch, 6)),
            "stress": np.zeros((steps, batch, 6)), "control": np.array([0, 1, 1, 1, 1, 1], bool), "temperature": T}
    want = run_history(m, hist, progress=False)
    assert np.asarray(want["equivalent_plastic_strain"])[-1].min() > 1e-4
    w = {"state/S": torch.randn(steps, batch, 6, dtype=torch.float64),
         "strain": 1e5 * torch.randn(steps, batch, 6, dtype=torch.float64)}
    r = _fd_check(m, hist, ["sy_573", "sy_773", "alpha", "E_573", "nu"], w)
    np.testing.assert_array_equal(r["state/S"].detach().numpy(), np.asarray(want["stress"]))


def test_stress_control_through_a_model_that_reads_the_old_strain(tmp_path):
    """A rate-form elastic model, S = old(S) + C : (E - old(E)), reads old_forces/E: under uniaxial
    stress its lateral strain is -nu E_xx at every step, so d(lateral strain)/d nu = -E_xx and
    d(S_xx)/d E = E_xx, exactly (closed form), only if the old strain it reads is the one solved at
    the step before, with its derivative."""
    import modelc

    spec = tmp_path / "rate.yaml"
    spec.write_text("""
models:
  rate_elastic:
    parameters: {E: {default: 200000.0}, nu: {default: 0.3}}
    inputs:
      eps: {var: forces/E, type: SR2}
    outputs:
      S: {var: state/S, type: SR2}
    define:
      de: eps - old(eps)
    equations:
      S: old(S) + E/(1 + nu)*de + E*nu/((1 + nu)*(1 - 2*nu))*tr(de)*I2
""")
    m = modelc.load(spec, "rate_elastic").Model(dtype=torch.float64, backend="c")
    assert "old_forces/E" in m.input_axis
    hist = _uniaxial_stress(np.random.default_rng(), steps=9)
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in (("E", 200000.0), ("nu", 0.3))}
    r = simulate(m, hist, params=p)
    exx = torch.as_tensor(hist["strain"][:, :, 0])
    lateral, sxx = r["strain"][:, :, 1], r["state/S"][:, :, 0]
    torch.testing.assert_close(lateral, -0.3 * exx, rtol=1e-9, atol=1e-15)
    g_nu, = torch.autograd.grad(lateral.sum(), p["nu"], retain_graph=True)
    g_E, = torch.autograd.grad(sxx.sum(), p["E"])
    torch.testing.assert_close(g_nu, -exx.sum(), rtol=1e-9, atol=0)
    torch.testing.assert_close(g_E, exx.sum(), rtol=1e-9, atol=0)


def test_stress_control_forward_sensitivities_equal_the_adjoint_gradient(model):
    """Forward sensitivities carry the solved strain's derivative step by step (no graph); they equal
    the adjoint gradient of the same weighted sums, of the outputs and of the solved strain."""
    hist = _uniaxial_stress(np.random.default_rng())
    names = ["sigma_y", "E", "C"]
    P = {k: torch.tensor(float(model.parameter_info[k].default[0]), dtype=torch.float64, requires_grad=True)
         for k in names}
    r = simulate(model, hist, params=P)
    w_ep, w_E = torch.randn_like(r["state/internal/ep"]), torch.randn_like(r["strain"])
    ((r["state/internal/ep"] * w_ep).sum() + (r["strain"] * w_E).sum()).backward()
    with torch.no_grad():
        s = simulate(model, hist, sensitivities=names)
    for k in names:
        fwd = (s[f"d(state/internal/ep)/d({k})"] * w_ep).sum() + (s[f"d(strain)/d({k})"] * w_E).sum()
        torch.testing.assert_close(fwd, P[k].grad, rtol=1e-10, atol=0)


def test_stress_control_checkpointed_gives_the_same_gradient(model):
    """checkpoint=k with stress control: each recomputed chunk starts from the strain solved before
    it, carried as a state, so the gradient equals the one that keeps every step."""
    hist = _uniaxial_stress(np.random.default_rng())
    grads = []
    for k in (None, 4):
        sy = torch.tensor(float(model.parameter_info["sigma_y"].default[0]), dtype=torch.float64, requires_grad=True)
        r = simulate(model, hist, params={"sigma_y": sy}, checkpoint=k)
        torch.manual_seed(0)
        ((r["state/S"] * torch.randn_like(r["state/S"])).sum() + 1e5 * (r["strain"] * torch.randn_like(r["strain"])).sum()
         ).backward()
        grads.append(sy.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-13, atol=0)


def test_stress_control_with_parameter_samples_over_a_named_dim(model):
    """sigma_y and C over a named samples dim, uniaxial stress: each (point, sample) solves its own
    lateral strain, so each sample's stress, solved strain and gradient equal its own run's."""
    hist = _uniaxial_stress(np.random.default_rng(), steps=15, batch=2)
    sy = torch.tensor([120.0, 160.0, 200.0], dtype=torch.float64, requires_grad=True)
    C = torch.tensor([5000.0, 9000.0, 2000.0], dtype=torch.float64)
    named = lambda v: TypedTensor(v, "Scalar", batch_names=("samples",))  # noqa: E731
    r = simulate(model, hist, params={"sigma_y": named(sy), "C": named(C)})
    assert r["state/S"].shape == r["strain"].shape == (15, 2, 3, 6)
    w = torch.randn(15, 2, 6, dtype=torch.float64)
    ((r["state/S"][:, :, 1] * w).sum() + 1e5 * (r["strain"][:, :, 1] * w).sum()).backward()
    lateral = r["strain"][-1, :, :, 1].detach()
    assert (lateral[:, 0] - lateral[:, 2]).abs().min() > 1e-6  # the samples solved different strains
    for k in range(3):
        one = torch.tensor(float(sy[k].detach()), dtype=torch.float64, requires_grad=True)
        rk = simulate(model, hist, params={"sigma_y": one, "C": float(C[k])})
        for key in ("state/S", "strain", "state/internal/ep"):
            torch.testing.assert_close(r[key][:, :, k].detach(), rk[key].detach(), rtol=1e-13, atol=1e-12)
        if k == 1:
            ((rk["state/S"] * w).sum() + 1e5 * (rk["strain"] * w).sum()).backward()
            torch.testing.assert_close(sy.grad[1], one.grad, rtol=1e-11, atol=0)
    assert sy.grad[0] == 0 and sy.grad[2] == 0


def test_cli_writes_sensitivities(tmp_path, model):
    from modelc.cli import main

    h = tmp_path / "h.npz"
    np.savez(h, **_history())
    out = tmp_path / "r.npz"
    from library_helpers import SPEC

    code = main(["run", str(SPEC), "--model", NAME, "--history", str(h), "--out", str(out), "--no-progress",
                 "--sensitivities", "sigma_y,C"])
    assert code == 0
    with np.load(out) as z:
        got = z["d(state/S)/d(sigma_y)"]
    with torch.no_grad():
        want = simulate(model, _history(), sensitivities=["sigma_y"])["d(state/S)/d(sigma_y)"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_failed_point_leaves_the_others_gradient_alone():
    """A point that fails part-way (NaN outputs from then on, masked out of the loss) contributes
    nothing to a shared parameter's gradient, which is the gradient of the same loss over a history
    of the other points alone (0 * NaN in its Jacobian used to make it NaN)."""
    from modelc.generated import j2_voce_af

    model = j2_voce_af.Model(backend="torch")
    model.set_solver(max_iter=2)  # enough for elastic steps, too few for a plastic one
    rng = np.random.default_rng()
    steps = 8
    strain = np.zeros((steps, 3, 6))
    strain[1:] = np.cumsum(rng.normal(scale=2e-5, size=(steps - 1, 3, 6)), axis=0)  # elastic
    strain[5:, 1] += 0.05  # point 1: a jump into the plastic range
    time = np.cumsum(rng.uniform(0.1, 1.0, size=(steps, 3)), axis=0)
    grads = []
    for pts in ([0, 1, 2], [0, 2]):
        E = torch.tensor(2e5, dtype=torch.float64, requires_grad=True)
        r = simulate(model, {"time": time[:, pts], "strain": strain[:, pts]}, params={"E": E})
        keep = [pts.index(0), pts.index(2)]
        if len(pts) == 3:
            assert not bool(r["converged"][:, 1].all()) and bool(r["converged"][:, keep].all())
        (r["state/S"][:, keep] * torch.arange(1.0, 7.0, dtype=torch.float64)).sum().backward()
        grads.append(E.grad)
    assert torch.isfinite(grads[0]) and float(grads[1]) != 0
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=0)


def _gtn_history(points: int = 2, steps: int = 16):
    t = np.linspace(0.0, 1.0, steps)
    strain = np.zeros((steps, points, 6))
    strain[:, :, :3] = (6e-3 * t)[:, None, None] * np.array([1.0, 0.3, 0.3])  # tension with dilatation
    strain[:, 1, 5] = 3e-3 * t
    return {"time": np.repeat(t[:, None], points, axis=1), "strain": strain}


def test_simulate_starts_from_the_declared_initial_values():
    """gtn's porosity starts at phi0 (the spec's `initial:`) in simulate as in run_history: before, simulate
    started it at zero (stresses 900 MPa off in this history). The gradient by phi0 reaches it through
    the initial value (central differences); over named dims, where simulate cannot compute the
    declared values, it asks for them in initial_state."""
    m = compiled("gtn", "c", torch.float64)
    hist = _gtn_history()
    want = run_history(m, hist, params={"phi0": [0.01, 0.03]}, progress=False)
    phi0 = torch.tensor([0.01, 0.03], dtype=torch.float64, requires_grad=True)
    got = simulate(m, hist, params={"phi0": phi0})
    np.testing.assert_allclose(got["state/internal/phi"].detach().numpy(), want["state/internal/phi"], rtol=1e-12)
    np.testing.assert_allclose(got["state/S"].detach().numpy(), want["stress"], rtol=1e-12, atol=1e-9)
    w = torch.randn_like(got["state/S"])
    (got["state/S"] * w).sum().backward()
    scale = float((got["state/S"] * w).abs().sum())
    h = 1e-6
    with torch.no_grad():
        for i in range(2):
            d = torch.zeros(2, dtype=torch.float64)
            d[i] = h
            fd = ((simulate(m, hist, params={"phi0": phi0 + d})["state/S"] * w).sum()
                  - (simulate(m, hist, params={"phi0": phi0 - d})["state/S"] * w).sum()) / (2 * h)
            assert abs(float(fd - phi0.grad[i])) <= central_difference_bound(fd, scale, h), \
                (i, float(fd), float(phi0.grad[i]))
    sy = TypedTensor(torch.tensor([90.0, 110.0], dtype=torch.float64), "Scalar", batch_names=("samples",))
    with pytest.raises(InputError, match=r"declares initial values of state/internal/phi .* give them in "
                                         r"initial_state"):
        simulate(m, hist, params={"sigma_y": sy})
    out = simulate(m, hist, params={"sigma_y": sy},
                   initial_state={"state/internal/phi": torch.full((2,), 0.01, dtype=torch.float64)})
    assert out["state/S"].shape == (16, 2, 2, 6)


def test_simulate_drives_the_temperature():
    """A history's 'temperature' reaches forces/T in simulate as in run_history (the thermoelastic spec),
    and gradients by the expansion coefficient and the modulus' slope match central differences."""
    import modelc

    m = modelc.load(Path(__file__).resolve().parents[1] / "models" / "specs" / "thermoelastic.yaml",
                    "thermoelastic").Model(backend="c")
    rng = np.random.default_rng()
    steps = 12
    t = np.repeat(np.linspace(0.0, 1.0, steps)[:, None], 2, axis=1)
    T = 300.0 + np.cumsum(rng.uniform(0.0, 30.0, (steps, 2)), axis=0)
    strain = np.concatenate([np.zeros((1, 2, 6)), np.cumsum(rng.normal(0, 2e-4, (steps - 1, 2, 6)), axis=0)])
    hist = {"time": t, "strain": strain, "temperature": T}
    want = run_history(m, hist, progress=False)
    p = {k: torch.tensor(float(m.parameter_info[k].default[0]), dtype=torch.float64, requires_grad=True)
         for k in ("alpha", "kE")}
    got = simulate(m, hist, params=p)
    np.testing.assert_allclose(got["state/S"].detach().numpy(), want["stress"], rtol=1e-13, atol=1e-10)
    w = torch.randn_like(got["state/S"])
    (got["state/S"] * w).sum().backward()
    scale = float((got["state/S"] * w).abs().sum())
    with torch.no_grad():
        for k, v in p.items():
            h = 1e-4 * float(v)
            fd = ((simulate(m, hist, params={**p, k: v + h})["state/S"] * w).sum()
                  - (simulate(m, hist, params={**p, k: v - h})["state/S"] * w).sum()) / (2 * h)
            assert abs(float(fd - v.grad)) <= central_difference_bound(fd, scale, h, rtol=1e-7), \
                (k, float(fd), float(v.grad))
