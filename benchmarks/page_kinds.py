"""What the kind of memory pages costs a streaming call: every C route of a model (modelc's plain and
bound calls, the memory floor with streaming stores, the hand-written expert update) once with its
output buffers in 4 KiB pages (``MODELC_HUGE_PAGES=0``) and once in the huge pages the runtime's
buffer pool advises (:mod:`modelc.runtime.bufferpool`), interleaved in one process on the same inputs,
with 64 MB written between calls (another route's work) as ``benchmarks.run`` has between its routes.
Each route's fraction of the floor is taken against the floor with the same kind of pages (the
median of the per-round ratios). Then, in a fresh child process per kind, what faulting in fresh
memory costs: the first and second fill of ``--fill-mb`` of new memory of each kind.

    python -m benchmarks.page_kinds                               # j2_voce_af, perzyna_iso at 1e5
    python -m benchmarks.page_kinds --models j2_linear_iso --sizes 100000 1000000 --rounds 20
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks import baselines as bl
from benchmarks import expert
from benchmarks import modelc_hook
from benchmarks import workload as wl

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = {"4k": "0", "huge": "1"}  # the route's tag -> $MODELC_HUGE_PAGES when its buffers are made

FILL = r'''
import sys, time, torch
from modelc.runtime.bufferpool import kept_empty
n = int(sys.argv[1]) << 20
out = []
for _ in range(2):
    t = kept_empty((n // 8,), torch.float64)
    t0 = time.perf_counter(); t.fill_(1.0); out.append(time.perf_counter() - t0)
    del t
print(out[0], out[1])
'''


def routes(model: str, size: int) -> tuple[dict, list]:
    """name -> step(*args, tangent) for both kinds of pages, and the rotating input sets."""
    from benchmarks.floor import floor_steps

    bufs = [wl.args_of(model, wl.batch(wl.pool(model), size, torch.float64, torch.device("cpu"), offset=97 * i))
            for i in range(4)]
    want = bl.make_step(model, tangent=True)(*bufs[0])
    fns = {}
    saved = os.environ.get("MODELC_HUGE_PAGES")
    try:
        for tag, flag in KINDS.items():
            os.environ["MODELC_HUGE_PAGES"] = flag  # read when a pool or a kept buffer is made
            made = {f"plain-{tag}": modelc_hook.modelc_step(model, "c", torch.float64, torch.device("cpu")),
                    f"bound-{tag}": modelc_hook.modelc_step(model, "c", torch.float64, torch.device("cpu"), bound=True),
                    f"floor-{tag}": floor_steps(want)["floor-nt"]}
            if model in expert.MODELS:
                made[f"expert-{tag}"] = expert.expert_step(model)
            for fn in made.values():  # buffers made now, under this kind (and the pool's blocks claimed)
                for b in bufs:
                    fn(*b, tangent=True)
            fns.update(made)
    finally:
        if saved is None:
            os.environ.pop("MODELC_HUGE_PAGES", None)
        else:
            os.environ["MODELC_HUGE_PAGES"] = saved
    return fns, bufs


def measure(model: str, size: int, rounds: int) -> dict:
    fns, bufs = routes(model, size)
    ballast = torch.empty(8_000_000, dtype=torch.float64)
    times: dict[str, list[float]] = {k: [] for k in fns}
    items = list(fns.items())
    for r in range(rounds):
        order = items[r % len(items):] + items[:r % len(items)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            b = bufs[r % len(bufs)]
            ballast.fill_(r)
            t0 = time.perf_counter()
            fn(*b, tangent=True)
            times[name].append(time.perf_counter() - t0)
    rec = {"model": model, "size": size, "rounds": rounds, "routes": {}}
    for name, ts in times.items():
        floor = times[f"floor-{name.split('-')[1]}"]
        rec["routes"][name] = {"ns_per_point": statistics.median(ts) / size * 1e9,
                               "of_floor": statistics.median(f / t for f, t in zip(floor, ts)),
                               "times_s": ts}
    return rec


def fill_costs(mb: int) -> dict:
    """Seconds of the first and second fill of ``mb`` MB of new memory per kind, each kind in a fresh
    child process (what the first calls of a size pay)."""
    out = {}
    for tag, flag in KINDS.items():
        proc = subprocess.run([sys.executable, "-c", FILL, str(mb)], capture_output=True, text=True,
                              env={**os.environ, "MODELC_HUGE_PAGES": flag})
        first, second = map(float, proc.stdout.split()) if proc.returncode == 0 else (float("nan"),) * 2
        out[tag] = {"first_s": first, "second_s": second}
    return out


def table(records: list[dict], fills: list[dict]) -> str:
    rows = ["| model | size | route | 4 KiB pages (ns/point) | huge pages (ns/point) | 4 KiB / huge | "
            "of the floor, 4 KiB | of the floor, huge |", "|---" * 8 + "|"]
    for rec in records:
        r = rec["routes"]
        for route in ("plain", "bound", "expert", "floor"):
            a, b = r.get(f"{route}-4k"), r.get(f"{route}-huge")
            if a is None or b is None:
                continue
            rows.append(f"| {rec['model']} | {rec['size']} | {route} | {a['ns_per_point']:.1f} | {b['ns_per_point']:.1f} "
                        f"| {a['ns_per_point'] / b['ns_per_point']:.2f} | {a['of_floor']:.3f} | {b['of_floor']:.3f} |")
    rows += ["", "New memory filled once in a fresh process, then again after freeing it (ms):", "",
             "| MB | 4 KiB first | 4 KiB second | huge first | huge second |", "|---|---|---|---|---|"]
    for f in fills:
        k = f["costs"]
        rows.append(f"| {f['mb']} | {k['4k']['first_s'] * 1e3:.1f} | {k['4k']['second_s'] * 1e3:.1f} | "
                    f"{k['huge']['first_s'] * 1e3:.1f} | {k['huge']['second_s'] * 1e3:.1f} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> Path:
    from benchmarks.run import machine_info
    from modelc.runtime.bufferpool import huge_pages

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["j2_voce_af", "perzyna_iso"], choices=bl.MODELS)
    ap.add_argument("--sizes", nargs="+", type=int, default=[100000])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--fill-mb", nargs="+", type=int, default=[60, 300])
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    if not huge_pages():
        print("this system grants no transparent huge pages on request (or MODELC_HUGE_PAGES=0): "
              "both kinds would be the same memory", file=sys.stderr)
        raise SystemExit(2)
    torch.set_num_threads(1)
    records = []
    for model in a.models:
        for size in a.sizes:
            rec = measure(model, size, a.rounds)
            records.append(rec)
            print(f"{model} {size}: " + "  ".join(f"{k} {v['ns_per_point']:.1f}" for k, v in rec["routes"].items()),
                  flush=True)
    fills = [{"mb": mb, "costs": fill_costs(mb)} for mb in a.fill_mb]
    info = machine_info(torch.device("cpu"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-cpu-page-kinds"
    stem += f"-{a.tag}" if a.tag else ""
    path = out / f"{stem}.json"
    path.write_text(json.dumps({"machine": info, "settings": vars(a), "records": records, "fills": fills}, indent=1))
    md = table(records, fills)
    (out / f"{stem}.md").write_text(
        f"{info['cpu']} ({info['cores']} cores), torch {info['torch']}; float64, tangent, 1 thread, C backend; "
        f"median of {a.rounds} interleaved rounds (`python -m benchmarks.page_kinds`)\n\n{md}")
    print(md)
    print(f"results: {path}")
    return path


if __name__ == "__main__":
    main()
