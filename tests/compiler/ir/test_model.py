"""modelc.ir.model: the Model IR's symbols registry (component and parameter symbols, deterministic and
shared), its immutable dataclasses (equality without source locations), the lookups that raise
KeyError, the tangent's per-name locations and the readable ``str`` of parameters and models."""
from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from modelc.ir import (ComposeDecl, Equation, ImplicitSystem, Loc, Model, Parameter, Partial, SolverOptions, Spec,
                       Tangent, Variable, component_symbols, param_symbols)
from modelc.runtime.types import R2, SR2, SSR4, Scalar, Vec


def test_component_symbols_are_named_real_and_shared():
    (s,) = component_symbols("state/ep", Scalar)
    assert s.name == "state/ep" and s.is_real and s != sp.Symbol("state/ep")
    S = component_symbols("state/S", SR2)
    assert [c.name for c in S] == [f"state/S[{i}]" for i in range(6)]
    assert len(component_symbols("forces/F", R2)) == 9 and len(component_symbols("C", SSR4)) == 36
    assert len(component_symbols("forces/v", Vec)) == 3
    assert component_symbols("state/S", SR2) == S and all(a is b for a, b in zip(component_symbols("state/S", SR2), S))
    assert Variable("state/S", SR2).symbols == S


def test_parameter_symbols_carry_a_dollar_prefix():
    (e,) = param_symbols("E", Scalar)
    assert e.name == "$E" and e is Parameter("E", Scalar).symbols[0]
    assert e is not component_symbols("E", Scalar)[0]  # a variable named E is another symbol
    assert [s.name for s in param_symbols("b", Vec)] == ["$b[0]", "$b[1]", "$b[2]"]


def test_locations_print_and_never_take_part_in_equality():
    here, there = Loc("spec.yaml", 12, 5, "E * eps"), Loc("other.yaml", 1, 1)
    assert str(here) == "spec.yaml:12:5" and here.text == "E * eps" and there.text == ""
    assert Variable("state/S", SR2, "stress", here) == Variable("state/S", SR2, "stress", there)
    assert hash(Variable("a", Scalar, loc=here)) == hash(Variable("a", Scalar))
    assert Variable("a", Scalar, "doc") != Variable("a", Scalar, "other doc")
    assert Parameter("E", Scalar, (1.0,), loc=here) == Parameter("E", Scalar, (1.0,))
    assert Tangent(("o",), ("i",), here, (here, here)) == Tangent(("o",), ("i",))


def test_ir_objects_are_immutable():
    v = Variable("a", Scalar)
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.name = "b"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        SolverOptions().rtol = 1.0  # type: ignore[misc]
    assert not hasattr(v, "__dict__")  # slots
    assert dataclasses.replace(v, name="b") == Variable("b", Scalar) and v.name == "a"


def test_parameter_str():
    assert str(Parameter("E", Scalar, (210e3,), "MPa", bounds="(0, inf)")) == "E: Scalar = 210000.0 [MPa] in (0, inf)"
    assert str(Parameter("b", Vec, (1.0, 2.0, 3.0))) == "b: Vec = (1.0, 2.0, 3.0)"
    assert str(Parameter("q", Scalar)) == "q: Scalar"
    assert str(Variable("state/S", SR2, "stress")) == "state/S: SR2"


def test_tangent_locations_of_names():
    whole, a, b, c = Loc("s.yaml", 4, 3), Loc("s.yaml", 4, 10), Loc("s.yaml", 4, 20), Loc("s.yaml", 5, 10)
    t = Tangent(("state/S", "state/ep"), ("forces/E",), whole, (a, b, c))
    assert (t.loc_of("state/S"), t.loc_of("state/ep"), t.loc_of("forces/E")) == (a, b, c)
    assert t.loc_of("forces/T") is whole  # not a listed name: the tangent's own location
    assert Tangent(("state/S",), ("forces/E",), whole).loc_of("state/S") is whole  # no per-name locations
    assert str(t) == "tangent d(state/S, state/ep) / d(forces/E)"


def _models():
    x, y, u = Variable("forces/x", Scalar), Variable("state/y", Scalar), Variable("state/u", Scalar)
    (xs,), (ys,), (us,), (a,) = x.symbols, y.symbols, u.symbols, param_symbols("a", Scalar)
    leaf = Model("leaf", (x,), (y,), (Parameter("a", Scalar, (2.0,)),), (Equation(y, (a * xs ** 2,)),),
                 partials=(Partial("state/y", "forces/x", ((2 * a * xs,),)),))
    system = ImplicitSystem((u,), (Equation(u, (us ** 3 - xs,)),), (Equation(u, (xs,)),))
    solve = Model("solve", (x,), (u,), implicit=system)
    both = Model("both", (x,), (y, u), submodels=(leaf, solve))
    return leaf, solve, both


def test_model_kinds_and_variable_lookup():
    leaf, solve, both = _models()
    assert (leaf.is_composed, leaf.is_implicit) == (False, False)
    assert (solve.is_composed, solve.is_implicit) == (False, True)
    assert (both.is_composed, both.is_implicit) == (True, False)
    assert both.variable("forces/x") is both.inputs[0] and both.variable("state/u") is both.outputs[1]
    with pytest.raises(KeyError, match="state/nope"):
        both.variable("state/nope")
    spec = Spec("lib.yaml", (leaf, solve), (ComposeDecl("both", ("leaf", "solve")),))
    assert spec.model("solve") is solve
    with pytest.raises(KeyError, match="both"):
        spec.model("both")  # a composition is not one of the spec's models


def test_model_str_lists_everything():
    leaf, solve, both = _models()
    assert str(leaf).splitlines() == [
        "model leaf", "  in  forces/x: Scalar", "  out state/y: Scalar", "  par a: Scalar = 2.0",
        "  state/y[0] = $a*forces/x**2", "  partial d(state/y)/d(forces/x): 1x1, 1 nonzero", "    2*$a*forces/x"]
    assert "model solve (implicit)" in str(solve) and "  R(state/u)[0] = -forces/x + state/u**3" in str(solve)
    text = str(both).splitlines()
    assert text[:4] == ["model both", "  in  forces/x: Scalar", "  out state/y: Scalar", "  out state/u: Scalar"]
    assert "  submodel model leaf" in text and "    in  forces/x: Scalar" in text  # nested one level deeper
    assert "  submodel model solve (implicit)" in text
