"""modelc.backends.triton_printer: printed expressions run as Triton kernels under the interpreter
(TRITON_INTERPRET=1, set by tests/conftest.py), with the generated module's math shim and the
helpers of modelc.backends.triton_math, and compared with SymPy's own value (``sympy.lambdify`` over
NumPy in float64) at fresh random points, in float64 and float32 kernels: typed constants of the
kernel dtype (hoisted once each, in first-use order), non-finite constants, powers whose exponent is
made of baked (constexpr) parameters, and the nodes this printer has no rule for."""
from __future__ import annotations

import importlib.util
import itertools
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
import torch
import triton
import triton.language as tl

from modelc import functions as F
from modelc.backends import triton_math
from modelc.backends.names import Namer
from modelc.backends.triton_printer import TritonPrinter
from modelc.errors import InternalError

x, y, n = sp.symbols("state/x $y $n", real=True)
DTYPES = {torch.float64: tl.float64, torch.float32: tl.float32}
TOL = {torch.float64: dict(rtol=1e-13, atol=1e-14), torch.float32: dict(rtol=3e-6, atol=3e-6)}
TEMPLATE = Path(__file__).parents[3] / "templates" / "module.py.j2"
_IDS = itertools.count()


def _shim() -> str:
    """The generated module's math shim (_pow), as the template writes it."""
    text = TEMPLATE.read_text()
    start = text.index("    @triton.jit\n    def _pow(")
    end = text.index("{% for line in triton_math %}")
    shim = textwrap.dedent(text[start:end])
    assert "def _pow(" in shim and "{" not in shim
    return shim


def _kernels(tmp_path, exprs, constexpr=None):
    """A module with one kernel ``k<i>(xp, yp, np_, op, count, DTYPE, N, B)`` per expression, storing it
    at every point; ``constexpr`` maps baked parameter symbols to the constexpr argument ``N``."""
    bodies = []
    for e in exprs:
        namer = Namer()
        pr = TritonPrinter(namer, constexpr)
        text = pr.doprint(e)
        assert {namer(s) for s in e.free_symbols} <= {"state_x", "p_y", "p_n"}
        bodies.append(pr.prologue() + [f"r = {text}"])
    src = "import triton\nimport triton.language as tl\n\n" + _shim()
    src += triton_math.helper_source(triton_math.helpers_for(line for b in bodies for line in b))
    for k, lines in enumerate(bodies):
        src += (f"\n\n@triton.jit\ndef k{k}(xp, yp, np_, op, count, DTYPE: tl.constexpr, N: tl.constexpr, "
                "B: tl.constexpr):\n    i = tl.arange(0, B)\n    m = i < count\n"
                "    state_x = tl.load(xp + i, mask=m, other=1.0)\n    p_y = tl.load(yp + i, mask=m, other=1.0)\n"
                "    p_n = tl.load(np_ + i, mask=m, other=1.0)\n")
        src += "".join(f"    {line}\n" for line in lines)
        src += "    tl.store(op + i, r + tl.zeros([B], dtype=DTYPE), mask=m)\n"
    name = f"triton_printer_kernels_{next(_IDS)}"
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [getattr(mod, f"k{k}") for k in range(len(exprs))]


def _launch(kernel, xv, yv, nv=None, N=1.0):
    out = torch.full_like(xv, 12345.0)
    nv = torch.full_like(xv, N) if nv is None else nv
    kernel[(1,)](xv, yv, nv, out, xv.numel(), DTYPE=DTYPES[xv.dtype], N=N, B=triton.next_power_of_2(xv.numel()))
    return out


def _sympy(expr, xv, yv, N=1.0):
    f = sp.lambdify((x, y, n), expr, modules=[F.numpy_namespace(), "numpy"])
    return np.broadcast_to(np.asarray(f(xv.double().numpy(), yv.double().numpy(), N), dtype=np.float64), xv.shape)


