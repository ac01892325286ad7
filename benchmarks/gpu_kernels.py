"""Registers, spills and GPU-compile time of the library's Triton kernels, for a GPU target, without a GPU.

Each kernel of the committed library modules (``generated/``: value, tangent and full-Jacobian
variants) is compiled by Triton for an NVIDIA target (default sm_90, the H100/H200) exactly as a
launch on that GPU would compile it (``BLOCK`` = 128, Triton's default 4 warps: one point per
thread), each in a child process with a fresh Triton cache and ``TRITON_DUMP_PTXAS_LOG=1``, so the
``ptxas -v`` report of the real build is read: registers per thread, spill stores/loads, stack frame.
Also recorded: the wall time of the compile (spec-independent, once per kernel and dtype, cached by
Triton afterwards) and the bytes one point moves through the kernel's buffers (X row read, Y, J and
status rows written; shared parameters are one row for the whole batch).

    python -m benchmarks.gpu_kernels                       # all models, fp64 + fp32, sm_90
    python -m benchmarks.gpu_kernels --models j2_linear_iso --dtypes fp64 --arch 90
    python -m benchmarks.gpu_kernels --maxnreg 128 --tag cap128   # under ptxas' register cap

Writes ``benchmarks/results/<UTC stamp>-sm<arch>-kernels.{json,md}``. On a GPU, ``benchmarks.run``
measures what these kernels achieve; this report is what can be known before running them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
#: every module of the committed library (generated/: one per `compose` model of spec/library.yaml)
MODELS = sorted(p.stem for p in (REPO / "generated").glob("*.py") if p.stem != "__init__")
VARIANTS = ["value", "tangent", "jacobian"]

CHILD = r'''
import importlib, json, sys, time
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from modelc.backends.triton_backend import aot_attrs, aot_signature

model, variant, dt, arch, block, maxnreg = (sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                                            sys.argv[6])
if len(sys.argv) > 7:  # a module file from --modules
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"gk_{model}", sys.argv[7])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
else:
    mod = importlib.import_module(f"modelc.generated.{model}")
kernel = getattr(mod, "_kernel", None)
if kernel is None or variant not in mod.Model.VARIANTS:
    print(json.dumps({"missing": True}))
    sys.exit(0)
# the register cap: as a launch asks for it (the module's Model.TRITON_MAXNREG_F64 for this variant in float64), none, or a number
from modelc.runtime.model import float64_register_cap
own = float64_register_cap(mod.Model, variant) if dt == "fp64" else None
maxnreg = {"module": own, "none": None}.get(maxnreg, maxnreg)
maxnreg = int(maxnreg) if maxnreg else 0
sig = aot_signature(kernel.arg_names, dt)
consts = dict(V=mod.Model.VARIANTS[variant], DTYPE=tl.float64 if dt == "fp64" else tl.float32,
              EPS=2.220446049250313e-16 if dt == "fp64" else 1.1920928955078125e-07, BLOCK=block,
              P_SHARED=True)
# pointers 16-byte aligned and `zero` divisible by 16, as a launch specialises them
attrs = aot_attrs(kernel.arg_names, sig)
t0 = time.perf_counter()
c = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs),
                   target=GPUTarget("cuda", arch, 32),
                   options={"maxnreg": maxnreg} if maxnreg else None)
cap = maxnreg or None
sys.stdout.flush()
print("\n" + json.dumps({"compile_s": time.perf_counter() - t0, "ptx_lines": c.asm["ptx"].count("\n"),
                         "cubin_bytes": len(c.asm["cubin"]), "num_warps": c.metadata.num_warps, "maxnreg": cap,
                         "shared_bytes": c.metadata.shared}))
'''

_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads_bytes": re.compile(r"(\d+) bytes spill loads"),
    "stack_frame_bytes": re.compile(r"(\d+) bytes stack frame"),
}


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def parse_ptxas(log: str, entry: str = "_kernel") -> dict[str, int]:
    """Numbers from a ``ptxas -v`` log, of the section of the entry function ``entry`` (the kernel;
    the first entry when none has that name, the whole log when it names no entry): a log may hold
    other functions after the kernel, whose lines must not be read as the kernel's. 0 when a line is
    absent (None for the registers)."""
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(log)]
    if starts:
        k = next((i for i, (_, name) in enumerate(starts) if name == entry), 0)
        log = log[starts[k][0]:starts[k + 1][0] if k + 1 < len(starts) else len(log)]
    out = {}
    for key, rx in _PTXAS.items():
        m = rx.findall(log)
        out[key] = int(m[0]) if m else (None if key == "registers" else 0)
    return out


def module_of(model: str, modules: str | None):
    """The generated module of ``model``: the committed one, or ``<modules>/<model>.py``."""
    import importlib
    import importlib.util

    if modules is None:
        return importlib.import_module(f"modelc.generated.{model}")
    spec = importlib.util.spec_from_file_location(f"gk_{model}", Path(modules) / f"{model}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bytes_per_point(model: str, variant: str, dtype: str, modules: str | None = None) -> int:
    """Bytes one point moves through the kernel's buffers: its X row in, Y, J and ST rows out."""
    from modelc.runtime.axis import LabeledAxis

    m = module_of(model, modules).Model

    def size(variables, names=None) -> int:
        return LabeledAxis.from_variables([(v.name, v.type) for v in variables
                                           if names is None or v.name in names]).size

    nx, ny = size(m.INPUTS), size(m.OUTPUTS)
    nj = {"value": 0, "jacobian": ny * nx}.get(variant)
    if nj is None:  # the declared tangent's rows x columns
        nj = size(m.OUTPUTS, m.TANGENT[0]) * size(m.INPUTS, m.TANGENT[1])
    return (nx + ny + nj + (3 if m.IMPLICIT else 0)) * (8 if dtype == "fp64" else 4)


