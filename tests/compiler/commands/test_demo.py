"""`modelc demo` (modelc.commands.demo) on the small bundled models, against closed forms of cyclic
uniaxial stress: ``elastic`` gives sxx = E exx with the lateral strains -nu exx and prints the first
row of Hooke's stiffness as its tangent; ``j2_perfect`` caps |sxx| at sigma_y, ends each loop in
tension at +sigma_y and prints the bulk modulus row (K, K, K, 0, 0, 0) of its plastic tangent; the
files and exit status, the bundled-name lookup, and bad input named before anything is written."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

from modelc.cli import main as cli_main
from modelc.commands.demo import AMPLITUDES, CYCLES, SHOW_POINT, SHOW_TANGENT_AT, STEPS, TANGENT_STEPS, \
    bundled_spec
from modelc.errors import InputError

SPEC = Path(__file__).resolve().parents[3] / "spec"
E, NU, SIGMA_Y = 200000.0, 0.3, 100.0


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """``demo(model) -> (exit status, stdout, out folder)``, run once per model."""
    runs = {}

    def get(model: str):
        if model not in runs:
            out = tmp_path_factory.mktemp(model) / "demo"
            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                rc = cli_main(["demo", "--model", model, "--out", str(out), "--no-progress"])
            runs[model] = (rc, text.getvalue(), out)
        return runs[model]

    return get


def _tangent_row(text: str) -> list[float]:
    m = re.search(rf"point {SHOW_POINT} at step {SHOW_TANGENT_AT} \(first row\): \[(.*)\]", text)
    assert m, text
    return [float(x) for x in m.group(1).split(",")]


def test_elastic_is_uniaxial_hooke(demo):
    rc, text, out = demo("elastic")
    assert rc == 0
    assert text.startswith("modelc demo: elastic (library.yaml), float64 on cpu")
    assert sorted(p.name for p in out.iterdir()) == ["results.npz", "stress_strain.png"]
    assert (out / "stress_strain.png").read_bytes()[:4] == b"\x89PNG"
    with np.load(out / "results.npz") as r:
        eps, s = r["strain"], r["stress"]
        assert s.shape == (CYCLES * STEPS + 1, len(AMPLITUDES), 6) and r["converged"].all()
        np.testing.assert_allclose(s[..., 0], E * eps[..., 0], rtol=1e-9, atol=1e-8)
        np.testing.assert_allclose(eps[..., 1:3], -NU * eps[..., :1].repeat(2, -1), rtol=1e-9, atol=1e-14)
        np.testing.assert_allclose(np.abs(s[..., 0]).max(axis=0), E * np.array(AMPLITUDES), rtol=1e-9)
        assert r["tangent_steps"].tolist() == TANGENT_STEPS
    lam, mu = E * NU / ((1 + NU) * (1 - 2 * NU)), E / (2 * (1 + NU))
    np.testing.assert_allclose(_tangent_row(text), [lam + 2 * mu, lam, lam, 0, 0, 0], rtol=1e-5, atol=1e-9)
    assert f"{CYCLES * STEPS * len(AMPLITUDES)} of {CYCLES * STEPS * len(AMPLITUDES)} point-steps converged" in text
    assert f"results: {out / 'results.npz'}" in text and f"plot:    {out / 'stress_strain.png'}" in text


def test_j2_perfect_caps_the_stress_at_the_yield_stress(demo):
    rc, text, out = demo("j2_perfect")
    assert rc == 0
    with np.load(out / "results.npz") as r:
        sxx = r["stress"][..., 0]
        assert r["converged"].all()
        assert np.abs(sxx).max() <= SIGMA_Y * (1 + 1e-9)
        # every amplitude is at least twice the yield strain sigma_y / E = 5e-4: yields both ways, and
        # the last reloading from -A to 0 (strain range A >= 2 sigma_y / E) ends on the yield surface in tension
        np.testing.assert_allclose(np.abs(sxx).max(axis=0), SIGMA_Y, rtol=1e-9)
        np.testing.assert_allclose(sxx[-1], SIGMA_Y, rtol=1e-9)
        assert (sxx.min(axis=0) < -SIGMA_Y * (1 - 1e-9)).all()
    K = E / (3 * (1 - 2 * NU))  # plastic flow is deviatoric: the volumetric row is the bulk modulus
    np.testing.assert_allclose(_tangent_row(text), [K, K, K, 0, 0, 0], rtol=1e-5, atol=1e-6)


def test_bundled_spec_names_the_option():
    assert bundled_spec("j2_perfect") == SPEC / "library.yaml"
    assert bundled_spec("elasticity_total") == SPEC / "elasticity.yaml"
    with pytest.raises(InputError, match=r"^--model: no bundled model named 'j2_perfekt'"):
        bundled_spec("j2_perfekt")
    with pytest.raises(InputError, match=r"^--model: 'x y': not a model name"):
        bundled_spec("x y")


@pytest.mark.parametrize("argv, message", [
    (["--model", "x y"], "--model: 'x y': not a model name"),
    (["--model", "j2_perfekt"], "--model: no bundled model named 'j2_perfekt'"),
    (["--device", "tpu"], "--device 'tpu': expected cpu or cuda[:N]"),
    (["--out", "{file}"], "--out {file}: exists and is not a folder"),
])
def test_bad_input_is_named_and_writes_nothing(tmp_path, capsys, monkeypatch, argv, message):
    import modelc.commands.run as run_cmd

    monkeypatch.setattr(run_cmd, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    (tmp_path / "file").write_text("x")
    argv = [a.replace("{file}", str(tmp_path / "file")) for a in argv]
    rc = cli_main(["demo", "--model", "elastic", "--out", str(tmp_path / "demo"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message.replace("{file}", str(tmp_path / "file")) in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_building_block_that_is_not_driven_by_strain_is_refused(tmp_path, capsys):
    """``elasticity`` reads a plastic strain no history provides: named, exit 2."""
    rc = cli_main(["demo", "--model", "elasticity", "--out", str(tmp_path / "demo"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "model input 'state/internal/Ep' is not driven by a strain-controlled history" in err
    assert "Traceback" not in err and not (tmp_path / "demo").exists()
