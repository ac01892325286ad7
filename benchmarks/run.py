"""One-command benchmark: modelc vs hand-written PyTorch (eager, torch.compile) vs NEML2.

    python -m benchmarks.run [--models ...] [--sizes ...] [--dtypes ...] [--tangent yes no] [--quick]

For each model, dtype, batch size and with/without the tangent: every implementation is run once and
its outputs compared with the hand-written eager baseline (a mismatch is recorded instead of a time),
warmed up, then timed interleaved (one call of each per round), median of the rounds. NEML2 runs in its
own venv as a subprocess (benchmarks/neml2_runner.py), checked against the same baseline. Results go
to benchmarks/results/<stamp>.json (+ .md table, + .png plot). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import baselines as bl  # noqa: E402
from benchmarks import expert  # noqa: E402
from benchmarks import modelc_hook  # noqa: E402
from benchmarks import workload as wl  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
NEML2_PYTHON = REPO / ".neml2-venv" / "bin" / "python"
REFERENCE = REPO / "tests" / "reference" / "neml2"  # NEML2 reference results, committed (tests use them too)
#: max relative error (vs the largest magnitude of each output) accepted before timing
AGREE = {torch.float64: 1e-8, torch.float32: 1e-3}
COMPILE_NEWTON_IT = 8  # twice what the workload needs (checked against torch-eager before timing)
ROTATE = 3  # input buffers cycled through so caches do not flatter repeated calls


# ------------------------------------------------------------------------------------ environment

def machine_info(device: torch.device) -> dict:
    cpu = platform.processor()
    fields: dict[str, str] = {}
    try:  # the first processor's entry: a virtual machine often names only the vendor ("AMD EPYC")
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "model name" in fields:
        # family/model tell the generation (AMD family 25 = Zen 3/4), the flags the vector width the
        # C backend gets from -march=native: the same code ran 2-3x apart on two "AMD EPYC" machines
        isa = [f for f in ("avx2", "avx512f", "fma") if f in fields.get("flags", "").split()]
        cpu = (f"{fields['model name']} (family {fields.get('cpu family', '?')}, model "
               f"{fields.get('model', '?')}, {'+'.join(isa) or 'no AVX'})")
    info = {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "device": str(device)}
    for mod in ("numpy", "triton", "sympy", "modelc"):
        try:
            m = __import__(mod)
            info[mod] = getattr(m, "__version__", "?")
        except Exception:  # not installed / not importable here: recorded as absent
            info[mod] = None
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


class Timer:
    """Wall time of one call: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def copy_bandwidth(device: torch.device, nbytes: int, repeats: int = 5) -> float:
    """Measured device copy bandwidth in bytes/s (read + write counted: 2 x buffer size / time)."""
    src = torch.empty(nbytes // 8, dtype=torch.float64, device=device).uniform_()
    dst = torch.empty_like(src)
    timer = Timer(device)
    dst.copy_(src)
    t = min(timer(lambda: dst.copy_(src)) for _ in range(repeats))
    return 2 * nbytes / t


# ---------------------------------------------------------------------------------- implementations

def implementations(model: str, dtype: torch.dtype, device: torch.device, which: list[str],
                    notes: list[str]) -> dict[str, Callable]:
    """name -> step(*args, tangent=bool) in the baseline convention."""
    p = bl.params_for(model)
    impls: dict[str, Callable] = {}
    if "modelc" in which:
        for backend in modelc_hook.modelc_backends(device):
            try:
                impls[f"modelc-{backend}"] = modelc_hook.modelc_step(model, backend, dtype, device)
            except modelc_hook.ModelcUnavailable as e:
                notes.append(f"modelc-{backend} skipped for {model}: {e}")
        if device.type == "cpu" and "modelc-c" in impls:  # a host's same arrays every step (model.bind)
            impls["modelc-c-bound"] = modelc_hook.modelc_step(model, "c", dtype, device, bound=True)
            # every parameter compiled in as a constant (Model(bake=True): a material known at build
            # time, like the hand-written update's literals): pow(y, 5) becomes multiplications
            impls["modelc-c-baked"] = modelc_hook.modelc_step(model, "c", dtype, device, baked=True)
            general = modelc_hook.modelc_step(model, "c", dtype, device, specialize=False)
            if general.model.EXPONENTS:  # modelc-c bakes an integer exponent (y**5): the general powers
                impls["modelc-c-general"] = general
        if model != "elastic":  # the `_coupled` twin (NEML2's coupled system) on the default backend
            backend = modelc_hook.modelc_backends(device)[0]
            try:
                impls[f"modelc-{backend}-coupled"] = modelc_hook.modelc_step(f"{model}_coupled", backend, dtype, device)
            except modelc_hook.ModelcUnavailable as e:
                notes.append(f"modelc-{backend}-coupled skipped for {model}: {e}")
    if "eager" in which:
        steps = {t: bl.make_step(model, p, tangent=t) for t in (False, True)}
        impls["torch-eager"] = lambda *a, tangent: steps[tangent](*a)
    if "compile" in which:
        # fixed Newton iteration count: no data-dependent break, so dynamo captures one graph
        # (with the convergence test every iteration is a graph break and compile gains nothing)
        csteps = {t: torch.compile(bl.make_step(model, p, tangent=t, fixed_iterations=COMPILE_NEWTON_IT))
                  for t in (False, True)}
        impls["torch-compile"] = lambda *a, tangent: csteps[tangent](*a)
    if "expert" in which and device.type == "cpu" and dtype == torch.float64 and model in expert.MODELS:
        try:
            impls["expert-c"] = expert.expert_step(model)
        except Exception as e:  # no C compiler here: reported, the others still run
            notes.append(f"expert-c skipped for {model}: {type(e).__name__}: {e}"[:300])
    return impls


def _max_rel_errors(model: str, got: tuple, want: tuple, tangent: bool) -> dict[str, float]:
    return {n: float((g.double() - w.double()).abs().max() / w.double().abs().max().clamp_min(1e-300))
            for n, g, w in zip(bl.output_names(model, tangent), got, want)}


def bench_config(model: str, dtype: torch.dtype, device: torch.device, size: int, tangent: bool,
                 impls: dict[str, Callable], a: argparse.Namespace, bandwidth: float | None) -> list[dict]:
    """Check, warm up and time every implementation on one configuration (interleaved)."""
    pool = wl.pool(model)
    bufs = [wl.args_of(model, wl.batch(pool, size, dtype, device, offset=97 * i)) for i in range(ROTATE)]
    want = bl.make_step(model, tangent=tangent)(*bufs[0])
    floors = set()
    if "floor" in getattr(a, "impls", ()) and dtype == torch.float64 and device.type == "cpu":
        from benchmarks.floor import floor_steps

        impls = {**impls, **floor_steps(want)}
        floors = {"floor", "floor-nt"}
    timer = Timer(device)
    nbytes = wl.bytes_per_point(model, tangent, dtype)
    recs, live = {}, {}
    for name, fn in impls.items():
        rec = {"impl": name, "model": model, "dtype": str(dtype).removeprefix("torch."), "size": size,
               "tangent": tangent, "device": str(device), "bytes_per_point": nbytes}
        try:
            rec["first_call_s"] = timer(lambda: fn(*bufs[0], tangent=tangent))
            rec["errors"] = _max_rel_errors(model, fn(*bufs[0], tangent=tangent), want, tangent)
        except Exception as e:  # reported, the others still run
            rec["error"] = f"{type(e).__name__}: {e}"[:1000]
            recs[name] = rec
            continue
        name_w, worst = max(rec["errors"].items(), key=lambda kv: kv[1])
        if name in floors:  # no arithmetic: nothing to agree with
            rec.pop("errors")
            live[name] = fn
        elif not worst <= AGREE[dtype]:
            rec["error"] = f"{name_w} disagrees with torch-eager: max relative error {worst:.2e} > {AGREE[dtype]:.0e}"
        else:
            live[name] = fn
        recs[name] = rec
    for _ in range(a.warmup):
        for fn in live.values():
            for b in bufs:
                fn(*b, tangent=tangent)
    times: dict[str, list[float]] = {n: [] for n in live}
    budget_end = time.perf_counter() + a.max_seconds
    for r in range(a.repeats):
        # each round starts at another route (and every other round runs backwards), so no route
        # always follows the same one: a route after modelc-torch, whose large temporaries evict
        # the caches, was up to 2x slower in some rounds, and with a fixed order always the same one
        items = list(live.items())
        k = r % len(items) if items else 0
        order = items[k:] + items[:k]
        if r % 2:
            order.reverse()
        for name, fn in order:
            b = bufs[r % ROTATE]
            times[name].append(timer(lambda: fn(*b, tangent=tangent)))
        if r >= 2 and time.perf_counter() > budget_end:
            break
    for name, ts in times.items():
        rec = recs[name]
        rec["times_s"] = ts
        rec["median_s"] = statistics.median(ts)
        rec["points_per_s"] = size / rec["median_s"]
        rec["achieved_bytes_per_s"] = nbytes * size / rec["median_s"]
        if bandwidth:
            rec["fraction_of_copy_bandwidth"] = rec["achieved_bytes_per_s"] / bandwidth
    return list(recs.values())


def run_neml2(a: argparse.Namespace, notes: list[str]) -> dict | None:
    """NEML2 in its own venv (subprocess); None with a note when the venv is absent or it fails."""
    py = Path(a.neml2_python)
    if not py.is_file():
        notes.append(f"NEML2 skipped: no venv at {py} (bash benchmarks/setup_neml2.sh)")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "neml2.json"
        cmd = [str(py), str(REPO / "benchmarks" / "neml2_runner.py"), "--models", *a.models,
               "--sizes", *map(str, a.neml2_sizes or a.sizes), "--dtypes", *a.dtypes,
               "--routes", *a.neml2_routes, "--tangent", *a.tangent, "--repeats", str(a.repeats),
               "--warmup", str(a.warmup), "--max-seconds", str(a.max_seconds), "--out", str(out),
               "--device", str(a.device)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if proc.returncode != 0 or not out.is_file():
            notes.append(f"NEML2 runner failed (rc {proc.returncode}): {proc.stderr[-1500:]}")
            return None
        res = json.loads(out.read_text())
    for rec in res["records"]:
        name, worst = max(rec["errors"].items(), key=lambda kv: kv[1])
        if not worst <= AGREE[getattr(torch, rec["dtype"])]:
            rec["error"] = f"{name} disagrees with torch-eager: max relative error {worst:.2e} (time not recorded)"
            for k in ("median_s", "points_per_s", "times_s"):
                rec.pop(k, None)
    return res


def reference_check() -> dict[str, float] | None:
    """Max relative error of the hand-written baselines against NEML2's reference arrays (float64)."""
    import numpy as np

    if not REFERENCE.is_dir():
        return None
    names = {bl.STRESS: "stress", bl.EP: "plastic_strain", bl.EPS: "equivalent_plastic_strain",
             bl.X: "back_stress", bl.GAMMA: "flow_rate", bl.TANGENT: "tangent"}
    worst = {}
    for model in bl.MODELS:
        with np.load(REFERENCE / f"{model}__uniaxial.npz") as z:
            steps = tuple(int(s) for s in z["tangent_steps"])
            h = bl.run_history(model, torch.tensor(z["strain"]), torch.tensor(z["time"]), tangent_steps=steps)
            worst[model] = max(float(np.abs(v.numpy() - z[names[k]]).max() / np.abs(z[names[k]]).max())
                               for k, v in h.items())
    return worst


def add_ratios(records: list[dict]) -> None:
    """speedup = t(reference impl) / t(impl), reference = best modelc if timed, else torch-eager."""
    key = lambda r: (r["model"], r["dtype"], r["size"], r["tangent"])  # noqa: E731
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if "median_s" in r:
            groups.setdefault(key(r), []).append(r)
    for recs in groups.values():
        mc = [r for r in recs if r["impl"].startswith("modelc") and not r["impl"].endswith(("-coupled", "-bound"))]
        eager = [r for r in recs if r["impl"] == "torch-eager"]
        ref = min(mc, key=lambda r: r["median_s"]) if mc else (eager[0] if eager else None)
        if ref is None:
            continue
        floor = [r for r in recs if r["impl"].startswith("floor")]
        best_floor = min(floor, key=lambda r: r["median_s"]) if floor else None
        for r in recs:
            r["ratio_ref"] = ref["impl"]
            r["speedup_vs_ref"] = ref["median_s"] / r["median_s"]
            if best_floor is not None:  # 1.0: as fast as moving the bytes can be
                r["fraction_of_floor"] = best_floor["median_s"] / r["median_s"]


def table(records: list[dict]) -> str:
    rows = ["| model | dtype | tangent | size | impl | points/s | vs ref | ref | of floor | note |", "|---" * 10 + "|"]
    for r in sorted(records, key=lambda r: (r["model"], r["dtype"], r["tangent"], r["size"], r["impl"])):
        pps = f"{r['points_per_s']:.3g}" if "points_per_s" in r else "-"
        sp = f"{r['speedup_vs_ref']:.3g}" if "speedup_vs_ref" in r else "-"
        rows.append(f"| {r['model']} | {r['dtype']} | {'yes' if r['tangent'] else 'no'} | {r['size']} | {r['impl']} "
                    f"| {pps} | {sp} | {r.get('ratio_ref', '-')} | "
                    f"{format(r['fraction_of_floor'], '.2f') if 'fraction_of_floor' in r else '-'} | "
                    f"{r.get('error', '')[:90]} |")
    return "\n".join(rows)


def expert_table(records: list[dict]) -> str:
    """modelc's C routes against the hand-written SIMD C update (``expert-c``), same configuration."""
    by = {}
    for r in records:
        if "median_s" in r:
            by.setdefault((r["model"], r["dtype"], r["size"], r["tangent"]), {})[r["impl"]] = r
    rows = []
    for (model, dtype, size, tangent), recs in sorted(by.items()):
        ex = recs.get("expert-c")
        if ex is None:
            continue
        for name in ("modelc-c", "modelc-c-bound", "modelc-c-baked"):
            r = recs.get(name)
            if r is None:
                continue
            frac = lambda x: format(x["fraction_of_floor"], ".2f") if "fraction_of_floor" in x else "-"  # noqa: E731
            rows.append(f"| {model} | {'yes' if tangent else 'no'} | {size} | {name} | {r['points_per_s']:.3g} | "
                        f"{ex['points_per_s']:.3g} | {ex['median_s'] / r['median_s']:.2f} | {frac(r)} | {frac(ex)} |")
    if not rows:
        return ""
    return ("\n\nmodelc's C kernel against the hand-written SIMD C update (`expert-c`, benchmarks/expert.py), "
            "float64, median points/s (`/ expert` above 1: modelc faster):\n\n"
            "| model | tangent | size | route | points/s | expert-c | / expert | of floor | expert of floor |\n"
            "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


def extra_tables(result: dict) -> str:
    """``out=`` against fresh outputs (and torch.compile), and the thread scaling, as Markdown."""
    text = ""
    if result.get("out_vs_fresh"):
        text += ("\n\nmodelc-c, float64, tangent, into `out=` buffers vs fresh outputs (and the hand-written "
                 "update under torch.compile, fresh outputs), best of the repeats, points/s:\n\n"
                 "| model | size | out= | fresh | torch.compile | out= / fresh | out= / torch.compile |\n"
                 "|---|---|---|---|---|---|---|\n")
        for r in result["out_vs_fresh"]:
            c = r.get("compile_points_per_s")
            text += (f"| {r['model']} | {r['size']} | {r['out_points_per_s']:.3g} | {r['fresh_points_per_s']:.3g} | "
                     f"{'-' if c is None else format(c, '.3g')} | {r['out_speedup']:.2f} | "
                     f"{'-' if c is None else format(r['out_vs_compile'], '.2f')} |\n")
    text += expert_table(result.get("records", []))
    if result.get("threads"):
        text += ("\nmodelc-c, float64, tangent, `out=`, OpenMP threads (points/s, speedup over 1 thread):\n\n"
                 "| model | size | threads | points/s | speedup |\n|---|---|---|---|---|\n")
        for r in result["threads"]:
            text += f"| {r['model']} | {r['size']} | {r['threads']} | {r['points_per_s']:.3g} | {r['speedup_vs_1']:.2f} |\n"
    return text


def _run_all(a: argparse.Namespace, device: torch.device, result: dict, notes: list[str],
             bw: float | None, save: Callable[[], None]) -> None:
    """Every configuration of `a`, records appended to `result` as they are measured (``save()``
    after each: a run killed outright keeps what it measured)."""
    if "neml2" in a.impls:  # first: its own process, which a time box (SIGINT) would cut last
        res = run_neml2(a, notes)
        if res:
            result["neml2"] = {k: v for k, v in res.items() if k != "records"}
            for r in res["records"]:
                r.setdefault("device", str(a.device))
                r["bytes_per_point"] = wl.bytes_per_point(r["model"], r["tangent"], getattr(torch, r["dtype"]))
            result["records"].extend(res["records"])
        save()
    for model in a.models:
        if "modelc" in a.impls:  # spec -> importable module; first-call latency is in each record
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    result.setdefault("modelc_compile", {})[model] = modelc_hook.modelc_compile(model, tmp)
            except modelc_hook.ModelcUnavailable as e:
                notes.append(f"modelc compile time not measured: {e}")
        for dname in a.dtypes:
            dtype = getattr(torch, dname)
            impls = implementations(model, dtype, device, a.impls, notes)
            for size in a.sizes:
                for tan in a.tangent:
                    recs = bench_config(model, dtype, device, size, tan == "yes", impls, a, bw)
                    for r in recs:  # registers/spills of the Triton kernels as loaded on the GPU
                        if r["impl"] == "modelc-triton" and r["impl"] in impls:
                            r["kernel_resources"] = modelc_hook.kernel_resources(impls[r["impl"]])
                    result["records"].extend(recs)
                    save()
                    for r in recs:
                        print(f"{model:14s} {dname:7s} B={size:<8d} tangent={tan:3s} {r['impl']:14s} "
                              + (f"{r['points_per_s']:.3g} pts/s" if "points_per_s" in r else r.get("error", "")),
                              flush=True)
    if "modelc" in a.impls and device.type == "cpu":
        from benchmarks.out_timing import out_vs_fresh, threads_scaling

        for model in a.models:
            compiled = None
            if "compile" in a.impls:  # the hand-written update under torch.compile, fresh outputs
                compiled = implementations(model, torch.float64, device, ["compile"], notes)["torch-compile"]
            for size in a.out_sizes or ([10**4] if a.quick else [10**6]):
                rec = out_vs_fresh(model, size, a.repeats, compiled)
                result.setdefault("out_vs_fresh", []).append(rec)
                print(f"{model:14s} out= vs fresh at {size}: {rec}", flush=True)
            if model != "elastic":
                for size in ([10**4] if a.quick else [10**5, 10**6]):
                    recs = threads_scaling(model, size, a.repeats)
                    result.setdefault("threads", []).extend(recs)
                    print(f"{model:14s} threads at {size}: {[round(r['speedup_vs_1'], 2) for r in recs]}", flush=True)


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description="modelc vs NEML2 vs hand-written PyTorch (see benchmarks/README.md)")
    ap.add_argument("--models", nargs="+", default=list(bl.MODELS), choices=bl.MODELS)
    ap.add_argument("--sizes", nargs="+", type=int, default=None, help="default 1e2..1e5 (CPU), 1e3..1e7 (GPU)")
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    ap.add_argument("--tangent", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    ap.add_argument("--impls", nargs="+", default=["modelc", "eager", "compile", "neml2", "floor", "expert"],
                    choices=["modelc", "eager", "compile", "neml2", "floor", "expert"],
                    help="floor: the memory floor (same bytes, no arithmetic; float64 on the CPU); expert: "
                         "the hand-written SIMD C update (benchmarks/expert.py; float64 on the CPU, "
                         "the plastic models)")
    ap.add_argument("--out-sizes", nargs="+", type=int, default=None,
                    help="sizes at which modelc-c with out= is timed against fresh outputs (default 1e6 on the CPU)")
    ap.add_argument("--neml2-routes", nargs="+", default=["eager"], choices=["eager", "compile", "aoti"],
                    help="compile/aoti cost 1-10 min of compilation per model and shape")
    ap.add_argument("--neml2-sizes", nargs="+", type=int, default=None, help="default: --sizes")
    ap.add_argument("--neml2-python", default=str(NEML2_PYTHON))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=3.0, help="per configuration, after 3 rounds")
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats, no torch.compile")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="", help="added to the result file name")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="compile every module and build every C library anew, in a new temporary cache "
                         "folder ($MODELC_CACHE_DIR for the run): a long-lived cache can hold a library "
                         "copy that runs up to 1.2x slower than a fresh one (docs/performance.md)")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    saved_cache = os.environ.get("MODELC_CACHE_DIR")
    if a.fresh_cache:  # before any model is loaded (the cache folder is read at each load)
        os.environ["MODELC_CACHE_DIR"] = tempfile.mkdtemp(prefix="modelc-bench-")
    try:
        return _main(a, device)
    finally:
        if a.fresh_cache:  # (a caller in the same process, e.g. a test, gets its own cache back)
            if saved_cache is None:
                os.environ.pop("MODELC_CACHE_DIR", None)
            else:
                os.environ["MODELC_CACHE_DIR"] = saved_cache


def _main(a: argparse.Namespace, device: torch.device) -> Path:
    if a.sizes is None:
        a.sizes = [100, 1000, 10000] if a.quick else (
            [10**k for k in range(3, 8)] if device.type == "cuda" else [10**k for k in range(2, 6)])
    if a.quick:
        a.repeats, a.warmup, a.max_seconds = min(a.repeats, 5), 1, min(a.max_seconds, 1.0)
        a.impls = [i for i in a.impls if i != "compile"]
    notes: list[str] = []
    if a.fresh_cache:
        notes.append(f"modules and C libraries built anew for this run, in {os.environ['MODELC_CACHE_DIR']}")
    t_start = time.perf_counter()
    info = machine_info(device)
    bw = copy_bandwidth(device, 2**28 if device.type == "cuda" else 2**26)
    result = {"machine": info, "settings": vars(a), "copy_bandwidth_bytes_per_s": bw,
              "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "baselines_vs_neml2_reference": reference_check(), "records": [], "notes": notes}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{device.type}"
    stem += f"-{a.tag}" if a.tag else ""
    path = out / f"{stem}.json"

    def save() -> None:
        path.write_text(json.dumps({**result, "partial": True}, indent=1))

    try:
        _run_all(a, device, result, notes, bw, save)
    except KeyboardInterrupt:  # SIGINT (`timeout -s INT` on a leased GPU): keep what was measured
        notes.append("interrupted: the records are those measured before the interrupt")
    notes[:] = list(dict.fromkeys(notes))
    add_ratios(result["records"])
    result["wall_s"] = time.perf_counter() - t_start
    path.write_text(json.dumps(result, indent=1))
    md = table(result["records"]) + extra_tables(result)
    threads = info.get("torch_threads")  # (a run made without OMP_NUM_THREADS=1 uses every core: say so)
    (out / f"{stem}.md").write_text(f"{info['cpu']} ({info['cores']} cores), {info.get('gpu', 'no GPU')}, "
                                    f"torch {info['torch']}"
                                    + (f", {threads} thread{'s' if threads != 1 else ''}" if threads else "")
                                    + f"\n\n{md}\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    try:
        from benchmarks.plot import plot

        plot(result, out / f"{stem}.png")
    except ImportError as e:
        notes.append(f"no plot: {e}")
    print(md)
    for n in notes:
        print("note:", n)
    print(f"results: {path}")
    return path


if __name__ == "__main__":
    main()
