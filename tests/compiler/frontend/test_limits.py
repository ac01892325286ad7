"""Bad specs get a located error, never a traceback, a hang or an undefined constant (issue 15).

Every case goes through the command line (``modelc check``): exit status 2, ``file:line:col: error:``
pointing at the offending text, no ``Traceback``. Cases that could hang run under a time bound.
"""
from __future__ import annotations

import os
import re
import time

import pytest

from modelc.cli import main
from modelc.frontend import limits

from fe_util import SHARED_DEFINES, write

MODEL = """
models:
  m:
    parameters:
      a: {{default: 1.0}}
    inputs:
      x: {{var: forces/x}}
    outputs:
      y: {{var: state/y}}
    define:
{defines}
    equations:
      y: "{expr}"
"""


def check(path, capsys) -> str:
    """Run `modelc check`, assert a user error (exit 2, no traceback); return stderr."""
    capsys.readouterr()
    rc = main(["check", str(path)])
    out = capsys.readouterr()
    assert rc == 2, out.out + out.err
    assert "Traceback" not in out.err
    return out.err


def located(err: str, path, line: int | None = None) -> None:
    m = re.search(rf"{re.escape(str(path))}:(\d+):(\d+): error: ", err)
    assert m, err
    if line is not None:
        assert int(m.group(1)) == line, err


def expr_spec(tmp_path, expr, defines="      d0: x"):
    return write(tmp_path, MODEL.format(expr=expr, defines=defines))


# -- undefined literal arithmetic -------------------------------------------------------------------
@pytest.mark.parametrize("expr, caret, why", [
    ("x/0", "x/0", "division by zero"),
    ("x + 0/0", "0/0", "undefined value"),
    ("x*0**-1", "0**-1", "division by zero"),
    ("x*log(0)", "log(0)", "division by zero"),
    ("sqrt(-1)*x", "sqrt(-1)", "complex"),
    ("x*(-8)**(1/3)", "(-8)**(1/3)", "not a real number"),
    ("1e309*x", "1e309", "largest float64"),
    ("exp(1000)*x", "exp(1000)", "overflows"),
    ("x + 1e300*1e300", "1e300*1e300", "largest float64"),
    ("x + ((2**100)**100)**100", "(2**100)**100", "largest float64"),
    ("x + 9**9**9", "9**9", "too large"),
    ("x + a/(1 - 1)", "a/(1 - 1)", "division by zero"),
])
def test_undefined_literal_arithmetic_is_refused_at_its_node(tmp_path, capsys, expr, caret, why):
    p = expr_spec(tmp_path, expr)
    err = check(p, capsys)
    located(err, p, 12)
    assert why in err
    text, marks = err.splitlines()[1:3]
    start = marks.index("^")
    assert text[start:start + len(caret)] == caret.strip(), err


def test_undefined_value_in_a_define_is_located_at_the_define(tmp_path, capsys):
    p = expr_spec(tmp_path, "x*d1", defines="      d0: x\n      d1: 1/(a - a)")
    err = check(p, capsys)
    located(err, p, 11)
    assert "division by zero" in err


@pytest.mark.parametrize("default", [".nan", ".inf", "-.inf", "1e999", "1" + "0" * 400])
def test_non_finite_numbers_in_the_spec_are_refused(tmp_path, capsys, default):
    p = write(tmp_path, MODEL.format(expr="x*a", defines="      d0: x").replace("default: 1.0",
                                                                            f"default: {default}"))
    err = check(p, capsys)
    located(err, p, 4)
    assert "finite" in err or "largest float64" in err


def test_huge_integer_literal(tmp_path, capsys):
    err = check(expr_spec(tmp_path, "x*" + "7" * 5000), capsys)
    assert "more than 4300 digits" in err and "set_int_max_str_digits" not in err


# -- nesting -------------------------------------------------------------------------------------
@pytest.mark.parametrize("expr", [
    "exp(" * 150 + "x" + ")" * 150,
    "(" * 300 + "x" + ")" * 300,
    "-" * 5000 + "x",
    "x" + "+x" * 3000,
    "(" * 60 + "x" + "*x+a)" * 60,
])
def test_deep_expressions_get_a_located_error(tmp_path, capsys, expr):
    p = expr_spec(tmp_path, expr)
    err = check(p, capsys)
    located(err, p, 12)
    assert "nested" in err or "deep" in err
    assert max(len(line) for line in err.splitlines()) < 200  # a window around the caret, not the line


def test_define_chain_deeper_than_the_limit(tmp_path, capsys):
    n = limits.MAX_EXPR_DEPTH + 5
    defines = "\n".join(f"      d{i}: exp(d{i - 1})" if i else "      d0: x" for i in range(n))
    p = expr_spec(tmp_path, "x", defines=defines)
    err = check(p, capsys)
    located(err, p)
    assert f"the limit is {limits.MAX_EXPR_DEPTH}" in err


