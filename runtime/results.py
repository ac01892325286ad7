"""Results of runs: one ``.npz`` file (a single process) or a directory of shards with an index.

A distributed run (:mod:`modelc.runtime.distributed`) never gathers its results into one process:
each shard (a contiguous range of the run's *work items*: points, or point-sample pairs) is written
by the rank that computed it, chunk by chunk of steps::

    DIR/index.json                      the plan: model, history, shards, chunking, aliases, samples
    DIR/shard-00003/rows-000000000-000000051.npz   rows [0, 51) of the shard's arrays
    DIR/shard-00003/rows-000000051-000000101.npz   rows [51, 101)
    DIR/shard-00003/failed.npz          the shard's failed work items and steps
    DIR/shard-00003/shard.json          written last: the shard is complete

:func:`load` reads either form and returns :class:`Results`, a mapping with the arrays a
single-process ``modelc run`` writes (``stress``, ``state/...``, ``converged``, ...), assembled on
first access of each key; :meth:`Results.read` reads a range of steps only (the chunks that hold it).
With parameter samples the work items are ``(point, sample)`` pairs, point-major; per-item arrays
are shaped ``(steps, points, samples, ...)`` and ``samples/<name>`` holds each sample's value
(``time``, ``strain``, ``temperature``, ``control`` and ``labels`` are per point; ``strain`` is per
work item when the history has stress control, each sample solving its own).
"""
from __future__ import annotations

import io
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from modelc.runtime.errors import InputError
from modelc.runtime.paths import write_atomic_bytes

__all__ = ["Plan", "Results", "load", "open_dir", "shard_dir", "INDEX", "FORMAT"]

INDEX = "index.json"
FORMAT = "modelc-results/1"
#: Arrays indexed by point (not by work item) and where their point axis is.
POINT_ARRAYS = {"time": 1, "strain": 1, "labels": 0, "temperature": 1, "control": 1}
_CHUNK = re.compile(r"rows-(\d{9})-(\d{9})\.npz$")


# ---------------------------------------------------------------------------------------------------
# The plan (index.json)


@dataclass(frozen=True)
class Plan:
    """What a distributed run computes and how it is cut; stored as ``DIR/index.json``."""

    model: str
    dtype: str
    steps: int  # history rows, row 0 included
    points: int
    history: str  # where the history came from
    fingerprint: str  # of the history, the parameters and the samples (resume checks it)
    shards: tuple[tuple[int, int], ...]  # work-item ranges
    chunk_steps: int
    tangent_steps: tuple[int, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # samples over a stress-controlled history: each work item solves its own strain, which is then
    # stored per work item (steps, points, samples, 6), not per point
    strain_per_item: bool = False
    complete: bool = False
    summary: str = ""

    @property
    def n_samples(self) -> int:
        return len(next(iter(self.samples.values()))) if self.samples else 1

    @property
    def work(self) -> int:
        return self.points * self.n_samples

    def point_range(self, shard: int) -> tuple[int, int]:
        """The points a shard's work items touch (a range; shared with a neighbour at the ends)."""
        a, b = self.shards[shard]
        s = self.n_samples
        return a // s, -(-b // s)

    def to_json(self) -> str:
        d = asdict(self)
        d = {"format": FORMAT, **d}
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str, where: str) -> "Plan":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not a modelc results index ({exc})") from None
        if not isinstance(d, dict) or d.pop("format", None) != FORMAT:
            raise InputError(f"{where}: not a modelc results index (format {FORMAT!r} expected)")
        try:
            d["shards"] = tuple(tuple(s) for s in d["shards"])
            d["tangent_steps"] = tuple(d["tangent_steps"])
            d["samples"] = {k: tuple(v) for k, v in d["samples"].items()}
            return cls(**d)
        except (KeyError, TypeError) as exc:
            raise InputError(f"{where}: a malformed modelc results index ({exc})") from None


def shard_dir(root: "str | os.PathLike[str]", shard: int) -> Path:
    return Path(root) / f"shard-{shard:05d}"


def chunk_path(root: "str | os.PathLike[str]", shard: int, lo: int, hi: int) -> Path:
    """The file of rows ``[lo, hi)`` of a shard."""
    return shard_dir(root, shard) / f"rows-{lo:09d}-{hi:09d}.npz"


