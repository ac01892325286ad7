"""docs/limits.md: the example spec checks clean, and each change its comments name is refused with
the located error the page shows (file:line:column, the offending text under a caret)."""
from __future__ import annotations

import re
from pathlib import Path

from modelc.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "limits.md"


def _page():
    text = DOC.read_text(encoding="utf-8")
    spec = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"```\n\$ modelc check limits_example.yaml.*?\n(.*?)```", text, re.S).group(1)
    return spec, shown


def _check(tmp_path, monkeypatch, capsys, spec):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "limits_example.yaml").write_text(spec)
    capsys.readouterr()
    rc = main(["check", "limits_example.yaml"])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


def test_the_example_checks_clean(tmp_path, monkeypatch, capsys):
    spec, _ = _page()
    rc, out, err = _check(tmp_path, monkeypatch, capsys, spec)
    assert (rc, err) == (0, "")
    assert "model hooke (explicit)" in out


def test_a_default_outside_its_bounds_gives_the_error_the_page_shows(tmp_path, monkeypatch, capsys):
    spec, shown = _page()
    assert spec.count("default: 0.3,") == 1
    rc, _, err = _check(tmp_path, monkeypatch, capsys, spec.replace("default: 0.3,", "default: 0.7,"))
    assert rc == 2
    assert err.strip() == shown.strip()


def test_a_division_by_zero_is_located(tmp_path, monkeypatch, capsys):
    spec, _ = _page()
    lines = spec.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip().startswith("# equations:"))
    assert lines[i - 1].strip().startswith("equations:")
    lines[i - 1:i + 1] = [lines[i].replace("# equations:", "equations:", 1)]
    rc, _, err = _check(tmp_path, monkeypatch, capsys, "\n".join(lines) + "\n")
    assert rc == 2
    assert err.startswith(f"limits_example.yaml:{i}:20: error: this expression holds a division by zero")
    assert "E/0*eps\n    ^^^" in err
