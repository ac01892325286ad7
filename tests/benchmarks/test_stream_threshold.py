"""benchmarks/stream_threshold.py: both store kinds timed, the threshold setting restored."""
import os

import pytest

from benchmarks import stream_threshold as st
from modelc.runtime import cbuild
from rt_helpers import needs_cc


@needs_cc
def test_floor_and_model_rows_time_both_store_kinds_and_restore_the_threshold(monkeypatch, tmp_path):
    monkeypatch.setenv("MODELC_C_STREAM_BYTES", "12345")
    cbuild.stream_bytes.cache_clear()
    floor = st.floor_rows((0.5,))
    assert floor[0]["mib"] == pytest.approx(0.5, rel=1e-3)
    assert floor[0]["regular_gb_s"] > 0 and floor[0]["streaming_gb_s"] > 0
    rows = st.model_rows("j2_linear_iso", [64])
    assert rows[0]["regular_ns"] > 0 and rows[0]["streaming_ns"] > 0
    assert rows[0]["mib"] == pytest.approx(64 * 512 / 2**20)  # 14 inputs, 50 outputs (36 the tangent), float64
    assert os.environ["MODELC_C_STREAM_BYTES"] == "12345" and cbuild.stream_bytes() == 12345
    cbuild.stream_bytes.cache_clear()
