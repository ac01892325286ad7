"""``out=`` against fresh outputs: the same modelc-c call (float64, with the tangent) timed writing into
the buffers of an earlier result and into fresh tensors (which page-fault in on every call at 1e6
points). Best of ``repeats`` calls each, interleaved."""
from __future__ import annotations

import time

import torch

from benchmarks import baselines as bl
from benchmarks import modelc_hook
from benchmarks import workload as wl


def out_vs_fresh(model: str, size: int, repeats: int = 7) -> dict:
    step = modelc_hook.modelc_step(model, "c", torch.float64, torch.device("cpu"))
    m = step.model
    args = wl.args_of(model, wl.batch(wl.pool(model), size, torch.float64))
    inputs = {"forces/E": args[0]}
    names = set(m.input_axis.variable_names)
    if "forces/t" in names:
        inputs["forces/t"], inputs["old_forces/t"] = args[1], torch.zeros_like(args[1])
    for name, value in zip(bl.STATE[model], args[2:]):
        inputs["old_" + name] = value
    for name in names - set(inputs):  # inputs the baseline convention does not carry: zero
        t = m.input_axis.type_of(name)
        inputs[name] = torch.zeros(size, *t.base_shape, dtype=torch.float64)
    kind = "tangent" if m.TANGENT else True
    res = m(inputs, derivatives=kind)
    fresh, reuse = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        m(inputs, derivatives=kind)
        fresh.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        m(inputs, derivatives=kind, out=res)
        reuse.append(time.perf_counter() - t0)
    return {"model": model, "size": size, "fresh_points_per_s": size / min(fresh),
            "out_points_per_s": size / min(reuse), "out_speedup": min(fresh) / min(reuse)}
