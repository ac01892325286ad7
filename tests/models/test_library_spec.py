"""The model library (spec/): every file loads, the five library models are wired as documented with
NEML2's parameter names and defaults, and the building blocks compute NEML2's formulation — values
against closed forms, derivatives against central finite differences (both sides of every kink)."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from fe_util import SPEC_DIR, central_fd, lambdify
from modelc.frontend import load_spec

S2, S23, S32 = np.sqrt(2.0), np.sqrt(2 / 3), np.sqrt(1.5)
DEFAULTS = dict(E=200000.0, nu=0.3, sigma_y=100.0, K=2000.0, R=50.0, d=20.0, C=10000.0, g=100.0,
                eta=200.0, n=5.0)
LIBRARY = {
    "elastic": {"E", "nu"},
    "j2_perfect": {"E", "nu", "sigma_y"},
    "j2_linear_iso": {"E", "nu", "sigma_y", "K"},
    "j2_voce_af": {"E", "nu", "sigma_y", "R", "d", "C", "g"},
    "perzyna_iso": {"E", "nu", "sigma_y", "K", "eta", "n"},
}
LIBRARY.update({k + "_coupled": v for k, v in LIBRARY.items() if k != "elastic"})  # NEML2-form twins
#: typical magnitudes of the variables, for random points
SCALE = {"forces/E": 1e-2, "state/internal/Ep": 1e-2, "state/S": 150.0, "state/internal/M": 150.0,
         "state/internal/X": 30.0, "state/internal/k": 20.0, "state/internal/fp": 20.0,
         "state/internal/ep": 0.05, "state/internal/gamma_rate": 0.1, "state/internal/NM": 0.5,
         "forces/t": 1e-6, "old_forces/t": 1e-6}


@pytest.fixture(scope="module")
def lib():
    return load_spec(SPEC_DIR / "library.yaml")


@pytest.mark.parametrize("path", sorted(p.name for p in SPEC_DIR.glob("*.yaml")))
def test_every_spec_file_loads(path):
    spec = load_spec(SPEC_DIR / path)
    assert spec.models


def _leaves(lib, name):
    out = []
    for m in lib.compositions[[c.name for c in lib.compositions].index(name)].models:
        model = lib.model(m)
        out.append(model)
        if model.implicit is not None:
            out += [lib.model(u) for u in model.implicit.uses]
    return out


def test_library_models_parameters_and_wiring(lib):
    comps = {c.name: c for c in lib.compositions}
    assert set(LIBRARY) <= set(comps)
    for name, params in LIBRARY.items():
        found = {}
        for m in _leaves(lib, name):
            for p in m.parameters:
                assert found.setdefault(p.name, p.default) == p.default
        assert set(found) == params, name
        assert all(found[p] == (DEFAULTS[p],) for p in params)
    for name in set(LIBRARY) - {"elastic"}:
        rm, el = (lib.model(m) for m in comps[name].models)
        assert el.name == "elasticity" and comps[name].keep == ("state/internal/Ep",)
        base = name.removesuffix("_coupled")
        states = {"state/internal/Ep", "state/internal/gamma_rate"}
        states |= {"state/internal/ep"} if base != "j2_perfect" else set()
        states |= {"state/internal/X"} if base == "j2_voce_af" else set()
        if name == base:  # the radial return: the same states, at most one Scalar unknown
            assert {v.name for v in rm.outputs} == states, name
            assert rm.is_implicit == (base in ("j2_voce_af", "perzyna_iso")), name
            if rm.is_implicit:
                assert [u.type.name for u in rm.implicit.unknowns] == ["Scalar"], name
            continue
        assert rm.is_implicit
        unknowns = {v.name for v in rm.implicit.unknowns}
        assert unknowns == states, name
        # every variable the residuals read is an old value, time, or provided by a used model
        provided = {v.name for u in rm.implicit.uses for v in lib.model(u).outputs}
        for v in rm.inputs:
            assert v.name.startswith("old_") or v.name == "forces/t" or v.name in provided, (name, v.name)
        # the used models read only unknowns, strain, or what another used model provides
        for u in rm.implicit.uses:
            for v in lib.model(u).inputs:
                assert (v.name in unknowns | provided | {"forces/E", "forces/t", "old_forces/t"}
                        or v.name.startswith("old_")), (name, u, v.name)


_COMPILED: dict = {}


def _eval(model, out_name, values):
    """An output of an explicit model at ``values`` (inputs in order), parameters at their defaults."""
    key = (model.name, out_name)
    if key not in _COMPILED:
        syms = [s for v in model.inputs for s in v.symbols]
        psyms = [s for p in model.parameters for s in p.symbols]
        comps = model.equations[[e.var.name for e in model.equations].index(out_name)].components
        _COMPILED[key] = lambdify(syms + psyms, sp.Matrix(comps))
    pvals = [DEFAULTS[p.name] for p in model.parameters]
    return np.asarray(_COMPILED[key](*values, *pvals), dtype=float).ravel()


def _sym_full(m6):
    A = np.diag(m6[:3]).astype(float)
    for k, (i, j) in zip(range(3, 6), ((1, 2), (0, 2), (0, 1))):
        A[i, j] = A[j, i] = m6[k] / S2
    return A


def test_elasticity_closed_form(lib):
    rng = np.random.default_rng()
    m = lib.model("elasticity")
    eps, ep = rng.normal(size=6) * 1e-3, rng.normal(size=6) * 1e-3
    E, nu = DEFAULTS["E"], DEFAULTS["nu"]
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    ee = eps - ep
    want = lam * ee[:3].sum() * np.array([1, 1, 1, 0, 0, 0]) + 2 * mu * ee
    np.testing.assert_allclose(_eval(m, "state/S", np.r_[eps, ep]), want, rtol=1e-12)
    np.testing.assert_allclose(_eval(lib.model("elasticity_total"), "state/S", eps),
                               lam * eps[:3].sum() * np.array([1, 1, 1, 0, 0, 0]) + 2 * mu * eps, rtol=1e-12)


def test_j2_yield_surface_is_neml2s(lib):
    rng = np.random.default_rng()
    m = lib.model("j2_yield")
    for _ in range(5):
        M, k = rng.normal(size=6) * 150, rng.normal() * 20
        A = _sym_full(M)
        dev = A - np.trace(A) / 3 * np.eye(3)
        vm = np.sqrt(1.5 * np.sum(dev * dev))
        f = _eval(m, "state/internal/fp", np.r_[M, k])[0]
        assert np.isclose(f, S23 * (vm - DEFAULTS["sigma_y"] - k), rtol=1e-12)
        NM = _eval(m, "state/internal/NM", np.r_[M, k])
        np.testing.assert_allclose(NM, central_fd(lambda x: _eval(m, "state/internal/fp", np.r_[x, k])[0], M,
                                                  h=1e-3), rtol=1e-6, atol=1e-8)
        assert np.isclose(np.linalg.norm(NM), 1.0)  # NEML2's scaling makes df/dM a unit tensor
        np.testing.assert_allclose(_sym_full(NM), dev / np.linalg.norm(dev), rtol=1e-10)
        assert np.isclose(_eval(m, "state/internal/Nk", np.r_[M, k])[0], S23)  # -df/dk


def test_j2_flow_direction_has_no_nan_at_zero_deviator(lib):
    """An elastic point of an implicit residual evaluates dev(M)/|dev(M)| at dev(M) = 0."""
    m = lib.model("j2_yield")
    M = m.inputs[0].symbols
    nm = [eq for eq in m.equations if eq.var.name == "state/internal/NM"][0].components
    syms = [s for v in m.inputs for s in v.symbols] + [s for p in m.parameters for s in p.symbols]
    for point in (np.zeros(6), np.array([50.0, 50.0, 50.0, 0, 0, 0])):
        vals = [*point, 0.0, 100.0]
        assert np.all(_eval(m, "state/internal/NM", vals[:7]) == 0)
        jac = sp.Matrix(nm).jacobian(sp.Matrix(M))
        assert np.all(np.isfinite(np.asarray(lambdify(syms, jac)(*vals), dtype=float)))


def _generic_fd(model, rng, overrides=None):
    """d outputs / d inputs of an explicit model vs central differences at one random point."""
    scales = np.concatenate([np.full(v.type.size, SCALE.get(v.name, 1.0)) for v in model.inputs])
    x0 = rng.normal(size=scales.size) * scales
    if overrides:
        x0 = overrides(x0)
    syms = [s for v in model.inputs for s in v.symbols]
    psyms = [s for p in model.parameters for s in p.symbols]
    pvals = [DEFAULTS[p.name] for p in model.parameters]
    for eq in model.equations:
        f = lambdify(syms + psyms, sp.Matrix(eq.components))
        jac = lambdify(syms + psyms, sp.Matrix(eq.components).jacobian(syms))
        J = np.asarray(jac(*x0, *pvals), dtype=float).reshape(len(eq.components), len(syms))
        FD = np.zeros_like(J)
        for j in range(x0.size):
            h = 1e-6 * scales[j]
            xp, xm = x0.copy(), x0.copy()
            xp[j] += h
            xm[j] -= h
            FD[:, j] = (np.asarray(f(*xp, *pvals), float).ravel() - np.asarray(f(*xm, *pvals), float).ravel()) / (2 * h)
        for i, (g, fd) in enumerate(zip(J, FD)):
            np.testing.assert_allclose(g, fd, rtol=2e-5, atol=2e-5 * max(1.0, np.max(np.abs(fd))),
                                       err_msg=f"{model.name}: d {eq.var.name}[{i}]")


EXPLICIT_BLOCKS = ["elasticity", "elasticity_total", "mandel_stress", "overstress", "j2_yield",
                   "j2_yield_perfect", "associative_flow", "associative_isotropic_hardening",
                   "linear_isotropic_hardening", "voce_isotropic_hardening", "armstrong_frederick",
                   "perzyna_flow_rate", "fischer_burmeister_consistency", "min_map_consistency"]


@pytest.mark.parametrize("name", EXPLICIT_BLOCKS)
def test_block_derivatives_match_central_differences(lib, name):
    _generic_fd(lib.model(name), np.random.default_rng())


@pytest.mark.parametrize("side", [1.0, -1.0])
def test_kinks_of_the_flow_rules_from_both_sides(lib, side):
    rng = np.random.default_rng()
    # Perzyna: f just above / below 0
    _generic_fd(lib.model("perzyna_flow_rate"), rng, lambda x: side * np.abs(x) * 1e-2 + side * 1e-3)
    # Fischer-Burmeister around (0, 0): every sign combination of (-f, gamma_rate)
    # (inputs f, gamma_rate, t, old t; dt = 1/E makes the scaled flow rate E dt gamma_rate = gamma_rate;
    # the time steps of the differences are 1e-6 of SCALE["forces/t"], well below dt)
    for s2 in (1.0, -1.0):
        _generic_fd(lib.model("fischer_burmeister_consistency"), rng,
                    lambda x: np.array([side * (abs(x[0]) * 1e-3 + 1e-3), s2 * (abs(x[1]) * 1e-3 + 1e-3),
                                        1.0 / DEFAULTS["E"], 0.0]))


def test_consistency_and_perzyna_values(lib):
    fb, pz = lib.model("fischer_burmeister_consistency"), lib.model("perzyna_flow_rate")
    # inputs (f, gamma_rate, t, old t); the flow rate enters scaled to a stress, E dt gamma_rate
    assert [v.name for v in fb.inputs] == ["state/internal/fp", "state/internal/gamma_rate", "forces/t",
                                           "old_forces/t"]
    assert _eval(fb, "state/internal/consistency", [-5.0, 0.0, 1.0, 0.5])[0] == 0  # elastic: f < 0, no flow
    assert abs(_eval(fb, "state/internal/consistency", [0.0, 0.3, 1.0, 0.5])[0]) < 1e-15  # plastic: f = 0
    assert _eval(fb, "state/internal/consistency", [2.0, 0.0, 1.0, 0.5])[0] < 0  # violated: f > 0
    # both arguments violated: fb(-f, E dt g) = -f + E dt g - sqrt(f^2 + (E dt g)^2)
    f, g, dt = 3.0, -1e-5, 0.5
    b = DEFAULTS["E"] * dt * g
    assert np.isclose(_eval(fb, "state/internal/consistency", [f, g, 1.0, 0.5])[0], -f + b - np.hypot(f, b))
    assert _eval(pz, "state/internal/gamma_rate_perzyna", [-3.0])[0] == 0
    assert np.isclose(_eval(pz, "state/internal/gamma_rate_perzyna", [30.0])[0], (30 / 200) ** 5)
    mm = lib.model("min_map_consistency")  # min(-f, E dt gamma_rate)
    assert _eval(mm, "state/internal/consistency", [-5.0, 0.0, 1.0, 0.5])[0] == 0  # elastic
    assert _eval(mm, "state/internal/consistency", [0.0, 0.3, 1.0, 0.5])[0] == 0  # plastic: f = 0
    assert _eval(mm, "state/internal/consistency", [2.0, 0.0, 1.0, 0.5])[0] == -2.0  # violated: f > 0
    assert _eval(mm, "state/internal/consistency", [-3.0, 1e-5, 1.0, 0.5])[0] == DEFAULTS["E"] * 0.5 * 1e-5
    af = lib.model("armstrong_frederick")
    rng = np.random.default_rng()
    g, N, X = 0.7, rng.normal(size=6), rng.normal(size=6)
    np.testing.assert_allclose(_eval(af, "state/internal/X_rate", np.r_[g, N, X]),
                               (2 / 3 * 10000 * N - 100 * X) * g, rtol=1e-12)


def test_return_map_residuals(lib):
    m = lib.model("j2_voce_af_return_map")
    rng = np.random.default_rng()
    names = [v.name for v in m.inputs] + [v.name for v in m.outputs]
    assert names == ["forces/t", "state/internal/Ep_rate", "state/internal/ep_rate", "state/internal/X_rate",
                     "state/internal/consistency", "old_forces/t", "old_state/internal/Ep",
                     "old_state/internal/ep", "old_state/internal/X", "old_state/internal/gamma_rate",
                     "state/internal/Ep", "state/internal/ep", "state/internal/X", "state/internal/gamma_rate"]
    syms = [s for v in m.inputs + m.outputs for s in v.symbols]
    x = rng.normal(size=len(syms))
    R = [np.asarray(lambdify(syms, sp.Matrix(eq.components))(*x), dtype=float).ravel() for eq in m.implicit.residuals]
    v = dict(zip([s.name for s in syms], x))
    dt = v["forces/t"] - v["old_forces/t"]
    for k, (res, name) in enumerate(zip(R, ("Ep", "ep", "X"))):
        n = 6 if name != "ep" else 1
        cur = np.array([v[f"state/internal/{name}[{i}]" if n > 1 else f"state/internal/{name}"] for i in range(n)])
        old = np.array([v[f"old_state/internal/{name}[{i}]" if n > 1 else f"old_state/internal/{name}"] for i in range(n)])
        rate = np.array([v[f"state/internal/{name}_rate[{i}]" if n > 1 else f"state/internal/{name}_rate"] for i in range(n)])
        np.testing.assert_allclose(res, cur - old - dt * rate, rtol=1e-12)
    assert R[3][0] == v["state/internal/consistency"]
    assert [g.components for g in m.implicit.guess][3] == (sp.Symbol("old_state/internal/gamma_rate", real=True),)
