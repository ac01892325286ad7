"""Results of runs (runtime/results.py): the plan (``index.json``) and its round trip, shard and chunk
file naming, ``chunks_of`` (contiguous from row 0), ``save_npz``, and ``load`` of a single ``.npz``
file and of a results directory built here by hand: arrays assembled across shards and chunks (per
work item, per point with a point shared by two shards, samples, aliases, tangents), ``read`` of a
range of steps, failures merged from the shards into ``summary``, and the errors for incomplete,
damaged or foreign inputs.

Oracle: the full arrays are made first with values that encode (step, work item, component); the
directory is cut from them by hand, and what ``load`` assembles must equal the uncut arrays.
End-to-end runs (sharded == single process) are in tests/runtime/test_distributed.py."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from modelc.runtime.errors import InputError
from modelc.runtime.results import (FORMAT, INDEX, Plan, Results, chunk_path, chunks_of, load, save_npz,
                                    shard_dir)

STEPS, POINTS, SAMPLES = 5, 3, (1.0, 2.5)
WORK = POINTS * len(SAMPLES)          # work items (point, sample), point-major
SHARDS = ((0, 3), (3, 6))             # shard 0: points 0, 1; shard 1: points 1, 2 (point 1 shared)
CHUNKS = {0: [(0, 2), (2, 5)], 1: [(0, 3), (3, 5)]}
TANGENT_STEPS = (2, 4)
LABELS = np.array(["p0", "p1", "p2"])


def _full():
    """The uncut arrays; every value says where it belongs."""
    s, w, c = np.meshgrid(np.arange(STEPS), np.arange(WORK), np.arange(6), indexing="ij")
    stress = 1000.0 * s + 10.0 * w + c
    conv = np.ones((STEPS, WORK), dtype=bool)
    conv[3:, 4] = False                  # work item 4 = point 2, sample 0 fails from step 3
    conv[1:, 1] = False                  # work item 1 = point 0, sample 1 fails from step 1
    time = np.arange(STEPS)[:, None] + 0.1 * np.arange(POINTS)[None, :]
    sp, pp, cp = np.meshgrid(np.arange(STEPS), np.arange(POINTS), np.arange(6), indexing="ij")
    strain = -(100.0 * sp + pp + 0.01 * cp)
    tw, ti, tj = np.meshgrid(np.arange(WORK), np.arange(6), np.arange(6), indexing="ij")
    tangent = np.stack([k * 1e4 + tw * 100 + ti * 6 + tj for k in TANGENT_STEPS]).astype(np.float64)
    return {"stress": stress, "converged": conv, "time": time, "strain": strain, "tangent": tangent}


def _plan(complete=True):
    return Plan(model="m", dtype="float64", steps=STEPS, points=POINTS, history="h.npz", fingerprint="f",
                shards=SHARDS, chunk_steps=2, tangent_steps=TANGENT_STEPS, aliases={"state/S": "stress"},
                samples={"E": SAMPLES}, complete=complete)


def _write_dir(root, complete=True, shards_done=(0, 1)):
    full, plan = _full(), _plan(complete)
    (root / INDEX).parent.mkdir(parents=True, exist_ok=True)
    (root / INDEX).write_text(plan.to_json())
    for i in shards_done:
        a, b = SHARDS[i]
        pa, pb = plan.point_range(i)
        for lo, hi in CHUNKS[i]:
            t_rows = [k for k, t in enumerate(TANGENT_STEPS) if lo <= t < hi]
            arrays = {"stress": full["stress"][lo:hi, a:b], "converged": full["converged"][lo:hi, a:b],
                      "time": full["time"][lo:hi, pa:pb], "strain": full["strain"][lo:hi, pa:pb],
                      "tangent": full["tangent"][t_rows][:, a:b]}
            if lo == 0:
                arrays["labels"] = LABELS[pa:pb]
            save_npz(chunk_path(root, i, lo, hi), arrays)
        bad = [w for w in range(a, b) if not full["converged"][:, w].all()]
        save_npz(shard_dir(root, i) / "failed.npz",
                 {"work": np.array(bad, dtype=np.int64),
                  "step": np.array([np.argmin(full["converged"][:, w]) for w in bad], dtype=np.int64)})
        (shard_dir(root, i) / "shard.json").write_text("{}")
    return full


def _by_item(a):
    """(steps, work, ...) -> (steps, points, samples, ...), point-major."""
    return a.reshape(a.shape[0], POINTS, len(SAMPLES), *a.shape[2:])


def test_plan_round_trips_through_its_json_and_cuts_points_by_hand():
    plan = _plan()
    text = plan.to_json()
    assert json.loads(text)["format"] == FORMAT == "modelc-results/1"
    back = Plan.from_json(text, "x")
    assert back == plan and back.shards == SHARDS and back.samples == {"E": SAMPLES}
    assert plan.n_samples == 2 and plan.work == 6
    assert [plan.point_range(i) for i in (0, 1)] == [(0, 2), (1, 3)]
    p = Plan(model="m", dtype="float32", steps=3, points=4, history="h", fingerprint="f",
             shards=((0, 5), (5, 12)), chunk_steps=1, samples={"a": (1.0, 2.0, 3.0), "b": (0.0, 0.0, 1.0)})
    assert p.n_samples == 3 and p.work == 12
    assert [p.point_range(i) for i in (0, 1)] == [(0, 2), (1, 4)]  # items 0-4: points 0, 1; 5-11: 1-3
    q = Plan(model="m", dtype="float64", steps=3, points=4, history="h", fingerprint="f",
             shards=((0, 2), (2, 4)), chunk_steps=1)
    assert q.n_samples == 1 and q.work == 4 and q.point_range(1) == (2, 4)


@pytest.mark.parametrize("text,message", [
    ("not json", "not a modelc results index (Expecting value"),
    ("[1, 2]", "not a modelc results index (format 'modelc-results/1' expected)"),
    (json.dumps({"format": "modelc-results/2"}), "format 'modelc-results/1' expected"),
    (json.dumps({"format": FORMAT, "model": "m"}), "a malformed modelc results index"),
    (json.dumps({"format": FORMAT, "shards": [], "tangent_steps": [], "samples": {}, "model": "m"}),
     "a malformed modelc results index"),
])
def test_plan_from_bad_json_names_where(text, message):
    with pytest.raises(InputError) as info:
        Plan.from_json(text, "DIR/index.json")
    assert str(info.value).startswith("DIR/index.json: ") and message in str(info.value)


def test_file_names_and_chunks_of_contiguous_rows(tmp_path):
    assert shard_dir(tmp_path, 3) == tmp_path / "shard-00003"
    assert chunk_path(tmp_path, 3, 0, 51) == tmp_path / "shard-00003" / "rows-000000000-000000051.npz"
    assert chunks_of(tmp_path, 0) == []                  # no shard folder yet
    for lo, hi in ((51, 101), (0, 51), (150, 200)):      # written out of order; 101-150 missing
        save_npz(chunk_path(tmp_path, 0, lo, hi), {"x": np.zeros(1)})
    d = shard_dir(tmp_path, 0)
    (d / "rows-1-2.npz").write_bytes(b"")                # not the 9-digit pattern: ignored
    (d / ".rows-000000101-000000150.npz.7.tmp").write_bytes(b"")   # a writer's temporary: ignored
    got = chunks_of(tmp_path, 0)
    assert [(lo, hi) for lo, hi, _ in got] == [(0, 51), (51, 101)]   # stops at the gap
    assert got[1][2] == chunk_path(tmp_path, 0, 51, 101)


def test_save_npz_is_uncompressed_whole_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "s" / "a.npz"
    arrays = {"x": np.arange(12.0).reshape(3, 4), "ok": np.array([True, False]), "l": np.array(["a", "bc"])}
    save_npz(p, arrays)
    with np.load(p, allow_pickle=False) as f:
        assert sorted(f.files) == ["l", "ok", "x"]
        for k, v in arrays.items():
            assert f[k].dtype == v.dtype and np.array_equal(f[k], v)
    with zipfile.ZipFile(p) as z:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    assert [q.name for q in p.parent.iterdir()] == ["a.npz"]


def test_directory_arrays_equal_the_uncut_arrays(tmp_path):
    full = _write_dir(tmp_path)
    res = load(tmp_path)
    assert isinstance(res, Results) and res.plan == _plan()
    assert set(res) == {"stress", "converged", "time", "strain", "tangent", "labels", "tangent_steps", "samples/E"}
    assert len(res) == 8
    np.testing.assert_array_equal(res["stress"], _by_item(full["stress"]))
    assert res["stress"].shape == (STEPS, POINTS, 2, 6)
    assert res["state/S"] is res["stress"]                               # alias, assembled once
    np.testing.assert_array_equal(res["converged"], _by_item(full["converged"]))
    np.testing.assert_array_equal(res["time"], full["time"])             # per point: point 1 once
    np.testing.assert_array_equal(res["strain"], full["strain"])
    np.testing.assert_array_equal(res["labels"], LABELS)
    np.testing.assert_array_equal(res["tangent"], full["tangent"].reshape(2, POINTS, 2, 6, 6))
    np.testing.assert_array_equal(res["tangent_steps"], [2, 4])
    np.testing.assert_array_equal(res["samples/E"], [1.0, 2.5])
    with pytest.raises(KeyError):
        res["nope"]


def test_directory_read_of_a_range_of_steps(tmp_path):
    full = _write_dir(tmp_path)
    res = load(tmp_path)
    for steps in (slice(1, 4), slice(2, 3), slice(0, 5, 2), slice(1, None, 3), slice(-2, None), slice(3, 3)):
        rows = list(range(STEPS))[steps]
        np.testing.assert_array_equal(res.read("stress", steps), _by_item(full["stress"][rows]), str(steps))
        np.testing.assert_array_equal(res.read("state/S", steps), _by_item(full["stress"][rows]))
        np.testing.assert_array_equal(res.read("time", steps), full["time"][rows])
        np.testing.assert_array_equal(res.read("strain", steps), full["strain"][rows])
    assert res.read("stress", slice(3, 3)).shape == (0, POINTS, 2, 6)
    assert res.read("time", slice(4, 1)).shape == (0, POINTS)
    for key in ("tangent", "labels", "tangent_steps", "samples/E", "nope"):
        with pytest.raises(InputError, match=rf"^read\('{key}', steps=\.\.\.\): only arrays with a steps axis"):
            res.read(key, slice(0, 2))


def test_directory_read_with_a_negative_step(tmp_path):
    full = _write_dir(tmp_path)
    np.testing.assert_array_equal(load(tmp_path).read("stress", slice(None, None, -1)),
                                  _by_item(full["stress"][::-1]))


def test_directory_failures_are_merged_and_described(tmp_path):
    _write_dir(tmp_path)
    res = load(tmp_path)
    assert res.failed == {1: 1, 4: 3} and not res.ok
    assert res.describe(4) == "point 2 (p2), sample 0 (E=1)"
    assert res.describe(1) == "point 0 (p0), sample 1 (E=2.5)"
    assert res.summary() == ("2 of 6 runs (3 point(s) x 2 sample(s)) did not converge: point 0 (p0), sample 1 (E=2.5) from step 1; "
                             "point 2 (p2), sample 0 (E=1) from step 3")


def test_single_npz_file(tmp_path):
    conv = np.ones((4, 3), dtype=bool)
    conv[2:, 1] = False
    stress = np.arange(4 * 3 * 6, dtype=np.float64).reshape(4, 3, 6)
    p = tmp_path / "r.npz"
    np.savez(p, stress=stress, converged=conv, labels=np.array(["a", "b", "c"]),
             aliases=np.array(json.dumps({"state/S": "stress"})))
    res = load(p)
    assert res.plan is None and res.failed == {1: 2} and not res.ok
    np.testing.assert_array_equal(res["state/S"], stress)
    np.testing.assert_array_equal(res.read("stress", slice(1, 3)), stress[1:3])
    np.testing.assert_array_equal(res.read("stress", slice(None, None, -1)), stress[::-1])
    assert res.summary() == "1 of 3 point(s) did not converge: point 1 (b) from step 2"
    np.savez(p, converged=np.ones((6, 2), dtype=bool))                 # no labels, all converged
    res = load(p)
    assert res.ok and res.summary() == "all 2 point(s) converged at all 5 step(s)"
    assert res.describe(1) == "point 1"
    conv = np.ones((3, 13), dtype=bool)
    conv[1:, :] = False
    np.savez(p, converged=conv)                                         # 13 failures: 10 listed
    text = load(p).summary()
    assert text.startswith("13 of 13 point(s) did not converge: point 0 from step 1; point 1 from step 1")
    assert "point 9 from step 1; and 3 more" in text and "point 10 " not in text


def test_load_errors_for_incomplete_damaged_and_foreign_inputs(tmp_path):
    inc = tmp_path / "inc"
    _write_dir(inc, complete=False, shards_done=(1,))
    with pytest.raises(InputError, match=r"^.*inc: the run is not complete \(1 of 2 shard\(s\) done\); "
                                         r"finish it with `modelc run \.\.\. --distributed --resume`$"):
        load(inc)
    dmg = tmp_path / "dmg"
    _write_dir(dmg)
    chunk_path(dmg, 1, 3, 5).unlink()
    with pytest.raises(InputError, match=r"shard-00001: chunk files missing \(rows up to 3 of 5\); "
                                         r"the directory is damaged"):
        load(dmg)
    chunk_path(dmg, 1, 0, 3).unlink()
    with pytest.raises(InputError, match=r"rows up to 0 of 5"):
        load(dmg)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"this is not a zip file")
    with pytest.raises(InputError, match=r"junk\.npz: cannot read as an \.npz results file"):
        load(junk)
    bad_index = tmp_path / "bad"
    bad_index.mkdir()
    (bad_index / INDEX).write_text("{")
    with pytest.raises(InputError, match=r"index\.json: not a modelc results index"):
        load(bad_index)
