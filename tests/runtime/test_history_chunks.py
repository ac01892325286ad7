"""Histories read in chunks of steps (modelc.runtime.history_chunks), against numpy's whole-array load
and the validation of a whole history.

Every storage form (npz stored, npz compressed, a directory of .npy files, in memory) must return
exactly the rows and points asked for, memory-map what can be mapped, and locate bad values by
their row and point in the whole history (not in the chunk).
"""
from __future__ import annotations

import numpy as np
import pytest

from modelc.errors import InputError
from modelc.runtime.history_chunks import open_history
from modelc.runtime.histories import uniaxial_strain_history


def _hist(rng, steps=23, batch=7):
    h = uniaxial_strain_history(rng.uniform(0.001, 0.02, batch), rng.uniform(1.0, 3.0, batch), steps=steps)
    h["strain"][1:] += rng.normal(0.0, 1e-4, h["strain"][1:].shape)  # every component distinct
    return h


def _write(kind, h, tmp_path):
    if kind == "npz":
        np.savez(tmp_path / "h.npz", **h)
        return tmp_path / "h.npz"
    if kind == "npz_compressed":
        np.savez_compressed(tmp_path / "h.npz", **h)
        return tmp_path / "h.npz"
    if kind == "dir":
        d = tmp_path / "hdir"
        d.mkdir()
        for k in ("time", "strain", "labels"):
            np.save(d / f"{k}.npy", h[k])
        return d
    return h


@pytest.mark.parametrize("kind", ["npz", "npz_compressed", "dir", "memory"])
def test_chunks_equal_the_whole_arrays(kind, tmp_path):
    rng = np.random.default_rng()
    h = _hist(rng)
    src = open_history(_write(kind, h, tmp_path))
    assert (src.steps, src.batch) == (24, 7)
    for r0, r1, pts in [(0, 24, slice(None)), (0, 5, slice(2, 5)), (4, 9, slice(0, 7)), (20, 24, slice(6, 7)),
                        (9, 11, slice(3, 4)), (3, 17, slice(1, 6))]:  # out of order on purpose
        c = src.chunk(r0, r1, pts)
        t, e = c.time, c.strain
        np.testing.assert_array_equal(t, h["time"][r0:r1, pts])
        np.testing.assert_array_equal(e, h["strain"][r0:r1, pts])
        assert t.dtype == e.dtype == np.float64
    assert src.labels(slice(2, 4)).tolist() == h["labels"][2:4].tolist()
    if kind in ("npz", "dir"):  # stored uncompressed: mapped, not read whole
        assert isinstance(src._strain._map, np.memmap)


def test_fingerprint_follows_the_bytes(tmp_path):
    rng = np.random.default_rng()
    h = _hist(rng)
    a = open_history(_write("npz", h, tmp_path)).fingerprint()
    assert open_history(tmp_path / "h.npz").fingerprint() == a
    h["strain"][5, 1, 2] += 1e-12
    np.savez(tmp_path / "h.npz", **h)
    assert open_history(tmp_path / "h.npz").fingerprint() != a


@pytest.mark.parametrize("kind", ["npz", "npz_compressed", "dir"])
def test_bad_values_are_located_in_the_whole_history(kind, tmp_path):
    rng = np.random.default_rng()
    h = _hist(rng)
    h["strain"][15, 5, 3] = np.nan
    h["time"][19, 2] = h["time"][18, 2]  # not increasing, between rows 18 and 19
    src = open_history(_write(kind, h, tmp_path))
    src.chunk(0, 10, slice(None))  # the good part reads
    with pytest.raises(InputError, match=r"'strain' has 1 non-finite value\(s\), the first at index \(15, 5, 3\)"):
        src.chunk(10, 17, slice(4, 7))
    src.chunk(10, 17, slice(0, 4))  # other points of the same rows are fine
    with pytest.raises(InputError, match=r"at point 2 it goes from .* \(row 18\) to .* \(row 19\)"):
        src.chunk(18, 20, slice(1, 3))  # the chunk starting at the previous chunk's last row


def test_row_zero_must_be_unstrained(tmp_path):
    rng = np.random.default_rng()
    h = _hist(rng)
    h["strain"][0, 4, 0] = 1e-3
    src = open_history(_write("npz", h, tmp_path))
    with pytest.raises(InputError, match=r"strain\[0\] is nonzero at point\(s\) 4"):
        src.chunk(0, 3, slice(3, 6))


