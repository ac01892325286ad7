"""Build and load the C backend's shared libraries (see :mod:`modelc.backends.c_backend`).

:func:`load_library` compiles a model's C source with the system C compiler on first use and loads it
with :mod:`ctypes`; later calls (and later processes) load the cached library.

- **compiler**: ``$CC`` when set (a name on ``PATH`` or a path; if it cannot be found, there is no
  compiler: ``$CC`` is never silently replaced), else ``cc``, ``gcc`` or ``clang`` from ``PATH``.
- **flags**: ``-O2 -std=gnu99 -fPIC -shared -fno-math-errno -fno-trapping-math -ffp-contract=off``,
  plus ``-fopenmp`` (else ``-fopenmp-simd``: vectorized, one thread) and ``-march=native`` when a probe
  compile with them succeeds (probed once per compiler), and ``-DMC_W=<lanes>`` (points per block)
  when ``$MODELC_C_LANES`` or the caller sets it (1 is the scalar build); otherwise the source picks
  (8, or 16 for a model with a Newton solve on an AVX-512 CPU in double); for a module with baked
  parameters (``BAKED``), ``-DMC_BAKED_FLAGS``/``-DMC_BAKED_VALUES`` with their values
  (:func:`baked_flags`: one library per set of values).
  A source with a Newton solve (``#define MC_NEWTON 1``) also gets :data:`NEWTON_FLAGS` when the
  probe accepts them (GCC): the instruction scheduler before register allocation, aware of register
  pressure. It reorders instructions and changes no arithmetic (the numbers are the same bit for
  bit, tested). Newton blocks are 16 points in float64 on AVX-512, and their tangents
  spilled heavily; 1 thread, float64, 1e5 points, interleaved: j2_voce_af value and tangent 8%
  faster, perzyna_iso's tangent 5%, the coupled twins 3-12%. A closed form (j2_linear_iso,
  j2_perfect) ran 6-12% slower with them, so it does not get them (docs/backends.md).
  A source that says ``#define MC_WIDE 1`` (a large block: the C backend's ``WIDE_LOOP``) also
  gets :data:`WIDE_FLAGS` in float64, one that says ``2`` (a Newton over a system) in float64 and
  float32, where the build targets AVX-512 and the compiler takes them. GCC 12's tuning for such
  CPUs prefers 256-bit vectors, so a float64 block of 16 points held each value in four registers,
  and these blocks spilled; in 512-bit vectors, same bits (tested), measured on an Intel Xeon (1
  thread, interleaved): chaboche2_coupled 1.56x faster, the other coupled systems 1.1-1.3x, gtn
  1.5x, j2_voce_af 1.1x; float32 systems (then 16 points a block, one vector a value) 1.2-1.3x. The
  scalar Newtons with smaller blocks (norton, perzyna_iso), the closed forms and the float32
  radial returns were level or slower with them
  (benchmarks/results/20261127T181116Z-cpu-wide-vectors.md). A ``-mprefer-vector-width=`` in
  ``$MODELC_CFLAGS`` is the user's choice and turns them off.
  ``-ffast-math`` is never used: it breaks the NaN marking of failed points. ``-ffp-contract=off``
  keeps the rounding of the other backends (no fused multiply-adds). ``$MODELC_CFLAGS`` adds flags.
- **header**: a generated source includes ``modelc_kernel.h`` (what every model's source shares,
  :mod:`modelc.runtime.cheader`), whose text is written in place of that line before anything is
  hashed or compiled: the key below covers it and the kept ``.c`` stands alone.
- **parts**: a model's source declares which entry points make up each part
  (``/* MC_PARTS value:0,tangent:0,jacobian:1,total:1 */``, :func:`modelc.backends.c_backend.part_of`);
  each part is a library of its own, built with ``-DMC_PART=k``: part 0 (value, tangent) when the
  library is first needed, part 1 (the full Jacobian and the total derivative) on the first call
  that asks for one. What a step needs builds several times faster (j2_voce_af 1.0 s instead of
  5.7 s for every entry point). A source without that line is one library.
- **cache**: ``<cache folder>/c/<model>-<key>-<f64|f32>[-p<k>][-baked].so`` where the cache folder is the one of
  :func:`modelc.runtime.paths.cache_folder` (``$MODELC_CACHE_DIR`` or ``~/.cache/modelc``) and ``key`` hashes
  the source, the flags, the dtype, the compiler's ``--version`` and what ``-march=native`` means on
  this CPU (its predefined macros), so a cache shared between machines never loads a library built
  for another instruction set. The library is compiled to a
  temporary file in that folder and moved into place with ``os.replace``: concurrent processes build
  identical files and never load a partial one. The ``.c`` file is kept next to it for reading. The
  library's SHA-256 is recorded in ``<library>.sha256`` and checked before every load: a truncated or
  altered library is rebuilt, never loaded (see :mod:`modelc.runtime.cachefiles`); an unusable cache
  folder falls back to a temporary one with a warning.
"""
from __future__ import annotations

