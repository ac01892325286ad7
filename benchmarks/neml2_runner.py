"""Time NEML2 (PyPI ``neml2`` 3.1.0) on the benchmark models. Runs INSIDE the NEML2 venv.

    .neml2-venv/bin/python benchmarks/neml2_runner.py --models j2_linear_iso --sizes 100 1000 \
        --dtypes float64 --routes eager compile --out result.json

The models are NEML2 input files (HIT) built here from the parameters, composed exactly as in
shared/reference/neml2 (ImplicitUpdate over a NonlinearSystem, Newton + DenseLU, abs = rel = 1e-12).
Routes:
  eager    the Python-native model (``neml2.eager._EagerModel``: raw name-keyed tensors);
           tangent = chain-rule forward derivative seeded on the strain only.
  compile  the same, after ``neml2.compile`` (in-process torch.compile of the residual model;
           for the explicit elastic model, of its forward).
  aoti     ``neml2-compile`` (AOTInductor .pt2, with the derivative graph ``-d stress:strain``), loaded
           through the AOTIModel shim; tangent = its ``jacobian``.
Before a configuration is timed, its outputs are compared with the hand-written baseline
(benchmarks/baselines.py, itself checked against NEML2's reference arrays by the tests); the errors are
reported with the times. Prints (or writes with --out) one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import baselines as bl  # noqa: E402
from benchmarks import workload as wl  # noqa: E402

# our name -> NEML2's variable name (the old value of x is "x~1")
NEML2_NAME = {bl.STRAIN: "strain", bl.STRESS: "stress", bl.EP: "plastic_strain",
              bl.EPS: "equivalent_plastic_strain", bl.X: "back_stress", bl.GAMMA: "flow_rate"}
#: Newton abs = rel tolerance per dtype (1e-12 as the reference; float32 cannot reach it)
NEWTON_TOL = {"float64": 1e-12, "float32": 1e-4}


# ------------------------------------------------------------------------------------ input files

def _block(name: str, type_: str, **opts: object) -> str:
    body = "".join(f"    {k} = {_hit_value(v)}\n" for k, v in opts.items())
    return f"  [{name}]\n    type = {type_}\n{body}  []\n"


def _hit_value(v: object) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "'" + " ".join(str(x) for x in v) + "'"
    return repr(float(v)) if isinstance(v, float) else f"'{v}'"


def hit_input(model: str, p: dict[str, float], tol: float = NEWTON_TOL["float64"]) -> str:
    """The NEML2 input file of ``model`` with parameters ``p`` (top model named ``model``)."""
    elastic = dict(coefficients=(p["E"], p["nu"]), coefficient_types=("YOUNGS_MODULUS", "POISSONS_RATIO"))
    if model == "elastic":
        return "[Models]\n" + _block("model", "LinearIsotropicElasticity", **elastic, strain="strain",
                                     stress="stress") + "[]\n"
    iso = model != "j2_perfect"
    af = model == "j2_voce_af"
    perzyna = model == "perzyna_iso"
    b = [_block("Ee", "SR2LinearCombination", **{"from": ("strain", "plastic_strain")}, to="elastic_strain",
                weights=(1, -1)),
         _block("sig", "LinearIsotropicElasticity", **elastic, strain="elastic_strain", stress="stress"),
         _block("M", "IsotropicMandelStress", cauchy_stress="stress", mandel_stress="mandel_stress")]
    eff_from = "mandel_stress"
    if af:
        b.append(_block("xi", "SR2LinearCombination", **{"from": ("mandel_stress", "back_stress")},
                        to="overstress", weights=(1, -1)))
        eff_from = "overstress"
    b.append(_block("seff", "SR2Invariant", invariant_type="VONMISES", tensor=eff_from,
                    invariant="effective_stress"))
    if model in ("j2_linear_iso", "perzyna_iso"):
        b.append(_block("k", "LinearIsotropicHardening", equivalent_plastic_strain="equivalent_plastic_strain",
                        isotropic_hardening="isotropic_hardening", hardening_modulus=p["K"]))
    elif af:
        b.append(_block("k", "VoceIsotropicHardening", equivalent_plastic_strain="equivalent_plastic_strain",
                        isotropic_hardening="isotropic_hardening", saturated_hardening=p["R"],
                        saturation_rate=p["d"]))
    f_opts = dict(effective_stress="effective_stress", yield_function="yield_function", yield_stress=p["sigma_y"])
    if iso:
        f_opts["isotropic_hardening"] = "isotropic_hardening"
    b.append(_block("f", "YieldFunction", **f_opts))
    b.append(_block("yieldsurf", "ComposedModel", models=("xi seff f" if af else "seff f")))
    b.append(_block("N", "Normality", model="yieldsurf", function="yield_function",
                    **({"from": ("mandel_stress", "isotropic_hardening"),
                        "to": ("flow_direction", "isotropic_hardening_direction")} if iso else
                       {"from": "mandel_stress", "to": "flow_direction"})))
    b.append(_block("Epdot", "AssociativePlasticFlow", flow_rate="flow_rate", flow_direction="flow_direction",
                    plastic_strain_rate="plastic_strain_rate"))
    b.append(_block("rEp", "SR2BackwardEulerTimeIntegration", variable="plastic_strain"))
    names = ["Ee", "sig", "M"] + (["xi"] if af else []) + ["seff"] + (["k"] if iso else []) + ["f", "N", "Epdot", "rEp"]
    unknowns_sr2, unknowns_scalar = ["plastic_strain"], []
    residuals = ["plastic_strain_residual"]
    if iso:
        b.append(_block("epdot", "AssociativeIsotropicPlasticHardening", flow_rate="flow_rate",
                        isotropic_hardening_direction="isotropic_hardening_direction",
                        equivalent_plastic_strain_rate="equivalent_plastic_strain_rate"))
        b.append(_block("rep", "ScalarBackwardEulerTimeIntegration", variable="equivalent_plastic_strain"))
        names += ["epdot", "rep"]
        unknowns_scalar.append("equivalent_plastic_strain")
        residuals.append("equivalent_plastic_strain_residual")
    if af:
        b.append(_block("Xdot", "FredrickArmstrongPlasticHardening", flow_rate="flow_rate",
                        flow_direction="flow_direction", back_stress="back_stress", C=p["C"], g=p["g"]))
        b.append(_block("rX", "SR2BackwardEulerTimeIntegration", variable="back_stress"))
        names += ["Xdot", "rX"]
        unknowns_sr2.append("back_stress")
        residuals.append("back_stress_residual")
    if perzyna:
        b.append(_block("gdot", "PerzynaPlasticFlowRate", yield_function="yield_function", flow_rate="flow_rate",
                        reference_stress=p["eta"], exponent=p["n"]))
        names.append("gdot")
        outputs = ("update", "Ee", "sig", "M", "k", "seff", "f", "gdot")
        extra = ("plastic_strain", "equivalent_plastic_strain", "stress")
    else:
        b.append(_block("kkt", "MinMapComplementarity", a="yield_function", a_inequality="LE", b="flow_rate"))
        names.append("kkt")
        unknowns_scalar.append("flow_rate")
        residuals.append("complementarity")
        outputs = ("update", "Ee", "sig")
        extra = tuple(unknowns_sr2 + unknowns_scalar[:-1])
    b.append(_block("residual", "ComposedModel", models=tuple(names)))
    guess = {"unknowns_SR2": tuple(unknowns_sr2), "unknowns_Scalar": tuple(unknowns_scalar)}
    b.append(_block("guess", "ConstantExtrapolationPredictor", **{k: v for k, v in guess.items() if v}))
    b.append(_block("update", "ImplicitUpdate", equation_system="eqs", solver="newton", predictor="guess"))
    b.append(_block("model", "ComposedModel", models=outputs, additional_outputs=extra))
    return ("[Models]\n" + "".join(b) + "[]\n[EquationSystems]\n"
            + _block("eqs", "NonlinearSystem", model="residual", unknowns=tuple(unknowns_sr2 + unknowns_scalar),
                     residuals=tuple(residuals))
            + "[]\n[Solvers]\n"
            + _block("newton", "Newton", linear_solver="lu", abs_tol=tol, rel_tol=tol, max_its=50)
            + _block("lu", "DenseLU") + "[]\n")


# ------------------------------------------------------------------------------------------ routes

def _neml2_inputs(model: str, b: dict[str, torch.Tensor], names: list[str]) -> dict[str, torch.Tensor]:
    """Our batch -> NEML2's input dict (time as t~1 = 0, t = dt)."""
    out = {"strain": b[bl.STRAIN], "t": b["dt"], "t~1": torch.zeros_like(b["dt"])}
    for n in bl.STATE[model]:
        out[NEML2_NAME[n] + "~1"] = b[n]
    if "flow_rate~1" in names:
        out["flow_rate~1"] = b["old_gamma_rate"]
    return {k: out[k] for k in names}


