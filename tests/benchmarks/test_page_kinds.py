"""benchmarks/page_kinds.py: both kinds of pages give every route the same numbers (bit for bit between
the kinds; the model's against the hand-written update's), the huge-page routes write into 2 MiB
aligned buffers where the system grants huge pages, and a run writes its report (no timing is
asserted: speed is for the benchmark to show)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import baselines as bl  # noqa: E402
from benchmarks import page_kinds as pk  # noqa: E402
from rt_helpers import needs_cc  # noqa: E402

from modelc.runtime.bufferpool import huge_pages  # noqa: E402

pytestmark = needs_cc


def test_both_kinds_of_pages_give_the_same_numbers():
    B = 15_000  # j2_voce_af's tangent at 15,000 points: 4.3 MB, a huge-page block
    fns, bufs = pk.routes("j2_voce_af", B)
    want = bl.make_step("j2_voce_af", tangent=True)(*bufs[1])
    for route in ("plain", "bound", "expert"):
        a = [t.clone() for t in fns[f"{route}-4k"](*bufs[1], tangent=True)]
        b = fns[f"{route}-huge"](*bufs[1], tangent=True)
        for x, y, w in zip(a, b, want):
            assert torch.equal(x, y), route
            assert torch.allclose(x, w, rtol=1e-9, atol=1e-9 * float(w.abs().max())), route
        if huge_pages():
            assert b[-1].data_ptr() % (2 << 20) == 0, route  # the tangent: in the pool's huge pages
    floor = fns["floor-huge"](*bufs[0], tangent=True)
    assert [t.shape for t in floor] == [t.shape for t in want]


def test_a_run_writes_its_report(tmp_path, monkeypatch):
    if not huge_pages():
        with pytest.raises(SystemExit):
            pk.main(["--models", "j2_perfect", "--sizes", "2000", "--rounds", "2", "--out", str(tmp_path)])
        return
    path = pk.main(["--models", "j2_perfect", "--sizes", "2000", "--rounds", "2", "--fill-mb", "8",
                    "--out", str(tmp_path)])
    rec = json.loads(path.read_text())
    routes = rec["records"][0]["routes"]
    assert set(routes) == {f"{r}-{k}" for r in ("plain", "bound", "expert", "floor") for k in ("4k", "huge")}
    assert all(len(v["times_s"]) == 2 and v["ns_per_point"] > 0 for v in routes.values())
    assert routes["floor-huge"]["of_floor"] == 1.0
    assert rec["fills"][0]["mb"] == 8 and rec["fills"][0]["costs"]["huge"]["first_s"] > 0
    assert "| j2_perfect | 2000 | plain |" in path.with_suffix(".md").read_text()
