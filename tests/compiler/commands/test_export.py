"""`modelc export c|umat` (modelc.commands.export): SPEC as a spec file with --model or as a bundled
name, the files each kind writes and what they say (the layout and PROPS read against the spec), the
exported C built alone and called through ctypes giving Hooke's law, and every bad input named with
exit status 2 and no traceback."""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from modelc.cli import main as cli_main

SPEC = Path(__file__).resolve().parents[3] / "spec"
ELASTICITY = SPEC / "elasticity.yaml"


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli_main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


def test_c_from_a_spec_file_and_a_model(tmp_path, capsys):
    rc, out, _ = _cli(capsys, "export", "c", str(ELASTICITY), "--model", "elasticity_total", "--out",
                      str(tmp_path / "x"))
    assert rc == 0
    files = [tmp_path / "x" / f"elasticity_total.{ext}" for ext in ("h", "c", "json", "md")]
    assert out.strip() == "elasticity_total: wrote " + ", ".join(str(f) for f in files)
    assert all(f.is_file() for f in files)
    layout = json.loads(files[2].read_text())
    assert layout["model"] == "elasticity_total" and layout["spec"] == str(ELASTICITY)
    assert [(v["name"], v["size"]) for v in layout["inputs"]] == [("forces/E", 6)]
    assert [(v["name"], v["size"]) for v in layout["outputs"]] == [("state/S", 6)]
    assert [(p["name"], p["default"], p["units"]) for p in layout["parameters"]] == \
        [("E", [200000.0], "MPa"), ("nu", [0.3], "")]  # as spec/elasticity.yaml declares them
    assert not layout["implicit"] and layout["state"] == []


def test_the_exported_c_is_hookes_law(tmp_path, capsys):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "the C exports need a C compiler"
    assert _cli(capsys, "export", "c", "elastic", "--out", str(tmp_path))[0] == 0
    r = subprocess.run([cc, "-O1", "-fPIC", "-shared", "elastic.c", "-o", "libelastic.so", "-lm"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lib = ctypes.CDLL(str(tmp_path / "libelastic.so"))
    dp = ctypes.POINTER(ctypes.c_double)
    lib.elastic_value.restype = ctypes.c_int64
    lib.elastic_value.argtypes = [ctypes.c_int64, dp, dp, ctypes.c_int64, dp, dp]
    p = np.zeros(2)
    lib.elastic_default_parameters(p.ctypes.data_as(dp))
    assert p.tolist() == [200000.0, 0.3]
    n = 4
    x = np.ascontiguousarray(1e-3 * np.random.default_rng().normal(size=(n, 6)))
    y, status = np.full((n, 6), np.nan), np.zeros((n, 3))
    failed = lib.elastic_value(n, x.ctypes.data_as(dp), p.ctypes.data_as(dp), 0, y.ctypes.data_as(dp),
                               status.ctypes.data_as(dp))
    assert failed == 0
    lam, mu = 200000.0 * 0.3 / (1.3 * 0.4), 200000.0 / 2.6
    want = 2 * mu * x
    want[:, :3] += lam * x[:, :3].sum(1, keepdims=True)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-9)


def test_umat_of_a_bundled_name(tmp_path, capsys):
    rc, out, _ = _cli(capsys, "export", "umat", "j2_perfect", "--out", str(tmp_path))
    assert rc == 0 and out.startswith("j2_perfect: wrote ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j2_perfect_umat.c", "j2_perfect_umat.json"]
    info = json.loads((tmp_path / "j2_perfect_umat.json").read_text())
    assert info["model"] == "j2_perfect" and info["spec"] == str(SPEC / "library.yaml")
    assert info["props"] == ["E", "nu", "sigma_y"] and info["props_default"] == [200000.0, 0.3, 100.0]
    assert info["ntens"] == 6 and "state/internal/Ep" in json.dumps(info["statev"])


@pytest.mark.parametrize("spec, message", [
    ("missing.yaml", "missing.yaml: spec file not found"),
    ("some/where", "some/where: spec file not found"),
    ("j2_perfekt", "no bundled model named 'j2_perfekt'"),
    ("bad name", "'bad name': not a model name"),
])
def test_spec_not_found_is_named(tmp_path, capsys, spec, message):
    rc, _, err = _cli(capsys, "export", "c", spec, "--out", str(tmp_path / "x"))
    assert rc == 2 and message in err
    assert not (tmp_path / "x").exists()


def test_model_choice_errors(tmp_path, capsys):
    rc, _, err = _cli(capsys, "export", "c", str(ELASTICITY), "--out", str(tmp_path / "x"))
    assert rc == 2 and "holds several models; pick one (--model NAME" in err
    assert "elasticity, elasticity_total" in err
    rc, _, err = _cli(capsys, "export", "umat", str(ELASTICITY), "--model", "elastcity", "--out", str(tmp_path / "x"))
    assert rc == 2 and "no model or composition named 'elastcity'" in err
    assert not (tmp_path / "x").exists()


def test_exported_files_have_ordinary_permissions(tmp_path, capsys):
    """The exported files are 0666 less the umask, like any file a tool writes (they were 0600, from
    mkstemp: unreadable to a host build run by another user of a shared folder)."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        assert _cli(capsys, "export", "umat", "elastic", "--out", str(tmp_path))[0] == 0
    finally:
        os.umask(old)
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in tmp_path.iterdir()}
    assert modes == {"elastic_umat.c": 0o644, "elastic_umat.json": 0o644}


def test_a_bundled_name_with_another_model_is_refused(tmp_path, capsys):
    """`export c j2_voce_af --model j2_linear_iso` exported j2_linear_iso (the same file declares
    both); now it is an error naming both, and nothing is written."""
    rc, _, err = _cli(capsys, "export", "c", "j2_voce_af", "--model", "j2_linear_iso", "--out", str(tmp_path / "x"))
    assert rc == 2 and "'j2_voce_af' names a bundled model" in err and "'j2_linear_iso'" in err
    assert not (tmp_path / "x").exists()


def test_a_model_without_stress_and_strain_cannot_be_exported(tmp_path, capsys):
    spec = tmp_path / "heat.yaml"
    spec.write_text(textwrap.dedent("""\
        models:
          heat:
            inputs:
              T: {var: forces/T}
            outputs:
              q: {var: state/q}
            equations:
              q: 2*T
        """))
    rc, _, err = _cli(capsys, "export", "c", str(spec), "--out", str(tmp_path / "x"))
    assert rc == 2
    assert "model 'heat' cannot be exported for a host code: it needs an output 'state/S'" in err
    assert "its outputs: state/q; its inputs: forces/T" in err


def test_kind_and_out_are_required_choices(tmp_path, capsys):
    for argv in (["export", "fortran", "elastic", "--out", str(tmp_path)], ["export", "c", "elastic"]):
        with pytest.raises(SystemExit) as info:
            cli_main(argv)
        assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'fortran'" in err and "the following arguments are required: --out" in err


def test_out_that_is_a_file_is_named(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    rc, _, err = _cli(capsys, "export", "c", "elastic", "--out", str(tmp_path / "afile"))
    assert rc == 2 and "--out" in err and "afile" in err
