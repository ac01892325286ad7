"""chaboche2_coupled (19 unknowns: Voce, two Armstrong-Frederick back stresses, Perzyna) against NEML2's
own chaboche model (NEML2 3.1.0, the input file of tests/reference/neml2/make_chaboche2_coupled.py), one
step with the consistent tangent d stress / d strain, same inputs, same machine.

``benchmarks.run`` times the five models that have hand-written baselines; this is the large coupled
system, the path users' own implicit models take, against the peer library on its own model.

    python -m benchmarks.chaboche --sizes 1000 10000 100000       # CPU, 1 thread; NEML2 in .neml2-venv
    python -m benchmarks.chaboche --device cuda --sizes 100000 1000000 --neml2-python python3

The one-step problems are the 800 steps of the committed NEML2 reference history (8 points x 100
steps of uniaxial strain at four amplitudes and four rates, each from NEML2's converged state of the
step before), tiled to the batch size. Each route's stress and tangent are checked against that
history (NEML2's own results: the stress of the step's row, the tangent where the history recorded it)
before it is timed, so both libraries are held to the same oracle. Times: best of ``--repeats`` calls
(after one warm-up), each route on the same inputs. modelc: the C backend on the CPU, Triton on a
GPU, as a plain call and as a bound call (``model.bind``: what a finite-element code calls every step);
NEML2: its Python-native model (``eager``); ``--neml2-routes eager compile aoti`` adds
``neml2.compile`` (torch.compile of its residual) and ``neml2-compile`` (an AOTInductor library with
the derivative graph, NEML2's fastest CPU route for the other models; benchmarks/neml2_runner.py).

Writes ``benchmarks/results/<UTC stamp>-<device>-chaboche2-vs-neml2[-tag].{json,md}``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from benchmarks.run import Timer, machine_info  # noqa: E402

REF = REPO / "tests" / "reference" / "neml2" / "chaboche2_coupled__uniaxial.npz"
RESULTS = REPO / "benchmarks" / "results"
MODEL = "chaboche2_coupled"
#: our state variable -> NEML2's (its old value is "<name>~1") and the reference array
STATE = {"state/internal/Ep": "plastic_strain", "state/internal/ep": "equivalent_plastic_strain",
         "state/internal/X1": "back_stress_1", "state/internal/X2": "back_stress_2"}


def reference() -> dict[str, np.ndarray]:
    with np.load(REF) as z:
        return {k: z[k] for k in z.files}


def params() -> dict[str, float]:
    return {k: float(v) for k, v in json.loads(str(reference()["params_json"])).items()}


def pool() -> dict[str, np.ndarray]:
    """Every step of the reference history as a one-step problem, step-major: strain, time, the old
    time and NEML2's old state; ``expect/stress``: NEML2's stress of that step; ``expect/tangent``
    (NaN where the history recorded none)."""
    ref = reference()
    rows, points = ref["time"].shape
    S, P = np.meshgrid(np.arange(1, rows), np.arange(points), indexing="ij")
    S, P = S.ravel(), P.ravel()
    out = {"strain": ref["strain"][S, P], "t": ref["time"][S, P], "t~1": ref["time"][S - 1, P]}
    for name in STATE.values():
        out[name + "~1"] = ref[name][S - 1, P]
    out["expect/stress"] = ref["stress"][S, P]
    tangent = np.full((len(S), 6, 6), np.nan)
    for k, step in enumerate(ref["tangent_steps"]):
        tangent[S == step] = ref["tangent"][k][P[S == step]]
    out["expect/tangent"] = tangent
    return out


def tile(p: dict[str, np.ndarray], size: int, dtype: torch.dtype, device: str) -> dict[str, torch.Tensor]:
    n = len(p["t"])
    idx = np.arange(size) % n
    return {k: torch.as_tensor(np.ascontiguousarray(v[idx]), dtype=dtype if not k.startswith("expect/")
                               else torch.float64, device=device) for k, v in p.items()}


def inputs(b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """chaboche2_coupled's inputs from a :func:`tile` of the pool."""
    x = {"forces/E": b["strain"], "forces/t": b["t"], "old_forces/t": b["t~1"]}
    return x | {"old_" + ours: b[theirs + "~1"] for ours, theirs in STATE.items()}


