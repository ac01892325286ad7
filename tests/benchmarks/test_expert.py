"""The hand-written SIMD C update (benchmarks/expert.py) against the PyTorch baselines (an
independent oracle: NEML2's formulation written with torch, itself checked against NEML2's
reference histories and central differences in test_baselines.py), on fresh random states with
elastic and plastic points, odd sizes (partial blocks), every block width, streaming and regular
stores; its vector exp and log against libm."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmarks import baselines as bl
from benchmarks import expert


def _random_problem(model: str, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Strain steps up to ~6x the yield strain around random old states: elastic and plastic points."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1  # noqa: E731
    E = 3e-3 * r(n, 6) * torch.rand(n, 1, generator=g, dtype=torch.float64) ** 3
    dt = 0.05 + torch.rand(n, generator=g, dtype=torch.float64)
    old = {bl.EP: 1e-3 * r(n, 6), bl.X: 40.0 * r(n, 6), bl.EPS: 0.02 * (r(n) + 1)}
    for name in (bl.EP, bl.X):  # plastic strain and back stress are deviatoric
        old[name][:, :3] -= old[name][:, :3].mean(dim=1, keepdim=True)
    return (E, dt, *(old[nm] for nm in bl.STATE[model]))


def _assert_close(model, got, want, names, rtol):
    for name, a, b in zip(names, got, want):
        err = float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))
        assert err <= rtol, f"{model} {name}: relative error {err:.2e} > {rtol:.0e}"


@pytest.mark.parametrize("model", expert.MODELS)
@pytest.mark.parametrize("n", [1, 7, 9, 203])
def test_expert_matches_the_baseline(model: str, n: int) -> None:
    args = _random_problem(model, n, seed=n)
    want = bl.make_step(model, tangent=True)(*args)
    if n >= 100:  # gamma_rate
        assert bool((want[-2] != 0).any()) and bool((want[-2] == 0).any()), "elastic and plastic points"
    got = expert.expert_step(model)(*args, tangent=True)
    rtol = 1e-12 if model != "perzyna_iso" else 1e-11  # y^n and y^(n-1) condition the last digits
    _assert_close(model, got, want, bl.output_names(model, True), rtol)
    value = expert.expert_step(model)(*args, tangent=False)
    assert len(value) == len(want) - 1
    _assert_close(model, value, want[:-1], bl.output_names(model, False), rtol)


def test_expert_perzyna_with_a_fractional_exponent() -> None:
    """n = 4.5: y^n through the vector exp and log (the whole-n path multiplies)."""
    args = _random_problem("perzyna_iso", 101, seed=3)
    p = bl.params_for("perzyna_iso", n=4.5)
    want = bl.make_step("perzyna_iso", p, tangent=True)(*args)
    got = expert.expert_step("perzyna_iso", params={"n": 4.5})(*args, tangent=True)
    _assert_close("perzyna_iso", got, want, bl.output_names("perzyna_iso", True), 1e-11)


@pytest.mark.parametrize("model", expert.MODELS)
def test_block_widths_and_streaming_stores_give_the_same_bits(model: str, monkeypatch) -> None:
    from modelc.runtime import cbuild

    args = _random_problem(model, 1029, seed=11)
    base = [t.clone() for t in expert.expert_step(model, lanes=8)(*args, tangent=True)]
    for lanes in (16, 32):
        got = expert.expert_step(model, lanes=lanes)(*args, tangent=True)
        assert all(torch.equal(a, b) for a, b in zip(got, base)), lanes
    monkeypatch.setattr(cbuild, "stream_bytes", lambda: 0)  # every call streams its outputs
    got = expert.expert_step(model, lanes=8)(*args, tangent=True)
    assert all(torch.equal(a, b) for a, b in zip(got, base))


def test_nonfinite_input_spoils_its_point_only() -> None:
    """A NaN strain gives a NaN stress and tangent at its point (as in the baseline); the block's
    other points are unaffected."""
    args = _random_problem("j2_voce_af", 17, seed=5)
    args[0][4, 2] = float("nan")
    out = expert.expert_step("j2_voce_af")(*args, tangent=True)
    want = bl.make_step("j2_voce_af", tangent=True)(*args)
    assert bool(torch.isnan(out[0][4]).all()) and bool(torch.isnan(out[-1][4]).any())
    for o, w in zip(out, want):
        keep = torch.ones(17, dtype=torch.bool)
        keep[4] = False
        assert float((o[keep] - w[keep]).abs().max() / w[keep].abs().max()) <= 1e-12


def test_vector_exp_and_log_against_libm() -> None:
    g = np.random.default_rng(0)
    x = np.concatenate([g.uniform(-700, 700, 20000), g.uniform(-1, 1, 20000), [0.0, 1e-300, -1e-12, 700.0]])
    got = expert.elementary("exp", torch.from_numpy(x)).numpy()
    want = np.exp(x)
    assert np.max(np.abs(got - want) / want) <= 4 * np.finfo(np.float64).eps
    y = np.concatenate([np.exp(g.uniform(-700, 700, 20000)), g.uniform(0.5, 2.0, 20000), [1.0, 2.0, math.e, 1e-300]])
    got = expert.elementary("log", torch.from_numpy(y)).numpy()
    want = np.log(y)
    ulp = np.spacing(np.maximum(np.abs(want), 1e-300))
    assert np.max(np.abs(got - want) / ulp) <= 4
    assert expert.elementary("log", torch.zeros(3)).isneginf().all()


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="no expert C update for 'gtn'"):
        expert.expert_step("gtn")
    with pytest.raises(ValueError, match="lanes must be 8, 16, 32 or 64"):
        expert.expert_step("j2_voce_af", lanes=12)
    step = expert.expert_step("j2_linear_iso")
    args = _random_problem("j2_linear_iso", 5, seed=1)
    with pytest.raises(TypeError, match="float64 CPU tensors only"):
        step(*(a.float() for a in args), tangent=True)
    with pytest.raises(TypeError, match="takes 4 tensors"):
        step(*args[:3], tangent=True)
    with pytest.raises(ValueError, match="shapes"):
        step(args[0], args[1], args[2][:, :3], args[3], tangent=True)


def test_benchmark_runner_times_the_expert_beside_modelc(tmp_path) -> None:
    from benchmarks import run

    path = run.main(["--models", "j2_voce_af", "--sizes", "64", "--dtypes", "float64", "float32", "--tangent", "yes",
                     "--impls", "modelc", "expert", "floor", "--repeats", "2", "--warmup", "0", "--out", str(tmp_path),
                     "--out-sizes", "64"])
    import json

    recs = json.loads(path.read_text())["records"]
    ex = [r for r in recs if r["impl"] == "expert-c"]
    assert [r["dtype"] for r in ex] == ["float64"]  # float64 on the CPU only
    assert "error" not in ex[0] and ex[0]["errors"]["d(state/S)/d(forces/E)"] <= 1e-12
    md = path.with_suffix(".md").read_text()
    assert "against the hand-written SIMD C update" in md and "| j2_voce_af | yes | 64 | modelc-c |" in md
