"""Drucker-Prager plasticity with non-associated flow (docs/zoo/drucker_prager.yaml, composition
``drucker_prager``) against an independent oracle: the textbook two-branch return (Souza Neto, Peric
and Owen, Computational Methods for Plasticity, the smooth-cone return in the plastic multiplier and,
where it lands past the apex, the apex return in the volumetric plastic strain), written here on full
3x3 tensors with each scalar equation solved by bisection to the last bit. The spec is one
formulation for both branches (the deviatoric magnitude ``macaulay(q_tr - G dgamma)``); the oracle
is two, so agreement says the single formulation is the textbook return.

Fresh random points every run, elastic, on the cone and at the apex (each branch asserted present),
fresh random parameters beside the defaults, every backend:

- float64 states within where Newton may stop: the spec's rtol of the residual's terms, plus a few
  roundings (``ENTRY_ROUNDOFF``) of the model and of the oracle. The bound is measured on the
  reference interpreter by moving the solution by that much (``interpret(..., stop_slack=...)``).
- float32 states within the same with float32's floored tolerance, plus the inputs rounded to
  float32 carried by the float64 derivatives, plus the outputs' own rounding.
- the consistent tangent against central differences of the oracle: it is not symmetric (eta !=
  eta_bar) and the test asserts it, so a transposed tangent fails; points whose differences would
  straddle a switch (yield, apex) are left out.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from library_helpers import (ENTRY_ROUNDOFF, REPO, RTOL_FLOOR_EPS, U32, assert_states_within,
                             central_difference_bound, device_for, spec_program, stop_bound)

SPEC = REPO / "docs" / "zoo" / "drucker_prager.yaml"
NAME = "drucker_prager"
DEFAULTS = dict(E=200000.0, nu=0.3, eta=0.6, eta_bar=0.3, xi=1.0, c0=100.0, Q=50.0, b=20.0)
U64 = 2.0 ** -53
RTOL = 1e-12  # the spec's solver rtol
S2 = np.sqrt(2.0)
MANDEL = ((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))
STATE = ("state/S", "state/internal/Ep", "state/internal/ep")


# --------------------------------------------------------------------------------------------------
# the oracle


def _full(m: np.ndarray) -> np.ndarray:
    a = np.zeros((3, 3))
    for k, (i, j) in enumerate(MANDEL):
        a[i, j] = a[j, i] = m[k] * (1.0 if k < 3 else 1.0 / S2)
    return a


def _mandel(a: np.ndarray) -> np.ndarray:
    return np.array([a[i, j] * (1.0 if k < 3 else S2) for k, (i, j) in enumerate(MANDEL)])


def _root(fun, lo: float = 0.0) -> float:
    """The root of a decreasing ``fun`` with ``fun(lo) > 0``, bisected until the interval is one ulp."""
    hi = max(2 * lo, 1e-6)
    while fun(hi) > 0:
        hi *= 2
    while True:
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            return mid
        lo, hi = (mid, hi) if fun(mid) > 0 else (lo, mid)


def oracle_step(eps, Ep_old, ep_old, P) -> tuple[np.ndarray, np.ndarray, float, str]:
    """One step at one point: (S, Ep, ep, branch) with branch 'elastic', 'cone' or 'apex'."""
    G, K = P["E"] / (2 * (1 + P["nu"])), P["E"] / (3 * (1 - 2 * P["nu"]))
    eta, eb, xi = P["eta"], P["eta_bar"], P["xi"]
    c = lambda ep: P["c0"] + P["Q"] * (1 - np.exp(-P["b"] * ep))  # noqa: E731
    e = _full(eps - Ep_old)
    vol = np.trace(e)
    s_tr = 2 * G * (e - vol / 3 * np.eye(3))
    sqrt_j2 = np.sqrt(0.5 * np.sum(s_tr * s_tr))
    p_tr = K * vol
    cone = lambda dg: sqrt_j2 - G * dg + eta * (p_tr - K * eb * dg) - xi * c(ep_old + xi * dg)  # noqa: E731
    if cone(0.0) <= 0:
        return _mandel(s_tr + p_tr * np.eye(3)), Ep_old.copy(), ep_old, "elastic"
    dg = _root(cone)
    if sqrt_j2 - G * dg >= 0:  # the smooth part of the cone
        s, p = (1 - G * dg / sqrt_j2) * s_tr, p_tr - K * eb * dg
        dEp = (s_tr - s) / (2 * G) + eb / 3 * dg * np.eye(3)
        return _mandel(s + p * np.eye(3)), Ep_old + _mandel(dEp), ep_old + xi * dg, "cone"
    # the apex: s = 0 and p = (xi / eta) c; the unknown is the volumetric plastic strain increment dv,
    # with the hardening variable growing by (xi / eta_bar) dv
    apex = lambda dv: p_tr - K * dv - xi / eta * c(ep_old + xi / eb * dv)  # noqa: E731
    dv = _root(apex)
    p = p_tr - K * dv
    dEp = s_tr / (2 * G) + dv / 3 * np.eye(3)
    return _mandel(p * np.eye(3)), Ep_old + _mandel(dEp), ep_old + xi / eb * dv, "apex"


def oracle(ins: dict, P: dict) -> tuple[dict, list[str]]:
    rows = [oracle_step(ins["forces/E"][i], ins["old_state/internal/Ep"][i], ins["old_state/internal/ep"][i], P)
            for i in range(len(ins["forces/E"]))]
    out = {"state/S": np.array([r[0] for r in rows]), "state/internal/Ep": np.array([r[1] for r in rows]),
           "state/internal/ep": np.array([r[2] for r in rows])}
    return out, [r[3] for r in rows]


# --------------------------------------------------------------------------------------------------
# inputs, parameters, the model


def _points(rng, P: dict, n: int = 24) -> dict:
    """n points each of: small strains (elastic), shear with a little tension or compression (the
    cone), hydrostatic tension (past the apex), scaled to the parameters' yield; old plastic strains
    and hardening of the size one step leaves. (Over 300 random parameter sets each group stayed in
    its branch but for at most 2 points of 24.)"""
    G, K = P["E"] / (2 * (1 + P["nu"])), P["E"] / (3 * (1 - 2 * P["nu"]))
    y = P["c0"] / G  # the shear strain of the initial yield, about
    small = rng.normal(0, 0.05 * y, (n, 6))
    shear = rng.normal(0, 3 * y, (n, 6))
    shear[:, :3] += rng.uniform(-0.2, 0.2, (n, 1)) * y - shear[:, :3].mean(axis=1, keepdims=True)
    apex = P["xi"] * (P["c0"] + P["Q"]) / (P["eta"] * K)  # the volumetric strain of the apex, at most
    tension = rng.normal(0, 0.05 * y, (n, 6))
    tension[:, :3] += rng.uniform(1.5, 4, (n, 1)) * apex / 3 + 0.3 * y
    m = 3 * n
    return {"forces/E": np.concatenate([small, shear, tension]),
            "old_state/internal/Ep": rng.normal(0, 0.02 * y, (m, 6)),
            "old_state/internal/ep": rng.uniform(0, 5e-3, m)}


def _random_params(rng) -> dict:
    eta = rng.uniform(0.2, 0.9)
    return dict(E=rng.uniform(5e4, 3e5), nu=rng.uniform(0.1, 0.4), eta=eta, eta_bar=rng.uniform(0.1, 0.9) * eta,
                xi=rng.uniform(0.5, 1.5), c0=rng.uniform(50, 150), Q=rng.uniform(0, 100), b=rng.uniform(5, 50))


@functools.lru_cache(maxsize=None)
def _module():
    import modelc

    return modelc.load(SPEC, NAME)


def _call(backend: str, dtype, ins: dict, P: dict, derivatives="tangent"):
    device = device_for(backend)
    m = _module().Model(dtype=dtype, backend=backend, device=device)
    r = m({k: torch.as_tensor(v, dtype=dtype, device=device) for k, v in ins.items()}, derivatives=derivatives,
          **{k: torch.tensor(v, dtype=dtype, device=device) for k, v in P.items()})
    out = {k: r[k].detach().cpu().double().numpy() for k in STATE}
    T = None
    if derivatives:
        T = r.jacobian["state/S", "forces/E"]
        T = getattr(T, "tensor", T).detach().cpu().double().numpy().reshape(-1, 6, 6)
    assert r.status.converged.all(), f"{backend}: a point did not converge"
    return out, T


def _rounding_scale(k: str, ins: dict, w: np.ndarray, P: dict) -> np.ndarray:
    """Per point, the size of the terms an output is computed from, larger than the output where they
    cancel: the stress from the elastic strain E - Ep (terms 3 K |E| and 3 K |Ep|), the plastic
    strain from the old one and the deviator of E - old(Ep) (terms |E|, |old(Ep)|), ep from its old
    value and its increment."""
    big = np.abs(ins["forces/E"]).max(axis=1) + np.abs(ins["old_state/internal/Ep"]).max(axis=1)
    here = np.abs(w).max(axis=1)
    if k == "state/S":
        return (3 * P["E"] / (3 * (1 - 2 * P["nu"])) * big + here)[:, None]
    if k == "state/internal/Ep":
        return (big + here)[:, None]
    return (np.abs(ins["old_state/internal/ep"]) + here)[:, None]


def _stop_bound(ins: dict, P: dict, slack: float) -> dict:
    return stop_bound(spec_program(SPEC, NAME), ins, P, slack, STATE)


BACKENDS = ("torch", "c", "triton")


@pytest.fixture(params=["defaults", "random"])
def case(request):
    rng = np.random.default_rng()
    P = DEFAULTS if request.param == "defaults" else _random_params(rng)
    ins = _points(rng, P)
    want, branch = oracle(ins, P)
    for b in ("elastic", "cone", "apex"):  # every branch is exercised
        assert branch.count(b) >= 12, (b, branch.count(b), P)
    return ins, P, want, np.array(branch)


# --------------------------------------------------------------------------------------------------
# the tests


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_states_are_the_two_branch_return(case, backend):
    ins, P, want, _ = case
    got, _ = _call(backend, torch.float64, ins, P)
    stop = _stop_bound(ins, P, RTOL + 2 * ENTRY_ROUNDOFF * U64)  # the model's and the oracle's roundings
    assert_states_within(got, want, stop, lambda k, w: _rounding_scale(k, ins, w, P), 2 * U64, STATE)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_states_within_their_rounding(case, backend):
    ins, P, want, _ = case
    ins32 = {k: np.asarray(v, dtype=np.float32).astype(np.float64) for k, v in ins.items()}
    P32 = {k: float(np.float32(v)) for k, v in P.items()}
    got, _ = _call(backend, torch.float32, ins, P)
    # the exact step at the inputs rounded to float32 (what the float32 call computes from) ...
    exact, _ = oracle(ins32, P32)
    # ... from which the call may differ by where a float32 Newton may stop (its rtol floored at
    # RTOL_FLOOR_EPS machine epsilons, and the residual's own rounding) and by a few roundings of
    # the terms each output is computed from
    stop = _stop_bound(ins32, P32, (2 * RTOL_FLOOR_EPS + ENTRY_ROUNDOFF) * U32)
    assert_states_within(got, exact, stop, lambda k, w: _rounding_scale(k, ins32, w, P32), U32, STATE)


def _fd_tangent(ins: dict, P: dict, h: float) -> tuple[np.ndarray, np.ndarray]:
    """Central differences d S / d E of the oracle, and whether each point's 12 perturbed steps stay
    in its own branch (a difference across a switch is not a derivative)."""
    n = len(ins["forces/E"])
    fd, same = np.zeros((n, 6, 6)), np.ones(n, bool)
    for i in range(n):
        args = (ins["old_state/internal/Ep"][i], ins["old_state/internal/ep"][i], P)
        branch = oracle_step(ins["forces/E"][i], *args)[3]
        for j in range(6):
            d = np.zeros(6)
            d[j] = h
            plus, minus = oracle_step(ins["forces/E"][i] + d, *args), oracle_step(ins["forces/E"][i] - d, *args)
            same[i] &= plus[3] == branch == minus[3]
            fd[i, :, j] = (plus[0] - minus[0]) / (2 * h)
    return fd, same


@pytest.mark.parametrize("backend", BACKENDS)
def test_tangent_is_the_oracles_difference_quotient_and_not_symmetric(case, backend):
    """Central differences with h = 1e-8 on strains of 1e-5-1e-2: truncation (h/|E|)^2 < 1e-6 of the
    tangent's size; rounding: each stress carries a few roundings of the terms it is computed from
    (``_rounding_scale``, and the oracle's root as much), divided by 2 h. The rounding matters where
    the tangent is small: at the apex with saturated hardening d p / d tr(E) can be 1e-2 MPa."""
    ins, P, want, branch = case
    _, T = _call(backend, torch.float64, ins, P)
    h = 1e-8
    fd, same = _fd_tangent(ins, P, h)
    assert same.sum() >= len(same) - 4  # only points within h of a switch are left out
    size = np.abs(fd).max(axis=(1, 2))
    rounding = 2 * ENTRY_ROUNDOFF * U64 * _rounding_scale("state/S", ins, want["state/S"], P)[:, 0] / h
    bound = 1e-6 * size + rounding
    err = np.abs(T - fd).max(axis=(1, 2))
    i = int(np.argmax(np.where(same, err / bound, 0)))
    assert np.all(err[same] <= bound[same]), f"tangent off by {err[i]:.3e} at point {i}, bound {bound[i]:.3e}"
    # non-associated flow: on the cone the tangent is not symmetric, so its orientation is tested
    asym = np.abs(T - T.transpose(0, 2, 1)).max(axis=(1, 2)) / np.maximum(size, 1e-300)  # 0 at a saturated apex
    assert np.all(asym[(branch == "cone") & same] > 1e-3)
    # at the apex the stress is hydrostatic whatever the deviatoric strain, and so is its change:
    # d S / d E = k I2 I2 (Mandel: the normal 3 x 3 block one value, nothing else)
    apex = (branch == "apex") & same
    vol = T[apex][:, :3, :3].mean(axis=(1, 2))
    off = np.abs(T[apex] - vol[:, None, None] * np.outer([1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0])).max(axis=(1, 2))
    assert np.all(off <= rounding[apex] + 1e-6 * size[apex])


def test_gradients_through_a_history_match_central_differences():
    """The adjoint of a whole history (``simulate``) with non-symmetric step Jacobians: a transposed
    one would go unnoticed on a symmetric model. Shear under a little compression, then tension past
    the apex, then unloading, on two points; a random weighted sum of every step's stress. Gradients
    by eta, eta_bar, c0 and the initial plastic strain against central differences of the whole
    history (h of 1e-6 relative for the parameters, 1e-9 for the plastic strain; within 1e-6 of the
    difference plus the rounding of the losses, ``central_difference_bound``; at 1e-4 the apex
    return's kinks show)."""
    from modelc.runtime.history_grad import simulate

    m = _module().Model(dtype=torch.float64, backend="c")
    steps = 40
    t = np.linspace(0.0, 1.0, steps)
    path = np.zeros((steps, 2, 6))
    up = np.interp(t, [0, 0.3, 0.6, 1.0], [0, 1, 1, 0.2])
    path[:, 0, 5] = 4e-3 * up  # shear (Mandel xy), held, unloaded
    path[:, 0, :3] = -2e-4 * np.minimum(t / 0.1, 1)[:, None]
    path[:, 1, :3] = (3e-3 * np.interp(t, [0, 0.5, 1.0], [0, 1, 0.3]))[:, None]  # tension past the apex
    path[:, 1, 4] = 1e-3 * t
    hist = {"time": np.stack([t, t], axis=1), "strain": path}
    w = torch.randn(steps, 2, 6, dtype=torch.float64)
    ep0 = torch.tensor([[1e-4, -5e-5, -5e-5, 2e-5, 0.0, 3e-5]] * 2, dtype=torch.float64)

    def loss(p, e0):
        r = simulate(m, hist, params=p, initial_state={"state/internal/Ep": e0})
        assert bool(r["converged"].all())
        return (r["state/S"] * w).sum(), r

    P = {k: torch.tensor(DEFAULTS[k], dtype=torch.float64, requires_grad=True) for k in ("eta", "eta_bar", "c0")}
    e0 = ep0.clone().requires_grad_()
    L, r = loss(P, e0)
    ep = r["state/internal/ep"].detach().numpy()
    assert ep[-1].min() > 1e-4  # both points flowed
    scale = float((r["state/S"] * w).abs().sum())
    L.backward()
    with torch.no_grad():
        for k, v in P.items():
            h = 1e-6 * float(v)
            fd = (loss({**P, k: v + h}, ep0)[0] - loss({**P, k: v - h}, ep0)[0]) / (2 * h)
            assert abs(float(fd - v.grad)) <= central_difference_bound(fd, scale, h), (k, float(fd), float(v.grad))
        for j in (0, 3, 5):
            d = torch.zeros_like(ep0)
            d[:, j] = 1e-9
            fd = (loss(P, ep0 + d)[0] - loss(P, ep0 - d)[0]) / 2e-9
            got = e0.grad[:, j].sum()
            assert abs(float(fd - got)) <= central_difference_bound(fd, scale, 1e-9), (j, float(fd), float(got))


def test_triaxial_compression_under_stress_control():
    """The driver's mixed control with a non-symmetric tangent: a confining stress of -100 MPa held on
    yy and zz and a shear stress of 20 MPa on yz, the axial strain driven to -8e-3. Each plastic step
    must end on the hardened cone, sqrt(J2) + eta p = xi c(ep) (closed form), with the targets met;
    the control Newton on the exact (non-symmetric) tangent converges quadratically: at most 5
    iterations a step."""
    from modelc.runtime.driver import run_history

    m = _module().Model(dtype=torch.float64, backend="c")
    steps = 60
    strain = np.zeros((steps + 1, 1, 6))
    strain[:, 0, 0] = np.linspace(0.0, -8e-3, steps + 1)
    target = np.zeros((steps + 1, 1, 6))
    target[1:, 0, 1:3], target[1:, 0, 3] = -100.0, 20.0 * S2
    res = run_history(m, {"time": np.arange(steps + 1.0)[:, None], "strain": strain, "stress": target,
                          "control": np.array([0, 1, 1, 1, 1, 1], bool)}, progress=False)
    assert res.ok, res.summary()
    S, ep = np.asarray(res["stress"])[1:, 0], np.asarray(res["equivalent_plastic_strain"])[1:, 0]
    np.testing.assert_allclose(S[:, 1:], target[1:, 0, 1:], rtol=0, atol=1e-9 * 600)
    p = S[:, :3].mean(axis=1)
    sqrt_j2 = np.sqrt(0.5 * np.sum((S - p[:, None] * np.array([1, 1, 1, 0, 0, 0])) ** 2, axis=1))
    P = DEFAULTS
    plastic = ep > 0
    assert plastic.sum() >= steps // 2
    c = P["c0"] + P["Q"] * (1 - np.exp(-P["b"] * ep))
    np.testing.assert_allclose((sqrt_j2 + P["eta"] * p)[plastic], P["xi"] * c[plastic], rtol=1e-10)
    assert np.asarray(res["control_iterations"]).max() <= 5
