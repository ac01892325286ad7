"""Where streaming stores start to pay on this machine: the C backend's ``MODELC_C_STREAM_BYTES``.

    python -m benchmarks.stream_threshold                          # floor, j2_voce_af, j2_linear_iso
    python -m benchmarks.stream_threshold --models j2_voce_af --sizes 10000 50000

A C call writes its outputs with streaming (non-temporal) stores when it reads and writes more
bytes than a threshold (:func:`modelc.runtime.cbuild.stream_bytes`: half the largest cache Linux
reports, counted as at most 8 MiB). Below it regular stores keep a call's arrays in cache for the
next call on the same arrays (a host's step loop); above it they pay a read for ownership of every
output line. Where the crossover lies depends on the cache one core really has, which a virtual
machine may misreport. This measures it, 1 thread, float64, the same arrays every call:

- the memory floor (:mod:`benchmarks.floor`: read N/2 bytes, write N/2, no arithmetic) with regular
  and with streaming stores, for N from 0.5 to 64 MiB;
- a model's C call with the tangent into ``out=`` buffers, at each ``--sizes``, with the threshold
  set so that it never and always streams (same bits either way; the library is built once).

Per call: best of 5 rounds of ``max(3, 1e6 // points)`` calls, the two kinds interleaved
(:func:`benchmarks.c_ab.interleaved_best`). ``regular / streaming`` above 1: streaming stores are faster there.
Writes ``benchmarks/results/<UTC stamp>-cpu-stream-threshold.{json,md}`` (``--tag`` is added).
"""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks import workload as wl
from benchmarks.c_ab import interleaved_best

RESULTS = Path(__file__).resolve().parent / "results"
FLOOR_MIB = (0.5, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
ROUNDS = 5


def floor_rows(mibs=FLOOR_MIB) -> list[dict]:
    """The floor's time per byte with regular and streaming stores, the same arrays every call."""
    from benchmarks.floor import floor_steps

    rows = []
    for mib in mibs:
        n = max(8, int(mib * 2**20 / 16))  # half the bytes read, half written
        x = torch.rand(n, dtype=torch.float64)
        steps = floor_steps((torch.empty(n, dtype=torch.float64),))
        regular, streaming = interleaved_best([lambda: steps["floor"](x, tangent=False),
                                               lambda: steps["floor-nt"](x, tangent=False)], n // 8, ROUNDS)
        moved = 16 * n
        rows.append({"mib": moved / 2**20, "regular_gb_s": moved / regular / 1e9,
                     "streaming_gb_s": moved / streaming / 1e9, "regular_over_streaming": regular / streaming})
    return rows


def model_rows(model: str, sizes: list[int]) -> list[dict]:
    """A model's plain ``out=`` call with the tangent, never and always streaming (the backend's
    threshold replaced before each call, then restored)."""
    from benchmarks.out_timing import _call_inputs
    from modelc.runtime import cbuild

    rows = []
    threshold = cbuild.stream_bytes
    try:
        for size in sizes:
            m, inputs, _ = _call_inputs(model, size)
            kind = "tangent" if m.TANGENT else True
            res = m(inputs, derivatives=kind)

            def call(never: bool):
                cbuild.stream_bytes = (lambda: 1 << 62) if never else (lambda: 0)
                m(inputs, derivatives=kind, out=res)

            regular, streaming = interleaved_best([lambda: call(True), lambda: call(False)], size, ROUNDS)
            moved = wl.bytes_per_point(model, True, torch.float64) * size
            rows.append({"model": model, "size": size, "mib": moved / 2**20, "regular_ns": regular / size * 1e9,
                         "streaming_ns": streaming / size * 1e9, "regular_over_streaming": regular / streaming})
            print(f"{model:14s} {size:8d} {rows[-1]['mib']:7.1f} MiB  regular/streaming "
                  f"{rows[-1]['regular_over_streaming']:.2f}", flush=True)
    finally:
        cbuild.stream_bytes = threshold
    return rows


def markdown(info: dict, threshold: int, floor: list[dict], models: list[dict]) -> str:
    text = (f"{info['cpu']} ({info['cores']} cores), torch {info['torch']}, 1 thread, float64; the C "
            f"backend's threshold here: {threshold / 2**20:.1f} MiB moved\n\n"
            "Memory floor, the same arrays every call (GB/s; regular / streaming above 1: streaming "
            "faster):\n\n| MiB moved | regular stores | streaming stores | regular / streaming |\n|---|---|---|---|\n")
    text += "".join(f"| {r['mib']:.1f} | {r['regular_gb_s']:.1f} | {r['streaming_gb_s']:.1f} | "
                    f"{r['regular_over_streaming']:.2f} |\n" for r in floor)
    if models:
        text += ("\nA model's C call with the tangent into `out=` buffers (ns per point):\n\n"
                 "| model | points | MiB moved | regular stores | streaming stores | regular / streaming |\n"
                 "|---|---|---|---|---|---|\n")
        text += "".join(f"| {r['model']} | {r['size']} | {r['mib']:.1f} | {r['regular_ns']:.1f} | "
                        f"{r['streaming_ns']:.1f} | {r['regular_over_streaming']:.2f} |\n" for r in models)
    return text


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["j2_voce_af", "j2_linear_iso"])
    ap.add_argument("--sizes", nargs="+", type=int, default=[1000, 3000, 10000, 30000, 50000, 100000])
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from benchmarks.run import machine_info
    from modelc.runtime import cbuild

    info = machine_info(torch.device("cpu"))
    cbuild.stream_bytes.cache_clear()
    threshold = cbuild.stream_bytes()
    floor = floor_rows()
    models = [r for model in a.models for r in model_rows(model, a.sizes)]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = Path(a.out) / f"{stamp}-cpu-stream-threshold{'-' + a.tag if a.tag else ''}"
    md = markdown(info, threshold, floor, models)
    base.with_suffix(".md").write_text(md)
    base.with_suffix(".json").write_text(json.dumps(
        {"machine": info, "threshold_bytes": threshold, "floor": floor, "models": models}, indent=1))
    print(md)
    print(f"results: {base}.md")
    return base


if __name__ == "__main__":
    main()
