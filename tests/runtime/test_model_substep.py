"""Adaptive sub-stepping (runtime.model): failed points are retried in 2, 4, ... sub-steps; the
result equals n backward-Euler steps (independent scalar Newton), and the Jacobian matches central
differences of that n-step map."""
from __future__ import annotations

import math

import pytest
import torch

from backend_programs import generated


def be_steps(x, ox, ou, n):
    """n backward-Euler steps of du/dx = exp(-u) from (ox, ou) to x, each solved to round-off."""
    u = ou
    for j in range(1, n + 1):
        a0, a1 = ox + (j - 1) / n * (x - ox), ox + j / n * (x - ox)
        old = u
        for _ in range(100):
            r = u - old - (a1 - a0) * math.exp(-u)
            u -= r / (1 + (a1 - a0) * math.exp(-u))
    return u


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_substepping_recovers_failed_points(gen_dir, backend):
    mod = generated("ode", gen_dir)
    x = torch.tensor([0.5, 12.0, 2.0, 30.0], dtype=torch.float64)
    ox = torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    ou = torch.tensor([0.0, 0.0, 0.3, 0.0], dtype=torch.float64)
    inputs = {"forces/x": x, "old_forces/x": ox, "old_state/u": ou}
    plain = mod.Model(backend=backend, on_failure="nan")(inputs)
    assert plain.status.n_failed >= 2  # max_iter = 4 is too few for the big steps
    out = mod.Model(backend=backend)(inputs, derivatives=True)
    st = out.status
    assert st.all_converged, st.summary()
    assert "needed sub-stepping" in st.summary()
    assert (st.substeps[plain.status.converged] == 1).all() and (st.substeps[~plain.status.converged] > 1).all()
    for i in range(4):
        n = int(st.substeps[i])
        want = be_steps(float(x[i]), float(ox[i]), float(ou[i]), n)
        assert math.isclose(float(out["state/u"][i]), want, rel_tol=1e-11)
        J = out.jacobian.tensor[i, 0]
        ax = mod.Model().input_axis
        h = 1e-6
        for name, args in (("forces/x", (1, 0, 0)), ("old_forces/x", (0, 1, 0)), ("old_state/u", (0, 0, 1))):
            p = [float(x[i]), float(ox[i]), float(ou[i])]
            fd = (be_steps(*[v + h * a for v, a in zip(p, args)], n) -
                  be_steps(*[v - h * a for v, a in zip(p, args)], n)) / (2 * h)
            assert math.isclose(float(J[ax.offset(name)]), fd, rel_tol=1e-6, abs_tol=1e-8), (i, name)


def test_substepping_gives_up_after_the_limit(gen_dir):
    mod = generated("ode", gen_dir)
    inputs = {"forces/x": torch.tensor([1e9], dtype=torch.float64),
              "old_forces/x": torch.zeros(1, dtype=torch.float64), "old_state/u": torch.zeros(1, dtype=torch.float64)}
    out = mod.Model(max_substeps=4)(inputs)
    assert out.status.n_failed == 1 and out["state/u"].isnan().all()
    assert "1 FAILED" in out.status.summary()


ODE_SPEC = """
models:
  ode:
    inputs:
      x: {var: forces/x}
    implicit:
      unknowns:
        u: {var: state/u}
      residuals:
        u: u - old(u) - (x - old(x))*exp(-u)
      solver: {rtol: 1.0e-12, atol: 1.0e-12, max_iter: 4, on_failure: substep, max_substeps: 64}
    tangent: {of: [state/u], wrt: [forces/x]}
"""


@pytest.mark.parametrize("backend", ["torch", "c", "triton"])
def test_substepping_under_the_tangent_variant(tmp_path, backend):
    """A tangent-variant call whose failed points are sub-stepped: those points are re-run with the
    full Jacobian (the chain rule through the sub-steps needs it) and their tangent block taken from
    it; equal to the full-Jacobian call and to central differences of the n-step map."""
    import modelc
    from modelc.runtime.cbuild import CBuildError

    spec = tmp_path / "ode.yaml"
    spec.write_text(ODE_SPEC)
    mod = modelc.load(spec, "ode", cache_dir=tmp_path / "cache")
    assert mod.Model.TANGENT == (("state/u",), ("forces/x",))
    try:
        m = mod.Model(backend=backend)
    except CBuildError as exc:
        pytest.skip(str(exc))
    x = torch.tensor([0.5, 12.0, 2.0, 30.0, 7.0], dtype=torch.float64)
    ox = torch.tensor([0.0, 0.0, 1.0, 0.0, 6.5], dtype=torch.float64)
    ou = torch.tensor([0.0, 0.0, 0.3, 0.0, 0.1], dtype=torch.float64)
    inputs = {"forces/x": x, "old_forces/x": ox, "old_state/u": ou}
    t = m(inputs, derivatives="tangent")
    f = m(inputs, derivatives=True)
    assert t.status.all_converged and (t.status.substeps > 1).sum() >= 2, t.status.summary()
    assert torch.equal(t.status.substeps, f.status.substeps)
    assert t.jacobian.tensor.shape == (5, 1, 1)
    torch.testing.assert_close(t["state/u"], f["state/u"], rtol=1e-13, atol=0)
    torch.testing.assert_close(t.jacobian["state/u", "forces/x"], f.jacobian["state/u", "forces/x"],
                               rtol=1e-12, atol=0)
    h = 1e-6
    for i in range(5):
        n = int(t.status.substeps[i])
        fd = (be_steps(float(x[i]) + h, float(ox[i]), float(ou[i]), n)
              - be_steps(float(x[i]) - h, float(ox[i]), float(ou[i]), n)) / (2 * h)
        assert math.isclose(float(t.jacobian.tensor[i, 0, 0]), fd, rel_tol=1e-6, abs_tol=1e-8), i
