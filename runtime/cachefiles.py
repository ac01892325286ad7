"""Cache artifacts that are verified before they are used, in a folder that is known to be writable.

A cached artifact (a generated module, a C library) is never trusted because its name matches: when it
is written, the SHA-256 of its bytes goes into ``<artifact>.sha256`` (written after the artifact, both
atomically); before it is imported or loaded, :func:`verified` recomputes the hash. A truncated,
edited or half-copied artifact, or one without its digest, is rebuilt instead of being imported (a
SyntaxError) or ``dlopen``-ed (a SIGBUS that kills the process).

:func:`usable_folder` checks that a cache folder can be created and written; when it cannot (read-only,
a path below a regular file, no permission) it falls back to a private temporary folder for this
process, with a one-line warning, instead of failing.
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import warnings
from pathlib import Path

DIGEST_SUFFIX = ".sha256"


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + DIGEST_SUFFIX)


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_digest(path: Path) -> None:
    """Record the digest of ``path`` (call after ``path`` is in place)."""
    from modelc.runtime.paths import write_atomic

    # an ordinary file like the artifact it vouches for (mkstemp's 0600 made the digest unreadable
    # to the other users of a shared cache, who then rebuilt the artifact)
    write_atomic(digest_path(path), file_digest(path) + "\n")


def verified(path: Path) -> bool:
    """Whether ``path`` exists, is a regular file and matches the digest recorded when it was written."""
    try:
        if not path.is_file():
            return False
        recorded = digest_path(path).read_text(encoding="ascii").strip()
        return recorded == file_digest(path)
    except (OSError, UnicodeDecodeError):
        return False


def usable_folder(folder: Path) -> Path:
    """``folder`` when it can be created and written; else this process's temporary cache folder,
    with a one-line warning (once per folder)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        return folder
    except (OSError, ValueError) as exc:  # ValueError: a NUL character in the path
        fallback = _temporary_cache()
        _warn_once(str(folder), f"modelc: cache folder {folder} is not usable ({getattr(exc, 'strerror', None) or exc}); "
                                f"using the temporary cache {fallback} for this process")
        return fallback


@functools.lru_cache(maxsize=1)
def _temporary_cache() -> Path:
    return Path(tempfile.mkdtemp(prefix="modelc-cache-"))


@functools.lru_cache(maxsize=None)
def _warn_once(key: str, message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=4)
