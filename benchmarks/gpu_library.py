"""Every library model's Triton kernel timed on a GPU, under register caps: points per second, the
fraction of the GPU's copy bandwidth that its bytes per point reach, registers and local memory
(spills and stack, Triton's ``n_spills``: 4-byte words per thread) as Triton loaded the kernel, each
result checked against the same model's PyTorch backend on the same inputs.

``benchmarks.run`` times the five models that have hand-written baselines; this covers what issue 13
asks about and no GPU-less report can answer: whether the kernels of the coupled systems (the
``_coupled`` twins, ``chaboche2_coupled``, ``gtn``) stream at the memory's rate, and which register
cap (the module's own, none, 128, ...) runs fastest. ``--modules DIR`` times module files from a
folder instead (e.g. the same models generated another way, for an A/B on the same warm GPU).

    python -m benchmarks.gpu_library --caps module none 128            # every library model
    python -m benchmarks.gpu_library --models chaboche2_coupled --sizes 1000000 4000000
    python -m benchmarks.gpu_library --compile-only --models j2_voce_af_coupled --caps none
      (fills Triton's cache: run one such process per model in parallel, then time serially)

Inputs: each input variable random (strains ~ N(0, 2e-3^2): a mix of elastic and yielding points at
the library's default parameters), the old state zero, dt = 1. Writes
``benchmarks/results/<UTC stamp>-<device>-gpu-library[-tag].{json,md}`` (or under ``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import torch

from benchmarks.gpu_kernels import MODELS, bytes_per_point
from benchmarks.gpu_kernels import module_of as load
from benchmarks.modelc_hook import kernel_resources
from benchmarks.run import Timer, copy_bandwidth
from modelc.runtime.model import float64_register_cap

RESULTS = Path(__file__).resolve().parent / "results"
DTYPES = {"fp64": torch.float64, "fp32": torch.float32}
DEVICE = "cuda"  # (a smoke test under TRITON_INTERPRET sets "cpu")
CHECK_POINTS = 20_000  # rows compared with the PyTorch backend (the first ones of the timed batch)
_REFERENCE: dict[tuple, object] = {}  # (module, dtype, variant) -> the PyTorch backend's result


def inputs(m, B: int, dtype: torch.dtype, device: str, seed: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for name in m.input_axis.variable_names:
        shape = (B, *m.input_axis.type_of(name).base_shape)
        if name == "forces/t":
            v = torch.ones(shape, dtype=dtype, device=device)
        elif name.startswith("old_"):
            v = torch.zeros(shape, dtype=dtype, device=device)
        else:
            v = torch.randn(shape, generator=g, dtype=dtype, device=device) * 2e-3
        out[name] = v
    return out


def effective_caps(mod, dt: str, caps: list[str], variant: str = "value") -> list[str]:
    """``caps`` less those that compile the same kernel as one before them ("module" is "none" in
    float32 and for the modules that ask for no cap)."""
    own = float64_register_cap(mod.Model, variant) if dt == "fp64" else None
    seen, out = set(), []
    for cap in caps:
        key = {"module": str(own) if own else "none"}.get(cap, cap)
        if key not in seen:
            seen.add(key)
            out.append(cap)
    return out


def _sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def _set_cap(cap: str) -> None:
    if cap == "module":
        os.environ.pop("MODELC_TRITON_MAXNREG", None)
    else:
        os.environ["MODELC_TRITON_MAXNREG"] = cap


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = b.abs().max().clamp_min(1e-300)
    return float(((a - b).abs().max() / scale).item())


def measure(mod, model: str, dt: str, variant: str, cap: str, size: int, repeats: int, calls: int,
            modules: str | None) -> dict:
    dtype, dev = DTYPES[dt], DEVICE
    _set_cap(cap)
    derivatives = "tangent" if variant == "tangent" else False
    tri = mod.Model(dtype=dtype, device=dev, backend="triton")
    x = inputs(tri, size, dtype, dev)
    r = tri(x, derivatives=derivatives)  # compiles (or reads Triton's cache), then checks
    _sync()
    key = (mod.__name__, dt, variant)
    if key not in _REFERENCE:  # the same inputs for every cap and size (seeded, the first rows)
        _REFERENCE[key] = mod.Model(dtype=dtype, device=dev, backend="torch")(
            {k: v[:CHECK_POINTS] for k, v in x.items()}, derivatives=derivatives)
    ref = _REFERENCE[key]
    rec = {"model": model, "dtype": dt, "variant": variant, "cap": cap, "points": size,
           "modules": modules or "generated", "y_err": _rel_err(r.outputs.tensor[:CHECK_POINTS], ref.outputs.tensor)}
    if variant == "tangent":
        rec["j_err"] = _rel_err(r.jacobian.tensor[:CHECK_POINTS], ref.jacobian.tensor)
    if r.status is not None:
        rec["converged"] = float(r.status.converged.float().mean().item())
        rec["mean_iterations"] = float(r.status.iterations.float().mean().item())
    out = r  # the next calls write into the same buffers (out=): the kernel's time, not the allocator's

    def queued() -> None:  # `calls` calls between two CUDA events (Timer)
        for _ in range(calls):
            tri(x, derivatives=derivatives, out=out)
    timer = Timer(torch.device(dev))
    best = min(timer(queued) for _ in range(repeats)) / calls
    nbytes = moved_bytes(mod, model, variant, dt, modules)
    rec.update({"seconds": best, "points_per_s": size / best, "bytes_per_point": nbytes,
                "bytes_per_s": size * nbytes / best})
    # the kernels this process has compiled for the variant: the last is this cap's (caps run in turn)
    res = [k for k in kernel_resources(SimpleNamespace(model=tri)) if k["variant"] == variant]
    if res:
        rec["n_regs"], rec["n_spills"] = res[-1]["n_regs"], res[-1]["n_spills"]
    return rec


def moved_bytes(mod, model: str, variant: str, dt: str, modules: str | None) -> int:
    """Bytes one point moves: :func:`benchmarks.gpu_kernels.bytes_per_point`, less the Jacobian's row
    where the variant's Jacobian is constant (``CONSTANT_JACOBIAN``: elastic's tangent is one block
    for the whole batch, not written per point)."""
    if variant in getattr(mod.Model, "CONSTANT_JACOBIAN", ()):
        variant = "value"
    return bytes_per_point(model, variant, dt, modules)


def table(records: list[dict], bandwidth: float) -> str:
    lines = ["| model | dtype | variant | cap | modules | points | registers | local memory (4-byte words) | points/s | "
             "of copy bandwidth | max rel. err vs torch (Y / J) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | {r['variant']} | {r['cap']} | {r['modules']} | "
                         f"{r.get('points', '')} | | | {r['error'][:80]} | | |")
            continue
        errs = f"{r['y_err']:.1e}" + (f" / {r['j_err']:.1e}" if "j_err" in r else "")
        lines.append(f"| {r['model']} | {r['dtype']} | {r['variant']} | {r['cap']} | {r['modules']} | "
                     f"{r['points']:.0e} | {r.get('n_regs', '')} | {r.get('n_spills', '')} | "
                     f"{r['points_per_s']:.3g} | {r['bytes_per_s'] / bandwidth:.2f} | {errs} |")
    return "\n".join(lines)


def render(result: dict, calls: int, repeats: int) -> str:
    bandwidth = result["copy_bandwidth_bytes_per_s"]
    return (f"# Library Triton kernels on {result['device']}\n\ntorch {result['torch']}, triton "
            f"{result['triton']}; copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + write). Time per call "
            f"with out=, {calls} calls queued between CUDA events, best of {repeats}; 'of copy bandwidth': "
            f"the bytes a point moves (inputs, outputs, its tangent row unless the tangent is constant, status) "
            f"x points/s over that bandwidth. Registers per thread and local memory (spills and stack, in 4-byte words: Triton's n_spills) as Triton loaded "
            f"the kernel. Caps (ptxas' maxnreg): module = the generated module's own (255 for the float64 "
            f"kernels of coupled systems, else none), none, or the number.\n\n"
            + table(result["records"], bandwidth) + "\n")


def compare(before: dict, after: dict) -> str:
    """Two runs' results (``--compare``; the ``ab`` step of gpu_session.sh writes one before and one
    after) side by side: points per second, after / before, registers and local memory, for every
    (model, dtype, variant, cap, points) both timed; a kernel in one run only, or one that failed,
    is listed under the table with why."""
    def key(r):
        return r["model"], r["dtype"], r["variant"], str(r["cap"]), r["points"]

    old = {key(r): r for r in before["records"]}
    new = {key(r): r for r in after["records"]}
    lines = [f"{after.get('device', '?')}; before: {_label(before)}, after: {_label(after)}", "",
             "| model | dtype | variant | cap | points | before (points/s) | after (points/s) | after / before "
             "| registers | local memory (4-byte words) |", "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for k in [k for k in new if k in old] + [k for k in old if k not in new]:
        b, a = old.get(k), new.get(k)
        what = " ".join(str(x) for x in k)
        if a is None or b is None:
            notes.append(f"- {what}: only in the {'before' if a is None else 'after'} run")
        elif "error" in a or "error" in b:
            notes.append(f"- {what}: failed ({(a if 'error' in a else b)['error']})")
        else:
            lines.append(f"| {' | '.join(str(x) for x in k)} | {b['points_per_s']:.3g} | {a['points_per_s']:.3g} "
                         f"| {a['points_per_s'] / b['points_per_s']:.2f} | {b['n_regs']} -> {a['n_regs']} "
                         f"| {b['n_spills']} -> {a['n_spills']} |")
    notes += [f"- {' '.join(str(x) for x in k)}: only in the after run" for k in new if k not in old]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _label(result: dict) -> str:
    mods = {r.get("modules", "generated") for r in result["records"]}
    return ", ".join(sorted(mods)) or "no records"


def main(argv: list[str] | None = None) -> Path | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--modules", default=None, help="a folder of module files to time instead of generated/")
    ap.add_argument("--dtypes", nargs="+", default=["fp64", "fp32"], choices=list(DTYPES))
    ap.add_argument("--variants", nargs="+", default=["value", "tangent"], choices=["value", "tangent"])
    ap.add_argument("--caps", nargs="+", default=["module", "none", "128"],
                    help="register caps: module (the module's own), none, or a number (MODELC_TRITON_MAXNREG)")
    ap.add_argument("--sizes", nargs="+", type=int, default=[1_000_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5, help="calls queued between two CUDA events")
    ap.add_argument("--compile-only", action="store_true", help="launch each kernel once on 256 points")
    ap.add_argument("--out", default=None)
    ap.add_argument("--report", default=None, help="re-render the .md of a results .json (bytes recomputed)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), default=None,
                    help="two results .json side by side (markdown on stdout); needs no GPU")
    a = ap.parse_args(argv)
    if a.compare:
        runs = []
        for f in a.compare:
            try:
                runs.append(json.loads(Path(f).read_text()))
            except (OSError, ValueError) as e:
                sys.exit(f"benchmarks.gpu_library --compare: {f}: {e}")
            if not isinstance(runs[-1], dict) or "records" not in runs[-1]:
                sys.exit(f"benchmarks.gpu_library --compare: {f} holds no records (not a gpu_library result)")
        print(compare(*runs), end="")
        return None
    if a.report:
        path = Path(a.report)
        result = json.loads(path.read_text())
        for r in result["records"]:
            if "error" not in r:
                mods = None if r["modules"] == "generated" else r["modules"]
                r["bytes_per_point"] = moved_bytes(load(r["model"], mods), r["model"], r["variant"], r["dtype"], mods)
                r["bytes_per_s"] = r["points_per_s"] * r["bytes_per_point"]
        path.write_text(json.dumps(result, indent=1))
        path.with_suffix(".md").write_text(render(result, a.calls, a.repeats))
        return path.with_suffix(".md")
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks.gpu_library needs a CUDA GPU (see benchmarks.gpu_kernels for the GPU-less report)")
    if a.compile_only:
        for model in a.models:
            mod = load(model, a.modules)
            for dt in a.dtypes:
                for variant in a.variants:
                    for cap in effective_caps(mod, dt, a.caps, variant):
                        _set_cap(cap)
                        m = mod.Model(dtype=DTYPES[dt], device=DEVICE, backend="triton")
                        t0 = time.perf_counter()
                        m(inputs(m, 256, DTYPES[dt], DEVICE), derivatives="tangent" if variant == "tangent" else False)
                        _sync()
                        print(f"compiled {model} {dt} {variant} cap={cap}: {time.perf_counter() - t0:.1f} s", flush=True)
        return None
    bandwidth = copy_bandwidth(torch.device(DEVICE), 1 << 30)
    records: list[dict] = []
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = torch.cuda.get_device_name(0)
    out_dir = Path(a.out) if a.out else RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / f"{stamp}-cuda-gpu-library{'-' + a.tag if a.tag else ''}"

    def write() -> None:
        result = {"device": name, "torch": torch.__version__, "triton": __import__("triton").__version__,
                  "copy_bandwidth_bytes_per_s": bandwidth, "records": records, "argv": sys.argv[1:]}
        base.with_suffix(".json").write_text(json.dumps(result, indent=1))
        base.with_suffix(".md").write_text(render(result, a.calls, a.repeats))

    for model in a.models:
        mod = load(model, a.modules)
        for dt in a.dtypes:
            for variant in a.variants:
                for cap in effective_caps(mod, dt, a.caps, variant):
                    for size in a.sizes:
                        try:
                            rec = measure(mod, model, dt, variant, cap, size, a.repeats, a.calls, a.modules)
                        except KeyboardInterrupt:
                            write()
                            raise
                        except Exception as e:  # recorded, not fatal: the other kernels still run
                            rec = {"model": model, "dtype": dt, "variant": variant, "cap": cap, "points": size,
                                   "modules": a.modules or "generated", "error": f"{type(e).__name__}: {e}"}
                        records.append(rec)
                        print(json.dumps(rec), flush=True)
                        write()
    print(base.with_suffix(".md"))
    return base.with_suffix(".md")


if __name__ == "__main__":
    main()