def compile_one(model: str, variant: str, dtype: str, arch: int, block: int, modules: str | None = None,
                maxnreg: str = "module") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory(prefix="triton_cache_") as cache:
        env.update(TRITON_CACHE_DIR=cache, TRITON_DUMP_PTXAS_LOG="1")
        t0 = time.perf_counter()
        extra = [str(Path(modules) / f"{model}.py")] if modules else []
        proc = subprocess.run([sys.executable, "-c", CHILD, model, variant, dtype, str(arch), str(block), str(maxnreg),
                               *extra],
                              capture_output=True, text=True, env=env, timeout=1800)
        wall = time.perf_counter() - t0
    rec = {"model": model, "variant": variant, "dtype": dtype, "arch": f"sm_{arch}", "block": block,
           "maxnreg_setting": maxnreg}
    if proc.returncode != 0:
        rec["error"] = proc.stderr[-3000:]
        return rec
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    if last.get("missing"):
        rec["missing"] = True
        return rec
    rec.update(last)
    rec.update(parse_ptxas(proc.stdout))
    rec["child_wall_s"] = wall
    rec["bytes_per_point"] = bytes_per_point(model, variant, dtype, modules)
    return rec


def table(records: list[dict]) -> str:
    lines = ["| model | variant | dtype | registers/thread (cap) | spill stores / loads (bytes) | stack frame (bytes) "
             "| shared memory/block (bytes) | bytes/point | GPU compile (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r.get("missing"):
            continue
        if "error" in r:
            lines.append(f"| {r['model']} | {r['variant']} | {r['dtype']} | compile failed | | | | | |")
            continue
        cap = f" ({r['maxnreg']})" if r.get("maxnreg") else ""
        lines.append(f"| {r['model']} | {r['variant']} | {r['dtype']} | {r['registers']}{cap} | "
                     f"{r['spill_stores_bytes']} / {r['spill_loads_bytes']} | {r['stack_frame_bytes']} | "
                     f"{r.get('shared_bytes', '')} | {r['bytes_per_point']} | {r['compile_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    ap.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    ap.add_argument("--dtypes", nargs="+", default=["fp64", "fp32"], choices=["fp64", "fp32"])
    ap.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100/H200)")
    ap.add_argument("--block", type=int, default=128, help="points per program (the runtime's GPU default)")
    ap.add_argument("--modules", default=None, help="folder of generated modules (default: the committed "
                    "library, modelc.generated)")
    ap.add_argument("--maxnreg", default="module", help="cap on registers per thread (ptxas .maxnreg): "
                    "'module' (default: what a launch asks for, the module's Model.TRITON_MAXNREG_F64 in float64), 'none', or "
                    "16 to 255 (what $MODELC_TRITON_MAXNREG gives a launch)")
    ap.add_argument("--tag", default="", help="added to the result file name")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    if a.maxnreg not in ("module", "none") and not (a.maxnreg.isdigit() and 16 <= int(a.maxnreg) <= 255):
        ap.error(f"--maxnreg must be module, none or from 16 to 255, got {a.maxnreg}")
    import triton

    records = []
    jobs = [(m, v, d) for m in a.models for v in a.variants for d in a.dtypes]
    for i, (m, v, d) in enumerate(jobs, 1):
        rec = compile_one(m, v, d, a.arch, a.block, a.modules, a.maxnreg)
        records.append(rec)
        status = ("missing" if rec.get("missing") else "FAILED" if "error" in rec else
                  f"{rec['registers']} regs, spills {rec['spill_stores_bytes']}/{rec['spill_loads_bytes']} B, "
                  f"{rec['compile_s']:.1f} s")
        print(f"[{i}/{len(jobs)}] {m:<14} {v:<9} {d}: {status}", file=sys.stderr, flush=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"what": "ptxas -v of the library's Triton kernels, compiled for a GPU target without a GPU",
              "target": f"cuda sm_{a.arch}", "block": a.block, "maxnreg": a.maxnreg, "triton": triton.__version__,
              "python": sys.version.split()[0], "started": stamp, "records": records}
    cap = f", maxnreg {a.maxnreg}" if a.maxnreg != "module" else ", maxnreg as each module asks"
    md = (f"# Library kernels for sm_{a.arch} (Triton {triton.__version__}, BLOCK {a.block}{cap}), compiled without a GPU\n\n"
          + table(records) + "\n")
    return write_report(out / f"{stamp}-sm{a.arch}-kernels{'-' + a.tag if a.tag else ''}.json", result, md)


def write_report(path: Path, result: dict, md: str) -> Path:
    """``result`` as JSON at ``path`` and ``md`` beside it (``.md``), printed; returns ``path``."""
    path.write_text(json.dumps(result, indent=1))
    path.with_suffix(".md").write_text(md)
    print(md)
    return path


if __name__ == "__main__":
    main()
