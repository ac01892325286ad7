"""modelc.runtime.axis: LabeledAxis construction, validation, layout and printing."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rt_helpers import FAST

from modelc.errors import InputError
from modelc.ir import Variable
from modelc.runtime import R2, SR2, SSR4, Scalar, Vec, LabeledAxis


def seed_axis() -> LabeledAxis:
    """The seed's picture: sub(a: SR2, b: Scalar), a: SR2, b: Scalar, c: Scalar (size 15)."""
    return LabeledAxis([("sub", LabeledAxis([("a", SR2), ("b", Scalar)])), ("a", SR2), ("b", Scalar), ("c", Scalar)])


def test_seed_example_offsets_and_sizes():
    ax = seed_axis()
    assert ax.size == 15
    expect = {"sub": (0, 7), "sub/a": (0, 6), "sub/b": (6, 7), "a": (7, 13), "b": (13, 14), "c": (14, 15)}
    for name, span in expect.items():
        assert ax.span(name) == span
        assert ax.offset(name) == span[0] and ax.storage_size(name) == span[1] - span[0]
    assert ax.variables == (("sub/a", SR2), ("sub/b", Scalar), ("a", SR2), ("b", Scalar), ("c", Scalar))
    assert ax.subaxis_names == ("sub",) and ax.labels == ("sub", "a", "b", "c")
    assert ax.subaxis("sub") == LabeledAxis([("a", SR2), ("b", Scalar)])
    assert ax.type_of("sub/a") is SR2 and ax.is_subaxis("sub") and ax.is_variable("sub/b")
    assert "sub/a" in ax and "sub/c" not in ax
    assert ax.span("") == (0, 15) and ax.subaxis("") is ax
    assert ax.layout()[0] == ("sub", 0, 7, "axis")


def test_from_variables_groups_sub_axes_in_first_mention_order():
    ax = LabeledAxis.from_variables([("forces/E", SR2), ("old_state/internal/ep", Scalar), ("state/S", "SR2"),
                                     ("forces/t", Scalar), ("old_state/S", SR2)])
    assert ax.variable_names == ("forces/E", "forces/t", "old_state/internal/ep", "old_state/S", "state/S")
    assert ax.span("forces") == (0, 7) and ax.span("old_state") == (7, 14) and ax.span("state/S") == (14, 20)
    assert ax.span("old_state/internal") == (7, 8)
    assert ax.subaxis_names == ("forces", "old_state", "old_state/internal", "state")
    # the same from IR variables
    vs = [Variable("forces/E", SR2), Variable("forces/t", Scalar)]
    assert LabeledAxis.from_variables(vs) == LabeledAxis([("forces", LabeledAxis([("E", SR2), ("t", Scalar)]))])


def test_str_is_a_readable_table():
    text = str(seed_axis())
    lines = text.splitlines()
    assert lines[0] == "LabeledAxis of size 15"
    assert lines[1].split() == ["start", "stop", "size", "name", "type"]
    assert lines[2].split() == ["0", "7", "7", "sub/", "axis", "(2", "items)"]
    assert lines[3].split() == ["0", "6", "6", "a", "SR2"]
    assert lines[4].split() == ["6", "7", "1", "b", "Scalar"]
    assert lines[5].split() == ["7", "13", "6", "a", "SR2"]
    assert lines[7].split() == ["14", "15", "1", "c", "Scalar"]
    # sub-axis items are indented below their sub-axis
    assert lines[3].index("a") > lines[5].index("a")


def test_equality_hash_and_immutability():
    a, b = seed_axis(), seed_axis()
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != LabeledAxis([("a", SR2), ("sub", LabeledAxis([("a", SR2), ("b", Scalar)])), ("b", Scalar), ("c", Scalar)])
    assert a != LabeledAxis([("x", SR2)]) and a != "axis"
    with pytest.raises(AttributeError, match="immutable"):
        a._size = 3
    assert isinstance(a.items, tuple)


BAD = ["", "a b", "a\tb", "a\nb", "it's", 'say"x"', "a`b", "a/b", " a", "b\r"]


@pytest.mark.parametrize("label", BAD)
def test_bad_labels_are_named(label):
    with pytest.raises(InputError, match="bad label " + repr(label).replace("\\", "\\\\")):
        LabeledAxis([(label, Scalar)])


