"""The compile cache verifies what it loads, falls back when its folder is unusable, and spec text
reaches generated code only escaped (issue 15)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import modelc
from modelc import cache
from modelc.cli import main
from modelc.runtime.cachefiles import digest_path, usable_folder, verified
from rt_helpers import needs_cc

SPEC = Path(__file__).resolve().parents[3] / "spec" / "elasticity.yaml"


def _run_elastic(cache_dir: Path) -> str:
    """A fresh process that loads elasticity_total through the cache (module and C library) and
    prints S_xx for unit strain; returns its stdout (a crash or traceback fails the test)."""
    code = textwrap.dedent(f"""
        import torch, modelc
        mod = modelc.load({str(SPEC)!r}, model="elasticity_total")
        m = mod.Model(backend="c")
        print(float(m({{"forces/E": torch.ones(2, 6, dtype=torch.float64)}})["state/S"][0, 0]))
    """)
    env = {**__import__("os").environ, "MODELC_CACHE_DIR": str(cache_dir)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return p.stdout.strip()


@needs_cc
def test_truncated_or_edited_artifacts_are_rebuilt_not_loaded(tmp_path):
    first = _run_elastic(tmp_path)
    module = next(tmp_path.glob("*.py"))
    lib = next((tmp_path / "c").glob("*.so"))
    assert verified(module) and verified(lib)
    # a truncated library used to kill the process with SIGBUS; an edited module was imported
    lib.write_bytes(lib.read_bytes()[:1000])
    module.write_text(module.read_text() + "\nraise SystemExit('edited module imported')\n")
    assert not verified(module) and not verified(lib)
    assert _run_elastic(tmp_path) == first
    assert verified(module) and verified(lib)
    # a truncated module (SyntaxError before), and artifacts without their digest
    module.write_text(module.read_text()[:200])
    digest_path(lib).unlink()
    assert _run_elastic(tmp_path) == first
    assert verified(module) and verified(lib)


def _below_a_file(d: Path) -> Path:
    (d / "file").write_text("x")
    return d / "file" / "sub"


@pytest.mark.parametrize("make", [_below_a_file, lambda d: d / "nul\0name"])
def test_unusable_cache_folder_falls_back_with_a_warning(tmp_path, make):
    bad = make(tmp_path)
    with pytest.warns(RuntimeWarning, match="is not usable .*temporary cache"):
        folder = usable_folder(bad) if "\0" not in str(bad) else _nul(bad)
    assert folder.is_dir() and folder != bad
    mod = modelc.load(SPEC, model="elasticity_total", cache_dir=folder)
    assert mod.Model(backend="torch")({"forces/E": torch.zeros(1, 6, dtype=torch.float64)}) is not None


def _nul(path):
    try:
        return usable_folder(path)
    except ValueError:  # pragma: no cover
        pytest.fail("a NUL in a cache path must fall back, not raise")


def test_load_with_a_cache_dir_below_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    cache._LOADED.clear()
    with pytest.warns(RuntimeWarning, match="temporary cache"):
        mod = modelc.load(SPEC, model="elasticity_total", cache_dir=f / "cache")
    assert mod.Model.NAME == "elasticity_total"


# -- spec text in generated code ----------------------------------------------------------------
DOCS = ['a """ triple quote', "a backslash \\ and \\n", "a ''' raw-string end", "a */ comment end",
        'ends with a quote"', "{{ jinja }} {% raw %}", "tab\there", "unicode: σ ε ü"]


@pytest.mark.parametrize("doc", DOCS)
def test_spec_strings_reach_generated_code_escaped(tmp_path, capsys, doc):
    import json

    spec = tmp_path / "s.yaml"
    q = json.dumps(doc)  # a YAML double-quoted scalar
    spec.write_text(textwrap.dedent(f"""
        models:
          m:
            doc: {q}
            parameters:
              a: {{default: 2.0, units: {q}, doc: {q}}}
            inputs:
              x: {{var: forces/x, doc: {q}}}
            outputs:
              y: {{var: state/y, doc: {q}}}
            equations:
              y: a*x
        """))
    out = tmp_path / "gen"
    assert main(["compile", str(spec), "--out", str(out)]) == 0, capsys.readouterr().err
    mod = cache.import_file(out / "m.py", f"_escaped_{abs(hash(doc))}")
    assert doc in mod.__doc__ and mod.Model.__doc__ == f"m: {doc}".splitlines()[0]
    assert mod.Model.PARAMETERS[0].units == doc and mod.Model.PARAMETERS[0].doc == doc
    assert mod.Model.INPUTS[0].doc == doc and mod.Model.OUTPUTS[0].doc == doc
    y = mod.Model(backend="torch")({"forces/x": torch.ones(2, dtype=torch.float64)})["state/y"]
    assert y.tolist() == [2.0, 2.0]


def test_source_path_with_a_newline_stays_in_its_comment(tmp_path, capsys):
    d = tmp_path / "dir\nprint('injected')"
    d.mkdir()
    spec = d / "s.yaml"
    spec.write_text(SPEC.read_text())
    out = tmp_path / "gen"
    assert main(["compile", str(spec), "--out", str(out), "--select", "leaves"]) == 0
    text = (out / "elasticity.py").read_text()
    assert "\nprint('injected')" not in text
    compile(text, "elasticity.py", "exec")


def test_compile_never_reports_success_for_a_module_that_does_not_import(tmp_path, capsys, monkeypatch):
    from modelc.commands import compile as cmd

    real = cmd.generate
    monkeypatch.setattr(cmd, "generate", lambda *a, **k: {n: s + "\nraise ImportError('broken')\n"
                                                         for n, s in real(*a, **k).items()})
    out = tmp_path / "gen"
    capsys.readouterr()
    assert main(["compile", str(SPEC), "--out", str(out), "--select", "leaves"]) == 3
    err = capsys.readouterr().err
    assert "does not import" in err and "broken" in err and "Traceback" not in err
    assert not out.exists() or not list(out.iterdir())
