"""What points that cannot be computed cost the others: a library model's module at a git revision
against the working tree's, on the benchmark workload with a fraction of the points' strain NaN.

    python -m benchmarks.nan_points j2_voce_af --rev HEAD~1 --size 20000 --fraction 0.005

A NaN input makes the point's Newton residual NaN. Until 2026-11-29 every backend kept such a point
iterating to ``max_iter`` (50 for the library): its C block of 16 points with it, and in the
PyTorch backend the whole batch, since the loop runs while any point is active. Now a point stops
at a residual that is not finite (docs/backends.md). Per backend (C, PyTorch) and fraction (0 and
``--fraction``): best of the repeats, ns per point, one thread, float64, the declared tangent, with
the largest iteration count and the converged fraction the call reported.
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import modelc_hook
from benchmarks import workload as wl
from benchmarks.baselines import params_for

REPO = Path(__file__).resolve().parent.parent


def _module(model: str, rev: str | None):
    from modelc.cache import import_file

    if rev is None:
        return import_file(REPO / "generated" / f"{model}.py", f"nan_points_{model}_tree")
    text = subprocess.run(["git", "show", f"{rev}:generated/{model}.py"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout
    path = Path(tempfile.mkdtemp(prefix="modelc-nan-points-")) / f"{model}.py"
    path.write_text(text)
    return import_file(path, f"nan_points_{model}_{rev.replace('~', '_').replace('^', '_')}")


def time_calls(model: str, mod, backend: str, size: int, fraction: float, repeats: int) -> dict:
    base = modelc_hook._base(model)
    m = mod.Model(dtype=torch.float64, backend=backend, **params_for(base))
    ins = modelc_hook.named_inputs(m, model, wl.args_of(base, wl.batch(wl.pool(base), size, torch.float64)))
    ins = {k: v.clone() for k, v in ins.items()}
    k = int(fraction * size)
    if k:
        idx = torch.randperm(size, generator=torch.Generator().manual_seed(1))[:k]
        ins["forces/E"][idx, 0] = float("nan")
    r = m(ins, derivatives="tangent")
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = m(ins, derivatives="tangent")
        best = min(best, time.perf_counter() - t0)
    return {"ns_per_point": best / size * 1e9, "max_iterations": int(r.status.iterations.max()),
            "converged": float(r.status.converged.double().mean())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a library model of the benchmark (an implicit one shows the effect)")
    ap.add_argument("--rev", default="HEAD", help="the git revision to compare the working tree with")
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--fraction", type=float, default=0.005)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    if a.size < 1 or not 0 <= a.fraction <= 1 or a.repeats < 1:
        ap.error(f"--size and --repeats must be positive and --fraction in [0, 1], got {a.size}, {a.repeats}, "
                 f"{a.fraction}")
    torch.set_num_threads(1)
    mods = {a.rev: _module(a.model, a.rev), "working tree": _module(a.model, None)}
    print("| model | backend | NaN points | module | ns/point | max iterations | converged |")
    print("|---|---|---|---|---|---|---|")
    for backend in ("c", "torch"):
        for frac in (0.0, a.fraction):
            for tag, mod in mods.items():
                r = time_calls(a.model, mod, backend, a.size, frac, a.repeats)
                print(f"| {a.model} | {backend} | {frac:g} | {tag} | {r['ns_per_point']:.0f} | {r['max_iterations']} | "
                      f"{r['converged']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
