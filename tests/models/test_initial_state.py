"""Declared initial state (``initial:`` on outputs and unknowns): the front end's located errors, the
IR, ``Model.initial_values``/``initial_state`` and the driver's row 0, against closed forms.

The oracle model: a porosity that grows linearly in time from ``phi0`` (phi(t) = phi0 + k t, an
explicit and an implicit twin) weakening a linear elastic stress, S = (1 - phi) E eps."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import modelc
from modelc.errors import CompositionError, InputError, SpecError
from modelc.frontend import load_spec
from modelc.runtime.driver import run_history
from modelc.runtime.histories import uniaxial_strain_history

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compiler" / "frontend"))
from fe_util import write  # noqa: E402

SPEC = """
models:
  porosity:
    parameters: {phi0: {default: 0.01}, k: {default: 0.5}, X0: {type: SR2, default: [1, 2, 3, 0, 0, 0]}}
    inputs:
      t: {var: forces/t}
      t_n: {var: old_forces/t}
      phi_n: {var: old_state/internal/phi}
      X_n: {var: old_state/internal/X, type: SR2}
    outputs:
      phi: {var: state/internal/phi, initial: phi0}
      X: {var: state/internal/X, type: SR2, initial: "X0 + 2*phi0*I2"}
    equations:
      phi: phi_n + k*(t - t_n)
      X: X_n
  porosity_implicit:
    parameters: {phi0: {default: 0.01}, k: {default: 0.5}}
    inputs: {t: {var: forces/t}, t_n: {var: old_forces/t}}
    implicit:
      unknowns: {phi: {var: state/internal/phi, initial: phi0}}
      residuals: {phi: phi - old(phi) - k*(t - t_n)}
  weakened:
    parameters: {E: {default: 1000.0}}
    inputs: {eps: {var: forces/E, type: SR2}, phi: {var: state/internal/phi}}
    outputs: {S: {var: state/S, type: SR2}}
    equations: {S: (1 - phi)*E*eps}
compose:
  damaged: {models: [porosity, weakened], keep: [state/internal/phi]}
  damaged_implicit: {models: [porosity_implicit, weakened], keep: [state/internal/phi]}
