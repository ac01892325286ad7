"""benchmarks/gpu_library.py: what it measures and reports, run here on the CPU under the Triton
interpreter (the GPU run is a GPU session's; on the CPU its timer is a wall clock)."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import gpu_library as gl  # noqa: E402
from benchmarks.gpu_kernels import bytes_per_point  # noqa: E402
from modelc.runtime.model import interpreting  # noqa: E402


@pytest.fixture
def on_cpu(monkeypatch):
    if not interpreting():
        pytest.skip("runs the Triton kernels under the interpreter (a GPU machine runs the real script)")
    monkeypatch.setattr(gl, "DEVICE", "cpu")
    monkeypatch.setattr(gl, "CHECK_POINTS", 48)
    monkeypatch.setattr(gl, "_REFERENCE", {})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "cpu (test)")
    monkeypatch.delenv("MODELC_TRITON_MAXNREG", raising=False)


def test_caps_that_compile_the_same_kernel_are_timed_once():
    coupled = importlib.import_module("modelc.generated.j2_voce_af_coupled")  # asks for 255 in float64
    radial = importlib.import_module("modelc.generated.j2_voce_af")  # asks for 128
    caps = ["module", "none", "128", "255"]
    assert gl.effective_caps(coupled, "fp64", caps) == ["module", "none", "128"]
    assert gl.effective_caps(radial, "fp64", caps) == ["module", "none", "255"]
    assert gl.effective_caps(radial, "fp32", caps) == ["module", "128", "255"]  # float32: no cap of its own


def test_a_constant_tangent_is_not_counted_per_point():
    elastic = importlib.import_module("modelc.generated.elastic")
    assert "tangent" in elastic.Model.CONSTANT_JACOBIAN
    assert gl.moved_bytes(elastic, "elastic", "tangent", "fp64", None) == bytes_per_point("elastic", "value", "fp64")
    voce = importlib.import_module("modelc.generated.j2_voce_af")
    # stress (6) x strain (6) per point, float64
    assert gl.moved_bytes(voce, "j2_voce_af", "tangent", "fp64", None) - \
        gl.moved_bytes(voce, "j2_voce_af", "value", "fp64", None) == 36 * 8


def test_run_checks_each_kernel_against_torch_and_writes_a_report(on_cpu, tmp_path, monkeypatch):
    monkeypatch.setattr(gl, "copy_bandwidth", lambda *a, **k: 1e9)
    md = gl.main(["--models", "perzyna_iso", "--dtypes", "fp64", "fp32", "--caps", "module", "none",
                  "--sizes", "64", "--repeats", "1", "--calls", "1", "--out", str(tmp_path), "--tag", "t"])
    result = json.loads(md.with_suffix(".json").read_text())
    recs = result["records"]
    # float64: module (128) and none; float32: module only (the same kernel as none)
    assert [(r["dtype"], r["variant"], r["cap"]) for r in recs] == [
        ("fp64", "value", "module"), ("fp64", "value", "none"), ("fp64", "tangent", "module"),
        ("fp64", "tangent", "none"), ("fp32", "value", "module"), ("fp32", "tangent", "module")]
    for r in recs:
        assert "error" not in r, r
        bound = 1e-12 if r["dtype"] == "fp64" else 1e-4
        assert r["y_err"] < bound and r.get("j_err", 0.0) < bound * 10, r
        assert r["converged"] == 1.0 and r["mean_iterations"] > 0  # a mix of yielding points
        assert r["points_per_s"] > 0 and r["bytes_per_point"] == gl.moved_bytes(
            importlib.import_module("modelc.generated.perzyna_iso"), "perzyna_iso", r["variant"], r["dtype"], None)
    text = md.read_text()
    assert "cpu (test)" in text and text.count("| perzyna_iso |") == 6
    # --report re-renders the same table from the JSON
    md.unlink()
    assert gl.main(["--report", str(md.with_suffix(".json"))]) == md and "| perzyna_iso | fp64 | tangent |" in md.read_text()


def _rec(model, dtype, pts, regs=128, spills=0, **extra):
    return dict(model=model, dtype=dtype, variant="tangent", cap="module", points=4_000_000, modules="generated",
                points_per_s=pts, n_regs=regs, n_spills=spills, **extra)


def test_compare_puts_two_runs_side_by_side(tmp_path, capsys):
    before = {"device": "GPU X", "records": [_rec("a", "fp32", 2e9, 80), _rec("b", "fp64", 4e9, spills=14),
                                             _rec("gone", "fp64", 1e9)]}
    after = {"device": "GPU X", "records": [_rec("a", "fp32", 5e9, 96), _rec("new", "fp64", 3e9),
                                            {**_rec("b", "fp64", 0), "error": "RuntimeError: boom"}]}
    for rec in before["records"]:
        rec["modules"] = ".ab/base"
    text = gl.compare(before, after)
    rows = [line for line in text.splitlines() if line.startswith("| a |")]
    assert rows == ["| a | fp32 | tangent | module | 4000000 | 2e+09 | 5e+09 | 2.50 | 80 -> 96 | 0 -> 0 |"]
    assert "before: .ab/base, after: generated" in text.splitlines()[0]
    assert "- b fp64 tangent module 4000000: failed (RuntimeError: boom)" in text
    assert "- gone fp64 tangent module 4000000: only in the before run" in text
    assert "- new fp64 tangent module 4000000: only in the after run" in text
    # from the command line: two result files, and a clear refusal of anything else
    f1, f2 = tmp_path / "before.json", tmp_path / "after.json"
    f1.write_text(json.dumps(before))
    f2.write_text(json.dumps(after))
    gl.main(["--compare", str(f1), str(f2)])
    assert capsys.readouterr().out == text
    f2.write_text("[1, 2]")
    with pytest.raises(SystemExit, match="after.json holds no records"):
        gl.main(["--compare", str(f1), str(f2)])
    with pytest.raises(SystemExit, match="missing.json"):
        gl.main(["--compare", str(f1), str(tmp_path / "missing.json")])
