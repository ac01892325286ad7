"""The two expression printers: every rule, evaluated against SymPy itself (lambdify-free: the printed
torch code is eval'd on random tensors and compared with ``expr.subs`` in high precision)."""
from __future__ import annotations

import math

import pytest
import sympy as sp
import torch

from modelc import functions as F
from modelc.backends.c_printer import CPrinter
from modelc.backends.names import Namer, sanitize
from modelc.backends.torch_printer import TorchPrinter
from modelc.backends.triton_printer import TritonPrinter
from modelc.errors import InternalError
from modelc.runtime import model as rt

x, y = sp.symbols("state/x $y", real=True)

EXPRS = [
    x + 2 * y - 3, x * y / 7, x ** 2, x ** 5, x ** -3, sp.sqrt(y), y ** sp.Rational(3, 2), y ** sp.Rational(-1, 2),
    y ** sp.Rational(1, 3), y ** x, sp.exp(x), sp.log(y), sp.sin(x), sp.cos(x), sp.tanh(x), sp.Abs(x),
    sp.Max(x, y, 0.5), sp.Min(x, y), sp.sign(x), sp.Piecewise((x, x > 0.2), (y, x < -0.2), (x * y, True)),
    sp.Rational(1, 3) * x, sp.pi * x, F.macaulay(x), F.heaviside(x), F.safe_div(x, y), F.max_(x, y),
]


def _eval_torch(expr, xv, yv):
    namer = Namer()
    text = TorchPrinter(namer).doprint(expr)
    env = {"torch": torch, **rt.TORCH_HELPERS, namer(x): xv, namer(y): yv}
    return eval(text, env), text


