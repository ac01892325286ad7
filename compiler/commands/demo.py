"""`modelc demo`: compile a bundled library model, run it through the bundled uniaxial history, and
show what it does (a table per material point, the results file and a stress-strain plot).

The history is the NEML2 reference batch (spec/histories/uniaxial.npz): 8 points, 100 steps of
uniaxial strain 0 -> +A -> -A -> 0, four amplitudes at one rate and one amplitude at four rates.
"""
from __future__ import annotations

import argparse
import re
import time as _time
import warnings
from pathlib import Path

from modelc.commands.run import BACKEND_HELP, BACKENDS
from modelc.errors import InputError, ModelcError

DEFAULT_MODEL = "j2_linear_iso"
TANGENT_STEPS = [2, 20, 27, 45, 74, 80, 100]  # the steps where the NEML2 reference files record them
SHOW_TANGENT_AT, SHOW_POINT = 20, 3  # loading, plastic for every library model at A = 0.02


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME",
                   help=f"a model of the bundled library (default: {DEFAULT_MODEL})")
    p.add_argument("--out", default="modelc-demo", metavar="DIR",
                   help="where to write results.npz and stress_strain.png (default: ./modelc-demo)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help=BACKEND_HELP)
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    from modelc.commands.run import _torch_dtype, check_device, load_model, results_table
    from modelc.runtime.driver import NonConvergenceWarning, plot_results, run_history, save_results
    from modelc.runtime.histories import bundled_history
    from modelc.runtime.outputs import check_output_folder

    spec = bundled_spec(args.model)
    history = bundled_history("uniaxial")
    device = check_device(args.device)
    out_dir = check_output_folder(args.out, "--out")

    start = _time.perf_counter()
    model = load_model(str(spec), args.model, dtype=args.dtype, device=device, backend=args.backend)
    compiled = _time.perf_counter() - start
    with warnings.catch_warnings():  # the summary below says it
        warnings.simplefilter("ignore", NonConvergenceWarning)
        results = run_history(model, history, dtype=_torch_dtype(args.dtype), device=device,
                              tangent_steps=TANGENT_STEPS, progress=not args.no_progress)
    ran = _time.perf_counter() - start - compiled

    npz = save_results(results, out_dir / "results.npz")
    try:
        png = plot_results(results, out_dir / "stress_strain.png",
                           title=f"{args.model}: uniaxial strain, 8 points")
    except InputError as exc:  # no matplotlib: the table and the results still matter
        png = f"(none: {exc})"
    conv = results["converged"][1:]
    print(f"modelc demo: {args.model} ({spec.name}), {args.dtype} on {device}")
    print(f"  compiled/loaded in {compiled:.2f} s; {history.steps - 1} steps x {history.batch} points "
          f"in {ran:.2f} s")
    print(f"  history: uniaxial strain 0 -> +A -> -A -> 0 ({Path(history.source).name})\n")
    print(results_table(results))
    print(f"\n{int(conv.sum())} of {conv.size} point-steps converged; {results.summary()}")
    k = TANGENT_STEPS.index(SHOW_TANGENT_AT)
    row = results["tangent"][k, SHOW_POINT, 0] + 0.0  # (+ 0.0: no "-0")
    print(f"consistent tangent d stress / d strain, point {SHOW_POINT} at step {SHOW_TANGENT_AT} "
          f"(first row): [{', '.join(f'{x:.6g}' for x in row)}]")
    print(f"\nresults: {npz}\nplot:    {png}")
    return 0 if results.ok else 1


def spec_dir() -> Path:
    from modelc.runtime.histories import _spec_dir

    return _spec_dir()


def bundled_spec(name: str) -> Path:
    """The bundled spec file that defines model ``name``: ``<name>.yaml``, else ``library.yaml`` or
    another bundled YAML file that declares ``name:`` as an (indented) key."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise InputError(f"--model {name!r}: not a model name")
    root = spec_dir()
    files = sorted(root.rglob("*.yaml")) + sorted(root.rglob("*.yml")) if root.is_dir() else []
    direct = [f for f in files if f.stem == name]
    if direct:
        return direct[0]
    key = re.compile(rf"^\s+['\"]?{re.escape(name)}['\"]?\s*:\s*$", re.M)  # a model's key
    files.sort(key=lambda f: f.stem != "library")  # the library's compositions first
    found = [f for f in files if key.search(f.read_text(encoding="utf-8", errors="replace"))]
    if len(found) >= 1:
        return found[0]
    if not files:
        raise ModelcError(f"modelc demo: the bundled model library ({root}) holds no spec files; "
                          f"this installation of modelc is incomplete")
    raise InputError(f"--model {name!r}: no bundled spec defines it; bundled spec files: "
                     f"{', '.join(f.stem for f in files)}")