def chunks_of(root: "str | os.PathLike[str]", shard: int) -> list[tuple[int, int, Path]]:
    """A shard's chunk files on disk as ``(lo, hi, path)``, in row order, contiguous from row 0."""
    d = shard_dir(root, shard)
    found = sorted((int(m.group(1)), int(m.group(2)), p) for p in d.glob("rows-*.npz")
                   if (m := _CHUNK.match(p.name)))
    out, row = [], 0
    for lo, hi, p in found:
        if lo != row:
            break  # a gap (never written that way; ignore what follows it)
        out.append((lo, hi, p))
        row = hi
    return out


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path``, whole or not at all (:func:`modelc.runtime.paths.write_atomic_bytes`)."""
    write_atomic_bytes(path, data)


def save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Uncompressed ``.npz``, written atomically (a chunk file is either whole or absent)."""
    buf = io.BytesIO()
    np.savez(buf, **dict(arrays))
    write_atomic(path, buf.getvalue())


# ---------------------------------------------------------------------------------------------------
# Reading


def load(path: "str | os.PathLike[str]") -> "Results":
    """The results of a run: a single-process ``.npz`` file or a distributed run's directory."""
    p = Path(path)
    if p.is_dir():
        idx = p / INDEX
        if not idx.is_file():
            raise InputError(f"{p}: not a modelc results directory (no {INDEX})")
        plan = Plan.from_json(idx.read_text(), str(idx))
        if not plan.complete:
            done = sum((shard_dir(p, i) / "shard.json").is_file() for i in range(len(plan.shards)))
            raise InputError(f"{p}: the run is not complete ({done} of {len(plan.shards)} shard(s) "
                             f"done); finish it with `modelc run ... --distributed --resume`")
        return open_dir(p, plan)
    if not p.is_file():
        raise InputError(f"{p}: no such results file or directory")
    from modelc.runtime.driver import load_results

    try:
        arrays = load_results(p)  # each array once, its aliases resolved
    except InputError:
        raise
    except Exception as exc:  # numpy raises several types for a file that is not an npz
        raise InputError(f"{p}: cannot read as an .npz results file ({exc})") from None
    if "converged" not in arrays:
        raise InputError(f"{p}: not a modelc results file (no 'converged' array)")
    return Results(arrays, dict(arrays.failed), None)


