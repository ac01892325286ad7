"""modelc.errors: the two families (the user's input is wrong, or modelc has a bug) and how a
SpecError renders: file:line:col, the offending text with a caret under the span, a window around
the caret for a huge line, and the hint; the command line prints a user error without a traceback."""
from __future__ import annotations

import pytest

import modelc.errors as errors
import modelc.runtime.errors as runtime_errors
from modelc.cli import main as cli_main
from modelc.errors import CompositionError, InputError, InternalError, ModelcError, SpecError
from modelc.ir import Loc


def _caret(rendered: str) -> tuple[str, str]:
    """The source line (without its indent) and the part of it above the carets."""
    lines = rendered.splitlines()
    src, car = lines[1], lines[2]
    start, end = car.index("^"), car.rindex("^") + 1
    return src[4:], src[start:end]


def test_the_two_families_are_apart():
    for cls in (SpecError, CompositionError, InputError):
        assert issubclass(cls, ModelcError)
    assert not issubclass(InternalError, ModelcError) and not issubclass(ModelcError, InternalError)
    # the runtime raises the same classes (no compiler import), so `except ModelcError` catches both
    assert errors.ModelcError is runtime_errors.ModelcError and errors.InputError is runtime_errors.InputError
    assert errors.InternalError is runtime_errors.InternalError
    assert set(errors.__all__) == {"ModelcError", "SpecError", "CompositionError", "InputError", "InternalError"}
    msg = str(InternalError("a pass returned None"))
    assert "this is a bug in modelc" in msg and msg.endswith("a pass returned None")


def test_spec_error_without_location():
    e = SpecError("no models in the spec")
    assert str(e) == "error: no models in the spec"
    assert (e.message, e.loc, e.span, e.hint) == ("no models in the spec", None, None, "")
    e = SpecError("no models in the spec", hint="add a `models:` section")
    assert str(e) == "error: no models in the spec\n  hint: add a `models:` section"


def test_location_text_and_caret_under_the_whole_text():
    e = SpecError("undefined name 'sigma_y'", Loc("m.yaml", 11, 10, "E*eps + sigma_y"))
    lines = str(e).splitlines()
    assert lines[0] == "m.yaml:11:10: error: undefined name 'sigma_y'"
    assert lines[1] == "    E*eps + sigma_y"
    assert lines[2] == "    " + "^" * len("E*eps + sigma_y")
    assert len(lines) == 3


@pytest.mark.parametrize("text, span, under", [
    ("E*eps + sigma_y", (8, 15), "sigma_y"),
    ("E*eps + t", (8, 9), "t"),
    ("tr(eps, eps)*I2", (0, 12), "tr(eps, eps)"),
    ("E*eps", (2, 2), "e"),  # an empty span still gets one caret
])
def test_span_narrows_the_caret(text, span, under):
    e = SpecError("bad", Loc("s.yaml", 3, 5, text), span=span)
    src, marked = _caret(str(e))
    assert src == text and marked == under


def test_location_without_text_and_hint():
    e = SpecError("unknown key 'equatons'", Loc("s.yaml", 10, 5), hint="did you mean 'equations'?")
    assert str(e) == "s.yaml:10:5: error: unknown key 'equatons'\n  hint: did you mean 'equations'?"


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_huge_line_is_shown_as_a_window_around_the_caret(where):
    token = "sigma_yy"
    pos = {"start": 0, "middle": 400, "end": 992}[where]
    text = "a" * pos + token + "b" * (1000 - pos - len(token))
    e = SpecError("undefined name 'sigma_yy'", Loc("s.yaml", 2, 3, text), span=(pos, pos + len(token)))
    src, marked = _caret(str(e))
    assert marked == token  # the caret still sits under the offending name
    assert src.startswith("...") == (where != "start")
    assert src.endswith("...") == (where != "end")
    assert len(src) <= 100 + 6  # the window, and "..." on each cut side
    assert str(e).splitlines()[0] == "s.yaml:2:3: error: undefined name 'sigma_yy'"


def test_cli_prints_a_spec_error_with_its_location_and_no_traceback(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("models:\n  m:\n    inputs:\n      eps: {var: forces/E, type: SR2}\n"
                    "    outputs:\n      S: {var: state/S, type: SR2}\n    equations:\n      S: 2*epss\n")
    assert cli_main(["check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith(f"{spec}:8:") and "undefined name 'epss'" in err
    src, marked = _caret(err[err.index(f"{spec}:8:"):])
    assert src == "2*epss" and marked == "epss"
