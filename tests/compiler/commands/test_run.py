"""`modelc run` (modelc.commands.run), its own helpers and what the command writes: --set and
--tangent-steps parsed to values, the device and solver options, the results table and JSON summary
(explicit models without Newton columns, failed points, long tables cut), the stress units, the
model loaded for a dtype and backend, and --sensitivities on the bundled ``elastic`` against the
closed forms d S / d E = S / E and d S / d nu from the Lame constants; bad input named."""
from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from modelc.cli import main as cli_main
from modelc.commands.run import (check_device, load_model, parse_sets, parse_steps, results_table, solver_options,
                                 stress_units, summary_json)
from modelc.errors import InputError
from modelc.runtime.driver import RunResult

E, NU = 200000.0, 0.3


def _lame(E=E, nu=NU):
    return E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))


def _hooke(strain, lam, mu):
    out = 2 * mu * strain
    out[..., :3] += lam * strain[..., :3].sum(-1, keepdims=True)
    return out


def _results(stress, conv, its, **extra):
    return {"stress": np.asarray(stress, float), "converged": np.asarray(conv, bool),
            "iterations": np.asarray(its, np.int64), **extra}


def test_parse_sets_gives_numbers_and_per_point_arrays():
    got = parse_sets(["E=210e3", " sigma_y = 100,150.5", "nu=-0"])
    assert got["E"] == 210000.0 and isinstance(got["E"], float)
    assert isinstance(got["sigma_y"], np.ndarray) and got["sigma_y"].tolist() == [100.0, 150.5]
    assert got["nu"] == 0.0 and list(got) == ["E", "sigma_y", "nu"]
    assert parse_sets([]) == {}
    for bad in ("=5", "E=1,,2"):
        with pytest.raises(InputError, match=f"--set '{bad}'"):
            parse_sets([bad])


def test_parse_steps():
    assert parse_steps(None) is None
    assert parse_steps("2, 20,27,") == [2, 20, 27]
    with pytest.raises(InputError, match=r"--tangent-steps '1\.5': expected step numbers separated by commas"):
        parse_steps("1.5")


def test_device_and_solver_options():
    assert check_device("cpu") == "cpu"
    for bad in ("CUDA", "gpu:0", ""):
        with pytest.raises(InputError, match=f"--device '{bad}': expected cpu or cuda"):
            check_device(bad)
    if torch.cuda.is_available():
        assert check_device("cuda:0") == "cuda:0"
    else:
        with pytest.raises(InputError, match="--device cuda:0: CUDA is not available on this machine"):
            check_device("cuda:0")
    ns = argparse.Namespace(rtol=None, atol=1e-8, max_iter=7)
    assert solver_options(ns) == {"atol": 1e-8, "max_iter": 7}
    assert solver_options(argparse.Namespace(rtol=None, atol=None, max_iter=None)) == {}


def test_results_table_columns_and_rows():
    stress = np.zeros((3, 2, 6))
    stress[1:, 0, 0], stress[1:, 1, 0] = [120.0, -80.0], [50.0, np.nan]
    conv = [[True, True], [True, True], [True, False]]
    lines = results_table(_results(stress, conv, np.zeros((3, 2)), labels=np.array(["x", "y"]))).splitlines()
    assert lines[0].split() == ["point", "peak", "|sxx|", "final", "sxx", "converged"]  # explicit: no Newton
    assert lines[2].split() == ["0", "x", "120", "-80", "2/2"]
    assert lines[3].split() == ["1", "y", "50", "nan", "1/2"]
    ep = np.zeros((3, 2))
    ep[-1] = [0.25, 0.0]
    its = [[0, 0], [3, 1], [4, 2]]
    lines = results_table(_results(stress, conv, its, equivalent_plastic_strain=ep)).splitlines()
    assert "final ep" in lines[0] and "Newton its" in lines[0] and "worst step" in lines[0]
    assert lines[2].split() == ["0", "0", "120", "-80", "0.25", "7", "4", "2/2"]
    many = results_table(_results(np.ones((2, 25, 6)), np.ones((2, 25)), np.zeros((2, 25))), max_rows=20)
    assert len(many.splitlines()) == 2 + 20 + 1 and many.endswith("... (5 more points)")


def test_summary_json_and_stress_units():
    stress = np.zeros((3, 2, 6))
    stress[1:, 0, 0], stress[1:, 1, 0] = [120.0, -80.0], [np.nan, np.nan]
    arrays = _results(stress, [[1, 1], [1, 0], [1, 0]], [[0, 0], [2, 9], [3, 9]],
                      time=np.tile(np.arange(3.0)[:, None], (1, 2)), labels=np.array(["0", "1"]))
    doc = summary_json(RunResult(arrays, {1: 1}), name="m", out=Path("r.npz"))
    assert doc["name"] == "m" and doc["out"] == "r.npz" and (doc["steps"], doc["points"]) == (2, 2)
    assert doc["ok"] is False and doc["failed"] == {"1": 1}
    assert doc["summary"].startswith("1 of 2 point(s) did not converge") and doc["solver"] == {}
    p0, p1 = doc["table"]
    assert (p0["peak_abs_sxx"], p0["final_sxx"], p0["newton_iterations"], p0["worst_step_iterations"]) == \
        (120.0, -80.0, 5, 3)
    assert p1["peak_abs_sxx"] is None and p1["final_sxx"] is None and p1["converged_steps"] == 0
    assert p0["final_ep"] is None and p0["label"] == "0"
    # the units of E, when the model says them
    info = lambda u: SimpleNamespace(parameter_info={"E": SimpleNamespace(units=u)})  # noqa: E731
    assert stress_units(info("MPa")) == "MPa"
    assert stress_units(info("")) is None and stress_units(SimpleNamespace()) is None


