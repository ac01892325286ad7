"""passes.gates: strong zeros for products of a gate and reciprocal powers of a norm.

Checked against: the expressions evaluated with the PyTorch spellings of the custom functions
before and after the rewrite, in float32 and float64, on fresh random points: bit for bit
where the gate is not 0, 0 (finite) where it is and the deviator is tiny enough to overflow the
original, NaN where the gate is NaN; and which products the rewrite leaves alone (no gate, a single
reciprocal, a gate that is not a factor). The bundled models through the whole pipeline:
tests/models/test_tiny_deviator.py."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

from modelc.functions import heaviside, ifzero, macaulay, numpy_namespace, powr, safe_div, safe_sqrt
from modelc.passes.gates import Gates
from modelc.runtime.model import t_heaviside, t_sdiv

x, y, f, gam, n = sp.symbols("x y f gamma n", real=True)
r = safe_sqrt(x**2 + y**2)
#: the derivative of the flow direction x / r by x, as the chain rule writes it: two reciprocals
#: of r (r**2 and 2 r) in one product, 1 / r**3 in all
DN = safe_div(1, r) - x * x * safe_div(1, r**2) * safe_div(1, 2 * r)


#: the custom functions as the generated PyTorch code spells them (modelc.functions), in the dtype of
#: their arguments (the NumPy references compute in float64)
TORCH = {"safe_div": t_sdiv, "heaviside": t_heaviside, "safe_sqrt": lambda q: torch.sqrt(torch.clamp(q, min=0.0)),
         "macaulay": lambda q: torch.clamp(q, min=0.0), "powr": torch.pow,
         "ifzero": lambda g, a, b: torch.where(g == 0.0, a, b)}


def _eval(expr, dtype, **values):
    fn = sp.lambdify(sorted(values), expr, modules=[TORCH])
    args = [torch.as_tensor(np.asarray(values[k]), dtype=dtype) for k in sorted(values)]
    return fn(*args).numpy()


@pytest.mark.parametrize("gate", [macaulay(f), heaviside(f), gam, powr(macaulay(f), n), 3 * gam])
def test_a_gated_product_is_zero_where_the_gate_is_zero_and_the_same_elsewhere(gate):
    e = gate * y * DN
    out = Gates([gam])(e)
    assert out != e and out.has(ifzero)
    rng = np.random.default_rng()
    k = 200
    tiny = rng.normal(size=(2, k)) * 10.0 ** rng.uniform(-30, -14, k)  # overflows float32's 1/r**3
    normal = rng.normal(size=(2, k))
    for dtype in (torch.float32, torch.float64):
        # where the gate is 0: finite and 0 (the original is NaN at the tiny points in float32)
        at_zero = dict(x=tiny[0], y=tiny[1], f=-rng.uniform(0.1, 1, k), gamma=np.zeros(k), n=np.full(k, 3.0))
        got = _eval(out, dtype, **at_zero)
        assert np.isfinite(got).all() and (got == 0).all(), (gate, dtype)
        if dtype == torch.float32:
            assert not np.isfinite(_eval(e, dtype, **at_zero)).all()  # (what the rewrite is for)
        # elsewhere: the same bits
        for pts in (tiny, normal):
            live = dict(x=pts[0], y=pts[1], f=rng.uniform(0.1, 1, k), gamma=rng.uniform(0.1, 1, k),
                        n=np.full(k, 3.0))
            np.testing.assert_array_equal(_eval(out, dtype, **live), _eval(e, dtype, **live))


def test_a_nan_gate_stays_nan():
    out = Gates()(macaulay(f) * y * DN)
    got = _eval(out, torch.float64, x=np.array([1e-20, 0.5]), y=np.array([1e-20, 0.5]), f=np.array([np.nan, np.nan]))
    assert np.isnan(got).all()


def test_what_is_left_alone():
    g = Gates([gam])
    for e in (y * DN,  # no gate
              macaulay(f) * x * safe_div(1, r),  # one reciprocal: the bounded unit direction
              macaulay(f) + y * DN,  # the gate is not a factor of the product that overflows
              x * y * safe_div(1, r**2) * (1 + gam),  # nor here (1 + gamma is not 0 where gamma is)
              macaulay(f) * y * safe_div(1, x**2 + 1)):  # a reciprocal of something that is no norm
        assert g(e) is e, e


def test_the_reciprocals_are_masked_not_the_product():
    """Only the few reciprocal atoms become selects, so that the CSE shares one select per atom and
    keeps factoring through the products (a select around each product cost 20% of a coupled
    model's tangent)."""
    out = Gates([gam])(gam * (3 * x * y * DN + 2 * y * DN))
    masked = {a.args[2] for a in out.atoms(ifzero)}
    assert masked == {safe_div(1, r), safe_div(1, r**2), safe_div(1, 2 * r)}
    assert all(a.args[:2] == (gam, 0) for a in out.atoms(ifzero))


def test_a_product_kept_whole_stays_whole():
    """The CSE pass keeps a chain-rule partial as one unevaluated factor; the rewrite rebuilds it
    unevaluated (flattened, its factors merged into every entry and were not shared again)."""
    inner = sp.Mul(x, y, safe_div(1, r**2), safe_div(1, 2 * r), evaluate=False)
    e = sp.Mul(macaulay(f), inner, evaluate=False)
    out = Gates()(e)
    assert out.func is sp.Mul and len(out.args) == 2 and out.args[0] == macaulay(f)
    assert out.args[1].func is sp.Mul and len(out.args[1].args) == 4


def test_ifzero_folds_and_differentiates():
    assert ifzero(0, x, y) == x and ifzero(2, x, y) == y and ifzero(f, x, x) == x
    assert ifzero(f, x, y).diff(x) == ifzero(f, 1, 0) and ifzero(f, x, y).diff(f) == 0
    ns = numpy_namespace()
    got = ns["ifzero"](np.array([0.0, -0.0, 1e-300, np.nan]), np.full(4, 1.0), np.full(4, 2.0))
    np.testing.assert_array_equal(got, [1.0, 1.0, 2.0, 2.0])
