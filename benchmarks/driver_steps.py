"""A whole history through the transient driver: ``run_history`` (each step written in place into
the history's buffers, :mod:`modelc.runtime.history_buffers`) against the driver's regular step loop
(the same run with that path refused) and the hand-written PyTorch history loop of
:mod:`benchmarks.baselines` (eager, and with its step under torch.compile), on the same history: the
reference uniaxial-strain cycle (8 amplitudes and durations, tiled to the batch) resampled to
``--steps`` steps, the tangent at the last step. One thread, float64, C backend; best of
``--rounds`` rounds, routes interleaved. Reported per step (the whole run divided by its steps).

With ``--control stress`` the history is a uniaxial *stress* cycle instead (every component
stress-controlled, xx amplitudes 0.5-1.5 sigma_y, 0.5-0.95 for perfect plasticity, 100-300 for
elasticity): the driver solves each step's strain by Newton on the tangent; only the two driver
routes run (the hand-written loops are strain-driven).

    python -m benchmarks.driver_steps                                # 8 and 1000 points, 500 steps
    python -m benchmarks.driver_steps --models j2_voce_af --batches 8 --steps 2000
    python -m benchmarks.driver_steps --control stress --steps 200
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import baselines as bl
from benchmarks import modelc_hook
from benchmarks import workload as wl

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("elastic", "j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso")
ROUTES = ("in-place", "step-loop", "hand-eager", "hand-compile")


def history(batch: int, steps: int) -> dict[str, np.ndarray]:
    """The reference cycle (0 -> +A -> -A -> 0 over each point's duration) with ``steps`` rows."""
    i = np.arange(steps, dtype=np.float64) * (wl.STEPS / (steps - 1))
    shape = np.interp(i, [0, 25, 75, 100], [0.0, 1.0, -1.0, 0.0])
    amps = np.resize(np.asarray(wl.AMPLITUDES), batch)
    totals = np.resize(np.asarray(wl.TOTAL_TIMES), batch)
    strain = np.zeros((steps, batch, 6))
    strain[:, :, 0] = shape[:, None] * amps[None, :]
    return {"strain": strain, "time": i[:, None] * (totals[None, :] / wl.STEPS)}


def stress_history(model: str, batch: int, steps: int) -> dict[str, np.ndarray]:
    """A uniaxial stress cycle (``runtime.histories.uniaxial_stress_history``) with ``steps`` rows,
    amplitudes spread over the batch below what the model can carry."""
    from modelc.runtime.histories import uniaxial_stress_history

    sy = bl.params_for(model).get("sigma_y")
    lo, hi = (100.0, 300.0) if sy is None else (0.5 * sy, (0.95 if model == "j2_perfect" else 1.5) * sy)
    return uniaxial_stress_history(np.linspace(lo, hi, batch), 1.0, steps=steps - 1, controlled="stress")


def _hand_loop(model: str, step_nt, step_t, strain: torch.Tensor, time_: torch.Tensor) -> None:
    """baselines.run_history's loop with the given steps (the tangent at the last step)."""
    T, B = strain.shape[:2]
    names = bl.output_names(model, tangent=False)
    hist = {n: torch.zeros((T, B, *bl.SHAPES[n]), dtype=strain.dtype) for n in names}
    state = bl.zero_state(model, B)
    for i in range(1, T):
        out = (step_t if i == T - 1 else step_nt)(strain[i], time_[i] - time_[i - 1], *state)
        for n, v in zip(names, out):
            hist[n][i] = v
        state = tuple(hist[n][i] for n in bl.STATE[model])


def measure(model: str, batch: int, steps: int, rounds: int, compile_: bool, control: str = "strain") -> dict:
    from modelc.runtime import history_buffers
    from modelc.runtime.driver import run_history

    m = modelc_hook._model(model, "c", torch.float64, torch.device("cpu"))
    hist = history(batch, steps) if control == "strain" else stress_history(model, batch, steps)
    strain, time_ = torch.as_tensor(hist["strain"]), torch.as_tensor(hist["time"])
    applies = history_buffers.applies
    kw = dict(progress=False, tangent_steps=[steps - 1])

    def step_loop():
        history_buffers.applies = lambda *a: False
        try:
            return run_history(m, hist, **kw)
        finally:
            history_buffers.applies = applies

    p = bl.params_for(model)
    routes = {"in-place": lambda: run_history(m, hist, **kw), "step-loop": step_loop}
    if control == "strain":
        routes["hand-eager"] = lambda: _hand_loop(model, bl.make_step(model, p, tangent=False),
                                                  bl.make_step(model, p, tangent=True), strain, time_)
    if compile_ and control == "strain":
        from benchmarks.run import COMPILE_NEWTON_IT

        cs = {t: torch.compile(bl.make_step(model, p, tangent=t, fixed_iterations=COMPILE_NEWTON_IT))
              for t in (False, True)}
        routes["hand-compile"] = lambda: _hand_loop(model, cs[False], cs[True], strain, time_)
    a, b = routes["in-place"](), routes["step-loop"]()  # (warm: libraries, plans, compiled graphs)
    for k in a:  # the two driver routes give the same arrays
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    for fn in routes.values():
        fn()
    best = {k: float("inf") for k in routes}
    for r in range(rounds):
        order = list(routes) if r % 2 == 0 else list(routes)[::-1]
        for k in order:
            t0 = time.perf_counter()
            routes[k]()
            best[k] = min(best[k], time.perf_counter() - t0)
    us = {k: v / (steps - 1) * 1e6 for k, v in best.items()}
    return {"model": model, "batch": batch, "steps": steps, "control": control, "us_per_step": us,
            "all_converged": bool(a.ok)}


def table(records: list[dict]) -> str:
    head = ("| model | points | steps | " + " | ".join(f"{r} (us/step)" for r in ROUTES)
            + " | step loop / in place | hand eager / in place | hand compile / in place |\n")
    out = head + "|" + "---|" * (3 + len(ROUTES) + 3) + "\n"
    for rec in records:
        us = rec["us_per_step"]
        cells = [f"{us[r]:.1f}" if r in us else "-" for r in ROUTES]
        ratios = [f"{us[r] / us['in-place']:.2f}" if r in us else "-" for r in ("step-loop", "hand-eager", "hand-compile")]
        model = rec["model"] + ("" if rec.get("all_converged", True) else " (some points fail)")
        out += f"| {model} | {rec['batch']} | {rec['steps']} | " + " | ".join(cells + ratios) + " |\n"
    return out


def main(argv: list[str] | None = None) -> Path:
    from benchmarks.run import machine_info

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--batches", nargs="+", type=int, default=[8, 1000])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile loop")
    ap.add_argument("--control", choices=["strain", "stress"], default="strain",
                    help="a uniaxial strain cycle (default) or a uniaxial stress cycle")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    records = []
    for model in a.models:
        for batch in a.batches:
            rec = measure(model, batch, a.steps, a.rounds, not a.no_compile, a.control)
            records.append(rec)
            print(f"{model:14s} B={batch:<6d} " + "  ".join(f"{k} {v:.1f}" for k, v in rec["us_per_step"].items())
                  + " us/step", flush=True)
    info = machine_info(torch.device("cpu"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-cpu-driver-steps"
    stem += "-stress" if a.control == "stress" else ""
    stem += f"-{a.tag}" if a.tag else ""
    path = out / f"{stem}.json"
    path.write_text(json.dumps({"machine": info, "settings": vars(a), "records": records}, indent=1))
    md = table(records)
    (out / f"{stem}.md").write_text(
        f"{info['cpu']} ({info['cores']} cores), torch {info['torch']}; float64, 1 thread, C backend; "
        f"{a.steps}-step uniaxial {a.control} history, tangent at the last step; best of {a.rounds} rounds, "
        f"interleaved\n\n{md}")
    print(md)
    print(f"results: {path}")
    return path


if __name__ == "__main__":
    main()
