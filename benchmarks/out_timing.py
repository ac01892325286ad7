"""``out=`` against fresh outputs: the same modelc-c call (float64, with the tangent) timed writing into
the buffers of an earlier result and into fresh tensors (which page-fault in on every call at 1e6
points), and, when given, the hand-written update under torch.compile on the same inputs (it returns
fresh tensors). Best of ``repeats`` calls each, interleaved. :func:`threads_scaling`: the ``out=`` call
over 1, 2, ... threads (OpenMP over blocks of points)."""
from __future__ import annotations

import os
import time

import torch

from benchmarks import modelc_hook
from benchmarks import workload as wl


def _call_inputs(model: str, size: int):
    """The modelc model (C backend, float64), its named inputs, the baseline's positional args."""
    step = modelc_hook.modelc_step(model, "c", torch.float64, torch.device("cpu"))
    m = step.model
    args = wl.args_of(model, wl.batch(wl.pool(model), size, torch.float64))
    return m, modelc_hook.named_inputs(m, model, args), args


def out_vs_fresh(model: str, size: int, repeats: int = 7, compiled=None) -> dict:
    """``compiled``: the hand-written step under torch.compile (baseline convention), or None."""
    m, inputs, args = _call_inputs(model, size)
    kind = "tangent" if m.TANGENT else True
    res = m(inputs, derivatives=kind)
    routes = {"fresh": lambda: m(inputs, derivatives=kind), "out": lambda: m(inputs, derivatives=kind, out=res)}
    if compiled is not None:
        compiled(*args, tangent=True)  # compiles for this shape
        routes["compile"] = lambda: compiled(*args, tangent=True)
    times: dict[str, list[float]] = {k: [] for k in routes}
    for _ in range(repeats):
        for k, fn in routes.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    rec = {"model": model, "size": size, "fresh_points_per_s": size / best["fresh"],
           "out_points_per_s": size / best["out"], "out_speedup": best["fresh"] / best["out"]}
    if "compile" in best:
        rec["compile_points_per_s"] = size / best["compile"]
        rec["out_vs_compile"] = best["compile"] / best["out"]
    return rec


def threads_scaling(model: str, size: int, repeats: int = 7, threads: list[int] | None = None) -> list[dict]:
    """The ``out=`` call (float64, tangent) with 1, 2, ... up to every core's thread; best of
    ``repeats``. Restores torch's thread count."""
    m, inputs, _ = _call_inputs(model, size)
    kind = "tangent" if m.TANGENT else True
    res = m(inputs, derivatives=kind)
    before = torch.get_num_threads()
    threads = threads or list(range(1, (os.cpu_count() or 1) + 1))
    out, base = [], None
    try:
        for k in threads:
            torch.set_num_threads(k)
            m(inputs, derivatives=kind, out=res)
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                m(inputs, derivatives=kind, out=res)
                ts.append(time.perf_counter() - t0)
            base = base or min(ts)
            out.append({"model": model, "size": size, "threads": k, "points_per_s": size / min(ts),
                        "speedup_vs_1": base / min(ts)})
    finally:
        torch.set_num_threads(before)
    return out
