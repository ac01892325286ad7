"""What a call costs besides its kernel: a compiled model's regular call, the call and the reads of its
stress and tangent by name (``read``), the call with ``out=``, the bound call (``model.bind``) and the
kernel alone, on the same inputs, per call.

On the CPU the C backend (1 thread); on a GPU the Triton backend, where each figure is the time per
call of N calls issued back to back and then waited for (so a route that synchronises, or spends
longer on the host than the GPU spends on the kernel, shows it). Best of ``--rounds`` rounds, routes
interleaved.

    python -m benchmarks.call_overhead                      # CPU, 1e3 points, two models
    python -m benchmarks.call_overhead --device cuda --sizes 1000 1000000
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import time
from pathlib import Path
from typing import Callable

import torch

from benchmarks import baselines as bl
from benchmarks import modelc_hook
from benchmarks import workload as wl

RESULTS = Path(__file__).resolve().parent / "results"
ROUTES = ("call", "read", "out", "bound", "kernel")


def routes(model: str, size: int, device: torch.device) -> dict[str, Callable[[], object]]:
    """The four routes of one model and size, each a callable doing one call (tangent variant) and
    returning the outputs and Jacobian it wrote (a flat ``(B, ny)`` and ``(B, rows, cols)``)."""
    from modelc.runtime import callpath
    from modelc.runtime.cbuild import pack_args

    backend = "c" if device.type == "cpu" else "triton"
    m = modelc_hook.modelc_step(model, backend, torch.float64, device).model
    x = modelc_hook.named_inputs(m, model, wl.args_of(model, wl.batch(wl.pool(model), size, torch.float64, device)))
    kind = "tangent" if m.TANGENT else True
    variant = "tangent" if m.TANGENT else "jacobian"
    res = m(x, derivatives=kind)
    bound = m.bind(x, kind)
    views, bs = callpath.input_views(m, x)
    P, shared = m._param_tensor({}, bs)
    buf = callpath.allocate(m, size, m._jacobian_shape(variant))
    if backend == "c":
        lib = m._c_library(P)
        args = pack_args(views, P, buf.Y, buf.J, buf.status, m._solver_triple())

        def kernel():
            lib.run(variant, size, args, 1)
            return buf.Y, buf.J
    else:
        def kernel():
            m._launch_into(views, P, buf.Y, buf.J, buf.status, variant, shared, {})
            return buf.Y, buf.J

    def tensors(r):
        return r.outputs.tensor, r.jacobian.tensor

    rows, cols = m.TANGENT if m.TANGENT else (m.output_axis.variable_names, m.input_axis.variable_names)

    def read():  # the call and what a user then reads: the first tangent row's output and its block
        r = m(x, derivatives=kind)
        return r[rows[0]], r.jacobian[rows[0], cols[0]]

    fns = {"call": lambda: tensors(m(x, derivatives=kind)), "read": read,
           "out": lambda: tensors(m(x, derivatives=kind, out=res)),
           "bound": lambda: tensors(bound()), "kernel": kernel}
    fns["bound"].fast = bound.fast
    return fns


def measure(model: str, size: int, device: torch.device, calls: int, rounds: int) -> dict:
    """Microseconds per call of every route (best round), and the bound call's ``fast`` flag."""
    fns = routes(model, size, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for fn in fns.values():  # warm: compiled, cached, paged in
        for _ in range(3):
            fn()
    sync()
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            best[k] = min(best[k], (time.perf_counter() - t0) / calls * 1e6)
    return {"model": model, "size": size, "device": str(device), "us_per_call": best,
            "outside_kernel_us": best["call"] - best["kernel"], "bound_fast": bool(fns["bound"].fast)}


def table(records: list[dict]) -> str:
    head = "| model | size | " + " | ".join(f"{r} (us)" for r in ROUTES) + " | call minus kernel (us) |\n"
    head += "|---|---|" + "---|" * (len(ROUTES) + 1) + "\n"
    return head + "".join(
        f"| {r['model']} | {r['size']} | " + " | ".join(f"{r['us_per_call'][k]:.1f}" for k in ROUTES)
        + f" | {r['outside_kernel_us']:.1f} |\n" for r in records)


def main(argv: list[str] | None = None) -> Path:
    from benchmarks.run import machine_info

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["j2_linear_iso", "j2_voce_af"], choices=bl.MODELS)
    ap.add_argument("--sizes", nargs="+", type=int, default=[1000])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calls", type=int, default=200, help="calls per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    records = []
    for model in a.models:
        for size in a.sizes:
            rec = measure(model, size, device, a.calls, a.rounds)
            records.append(rec)
            print(f"{model:14s} B={size:<8d} " + "  ".join(f"{k} {v:.1f} us" for k, v in rec["us_per_call"].items()),
                  flush=True)
    info = machine_info(device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{device.type}-call-overhead"
    stem += f"-{a.tag}" if a.tag else ""
    path = out / f"{stem}.json"
    path.write_text(json.dumps({"machine": info, "settings": vars(a), "records": records}, indent=1))
    md = table(records)
    (out / f"{stem}.md").write_text(f"{info['cpu']} ({info['cores']} cores), {info.get('gpu', 'no GPU')}, "
                                    f"torch {info['torch']}; float64, tangent; "
                                    f"{'1 thread, C backend' if device.type == 'cpu' else 'Triton backend'}\n\n{md}")
    print(md)
    print(f"results: {path}")
    return path


if __name__ == "__main__":
    main()
