"""benchmarks/chaboche.py: the one-step problems it times, its check against NEML2's history, and its
report (the NEML2 side needs the NEML2 venv: here its absence is reported, not hidden)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import chaboche as ch  # noqa: E402


def test_pool_is_every_step_of_the_reference_from_the_state_before():
    ref, p = ch.reference(), ch.pool()
    assert len(p["t"]) == 800 and p["strain"].shape == (800, 6)
    k = 3 * 8 + 5  # step 4, point 5 (step-major)
    assert np.array_equal(p["strain"][k], ref["strain"][4, 5]) and p["t~1"][k] == ref["time"][3, 5]
    assert np.array_equal(p["back_stress_2~1"][k], ref["back_stress_2"][3, 5])
    assert np.array_equal(p["expect/stress"][k], ref["stress"][4, 5])
    have = ~np.isnan(p["expect/tangent"][:, 0, 0])
    assert have.sum() == ref["tangent"].shape[0] * 8  # every recorded tangent, nothing else
    b = ch.tile(p, 1000, torch.float64, "cpu")
    assert b["strain"].shape == (1000, 6) and torch.equal(b["strain"][800], b["strain"][0])


def test_errors_compare_with_the_history():
    b = ch.tile(ch.pool(), 800, torch.float64, "cpu")
    tangent = torch.nan_to_num(b["expect/tangent"], nan=7.0)
    e = ch.errors(b["expect/stress"], tangent, b)
    assert e["stress"] == 0 and e["tangent"] == 0 and e["tangents_checked"] == 56
    stress = b["expect/stress"].clone()
    stress[10, 2] += 1e-6 * b["expect/stress"].abs().max()
    assert abs(ch.errors(stress, tangent, b)["stress"] - 1e-6) < 1e-12


def test_modelc_is_checked_and_timed_and_a_missing_neml2_is_reported(tmp_path):
    md = ch.main(["--sizes", "200", "--repeats", "1", "--neml2-python", str(tmp_path / "no-python"),
                  "--out", str(tmp_path)])
    result = json.loads(md.with_suffix(".json").read_text())
    (rec,) = result["records"]
    assert rec["impl"] == "modelc-c"
    # the compiled model against NEML2's own history (float64, NEML2's solver at 1e-12)
    assert rec["stress"] < 1e-9 and rec["tangent"] < 1e-6 and rec["tangents_checked"] > 0
    assert rec["converged"] == 1.0 and rec["call_s"] > 0 and rec["bound_s"] > 0
    text = md.read_text()
    assert "no NEML2 Python at" in result["neml2"]["error"] and "NEML2: no NEML2 Python at" in text
    assert "| 2e+02 | modelc-c (bound) |" in text and "| 2e+02 | modelc-c |" in text
