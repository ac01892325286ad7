"""Every user error of the front end, tried as a new user would (typos, wrong types, missing fields,
unknown keys, malicious expressions): each is a SpecError naming file:line, showing the text with a
caret under the offending part, and saying what was expected."""
from __future__ import annotations

import json

import pytest

from fe_util import caret as _caret
from fe_util import write
from modelc.errors import SpecError
from modelc.frontend import load_spec

BASE = """
models:
  m:
    parameters:
      E: {default: 2.0}
    inputs:
      eps: {var: forces/E, type: SR2}
      t: {var: forces/t}
    outputs:
      S: {var: state/S, type: SR2}
    equations:
      S: EXPR
"""


def _error(tmp_path, text: str, name: str = "s.yaml") -> SpecError:
    path = write(tmp_path, text, name)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return info.value


@pytest.mark.parametrize("expr, message, caret", [
    ("E*eps + t", "cannot apply '+' to SR2 and Scalar", "t"),
    ("E*eps + sigma_y", "undefined name 'sigma_y'", "sigma_y"),
    ("E*epss", "undefined name 'epss'", "epss"),
    ("tr(eps, eps)*I2", "tr() takes 1 argument, got 2", "tr(eps, eps)"),
    ("trace(eps)*I2", "unknown function 'trace'", "trace"),
    ("eps*eps", "cannot multiply SR2 by SR2", "eps"),
    ("exp(eps)", "exp() expects Scalar, got SR2", "eps"),
    ("__import__('os').system('true')", "name '__import__' is not allowed", "__import__"),
    ("eps.T", "attribute access is not allowed", "eps.T"),
    ("(lambda: eps)()", "only named functions can be called", "lambda: eps"),
    ("[e for e in eps]", "comprehension is not allowed", "[e for e in eps]"),
    ("'eps'", "str constants are not allowed", "'eps'"),
    ("open('x')*I2", "str constants are not allowed", "'x'"),
    ("eps^2", "operator BitXor is not allowed", "eps^2"),
    ("ddot(eps: eps)*I2", "invalid expression syntax", None),
    ("E*eps[i,j,k]", "SR2 has 2 indices, got 3", "i,j,k"),
    ("eps[i,j] + eps[k,l]", "same free indices", "eps[k,l]"),
    ("tr(eps)", "is SR2, but this expression is Scalar", "tr(eps)"),
    ("diff(tr(eps), 2*eps)", "must be the name of a variable", "2*eps"),
    ("diff(eps, eps)", "needs a Scalar f", "eps"),
    ("old(E)*eps", "old() takes a variable", "E"),
    ("where(t > 0, eps, t)", "both branches must have the same type", "t"),
    ("where(t, eps, eps)", "one comparison", "t"),
    ("exp(x=t)*eps", "keyword arguments are not allowed", "t"),
    ("", "must be an expression", None),
    ("eps[i,j]*eps[j,k]*eps[j,l]*0 + eps", "index 'j' appears more than twice", "eps[i,j]*eps[j,k]*eps[j,l]"),
])
def test_expression_errors_point_at_the_offending_part(tmp_path, expr, message, caret):
    err = _error(tmp_path, BASE.replace("EXPR", json.dumps(expr) if expr else ""))
    assert message in str(err), str(err)
    assert str(err).startswith(f"{tmp_path / 's.yaml'}:11:"), str(err)
    if caret is not None:
        assert _caret(err) == caret, str(err)


def test_did_you_mean_for_names_keys_types_and_models(tmp_path):
    err = _error(tmp_path, BASE.replace("EXPR", "E*eps").replace("equations:", "equatons:"))
    assert "unknown key 'equatons'" in str(err) and "did you mean 'equations'?" in str(err)
    assert ":10:5:" in str(err) and _caret(err) == "equatons"
    err = _error(tmp_path, BASE.replace("EXPR", "E*eps").replace("type: SR2}\n      t", "type: SR3}\n      t"))
    assert "unknown type 'SR3'" in str(err) and "did you mean 'SR2'?" in str(err) and ":6:" in str(err)
    err = _error(tmp_path, BASE.replace("EXPR", "E*eps").replace("default: 2.0", "defualt: 2.0"))
    assert "did you mean 'default'?" in str(err)
    err = _error(tmp_path, BASE.replace("EXPR", "E*eps") + "compose:\n  c: {models: [mm]}\n")
    assert "unknown model 'mm'" in str(err) and "did you mean 'm'?" in str(err)
    err = _error(tmp_path, BASE.replace("EXPR", "E*eps").replace("      S: E*eps", "      s: E*eps"))
    assert "'s' is not one of S" in str(err) and "did you mean 'S'?" in str(err)


