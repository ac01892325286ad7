"""chaboche2_coupled (spec/chaboche.yaml: Voce isotropic hardening, two Armstrong-Frederick back
stresses, Perzyna flow; one backward-Euler system of 19 unknowns) against NEML2 3.1.0's results
(tests/reference/neml2/chaboche2_coupled__uniaxial.npz, made by make_chaboche2_coupled.py beside it),
through the reference interpreter and the generated module's torch, C and Triton (TRITON_INTERPRET=1)
backends, float64 and float32.

Tolerances are test_library_reference.py's (its docstring has the reasons): the formulation at NEML2's
solver tolerance 1e-12 (states 1e-9, tangent 1e-8); the shipped module (states 5e-8, flow rate 1e-6,
tangent 1e-6 in float64; states 1e-4, flow rate 1e-3 in float32, and float32 tangents within the bound
library_helpers.float32_tangent_bound derives from the conditioning of the 19x19 solve, per step).
The flow rate is not an output of the model (it is explicit, inside the update): it is checked through
ep' = sqrt(2/3) gamma_rate, i.e. gamma_rate = sqrt(3/2) (ep_n - ep_{n-1}) / dt of our own history.
Observed (torch, whole history, this machine): float64 stress 7e-12, Ep 2e-11, X1 3e-11, tangent 5e-11;
float32 stress 1.7e-5, Ep 4e-5, ep 2.6e-5, X1 9e-5, X2 4.6e-5, tangent 1.8e-4 (within the bound). The
float32 history accumulates 100 steps of a 19-unknown Newton stopped at 32 ulps of each residual's
terms: its states get 3e-4 (HISTORY_F32_STATES), 3x the observed maximum, still 30x below the
smallest real modelling difference (the 0.2-12 % of a different yield scaling, see the README there).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from library_helpers import (REF_NAMES, STRAIN, STRESS, assert_tangent_within, call_compiled, compiled,
                             float32_tangent_bound, forced_expected, forced_inputs, per_point_rel_err, program,
                             reference, reference_params, with_solver_tolerance)

MODEL = "chaboche2_coupled"
NEML2_TOL = 1e-12
STEPS = np.arange(1, 101)
POINTS = np.arange(8)
TRITON_POINTS = np.array([0, 4, 7])  # A = 0.005 over 10 s, A = 0.01 over 0.1 s and over 1000 s
TOL_FORMULATION = (1e-9, 5e-9, 1e-8)
TOL_SHIPPED = {torch.float64: (5e-8, 1e-6, 1e-6), torch.float32: (1e-4, 1e-3, 1e-4)}
DTYPES = {"f64": torch.float64, "f32": torch.float32}
HISTORY_F32_STATES = 3e-4
STATES = ("state/S", "state/internal/Ep", "state/internal/ep", "state/internal/X1", "state/internal/X2")


def _check_states(got: dict, expected: dict, tol: float, what: str) -> None:
    for name in STATES:
        err = per_point_rel_err(got[name], expected[name])
        assert err <= tol, f"{what}: {name} differs from NEML2 by {err:.2e} (relative, per point) > {tol:.0e}"


def test_reference_is_consistent() -> None:
    """The reference itself: NEML2's tangent against its own central differences, plastic flow at
    every point, both back stresses active, the flow rate agreeing with ep' = sqrt(2/3) gamma_rate."""
    ref = reference(MODEL)
    err = per_point_rel_err(ref["tangent"], ref["tangent_fd"])
    assert err <= 1e-6, f"NEML2's tangent vs its finite differences: {err:.2e}"
    assert (ref["equivalent_plastic_strain"][-1] > 1e-3).all()
    assert np.abs(ref["back_stress_1"]).max() > 10 and np.abs(ref["back_stress_2"]).max() > 10
    dt = np.diff(ref["time"], axis=0)
    rate = np.sqrt(1.5) * np.diff(ref["equivalent_plastic_strain"], axis=0) / dt
    assert per_point_rel_err(rate, ref["flow_rate"][1:], point_axis=1) <= 1e-9


def test_system_has_19_unknowns() -> None:
    from modelc import ir

    solves = [s for s in program(MODEL).body if isinstance(s, ir.Newton)]
    assert len(solves) == 1 and len(solves[0].unknowns) == 19, [len(s.unknowns) for s in solves]


