"""modelc.frontend.schema: ``check`` validates a located YAML mapping against a section's table (defaults
filled in, present values returned as their nodes; unknown, missing, empty, mistyped and non-finite
values are located errors naming the section), and the Markdown tables and docs sections it renders."""
from __future__ import annotations

import pytest

from modelc.errors import SpecError
from modelc.frontend import expr
from modelc.frontend.schema import GENERATED, SCHEMA, check, markdown, render_docs
from modelc.frontend.yamlio import YScalar, load_yaml_text

SOLVER_KEYS = ["rtol", "atol", "max_iter", "on_failure", "max_substeps", "method", "line_search"]


def _node(text: str):
    return load_yaml_text(text, "s.yaml")


def _error(text: str, section: str, where: str = "the section") -> SpecError:
    with pytest.raises(SpecError) as info:
        check(_node(text), section, where)
    return info.value


def test_absent_and_empty_keys_get_the_documented_defaults():
    out = check(_node("rtol: 1e-6\natol:\nmethod: halley\n"), "solver", "solver of model 'm'")
    assert list(out) == SOLVER_KEYS  # every field, in the table's order
    # given values come back as their located nodes, not unwrapped
    assert isinstance(out["rtol"], YScalar) and out["rtol"].value == 1e-6 and out["rtol"].loc.line == 1
    assert isinstance(out["method"], YScalar) and out["method"].value == "halley"
    # the documented defaults (docs/spec.md): an empty value ('atol:') counts as absent
    assert {k: out[k] for k in ("atol", "max_iter", "on_failure", "max_substeps", "line_search")} == \
        {"atol": 1e-10, "max_iter": 25, "on_failure": "nan", "max_substeps": 8, "line_search": 0}
    par = check(_node("shared: yes\n"), "parameter", "p")  # YAML 1.1: 'yes' is the boolean true
    assert par["shared"].value is True
    assert (par["type"], par["default"], par["units"], par["bounds"]) == ("Scalar", None, "", None)


def test_unknown_keys_are_located_with_a_suggestion():
    err = _error("rtol: 1\nrtl: 1\n", "solver", "solver of model 'm'")
    assert err.message == "unknown key 'rtl' in solver of model 'm'"
    assert (err.loc.line, err.loc.col, err.loc.text) == (2, 1, "rtl")
    assert err.hint == "did you mean 'rtol'?"
    err = _error("zzz: 1\n", "solver")
    assert err.hint == "expected one of: " + ", ".join(SOLVER_KEYS)


def test_required_keys_must_be_present_and_not_empty():
    err = _error("residuals: {x: x}\n", "implicit", "implicit of model 'm'")
    assert err.message.startswith("implicit of model 'm' is missing the required key 'unknowns' (local name")
    assert (err.loc.line, err.loc.col) == (1, 1)  # the mapping that lacks it
    err = _error("residuals: {x: x}\nunknowns:\n", "implicit", "implicit of model 'm'")
    assert err.message == "implicit of model 'm': 'unknowns' must not be empty"
    assert (err.loc.line, err.loc.col, err.loc.text) == (2, 1, "unknowns")


@pytest.mark.parametrize("section, text, message", [
    ("solver", "rtol: abc", "'rtol' must be a number"),
    ("solver", "rtol: true", "'rtol' must be a number"),               # a boolean is not a number
    ("solver", "max_iter: true", "'max_iter' must be an integer"),
    ("solver", "max_iter: 3.0", "'max_iter' must be an integer"),
    ("solver", "on_failure: 1", "'on_failure' must be a string"),
    ("solver", "on_failure: [nan]", "'on_failure' must be a string"),
    ("parameter", "shared: 'true'", "'shared' must be true or false"),
    ("parameter", "default: [1, true]", "'default' must be a number or list of numbers"),
    ("parameter", "default: {a: 1}", "'default' must be a number or list of numbers"),
    ("parameter", "bounds: [0]", "'bounds' must be an interval such as \"[0, 0.5)\" or a list [lo, hi]"),
    ("parameter", "bounds: [0, 1, 2]", "'bounds' must be an interval"),
    ("parameter", "bounds: [0, a]", "'bounds' must be an interval"),
    ("variable", "type: 3", "'type' must be a type name"),
    ("variable", "initial: true", "'initial' must be an expression"),
    ("variable", "initial: [1]", "'initial' must be an expression"),
    ("compose", "models: a", "'models' must be a list of names"),
    ("compose", "models: [a, 1]", "'models' must be a list of names"),
    ("model", "parameters: [E]", "'parameters' must be a mapping"),
    ("instance", "block: b\nsuffix: a-b", "'suffix' must be a name (letters, digits, _)"),
    ("instance", "block: b\nsuffix: true", "'suffix' must be a name"),
    ("instance", "block: b\nsuffix: 1.5", "'suffix' must be a name"),
])
def test_wrong_kinds_are_located_at_the_value(section, text, message):
    err = _error(text + "\n", section, "here")
    assert err.message.startswith(f"here: {message}"), err.message
    last = text.split("\n")[-1]
    start = last.index(": ") + 2  # the value, after its quote if quoted
    assert (err.loc.line, err.loc.col) == (text.count("\n") + 1, start + 1 + (last[start] in "'\""))


