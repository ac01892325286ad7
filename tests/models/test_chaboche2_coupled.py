"""chaboche2_coupled (spec/chaboche.yaml: Voce isotropic hardening, two Armstrong-Frederick back
stresses -- two instances of one block -- Perzyna flow; one backward-Euler system of 19 unknowns) against
NEML2 3.1.0's results (tests/reference/neml2/chaboche2_coupled__uniaxial.npz, made by
make_chaboche2_coupled.py beside it), through the reference interpreter and the generated module's
torch, C and Triton (TRITON_INTERPRET=1) backends, float64 and float32.

Float64 tolerances are test_library_reference.py's (its docstring has the reasons): the formulation at
NEML2's solver tolerance 1e-12 (states 1e-9, tangent 1e-8); the shipped module (states 5e-8, flow rate
1e-6, tangent 1e-6).

Float32: every state, per component and point, within the bound float32_bounds.float32_state_bounds
derives from the formulation -- where the stopping test lets Newton stop (2 RTOL_FLOOR_EPS U32 of each
residual's terms) plus round-off in the residuals, both through |J^-1|, the inputs rounded to float32
through the model's own derivatives, and the stress through |C| from the plastic strain -- plus NEML2's
own error (1e-9 of the variable's size). Over the whole history, each step may add that much on top of
carrying the previous step's error through the old-state derivatives. Tangents: within the bound
library_helpers.float32_tangent_bound derives from the conditioning of the 19x19 solve, per step.

What the issue saw (one back stress 1.4e-3 off relative to its size in float32) does not reproduce with
the current stopping test: measured (torch and C, this machine), float32 one-step errors relative to
each variable's size per point are Ep 9e-6, ep 2.4e-6, X1 1.2e-5, X2 8.4e-6, S 4e-6, and over the whole
history 1.2e-5, 9e-6, 1.6e-5, 1.3e-5, 5.6e-6. They are round-off of the formulation, not early
stopping: per point they are 0.04-5 units of U32 |J^-1| s (the residuals' round-off carried through
the solve), while the stopping test would allow 64 units; the derived bounds hold with a margin of
1.6-2.5 (observed/bound <= 0.61 one step, and per step over the history).
The flow rate is not an output of the model (it is explicit, inside the update): it is checked through
ep' = sqrt(2/3) gamma_rate, i.e. gamma_rate = sqrt(3/2) (ep_n - ep_{n-1}) / dt of our own history.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from float32_bounds import float32_state_bounds, isotropic_stiffness
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
STATES = ("state/S", "state/internal/Ep", "state/internal/ep", "state/internal/X1", "state/internal/X2")


def _check_states(got: dict, expected: dict, tol: float, what: str) -> None:
    for name in STATES:
        err = per_point_rel_err(got[name], expected[name])
        assert err <= tol, f"{what}: {name} differs from NEML2 by {err:.2e} (relative, per point) > {tol:.0e}"


@functools.lru_cache(maxsize=None)
def _f32_bounds(points: tuple) -> dict:
    """The derived float32 one-step bounds (float32_bounds.py), (steps, points, components) per state,
    NEML2's own error (1e-9 of the variable's size per point) included; ``_der``: the derivatives."""
    p = reference_params(MODEL)
    b = float32_state_bounds(MODEL, STEPS, np.asarray(points),
                             {"state/S": ("state/internal/Ep", isotropic_stiffness(p["E"], p["nu"]))})
    ref, shape = reference(MODEL), (len(STEPS), len(points))
    out = {"_der": b.pop("_der")}
    for n in STATES:
        size = np.abs(ref[REF_NAMES[n]][:, list(points)]).reshape(101, len(points), -1).max(axis=(0, 2))
        out[n] = b[n].reshape(*shape, -1) + TOL_FORMULATION[0] * size[:, None]
    return out


def _check_states_f32(got: dict, expected: dict, points, what: str) -> None:
    bounds = _f32_bounds(tuple(int(p) for p in points))
    for name in STATES:
        err = np.abs(got[name].reshape(bounds[name].shape) - expected[name].reshape(bounds[name].shape))
        k = np.unravel_index(np.argmax(err / bounds[name]), err.shape)
        assert np.all(err <= bounds[name]), (f"{what}: {name} differs from NEML2 by {err[k]:.3e} at (step, point, "
                                             f"component) {k}, above its derived float32 bound {bounds[name][k]:.3e}")


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
    before, in one call, against NEML2; the C and Triton backends also against the torch backend. The
    tangent is the declared one (``derivatives="tangent"``: d stress / d strain, what a finite-element
    code asks for); the full Jacobian's block is checked against it below."""
    ref, params = reference(MODEL), reference_params(MODEL)
    points = TRITON_POINTS if backend == "triton" else POINTS
    m = compiled(MODEL, backend, dtype)
    ins = forced_inputs([v.name for v in m.INPUTS], ref, STEPS, points)
    outs, tan, status = call_compiled(m, ins, derivatives="tangent", params=params)
    assert status["converged"].all(), f"{backend}, {dtype}: {(~status['converged']).sum()} points did not converge"
    shape = (len(STEPS), len(points))
    expected = forced_expected(STATES, ref, STEPS, points)
    got = {n: outs[n].reshape(*shape, *expected[n].shape[1:]) for n in STATES}
    tols, what = TOL_SHIPPED[dtype], f"{MODEL} ({backend}, {dtype})"
    if dtype == torch.float64:
        _check_states(got, {n: e.reshape(got[n].shape) for n, e in expected.items()}, tols[0], what)
    else:
        _check_states_f32(got, expected, points, what)
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
    touts, ttan, _ = call_compiled(compiled(MODEL, "torch", dtype), ins, derivatives="tangent", params=params)
    close = 1e-9 if dtype == torch.float64 else 1e-4
    for name in STATES:
        e = per_point_rel_err(outs[name].reshape(*shape, -1), touts[name].reshape(*shape, -1))
        assert e <= close, f"{what}: {name} differs from the torch backend by {e:.2e}"
    if dtype == torch.float64:
        e = per_point_rel_err(tan, ttan.reshape(tan.shape))
        assert e <= close, f"{what}: tangent differs from the torch backend by {e:.2e}"
    else:
        assert_tangent_within(tan, ttan, float32_tangent_bound(MODEL, STEPS, points, 2), f"{what} vs torch")


