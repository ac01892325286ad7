"""A/B timing of edited C sources of one library model, in one process, interleaved.

    python -m benchmarks.c_ab j2_voce_af --sizes 2000 100000 - edited.c [other.c ...]
    python -m benchmarks.c_ab chaboche2_coupled --sizes 20000 --derivatives total git:HEAD -

``-`` is the module's own C source; ``git:REV`` the module's C source at git revision ``REV``, with
that revision's ``runtime/modelc_kernel.h`` written in place of its include line (so a change to the
header is measured too); every other argument is a C file that replaces it (for example the ``.c``
the backend keeps next to each library in the cache folder, edited by hand: it holds the header
already, which the build leaves as it is). Each source is built with the backend's flags and
called through ``model.bind`` (the bound fast path: the kernel and ~7 us of Python), float64, with
the declared tangent (``--derivatives``: or none, ``value``, or the Jacobian by every input,
``jacobian``, or by inputs and parameters, ``total``), on the benchmark workload (chaboche2_coupled: benchmarks/chaboche.py's
steps of the NEML2 history); one thread. Per size: best of 9 rounds of ``max(3, 1e6 // size)`` calls
each, the sources interleaved in every round; printed as ns per point, with each source's largest
relative difference from the first one's outputs and derivatives (a change that is faster but
computes something else shows here). This is how the C changes in docs/performance.md were
measured before they were adopted or not.
"""
from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import torch

from benchmarks import modelc_hook
from benchmarks import workload as wl
from benchmarks.baselines import params_for


REPO = Path(__file__).resolve().parent.parent


def _git_source(model: str, rev: str) -> str:
    """The C source of ``generated/<model>.py`` at ``rev``, with that revision's kernel header inlined."""
    def show(path: str) -> str:
        return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout
    module = show(f"generated/{model}.py")
    head, quotes = "C_SOURCE = r" + "'" * 3, "'" * 3
    start = module.index(head) + len(head)
    src = module[start:module.index(quotes, start)]
    return src.replace('#include "modelc_kernel.h"\n', show("runtime/modelc_kernel.h"), 1)


def _text(model: str, src: str) -> str:
    return _git_source(model, src[4:]) if src.startswith("git:") else open(src).read()


def _params(model: str) -> dict:
    if model == "chaboche2_coupled":
        from benchmarks import chaboche
        return chaboche.params()
    return params_for(modelc_hook._base(model))


def _models(model: str, sources: list[str]):
    import modelc

    base = modelc.load(modelc_hook._LIBRARY, model=model).Model
    out = []
    for src in sources:
        cls = base if src == "-" else type(f"{base.__name__}AB", (base,), {"c_source": _text(model, src)})
        out.append(cls(dtype=torch.float64, device=torch.device("cpu"), backend="c", **_params(model)))
    return out


def _inputs(model: str, m, size: int) -> dict:
    if model == "chaboche2_coupled":
        from benchmarks import chaboche
        return chaboche.inputs(chaboche.tile(chaboche.pool(), size, torch.float64, "cpu"))
    base = modelc_hook._base(model)  # (a _coupled twin runs its radial return's workload)
    return modelc_hook.named_inputs(m, model, wl.args_of(base, wl.batch(wl.pool(base), size, torch.float64)))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / (b.abs() + 1)).nan_to_num(float("inf")).max())


DERIVATIVES = {"value": False, "tangent": "tangent", "jacobian": True, "total": "total"}


def interleaved_best(calls: list, size: int, rounds: int) -> list[float]:
    """Seconds per call of each of ``calls`` on ``size`` points: best of ``rounds`` rounds of
    ``max(3, 1e6 // size)`` calls each, the calls interleaved in every round."""
    reps = max(3, int(1e6 // size))
    best = [float("inf")] * len(calls)
    for _ in range(rounds):
        for i, f in enumerate(calls):
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            best[i] = min(best[i], (time.perf_counter() - t0) / reps)
    return best


def compare(model: str, sizes: list[int], sources: list[str], rounds: int = 9,
            derivatives: str = "tangent") -> list[dict]:
    torch.set_num_threads(1)
    models = _models(model, sources)
    recs = []
    for size in sizes:
        binds = [m.bind(_inputs(model, m, size), derivatives=DERIVATIVES[derivatives]) for m in models]
        best = interleaved_best(binds, size, rounds)
        r0 = binds[0].result
        for src, b, t in zip(sources, binds, best):
            r = b.result
            same = torch.equal(r.outputs.tensor, r0.outputs.tensor)
            rel = 0.0
            if derivatives != "value":
                rel = _rel(r.jacobian.tensor, r0.jacobian.tensor)
                same = same and torch.equal(r.jacobian.tensor, r0.jacobian.tensor)
            recs.append({"model": model, "size": size, "source": src, "derivatives": derivatives,
                         "ns_per_point": t / size * 1e9,
                         "outputs_rel": _rel(r.outputs.tensor, r0.outputs.tensor),
                         "derivatives_rel": rel, "identical": bool(same)})
    return recs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a library model of the benchmark, a _coupled twin or chaboche2_coupled")
    ap.add_argument("sources", nargs="+", help="'-' (the module's C source), git:REV or C files")
    ap.add_argument("--sizes", nargs="+", type=int, default=[2000, 100000])
    ap.add_argument("--derivatives", choices=sorted(DERIVATIVES), default="tangent")
    a = ap.parse_args(argv)
    print("| model | derivatives | size | source | ns/point | max rel. diff outputs | derivatives | bit for bit |")
    print("|---|---|---|---|---|---|---|---|")
    for r in compare(a.model, a.sizes, a.sources, derivatives=a.derivatives):
        print(f"| {r['model']} | {r['derivatives']} | {r['size']} | {r['source']} | {r['ns_per_point']:.1f} | "
              f"{r['outputs_rel']:.1e} | {r['derivatives_rel']:.1e} | {'yes' if r['identical'] else 'no'} |")


if __name__ == "__main__":
    main()