"""


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory):
    return write(tmp_path_factory.mktemp("initial"), SPEC)


def _error(tmp_path, outputs: str, extra_inputs: str = "") -> SpecError:
    text = f"""
    models:
      m:
        parameters: {{a: {{default: 2.0}}}}
        inputs: {{t: {{var: forces/t}}{extra_inputs}}}
        outputs: {{{outputs}}}
        equations: {{y: 2*t}}
    """
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    return info.value


@pytest.mark.parametrize("outputs, extra, message, hint", [
    ("y: {var: state/y, initial: 2*t}", "", "may use numbers and parameters only, not forces/t",
     "evaluated once"),
    ("y: {var: state/y, type: SR2, initial: a}", "", "must be a SR2, but this expression is a Scalar",
     "0.01*I2"),
    ("y: {var: forces/y, initial: a}", "", "is not a state variable", "state/y"),
    ("y: {var: state/y, initial: b}", "", "undefined name 'b'", ""),
    ("y: {var: state/y}", ", u: {var: old_state/u, initial: 1}", "only a model's outputs and unknowns",
     "where the variable is provided"),
    ("y: {var: state/y, initial: [1, 2]}", "", "must be an expression", ""),
])
def test_bad_initial_values_are_located_errors(tmp_path, outputs, extra, message, hint):
    err = _error(tmp_path, outputs, extra)
    assert message in str(err), str(err)
    assert err.loc is not None and err.loc.file.endswith("s.yaml") and err.loc.line in (4, 5)
    assert hint in (err.hint or "")


def test_the_ir_carries_the_initial_values_to_the_program(spec_path):
    from modelc.driver import lower_model

    spec = load_spec(spec_path)
    done = lower_model(spec, "damaged", verify=True)
    assert [eq.var.name for eq in done.model.initial] == ["state/internal/phi", "state/internal/X"]
    assert [eq.var.name for eq in done.value.initial] == ["state/internal/phi", "state/internal/X"]
    assert "init state/internal/phi = ($phi0)" in str(done.value)
    # without keep the porosity would be consumed inside: a located error says to keep it
    spec2 = load_spec(write(spec_path.parent, SPEC.replace(", keep: [state/internal/phi]}", "}", 1), "s2.yaml"))
    with pytest.raises(CompositionError, match=r"s2.yaml:27:3\).*reads 'old_state/internal/phi'.*\n  hint: add it "
                                               r"to the composition's keep: \[state/internal/phi\]"):
        lower_model(spec2, "damaged")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_initial_values_follow_the_parameters(spec_path, dtype):
    model = modelc.load(spec_path, "damaged").Model(dtype=dtype, backend="torch")
    rng = np.random.default_rng()
    phi0 = rng.uniform(0.01, 0.2)
    model.set_parameters(phi0=phi0)
    vals = model.initial_values(3)
    assert vals["state/internal/phi"].dtype == dtype and vals["state/internal/phi"].shape == (3,)
    np.testing.assert_allclose(vals["state/internal/phi"].numpy(), phi0, rtol=1e-6)
    np.testing.assert_allclose(vals["state/internal/X"].numpy(), [[1 + 2 * phi0, 2 + 2 * phi0, 3 + 2 * phi0, 0, 0, 0]] * 3,
                               rtol=1e-6)
    per_point = rng.uniform(0.0, 0.3, 4)
    got = model.initial_values((2, 2), phi0=torch.tensor(per_point, dtype=dtype).reshape(2, 2))
    np.testing.assert_allclose(got["state/internal/phi"].numpy().ravel(), per_point, rtol=1e-6)
    state = model.initial_state(2)
    np.testing.assert_allclose(state["old_state/internal/phi"].numpy(), phi0, rtol=1e-6)
    assert float(state["forces/E"].abs().sum()) == 0
    state = model.initial_state(2, state={"state/internal/phi": [0.3, 0.4], "old_state/internal/X": 0.0})
    np.testing.assert_allclose(state["old_state/internal/phi"].numpy(), [0.3, 0.4], rtol=1e-6)
    assert float(state["old_state/internal/X"].abs().sum()) == 0
    with pytest.raises(InputError, match="not one of its state variables"):
        model.initial_state(2, state={"state/S": 1.0})
    with pytest.raises(InputError, match="does not broadcast"):
        model.initial_state(2, state={"state/internal/phi": [1.0, 2.0, 3.0]})


@pytest.mark.parametrize("name", ["damaged", "damaged_implicit"])
def test_the_driver_starts_from_the_declared_and_the_given_initial_state(spec_path, name):
    model = modelc.load(spec_path, name).Model(backend="torch")
    rng = np.random.default_rng()
    hist = uniaxial_strain_history(rng.uniform(0.001, 0.01, 3), rng.uniform(0.5, 2.0, 3), steps=8)
    phi0 = rng.uniform(0.01, 0.1, 3)
    res = run_history(model, hist, params={"phi0": phi0}, progress=False)
    phi = phi0 + 0.5 * hist["time"]  # the closed form, from the per-point phi0
    np.testing.assert_allclose(res["state/internal/phi"], phi, rtol=1e-12)
    np.testing.assert_allclose(res["stress"][1:], ((1 - phi)[..., None] * 1000.0 * hist["strain"])[1:], rtol=1e-12)
    # an explicit initial state per point wins over the declared one
    given = rng.uniform(0.0, 0.2, 3)
    res = run_history(model, hist, initial_state={"state/internal/phi": given}, progress=False)
    np.testing.assert_allclose(res["state/internal/phi"], given + 0.5 * hist["time"], rtol=1e-12)
    with pytest.raises(InputError, match="did you mean 'state/internal/phi'"):
        run_history(model, hist, initial_state={"state/internal/ph": given}, progress=False)
    with pytest.raises(InputError, match="one value or one per point"):
        run_history(model, hist, initial_state={"state/internal/phi": [1.0, 2.0]}, progress=False)


def test_a_model_without_initial_values_starts_at_zero(spec_path):
    model = modelc.load(spec_path, "weakened").Model(backend="torch")
    assert model.INITIAL == () and model.initial_values(4) == {}
    assert "INITIAL" not in Path(sys.modules[type(model).__module__].__file__).read_text()
