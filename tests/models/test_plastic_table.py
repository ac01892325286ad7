"""A tabulated hardening curve (tests/models/specs/j2_plastic_table.yaml): the yield stress is
``interp`` of the equivalent plastic strain, old(ep) + dgamma, inside the Newton residual (Abaqus'
*PLASTIC table). The oracle: the radial return's one equation q_tr - 3 G dg = sy(ep_old + dg) with
sy from numpy.interp, bisected to the last bit; the consistent tangent against central
differences of the oracle.

Fresh random points every run: elastic ones, and plastic ones whose step starts and ends on every
segment of the table and past its last knot (several segments crossed in one step), on every
backend. Newton on the piecewise-linear residual takes at most 3 iterations, asserted (measured:
1 within a segment, 2 across up to three knots).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from library_helpers import (ENTRY_ROUNDOFF, REPO, assert_states_within, device_for, spec_program,
                             stop_bound)

SPEC = REPO / "tests" / "models" / "specs" / "j2_plastic_table.yaml"
NAME = "j2_plastic_table"
KNOTS = np.array([0.0, 0.01, 0.05, 0.2])
P = dict(E=200000.0, nu=0.3, s0=250.0, s1=300.0, s2=340.0, s3=360.0)
U64 = 2.0 ** -53
STATE = ("state/S", "state/internal/Ep", "state/internal/ep")
DEV = np.eye(6) - np.outer([1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]) / 3
I2 = np.array([1.0, 1, 1, 0, 0, 0])


def _sy(ep):
    return np.interp(ep, KNOTS, [P["s0"], P["s1"], P["s2"], P["s3"]])


def _root(fun, hi: float) -> float:
    """The root of a decreasing ``fun`` on [0, hi] with fun(0) > 0 >= fun(hi), bisected to one ulp."""
    lo = 0.0
    while True:
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            return mid
        lo, hi = (mid, hi) if fun(mid) > 0 else (lo, mid)


def oracle_step(eps, Ep_old, ep_old):
    G, K = P["E"] / (2 * (1 + P["nu"])), P["E"] / (3 * (1 - 2 * P["nu"]))
    e = eps - Ep_old
    s_tr = 2 * G * DEV @ e
    q_tr = np.sqrt(1.5) * np.linalg.norm(s_tr)
    vol = K * e[:3].sum() * I2
    f = lambda dg: q_tr - 3 * G * dg - _sy(ep_old + dg)  # noqa: E731
    if f(0.0) <= 0:
        return vol + s_tr, Ep_old.copy(), ep_old
    dg = _root(f, q_tr / (3 * G))
    n = 1.5 * s_tr / q_tr
    return vol + (1 - 3 * G * dg / q_tr) * s_tr, Ep_old + dg * n, ep_old + dg


def _points(rng, n: int = 40) -> dict:
    """Old hardening on every segment and past the table; deviatoric strains from inside the yield
    surface to far past it (a step of up to 0.25 in ep crosses every knot)."""
    ep_old = np.concatenate([rng.uniform(0, 0.3, n - 8), KNOTS, np.zeros(4)])  # on each knot too
    G = P["E"] / (2 * (1 + P["nu"]))
    d = (DEV @ rng.normal(0, 1, (6, n))).T
    q_target = _sy(ep_old) * rng.uniform(0.5, 1.0, n) + 3 * G * rng.uniform(0, 1, n) ** 3 * 0.25
    q_target[-4:] = _sy(0.0) + 3 * G * rng.uniform(0.06, 0.3, 4)  # from 0 past two or three knots
    q_target[:8] = _sy(ep_old[:8]) * rng.uniform(0.3, 0.95, 8)  # elastic
    eps = d / np.linalg.norm(d, axis=1, keepdims=True) * (q_target / (np.sqrt(6) * G))[:, None]
    Ep_old = (DEV @ rng.normal(0, 1e-3, (6, n))).T
    return {"forces/E": eps + Ep_old + rng.normal(0, 1e-4, (n, 1)) * I2, "old_state/internal/Ep": Ep_old,
            "old_state/internal/ep": ep_old}


@functools.lru_cache(maxsize=None)
def _module():
    import modelc

    return modelc.load(SPEC, NAME)


def _call(backend, ins, derivatives=False):
    device = device_for(backend)
    m = _module().Model(dtype=torch.float64, backend=backend, device=device)
    r = m({k: torch.as_tensor(v, device=device) for k, v in ins.items()}, derivatives=derivatives)
    assert r.status.converged.all()
    out = {k: r[k].detach().cpu().numpy() for k in STATE}
    T = r.jacobian["state/S", "forces/E"] if derivatives else None
    T = None if T is None else getattr(T, "tensor", T).detach().cpu().numpy().reshape(-1, 6, 6)
    return out, T, r.status.iterations.cpu().numpy()


@pytest.mark.parametrize("backend", ("torch", "c", "triton"))
def test_states_are_the_bisected_return_on_the_table(backend):
    rng = np.random.default_rng()
    ins = _points(rng)
    rows = [oracle_step(ins["forces/E"][i], ins["old_state/internal/Ep"][i], ins["old_state/internal/ep"][i])
            for i in range(len(ins["forces/E"]))]
    want = {k: np.array([r[j] for r in rows]) for j, k in enumerate(STATE)}
    dep = want["state/internal/ep"] - ins["old_state/internal/ep"]
    crossed = [np.sum((KNOTS > a) & (KNOTS < b)) for a, b in zip(ins["old_state/internal/ep"], want["state/internal/ep"])]
    assert (dep > 0).sum() >= 20 and (dep == 0).sum() >= 8 and max(crossed) >= 2
    got, _, its = _call(backend, ins)
    stop = stop_bound(spec_program(SPEC, NAME), ins, P, 1e-12 + 2 * ENTRY_ROUNDOFF * U64, STATE)

    def scale(k, w):
        big = np.abs(ins["forces/E"]).max(axis=1) + np.abs(ins["old_state/internal/Ep"]).max(axis=1)
        here = np.abs(w).max(axis=1)
        if k == "state/S":
            return (P["E"] / (1 - 2 * P["nu"]) * big + here)[:, None]
        return (big + here)[:, None] if k == "state/internal/Ep" else (ins["old_state/internal/ep"] + here)[:, None]

    assert_states_within(got, want, stop, scale, 2 * U64, STATE)
    # Newton on the piecewise-linear residual: the elastic 3 G dominates every segment's slope, so the
    # first step lands on the root's segment and the second on the root (measured: 1 iteration
    # within a segment, 2 across up to three knots)
    assert its.max() <= 3, (its.max(), max(crossed))


def test_tangent_is_the_oracles_difference_quotient():
    """Central differences (h = 1e-8 on strains of 1e-3) of the bisected oracle, away from a knot
    (where the tangent changes by the table's slope change and a difference quotient would mix
    the two sides)."""
    rng = np.random.default_rng()
    ins = _points(rng)
    _, T, _ = _call("c", ins, derivatives=[("state/S", "forces/E")])
    h, checked = 1e-8, 0
    for i in range(len(ins["forces/E"])):
        args = (ins["old_state/internal/Ep"][i], ins["old_state/internal/ep"][i])
        ep = oracle_step(ins["forces/E"][i], *args)[2]
        if np.min(np.abs(KNOTS - ep)) < 1e-6:
            continue
        fd = np.stack([(oracle_step(ins["forces/E"][i] + h * np.eye(6)[j], *args)[0]
                        - oracle_step(ins["forces/E"][i] - h * np.eye(6)[j], *args)[0]) / (2 * h)
                       for j in range(6)], axis=1)
        bound = 1e-6 * np.abs(fd).max() + 4 * ENTRY_ROUNDOFF * U64 * P["E"] * 4 * np.abs(ins["forces/E"][i]).max() / h
        assert np.abs(T[i] - fd).max() <= bound, (i, np.abs(T[i] - fd).max(), bound)
        checked += 1
    assert checked >= len(ins["forces/E"]) - 8


NAN_SPEC = """
models:
  table_of_log:
    parameters:
      a: {default: 2.0}
    inputs:
      x: {var: forces/x}
    outputs:
      y: {var: state/y}
    equations:
      y: "interp(log(x), [-1, 0, 2], [a, 3*a, -a])"
