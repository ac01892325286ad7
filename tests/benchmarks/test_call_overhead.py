"""benchmarks/call_overhead.py: its routes (regular call, call and reads by name, out=, bound call, kernel alone) do the
same work (identical outputs and tangent), the bound call takes the fast path, and a run writes its
report (no timing is asserted: speed is for the benchmark to show)."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import call_overhead as co  # noqa: E402
from rt_helpers import needs_cc  # noqa: E402

from modelc.runtime import LabeledAxis  # noqa: E402

pytestmark = needs_cc


@pytest.mark.parametrize("model", ["j2_linear_iso", "j2_voce_af"])
def test_routes_do_the_same_work(model):
    fns = co.routes(model, 37, torch.device("cpu"))
    assert fns["bound"].fast
    got = {k: tuple(t.clone() for t in fn()) for k, fn in fns.items()}
    Y, J = got["call"]
    assert Y.shape == (37, Y.shape[1]) and J.shape[0] == 37 and bool(torch.isfinite(J).all())
    for k in ("out", "bound", "kernel"):
        assert torch.equal(got[k][0].reshape(Y.shape), Y), k
        assert torch.equal(got[k][1].reshape(J.shape), J), k
    # the reads by name: the stress columns of Y and the tangent (the whole J of the tangent variant)
    S, T = got["read"]
    outputs = importlib.import_module(f"modelc.generated.{model}").Model.OUTPUTS
    start, stop = LabeledAxis.from_variables([(v.name, v.type) for v in outputs]).span("state/S")
    assert torch.equal(S, Y[:, start:stop]) and torch.equal(T, J)


def test_run_writes_a_report(tmp_path):
    path = co.main(["--models", "j2_perfect", "--sizes", "16", "--calls", "3", "--rounds", "1", "--out", str(tmp_path)])
    rec = json.loads(path.read_text())["records"][0]
    assert set(rec["us_per_call"]) == set(co.ROUTES) and all(v > 0 for v in rec["us_per_call"].values())
    assert rec["bound_fast"] and path.with_suffix(".md").read_text().count("| j2_perfect | 16 |") == 1