import array
import ctypes
import functools
import hashlib
import math
import os
import platform
import re
import shutil
import struct
import subprocess
import threading
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from modelc.runtime.errors import ModelcError
from modelc.runtime.paths import cache_folder, create_unique, sanitize
from modelc.runtime.cachefiles import usable_folder, verified, write_digest
from modelc.runtime import cheader

BASE_FLAGS = ("-O2", "-std=gnu99", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math",
              "-ffp-contract=off")
_PROBE = "int mc_probe(int n) { int s = 0;\n#pragma omp parallel for reduction(+:s)\n" \
         "for (int i = 0; i < n; ++i) s += i; return s; }\n"
DEFAULT_LANES = 0  # the source's own choice of points per block (no -DMC_W)
#: flags a source with a Newton solve adds when the compiler takes them (see the module docstring)
NEWTON_FLAGS = ("-fschedule-insns", "-fsched-pressure")
#: flags a source that asks for them (``#define MC_WIDE 1`` in float64, ``2`` in either dtype: the C
#: backend's ``WIDE_LOOP``) adds on a CPU with AVX-512 (``__AVX512F__`` among the macros
#: ``-march=native`` and ``$MODELC_CFLAGS`` define) when the compiler takes them: its float64 blocks
#: of 16 points are then two 512-bit vectors a value, not four 256-bit ones; ``MC_WIDE_VECTORS``
#: makes a float32 block 16 points, one 512-bit vector a value (see the module docstring)
WIDE_FLAGS = ("-mprefer-vector-width=512", "-DMC_WIDE_VECTORS")
_WIDE = re.compile(r"^#define MC_WIDE ([0-9])$", re.M)
_NEWTON = re.compile(r"^#define MC_NEWTON 1$", re.M)
#: calls that read and write more bytes than this fraction of the largest cache (inputs, parameters,
#: outputs and Jacobian) write their outputs with streaming stores (``MC_STREAM``): beyond it, a call
#: repeated on the same arrays no longer finds them in cache and regular stores pay a read for
#: ownership of every output line (docs/backends.md has the measurements)
STREAM_FRACTION = 0.5
#: the most cache a call's arrays are taken to stay in between calls, whatever Linux reports: a
#: virtual machine reports the host's whole L3 (an Intel Xeon VM with 2 cores: 480 MiB, a 240 MiB
#: threshold), and a host's own work between calls (assembly, a linear solve) evicts them anyway.
#: Measured (1 thread, tangent, docs/backends.md): on that VM streaming stores won from 2-4 MiB moved,
#: by 1.04-1.29x on the same arrays every call and 1.8-2.2x with the arrays cycled through the cache
#: (1e4 points); on an AMD EPYC (32 MiB L3) they won 1.4x cycled at 15 MB, and on the same arrays
#: lost 9% at 7 MB and were level at 15 MB. So the threshold is at most 4 MiB
STREAM_CACHE_CAP = 8 << 20
#: the largest threshold :func:`stream_bytes` gives (an exported C kernel uses it: it reads no cache sizes)
STREAM_MAX_BYTES = int(STREAM_FRACTION * STREAM_CACHE_CAP)
VARIANTS = ("value", "jacobian", "tangent", "total")


class CBuildError(ModelcError):
    """The C backend cannot be used: no compiler, or the build failed (the message says which)."""


