"""`modelc run SPEC --history H.npz --out R.npz`: drive a model through a strain-controlled history.

H.npz holds ``time`` (steps, batch) and ``strain`` (steps, batch, 6, Mandel), row 0 being the
unstressed initial state (zero strain). R.npz receives ``stress`` (steps, batch, 6), every state
variable by name, ``converged`` and ``iterations`` (steps, batch), and the consistent tangent at
``--tangent-steps``. Exit status: 0 when every point converged, 1 when some did not (their results are
NaN and written anyway; the summary names them), 2 for bad input.
"""
from __future__ import annotations

import argparse
import time as _time
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from modelc.errors import InputError, ModelcError

DTYPES = ("float64", "float32")
BACKENDS = ("auto", "c", "torch", "triton")
BACKEND_HELP = ("code path (default auto: triton on cuda; on the cpu the C backend when a C compiler "
                "builds it, else torch)")


def solver_options(args) -> dict:
    """The Newton options given on the command line (``--rtol``, ``--atol``, ``--max-iter``)."""
    return {k: v for k, v in (("rtol", args.rtol), ("atol", args.atol), ("max_iter", args.max_iter))
            if v is not None}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = ("exit status: 0 when every point converged; 1 when some did not (their results are "
                "NaN, written anyway, and named in the summary); 2 for bad input")
    p.add_argument("spec", metavar="SPEC", help="the spec file (YAML), or the name of a bundled model")
    p.add_argument("--history", required=True, metavar="H.npz",
                   help="strain history: 'time' (steps, batch) and 'strain' (steps, batch, 6)")
    p.add_argument("--out", required=True, metavar="R.npz",
                   help="where to write the results (a directory with --distributed)")
    p.add_argument("--model", metavar="NAME", help="which model of the spec (when it holds several)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                   help="override a parameter: one number, or one per point separated by commas "
                        "(repeatable)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help=BACKEND_HELP)
    p.add_argument("--dtype", choices=DTYPES, default="float64")
    p.add_argument("--device", default=None,
                   help="cpu or cuda[:N] (default: cpu; with --distributed cuda:LOCAL_RANK when CUDA is there)")
    p.add_argument("--tangent-steps", metavar="N,N,...",
                   help="record the consistent tangent d stress / d strain at these steps")
    p.add_argument("--sensitivities", metavar="P,P,...",
                   help="also write d(output)/d(P) at every step for these scalar parameters (exact, "
                        "carried through the steps with each step's derivatives; one more pass)")
    p.add_argument("--plot", metavar="FILE.png", help="draw stress-strain curves to this PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the run summary as one JSON document")
    p.add_argument("--on-failure", choices=("nan", "substep"), default=None,
                   help="a point whose Newton solve fails: mark it and return NaN (default), or cut "
                        "its step into sub-steps and retry (adaptive sub-stepping)")
    p.add_argument("--rtol", type=float, default=None, help="Newton relative tolerance (default: the spec's)")
    p.add_argument("--atol", type=float, default=None, help="Newton absolute tolerance (default: the spec's)")
    p.add_argument("--max-iter", type=int, default=None, help="Newton iteration limit (default: the spec's)")
    from modelc.commands.run_distributed import add_distributed_arguments  # --distributed and co.

    add_distributed_arguments(p)


def main(args: argparse.Namespace) -> int:
    from modelc.runtime.driver import NonConvergenceWarning, plot_results, run_history, save_results
    from modelc.runtime.histories import load_history
    from modelc.runtime.outputs import check_output_file

    from modelc.commands.run_distributed import main_distributed, check_single

    if args.distributed:
        return main_distributed(args)
    check_single(args)
    params = parse_sets(args.sets)
    tangent_steps = parse_steps(args.tangent_steps)
    # before the work: a run is never lost to its output path (NumPy would write an .npz under any name)
    check_output_file(args.out, "--out", (".npz",), "results are written as NumPy .npz: name the file R.npz")
    if args.plot:
        check_output_file(args.plot, "--plot", (".png", ".svg", ".pdf"), "expected a .png (or .svg, .pdf) file name")
    history = load_history(args.history)
    device = check_device(args.device or "cpu")
    model = load_model(args.spec, args.model, dtype=args.dtype, device=device, backend=args.backend,
                       on_failure=args.on_failure)
    dtype = _torch_dtype(args.dtype)
    if args.sensitivities:  # before the work: a bad name costs nothing
        check_sensitivities(model, args.sensitivities)

    start = _time.perf_counter()
    with warnings.catch_warnings():  # the summary below says it
        warnings.simplefilter("ignore", NonConvergenceWarning)
        results = run_history(model, history, params=params, dtype=dtype, device=device,
                              tangent_steps=tangent_steps, progress=not args.no_progress,
                              solver=solver_options(args))
    if args.sensitivities:
        results.update(sensitivities(model, history, params, args.sensitivities))
    elapsed = _time.perf_counter() - start
    out = save_results(results, args.out)
    name = args.model or getattr(model, "NAME", "") or Path(args.spec).stem
    png = None
    if args.plot:
        png = plot_results(results, args.plot, title=f"{name}: {Path(history.source).name}",
                           stress_units=stress_units(model))
    if getattr(args, "json", False):
        import json

        print(json.dumps(summary_json(results, name=name, seconds=elapsed, dtype=args.dtype, device=device,
                                      out=out, plot=png), indent=2))
        return 0 if results.ok else 1
    print(f"{name}: {history.steps - 1} steps x {history.batch} points in {elapsed:.2f} s "
          f"({args.dtype}, {device})")
    print(results_table(results))
    print(results.summary())
    if not results.ok and getattr(model, "on_failure", "nan") != "substep" and getattr(model, "IMPLICIT", False):
        print("hint: --on-failure substep retries the failed points with their step cut into sub-steps")
    print(f"results: {out}")
    if png is not None:
        print(f"plot:    {png}")
    return 0 if results.ok else 1


def stress_units(model: Any) -> str | None:
    """The stress units of a model: those of its Young's modulus ``E`` when it has one."""
    info = (getattr(model, "parameter_info", None) or {}).get("E")
    return getattr(info, "units", None) or None


def summary_json(results: Any, **extra: Any) -> dict:
    """The run summary as data: counts, failed points (first failed step), per-point table."""
    stress, conv, its = results["stress"][..., 0], results["converged"], results["iterations"]
    ep = results.get("equivalent_plastic_strain")
    labels = [str(x) for x in results.get("labels", range(stress.shape[1]))]
    points = []
    for i in range(stress.shape[1]):
        finite = stress[1:, i][np.isfinite(stress[1:, i])]
        points.append({"point": i, "label": labels[i],
                       "peak_abs_sxx": float(np.abs(finite).max()) if finite.size else None,
                       "final_sxx": _num(stress[-1, i]), "final_ep": None if ep is None else _num(ep[-1, i]),
                       "newton_iterations": int(its[1:, i].sum()), "worst_step_iterations": int(its[1:, i].max()),
                       "converged_steps": int(conv[1:, i].sum())})
    out = {key: (str(v) if isinstance(v, Path) else v) for key, v in extra.items()}
    out.update(steps=int(conv.shape[0] - 1), points=int(conv.shape[1]), ok=bool(results.ok),
               failed={str(p): s for p, s in sorted(results.failed.items())}, summary=results.summary(),
               solver=getattr(results, "solver", {}), table=points)
    return out


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def check_sensitivities(model, names: str) -> list[str]:
    """The parameter names of ``--sensitivities`` (scalar parameters of ``model``), or an error
    naming the option, before the run."""
    listed = [n.strip() for n in names.split(",") if n.strip()]
    if not listed:
        raise InputError(f"--sensitivities {names!r}: expected parameter names separated by commas")
    info = model.parameter_info
    try:
        model._check_param_names(dict.fromkeys(listed))
    except InputError as exc:
        raise InputError(f"--sensitivities {names!r}: {exc}") from None
    nonscalar = [n for n in listed if info[n].type != "Scalar"]
    if nonscalar:
        raise InputError(f"--sensitivities {names!r}: only scalar parameters, not {', '.join(nonscalar)}")
    return listed


def sensitivities(model, history, params: dict[str, Any], names: str) -> dict[str, np.ndarray]:
    """``d(<output>)/d(<parameter>)`` arrays (steps, points, ...) for the listed parameters."""
    import torch

    from modelc.runtime.history_grad import simulate

    listed = check_sensitivities(model, names)
    with torch.no_grad():
        out = simulate(model, history, params=params, sensitivities=listed)
    return {k: v.cpu().numpy() for k, v in out.items() if k.startswith("d(")}


def parse_sets(items: list[str], option: str = "--set") -> dict[str, Any]:
    """``["E=210e3", "sigma_y=100,150"]`` -> ``{"E": 210e3, "sigma_y": array([100, 150])}``; errors
    name ``option`` (``--set``, or ``--sample`` for the samples of a distributed run)."""
    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            raise InputError(f"{option} {item!r}: expected NAME=VALUE (e.g. {option} E=210000, or one value "
                             f"per {'sample' if option == '--sample' else 'point'}: {option} sigma_y=100,150)")
        try:
            values = [float(v) for v in text.split(",")]
        except ValueError:
            raise InputError(f"{option} {item!r}: {text!r} is not a number or a comma-separated list "
                             f"of numbers") from None
        if name in out:
            raise InputError(f"{option} {item!r}: parameter '{name}' is {'set' if option == '--set' else 'given'} twice")
        out[name] = values[0] if len(values) == 1 else np.array(values)
    return out


def parse_steps(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--tangent-steps {text!r}: expected step numbers separated by commas, "
                         f"e.g. 2,20,27") from None


def check_device(device: str) -> str:
    import torch

    kind = device.split(":", 1)[0]
    if kind not in ("cpu", "cuda"):
        raise InputError(f"--device {device!r}: expected cpu or cuda[:N]")
    if kind == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {device}: CUDA is not available on this machine "
                         f"(torch {torch.__version__}); use --device cpu")
    return device


