"""The hand-written PyTorch baselines (benchmarks/baselines.py) against NEML2's reference histories
and against central finite differences of their own one-step map.

Tolerances (relative to the largest magnitude of each reference array over the whole history):
- float64 vs NEML2: 1e-9. NEML2's reference ran Newton to abs = rel = 1e-12 on residuals whose scale is
  ~1e2-1e3 (MPa) or ~1e-2 (strain), so its own answer carries errors up to ~1e-10 relative; the README
  reports independent reimplementations at ~1e-10. 1e-9 leaves a 10x margin; flow rates (a difference of
  nearby plastic strains divided by dt, tiny at slow rates) get 1e-8. Observed: 1e-16 .. 6e-10.
- float32 vs NEML2: 5e-5 (flow rate 5e-4). One step costs a few ulps (6e-8) relative to the trial stress;
  over 100 steps of a strain path with reversals errors accumulate to ~1e-6; the flow rate is a small
  difference of large numbers (catastrophic cancellation in E - Ep near yield), observed ~8e-6.
- tangent vs central differences, float64, h = 1e-7 on strains ~1e-3..1e-2, points kept >= 1 MPa away
  from the yield surface (h moves the trial stress by ~0.015 MPa, so no kink lies within h).
  Truncation ~h^2 |S'''|: observed 7e-9 relative at worst (j2_voce_af just past yield, where the
  flow direction turns fast; it scales exactly as h^2); round-off ~eps |S| / h ~ 1e-16 * 1e3 / 1e-7
  = 1e-6 MPa against entries ~1e5, i.e. 1e-11. Bound: 1e-7 relative.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import baselines as bl  # noqa: E402

REFERENCE = REPO / "tests" / "reference" / "neml2"
REF_ARRAYS = {
    bl.STRESS: "stress",
    bl.EP: "plastic_strain",
    bl.EPS: "equivalent_plastic_strain",
    bl.X: "back_stress",
    bl.GAMMA: "flow_rate",
    bl.TANGENT: "tangent",
}
RTOL = {torch.float64: 1e-9, torch.float32: 5e-5}
RTOL_RATE = {torch.float64: 1e-8, torch.float32: 5e-4}


def _reference(model: str) -> dict[str, np.ndarray]:
    path = REFERENCE / f"{model}__uniaxial.npz"
    if not path.is_file():
        pytest.fail(f"NEML2 reference data not found at {path} (it is committed: restore it)")
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("model", bl.MODELS)
def test_history_matches_neml2(model: str, dtype: torch.dtype) -> None:
    ref = _reference(model)
    params = {k: float(ref[f"param_{k}"]) for k in bl.PARAMS[model]}
    steps = tuple(int(s) for s in ref["tangent_steps"])
    hist = bl.run_history(model, torch.tensor(ref["strain"], dtype=dtype), torch.tensor(ref["time"], dtype=dtype),
                          params, tangent_steps=steps)
    assert set(hist) == set(bl.output_names(model, tangent=True))
    for name, got in hist.items():
        want = ref[REF_ARRAYS[name]]
        assert got.dtype == dtype and tuple(got.shape) == want.shape, name
        err = np.abs(got.double().numpy() - want).max() / np.abs(want).max()
        tol = (RTOL_RATE if name == bl.GAMMA else RTOL)[dtype]
        assert err <= tol, f"{model} {name} ({dtype}): relative error {err:.2e} > {tol:.0e}"


def _random_points(model: str, B: int, gen: torch.Generator, dtype=torch.float64):
    """Random strains and old states: half clearly elastic, half clearly plastic (|f_tr| >= 1 MPa)."""
    p = bl.params_for(model)
    lam, mu = bl._lame(p)

    def dev6(scale):
        v = torch.randn(B, 6, generator=gen, dtype=dtype) * scale
        return bl._dev(v)

    state = []
    for name in bl.STATE[model]:
        if name == bl.EP:
            state.append(dev6(2e-3))
        elif name == bl.X:
            state.append(dev6(30.0))
        else:
            state.append(torch.rand(B, generator=gen, dtype=dtype) * 0.05)
    # the trial stress is S(E - Ep): scale a random direction so that |f_tr| lands in a chosen band
    direction = torch.randn(B, 6, generator=gen, dtype=dtype)
    direction = direction / direction.norm(dim=-1, keepdim=True)
    target = torch.where(torch.arange(B) % 2 == 0, 0.3, 3.0).to(dtype)  # x yield-ish stress / 2 mu
    E = (state[0] if state else 0.0) + direction * (target * 150.0 / (2 * mu)).unsqueeze(-1)
    E = E + torch.randn(B, 6, generator=gen, dtype=dtype) * 1e-4
    dt = 10.0 ** (torch.rand(B, generator=gen, dtype=dtype) * 4 - 2)
    return E, dt, tuple(state)


def _f_trial(model: str, E, old) -> torch.Tensor:
    p = bl.params_for(model)
    lam, mu = bl._lame(p)
    if model == "elastic":
        return torch.full(E.shape[:1], -1e9, dtype=E.dtype)
    s = bl._dev(bl._elastic_stress(E - old[0], lam, mu))
    if model == "j2_voce_af":
        s = s - old[1]
    named = dict(zip(bl.STATE[model], old))
    ep = named.get(bl.EPS, torch.zeros_like(E[:, 0]))
    k = p["sigma_y"] + p.get("K", 0.0) * ep
    if model == "j2_voce_af":
        k = p["sigma_y"] + p["R"] * (1 - torch.exp(-p["d"] * ep))
    return s.norm(dim=-1) - math.sqrt(2 / 3) * k


@pytest.mark.parametrize("model", bl.MODELS)
def test_tangent_matches_central_differences(model: str) -> None:
    gen = torch.Generator().manual_seed(1000 + bl.MODELS.index(model))
    E, dt, old = _random_points(model, 64, gen)
    f_tr = _f_trial(model, E, old)
    keep = f_tr.abs() >= 1.0
    E, dt, f_tr = E[keep], dt[keep], f_tr[keep]
    old = tuple(v[keep] for v in old)
    if model != "elastic":  # both regimes are exercised
        assert (f_tr > 0).sum() >= 8 and (f_tr < 0).sum() >= 8
    step = bl.make_step(model, tangent=True)
    D = step(E, dt, *old)[-1]
    h = 1e-7
    fd = torch.empty_like(D)
    for j in range(6):
        dE = torch.zeros_like(E)
        dE[:, j] = h
        fd[:, :, j] = (step(E + dE, dt, *old)[0] - step(E - dE, dt, *old)[0]) / (2 * h)
    err = (D - fd).abs().amax(dim=(1, 2)) / fd.abs().amax(dim=(1, 2))
    assert err.max() <= 1e-7, f"{model}: tangent vs FD relative error {err.max():.2e}"
    if model != "elastic":  # the plastic tangent really differs from the elastic one
        C = bl.make_step("elastic")(E, dt)[-1]
        assert ((D - C).abs().amax(dim=(1, 2))[f_tr > 0] > 1e3).all()
        assert ((D - C).abs().amax(dim=(1, 2))[f_tr < 0] == 0).all()


@pytest.mark.parametrize("model", [m for m in bl.MODELS if m != "elastic"])
def test_rate_independent_return_lands_on_yield_surface(model: str) -> None:
    """After a plastic step the new state satisfies its yield condition (perzyna: its flow rule)."""
    gen = torch.Generator().manual_seed(7 + bl.MODELS.index(model))
    E, dt, old = _random_points(model, 32, gen)
    out = dict(zip(bl.output_names(model, tangent=False), bl.make_step(model, tangent=False)(E, dt, *old)))
    new = tuple(out[n] for n in bl.STATE[model])
    p = bl.params_for(model)
    s = bl._dev(out[bl.STRESS]) - (out[bl.X] if bl.X in out else 0.0)
    ep = out.get(bl.EPS, torch.zeros_like(dt))
    k = p["sigma_y"] + (p["R"] * (1 - torch.exp(-p["d"] * ep)) if model == "j2_voce_af" else p.get("K", 0.0) * ep)
    f = s.norm(dim=-1) - math.sqrt(2 / 3) * k
    plastic = out[bl.GAMMA] > 0
    assert plastic.any() and (~plastic).any()
    if model == "perzyna_iso":
        assert torch.allclose(out[bl.GAMMA][plastic], (f[plastic] / p["eta"]) ** p["n"], rtol=1e-10)
    else:
        assert f[plastic].abs().max() <= 1e-9 * p["sigma_y"]
    assert (f[~plastic] <= 0).all()
    assert torch.allclose(new[0] - old[0], dt.unsqueeze(-1) * out[bl.GAMMA].unsqueeze(-1)
                          * s / s.norm(dim=-1, keepdim=True).clamp_min(1e-300), atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("model", ["j2_voce_af", "perzyna_iso"])
def test_fixed_iteration_variant_agrees(model: str, dtype: torch.dtype) -> None:
    """The compile-friendly variant (fixed Newton count, no convergence test) gives the same answer."""
    gen = torch.Generator().manual_seed(99)
    E, dt, old = _random_points(model, 64, gen, dtype)
    ref = bl.make_step(model)(E, dt, *old)
    got = bl.make_step(model, fixed_iterations=12)(E, dt, *old)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for name, g, r in zip(bl.output_names(model), got, ref):
        assert ((g - r).abs().max() / r.abs().max()) <= tol, name
    few = bl.make_step(model, fixed_iterations=1)(E, dt, *old)  # and the count matters
    assert (few[0] - ref[0]).abs().max() > 1e-6 * ref[0].abs().max()


def test_benchmark_runner_checks_before_timing(tmp_path: Path) -> None:
    """benchmarks.run end to end on a tiny config (no NEML2 venv needed), and a wrong implementation
    gets an error instead of a time."""
    from benchmarks import run

    path = run.main(["--models", "j2_linear_iso", "--sizes", "16", "--dtypes", "float64", "--impls", "eager",
                     "--repeats", "2", "--warmup", "0", "--neml2-python", str(tmp_path / "none"),
                     "--out", str(tmp_path)])
    import json

    res = json.loads(path.read_text())
    assert res["machine"]["cores"] and res["copy_bandwidth_bytes_per_s"] > 0
    assert {(r["impl"], r["tangent"]) for r in res["records"]} == {("torch-eager", False), ("torch-eager", True)}
    assert all(r["points_per_s"] > 0 and max(r["errors"].values()) == 0 for r in res["records"])
    assert path.with_suffix(".md").is_file() and path.with_suffix(".png").is_file()

    good = bl.make_step("j2_linear_iso")

    def wrong(*args, tangent):  # stress off by 1e-6 relative
        out = good(*args)
        return (out[0] * (1 + 1e-6), *out[1:]) if tangent else out[:-1]

    args = run.argparse.Namespace(warmup=0, repeats=2, max_seconds=1.0)
    recs = run.bench_config("j2_linear_iso", torch.float64, torch.device("cpu"), 16, True, {"bad": wrong}, args, None)
    assert "state/S disagrees" in recs[0]["error"] and "median_s" not in recs[0]


def test_benchmark_rounds_vary_which_route_runs_before_which() -> None:
    """Timed rounds start at a different route each time (and alternate direction): every route is
    timed after more than one other route, so none always pays for the same predecessor."""
    from benchmarks import run

    good = bl.make_step("j2_linear_iso")
    calls: list[str] = []

    def route(name):
        def step(*args, tangent):
            calls.append(name)
            return good(*args) if tangent else good(*args)[:-1]
        return step

    names = ["a", "b", "c", "d"]
    args = run.argparse.Namespace(warmup=0, repeats=8, max_seconds=60.0)
    run.bench_config("j2_linear_iso", torch.float64, torch.device("cpu"), 16, True,
                     {n: route(n) for n in names}, args, None)
    timed = calls[-8 * len(names):]  # the timed rounds come last
    before = {n: {timed[i - 1] for i in range(1, len(timed)) if timed[i] == n} for n in names}
    assert all(len(b - {n}) >= 2 for n, b in before.items()), before


def test_benchmark_runner_keeps_what_it_measured_when_cut(tmp_path: Path, monkeypatch) -> None:
    """A time box (SIGINT) during the second configuration: the run still writes its report with the
    first configuration's records and says it was interrupted; while it runs, the records measured
    so far are already on disk (a run killed outright keeps them)."""
    import json

    from benchmarks import run

    real, seen = run.bench_config, []

    def cut(*args, **kwargs):
        seen.append(sorted(p.name for p in tmp_path.glob("*.json")))
        if len(seen) == 2:
            on_disk = json.loads(next(tmp_path.glob("*.json")).read_text())
            assert on_disk["partial"] and len(on_disk["records"]) == 1
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "bench_config", cut)
    path = run.main(["--models", "j2_linear_iso", "--sizes", "16", "32", "--dtypes", "float64", "--tangent", "no",
                     "--impls", "eager", "--repeats", "2", "--warmup", "0", "--neml2-python", str(tmp_path / "none"),
                     "--out", str(tmp_path)])
    res = json.loads(path.read_text())
    assert [r["size"] for r in res["records"]] == [16] and "partial" not in res
    assert any(n.startswith("interrupted") for n in res["notes"])
    assert path.with_suffix(".md").is_file()


def test_benchmark_runner_times_modelc_through_its_tangent(tmp_path: Path) -> None:
    """modelc's backends in the runner: checked against the baseline (stress, state, flow rate and the
    6x6 tangent) before they are timed; the tangent comes from the declared-tangent variant."""
    from benchmarks import modelc_hook, run

    path = run.main(["--models", "j2_linear_iso", "--sizes", "64", "--dtypes", "float64", "float32",
                     "--impls", "modelc", "eager", "--repeats", "2", "--warmup", "0",
                     "--neml2-python", str(tmp_path / "none"), "--out", str(tmp_path)])
    import json

    res = json.loads(path.read_text())
    recs = [r for r in res["records"] if r["impl"].startswith("modelc-")]
    assert {r["impl"] for r in recs} >= {"modelc-torch"}
    for r in recs:
        assert "error" not in r and r["points_per_s"] > 0, r
        assert max(r["errors"].values()) <= (1e-8 if r["dtype"] == "float64" else 1e-3), r
    step = modelc_hook.modelc_step("j2_linear_iso", "torch", torch.float64, torch.device("cpu"))
    assert step.model.TANGENT == (("state/S",), ("forces/E",))
    calls = []
    orig = step.model.evaluate
    step.model.evaluate = lambda X, P, d, **kw: calls.append(d) or orig(X, P, d, **kw)
    pool = __import__("benchmarks.workload", fromlist=["pool"])
    b = pool.batch(pool.pool("j2_linear_iso"), 8, torch.float64)
    out = step(*pool.args_of("j2_linear_iso", b), tangent=True)
    assert calls == ["tangent"] and out[-1].shape == (8, 6, 6)


def test_tangent_vs_jacobian_runner(tmp_path: Path) -> None:
    """benchmarks.tangent_vs_jacobian on a tiny config: both variants give the same 6x6 tangent."""
    import json

    from benchmarks import tangent_vs_jacobian

    path = tangent_vs_jacobian.main(["--models", "j2_perfect", "--sizes", "32", "--backend", "torch",
                                     "--repeats", "2", "--out", str(tmp_path)])
    (rec,) = json.loads(path.read_text())["records"]
    assert rec["max_rel_difference"] <= 1e-12 and rec["tangent_points_per_s"] > 0 and rec["speedup"] > 0


def test_unknown_model_and_parameter_are_named() -> None:
    with pytest.raises(ValueError, match="no_such_model"):
        bl.make_step("no_such_model")
    with pytest.raises(ValueError, match="'K'"):
        bl.make_step("j2_perfect", {"K": 1.0})


def test_benchmark_runner_builds_in_a_fresh_cache_when_asked(tmp_path: Path, monkeypatch) -> None:
    """``--fresh-cache``: the run's C libraries are built in a new folder of their own (a long-lived
    cache can hold a slow copy of a library, docs/performance.md), the report says where, the timed
    routes still agree with the baseline, and the caller's cache setting is back afterwards."""
    import json

    from benchmarks import run

    import tempfile

    mine = tmp_path / "my-cache"
    monkeypatch.setenv("MODELC_CACHE_DIR", str(mine))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # (the run's folder goes where pytest cleans up)
    seen = []
    real = run.bench_config

    def spy(*args, **kwargs):
        seen.append(os.environ["MODELC_CACHE_DIR"])
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "bench_config", spy)
    path = run.main(["--models", "j2_perfect", "--sizes", "16", "--dtypes", "float64", "--tangent", "yes",
                     "--impls", "modelc", "--repeats", "2", "--warmup", "0", "--fresh-cache",
                     "--neml2-python", str(tmp_path / "none"), "--out", str(tmp_path / "out")])
    assert os.environ["MODELC_CACHE_DIR"] == str(mine)
    fresh = Path(seen[0])
    assert fresh != mine and fresh.parent == tmp_path and fresh.name.startswith("modelc-bench-") and not mine.exists()
    built = sorted(p.name for p in (fresh / "c").glob("*.so"))
    assert any(n.startswith("j2_perfect-") for n in built), built
    res = json.loads(path.read_text())
    assert any(str(fresh) in n for n in res["notes"]) and res["settings"]["fresh_cache"]
    recs = [r for r in res["records"] if r["impl"].startswith("modelc-c")]
    assert recs and all("error" not in r and r["points_per_s"] > 0 for r in recs), recs
