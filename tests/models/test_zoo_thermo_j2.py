"""J2 plasticity with temperature tables (docs/zoo/thermo_j2.yaml, model ``thermo_j2_return``): the
Young's modulus and the yield stress are ``interp`` tables in the temperature, a force. The oracle is
the closed-form radial return of linear hardening, dgamma = f_tr / (3 G + H), with the properties
from ``numpy.interp``: neither the spec's Newton on a complementarity residual nor its nested
selections.

Fresh random points every run: temperatures below the table, inside it, exactly on its knots and
above it; elastic and plastic points (both asserted present); every backend.

- float64 and float32 states within where Newton may stop plus a few roundings of the terms each
  output is computed from (the bound measured on the reference interpreter, as for Drucker-Prager).
- d S / d E and d S / d T against differences of the oracle: d S / d T carries the tables' slopes,
  and on a knot it is the right-hand one (a forward difference), never the sum of two.
- A constrained heating and cooling history through ``run_history`` with a ``temperature`` array,
  step by step against the oracle; gradients of a history by table values against differences.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from library_helpers import (ENTRY_ROUNDOFF, REPO, RTOL_FLOOR_EPS, U32, assert_states_within,
                             central_difference_bound, device_for, spec_program, stop_bound)

SPEC = REPO / "docs" / "zoo" / "thermo_j2.yaml"
NAME = "thermo_j2_return"
KNOTS = np.array([293.0, 573.0, 773.0, 973.0])
DEFAULTS = dict(E_293=195000.0, E_573=176000.0, E_773=162000.0, E_973=145000.0, sy_293=240.0, sy_573=165.0,
                sy_773=140.0, sy_973=110.0, nu=0.3, H=1500.0, alpha=1.7e-5, T_ref=293.0)
U64 = 2.0 ** -53
RTOL = 1e-12  # the spec's solver rtol
STATE = ("state/S", "state/internal/Ep", "state/internal/ep")
DEV = np.eye(6) - np.outer([1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]) / 3  # Mandel deviatoric projector
I2 = np.array([1.0, 1, 1, 0, 0, 0])


# --------------------------------------------------------------------------------------------------
# the oracle


def properties(T, P: dict) -> tuple:
    E = np.interp(T, KNOTS, [P[f"E_{int(k)}"] for k in KNOTS])
    sy = np.interp(T, KNOTS, [P[f"sy_{int(k)}"] for k in KNOTS])
    return E, sy


def oracle_step(eps, T, Ep_old, ep_old, P) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """One step at one point (Mandel vectors): (S, Ep, ep, plastic)."""
    E, sy = properties(T, P)
    G, K = E / (2 * (1 + P["nu"])), E / (3 * (1 - 2 * P["nu"]))
    e = eps - Ep_old - P["alpha"] * (T - P["T_ref"]) * I2
    s_tr = 2 * G * DEV @ e
    q_tr = np.sqrt(1.5) * np.linalg.norm(s_tr)
    f_tr = q_tr - sy - P["H"] * ep_old
    vol = K * e[:3].sum() * I2
    if f_tr <= 0:
        return vol + s_tr, Ep_old.copy(), ep_old, False
    dg = f_tr / (3 * G + P["H"])
    n = 1.5 * s_tr / q_tr  # the flow direction, d q / d s
    return vol + (1 - 3 * G * dg / q_tr) * s_tr, Ep_old + dg * n, ep_old + dg, True


def oracle(ins: dict, P: dict) -> tuple[dict, np.ndarray]:
    rows = [oracle_step(ins["forces/E"][i], ins["forces/T"][i], ins["old_state/internal/Ep"][i],
                        ins["old_state/internal/ep"][i], P) for i in range(len(ins["forces/E"]))]
    out = {"state/S": np.array([r[0] for r in rows]), "state/internal/Ep": np.array([r[1] for r in rows]),
           "state/internal/ep": np.array([r[2] for r in rows])}
    return out, np.array([r[3] for r in rows])


# --------------------------------------------------------------------------------------------------
# inputs, parameters, the model


def _points(rng, P: dict, n: int = 48) -> dict:
    """Temperatures: the four knots (twice each), and uniform from 50 K below the table to 150 K above
    it; deviatoric strains from well inside the yield surface to twice past it, with a little
    volumetric strain; old plastic strains and hardening of the size a few steps leave."""
    T = np.concatenate([np.repeat(KNOTS, 2), rng.uniform(KNOTS[0] - 50, KNOTS[-1] + 150, n - 8)])
    E, sy = properties(T, P)
    y = sy / E  # the uniaxial strain of yield, about
    d = rng.normal(0, 1, (n, 6))
    d = DEV @ d.T
    d = (d / np.linalg.norm(d, axis=0) * y * rng.uniform(0.1, 2.0, n)).T
    return {"forces/E": d + rng.normal(0, 0.2, (n, 1)) * y[:, None] * I2 + P["alpha"] * (T - P["T_ref"])[:, None] * I2,
            "forces/T": T,
            "old_state/internal/Ep": (DEV @ rng.normal(0, 1, (6, n))).T * 0.2 * y[:, None],
            "old_state/internal/ep": rng.uniform(0, 2e-3, n)}


def _random_params(rng) -> dict:
    E = np.sort(rng.uniform(1e5, 2.2e5, 4))[::-1]  # falling with the temperature, as tables do
    sy = np.sort(rng.uniform(80, 400, 4))[::-1]
    return dict(**{f"E_{int(k)}": float(v) for k, v in zip(KNOTS, E)},
                **{f"sy_{int(k)}": float(v) for k, v in zip(KNOTS, sy)},
                nu=rng.uniform(0.2, 0.4), H=rng.uniform(0, 5000), alpha=rng.uniform(5e-6, 2e-5),
                T_ref=rng.uniform(280, 300))


@functools.lru_cache(maxsize=None)
def _module():
    import modelc

    return modelc.load(SPEC, NAME)


def _call(backend: str, dtype, ins: dict, P: dict, derivatives=None):
    device = device_for(backend)
    m = _module().Model(dtype=dtype, backend=backend, device=device)
    r = m({k: torch.as_tensor(v, dtype=dtype, device=device) for k, v in ins.items()}, derivatives=derivatives or False,
          **{k: torch.tensor(v, dtype=dtype, device=device) for k, v in P.items()})
    assert r.status.converged.all(), f"{backend}: a point did not converge"
    out = {k: r[k].detach().cpu().double().numpy() for k in STATE}
    jac = {}
    for o, i in derivatives or ():
        j = r.jacobian[o, i]
        jac[i] = getattr(j, "tensor", j).detach().cpu().double().numpy().reshape(len(ins["forces/T"]), 6, -1)
    return out, jac


def _rounding_scale(k: str, ins: dict, w: np.ndarray, P: dict) -> np.ndarray:
    """Per point, the size of the terms an output is computed from: the stress from the elastic
    strain E - Ep - alpha (T - T_ref) I (terms 3 K times each), the plastic strain from the old one
    and the trial deviator, ep from its old value and its increment."""
    th = np.abs(P["alpha"] * (ins["forces/T"] - P["T_ref"]))
    big = np.abs(ins["forces/E"]).max(axis=1) + np.abs(ins["old_state/internal/Ep"]).max(axis=1) + th
    here = np.abs(w).max(axis=1)
    if k == "state/S":
        E, _ = properties(ins["forces/T"], P)
        return (3 * E / (3 * (1 - 2 * P["nu"])) * big + here)[:, None]
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
    want, plastic = oracle(ins, P)
    assert 8 <= plastic.sum() <= len(plastic) - 8, plastic.sum()  # both kinds of point
    return ins, P, want, plastic


# --------------------------------------------------------------------------------------------------
# the tests


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_states_are_the_closed_form_return_with_table_properties(case, backend):
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
    exact, _ = oracle(ins32, P32)  # the exact step at what the float32 call computes from
    stop = _stop_bound(ins32, P32, (2 * RTOL_FLOOR_EPS + ENTRY_ROUNDOFF) * U32)
    assert_states_within(got, exact, stop, lambda k, w: _rounding_scale(k, ins32, w, P32), U32, STATE)


def _fd(ins: dict, P: dict, i: int, which: str, h: float, one_sided: bool) -> tuple[np.ndarray, bool]:
    """Second-order differences of the oracle's stress at point i by the strain (6 columns) or the
    temperature (1 column): central, or one-sided forward (-3 f(0) + 4 f(h) - f(2 h)) / 2 h; and
    whether the perturbed steps stay elastic or plastic as the point is."""
    args = lambda e, t: (e, t, ins["old_state/internal/Ep"][i], ins["old_state/internal/ep"][i], P)  # noqa: E731
    e0, t0 = ins["forces/E"][i], ins["forces/T"][i]
    at = lambda k, j: oracle_step(*args(e0 + k * h * (np.eye(6)[j] if which == "forces/E" else 0),  # noqa: E731
                                        t0 + k * h * (which == "forces/T")))
    base = at(0, 0)
    cols, same = [], True
    for j in range(6 if which == "forces/E" else 1):
        pts = (at(0, j), at(1, j), at(2, j)) if one_sided else (at(-1, j), at(1, j))
        same &= all(p[3] == base[3] for p in pts)
        cols.append((-3 * pts[0][0] + 4 * pts[1][0] - pts[2][0]) / (2 * h) if one_sided
                    else (pts[1][0] - pts[0][0]) / (2 * h))
    return np.stack(cols, axis=1), same


@pytest.mark.parametrize("backend", BACKENDS)
def test_tangents_by_strain_and_temperature_are_the_oracles_differences(case, backend):
    """d S / d E by central differences (h = 1e-8 on strains of 1e-4-1e-2), d S / d T by central
    differences (h = 1e-2 K) between knots and one-sided forward ones on a knot, where the tables'
    slopes change: the model's derivative there is the right-hand slope (the segment [x_i, x_i+1)
    holds the knot). Both second order: the oracle's stress is a smooth function of E and, within a
    segment, of T (there rational in T, varying over hundreds of kelvin), so truncation stays
    below 1e-6 of the derivative; rounding: a few roundings of the stress's terms over h."""
    ins, P, want, plastic = case
    got, jac = _call(backend, torch.float64, ins, P, [("state/S", "forces/E"), ("state/S", "forces/T")])
    scale = _rounding_scale("state/S", ins, want["state/S"], P)[:, 0]
    on_knot = np.isin(ins["forces/T"], KNOTS)
    checked = {"forces/E": 0, "forces/T": 0}
    for i in range(len(on_knot)):
        for which, h in (("forces/E", 1e-8), ("forces/T", 1e-2)):
            fd, same = _fd(ins, P, i, which, h, one_sided=which == "forces/T" and on_knot[i])
            near = np.abs(ins["forces/T"][i] - KNOTS).min()
            if not same or (which == "forces/T" and 0 < near <= 2 * h):  # a difference across yield, or
                continue  # across a knot (a point within h of one: 2 in 300 random sets), is no derivative
            bound = 1e-6 * np.abs(fd).max() + 4 * ENTRY_ROUNDOFF * U64 * scale[i] / h
            err = np.abs(jac[which][i] - fd).max()
            assert err <= bound, f"d S / d {which} at point {i} (T = {ins['forces/T'][i]}): off by {err:.3e}, " \
                                 f"bound {bound:.3e}"
            checked[which] += 1
    assert min(checked.values()) >= len(on_knot) - 6
    # on an inner knot the slopes of the tables change: the left-hand derivative differs from the
    # right-hand one, and the model's is the right-hand one (the sum of both would differ from either)
    k = np.flatnonzero(on_knot & (ins["forces/T"] > KNOTS[0]) & (ins["forces/T"] < KNOTS[-1]))
    assert len(k) >= 4
    for i in k:
        right, _ = _fd(ins, P, i, "forces/T", 1e-2, one_sided=True)
        left, _ = _fd(ins, P, i, "forces/T", -1e-2, one_sided=True)
        size = np.abs(right).max()
        if np.abs(left - right).max() > 1e-3 * size:
            assert np.abs(jac["forces/T"][i] - left).max() > 1e-4 * size