@pytest.mark.parametrize("name, part", [("forces/ E", " E"), ("a//b", ""), ("/a", ""), ("a/b's", "b's"),
                                        ("x/y\nz", "y\nz")])
def test_bad_parts_of_qualified_names_are_named(name, part):
    with pytest.raises(InputError, match=f"bad label {part!r} in variable name {name!r}".replace("\\", "\\\\")):
        LabeledAxis.from_variables([(name, Scalar)])


def test_every_rejected_construction_names_the_culprit():
    with pytest.raises(InputError, match="duplicate label 'a'"):
        LabeledAxis([("a", SR2), ("a", Scalar)])
    with pytest.raises(InputError, match="variable 'f/E' is declared twice"):
        LabeledAxis.from_variables([("f/E", SR2), ("f/E", SR2)])
    with pytest.raises(InputError, match="'state' is a variable, so 'state/S' cannot"):
        LabeledAxis.from_variables([("state", Scalar), ("state/S", SR2)])
    with pytest.raises(InputError, match="variable 'state' is a sub-axis"):
        LabeledAxis.from_variables([("state/S", SR2), ("state", Scalar)])
    with pytest.raises(InputError, match="item 'x': expected a tensor type .* got 'SR3'"):
        LabeledAxis([("x", "SR3")])
    with pytest.raises(InputError, match="item 'x/y': expected a tensor type"):
        LabeledAxis.from_variables([("x/y", 6)])
    with pytest.raises(InputError, match="pairs, got 'a'"):
        LabeledAxis(["a"])
    with pytest.raises(InputError, match="expected \\(qualified name, type\\) pairs"):
        LabeledAxis.from_variables([object()])
    ax = seed_axis()
    with pytest.raises(InputError, match="no variable or sub-axis 'sub/aa'.*did you mean 'sub/a'"):
        ax.span("sub/aa")
    with pytest.raises(InputError, match="no variable or sub-axis 'zzz' on this axis; the axis has 'sub'"):
        ax.entry("zzz")
    with pytest.raises(InputError, match="'sub' is a sub-axis, not a variable"):
        ax.type_of("sub")
    with pytest.raises(InputError, match="'a' is a variable of type SR2, not a sub-axis"):
        ax.subaxis("a")


# random variable lists: names of 1-3 levels over a small alphabet, so sub-axes get shared
_label = st.sampled_from(["a", "b", "c", "sub", "x1"])
_name = st.lists(_label, min_size=1, max_size=3).map("/".join)
_vars = st.lists(st.tuples(_name, st.sampled_from([Scalar, Vec, SR2, R2, SSR4])), max_size=10)


def _consistent(variables):
    """Drop duplicates and variable/sub-axis clashes so the list is valid."""
    out, names = [], set()
    for n, t in variables:
        prefixes = {"/".join(n.split("/")[:k]) for k in range(1, n.count("/") + 1)}
        if n in names or prefixes & names or any(m.startswith(n + "/") for m in names):
            continue
        names.add(n)
        out.append((n, t))
    return out


@FAST
@given(variables=_vars)
def test_layout_tiles_the_axis(variables):
    variables = _consistent(variables)
    ax = LabeledAxis.from_variables(variables)
    assert sorted(ax.variables) == sorted(variables)
    # variables tile [0, size) in order, each with its type's size
    pos = 0
    for name, t in ax.variables:
        assert ax.span(name) == (pos, pos + t.size)
        pos += t.size
    assert pos == ax.size == sum(t.size for _, t in variables)
    # a sub-axis spans exactly its variables, and its own layout is the shifted one
    for sub in ax.subaxis_names:
        inner = [(n, t) for n, t in ax.variables if n.startswith(sub + "/")]
        start, stop = ax.span(sub)
        assert stop - start == sum(t.size for _, t in inner) == ax.subaxis(sub).size
        for n, _ in inner:
            s, e = ax.span(n)
            assert ax.subaxis(sub).span(n[len(sub) + 1:]) == (s - start, e - start)
    # rebuilding from the variables gives an equal axis
    assert LabeledAxis.from_variables(ax.variables) == ax
