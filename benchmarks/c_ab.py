"""A/B timing of edited C sources of one library model, in one process, interleaved.

    python -m benchmarks.c_ab j2_voce_af - edited.c [other.c ...] --sizes 2000 100000
    python -m benchmarks.c_ab chaboche2_coupled --sizes 20000 --derivatives total git:HEAD -

(``--sizes`` takes every argument after it up to the next option: the sources go before it, or
another option between.)

``-`` is the module's own C source; ``git:REV`` the module's C source at git revision ``REV``, with
that revision's ``runtime/modelc_kernel.h`` written in place of its include line (so a change to the
header is measured too); every other argument is a C file that replaces it (for example the ``.c``
the backend keeps next to each library in the cache folder, edited by hand: it holds the header
already, which the build leaves as it is). Each source is built with the backend's flags and
called through ``model.bind`` (the bound fast path: the kernel and ~7 us of Python), float64, with
the declared tangent (``--derivatives``: or none, ``value``, or the Jacobian by every input,
``jacobian``, or by inputs and parameters, ``total``), on the benchmark workload (chaboche2_coupled: benchmarks/chaboche.py's
steps of the NEML2 history); one thread. Per size: best of 9 rounds of ``max(3, 1e6 // size)`` calls
each, the sources interleaved in every round (``--plain``: the public call, which returns fresh results
every call, instead of the bound one); printed as ns per point, with each source's largest
relative difference from the first one's outputs and derivatives (a change that is faster but
computes something else shows here). This is how the C changes in docs/performance.md were
measured before they were adopted or not.

Out of cache, two things decide what such a timing says (measured 2026-11-29 on an AMD EPYC VM,
j2_voce_af at 1e5 points; benchmarks/results/20261129T020232Z-cpu-status-stores.md):

- ``--sets K``: every source is bound to K input sets (shared by the sources), and the timing is
  :func:`shuffled_calls`: one call of each source a round, in a random order, consecutive calls on
  consecutive sets, so no call reads the inputs the call before it read; best and median of all
  calls. With one set (the default: best of the rounds' loops of one source, as before) the
  inputs of 1e5 points (16 MB) stay in a 32 MB last-level cache between calls while the outputs
  stream past it, and what a change does to the reads from memory does not show: a change worth
  1-3 ns a point with 4 sets (j2_voce_af's status stores) measured nothing with one.
- ``--ballast MB``: memory allocated and written before any source is bound. Identical sources bound
  one after another ran 46, 44, 44 and 43 ns a point (later that day 45, 45, 43, 43), the first
  one's buffers the slowest; 300 MB of ballast evened them out once (44, 43, 42). Once the
  hand-written expert's C ran 44 ns instead of 34 with its buffers allocated first; repeated an
  hour later it did not (34 first, 33 last). Compare sources in both orders (ABBA, BAAB).
  The cause was where each binding's 4 KiB output pages lay: since the runtime's buffer pool maps
  large results in huge pages (2026-11-29), four bindings of one source ran 36.1, 35.6, 35.6 and
  35.7 ns a point without ballast (benchmarks/results/20261129T100500Z-cpu-c-ab-page-kinds.md).
- ``--fresh``: where the library lies. Two byte-identical libraries of j2_voce_af_coupled (one
  blank line apart in their sources, two cache entries) ran 737 and 652 ns a point in one process
  (2026-11-29, benchmarks/results/20261129T153500Z-cpu-c-ab-exports-gpow.md), and the A/B of a
  change measured with such copies showed a gain or a loss that was not the code's. ``--fresh``
  builds the module and every source's library in a new temporary cache folder; compare two such
  runs, and trust only what both show. It is the file's pages: four identical libraries built one
  after another ran 805, 655, 655 and 655 ns a point, and the slow one copied to a new file (new
  page-cache pages, the same bytes) ran 677.
"""
from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import subprocess
import tempfile
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


def _inputs(model: str, m, size: int, offset: int = 0) -> dict:
    if model == "chaboche2_coupled":
        from benchmarks import chaboche
        return chaboche.inputs(chaboche.tile(chaboche.pool(), size, torch.float64, "cpu"))  # (fresh copies)
    base = modelc_hook._base(model)  # (a _coupled twin runs its radial return's workload)
    batch = wl.batch(wl.pool(base), size, torch.float64, offset=offset)
    return modelc_hook.named_inputs(m, model, wl.args_of(base, batch))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / (b.abs() + 1)).nan_to_num(float("inf")).max())


DERIVATIVES = {"value": False, "tangent": "tangent", "jacobian": True, "total": "total"}


