"""Histories read in chunks of steps: for runs whose history does not fit in memory.

:func:`open_history` opens a history without reading its arrays: an ``.npz`` file (as written by
``np.savez``; a member stored uncompressed is memory-mapped, a compressed one is streamed), a
directory holding ``time.npy`` and ``strain.npy`` (and optionally ``labels.npy``, the mixed
control's ``stress.npy`` and ``control.npy``, and ``temperature.npy``; memory-mapped), or an
in-memory mapping / :class:`~modelc.runtime.histories.History`. :meth:`HistorySource.chunk` returns
rows ``[r0, r1)`` of some points as a History, validated as :mod:`modelc.runtime.histories`
validates a whole history (finite values, zero strain at row 0, time increasing strictly, the
control mask and its stress targets, the temperature's shape). A chunk that starts after row 0
starts at the previous chunk's last row, so the check of the time increments crosses chunk
boundaries.
"""
from __future__ import annotations

import hashlib
import os
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from modelc.runtime.errors import InputError
from modelc.runtime.histories import History, as_history, check_shapes, validate

__all__ = ["HistorySource", "open_history"]


# ---------------------------------------------------------------------------------------------------
# One array of a file, read by rows without loading the rest


class _Array:
    """An ``.npy`` array (a file, or a member of an ``.npz``) read by leading-axis rows."""

    def __init__(self, path: Path, member: str | None, source: str, name: str):
        self.path, self.member, self.source, self.name = path, member, source, name
        self._stream = None  # a compressed member: an open ZipExtFile, read forward
        if member is None:
            with open(path, "rb") as f:
                self.shape, self.dtype, fortran = self._header(f)
            self._map = np.load(path, mmap_mode="r", allow_pickle=False)
            return
        with zipfile.ZipFile(path) as z:
            info = z.getinfo(member)
            with z.open(info) as f:
                self.shape, self.dtype, fortran = self._header(f)
                header_len = f.tell()
        if info.compress_type == zipfile.ZIP_STORED:
            with open(path, "rb") as f:  # the member's data starts after its local file header
                f.seek(info.header_offset)
                local = f.read(30)
                name_len, extra_len = struct.unpack("<HH", local[26:30])
            offset = info.header_offset + 30 + name_len + extra_len + header_len
            self._map = np.memmap(path, dtype=self.dtype, mode="r", offset=offset, shape=self.shape,
                                  order="F" if fortran else "C")
        elif fortran:  # rows of a Fortran-ordered compressed array are not contiguous: read it whole
            with np.load(path, allow_pickle=False) as data:
                self._map = data[member[:-4]]
        else:
            self._map = None
            self._offset = header_len
            self._row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def _header(self, f: Any) -> tuple[tuple[int, ...], np.dtype, bool]:
        try:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
        except ValueError as exc:
            raise InputError(f"{self.source}: '{self.name}' is not a readable .npy array ({exc})") from None
        if dtype.hasobject:
            raise InputError(f"{self.source}: '{self.name}' holds Python objects; save it as numbers")
        return tuple(shape), dtype, bool(fortran)

    def rows(self, r0: int, r1: int) -> np.ndarray:
        if self._map is not None:
            return np.asarray(self._map[r0:r1])
        z = zipfile.ZipFile(self.path)  # a compressed member: seek (forward is cheap) and read
        try:
            with z.open(self.member) as f:
                f.seek(self._offset + r0 * self._row_bytes)
                buf = f.read((r1 - r0) * self._row_bytes)
        finally:
            z.close()
        return np.frombuffer(buf, dtype=self.dtype).reshape((r1 - r0, *self.shape[1:]))

    def whole(self) -> np.ndarray:
        return self.rows(0, self.shape[0]) if self.shape else np.asarray(self._map)


# ---------------------------------------------------------------------------------------------------
# A history, opened


#: The arrays a history may hold besides time and strain, read with them chunk by chunk.
OPTIONAL = ("stress", "control", "temperature")


