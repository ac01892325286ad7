"""What a Newton solve hands to the statements after it (ir.Newton.exports, passes.cse._Exports)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
import torch

from modelc import driver
from modelc import functions as F
from modelc.errors import InternalError
from modelc.interpret import interpret
from modelc.ir import Assign, Newton, export_values
from modelc.ir.verify import verify_program

LIBRARY = Path(__file__).resolve().parents[3] / "spec" / "library.yaml"


@pytest.fixture(scope="module")
def voce():
    return driver.lower_model(driver.load_spec(LIBRARY), "j2_voce_af", verify=True).program


def _newton(program):
    k = next(k for k, st in enumerate(program.body) if isinstance(st, Newton))
    return k, program.body[k]


def test_voce_solve_hands_its_exponential_and_reciprocal_but_not_its_norm(voce):
    k, st = _newton(voce)
    body = {a.target: a.value for a in st.body}
    values = [sp.sympify(body.get(x.value, x.value)) for x in st.exports]
    # the Voce exponential and 1/(1 + g dgamma); the norm of the flow direction stays with its
    # components (test_tiny_deviator.py: a norm of rounding noise from one evaluation, components
    # from another, and a float32 tangent was 2.5 off the elastic stiffness)
    assert any(v.has(sp.exp) for v in values)
    assert any(v.is_Pow and v.exp == -1 for v in values)
    assert not any(v.has(F.safe_sqrt, F.safe_div) for v in values)
    # the statements after the solve read them and compute no exponential of their own
    after = [s for s in voce.body[k + 1:] if isinstance(s, Assign)]
    assert not any(sp.sympify(s.value).has(sp.exp) for s in after)
    read = set().union(*(sp.sympify(s.value).free_symbols for s in after))
    assert {x.target for x in st.exports} <= read
    # inlined, for the backends that evaluate them again: over the unknowns and what the solve reads
    local = {a.target for a in st.body}
    for x in export_values(st):
        assert not sp.sympify(x.value).free_symbols & local


def test_exports_match_evaluating_again_at_the_solution(voce):
    """The interpreter evaluates the exports again from the unknowns the solve left; the C backend
    keeps those of the evaluation that ends the solve. The two agree to 1e-12 on fresh random
    plastic and elastic points."""
    from modelc.generated import j2_voce_af as M
    rng = np.random.default_rng()
    n = 64
    scale = rng.choice([1e-5, 1e-3, 1e-2], size=n)[:, None]
    inputs = {"forces/E": torch.tensor(rng.normal(size=(n, 6)) * scale),
              "forces/t": torch.ones(n, dtype=torch.float64),
              "old_forces/t": torch.zeros(n, dtype=torch.float64)}
    model = M.Model(dtype=torch.float64, backend="c")
    names = model.input_axis.variable_names
    for name in names:
        if name not in inputs:
            shape = model.input_axis.type_of(name).base_shape
            inputs[name] = torch.zeros((n, *shape), dtype=torch.float64)
    out = model({k: inputs[k] for k in names}, derivatives="tangent")
    arrays = {k: inputs[k].numpy() for k in names}
    results, derivs, status = interpret(voce, arrays)
    assert status["converged"].all()
    for name, value in results.items():
        np.testing.assert_allclose(out.outputs[name].numpy(), value, rtol=1e-12, atol=1e-14)


def test_a_line_search_solve_hands_nothing(voce):
    k, st = _newton(voce)
    with_ls = replace(st, solver=replace(st.solver, line_search=4))
    with pytest.raises(InternalError, match="line search"):
        verify_program(replace(voce, body=voce.body[:k] + (with_ls,) + voce.body[k + 1:]))


def test_an_export_must_read_what_the_solve_has(voce):
    k, st = _newton(voce)
    bad = replace(st, exports=st.exports + (Assign(sp.Symbol("nx/99"), sp.Symbol("nowhere")),))
    with pytest.raises(InternalError, match="nowhere"):
        verify_program(replace(voce, body=voce.body[:k] + (bad,) + voce.body[k + 1:]))
