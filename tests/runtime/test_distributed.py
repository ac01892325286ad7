"""Scale-out (modelc.runtime.distributed, modelc.results, `modelc run --distributed`).

Oracle: the single-process driver (``modelc.runtime.driver.run_history`` / plain ``modelc run``),
which a sharded, chunked, resumed or torchrun-launched run must equal bit for bit (every point is
computed by the same step loop; only where its rows are stored differs). In-process runs (one rank,
several shards) cover sharding, chunking, samples, failures and resume; the torchrun tests launch 2
ranks on the CPU (gloo): equality with a single process, a rank killed, a rank failing, and a rank
lost without torchrun's agent (our heartbeat).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import modelc
from dist_helpers import SlowElastic
from modelc.cli import main as cli_main
from modelc.distributed import run_history
from modelc.errors import InputError
from modelc.results import load
from modelc.runtime import driver
from modelc.runtime.histories import uniaxial_strain_history
from modelc.runtime.results import INDEX, chunks_of, shard_dir

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "spec" / "library.yaml"
HELPER = Path(__file__).resolve().parent / "dist_helpers.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _history(rng, batch, steps):
    amps = rng.uniform(0.001, 0.03, batch) * rng.choice([-1.0, 1.0], batch)
    return uniaxial_strain_history(amps, rng.uniform(0.5, 5.0, batch), steps=steps)


def _assert_same(ref, res, keys=None):
    keys = sorted(ref) if keys is None else keys
    assert sorted(res) == sorted(ref)
    for k in keys:
        a, b = np.asarray(ref[k]), np.asarray(res[k])
        assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, b.dtype, a.shape, b.shape)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), k


@pytest.fixture(scope="module")
def j2():
    return modelc.load(str(LIBRARY), model="j2_linear_iso")


# --------------------------------------------------------------------------------------------------
# One process, several shards and chunks


@pytest.mark.parametrize("dtype,shards,chunk", [(torch.float64, 3, 4), (torch.float32, 2, 1),
                                                (torch.float64, 1, None)])
def test_sharded_chunked_run_equals_single_process(j2, tmp_path, dtype, shards, chunk):
    rng = np.random.default_rng()
    hist = _history(rng, 7, 13)
    m = j2.Model(dtype=dtype, backend="torch")
    sy = rng.uniform(80.0, 200.0, 7)
    ref = driver.run_history(m, hist, params={"sigma_y": sy}, tangent_steps=[2, 5, 13], progress=False)
    res = run_history(m, hist, tmp_path / "out", params={"sigma_y": sy}, tangent_steps=[2, 5, 13],
                      shards=shards, chunk_steps=chunk, progress=False)
    # plastic steps were reached (j2_linear_iso is closed-form: no Newton iterations to count)
    assert np.asarray(res["state/internal/ep"])[1:].max() > 0
    _assert_same(ref, res)
    assert len(res.plan.shards) == shards and res.ok and res.plan.complete
    assert res.summary() == "all 7 point(s) converged at all 13 step(s)"
    # the directory reads back the same in a fresh load, and a range of steps reads only its chunks
    again = load(tmp_path / "out")
    for sl in (slice(0, 14), slice(3, 9), slice(12, 14), slice(5, 5), slice(1, 13, 4)):
        np.testing.assert_array_equal(again.read("stress", sl), ref["stress"][sl])
        np.testing.assert_array_equal(again.read("time", sl), ref["time"][sl])


@pytest.mark.parametrize("source", ["memory", "npz", "dir"])
def test_stress_control_and_temperature_shard_and_chunk_bit_for_bit(tmp_path, source):
    """A history with mixed control and a temperature (docs/zoo/thermo_j2.yaml: tables in the
    temperature): bars free laterally, held at zero axial strain for the first half of the rows
    (strain control only: no mask in the chunks there) and then pulled, heated and cooled. Sharded
    and chunked it equals the single process bit for bit, the strain solved for included: a chunk
    continues from the previous chunk's solved strain (a chunk boundary used to restart it from the
    history's zero, and the mask and temperature used to be dropped or refused)."""
    m = modelc.load(ROOT / "docs" / "zoo" / "thermo_j2.yaml", "thermo_j2_return").Model(dtype=torch.float64,
                                                                                          backend="c")
    rng = np.random.default_rng()
    steps, batch = 31, 5
    t = np.linspace(0.0, 1.0, steps)
    T = 293.0 + rng.uniform(200.0, 650.0, batch) * np.interp(t, [0, 0.5, 1], [0, 1, 0])[:, None]
    strain = np.zeros((steps, batch, 6))
    strain[steps // 2:, :, 0] = np.linspace(0.0, 1.0, steps - steps // 2)[:, None] * rng.uniform(1e-3, 4e-3, batch)
    control = np.zeros((steps, batch, 6), bool)
    control[steps // 2:, :, 1:] = True
    hist = {"time": np.repeat(t[:, None], batch, axis=1), "strain": strain, "stress": np.zeros((steps, batch, 6)),
            "control": control, "temperature": T}
    ref = driver.run_history(m, hist, progress=False)
    assert ref.ok and np.asarray(ref["equivalent_plastic_strain"])[-1].min() > 0
    assert np.abs(np.asarray(ref["strain"])[-1, :, 1:3]).min() > 1e-4  # lateral strains solved for
    if source == "npz":
        np.savez(tmp_path / "h.npz", **hist)
        hist = tmp_path / "h.npz"
    elif source == "dir":
        (tmp_path / "h").mkdir()
        for k, v in hist.items():
            np.save(tmp_path / "h" / f"{k}.npy", v)
        hist = tmp_path / "h"
    for shards, chunk in ((2, 4), (3, 7), (1, None)):
        res = run_history(m, hist, tmp_path / f"out{shards}", shards=shards, chunk_steps=chunk, progress=False)
        _assert_same(ref, res)


def test_samples_with_a_temperature_and_stress_control(tmp_path):
    """Samples over a temperature history: each (point, sample) runs at its point's temperature, so a
    sample's results equal a single-process run with that sample's parameter; the temperature stays
    per point. With stress control each sample solves its own strain: the results keep the strain
    per work item, (steps, points, samples, 6), each equal to that sample's single run's."""
    m = modelc.load(ROOT / "docs" / "zoo" / "thermo_j2.yaml", "thermo_j2_return").Model(dtype=torch.float64,
                                                                                          backend="c")
    steps, batch = 9, 3
    t = np.linspace(0.0, 1.0, steps)
    strain = np.zeros((steps, batch, 6))
    strain[:, :, 5] = t[:, None] * np.array([2e-3, 4e-3, 6e-3])
    T = 293.0 + np.outer(t, [100.0, 300.0, 600.0])
    hist = {"time": np.repeat(t[:, None], batch, axis=1), "strain": strain, "temperature": T}
    sy = [150.0, 240.0]
    res = run_history(m, hist, tmp_path / "out", samples={"sy_573": sy}, chunk_steps=3, shards=2, progress=False)
    np.testing.assert_array_equal(res["temperature"], T)
    assert res["strain"].shape == (steps, batch, 6)  # strain control: per point
    for k, v in enumerate(sy):
        ref = driver.run_history(m, hist, params={"sy_573": v}, progress=False)
        np.testing.assert_array_equal(np.asarray(res["stress"])[:, :, k], np.asarray(ref["stress"]))
    strain[:, :, 0] = t[:, None] * np.array([4e-3, 6e-3, 8e-3])
    hist.update(strain=strain, stress=np.zeros((steps, batch, 6)), control=np.array([0, 1, 1, 0, 0, 0], bool))
    res = run_history(m, hist, tmp_path / "out2", samples={"sy_573": sy}, chunk_steps=3, shards=4, progress=False)
    assert res["strain"].shape == (steps, batch, 2, 6)
    for k, v in enumerate(sy):
        ref = driver.run_history(m, hist, params={"sy_573": v}, progress=False)
        assert ref.ok
        for key in ("stress", "strain", "equivalent_plastic_strain"):
            np.testing.assert_array_equal(np.asarray(res[key])[:, :, k], np.asarray(ref[key]), err_msg=key)
    lateral = np.asarray(res["strain"])[-1, :, :, 1]
    assert np.abs(lateral[:, 0] - lateral[:, 1]).max() > 1e-6  # the samples solved different strains


def test_samples_run_every_point_once_per_sample(j2, tmp_path):
    rng = np.random.default_rng()
    B, S = 4, 3
    hist = _history(rng, B, 9)
    m = j2.Model(backend="torch")
    sy, E = rng.uniform(80.0, 200.0, S), rng.uniform(1e5, 2e5, S)
    K = rng.uniform(100.0, 5000.0, B)  # a per-point override next to the samples
    res = run_history(m, hist, tmp_path / "out", params={"K": K}, samples={"sigma_y": sy, "E": E},
                      shards=5, chunk_steps=3, tangent_steps=[4], progress=False)
    # oracle: the driver on the history repeated per sample, point-major
    big = {"time": np.repeat(hist["time"], S, axis=1), "strain": np.repeat(hist["strain"], S, axis=1)}
    ref = driver.run_history(m, big, params={"sigma_y": np.tile(sy, B), "E": np.tile(E, B),
                                             "K": np.repeat(K, S)}, tangent_steps=[4], progress=False)
    for k in ("stress", "state/internal/ep", "converged", "iterations", "residual_norm"):
        assert res[k].shape == (9 + 1, B, S, *ref[k].shape[2:])
        np.testing.assert_array_equal(res[k].reshape(ref[k].shape), ref[k], err_msg=k)
    np.testing.assert_array_equal(res["tangent"].reshape(ref["tangent"].shape), ref["tangent"])
    np.testing.assert_array_equal(res["time"], hist["time"])  # per point, not per sample
    np.testing.assert_array_equal(res["strain"], hist["strain"])
    assert res["labels"].tolist() == hist["labels"].tolist()
    np.testing.assert_array_equal(res["samples/sigma_y"], sy)
    # a sample differs from its neighbour (the samples really were applied)
    assert not np.array_equal(res["stress"][:, :, 0], res["stress"][:, :, 1])
    # the same sweep with the samples as parameters batched over a named `samples` dim
    from modelc.runtime.tensors import TypedTensor

    named = run_history(m, hist, tmp_path / "named", shards=2, tangent_steps=[4], progress=False,
                        params={"K": K, "sigma_y": TypedTensor(torch.tensor(sy), "Scalar", ("samples",)),
                                "E": TypedTensor(torch.tensor(E), "Scalar", ("samples",))})
    np.testing.assert_array_equal(named["stress"], res["stress"])


def test_failures_are_summarised_over_all_shards(tmp_path):
    hist = uniaxial_strain_history([0.001, 0.004, 0.002, 0.006, 0.001], 1.0, steps=8)
    m = SlowElastic(limit=0.003)  # points 1 and 3 fail once |eps_xx| > 0.003
    with pytest.warns(driver.NonConvergenceWarning):
        ref = driver.run_history(m, hist, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one summary, not a warning per chunk
        res = run_history(m, hist, tmp_path / "out", shards=3, chunk_steps=2, progress=False)
    _assert_same(ref, res)
    assert res.failed == ref.failed and set(res.failed) == {1, 3} and not res.ok
    text = res.summary()
    assert text.startswith("2 of 5 point(s) did not converge")
    assert f"point 1 (A=0.004, T=1 s) from step {ref.failed[1]}" in text
    assert json.loads((tmp_path / "out" / INDEX).read_text())["summary"] == text


def test_resume_continues_an_interrupted_run(j2, tmp_path):
    rng = np.random.default_rng()
    hist = _history(rng, 6, 11)
    np.savez(tmp_path / "h.npz", **hist)
    m = j2.Model(backend="torch")
    ref = driver.run_history(m, hist, progress=False)
    out = tmp_path / "out"
    run_history(m, tmp_path / "h.npz", out, shards=3, chunk_steps=2, progress=False)
    # interrupt: shard 1 lost its last two chunks, shard 2 everything, the index is not complete
    index = json.loads((out / INDEX).read_text())
    (out / INDEX).write_text(json.dumps({**index, "complete": False, "summary": ""}))
    (shard_dir(out, 1) / "shard.json").unlink()
    for _, _, p in chunks_of(out, 1)[-2:]:
        p.unlink()
    shutil.rmtree(shard_dir(out, 2))
    kept = {p: p.stat().st_mtime_ns for p in shard_dir(out, 0).iterdir()}
    with pytest.raises(InputError, match="not complete .1 of 3 shard"):
        load(out)
    with pytest.raises(InputError, match="pass --resume"):
        run_history(m, tmp_path / "h.npz", out, progress=False)
    with pytest.raises(InputError, match="another history, parameters"):
        run_history(m, tmp_path / "h.npz", out, params={"E": 1e5}, resume=True, progress=False)
    res = run_history(m, tmp_path / "h.npz", out, resume=True, progress=False)
    _assert_same(ref, res)
    assert {p: p.stat().st_mtime_ns for p in shard_dir(out, 0).iterdir()} == kept  # not recomputed


def test_bad_input_is_named(j2, tmp_path):
    hist = uniaxial_strain_history([0.001, 0.002], 1.0, steps=4)
    m = j2.Model(backend="torch")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(InputError, match="not an empty directory"):
        run_history(m, hist, tmp_path / "full", progress=False)
    with pytest.raises(InputError, match="one value per sample"):
        run_history(m, hist, tmp_path / "a", samples={"E": [1.0, 2.0], "nu": [0.3]}, progress=False)
    with pytest.raises(InputError, match="both as an override and as samples"):
        run_history(m, hist, tmp_path / "b", params={"E": 1.0}, samples={"E": [1.0]}, progress=False)
    with pytest.raises(InputError, match="unknown parameter 'sigma'"):
        run_history(m, hist, tmp_path / "c", samples={"sigma": [1.0]}, progress=False)
    with pytest.raises(InputError, match=r"tangent step\(s\) \[9\] out of range"):
        run_history(m, hist, tmp_path / "d", tangent_steps=[9], progress=False)


def test_load_errors(tmp_path):
    with pytest.raises(InputError, match="no such results file"):
        load(tmp_path / "nope")
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="not a modelc results directory"):
        load(tmp_path / "d")
    (tmp_path / "d" / INDEX).write_text("{}")
    with pytest.raises(InputError, match="not a modelc results index"):
        load(tmp_path / "d")
    np.savez(tmp_path / "h.npz", time=np.zeros((2, 1)))
    with pytest.raises(InputError, match="not a modelc results file"):
        load(tmp_path / "h.npz")


def test_cli_flags_need_distributed(tmp_path, capsys):
    hist = tmp_path / "h.npz"
    np.savez(hist, **uniaxial_strain_history([0.001], 1.0, steps=3))
    rc = cli_main(["run", str(LIBRARY), "--model", "elastic", "--history", str(hist), "--out",
                   str(tmp_path / "r.npz"), "--resume", "--chunk-steps", "2"])
    assert rc == 2 and "--resume, --chunk-steps: only with --distributed" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# torchrun, 2 ranks on the CPU (gloo)


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HELPER.parent)}


