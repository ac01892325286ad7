"""The bundled model library (``spec/``, installed as ``modelc.spec``): find a model by name.

:func:`library` lists the complete models (the compositions the library files declare under
``compose:``) with their spec file and doc line; :func:`bundled_spec` finds the file that declares a
name (a composition, or a building-block model under ``models:``). The files are read as YAML data
with the safe loader; nothing is compiled here.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from modelc.errors import InputError, ModelcError

__all__ = ["LibraryModel", "library", "bundled_spec", "resolve", "spec_dir"]


@dataclass(frozen=True)
class LibraryModel:
    """A bundled model: its name, the spec file declaring it, its doc line, and whether it is a
    composition (a complete model) or a building-block model."""

    name: str
    path: Path
    doc: str
    kind: str  # "composition" | "model"

    def __fspath__(self) -> str:  # usable wherever a spec path is expected
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)


def spec_dir() -> Path:
    """The folder of the bundled library (``modelc.spec``), installed or in a source checkout."""
    from modelc.runtime.histories import _spec_dir

    return _spec_dir()


@functools.lru_cache(maxsize=4)
def _scan(root: Path) -> tuple[LibraryModel, ...]:
    files = sorted(root.glob("*.yaml"), key=lambda f: (f.stem != "library", f.name))
    found: list[LibraryModel] = []
    for f in files:
        try:
            data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:  # a broken installation, not the user's input
            raise ModelcError(f"{f}: the bundled spec does not parse as YAML ({exc})") from None
        for section, kind in (("compose", "composition"), ("models", "model")):
            for name, body in (data.get(section) or {}).items():
                doc = str(body.get("doc", "")) if isinstance(body, dict) else ""
                found.append(LibraryModel(str(name), f, doc, kind))
    return tuple(found)


def library(*, building_blocks: bool = False) -> dict[str, LibraryModel]:
    """``{name: LibraryModel}`` of the bundled complete models (``modelc.load(name)`` compiles one);
    with ``building_blocks=True`` also the models they are composed of."""
    return {m.name: m for m in _scan(spec_dir()) if building_blocks or m.kind == "composition"}


def bundled_spec(name: str) -> LibraryModel:
    """The bundled model called ``name`` (an :class:`InputError` listing the library otherwise)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise InputError(f"{name!r}: not a model name")
    every = library(building_blocks=True)
    if not every:
        raise ModelcError(f"the bundled model library ({spec_dir()}) holds no spec files; this "
                          "installation of modelc is incomplete")
    if name in every:
        return every[name]
    raise InputError(f"no bundled model named {name!r} (and no spec file of that name); the library's "
                     f"models: {', '.join(library())}")


def is_model_name(text: str) -> bool:
    """Whether ``text`` (not an existing file) reads as a bundled model's name rather than a path."""
    import os

    return not os.path.exists(text) and "/" not in text and os.sep not in text and \
        not text.endswith((".yaml", ".yml"))


def resolve(spec, model: str | None) -> tuple[object, str | None]:
    """``(spec path, model)`` for what a user names: a spec path with ``model`` as given, or a
    bundled model (its name or a :class:`LibraryModel`) with ``model`` its own name. A bundled model
    with ``model`` naming another is refused (it used to select that other model of the same file
    silently)."""
    import os

    if isinstance(spec, LibraryModel):
        found = spec
    else:
        text = os.fspath(spec)
        if not is_model_name(text):
            return spec, model
        found = bundled_spec(text)
    if model is not None and model != found.name:
        raise InputError(f"{found.name!r} names a bundled model, and the model asked for is {model!r}: "
                         f"give the bundled name alone, or the spec file ({found.path}) with the "
                         f"model of it you mean")
    return found.path, found.name
