"""The custom-function table (modelc.functions): every rule present, derivatives against central
finite differences on both sides of every kink, the documented values at the kinks, and the torch
spellings against the NumPy references (float64 and float32)."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

from fe_util import lambdify
from modelc import functions as F
from modelc.backends import triton_math
from modelc.runtime.model import TORCH_HELPERS

x, y, z = sp.symbols("x y z", real=True)
ARGS = (x, y, z)
#: the real domains (sampled) of the smooth elementary functions
_DOMAINS = {"sinh_": (-5.0, 5.0), "cosh_": (-5.0, 5.0), "tanh_": (-5.0, 5.0), "asinh_": (-50.0, 50.0),
            "acosh_": (1.001, 50.0), "atanh_": (-0.999, 0.999), "log1p_": (-0.999, 20.0), "expm1_": (-5.0, 5.0)}


def _kink_points(name: str, rng) -> list[tuple[float, ...]]:
    """Random points on both sides of the function's kink (and far from it)."""
    pts = []
    if name == "powr":  # defined for a >= 0; the kink is a = 0
        return [(float(rng.uniform(1e-3, 2.0)), float(rng.uniform(0.5, 5.0))) for _ in range(6)]
    if name == "powr_shift":  # P / a away from a = 0 (where it is powr(0, e), a jump)
        return [(float(rng.normal()), float(rng.uniform(0.1, 2.0)) * s, float(rng.normal()))
                for s in (1, -1, 1, -1, 1, -1)]
    if name in _DOMAINS:  # smooth: random points of the domain, tiny and large ones included
        lo, hi = _DOMAINS[name]
        return [(float(v),) for v in rng.uniform(lo, hi, 8)] + \
            [(float(v),) for v in (rng.uniform(-1, 1, 2) * 1e-6 if lo < 0 else lo + rng.uniform(1e-3, 1e-2, 2))]
    if name == "atan2_":  # across the branch cut (y = 0, x < 0) and around the origin
        return [(d, float(-rng.uniform(0.1, 2.0))) for d in rng.uniform(1e-3, 1.0, 3) * [1, -1, 1]] + \
            [(float(a), float(b)) for a, b in rng.normal(size=(6, 2))]
    for _ in range(6):
        d = float(rng.uniform(1e-3, 1.0)) * (1 if rng.random() < 0.5 else -1)
        a, b = (float(v) for v in rng.normal(size=2))
        pts += {
            1: [(d,), (-d,)],
            2: [(b + d, b), (b - d, b)] if name in ("max_", "min_") else [(a, d), (a, -d)],
            3: [(d, a, b), (-d, a, b)],
        }[F.FUNCTIONS[name].nargs]
    return pts


def test_every_entry_has_every_rule():
    assert F.FUNCTIONS, "the table is empty"
    for name, r in F.FUNCTIONS.items():
        assert r.name == name == r.cls.__name__
        assert r.nargs in r.cls.nargs
        placeholders = [f"<{i}>" for i in range(r.nargs)]
        for spelling in (r.torch, r.triton):
            printed = spelling.format(*placeholders)
            assert all(p in printed for p in placeholders), (name, spelling)
        assert r.torch.startswith(("torch.",) + tuple(f"{h}(" for h in TORCH_HELPERS))
        assert "tl." in r.triton or r.triton_helpers
        for h in r.triton_helpers:
            assert h in r.triton and h in triton_math.HELPERS
        assert callable(r.numpy) and len(r.kink_doc) > 10 and r.cls.__doc__
        e = r.cls(*ARGS[:r.nargs])
        for a in ARGS[:r.nargs]:
            d1 = e.diff(a)
            d2 = d1.diff(a)
            for d in (d1, d2):
                assert not d.has(sp.DiracDelta, sp.Derivative, sp.Subs), (name, d)
        assert F.rule_for(e) is r
    assert F.rule_for(sp.exp(x)) is None
    assert set(F.BY_SPELLING) >= {"abs", "sign", "heaviside", "macaulay", "min", "max", "safe_sqrt", "safe_div"}


@pytest.mark.parametrize("name", sorted(F.FUNCTIONS))
def test_derivatives_match_central_differences_on_both_sides_of_the_kink(name):
    rng = np.random.default_rng()
    r = F.FUNCTIONS[name]
    args = ARGS[:r.nargs]
    e = r.cls(*args)
    f = lambdify(args, e)
    grads = [lambdify(args, e.diff(a)) for a in args]
    h = 1e-7
    for p in _kink_points(name, rng):
        for i in range(r.nargs):
            up, dn = list(p), list(p)
            up[i] += h
            dn[i] -= h
            fd = (f(*up) - f(*dn)) / (2 * h)
            assert abs(float(grads[i](*p)) - fd) <= 1e-6 * max(1.0, abs(fd)), (name, p, i)