def errors(stress: torch.Tensor, tangent: torch.Tensor, b: dict[str, torch.Tensor]) -> dict[str, float]:
    """Largest relative differences from NEML2's history (the stress per point against the largest
    stress; the tangent where the history has one, against its largest entry)."""
    es = b["expect/stress"]
    s = float(((stress.double().cpu() - es.cpu()).abs().max() / es.abs().max()).item())
    et = b["expect/tangent"].cpu()
    have = ~torch.isnan(et[:, 0, 0])
    t = float(((tangent.double().cpu()[have] - et[have]).abs().max() / et[have].abs().max()).item())
    return {"stress": s, "tangent": t, "tangents_checked": int(have.sum())}


def best_of(fn, repeats: int, device: str, max_seconds: float) -> float:
    """Best time of ``fn`` over ``repeats`` calls after a warm-up (fewer once ``max_seconds`` are spent)."""
    timer = Timer(torch.device(device))
    timer(fn)  # warm-up
    best, spent = float("inf"), 0.0
    for _ in range(repeats):
        dt = timer(fn)
        best, spent = min(best, dt), spent + dt
        if spent > max_seconds:
            break
    return best


# ----------------------------------------------------------------------------------------- modelc

def modelc_records(sizes, dtype, device, repeats, max_seconds) -> list[dict]:
    from modelc.generated import chaboche2_coupled  # (the library's committed module: CI checks it is current)

    backend = "triton" if device.startswith("cuda") else "c"
    Model = chaboche2_coupled.Model
    m = Model(dtype=dtype, device=device, backend=backend, **params())
    p, out = pool(), []
    for size in sizes:
        b = tile(p, size, dtype, device)
        x = inputs(b)
        r = m(x, derivatives="tangent")
        rec = {"impl": f"modelc-{backend}", "size": size,
               **errors(r["state/S"], r.jacobian["state/S", "forces/E"], b),
               "converged": float(r.status.converged.float().mean()),
               "mean_iterations": float(r.status.iterations.float().mean())}
        rec["call_s"] = best_of(lambda: m(x, derivatives="tangent"), repeats, device, max_seconds)
        bound = m.bind(x, derivatives="tangent")
        rec["bound_s"] = best_of(bound, repeats, device, max_seconds)
        out.append(rec)
        print(json.dumps(rec), file=sys.stderr, flush=True)
    return out


# ------------------------------------------------------------------------------ NEML2 (its venv)

def neml2_worker(a: argparse.Namespace) -> None:
    """Inside the NEML2 venv: time its chaboche model; one JSON document on stdout."""
    sys.path.insert(0, str(REF.parent))
    from make_chaboche2_coupled import TOL, hit_input  # noqa: E402 (NEML2's input file, as in the reference)

    from benchmarks.neml2_runner import AotiRoute, EagerRoute

    import neml2

    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"neml2_chaboche_{os.getpid()}.i"
    path.write_text(hit_input(params()))
    result = {"neml2": str(getattr(neml2, "__version__", "?")).lstrip("v"), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "tolerance": TOL, "records": []}
    p = pool()
    for route in a.neml2_routes:
        t0 = time.perf_counter()
        try:
            fn = (AotiRoute(str(path), dtype, path.with_suffix(".aoti"), device=a.device) if route == "aoti"
                  else EagerRoute(str(path), dtype, compiled=(route == "compile"), device=a.device))
        except Exception as e:  # a route that does not build here is reported
            result["records"].append({"impl": f"neml2-{route}", "error": f"{type(e).__name__}: {e}"[:1000]})
            continue
        result.setdefault("build_s", {})[route] = time.perf_counter() - t0  # (aoti: neml2-compile's build)
        for size in a.sizes:
            b = tile(p, size, dtype, a.device)
            x = {k: b[k] for k in fn.input_names}
            rec = {"impl": f"neml2-{route}", "size": size}
            try:
                got = fn(x, True)
                rec |= errors(got["stress"], got["tangent"], b)
                rec["call_s"] = best_of(lambda: fn(x, True), a.repeats, a.device, a.max_seconds)
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {e}"[:1000]
            result["records"].append(rec)
            print(json.dumps(rec), file=sys.stderr, flush=True)
    path.unlink(missing_ok=True)
    print(json.dumps(result))


