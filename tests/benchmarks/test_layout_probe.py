"""benchmarks/layout_probe.py: both layouts of the per-point linear solve give numpy's solution (under
TRITON_INTERPRET=1, as the suite runs Triton), and a tile kernel compiles for sm_90 without a GPU."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton")
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import layout_probe as lp  # noqa: E402

needs_interpreter = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                                       reason="needs TRITON_INTERPRET=1 or a CUDA device")


@needs_interpreter
@pytest.mark.parametrize("layout,n,P", [("unrolled", 3, 128), ("unrolled", 7, 128), ("tile", 3, 1), ("tile", 7, 2),
                                        ("tile", 13, 4)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_both_layouts_solve_like_numpy(layout, n, P, dtype):
    """37 points (a partial last program), n not a power of two (the tile's padding). The systems are
    diagonally dominant (A = randn + n I): cond(A) stays below ~10, so float64 agrees to 1e-13 and
    float32 to 1e-5 relative (a few eps32 times the condition number and n)."""
    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    A, b = lp.systems(n, 37, dtype, device, seed=3)
    X = lp.run(layout, n, P, A, b).double().cpu().numpy()
    want = np.linalg.solve(A.double().cpu().numpy(), b.double().cpu().numpy()[..., None])[..., 0]
    tol = 1e-13 if dtype == torch.float64 else 1e-5
    assert np.abs(X - want).max() <= tol * np.abs(want).max()


def test_unrolled_source_is_the_elimination_written_out():
    """The unrolled kernel holds n^2 loads, one reciprocal per pivot and (n^3 - n)/3 updates (dense)."""
    src = lp.unrolled_source(5)
    assert src.count("tl.load(A_ptr") == 25 and src.count("= 1.0 / a") == 5
    updates = sum(1 for line in src.splitlines() if line.lstrip().startswith("a") and " - f * a" in line)
    assert updates == sum((5 - k - 1) ** 2 for k in range(5))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="layout"):
        lp.kernel("rows", 3)
    with pytest.raises(SystemExit):
        lp.main(["--points", "3"])
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):  # timing needs a GPU: said, not a traceback
            lp.main(["--time", "--sizes", "3"])


def test_tile_kernel_compiles_for_sm90():
    """ptxas' report of a small tile kernel, compiled as a launch on an H100 would: one 6 x 6 system
    per program over 128 threads keeps to registers (42 measured with Triton 3.7.1)."""
    rec = lp.compile_one("tile", 6, 1, "fp64", 90)
    assert "error" not in rec, rec.get("error")
    assert 0 < rec["registers"] <= 128 and rec["spill_stores_bytes"] == 0, rec
    assert rec["compile_s"] > 0