@dataclass(frozen=True)
class Compiler:
    path: str
    version: str
    flags: tuple[str, ...]
    target: str = ""  # what -march=native means on this machine (a hash of the predefined macros)
    newton_flags: tuple[str, ...] = ()  # NEWTON_FLAGS where the compiler takes them, else ()
    wide_flags: tuple[str, ...] = ()  # WIDE_FLAGS on an AVX-512 target where the compiler takes them


def find_compiler() -> str:
    """The C compiler's path; :class:`CBuildError` naming what was looked for if there is none."""
    cc = os.environ.get("CC")
    if cc:
        exe = cc.split()[0]
        found = shutil.which(exe)
        if found is None:
            raise CBuildError(f"the C compiler $CC={cc!r} was not found")
        return found
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    raise CBuildError("no C compiler found ($CC unset; no cc, gcc or clang on PATH)")


@functools.lru_cache(maxsize=None)
def _compiler_info(path: str, extra: str) -> Compiler:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        version = (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else path
    except (OSError, subprocess.SubprocessError) as exc:
        raise CBuildError(f"the C compiler {path} does not run: {exc}") from None
    flags = list(BASE_FLAGS)
    with tempfile.TemporaryDirectory(prefix="modelc-cc-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(_PROBE)
        if not _try(path, flags, src, Path(tmp) / "base.so"):
            raise CBuildError(f"the C compiler {path} cannot build a shared library with {' '.join(flags)}")
        if _try(path, flags + ["-fopenmp"], src, Path(tmp) / "omp.so", load=True):
            flags.append("-fopenmp")
        elif _try(path, flags + ["-fopenmp-simd"], src, Path(tmp) / "simd.so", load=True):
            flags += ["-fopenmp-simd", "-DMC_OMP_SIMD"]  # vectorized lanes, one thread
        target = ""
        if _try(path, flags + ["-march=native"], src, Path(tmp) / "native.so", load=True):
            flags.append("-march=native")
            target = _native_target(path)
        newton = NEWTON_FLAGS if _try(path, flags + ["-Werror", *NEWTON_FLAGS], src, Path(tmp) / "sched.so") else ()
        wide = ()  # (a vector width the user chose in $MODELC_CFLAGS is theirs: no wide builds)
        if "-mprefer-vector-width" not in extra and "__AVX512F__" in _macros(path, flags + extra.split()) and \
                _try(path, flags + ["-Werror", *WIDE_FLAGS], src, Path(tmp) / "wide.so"):
            wide = WIDE_FLAGS
    flags += extra.split()
    return Compiler(path, version, tuple(flags), target, tuple(newton), tuple(wide))


def _macros(cc: str, flags) -> str:
    """The macros ``cc`` predefines with ``flags`` (instruction sets: ``__AVX512F__``, ...); "" if
    it cannot say."""
    try:
        r = subprocess.run([cc, *flags, "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True,
                           timeout=60)
        return r.stdout if r.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def instruction_sets(cc: Compiler) -> list[str]:
    """The vector instruction sets a build with ``cc``'s flags targets (from the macros it predefines:
    ``-march=native`` and ``$MODELC_CFLAGS`` decide them), by their /proc/cpuinfo names."""
    macros = _macros(cc.path, list(cc.flags))
    return [name for name, macro in (("sse2", "__SSE2__"), ("avx2", "__AVX2__"), ("fma", "__FMA__"),
                                     ("avx512f", "__AVX512F__"), ("neon", "__ARM_NEON"))
            if f"#define {macro} " in macros]


def _native_target(cc: str) -> str:
    """A digest of the macros ``-march=native`` predefines (instruction sets, CPU): libraries built
    with it run only on a CPU like this one, so it is part of the cache key."""
    text = "\n".join(sorted(_macros(cc, ["-march=native"]).splitlines()))
    return hashlib.sha256((text or platform.processor() or platform.machine()).encode()).hexdigest()[:16]


def _try(cc: str, flags, src: Path, out: Path, load: bool = False) -> bool:
    try:
        r = subprocess.run([cc, *flags, str(src), "-o", str(out)], capture_output=True, timeout=120)
        if r.returncode != 0:
            return False
        if load:
            ctypes.CDLL(str(out))
        return True
    except (OSError, subprocess.SubprocessError):
        return False


def compiler() -> Compiler:
    """The compiler, its version and flags (:class:`CBuildError` if there is no usable compiler)."""
    return _compiler_info(find_compiler(), os.environ.get("MODELC_CFLAGS", ""))


def default_lanes() -> int:
    """Points per block: ``$MODELC_C_LANES`` (1 = the scalar build, one point at a time with libm's
    exp/log/pow), else :data:`DEFAULT_LANES` (0: the source's choice)."""
    text = os.environ.get("MODELC_C_LANES", "")
    if not text:
        return DEFAULT_LANES
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise CBuildError(f"$MODELC_C_LANES must be a whole number from 1 to 64, got {text!r}")
    return int(text)


class CLibrary:
    """A model's compiled library for one dtype: entry points ``mc_value``, ``mc_jacobian``,
    ``mc_tangent`` (when the model declares a tangent) and ``mc_total``, see
    :mod:`modelc.backends.c_backend`. A source in parts (module docstring) is loaded part by part:
    the part of an entry point is built or loaded on its first call. ``path`` is part 0's file (the
    whole library's for a source in one part)."""

    def __init__(self, path: Path, dtype: torch.dtype, lanes: int, parts: dict[str, int] | None = None,
                 part_path=None, widths: "Widths | None" = None):
        self.path = path
        self.widths = widths  # what a call's rows must hold (source_widths); None: not checked
        self.dtype = dtype
        self.lanes = lanes
        self._parts = parts or {}
        self._part_path = part_path  # k -> the path of part k, built (or loaded) on demand
        self._libs: dict[int, ctypes.CDLL] = {}
        self._entry: dict[str, object] = {}
        self._lock = threading.Lock()
        self._open(0, path)
        #: the entry points this library has (built or not)
        self.variants = tuple(v for v in VARIANTS if v in self._parts or v in self._entry)

    def _open(self, part: int, path: Path) -> None:
        lib = self._libs[part] = ctypes.CDLL(str(path))
        for name in VARIANTS:
            if self._parts and self._parts.get(name) != part:
                continue
            fn = getattr(lib, f"mc_{name}", None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
                fn.restype = None
                self._entry[name] = fn

    def entry_point(self, variant: str):
        """The function of ``variant`` (its part built or loaded first when it is not yet)."""
        fn = self._entry.get(variant)
        if fn is None:
            if variant not in self.variants:
                raise ModelcError(f"C backend: {self.path.name} has no {variant} entry point (mc_{variant})")
            with self._lock:
                part = self._parts[variant]
                if part not in self._libs:
                    self._open(part, self._part_path(part))
            fn = self._entry[variant]
        return fn

    def run(self, variant: str, n: int, args, threads: int) -> None:
        """Raw call: ``args`` the array of 64-bit words the C ``mc_unpack`` reads (:func:`pack_args`)."""
        self.entry_point(variant)(n, args.buffer_info()[0], threads)

    def __call__(self, inputs, P: torch.Tensor, Y: torch.Tensor, J: torch.Tensor | None = None,
                 status=None, threads: int | None = None, *, variant: str | None = None,
                 options: tuple[float, float, int] = (-1.0, -1.0, -1)) -> None:
        """Evaluate into ``Y (B, ny)``, ``J`` (None: value only) and ``status`` = (converged uint8,
        iterations int32, residual norm) of ``(B,)`` (None for explicit models). ``inputs``: one
        ``(B, size)`` tensor per input variable with contiguous components (any row stride, 0
        broadcasts); ``P`` ``(1|B, np)`` with contiguous rows. ``variant``: ``"value"`` (default without
        ``J``), ``"jacobian"`` (default with ``J``), ``"tangent"`` or ``"total"``. ``options``: the
        Newton options (rtol, atol, max_iter; negative: the spec's, see :mod:`modelc.runtime.solver`)."""
        variant = variant or ("jacobian" if J is not None else "value")
        if variant not in self.variants:
            raise ModelcError(f"C backend: {self.path.name} has no {variant} entry point (mc_{variant})")
        if (J is None) != (variant == "value"):
            raise ModelcError(f"C backend: the {variant} entry point {'needs' if J is None else 'takes no'} J")
        B = Y.shape[0]
        conv, iters, rnorm = status if status is not None else (None, None, None)
        checks = [(f"input {k}", t, self.dtype) for k, t in enumerate(inputs)]
        checks += [("P", P, self.dtype), ("Y", Y, self.dtype), ("J", J, self.dtype), ("converged", conv, torch.bool),
                   ("iterations", iters, torch.int32), ("residual norm", rnorm, self.dtype)]
        for what, t, dt in checks:
            if t is None:
                continue
            if t.device.type != "cpu" or t.dtype != dt:
                raise ModelcError(f"C backend: {what} must be a CPU tensor of {dt}, got {t.dtype} on {t.device}")
            if what.startswith("input") or what == "P":
                ok = t.dim() == 2 and t.shape[0] in (1, B) and (t.stride(-1) == 1 or t.shape[-1] == 1)
            else:
                ok = t.is_contiguous() and t.shape[0] == B
            if not ok:
                raise ModelcError(f"C backend: {what} must have {B} rows with contiguous components (got shape "
                                  f"{tuple(t.shape)}, strides {tuple(t.stride())})")
        if self.widths is not None:
            self.widths.check(inputs, P, Y, J, variant)
        if B == 0:
            return
        args = pack_args(inputs, P, Y, J, status, options)
        self.run(variant, B, args, int(threads or torch.get_num_threads()))


def pack_args(inputs, P, Y, J, status, options=(-1.0, -1.0, -1)) -> array.array:
    """The argument array of an entry point (64-bit words; no checks: the caller made them); then the
    Newton options (rtol, atol: the bits of a double; max_iter) and the flags (``MC_STREAM`` when the
    call reads and writes more than :func:`stream_bytes`). An ``array.array`` of ``q``: built in a
    quarter of the time of a ctypes array (~0.6 vs 2.6 us), which a small call notices."""
    ptrs, xs = [], []
    moved = 0  # elements read and written; an input that is one row or broadcast counts one row
    for t in inputs:
        rows, size = t.shape  # inputs are 2-d: (rows, size)
        stride = t.stride()[0]
        ptrs.append(t.data_ptr())
        if rows == 1 or stride == 0:
            xs.append(0)
            moved += size
        else:
            xs.append(stride)
            moved += rows * size
    return pack_tail(ptrs + xs if inputs else [0, 0], moved, P, Y, J, status, options)


def pack_tail(words: list[int], moved: int, P, Y, J, status, options) -> array.array:
    """:func:`pack_args` after the inputs' ``words`` (their pointers, then their row strides), which
    move ``moved`` elements: the parameters, outputs, Jacobian, status, options and flags. (A call
    planned ahead, :class:`modelc.runtime.callpath.Plan`, knows its inputs' words without views.)"""
    rows, size = P.shape
    stride = P.stride()[0]
    shared = rows == 1 or stride == 0
    moved += size if shared else rows * size
    vals = words + [P.data_ptr(), 0 if shared else stride, Y.data_ptr(), Y.stride()[0]]
    moved += Y.numel()
    if J is None:
        vals += [0, 0]
    else:
        stride = J.stride()[0]
        vals += [J.data_ptr(), stride]
        moved += 0 if stride == 0 else J.numel()
    vals += [0, 0, 0] if status is None else [t.data_ptr() for t in status]
    rtol, atol, max_iter = options
    vals += [_bits(rtol), _bits(atol), int(max_iter)]
    vals.append(1 if moved * Y.element_size() > stream_bytes() else 0)
    return array.array("q", vals)


@functools.lru_cache(maxsize=1)
def stream_bytes() -> int:
    """Bytes read and written (inputs, parameters, outputs, Jacobian) above which a call writes its
    outputs with streaming stores: ``$MODELC_C_STREAM_BYTES``, else
    :data:`STREAM_FRACTION` of the largest CPU cache Linux reports, at most
    :data:`STREAM_CACHE_CAP` (which is also assumed where it reports none)."""
    text = os.environ.get("MODELC_C_STREAM_BYTES", "")
    if text:
        if not text.isdigit():
            raise CBuildError(f"$MODELC_C_STREAM_BYTES must be a whole number of bytes, got {text!r}")
        return int(text)
    reported = reported_cache_bytes()
    return min(int(STREAM_FRACTION * reported), STREAM_MAX_BYTES) if reported else STREAM_MAX_BYTES


def reported_cache_bytes() -> int:
    """The largest cache of CPU 0 as Linux reports it (sysfs sizes such as ``32768K``); 0 where it
    reports none (another system)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = f.read_text().strip().upper()
            sizes.append(int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text))
        except (OSError, ValueError):
            continue
    return max(sizes, default=0)


def _bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


_LOADED: dict[str, CLibrary] = {}

def baked_flags(baked: tuple[float | None, ...]) -> list[str]:
    """The defines that bake parameter columns into a library (the template's ``MC_BAKED_FLAGS``):
    ``baked`` has one entry per parameter column, its value or None (read from the call's row).
    Values are written as hexadecimal literals: exact in both dtypes."""
    if not any(v is not None for v in baked):
        return []
    bad = [v for v in baked if v is not None and not math.isfinite(v)]
    if bad:
        raise ModelcError(f"C backend: a baked parameter must be finite, got {bad[0]}")
    flags = ",".join("0" if v is None else "1" for v in baked)
    values = ",".join("0" if v is None else float(v).hex() for v in baked)
    return [f"-DMC_BAKED_FLAGS={{{flags}}}", f"-DMC_BAKED_VALUES={{{values}}}"]


_PARTS = re.compile(r"/\* MC_PARTS ([a-z_]+:\d+(?:,[a-z_]+:\d+)*) ")
_WIDTHS = re.compile(r"/\* MC_WIDTHS x=([\d,]*)((?: [a-z_]+=\d+)*) ")
_DEFINE = re.compile(r"^#define (NP|NY) (\d+)$", re.M)


@dataclass(frozen=True)
class Widths:
    """Per point, what a library reads and writes (its source's ``MC_WIDTHS`` line and ``NP``/``NY``):
    each input's components in argument order, the parameters, the outputs, and each derivative
    entry point's entries. A call's tensors are checked against them (:meth:`check`): a narrower row
    would be read or written past its end, a wider one read wrong."""
    inputs: tuple[int, ...]
    np: int
    ny: int
    derivatives: dict[str, int]

    def check(self, inputs, P, Y, J, variant: str) -> None:
        def bad(what: str, got, want) -> ModelcError:
            return ModelcError(f"C backend: {what} has {got} values per point, the library's row holds {want}")

        if len(inputs) != len(self.inputs):
            raise ModelcError(f"C backend: {len(inputs)} input tensors, the library reads {len(self.inputs)}")
        for k, (t, w) in enumerate(zip(inputs, self.inputs)):
            if t.shape[1] != w:
                raise bad(f"input {k}", t.shape[1], w)
        if self.np and P.shape[1] != self.np:
            raise bad("P", P.shape[1], self.np)
        if Y.shape[1] != self.ny:
            raise bad("Y", Y.shape[1], self.ny)
        want = self.derivatives.get(variant)
        if J is not None and want is not None and math.prod(J.shape[1:]) != want:
            raise bad("J", math.prod(J.shape[1:]), want)


def source_widths(source: str) -> Widths | None:
    """The :class:`Widths` a source declares, or None for a source without the line (a module
    generated before it, or hand-written C)."""
    m = _WIDTHS.search(source)
    if m is None:
        return None
    d = dict(_DEFINE.findall(source))
    pairs = [item.split("=") for item in m.group(2).split()]
    return Widths(tuple(int(w) for w in m.group(1).split(",") if w), int(d.get("NP", 0)), int(d.get("NY", 0)),
                  {k: int(v) for k, v in pairs})


def source_parts(source: str) -> dict[str, int]:
    """``{entry point: part}`` as the source declares them (``MC_PARTS``), or {} for one library."""
    m = _PARTS.search(source)
    if m is None:
        return {}
    return {v: int(k) for v, k in (item.split(":") for item in m.group(1).split(","))}


def library_path(source: str, name: str, dtype: torch.dtype, cache_dir=None,
                 lanes: int | None = None, baked: tuple[float | None, ...] = (),
                 part: int | None = None) -> tuple[Path, list[str]]:
    """Where the library for ``source`` (``part``: that part alone, ``-DMC_PART``) lives in the
    cache, and the compile command's flags (the key hashes :func:`modelc.runtime.cheader.standalone`
    of ``source``: the header's text too)."""
    source = cheader.standalone(source)
    cc = compiler()
    lanes = default_lanes() if lanes is None else int(lanes)
    bake = baked_flags(baked)
    level = _WIDE.search(source)
    wide = level is not None and int(level.group(1)) >= (1 if dtype == torch.float64 else 2)
    flags = list(cc.flags) + (list(cc.newton_flags) if _NEWTON.search(source) else []) + \
        (list(cc.wide_flags) if wide else []) + \
        (["-DMC_FLOAT32"] if dtype == torch.float32 else []) + \
        ([f"-DMC_W={lanes}"] if lanes else []) + bake + ([f"-DMC_PART={part}"] if part is not None else [])
    key = hashlib.sha256("\0".join([source, cc.path, cc.version, cc.target, *flags]).encode()).hexdigest()[:20]
    tag = ("f32" if dtype == torch.float32 else "f64") + ("" if lanes == DEFAULT_LANES else f"-w{lanes}") + \
        ("" if part is None else f"-p{part}") + ("-baked" if bake else "")
    return usable_folder(cache_folder(cache_dir) / "c") / f"{sanitize(name)}-{key}-{tag}.so", flags


def load_library(source: str, name: str, dtype: torch.dtype, cache_dir=None, lanes: int | None = None,
                 baked: tuple[float | None, ...] = ()) -> CLibrary:
    """The compiled library of ``source`` for ``dtype`` (built on first use, then cached; a source in
    parts builds part 0 now and the others on their first call). ``lanes``: points per block
    (default :func:`default_lanes`; 1 is the scalar build). ``baked``: per parameter column, a
    value compiled into the library as a constant, or None (:func:`baked_flags`); each set of
    values is its own library."""
    if dtype not in (torch.float32, torch.float64):
        raise ModelcError(f"C backend: dtype must be float64 or float32, got {dtype}")
    source = cheader.standalone(source)
    lanes = default_lanes() if lanes is None else int(lanes)
    parts = source_parts(source)

    def part_path(part: int | None) -> Path:
        path, flags = library_path(source, name, dtype, cache_dir, lanes, baked, part)
        if not verified(path):  # missing, truncated or edited: loading it could kill the process (SIGBUS)
            try:
                build(source, path, flags)
            except OSError as exc:  # an unwritable cache folder, a compiler that vanished, ...
                raise CBuildError(f"C backend: cannot build {path.name} in {path.parent}: {exc}") from None
        return path

    first, _ = library_path(source, name, dtype, cache_dir, lanes, baked, 0 if parts else None)
    lib = _LOADED.get(str(first))
    if lib is not None:
        return lib
    lib = _LOADED[str(first)] = CLibrary(part_path(0 if parts else None), dtype, lanes, parts, part_path,
                                         source_widths(source))
    return lib


def load_library_source(source: str, name: str, cache_dir=None) -> ctypes.CDLL:
    """Any C source (e.g. the benchmarks' memory floor) built with the backend's flags and cache."""
    source = cheader.standalone(source)
    cc = compiler()
    key = hashlib.sha256("\0".join([source, cc.path, cc.version, cc.target, *cc.flags]).encode()).hexdigest()[:20]
    path = cache_folder(cache_dir) / "c" / f"{name}-{key}.so"
    if not path.exists():
        build(source, path, list(cc.flags))
    return ctypes.CDLL(str(path))


def build(source: str, path: Path, flags: list[str]) -> None:
    """Compile ``source`` to ``path`` atomically (temp files in the same folder + ``os.replace``)."""
    cc = compiler()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_c = create_unique(path, suffix=".c")  # readable like the library (mkstemp made it 0600)
    tmp_so = tmp_c[:-2] + ".so"
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
        r = subprocess.run([cc.path, *flags, tmp_c, "-o", tmp_so, "-lm"], capture_output=True, text=True)
        if r.returncode != 0:
            err = "\n".join((r.stderr or r.stdout).splitlines()[:30])
            raise CBuildError(f"C backend: compiling {path.stem} failed ({cc.path} {' '.join(flags)}):\n{err}")
        os.chmod(tmp_so, 0o755)
        os.replace(tmp_so, path)
        os.replace(tmp_c, path.with_suffix(".c"))
        write_digest(path)
    finally:
        for t in (tmp_c, tmp_so):
            if os.path.exists(t):
                os.unlink(t)
