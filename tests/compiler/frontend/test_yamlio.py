"""modelc.frontend.yamlio: the located YAML tree (types per YAML's safe schema, 1-based line:col and the
source text of every node, block scalars, key order), the YAML 1.2 float extension, and the refusals
(duplicate keys, non-name keys, tags, aliases, syntax errors, nesting), each located at the culprit."""
from __future__ import annotations

import pytest

from modelc.errors import SpecError
from modelc.frontend.limits import MAX_YAML_DEPTH
from modelc.frontend.yamlio import YList, YMap, YScalar, load_yaml_text


def _load(text: str):
    return load_yaml_text(text, "f.yaml")


def _error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        _load(text)
    return info.value


def test_scalars_have_their_yaml_types_and_locations():
    text = ('i: 42\n'
            'n: -3\n'
            'h: 0x1F\n'
            'f: 1.5\n'
            'b: true\n'
            'z: ~\n'
            's: plain words\n'
            'q: "hi there"  # comment\n'
            "a: 'it''s'\n"
            'u: .inf\n')
    root = _load(text)
    assert isinstance(root, YMap)
    values = {k: v.value for k, v in root.items.items()}
    assert values == {"i": 42, "n": -3, "h": 31, "f": 1.5, "b": True, "z": None, "s": "plain words",
                      "q": "hi there", "a": "it's", "u": float("inf")}
    assert type(values["i"]) is int and type(values["b"]) is bool and type(values["f"]) is float
    # every value starts after "k: " (column 4), a quoted one after its quote (column 5)
    for line, (k, v) in enumerate(root.items.items(), 1):
        assert (v.loc.file, v.loc.line) == ("f.yaml", line)
        assert v.loc.col == (5 if k in "qa" else 4), k
        assert root.keys[k].loc.line == line and root.keys[k].loc.col == 1 and root.keys[k].loc.text == k
    # the text is the node's own source: no quotes, no trailing comment, escapes as written
    assert root.items["q"].loc.text == "hi there" and root.items["q"].style == '"'
    assert root.items["a"].loc.text == "it''s" and root.items["a"].style == "'"
    assert root.items["h"].loc.text == "0x1F" and root.items["s"].loc.text == "plain words"
    assert str(root.items["i"]) == "42"


def test_mappings_keep_their_order_and_lists_their_items():
    text = ("zeta: 1\n"
            "alpha:\n"
            "  - x\n"
            "  - {c: 2.5, b: [1, 2]}\n"
            "mid: {}\n")
    root = _load(text)
    assert list(root.items) == ["zeta", "alpha", "mid"]  # as written, not sorted
    assert list(root.keys) == ["zeta", "alpha", "mid"]
    assert root.loc.line == 1 and root.loc.col == 1
    seq = root.get("alpha")
    assert isinstance(seq, YList) and len(seq.items) == 2
    assert (seq.loc.line, seq.loc.col) == (3, 3)
    first = seq.items[0]
    assert first == YScalar("x", first.loc) and (first.loc.line, first.loc.col) == (3, 5)
    inner = seq.items[1]
    assert isinstance(inner, YMap) and list(inner.items) == ["c", "b"]
    assert (inner.keys["c"].loc.line, inner.keys["c"].loc.col) == (4, 6)
    assert inner.items["c"].loc.text == "2.5"  # a flow scalar's text stops at its end
    assert [i.value for i in inner.items["b"].items] == [1, 2]
    assert [(i.loc.col, i.loc.text) for i in inner.items["b"].items] == [(18, "1"), (21, "2")]
    assert isinstance(root.items["mid"], YMap) and root.items["mid"].items == {}
    assert root.get("missing") is None and root.get("missing", 7) == 7


@pytest.mark.parametrize("text, value", [
    ("1e5", 1e5), ("-2E-3", -2e-3), ("+3e+2", 300.0), ("1_0e2", 1000.0),  # YAML 1.2 floats without a dot
    ("1.5e-3", 1.5e-3),                                                   # YAML 1.1 float (signed exponent)
    ("1e5x", "1e5x"), ('"1e5"', "1e5"), ("e5", "e5"),                     # not numbers
])
def test_floats_without_a_dot_are_numbers(text, value):
    v = _load(f"x: {text}\n").items["x"].value
    assert v == value and type(v) is type(value)


@pytest.mark.parametrize("text,value", [("2.1e5", 2.1e5), ("-2.1e5", -2.1e5), (".5e3", 500.0),
                                        ("2.e3", 2000.0), ("1_0.5e1", 105.0), ("1.2.3e4", "1.2.3e4")])
def test_floats_with_a_dot_and_an_unsigned_exponent_are_numbers(text, value):
    """YAML 1.1 reads 2.1e5 as a string (its exponent needs a sign); a spec reads it as 2.1e5, the
    number YAML 1.2 and Python read (a parameter default written so was refused as 'must be a number')."""
    v = _load(f"x: {text}\n").items["x"].value
    assert v == value and type(v) is type(value)