@pytest.mark.parametrize("text, message", [
    ("models:\n  m:\n    inputs: {x: {type: Scalar}}\n", "neither 'outputs'"),
    ("models:\n  m:\n    outputs: {y: {}}\n    equations: {}\n", "no expression for 'y'"),
    ("models:\n  m:\n    outputs: {y: {}}\n", "no expression for 'y'"),
    ("models:\n  m:\n    implicit: {residuals: {x: x}}\n", "missing the required key 'unknowns'"),
    ("models:\n  m:\n    implicit: {unknowns: {x: {}}, residuals: {}}\n", "no expression for 'x'"),
    ("models:\n  m:\n    outputs: {y: {}}\n    implicit: {unknowns: {x: {}}, residuals: {x: x}}\n",
     "needs a guess"),
    ("models:\n  m:\n    outputs: {y: {}}\n    implicit: {unknowns: {x: {}}, residuals: {x: x}, guess: {x: 0}}\n",
     "equations: no expression for 'y'"),
    ("models:\n  m:\n    implicit: {unknowns: {x: {}}, residuals: {x: x}, solver: {rtol: -1}}\n", "'rtol' must be >= 0"),
    ("models:\n  m:\n    implicit: {unknowns: {x: {}}, residuals: {x: x}, solver: {on_failure: nann}}\n",
     "did you mean 'nan'?"),
    ("models:\n  m:\n    implicit: {unknowns: {x: {}}, residuals: {x: x}, solver: {max_iter: 2.5}}\n",
     "'max_iter' must be an integer"),
    ("models:\n  m:\n    implicit: {unknowns: {x: {}}, residuals: {x: x}, uses: [q]}\n", "uses unknown model 'q'"),
    ("models:\n  m:\n    inputs: {x: {}}\n    outputs: {y: {}}\n    equations: {y: x}\n"
     "  n:\n    implicit: {unknowns: {x: {}}, residuals: {x: x}}\n"
     "  k:\n    implicit: {unknowns: {x: {}}, residuals: {x: x}, uses: [n]}\n", "must be explicit"),
    ("models:\n  m:\n    inputs: {x: {}, x2: {var: x}}\n    outputs: {y: {}}\n    equations: {y: x}\n",
     "variable 'x' appears twice"),
    ("models:\n  m:\n    inputs: {x: {}}\n    parameters: {x: {}}\n    outputs: {y: {}}\n    equations: {y: x}\n",
     "declared twice"),
    ("models:\n  m:\n    inputs: {tr: {}}\n    outputs: {y: {}}\n    equations: {y: 1}\n",
     "clashes with the built-in 'tr'"),
    ("models:\n  m:\n    inputs: {'a b': {}}\n    outputs: {y: {}}\n    equations: {y: 1}\n", "not a valid name"),
    ("models:\n  m:\n    inputs: {x: {var: 'state/ x'}}\n    outputs: {y: {}}\n    equations: {y: 1}\n",
     "not a valid qualified variable name"),
    ("models:\n  m:\n    parameters: {p: {type: SR2, default: 1.0}}\n    outputs: {y: {}}\n    equations: {y: 1}\n",
     "has 1 value, its type SR2 has 6 components"),
    ("models:\n  m:\n    parameters: {p: {default: abc}}\n    outputs: {y: {}}\n    equations: {y: 1}\n",
     "'default' must be a number or list of numbers"),
    ("models:\n  m:\n    outputs: {y: {}}\n    equations: {y: 1}\n  m:\n    outputs: {y: {}}\n    equations: {y: 1}\n",
     "duplicate key 'm'"),
    ("models:\n  m:\n    outputs: {y: {}}\n    equations: {y: 1}\ncompose:\n  m: {models: [m]}\n", "clashes"),
    ("models:\n  m:\n    outputs: {y: {}}\n    equations: {y: 1}\ncompose:\n  c: {models: [m, m]}\n", "twice"),
    ("models:\n  m:\n    outputs: {y: {}}\n    equations: {y: 1}\ncompose:\n  c: {models: [m], keep: [z]}\n",
     "keeps 'z'"),
    ("models:\n  m:\n    outputs: {y: {}}\n    equations: {y: 1}\ncompose:\n  c: {keep: [y]}\n",
     "missing the required key 'models'"),
    ("models:\n  m:\n    outputs: {y: {}}\n    define: {'f(a, a)': a}\n    equations: {y: 1}\n", "repeats an argument"),
    ("models:\n  m:\n    outputs: {y: {}}\n    define: {'f(a)': f(a)}\n    equations: {y: f(1)}\n", "recursion"),
    ("models:\n  m:\n    outputs: {y: {}}\n    define: {'f(a)': 2*a}\n    equations: {y: 'f(1, 2)'}\n",
     "f() takes 1 argument (a), got 2"),
    ("models:\n  m:\n    outputs: {y: {}}\n    define: {f: 'f + 1'}\n    equations: {y: f}\n", "undefined name 'f'"),
    ("define:\n  c: 1\nmodels: {}\n", "must be a helper function"),
    ("models: [a, b]\n", "'models' must be a mapping"),
    ("modles: {}\n", "did you mean 'models'?"),
    ("- 1\n- 2\n", "must be a mapping"),
    ("models:\n  m: {outputs: {y: {}}, equations: {y: 1}\n", "invalid YAML"),
    ("models: !!python/object:os.system {}\n", "not allowed"),
    ("models:\n  m:\n    outputs: {y: {}}\n    equations: {y: [1, 2]}\n", "must be an expression"),
    ("", "empty"),
    ("a: &x [1, 2]\nb: [*x, *x, *x]\n", "anchors and aliases"),
    ("models:\n  m:\n    implicit: {unknowns: {x: {}}, residuals: {x: x}, guess: {x: 2*x}}\n",
     "the guess of 'x' depends on the unknowns"),
    ("models:\n  m:\n    inputs: {x: SR2}\n    outputs: {y: {}}\n    equations: {y: 1}\n",
     "input 'x' of model 'm' must be a mapping"),
    ("models:\n  m:\n    inputs: {x: {var: state/x}, ox: {var: old_state/x, type: SR2}}\n    outputs: {y: {}}\n"
     "    equations: {y: old(x)}\n", "is declared SR2, but it is the previous value of 'state/x'"),
    ("include: [nope.yaml]\n", "cannot read spec file"),
])
def test_spec_errors(tmp_path, text, message):
    err = _error(tmp_path, text)
    assert message in str(err), str(err)
    assert str(err).startswith(str(tmp_path / "s.yaml") + ":"), str(err)


