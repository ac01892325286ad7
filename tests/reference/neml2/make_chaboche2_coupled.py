"""Make ``chaboche2_coupled__uniaxial.npz`` with NEML2 3.1.0. Runs INSIDE the NEML2 venv:

    bash benchmarks/setup_neml2.sh            # once: .neml2-venv with torch 2.12.1 + neml2 3.1.0
    .neml2-venv/bin/python tests/reference/neml2/make_chaboche2_coupled.py

The model is NEML2's "chaboche" viscoplasticity composed from its own blocks (an NEML2 input file built
here with the benchmark runner's helpers, benchmarks/neml2_runner.py): Voce isotropic hardening, two
Armstrong-Frederick back stresses X1, X2 (X = X1 + X2), Perzyna flow, one ImplicitUpdate over the
unknowns plastic_strain, equivalent_plastic_strain, back_stress_1, back_stress_2 (19 scalars),
Newton + DenseLU, abs = rel = 1e-12, float64, CPU. The flow rate is explicit (evaluated after the update).

The history is the other references' (time and strain of j2_voce_af__uniaxial.npz: 8 points x 100
steps, uniaxial strain); each step starts from the previous converged step. Tangents d stress / d strain
are recorded at the same steps, with central differences of the one-step map (h = 1e-8) beside them.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.neml2_runner import EagerRoute, _block  # noqa: E402

PARAMS = dict(E=200000.0, nu=0.3, sigma_y=100.0, R=50.0, d=20.0, C1=10000.0, g1=100.0, C2=2000.0, g2=10.0,
              eta=200.0, n=5.0)
TOL = 1e-12
FD_H = 1e-8
STATE = ("plastic_strain", "equivalent_plastic_strain", "back_stress_1", "back_stress_2")


def hit_input(p: dict[str, float]) -> str:
    elastic = dict(coefficients=(p["E"], p["nu"]), coefficient_types=("YOUNGS_MODULUS", "POISSONS_RATIO"))
    b = [_block("Ee", "SR2LinearCombination", **{"from": ("strain", "plastic_strain")}, to="elastic_strain",
                weights=(1, -1)),
         _block("sig", "LinearIsotropicElasticity", **elastic, strain="elastic_strain", stress="stress"),
         _block("M", "IsotropicMandelStress", cauchy_stress="stress", mandel_stress="mandel_stress"),
         _block("X", "SR2LinearCombination", **{"from": ("back_stress_1", "back_stress_2")}, to="back_stress",
                weights=(1, 1)),
         _block("xi", "SR2LinearCombination", **{"from": ("mandel_stress", "back_stress")}, to="overstress",
                weights=(1, -1)),
         _block("seff", "SR2Invariant", invariant_type="VONMISES", tensor="overstress",
                invariant="effective_stress"),
         _block("k", "VoceIsotropicHardening", equivalent_plastic_strain="equivalent_plastic_strain",
                isotropic_hardening="isotropic_hardening", saturated_hardening=p["R"], saturation_rate=p["d"]),
         _block("f", "YieldFunction", effective_stress="effective_stress", yield_function="yield_function",
                yield_stress=p["sigma_y"], isotropic_hardening="isotropic_hardening"),
         _block("yieldsurf", "ComposedModel", models=("X", "xi", "seff", "f")),
         _block("N", "Normality", model="yieldsurf", function="yield_function",
                **{"from": ("mandel_stress", "isotropic_hardening"),
                   "to": ("flow_direction", "isotropic_hardening_direction")}),
         _block("gdot", "PerzynaPlasticFlowRate", yield_function="yield_function", flow_rate="flow_rate",
                reference_stress=p["eta"], exponent=p["n"]),
         _block("Epdot", "AssociativePlasticFlow", flow_rate="flow_rate", flow_direction="flow_direction",
                plastic_strain_rate="plastic_strain_rate"),
         _block("rEp", "SR2BackwardEulerTimeIntegration", variable="plastic_strain"),
         _block("epdot", "AssociativeIsotropicPlasticHardening", flow_rate="flow_rate",
                isotropic_hardening_direction="isotropic_hardening_direction",
                equivalent_plastic_strain_rate="equivalent_plastic_strain_rate"),
         _block("rep", "ScalarBackwardEulerTimeIntegration", variable="equivalent_plastic_strain")]
    names = ["Ee", "sig", "M", "X", "xi", "seff", "k", "f", "N", "gdot", "Epdot", "rEp", "epdot", "rep"]
    for i, (C, g) in enumerate(((p["C1"], p["g1"]), (p["C2"], p["g2"])), 1):
        b.append(_block(f"X{i}dot", "FredrickArmstrongPlasticHardening", flow_rate="flow_rate",
                        flow_direction="flow_direction", back_stress=f"back_stress_{i}",
                        back_stress_rate=f"back_stress_{i}_rate", C=C, g=g))
        b.append(_block(f"rX{i}", "SR2BackwardEulerTimeIntegration", variable=f"back_stress_{i}",
                        rate=f"back_stress_{i}_rate"))
        names += [f"X{i}dot", f"rX{i}"]
    b.append(_block("residual", "ComposedModel", models=tuple(names)))
    b.append(_block("guess", "ConstantExtrapolationPredictor",
                    unknowns_SR2=("plastic_strain", "back_stress_1", "back_stress_2"),
                    unknowns_Scalar=("equivalent_plastic_strain",)))
    b.append(_block("update", "ImplicitUpdate", equation_system="eqs", solver="newton", predictor="guess"))
    # after the update: the stress and the (explicit) flow rate of the converged state
    b.append(_block("model", "ComposedModel", models=("update", "Ee", "sig", "M", "X", "xi", "seff", "k", "f",
                                                         "gdot"), additional_outputs=STATE + ("stress",)))
    return ("[Models]\n" + "".join(b) + "[]\n[EquationSystems]\n"
            + _block("eqs", "NonlinearSystem", model="residual",
                     unknowns=("plastic_strain", "equivalent_plastic_strain", "back_stress_1", "back_stress_2"),
                     residuals=("plastic_strain_residual", "equivalent_plastic_strain_residual",
                                "back_stress_1_residual", "back_stress_2_residual"))
            + "[]\n[Solvers]\n"
            + _block("newton", "Newton", linear_solver="lu", abs_tol=TOL, rel_tol=TOL, max_its=50)
            + _block("lu", "DenseLU") + "[]\n")


def main() -> Path:
    torch.set_default_dtype(torch.float64)
    hist = np.load(HERE / "j2_voce_af__uniaxial.npz")
    time, strain, tsteps = hist["time"], hist["strain"], hist["tangent_steps"]
    rows, batch = time.shape
    path = Path(tempfile.mkdtemp(prefix="neml2_chaboche_")) / "chaboche2.i"
    path.write_text(hit_input(PARAMS))
    route = EagerRoute(str(path), torch.float64, compiled=False)
    print("inputs:", route.input_names, file=sys.stderr)
    T = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64)  # noqa: E731
    out = {k: np.zeros((rows, batch, 6)) for k in ("stress", "plastic_strain", "back_stress_1", "back_stress_2")}
    out["equivalent_plastic_strain"] = np.zeros((rows, batch))
    out["flow_rate"] = np.zeros((rows, batch))
    tangents, fds = [], []

    def inputs(n: int, eps: np.ndarray, k: int = 1) -> dict[str, torch.Tensor]:
        vals = {"strain": T(eps), "t": T(np.tile(time[n], k)), "t~1": T(np.tile(time[n - 1], k))}
        for s in STATE:
            vals[s + "~1"] = T(np.concatenate([out[s][n - 1]] * k))
        missing = set(route.input_names) - set(vals)
        assert not missing, f"NEML2 asks for inputs this driver does not provide: {missing}"
        return {k_: vals[k_] for k_ in route.input_names}

    for n in range(1, rows):
        want_tangent = n in tsteps
        res = route(inputs(n, strain[n]), want_tangent)
        if n == 1:
            print("outputs:", sorted(res), file=sys.stderr)
        for k in out:
            out[k][n] = res[k].numpy().reshape(out[k][n].shape)
        if want_tangent:
            tangents.append(res["tangent"].numpy().reshape(batch, 6, 6))
            eye = np.eye(6) * FD_H
            big = np.concatenate([strain[n] + eye[j] for j in range(6)] + [strain[n] - eye[j] for j in range(6)])
            S = route(inputs(n, big, 12), False)["stress"].numpy().reshape(12, batch, 6)
            fds.append(np.stack([(S[j] - S[6 + j]) / (2 * FD_H) for j in range(6)], axis=-1))
    import neml2

    dest = HERE / "chaboche2_coupled__uniaxial.npz"
    np.savez_compressed(dest, time=time, strain=strain, **out, tangent=np.stack(tangents),
                        tangent_fd=np.stack(fds), tangent_steps=tsteps,
                        params_json=json.dumps(PARAMS), **{f"param_{k}": v for k, v in PARAMS.items()},
                        neml2_version=str(getattr(neml2, "__version__", "?")), torch_version=torch.__version__)
    print(f"wrote {dest}; max |stress| {np.abs(out['stress']).max():.3f} MPa, max ep "
          f"{out['equivalent_plastic_strain'].max():.3e}, max |X1| {np.abs(out['back_stress_1']).max():.3f}, "
          f"max |X2| {np.abs(out['back_stress_2']).max():.3f}, tangent vs FD "
          f"{np.abs(np.stack(tangents) - np.stack(fds)).max() / np.abs(np.stack(tangents)).max():.2e}",
          file=sys.stderr)
    return dest


if __name__ == "__main__":
    main()
