"""Build and load the C backend's shared libraries (see :mod:`modelc.backends.c_backend`).

:func:`load_library` compiles a model's C source with the system C compiler on first use and loads it
with :mod:`ctypes`; later calls (and later processes) load the cached library.

- **compiler**: ``$CC`` when set (a name on ``PATH`` or a path; if it cannot be found, there is no
  compiler: ``$CC`` is never silently replaced), else ``cc``, ``gcc`` or ``clang`` from ``PATH``.
- **flags**: ``-O2 -std=gnu99 -fPIC -shared -fno-math-errno -ffp-contract=off``, plus ``-fopenmp``
  and ``-march=native`` when a probe compile with them succeeds (probed once per compiler).
  ``-ffast-math`` is never used: it breaks the NaN marking of failed points. ``-ffp-contract=off``
  keeps the rounding of the other backends (no fused multiply-adds). ``$MODELC_CFLAGS`` adds flags.
- **cache**: ``<cache folder>/c/<model>-<key>-<f64|f32>.so`` where the cache folder is the one of
  :func:`modelc.cache.cache_folder` (``$MODELC_CACHE_DIR`` or ``~/.cache/modelc``) and ``key`` hashes
  the source, the flags, the dtype and the compiler's ``--version``. The library is compiled to a
  temporary file in that folder and moved into place with ``os.replace``: concurrent processes build
  identical files and never load a partial one. The ``.c`` file is kept next to it for reading. The
  library's SHA-256 is recorded in ``<library>.sha256`` and checked before every load: a truncated or
  altered library is rebuilt, never loaded (see :mod:`modelc.runtime.cachefiles`); an unusable cache
  folder falls back to a temporary one with a warning.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from modelc.errors import ModelcError
from modelc.runtime.cachefiles import usable_folder, verified, write_digest

BASE_FLAGS = ("-O2", "-std=gnu99", "-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=off")
_PROBE = "int mc_probe(int n) { int s = 0;\n#pragma omp parallel for reduction(+:s)\n" \
         "for (int i = 0; i < n; ++i) s += i; return s; }\n"


class CBuildError(ModelcError):
    """The C backend cannot be used: no compiler, or the build failed (the message says which)."""


@dataclass(frozen=True)
class Compiler:
    path: str
    version: str
    flags: tuple[str, ...]


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
        for opt in ("-fopenmp", "-march=native"):
            if _try(path, flags + [opt], src, Path(tmp) / "opt.so", load=True):
                flags.append(opt)
    flags += extra.split()
    return Compiler(path, version, tuple(flags))


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


class CLibrary:
    """A loaded model library for one dtype: ``value`` and ``jacobian`` entry points."""

    def __init__(self, path: Path, dtype: torch.dtype):
        self.path = path
        self.dtype = dtype
        lib = ctypes.CDLL(str(path))
        i64, ptr, cint = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        self._value = lib.mc_value
        self._value.argtypes = [i64, ptr, i64, ptr, i64, ptr, ptr, cint]
        self._value.restype = None
        self._jacobian = lib.mc_jacobian
        self._jacobian.argtypes = [i64, ptr, i64, ptr, i64, ptr, ptr, ptr, cint]
        self._jacobian.restype = None
        self._tangent = getattr(lib, "mc_tangent", None)  # only models with a declared tangent
        if self._tangent is not None:
            self._tangent.argtypes = [i64, ptr, i64, ptr, i64, ptr, ptr, ptr, cint]
            self._tangent.restype = None
        self._lib = lib

    def __call__(self, X: torch.Tensor, P: torch.Tensor, Y: torch.Tensor, J: torch.Tensor | None,
                 ST: torch.Tensor | None, threads: int | None = None, *, tangent: bool = False) -> None:
        """Evaluate ``X (B, nx)``, ``P (1|B, np)`` into ``Y (B, ny)``, ``J (B, ny, nx)`` (None: value
        only; with ``tangent``, ``(B, NTY, NTX)`` from ``mc_tangent``) and ``ST (B, 3)`` (None for
        explicit models). Rows must be contiguous CPU tensors of the library's dtype."""
        if tangent and (self._tangent is None or J is None):
            raise ModelcError(f"C backend: {self.path.name} has no tangent entry point (mc_tangent)"
                              if self._tangent is None else "C backend: the tangent needs J")
        B = X.shape[0]
        for what, t in (("X", X), ("P", P), ("Y", Y), ("J", J), ("ST", ST)):
            if t is None:
                continue
            if t.device.type != "cpu" or t.dtype != self.dtype:
                raise ModelcError(f"C backend: {what} must be a CPU tensor of {self.dtype}, got "
                                  f"{t.dtype} on {t.device}")
            rows_ok = t.stride(-1) == 1 if what in ("X", "P") else t.is_contiguous()
            if not rows_ok:
                raise ModelcError(f"C backend: {what} must be contiguous (got strides {tuple(t.stride())})")
        if P.shape[0] not in (1, B):
            raise ModelcError(f"C backend: P has {P.shape[0]} rows for {B} points")
        if B == 0:
            return
        p_stride = 0 if P.shape[0] == 1 else P.stride(0)
        threads = int(threads or torch.get_num_threads())
        st = ST.data_ptr() if ST is not None else None
        if J is None:
            self._value(B, X.data_ptr(), X.stride(0), P.data_ptr(), p_stride, Y.data_ptr(), st, threads)
        else:
            fn = self._tangent if tangent else self._jacobian
            fn(B, X.data_ptr(), X.stride(0), P.data_ptr(), p_stride, Y.data_ptr(), J.data_ptr(), st, threads)


_LOADED: dict[str, CLibrary] = {}


def library_path(source: str, name: str, dtype: torch.dtype, cache_dir=None) -> tuple[Path, list[str]]:
    """Where the library for ``source`` lives in the cache, and the compile command's flags."""
    from modelc.cache import cache_folder
    from modelc.backends.names import sanitize

    cc = compiler()
    flags = list(cc.flags) + (["-DMC_FLOAT32"] if dtype == torch.float32 else [])
    key = hashlib.sha256("\0".join([source, cc.path, cc.version, *flags]).encode()).hexdigest()[:20]
    tag = "f32" if dtype == torch.float32 else "f64"
    return usable_folder(cache_folder(cache_dir) / "c") / f"{sanitize(name)}-{key}-{tag}.so", flags


def load_library(source: str, name: str, dtype: torch.dtype, cache_dir=None) -> CLibrary:
    """The compiled library of ``source`` for ``dtype`` (built on first use, then cached)."""
    if dtype not in (torch.float32, torch.float64):
        raise ModelcError(f"C backend: dtype must be float64 or float32, got {dtype}")
    path, flags = library_path(source, name, dtype, cache_dir)
    lib = _LOADED.get(str(path))
    if lib is not None:
        return lib
    if not verified(path):  # missing, truncated or edited: loading it could kill the process (SIGBUS)
        try:
            build(source, path, flags)
        except OSError as exc:  # an unwritable cache folder, a compiler that vanished, ...
            raise CBuildError(f"C backend: cannot build {path.name} in {path.parent}: {exc}") from None
    lib = _LOADED[str(path)] = CLibrary(path, dtype)
    return lib


def build(source: str, path: Path, flags: list[str]) -> None:
    """Compile ``source`` to ``path`` atomically (temp files in the same folder + ``os.replace``)."""
    cc = compiler()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_c = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".c", dir=path.parent)
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