def test_torchrun_two_ranks_equal_a_single_process_bit_for_bit(tmp_path):
    rng = np.random.default_rng()
    hist = tmp_path / "h.npz"
    np.savez(hist, **_history(rng, 5, 12))
    sy = ",".join(f"{v:.17g}" for v in rng.uniform(80.0, 200.0, 5))
    args = ["run", str(LIBRARY), "--model", "j2_linear_iso", "--history", str(hist), "--set",
            f"sigma_y={sy}", "--tangent-steps", "3,12", "--no-progress"]  # backend auto: C on the CPU
    assert cli_main(args + ["--out", str(tmp_path / "single.npz")]) == 0
    proc = subprocess.run([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "modelc", *args,
                           "--out", str(tmp_path / "dist"), "--distributed", "--chunk-steps", "5"],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # rank 0 alone reports, once, for all ranks
    assert proc.stdout.count("all 5 point(s) converged at all 12 step(s)") == 1
    assert "on 2 rank(s), 2 shard(s)" in proc.stdout
    single, dist = load(tmp_path / "single.npz"), load(tmp_path / "dist")
    _assert_same(single, dist)
    ranks = {json.loads((shard_dir(tmp_path / "dist", i) / "shard.json").read_text())["rank"] for i in (0, 1)}
    assert ranks == {0, 1}


def _wait_for(cond, limit, what):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < limit, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_torchrun_killed_rank_ends_the_run_then_resume(tmp_path):
    """A rank killed mid-run: torchrun ends the run in bounded time naming it; --resume finishes."""
    hist_arrays = uniaxial_strain_history([0.001, 0.002, 0.003, 0.004], 1.0, steps=60)
    np.savez(tmp_path / "h.npz", **hist_arrays)
    out = tmp_path / "out"
    proc = subprocess.Popen([*TORCHRUN, "--standalone", "--nproc-per-node", "2", str(HELPER),
                             str(tmp_path / "h.npz"), str(out), "0.05", "1"], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: len(chunks_of(out, 1)) >= 2 and Path(f"{out}.pid-1").is_file(), 120,
                  "rank 1's first chunks")
        os.kill(int(Path(f"{out}.pid-1").read_text()), signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert time.monotonic() - killed < 30
    assert proc.returncode != 0
    assert "rank      : 1" in err and "SIGKILL" in err
    assert not (shard_dir(out, 1) / "shard.json").is_file()
    # resume in one process: complete shards kept, shard 1 continued from its last chunk
    res = run_history(SlowElastic(), tmp_path / "h.npz", out, resume=True, progress=False)
    _assert_same(driver.run_history(SlowElastic(), hist_arrays, progress=False), res)


def test_torchrun_rank_error_ends_the_run_naming_the_rank(tmp_path):
    hist = uniaxial_strain_history([0.001, 0.002, 0.003, 0.004], 1.0, steps=30)
    hist["strain"][25, 3, 1] = np.inf  # a point of rank 1's shard, in a late chunk
    np.savez(tmp_path / "h.npz", **hist)
    t0 = time.monotonic()
    proc = subprocess.run([*TORCHRUN, "--standalone", "--nproc-per-node", "2", str(HELPER),
                           str(tmp_path / "h.npz"), str(tmp_path / "out"), "0.01", "2"], env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and time.monotonic() - t0 < 200
    msg = "rank 1 of 2 (" + socket.gethostname() + "): InputError: " + str(tmp_path / "h.npz") + \
        ": 'strain' has 1 non-finite value(s), the first at index (25, 3, 1)"
    assert msg in proc.stderr  # rank 1's own report, in torchrun's root-cause summary


def test_lost_rank_without_torchrun_agent_detected_by_heartbeat(tmp_path):
    """Launched without torchrun's agent (as srun would): rank 0 notices that rank 1 is gone."""
    np.savez(tmp_path / "h.npz", **uniaxial_strain_history([0.001, 0.002], 1.0, steps=400))
    out = tmp_path / "out"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    procs = [subprocess.Popen([sys.executable, str(HELPER), str(tmp_path / "h.npz"), str(out), "0.05",
                               "1", "3"], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        _wait_for(lambda: len(chunks_of(out, 1)) >= 1, 120, "rank 1's first chunk")
        procs[1].kill()
        killed = time.monotonic()
        _, err = procs[0].communicate(timeout=60)
    finally:
        for p in procs:
            p.kill()
    assert time.monotonic() - killed < 3 + 15  # the heartbeat timeout, and slack for a busy machine
    assert procs[0].returncode == 2
    assert "the run stopped on rank 0: rank 1 stopped responding (no heartbeat for 3 s" in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------------------------------
# docs/scale-out.md: its Python examples run and print what the page says


def _doc_block(first_line):
    text = (ROOT / "docs" / "scale-out.md").read_text()
    start = text.index("```python\n" + first_line) + len("```python\n")
    return text[start:text.index("```", start)]


def test_docs_sweep_example(tmp_path, monkeypatch, capsys):
    (tmp_path / "spec").symlink_to(ROOT / "spec")
    monkeypatch.chdir(tmp_path)
    exec(compile(_doc_block("# sweep.py"), "sweep.py", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out == ["(41, 3, 4, 6)", "[ 80. 100. 120. 140.]", "all 12 runs (3 point(s) x 4 sample(s)) converged at all 40 step(s)"]


def test_docs_mpi_example_with_a_stand_in_communicator(monkeypatch, capsys):
    """mpi4py is not a dependency: a one-rank stand-in for MPI.COMM_WORLD runs the example."""
    class Comm:
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 1

        def allreduce(self, value, op):
            return value

    fake = type(sys)("mpi4py")
    fake.MPI = type(sys)("mpi4py.MPI")
    fake.MPI.COMM_WORLD, fake.MPI.SUM = Comm(), "sum"
    monkeypatch.setitem(sys.modules, "mpi4py", fake)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake.MPI)
    monkeypatch.chdir(ROOT)
    scope = {}
    exec(compile(_doc_block("# fe_step.py"), "fe_step.py", "exec"), scope)
    assert capsys.readouterr().out == "0 non-converged points on 1 ranks\n"
    assert scope["stress"].shape == (10_000, 6) and scope["tangent"].shape == (10_000, 6, 6)
    assert scope["out"]["state/internal/ep"].min() > 0  # 2e-3 strain in 1 s: past yield, plastic


def test_progress_lines_for_batch_logs(capsys):
    """Off a terminal, rank 0 prints the progress of all ranks as lines (every ``every`` seconds)."""
    from modelc.runtime.distributed import _Progress

    show = _Progress(200, True, "j2", every=0.0)
    show(50)
    show(50)  # no news, no line
    show(200)
    err = capsys.readouterr().err.splitlines()
    assert [e.split(" (")[0] for e in err] == ["j2: 25%", "j2: 100%"]
    assert "200 of 200 point-steps" in err[1]
    quiet = _Progress(200, False, "j2", every=0.0)
    quiet(100)
    assert capsys.readouterr().err == ""