def test_values_and_derivatives_at_the_kinks_are_the_documented_ones():
    a, b = sp.Rational(3, 7), sp.Rational(-2, 5)
    assert F.heaviside(0) == 0 and F.sign(0) == 0 and F.macaulay(0) == 0 and F.abs_(0) == 0
    assert F.macaulay(x).diff(x).subs(x, 0) == 0
    assert F.abs_(x).diff(x).subs(x, 0) == 0
    assert F.heaviside(x).diff(x) == 0 and F.sign(x).diff(x) == 0
    for fn in (F.max_, F.min_):  # a tie differentiates as the first argument
        e = fn(x, y)
        assert e.diff(x).subs({x: a, y: a}) == 1 and e.diff(y).subs({x: a, y: a}) == 0
    assert F.safe_div(x, 0) == 0
    assert F.safe_div(x, y).diff(x).subs(y, 0) == 0 and F.safe_div(x, y).diff(y).subs(y, 0) == 0
    assert F.safe_sqrt(0) == 0 and F.safe_sqrt(-1) == 0
    assert F.safe_sqrt(x).diff(x).subs(x, 0) == 0
    assert F.ifpos(0, a, b) == b and F.ifnonneg(0, a, b) == a
    # the NumPy references agree at the kinks
    ns = F.numpy_namespace()
    assert ns["heaviside"](0.0) == 0 and ns["sign"](0.0) == 0 and ns["safe_div"](1.0, 0.0) == 0
    assert ns["safe_sqrt"](-1.0) == 0 and ns["ifpos"](0.0, 1.0, 2.0) == 2 and ns["ifnonneg"](0.0, 1.0, 2.0) == 1
    # the unit flow direction of J2 at zero stress: no NaN in value or derivative
    q = x**2 + y**2
    n = F.safe_div(x, F.safe_sqrt(q))
    for d in (n, n.diff(x), n.diff(y), n.diff(x).diff(y)):
        v = lambdify((x, y), d)(0.0, 0.0)
        assert np.isfinite(v) and v == 0


def test_numeric_arguments_fold_and_constant_branches_become_steps():
    assert F.macaulay(sp.Rational(-3, 2)) == 0 and F.macaulay(2) == 2
    assert F.max_(1, 3) == 3 and F.min_(1, 3) == 1 and F.max_(x, x) == x
    assert F.safe_sqrt(4) == 2 and F.safe_div(x, 2) == x / 2
    assert F.ifpos(x, 1, 0) == F.heaviside(x)
    assert F.ifnonneg(x, 1, 0) == 1 - F.heaviside(-x)
    assert F.ifpos(x, y, y) == y
    assert F.sign(-3) == -1 and F.abs_(-3) == 3
    assert F.powr(x, 3) == x**3 and F.powr(0, y) != 0 and F.powr(0, sp.Rational(5, 2)) == 0
    # the Perzyna rate: no NaN in the derivative at a zero base (SymPy's Pow gives 0/0 there)
    n = sp.Symbol("n", real=True)
    d = F.powr(F.macaulay(x), n).diff(x)
    assert lambdify((x, n), d)(-1.0, 5.0) == 0 and lambdify((x, n), d)(0.0, 5.0) == 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(F.FUNCTIONS))
def test_torch_spelling_matches_the_numpy_reference(name, dtype):
    rng = np.random.default_rng()
    r = F.FUNCTIONS[name]
    pts = np.array(_kink_points(name, rng) + [tuple([0.0 if name != "acosh_" else 1.0] * r.nargs)])
    if name == "powr":
        pts = np.abs(pts)
    if r.nargs == 2:  # ties and zero denominators exactly
        pts = np.vstack([pts, [[0.5, 0.5], [1.5, 0.0]]])
    cols = [torch.tensor(pts[:, i], dtype=dtype) for i in range(r.nargs)]
    ns = {"torch": torch, **TORCH_HELPERS, **{f"a{i}": c for i, c in enumerate(cols)}}
    code = r.torch.format(*(f"a{i}" for i in range(r.nargs)))
    got = eval(code, ns)  # our own spelling, not spec input
    want = r.numpy(*(c.numpy() for c in cols))
    assert got.dtype == dtype
    np.testing.assert_allclose(got.numpy(), np.asarray(want, dtype=np.float64), rtol=1e-6, atol=0)


