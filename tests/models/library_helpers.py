"""Shared helpers of the library-model tests: the NEML2 reference data, the library programs (built
through the passes and run by the reference interpreter), a step-by-step history driver over the
interpreter, and central finite differences of the one-step map.

The interpreter driver is deliberately independent of ``modelc.runtime.driver`` (it is the oracle
the compiled path and the runtime driver are checked against): row 0 is the zero state, step n
feeds ``forces/E = strain[n]``, ``forces/t = time[n]``, ``old_forces/* = row n-1`` and
``old_state/x = state/x`` of row n-1.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np
import torch
import pytest

# Triton kernels run under the interpreter when there is no GPU; the variable must be set before any
# generated module is imported (collection imports this file first).
try:
    import torch as _torch

    if not _torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # pragma: no cover
    pass

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "tests" / "reference" / "neml2"  # committed: a clean clone runs every comparison
SPEC = REPO / "spec" / "library.yaml"

#: the plastic models in their radial-return form (one scalar unknown) ...
RADIAL = ("j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso")
#: ... and their NEML2-form coupled twins (same parameters, same reference data)
COUPLED = tuple(m + "_coupled" for m in RADIAL)
MODELS = ("elastic",) + RADIAL + COUPLED
RATE_INDEPENDENT = ("j2_perfect", "j2_linear_iso", "j2_voce_af")
RATE_INDEPENDENT += tuple(m + "_coupled" for m in RATE_INDEPENDENT)
STRESS, STRAIN, TIME = "state/S", "forces/E", "forces/t"

#: output variable -> the name of the reference array holding it
REF_NAMES = {
    "state/S": "stress",
    "state/internal/Ep": "plastic_strain",
    "state/internal/ep": "equivalent_plastic_strain",
    "state/internal/X": "back_stress",
    "state/internal/X1": "back_stress_1",  # chaboche2_coupled
    "state/internal/X2": "back_stress_2",
    "state/internal/gamma_rate": "flow_rate",
    "state/internal/phi": "void_fraction",  # gtn (spec/gtn.yaml)
}


# --------------------------------------------------------------------------------------------------
# reference data


def base_name(model: str) -> str:
    """The library model whose NEML2 reference a model is checked against (``x_coupled`` -> ``x``)."""
    return model.removesuffix("_coupled")


@functools.lru_cache(maxsize=None)
def _load_reference(model: str) -> dict[str, np.ndarray] | None:
    path = REFERENCE / f"{model}__uniaxial.npz"  # a model with its own reference (chaboche2_coupled)
    if not path.is_file():
        path = REFERENCE / f"{base_name(model)}__uniaxial.npz"
    if not path.is_file():
        return None
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def reference(model: str) -> dict[str, np.ndarray]:
    """The NEML2 reference arrays of ``model`` (missing data fails the test: never a silent skip)."""
    ref = _load_reference(model)
    if ref is None:
        pytest.fail(f"NEML2 reference data not found under {REFERENCE} (it is committed: restore it)")
    return ref


def reference_params(model: str) -> dict[str, float]:
    """The parameter values the reference was computed with."""
    return {k: float(v) for k, v in json.loads(str(reference(model)["params_json"])).items()}


# --------------------------------------------------------------------------------------------------
# programs


@functools.lru_cache(maxsize=None)
def library_spec():
    from modelc.frontend import load_spec

    return load_spec(SPEC)


@functools.lru_cache(maxsize=None)
def program(model: str, derivatives: bool = True):
    """load -> compose -> positive -> differentiate -> lower -> cse of library model ``model``."""
    from modelc.passes.compose import compose_spec_model
    from modelc.passes.cse import cse
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower
    from modelc.passes.positive import factor_positive

    m = differentiate(factor_positive(compose_spec_model(library_spec(), model)))
    return cse(lower(differentiate(m), derivatives=derivatives))


@functools.lru_cache(maxsize=None)
def spec_program(spec: Path, model: str):
    """load -> compose -> differentiate -> lower -> cse of ``model`` of a spec file outside the library
    (the zoo's), for the reference interpreter."""
    from modelc.frontend import load_spec
    from modelc.passes.compose import compose_spec_model
    from modelc.passes.cse import cse
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower

    return cse(lower(differentiate(compose_spec_model(load_spec(spec), model)), derivatives=True))


def stop_bound(prog, ins: dict, params: dict, slack: float, names) -> dict[str, np.ndarray]:
    """Per output of ``names``, how far each component moves when the Newton stops ``slack``
    (relative to its residual's terms) from the root, either side: the reference interpreter, float64."""
    from modelc.interpret import interpret

    base, _, _ = interpret(prog, ins, params)
    bound = {k: np.zeros_like(np.asarray(base[k], dtype=np.float64)) for k in names}
    for sign in (1.0, -1.0):
        moved, _, _ = interpret(prog, ins, params, stop_slack=sign * slack)
        for k in names:
            bound[k] = np.maximum(bound[k], np.abs(np.asarray(moved[k]) - np.asarray(base[k])))
    return bound


def assert_states_within(got: dict, want: dict, stop: dict, scale, u: float, names) -> None:
    """Each output of ``names`` within ``stop`` (where the Newton may stop) plus ``ENTRY_ROUNDOFF``
    roundings of unit ``u`` of ``scale(name, want)`` (per point, the size of the terms the output is
    computed from), entry by entry; the message names the worst entry."""
    for k in names:
        w = want[k].reshape(len(want[k]), -1)
        bound = stop[k].reshape(w.shape) + ENTRY_ROUNDOFF * u * scale(k, w)
        err = np.abs(got[k].reshape(w.shape) - w)
        i = np.unravel_index(np.argmax(err / np.maximum(bound, 1e-300)), err.shape)
        assert np.all(err <= bound), f"{k}: off by {err[i]:.3e} at {i}, bound {bound[i]:.3e}"


def shapes(prog) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """``({input: base shape}, {output: base shape})`` of a program."""
    return ({v.name: tuple(v.type.base_shape) for v in prog.inputs},
            {v.name: tuple(v.type.base_shape) for v in prog.outputs})


def step_inputs(prog, strain_new, strain_old, t_new, t_old, state_old) -> dict[str, np.ndarray]:
    """The inputs of one step, by the program's own input names."""
    ins, _ = shapes(prog)
    vals = {STRAIN: strain_new, TIME: t_new, "old_forces/E": strain_old, "old_forces/t": t_old}
    out = {}
    for name in ins:
        if name in vals:
            out[name] = np.asarray(vals[name], dtype=np.float64)
        elif name.startswith("old_state/"):
            out[name] = np.asarray(state_old["state/" + name[len("old_state/"):]], dtype=np.float64)
        else:
            raise AssertionError(f"{prog.name}: input {name!r} is not driven by a strain history")
    return out


def explicit_status(status: dict, batch: int) -> dict:
    """``status``, or for an explicit program (closed form, nothing to converge: no status) every
    point converged in 0 iterations, so that tests treat both kinds alike."""
    if status:
        return status
    return {"converged": np.ones(batch, bool), "iterations": np.zeros(batch, np.int64)}


def one_step(prog, params, strain_new, strain_old, t_new, t_old, state_old):
    """``interpret`` one step: ``(results, derivatives, status)``."""
    from modelc.interpret import interpret

    res, der, status = interpret(prog, step_inputs(prog, strain_new, strain_old, t_new, t_old, state_old),
                                 params)
    return res, der, explicit_status(status, np.asarray(strain_new).shape[0])


def run_interpreted(model: str, time: np.ndarray, strain: np.ndarray, params: dict[str, float],
                    tangent_steps=(), steps: int | None = None) -> dict[str, np.ndarray]:
    """Drive ``model`` (interpreter) through ``time`` (rows, batch), ``strain`` (rows, batch, 6).

    Returns every output by its variable name with shape (rows, batch, ...), ``converged`` and
    ``iterations`` (rows, batch) and, for ``tangent_steps``, ``tangent`` (k, batch, 6, 6)."""
    prog = program(model, True)
    _, outs = shapes(prog)
    rows = time.shape[0] if steps is None else steps + 1
    batch = time.shape[1]
    state = {n: np.zeros((batch, *s)) for n, s in outs.items()}
    hist = {n: [v] for n, v in state.items()}
    conv, its, tangents = [np.ones(batch, bool)], [np.zeros(batch, np.int64)], []
    for n in range(1, rows):
        res, der, status = one_step(prog, params, strain[n], strain[n - 1], time[n], time[n - 1], state)
        state = {k: np.asarray(res[k]) for k in outs}
        for k, v in state.items():
            hist[k].append(v)
        conv.append(np.asarray(status["converged"]) if "converged" in status else np.ones(batch, bool))
        its.append(np.asarray(status["iterations"]) if "iterations" in status else np.zeros(batch, np.int64))
        if n in tangent_steps:
            tangents.append(np.asarray(der[(STRESS, STRAIN)]))
    out = {k: np.stack(v) for k, v in hist.items()}
    out["converged"], out["iterations"] = np.stack(conv), np.stack(its)
    if tangent_steps:
        out["tangent"] = np.stack(tangents)
    return out


def fd_tangent(prog, params, strain_new, strain_old, t_new, t_old, state_old, h: float) -> np.ndarray:
    """Central differences d S / d E (batch, 6, 6) of the one-step map, by columns."""
    batch = strain_new.shape[0]
    plus, minus = [], []
    for j in range(6):
        e = np.zeros(6)
        e[j] = h
        plus.append(strain_new + e)
        minus.append(strain_new - e)
    # one interpreter call for all 12 perturbations: stack them along the batch
    big = lambda a: np.concatenate([a] * 12, axis=0)  # noqa: E731
    res, _, status = one_step(prog, params, np.concatenate(plus + minus), big(strain_old), big(t_new),
                              big(t_old), {k: big(v) for k, v in state_old.items()})
    if "converged" in status:
        assert np.all(np.asarray(status["converged"])), "a perturbed step did not converge"
    S = np.asarray(res[STRESS]).reshape(12, batch, 6)
    cols = [(S[j] - S[6 + j]) / (2 * h) for j in range(6)]
    return np.stack(cols, axis=-1)


def rel_err(actual, expected, scale=None) -> float:
    """max |actual - expected| / scale, scale = max |expected| (over the whole array) by default."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    scale = np.max(np.abs(expected)) if scale is None else scale
    return float(np.max(np.abs(actual - expected)) / max(scale, 1e-300))


def central_difference_bound(fd: float, scale: float, h: float, rtol: float = 1e-6) -> float:
    """How far an exact gradient may lie from the central difference ``fd = (L(x+h) - L(x-h)) / 2h``
    of a float64 loss ``L`` that sums terms of total magnitude ``scale`` (sum of |terms|): ``rtol`` of
    ``fd`` (its truncation) plus the rounding of the two losses, eps * scale each, over 2h. A bound
    relative to ``fd`` alone fails whenever random weights make the derivative small against the
    loss: the zoo's history-gradient tests (h of 1e-6 relative) reached up to 1.1e-5 relative over
    800 draws against a bound of 1e-6, and one CI run failed at 1.3e-6. Measured (2026-11-29), the
    difference stayed under 0.12 (thermo_j2, 400 draws) and 0.07 (drucker_prager, 100 draws) of
    this bound."""
    return rtol * abs(float(fd)) + torch.finfo(torch.float64).eps * float(scale) / float(h)


# --------------------------------------------------------------------------------------------------
# one-step ("teacher-forced") evaluation on NEML2's own states


def with_solver_tolerance(prog, tol: float):
    """``prog`` with every Newton's ``atol`` and ``rtol`` set to ``tol`` (the IR is immutable)."""
    import dataclasses

    from modelc import ir

    body = tuple(dataclasses.replace(s, solver=dataclasses.replace(s.solver, atol=tol, rtol=tol))
                 if isinstance(s, ir.Newton) else s for s in prog.body)
    return dataclasses.replace(prog, body=body)


def forced_inputs(input_names, ref: dict, steps, points) -> dict[str, np.ndarray]:
    """Inputs of steps ``steps`` at points ``points`` of the reference history, every (step, point)
    pair one batch entry (step-major), each starting from NEML2's converged state of the row before.
    The model is then checked one step at a time, without accumulation along the history."""
    steps, points = np.asarray(steps), np.asarray(points)
    S, P = np.meshgrid(steps, points, indexing="ij")
    S, P = S.ravel(), P.ravel()
    by_state = {k.replace("state/", "old_state/", 1): v for k, v in REF_NAMES.items()}
    out = {}
    for name in input_names:
        if name == STRAIN:
            out[name] = ref["strain"][S, P]
        elif name == TIME:
            out[name] = ref["time"][S, P]
        elif name == "old_forces/E":
            out[name] = ref["strain"][S - 1, P]
        elif name == "old_forces/t":
            out[name] = ref["time"][S - 1, P]
        elif name in by_state:
            out[name] = ref[by_state[name]][S - 1, P]
        else:
            raise AssertionError(f"input {name!r} has no reference array")
    return out


def forced_expected(output_names, ref: dict, steps, points) -> dict[str, np.ndarray]:
    """NEML2's results at the (step, point) pairs of :func:`forced_inputs`, by output name."""
    S, P = np.meshgrid(np.asarray(steps), np.asarray(points), indexing="ij")
    return {n: ref[REF_NAMES[n]][S.ravel(), P.ravel()] for n in output_names}


def per_point_rel_err(actual, expected, point_axis: int = 1) -> float:
    """max over points of (max |actual - expected| / max |expected|), both maxima over everything
    but ``point_axis``: a slow point with small flow rates is judged against its own scale."""
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    axes = tuple(i for i in range(e.ndim) if i != point_axis)
    scale = np.abs(e).max(axis=axes)
    err = np.abs(a - e).max(axis=axes)
    return float(np.max(err / np.maximum(scale, 1e-300)))


# --------------------------------------------------------------------------------------------------
# float32 tangent bounds from the formulation's conditioning

#: unit round-off of float32 (half its machine epsilon)
U32 = 2.0 ** -24
#: relative error of one computed entry of a linear solve's matrix or right-hand side, in units of U32:
#: each entry is a short CSE'd expression of the converged unknowns (a few roundings), and the
#: elimination adds a backward error of a few more (observed: the whole tangent stays within
#: 2.4 U32 cond_S |T| per step on every library model and backend, 0.75 per point)
ENTRY_ROUNDOFF = 4
#: the relative Newton tolerance is floored at this many machine epsilons (modelc.ir.RTOL_FLOOR_EPS)
RTOL_FLOOR_EPS = 32


@functools.lru_cache(maxsize=None)
def tangent_conditioning(model: str, steps: tuple, points: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(cond, T, stop)`` per batch entry of ``forced_inputs(..., steps, points)``
    (:func:`conditioning_at`, the reference's parameters)."""
    prog = program(model, True)
    ins = forced_inputs([v.name for v in prog.inputs], reference(model), steps, points)
    return conditioning_at(model, ins, reference_params(model))


def conditioning_at(model: str, ins: dict, params: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(cond, T, stop)`` per batch entry of the inputs ``ins`` (parameters ``params``, each a number
    or one value per entry): Skeel's condition number of the linear solves the tangent goes through
    (the implicit-function theorem's ``dR/du``; the largest over the program's solves, 1 for a
    program without any), the float64 tangent d S / d E ``(batch, 6, 6)``, and how far the tangent
    can move (max norm) where Newton stops as far from its root as float32's stopping test allows:
    each residual in turn put at the edge of its test (``RTOL_FLOOR_EPS`` machine epsilons of its
    scale, either sign; ``interpret(stop_rows=...)``), the largest move per residual, summed over
    the residuals (to first order the tangent's error is a sum of one term per residual). All from
    the reference interpreter (independent of every backend); the moved solves run as one batch.
    Entries where the float64 interpreter did not converge have a NaN tangent."""
    from modelc.interpret import interpret, skeel_condition

    prog = program(model, True)
    ins = {v.name: np.asarray(ins[v.name], dtype=np.float64) for v in prog.inputs}
    batch = len(ins["forces/E"])
    solves: list = []
    stops: list = []
    _, der, status = interpret(prog, ins, params, solves=solves, stops=stops)
    ok = np.asarray(status.get("converged", np.ones(batch, bool)), bool)
    cond = np.ones(batch)
    for A, _ in solves:
        cond = np.maximum(cond, skeel_condition(A))
    T = np.asarray(der[(STRESS, STRAIN)], dtype=np.float64).reshape(batch, 6, 6)
    T[~ok] = np.nan
    n = max((J.shape[-1] for _, J, _ in stops), default=0)
    if n == 0:
        return cond, T, np.zeros(batch)
    copies = 2 * n  # (row, sign) pairs, row-major
    rep = {k: np.concatenate([v] * copies) for k, v in ins.items()}
    prep = {k: np.concatenate([np.asarray(v)] * copies) if np.ndim(v) else v for k, v in params.items()}
    rows = np.repeat(np.arange(copies) // 2, batch)
    slack = np.repeat(np.tile([1.0, -1.0], n), batch) * RTOL_FLOOR_EPS * 2 * U32
    _, d, _ = interpret(prog, rep, prep, stop_slack=slack, stop_rows=rows)
    moved = np.asarray(d[(STRESS, STRAIN)], dtype=np.float64).reshape(n, 2, batch, 6, 6)
    stop = np.abs(moved - T).max(axis=(3, 4)).max(axis=1).sum(axis=0)
    return cond, T, stop


def float32_tangent_bound(model: str, steps, points, results: int = 1, reference_tol: float = 0.0) -> np.ndarray:
    """Per batch entry, how far a float32 tangent may lie from the exact one (``results=1``) or two
    float32 tangents from each other (``results=2``), derived from the formulation's conditioning.

    Two parts. (1) Round-off in the solve: the tangent comes from ``dR/du X = -dR/dE`` (then a chain
    rule); if every entry of the matrix and the right-hand side carries a relative error ``e``
    (round-off in computing it, and the backward error of the elimination), the solution moves by
    ``|dX| <= e |A^-1| (|A| |X| + |B|) <= 2 e cond_S(A) |X|`` to first order (Higham, Accuracy and
    Stability of Numerical Algorithms, Thm. 7.4), with cond_S Skeel's condition number (invariant
    to the units of rows and unknowns); ``e = ENTRY_ROUNDOFF * U32``. (2) Where Newton stops: a
    float32 Newton stops once its residual is within ``RTOL_FLOOR_EPS`` machine epsilons of its
    terms, so the unknowns may sit ``J^-1 r`` from the root with ``|r_k| <= rtol scale_k``, and the
    tangent is evaluated there; the interpreter moves the solution by that for each residual ``k``
    in turn and measures the tangent's change (:func:`conditioning_at`). Each result may err by
    both parts, two results by twice that, plus ``reference_tol * max|T|`` when the other side is a
    reference with its own error (NEML2).
    A point next to the elastic/plastic switch of a Fischer-Burmeister complementarity can have
    cond_S ~ 1e4-1e5: there float32 tangents legitimately differ by 1e-4-1e-3 of their size."""
    cond, T, stop = tangent_conditioning(model, tuple(int(s) for s in steps), tuple(int(p) for p in points))
    assert np.isfinite(T).all(), f"{model}: the float64 interpreter did not converge"
    return conditioning_bound(cond, T, stop, results) + reference_tol * np.abs(T).max(axis=(1, 2))


def conditioning_bound(cond, T, stop, results: int = 1) -> np.ndarray:
    """:func:`float32_tangent_bound`'s two parts from :func:`conditioning_at`'s ``(cond, T, stop)``."""
    return results * (2 * ENTRY_ROUNDOFF * U32 * cond * np.abs(T).max(axis=(1, 2)) + stop)


def assert_tangent_within(got, expected, bound: np.ndarray, what: str) -> None:
    """Every batch entry of ``got`` (batch, 6, 6) within ``bound`` (batch,) of ``expected``, max norm."""
    got = np.asarray(got, dtype=np.float64).reshape(len(bound), -1)
    err = np.abs(got - np.asarray(expected, dtype=np.float64).reshape(len(bound), -1)).max(axis=1)
    k = int(np.argmax(err / bound))
    assert np.all(err <= bound), (f"{what}: tangent differs by {err[k]:.3e} at batch entry {k}, above its "
                                  f"conditioning bound {bound[k]:.3e}")


# --------------------------------------------------------------------------------------------------
# the compiled path (modelc.load -> generated module -> CompiledModel)


@functools.lru_cache(maxsize=None)
def compiled_module(model: str):
    """The generated module of library model ``model`` (compiled once per process, then cached)."""
    import modelc

    return modelc.load(SPEC, model)


def device_for(backend: str) -> str:
    """Where a backend runs in the tests: Triton on the GPU when there is one, else (under the
    interpreter) and for the other backends the CPU."""
    import torch

    return "cuda" if backend == "triton" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") \
        and torch.cuda.is_available() else "cpu"


def compiled(model: str, backend: str, dtype):
    """A runnable model; Triton runs on the GPU when there is one, else under the interpreter."""
    return compiled_module(model).Model(dtype=dtype, backend=backend, device=device_for(backend))


def call_compiled(model_obj, inputs: dict[str, np.ndarray], derivatives: bool = True, params=None):
    """One call of a compiled model on numpy inputs: ``(outputs, d S / d E or None, status)``, all
    numpy float64 (status: converged, iterations)."""
    import torch

    dev = model_obj.device
    ins = {k: torch.as_tensor(np.asarray(v), dtype=model_obj.dtype, device=dev) for k, v in inputs.items()}
    params = {k: torch.as_tensor(v, dtype=model_obj.dtype, device=dev) for k, v in (params or {}).items()}
    r = model_obj(ins, derivatives=derivatives, **params)

    def host(x):
        return x.detach().cpu().to(torch.float64).numpy().copy()

    outs = {v.name: host(r[v.name]) for v in model_obj.OUTPUTS}
    tan = None
    if derivatives:
        t = r.jacobian[STRESS, STRAIN]
        t = getattr(t, "tensor", t)
        tan = host(t).reshape(-1, 6, 6)
    status = {}
    if r.status is not None:
        status = {"converged": r.status.converged.cpu().numpy().copy(),
                  "iterations": r.status.iterations.cpu().numpy().copy()}
    return outs, tan, explicit_status(status, outs[STRESS].shape[0])


# --------------------------------------------------------------------------------------------------
# points on both sides of the elastic/plastic switch


def lame(E: float, nu: float) -> tuple[float, float, float]:
    """(lambda, mu, bulk modulus)."""
    lam = E * nu / ((1 + nu) * (1 - 2 * nu))
    mu = E / (2 * (1 + nu))
    return lam, mu, lam + 2 * mu / 3


I6 = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])


def dev(a: np.ndarray) -> np.ndarray:
    return a - a[..., :3].mean(axis=-1, keepdims=True) * I6


def von_mises(a: np.ndarray) -> np.ndarray:
    d = dev(a)
    return np.sqrt(1.5 * np.sum(d * d, axis=-1))


def yield_radius(model: str, p: dict[str, float], ep) -> np.ndarray:
    """sigma_y + k(ep) of the library's hardening laws."""
    ep = np.asarray(ep, dtype=np.float64)
    k = {"j2_linear_iso": lambda: p["K"] * ep, "perzyna_iso": lambda: p["K"] * ep,
         "j2_voce_af": lambda: p["R"] * (1 - np.exp(-p["d"] * ep)),
         "chaboche2_coupled": lambda: p["R"] * (1 - np.exp(-p["d"] * ep))}.get(base_name(model), lambda: 0 * ep)()
    return p["sigma_y"] + k


def switch_points(model: str, ratios, rng, old_rows=((24, 1), (60, 3))):
    """Step inputs whose trial (elastic predictor) von Mises overstress is ``ratio`` times the current
    yield radius, for each ratio, from a virgin state and from NEML2's converged states at
    ``old_rows`` ((step, point) pairs of the reference): random deviatoric directions and pressures.

    Returns ``(state_old, strain_new, ratio)``: state by output name, (batch, ...)."""
    ref = reference(model)
    p = reference_params(model)
    _, mu, kb = lame(p["E"], p["nu"])
    bases = [{k: np.zeros_like(v[0, 0]) for k, v in
              ((k, ref[r]) for k, r in REF_NAMES.items() if r in ref)}]
    for s, q in old_rows:
        bases.append({k: ref[r][s, q] for k, r in REF_NAMES.items() if r in ref})
    states, strains, rs = [], [], []
    for base in bases:
        ep = base.get("state/internal/ep", 0.0)
        X = base.get("state/internal/X", np.zeros(6))
        Ep = base.get("state/internal/Ep", np.zeros(6))
        radius = float(yield_radius(model, p, ep))
        for ratio in ratios:
            u = dev(rng.standard_normal(6))
            u /= np.sqrt(1.5 * u @ u)  # von_mises(u) = 1
            pressure = rng.uniform(-200.0, 200.0)
            sigma_trial = X + ratio * radius * u + pressure * I6
            strain = Ep + dev(sigma_trial) / (2 * mu) + sigma_trial[:3].sum() / (9 * kb) * I6
            states.append(base)
            strains.append(strain)
            rs.append(ratio)
    state = {k: np.stack([s[k] for s in states]) for k in states[0]}
    return state, np.stack(strains), np.asarray(rs)