def test_a_point_with_a_nan_temperature_fails_alone():
    rng = np.random.default_rng()
    ins = _points(rng, DEFAULTS, 16)
    ins["forces/T"][3] = np.nan
    m = _module().Model(dtype=torch.float64, backend="c")
    r = m({k: torch.as_tensor(v) for k, v in ins.items()})
    conv = r.status.converged.numpy()
    assert not conv[3] and conv[np.arange(16) != 3].all()
    assert np.isnan(r["state/S"][3].numpy()).all()
    good = np.arange(16) != 3
    want, _ = oracle({k: v[good] for k, v in ins.items()}, DEFAULTS)
    np.testing.assert_allclose(r["state/S"].numpy()[good], want["state/S"], rtol=1e-9, atol=1e-9)


def _thermal_cycle(steps: int = 80):
    """A bar held at zero strain in x (the other directions free: stress-controlled at zero), heated
    from 293 K to 923 K and cooled back: the thermal stress in x reaches the falling yield stress
    on heating, then reverses on cooling. Two points: the second heats to 723 K only."""
    t = np.linspace(0.0, 1.0, steps + 1)
    up = np.interp(t, [0, 0.5, 1], [0, 1, 0])
    T = 293.0 + np.stack([630.0 * up, 430.0 * up], axis=1)
    return {"time": np.stack([t, t], axis=1), "strain": np.zeros((steps + 1, 2, 6)),
            "stress": np.zeros((steps + 1, 2, 6)), "control": np.array([0, 1, 1, 1, 1, 1], bool),
            "temperature": T}


