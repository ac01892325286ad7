"""benchmarks/history_grad.py: both routes compute the calibration example's gradient (checked
against each other inside ``measure``: a wrong adjoint fails the run), and a run writes its report
(no timing is asserted)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import history_grad as hg  # noqa: E402
from rt_helpers import needs_cc  # noqa: E402


@needs_cc
def test_a_run_writes_its_report(tmp_path):
    path = hg.main(["--steps", "15", "--samples", "2", "--rounds", "1", "--out", str(tmp_path)])
    rec = json.loads(path.read_text())["records"][0]
    assert rec["steps"] == 15 and rec["points"] == 8
    assert set(rec["seconds"]) == {"one-node", "per-step"}
    assert all(set(r) == {"forward", "backward", "sensitivities"} for r in rec["seconds"].values())
    assert all(v > 0 for r in rec["seconds"].values() for v in r.values())
    assert "| 15 | 8 |" in path.with_suffix(".md").read_text()
