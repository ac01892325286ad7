"""Loading specs into the Model IR (modelc.frontend.load / model): roles, old(), defines and helper
functions, implicit systems, includes, compositions, exact numbers."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy as sp

from fe_util import lambdify, write
from modelc.frontend import load_spec
from modelc.frontend.model import old_name
from modelc.ir import SolverOptions, component_symbols, param_symbols
from modelc.runtime.types import SR2, Scalar

EXPLICIT = """
define:
  twice(x): 2*x
models:
  m:
    doc: a test model
    parameters:
      E: {default: 3.0, units: MPa, doc: modulus}
      P: {type: SR2, default: [1, 2, 3, 4, 5, 6]}
    inputs:
      eps: {var: forces/E, type: SR2}
      t: {var: forces/t}
      q: {}
    outputs:
      S: {var: state/S, type: SR2}
      dt: {}
      w: {var: state/internal/w}
    define:
      sq(a): a**2
      half_t: t/2
      quarter_t: half_t/2
      J2(s): 3/2*ddot(dev(s), dev(s))
    equations:
      S: twice(E*eps) + P*sq(q)
      dt: t - old(t)
      w: quarter_t + J2(eps) + sq(twice(q)) + old(q) + 3/2 + t**3
"""


def test_explicit_model_roles_and_equations(tmp_path):
    spec = load_spec(write(tmp_path, EXPLICIT))
    (m,) = spec.models
    assert m.name == "m" and m.doc == "a test model" and not m.is_implicit
    assert [(v.name, v.type) for v in m.inputs] == [("forces/E", SR2), ("forces/t", Scalar), ("q", Scalar),
                                                     ("old_forces/t", Scalar), ("old_q", Scalar)]
    assert [v.name for v in m.outputs] == ["state/S", "dt", "state/internal/w"]
    E, P = m.parameters
    assert (E.name, E.default, E.units, E.doc) == ("E", (3.0,), "MPa", "modulus")
    assert P.type is SR2 and P.default == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    eqs = {eq.var.name: eq.components for eq in m.equations}
    eps = component_symbols("forces/E", SR2)
    t, q = component_symbols("forces/t", Scalar)[0], component_symbols("q", Scalar)[0]
    (e_,), p = param_symbols("E", Scalar), param_symbols("P", SR2)
    assert all(sp.expand(eqs["state/S"][i] - (2 * e_ * eps[i] + p[i] * q**2)) == 0 for i in range(6))
    assert eqs["dt"] == (t - component_symbols("old_forces/t", Scalar)[0],)
    w = eqs["state/internal/w"][0]
    assert w.has(sp.Rational(3, 2)) and w.has(sp.Pow(t, 3)) and w.has(t / 4)  # exact numbers, powers kept
    # every component is a SymPy expression over declared symbols only
    allowed = {s for v in m.inputs for s in v.symbols} | {s for p in m.parameters for s in p.symbols}
    for comps in eqs.values():
        for c in comps:
            assert isinstance(c, sp.Expr) and c.free_symbols <= allowed
    # the IR is immutable
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name = "x"
    assert spec.digest and len(spec.digest) == 64


def test_j2_helper_value_against_numpy(tmp_path):
    spec = load_spec(write(tmp_path, EXPLICIT))
    w = spec.models[0].equations[2].components[0]
    rng = np.random.default_rng()
    ins = [s for v in spec.models[0].inputs for s in v.symbols]
    x = rng.normal(size=len(ins))
    got = lambdify(ins, w)(*x)
    a = x[:6]
    A = np.array([[a[0], a[5] / 2**.5, a[4] / 2**.5], [a[5] / 2**.5, a[1], a[3] / 2**.5],
                  [a[4] / 2**.5, a[3] / 2**.5, a[2]]])
    d = A - np.trace(A) / 3 * np.eye(3)
    t, q, oq = x[6], x[7], x[9]
    assert np.isclose(got, t / 4 + 1.5 * np.sum(d * d) + 4 * q**2 + oq + 1.5 + t**3, rtol=1e-12)


def test_old_names_follow_neml2():
    assert old_name("state/internal/ep") == "old_state/internal/ep"
    assert old_name("forces/t") == "old_forces/t"
    assert old_name("x") == "old_x"


IMPLICIT = """
models:
  rate:
    inputs: {x: {var: state/x}}
    outputs: {r: {var: state/r}}
    equations: {r: -2*x}
  solve:
    inputs:
      t: {var: forces/t}
      r: {var: state/r}
    define:
      dt: t - old(t)
    implicit:
      unknowns:
        x: {var: state/x, doc: the unknown}
        y: {var: state/y, type: SR2}
      residuals:
        x: x - old(x) - dt*r
        y: y - x*I2
      guess:
        y: old(x)*I2
      uses: [rate]
      solver: {rtol: 1.0e-8, max_iter: 7, on_failure: substep}
