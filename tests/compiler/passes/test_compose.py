"""Composition: order, inputs/outputs, parameters, nesting, implicit resolution, every error."""
from __future__ import annotations

import pytest
import sympy as sp

from modelc.errors import CompositionError
from modelc.ir import ComposeDecl, Spec
from modelc.passes.compose import compose, compose_spec_model
from modelc.runtime.types import SR2
from passes_helpers import implicit, leaf, param, psym, seed_models, sym, var, visco


def _avail(*models):
    return {m.name: m for m in models}


def test_seed_order_inputs_outputs():
    f, g, h = seed_models()
    for decl_order in [("h", "g", "f"), ("f", "g", "h"), ("g", "h", "f")]:
        m = compose(ComposeDecl("r", decl_order), _avail(f, g, h))
        assert [s.name for s in m.submodels] == ["f", "g", "h"]
        assert [v.name for v in m.inputs] == ["x1", "x2", "x3", "x4"]
        assert [v.name for v in m.outputs] == ["y"]
        assert [p.name for p in m.parameters] == ["a"]


def test_ties_broken_by_declaration_order_and_keep():
    a = leaf("a", [var("x")], {var("p"): sym("x") + 1})
    b = leaf("b", [var("x")], {var("q"): sym("x") * 2})
    c = leaf("c", [var("p"), var("q")], {var("r"): sym("p") * sym("q")})
    m1 = compose(ComposeDecl("m", ("c", "b", "a")), _avail(a, b, c))
    m2 = compose(ComposeDecl("m", ("c", "a", "b")), _avail(a, b, c))
    assert [s.name for s in m1.submodels] == ["b", "a", "c"]
    assert [s.name for s in m2.submodels] == ["a", "b", "c"]
    kept = compose(ComposeDecl("m", ("a", "b", "c"), keep=("q",)), _avail(a, b, c))
    assert [v.name for v in kept.outputs] == ["q", "r"]


def test_nested_composition_composes_again():
    f, g, h = seed_models()
    inner = compose(ComposeDecl("fg", ("f", "g"), keep=("y1",)), _avail(f, g))
    assert [v.name for v in inner.outputs] == ["y1", "y2"]
    outer = compose(ComposeDecl("r", ("h", "fg")), _avail(inner, h))
    assert [s.name for s in outer.submodels] == ["fg", "h"]
    assert [v.name for v in outer.inputs] == ["x1", "x2", "x3", "x4"]
    assert [v.name for v in outer.outputs] == ["y"]


def test_spec_compositions_in_any_order():
    f, g, h = seed_models()
    spec = Spec("s.yaml", (f, g, h), (ComposeDecl("r", ("fg", "h")), ComposeDecl("fg", ("f", "g"), keep=("y1",))))
    m = compose_spec_model(spec, "r")
    assert [s.name for s in m.submodels] == ["fg", "h"]
    assert compose_spec_model(spec, "f") is f
    with pytest.raises(CompositionError, match="no model or composition named 'nope'"):
        compose_spec_model(spec, "nope")


def test_parameters_merged_by_name():
    a = leaf("a", [var("x")], {var("p"): psym("E") * sym("x")}, [param("E", 2.0)])
    b = leaf("b", [var("p")], {var("q"): psym("E") * sym("p") + psym("nu")}, [param("E", 2.0), param("nu", 0.3)])
    m = compose(ComposeDecl("m", ("a", "b")), _avail(a, b))
    assert [(p.name, p.default) for p in m.parameters] == [("E", (2.0,)), ("nu", (0.3,))]


# ---------------------------------------------------------------------------------------------- errors
def test_error_cycle_names_models_and_variables():
    a = leaf("a", [var("x"), var("w")], {var("u"): sym("x") + sym("w")})
    b = leaf("b", [var("u")], {var("v"): 2 * sym("u")})
    c = leaf("c", [var("v")], {var("w"): sp.sin(sym("v"))})
    with pytest.raises(CompositionError) as e:
        compose(ComposeDecl("loop", ("a", "b", "c")), _avail(a, b, c))
    msg = str(e.value)
    assert "dependency cycle" in msg
    assert "model 'a' consumes 'w', provided by model 'c'" in msg
    assert "model 'c' consumes 'v', provided by model 'b'" in msg
    assert "model 'b' consumes 'u', provided by model 'a'" in msg


def test_error_self_cycle():
    a = leaf("a", [var("u")], {var("u"): sym("u") + 1})
    with pytest.raises(CompositionError, match="model 'a' consumes 'u', provided by model 'a'"):
        compose(ComposeDecl("loop", ("a",)), _avail(a))


def test_error_two_providers():
    a = leaf("a", [var("x")], {var("y"): sym("x")})
    b = leaf("b", [var("z")], {var("y"): sym("z")})
    with pytest.raises(CompositionError, match="'y' is provided by two models, 'a' and 'b'"):
        compose(ComposeDecl("m", ("a", "b")), _avail(a, b))