@pytest.mark.parametrize("expr", EXPRS, ids=[sp.sstr(e) for e in EXPRS])
def test_torch_printer_agrees_with_sympy(expr):
    g = torch.Generator().manual_seed(0)
    xv = torch.rand(16, generator=g, dtype=torch.float64) * 2 - 1
    yv = torch.rand(16, generator=g, dtype=torch.float64) + 0.5
    got, text = _eval_torch(expr, xv, yv)
    assert "**" not in text
    f = sp.lambdify((x, y), expr, modules=[F.numpy_namespace(), "numpy"])
    want = torch.as_tensor(f(xv.numpy(), yv.numpy()), dtype=torch.float64)
    assert torch.allclose(torch.as_tensor(got, dtype=torch.float64).expand(16), want.expand(16), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("expr", EXPRS, ids=[sp.sstr(e) for e in EXPRS])
def test_triton_printer_rules(expr):
    pr = TritonPrinter(Namer())
    text = pr.doprint(expr)
    assert "**" not in text and "libdevice" not in text
    # every constant is a typed constant of the kernel dtype, never a bare literal
    for line in pr.prologue():
        assert line.split(" = ")[1].startswith("tl.full([], ") and line.endswith(", DTYPE)")


def test_literals_are_exact_and_typed():
    pr = TritonPrinter(Namer())
    pr.doprint(sp.Rational(1, 3) * x + sp.Float("0.1") * y)
    assert pr.prologue() == ["K0 = tl.full([], 0.3333333333333333, DTYPE)", "K1 = tl.full([], 0.1, DTYPE)"]
    assert TorchPrinter(Namer()).doprint(sp.Rational(-2, 3) * x) == "(-0.6666666666666666 * state_x)"


def test_integer_powers_are_multiplications():
    assert TritonPrinter(Namer()).doprint(x ** 3) == "(state_x * state_x * state_x)"
    assert TorchPrinter(Namer()).doprint(x ** -2) == "(1.0 / (state_x * state_x))"


def test_unknown_node_is_an_internal_error():
    with pytest.raises(InternalError, match="no rule for"):
        TritonPrinter(Namer()).doprint(sp.gamma(x))
    with pytest.raises(InternalError, match="no rule for"):
        TorchPrinter(Namer()).doprint(sp.DiracDelta(x))
    with pytest.raises(InternalError, match="constant"):
        TorchPrinter(Namer()).doprint(sp.zoo * sp.S.One)


def test_names_are_identifiers_unique_and_deterministic():
    n = Namer()
    a, b = sp.Symbol("state/S[1]"), sp.Symbol("state_S_1")
    assert n(a) == "state_S_1" and n(b) == "state_S_1_2" and n(a) == "state_S_1"
    assert sanitize("$E") == "p_E" and sanitize("lambda") == "v_lambda" and sanitize("X") == "v_X"
    assert all(sanitize(s).isidentifier() for s in ("a/b[3]", "1x", "d(a)/d(b)@m", "$nu"))


def test_math_shim_functions_match_numpy():
    # the shims are Triton code; check their formulas on the torch side with the same algebra
    xs = torch.linspace(-30, 30, 101, dtype=torch.float64)
    t = torch.exp(-2 * xs.abs())
    r = (1 - t) / (1 + t)
    assert torch.allclose(torch.where(xs < 0, -r, r), torch.tanh(xs), atol=1e-15)
    assert math.isclose(math.exp(2.5 * math.log(1.7)), 1.7 ** 2.5)


@pytest.mark.parametrize("backend", ["c", "torch", "triton"])
def test_every_function_prints_each_argument_once(backend):
    """A function whose spelling names an argument twice would double the source at each level of
    nesting (perzyna_iso's guess, a Macaulay bracket of a safe_sqrt, was one 34,000-character line of
    C), and eager PyTorch would evaluate that argument twice: such functions are helpers (C: mc_pos,
    mc_sign, mc_ge, mc_le, mc_sdiv; Triton: _mc_sign, _mc_ge, _mc_le, _mc_sdiv; PyTorch: _ge, _le,
    _sdiv, _heaviside). Every function of the table, in every argument position, nested six deep:
    x appears once."""
    from modelc.backends.c_printer import CPrinter
    from modelc.backends.torch_printer import TorchPrinter
    from modelc.backends.triton_printer import TritonPrinter
    printer = {"c": CPrinter, "torch": TorchPrinter, "triton": TritonPrinter}[backend]
    for name, rule in F.FUNCTIONS.items():
        for pos in range(rule.nargs):
            expr = x
            for _ in range(6):
                args = [y + k for k in range(2, 2 + rule.nargs)]  # distinct: nothing folds
                args[pos] = expr - 1
                expr = rule.cls(*args)
            text = printer(Namer()).doprint(expr)
            assert text.count(Namer()(x)) == 1, (name, pos, text)


def test_a_select_on_a_constant_prints_its_branch():
    """ifpos / ifnonneg whose condition is a constant (the derivative of sqrt(2)**x guards its log on
    sqrt(2) > 0) are decided at print time on the float64 value: before, the torch code was
    torch.where(1.414 > 0.0, ...), whose condition is a Python bool (TypeError)."""
    for printer in (TorchPrinter(Namer()), TritonPrinter(Namer())):
        assert printer.doprint(F.ifpos(sp.sqrt(2), x, y)) == printer.doprint(x)
        assert printer.doprint(F.ifpos(1 - sp.sqrt(2), x, y)) == printer.doprint(y)
        assert printer.doprint(F.ifnonneg(sp.log(1), x, y)) == printer.doprint(x)  # log(1) = 0: >= 0
        assert printer.doprint(F.ifnonneg(-sp.exp(1), x, y)) == printer.doprint(y)
    got, text = _eval_torch(F.ifpos(sp.sqrt(2), x * sp.log(sp.sqrt(2)), 0) + y, torch.ones(3, dtype=torch.float64),
                            torch.zeros(3, dtype=torch.float64))
    assert torch.allclose(got, torch.full((3,), math.log(2) / 2, dtype=torch.float64)), text


def test_constant_factors_print_as_one_literal():
    """1/3 sqrt(6) y is one literal times y (rounded once from the exact product), not 1/3 * y * sqrt(6)."""
    text = TorchPrinter(Namer()).doprint(sp.Rational(1, 3) * sp.sqrt(6) * y)
    assert text.count(".") == 1 and repr(float(sp.sqrt(6) / 3)) in text, text
    text = TorchPrinter(Namer()).doprint(-x / sp.sqrt(2))  # a constant denominator: a multiplication
    assert "/" not in text and repr(float(1 / sp.sqrt(2))) in text, text
    got, _ = _eval_torch(-x * y / sp.sqrt(2), torch.tensor([2.0], dtype=torch.float64), torch.tensor([3.0], dtype=torch.float64))
    assert abs(float(got) + 6 / math.sqrt(2)) < 1e-15 * 6


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("backend", ["c", "torch", "triton"])
def test_constant_bases_run_on_every_backend(tmp_path, backend, dtype):
    """a**x for a constant a that is not a number literal (sqrt(2), exp(1), log(3), 2 + exp(1)): values
    and d/dx = a**x log(a) against the closed form. The PyTorch code raised TypeError on every one
    (its derivative's log(a), named as a common subexpression, was torch.log of a Python float)."""
    import modelc

    bases = {"sqrt(2)": math.sqrt(2), "exp(1)": math.e, "log(3)": math.log(3), "(2 + exp(1))": 2 + math.e}
    exprs = [f"{b}**x" for b in bases] + ["(2 + exp(1))**(x/4) + log(3)*sqrt(2)**x"]
    spec = tmp_path / "bases.yaml"
    spec.write_text("models:\n  bases:\n    inputs: {x: {}}\n    outputs: {%s}\n    equations:\n%s" % (
        ", ".join(f"o{i}: {{}}" for i in range(len(exprs))), "".join(f"      o{i}: {e}\n" for i, e in enumerate(exprs))))
    model = modelc.load(spec, "bases").Model(dtype=dtype, backend=backend)
    xs = torch.linspace(-2, 3, 11, dtype=dtype)
    out = model({"x": xs}, derivatives=True)
    xv = xs.double().numpy()
    a = list(bases.values())
    want = [ai ** xv for ai in a] + [(2 + math.e) ** (xv / 4) + math.log(3) * math.sqrt(2) ** xv]
    dwant = [ai ** xv * math.log(ai) for ai in a] + [
        (2 + math.e) ** (xv / 4) * math.log(2 + math.e) / 4 + math.log(3) * math.sqrt(2) ** xv * math.log(2) / 2]
    tol = 1e-14 if dtype == torch.float64 else 3e-6
    for i in range(len(exprs)):
        assert torch.allclose(out[f"o{i}"].double(), torch.tensor(want[i]), rtol=tol, atol=0), exprs[i]
        d = out.jacobian[f"o{i}", "x"].double().reshape(-1)
        assert torch.allclose(d, torch.tensor(dwant[i]), rtol=4 * tol, atol=0), exprs[i]


@pytest.mark.parametrize("backend", ["c", "torch", "triton"])
def test_atan2_of_a_constant_keeps_float64(tmp_path, backend):
    """atan2 with a constant argument: the PyTorch spelling made the constant a tensor with
    torch.as_tensor, float32 by default, and atan2(sqrt(2), x) came out 5e-9 off in a float64 model."""
    import modelc

    spec = tmp_path / "a.yaml"
    spec.write_text("models:\n  a:\n    inputs: {x: {}}\n    outputs: {p: {}, q: {}}\n    equations:\n"
                    "      p: atan2(sqrt(2), x)\n      q: atan2(x, exp(1))\n")
    xs = torch.linspace(-2, 3, 11, dtype=torch.float64)
    out = modelc.load(spec, "a").Model(dtype=torch.float64, backend=backend)({"x": xs}, derivatives=True)
    want_p = torch.tensor([math.atan2(math.sqrt(2), v) for v in xs.tolist()], dtype=torch.float64)
    want_q = torch.tensor([math.atan2(v, math.e) for v in xs.tolist()], dtype=torch.float64)
    assert torch.allclose(out["p"], want_p, rtol=4e-16, atol=4e-16)
    assert torch.allclose(out["q"], want_q, rtol=4e-16, atol=4e-16)
    dp = out.jacobian["p", "x"].reshape(-1)
    assert torch.allclose(dp, -math.sqrt(2) / (xs ** 2 + 2), rtol=1e-15, atol=1e-15)


def _deepest_chain(text: str) -> int:
    """The deepest nesting of operations (BinOp, Call) in Python source: what Python's compiler
    and Triton's code generator (one visitor call per node) recurse through."""
    import ast

    deepest, stack = 0, [(ast.parse(text), 0)]
    while stack:
        node, depth = stack.pop()
        depth += isinstance(node, (ast.BinOp, ast.Call))
        deepest = max(deepest, depth)
        stack.extend((c, depth) for c in ast.iter_child_nodes(node))
    return deepest


def test_long_sums_products_and_extrema_print_in_groups():
    """A sum of 2500 terms printed as one chain of additions overflowed Python's compiler
    (RecursionError in the generated module's check), and a sum of 400 failed Triton's compile for
    the GPU (its code generator recurses once per operation). Sums, products, min and max of more
    than printer.CHUNK operands now print in groups: the values are those of the chain (to
    rounding), the nesting stays shallow, and up to CHUNK operands print as one chain as before."""
    from modelc.backends import printer

    zs = sp.symbols("z0:1100", real=True)
    g = torch.Generator().manual_seed(1)
    vals = torch.rand(1100, 4, generator=g, dtype=torch.float64) + 0.5
    namer = Namer()
    env = {"torch": torch, **rt.TORCH_HELPERS, **{namer(z): v for z, v in zip(zs, vals)}}
    cases = [(sp.Add(*zs) - 3 * zs[7], vals.sum(0) - 3 * vals[7]),
             (sp.Add(*[(-1) ** k * zs[k] for k in range(1100)]),
              sum((-1) ** k * vals[k] for k in range(1100))),
             (sp.Mul(*zs[:200]) / sp.Mul(*zs[200:300]), vals[:200].prod(0) / vals[200:300].prod(0)),
             (sp.Max(*zs[:40]), vals[:40].max(0).values), (sp.Min(*zs[:40]), vals[:40].min(0).values)]
    for expr, want in cases:
        text = TorchPrinter(namer).doprint(expr)
        assert _deepest_chain(text) <= 4 * printer.CHUNK, text[:200]
        compile(text, "printed", "eval")
        torch.testing.assert_close(eval(text, env), want, rtol=1e-12, atol=0)
        for pr in (TritonPrinter(Namer()), CPrinter(Namer())):
            pr.doprint(expr)  # every backend groups through the shared printer
    short = TorchPrinter(Namer()).doprint(sp.Add(*zs[:printer.CHUNK]))
    assert short.count("(") == 1 and short.count(" + ") == printer.CHUNK - 1
