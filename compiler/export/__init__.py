"""Exports for host codes: a C interface (header, source, layout file, ABI page) and an Abaqus-style
UMAT, both written from a spec by ``modelc export`` and usable without Python.

Both are a layer over the C backend: the C interface embeds its batched code
(:func:`modelc.backends.c_backend.c_source`: blocks of points in SIMD lanes, entry points made
static), the UMAT its per-point code (:func:`modelc.backends.c_backend.point_source`: one point per
call, as Abaqus calls it); this package only adds the argument blocks, the conversions a host needs
and the descriptions. :func:`prepare` compiles the model
(:class:`Exported`), :mod:`.c_interface` and :mod:`.umat` render the files.
"""
from __future__ import annotations

from modelc.export.model import Exported, VarSlot, prepare

__all__ = ["Exported", "VarSlot", "prepare"]
