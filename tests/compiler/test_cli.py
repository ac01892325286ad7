"""The command line under careless use (issue 15): output paths checked before the work, nothing
partial left, closed pipes, backend choice, --bake names, demo without matplotlib, the sub-stepping
hint, and no Python talk."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from modelc.cli import main
from modelc.runtime.histories import uniaxial_strain_history

REPO = Path(__file__).resolve().parents[2]
ELASTIC = REPO / "spec" / "elasticity.yaml"


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


@pytest.fixture
def history(tmp_path) -> Path:
    h = tmp_path / "h.npz"
    np.savez(h, **{k: v for k, v in uniaxial_strain_history([0.01], 1.0, steps=3).items() if k != "labels"})
    return h


def _run(capsys, history, out, *extra):
    return _cli(capsys, "run", str(ELASTIC), "--model", "elasticity_total", "--history", str(history),
                "--out", str(out), "--no-progress", *extra)


def _leftovers(folder: Path, keep) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name not in keep)


@pytest.mark.parametrize("make_out, message", [
    (lambda d: (d / "adir").mkdir() or d / "adir", "is a folder"),
    (lambda d: (d / "afile").write_text("x") and d / "afile" / "r.npz", "is not a folder"),
    (lambda d: d / "nul\0.npz", "not a file name"),
])
def test_run_checks_its_output_path_before_the_work(tmp_path, capsys, history, monkeypatch, make_out, message):
    import modelc.commands.run as run_cmd

    out = make_out(tmp_path)
    before = _leftovers(tmp_path, ())
    monkeypatch.setattr(run_cmd, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    rc, _, err = _run(capsys, history, out)
    assert rc == 2 and "--out" in err and message in err
    assert _leftovers(tmp_path, ()) == before  # nothing written, no .tmp


def test_run_write_error_after_the_work_names_the_path_and_leaves_nothing(tmp_path, capsys, history,
                                                                          monkeypatch):
    """A write that fails late (a full disk) is caught: exit 2, the path named, no .tmp left."""
    out = tmp_path / "res" / "r.npz"
    real_fdopen = os.fdopen

    class FullDisk:  # the temporary file, opened by runtime.paths.write_atomic_bytes, fills up
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(28, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def full_disk(fd, mode="r", *a, **k):
        f = real_fdopen(fd, mode, *a, **k)
        return FullDisk(f) if "w" in mode else f

    import modelc

    modelc.load(ELASTIC, "elasticity_total")  # compiled (and cached) first: only the results write fails
    monkeypatch.setattr(os, "fdopen", full_disk)
    rc, _, err = _run(capsys, history, out)
    monkeypatch.undo()
    assert rc == 2 and str(out) in err and "No space left" in err
    assert not any(p.suffix == ".tmp" for p in tmp_path.rglob("*")) and not out.exists()


def test_run_plot_path_checked_before_the_work(tmp_path, capsys, history):
    (tmp_path / "p.png").mkdir()
    rc, _, err = _run(capsys, history, tmp_path / "r.npz", "--plot", str(tmp_path / "p.png"))
    assert rc == 2 and "--plot" in err and not (tmp_path / "r.npz").exists()


def test_compile_out_below_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    rc, _, err = _cli(capsys, "compile", str(ELASTIC), "--out", str(tmp_path / "f" / "gen"))
    assert rc == 2 and "--out" in err and "is not a folder" in err
    rc, _, err = _cli(capsys, "compile", str(ELASTIC), "--out", str(tmp_path / "f"))
    assert rc == 2 and "exists and is not a folder" in err


def test_compile_write_error_names_the_folder(tmp_path, capsys, monkeypatch):
    from modelc.backends import module

    def fail(path, text):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(module, "write_atomic", fail)
    rc, _, err = _cli(capsys, "compile", str(ELASTIC), "--out", str(tmp_path / "gen"), "--select", "leaves")
    assert rc == 2 and "Permission denied" in err and str(tmp_path / "gen") in err


def test_bake_refuses_unknown_parameter_names(tmp_path, capsys):
    rc, _, err = _cli(capsys, "compile", str(ELASTIC), "--out", str(tmp_path / "gen"), "--bake", "E,nuu")
    assert rc == 2 and "'nuu'" in err and "did you mean 'nu'" in err
    assert not (tmp_path / "gen").exists()


def test_backend_c_can_be_picked_and_the_help_says_the_cpu_default(tmp_path, capsys, history):
    for cmd in ("run", "demo"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "{auto,c,torch,triton}" in text and "C backend" in text
    rc, out, _ = _run(capsys, history, tmp_path / "r.npz", "--backend", "c")
    assert rc == 0 and (tmp_path / "r.npz").exists()


def test_pick_a_model_speaks_command_line(tmp_path, capsys, history):
    rc, _, err = _cli(capsys, "run", str(ELASTIC), "--history", str(history), "--out", str(tmp_path / "r.npz"),
                      "--no-progress")
    assert rc == 2 and "--model NAME" in err


def test_check_into_a_closed_pipe():
    """`modelc check spec | head -1`: no BrokenPipeError traceback."""
    cmd = f"{sys.executable} -m modelc.cli check {REPO / 'spec' / 'library.yaml'} | head -1"
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.stdout.startswith("spec ") and p.stdout.count("\n") == 1
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


def test_demo_without_matplotlib_prints_its_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rc, out, err = _cli(capsys, "demo", "--model", "elastic", "--out", str(tmp_path / "demo"), "--no-progress")
    assert rc == 0, err
    assert "peak |sxx|" in out and "plot:    (none: plotting needs matplotlib" in out
    assert (tmp_path / "demo" / "results.npz").exists()


def test_failed_run_mentions_substepping(tmp_path, capsys):
    spec = tmp_path / "hard.yaml"
    spec.write_text(textwrap.dedent("""
        models:
          hard:
            inputs:
              e: {var: forces/E, type: SR2}
            implicit:
              unknowns:
                s: {var: state/S, type: SR2}
              residuals:
                s: s*tr(s)**2 - 1e6*e - I2
              solver: {max_iter: 2}
        """))
    h = tmp_path / "h.npz"
    np.savez(h, **{k: v for k, v in uniaxial_strain_history([0.05], 1.0, steps=3).items() if k != "labels"})
    rc, out, _ = _cli(capsys, "run", str(spec), "--history", str(h), "--out", str(tmp_path / "r.npz"),
                      "--no-progress")
    assert rc == 1 and "--on-failure substep" in out
