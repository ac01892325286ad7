"""modelc.backends.c_printer: printed expressions compiled as C (the runtime's header and build helper,
modelc.runtime.cbuild, as the C backend compiles them; one build per dtype) and compared with SymPy's
own value (``sympy.lambdify`` over NumPy in float64) at fresh random points, in double and in float
(``-DMC_FLOAT32``): every function of its table, typed literals (a float build computes in float),
non-finite literals, NaN-propagating minimum/maximum, branch-free booleans (int 0/1), and the nodes it
has no rule for. Needs the C compiler the C backend needs."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
import sympy as sp
import torch

from modelc import functions as F
from modelc.backends.c_printer import CPrinter
from modelc.backends.names import Namer
from modelc.errors import InternalError
from modelc.runtime import cbuild, cheader
from rt_helpers import skip_module_without_cc

skip_module_without_cc()  # (never skipped in CI)

x, y = sp.symbols("state/x $y", real=True)
DTYPES = (torch.float64, torch.float32)
TOL = {torch.float64: dict(rtol=1e-13, atol=1e-14), torch.float32: dict(rtol=3e-6, atol=3e-6)}
NUMPY = [F.numpy_namespace(), {"erf": np.vectorize(math.erf)}, "numpy"]

# each entry of CPrinter.UNARY, on an argument inside its domain
UNARY_ARGS = {sp.exp: x, sp.log: y, sp.sin: 3 * x, sp.cos: 3 * x, sp.tan: x, sp.tanh: 2 * x, sp.sinh: 2 * x,
              sp.cosh: 2 * x, sp.atan: 4 * x, sp.asin: x * y / 2, sp.acos: x * y / 2, sp.erf: 2 * x}
EXPRS = [
    x * y ** 2 - sp.Rational(5, 7) * x + sp.pi,
    (x + 2) ** sp.Rational(5, 2) / y ** 3 + x ** 3,  # sqrt and products
    y ** (x + sp.Rational(1, 3)),  # mc_pow
    (x - 1.5) ** 17 + (x - 1.5) ** -18,  # beyond the expanded powers: mc_pow, a negative base (finite in float)
    sp.Max(x, -0.25) + sp.Min(y, 1.0) - sp.Max(x, y, sp.Rational(1, 2)) + sp.Abs(x - 0.3) * sp.sign(x),
    sp.Piecewise((x, (x > 0.3) | (y > 1.2)), (-y, sp.Not(sp.And(x < -0.4, y < 0.9))), (x * y, True)),
    sp.Heaviside(x - 0.1) + F.macaulay(x - 0.2) + F.safe_div(x, y) + F.max_(x, 0.1) * F.min_(y, x),
    F.powr(y, x + 2) + F.tanh_(x) + F.atan2_(x, y - 1) + F.sign(x),
]
SPECIAL = {
    "literal": x + sp.Float(1e-8) - y,  # typed literals
    "nonfinite": sp.Piecewise((x, x > 0.5), (sp.oo, x > 0), (-sp.oo, x > -0.5)),  # NaN outside
    "minmax": sp.Min(x, y) + sp.Max(x, 0.5),
    "boolean": sp.Piecewise((1, sp.And(x > 0, sp.Or(y < 1, sp.Not(sp.And(x < 0.5, y > 1.2))))), (0, True)),
}
ALL = {**{f.__name__: f(a) for f, a in UNARY_ARGS.items()}, **{f"e{k}": e for k, e in enumerate(EXPRS)}, **SPECIAL}


def _source(float32: bool) -> str:
    """One function per expression: ``void f_<key>(n, x, y, out)``, the expression at each point."""
    src = ("#define MC_FLOAT32\n" if float32 else "") + "#define NIN 1\n#define NP 0\n#define NY 1\n"
    src += "#define MC_NEWTON 0\n" + cheader.KERNEL_INCLUDE + "\n"
    for key, expr in ALL.items():
        namer = Namer()
        text = CPrinter(namer).doprint(expr)
        assert {namer(s) for s in expr.free_symbols} <= {"state_x", "p_y"}
        src += (f"\nvoid f_{key}(int64_t n, const real *x, const real *y, real *out) {{\n"
                f"    for (int64_t i = 0; i < n; ++i) {{\n        real state_x = x[i], p_y = y[i];\n"
                f"        out[i] = {text};\n    }}\n}}\n")
    return src


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("c_printer")
    return {dtype: cbuild.load_library_source(_source(dtype == torch.float32), f"c_printer_{str(dtype)[6:]}", cache)
            for dtype in DTYPES}


def _run(libs, key, xv, yv):
    out = torch.full_like(xv, 12345.0)
    fn = getattr(libs[xv.dtype], f"f_{key}")
    fn.restype = None
    fn(ctypes.c_int64(xv.numel()), ctypes.c_void_p(xv.data_ptr()), ctypes.c_void_p(yv.data_ptr()),
       ctypes.c_void_p(out.data_ptr()))
    return out


def _sympy(expr, xv, yv):
    f = sp.lambdify((x, y), expr, modules=NUMPY)
    return np.broadcast_to(np.asarray(f(xv.double().numpy(), yv.double().numpy()), dtype=np.float64), xv.shape)


def _points(dtype, count=64):
    """x in (-1, 1), y in (0.5, 1.5), from a fresh seed (in the failure message)."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    return (torch.as_tensor(rng.uniform(-1, 1, count), dtype=dtype),
            torch.as_tensor(rng.uniform(0.5, 1.5, count), dtype=dtype), seed)