"""


@pytest.mark.parametrize("backend", ("torch", "c", "triton"))
def test_a_table_of_a_nan_computed_inside_the_model_is_nan(tmp_path, backend):
    """A NaN table argument computed inside the model (log of a negative input) fails every knot
    comparison: the table gives NaN, not its first value (it gave y0 = 2.0, a plausible number).
    Elsewhere: numpy.interp, and the derivative by x the slope of the segment times 1/x."""
    import modelc

    spec = tmp_path / "t.yaml"
    spec.write_text(NAN_SPEC, encoding="utf-8")
    device = device_for(backend)
    m = modelc.load(spec, "table_of_log").Model(dtype=torch.float64, backend=backend, device=device)
    rng = np.random.default_rng()
    x = np.concatenate([[-1.0, -1e-300, 0.0], rng.uniform(1e-3, 20.0, 13)])
    r = m({"forces/x": torch.as_tensor(x, device=device)}, derivatives=True)
    y = r["state/y"].cpu().numpy()
    dy = getattr(r.jacobian["state/y", "forces/x"], "tensor", r.jacobian["state/y", "forces/x"])
    dy = dy.cpu().numpy().reshape(-1)
    with np.errstate(all="ignore"):
        lx = np.log(x)
    assert np.isnan(y[:2]).all(), y[:3]  # (its derivative, steps of the comparisons, is 0 there)
    assert y[2] == 2.0  # log(0) = -inf: below the first knot, the first value
    knots, values = np.array([-1.0, 0.0, 2.0]), np.array([2.0, 6.0, -2.0])
    np.testing.assert_allclose(y[3:], np.interp(lx[3:], knots, values), rtol=1e-14, atol=1e-14)
    seg = np.searchsorted(knots, lx[3:], side="right") - 1
    slope = np.where((seg >= 0) & (seg < 2), (np.diff(values) / np.diff(knots))[np.clip(seg, 0, 1)], 0.0)
    np.testing.assert_allclose(dy[3:], slope / x[3:], rtol=1e-14, atol=0)
