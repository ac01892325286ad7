"""Exports for host codes: a C interface (header, source, layout file, ABI page) and an Abaqus-style
UMAT, both written from a spec by ``modelc export`` and usable without Python.

Both are a layer over the C backend: :func:`modelc.backends.c_backend.point_source` gives the
per-point C code (value, and value + the tangent d stress / d strain); this package only adds the
batch loops, the conversions a host needs and the descriptions. :func:`prepare` compiles the model
(:class:`Exported`), :mod:`.c_interface` and :mod:`.umat` render the files.
"""
from __future__ import annotations

from modelc.export.model import Exported, VarSlot, prepare

__all__ = ["Exported", "VarSlot", "prepare"]