def test_load_model_builds_for_the_dtype_and_backend():
    m = load_model("elastic", None, dtype="float32", device="cpu", backend="torch")
    assert m.dtype == torch.float32 and stress_units(m) == "MPa"
    e = torch.tensor([[1e-3, 0, 0, 0, 0, 0]], dtype=torch.float32)
    lam, mu = _lame()
    torch.testing.assert_close(m({"forces/E": e})["state/S"],
                               torch.tensor([[lam + 2 * mu, lam, lam, 0, 0, 0]]) * 1e-3, rtol=1e-6, atol=1e-3)
    with pytest.raises(InputError, match="nowhere/spec.yaml: spec file not found"):
        load_model("nowhere/spec.yaml", None, dtype="float64", device="cpu", backend="torch")


def test_sensitivities_of_elastic_are_the_closed_forms(tmp_path, capsys):
    rng = np.random.default_rng()
    strain = np.zeros((4, 2, 6))
    strain[1:] = np.cumsum(4e-4 * rng.normal(size=(3, 2, 6)), axis=0)
    np.savez(tmp_path / "h.npz", time=np.tile(np.arange(4.0)[:, None], (1, 2)), strain=strain)
    nu = np.array([0.2, 0.35])  # one per point
    rc = cli_main(["run", "elastic", "--history", str(tmp_path / "h.npz"), "--out", str(tmp_path / "r.npz"),
                   "--set", "nu=0.2,0.35", "--sensitivities", "E, nu", "--no-progress"])
    assert rc == 0 and "all 2 point(s) converged at all 3 step(s)" in capsys.readouterr().out
    with np.load(tmp_path / "r.npz") as r:
        lam, mu = _lame(E, nu[None, :, None])
        S = _hooke(strain, lam, mu)
        np.testing.assert_allclose(r["stress"], S, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(r["d(state/S)/d(E)"], S / E, rtol=1e-12, atol=1e-15)
        # d lam / d nu = E (1 + 2 nu^2) / ((1 + nu)^2 (1 - 2 nu)^2),  d mu / d nu = -E / (2 (1 + nu)^2)
        n = nu[None, :, None]
        dlam, dmu = E * (1 + 2 * n ** 2) / ((1 + n) ** 2 * (1 - 2 * n) ** 2), -E / (2 * (1 + n) ** 2)
        np.testing.assert_allclose(r["d(state/S)/d(nu)"], _hooke(strain, dlam, dmu), rtol=1e-11, atol=1e-9)


def test_sensitivities_of_an_unknown_parameter_are_named(tmp_path, capsys):
    np.savez(tmp_path / "h.npz", time=np.array([[0.0], [1.0]]), strain=np.zeros((2, 1, 6)))
    for names, message in (("Q", "unknown parameter(s) Q; its parameters are E, nu"),
                           (" , ", "--sensitivities ' , ': expected parameter names separated by commas")):
        rc = cli_main(["run", "elastic", "--history", str(tmp_path / "h.npz"), "--out", str(tmp_path / "r.npz"),
                       "--sensitivities", names, "--no-progress"])
        err = capsys.readouterr().err
        assert rc == 2 and message in err and "Traceback" not in err
        assert not (tmp_path / "r.npz").exists()


def test_sensitivities_of_a_stress_controlled_history(tmp_path, capsys):
    """Uniaxial stress on the elastic model: S_xx = E e_xx and the lateral strains -nu e_xx (solved
    for), so d S_xx / d E = e_xx, d S_xx / d nu = 0 and d e_yy / d nu = -e_xx, in closed form."""
    strain = np.zeros((4, 2, 6))
    strain[1:, :, 0] = np.array([[1e-3, -2e-3], [2e-3, -1e-3], [3e-3, 5e-4]])
    np.savez(tmp_path / "h.npz", time=np.tile(np.arange(4.0)[:, None], (1, 2)), strain=strain,
             stress=np.zeros((4, 2, 6)), control=np.array([0, 1, 1, 1, 1, 1], bool))
    rc = cli_main(["run", "elastic", "--history", str(tmp_path / "h.npz"), "--out", str(tmp_path / "r.npz"),
                   "--sensitivities", "E,nu", "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    exx = strain[:, :, 0]
    with np.load(tmp_path / "r.npz") as r:
        np.testing.assert_allclose(r["stress"][:, :, 0], E * exx, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(r["d(state/S)/d(E)"][:, :, 0], exx, rtol=1e-10, atol=1e-18)
        np.testing.assert_allclose(r["d(state/S)/d(nu)"], 0.0, atol=1e-7)
        np.testing.assert_allclose(r["d(strain)/d(nu)"][:, :, 1], -exx, rtol=1e-10, atol=1e-18)
        np.testing.assert_allclose(r["strain"][:, :, 1], -0.3 * exx, rtol=1e-10, atol=1e-18)


def test_sensitivity_names_are_checked_before_the_run(tmp_path, capsys, monkeypatch):
    """A bad --sensitivities name is refused before any step runs (it used to be found after the
    whole run, whose work was then lost)."""
    import modelc.runtime.driver as driver

    def no_run(*a, **k):
        raise AssertionError("the run started before the names were checked")

    monkeypatch.setattr(driver, "run_history", no_run)
    np.savez(tmp_path / "h.npz", time=np.array([[0.0], [1.0]]), strain=np.zeros((2, 1, 6)))
    rc = cli_main(["run", "elastic", "--history", str(tmp_path / "h.npz"), "--out", str(tmp_path / "r.npz"),
                   "--sensitivities", "E,Q", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "--sensitivities 'E,Q': model elastic: unknown parameter(s) Q" in err and "Traceback" not in err