def load_model(spec: str, model: str | None, *, dtype: str, device: str, backend: str,
               on_failure: str | None = None) -> Any:
    """Compile (or fetch from the cache) the model of ``spec`` through ``modelc.load``, and build
    it: ``module.Model(dtype=..., device=..., backend=...)``."""
    import modelc

    from modelc.bundled import is_model_name

    if not Path(spec).is_file() and not is_model_name(spec):
        raise InputError(f"{spec}: spec file not found")  # a bare name is a bundled model (modelc.load)
    load = getattr(modelc, "load", None)
    if load is None:
        raise ModelcError("modelc run: this build of modelc has no compiler entry point "
                          "(modelc.load) yet, so it cannot compile a spec")
    module = load(spec, model=model)
    return module.Model(dtype=_torch_dtype(dtype), device=device, backend=backend, on_failure=on_failure)


def _torch_dtype(name: str) -> Any:
    import torch

    return {"float64": torch.float64, "float32": torch.float32}[name]


def results_table(results: Mapping[str, np.ndarray], max_rows: int = 20) -> str:
    """One row per point: peak |stress_xx|, final equivalent plastic strain (when there is one),
    Newton iterations (total and worst step; implicit models) and converged steps."""
    stress, conv, its = results["stress"][..., 0], results["converged"], results["iterations"]
    ep = results.get("equivalent_plastic_strain")
    labels = [str(x) for x in results.get("labels", range(stress.shape[1]))]
    newton = bool(its.any())  # explicit models take no Newton iterations: no columns for them
    head = ["point", "", "peak |sxx|", "final sxx"] + (["final ep"] if ep is not None else []) + \
        (["Newton its", "worst step"] if newton else []) + ["converged"]
    rows = []
    for i in range(min(stress.shape[1], max_rows)):
        with np.errstate(invalid="ignore"):
            peak = np.nanmax(np.abs(stress[1:, i])) if np.isfinite(stress[1:, i]).any() else np.nan
        row = [str(i), labels[i], f"{peak:.6g}", f"{stress[-1, i]:.6g}"]
        if ep is not None:
            row.append(f"{ep[-1, i]:.6g}")
        if newton:
            row += [str(int(its[1:, i].sum())), str(int(its[1:, i].max()))]
        row.append(f"{int(conv[1:, i].sum())}/{conv.shape[0] - 1}")
        rows.append(row)
    widths = [max(len(r[c]) for r in [head] + rows) for c in range(len(head))]
    line = lambda r: "  ".join(x.ljust(w) if c == 1 else x.rjust(w)  # noqa: E731
                               for c, (x, w) in enumerate(zip(r, widths)))
    out = [line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]
    if stress.shape[1] > max_rows:
        out.append(f"... ({stress.shape[1] - max_rows} more points)")
    return "\n".join(out)
