"""Composition errors point at the models and variables in the spec, with a hint (issue 15)."""
from __future__ import annotations

import re

import pytest

from modelc.cli import main

MODEL = """
  {name}:
    inputs:
      a: {{var: {a}}}
    outputs:
      b: {{var: {b}}}
    equations:
      b: a*2
"""


def _error(tmp_path, capsys, text: str, cmd: str = "check") -> str:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    capsys.readouterr()
    argv = [cmd, str(p)] + (["--out", str(tmp_path / "gen")] if cmd == "compile" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and re.match(rf"{re.escape(str(p))}:\d+:\d+: error: ", err), err
    assert "hint: " in err
    return err


def test_cycle_names_models_and_their_lines(tmp_path, capsys):
    err = _error(tmp_path, capsys, "models:" + MODEL.format(name="p", a="x", b="y")
                 + MODEL.format(name="q", a="y", b="x") + "compose:\n  c:\n    models: [p, q]\n")
    assert "dependency cycle" in err
    assert "model 'p' (at " in err and "s.yaml:2:3)" in err and "s.yaml:10:3)" in err


def test_two_providers_point_at_the_second_output(tmp_path, capsys):
    err = _error(tmp_path, capsys, "models:" + MODEL.format(name="p", a="x", b="y")
                 + MODEL.format(name="q", a="z", b="y") + "compose:\n  c:\n    models: [p, q]\n")
    assert "provided by two models, 'p' (at " in err and re.search(r"s\.yaml:14:\d+: error", err)


def test_missing_uses_gets_the_hint(tmp_path, capsys):
    err = _error(tmp_path, capsys, """models:
  h:
    inputs:
      u: {var: state/u}
    outputs:
      v: {var: state/v}
    equations:
      v: u*2
  imp:
    inputs:
      v: {var: state/v}
      f: {var: forces/f}
    implicit:
      unknowns:
        u: {var: state/u}
      residuals:
        u: u - v + f
compose:
  c:
    models: [h, imp]
""")
    assert "uses: [h] in model 'imp'" in err and "nt" not in re.findall(r"'(\w+)'", err)


def test_structurally_singular_system_names_the_unknown(tmp_path, capsys):
    err = _error(tmp_path, capsys, """models:
  imp:
    inputs:
      f: {var: forces/f}
    implicit:
      unknowns:
        u: {var: state/u}
        w: {var: state/w, type: SR2}
      residuals:
        u: u - f
        w: u*I2 - f*I2
""", cmd="compile")
    assert "structurally singular" in err and "state/w[0]" in err and "nt1" not in err
    assert not (tmp_path / "gen").exists()