def test_interpreter_one_step_matches_neml2() -> None:
    """Every step of every point from NEML2's converged state of the row before (no accumulation),
    at NEML2's solver tolerance: the formulation (composition, derivatives, lowering, CSE)."""
    from modelc.interpret import interpret

    ref, params = reference(MODEL), reference_params(MODEL)
    prog = with_solver_tolerance(program(MODEL), NEML2_TOL)
    ins = forced_inputs([v.name for v in prog.inputs], ref, STEPS, POINTS)
    res, der, status = interpret(prog, ins, params)
    assert np.all(status["converged"])
    expected = forced_expected(STATES, ref, STEPS, POINTS)
    shape = (len(STEPS), len(POINTS))
    got = {n: np.asarray(res[n]).reshape(*shape, *expected[n].shape[1:]) for n in STATES}
    _check_states(got, {n: e.reshape(got[n].shape) for n, e in expected.items()}, TOL_FORMULATION[0],
                  "interpreter, one step")
    tan = np.asarray(der[(STRESS, STRAIN)]).reshape(*shape, 6, 6)
    err = per_point_rel_err(tan[ref["tangent_steps"] - 1], ref["tangent"])
    assert err <= TOL_FORMULATION[2], f"tangent differs from NEML2's by {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("backend", ["torch", "c", "triton"])
def test_compiled_one_step_matches_neml2(backend: str, dtype: torch.dtype) -> None:
    """All 100 steps (8 points; 3 under the slow Triton interpreter), each from NEML2's state of the row
    before, in one call, against NEML2; the C and Triton backends also against the torch backend."""
    ref, params = reference(MODEL), reference_params(MODEL)
    points = TRITON_POINTS if backend == "triton" else POINTS
    m = compiled(MODEL, backend, dtype)
    ins = forced_inputs([v.name for v in m.INPUTS], ref, STEPS, points)
    outs, tan, status = call_compiled(m, ins, params=params)
    assert status["converged"].all(), f"{backend}, {dtype}: {(~status['converged']).sum()} points did not converge"
    shape = (len(STEPS), len(points))
    expected = forced_expected(STATES, ref, STEPS, points)
    got = {n: outs[n].reshape(*shape, *expected[n].shape[1:]) for n in STATES}
    tols, what = TOL_SHIPPED[dtype], f"{MODEL} ({backend}, {dtype})"
    _check_states(got, {n: e.reshape(got[n].shape) for n, e in expected.items()}, tols[0], what)
    tan = tan.reshape(*shape, 6, 6)
    tsteps = ref["tangent_steps"]
    if dtype == torch.float64:
        err = per_point_rel_err(tan[tsteps - 1], ref["tangent"][:, points])
        assert err <= tols[2], f"{what}: tangent differs from NEML2's by {err:.2e}"
    else:
        assert_tangent_within(tan[tsteps - 1], ref["tangent"][:, points],
                              float32_tangent_bound(MODEL, tsteps, points, 1, TOL_FORMULATION[2]), f"{what} vs NEML2")
    if backend == "torch":
        return
    touts, ttan, _ = call_compiled(compiled(MODEL, "torch", dtype), ins, params=params)
    close = 1e-9 if dtype == torch.float64 else 1e-4
    for name in STATES:
        e = per_point_rel_err(outs[name].reshape(*shape, -1), touts[name].reshape(*shape, -1))
        assert e <= close, f"{what}: {name} differs from the torch backend by {e:.2e}"
    if dtype == torch.float64:
        e = per_point_rel_err(tan, ttan.reshape(tan.shape))
        assert e <= close, f"{what}: tangent differs from the torch backend by {e:.2e}"
    else:
        assert_tangent_within(tan, ttan, float32_tangent_bound(MODEL, STEPS, points, 2), f"{what} vs torch")


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_torch_history_matches_neml2(dtype: torch.dtype) -> None:
    """The whole history (8 points x 100 steps) chained by runtime.driver.run_history; the flow rate
    from our equivalent plastic strain increments."""
    from modelc.runtime.driver import run_history

    ref = reference(MODEL)
    out = run_history(compiled(MODEL, "torch", dtype), {"time": ref["time"], "strain": ref["strain"]},
                      params=reference_params(MODEL), tangent_steps=ref["tangent_steps"], progress=False)
    assert out.ok, out.summary()
    tols, what = TOL_SHIPPED[dtype], f"{MODEL} (torch history, {dtype})"
    states_tol = tols[0] if dtype == torch.float64 else HISTORY_F32_STATES
    _check_states({n: np.asarray(out[n]) for n in STATES}, {n: ref[REF_NAMES[n]] for n in STATES}, states_tol,
                  what)
    rate = np.sqrt(1.5) * np.diff(np.asarray(out["state/internal/ep"], dtype=np.float64), axis=0) \
        / np.diff(ref["time"], axis=0)
    err = per_point_rel_err(rate, ref["flow_rate"][1:])
    assert err <= tols[1], f"{what}: flow rate differs from NEML2's by {err:.2e}"
    if dtype == torch.float64:
        err = per_point_rel_err(out["tangent"], ref["tangent"])
        assert err <= tols[2], f"{what}: tangent differs from NEML2's by {err:.2e}"
    else:  # the 19x19 solve's conditioning, per step (library_helpers.float32_tangent_bound)
        tsteps = ref["tangent_steps"]
        assert_tangent_within(out["tangent"], ref["tangent"],
                              float32_tangent_bound(MODEL, tsteps, POINTS, 1, TOL_FORMULATION[2]), what)
