"""`modelc check`: the report (variables, layout, operation counts), --dump-ir, CLI errors, and
determinism of the dump across PYTHONHASHSEED values (in fresh processes)."""
from __future__ import annotations

import os
import subprocess
import sys

from fe_util import REPO, SPEC_DIR, write
from modelc.cli import main


def test_check_prints_variables_layout_and_operation_counts(capsys):
    assert main(["check", str(SPEC_DIR / "elasticity.yaml"), str(SPEC_DIR / "library.yaml")]) == 0
    out = capsys.readouterr().out
    assert "model elasticity (explicit): Linear isotropic elasticity" in out
    assert "forces/E                             SR2     offset   0  size 6" in out
    assert "state/internal/Ep                    SR2     offset   6  size 6" in out
    assert "model j2_voce_af_return_map (implicit)" in out and "unknowns (outputs):" in out
    assert "state/internal/gamma_rate            Scalar  offset  13  size 1" in out
    assert "operation counts (before CSE):" in out and "R(state/internal/Ep)" in out
    for name in ("elastic", "j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso"):
        assert f"composition {name} = [" in out


def test_check_reports_user_errors_without_traceback(tmp_path, capsys):
    bad = write(tmp_path, "models:\n  m:\n    outputs: {y: {}}\n    equations: {y: 'tr(1)'}\n")
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "s.yaml:4:21: error: tr() expects SR2 or R2, got Scalar" in err and "Traceback" not in err


def _dump(tmp_path, seed: str) -> dict:
    out = tmp_path / f"dump{seed}"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    subprocess.run([sys.executable, "-m", "modelc.cli", "check", "spec/library.yaml", "--dump-ir", str(out)],
                   cwd=REPO, env=env, check=True, capture_output=True)
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_dump_ir_is_identical_across_hash_seeds(tmp_path):
    a, b = _dump(tmp_path, "0"), _dump(tmp_path, "4242")
    # front end (yaml, models), then every pass for every composition
    assert list(a)[:3] == ["library/01_yaml.txt", "library/02_models.txt", "library/03_elastic.compose.txt"]
    assert "library/35_perzyna_iso.cse.txt" in a and "library/36_perzyna_iso.blocks.txt" in a
    variants = a["library/37_perzyna_iso.variants.txt"].decode()  # one program serves every call
    for line in ("variant value (bit 1)", "variant tangent (bit 2) d(state/S)/d(forces/E)",
                 "variant jacobian (bit 4) d(*)/d(*)", "variant total (bit 8)"):
        assert line in variants, line
    assert a == b
    text = a["library/02_models.txt"].decode()
    assert "model j2_yield (explicit)" in text and "R(state/internal/Ep)[0] =" in text
    assert "compose j2_voce_af_coupled = [j2_voce_af_return_map, elasticity] keep state/internal/Ep" in text
    assert "compose j2_voce_af = [j2_voce_af_radial_return, elasticity] keep state/internal/Ep" in text
