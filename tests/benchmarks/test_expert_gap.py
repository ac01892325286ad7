"""benchmarks/expert_gap.py: modelc's bound C call and the expert's SIMD C are timed on the same
update (their outputs and tangents checked against each other first), with the call's fixed cost
taken off; a workload on which they differ is refused, and so is a size of one block or less."""
from __future__ import annotations

import pytest
import torch

from benchmarks import expert, expert_gap


def _keep_threads(fn):
    before = torch.get_num_threads()
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def test_gap_times_four_calls_per_size_and_takes_the_fixed_cost_off():
    recs = _keep_threads(lambda: expert_gap.measure(["j2_linear_iso"], [40, 72], rounds=1))
    assert [(r["size"], r["call"]) for r in recs] == [(s, c) for s in (40, 72) for c in expert_gap.CALLS]
    for r in recs:
        assert r["ns_per_point"] > 0 and r["fixed_us"] > 0 and r["kernel_ns_per_point"] >= 0
        # what is left once the fixed cost is off is at most the whole call
        assert r["kernel_ns_per_point"] * (r["size"] - 16) <= r["ns_per_point"] * r["size"] + 1e-9
    md = expert_gap.table(recs)
    assert md.count("\n") == 1 + len(recs) and "| j2_linear_iso | 40 | modelc tangent |" in md


def test_gap_refuses_an_expert_that_computes_another_update(monkeypatch):
    """The expert with another yield stress: the stress differs, so the timings would compare two
    different updates; the check says which output and by how much."""
    real = expert.expert_step
    monkeypatch.setattr(expert, "expert_step", lambda model: real(model, params={"sigma_y": 150.0}))
    with pytest.raises(RuntimeError, match=r"j2_linear_iso: modelc's .* differs from the expert's by"):
        _keep_threads(lambda: expert_gap._calls("j2_linear_iso", 64))


def test_gap_refuses_a_size_of_one_block(tmp_path, capsys):
    with pytest.raises(SystemExit):
        expert_gap.main(["--sizes", "16", "--out", str(tmp_path)])
    assert "above one block of 16 points" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
