"""`modelc demo`: compile a bundled library model, drive it through cyclic *uniaxial stress* loading,
and show what it does (a table per material point, the results file and a stress-strain plot with
its hysteresis loops).

The history (:func:`modelc.runtime.histories.uniaxial_stress_history`): 6 points, two cycles of the xx
strain 0 -> +A -> -A -> 0 (100 steps each) with the five other stress components held at zero (mixed
control: the driver solves for the lateral and shear strains), four amplitudes at one rate and one
amplitude at two more rates.
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
AMPLITUDES = (0.002, 0.004, 0.006, 0.008, 0.004, 0.004)  # xx strain
TOTAL_TIMES = (10.0, 10.0, 10.0, 10.0, 0.1, 1000.0)       # s per cycle
STEPS, CYCLES = 100, 2
TANGENT_STEPS = [2, 20, 27, 45, 74, 80, 100]
SHOW_TANGENT_AT, SHOW_POINT = 20, 3  # loading, plastic for every library model at A = 0.008


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
    from modelc.commands.run import _torch_dtype, check_device, load_model, results_table, stress_units
    from modelc.runtime.driver import NonConvergenceWarning, plot_results, run_history, save_results
    from modelc.runtime.histories import as_history, uniaxial_stress_history
    from modelc.runtime.outputs import check_output_folder

    spec = bundled_spec(args.model)
    history = as_history(uniaxial_stress_history(AMPLITUDES, TOTAL_TIMES, STEPS, cycles=CYCLES))
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
        png = plot_results(results, out_dir / "stress_strain.png", stress_units=stress_units(model),
                           title=f"{args.model}: cyclic uniaxial stress (xx strain prescribed, other stresses "
                                 f"zero), {history.batch} points")
    except InputError as exc:  # no matplotlib: the table and the results still matter
        png = f"(none: {exc})"
    conv = results["converged"][1:]
    print(f"modelc demo: {args.model} ({spec.name}), {args.dtype} on {device}")
    print(f"  compiled/loaded in {compiled:.2f} s; {history.steps - 1} steps x {history.batch} points "
          f"in {ran:.2f} s")
    print(f"  history: uniaxial stress, {CYCLES} cycles of xx strain 0 -> +A -> -A -> 0, the other "
          f"stresses held at zero (max |lateral stress| {abs(results['stress'][..., 1:]).max():.1e})\n")
    print(results_table(results))
    print(f"\n{int(conv.sum())} of {conv.size} point-steps converged; {results.summary()}")
    k = TANGENT_STEPS.index(SHOW_TANGENT_AT)
    row = results["tangent"][k, SHOW_POINT, 0] + 0.0  # (+ 0.0: no "-0")
    print(f"consistent tangent d stress / d strain, point {SHOW_POINT} at step {SHOW_TANGENT_AT} "
          f"(first row): [{', '.join(f'{x:.6g}' for x in row)}]")
    print(f"\nresults: {npz}\nplot:    {png}")
    return 0 if results.ok else 1


def spec_dir() -> Path:
    from modelc.bundled import spec_dir as _spec_dir

    return _spec_dir()


def bundled_spec(name: str) -> Path:
    """The bundled spec file that defines model ``name`` (see :mod:`modelc.bundled`)."""
    from modelc.bundled import bundled_spec as _find

    try:
        return _find(name).path
    except InputError as exc:
        raise InputError(f"--model: {exc}") from None