def test_error_type_mismatch():
    a = leaf("a", [var("x")], {var("y"): sym("x")})
    b = leaf("b", [var("y", SR2)], {var("z"): sym("y", SR2)[0]})
    with pytest.raises(CompositionError, match="model 'a' provides it as Scalar, model 'b' consumes it as SR2"):
        compose(ComposeDecl("m", ("a", "b")), _avail(a, b))
    c = leaf("c", [var("x", SR2)], {var("w"): sym("x", SR2)[1]})
    with pytest.raises(CompositionError, match="input 'x'.*'a' consumes it as Scalar.*'c' as SR2"):
        compose(ComposeDecl("m", ("a", "c")), _avail(a, c))


def test_error_unknown_model():
    f, g, h = seed_models()
    with pytest.raises(CompositionError, match="unknown model 'k'.*known models: f, g, h"):
        compose(ComposeDecl("m", ("f", "k")), _avail(f, g, h))


def test_error_undeclared_input_and_bad_keep():
    f, g, h = seed_models()
    decl = ComposeDecl("r", ("f", "g", "h"), inputs=("x1", "x2", "x4"))
    with pytest.raises(CompositionError, match="model 'g' consumes 'x3', which no model provides and which "
                                               "is not declared as an input"):
        compose(decl, _avail(f, g, h))
    assert compose(ComposeDecl("r", ("f", "g", "h"), inputs=("x1", "x2", "x3", "x4")), _avail(f, g, h))
    with pytest.raises(CompositionError, match="'keep' names 'x9'"):
        compose(ComposeDecl("r", ("f", "g", "h"), keep=("x9",)), _avail(f, g, h))


def test_error_parameter_conflicts():
    a = leaf("a", [var("x")], {var("p"): psym("E") * sym("x")}, [param("E", 2.0)])
    b = leaf("b", [var("p")], {var("q"): psym("E") * sym("p")}, [param("E", 3.0)])
    with pytest.raises(CompositionError, match="parameter 'E' has default 2.0 in 'a' but 3.0 in 'b'"):
        compose(ComposeDecl("m", ("a", "b")), _avail(a, b))


def test_error_listed_twice():
    f, g, h = seed_models()
    with pytest.raises(CompositionError, match="'f' is listed twice"):
        compose(ComposeDecl("m", ("f", "g", "f")), _avail(f, g, h))


# ---------------------------------------------------------------------------------------------- implicit
def test_implicit_resolution_and_same_block_inside_and_outside():
    el, vi = visco()
    m = compose(ComposeDecl("vm", ("elastic", "visco"), keep=("state/ep",)), _avail(el, vi))
    assert [s.name for s in m.submodels] == ["visco", "elastic"]
    assert [v.name for v in m.inputs] == ["forces/E", "old_state/ep", "forces/dt"]
    assert [v.name for v in m.outputs] == ["state/ep", "state/S"]
    assert {p.name for p in m.parameters} == {"E", "eta"}
    resolved = m.submodels[0]
    assert resolved.is_implicit and len(resolved.submodels) == 1
    system = resolved.submodels[0]
    assert [s.name for s in system.submodels] == ["visco/elastic", "visco/residual"]
    assert [v.name for v in system.outputs] == ["visco/residual/state/ep"]
    assert "state/ep" in [v.name for v in system.inputs]
    assert [v.name for v in resolved.inputs] == ["forces/E", "old_state/ep", "forces/dt"]


def test_implicit_errors():
    el, vi = visco()
    with pytest.raises(CompositionError, match="implicit model 'visco' uses unknown model 'elastic'"):
        compose(ComposeDecl("vm", ("visco",)), _avail(vi))
    bad = leaf("elastic", [var("forces/E")], {var("state/ep"): sym("forces/E")})
    with pytest.raises(CompositionError, match="provides 'state/ep', which is an unknown"):
        compose(ComposeDecl("vm", ("visco",)), _avail(vi, bad))


def test_implicit_using_an_implicit_model_is_an_error():
    el, vi = visco()
    inner = implicit("inner", [var("forces/E")], [var("state/ep")], [sym("state/ep") - sym("forces/E")],
                     [sym("forces/E")])
    outer = implicit("outer", [var("state/ep")], [var("state/z")], [sym("state/z") - sym("state/ep")],
                     [sp.S.Zero], uses=["inner"])
    with pytest.raises(CompositionError, match="uses 'inner', which is itself implicit"):
        compose(ComposeDecl("m", ("outer",)), _avail(inner, outer))


def test_compose_is_deterministic_and_pure():
    el, vi = visco()
    avail = _avail(el, vi)
    a = compose(ComposeDecl("vm", ("elastic", "visco"), keep=("state/ep",)), avail)
    b = compose(ComposeDecl("vm", ("elastic", "visco"), keep=("state/ep",)), avail)
    assert a == b and str(a) == str(b)
    assert avail["visco"] is vi and not vi.submodels  # inputs untouched