def test_include_cycle_and_duplicate_models_across_files(tmp_path):
    write(tmp_path, "include: [b.yaml]\n", "a.yaml")
    write(tmp_path, "include: [a.yaml]\n", "b.yaml")
    with pytest.raises(SpecError, match=r"include cycle: a.yaml -> b.yaml -> a.yaml"):
        load_spec(tmp_path / "a.yaml")
    write(tmp_path, "models:\n  m:\n    outputs: {y: {}}\n    equations: {y: 1}\n", "c.yaml")
    err = _error(tmp_path, "include: [c.yaml]\nmodels:\n  m:\n    outputs: {y: {}}\n    equations: {y: 2}\n")
    assert "model 'm' is defined twice (first at" in str(err) and "c.yaml:2:3" in str(err)


def test_multiline_expression_points_at_its_own_line(tmp_path):
    err = _error(tmp_path, "models:\n  m:\n    outputs: {y: {}}\n    equations:\n      y: |\n        1 +\n"
                           "        undefined_thing\n")
    assert "undefined name 'undefined_thing'" in str(err) and ":7:" in str(err.loc) + ":"
    assert _caret(err) == "undefined_thing"


def test_nothing_from_the_spec_is_executed(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("os.system", lambda *a: calls.append(a))
    for expr in ("__import__('os').system('touch pwned')", "eval('1')*I2", "exec('x')*I2",
                 "().__class__.__bases__[0]", "globals()['os']"):
        with pytest.raises(SpecError):
            load_spec(write(tmp_path, BASE.replace("EXPR", json.dumps(expr))))
    assert not calls and not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("expr, message", [
    ("9**9**9**9*eps", "is too large"),
    ("(" * 300 + "eps" + ")" * 300, "too many nested parentheses"),
    ("-" * 5000 + "eps", "too deeply nested"),
])
def test_expressions_that_would_exhaust_the_machine_are_refused(tmp_path, expr, message):
    err = _error(tmp_path, BASE.replace("EXPR", json.dumps(expr)))
    assert message in str(err)
