"""modelc.backends.torch_printer: the PyTorch spellings of the shared expression printer. Printed text
is eval'd on fresh random tensors (with the generated module's helpers) and compared with SymPy's own
value (``sympy.lambdify`` over NumPy in float64), in float64 and in float32: every function of its
table, non-finite and negative literals, booleans, minimum/maximum against Python floats, and that a
literal never changes the dtype of the computation (a Python float is a weakly typed scalar)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from modelc import functions as F
from modelc.backends.names import Namer
from modelc.backends.torch_printer import TorchPrinter
from modelc.errors import InternalError
from modelc.runtime import model as rt

x, y = sp.symbols("state/x $y", real=True)
DTYPES = (torch.float64, torch.float32)
TOL = {torch.float64: dict(rtol=1e-13, atol=1e-14), torch.float32: dict(rtol=2e-6, atol=2e-6)}
NUMPY = [F.numpy_namespace(), {"erf": np.vectorize(math.erf)}, "numpy"]


def _points(dtype, n=64):
    """x in (-1, 1), y in (0.5, 1.5), from a fresh seed (in the failure message)."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    xv = torch.as_tensor(rng.uniform(-1, 1, n), dtype=dtype)
    yv = torch.as_tensor(rng.uniform(0.5, 1.5, n), dtype=dtype)
    return xv, yv, seed


def _run(expr, xv, yv):
    """The printed text of ``expr`` evaluated on tensors, as the generated PyTorch code runs it."""
    namer = Namer()
    text = TorchPrinter(namer).doprint(expr)
    env = {"torch": torch, **rt.TORCH_HELPERS, namer(x): xv, namer(y): yv}
    got = eval(text, env)
    return torch.as_tensor(got, dtype=xv.dtype).expand(xv.shape), text


def _sympy(expr, xv, yv):
    """SymPy's value at the same (rounded) points, in float64."""
    f = sp.lambdify((x, y), expr, modules=NUMPY)
    return np.broadcast_to(np.asarray(f(xv.double().numpy(), yv.double().numpy()), dtype=np.float64), xv.shape)


# each entry of TorchPrinter.UNARY, on an argument inside its domain
UNARY_ARGS = {sp.exp: x, sp.log: y, sp.sin: 3 * x, sp.cos: 3 * x, sp.tan: x, sp.tanh: 2 * x, sp.sinh: 2 * x,
              sp.cosh: 2 * x, sp.atan: 4 * x, sp.asin: x * y / 2, sp.acos: x * y / 2, sp.erf: 2 * x}


def test_every_function_of_the_table_has_an_argument_here():
    assert set(UNARY_ARGS) == set(TorchPrinter.UNARY)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fn", list(UNARY_ARGS), ids=lambda f: f.__name__)
def test_each_function_agrees_with_sympy(fn, dtype):
    xv, yv, seed = _points(dtype)
    expr = fn(UNARY_ARGS[fn])
    got, text = _run(expr, xv, yv)
    assert TorchPrinter.UNARY[fn] + "(" in text
    assert got.dtype == dtype
    np.testing.assert_allclose(got.double().numpy(), _sympy(expr, xv, yv), **TOL[dtype], err_msg=f"seed {seed}")


