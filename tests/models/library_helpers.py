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
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "reference" / "neml2"
SPEC = REPO / "spec" / "library.yaml"

MODELS = ("elastic", "j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso")
RATE_INDEPENDENT = ("j2_perfect", "j2_linear_iso", "j2_voce_af")
STRESS, STRAIN, TIME = "state/S", "forces/E", "forces/t"

#: output variable -> the name of the reference array holding it
REF_NAMES = {
    "state/S": "stress",
    "state/internal/Ep": "plastic_strain",
    "state/internal/ep": "equivalent_plastic_strain",
    "state/internal/X": "back_stress",
    "state/internal/gamma_rate": "flow_rate",
}


# --------------------------------------------------------------------------------------------------
# reference data


@functools.lru_cache(maxsize=None)
def _load_reference(model: str) -> dict[str, np.ndarray] | None:
    path = REFERENCE / f"{model}__uniaxial.npz"
    if not path.is_file():
        return None
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def reference(model: str) -> dict[str, np.ndarray]:
    """The NEML2 reference arrays of ``model`` (skips the test when the data is not there)."""
    ref = _load_reference(model)
    if ref is None:
        pytest.skip(f"NEML2 reference data not found under {REFERENCE}")
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
    """load -> compose -> differentiate -> lower -> cse of library model ``model``."""
    from modelc.passes.compose import compose_spec_model
    from modelc.passes.cse import cse
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower

    m = differentiate(compose_spec_model(library_spec(), model))
    return cse(lower(m, derivatives=derivatives))


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


def one_step(prog, params, strain_new, strain_old, t_new, t_old, state_old):
    """``interpret`` one step: ``(results, derivatives, status)``."""
    from modelc.interpret import interpret

    return interpret(prog, step_inputs(prog, strain_new, strain_old, t_new, t_old, state_old), params)


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
