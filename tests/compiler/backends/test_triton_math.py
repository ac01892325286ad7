"""The Triton math helpers (modelc.backends.triton_math) under the interpreter: within a few ulp of
NumPy over wide ranges (tiny arguments, where a naive exp/log spelling cancels, and huge ones, where
it overflows), in float64 and float32; and a spec calling every new function, compiled, on every
backend, against NumPy values and closed-form derivatives."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import modelc
from modelc.backends import triton_math as tm

_KERNEL = """
@triton.jit
def k_{n}(a, o, n, B: tl.constexpr):
    i = tl.arange(0, B)
    m = i < n
    tl.store(o + i, _mc_{n}(tl.load(a + i, mask=m, other=1.0)), mask=m)
"""
_UNARY = ("expm1", "log1p", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "atan")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    src = "import triton\nimport triton.language as tl\n" + tm.helper_source(list(tm.HELPERS))
    src += "".join(_KERNEL.format(n=n) for n in _UNARY)
    src += ("\n@triton.jit\ndef k_atan2(a, b, o, n, B: tl.constexpr):\n    i = tl.arange(0, B)\n    m = i < n\n"
            "    tl.store(o + i, _mc_atan2(tl.load(a + i, mask=m, other=1.0), tl.load(b + i, mask=m, other=1.0)),"
            " mask=m)\n")
    for w in (2, 8, 32):  # a row tile from w values, column 1 a scalar (a shared parameter's)
        cols = ", ".join("tl.load(s)" if j == 1 else f"tl.load(a + i * {w} + {j})" for j in range(w))
        src += (f"\n@triton.jit\ndef k_row{w}(a, s, o, B: tl.constexpr):\n    i = tl.arange(0, B)\n"
                f"    tl.store(o + i[:, None] * {w} + tl.arange(0, {w})[None, :], _mc_row{w}({cols}, B))\n")
    path = tmp_path_factory.mktemp("tm") / "tm_kernels.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("tm_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _points(n: str, rng, dtype) -> np.ndarray:
    big = 300 if dtype == torch.float64 else 30
    tiny = 10 ** rng.uniform(-big, 0, 500) * rng.choice([-1, 1], 500)
    return {
        "expm1": np.r_[rng.uniform(-40, 40, 500), tiny],
        "log1p": np.r_[rng.uniform(-0.999, 1e6, 500), tiny],
        "sinh": np.r_[rng.uniform(-80, 80, 500), tiny],
        "cosh": rng.uniform(-80, 80, 500),
        "tanh": np.r_[rng.uniform(-30, 30, 500), tiny],
        "asinh": np.r_[rng.uniform(-1e12, 1e12, 500), 10 ** rng.uniform(-big, big, 500) * rng.choice([-1, 1], 500)],
        "acosh": np.r_[1 + 10 ** rng.uniform(-6, 0, 500), 10 ** rng.uniform(0, big, 500)],
        "atanh": np.r_[rng.uniform(-1, 1, 500), tiny],
        "atan": np.r_[rng.uniform(-1e3, 1e3, 500), 10 ** rng.uniform(-big, big, 500) * rng.choice([-1, 1], 500)],
    }[n]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # discarded where() branches overflow, by design
@pytest.mark.parametrize("dtype, ulps", [(torch.float64, 4), (torch.float32, 4)])
@pytest.mark.parametrize("name", _UNARY)
def test_helpers_are_within_a_few_ulp_of_numpy(kernels, name, dtype, ulps):
    rng = np.random.default_rng()
    pts = _points(name, rng, dtype)
    a = torch.tensor(pts, dtype=dtype)
    out = torch.empty_like(a)
    getattr(kernels, f"k_{name}")[(1,)](a, out, len(a), B=1024)
    ref = {"asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "atan": np.arctan}.get(name, getattr(np, name))
    want = ref(a.numpy().astype(np.float64))  # the exact function of the rounded argument
    eps = torch.finfo(dtype).eps
    got = out.numpy().astype(np.float64)
    finite = np.isfinite(want) & (np.abs(want) < torch.finfo(dtype).max)
    assert np.array_equal(np.isnan(got), np.isnan(want)), name
    rel = np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), torch.finfo(dtype).tiny)
    assert rel.max() <= ulps * eps, (name, float(rel.max()), pts[finite][np.argmax(rel)])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_atan2_quadrants_origin_and_cut(kernels, dtype):
    rng = np.random.default_rng()
    y, x = rng.normal(size=(2, 800)) * 10 ** rng.uniform(-5, 5, (2, 800))
    y = np.r_[y, 0.0, 0.0, 1.0, -1.0, 0.0]
    x = np.r_[x, 0.0, -2.0, 0.0, 0.0, 3.0]
    a, b = torch.tensor(y, dtype=dtype), torch.tensor(x, dtype=dtype)
    out = torch.empty_like(a)
    kernels.k_atan2[(1,)](a, b, out, len(a), B=1024)
    want = np.arctan2(a.numpy().astype(np.float64), b.numpy().astype(np.float64))
    np.testing.assert_allclose(out.numpy(), want, rtol=4 * torch.finfo(dtype).eps, atol=0)
    assert out[-5] == 0 and float(out[-4]) == pytest.approx(np.pi)  # origin: 0; the cut from y = +0: pi


_EXPRS = ("sinh(x)", "cosh(x)", "tanh(x)", "asinh(x)", "acosh(1 + u**2)", "atanh(u/(1 + u**2))",
          "log1p(u**2)", "expm1(x)", "atan2(y, x)")
SPEC = "models:\n  elementary:\n    inputs: {x: {}, y: {}, u: {}}\n    outputs: {%s}\n    equations:\n%s" % (
    ", ".join(f"f{i}: {{}}" for i in range(len(_EXPRS))),
    "".join(f"      f{i}: {e}\n" for i, e in enumerate(_EXPRS)))


def _reference(x, y, u):
    w = u / (1 + u**2)
    vals = [np.sinh(x), np.cosh(x), np.tanh(x), np.arcsinh(x), np.arccosh(1 + u**2), np.arctanh(w),
            np.log1p(u**2), np.expm1(x), np.arctan2(y, x)]
    r2 = x**2 + y**2
    dw = (1 - u**2) / (1 + u**2) ** 2
    zero = np.zeros_like(x)
    # (d/dx, d/dy, d/du) of each, by hand: cosh' = sinh, acosh'(v) = 1/sqrt(v^2 - 1), ...
    ders = [(np.cosh(x), zero, zero), (np.sinh(x), zero, zero), (1 - np.tanh(x) ** 2, zero, zero),
            (1 / np.sqrt(x**2 + 1), zero, zero), (zero, zero, 2 * u / (np.abs(u) * np.sqrt(u**2 + 2))),
            (zero, zero, dw / (1 - w**2)), (zero, zero, 2 * u / (1 + u**2)), (np.exp(x), zero, zero),
            (-y / r2, x / r2, zero)]
    return np.stack(vals, -1), np.stack([np.stack(row, -1) for row in ders], -2)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("backend", ["torch", "triton", "c"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_spec_calling_every_function_runs_on_every_backend(tmp_path, backend, dtype):
    path = tmp_path / "elementary.yaml"
    path.write_text(SPEC)
    model = modelc.load(path, "elementary").Model(dtype=dtype, backend=backend)
    rng = np.random.default_rng()
    x, y, u = rng.uniform(-2, 2, (3, 50))
    # acosh(1 + u^2) is ill-conditioned at small u (1 + u^2 rounds): 1e-3 only in float64
    small = 1e-3 if dtype == torch.float64 else 0.05
    u[:3] = (0.3, small, 2.0)
    u[np.abs(u) < small] = small
    out = model({"x": torch.tensor(x, dtype=dtype), "y": torch.tensor(y, dtype=dtype),
                 "u": torch.tensor(u, dtype=dtype)}, derivatives=True)
    n = len(_EXPRS)
    got = np.stack([out[f"f{i}"].numpy() for i in range(n)], -1)
    jac = np.stack([np.stack([out.jacobian[f"f{i}", a].numpy().reshape(50) for a in ("x", "y", "u")], -1)
                    for i in range(n)], -2)
    xs, ys, us = (np.asarray(v, dtype=np.float64) for v in (torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype),
                                                            torch.tensor(u, dtype=dtype)))
    want, dwant = _reference(xs, ys, us)
    tol = 1e-13 if dtype == torch.float64 else 3e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(jac, dwant, rtol=10 * tol, atol=10 * tol)


def test_a_module_calling_the_helpers_compiles_for_sm90(tmp_path):
    """Compiled mode (not the interpreter) accepts the helpers: a generated module that calls every
    one of them compiles to PTX for sm_90 in float64 and float32 (no GPU needed)."""
    from test_triton_backend_sm90 import compile_in_child

    path = tmp_path / "elementary.yaml"
    path.write_text(SPEC)
    module = modelc.load(path, "elementary")
    source = open(module.__file__).read()
    assert all(f"def _mc_{n}(" in source for n in _UNARY + ("atan2",))
    rows = compile_in_child([[module.__file__, {}]])
    assert len(rows) == 4 and all(r[3] and r[4] and r[5] for r in rows), rows


#: the functions that keep a NaN argument's NaN on every backend (sign and heaviside are comparisons:
#: a NaN compares false, the same on every backend)
_NAN_BINARY = ("atan2", "safe_div", "max1", "max2", "min1", "min2")
_NAN_KEEPING = ("macaulay", "safe_sqrt", "asinh", "acosh", "tanh", "sinh", "cosh", "expm1", "log1p", "atanh",
                "abs")
NAN_SPEC = "models:\n  nanf:\n    inputs: {x: {}}\n    outputs: {%s}\n    equations:\n%s" % (
    ", ".join(f"o_{f}: {{}}" for f in _NAN_KEEPING + _NAN_BINARY),
    "".join(f"      o_{f}: {f}(log(x))\n" for f in _NAN_KEEPING)
    + "      o_atan2: atan2(log(x), 1.0)\n      o_safe_div: safe_div(1, log(x))\n"
    + "      o_max1: max(log(x), 0)\n      o_max2: max(0, log(x))\n"
    + "      o_min1: min(log(x), 0)\n      o_min2: min(0, log(x))\n")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("backend", ["torch", "triton", "c"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_nan_computed_inside_a_model_stays_nan_through_every_function(tmp_path, backend, dtype):
    """log of a negative input is NaN (the input itself is finite, so the call's NaN check passes);
    every function of it is NaN, on every backend, never a clamped number: max(nan, 0) was 0 on
    every backend, and on the GPU Triton's tl.maximum gave macaulay(nan) = 0 and asinh(nan) =
    log(2e8) (see the next test)."""
    path = tmp_path / "nanf.yaml"
    path.write_text(NAN_SPEC)
    model = modelc.load(path, "nanf").Model(dtype=dtype, backend=backend)
    out = model({"x": torch.tensor([-1.0, 0.5, 3.0], dtype=dtype)}, derivatives=False)
    for f in _NAN_KEEPING + _NAN_BINARY:
        v = out[f"o_{f}"].numpy()  # (log(0.5) is outside acosh's domain, log(3) outside atanh's)
        assert np.isnan(v[0]) and np.isfinite(v[1:]).any(), (f, v)


def test_no_triton_spelling_clamps_with_a_nan_dropping_min_or_max():
    """No function's Triton spelling and no helper clamps with tl.minimum/tl.maximum/tl.clamp: on
    the GPU they return the non-NaN operand (PTX max.f64), under the interpreter np.maximum keeps
    the NaN, so the test above cannot see the difference; a tl.where on a comparison is false for
    NaN on both. (macaulay was tl.maximum(x, 0.0): macaulay(nan) = 0 on the GPU only.)"""
    import re

    from modelc.functions import FUNCTIONS

    dropping = re.compile(r"tl\.(?:minimum|maximum|clamp)\((?![^()]*propagate_nan=tl\.PropagateNan\.ALL)")
    spellings = {f"function {name}": f.triton for name, f in FUNCTIONS.items() if isinstance(f.triton, str)}
    spellings.update({f"helper {name}": src for name, (_, src) in tm.HELPERS.items()})
    assert len(spellings) > 30
    bad = {what: text for what, text in spellings.items() if dropping.search(text)}
    assert not bad, bad


@pytest.mark.parametrize("width", [2, 8, 32])
def test_row_helper_puts_each_value_in_its_column(kernels, width):
    """``_mc_row<w>(a0, ..., a<w-1>, BLOCK)`` (the tile every kernel store goes through): column j
    holds aj for every point, a scalar argument broadcast to its whole column."""
    B = 16
    a = torch.arange(B * width, dtype=torch.float64).reshape(B, width) + 0.5
    s = torch.tensor([-7.25], dtype=torch.float64)
    o = torch.full((B, width), float("nan"), dtype=torch.float64)
    getattr(kernels, f"k_row{width}")[(1,)](a, s, o, B=B)
    want = a.clone()
    want[:, 1] = -7.25
    assert torch.equal(o, want)
