"""Strain-controlled histories: building the standard ones, validating and loading user ones.

A *history* drives a batch of material points through time. It is a mapping of arrays:

==========  ===================  ==========================================================
array       shape                content
==========  ===================  ==========================================================
time        (steps, batch)       time of each row (s); strictly increasing per point
strain      (steps, batch, 6)    total strain, Mandel (xx, yy, zz, s2*yz, s2*xz, s2*xy)
labels      (batch,) optional    a short text per point (used in tables and plot legends)
==========  ===================  ==========================================================

Row 0 is the initial state: zero strain (and zero stress and state, which the driver sets); it is
never evaluated. Any other array in a history file is ignored, so a reference result file (which holds
``time`` and ``strain`` next to its results) is a valid history too.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from modelc.errors import InputError

__all__ = [
    "History",
    "uniaxial_strain_history",
    "as_history",
    "load_history",
    "bundled_history",
    "bundled_history_path",
    "BUNDLED_HISTORIES",
]

#: The bundled histories: name -> how to rebuild it (``spec/histories/make_histories.py`` writes them).
BUNDLED_HISTORIES: dict[str, dict[str, Any]] = {
    # The reference README's batch: 4 amplitudes over 10 s, then A = 0.01 over 0.1 .. 1000 s.
    "uniaxial": dict(
        amplitudes=(0.005, 0.01, 0.015, 0.02, 0.01, 0.01, 0.01, 0.01),
        total_times=(10.0, 10.0, 10.0, 10.0, 0.1, 1.0, 100.0, 1000.0),
        steps=100,
    ),
}


@dataclass(frozen=True)
class History:
    """A validated strain-controlled history (float64 numpy arrays)."""

    time: np.ndarray  # (steps, batch)
    strain: np.ndarray  # (steps, batch, 6)
    labels: tuple[str, ...]  # one per point
    source: str = "history"

    @property
    def steps(self) -> int:
        """Number of rows, including the initial row 0."""
        return self.time.shape[0]

    @property
    def batch(self) -> int:
        return self.time.shape[1]

    def as_dict(self) -> dict[str, np.ndarray]:
        """The arrays, as they are written to a history file."""
        return {"time": self.time, "strain": self.strain, "labels": np.array(self.labels)}


def _fmt(x: float) -> str:
    return f"{x:g}"


def uniaxial_strain_history(amplitudes: Sequence[float] | np.ndarray,
                            total_times: Sequence[float] | np.ndarray | float,
                            steps: int = 100, *, component: int = 0) -> dict[str, np.ndarray]:
    """A triangle-wave uniaxial *strain* history, one point per amplitude.

    The strain component ``component`` (Mandel index, default xx) follows 0 -> +A (at a quarter of
    the steps) -> -A (three quarters) -> 0 (the end); all other components stay 0. Time is uniform:
    ``time[n] = (n / steps) * total_time``. With the reference README's amplitudes and times and
    ``steps=100`` this reproduces its ``time`` and ``strain`` arrays bit for bit.

    Returns ``{"time": (steps+1, batch), "strain": (steps+1, batch, 6), "amplitude": (batch,),
    "total_time": (batch,), "labels": (batch,)}``.
    """
    amp = np.atleast_1d(np.asarray(amplitudes, dtype=np.float64))
    if amp.ndim != 1 or amp.size == 0:
        raise InputError(f"amplitudes must be a non-empty 1-D sequence, got shape {amp.shape}")
    total = np.broadcast_to(np.asarray(total_times, dtype=np.float64), amp.shape).copy()
    if not (np.all(np.isfinite(amp)) and np.all(np.isfinite(total)) and np.all(total > 0)):
        raise InputError("amplitudes must be finite and total_times finite and > 0")
    if int(steps) != steps or steps < 1:
        raise InputError(f"steps must be a positive integer, got {steps!r}")
    if not 0 <= component < 6:
        raise InputError(f"component must be a Mandel index 0..5, got {component}")
    # Normalised time s in [0, 1]; the waveform is a function of s only, scaled by A afterwards
    # (this order of floating-point operations is the one that matches the reference files exactly).
    s = np.linspace(0.0, 1.0, int(steps) + 1)
    wave = np.interp(s, [0.0, 0.25, 0.75, 1.0], [0.0, 1.0, -1.0, 0.0])
    strain = np.zeros((s.size, amp.size, 6))
    strain[:, :, component] = wave[:, None] * amp
    time = s[:, None] * total
    labels = np.array([f"A={_fmt(a)}, T={_fmt(t)} s" for a, t in zip(amp, total)])
    return {"time": time, "strain": strain, "amplitude": amp, "total_time": total, "labels": labels}


def as_history(history: "Mapping[str, Any] | History | str | os.PathLike[str]") -> History:
    """Validate a history given as a mapping of arrays, a path to an ``.npz`` file, or a History.

    Raises :class:`~modelc.errors.InputError` naming the array and what is wrong with it.
    """
    if isinstance(history, History):
        return history
    if isinstance(history, (str, os.PathLike)):
        return load_history(history)
    if not isinstance(history, Mapping):
        raise InputError(f"a history is a mapping of arrays or a path to an .npz file, "
                         f"not {type(history).__name__}")
    return _validate(history, "history")


def load_history(path: "str | os.PathLike[str]") -> History:
    """Read and validate a history ``.npz`` file (see the module docstring for its arrays)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: history file not found")
    try:
        with np.load(p, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:  # numpy raises several types for a file that is not an npz
        raise InputError(f"{p}: cannot read as an .npz history file ({exc})") from None
    return _validate(arrays, str(p))


def _validate(arrays: Mapping[str, Any], source: str) -> History:
    missing = [k for k in ("time", "strain") if k not in arrays]
    if missing:
        have = ", ".join(sorted(arrays)) or "none"
        raise InputError(f"{source}: missing array(s) {', '.join(repr(m) for m in missing)} "
                         f"(a history needs 'time' (steps, batch) and 'strain' (steps, batch, 6); "
                         f"arrays present: {have})")
    time = _float_array(arrays["time"], "time", source)
    strain = _float_array(arrays["strain"], "strain", source)
    if time.ndim != 2:
        raise InputError(f"{source}: 'time' must have shape (steps, batch), got {time.shape}")
    if strain.ndim != 3 or strain.shape[2] != 6:
        raise InputError(f"{source}: 'strain' must have shape (steps, batch, 6) (Mandel), "
                         f"got {strain.shape}")
    if strain.shape[:2] != time.shape:
        raise InputError(f"{source}: 'strain' has (steps, batch) = {strain.shape[:2]} but 'time' has "
                         f"{time.shape}; they must agree")
    steps, batch = time.shape
    if steps < 2 or batch < 1:
        raise InputError(f"{source}: a history needs the initial row 0 and at least one step, and at "
                         f"least one point; got {steps} row(s) and {batch} point(s)")
    for name, a in (("time", time), ("strain", strain)):
        bad = ~np.isfinite(a)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InputError(f"{source}: '{name}' has {int(bad.sum())} non-finite value(s), "
                             f"the first at index {idx}")
    if np.any(strain[0] != 0.0):
        pts = np.flatnonzero(np.any(strain[0] != 0.0, axis=-1))
        raise InputError(f"{source}: the history must start from zero strain (row 0 is the "
                         f"unstressed initial state), but strain[0] is nonzero at point(s) "
                         f"{_list(pts)}")
    dt = np.diff(time, axis=0)
    if np.any(dt <= 0.0):
        n, b = (int(i) for i in np.argwhere(dt <= 0.0)[0])
        raise InputError(f"{source}: 'time' must increase strictly at every step; at point {b} it "
                         f"goes from {time[n, b]:g} (row {n}) to {time[n + 1, b]:g} (row {n + 1})")
    labels = _labels(arrays.get("labels"), batch, source)
    return History(time=time, strain=strain, labels=labels, source=source)


def _float_array(a: Any, name: str, source: str) -> np.ndarray:
    """``a`` as float64; only real numbers (integers, floats) are accepted: a complex array is
    never cut to its real part, and strings, booleans or objects are refused."""
    try:
        kind = np.asarray(a).dtype.kind
    except (TypeError, ValueError):
        raise InputError(f"{source}: '{name}' must be an array of numbers") from None
    if kind not in "iuf":
        what = {"c": "complex numbers", "b": "booleans", "U": "strings", "S": "bytes", "O": "Python objects",
                "M": "dates", "m": "time deltas", "V": "records"}.get(kind, f"values of kind {kind!r}")
        raise InputError(f"{source}: '{name}' must hold numbers (real ones), but it holds {what}")
    try:
        out = np.array(a, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{source}: '{name}' must hold numbers") from None
    return out


def _labels(a: Any, batch: int, source: str) -> tuple[str, ...]:
    if a is None:
        return tuple(f"point {i}" for i in range(batch))
    arr = np.asarray(a)
    if arr.shape != (batch,):
        raise InputError(f"{source}: 'labels' must have shape (batch,) = ({batch},), got {arr.shape}")
    return tuple(str(x) for x in arr.tolist())


def _list(idx: np.ndarray, limit: int = 8) -> str:
    items = [str(int(i)) for i in idx[:limit]]
    return ", ".join(items) + (f", ... ({len(idx)} in all)" if len(idx) > limit else "")


def bundled_history_path(name: str = "uniaxial") -> Path:
    """Path of a bundled history file (``spec/histories/<name>.npz``, package data of modelc.spec)."""
    if name not in BUNDLED_HISTORIES:
        raise InputError(f"no bundled history named {name!r}; bundled: {', '.join(BUNDLED_HISTORIES)}")
    return _spec_dir() / "histories" / f"{name}.npz"


def bundled_history(name: str = "uniaxial") -> History:
    """Load a bundled history, validated."""
    return load_history(bundled_history_path(name))


def _spec_dir() -> Path:
    """The folder of the bundled library (``modelc.spec``), installed or in a source checkout."""
    try:  # __path__ works for regular and namespace packages (files() may be a MultiplexedPath)
        return Path(next(iter(importlib.import_module("modelc.spec").__path__)))
    except (ModuleNotFoundError, StopIteration):  # a checkout where modelc.spec is not importable
        return Path(__file__).resolve().parents[1] / "spec"
