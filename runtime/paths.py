"""Paths and files shared by the runtime and the compiler: the cache folder, identifiers made from
model names, atomic writes and importing a generated module from its file.

They live in the runtime (the C backend's library cache needs them at run time, and the runtime
never imports the compiler); ``modelc.cache`` and ``modelc.backends.names`` re-export them.
"""
from __future__ import annotations

import importlib.util
import keyword
import os
import re
import secrets
import sys
from pathlib import Path
from types import ModuleType

from modelc.runtime.errors import ModelcError

_BAD = re.compile(r"[^0-9A-Za-z_]+")

# Names the generated function bodies use themselves (pointers, masks, modules, helpers).
RESERVED = frozenset({
    "tl", "triton", "torch", "math", "X", "P", "Y", "J", "ST", "O", "CV", "IT", "RN", "n", "offs", "mask",
    "pid", "row", "BLOCK", "DTYPE", "EPS", "V", "x_stride", "p_stride", "y_stride", "j_stride",
    "st_stride", "nan", "B", "zero",
})
#: ... and the Triton kernel's per-input-variable pointers and row strides (``IN0``, ``in0_stride``, ...)
RESERVED_PATTERN = re.compile(r"IN\d+|in\d+_stride")


def sanitize(name: str) -> str:
    """A readable identifier for ``name``: ``$E`` -> ``p_E``, ``state/S[3]`` -> ``state_S_3``."""
    if name.startswith("$"):
        name = "p_" + name[1:]
    ident = _BAD.sub("_", name).strip("_") or "v"
    if ident[0].isdigit():
        ident = "v_" + ident
    if keyword.iskeyword(ident) or ident in RESERVED or RESERVED_PATTERN.fullmatch(ident):
        ident = "v_" + ident
    return ident


def cache_folder(explicit: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``explicit``, else ``$MODELC_CACHE_DIR``, else ``~/.cache/modelc``."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("MODELC_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "modelc"


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`write_atomic_bytes`, UTF-8, ``\\n`` newlines)."""
    write_atomic_bytes(path, text.encode("utf-8"))


def write_atomic_bytes(path: str | Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically: a temp file of a unique name in the same folder (safe
    for threads and processes writing the same path), then ``os.replace``; nothing partial is left
    behind. The file gets ``mode``, or by default an ordinary file's (0666 less the umask: the temp
    file is created with 0666 and the system applies the umask, which is never changed here)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_unique(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def create_unique(path: Path, suffix: str = ".tmp") -> tuple[int, str]:
    """``(fd, name)`` of a new file ``.<name>.<pid>.<random><suffix>`` beside ``path``, opened for
    writing with mode 0666 less the umask (``O_EXCL``: a name another writer took is never shared;
    tried again under a new name). ``tempfile.mkstemp`` would make it 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}{suffix}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no unused temporary file name beside {path.name}")


def import_file(path: Path, name: str) -> ModuleType:
    """Import a generated module from its file (registered in ``sys.modules`` under ``name``)."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ModelcError(f"cannot import generated module {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod
