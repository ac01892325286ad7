"""runtime/cheader.py: the C backend's shared header. A model's source includes it by one line, the
runtime writes its text in place (the cache key and the kept source follow it), a changed header builds
new libraries, and a source generated for another header ABI stops with a message to regenerate it."""
from __future__ import annotations

import math

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
