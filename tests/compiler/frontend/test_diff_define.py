"""diff(f, x) with x a named define (or a helper argument bound to an expression): the partial
derivative of f w.r.t. x as an argument of its own, by the chain rule through the defines after x.
Checked against a hand-derived closed form and central finite differences in x, and as the flow
direction of a J2 surface written over a define S = 2 mu (eps - Ep)."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from fe_util import caret, central_fd, lambdify, write
from modelc.errors import SpecError
from modelc.frontend import load_spec
from modelc.ir import component_symbols, param_symbols
from modelc.runtime.types import TYPES

SPEC = """
define:
  vm(x): sqrt(3/2*ddot(dev(x), dev(x)))
models:
  m:
    parameters: {mu: {default: 3.0}, c: {default: 0.7}}
    inputs:
      eps: {type: SR2}
      Ep: {type: SR2}
      a: {}
    outputs:
      N: {type: SR2}
      g: {}
      h: {type: SR2}
      Nh: {type: SR2}
    define:
      S: 2*mu*(eps - Ep)
      sd: dev(S)
      q: a*S
      f: vm(S) + c*tr(S)**2 + a*tr(eps)
      u: exp(c*a)
      w: u*log(1 + u**2) + a**3
      dir(x): diff(vm(x) + c*tr(x)**2, x)
    equations:
      N: diff(f, S)
      g: diff(w, u)
      h: diff(ddot(sd, sd) + ddot(q, I2), S)
      Nh: dir(2*mu*(eps - Ep))
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_spec(write(tmp_path_factory.mktemp("dd"), SPEC)).model("m")


def _eval(model, out: str, x: dict[str, np.ndarray]) -> np.ndarray:
    eq = next(e for e in model.equations if e.var.name == out)
    syms = [s for n, t in (("eps", "SR2"), ("Ep", "SR2"), ("a", "Scalar")) for s in component_symbols(n, TYPES[t])]
    syms += [param_symbols("mu", TYPES["Scalar"])[0], param_symbols("c", TYPES["Scalar"])[0]]
    vals = list(x["eps"]) + list(x["Ep"]) + [x["a"], x["mu"], x["c"]]
    return np.array([float(lambdify(syms, c)(*vals)) for c in eq.components])


def _point(rng):
    return {"eps": rng.standard_normal(6), "Ep": 0.3 * rng.standard_normal(6), "a": rng.random() + 0.2,
            "mu": 3.0, "c": 0.7}


def _S_map(x):
    return 2 * x["mu"] * (x["eps"] - x["Ep"])


def _f_of_S(S, x):  # f as a function of S (a Mandel vector) at fixed eps, Ep, a
    d = S.copy()
    d[:3] -= S[:3].mean()
    return np.sqrt(1.5 * d @ d) + x["c"] * S[:3].sum() ** 2 + x["a"] * x["eps"][:3].sum()


@pytest.mark.parametrize("seed", range(4))
def test_diff_wrt_a_define_is_the_closed_form_and_matches_finite_differences(model, seed):
    x = _point(np.random.default_rng(seed))
    S = _S_map(x)
    sd = S.copy()
    sd[:3] -= S[:3].mean()
    closed = 1.5 * sd / np.sqrt(1.5 * sd @ sd) + 2 * x["c"] * S[:3].sum() * np.r_[1.0, 1, 1, 0, 0, 0]
    got = _eval(model, "N", x)
    np.testing.assert_allclose(got, closed, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, central_fd(lambda s: _f_of_S(s, x), S), rtol=1e-7, atol=1e-7)
    # a helper argument bound to an expression is differentiated the same way
    np.testing.assert_allclose(_eval(model, "Nh", x), closed, rtol=1e-12, atol=1e-12)


def test_defines_after_x_are_rebuilt_on_it(model):
    """h = diff(dev(S):dev(S) + (a S):I, S) = 2 dev(S) + a I: sd and q, built from S after it, count."""
    x = _point(np.random.default_rng(9))
    S = _S_map(x)
    sd = S.copy()
    sd[:3] -= S[:3].mean()
    np.testing.assert_allclose(_eval(model, "h", x), 2 * sd + x["a"] * np.r_[1.0, 1, 1, 0, 0, 0], rtol=1e-12,
                               atol=1e-12)


def test_scalar_define(model):
    """g = d/du (u log(1 + u^2) + a^3) = log(1 + u^2) + 2 u^2 / (1 + u^2), u = exp(c a)."""
    x = _point(np.random.default_rng(5))
    u = np.exp(x["c"] * x["a"])
    assert _eval(model, "g", x)[0] == pytest.approx(np.log(1 + u ** 2) + 2 * u ** 2 / (1 + u ** 2), rel=1e-13)
    eq = next(e for e in model.equations if e.var.name == "g")
    assert not any("diff%" in s.name for c in eq.components for s in c.free_symbols)  # placeholders replaced
    assert sp.Symbol("a", real=True) in eq.components[0].free_symbols


def test_diff_wrt_a_constant_is_a_located_error(tmp_path):
    text = """
    models:
      m:
        inputs: {x: {}}
        outputs: {y: {type: SR2}}
        equations:
          y: diff(x, I2)
    """
    with pytest.raises(SpecError, match="differentiates w.r.t. a variable or a named define") as exc:
        load_spec(write(tmp_path, text))
    assert caret(exc.value) == "I2" and ":6:" in str(exc.value)
