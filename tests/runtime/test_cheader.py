"""runtime/cheader.py: the C backend's shared header. A model's source includes it by one line, the
runtime writes its text in place (the cache key and the kept source follow it), a changed header builds
new libraries, and a source generated for another header ABI stops with a message to regenerate it."""
from __future__ import annotations

import math

import numpy as np

import pytest
import sympy as sp
import torch

from modelc.backends.c_backend import c_source
from modelc.runtime import cbuild, cheader
from rt_helpers import fn_program


def _run(prog, x, y, cache_dir=None):
    """``prog`` on parameters x, y (per point): its outputs (B, n)."""
    lib = cbuild.load_library(c_source(prog), prog.name, torch.float64, cache_dir=cache_dir)
    Y = torch.full((x.shape[0], len(prog.outputs)), math.nan, dtype=torch.float64)
    P = torch.stack([x, y], dim=1).contiguous()
    lib([torch.zeros(x.shape[0], 1, dtype=torch.float64)], P, Y)
    return Y


def test_header_text_and_abi():
    """The shipped header guards itself, names its ABI, and needs the model's sizes defined first."""
    text = cheader.kernel_header()
    assert text.startswith("/* modelc_kernel.h") and "#ifndef MODELC_KERNEL_H" in text
    assert f"#define MC_KERNEL_ABI {cheader.kernel_abi()}\n" in text and cheader.kernel_abi() >= 1
    assert "#error" in text and "define NIN, NP, NY and MC_NEWTON" in text
    assert cheader.standalone("int x;\n") == "int x;\n"  # no include line: unchanged


def test_sources_share_the_runtime_kernel_header(tmp_path):
    """A model's source holds its own code only: the shared part (vector exp/log/pow, the block LU
    solve, loads and stores, the argument block) is the runtime's modelc_kernel.h, included by one
    line and written in place before compiling, so the source kept beside the library in the cache
    reads (and compiles) on its own. The exported per-point code inlines the header."""
    from modelc.backends.c_backend import point_source

    prog = fn_program("shared", lambda a, b: [sp.exp(a) * b])
    src = c_source(prog)
    header = cheader.kernel_header()
    assert src.count(cheader.KERNEL_INCLUDE) == 1
    assert "static inline void mc_lu_solve(" in header and "mc_lu_solve(" not in src
    assert "MC_INLINE double mc_exp_d(" in header and "mc_exp_d(" not in src
    full = cheader.standalone(src)
    assert cheader.KERNEL_INCLUDE not in full and header in full
    assert cheader.standalone(full) == full  # nothing left to replace
    lib = cbuild.load_library(src, "shared", torch.float64, cache_dir=tmp_path)
    kept = lib.path.with_suffix(".c").read_text()
    assert kept == full
    x = torch.tensor([0.5, -1.25, 3.0], dtype=torch.float64)
    y = torch.tensor([2.0, 0.75, -0.5], dtype=torch.float64)
    Y = _run(prog, x, y, cache_dir=tmp_path)
    torch.testing.assert_close(Y[:, 0], torch.exp(x) * y, rtol=1e-14, atol=0)
    assert cheader.KERNEL_INCLUDE not in point_source(prog, "jacobian")


def test_a_changed_kernel_header_builds_a_new_library(monkeypatch, tmp_path):
    """The cache key hashes the header's text with the source's: libraries built with another
    modelc_kernel.h are never loaded for this one."""
    src = c_source(fn_program("rekeyed", lambda a, b: [a * b]))
    before, _ = cbuild.library_path(src, "rekeyed", torch.float64, tmp_path)
    text = cheader.kernel_header()
    monkeypatch.setattr(cheader, "kernel_header", lambda: text + "/* changed */\n")
    after, _ = cbuild.library_path(src, "rekeyed", torch.float64, tmp_path)
    assert before != after


