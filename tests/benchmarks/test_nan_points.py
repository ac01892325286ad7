"""benchmarks/nan_points.py: the cost of points that cannot be computed."""
from __future__ import annotations

import pytest


def test_nan_points_times_a_call_with_nan_inputs():
    """benchmarks/nan_points.py: the call with a fraction of NaN strains reports those points
    unconverged and (since points stop at a residual that is not finite) no point iterating to
    max_iter; bad arguments are a usage error."""
    from benchmarks import nan_points

    mod = nan_points._module("j2_voce_af", None)
    r = nan_points.time_calls("j2_voce_af", mod, "torch", 200, 0.05, 1)
    assert r["converged"] == pytest.approx(0.95) and r["max_iterations"] < 50 and r["ns_per_point"] > 0
    with pytest.raises(SystemExit):
        nan_points.main(["j2_voce_af", "--fraction", "2"])