def _oracle_uniaxial(T: np.ndarray, P: dict) -> tuple[np.ndarray, np.ndarray]:
    """The same history in closed form: sigma_xx of a bar held at zero axial strain, free laterally
    (uniaxial stress), one-dimensional linear-hardening return with the table properties: per step
    sigma_tr = E (-eth - ep_x), f = |sigma_tr| - sy - H ep, d ep = f / (E + H)."""
    sig, epx, ep = np.zeros_like(T), 0.0, 0.0
    for n in range(1, len(T)):
        E, sy = properties(T[n], P)
        s_tr = E * (-P["alpha"] * (T[n] - P["T_ref"]) - epx)
        f = abs(s_tr) - sy - P["H"] * ep
        if f > 0:
            dg = f / (E + P["H"])
            epx += np.sign(s_tr) * dg
            ep += dg
            s_tr -= E * np.sign(s_tr) * dg
        sig[n] = s_tr
    return sig, ep


def test_a_constrained_thermal_cycle_follows_the_tables():
    """run_history with a temperature array: the axial stress of each step against the uniaxial
    closed form (the lateral stresses are driven to zero by the control Newton, 1e-9 of the stress).
    The hot point yields on heating and again in reverse on cooling; the table's knots at 573 and
    773 K are crossed by both."""
    from modelc.runtime.driver import run_history

    m = _module().Model(dtype=torch.float64, backend="c")
    hist = _thermal_cycle()
    res = run_history(m, hist, progress=False)
    assert res.ok, res.summary()
    S = np.asarray(res["stress"])
    for p in range(2):
        want, ep = _oracle_uniaxial(hist["temperature"][:, p], DEFAULTS)
        np.testing.assert_allclose(S[:, p, 0], want, rtol=0, atol=1e-9 * np.abs(want).max())
        np.testing.assert_allclose(S[:, p, 1:], 0.0, atol=1e-9 * np.abs(want).max())
        assert abs(float(np.asarray(res["equivalent_plastic_strain"])[-1, p]) - ep) <= 1e-12
    assert np.asarray(res["equivalent_plastic_strain"])[-1].min() > 1e-4  # both yielded


