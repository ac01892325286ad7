"""modelc: a compiler for material (constitutive) models.

The repository folder ``compiler/`` is installed as the package ``modelc``; ``runtime/`` as
``modelc.runtime``. See docs/ for the spec language, the user guide and the architecture.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
