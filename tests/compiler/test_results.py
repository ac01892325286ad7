"""modelc.results, the user's reader of what ``modelc run`` writes: the names are the runtime's
(whose own tests, tests/runtime/test_results.py, cut directories by hand); here the files and
directories the command line writes for the bundled ``elastic`` read back as Hooke's law (stress, the
consistent tangent, a parameter sample per E), and a run whose Newton solve fails at known points
reads back with those points and steps, their values NaN."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

import modelc.results as results
import modelc.runtime.results as runtime_results
from modelc.cli import main as cli_main
from modelc.errors import InputError
from modelc.results import Plan, Results, load

E, NU = 200000.0, 0.3


def _stiffness(E=E, nu=NU):
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    C = 2 * mu * np.eye(6)
    C[:3, :3] += lam
    return C


@pytest.fixture
def history(tmp_path):
    """3 points, 4 steps of random strain from zero, with labels."""
    rng = np.random.default_rng()
    strain = np.zeros((5, 3, 6))
    strain[1:] = np.cumsum(3e-4 * rng.normal(size=(4, 3, 6)), axis=0)
    path = tmp_path / "h.npz"
    np.savez(path, time=np.tile(np.arange(5.0)[:, None], (1, 3)), strain=strain,
             labels=np.array(["a", "b", "c"]))
    return path, strain


def _run(capsys, *argv) -> int:
    capsys.readouterr()
    rc = cli_main(["run", *argv, "--no-progress"])
    assert "Traceback" not in capsys.readouterr().err
    return rc


def test_the_names_are_the_runtime_reader():
    assert results.__all__ == ["load", "Results", "Plan"]
    assert (load, Results, Plan) == (runtime_results.load, runtime_results.Results, runtime_results.Plan)


def test_a_run_file_reads_back_as_hookes_law(tmp_path, capsys, history):
    path, strain = history
    assert _run(capsys, "elastic", "--history", str(path), "--out", str(tmp_path / "r.npz"),
                "--tangent-steps", "2,4") == 0
    r = load(tmp_path / "r.npz")
    assert isinstance(r, Results) and r.plan is None and r.ok and r.failed == {}
    np.testing.assert_allclose(r["stress"], strain @ _stiffness().T, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(r["state/S"], r["stress"])  # the variable's name reads the same array
    np.testing.assert_array_equal(r.read("stress", slice(2, 4)), r["stress"][2:4])
    np.testing.assert_allclose(r["tangent"], np.broadcast_to(_stiffness(), (2, 3, 6, 6)), rtol=1e-12, atol=1e-9)
    assert r["tangent_steps"].tolist() == [2, 4] and r["labels"].tolist() == ["a", "b", "c"]
    assert r.summary() == "all 3 point(s) converged at all 4 step(s)"


def test_a_distributed_run_directory_reads_back_as_hookes_law(tmp_path, capsys, history):
    path, strain = history
    out = tmp_path / "run"
    assert _run(capsys, "elastic", "--history", str(path), "--out", str(out), "--distributed", "--shards", "2",
                "--chunk-steps", "3", "--tangent-steps", "3", "--sample", "E=1e5,2e5", "--set", "nu=0.25") == 0
    r = load(out)
    assert r.plan.model == "elastic" and r.plan.samples == {"E": (1e5, 2e5)} and r.plan.complete
    assert (r.plan.points, r.plan.n_samples, r.plan.work, r.plan.steps) == (3, 2, 6, 5)
    assert r["stress"].shape == (5, 3, 2, 6) and r["tangent"].shape == (1, 3, 2, 6, 6)
    for s, e in enumerate((1e5, 2e5)):
        np.testing.assert_allclose(r["stress"][:, :, s], strain @ _stiffness(e, 0.25).T, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(r["tangent"][0, :, s], np.broadcast_to(_stiffness(e, 0.25), (3, 6, 6)),
                                   rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(r.read("stress", slice(1, 4)), r["stress"][1:4])
    np.testing.assert_array_equal(r["strain"], strain)  # per point, not per sample
    np.testing.assert_array_equal(r["samples/E"], [1e5, 2e5])
    assert r.describe(3) == "point 1 (b), sample 1 (E=200000)"
    assert r.summary() == "all 6 runs (3 point(s) x 2 sample(s)) converged at all 4 step(s)"


def test_a_failed_run_reads_back_with_its_failed_points(tmp_path, capsys):
    """One Newton step allowed: a point whose strain stays zero converges at its initial guess; point 1,
    strained from step 2 on, cannot converge in one step of this nonlinear residual."""
    spec = tmp_path / "stiff.yaml"
    spec.write_text(textwrap.dedent("""\
        models:
          stiff:
            inputs:
              e: {var: forces/E, type: SR2}
            implicit:
              unknowns:
                s: {var: state/S, type: SR2}
              residuals:
                s: s*exp(tr(s)/1000) - 200000*e
              solver: {max_iter: 1}
        """))
    strain = np.zeros((4, 2, 6))
    strain[2:, 1, 0] = [1e-2, 2e-2]
    np.savez(tmp_path / "h.npz", time=np.tile(np.arange(4.0)[:, None], (1, 2)), strain=strain,
             labels=np.array(["still", "pulled"]))
    assert _run(capsys, str(spec), "--history", str(tmp_path / "h.npz"), "--out", str(tmp_path / "r.npz")) == 1
    r = load(tmp_path / "r.npz")
    assert r.failed == {1: 2} and not r.ok
    assert r["converged"].tolist() == [[True, True], [True, True], [True, False], [True, False]]
    assert np.isnan(r["stress"][2:, 1]).all() and (r["stress"][:, 0] == 0).all()
    assert r.summary() == "1 of 2 point(s) did not converge: point 1 (pulled) from step 2"


def test_what_is_not_a_results_file_is_named(tmp_path, history):
    path, _ = history  # a history file: no 'converged' array
    with pytest.raises(InputError, match="h.npz: not a modelc results file"):
        load(path)
    with pytest.raises(InputError, match="nothing.npz: no such results file or directory"):
        load(tmp_path / "nothing.npz")