def run_neml2(a: argparse.Namespace) -> dict:
    cmd = [a.neml2_python, "-m", "benchmarks.chaboche", "--neml2-worker", "--device", a.device, "--dtype", a.dtype,
           "--threads", str(a.threads), "--repeats", str(a.repeats), "--max-seconds", str(a.max_seconds),
           "--sizes", *map(str, a.sizes), "--neml2-routes", *a.neml2_routes]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": str(a.threads),
                               "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))})
    sys.stderr.write(proc.stderr[-4000:])
    if proc.returncode != 0:
        return {"error": f"the NEML2 worker failed (rc {proc.returncode}): {proc.stderr[-1500:]}", "records": []}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(records: list[dict]) -> str:
    lines = ["| points | route | time per call (ms) | points/s | time / modelc's bound call | max rel. diff. from "
             "NEML2's history (stress / tangent) |", "|---|---|---|---|---|---|"]
    for size in sorted({r["size"] for r in records if "size" in r}):
        mine = next((r for r in records if r.get("size") == size and r["impl"].startswith("modelc")), None)
        rows = []
        for r in records:
            if r.get("size") != size:
                continue
            if "error" in r:
                lines.append(f"| {size:.0e} | {r['impl']} | {r['error'][:60]} | | | |")
                continue
            if r["impl"].startswith("modelc"):
                rows += [(f"{r['impl']} (bound)", r["bound_s"], r), (r["impl"], r["call_s"], r)]
            else:
                rows.append((r["impl"], r["call_s"], r))
        for name, t, r in rows:
            ratio = f"{t / mine['bound_s']:.1f}x" if mine else ""
            lines.append(f"| {size:.0e} | {name} | {t * 1e3:.3g} | {size / t:.3g} | {ratio} | "
                         f"{r['stress']:.1e} / {r['tangent']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64", choices=["float64"])
    ap.add_argument("--threads", type=int, default=1, help="torch and OpenMP threads, both libraries")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=20.0, help="stop repeating a configuration after this")
    ap.add_argument("--neml2-python", default=str(REPO / ".neml2-venv" / "bin" / "python"))
    ap.add_argument("--neml2-routes", nargs="+", default=["eager"], choices=["eager", "compile", "aoti"])
    ap.add_argument("--neml2-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    if a.neml2_worker:
        neml2_worker(a)
        return None
    torch.set_num_threads(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # the C kernel's OpenMP, read when it is loaded
    dtype = getattr(torch, a.dtype)
    records = modelc_records(a.sizes, dtype, a.device, a.repeats, a.max_seconds)
    neml2 = run_neml2(a) if Path(a.neml2_python).exists() or "/" not in a.neml2_python else \
        {"error": f"no NEML2 Python at {a.neml2_python} (bash benchmarks/setup_neml2.sh)", "records": []}
    records += neml2.get("records", [])

    info = machine_info(torch.device(a.device))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = Path(a.out) / f"{stamp}-{torch.device(a.device).type}-chaboche2-vs-neml2{'-' + a.tag if a.tag else ''}"
    base.parent.mkdir(parents=True, exist_ok=True)
    result = {"machine": info, "threads": a.threads, "dtype": a.dtype, "neml2": {k: v for k, v in neml2.items()
                                                                              if k != "records"},
              "records": records, "argv": sys.argv[1:]}
    base.with_suffix(".json").write_text(json.dumps(result, indent=1))
    where = info.get("gpu") or info["cpu"]
    md = (f"# chaboche2_coupled against NEML2's chaboche, one step with the tangent\n\n{where}, torch "
          f"{info['torch']}; "
          f"{a.dtype}, {a.threads} thread(s); NEML2 {neml2.get('neml2', '?')} (torch {neml2.get('torch', '?')}, "
          f"its Newton at abs = rel = {neml2.get('tolerance', '?')}). Best of {a.repeats} calls after a warm-up. "
          f"Inputs: the 800 one-step problems of the NEML2 reference history, tiled. Both routes are checked "
          f"against that history first (last column).\n\n" + table(records) + "\n"
          + (f"\nNEML2: {neml2['error']}\n" if "error" in neml2 else ""))
    base.with_suffix(".md").write_text(md)
    print(base.with_suffix(".md"))
    return base.with_suffix(".md")


if __name__ == "__main__":
    main()
