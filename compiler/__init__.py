"""modelc: a compiler for material (constitutive) models.

The repository folder ``compiler/`` is installed as the package ``modelc``; ``runtime/`` as
``modelc.runtime``. See docs/ for the spec language, the user guide and the architecture.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load"]


def load(path, model=None, **options):
    """Compile ``model`` of the spec at ``path`` once (cached, see :mod:`modelc.cache`) and return the
    generated module; ``module.Model(dtype=..., device=..., **parameters)`` builds a runnable model."""
    from modelc.cache import load as _load

    return _load(path, model, **options)
