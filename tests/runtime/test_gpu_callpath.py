"""The Triton call path on a GPU: no host round trip per call, results as on the PyTorch backend.

These need a CUDA device with compiled (not interpreted) kernels: a GPU machine runs them with
``MODELC_TEST_DEVICE=cuda`` (benchmarks/gpu_session.sh, step ``session``). Without one they are
skipped, and the same call path runs under the interpreter in test_callpath.py and test_checks.py
(inputs read where they lie, the status and the NaN/infinity marks written by the kernel)."""
from __future__ import annotations

import math

import pytest
import torch

from modelc.runtime.model import interpreting
from test_callpath import _inputs as cpu_inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or interpreting(),
                                reason="needs a CUDA device and compiled Triton kernels (MODELC_TEST_DEVICE=cuda)")


def _inputs(m, B, seed):
    return {k: v.to(device="cuda", dtype=m.dtype) for k, v in cpu_inputs(m, (B,), seed).items()}


@pytest.mark.parametrize("name", ["j2_perfect", "perzyna_iso", "elastic"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cuda_triton_call_does_not_synchronise(name, dtype):
    """After the first call (which compiles), a call with fresh outputs or with out= makes no
    synchronising CUDA call (torch's sync debug mode raises on one); the numbers are the PyTorch
    backend's on the same GPU."""
    import importlib

    mod = importlib.import_module(f"modelc.generated.{name}")
    m = mod.Model(dtype=dtype, device="cuda", backend="triton")
    x = _inputs(m, 1000, 1)
    first = m(x, derivatives="tangent")  # compiles
    m(x)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        r = m(x, derivatives="tangent")
        m(x, derivatives="tangent", out=first)
        v = m(x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    ref = mod.Model(dtype=dtype, device="cuda", backend="torch")(x, derivatives="tangent")
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for got in (r, first):
        scale = float(ref.outputs.tensor.abs().max())
        assert float((got.outputs.tensor - ref.outputs.tensor).abs().max()) <= tol * scale
        jscale = float(ref.jacobian.tensor.abs().max())
        assert float((got.jacobian.tensor - ref.jacobian.tensor).abs().max()) <= tol * jscale
    assert torch.equal(v.outputs.tensor, r.outputs.tensor)
    if r.status is not None:
        assert bool(r.status.converged.all())


def test_cuda_triton_fails_non_finite_inputs_in_the_kernel():
    """A NaN or an infinite input fails its point only (NaN outputs, not converged), without a
    host-side check."""
    from modelc.generated import perzyna_iso

    m = perzyna_iso.Model(device="cuda", backend="triton")
    x = _inputs(m, 64, 2)
    x["forces/E"][5, 1] = math.nan
    x["old_state/internal/ep"][9] = math.inf
    r = m(x, derivatives="tangent")
    bad = torch.zeros(64, dtype=torch.bool, device="cuda")
    bad[[5, 9]] = True
    assert torch.equal(~r.status.converged, bad)
    assert bool(r["state/S"][bad].isnan().all()) and bool(r.jacobian.tensor[bad].isnan().all())
    assert bool(r["state/S"][~bad].isfinite().all())
