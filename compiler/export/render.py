"""Rendering helpers shared by the exports: the Jinja2 environment and atomic file writes."""
from __future__ import annotations

import os
import re
from pathlib import Path

import jinja2


def template(name: str) -> jinja2.Template:
    """A template of ``modelc.templates`` with ``StrictUndefined`` (the code generator's loader)."""
    from modelc.backends.module import _template

    return _template(name)


def macro(name: str) -> str:
    """A C macro suffix for a variable name (case kept: ``state/internal/Ep`` and ``.../ep`` differ)."""
    return re.sub(r"[^A-Za-z0-9]", "_", name).strip("_")


def c_comment(text: str) -> str:
    """User text made safe inside a C block comment."""
    return text.replace("*/", "* /").replace("\n", " ")


def write_files(out_dir: str | os.PathLike, files: dict[str, str]) -> list[Path]:
    """Write ``{file name: text}`` into ``out_dir`` (created), each atomically and with an ordinary
    file's permissions (0666 less the umask: a host build on a shared machine can read them)."""
    from modelc.runtime.paths import write_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        write_atomic(out / name, text)
        paths.append(out / name)
    return paths
