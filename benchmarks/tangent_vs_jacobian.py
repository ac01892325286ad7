"""The declared-tangent variant against the full Jacobian, in one run: same model, same inputs, same backend.

For every library model, ``derivatives=[("state/S", "forces/E")]`` (the tangent variant: a 6x6 block per
point) and ``derivatives=True`` (every output by every input; the 6x6 block taken from it) are timed
interleaved after warm-up on the benchmark workload (benchmarks/workload.py, three rotated buffers),
median of the rounds, after checking that both give the same tangent. Writes
``benchmarks/results/<UTC stamp>-<device>-tangent-vs-jacobian.{json,md}``.

    python -m benchmarks.tangent_vs_jacobian                     # C backend on CPU, 1e4 and 1e5 points
    python -m benchmarks.tangent_vs_jacobian --backend torch --sizes 10000
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks import baselines as bl
from benchmarks import modelc_hook as mh
from benchmarks import workload as wl
from benchmarks.run import RESULTS, ROTATE, Timer, machine_info


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(bl.MODELS), choices=bl.MODELS)
    ap.add_argument("--sizes", nargs="+", type=int, default=[10000, 100000])
    ap.add_argument("--backend", default=None, help="default: c on CPU, triton on CUDA")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    backend = a.backend or mh.modelc_backends(device)[0]
    timer = Timer(device)
    records = []
    for model in a.models:
        steps = {"tangent": mh.modelc_step(model, backend, dtype, device),
                 "jacobian": mh.modelc_step(model, backend, dtype, device, derivatives=True)}
        pool = wl.pool(model)
        for size in a.sizes:
            args = [wl.args_of(model, wl.batch(pool, size, dtype, device, offset=97 * i)) for i in range(ROTATE)]
            tan, full = (steps[k](*args[0], tangent=True)[-1] for k in ("tangent", "jacobian"))
            err = float((tan - full).abs().max() / full.abs().max())
            for step in steps.values():  # warm-up
                for b in args:
                    step(*b, tangent=True)
            times = {k: [] for k in steps}
            for r in range(a.repeats):
                for k in (list(steps) if r % 2 == 0 else list(reversed(steps))):
                    times[k].append(timer(lambda: steps[k](*args[r % ROTATE], tangent=True)))
            med = {k: statistics.median(v) for k, v in times.items()}
            rec = {"model": model, "size": size, "backend": backend, "dtype": a.dtype,
                   "tangent_points_per_s": size / med["tangent"], "jacobian_points_per_s": size / med["jacobian"],
                   "speedup": med["jacobian"] / med["tangent"], "max_rel_difference": err}
            records.append(rec)
            print(f"{model:14s} B={size:<7d} tangent {rec['tangent_points_per_s']:.3g} pts/s, full Jacobian "
                  f"{rec['jacobian_points_per_s']:.3g} pts/s: {rec['speedup']:.2f}x (difference {err:.1e})",
                  file=sys.stderr, flush=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stamp}-{device.type}-tangent-vs-jacobian.json"
    info = machine_info(device)
    path.write_text(json.dumps({"machine": info, "settings": vars(a), "records": records}, indent=1))
    lines = [f"{info['cpu']} ({info['cores']} cores), {info.get('gpu', 'no GPU')}, torch {info['torch']}; "
             f"modelc-{backend}, {a.dtype}, median of {a.repeats} interleaved rounds", "",
             "| model | B | tangent variant (points/s) | full Jacobian (points/s) | tangent / full |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['size']:.0e} | {r['tangent_points_per_s']:.2g} | {r['jacobian_points_per_s']:.2g} "
              f"| {r['speedup']:.2f}x |" for r in records]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return path


if __name__ == "__main__":
    main()