@dataclass(frozen=True)
class HistorySource:
    """An opened history: :attr:`steps` rows (row 0 included) by :attr:`batch` points."""

    source: str
    steps: int
    batch: int
    _time: Any  # _Array, or an in-memory array
    _strain: Any
    _labels: Any  # _Array, an array, or None
    _files: tuple[Path, ...]
    _more: Mapping[str, Any] = field(default_factory=dict)  # name in OPTIONAL -> _Array or array

    @property
    def optional(self) -> tuple[str, ...]:
        """Which of :data:`OPTIONAL` the history holds."""
        return tuple(self._more)

    def labels(self, points: slice) -> np.ndarray:
        """The labels of ``points`` (``"point i"`` when the history has none), as a str array."""
        idx = range(self.batch)[points]
        if self._labels is None:
            return np.array([f"point {i}" for i in idx])
        lab = self._labels if isinstance(self._labels, np.ndarray) else self._labels.whole()
        return np.array([str(x) for x in np.asarray(lab)[points].tolist()])

    def chunk(self, r0: int, r1: int, points: slice) -> History:
        """Rows ``[r0, r1)`` of ``points`` as a :class:`History` for the driver (row 0 of it being
        ``r0``, the last row of the previous chunk when ``r0 > 0``), validated; an error names the
        row and point of the whole history."""
        arrays = {"time": _rows(self._time, r0, r1)[:, points], "strain": _rows(self._strain, r0, r1)[:, points],
                  "labels": self.labels(points)}
        for name, a in self._more.items():
            if len(a.shape) == 3 or name != "control":  # by rows: (steps, batch, ...)
                arrays[name] = _rows(a, r0, r1)[:, points]
            else:  # a control mask per point (batch, 6) or for all (6,)
                whole = a if isinstance(a, np.ndarray) else a.whole()
                arrays[name] = whole[points] if len(a.shape) == 2 else whole
        return validate(arrays, self.source, r0, points.start or 0)

    def fingerprint(self) -> str:
        """A sha256 of the history's bytes (files streamed in 1 MiB blocks; arrays as stored)."""
        h = hashlib.sha256()
        if self._files:
            for p in self._files:
                with open(p, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
        else:
            for a in (self._time, self._strain, *self._more.values()):
                h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
            h.update(" ".join(self._more).encode())
            h.update("\n".join(self.labels(slice(None)).tolist()).encode())
        return h.hexdigest()


def _rows(a: Any, r0: int, r1: int) -> np.ndarray:
    return a.rows(r0, r1) if isinstance(a, _Array) else a[r0:r1]


def open_history(history: "Mapping[str, Any] | History | str | os.PathLike[str]") -> HistorySource:
    """Open a history (``.npz`` file, directory of ``.npy`` files, mapping or History) for reading in
    chunks; only the shapes are checked here, the values as each chunk is read."""
    if not isinstance(history, (str, os.PathLike)):
        h = as_history(history)  # small enough to be in memory: validated whole
        more = {k: getattr(h, k) for k in OPTIONAL if getattr(h, k) is not None}
        return HistorySource(h.source, h.steps, h.batch, h.time, h.strain, np.array(h.labels), (), more)
    p = Path(history)
    if p.is_dir():
        files = {k: p / f"{k}.npy" for k in ("time", "strain", "labels", *OPTIONAL)}
        for k in ("time", "strain"):
            if not files[k].is_file():
                raise InputError(f"{p}: a history directory needs time.npy and strain.npy; "
                                 f"{files[k].name} is missing")
        arrays = {k: _Array(f, None, str(p), k) for k, f in files.items() if f.is_file()}
        used = tuple(files[k] for k in arrays)
    elif p.is_file():
        try:
            with zipfile.ZipFile(p) as z:
                names = set(z.namelist())
        except (zipfile.BadZipFile, OSError) as exc:
            raise InputError(f"{p}: cannot read as an .npz history file ({exc})") from None
        missing = [k for k in ("time", "strain") if f"{k}.npy" not in names]
        if missing:
            raise InputError(f"{p}: missing array(s) {', '.join(repr(m) for m in missing)} (a history "
                             f"needs 'time' (steps, batch) and 'strain' (steps, batch, 6))")
        arrays = {k: _Array(p, f"{k}.npy", str(p), k) for k in ("time", "strain", "labels", *OPTIONAL)
                  if f"{k}.npy" in names}
        used = (p,)
    else:
        raise InputError(f"{p}: history file not found")
    time, strain = arrays["time"], arrays["strain"]
    for a in (time, strain):
        if a.dtype.kind not in "fiu":
            raise InputError(f"{p}: '{a.name}' must hold numbers, not {a.dtype}")
    steps, batch = check_shapes(time.shape, strain.shape, str(p))
    labels = arrays.get("labels")
    if labels is not None and labels.shape != (batch,):
        raise InputError(f"{p}: 'labels' must have shape (batch,) = ({batch},), got {labels.shape}")
    more = {k: arrays[k] for k in OPTIONAL if k in arrays}
    full = {"stress": ((steps, batch, 6),), "temperature": ((steps, batch),),
            "control": ((steps, batch, 6), (batch, 6), (6,))}
    for k, a in more.items():  # the shapes now; the values (and the control's rules) chunk by chunk
        if a.shape not in full[k]:
            raise InputError(f"{p}: '{k}' must have shape {' or '.join(map(str, full[k]))}, got {a.shape}")
    if ("stress" in more) != ("control" in more):
        raise InputError(f"{p}: 'stress' and 'control' come together (the control mask says which "
                         f"components the stress targets prescribe); this history has only "
                         f"'{'stress' if 'stress' in more else 'control'}'")
    return HistorySource(str(p), steps, batch, time, strain, labels, used, more)