def interleaved_best(calls: list, size: int, rounds: int) -> list[float]:
    """Seconds per call of each of ``calls`` on ``size`` points: best of ``rounds`` rounds of
    ``max(3, 1e6 // size)`` calls each, the calls interleaved in every round. A call given as a list
    (one per input set) takes its entries in turn."""
    reps = max(3, int(1e6 // size))
    best = [float("inf")] * len(calls)
    for _ in range(rounds):
        for i, f in enumerate(calls):
            fs = f if isinstance(f, list) else [f]
            t0 = time.perf_counter()
            for k in range(reps):
                fs[k % len(fs)]()
            best[i] = min(best[i], (time.perf_counter() - t0) / reps)
    return best


def shuffled_calls(calls: list[list], size: int, rounds: int, seed: int = 0) -> list[list[float]]:
    """Seconds of every call of each source (a list of calls, one per input set): ``rounds`` rounds
    of one call of each source, in a new random order every round; consecutive calls take
    consecutive input sets, whichever source makes them (so a call reads no input the call before it
    read, and no source always follows the same one)."""
    rng = random.Random(seed)
    times: list[list[float]] = [[] for _ in calls]
    k = 0
    for _ in range(rounds):
        order = list(range(len(calls)))
        rng.shuffle(order)
        for i in order:
            f = calls[i][k % len(calls[i])]
            k += 1
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return times


def compare(model: str, sizes: list[int], sources: list[str], rounds: int = 9,
            derivatives: str = "tangent", sets: int = 1, ballast_mb: int = 0, plain: bool = False) -> list[dict]:
    if sets < 1 or ballast_mb < 0:
        raise ValueError(f"sets must be at least 1 and ballast_mb at least 0, got {sets} and {ballast_mb}")
    torch.set_num_threads(1)
    models = _models(model, sources)
    recs = []
    for size in sizes:
        ballast = torch.ones(ballast_mb * 2**20 // 8, dtype=torch.float64)  # noqa: F841 (held: see the doc)
        inputs = [_inputs(model, models[0], size, offset=97 * k) for k in range(sets)]
        if plain:  # the public call: fresh results (from the pool) every call
            sets_of = [[functools.partial(m, x, derivatives=DERIVATIVES[derivatives]) for x in inputs]
                       for m in models]
        else:
            sets_of = [[m.bind(x, derivatives=DERIVATIVES[derivatives]) for x in inputs] for m in models]
        binds = [bs[0] for bs in sets_of]
        median = [None] * len(binds)
        if sets > 1:
            times = shuffled_calls(sets_of, size, rounds * max(3, int(1e6 // size)))
            best, median = [min(t) for t in times], [statistics.median(t) for t in times]
        else:
            best = interleaved_best(binds, size, rounds)
        results = [b() if plain else b.result for b in binds]
        r0 = results[0]
        for src, r, t, med in zip(sources, results, best, median):
            same = torch.equal(r.outputs.tensor, r0.outputs.tensor)
            rel = 0.0
            if derivatives != "value":
                rel = _rel(r.jacobian.tensor, r0.jacobian.tensor)
                same = same and torch.equal(r.jacobian.tensor, r0.jacobian.tensor)
            recs.append({"model": model, "size": size, "source": src, "derivatives": derivatives,
                         "ns_per_point": t / size * 1e9,
                         "median_ns_per_point": None if med is None else med / size * 1e9,
                         "outputs_rel": _rel(r.outputs.tensor, r0.outputs.tensor),
                         "derivatives_rel": rel, "identical": bool(same)})
    return recs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a library model of the benchmark, a _coupled twin or chaboche2_coupled")
    ap.add_argument("sources", nargs="+", help="'-' (the module's C source), git:REV or C files")
    ap.add_argument("--sizes", nargs="+", type=int, default=[2000, 100000])
    ap.add_argument("--derivatives", choices=sorted(DERIVATIVES), default="tangent")
    ap.add_argument("--sets", type=int, default=1,
                    help="input sets each source takes in turn (4 at 1e5 points: inputs from memory)")
    ap.add_argument("--ballast", type=int, default=0, metavar="MB",
                    help="memory allocated and written before the sources are bound")
    ap.add_argument("--plain", action="store_true",
                    help="time the public call (fresh results every call) instead of model.bind")
    ap.add_argument("--fresh", action="store_true",
                    help="build everything in a new temporary cache folder (see the module doc: run twice)")
    a = ap.parse_args(argv)
    if a.fresh:  # before anything is loaded: the module and every source's library built anew
        os.environ["MODELC_CACHE_DIR"] = tempfile.mkdtemp(prefix="modelc-c-ab-")
    if a.sets < 1 or a.ballast < 0:
        ap.error(f"--sets must be at least 1 and --ballast at least 0, got {a.sets} and {a.ballast}")
    print("| model | derivatives | size | source | ns/point (best) | median | max rel. diff outputs | derivatives "
          "| bit for bit |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in compare(a.model, a.sizes, a.sources, derivatives=a.derivatives, sets=a.sets, ballast_mb=a.ballast,
                     plain=a.plain):
        med = "-" if r["median_ns_per_point"] is None else f"{r['median_ns_per_point']:.1f}"
        print(f"| {r['model']} | {r['derivatives']} | {r['size']} | {r['source']} | {r['ns_per_point']:.1f} | {med} | "
              f"{r['outputs_rel']:.1e} | {r['derivatives_rel']:.1e} | {'yes' if r['identical'] else 'no'} |")


if __name__ == "__main__":
    main()