def test_history_gradients_by_table_values_match_central_differences():
    """``simulate`` through a strain-driven history at rising temperature: the gradient of a random
    weighted sum of the stresses by the yield stress table's values and a modulus against central
    differences of the whole history (h of 1e-6 relative; within 1e-6 of the difference plus the
    rounding of the losses, ``central_difference_bound``). The history's temperatures (400-700 K)
    stay below 773 K, where the 973 K value's hat function begins: its gradient is zero, exactly."""
    from modelc.runtime.history_grad import simulate

    m = _module().Model(dtype=torch.float64, backend="c")
    steps = 40
    t = np.linspace(0.0, 1.0, steps)
    strain = np.zeros((steps, 2, 6))
    strain[:, 0, 0] = 4e-3 * np.interp(t, [0, 0.6, 1], [0, 1, 0.4])
    strain[:, 0, 1:3] = -2e-3 * np.interp(t, [0, 0.6, 1], [0, 1, 0.4])[:, None]
    strain[:, 1, 5] = 5e-3 * t
    T = np.stack([400 + 300 * t, 700 - 300 * t], axis=1)
    hist = {"time": np.stack([t, t], axis=1), "strain": strain, "temperature": T}
    w = torch.randn(steps, 2, 6, dtype=torch.float64)
    names = ("sy_293", "sy_573", "sy_773", "sy_973", "E_773")

    def loss(p):
        r = simulate(m, hist, params=p)
        assert bool(r["converged"].all())
        return (r["state/S"] * w).sum(), r

    P = {k: torch.tensor(DEFAULTS[k], dtype=torch.float64, requires_grad=True) for k in names}
    L, r = loss(P)
    assert r["state/internal/ep"].detach().numpy()[-1].min() > 1e-4  # both points flowed
    scale = float((r["state/S"] * w).abs().sum())
    L.backward()
    with torch.no_grad():
        for k, v in P.items():
            h = 1e-6 * float(v)
            fd = (loss({**P, k: v + h})[0] - loss({**P, k: v - h})[0]) / (2 * h)
            if k == "sy_973":
                assert float(v.grad) == 0.0, (k, float(v.grad))
                continue
            assert abs(float(fd - v.grad)) <= central_difference_bound(fd, scale, h), (k, float(fd), float(v.grad))
