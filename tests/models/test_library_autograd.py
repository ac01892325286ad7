"""Autograd through every library model on every backend: ``torch.autograd.gradcheck`` in float64
with respect to every input and every parameter, at NEML2's converged states (plastic and elastic
steps), against central differences of the model itself.

The check runs in scaled coordinates (an input moves by ``z`` times its own magnitude, a parameter
by ``z`` relative, outputs divided by 100 MPa) so that one finite-difference step suits every
variable and the tolerances can be tight. All variables are one flat leaf ``z``, split inside the
function, so that the Triton interpreter (slow per launch) runs only a few calls in ``fast_mode``;
the C backend runs the full check (every column).
"""
from __future__ import annotations

import pytest
import torch

from library_helpers import MODELS, compiled, forced_inputs, reference, reference_params

#: (step, point) rows of the reference: plastic at step 40 for the plastic models, elastic at step 2
ROWS = {"steps": [2, 40], "points": [1]}


def _problem(name: str, backend: str):
    """The model, and ``f(z)``: its outputs (scaled) as a function of one flat perturbation ``z``."""
    m = compiled(name, backend, torch.float64)
    ref = reference(name)
    kw = {"dtype": torch.float64, "device": m.device}  # (a GPU under MODELC_TEST_DEVICE=cuda)
    x0 = {k: torch.as_tensor(v, **kw)
          for k, v in forced_inputs(m.input_axis.variable_names, ref, ROWS["steps"], ROWS["points"]).items()}
    prm = reference_params(name)
    p0 = {p.name: torch.tensor(prm[p.name], **kw) for p in m.PARAMETERS}
    scale = {k: float(v.abs().max()) or 1.0 for k, v in x0.items()}
    sizes = [(k, v.numel()) for k, v in x0.items()] + [(k, 1) for k in p0]

    def f(z):
        parts = dict(zip([k for k, _ in sizes], torch.split(z, [n for _, n in sizes])))
        inputs = {k: x0[k] + scale[k] * parts[k].reshape(x0[k].shape) for k in x0}
        params = {k: p0[k] * (1 + parts[k].reshape(())) for k in p0}
        r = m(inputs, **params)
        assert r.status is None or r.status.all_converged, r.status
        return r.outputs.tensor / 100.0

    z = torch.zeros(sum(n for _, n in sizes), **kw, requires_grad=True)
    return m, f, z


@pytest.mark.parametrize("backend", ["c", "torch", "triton"])
@pytest.mark.parametrize("name", MODELS)
def test_gradcheck_inputs_and_parameters(name, backend):
    if backend == "triton":
        pytest.importorskip("triton")
    m, f, z = _problem(name, backend)
    assert m.backend == backend
    assert torch.autograd.gradcheck(f, (z,), eps=1e-6, atol=1e-7, rtol=1e-6, fast_mode=backend != "c")


@pytest.mark.parametrize("name", MODELS)
def test_backward_is_the_generated_derivatives_not_the_newton_loop(name):
    """On backend="torch" the graph holds one modelc node: autograd records no Newton iteration, and
    the gradient equals the generated total Jacobian's rows contracted with the seed."""
    m, f, z = _problem(name, "torch")
    y = f(z)
    nodes, stack = set(), [y.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in nodes:
            continue
        nodes.add(n)
        stack += [nx for nx, _ in n.next_functions]
    kinds = {type(n).__name__ for n in nodes}
    assert "_EvaluateBackward" in kinds
    assert not kinds & {"LinalgSolveExBackward0", "WhereBackward0", "IndexPutBackward0"}, kinds