class EagerRoute:
    """Raw-tensor adapter over the Python-native model (optionally neml2.compile'd)."""

    def __init__(self, path: str, dtype: torch.dtype, compiled: bool, device: str = "cpu") -> None:
        import neml2
        from neml2.eager._model import _EagerModel

        em = _EagerModel(path, "model", device=device)
        if dtype != em.dtype:
            em._model = em._model.to(dtype)
            em._dtype = dtype
        if compiled:
            updates = [m for m in em._model.modules() if type(m).__name__ == "ImplicitUpdate"]
            for m in updates:
                neml2.compile(m.system)
            if not updates:
                neml2.compile(em._model)
        self.em = em
        self.input_names = list(em.input_names)

    def __call__(self, inputs: dict[str, torch.Tensor], tangent: bool) -> dict[str, torch.Tensor]:
        from neml2.cli.aoti_export import _leading_k_identity_seed
        from neml2.types._boundary import assemble_jacobian, unwrap_outputs

        em = self.em
        args = em._typed_args(inputs)
        if not tangent:
            outs, _ = em._eval(args)
            return {k: v.detach() for k, v in unwrap_outputs(outs, em.output_names).items()}
        batch = tuple(inputs["strain"].shape[:-1])
        seed = {"strain": {"strain": _leading_k_identity_seed(em.input_spec["strain"], batch,
                                                                dtype=em.dtype, device=inputs["strain"].device)}}
        outs, v = em._eval(args, v=seed)
        res = {k: t.detach() for k, t in unwrap_outputs(outs, em.output_names).items()}
        J = assemble_jacobian(v, outs, em.output_names, em.output_spec, ["strain"], em.input_spec)
        res["tangent"] = J["stress"]["strain"].detach()
        return res