_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def k_{name}({params}, out, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
{loads}
    tl.store(out + i, {expr}, mask=m)
'''


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # log(0) inside powr, by design
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_triton_spellings_run_under_the_interpreter(tmp_path, monkeypatch, dtype):
    """Each Triton spelling, in a real kernel file, against the NumPy reference (kinks included)."""
    import importlib.util

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    rng = np.random.default_rng()
    src = []
    for name, r in F.FUNCTIONS.items():
        args = [f"a{i}" for i in range(r.nargs)]
        loads = "\n".join(f"    {a} = tl.load({a}_ptr + i, mask=m, other=1.0)" for a in args)
        src.append(_KERNEL.format(name=name, params=", ".join(f"{a}_ptr" for a in args), loads=loads,
                                  expr=r.triton.format(*args)))
    path = tmp_path / "fn_kernels.py"
    helpers = triton_math.helper_source([h for r in F.FUNCTIONS.values() for h in r.triton_helpers])
    path.write_text("import triton\nimport triton.language as tl\n" + helpers + "\n".join(src))
    spec = importlib.util.spec_from_file_location("fn_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, r in F.FUNCTIONS.items():
        pts = np.array(_kink_points(name, rng) + [tuple([0.0 if name != "acosh_" else 1.0] * r.nargs)])
        if name == "powr":
            pts = np.abs(pts) + 0.0
            pts[-1] = (0.0, 2.5)
        if r.nargs == 2:
            pts = np.vstack([pts, [[0.5, 0.5], [1.5, 0.0]]])
        cols = [torch.tensor(pts[:, i], dtype=dtype) for i in range(r.nargs)]
        out = torch.empty(len(pts), dtype=dtype)
        getattr(mod, f"k_{name}")[(1,)](*cols, out, len(pts), BLOCK=64)
        want = np.asarray(r.numpy(*(c.numpy() for c in cols)), dtype=np.float64)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_select_folds_only_on_a_real_constant_condition():
    """ifpos/ifnonneg decide a constant condition on its value, exactly for a rational (1e-400 is
    positive, though its float64 is 0); a complex or undefined one (log(-2), nan, abs_ of a complex)
    decides nothing and stays, for the frontend or printer to refuse by name. It raised TypeError
    ("Cannot convert complex to float") while building the expression, found by the random
    expressions of test_symdag (about 1 seed in 800)."""
    assert F.ifpos(sp.sqrt(2) - 1, x, y) == x and F.ifpos(1 - sp.sqrt(2), x, y) == y
    assert F.ifnonneg(sp.Integer(0), x, y) == x and F.ifpos(sp.Integer(0), x, y) == y
    assert F.ifpos(sp.Rational(1, 10**400), x, y) == x
    for d in (sp.log(-2), sp.nan, sp.zoo, F.abs_(sp.log(-3) ** sp.Rational(3, 2)) - 1):
        for select in (F.ifpos, F.ifnonneg):
            e = select(d, x, y)
            assert isinstance(e, select) and e.args[0] == d
            assert isinstance(select(d, 1, 0), select)  # not a step of an undecided constant


def test_custom_functions_evaluate_on_constant_arguments():
    """Constant arguments that do not fold to a SymPy number (pi, sqrt(2)) evaluate through the
    reference implementation, so every printer can write them (abs(pi) in a spec was an internal
    error: "the torch printer cannot print the constant abs_(pi)", found by the frontend fuzz test)."""
    import math

    from modelc.functions import abs_, macaulay, powr, safe_div, safe_sqrt, sign

    assert float(abs_(-sp.pi).evalf()) == math.pi
    assert float(sign(-sp.sqrt(2)).evalf()) == -1.0
    assert float(macaulay(sp.pi - 4).evalf()) == 0.0
    assert float(safe_sqrt(sp.sqrt(2) - 2).evalf()) == 0.0
    assert float(safe_div(sp.pi, sp.sqrt(2)).evalf()) == math.pi / math.sqrt(2)
    assert abs(float(powr(sp.pi, sp.Rational(1, 3)).evalf()) - math.pi ** (1 / 3)) < 1e-15
    assert abs_(sp.Symbol("x")).evalf().has(abs_)  # not constant: stays symbolic


def test_a_spec_with_a_constant_inside_a_custom_function_compiles(tmp_path):
    from modelc.driver import compile_model, load_spec

    spec = tmp_path / "c.yaml"
    spec.write_text("models:\n  m:\n    inputs:\n      x: {var: forces/x}\n    outputs:\n      y: {var: state/y}\n"
                    "    equations:\n      y: abs(pi)*x + sqrt(2)\n", encoding="utf-8")
    compile_model(load_spec(spec), "m")
