"""Shared helpers for the runtime tests: devices (CUDA skipped without a GPU), the C compiler
(skipped without one on a developer's machine, required in CI), dtypes, tolerances."""
from __future__ import annotations

import os

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[CUDA, pytest.mark.gpu])]
DTYPES = [torch.float64, torch.float32]


def _have_cc() -> bool:
    from modelc.runtime import cbuild

    try:
        cbuild.compiler()
        return True
    except cbuild.CBuildError:
        return False


#: a C compiler the C backend can use is here; in CI (``$CI`` true) the C tests run whatever this
#: says, so a missing compiler fails them with the backend's own message instead of skipping them
HAVE_CC = _have_cc()
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
NO_CC = "no C compiler (cc, gcc or clang on PATH, or $CC): the C backend's tests need one; CI requires it"
needs_cc = pytest.mark.skipif(not HAVE_CC and not IN_CI, reason=NO_CC)


def skip_module_without_cc() -> None:
    """At a test module's top: skip it on a machine without a C compiler (never in CI)."""
    if not HAVE_CC and not IN_CI:
        pytest.skip(NO_CC, allow_module_level=True)


def tol(dtype: torch.dtype) -> dict:
    """assert_close tolerances for values of order one."""
    return {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 2e-5}


def rand(gen: torch.Generator, *shape: int, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """Fresh uniform(-1, 1) values from a seeded generator (CPU), moved to the device."""
    return (2 * torch.rand(shape, generator=gen, dtype=torch.float64) - 1).to(dtype=dtype, device=device)

DTYPE = st.sampled_from(DTYPES)
SEED = st.integers(0, 2**31 - 1)
BATCH = st.lists(st.integers(1, 3), max_size=3).map(tuple)
FAST = settings(max_examples=20, deadline=None)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def fn_program(name, exprs_of):
    """A Program of functions of two per-point parameters x, y (``exprs_of(x, y)``: one output each),
    for the C tests (test_cbuild.py, test_cheader.py, tests/compiler/backends/test_c_simd.py). A NaN
    or infinite *input* fails the whole point in the kernel; parameters reach the functions as they
    are."""
    from modelc import ir
    from modelc.runtime.types import Scalar

    x, y = ir.Parameter("x", Scalar), ir.Parameter("y", Scalar)
    exprs = exprs_of(x.symbols[0], y.symbols[0])
    outs = tuple(ir.Variable(f"state/o{k}", Scalar) for k in range(len(exprs)))
    return ir.Program(name, (ir.Variable("forces/t", Scalar),), (x, y), outs, (),
                      {o.name: (e,) for o, e in zip(outs, exprs)})
