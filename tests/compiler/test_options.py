"""modelc.options.CompileOptions: one frozen object (normalised on construction), options given by
name (``modelc.load(..., constant_params=...)``) with unknown names listed, the cache fields, and
what the option does to a compiled module (``elastic`` with a baked parameter: its own cached
module, the same stresses as Hooke's law)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import modelc
from modelc.errors import ModelcError
from modelc.options import CompileOptions


def test_constant_params_are_sorted_and_unique():
    o = CompileOptions(constant_params=("nu", "E", "nu"))
    assert o.constant_params == ("E", "nu")
    assert o == CompileOptions(constant_params=["E", "nu"]) and hash(o) == hash(CompileOptions(("E", "nu")))
    assert CompileOptions().constant_params == ()
    assert o != CompileOptions()


def test_frozen_with_slots():
    o = CompileOptions(constant_params=("E",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.constant_params = ("nu",)
    with pytest.raises((AttributeError, TypeError)):
        o.extra = 1  # no __dict__: a misspelt field cannot be set on the side
    assert not hasattr(o, "__dict__")


@pytest.mark.parametrize("given, expected", [
    ({}, ()),
    ({"constant_params": ["nu", "E"]}, ("E", "nu")),
    ({"constant_params": ("sigma_y",)}, ("sigma_y",)),
    ({"constant_params": "sigma_y"}, ("sigma_y",)),  # one name, not its letters
])
def test_from_mapping(given, expected):
    assert CompileOptions.from_mapping(given) == CompileOptions(constant_params=expected)


def test_from_mapping_names_unknown_options():
    with pytest.raises(ModelcError) as info:
        CompileOptions.from_mapping({"bake": ["E"], "constant_param": ["E"], "constant_params": ["E"]})
    assert str(info.value) == "unknown compile option(s) bake, constant_param; known: constant_params"


def test_cache_fields_hold_every_field():
    o = CompileOptions(constant_params=("nu", "E"))
    assert o.cache_fields() == {"constant_params": ("E", "nu")}
    assert set(o.cache_fields()) == {f.name for f in dataclasses.fields(CompileOptions)}
    assert CompileOptions().cache_fields() != o.cache_fields()


def test_load_with_an_option_compiles_its_own_module():
    plain = modelc.load("elastic")
    baked = modelc.load("elastic", constant_params=["nu"])
    assert plain.__file__ != baked.__file__  # the option is part of the cache key
    assert plain.Model.BAKED == () and baked.Model.BAKED == ("nu",)
    # Hooke's law with the default E = 200000, nu = 0.3: S = lam tr(e) I + 2 mu e
    E, nu = 200000.0, 0.3
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    e = torch.tensor([[1e-3, -2e-4, 5e-4, 3e-4, 0.0, -1e-4]], dtype=torch.float64)
    expected = 2 * mu * e
    expected[:, :3] += lam * e[:, :3].sum()
    for module in (plain, baked):
        out = module.Model(dtype=torch.float64, backend="torch")({"forces/E": e})
        torch.testing.assert_close(out["state/S"], expected, rtol=1e-13, atol=1e-10)


def test_load_refuses_unknown_options_and_parameters():
    with pytest.raises(ModelcError, match="unknown compile option.s. bake; known: constant_params"):
        modelc.load("elastic", bake=["E"])
    with pytest.raises(ModelcError, match=r"cannot bake unknown parameter\(s\) Q; parameters: E, nu"):
        modelc.load("elastic", constant_params=["Q"])


@pytest.mark.parametrize("value", [None, 5, [1], ["nu", ""], {"nu": 1}])
def test_a_value_that_is_not_names_is_named_in_the_error(value):
    """constant_params=None (or a number) is refused naming the option, not a TypeError."""
    with pytest.raises(ModelcError, match=r"^compile option constant_params: expected a parameter name"):
        CompileOptions.from_mapping({"constant_params": value})
