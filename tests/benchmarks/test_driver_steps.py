"""benchmarks/driver_steps.py: its history is the reference uniaxial cycle (the NEML2 workload's, at
its own step count), its routes run the same history (the two driver routes give identical arrays,
checked inside ``measure``; the hand-written loop's stress agrees with the driver's), and a run
writes its report (no timing is asserted: speed is for the benchmark to show)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import baselines as bl  # noqa: E402
from benchmarks import driver_steps as ds  # noqa: E402
from benchmarks import workload as wl  # noqa: E402
from rt_helpers import needs_cc  # noqa: E402


def test_history_is_the_reference_cycle_resampled():
    strain, time = wl.uniaxial_history()
    h = ds.history(8, wl.STEPS + 1)
    np.testing.assert_allclose(h["strain"], strain.numpy(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(h["time"], time.numpy(), rtol=1e-15)
    big = ds.history(19, 41)  # tiled over the batch, resampled in time
    assert big["strain"].shape == (41, 19, 6) and big["time"].shape == (41, 19)
    np.testing.assert_array_equal(big["strain"][:, 8:16], big["strain"][:, :8])
    assert abs(big["strain"][:, 3, 0]).max() == pytest.approx(wl.AMPLITUDES[3])


@needs_cc
def test_the_driver_and_the_hand_written_loop_run_the_same_history():
    from modelc.runtime.driver import run_history

    from benchmarks import modelc_hook

    h = ds.history(5, 60)
    m = modelc_hook._model("j2_linear_iso", "c", torch.float64, torch.device("cpu"))
    ours = run_history(m, h, progress=False)
    hand = bl.run_history("j2_linear_iso", torch.as_tensor(h["strain"]), torch.as_tensor(h["time"]),
                          bl.params_for("j2_linear_iso"))
    assert np.abs(ours["stress"]).max() > 100  # plastic
    np.testing.assert_allclose(ours["stress"], hand[bl.STRESS].numpy(), rtol=1e-9, atol=1e-6)


@needs_cc
def test_a_run_writes_its_report(tmp_path):
    path = ds.main(["--models", "j2_perfect", "--batches", "3", "--steps", "12", "--rounds", "1",
                    "--no-compile", "--out", str(tmp_path), "--tag", "t"])
    rec = json.loads(path.read_text())["records"][0]
    assert rec["model"] == "j2_perfect" and rec["batch"] == 3 and rec["steps"] == 12
    assert set(rec["us_per_step"]) == {"in-place", "step-loop", "hand-eager"}
    assert all(v > 0 for v in rec["us_per_step"].values())
    md = path.with_suffix(".md").read_text()
    assert "| j2_perfect | 3 | 12 |" in md and "step loop / in place" in md


@needs_cc
def test_a_stress_controlled_run_writes_its_report(tmp_path):
    h = ds.stress_history("j2_linear_iso", 4, 33)  # (32 steps: the peaks on a row)
    assert h["stress"].shape == (33, 4, 6) and h["control"].all()
    np.testing.assert_allclose(np.abs(h["stress"][..., 0]).max(axis=0), [50.0, 83.33333333, 116.66666667, 150.0])
    assert np.abs(ds.stress_history("j2_perfect", 3, 30)["stress"]).max() < 100.0  # below its limit load
    path = ds.main(["--models", "j2_linear_iso", "--batches", "3", "--steps", "12", "--rounds", "1",
                    "--control", "stress", "--out", str(tmp_path)])
    assert path.name.endswith("-cpu-driver-steps-stress.json")
    rec = json.loads(path.read_text())["records"][0]
    assert rec["control"] == "stress" and rec["all_converged"]
    assert set(rec["us_per_step"]) == {"in-place", "step-loop"}