@pytest.mark.parametrize("text", [
    "models:\n  " + "[" * 5000 + "]" * 5000 + "\n",
    "models: " + "{a: " * 5000 + "}" * 5000 + "\n",
    "models:\n" + "".join("  " * i + "a:\n" for i in range(1, 120)),
])
def test_deep_yaml_gets_a_located_error(tmp_path, capsys, text):
    p = tmp_path / "deep.yaml"
    p.write_text(text)
    err = check(p, capsys)
    located(err, p)
    assert f"more than {limits.MAX_YAML_DEPTH} levels" in err


def test_nesting_within_the_limits_is_accepted(tmp_path, capsys):
    """The limits are not stricter than they say: an expression just below them is fine."""
    depth = limits.MAX_EXPR_DEPTH - 5
    p = expr_spec(tmp_path, "exp(" * depth + "x/100" + ")" * depth)
    capsys.readouterr()
    assert main(["check", str(p)]) == 0, capsys.readouterr().err


# -- helpers ---------------------------------------------------------------------------------------
def _helpers(n: int, body: str) -> str:
    lines = ["define:", "  h0(x): x + 1"] + [f"  h{i}(x): {body.format(p=i - 1)}" for i in range(1, n)]
    return "\n".join(lines) + "\n" + MODEL.format(expr=f"h{n - 1}(x)", defines="      d0: x")


def test_helpers_calling_the_previous_one_twice_are_memoised(tmp_path, capsys):
    # 2**30 expansions call by call; one per distinct call with memoisation
    p = write(tmp_path, _helpers(31, "h{p}(x) + 2*h{p}(x)"))
    t0 = time.perf_counter()
    capsys.readouterr()
    assert main(["check", str(p)]) == 0, capsys.readouterr().err
    assert time.perf_counter() - t0 < 30


def test_helper_chains_that_blow_up_get_a_located_error(tmp_path, capsys):
    p = write(tmp_path, _helpers(30, "h{p}(x)*h{p}(x) + h{p}(x)"))  # the expression doubles per level
    t0 = time.perf_counter()
    err = check(p, capsys)
    assert time.perf_counter() - t0 < 60
    located(err, p)
    assert "nodes" in err or "deep" in err


def test_helper_chain_through_exp_gets_a_located_error_quickly(tmp_path, capsys):
    """Each helper expansion is checked as it is made. Checked only at the end of the equation, the
    24 levels of tanh(h)*h + exp(h/9) were built first, and SymPy's exp() walks its argument as a
    tree at every level (still running after 5 minutes; 3**24 nodes at ~0.5 us each: hours). Now
    the level that crosses the node limit is refused."""
    p = write(tmp_path, _helpers(24, "tanh(h{p}(x))*h{p}(x) + exp(h{p}(x)/9)"))
    t0 = time.perf_counter()
    err = check(p, capsys)
    assert time.perf_counter() - t0 < 60
    located(err, p)
    assert f"(the limit is {limits.MAX_EXPR_NODES})" in err


def test_defines_used_several_times_count_once(tmp_path, capsys):
    """A define read several times is one subexpression, not a copy per use: N (an inverse of a
    tensor of rational entries, normalised) read four times makes a residual of 267,478 nodes as a
    tree, which the old limit of 200,000 tree nodes refused, with 186 distinct subexpressions.
    It is accepted, and checked in seconds (the compiled values: tests/compiler/test_driver.py)."""
    from modelc.driver import load_spec

    p = write(tmp_path, SHARED_DEFINES)
    t0 = time.perf_counter()
    capsys.readouterr()
    assert main(["check", str(p)]) == 0, capsys.readouterr().err
    assert time.perf_counter() - t0 < 60
    (model,) = load_spec(p).models
    comps = [c for r in model.implicit.residuals for c in r.components]
    memo: dict = {}
    assert max(limits.measure(c, memo)[1] for c in comps) > 200_000


def test_distinct_subexpressions_are_limited(tmp_path, capsys, monkeypatch):
    """The passes' work grows with the distinct subexpressions (a sum of 2500 terms
    tanh(..)*exp(..), 20,000 of them, compiles in 45 s): more than MAX_EXPR_DISTINCT is a located
    error (the limit lowered here to 200: a sum of 100 distinct tanh terms, in four defines of
    25, has 228 and crosses it at the equation that adds them)."""
    monkeypatch.setattr(limits, "MAX_EXPR_DISTINCT", 200)
    p = expr_spec(tmp_path, "d0 + d1 + d2 + d3",
                  defines="\n".join(f"      d{j}: " + " + ".join(f"tanh(x*{k + 2} + {j})" for k in range(25))
                                     for j in range(4)))
    capsys.readouterr()
    err = check(p, capsys)
    located(err, p)
    assert "more than 200 distinct subexpressions" in err


