"""modelc.runtime: labeled, batched tensors and what generated models import.

The runtime stands alone: it never imports the compiler (``modelc.frontend``, ``modelc.passes``,
``modelc.backends``, ``modelc.ir``) nor SymPy; the base errors (:mod:`modelc.runtime.errors`) and path
helpers (:mod:`modelc.runtime.paths`) live here and the compiler builds on them. Only the type table is
imported eagerly; everything else loads on first use (PEP 562).
"""
from __future__ import annotations

import importlib

from modelc.runtime.types import R2, SR2, SSR4, TYPES, WR2, Scalar, TensorType, Vec, tensor_type

_LAZY = {
    "mandel": ("modelc.runtime.mandel", None),
    "TypedTensor": ("modelc.runtime.tensors", "TypedTensor"),
    "align": ("modelc.runtime.tensors", "align"),
    "broadcast_batch": ("modelc.runtime.tensors", "broadcast_batch"),
    "LabeledAxis": ("modelc.runtime.axis", "LabeledAxis"),
    "Entry": ("modelc.runtime.axis", "Entry"),
    "check_label": ("modelc.runtime.axis", "check_label"),
    "LabeledTensor": ("modelc.runtime.labeled", "LabeledTensor"),
    "LabeledVector": ("modelc.runtime.labeled", "LabeledVector"),
    "LabeledMatrix": ("modelc.runtime.labeled", "LabeledMatrix"),
    "simulate": ("modelc.runtime.history_grad", "simulate"),
}

__all__ = ["TensorType", "Scalar", "Vec", "SR2", "R2", "SSR4", "WR2", "TYPES", "tensor_type", *_LAZY]


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'modelc.runtime' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