class AotiRoute:
    """neml2-compile'd AOTInductor artifact (compiled once per model/dtype, timed)."""

    def __init__(self, path: str, dtype: torch.dtype, workdir: Path, device: str = "cpu") -> None:
        import neml2

        dname = str(dtype).removeprefix("torch.")
        exe = Path(sys.executable).with_name("neml2-compile")
        family = torch.device(device).type
        t0 = time.perf_counter()
        proc = subprocess.run([str(exe), path, "--model", "model", "--output-dir", str(workdir), "--device", family,
                               "--dtype", dname, "-d", "stress:strain", "-q"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"neml2-compile failed (rc {proc.returncode}): {proc.stderr[-1500:]}")
        self.compile_s = time.perf_counter() - t0
        stub = next(workdir.glob("*.i"))
        t0 = time.perf_counter()
        self.m = neml2.load_model(str(stub), "model", device=device, dtype=dtype)
        self.load_s = time.perf_counter() - t0
        self.input_names = list(self.m.input_spec)

    def __call__(self, inputs: dict[str, torch.Tensor], tangent: bool) -> dict[str, torch.Tensor]:
        if not tangent:
            return dict(self.m._inner.forward(inputs))
        outs, J = self.m.jacobian(inputs)
        return {**outs, "tangent": J["stress"]["strain"]}


# ----------------------------------------------------------------------------------------- driver

def _errors(model: str, got: dict[str, torch.Tensor], want: tuple, tangent: bool) -> dict[str, float]:
    """Max relative error (vs the max magnitude) of each output against the baseline."""
    errs = {}
    for name, w in zip(bl.output_names(model, tangent), want):
        g = got["tangent"] if name == bl.TANGENT else got[NEML2_NAME[name]]
        errs[name] = float((g.double() - w.double()).abs().max() / w.double().abs().max().clamp_min(1e-300))
    return errs


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(bl.MODELS))
    ap.add_argument("--sizes", nargs="+", type=int, default=[100, 1000, 10000])
    ap.add_argument("--dtypes", nargs="+", default=["float64"])
    ap.add_argument("--routes", nargs="+", default=["eager", "compile"], choices=["eager", "compile", "aoti"])
    ap.add_argument("--tangent", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=2.0, help="stop repeating a config after this long")
    ap.add_argument("--out", type=str, default=None)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (NEML2 on the same GPU as modelc)")
    a = ap.parse_args(argv)
    device = torch.device(a.device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    import neml2

    result = {"neml2": str(getattr(neml2, "__version__", "?")).lstrip("v"), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "records": [], "failures": []}
    tmp = Path(tempfile.mkdtemp(prefix="neml2_bench_"))
    for model in a.models:
        p = bl.params_for(model)
        pool = wl.pool(model, p)
        for dname in a.dtypes:
            dtype = getattr(torch, dname)
            path = tmp / f"{model}_{dname}.i"
            path.write_text(hit_input(model, p, NEWTON_TOL[dname]))
            routes = {}
            for r in a.routes:
                t0 = time.perf_counter()
                try:
                    routes[r] = (AotiRoute(str(path), dtype, tmp / f"aoti_{model}_{dname}", a.device)
                                 if r == "aoti" else EagerRoute(str(path), dtype, compiled=(r == "compile"),
                                                                device=a.device))
                except Exception as e:  # a route that does not run here is reported, not fatal
                    result["failures"].append({"model": model, "dtype": dname, "route": r, "stage": "build",
                                               "error": f"{type(e).__name__}: {e}"[:2000]})
                    continue
                result.setdefault("build_s", {})[f"{model}/{dname}/{r}"] = time.perf_counter() - t0
                if r == "aoti":
                    result.setdefault("aoti_compile_s", {})[f"{model}/{dname}"] = routes[r].compile_s
            for size in a.sizes:
                bufs = [wl.batch(pool, size, dtype, device, offset=97 * i) for i in range(3)]  # rotated
                b = bufs[0]
                for tan in a.tangent:
                    tangent = tan == "yes"
                    want = bl.make_step(model, p, tangent=tangent)(*wl.args_of(model, b))
                    for r, fn in list(routes.items()):
                        inputs = _neml2_inputs(model, b, fn.input_names)
                        rotated = [_neml2_inputs(model, bb, fn.input_names) for bb in bufs]
                        rec = {"impl": f"neml2-{r}", "model": model, "dtype": dname, "size": size,
                               "tangent": tangent, "device": str(device)}
                        try:
                            sync()
                            t0 = time.perf_counter()
                            got = fn(inputs, tangent)
                            sync()
                            rec["first_call_s"] = time.perf_counter() - t0
                            rec["errors"] = _errors(model, got, want, tangent)
                            times = []
                            for i in range(a.warmup + a.repeats):
                                sync()
                                t0 = time.perf_counter()
                                fn(rotated[i % len(rotated)], tangent)
                                sync()
                                dt = time.perf_counter() - t0
                                if i >= a.warmup:
                                    times.append(dt)
                                if sum(times) > a.max_seconds and len(times) >= 1:
                                    break
                            rec["times_s"] = times
                            rec["median_s"] = statistics.median(times)
                            rec["points_per_s"] = size / rec["median_s"]
                            result["records"].append(rec)
                        except Exception as e:
                            rec["error"] = f"{type(e).__name__}: {e}"[:2000]
                            result["failures"].append(rec)
                        print(json.dumps({k: v for k, v in rec.items() if k != "times_s"}), file=sys.stderr)
    text = json.dumps(result, indent=1)
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    return result


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
