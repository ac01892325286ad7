"""Histories read in chunks of steps (modelc.runtime.history_chunks), against numpy's whole-array load.

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
                        (9, 10, slice(3, 4)), (3, 17, slice(1, 6))]:  # out of order on purpose
        t, e = src.read(r0, r1, pts)
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
    src.read(0, 10, slice(None))  # the good part reads
    with pytest.raises(InputError, match=r"'strain' has 1 non-finite value\(s\), the first at index \(15, 5, 3\)"):
        src.read(10, 17, slice(4, 7))
    src.read(10, 17, slice(0, 4))  # other points of the same rows are fine
    with pytest.raises(InputError, match=r"at point 2 it goes from .* \(row 18\) to .* \(row 19\)"):
        src.read(18, 20, slice(1, 3))  # the chunk starting at the previous chunk's last row


def test_row_zero_must_be_unstrained(tmp_path):
    rng = np.random.default_rng()
    h = _hist(rng)
    h["strain"][0, 4, 0] = 1e-3
    src = open_history(_write("npz", h, tmp_path))
    with pytest.raises(InputError, match=r"strain\[0\] is nonzero at point\(s\) 4"):
        src.read(0, 3, slice(3, 6))


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


def test_a_temperature_history_is_refused_not_dropped(tmp_path):
    """Chunked and distributed runs read time and strain only: a history with a 'temperature' array is
    refused (in memory, as an .npz file and as a directory), never run without it."""
    from modelc.runtime.errors import InputError as RuntimeInputError  # (what the runtime raises)

    h = uniaxial_strain_history([0.01, 0.02], 1.0, steps=4)
    h["temperature"] = np.full(h["time"].shape, 300.0)
    np.savez(tmp_path / "h.npz", **h)
    d = tmp_path / "dir"
    d.mkdir()
    for k in ("time", "strain", "temperature"):
        np.save(d / f"{k}.npy", h[k])
    for source in (h, tmp_path / "h.npz", d):
        with pytest.raises(RuntimeInputError, match="chunked and distributed runs do not carry it yet"):
            open_history(source)
