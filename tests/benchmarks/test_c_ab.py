"""benchmarks/c_ab.py: an edited C source is built and timed against the module's own, and the
report shows what the edit changed in the numbers (nothing for the same source; the stress for a
source whose 2/3 of the deviator was edited)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
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
    assert recs[1]["outputs_rel"] == 0 and recs[1]["derivatives_rel"] == 0 and recs[1]["identical"]
    assert recs[2]["outputs_rel"] > 1e-3 and not recs[2]["identical"]


def test_ab_takes_a_git_revision_and_the_jacobian_calls(tmp_path):
    """``git:HEAD`` is the committed module's source with the committed header inlined: it builds and
    runs as its own library (the include line replaced, the ABI check passes) and computes the
    model's numbers (the same as ``-`` when nothing is uncommitted); ``--derivatives total`` times
    the total call."""
    if not (c_ab.REPO / ".git").exists():
        pytest.skip("not a git checkout: git:REV sources need the repository's history")
    src = c_ab._git_source("j2_perfect_coupled", "HEAD")
    assert '#include "modelc_kernel.h"' not in src and "#define MC_KERNEL_ABI" in src
    assert "MC_INLINE void block_eval" in src
    before = torch.get_num_threads()
    try:
        recs = c_ab.compare("j2_perfect_coupled", [40], ["-", "git:HEAD"], rounds=1, derivatives="total")
    finally:
        torch.set_num_threads(before)
    assert [r["derivatives"] for r in recs] == ["total", "total"]
    assert all(r["ns_per_point"] > 0 for r in recs)
    assert recs[1]["outputs_rel"] < 1e-9 and recs[1]["derivatives_rel"] < 1e-9


def test_ab_rotates_input_sets_and_checks_its_arguments():
    """``sets=3``: each source is bound to three input sets, the calls shuffled among the sources each
    round and taking the sets in turn (the first set's results are the ones compared); bad ``sets`` or
    ``ballast_mb`` are a clear error."""
    calls = []
    times = c_ab.shuffled_calls([[lambda k=k: calls.append(("a", k)) for k in range(3)],
                                 [lambda k=k: calls.append(("b", k)) for k in range(3)]], size=10, rounds=6)
    assert [len(t) for t in times] == [6, 6] and min(min(t) for t in times) > 0
    assert [k for _, k in calls] == [0, 1, 2] * 4  # consecutive calls on consecutive sets
    assert sorted(s for s, _ in calls) == ["a"] * 6 + ["b"] * 6
    assert len({tuple(s for s, _ in calls[2 * r:2 * r + 2]) for r in range(6)}) == 2  # both orders occur
    before = torch.get_num_threads()
    try:
        recs = c_ab.compare("j2_perfect", [48], ["-", "-"], rounds=1, sets=3, ballast_mb=1)
        with pytest.raises(ValueError, match="sets must be at least 1"):
            c_ab.compare("j2_perfect", [48], ["-"], sets=0)
    finally:
        torch.set_num_threads(before)
    assert recs[1]["identical"] and all(r["ns_per_point"] > 0 and r["median_ns_per_point"] >= r["ns_per_point"]
                                        for r in recs)
    with pytest.raises(SystemExit):
        c_ab.main(["j2_perfect", "-", "--ballast", "-1"])


def test_ab_times_plain_calls_and_builds_fresh(tmp_path, monkeypatch, capsys):
    """``plain``: the public call, a fresh result each call, timed like the bound one; ``--fresh``: the
    module and the libraries are built in a new cache folder, not the one the environment names."""
    before = torch.get_num_threads()
    try:
        recs = c_ab.compare("j2_perfect", [48], ["-", "-"], rounds=1, plain=True)
        bound = c_ab.compare("j2_perfect", [48], ["-"], rounds=1)
        monkeypatch.setenv("MODELC_CACHE_DIR", str(tmp_path / "kept"))
        c_ab.main(["j2_perfect", "-", "--sizes", "32", "--fresh"])
    finally:
        torch.set_num_threads(before)
    assert recs[1]["identical"] and all(r["ns_per_point"] > 0 for r in recs + bound)
    fresh = os.environ["MODELC_CACHE_DIR"]
    assert fresh != str(tmp_path / "kept") and "modelc-c-ab-" in fresh
    assert any(p.suffix == ".so" for p in (Path(fresh) / "c").iterdir())
    assert "| j2_perfect | tangent | 32 | - |" in capsys.readouterr().out
