"""The reference interpreter itself, against hand-computed NumPy."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

from modelc.errors import InputError
from modelc.interpret import interpret
from modelc.ir import Assign, LinearSolve, Parameter, Program, Variable
from modelc.runtime.types import SR2, Scalar
from passes_helpers import psym, sym


def _program():
    a, S = sym("a"), sym("S", SR2)
    t, u, v, w = (sym(n) for n in ("t", "u", "v", "w"))
    E = psym("E")
    body = (
        Assign(t, a * E + S[0]),
        Assign(w, sp.exp(S[5]) + t),  # reads an earlier assignment
        LinearSolve(A=((2 + a ** 2, S[1]), (sp.S.Zero, sp.S(3))), B=((t,), (w,)), targets=((u,), (v,))),
    )
    return Program("p", (Variable("a", Scalar), Variable("S", SR2)), (Parameter("E", Scalar, (2.0,)),),
                   (Variable("u", Scalar), Variable("v", Scalar)), body,
                   results={"u": (u,), "v": (v,)}, derivatives={("u", "a"): ((t * 2,),)})


def _expected(a, S, E):
    t = a * E + S[:, 0]
    w = np.exp(S[:, 5]) + t
    v = w / 3
    u = (t - S[:, 1] * v) / (2 + a ** 2)
    return u, v, 2 * t


def test_straight_line_and_linear_solve():
    rng = np.random.default_rng()
    a, S = rng.normal(size=4), rng.normal(size=(4, 6))
    res, der, status = interpret(_program(), {"a": a, "S": S})
    u, v, d = _expected(a, S, 2.0)
    np.testing.assert_allclose(res["u"], u, rtol=1e-13)
    np.testing.assert_allclose(res["v"], v, rtol=1e-13)
    assert der[("u", "a")].shape == (4, 1, 1)
    np.testing.assert_allclose(der[("u", "a")][:, 0, 0], d, rtol=1e-13)
    assert status == {}
    E = rng.uniform(1, 2, size=4)  # parameters batched per point
    res, _, _ = interpret(_program(), {"a": a, "S": S}, {"E": E})
    np.testing.assert_allclose(res["u"], _expected(a, S, E)[0], rtol=1e-13)


def test_torch_in_torch_out():
    a, S = torch.rand(3, dtype=torch.float32), torch.rand(3, 6, dtype=torch.float32)
    res, der, _ = interpret(_program(), {"a": a, "S": S})
    assert isinstance(res["u"], torch.Tensor) and res["u"].dtype == torch.float32
    u, _, _ = _expected(a.double().numpy(), S.double().numpy(), 2.0)
    np.testing.assert_allclose(res["u"].numpy(), u, rtol=1e-5)


def test_custom_functions():
    from modelc.functions import macaulay, safe_div

    x, y = sym("x"), sym("y")
    p = Program("q", (Variable("x", Scalar),), (), (Variable("y", Scalar),),
                (Assign(y, macaulay(x) + safe_div(1, x)),), results={"y": (y,)})
    xs = np.array([-2.0, 0.0, 3.0])
    res, _, _ = interpret(p, {"x": xs})
    np.testing.assert_allclose(res["y"], [-0.5, 0.0, 3.0 + 1 / 3])


def test_input_errors():
    rng = np.random.default_rng()
    good = {"a": rng.normal(size=2), "S": rng.normal(size=(2, 6))}
    with pytest.raises(InputError, match="missing input 'S'"):
        interpret(_program(), {"a": good["a"]})
    with pytest.raises(InputError, match="unknown parameters"):
        interpret(_program(), good, {"Ee": 1.0})
    with pytest.raises(InputError, match="unknown inputs"):
        interpret(_program(), dict(good, b=1.0))


def test_stop_rows_put_one_residual_at_the_edge_of_the_stopping_test():
    """interpret(stop_rows=...): each entry's unknowns move by J^-1 e_k slack scale_k (the root of
    R = slack scale_k e_k to first order), row k per entry, in a coupled system of 8 unknowns
    (NEML2's J2 return map with linear hardening); a row beyond the system or negative moves nothing."""
    from library_helpers import program, reference_params

    prog = program("j2_linear_iso_coupled", True)
    B = 4
    ins = {v.name: np.zeros((B, 6) if v.type.size == 6 else (B,)) for v in prog.inputs}
    ins["forces/E"][:, 0] = 1e-2
    ins["forces/E"][:, 1] = -4e-3
    ins["forces/t"][:] = 1.0
    params = reference_params("j2_linear_iso_coupled")
    stops: list = []
    base, _, status = interpret(prog, ins, params, stops=stops)
    assert np.all(status["converged"])
    names, J, scale = stops[0]
    n = len(names)
    assert n == 8 and J.shape == (B, n, n)  # Ep (6), ep, gamma_rate
    rows, slack = np.array([0, n - 1, -1, n]), 1e-6
    moved, _, _ = interpret(prog, ins, params, stop_slack=slack, stop_rows=rows)

    def unknowns(res):
        cols = []
        for name in names:
            var, _, i = name.partition("[")
            cols.append(res[var][:, int(i[:-1])] if i else res[var])
        return np.stack(cols, axis=1)

    u0, u1 = unknowns(base), unknowns(moved)
    for b, k in enumerate(rows):
        if not 0 <= k < n:
            assert np.array_equal(u1[b], u0[b])
            continue
        rhs = np.zeros(n)
        rhs[k] = slack * scale[b, k]
        want = np.linalg.solve(J[b], rhs)
        assert np.any(want != 0)
        np.testing.assert_allclose(u1[b] - u0[b], want, rtol=1e-6, atol=1e-12 * np.abs(u0[b]).max())
