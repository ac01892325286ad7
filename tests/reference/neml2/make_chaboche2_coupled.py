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

from pathlib import Path

from neml2_history import _block, run_history

PARAMS = dict(E=200000.0, nu=0.3, sigma_y=100.0, R=50.0, d=20.0, C1=10000.0, g1=100.0, C2=2000.0, g2=10.0,
              eta=200.0, n=5.0)
TOL = 1e-12
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
    return run_history("chaboche2_coupled", hit_input(PARAMS), {s: 1 if s == "equivalent_plastic_strain" else 6
                                                                for s in STATE}, PARAMS)


if __name__ == "__main__":
    main()