@pytest.mark.parametrize("backend", ["torch", "c", "triton"])
def test_tangent_variant_is_the_full_jacobians_block(backend: str) -> None:
    """The declared tangent variant and the full Jacobian (``derivatives=True``, every output by every
    input) are two kernels of one module: the same Newton solve, different elimination of the 19x19
    system's right-hand sides. Float64, steps of plastic flow (NEML2's tangent steps), against each
    other to round-off of the 19x19 solve, and the same outputs (identical here, on every backend:
    the variants share the matrix's elimination; the bounds leave room for a compiler that contracts
    the two entry points differently)."""
    ref, params = reference(MODEL), reference_params(MODEL)
    points = TRITON_POINTS if backend == "triton" else POINTS
    steps = ref["tangent_steps"]
    m = compiled(MODEL, backend, torch.float64)
    ins = forced_inputs([v.name for v in m.INPUTS], ref, steps, points)
    outs_t, tan_t, st_t = call_compiled(m, ins, derivatives="tangent", params=params)
    outs_f, tan_f, st_f = call_compiled(m, ins, derivatives=True, params=params)
    assert st_t["converged"].all() and st_f["converged"].all()
    e = per_point_rel_err(tan_t, tan_f)
    assert e <= 1e-10, f"{backend}: tangent variant vs the full Jacobian's block {e:.2e}"
    for name in STATES:
        e = per_point_rel_err(outs_t[name].reshape(len(steps) * len(points), -1),
                              outs_f[name].reshape(len(steps) * len(points), -1))
        assert e <= 1e-12, f"{backend}: {name} differs between the variants by {e:.2e}"


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
    if dtype == torch.float64:
        _check_states({n: np.asarray(out[n]) for n in STATES}, {n: ref[REF_NAMES[n]] for n in STATES}, tols[0],
                      what)
    else:  # each step adds at most its one-step bound to the error it carries from the step before
        bounds = _f32_bounds(tuple(int(p) for p in POINTS))
        der = bounds["_der"]
        err = {n: (np.asarray(out[n], dtype=np.float64) - ref[REF_NAMES[n]]).reshape(101, len(POINTS), -1)
               for n in STATES}
        for k in range(len(STEPS)):
            rows = slice(k * len(POINTS), (k + 1) * len(POINTS))
            for n in STATES:
                carried = sum(np.einsum("pij,pj->pi", np.asarray(der[(n, "old_" + y)])[rows]
                                        .reshape(len(POINTS), err[n].shape[2], -1), err[y][k])
                              for y in STATES if (n, "old_" + y) in der)
                added = np.abs(err[n][k + 1] - carried)
                assert np.all(added <= bounds[n][k]), (
                    f"{what}: step {k + 1} adds {added.max():.3e} to the error of {n}, above its derived float32 "
                    f"one-step bound {bounds[n][k][np.unravel_index(np.argmax(added / bounds[n][k]), added.shape)]:.3e}")
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


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_float32_large_steps_converge_to_the_solution_or_fail(backend: str) -> None:
    """Steps of 1-10% strain from the virgin state, float32 (fresh random points; float64 converges on
    every one). A float32 iterate whose residual overflowed has an infinite residual scale, and the
    scaled stopping test's |R| <= rtol * scale read inf <= inf as met: C said converged at up to 75%
    of these points, with a stress up to 15x the solution's and a NaN tangent (a scale above
    ir.FINITE_MAX now counts as 0). A float32 point must now either fail (NaN, not converged; measured:
    about a third, which the driver sub-steps) or converge to the float64 solution. The bound, 1e-3
    of the largest stress component, is a gross-error check (measured: at most 7e-5 on 2000 points);
    float32 accuracy is bounded closely by the tests above."""
    rng = np.random.default_rng()
    n = 300
    m64, m32 = compiled(MODEL, backend, torch.float64), compiled(MODEL, backend, torch.float32)
    ins = {v.name: np.zeros((n, 6) if v.type == "SR2" else (n,)) for v in m64.INPUTS}
    strain = rng.normal(size=(n, 6)) * 10.0 ** rng.uniform(-2, -1, (n, 1))
    ins[STRAIN] = strain.astype(np.float32).astype(np.float64)  # the same inputs in both dtypes
    ins["forces/t"] = (10.0 ** rng.uniform(-3, 2, n)).astype(np.float32).astype(np.float64)
    o64, t64, s64 = call_compiled(m64, ins, derivatives="tangent")
    o32, t32, s32 = call_compiled(m32, ins, derivatives="tangent")
    assert s64["converged"].all()
    ok = s32["converged"].astype(bool)
    assert ok.sum() >= n // 5, ok.sum()  # (measured: about two thirds converge)
    assert np.isnan(o32[STRESS][~ok]).all() and np.isnan(t32[~ok]).all()
    bad = int((~np.isfinite(t32[ok])).any(axis=(1, 2)).sum())
    assert bad == 0, f"{bad} converged tangents not finite"
    err = np.abs(o32[STRESS] - o64[STRESS]).max(axis=1) / np.abs(o64[STRESS]).max(axis=1)
    assert err[ok].max() <= 1e-3, f"a converged float32 stress {err[ok].max():.2e} off the float64 solution"
