"""A loss and its gradient through a whole history: ``simulate`` with the history as one autograd
node (:mod:`modelc.runtime.history_adjoint`) against the same call building one node per step
(the path it takes with ``checkpoint=`` or when a point fails), on the calibration example's
problem: j2_voce_af, its four loadings (``examples/calibrate_j2_voce_af.py``), every parameter
requiring grad, over a named ``samples`` dim, the example's loss. Forward and backward timed
separately; also the forward sensitivities of three parameters for the first material (what
``modelc run --sensitivities`` computes). Best of ``--rounds``, the two routes interleaved; 1 thread,
float64, C backend.

    python -m benchmarks.history_grad                     # 120 steps, 2 samples
    python -m benchmarks.history_grad --steps 400 --samples 8
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


def _example():
    spec = importlib.util.spec_from_file_location("calibrate_example", REPO / "examples" / "calibrate_j2_voce_af.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(steps: int, samples: int, rounds: int) -> dict:
    from modelc.generated import j2_voce_af
    from modelc.runtime import history_adjoint

    ex = _example()
    model = j2_voce_af.Model(dtype=torch.float64)
    hist = ex.histories(steps)
    true = {k: torch.tensor([v[i % len(v)] for i in range(samples)], dtype=torch.float64) for k, v in ex.TRUE.items()}
    with torch.no_grad():
        data = ex.stresses(model, hist, true)
    theta = {k: torch.zeros(samples, dtype=torch.float64, requires_grad=True) for k in ex.NAMES}
    start = {k: 1.2 * true[k] if k != "nu" else true[k] for k in ex.NAMES}
    applies = history_adjoint.applies

    def once(one_node: bool) -> tuple[float, float, torch.Tensor]:
        history_adjoint.applies = applies if one_node else (lambda *a: False)
        try:
            for v in theta.values():
                v.grad = None
            t0 = time.perf_counter()
            params = {k: start[k] * torch.exp(theta[k]) for k in ex.NAMES}
            loss = (ex.stresses(model, hist, params) - data).square().mean()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
        finally:
            history_adjoint.applies = applies
        return t1 - t0, t2 - t1, torch.cat([v.grad for v in theta.values()])

    def sens(one_node: bool) -> tuple[float, dict]:  # forward sensitivities (modelc run --sensitivities)
        history_adjoint.applies = applies if one_node else (lambda *a: False)
        try:
            t0 = time.perf_counter()
            with torch.no_grad():
                out = simulate(model, plain_hist, params=first, sensitivities=list(ex.NAMES[2:5]))
            return time.perf_counter() - t0, out
        finally:
            history_adjoint.applies = applies

    from modelc.runtime import simulate

    plain_hist = {k: v for k, v in hist.items()}
    first = {k: float(v[0]) for k, v in true.items()}  # (one material: sensitivities take no named dims)
    s1, s2 = sens(True)[1], sens(False)[1]
    for k in s2:  # the same numbers both ways
        torch.testing.assert_close(s1[k], s2[k], rtol=0, atol=0)
    g1, g2 = once(True)[2], once(False)[2]  # (warm) the same gradient both ways
    torch.testing.assert_close(g1, g2, rtol=1e-9, atol=1e-12 * float(g2.abs().max()))
    best = {k: [float("inf"), float("inf"), float("inf")] for k in ("one-node", "per-step")}
    for r in range(rounds):
        for k in (("one-node", "per-step") if r % 2 == 0 else ("per-step", "one-node")):
            f, b, _ = once(k == "one-node")
            t = sens(k == "one-node")[0]
            best[k] = [min(best[k][0], f), min(best[k][1], b), min(best[k][2], t)]
    return {"steps": steps, "samples": samples, "points": 4 * samples,
            "seconds": {k: {"forward": v[0], "backward": v[1], "sensitivities": v[2]} for k, v in best.items()}}


def main(argv: list[str] | None = None) -> Path:
    from benchmarks.run import machine_info

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[120])
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    recs = [measure(s, a.samples, a.rounds) for s in a.steps]
    info = machine_info(torch.device("cpu"))
    lines = ["| steps | points (4 loadings x samples) | one node: forward, backward (ms) | per step: forward, "
             "backward (ms) | per step / one node (forward + backward) | sensitivities, 4 points x 3 "
             "parameters: one node, per step (ms) | per step / one node (sensitivities) |",
             "|---|---|---|---|---|---|---|"]
    for r in recs:
        o, p = r["seconds"]["one-node"], r["seconds"]["per-step"]
        lines.append(f"| {r['steps']} | {r['points']} | {1e3 * o['forward']:.1f}, {1e3 * o['backward']:.1f} | "
                     f"{1e3 * p['forward']:.1f}, {1e3 * p['backward']:.1f} | "
                     f"{(p['forward'] + p['backward']) / (o['forward'] + o['backward']):.2f} | "
                     f"{1e3 * o['sensitivities']:.1f}, {1e3 * p['sensitivities']:.1f} | "
                     f"{p['sensitivities'] / o['sensitivities']:.2f} |")
        print(lines[-1], flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-cpu-history-grad"
    path = out / f"{stem}.json"
    path.write_text(json.dumps({"machine": info, "settings": vars(a), "records": recs}, indent=1))
    (out / f"{stem}.md").write_text(
        f"{info['cpu']} ({info['cores']} cores), torch {info['torch']}; float64, 1 thread, C backend; the "
        f"calibration example's loss and gradient (j2_voce_af, 7 parameters over {a.samples} samples); "
        f"best of {a.rounds}, interleaved\n\n" + "\n".join(lines) + "\n")
    print(f"results: {path}")
    return path


if __name__ == "__main__":
    main()
