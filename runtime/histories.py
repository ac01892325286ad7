"""Loading histories: building the standard ones, validating and loading user ones.

A *history* drives a batch of material points through time. It is a mapping of arrays:

==========  ============================  ======================================================
array       shape                         content
==========  ============================  ======================================================
time        (steps, batch)                time of each row (s); strictly increasing per point
strain      (steps, batch, 6)             total strain, Mandel (xx, yy, zz, s2*yz, s2*xz, s2*xy);
                                          optional when every component is stress-controlled
stress      (steps, batch, 6) optional    stress targets, Mandel, where ``control`` is True
control     (steps, batch, 6), (batch,    True where a component is stress-controlled (the driver
            6) or (6,), bool, optional    solves for that strain component), False where the
                                          strain is prescribed; missing: all strain-controlled
temperature (steps, batch) optional         the temperature of each row (K), for a model that reads
                                          ``forces/T`` (and ``old_forces/T``, the previous row's)
labels      (batch,) optional             a short text per point (used in tables and plot legends)
==========  ============================  ======================================================

Mixed control is what MTest and NEML2's drivers call a ``control`` mask: uniaxial stress is
``control = (0, 1, 1, 1, 1, 1)`` (xx strain prescribed, the other stresses held at zero) or all ones
(every stress prescribed). Where a component is stress-controlled its ``strain`` entry is ignored;
where it is strain-controlled its ``stress`` entry is ignored.

Row 0 is the initial state: zero strain, stress and state (the driver sets them); it is never
evaluated, so the prescribed values of row 0 must be zero. Any other array in a history file is
ignored, so a reference result file (which holds ``time`` and ``strain`` next to its results) is a
valid history too.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from modelc.runtime.errors import InputError

__all__ = [
    "History",
    "uniaxial_strain_history",
    "uniaxial_stress_history",
    "as_history",
    "load_history",
    "check_shapes",
    "check_values",
    "validate",
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
    """A validated history (float64 numpy arrays; ``control`` bool)."""

    time: np.ndarray  # (steps, batch)
    strain: np.ndarray  # (steps, batch, 6); zero where stress-controlled
    labels: tuple[str, ...]  # one per point
    source: str = "history"
    stress: np.ndarray | None = None  # (steps, batch, 6) targets; None: no stress control
    control: np.ndarray | None = None  # (steps, batch, 6) bool, True = stress-controlled
    temperature: np.ndarray | None = None  # (steps, batch): forces/T of each row; None: not given

    @property
    def mixed(self) -> bool:
        """Whether any component of any step is stress-controlled."""
        return self.control is not None and bool(self.control.any())

    @property
    def steps(self) -> int:
        """Number of rows, including the initial row 0."""
        return self.time.shape[0]

    @property
    def batch(self) -> int:
        return self.time.shape[1]

    def take(self, points: np.ndarray) -> "History":
        """The history of these points (indices into the batch, repeats allowed), in that order."""
        pick = lambda a: None if a is None else a[:, points]  # noqa: E731
        return History(time=self.time[:, points], strain=self.strain[:, points],
                       labels=tuple(np.array(self.labels)[points].tolist()), source=self.source,
                       stress=pick(self.stress), control=pick(self.control), temperature=pick(self.temperature))

    def as_dict(self) -> dict[str, np.ndarray]:
        """The arrays, as they are written to a history file."""
        out = {"time": self.time, "strain": self.strain, "labels": np.array(self.labels)}
        if self.control is not None:
            out.update(stress=self.stress, control=self.control)
        if self.temperature is not None:
            out["temperature"] = self.temperature
        return out


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


def uniaxial_stress_history(amplitudes: Sequence[float] | np.ndarray,
                            total_times: Sequence[float] | np.ndarray | float,
                            steps: int = 100, *, cycles: int = 1,
                            controlled: str = "strain") -> dict[str, np.ndarray]:
    """A cyclic *uniaxial stress* history, one point per amplitude: the xx component follows
    ``cycles`` triangle waves 0 -> +A -> -A -> 0 (``steps`` steps per cycle) while the other five
    stress components are held at zero (the lateral strains are solved for).

    ``controlled="strain"``: A is an xx strain amplitude (the xx strain is prescribed, as in a
    strain-controlled tension-compression test); ``"stress"``: A is an xx stress amplitude (every
    component stress-controlled). Returns ``time``, ``strain``, ``stress``, ``control``,
    ``amplitude``, ``total_time`` and ``labels`` (``total_time`` is the time of one cycle)."""
    if controlled not in ("strain", "stress"):
        raise InputError(f"controlled must be 'strain' or 'stress', got {controlled!r}")
    if int(cycles) != cycles or cycles < 1:
        raise InputError(f"cycles must be a positive integer, got {cycles!r}")
    one = uniaxial_strain_history(amplitudes, total_times, steps)
    amp, total = one["amplitude"], one["total_time"]
    wave = one["strain"][:, :, 0]
    rows = [wave] + [wave[1:]] * (int(cycles) - 1)
    axial = np.concatenate(rows, axis=0)
    n = axial.shape[0]
    time = np.linspace(0.0, float(cycles), n)[:, None] * total
    strain, stress = np.zeros((n, amp.size, 6)), np.zeros((n, amp.size, 6))
    control = np.ones(6, dtype=bool)
    if controlled == "strain":
        strain[:, :, 0] = axial
        control[0] = False
    else:
        stress[:, :, 0] = axial
    kind = "strain" if controlled == "strain" else "stress"
    labels = np.array([f"{kind} A={_fmt(a)}, T={_fmt(t)} s" for a, t in zip(amp, total)])
    return {"time": time, "strain": strain, "stress": stress, "control": control,
            "amplitude": amp, "total_time": total, "labels": labels}


def as_history(history: "Mapping[str, Any] | History | str | os.PathLike[str]") -> History:
    """Validate a history given as a mapping of arrays, a path to an ``.npz`` file, or a History.

    Raises :class:`~modelc.runtime.errors.InputError` naming the array and what is wrong with it.
    """
    if isinstance(history, History):
        return history
    if isinstance(history, (str, os.PathLike)):
        return load_history(history)
    if not isinstance(history, Mapping):
        raise InputError(f"a history is a mapping of arrays or a path to an .npz file, "
                         f"not {type(history).__name__}")
    return validate(history, "history")


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
    return validate(arrays, str(p))


def validate(arrays: Mapping[str, Any], source: str, row0: int = 0, point0: int = 0) -> History:
    """A :class:`History` from a mapping of arrays, every rule of the module docstring checked; for a
    chunk of a longer history (:mod:`modelc.runtime.history_chunks`), ``row0`` and ``point0`` say where
    it starts, so an error names the row and point of the whole history (and row 0 is checked for
    zero strain only when the chunk starts there)."""
    if "stress" in arrays and "control" not in arrays and "strain" not in arrays:
        raise InputError(f"{source}: 'stress' is given without a 'control' mask saying which "
                         f"components it prescribes (True = stress-controlled)")
    all_stress = "control" in arrays and "stress" in arrays and bool(np.all(arrays["control"]))
    missing = [k for k in ("time", "strain") if k not in arrays and not (k == "strain" and all_stress)]
    if missing:
        have = ", ".join(sorted(arrays)) or "none"
        raise InputError(f"{source}: missing array(s) {', '.join(repr(m) for m in missing)} "
                         f"(a history needs 'time' (steps, batch) and 'strain' (steps, batch, 6); "
                         f"arrays present: {have})")
    time = _float_array(arrays["time"], "time", source)
    if "strain" not in arrays:
        stress0 = np.asarray(arrays["stress"])
        arrays = {**arrays, "strain": np.zeros(stress0.shape if stress0.ndim == 3 else time.shape + (6,))}
    strain = _float_array(arrays["strain"], "strain", source)
    steps, batch = check_shapes(time.shape, strain.shape, source)
    control, stress = _control(arrays, time.shape, source)
    if control is not None:  # the strain of stress-controlled components is not used
        strain = np.where(control, 0.0, strain)
    temperature = None
    if "temperature" in arrays:
        temperature = _float_array(arrays["temperature"], "temperature", source)
        if temperature.shape != time.shape:
            raise InputError(f"{source}: 'temperature' must have shape (steps, batch) = {time.shape}, got "
                             f"{temperature.shape}")
    check_values(time, strain, source, row0, point0, stress=stress, temperature=temperature)
    labels = _labels(arrays.get("labels"), batch, source)
    return History(time=time, strain=strain, labels=labels, source=source, stress=stress, control=control,
                   temperature=temperature)


def check_shapes(time: tuple[int, ...], strain: tuple[int, ...], source: str) -> tuple[int, int]:
    """``(steps, batch)`` from the shapes of ``time`` and ``strain``, or an InputError."""
    if len(time) != 2:
        raise InputError(f"{source}: 'time' must have shape (steps, batch), got {time}")
    if len(strain) != 3 or strain[2] != 6:
        raise InputError(f"{source}: 'strain' must have shape (steps, batch, 6) (Mandel), got {strain}")
    if tuple(strain[:2]) != tuple(time):
        raise InputError(f"{source}: 'strain' has (steps, batch) = {tuple(strain[:2])} but 'time' has "
                         f"{time}; they must agree")
    steps, batch = time
    if steps < 2 or batch < 1:
        raise InputError(f"{source}: a history needs the initial row 0 and at least one step, and at "
                         f"least one point; got {steps} row(s) and {batch} point(s)")
    return steps, batch


def check_values(time: np.ndarray, strain: np.ndarray, source: str, row0: int = 0, point0: int = 0,
                 stress: np.ndarray | None = None, temperature: np.ndarray | None = None) -> None:
    """Finite values, zero strain (and stress targets) at row 0, strictly increasing time; for a
    chunk of a history, ``row0`` and ``point0`` say where it starts (row 0 is checked only when
    ``row0 == 0``)."""
    for name, a in (("time", time), ("strain", strain), ("stress", stress), ("temperature", temperature)):
        if a is None:
            continue
        bad = ~np.isfinite(a)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            idx = (idx[0] + row0, idx[1] + point0, *idx[2:])
            raise InputError(f"{source}: '{name}' has {int(bad.sum())} non-finite value(s), "
                             f"the first at index {idx}")
    for name, a in (("strain", strain), ("stress", stress)):
        if row0 == 0 and a is not None and np.any(a[0] != 0.0):
            pts = np.flatnonzero(np.any(a[0] != 0.0, axis=-1)) + point0
            raise InputError(f"{source}: the history must start from zero {name} (row 0 is the "
                             f"unstressed initial state), but {name}[0] is nonzero at point(s) "
                             f"{_list(pts)}")
    dt = np.diff(time, axis=0)
    if np.any(dt <= 0.0):
        n, b = (int(i) for i in np.argwhere(dt <= 0.0)[0])
        raise InputError(f"{source}: 'time' must increase strictly at every step; at point {b + point0} "
                         f"it goes from {time[n, b]:g} (row {n + row0}) to {time[n + 1, b]:g} "
                         f"(row {n + row0 + 1})")


def _control(arrays: Mapping[str, Any], shape: tuple[int, int], source: str
             ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The ``control`` mask broadcast to (steps, batch, 6) and the ``stress`` targets (zero where
    not stress-controlled), or (None, None) when no component is stress-controlled."""
    if "control" not in arrays:
        return None, None
    raw = np.asarray(arrays["control"])
    if raw.dtype != bool:
        if not np.issubdtype(raw.dtype, np.number) or not np.isin(raw, (0, 1)).all():
            raise InputError(f"{source}: 'control' must be booleans (or 0/1): True where a component "
                             f"is stress-controlled, got dtype {raw.dtype}")
        raw = raw.astype(bool)
    full = shape + (6,)
    if raw.shape not in (full, full[1:], (6,)):
        raise InputError(f"{source}: 'control' must have shape (steps, batch, 6) = {full}, "
                         f"(batch, 6) or (6,), got {raw.shape}")
    control = np.broadcast_to(raw, full).copy()
    if not control.any():
        return None, None
    if "stress" not in arrays:
        raise InputError(f"{source}: 'control' marks stress-controlled components but there is no "
                         f"'stress' array (steps, batch, 6) of targets")
    stress = _float_array(arrays["stress"], "stress", source)
    if stress.shape != full:
        raise InputError(f"{source}: 'stress' must have shape (steps, batch, 6) = {full}, got "
                         f"{stress.shape}")
    return control, np.where(control, stress, 0.0)


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
