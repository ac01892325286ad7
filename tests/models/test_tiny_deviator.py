"""Tangents at a tiny deviator: every bundled model, float32 and float64, PyTorch, C and Triton.

A strain that is nearly hydrostatic (a free thermal expansion, a stress control iterating to zero
stress, the rounding of a volumetric strain) leaves a deviator ``|s|`` of 1e-13 or less. The
derivative of the flow direction ``s / |s|`` carries ``1 / |s|**3``, which overflows float32 there,
and the elastic step multiplied it by an exact zero (``macaulay(f)``, the flow rate): ``0 * inf``
made the tangent NaN while the step said converged (half the float32 tangents of ten of the twelve
models at such points; modelc.passes.gates now makes those products a strong zero). Oracle: the
isotropic elastic stiffness in Mandel notation from the model's Young's modulus and Poisson's ratio
(every point here is far inside the yield surface; Norton's creep rate at these stresses is below
float32's resolution of the stiffness)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from library_helpers import STRAIN, TIME, call_compiled, compiled, lame
from modelc.bundled import library

MODELS = sorted(library())
#: the largest relative deviation of the tangent from the elastic stiffness: a few roundings of its
#: entries (float32), through a linear solve for the coupled models (conditioning ~10)
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def _stiffness(E: float, nu: float) -> np.ndarray:
    lam, mu, _ = lame(E, nu)
    C = 2 * mu * np.eye(6)
    C[:3, :3] += lam
    return C


def _strains(rng, n: int) -> np.ndarray:
    """Nearly hydrostatic strains: volumetric 1e-12 .. 1e-4 of either sign, a deviator of
    1e-24 .. 1e-10 (below and above float32's rounding of the volumetric part)."""
    vol = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-12, -4, n)
    dev = rng.normal(size=(n, 6)) * 10.0 ** rng.uniform(-24, -10, (n, 1))
    return vol[:, None] * np.array([1.0, 1, 1, 0, 0, 0]) + dev


def _inputs(m, strain: np.ndarray) -> dict[str, np.ndarray]:
    n = strain.shape[0]
    ins = {}
    for v in m.INPUTS:
        shape = (n, 6) if v.type == "SR2" else (n,)
        ins[v.name] = np.zeros(shape)
    ins[STRAIN] = strain
    if TIME in ins:
        ins[TIME] = np.ones(n)
    return ins


def _check(model: str, backend: str, dtype, n: int) -> None:
    from modelc.runtime.cbuild import CBuildError

    try:
        m = compiled(model, backend, dtype)
    except CBuildError as exc:  # no C compiler on this machine
        pytest.skip(str(exc))
    rng = np.random.default_rng()
    strain = _strains(rng, n)
    strain = strain.astype(np.float32).astype(np.float64)  # the same inputs in both dtypes
    outs, tan, status = call_compiled(m, _inputs(m, strain), derivatives="tangent")
    what = f"{model} ({backend}, {dtype})"
    assert status["converged"].all(), what
    assert np.isfinite(tan).all(), f"{what}: {int((~np.isfinite(tan)).any(axis=(1, 2)).sum())} of {n} tangents not finite"
    p = {q.name: q.default[0] for q in m.PARAMETERS}
    C = _stiffness(p["E"], p["nu"])
    err = np.abs(tan - C).max(axis=(1, 2)) / np.abs(C).max()
    assert err.max() <= TOL[dtype], f"{what}: tangent vs the elastic stiffness {err.max():.2e} at {strain[err.argmax()]}"
    assert all(np.isfinite(v).all() for v in outs.values()), what


@pytest.mark.parametrize("backend", ["torch", "c"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("model", MODELS)
def test_tangent_at_a_tiny_deviator_is_the_elastic_stiffness(model: str, dtype, backend: str) -> None:
    _check(model, backend, dtype, 256)


@pytest.mark.parametrize("model", ["j2_linear_iso", "j2_voce_af_coupled"])
def test_triton_tangent_at_a_tiny_deviator_is_the_elastic_stiffness(model: str) -> None:
    """(Under the interpreter, a closed form and a coupled system. j2_voce_af_coupled's float32
    kernel alone gives NaN derivatives at some of these points: its flow direction's numerator and
    norm are rounded differently, so at a deviator of 1e-19 the direction is ~1e12 instead of a unit
    vector, and the elimination's cancellation guard (modelc.passes.expand_solve) takes the
    ``d X_rate / d gamma`` entry it scales, 1e15, for a lost pivot. The runtime solves those points
    again with the PyTorch code's pivoted LU, as it does the points whose Newton the kernel fails.)"""
    _check(model, "triton", torch.float32, 64)