def _points(dtype, count=50):
    """x in (-1, 1), y in (0.5, 1.5), from a fresh seed (in the failure message)."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    return (torch.as_tensor(rng.uniform(-1, 1, count), dtype=dtype),
            torch.as_tensor(rng.uniform(0.5, 1.5, count), dtype=dtype), seed)

EXPRS = [
    x * y ** 2 - sp.Rational(5, 7) * x + sp.pi,
    (x + 2) ** sp.Rational(5, 2) / y ** 3 + x ** -2,  # tl.sqrt and products, never **
    y ** (x + sp.Rational(1, 3)),  # _pow
    sp.tanh(2 * x) * sp.sinh(y) - sp.cosh(x) + sp.exp(-y) * sp.log(y) + sp.sin(3 * x) * sp.cos(y),  # _mc_*, tl.*
    sp.Max(x, -0.25) + sp.Min(y, 1.0) - sp.Max(x, y, sp.Rational(1, 2)) + sp.Abs(x - 0.3) * sp.sign(x),
    sp.Piecewise((x, (x > 0.3) | (y > 1.2)), (-y, sp.Not(sp.And(x < -0.4, y < 0.9))), (x * y, True)),
    sp.Heaviside(x - 0.1) + F.macaulay(x - 0.2) + F.safe_div(x, y) + F.max_(x, 0.1) * F.min_(y, x),
    F.powr(y, x + 2) + F.tanh_(x) + F.atan2_(x, y - 1),  # triton_math helpers
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernels_agree_with_sympy(tmp_path, dtype):
    kernels = _kernels(tmp_path, EXPRS)
    xv, yv, seed = _points(dtype)
    for expr, k in zip(EXPRS, kernels):
        got = _launch(k, xv, yv)
        assert got.dtype == dtype
        np.testing.assert_allclose(got.double().numpy(), _sympy(expr, xv, yv), **TOL[dtype],
                                   err_msg=f"{sp.sstr(expr)}, seed {seed}")


def test_constants_are_typed_in_the_kernel_dtype(tmp_path):
    """(x + 1e-8) - y with y == x: in a float32 kernel x + K rounds to x (|x| >= 0.5), so the result
    is exactly 0; in float64 it is 1e-8. A bare Python float would be a float32 constant in both."""
    expr = x + sp.Float(1e-8) - y
    pr = TritonPrinter(Namer())
    pr.doprint(expr)
    assert pr.prologue() == ["K0 = tl.full([], 1e-08, DTYPE)"]
    (k,) = _kernels(tmp_path, [expr])
    for dtype, want in ((torch.float32, 0.0), (torch.float64, 1e-8)):
        xv = torch.linspace(0.5, 2.0, 16, dtype=dtype)
        np.testing.assert_allclose(_launch(k, xv, xv.clone()).double().numpy(), want, rtol=1e-7, atol=0)


def test_each_constant_is_hoisted_once_in_first_use_order():
    pr = TritonPrinter(Namer())
    texts = [pr.doprint(e) for e in (x / 4, 3 * y, sp.Max(x, sp.Rational(1, 4)) * y ** sp.Rational(1, 4) - 3 * x)]
    assert pr.constants == {"0.25": "K0", "3.0": "K1"}
    assert pr.prologue() == ["K0 = tl.full([], 0.25, DTYPE)", "K1 = tl.full([], 3.0, DTYPE)"]
    assert [sorted(re.findall(r"\bK\d\b", t)) for t in texts] == [["K0"], ["K1"], ["K0", "K0", "K1"]]
    # a sibling (a helper function's printer) has its own constants
    sib = pr.sibling(Namer())
    assert sib.constants == {} and sib.doprint(2.5 * x) == "(K0 * state_x)" and pr.constants["0.25"] == "K0"


def test_non_finite_constants(tmp_path):
    """A Piecewise without a True clause is NaN outside its conditions; infinite pieces stay infinite."""
    expr = sp.Piecewise((x, x > 0.5), (sp.oo, x > 0), (-sp.oo, x > -0.5))
    pr = TritonPrinter(Namer())
    pr.doprint(expr)
    assert set(pr.constants) == {"0.5", "0.0", "-0.5", 'float("inf")', 'float("-inf")', 'float("nan")'}
    (k,) = _kernels(tmp_path, [expr])
    for dtype in DTYPES:
        xv = torch.tensor([0.75, 0.25, -0.25, -0.75, 0.0], dtype=dtype)
        got = _launch(k, xv, xv).double().numpy()
        np.testing.assert_array_equal(got, [0.75, np.inf, -np.inf, np.nan, -np.inf])
        np.testing.assert_array_equal(got, _sympy(expr, xv, xv))


POWERS = [y ** n, y ** (2 * n - 1), y ** (1 / n), F.powr(y, n - 1), y ** (n * x)]


def test_powers_of_baked_parameters_are_constexpr(tmp_path):
    """With ``$n`` baked (the constexpr argument N), an exponent made of baked parameters and numbers is
    folded at compile time (``_mc_powk``: binary powering for an integer); one that also reads a
    variable is a run-time ``_pow``. Not baked, every one is a run-time power of the loaded p_n."""
    baked = [TritonPrinter(Namer(), {n: "N"}).doprint(e) for e in POWERS]
    assert [t.split("(")[0] for t in baked] == ["_mc_powk"] * 4 + ["_pow"]
    assert baked[0] == "_mc_powk(p_y, N)" and "(1.0 / N)" in baked[2] and "p_n" in baked[4]
    assert not any("_mc_powk" in TritonPrinter(Namer()).doprint(e) for e in POWERS)
    kernels = _kernels(tmp_path, POWERS, {n: "N"})
    plain = _kernels(tmp_path, POWERS)
    for dtype, N in itertools.product(DTYPES, (3.0, -2.0, 2.5, 1.0)):
        xv, yv, seed = _points(dtype)
        for expr, k, kp in zip(POWERS, kernels, plain):
            want = _sympy(expr, xv, yv, N)
            for kern in (k, kp):
                np.testing.assert_allclose(_launch(kern, xv, yv, N=N).double().numpy(), want, **TOL[dtype],
                                           err_msg=f"{sp.sstr(expr)}, n = {N}, seed {seed}")


def test_exponents_without_a_constexpr_spelling_fall_back():
    pr = TritonPrinter(Namer(), {n: "N"})
    assert pr.doprint(y ** sp.exp(n)) == "_pow(p_y, tl.exp(p_n))"  # exp(N) has no compile-time spelling
    assert pr.doprint(y ** 3) == "(p_y * p_y * p_y)"  # a number: expanded, never _mc_powk
    assert pr.doprint(sp.sqrt(y)) == "tl.sqrt(p_y)"


@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")
def test_large_integer_powers_of_negative_numbers(tmp_path):
    """An integer power beyond the 16 expanded to products is binary powering (_mc_powk with the
    exponent a constexpr), so a negative base gets its real value, as torch.pow and mc_pow give it
    (printed as exp(K log x) it was NaN)."""
    exprs = [x ** 17, x ** -18, x ** 255]
    kernels = _kernels(tmp_path, exprs)
    xv = torch.tensor([-1.25, -0.5, 0.75, 1.1], dtype=torch.float64)
    for expr, k in zip(exprs, kernels):
        np.testing.assert_allclose(_launch(k, xv, xv).numpy(), _sympy(expr, xv, xv), rtol=1e-13)


def test_nodes_without_a_triton_rule_are_internal_errors():
    """tan, atan and erf have PyTorch and C spellings but none here (no libdevice under the
    interpreter): refused by name, never printed plausibly."""
    for expr, name in ((sp.tan(x), "tan"), (sp.atan(x) + 1, "atan"), (sp.erf(y), "erf")):
        with pytest.raises(InternalError, match=f"the triton printer has no rule for {name} "):
            TritonPrinter(Namer()).doprint(expr)


def test_hyperbolic_functions_keep_relative_accuracy_near_zero(tmp_path):
    """SymPy's tanh, sinh (and cosh) print as the accurate triton_math helpers: at x = 1e-10 the
    template's former shims, 1 - exp(-2|x|) and exp(x) - exp(-x), lost ~5e-7 of relative accuracy."""
    exprs = [sp.tanh(x), sp.sinh(x), sp.cosh(x) - 1]
    kernels = _kernels(tmp_path, exprs)
    xv = torch.tensor([1e-10, -3e-9, 2e-6, 0.5], dtype=torch.float64)
    ref = [np.tanh(xv.numpy()), np.sinh(xv.numpy()), np.cosh(xv.numpy()) - 1.0]
    for k, r, e in zip(kernels, ref, exprs):
        got = _launch(k, xv, xv).numpy()
        rtol = 1e-13 if e != exprs[2] else 1e-6  # cosh - 1 cancels in any spelling
        np.testing.assert_allclose(got, r, rtol=rtol, atol=0 if e != exprs[2] else 1e-15)
