"""The tensor-type table (runtime/types.py): each type's base shape, storage size and rank, the
table ``TYPES`` and the lookup ``tensor_type`` (an unknown name is a ``KeyError`` naming it and the
known types), and ``TensorType`` as an immutable value (frozen, slotted, equal and hashed by content).

Oracle: the shapes and sizes written out by hand from the conventions in docs/runtime.md (Mandel 6,
row-major 3x3, 6x6 Mandel, axial vector 3)."""
from __future__ import annotations

import dataclasses

import pytest

from modelc.runtime.types import R2, SR2, SSR4, TYPES, WR2, Scalar, TensorType, Vec, tensor_type

# name -> (base shape, storage size, base rank), by hand
EXPECTED = {
    "Scalar": ((), 1, 0),
    "Vec": ((3,), 3, 1),
    "SR2": ((6,), 6, 1),
    "R2": ((3, 3), 9, 2),
    "SSR4": ((6, 6), 36, 2),
    "WR2": ((3,), 3, 1),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_type_has_its_shape_size_and_rank(name):
    shape, size, dim = EXPECTED[name]
    t = tensor_type(name)
    assert t.name == name and str(t) == name
    assert t.base_shape == shape and t.size == size and t.base_dim == dim
    assert isinstance(t.doc, str) and t.doc


def test_table_holds_exactly_the_six_types_in_declaration_order():
    assert list(TYPES) == ["Scalar", "Vec", "SR2", "R2", "SSR4", "WR2"]
    assert [TYPES[n] for n in TYPES] == [Scalar, Vec, SR2, R2, SSR4, WR2]
    assert all(tensor_type(n) is t for n, t in TYPES.items())  # the same objects, not copies
    # the docs name the Mandel order and the axial-vector order the rest of the runtime relies on
    assert "s2*yz" in SR2.doc and "s2*xy" in SR2.doc and "(w_zy, w_xz, w_yx)" in WR2.doc


def test_size_is_the_product_of_the_base_shape_for_any_type():
    assert TensorType("T3", (2, 3, 4), "a test type").size == 24
    assert TensorType("T0", (), "a scalar-like type").size == 1
    assert TensorType("Z", (0, 5), "an empty type").size == 0  # prod, not max(1, ...)
    assert TensorType("T3", (2, 3, 4), "").base_dim == 3


@pytest.mark.parametrize("bad", ["sr2", "Tensor", "", " SR2", "SR2 "])
def test_unknown_type_is_a_key_error_naming_it_and_the_known_types(bad):
    with pytest.raises(KeyError) as info:
        tensor_type(bad)
    message = info.value.args[0]
    assert message.startswith(f"unknown tensor type {bad!r}; known types: ")
    assert message.endswith("Scalar, Vec, SR2, R2, SSR4, WR2")
    assert info.value.__suppress_context__  # `from None`: no chained lookup traceback


def test_types_are_immutable_slotted_values():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SR2.name = "X"  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        SR2.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(SR2, "__dict__")
    twin = TensorType("SR2", (6,), SR2.doc)
    assert twin == SR2 and hash(twin) == hash(SR2) and twin is not SR2
    assert TensorType("SR2", (6,), "other doc") != SR2  # every field takes part in equality
    assert len({t: None for t in (*TYPES.values(), twin)}) == 6  # usable as dict keys
    assert Vec != WR2  # same shape, different types
