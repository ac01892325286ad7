"""examples/calibrate_j2_voce_af.py on a short history: L-BFGS from a factor 1.5-3 away recovers
every parameter of both samples (a population fitted in one batched history) within 1%, and draws
the data-vs-fit plot."""
from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calibrate_j2_voce_af.py"


def test_calibration_example_recovers_the_parameters(tmp_path):
    spec = importlib.util.spec_from_file_location("calibrate_j2_voce_af", EXAMPLE)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    result = ex.calibrate(steps=12, noise=0.0, iterations=150, verbose=False)
    for name in ex.NAMES:
        start = abs(ex.START[name] / min(ex.TRUE[name]) - 1)
        assert start > 0.15, name  # it really starts far away
        assert float(result["errors"][name].max()) < 0.01, (name, result["fitted"][name])
    assert result["trace"][-1] < 1e-6 * result["trace"][0]
    png = ex.plot(result, tmp_path / "fit.png")
    assert png.stat().st_size > 10_000
