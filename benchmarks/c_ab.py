"""A/B timing of edited C sources of one library model, in one process, interleaved.

    python -m benchmarks.c_ab j2_voce_af --sizes 2000 100000 - edited.c [other.c ...]

``-`` is the module's own C source; every other argument is a C file that replaces it (for example
the ``.c`` the backend keeps next to each library in the cache folder, edited by hand: it holds the
header already, which the build leaves as it is). Each source is built with the backend's flags and
called through ``model.bind`` (the bound fast path: the kernel and ~7 us of Python), float64, with
the declared tangent, on the benchmark workload; one thread. Per size: best of 9 rounds of
``max(3, 1e6 // size)`` calls each, the sources interleaved in every round; printed as ns per point,
with each source's largest relative difference from the first one's outputs and tangent (a change
that is faster but computes something else shows here). This is how the C changes in
docs/performance.md were measured before they were adopted or not.
"""
from __future__ import annotations

import argparse
import time

import torch

from benchmarks import modelc_hook
from benchmarks import workload as wl
from benchmarks.baselines import params_for


def _models(model: str, sources: list[str]):
    import modelc

    base = modelc.load(modelc_hook._LIBRARY, model=model).Model
    out = []
    for src in sources:
        cls = base if src == "-" else type(f"{base.__name__}AB", (base,), {"c_source": open(src).read()})
        out.append(cls(dtype=torch.float64, device=torch.device("cpu"), backend="c",
                       **params_for(modelc_hook._base(model))))
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / (b.abs() + 1)).nan_to_num(float("inf")).max())


def compare(model: str, sizes: list[int], sources: list[str], rounds: int = 9) -> list[dict]:
    torch.set_num_threads(1)
    models = _models(model, sources)
    recs = []
    for size in sizes:
        base = modelc_hook._base(model)  # (a _coupled twin runs its radial return's workload)
        args = wl.args_of(base, wl.batch(wl.pool(base), size, torch.float64))
        binds = [m.bind(modelc_hook.named_inputs(m, model, args), derivatives="tangent") for m in models]
        reps = max(3, int(1e6 // size))
        best = [float("inf")] * len(binds)
        for _ in range(rounds):
            for i, b in enumerate(binds):
                t0 = time.perf_counter()
                for _ in range(reps):
                    b()
                best[i] = min(best[i], (time.perf_counter() - t0) / reps)
        r0 = binds[0].result
        for src, b, t in zip(sources, binds, best):
            r = b.result
            recs.append({"model": model, "size": size, "source": src, "ns_per_point": t / size * 1e9,
                         "outputs_rel": _rel(r.outputs.tensor, r0.outputs.tensor),
                         "tangent_rel": _rel(r.jacobian.tensor, r0.jacobian.tensor)})
    return recs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a library model of the benchmark or a _coupled twin (spec/library.yaml)")
    ap.add_argument("sources", nargs="+", help="'-' (the module's C source) or C files")
    ap.add_argument("--sizes", nargs="+", type=int, default=[2000, 100000])
    a = ap.parse_args(argv)
    print("| model | size | source | ns/point | max rel. diff outputs | tangent |")
    print("|---|---|---|---|---|---|")
    for r in compare(a.model, a.sizes, a.sources):
        print(f"| {r['model']} | {r['size']} | {r['source']} | {r['ns_per_point']:.1f} | "
              f"{r['outputs_rel']:.1e} | {r['tangent_rel']:.1e} |")


if __name__ == "__main__":
    main()