def test_bad_files_are_named(tmp_path):
    with pytest.raises(InputError, match="history file not found"):
        open_history(tmp_path / "nope.npz")
    (tmp_path / "junk.npz").write_text("junk")
    with pytest.raises(InputError, match="junk.npz: cannot read as an .npz history file"):
        open_history(tmp_path / "junk.npz")
    np.savez(tmp_path / "a.npz", time=np.zeros((3, 2)))
    with pytest.raises(InputError, match="missing array\\(s\\) 'strain'"):
        open_history(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", time=np.zeros((3, 2)), strain=np.zeros((3, 4, 6)))
    with pytest.raises(InputError, match=r"'strain' has \(steps, batch\) = \(3, 4\) but 'time' has \(3, 2\)"):
        open_history(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", time=np.zeros((3, 2)), strain=np.zeros((3, 2, 6)), labels=np.array(["a"]))
    with pytest.raises(InputError, match=r"'labels' must have shape \(batch,\)"):
        open_history(tmp_path / "c.npz")
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "time.npy", np.zeros((3, 2)))
    with pytest.raises(InputError, match="needs time.npy and strain.npy; strain.npy is missing"):
        open_history(tmp_path / "d")


def _mixed(rng, steps=23, batch=7, control_shape=(6,)):
    """A history with every optional array: stress targets under a control mask of the given shape
    (per step and point, per point, or one for all) and a temperature."""
    h = _hist(rng, steps, batch)
    h["stress"] = np.zeros(h["strain"].shape)
    h["stress"][1:, :, 1:] = rng.normal(0.0, 10.0, (steps, batch, 5))
    mask = np.array([0, 1, 1, 1, 1, 1], bool)
    h["control"] = np.broadcast_to(mask, control_shape).copy()
    if len(control_shape) == 3:
        h["control"][: steps // 2] = False  # strain-controlled first, then mixed
    h["temperature"] = 293.0 + rng.uniform(0.0, 500.0, h["time"].shape)
    return h


def _write_all(kind, h, tmp_path):
    if kind == "dir":
        d = tmp_path / "hdir"
        d.mkdir()
        for k, v in h.items():
            if k in ("time", "strain", "labels", "stress", "control", "temperature"):
                np.save(d / f"{k}.npy", v)
        return d
    return _write(kind, h, tmp_path)


@pytest.mark.parametrize("control_shape", [(6,), (7, 6), (24, 7, 6)])
@pytest.mark.parametrize("kind", ["npz", "npz_compressed", "dir", "memory"])
def test_stress_control_and_temperature_come_with_each_chunk(kind, control_shape, tmp_path):
    """The mixed control's stress targets and mask and the temperature are read with the rows and
    points of each chunk, exactly as validating the whole history gives them (a chunk whose rows
    control no component has no mask, as a whole history without one)."""
    from modelc.runtime.histories import as_history

    rng = np.random.default_rng()
    h = _mixed(rng, control_shape=control_shape)
    whole = as_history(h)
    src = open_history(_write_all(kind, h, tmp_path))
    assert src.optional == ("stress", "control", "temperature")
    for r0, r1, pts in [(0, 24, slice(None)), (4, 9, slice(2, 6)), (11, 13, slice(0, 7)), (20, 24, slice(6, 7))]:
        c = src.chunk(r0, r1, pts)
        np.testing.assert_array_equal(c.temperature, h["temperature"][r0:r1, pts])
        np.testing.assert_array_equal(c.strain, whole.strain[r0:r1, pts])
        if not whole.control[r0:r1, pts].any():
            assert c.control is None and c.stress is None
            continue
        np.testing.assert_array_equal(c.control, whole.control[r0:r1, pts])
        np.testing.assert_array_equal(c.stress, whole.stress[r0:r1, pts])


def test_optional_arrays_of_bad_shape_or_alone_are_named(tmp_path):
    rng = np.random.default_rng()
    h = _mixed(rng)
    for name, bad, message in [("temperature", np.zeros((24, 6)), r"'temperature' must have shape \(24, 7\), got \(24, 6\)"),
                               ("stress", np.zeros((24, 7, 3)), r"'stress' must have shape \(24, 7, 6\)"),
                               ("control", np.ones((7, 5), bool), r"'control' must have shape \(24, 7, 6\) or \(7, 6\) or "
                                                                  r"\(6,\), got \(7, 5\)")]:
        np.savez(tmp_path / "h.npz", **{**h, name: bad})
        with pytest.raises(InputError, match=message):
            open_history(tmp_path / "h.npz")
    np.savez(tmp_path / "h.npz", **{k: v for k, v in h.items() if k != "control"})
    with pytest.raises(InputError, match="'stress' and 'control' come together"):
        open_history(tmp_path / "h.npz")
    h["temperature"][7, 3] = np.inf  # a bad value is located in the whole history, chunk by chunk
    np.savez(tmp_path / "h.npz", **h)
    src = open_history(tmp_path / "h.npz")
    src.chunk(0, 7, slice(None))
    with pytest.raises(InputError, match=r"'temperature' has 1 non-finite value\(s\), the first at index \(7, 3\)"):
        src.chunk(6, 9, slice(2, 5))