@pytest.mark.parametrize("section, text, key, value", [
    ("parameter", "bounds: \"[0, 0.5)\"", "bounds", "[0, 0.5)"),
    ("parameter", "bounds: [0, 1.5]", "bounds", [0, 1.5]),
    ("parameter", "default: [1, 2.5, -3]", "default", [1, 2.5, -3]),
    ("parameter", "default: 7", "default", 7),
    ("variable", "initial: 2*E", "initial", "2*E"),
    ("variable", "initial: 0.5", "initial", 0.5),
    ("instance", "block: b\nsuffix: 2", "suffix", 2),
    ("instance", "block: b\nsuffix: _x1", "suffix", "_x1"),
    ("compose", "models: [a, b]", "models", ["a", "b"]),
])
def test_right_kinds_are_accepted(section, text, key, value):
    node = check(_node(text + "\n"), section, "here")[key]
    got = [i.value for i in node.items] if hasattr(node, "items") and not isinstance(node, YScalar) else node.value
    assert got == value


@pytest.mark.parametrize("text, message, col", [
    ("rtol: .inf", "'rtol' must be finite, got inf", 7),
    ("atol: -.inf", "'atol' must be finite, got -inf", 7),
    ("rtol: 1" + "0" * 400, "'rtol' is beyond the largest float64", 7),
])
def test_numbers_must_be_finite_float64(text, message, col):
    err = _error(text + "\n", "solver", "solver")
    assert err.message == f"solver: {message}" and (err.loc.line, err.loc.col) == (1, col)


def test_every_item_of_a_number_list_must_be_finite():
    err = _error("default: [1.0, .nan, 2.0]\n", "parameter", "parameter 'p'")
    assert err.message == "parameter 'p': 'default' must be finite, got nan"
    assert (err.loc.col, err.loc.text) == (16, ".nan")  # the bad item, not the list
    err = _error("bounds: [0, .inf]\n", "parameter", "parameter 'p'")
    assert err.message == "parameter 'p': 'bounds' must be finite, got inf" and err.loc.col == 13


def test_a_section_that_is_not_a_mapping():
    err = _error("[1, 2]\n", "solver", "solver of model 'm'")
    assert err.message == "solver of model 'm' must be a mapping with keys " + ", ".join(SOLVER_KEYS)
    assert (err.loc.line, err.loc.col) == (1, 1)
    with pytest.raises(SpecError, match=r"^error: tangent must be a mapping with keys of, wrt$"):
        check(None, "tangent", "tangent")


def test_markdown_has_one_table_per_section_and_one_row_per_field():
    md = markdown()
    for section, fields in SCHEMA.items():
        assert f"#### `{section}`\n\n| key | kind | required | default | meaning |\n|---|---|---|---|---|" in md
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(rows) == sum(len(f) for f in SCHEMA.values())
    assert "| `rtol` | number | no | `1e-10` | relative tolerance on the residual norm |" in rows
    assert "| `max_iter` | integer | no | `25` | maximum Newton iterations |" in rows
    assert "| `of` | list of names | yes |  | outputs (rows of the tangent) |" in rows
    assert any(r.startswith("| `shared` | true or false | no | `False` |") for r in rows)
    # empty defaults (None, (), "") print as an empty cell
    assert any(r.startswith("| `units` | string | no |  |") for r in rows)
    assert any(r.startswith("| `include` | list of names | no |  |") for r in rows)


def test_render_docs_replaces_the_generated_sections_only():
    begin = {n: GENERATED[0].format(name=n) for n in ("schema", "builtins")}
    end = {n: GENERATED[1].format(name=n) for n in ("schema", "builtins")}
    doc = (f"# Title\n\nintro\n{begin['schema']}\nSTALE TABLE\n{end['schema']}\nmiddle\n"
           f"{begin['builtins']}\nold builtins\nmore old\n{end['builtins']}\nthe end\n")
    new = render_docs(doc)
    assert "STALE" not in new and "old builtins" not in new
    assert new.startswith("# Title\n\nintro\n" + begin["schema"] + "\n" + markdown().rstrip("\n") + "\n"
                          + end["schema"] + "\nmiddle\n")
    assert new.endswith(begin["builtins"] + "\n" + expr.markdown().rstrip("\n") + "\n" + end["builtins"]
                        + "\nthe end\n")
    assert render_docs(new) == new  # idempotent


@pytest.mark.parametrize("drop", ["begin", "end", "swap"])
def test_render_docs_names_a_missing_marker(drop):
    """A document without one of a section's markers (or with them swapped) is an InputError
    naming the document and the marker (it was a bare ValueError from str.index)."""
    from modelc.errors import InputError

    begin, end = (g.format(name="builtins") for g in GENERATED)
    parts = {"begin": ["x", end], "end": [begin, "x"], "swap": [end, begin]}[drop]
    doc = (GENERATED[0].format(name="schema") + "\n" + GENERATED[1].format(name="schema") + "\n"
           + "\n".join(parts) + "\n")
    with pytest.raises(InputError) as info:
        render_docs(doc, "docs/x.md")
    assert str(info.value).startswith("docs/x.md: the generated section 'builtins' needs the marker line")
    assert (begin if drop == "begin" else end) in str(info.value)


@pytest.mark.parametrize("text", ["max_iter: 2147483648", "max_substeps: -2147483648",
                                  "max_iter: 100000000000000000000000000000000"])
def test_integer_options_must_fit_a_c_int(text):
    """An iteration count is a C int in the generated kernels: one beyond 2**31 - 1 is refused at its
    value (it used to pass and be printed into the C source as an out-of-range literal)."""
    err = _error(text + "\n", "solver", "solver of model 'm'")
    assert "out of range (at most 2147483647)" in err.message and (err.loc.line, err.loc.col) == (1, text.index(":") + 3)


def test_integer_options_at_the_c_int_limit_are_accepted():
    out = check(_node("max_iter: 2147483647\n"), "solver", "solver of model 'm'")
    assert out["max_iter"].value == 2**31 - 1