def test_a_source_for_another_kernel_header_is_a_clear_build_error(monkeypatch, tmp_path):
    """A module generated for one header ABI, run by a runtime that ships another: the compile stops
    at the source's check with a message that says to regenerate, not at some missing symbol."""
    src = c_source(fn_program("stale", lambda a, b: [a - b]))
    abi = cheader.kernel_abi()
    text = cheader.kernel_header().replace(f"#define MC_KERNEL_ABI {abi}\n", f"#define MC_KERNEL_ABI {abi + 1}\n")
    monkeypatch.setattr(cheader, "kernel_header", lambda: text)
    with pytest.raises(cbuild.CBuildError, match=f"needs modelc_kernel.h ABI {abi}: regenerate"):
        cbuild.load_library(src, "stale", torch.float64, cache_dir=tmp_path)


_LU_DRIVER = r"""
#define NIN 1
#define NP 0
#define NY 1
#define MC_NEWTON 1
#include "modelc_kernel.h"
int lu_lanes(void) { return MC_W; }
/* split < 0: mc_lu_solve over all m columns (b1); else mc_lu_solve over the first `split` (b1, the
   pivots kept) and mc_lu_apply over the other m - split (b2) */
void lu_run(int n, int m, int split, real *a, real *b1, real *b2, int *piv) {
    if (split < 0) mc_lu_solve(n, m, a, b1, 0);
    else { mc_lu_solve(n, split, a, b1, piv); mc_lu_apply(n, m - split, a, piv, b2); }
}
"""


def _lu(n: int, A: np.ndarray, B: np.ndarray, split: int):
    """Solve per lane with the header's LU: A (W, n, n), B (W, n, m); split as in lu_run."""
    import ctypes

    lib = cbuild.load_library_source(_LU_DRIVER, "lu_driver")
    W = lib.lu_lanes()
    assert A.shape[0] == W
    m = B.shape[2]
    a = A.transpose(1, 2, 0).flatten()  # (a copy) entry (i, j) of lane l at (i n + j) W + l
    k = m if split < 0 else split
    b1 = B[:, :, :k].transpose(1, 2, 0).flatten()
    b2 = B[:, :, k:].transpose(1, 2, 0).flatten()
    piv = np.zeros(n * W, dtype=np.int32)
    ptr = ctypes.POINTER(ctypes.c_double)
    lib.lu_run(ctypes.c_int(n), ctypes.c_int(m), ctypes.c_int(split), a.ctypes.data_as(ptr),
               b1.ctypes.data_as(ptr), b2.ctypes.data_as(ptr), piv.ctypes.data_as(ctypes.POINTER(ctypes.c_int)))
    X = np.concatenate([b1.reshape(n, k, W), b2.reshape(n, m - k, W)], axis=1)
    return X.transpose(2, 0, 1), piv.reshape(n, W)


def _lu_lanes() -> int:
    return cbuild.load_library_source(_LU_DRIVER, "lu_driver").lu_lanes()


@pytest.mark.parametrize("n", [1, 2, 5, 19, 70])
def test_lu_factors_kept_solve_more_columns_with_the_same_operations(n):
    """mc_lu_solve keeps its pivots (piv) and factors for mc_lu_apply: the columns solved later
    come out bit for bit as if solved with the first (the variants of a call share one
    factorisation), and agree with numpy.linalg.solve. Fresh random systems per lane, so lanes
    exchange different rows (n = 70: more rows than the 64-bit pivot-row set, every row visited);
    one lane has a zero diagonal that only row exchanges solve, and a multiplier is zero in every
    lane (the step skips it)."""
    W = _lu_lanes()
    g = np.random.default_rng(n)
    A = g.normal(size=(W, n, n))
    if n > 1:
        A[1] = np.roll(np.eye(n), 1, axis=0) + 1e-3 * np.triu(g.normal(size=(n, n)), 1)  # zero diagonal
    if n > 2:
        A[:, n - 1, 0] = 0.0  # a multiplier zero in every lane
    m = 5
    B = g.normal(size=(W, n, m))
    whole, _ = _lu(n, A, B, -1)
    for split in (0, 1, 3):
        part, piv = _lu(n, A, B, split)
        assert np.array_equal(part, whole), split  # bit for bit
        assert ((piv >= np.arange(n)[:, None]) & (piv < n)).all()
    ref = np.linalg.solve(A, B)
    np.testing.assert_allclose(whole, ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
    if n > 1:
        assert piv[0, 1] == 1  # lane 1's zero pivot was exchanged for its only nonzero