"""


def test_implicit_model(tmp_path):
    spec = load_spec(write(tmp_path, IMPLICIT))
    m = spec.model("solve")
    assert m.is_implicit and not m.equations
    s = m.implicit
    assert [v.name for v in s.unknowns] == ["state/x", "state/y"] and m.outputs == s.unknowns
    assert s.uses == ("rate",)
    assert s.solver == SolverOptions(rtol=1e-8, atol=1e-10, max_iter=7, on_failure="substep", max_substeps=8)
    assert [v.name for v in m.inputs] == ["forces/t", "state/r", "old_forces/t", "old_state/x"]
    x, ox = sp.Symbol("state/x", real=True), sp.Symbol("old_state/x", real=True)
    t, ot, r = (sp.Symbol(n, real=True) for n in ("forces/t", "old_forces/t", "state/r"))
    assert [eq.var.name for eq in s.residuals] == ["state/x", "state/y"]
    assert sp.expand(s.residuals[0].components[0] - (x - ox - (t - ot) * r)) == 0
    y = component_symbols("state/y", SR2)
    assert s.residuals[1].components == tuple(y[i] - (x if i < 3 else 0) for i in range(6))
    assert s.guess[0].components == (ox,)  # default guess: the previous value
    assert s.guess[1].components == (ox, ox, ox, 0, 0, 0)


def test_includes_diamond_and_relative_paths(tmp_path):
    (tmp_path / "lib").mkdir()
    write(tmp_path, "models:\n  base:\n    outputs: {y: {}}\n    equations: {y: 1}\n", "lib/base.yaml")
    write(tmp_path, "include: [base.yaml]\nmodels:\n  left:\n    inputs: {y: {}}\n    outputs: {z: {}}\n"
                    "    equations: {z: 2*y}\n", "lib/left.yaml")
    write(tmp_path, "include: [base.yaml]\nmodels:\n  right:\n    inputs: {y: {}}\n    outputs: {u: {}}\n"
                    "    equations: {u: 3*y}\ncompose:\n  br: {models: [base, right]}\n", "lib/right.yaml")
    spec = load_spec(write(tmp_path, "include: [lib/left.yaml, lib/right.yaml]\n"
                                     "compose:\n  all: {models: [left, right, base], keep: [y], doc: all}\n"))
    assert [m.name for m in spec.models] == ["base", "left", "right"]
    assert [(c.name, c.models, c.keep) for c in spec.compositions] == [
        ("br", ("base", "right"), ()), ("all", ("left", "right", "base"), ("y",))]
    assert spec.compositions[1].doc == "all"


def test_helpers_are_polymorphic_and_see_the_calling_model(tmp_path):
    text = """
    define:
      scale(x): k*x
    models:
      a:
        parameters: {k: {default: 2.0}}
        inputs: {e: {type: SR2}, s: {}}
        outputs: {o: {type: SR2}, p: {}, g: {type: SR2}}
        define:
          sqn(x): ddot(x, x)
        equations:
          o: scale(e)
          p: scale(s) + sqn(e)
          g: diff(sqn(e), e)
    """
    m = load_spec(write(tmp_path, text)).models[0]
    e = component_symbols("e", SR2)
    k = param_symbols("k", Scalar)[0]
    o, p, g = (eq.components for eq in m.equations)
    assert o == tuple(k * c for c in e)
    assert sp.expand(p[0] - (k * sp.Symbol("s", real=True) + sum(c**2 for c in e))) == 0
    assert g == tuple(2 * c for c in e)


def test_a_declared_previous_value_is_what_old_refers_to(tmp_path):
    text = """
    models:
      m:
        inputs: {t: {var: forces/t}, t_n: {var: old_forces/t}}
        outputs: {dt: {}}
        equations: {dt: t - old(t) + 0*t_n}
    """
    m = load_spec(write(tmp_path, text)).models[0]
    assert [v.name for v in m.inputs] == ["forces/t", "old_forces/t"]
    t, tn = (sp.Symbol(n, real=True) for n in ("forces/t", "old_forces/t"))
    assert m.equations[0].components == (t - tn,)


def test_numbers_without_a_dot_are_numbers(tmp_path):
    text = """
    models:
      m:
        parameters: {E: {default: 2e5}, k: {default: -1E-3}}
        outputs: {y: {}}
        equations: {y: 1e3}
    """
    m = load_spec(write(tmp_path, text)).models[0]
    assert [p.default for p in m.parameters] == [(2e5,), (-1e-3,)]
    assert m.equations[0].components == (sp.Float(1000.0),)
