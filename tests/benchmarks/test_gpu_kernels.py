"""benchmarks/gpu_kernels.py: the ptxas report of a library kernel compiled for sm_90 without a GPU."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.gpu_kernels import bytes_per_point, compile_one, parse_ptxas  # noqa: E402

# the shape of ptxas -v output (ptxas 12.x/13.x), for the parser
LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_kernel_tangent' for 'sm_90'
ptxas info    : Function properties for _kernel_tangent
    376 bytes stack frame, 372 bytes spill stores, 376 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 376 bytes cumulative stack size
"""


def test_parse_ptxas():
    assert parse_ptxas(LOG) == {"registers": 255, "spill_stores_bytes": 372, "spill_loads_bytes": 376,
                                "stack_frame_bytes": 376}
    assert parse_ptxas("ptxas info    : Used 40 registers")["spill_stores_bytes"] == 0


def test_parse_ptxas_reads_the_kernel_entry_only():
    """A log that also compiles another function after the kernel: its lines are not the kernel's
    (an earlier report read 32 registers and large spills that belonged to another function)."""
    other = """ptxas info    : Compiling entry function 'helper' for 'sm_90'
ptxas info    : Function properties for helper
    5096 bytes stack frame, 38608 bytes spill stores, 51440 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
"""
    kernel = LOG.replace("_kernel_tangent", "_kernel")
    want = {"registers": 255, "spill_stores_bytes": 372, "spill_loads_bytes": 376, "stack_frame_bytes": 376}
    assert parse_ptxas(kernel + other) == want
    assert parse_ptxas(other + kernel) == want


def test_bytes_per_point_follows_the_layout():
    # j2_linear_iso_coupled: X 16, Y 14, status 3; tangent 6x6, full Jacobian 14x16 (float64)
    assert bytes_per_point("j2_linear_iso_coupled", "value", "fp64") == (16 + 14 + 3) * 8
    assert bytes_per_point("j2_linear_iso_coupled", "tangent", "fp32") == (16 + 14 + 36 + 3) * 4
    assert bytes_per_point("j2_linear_iso_coupled", "jacobian", "fp64") == (16 + 14 + 224 + 3) * 8
    # the radial return (closed form): X 15 (no previous flow rate), Y 14, no status
    assert bytes_per_point("j2_linear_iso", "tangent", "fp64") == (15 + 14 + 36) * 8


@pytest.mark.slow
def test_elastic_tangent_kernel_for_sm90_keeps_to_registers():
    """Compiled as a launch on an H100 would (BLOCK 128): the elastic tangent (36 constants per point)
    fits in registers without spilling; stored as one whole-row tile it needed 255 registers and
    spilled (what chunked stores fixed)."""
    rec = compile_one("elastic", "tangent", "fp64", 90, 128)
    assert "error" not in rec, rec.get("error")
    assert 0 < rec["registers"] <= 128 and rec["spill_stores_bytes"] == 0, rec
    assert rec["cubin_bytes"] > 0


@pytest.mark.slow
def test_register_cap_is_passed_to_ptxas():
    """``--maxnreg`` (what $MODELC_TRITON_MAXNREG gives a launch) reaches ptxas: j2_voce_af's float64
    tangent kernel, over 128 registers uncapped (``none``), is compiled within 128 under the cap, and
    so by default, as a launch compiles it (its module asks for 128: Model.TRITON_MAXNREG_F64)."""
    free = compile_one("j2_voce_af", "tangent", "fp64", 90, 128, maxnreg="none")
    capped = compile_one("j2_voce_af", "tangent", "fp64", 90, 128, maxnreg=128)
    own = compile_one("j2_voce_af", "tangent", "fp64", 90, 128)
    for rec in (free, capped, own):
        assert "error" not in rec, rec.get("error")
    assert free["registers"] > 128 >= capped["registers"], (free["registers"], capped["registers"])
    assert capped["maxnreg"] == 128 and free["maxnreg"] is None
    assert own["maxnreg"] == 128 >= own["registers"], own


@pytest.mark.slow
def test_module_register_cap_ends_the_32_register_collapse():
    """A coupled system's module asks for 255 registers in float64 (Model.TRITON_MAXNREG_F64), which the report
    compiles with by default, as a launch does. Uncapped, ptxas compiled j2_voce_af_coupled's
    float64 value kernel for full occupancy: 32 registers and about 3x the spills."""
    own = compile_one("j2_voce_af_coupled", "value", "fp64", 90, 128)
    free = compile_one("j2_voce_af_coupled", "value", "fp64", 90, 128, maxnreg="none")
    assert "error" not in own and "error" not in free, (own.get("error"), free.get("error"))
    assert own["maxnreg"] == 255 and free["maxnreg"] is None
    assert free["registers"] == 32 < own["registers"], (free["registers"], own["registers"])
    assert own["spill_stores_bytes"] * 2 < free["spill_stores_bytes"], (own, free)
