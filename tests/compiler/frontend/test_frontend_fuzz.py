"""Property-based fuzz of the front end (issue 15): random expressions and random spec structures give
either success or a located error, never a traceback. Bounded: a few seconds per property."""
from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelc.cli import main
from modelc.errors import ModelcError
from modelc.frontend.expr import BUILTINS, SPECIAL

FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

NAMES = ["x", "a", "d0", "e", "I2", "pi", "nope", "__x", "old", "diff", "where", "exp", "h"]
NUMBERS = ["0", "1", "2", "0.5", "1e309", "1e-400", "1e300", "10", "3.0", "-1", "1" * 30]
FUNCS = sorted(set(BUILTINS) | set(SPECIAL) | {"h", "nope", "print"})
BINOPS = ["+", "-", "*", "/", "**", "//", "%", "@", "^", " and ", " if x > 0 else ", ", "]


def _expr(depth: int):
    leaf = st.sampled_from(NAMES + NUMBERS)
    if depth == 0:
        return leaf
    sub = _expr(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(BINOPS), sub).map("".join),
        st.tuples(st.sampled_from(["-", "+", "not ", ""]), sub).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(FUNCS), st.lists(sub, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(sub, st.sampled_from(["[i,j]", "[i]", ".T", "[0]"])).map("".join),
        st.lists(sub, max_size=4).map(lambda t: f"[{', '.join(t)}]"),  # interp's tables, or a list elsewhere
        st.tuples(sub, st.lists(st.sampled_from(NUMBERS), max_size=4), st.lists(sub, max_size=4)).map(
            lambda t: f"interp({t[0]}, [{', '.join(t[1])}], [{', '.join(t[2])}])"),
        st.tuples(st.sampled_from(["(", ")", "[", "'", ":", "\\", "\n", "\x00", "é"]), sub).map("".join),
    )


MODEL = """\
define:
  h(u): u*u + 1
models:
  m:
    parameters:
      a: {{default: 1.0}}
    inputs:
      x: {{var: forces/x}}
      e: {{var: forces/E, type: SR2}}
    outputs:
      y: {{var: state/y}}
    define:
      d0: x + a
    equations:
      y: {expr}
"""

LOCATED = re.compile(r"^(\S.*?:\d+:\d+: )?error: ", re.M)


def _check(text: str) -> tuple[int, str]:
    """`modelc check` on a spec holding ``text``: the exit status and stderr."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.yaml"
        p.write_text(text, encoding="utf-8", errors="surrogateescape")
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(["check", str(p)])
        return rc, err.getvalue()


def _assert_clean(rc: int, err: str) -> None:
    assert rc in (0, 2), (rc, err)
    assert "Traceback" not in err and "internal error" not in err, err
    if rc == 2:
        assert LOCATED.search(err), err


@FAST
@given(_expr(3))
def test_random_expressions_succeed_or_give_a_located_error(expr):
    rc, err = _check(MODEL.format(expr=json.dumps(expr)))
    _assert_clean(rc, err)
    if rc == 2:
        assert re.search(r"f\.yaml:\d+:\d+: error: ", err), err  # an expression error is always located


KEYS = ["include", "define", "models", "compose", "m", "doc", "parameters", "inputs", "outputs", "equations",
        "implicit", "unknowns", "residuals", "guess", "uses", "solver", "rtol", "max_iter", "var", "type",
        "default", "bounds", "tangent", "of", "wrt", "keep", "x", "state/y", "h(u)", "on_failure"]
SCALARS = st.one_of(st.sampled_from(["x", "SR2", "Scalar", "x*2", "[0, 1)", "(0, inf)", "nan", "m", "forces/x",
                                     "state/y", "old(x)", "substep", "1/0", "", "a\nb"]),
                    st.integers(-3, 10**30), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.none())


def _yaml(depth: int):
    if depth == 0:
        return SCALARS
    sub = _yaml(depth - 1)
    return st.one_of(SCALARS, st.lists(sub, max_size=3),
                     st.dictionaries(st.sampled_from(KEYS), sub, max_size=4))


@FAST
@given(st.dictionaries(st.sampled_from(["models", "compose", "define", "include"]), _yaml(4), min_size=1))
def test_random_spec_structures_succeed_or_give_a_located_error(data):
    rc, err = _check(json.dumps(data, allow_nan=True).replace("NaN", ".nan").replace("Infinity", ".inf"))
    _assert_clean(rc, err)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(_expr(2))
def test_random_expressions_compile_or_give_a_located_error(expr):
    """Past the front end: the passes (compose, differentiate, lower, CSE, emission) accept what the
    front end accepts, or report a located user error; never an internal error."""
    from modelc.driver import compile_model, load_spec

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.yaml"
        p.write_text(MODEL.format(expr=json.dumps(expr)), encoding="utf-8")
        try:
            spec = load_spec(p)
        except ModelcError:
            return
        try:
            compile_model(spec, "m")
        except ModelcError as exc:
            assert LOCATED.search(str(exc)), str(exc)
