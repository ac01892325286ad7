"""Named batch dims at a compiled model's call boundary: a parameter batched over `samples` meets
strains batched over `points`, aligned and broadcast by name (runtime/model.py, CompiledModel.__call__),
checked against Hooke's law evaluated independently."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import modelc
from modelc.errors import InputError
from modelc.runtime.tensors import TypedTensor

LIBRARY = Path(__file__).resolve().parents[2] / "spec" / "library.yaml"


def hooke(E, nu, eps):
    """sigma = lambda tr(eps) I + 2 mu eps, in Mandel (the shear components scale like eps)."""
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    tr = eps[..., :3].sum(-1, keepdim=True)
    return lam * tr * torch.tensor([1.0, 1, 1, 0, 0, 0], dtype=eps.dtype) + 2 * mu * eps


@pytest.mark.parametrize("backend", ["torch", "c"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_parameter_over_samples_meets_strain_over_points(backend, dtype):
    module = modelc.load(LIBRARY, model="elastic")
    try:
        m = module.Model(dtype=dtype, backend=backend)
    except modelc.errors.ModelcError as exc:  # no C compiler on this machine
        pytest.skip(str(exc))
    eps = 1e-3 * torch.randn(5, 6, dtype=dtype)
    E = torch.rand(3, dtype=dtype) * 1e5 + 1e5
    out = m({"forces/E": TypedTensor(eps, "SR2", batch_names=("points",))},
            E=TypedTensor(E, "Scalar", batch_names=("samples",)))
    assert out.batch_names == ("points", "samples")
    S = out["state/S"]
    assert S.shape == (5, 3, 6)
    expected = hooke(E[None, :, None], 0.3, eps[:, None, :])
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(S, expected, rtol=tol, atol=tol * float(expected.abs().max()))


def test_named_and_unnamed_batch_dims_do_not_mix():
    m = modelc.load(LIBRARY, model="elastic").Model(backend="torch")
    with pytest.raises(InputError, match="unnamed batch dims"):
        m({"forces/E": torch.zeros(5, 6, dtype=torch.float64)},
          E=TypedTensor(torch.ones(3, dtype=torch.float64), "Scalar", batch_names=("samples",)))
    with pytest.raises(InputError, match="'points' has size 5 in one operand and 4"):
        m({"forces/E": TypedTensor(torch.zeros(5, 6, dtype=torch.float64), "SR2", batch_names=("points",))},
          E=TypedTensor(torch.ones(4, dtype=torch.float64), "Scalar", batch_names=("points",)))
