"""benchmarks/c_ab.py: an edited C source is built and timed against the module's own, and the
report shows what the edit changed in the numbers (nothing for the same source; the stress for a
source whose 2/3 of the deviator was edited)."""
from __future__ import annotations

import torch

from benchmarks import c_ab


def test_ab_times_sources_and_reports_their_differences(tmp_path):
    import modelc
    from benchmarks import modelc_hook

    src = modelc.load(modelc_hook._LIBRARY, model="j2_perfect").Model.c_source
    assert "((real)0.6666666666666666)" in src
    same, edited = tmp_path / "same.c", tmp_path / "edited.c"
    same.write_text(src)
    edited.write_text(src.replace("((real)0.6666666666666666)", "((real)0.7)"))
    before = torch.get_num_threads()
    try:
        recs = c_ab.compare("j2_perfect", [64], ["-", str(same), str(edited)], rounds=1)
    finally:
        torch.set_num_threads(before)
    assert [r["source"] for r in recs] == ["-", str(same), str(edited)]
    assert all(r["ns_per_point"] > 0 for r in recs)
    assert recs[1]["outputs_rel"] == 0 and recs[1]["tangent_rel"] == 0
    assert recs[2]["outputs_rel"] > 1e-3
