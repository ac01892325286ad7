"""Where modelc's C kernel stands against the expert's hand-written SIMD C, in cache and out of it.

    python -m benchmarks.expert_gap                       # j2_linear_iso, j2_voce_af, perzyna_iso
    python -m benchmarks.expert_gap --models j2_voce_af --sizes 2000 100000

For each model and size, four calls are timed interleaved in one process (best of ``--rounds``
rounds of ``max(3, 1e6 // size)`` calls each, 1 thread, float64, the benchmark's workload): modelc's
bound C call (:meth:`CompiledModel.bind`, the same arrays every call) without and with the declared
tangent (:func:`benchmarks.modelc_hook.modelc_step`, ``bound=True``), and
:func:`benchmarks.expert.expert_step` without and with its closed-form tangent (which writes into
outputs it keeps: the caller's arrays, like the bound call); modelc's outputs and tangent are
checked against the expert's first (1e-8 relative), so both compute the same update. The fixed cost of a call
(Python, argument words; measured on one block of 16 points, per call) is subtracted, so the
``kernel`` columns are nanoseconds per point spent in the compiled loop. At 2e3 points the 1.3 MB
of traffic stays in L2; at 1e5 the 62 MB go to memory with streaming stores: the difference between
the two sizes is the part of the memory traffic a kernel does not hide behind its arithmetic.

Writes ``benchmarks/results/<UTC stamp>-cpu-expert-gap.{json,md}`` (``--tag`` is added to the name).
"""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks import c_ab, expert, modelc_hook
from benchmarks import workload as wl
from benchmarks.baselines import output_names

RESULTS = Path(__file__).resolve().parent / "results"
CALLS = ("modelc value", "modelc tangent", "expert value", "expert tangent")


def _calls(model: str, size: int, check: float = 1e-8) -> dict:
    """The four calls on one workload of ``size`` points; each output of modelc's tangent call
    checked against the expert's (relative to the largest entry of each output: the two Newton
    loops stop at different tolerances), so the timings compare the same computation."""
    mstep = modelc_hook.modelc_step(model, "c", torch.float64, torch.device("cpu"), bound=True)
    estep = expert.expert_step(model)
    args = wl.args_of(model, wl.batch(wl.pool(model), size, torch.float64))
    for name, a, b in zip(output_names(model, True), mstep(*args, tangent=True), estep(*args, tangent=True)):
        err = float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))
        if not err <= check:
            raise RuntimeError(f"{model}: modelc's {name} differs from the expert's by {err:.2e} "
                               f"(relative to its largest entry; bound {check:g}): not the same update")
    return {"modelc value": lambda: mstep(*args, tangent=False),
            "modelc tangent": lambda: mstep(*args, tangent=True),
            "expert value": lambda: estep(*args, tangent=False),
            "expert tangent": lambda: estep(*args, tangent=True)}


def _best(calls: dict, size: int, rounds: int) -> dict[str, float]:
    """Seconds per call, best of ``rounds`` rounds, the calls interleaved in every round."""
    return dict(zip(calls, c_ab.interleaved_best(list(calls.values()), size, rounds)))


def measure(models: list[str], sizes: list[int], rounds: int = 9) -> list[dict]:
    torch.set_num_threads(1)
    recs = []
    for model in models:
        fixed = _best(_calls(model, 16), 16, rounds)  # one block: the call's fixed cost and 16 points
        for size in sizes:
            t = _best(_calls(model, size), size, rounds)
            for k in CALLS:
                recs.append({"model": model, "size": size, "call": k, "ns_per_point": t[k] / size * 1e9,
                             "fixed_us": fixed[k] * 1e6,
                             "kernel_ns_per_point": max(t[k] - fixed[k], 0.0) / (size - 16) * 1e9})
    return recs


def table(recs: list[dict]) -> str:
    rows = ["| model | size | call | ns/point | kernel ns/point | modelc / expert (kernel) |", "|---|---|---|---|---|---|"]
    by = {(r["model"], r["size"], r["call"]): r for r in recs}
    for r in recs:
        ratio = "-"
        if r["call"].startswith("modelc"):
            e = by[(r["model"], r["size"], r["call"].replace("modelc", "expert"))]
            if e["kernel_ns_per_point"] > 0:  # (0: the call no slower than its fixed cost, a tiny size)
                ratio = f"{r['kernel_ns_per_point'] / e['kernel_ns_per_point']:.2f}"
        rows.append(f"| {r['model']} | {r['size']} | {r['call']} | {r['ns_per_point']:.1f} | "
                    f"{r['kernel_ns_per_point']:.1f} | {ratio} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["j2_linear_iso", "j2_voce_af", "perzyna_iso"],
                    choices=list(expert.MODELS))
    ap.add_argument("--sizes", nargs="+", type=int, default=[2000, 100000])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    if any(s <= 16 for s in a.sizes):
        ap.error(f"--sizes: every size must be above one block of 16 points, got {a.sizes}")
    recs = measure(a.models, a.sizes, a.rounds)
    md = table(recs)
    print(md)
    from benchmarks.run import machine_info
    info = machine_info(torch.device("cpu"))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = Path(a.out) / f"{stamp}-cpu-expert-gap{'-' + a.tag if a.tag else ''}"
    base.parent.mkdir(parents=True, exist_ok=True)
    head = (f"{info['cpu']} ({info['cores']} cores), torch {info['torch']}, 1 thread, float64\n\n"
            "modelc's bound C call against the expert's SIMD C (benchmarks/expert_gap.py): ns per point, and "
            "per point in the compiled loop once the call's fixed cost (measured on 16 points) is taken off.\n\n")
    base.with_suffix(".md").write_text(head + md + "\n")
    base.with_suffix(".json").write_text(json.dumps({"machine": info, "records": recs}, indent=1))
    return base.with_suffix(".md")


if __name__ == "__main__":
    main()
