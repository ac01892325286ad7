"""modelc: a compiler for material (constitutive) models.

The repository folder ``compiler/`` is installed as the package ``modelc``; ``runtime/`` as
``modelc.runtime``. See docs/ for the spec language, the user guide and the architecture.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load", "library"]


def load(path, model=None, **options):
    """Compile ``model`` of the spec at ``path`` once (cached, see :mod:`modelc.cache`) and return the
    generated module; ``module.Model(dtype=..., device=..., **parameters)`` builds a runnable model.

    ``path`` may also be the name of a bundled library model (``modelc.load("j2_linear_iso")``) or
    one of :func:`library`'s entries (``modelc.load(modelc.library()["elastic"])``): then ``model``
    is that name (another name is an error)."""
    from modelc.bundled import resolve
    from modelc.cache import load as _load

    path, model = resolve(path, model)
    return _load(path, model, **options)


def library(*, building_blocks: bool = False):
    """The bundled models: ``{name: LibraryModel(name, path, doc, kind)}`` (the complete models; with
    ``building_blocks=True`` also the models they are composed of). ``modelc.load(name)`` compiles one."""
    from modelc.bundled import library as _library

    return _library(building_blocks=building_blocks)
