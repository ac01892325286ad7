"""Output paths: checked before the work starts, written atomically, errors that name the path.

A long run must not compute everything and then lose it to an output path that could never be
written (a folder where a file is wanted, a parent that is a file, no permission): the commands call
:func:`check_output_file` / :func:`check_output_folder` first. :func:`write_atomic_bytes` writes a
temporary file next to the target and renames it into place; on any error (a full disk included)
the temporary file is removed and an :class:`~modelc.errors.InputError` names the path.
"""
from __future__ import annotations

import os
from pathlib import Path

from modelc.runtime.errors import InputError
from modelc.runtime.paths import write_atomic_bytes as _write_atomic_bytes


def _nearest_existing(p: Path) -> Path:
    for parent in (p, *p.parents):
        if os.path.lexists(parent):
            return parent
    return Path(".")


def _check_parent(p: Path, what: str) -> None:
    anchor = _nearest_existing(p.parent if str(p.parent) else Path("."))
    if not anchor.is_dir():
        raise InputError(f"{what} {p}: {anchor} is not a folder, so {p} cannot be written")
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise InputError(f"{what} {p}: the folder {anchor} is not writable")


def check_output_file(path: "str | os.PathLike[str]", what: str = "output", suffixes: tuple[str, ...] = (),
                      expected: str = "") -> Path:
    """``path`` as a Path, or an InputError when it certainly cannot be written as a file, or when
    ``suffixes`` (lower case, with the dot) are given and its suffix is none of them (``expected``
    says what to name it instead; default: the suffixes)."""
    p = Path(path)
    if "\0" in str(p) or not str(p).strip():
        raise InputError(f"{what} {str(p)!r}: not a file name")
    if p.is_dir():
        raise InputError(f"{what} {p}: is a folder; give a file name")
    if os.path.lexists(p) and not p.is_file():
        raise InputError(f"{what} {p}: exists and is not a regular file")
    _check_parent(p, what)
    if suffixes and p.suffix.lower() not in suffixes:
        raise InputError(f"{what} {p}: {expected or 'expected a ' + ' or '.join(suffixes) + ' file name'}")
    return p


def check_output_folder(path: "str | os.PathLike[str]", what: str = "output folder") -> Path:
    """``path`` as a Path, or an InputError when it certainly cannot be used as a folder."""
    p = Path(path)
    if "\0" in str(p) or not str(p).strip():
        raise InputError(f"{what} {str(p)!r}: not a folder name")
    if os.path.lexists(p) and not p.is_dir():
        raise InputError(f"{what} {p}: exists and is not a folder")
    if p.is_dir():
        if not os.access(p, os.W_OK | os.X_OK):
            raise InputError(f"{what} {p}: the folder is not writable")
        return p
    _check_parent(p, what)
    return p


def write_atomic_bytes(path: "str | os.PathLike[str]", data: bytes, what: str = "output") -> Path:
    """Write ``data`` to ``path`` atomically; nothing partial is left behind on failure."""
    p = Path(path)
    try:
        _write_atomic_bytes(p, data)
    except OSError as exc:
        raise InputError(f"{what} {p}: cannot write it ({exc.strerror or exc})") from None
    return p
