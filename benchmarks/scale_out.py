"""Scaling of `modelc run --distributed` from 1 to K processes (torchrun, one node).

For each process count K it launches ``torchrun --standalone --nproc-per-node K -m modelc run ...
--distributed`` on one generated uniaxial history and records the run's own time (rank 0's
"in X s": rendezvous, plan, every shard and the summary; not the interpreter start-up and compile,
reported separately as the launch's wall time), point-steps per second and the speed-up over K = 1.
A plain single-process `modelc run` (one ``.npz``) is timed too, as the baseline the sharded run
should not fall behind. On a GPU machine pass ``--device cuda``: each rank takes cuda:LOCAL_RANK (with
one GPU, ranks share it; K up to the GPU count is the meaningful range).

    OMP_NUM_THREADS=1 python -m benchmarks.scale_out --points 100000 --steps 40 --procs 1 2
    python -m benchmarks.scale_out --device cuda --points 1000000 --procs 1 2 4 8

Writes ``benchmarks/results/<UTC time>-scale-out.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "spec" / "library.yaml"


def _history(path: Path, points: int, steps: int, seed: int) -> None:
    from modelc.runtime.histories import uniaxial_strain_history

    rng = np.random.default_rng(seed)
    h = uniaxial_strain_history(rng.uniform(0.001, 0.02, points), rng.uniform(1.0, 10.0, points), steps=steps)
    np.savez(path, time=h["time"], strain=h["strain"])  # stored: memory-mapped by the ranks


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1: some points did not converge (still a timing)
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    m = re.search(r" in ([0-9.]+) s", proc.stdout)
    return wall, float(m.group(1)) if m else float("nan"), proc.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="j2_linear_iso")
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (each rank cuda:LOCAL_RANK)")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--chunk-steps", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=2, help="runs per configuration (the best is kept)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)

    env = {**os.environ}
    env.setdefault("OMP_NUM_THREADS", "1")
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        hist = Path(tmp) / "h.npz"
        _history(hist, args.points, args.steps, seed=0)
        common = ["run", str(LIBRARY), "--model", args.model, "--history", str(hist), "--backend", args.backend,
                  "--dtype", args.dtype, "--no-progress"]
        point_steps = args.points * args.steps
        configs = [("single", None)] + [("distributed", k) for k in args.procs]
        for kind, k in configs:
            best = None
            for r in range(args.repeats):
                out = Path(tmp) / f"out-{kind}-{k}-{r}"
                if kind == "single":
                    cmd = [sys.executable, "-m", "modelc", *common, "--device", args.device, "--out", f"{out}.npz"]
                else:
                    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(k), "-m", "modelc", *common, "--distributed", "--out", str(out)]
                    if args.device != "cpu":
                        cmd += ["--device", args.device]
                    if args.chunk_steps:
                        cmd += ["--chunk-steps", str(args.chunk_steps)]
                wall, run_s, _ = _run(cmd, env)
                if best is None or run_s < best[1]:
                    best = (wall, run_s)
            rec = {"kind": kind, "procs": k or 1, "launch_wall_s": round(best[0], 3), "run_s": best[1],
                   "point_steps_per_s": point_steps / best[1]}
            records.append(rec)
            print(json.dumps(rec))
    base = next(r for r in records if r["kind"] == "distributed" and r["procs"] == 1)
    for r in records:
        r["speedup_vs_1_proc"] = base["run_s"] / r["run_s"]
    meta = {"model": args.model, "points": args.points, "steps": args.steps, "device": args.device,
            "backend": args.backend, "dtype": args.dtype, "OMP_NUM_THREADS": env["OMP_NUM_THREADS"],
            "cpus": os.cpu_count(), "machine": platform.platform(), "python": platform.python_version()}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stamp}-scale-out.json").write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    lines = [f"# scale-out: {args.model}, {args.points} points x {args.steps} steps, {args.device}, {args.dtype}",
             "", "| run | processes | run time (s) | Mpoint-steps/s | speed-up vs 1 process | launch wall (s) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['kind']} | {r['procs']} | {r['run_s']:.3f} | {r['point_steps_per_s'] / 1e6:.3f} | "
              f"{r['speedup_vs_1_proc']:.2f}x | {r['launch_wall_s']:.1f} |" for r in records]
    (args.out / f"{stamp}-scale-out.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