def test_helper_recursion_names_the_cycle(tmp_path, capsys):
    p = write(tmp_path, "define:\n  f(x): g(x)\n  g(x): f(x) + 1\n" + MODEL.format(expr="f(x)", defines="      d0: x"))
    err = check(p, capsys)
    located(err, p)
    assert "f -> g -> f" in err


# -- files -----------------------------------------------------------------------------------------
def _including(tmp_path, target: str):
    return write(tmp_path, f'include: ["{target}"]\nmodels: {{}}\n', "top.yaml")


@pytest.mark.parametrize("make, what", [
    (lambda d: (os.mkfifo(d / "pipe.yaml"), "pipe.yaml")[1], "named pipe"),
    (lambda d: "/dev/zero", "device"),
    (lambda d: ((d / "folder.yaml").mkdir(), "folder.yaml")[1], "folder"),
    (lambda d: ((d / "big.yaml").write_bytes(b"#" * (limits.MAX_SPEC_BYTES + 1)), "big.yaml")[1], "limit"),
    (lambda d: "missing.yaml", "No such file"),
])
def test_include_reads_only_bounded_regular_files(tmp_path, capsys, make, what):
    target = make(tmp_path)
    p = _including(tmp_path, target)
    t0 = time.perf_counter()
    err = check(p, capsys)
    assert time.perf_counter() - t0 < 10  # a pipe never blocks, /dev/zero is not read
    located(err, p, 1)
    assert what in err


def test_non_utf8_is_located_at_the_bad_byte(tmp_path, capsys):
    bad = tmp_path / "latin.yaml"
    bad.write_bytes(b"models:\n  m:\n    doc: caf\xe9\n")
    for path in (bad, _including(tmp_path, "latin.yaml")):
        err = check(path, capsys)
        assert f"{bad}:3:13: error: " in err and "UTF-8" in err


def test_include_chain_depth_is_bounded(tmp_path, capsys):
    n = limits.MAX_INCLUDE_DEPTH + 3
    for i in range(n):
        (tmp_path / f"i{i}.yaml").write_text(f"include: [i{i + 1}.yaml]\n")
    (tmp_path / f"i{n}.yaml").write_text("models: {}\n")
    err = check(tmp_path / "i0.yaml", capsys)
    assert "includes nested more than" in err and ":1:11: error" in err


def test_nul_in_an_include_name(tmp_path, capsys):
    err = check(_including(tmp_path, "a\\0b.yaml"), capsys)
    assert "NUL" in err


# -- names and bounds ------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["model", "var", "param", "define"])
def test_names_with_a_trailing_newline_are_refused(tmp_path, capsys, where):
    text = MODEL.format(expr="x*a", defines="      d0: x")
    text = {"model": text.replace("  m:", '  "m\\n":'),
            "var": text.replace("{var: state/y}", '{var: "state/y\\n"}'),
            "param": text.replace("      a: {default", '      "a\\n": {default'),
            "define": text.replace("      d0: x", '      "d0\\n": x')}[where]
    p = write(tmp_path, text)
    err = check(p, capsys)
    located(err, p)
    assert "is not a valid" in err


@pytest.mark.parametrize("bounds, message", [
    ('"[0, 0.5)"', "outside its bounds [0, 0.5)"),     # the default 0.7 is outside
    ('"[0.5, 0)"', "is empty"),
    ('"[0, inf]"', "infinite end is open"),
    ('"[0, 1e400)"', "beyond the largest float64"),  # not silently inf
    ('"0 < nu"', "not an interval"),
    ("[0, 0.5)", "quote it"),                          # unquoted: YAML reads a broken list
    ('[0, .nan]', "must be finite"),
])
def test_bad_bounds_are_located(tmp_path, capsys, bounds, message):
    p = write(tmp_path, MODEL.format(expr="x*a", defines="      d0: x").replace(
        "a: {default: 1.0}", f"a: {{default: 0.7, bounds: {bounds}}}"))
    err = check(p, capsys)
    located(err, p, 4)
    assert message in err


def test_good_bounds_are_shown_by_check(tmp_path, capsys):
    p = write(tmp_path, MODEL.format(expr="x*a", defines="      d0: x").replace(
        "a: {default: 1.0}", 'a: {default: 0.3, bounds: "[0, 0.5)"}'))
    capsys.readouterr()
    assert main(["check", str(p)]) == 0
