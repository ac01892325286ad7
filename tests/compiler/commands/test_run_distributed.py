"""`modelc run --distributed` (modelc.commands.run_distributed) in one process, without torchrun (the
launches are tests/runtime/test_distributed.py's): the scale-out options parsed and refused without
--distributed (each flag named as typed), the directory it writes for the bundled ``elastic`` (Hooke's
law; --set and --sample applied) and what rank 0 prints, and bad input named with exit status 2
before any work, nothing written."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from modelc.cli import main as cli_main
from modelc.commands.run_distributed import add_distributed_arguments, check_single
from modelc.errors import InputError
from modelc.results import load


def _stiffness(E=200000.0, nu=0.3):
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    C = 2 * mu * np.eye(6)
    C[:3, :3] += lam
    return C


@pytest.fixture
def history(tmp_path):
    rng = np.random.default_rng()
    strain = np.zeros((5, 3, 6))
    strain[1:] = np.cumsum(3e-4 * rng.normal(size=(4, 3, 6)), axis=0)
    np.savez(tmp_path / "h.npz", time=np.tile(np.arange(5.0)[:, None], (1, 3)), strain=strain,
             labels=np.array(["a", "b", "c"]))
    return tmp_path / "h.npz", strain


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli_main(["run", *argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


def _parse(*argv) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_distributed_arguments(p)
    return p.parse_args(list(argv))


def test_the_options_parse():
    ns = _parse()
    assert (ns.distributed, ns.resume, ns.chunk_steps, ns.shards, ns.samples, ns.timeout) == \
        (False, False, None, None, [], None)
    ns = _parse("--distributed", "--resume", "--chunk-steps", "7", "--shards", "3", "--sample", "E=1,2",
                "--sample", "nu=0.2,0.3", "--timeout", "2.5")
    assert (ns.distributed, ns.resume, ns.chunk_steps, ns.shards, ns.timeout) == (True, True, 7, 3, 2.5)
    assert ns.samples == ["E=1,2", "nu=0.2,0.3"]


def test_scale_out_options_need_distributed():
    check_single(_parse())  # none given: nothing to say
    with pytest.raises(InputError) as info:
        check_single(_parse("--sample", "E=1,2", "--timeout", "3", "--shards", "2"))
    # named as typed (--sample, not the attribute's name), in a fixed order
    assert str(info.value) == "--shards, --sample, --timeout: only with --distributed (results in a directory)"
    with pytest.raises(InputError, match=r"^--chunk-steps: only with --distributed"):
        check_single(_parse("--chunk-steps", "4"))


def test_writes_the_directory_and_prints_for_rank_0(tmp_path, capsys, history):
    path, strain = history
    out = tmp_path / "run"
    rc, text, _ = _cli(capsys, "elastic", "--history", str(path), "--out", str(out), "--distributed",
                       "--shards", "2", "--chunk-steps", "2", "--set", "E=100000", "--no-progress")
    assert rc == 0
    lines = text.splitlines()
    assert lines[0].startswith("elastic: 4 steps x 3 points in ")
    assert lines[0].endswith(" s on 1 rank(s), 2 shard(s) (float64, rank 0 on cpu)")
    assert "peak |sxx|" in lines[1] and lines[3].split()[:2] == ["0", "a"]  # the table, one row a point
    assert lines[-2:] == ["all 3 point(s) converged at all 4 step(s)", f"results: {out} (modelc.results.load)"]
    r = load(out)
    assert r.plan.shards == ((0, 1), (1, 3)) and r.plan.chunk_steps == 2
    np.testing.assert_allclose(r["stress"], strain @ _stiffness(1e5).T, rtol=1e-12, atol=1e-9)


def test_samples_no_table_and_stress_per_sample(tmp_path, capsys, history):
    path, strain = history
    out = tmp_path / "run"
    rc, text, _ = _cli(capsys, "elastic", "--history", str(path), "--out", str(out), "--distributed",
                       "--sample", "E=1e5,3e5", "--sample", "nu=0.2,0.4", "--no-progress")
    assert rc == 0
    assert "4 steps x 3 points x 2 samples" in text and "peak |sxx|" not in text
    r = load(out)
    for s, (E, nu) in enumerate(((1e5, 0.2), (3e5, 0.4))):
        np.testing.assert_allclose(r["stress"][:, :, s], strain @ _stiffness(E, nu).T, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("extra, message", [
    (["--plot", "p.png"], "--plot: not with --distributed; load the results with modelc.results.load(DIR)"),
    (["--shards", "0"], "--shards 0: expected a positive number"),
    (["--chunk-steps", "-2"], "--chunk-steps -2: expected a positive number"),
    (["--timeout", "0"], "--timeout 0.0: expected a positive number of seconds"),
    (["--device", "tpu"], "--device 'tpu': expected cpu or cuda[:N]"),
])
def test_bad_options_are_named_before_the_work(tmp_path, capsys, history, monkeypatch, extra, message):
    import modelc.commands.run as run_cmd

    monkeypatch.setattr(run_cmd, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    out = tmp_path / "run"
    rc, _, err = _cli(capsys, "elastic", "--history", str(history[0]), "--out", str(out), "--distributed",
                      "--no-progress", *extra)
    assert rc == 2 and message in err
    assert not out.exists()


def test_errors_of_the_run_itself_are_named(tmp_path, capsys, history):
    rc, _, err = _cli(capsys, "elastic", "--history", str(tmp_path / "nope.npz"), "--out", str(tmp_path / "a"),
                      "--distributed", "--no-progress")
    assert rc == 2 and "nope.npz: history file not found" in err and not (tmp_path / "a").exists()
    rc, _, err = _cli(capsys, "elastic", "--history", str(history[0]), "--out", str(tmp_path / "b"),
                      "--distributed", "--sample", "E=1e5,2e5", "--sample", "nu=0.3", "--no-progress")
    assert rc == 2 and "samples: every parameter needs one value per sample, got lengths E=2, nu=1" in err
    assert not (tmp_path / "b").exists()


def test_a_bad_sample_names_the_sample_option(tmp_path, capsys, history):
    rc, _, err = _cli(capsys, "elastic", "--history", str(history[0]), "--out", str(tmp_path / "run"),
                      "--distributed", "--no-progress", "--sample", "E=1,x")
    assert rc == 2 and "'1,x' is not a number" in err and not (tmp_path / "run").exists()
    assert "--sample 'E=1,x'" in err and "--set" not in err
