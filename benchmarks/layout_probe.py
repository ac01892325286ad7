"""Issue 13's layout question, measured on the linear solve alone: one n x n system per point, solved by
two Triton layouts, compiled for a GPU target without a GPU (registers, spills, compile time) and, on a
CUDA device, timed.

- ``unrolled``: today's backend layout (modelc.passes.expand_solve, dense here): one point per thread,
  every matrix entry a scalar register value, the elimination unrolled entry by entry;
- ``tile``: ``P`` points per program, each point's matrix one ``[NP, NP]`` slice of a ``[P, NP, NP]``
  block (``NP``: n rounded up to a power of two) spread over the program's 128 threads; step ``k`` of
  the elimination extracts row and column ``k`` with masked reductions and updates the whole block at
  once (``tl.static_range``: n steps of a few block operations, not n^3/3 scalar statements).

Both are Gaussian elimination without pivoting on diagonally dominant systems (what a backward-Euler
Jacobian's static pivots are), checked against numpy under ``TRITON_INTERPRET=1`` by
tests/benchmarks/test_layout_probe.py. What the probe leaves out: building the matrix from the
residual's derivatives (per point scalar code that the tile layout would run on every thread of the
point's program) and sparsity (the backend skips structural zeros; dense is its worst case).

    python -m benchmarks.layout_probe                        # n = 6, 13, 19; fp64 and fp32; sm_90
    python -m benchmarks.layout_probe --sizes 19 --dtypes fp64 --points 1 2 4
    python -m benchmarks.layout_probe --time                 # on a GPU: points per second too

Writes ``benchmarks/results/<UTC stamp>-sm<arch>-layout-probe.{json,md}``.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

TILE = '''import triton
import triton.language as tl


@triton.jit
def solve(A_ptr, B_ptr, X_ptr, n_pts, N: tl.constexpr, NP: tl.constexpr, P: tl.constexpr):
    pts = tl.program_id(0) * P + tl.arange(0, P)
    ri = tl.arange(0, NP)
    pm = pts < n_pts
    r3 = ri[None, :, None]
    c3 = ri[None, None, :]
    A = tl.load(A_ptr + pts[:, None, None].to(tl.int64) * (N * N) + r3 * N + c3,
                mask=pm[:, None, None] & (r3 < N) & (c3 < N), other=0.0)
    A = tl.where((r3 == c3) & (r3 >= N), 1.0, A)  # the padding: identity rows, a regular system
    b = tl.load(B_ptr + pts[:, None].to(tl.int64) * N + ri[None, :], mask=pm[:, None] & (ri[None, :] < N),
                other=0.0)
    for k in tl.static_range(N):
        rowk = tl.sum(tl.where(r3 == k, A, 0.0), axis=1)
        piv = tl.sum(tl.where(ri[None, :] == k, rowk, 0.0), axis=1)
        colk = tl.sum(tl.where(c3 == k, A, 0.0), axis=2)
        f = tl.where(ri[None, :] > k, colk / piv[:, None], 0.0)
        A = A - f[:, :, None] * rowk[:, None, :]
        bk = tl.sum(tl.where(ri[None, :] == k, b, 0.0), axis=1)
        b = b - f * bk[:, None]
    x = tl.zeros([P, NP], dtype=A.dtype)
    for kk in tl.static_range(N):
        rowk = tl.sum(tl.where(r3 == N - 1 - kk, A, 0.0), axis=1)
        piv = tl.sum(tl.where(ri[None, :] == N - 1 - kk, rowk, 0.0), axis=1)
        s = tl.sum(tl.where(ri[None, :] > N - 1 - kk, rowk * x, 0.0), axis=1)
        bk = tl.sum(tl.where(ri[None, :] == N - 1 - kk, b, 0.0), axis=1)
        x = tl.where(ri[None, :] == N - 1 - kk, ((bk - s) / piv)[:, None], x)
    tl.store(X_ptr + pts[:, None].to(tl.int64) * N + ri[None, :], x, mask=pm[:, None] & (ri[None, :] < N))
'''


def unrolled_source(n: int) -> str:
    """One point per thread, the elimination written out entry by entry (as the backend prints it)."""
    lines = ["import triton", "import triton.language as tl", "", "", "@triton.jit",
             "def solve(A_ptr, B_ptr, X_ptr, n_pts, N: tl.constexpr, NP: tl.constexpr, P: tl.constexpr):",
             "    pts = tl.program_id(0) * P + tl.arange(0, P)", "    pm = pts < n_pts", "    row = pts.to(tl.int64)"]
    for i in range(n):
        for j in range(n):
            lines.append(f"    a{i}_{j} = tl.load(A_ptr + row * {n * n} + {i * n + j}, mask=pm, other=1.0)")
        lines.append(f"    b{i} = tl.load(B_ptr + row * {n} + {i}, mask=pm, other=0.0)")
    for k in range(n):
        lines.append(f"    r{k} = 1.0 / a{k}_{k}")
        for i in range(k + 1, n):
            lines.append(f"    f = a{i}_{k} * r{k}")
            lines += [f"    a{i}_{j} = a{i}_{j} - f * a{k}_{j}" for j in range(k + 1, n)]
            lines.append(f"    b{i} = b{i} - f * b{k}")
    for i in reversed(range(n)):
        terms = " - ".join([f"b{i}"] + [f"a{i}_{j} * x{j}" for j in range(i + 1, n)])
        lines += [f"    x{i} = ({terms}) * r{i}", f"    tl.store(X_ptr + row * {n} + {i}, x{i}, mask=pm)"]
    return "\n".join(lines) + "\n"


def padded(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


@functools.lru_cache(maxsize=None)
def kernel(layout: str, n: int):
    """The ``solve`` kernel of a layout (a module written to a temporary file: Triton reads the source),
    once per process and (layout, n)."""
    if layout not in ("tile", "unrolled"):
        raise ValueError(f"layout must be 'tile' or 'unrolled', got {layout!r}")
    folder = Path(tempfile.mkdtemp(prefix="modelc-layout-"))
    path = folder / f"probe_{layout}_{n}.py"
    path.write_text(TILE if layout == "tile" else unrolled_source(n))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.solve


def systems(n: int, points: int, dtype, device="cpu", seed: int = 0):
    """Diagonally dominant random systems (static pivots are safe) and their right-hand sides."""
    import torch

    g = torch.Generator().manual_seed(seed + n)
    A = torch.randn(points, n, n, generator=g, dtype=torch.float64) + n * torch.eye(n, dtype=torch.float64)
    b = torch.randn(points, n, generator=g, dtype=torch.float64)
    return A.to(dtype=dtype, device=device), b.to(dtype=dtype, device=device)


def run(layout: str, n: int, P: int, A, b, fn=None):
    """Solve every system of ``A`` (B, n, n), ``b`` (B, n) with the layout's kernel (``fn``, else
    built here): X (B, n)."""
    import torch

    X = torch.zeros_like(b)
    B = A.shape[0]
    (fn or kernel(layout, n))[((B + P - 1) // P,)](A, b, X, B, N=n, NP=padded(n), P=P)
    return X


CHILD = r'''
import json, sys, time
sys.path.insert(0, sys.argv[6])
from benchmarks.layout_probe import kernel, padded
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
layout, n, P, dt, arch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
sig = {"A_ptr": "*" + dt, "B_ptr": "*" + dt, "X_ptr": "*" + dt, "n_pts": "i32", "N": "constexpr", "NP": "constexpr",
       "P": "constexpr"}
t0 = time.perf_counter()
c = triton.compile(ASTSource(fn=kernel(layout, n), signature=sig, constexprs={"N": n, "NP": padded(n), "P": P}),
                   target=GPUTarget("cuda", arch, 32))
sys.stdout.flush()
print("\n" + json.dumps({"compile_s": time.perf_counter() - t0, "num_warps": c.metadata.num_warps}))
'''


def compile_one(layout: str, n: int, P: int, dtype: str, arch: int) -> dict:
    """ptxas' report of one kernel compiled in a child process with a fresh Triton cache."""
    from benchmarks.gpu_kernels import parse_ptxas

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    rec = {"layout": layout, "n": n, "points_per_program": P, "dtype": dtype, "arch": f"sm_{arch}"}
    with tempfile.TemporaryDirectory(prefix="triton_cache_") as cache:
        env.update(TRITON_CACHE_DIR=cache, TRITON_DUMP_PTXAS_LOG="1")
        proc = subprocess.run([sys.executable, "-c", CHILD, layout, str(n), str(P), dtype, str(arch), str(REPO)],
                              capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        rec["error"] = proc.stderr[-3000:]
        return rec
    rec.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    rec.update(parse_ptxas(proc.stdout + proc.stderr, "solve"))
    return rec


def time_one(layout: str, n: int, P: int, dtype: str, repeats: int = 20) -> float:
    """Points per second on the current CUDA device (median of ``repeats`` launches), on as many
    points as keep the matrices near 0.5 GB (2^20 at most); checked against the float64 solution
    first (a wrong kernel is never timed)."""
    import torch

    tdt = torch.float64 if dtype == "fp64" else torch.float32
    points = max(1 << 12, min(1 << 20, int(5e8 // (n * n * (8 if dtype == "fp64" else 4)))))
    A, b = systems(n, points, tdt, "cuda")
    fn = kernel(layout, n)
    X = run(layout, n, P, A, b, fn)
    want = torch.linalg.solve(A[:4096].double(), b[:4096].double())
    err = float((X[:4096].double() - want).abs().max() / want.abs().max())
    if err > (1e-12 if dtype == "fp64" else 1e-4):
        raise RuntimeError(f"layout {layout}, n={n}, P={P}, {dtype}: max relative error {err:.3g}")
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(layout, n, P, A, b, fn)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return points / sorted(times)[len(times) // 2]


def table(records: list[dict]) -> str:
    lines = ["| n | layout | points/program | dtype | registers/thread | spill stores / loads (bytes) | "
             "GPU compile (s) | points/s |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['n']} | {r['layout']} | {r['points_per_program']} | {r['dtype']} | compile failed | | | |")
            continue
        rate = f"{r['points_per_s']:.3g}" if r.get("points_per_s") else "-"
        lines.append(f"| {r['n']} | {r['layout']} | {r['points_per_program']} | {r['dtype']} | {r['registers']} | "
                     f"{r['spill_stores_bytes']} / {r['spill_loads_bytes']} | {r['compile_s']:.1f} | {rate} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[6, 13, 19], help="unknowns per point")
    ap.add_argument("--points", nargs="+", type=int, default=[1, 2, 4, 8], help="points per program (tile)")
    ap.add_argument("--dtypes", nargs="+", default=["fp64", "fp32"], choices=["fp64", "fp32"])
    ap.add_argument("--layouts", nargs="+", default=["unrolled", "tile"], choices=["unrolled", "tile"])
    ap.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100/H200)")
    ap.add_argument("--time", action="store_true", help="also time each kernel on the CUDA device")
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    bad = [n for n in a.sizes if not 1 <= n <= 64] + [p for p in a.points if p < 1 or p & (p - 1)]
    if bad:
        ap.error(f"sizes must be 1..64 and points per program powers of two, got {bad}")
    import triton

    if a.time:
        import torch

        if not torch.cuda.is_available():
            ap.error("--time needs a CUDA device (without it, the report has registers and compile times only)")
    jobs = [(lay, n, P, d) for n in a.sizes for d in a.dtypes for lay in a.layouts
            for P in ([128] if lay == "unrolled" else a.points)]
    records = []
    for i, (lay, n, P, d) in enumerate(jobs, 1):
        rec = compile_one(lay, n, P, d, a.arch)
        if a.time and "error" not in rec:
            rec["points_per_s"] = time_one(lay, n, P, d)
        records.append(rec)
        status = "FAILED" if "error" in rec else (f"{rec['registers']} regs, spills {rec['spill_stores_bytes']}/"
                                                  f"{rec['spill_loads_bytes']} B, {rec['compile_s']:.1f} s")
        print(f"[{i}/{len(jobs)}] n={n:<3} {lay:<9} P={P:<4} {d}: {status}", file=sys.stderr, flush=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from benchmarks.gpu_kernels import write_report

    result = {"what": "one dense n x n solve per point, two Triton layouts (benchmarks/layout_probe.py)",
              "target": f"cuda sm_{a.arch}", "triton": triton.__version__, "started": stamp,
              "host": f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
              "records": records}
    md = (f"# One dense n x n solve per point, two Triton layouts, sm_{a.arch} (Triton {triton.__version__})\n\n"
          + table(records) + "\n")
    return write_report(out / f"{stamp}-sm{a.arch}-layout-probe{'-' + a.tag if a.tag else ''}.json", result, md)


if __name__ == "__main__":
    main()
