"""Physical properties of the library models that need no reference data: rate (in)dependence, the
consistency condition of the rate-independent models, and the Perzyna flow law, on the reference
interpreter (a shorter history: the first 30 steps, through first yield, the peak at step 25 and the
reversal) and on the generated PyTorch code (float64, the whole 100-step history).

Tolerances: the specs' Newton stops at ||R|| <= 1e-10 (or 1e-10 ||R0||) on a residual mixing plastic
strains and stresses. A time-scaled history reaches the same solution by different iterates (the flow
rate unknown scales with 1 / dt, and with it the consistency residual), so results can differ by the
stopping error; Newton's last (quadratic) step usually lands far below it: observed 5e-12 relative
in stress; bound 1e-9 (a rate-dependent model differs by percents: Perzyna 1.7e-2), flow rate x time
scale 1e-6. How far a converged state sits off the yield surface: by the tolerance argument up to
~2e-5 MPa (1e-10 of plastic strain x 2 mu), observed 1.5e-8 MPa; bound 1e-5 MPa (NEML2 at 1e-12
tolerance: ~1e-11 MPa).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from library_helpers import (I6, RATE_INDEPENDENT, REF_NAMES, STRESS, call_compiled, compiled, dev, lame,
                             per_point_rel_err, reference, reference_params, run_interpreted, von_mises,
                             yield_radius)

SCALES = (1.0, 10.0, 0.1)  # time multipliers: the same strains, 10x slower, 10x faster
BASE_POINTS = (1, 2)  # A = 0.01 and 0.015 over 10 s
PATHS = ["interpreter", "torch-f64"]
INTERPRETER_STEPS = 30


def _scaled_history(model: str):
    """(time, strain) with len(SCALES) x len(BASE_POINTS) points, scale-major."""
    ref = reference(model)
    pts = list(BASE_POINTS)
    time = np.concatenate([ref["time"][:, pts] * s for s in SCALES], axis=1)
    strain = np.concatenate([ref["strain"][:, pts]] * len(SCALES), axis=1)
    return time, strain


def _run(path: str, model: str, time: np.ndarray, strain: np.ndarray, params: dict) -> dict:
    if path == "interpreter":
        out = run_interpreted(model, time, strain, params, steps=INTERPRETER_STEPS)
    else:
        from modelc.runtime.driver import run_history

        out = run_history(compiled(model, "torch", torch.float64), {"time": time, "strain": strain},
                          params=params, progress=False)
    assert np.asarray(out["converged"]).all(), f"{model} ({path}): a point did not converge"
    if hasattr(out, "with_aliases"):  # a RunResult holds each array once; its aliases are names too
        out = out.with_aliases()
    return {k: np.asarray(v) for k, v in out.items()}


def _by_scale(a: np.ndarray) -> list[np.ndarray]:
    n = len(BASE_POINTS)
    return [a[:, i * n:(i + 1) * n] for i in range(len(SCALES))]


@pytest.fixture(scope="module")
def runs():
    """Each (model, path) run once for the whole module."""
    cache: dict = {}

    def get(model: str, path: str):
        if (model, path) not in cache:
            time, strain = _scaled_history(model)
            cache[model, path] = _run(path, model, time, strain, reference_params(model))
        return cache[model, path]

    return get


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("model", RATE_INDEPENDENT)
def test_rate_independent_models_ignore_the_time_scale(model: str, path: str, runs) -> None:
    out = runs(model, path)
    plastic = out["state/internal/gamma_rate"].max()
    assert plastic > 0, "the history must reach plastic flow"
    for name in REF_NAMES:
        if name not in out:
            continue
        base, *others = _by_scale(out[name])
        for s, other in zip(SCALES[1:], others):
            if name == "state/internal/gamma_rate":  # a rate: gamma * dt is what is invariant
                err, tol = per_point_rel_err(other * s, base), 1e-6
            else:
                err, tol = per_point_rel_err(other, base), 1e-9
            assert err <= tol, f"{model} ({path}): {name} changes by {err:.2e} when time runs x{s}"


def _von_mises_history(out: dict) -> list[np.ndarray]:
    return _by_scale(von_mises(out[STRESS]))


@pytest.mark.parametrize("path", PATHS)
def test_perzyna_stress_grows_with_the_rate(path: str, runs) -> None:
    out = runs("perzyna_iso", path)
    slow, fast = 1, 2  # indices in SCALES: x10 slower, x10 faster
    vm = _von_mises_history(out)
    load = slice(3, 26)  # first loading, past first yield (step 2-3) up to the peak at step 25
    assert (vm[fast][load] > vm[0][load] + 0.5).all(), "faster loading must give a higher stress"
    assert (vm[0][load] > vm[slow][load] + 0.5).all(), "slower loading must give a lower stress"
    # and the rate effect is not a round-off artefact: percent-level at the peak
    assert (vm[fast][25] / vm[slow][25] > 1.02).all()


@pytest.mark.parametrize("path", PATHS)
def test_perzyna_is_above_its_rate_independent_limit(path: str, runs) -> None:
    """With the same E, nu, sigma_y, K, the viscoplastic stress during monotonic loading lies on or
    above the rate-independent one (the overstress f >= 0 drives the flow)."""
    p, q = reference_params("perzyna_iso"), reference_params("j2_linear_iso")
    assert all(p[k] == q[k] for k in ("E", "nu", "sigma_y", "K")), "the two runs must share E, nu, sigma_y, K"
    ri, vp = runs("j2_linear_iso", path), runs("perzyna_iso", path)
    load = slice(1, 26)
    for s, a, b in zip(SCALES, _von_mises_history(vp), _von_mises_history(ri)):
        assert (a[load] >= b[load] - 1e-6).all(), f"perzyna below the rate-independent limit (x{s})"
        assert (a[25] > b[25] + 1.0).all(), f"perzyna shows no overstress at the peak (x{s})"


@pytest.mark.parametrize("path", PATHS)
def test_perzyna_flow_law_holds(path: str, runs) -> None:
    """gamma = (<f> / eta)^n with f = sqrt(2/3) (vm(S) - sigma_y - K ep), from the outputs alone."""
    p = reference_params("perzyna_iso")
    out = runs("perzyna_iso", path)
    f = np.sqrt(2 / 3) * (von_mises(out[STRESS]) - yield_radius("perzyna_iso", p, out["state/internal/ep"]))
    law = (np.maximum(f, 0.0) / p["eta"]) ** p["n"]
    gamma = out["state/internal/gamma_rate"]
    assert gamma.max() > 1e-3
    # the Newton residual gamma - law stops at <= 1e-10 (absolute) or 1e-10 ||R0||
    assert np.all(np.abs(gamma - law) <= 1e-9 + 1e-6 * np.abs(law))
    # Ep' = gamma N, ep' = sqrt(2/3) gamma: the flow rule of the outputs, step by step
    dt = np.diff(_scaled_history("perzyna_iso")[0][: len(gamma)], axis=0)
    dep = np.diff(out["state/internal/ep"], axis=0)
    assert np.allclose(dep, np.sqrt(2 / 3) * gamma[1:] * dt, rtol=1e-8, atol=1e-14)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("model", RATE_INDEPENDENT)
def test_rate_independent_states_respect_consistency(model: str, path: str, runs) -> None:
    """f <= 0 everywhere, f = 0 where the material flows, gamma >= 0 (up to the stopping error)."""
    p = reference_params(model)
    out = runs(model, path)
    S = out[STRESS] - out.get("state/internal/X", 0.0)
    ep = out.get("state/internal/ep", np.zeros(S.shape[:-1]))
    f = np.sqrt(2 / 3) * (von_mises(S) - yield_radius(model, p, ep))
    gamma = out["state/internal/gamma_rate"]
    flowing = gamma > 1e-8
    assert flowing.sum() > 10 and (~flowing).sum() > 10
    assert f.max() <= 1e-5, f"{model} ({path}): a state outside the yield surface, f = {f.max():.2e} MPa"
    assert np.abs(f[flowing]).max() <= 1e-5, f"{model} ({path}): flowing off the yield surface"
    assert gamma.min() >= -1e-8
    # the plastic strain is deviatoric (associative J2 flow) and follows the flow direction
    Ep = out["state/internal/Ep"]
    assert np.abs(Ep[..., :3].sum(axis=-1)).max() <= 1e-12
    assert np.abs(dev(Ep) - Ep).max() <= 1e-12


# --------------------------------------------------------------------------------------------------
# the Perzyna rate exponent: n >= 1 (spec/perzyna.yaml, spec/chaboche.yaml, perzyna_iso's radial return)
PERZYNA = ("perzyna_iso", "perzyna_iso_coupled", "chaboche2_coupled")


@pytest.mark.parametrize("model", PERZYNA)
def test_a_rate_exponent_below_one_is_refused_by_name(model: str) -> None:
    """Below n = 1 the flow rate's slope is infinite at the yield surface: the elastic tangent came out
    NaN (0 * inf) and the coupled Newton failed at 1% strain; the bounds now refuse such an n."""
    from modelc.runtime.errors import InputError

    with pytest.raises(InputError, match=r"parameter n = 0\.5 is outside its bounds \[1, inf\)"):
        m = compiled(model, "torch", torch.float64)
        m({v.name: torch.zeros((1, 6) if v.type == "SR2" else (1,), dtype=torch.float64) for v in m.INPUTS},
          n=0.5)


@pytest.mark.parametrize("backend", ["torch", "c"])
@pytest.mark.parametrize("model", PERZYNA)
def test_the_lowest_rate_exponent_gives_finite_exact_tangents(model: str, backend: str) -> None:
    """At n = 1 (the edge of the bounds) elastic points take the elastic stiffness (closed form) and
    a plastic point the finite-difference tangent of the stresses (central, h = 1e-7 of the strain:
    truncation ~1e-10, roundoff ~1e-16 x 1e3 MPa / 1e-9 ~ 1e-4 of entries ~1e5 MPa)."""
    m = compiled(model, backend, torch.float64)
    strain = np.zeros((4, 6))
    strain[:, 0] = [0.0, 1e-5, 1e-4, 1e-2]  # the origin, two elastic points, a plastic one
    strain[3, 1:4] = [-3e-3, -4e-3, 2e-3]

    def call(e, derivatives=True):
        ins = {v.name: np.zeros((len(e), 6) if v.type == "SR2" else (len(e),)) for v in m.INPUTS}
        ins["forces/E"], ins["forces/t"] = e, np.ones(len(e))
        return call_compiled(m, ins, derivatives=derivatives, params={"n": 1.0})

    out, tan, status = call(strain)
    assert status["converged"].all() and np.isfinite(tan).all()
    lam, mu, _ = lame(200000.0, 0.3)
    stiffness = lam * np.outer(I6, I6) + 2 * mu * np.eye(6)
    assert np.allclose(tan[:3], stiffness, rtol=1e-12, atol=0.0)
    h = 1e-7 * np.abs(strain[3]).max()
    fd = np.stack([(call(strain[3:] + h * np.eye(6)[j], False)[0][STRESS][0]
                    - call(strain[3:] - h * np.eye(6)[j], False)[0][STRESS][0]) / (2 * h) for j in range(6)], axis=1)
    assert np.abs(tan[3] - fd).max() <= 1e-4 * np.abs(fd).max(), (tan[3], fd)
    assert not np.allclose(tan[3], stiffness, rtol=1e-3)  # the plastic point is plastic
