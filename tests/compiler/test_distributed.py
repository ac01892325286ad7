"""modelc.distributed, the public names of sharded runs, in one process (no torchrun; the launches
are tests/runtime/test_distributed.py's): the process context and device outside a launch, a sharded
and chunked run of the bundled ``elastic`` equal to Hooke's law with the shards cut as documented,
parameter samples, and the errors for bad samples and an output path that cannot hold a run."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import modelc
import modelc.distributed as distributed
import modelc.runtime.distributed as runtime_distributed
from modelc.distributed import Context, RankFailed, device_for_rank, init, run_history
from modelc.errors import InputError, ModelcError
from modelc.results import load

E, NU = 200000.0, 0.3


def _hooke(strain, E=E, nu=NU):
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    out = 2 * mu * strain
    out[..., :3] += lam * strain[..., :3].sum(-1, keepdims=True)
    return out


def _history(rng, steps, points):
    strain = np.zeros((steps + 1, points, 6))
    strain[1:] = np.cumsum(2e-4 * rng.normal(size=(steps, points, 6)), axis=0)
    time = np.tile(np.linspace(0.0, 1.0, steps + 1)[:, None], (1, points))
    return {"time": time, "strain": strain}


@pytest.fixture(scope="module")
def elastic():
    return modelc.load("elastic").Model(dtype=torch.float64, backend="torch")


def test_the_public_names_are_the_runtime_ones():
    assert distributed.__all__ == ["run_history", "RankFailed", "Context", "init", "device_for_rank"]
    for name in distributed.__all__:
        assert getattr(distributed, name) is getattr(runtime_distributed, name)
    assert issubclass(RankFailed, ModelcError)  # the command line prints it without a traceback


def test_outside_a_launch_one_process_on_its_device(monkeypatch):
    for world in (None, "1"):
        if world is None:
            monkeypatch.delenv("WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("WORLD_SIZE", world)
        ctx = init()
        assert isinstance(ctx, Context)
        assert (ctx.rank, ctx.world, ctx.store, ctx.owns_group) == (0, 1, None, False)
        assert ctx.device == device_for_rank()
    monkeypatch.setenv("LOCAL_RANK", "3")
    want = torch.device(f"cuda:{3 % torch.cuda.device_count()}") if torch.cuda.is_available() else \
        torch.device("cpu")
    assert device_for_rank() == want


def test_sharded_chunked_elastic_is_hookes_law(elastic, tmp_path):
    rng = np.random.default_rng()
    hist = _history(rng, steps=5, points=5)
    res = run_history(elastic, hist, tmp_path / "out", shards=2, chunk_steps=2, progress=False)
    np.testing.assert_allclose(res["stress"], _hooke(hist["strain"]), rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(res["time"], hist["time"])
    # shard i holds the work items [5 i / 2, 5 (i + 1) / 2): (0, 2) and (2, 5)
    assert res.plan.shards == ((0, 2), (2, 5)) and res.plan.complete and res.ok
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["complete"] and index["summary"] == "all 5 point(s) converged at all 5 step(s)"
    for i in (0, 1):
        chunks = sorted(p.name for p in (tmp_path / "out" / f"shard-{i:05d}").glob("rows-*.npz"))
        # row 0 travels with the first chunk; then 2 steps a chunk
        assert chunks == ["rows-000000000-000000003.npz", "rows-000000003-000000005.npz",
                          "rows-000000005-000000006.npz"]
    np.testing.assert_array_equal(load(tmp_path / "out")["stress"], res["stress"])  # a fresh read


def test_samples_scale_the_stress_with_E(elastic, tmp_path):
    rng = np.random.default_rng()
    hist = _history(rng, steps=3, points=2)
    Es = np.array([1e5, 2e5, 3e5])
    res = run_history(elastic, hist, tmp_path / "out", samples={"E": Es}, params={"nu": 0.25}, shards=4,
                      progress=False)
    assert res["stress"].shape == (4, 2, 3, 6)
    for s, e in enumerate(Es):
        np.testing.assert_allclose(res["stress"][:, :, s], _hooke(hist["strain"], e, 0.25), rtol=1e-12,
                                   atol=1e-9)
    np.testing.assert_array_equal(res["samples/E"], Es)
    assert res.plan.work == 6 and len(res.plan.shards) == 4


@pytest.mark.parametrize("samples, message", [
    ({"E": [1e5, np.nan]}, "samples 'E': expected a non-empty 1-D array of finite numbers, got shape (2,)"),
    ({"E": []}, "samples 'E': expected a non-empty 1-D array of finite numbers, got shape (0,)"),
    ({"E": [[1e5, 2e5]]}, "samples 'E': expected a non-empty 1-D array of finite numbers, got shape (1, 2)"),
])
def test_bad_samples_are_named(elastic, tmp_path, samples, message):
    hist = _history(np.random.default_rng(), steps=2, points=2)
    with pytest.raises(InputError) as info:
        run_history(elastic, hist, tmp_path / "out", samples=samples, progress=False)
    assert str(info.value) == message
    assert not (tmp_path / "out").exists()


def test_output_must_be_a_directory_of_its_own(elastic, tmp_path):
    hist = _history(np.random.default_rng(), steps=2, points=2)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="afile: exists and is not an empty directory"):
        run_history(elastic, hist, tmp_path / "afile", progress=False)
    assert (tmp_path / "afile").read_text() == "x"
