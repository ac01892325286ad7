"""Wiring mistakes caught when a spec is checked (not when the model runs): a forgotten ``keep`` for
a state variable whose old value is read, a state variable consumed but never produced, and a model
listed in ``compose`` that belongs in an implicit model's ``uses`` (a dependency cycle). Each is a
CompositionError naming the composition's file and line and a hint with the fix."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from modelc.cli import main
from modelc.driver import lower_model
from modelc.errors import CompositionError
from modelc.frontend import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "frontend"))
from fe_util import write  # noqa: E402

MODELS = """
models:
  hardening:
    parameters: {H: {default: 10.0}}
    inputs: {ep: {var: state/internal/ep}}
    outputs: {k: {var: state/internal/k}}
    equations: {k: H*ep}
  flow:
    inputs: {e: {var: forces/E}, ep_n: {var: old_state/internal/ep}}
    outputs: {ep: {var: state/internal/ep}}
    equations: {ep: ep_n + 0.1*e}
  flow_implicit:
    inputs: {e: {var: forces/E}, k: {var: state/internal/k}}
    implicit:
      unknowns: {ep: {var: state/internal/ep}}
      residuals: {ep: ep - old(ep) - 0.1*(e - k)}
  flow_uses:
    inputs: {e: {var: forces/E}, k: {var: state/internal/k}}
    implicit:
      unknowns: {ep: {var: state/internal/ep}}
      residuals: {ep: ep - old(ep) - 0.1*(e - k)}
      uses: [hardening]
"""


def _check(tmp_path, compose: str, name: str):
    path = write(tmp_path, MODELS + "compose:\n" + compose)
    return lower_model(load_spec(path), name)


def test_a_forgotten_keep_is_located_with_the_fix(tmp_path):
    with pytest.raises(CompositionError) as info:
        _check(tmp_path, "  plastic: {models: [flow, hardening]}\n", "plastic")
    msg = str(info.value)
    assert "s.yaml:" in msg and "model 'flow' reads 'old_state/internal/ep'" in msg
    assert "hint: add it to the composition's keep: [state/internal/ep]" in msg
    done = _check(tmp_path, "  plastic: {models: [flow, hardening], keep: [state/internal/ep]}\n", "plastic")
    assert "state/internal/ep" in [v.name for v in done.model.outputs]


def test_a_state_variable_consumed_but_never_produced(tmp_path):
    with pytest.raises(CompositionError) as info:
        _check(tmp_path, "  half: {models: [hardening]}\n", "half")
    msg = str(info.value)
    assert "s.yaml:" in msg and "model 'hardening' consumes 'state/internal/ep', which no model" in msg
    assert "hint: add the model that provides 'state/internal/ep'" in msg and "old_state/internal/ep" in msg


def test_a_model_in_compose_that_belongs_in_uses(tmp_path):
    with pytest.raises(CompositionError) as info:
        _check(tmp_path, "  mixed: {models: [flow_implicit, hardening]}\n", "mixed")
    msg = str(info.value)
    assert "s.yaml:" in msg and "dependency cycle" in msg
    assert "hint: model 'hardening' reads unknowns of the implicit model 'flow_implicit'" in msg
    assert "`implicit: uses: [hardening]`" in msg
    done = _check(tmp_path, "  fixed: {models: [flow_uses]}\n", "fixed")  # the fix compiles
    assert [v.name for v in done.model.outputs] == ["state/internal/ep"]


def test_modelc_check_reports_it_without_a_traceback(tmp_path, capsys):
    path = write(tmp_path, MODELS + "compose:\n  plastic: {models: [flow, hardening]}\n")
    assert main(["check", str(path)]) != 0
    err = capsys.readouterr()
    text = err.out + err.err
    assert "keep: [state/internal/ep]" in text and "Traceback" not in text
