"""Model.initial_state / Model.advance (stepping a compiled model by hand) against run_history, and
the runnable Python examples of docs/integration.md."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import modelc
from modelc.errors import InputError
from modelc.runtime.driver import run_history
from modelc.runtime.histories import uniaxial_strain_history

DOC = Path(__file__).resolve().parents[2] / "docs" / "integration.md"


@pytest.mark.parametrize("name", ["perzyna_iso", "j2_voce_af"])
def test_manual_stepping_matches_the_driver(name):
    model = modelc.load(name).Model()
    rng = np.random.default_rng()
    hist = uniaxial_strain_history(rng.uniform(0.003, 0.01, 3), rng.uniform(0.5, 5.0, 3), steps=16)
    hist["strain"][1:, :, 3:] += rng.normal(scale=1e-3, size=(16, 3, 3))
    ref = run_history(model, hist, progress=False)
    state = model.initial_state(3)
    assert set(state) == set(model.input_axis.variable_names)
    assert all(float(v.abs().sum()) == 0 for v in state.values())
    for n in range(1, 17):
        state["forces/E"] = torch.as_tensor(hist["strain"][n])
        state["forces/t"] = torch.as_tensor(hist["time"][n])
        before = {k: v.clone() for k, v in state.items()}
        out = model(state)
        nxt = model.advance(state, out)
        for k, v in before.items():  # advance builds new tensors, never writes into the old ones
            assert torch.equal(state[k], v)
        state = nxt
        np.testing.assert_allclose(out["state/S"].numpy(), ref["stress"][n], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(state["old_state/internal/ep"].numpy(), ref["equivalent_plastic_strain"][-1],
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(state["old_forces/t"].numpy(), hist["time"][-1])
    assert model.initial_state((2, 5))["forces/E"].shape == (2, 5, 6)


def _blocks():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.mark.parametrize("i", range(4))
def test_integration_page_python_examples_run(i, tmp_path, monkeypatch, capsys):
    blocks = _blocks()
    assert len(blocks) == 4, "docs/integration.md: update this test's count with the page"
    if "torchfem" in blocks[i]:
        pytest.importorskip("torchfem")
    monkeypatch.chdir(tmp_path)
    old = torch.get_default_dtype()
    try:
        exec(compile(blocks[i], f"{DOC.name}[python block {i}]", "exec"), {})
    finally:
        torch.set_default_dtype(old)
    text = capsys.readouterr().out
    if "run_history" in blocks[i]:
        assert "all 2 point(s) converged at all 80 step(s)" in text
    if "library()" in blocks[i]:
        assert "'j2_linear_iso'" in text


def test_load_by_unknown_name_is_a_clear_error():
    with pytest.raises(InputError, match="no bundled model named 'j2_nosuch'.*j2_linear_iso"):
        modelc.load("j2_nosuch")
    lib = modelc.library()
    assert {"elastic", "j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso"} <= set(lib)
    assert lib["perzyna_iso"].kind == "composition" and "Perzyna" in lib["perzyna_iso"].doc
    assert "elasticity" in modelc.library(building_blocks=True)
