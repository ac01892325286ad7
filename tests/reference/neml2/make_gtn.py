"""Make ``gtn__uniaxial.npz`` with NEML2 3.1.0. Runs INSIDE the NEML2 venv:

    bash benchmarks/setup_neml2.sh            # once: .neml2-venv with torch 2.12.1 + neml2 3.1.0
    .neml2-venv/bin/python tests/reference/neml2/make_gtn.py

Gurson-Tvergaard-Needleman porous plasticity, rate independent, composed from NEML2's own blocks as in
NEML2's "gurson" regression model: linear elasticity, the Mandel stress, its von Mises and I1 (trace)
invariants, linear isotropic hardening, GTNYieldFunction
    f = (s_vm / (sigma_y + k))^2 + 2 q1 phi cosh(q2/2 tr(M) / (sigma_y + k)) - (1 + q3 phi^2)
Normality over (Mandel stress, isotropic hardening) for the flow directions, associative plastic flow
and hardening (Ep' = gamma_rate df/dM, ep' = -gamma_rate df/dk), GursonCavitation (phi' = (1 - phi)
tr(Ep')), MinMapComplementarity (f <= 0, gamma_rate >= 0), backward Euler; one ImplicitUpdate over
plastic_strain, equivalent_plastic_strain, void_fraction, flow_rate (9 scalars), Newton + DenseLU,
abs = rel = 1e-12, float64, CPU. Row 0: zero strain, stress and plastic strain, void_fraction = phi0.
"""
from __future__ import annotations

from neml2_history import _block, run_history

PARAMS = dict(E=200000.0, nu=0.3, sigma_y=100.0, K=2000.0, q1=1.5, q2=1.0, q3=2.25, phi0=0.01)
TOL = 1e-12
STATE = {"plastic_strain": 6, "equivalent_plastic_strain": 1, "void_fraction": 1}


def hit_input(p: dict[str, float]) -> str:
    elastic = dict(coefficients=(p["E"], p["nu"]), coefficient_types=("YOUNGS_MODULUS", "POISSONS_RATIO"))
    b = [_block("Ee", "SR2LinearCombination", **{"from": ("strain", "plastic_strain")}, to="elastic_strain",
                weights=(1, -1)),
         _block("sig", "LinearIsotropicElasticity", **elastic, strain="elastic_strain", stress="stress"),
         _block("M", "IsotropicMandelStress", cauchy_stress="stress", mandel_stress="mandel_stress"),
         _block("seff", "SR2Invariant", invariant_type="VONMISES", tensor="mandel_stress",
                invariant="flow_invariant"),
         _block("I1", "SR2Invariant", invariant_type="I1", tensor="mandel_stress", invariant="poro_invariant"),
         _block("k", "LinearIsotropicHardening", equivalent_plastic_strain="equivalent_plastic_strain",
                isotropic_hardening="isotropic_hardening", hardening_modulus=p["K"]),
         # GTNYieldFunction under its own variable names (its Python mirror reads the inputs by them)
         _block("f", "GTNYieldFunction", isotropic_hardening="isotropic_hardening", yield_stress=p["sigma_y"],
                q1=p["q1"], q2=p["q2"], q3=p["q3"]),
         _block("yieldsurf", "ComposedModel", models=("seff", "I1", "f")),
         _block("N", "Normality", model="yieldsurf", function="yield_function",
                **{"from": ("mandel_stress", "isotropic_hardening"),
                   "to": ("flow_direction", "isotropic_hardening_direction")}),
         _block("Epdot", "AssociativePlasticFlow", flow_rate="flow_rate", flow_direction="flow_direction",
                plastic_strain_rate="plastic_strain_rate"),
         _block("rEp", "SR2BackwardEulerTimeIntegration", variable="plastic_strain"),
         _block("epdot", "AssociativeIsotropicPlasticHardening", flow_rate="flow_rate",
                isotropic_hardening_direction="isotropic_hardening_direction",
                equivalent_plastic_strain_rate="equivalent_plastic_strain_rate"),
         _block("rep", "ScalarBackwardEulerTimeIntegration", variable="equivalent_plastic_strain"),
         _block("phidot", "GursonCavitation", plastic_strain_rate="plastic_strain_rate",
                void_fraction="void_fraction", void_fraction_rate="void_fraction_rate"),
         _block("rphi", "ScalarBackwardEulerTimeIntegration", variable="void_fraction"),
         _block("kkt", "MinMapComplementarity", a="yield_function", a_inequality="LE", b="flow_rate")]
    names = ("Ee", "sig", "M", "seff", "I1", "k", "f", "N", "Epdot", "rEp", "epdot", "rep", "phidot", "rphi", "kkt")
    b.append(_block("residual", "ComposedModel", models=names))
    b.append(_block("guess", "ConstantExtrapolationPredictor", unknowns_SR2=("plastic_strain",),
                    unknowns_Scalar=("equivalent_plastic_strain", "void_fraction", "flow_rate")))
    b.append(_block("update", "ImplicitUpdate", equation_system="eqs", solver="newton", predictor="guess"))
    b.append(_block("model", "ComposedModel", models=("update", "Ee", "sig"),
                    additional_outputs=tuple(STATE) + ("flow_rate",)))
    return ("[Models]\n" + "".join(b) + "[]\n[EquationSystems]\n"
            + _block("eqs", "NonlinearSystem", model="residual",
                     unknowns=("plastic_strain", "equivalent_plastic_strain", "void_fraction", "flow_rate"),
                     residuals=("plastic_strain_residual", "equivalent_plastic_strain_residual",
                                "void_fraction_residual", "complementarity"))
            + "[]\n[Solvers]\n"
            + _block("newton", "Newton", linear_solver="lu", abs_tol=TOL, rel_tol=TOL, max_its=50)
            + _block("lu", "DenseLU") + "[]\n")


if __name__ == "__main__":
    run_history("gtn", hit_input(PARAMS), STATE, PARAMS, initial={"void_fraction": PARAMS["phi0"]})