def test_every_function_of_the_table_is_tested():
    assert set(UNARY_ARGS) == set(CPrinter.UNARY)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compiled_expressions_agree_with_sympy(libs, dtype):
    xv, yv, seed = _points(dtype)
    for key, expr in ALL.items():
        if key in SPECIAL:
            continue
        np.testing.assert_allclose(_run(libs, key, xv, yv).double().numpy(), _sympy(expr, xv, yv), **TOL[dtype],
                                   err_msg=f"{key}: {sp.sstr(expr)}, seed {seed}")


def test_literals_are_typed(libs):
    """(x + 1e-8) - y with y == x: in the float build x + ((real)1e-08) rounds to x (|x| >= 0.5), so
    the result is exactly 0; a bare double literal would promote the sum and leave 1e-8."""
    pr = CPrinter(Namer())
    assert pr.doprint(SPECIAL["literal"]) == "(((real)1e-08) + state_x - p_y)"
    for dtype, want in ((torch.float32, 0.0), (torch.float64, 1e-8)):
        xv = torch.linspace(0.5, 2.0, 16, dtype=dtype)
        np.testing.assert_allclose(_run(libs, "literal", xv, xv.clone()).double().numpy(), want, rtol=1e-7, atol=0)


def test_non_finite_literals(libs):
    pr = CPrinter(Namer())
    assert (pr.literal(float("nan")), pr.literal(float("inf")), pr.literal(float("-inf"))) == (
        "MC_NAN", "MC_INF", "(-MC_INF)")
    for dtype in DTYPES:
        xv = torch.tensor([0.75, 0.25, -0.25, -0.75, 0.0], dtype=dtype)
        got = _run(libs, "nonfinite", xv, xv).double().numpy()
        np.testing.assert_array_equal(got, [0.75, np.inf, -np.inf, np.nan, -np.inf])
        np.testing.assert_array_equal(got, _sympy(SPECIAL["nonfinite"], xv, xv))


def test_minimum_and_maximum_propagate_nan(libs):
    """Like torch.minimum/maximum (and NumPy's), unlike C's fmin/fmax, which drop a NaN."""
    assert CPrinter(Namer()).doprint(sp.Min(x, y)) == "mc_min(p_y, state_x)"
    for dtype in DTYPES:
        xv = torch.tensor([float("nan"), 0.25, 0.75, float("nan")], dtype=dtype)
        yv = torch.tensor([1.0, float("nan"), 0.5, float("nan")], dtype=dtype)
        got = _run(libs, "minmax", xv, yv)
        want = torch.minimum(xv, yv) + torch.maximum(xv, torch.tensor(0.5, dtype=dtype))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert torch.isnan(got).tolist() == [True, True, False, True]


def test_booleans_are_branch_free_ints(libs):
    pr = CPrinter(Namer())
    text = pr.doprint(SPECIAL["boolean"])
    assert "&&" not in text and "||" not in text and "!" not in text
    assert " & " in text and " | " in text and " == 0)" in text
    assert (pr.doprint(sp.true), pr.doprint(sp.false)) == ("1", "0")
    for dtype in DTYPES:
        xv, yv, seed = _points(dtype)
        want = ((xv > 0) & ((yv < 1) | ~((xv < 0.5) & (yv > 1.2)))).to(dtype)
        np.testing.assert_array_equal(_run(libs, "boolean", xv, yv).numpy(), want.numpy(), err_msg=f"seed {seed}")


def test_a_node_without_a_c_rule_is_an_internal_error():
    with pytest.raises(InternalError, match=r"the c printer has no rule for gamma \(in gamma\(state/x\)\)"):
        CPrinter(Namer()).doprint(sp.gamma(x))
    with pytest.raises(InternalError, match="the c printer has no rule for atan2"):
        CPrinter(Namer()).doprint(sp.atan2(y, x) + 1)
    with pytest.raises(InternalError, match="the c printer cannot print the constant zoo"):
        CPrinter(Namer()).doprint(x + sp.zoo)