def test_block_scalars_are_located_at_their_first_text_line():
    root = _load("a: |\n  1 +\n  x\nb: >\n    one\n    two\n")
    a, b = root.items["a"], root.items["b"]
    assert a.value == "1 +\nx\n" and a.style == "|"           # literal: newlines kept
    assert b.value == "one two\n" and b.style == ">"          # folded: lines joined by a space
    assert (a.loc.line, a.loc.col, a.loc.text) == (2, 3, "  1 +")
    assert (b.loc.line, b.loc.col, b.loc.text) == (5, 5, "    one")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_document_is_none(text):
    assert _load(text) is None


def test_duplicate_and_non_name_keys_are_located():
    err = _error("a: 1\nb: 2\na: 3\n")
    assert err.message == "duplicate key 'a' (first given at line 1)"
    assert (err.loc.file, err.loc.line, err.loc.col, err.loc.text) == ("f.yaml", 3, 1, "a")
    for text, line, col, culprit in [("m:\n  1: a\n", 2, 3, "1"),         # an int key
                                      ("? [a]\n: b\n", 1, 3, "[a]"),       # a list key
                                      ("~: 1\n", 1, 1, "~")]:             # a null key
        err = _error(text)
        assert err.message == "mapping keys must be plain names", text
        assert (err.loc.line, err.loc.col, err.loc.text) == (line, col, culprit), text
    assert _load("'on': 1\n").items["on"].value == 1  # a quoted key is a string whatever it spells


@pytest.mark.parametrize("text, tag", [
    ("k: !!binary aGVsbG8=\n", "tag:yaml.org,2002:binary"),
    ("k: 2001-12-14\n", "tag:yaml.org,2002:timestamp"),        # YAML 1.1 resolves a date implicitly
    ("k: !!set {a, b}\n", "tag:yaml.org,2002:set"),
    ("k: !!python/name:os.system x\n", "tag:yaml.org,2002:python/name:os.system"),
    ("k: !local x\n", "!local"),
])
def test_tags_outside_the_safe_schema_are_refused_at_the_node(text, tag):
    err = _error(text)
    assert err.message.startswith(f"YAML tag {tag!r} is not allowed in a spec"), err.message
    assert (err.loc.line, err.loc.col) == (1, 4)
    assert err.loc.text == text[3:].rstrip("\n")


def test_aliases_are_refused_at_the_anchored_node():
    err = _error("base: &b [1, 2]\ncopy: *b\n")
    assert "anchors and aliases (&name, *name) are not supported" in err.message
    assert (err.loc.line, err.loc.col, err.loc.text) == (1, 7, "&b [1, 2]")
    # an exponential blow-up ("billion laughs") is refused before anything is expanded
    laughs = "a: &a [x, x]\n" + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    assert "anchors and aliases" in _error(laughs).message


def test_syntax_errors_and_nesting_are_located():
    err = _error("a: b: c\n")
    assert err.message == "invalid YAML: mapping values are not allowed here"
    assert (err.loc.line, err.loc.col) == (1, 5) and err.hint == ""
    # an unquoted half-open interval breaks the flow mapping: the hint says to quote it
    err = _error("nu: {bounds: [0, 0.5), default: 0.3}\n")
    assert err.message.startswith("invalid YAML:") and err.loc.line == 1
    assert 'quote it, e.g. bounds: "[0, 0.5)"' in err.hint
    # nesting: the root mapping is level 1, so the 64th '[' (column 2 + 64) is the first too deep
    inside = "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1)
    assert isinstance(_load(f"x: {inside}\n").items["x"], YList)
    err = _error("x:\n  " + "[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH + "\n")
    assert err.message == f"YAML nested more than {MAX_YAML_DEPTH} levels deep"
    assert (err.loc.line, err.loc.col) == (2, 2 + MAX_YAML_DEPTH)
    assert "a spec needs a few levels" in err.hint


def test_a_control_character_is_located():
    """A character YAML does not allow (PyYAML's ReaderError has a position, not a mark) is reported
    at its line and column, with its code."""
    err = _error("a: 1\nb: x\x07y\n")
    assert err.message.startswith("invalid YAML") and "#x0007" in err.message
    assert (err.loc.line, err.loc.col) == (2, 5)


def test_a_lone_anchor_is_refused_at_the_anchor():
    """An anchor nothing aliases is refused too (the message says anchors are not supported; it
    used to be accepted, and its value located at the '&')."""
    err = _error("a: 1\nb: &x 2\n")
    assert "anchors and aliases (&name, *name) are not supported" in err.message
    assert (err.loc.line, err.loc.col) == (2, 4)


@pytest.mark.parametrize("key", ["on", "off", "yes", "no", "True"])
def test_a_yaml_boolean_key_gets_a_hint_to_quote_it(key):
    """YAML 1.1 reads on/off/yes/no (and true/false) as booleans: such a key is refused with a hint to
    quote it."""
    err = _error(f"models:\n  {key}: 1\n")
    assert err.message == "mapping keys must be plain names" and (err.loc.line, err.loc.col) == (2, 3)
    assert f'quote it ("{key}":)' in err.hint