EXPRS = [
    x * y ** 2 - sp.Rational(5, 7) * x + sp.pi,
    (x + 2) ** sp.Rational(5, 2) / y ** 3,  # half-integer and negative integer powers: sqrt, products
    y ** (x + sp.Rational(1, 3)),  # a general power: _tpow
    sp.Max(x, -0.25) + sp.Min(y, 1.0) - sp.Max(x, y, sp.Rational(1, 2)),  # clamp against Python floats
    sp.Abs(x - 0.3) * sp.sign(x) + sp.Heaviside(x - 0.1),
    sp.Piecewise((x, (x > 0.3) | (y > 1.2)), (-y, sp.Not(sp.And(x < -0.4, y < 0.9))), (x * y, True)),
    F.macaulay(x - 0.2) + F.safe_div(x, y) + F.max_(x, 0.1) * F.min_(y, x),
    F.powr(y, x + 2) + sp.tanh(x) * sp.exp(-y),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("expr", EXPRS, ids=[sp.sstr(e) for e in EXPRS])
def test_expressions_agree_with_sympy_in_their_dtype(expr, dtype):
    xv, yv, seed = _points(dtype)
    got, text = _run(expr, xv, yv)
    assert "**" not in text
    assert got.dtype == dtype, text
    np.testing.assert_allclose(got.double().numpy(), _sympy(expr, xv, yv), **TOL[dtype], err_msg=f"seed {seed}")


def test_a_literal_does_not_promote_float32():
    """(x + 1e-8) - y with y == x: in float32 arithmetic x + 1e-8 rounds to x (|x| >= 0.5), so the
    result is exactly 0; a float64 literal would have made it 1e-8."""
    expr = x + sp.Float(1e-8) - y
    for dtype, want in ((torch.float32, 0.0), (torch.float64, 1e-8)):
        xv = torch.linspace(0.5, 2.0, 16, dtype=dtype)
        got, text = _run(expr, xv, xv.clone())
        assert got.dtype == dtype
        np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-7, atol=0)


def test_literals():
    pr = TorchPrinter(Namer())
    assert pr.literal(0.1) == "0.1" and pr.literal(-2.5) == "(-2.5)"
    assert pr.doprint(sp.Rational(1, 3)) == repr(1 / 3)  # round-trip exact
    for value in (float("nan"), float("inf"), float("-inf"), -2.5, 1e-300, 0.1):
        got = eval(pr.literal(value))
        assert (math.isnan(got) and math.isnan(value)) or got == value
    assert pr.literal(float("-inf")) == '(-float("inf"))' and pr.literal(float("nan")) == 'float("nan")'
    assert pr.doprint(sp.true) == "True" and pr.doprint(sp.false) == "False"


def test_non_finite_values_and_undefined_pieces():
    """A Piecewise without a True clause is NaN outside its conditions; infinite pieces stay infinite."""
    expr = sp.Piecewise((x, x > 0.5), (sp.oo, x > 0), (-sp.oo, x > -0.5))
    xv = torch.tensor([0.75, 0.25, -0.25, -0.75, 0.0], dtype=torch.float64)
    got, _ = _run(expr, xv, xv)
    np.testing.assert_array_equal(got.numpy(), [0.75, np.inf, -np.inf, np.nan, -np.inf])
    np.testing.assert_array_equal(got.numpy(), _sympy(expr, xv, xv))


def test_relationals_and_booleans_are_elementwise():
    xv, yv, _ = _points(torch.float64)
    yv[:4] = xv[:4]  # some ties for Eq
    for expr, want in (((x > 0) & (y < 1), (xv > 0) & (yv < 1)), ((x > 0) | (y < 1), (xv > 0) | (yv < 1)),
                       (sp.Not(sp.And(x > 0, y < 1)), ~((xv > 0) & (yv < 1))), (sp.Eq(x, y), xv == yv),
                       (sp.Ne(x, y), xv != yv)):
        namer = Namer()
        text = TorchPrinter(namer).doprint(expr)
        got = eval(text, {"torch": torch, namer(x): xv, namer(y): yv})
        assert got.dtype == torch.bool, text
        assert torch.equal(got, want), text


def test_a_node_without_a_torch_rule_is_an_internal_error():
    with pytest.raises(InternalError, match=r"the torch printer has no rule for atan2 \(in atan2\(\$y, state/x\)\)"):
        TorchPrinter(Namer()).doprint(sp.atan2(y, x))
    with pytest.raises(InternalError, match="the torch printer has no rule for gamma"):
        TorchPrinter(Namer()).doprint(sp.gamma(x) + 1)