class Results(Mapping):
    """Arrays of a run by name (lazily assembled for a directory), plus :attr:`failed` (work item ->
    first failed step), :attr:`ok`, :meth:`summary` and, for a directory, :attr:`plan`."""

    def __init__(self, arrays: Mapping[str, np.ndarray], failed: dict[int, int], plan: Plan | None):
        self._arrays, self.failed, self.plan = arrays, failed, plan

    def __getitem__(self, key: str) -> np.ndarray:
        return self._arrays[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    @property
    def ok(self) -> bool:
        return not self.failed

    def read(self, name: str, steps: slice) -> np.ndarray:
        """Rows ``steps`` of array ``name`` (one with a steps axis), reading only the chunks that hold
        them (a single ``.npz`` is read whole)."""
        if isinstance(self._arrays, _ShardedArrays):
            return self._arrays.read(name, steps)
        return self._arrays[name][steps]

    def summary(self) -> str:
        steps = self.plan.steps - 1 if self.plan else self["converged"].shape[0] - 1
        work = self.plan.work if self.plan else self["converged"].shape[1]
        if self.plan is not None and self.plan.samples:  # a run per (point, sample)
            n = self.plan.n_samples
            what = f"{work} runs ({work // n} point(s) x {n} sample(s))"
        else:
            what = f"{work} point(s)"
        if not self.failed:
            return f"all {what} converged at all {steps} step(s)"
        parts = [f"{self.describe(w)} from step {s}" for w, s in sorted(self.failed.items())[:10]]
        more = f"; and {len(self.failed) - 10} more" if len(self.failed) > 10 else ""
        return f"{len(self.failed)} of {what} did not converge: " + "; ".join(parts) + more

    def describe(self, work: int) -> str:
        """``point 3 (label)`` or, with samples, ``point 3 (label), sample 1 (E=2e5)``."""
        if self.plan is None or not self.plan.samples:
            return f"point {work} ({self['labels'][work]})" if "labels" in self else f"point {work}"
        p, s = divmod(work, self.plan.n_samples)
        vals = ", ".join(f"{k}={v[s]:g}" for k, v in self.plan.samples.items())
        return f"point {p} ({self['labels'][p]}), sample {s} ({vals})"


def open_dir(root: Path, plan: Plan) -> Results:
    """The results in ``root`` under ``plan`` (every shard written; the index need not say so)."""
    return Results(_ShardedArrays(root, plan), _failed_of_shards(root, plan), plan)


def _failed_of_shards(root: Path, plan: Plan) -> dict[int, int]:
    failed: dict[int, int] = {}
    for i in range(len(plan.shards)):
        with np.load(shard_dir(root, i) / "failed.npz") as f:
            failed.update(zip(f["work"].tolist(), f["step"].tolist()))
    return failed


class _ShardedArrays(Mapping):
    """The arrays of a results directory, each assembled from the shards' chunks on first access."""

    def __init__(self, root: Path, plan: Plan):
        self.root, self.plan = root, plan
        self._chunks = [chunks_of(root, i) for i in range(len(plan.shards))]
        for i, ch in enumerate(self._chunks):
            if not ch or ch[-1][1] != plan.steps:
                raise InputError(f"{shard_dir(root, i)}: chunk files missing (rows up to "
                                 f"{ch[-1][1] if ch else 0} of {plan.steps}); the directory is damaged")
        with np.load(self._chunks[0][0][2]) as f:
            stored = list(f.files)
        self._keys = list(stored)  # variable names resolve through plan.aliases, as in RunResult
        if plan.tangent_steps:
            self._keys.append("tangent_steps")
        self._keys += [f"samples/{k}" for k in plan.samples]
        self._cache: dict[str, np.ndarray] = {}

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, key: str) -> np.ndarray:
        key = self.plan.aliases.get(key, key)
        if key not in self._keys:
            raise KeyError(key)
        if key not in self._cache:
            self._cache[key] = self._assemble(key)
        return self._cache[key]

    def _assemble(self, key: str) -> np.ndarray:
        plan = self.plan
        if key == "labels":
            return self.labels()
        if key == "tangent_steps":
            return np.array(plan.tangent_steps, dtype=np.int64)
        if key.startswith("samples/"):
            return np.array(plan.samples[key[len("samples/"):]], dtype=np.float64)
        key = plan.aliases.get(key, key)
        if key == "tangent":  # (k, work, 6, 6): the chunks that hold tangent steps
            return self._work_shape(np.concatenate(
                [np.concatenate([self._get(p, key) for _, _, p in ch], axis=0) for ch in self._chunks],
                axis=1), 1)
        return self.read(key, slice(None))

    def read(self, key: str, steps: slice) -> np.ndarray:
        key = self.plan.aliases.get(key, key)
        rows = range(self.plan.steps)[steps]
        if key not in self._keys or key in ("tangent", "tangent_steps", "labels") or \
                key.startswith("samples/"):
            raise InputError(f"read({key!r}, steps=...): only arrays with a steps axis are read by "
                             f"steps; index the results for {key!r}")
        if rows.step != 1:  # the rows it covers, in order, then those asked for (a negative step too)
            if not len(rows):
                return self.read(key, slice(0, 0))
            lo = min(rows[0], rows[-1])
            return self.read(key, slice(lo, max(rows[0], rows[-1]) + 1))[[r - lo for r in rows]]
        lo, hi = rows.start, rows.stop
        point_axis = None if key == "strain" and self.plan.strain_per_item else POINT_ARRAYS.get(key)
        parts, taken = [], 0
        for i, ch in enumerate(self._chunks):
            pieces = [self._get(p, key)[max(lo, a) - a:min(hi, b) - a] for a, b, p in ch if a < hi and b > lo]
            block = np.concatenate(pieces, axis=0) if pieces else None
            if point_axis is not None:  # per-point arrays: neighbouring shards may share a point
                pa, pb = self.plan.point_range(i)
                if pb <= taken:
                    continue
                block = block[:, taken - pa:] if block is not None else None
                taken = pb
            parts.append(block)
        if lo >= hi:
            with np.load(self._chunks[0][0][2]) as f:
                tail = f[key].shape[2:]
                dtype = f[key].dtype
            width = self.plan.points if point_axis is not None else self.plan.work
            out = np.zeros((0, width, *tail), dtype=dtype)
        else:
            out = np.concatenate(parts, axis=1)
        return out if point_axis is not None else self._work_shape(out, 1)

    def _work_shape(self, a: np.ndarray, axis: int) -> np.ndarray:
        if not self.plan.samples:
            return a
        return a.reshape(*a.shape[:axis], self.plan.points, self.plan.n_samples, *a.shape[axis + 1:])

    @staticmethod
    def _get(path: Path, key: str) -> np.ndarray:
        with np.load(path, allow_pickle=False) as f:
            return f[key]

    def labels(self) -> np.ndarray:
        out, taken = [], 0
        for i, ch in enumerate(self._chunks):
            pa, pb = self.plan.point_range(i)
            if pb > taken:
                out.append(self._get(ch[0][2], "labels")[taken - pa:])
                taken = pb
        return np.concatenate(out)
