"""`modelc compile SPEC_OR_DIR... --out DIR [--check]`."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from modelc.cli import main
from modelc.commands.compile import spec_files

SPEC = Path(__file__).parents[3] / "spec"


@pytest.fixture
def small_spec(tmp_path):
    d = tmp_path / "specs"
    d.mkdir()
    shutil.copy(SPEC / "elasticity.yaml", d / "elasticity.yaml")
    (d / "top.yaml").write_text("include:\n  - elasticity.yaml\nmodels: {}\n")
    return d


def test_folder_roots_are_the_specs_nobody_includes(small_spec):
    assert [p.name for p in spec_files([small_spec])] == ["top.yaml"]
    assert [p.name for p in spec_files([SPEC])] == ["library.yaml"]


def test_compile_then_check(small_spec, tmp_path, capsys):
    out = tmp_path / "gen"
    spec = str(small_spec / "elasticity.yaml")
    assert main(["compile", spec, "--out", str(out), "--select", "leaves"]) == 0
    names = sorted(p.name for p in out.glob("*.py"))
    assert names == ["elasticity.py", "elasticity_total.py"]
    assert main(["compile", spec, "--out", str(out), "--select", "leaves", "--check"]) == 0
    # stale, missing and extra files are all listed, and the exit status is 1
    (out / "elasticity.py").write_text((out / "elasticity.py").read_text() + "# edited\n")
    (out / "elasticity_total.py").unlink()
    (out / "old_model.py").write_text("")
    (out / "__init__.py").write_text("")
    capsys.readouterr()
    assert main(["compile", spec, "--out", str(out), "--select", "leaves", "--check"]) == 1
    err = capsys.readouterr().err
    assert "stale:" in err and "elasticity.py" in err
    assert "missing:" in err and "elasticity_total.py" in err
    assert "extra:" in err and "old_model.py" in err and "__init__" not in err


def test_missing_spec_is_a_user_error(tmp_path, capsys):
    assert main(["compile", str(tmp_path / "nope.yaml"), "--out", str(tmp_path)]) == 2
    assert "no such spec" in capsys.readouterr().err


def test_generated_module_runs(small_spec, tmp_path):
    import torch

    from modelc.cache import import_file

    out = tmp_path / "gen"
    assert main(["compile", str(small_spec / "elasticity.yaml"), "--out", str(out), "--select", "leaves"]) == 0
    mod = import_file(out / "elasticity_total.py", "compile_cmd_elasticity_total")
    eps = torch.zeros(2, 6, dtype=torch.float64)
    eps[:, 0] = 1e-3
    out_ = mod.Model()({"forces/E": eps}, derivatives=True)
    E, nu = 200000.0, 0.3
    lam = E * nu / ((1 + nu) * (1 - 2 * nu))
    assert torch.allclose(out_["state/S"][:, 0], torch.full((2,), (lam + E / (1 + nu)) * 1e-3, dtype=torch.float64))
    assert torch.allclose(out_["state/S"][:, 1], torch.full((2,), lam * 1e-3, dtype=torch.float64))
