"""The front end: spec YAML -> typed Model IR (:class:`modelc.ir.Spec`).

Modules: ``yamlio`` (safe YAML with line marks), ``schema`` (the spec's fields as data), ``expr``
(whitelisted ``ast`` parsing and the expression builder), ``tensor`` (typed symbolic tensor algebra
and Einstein notation), ``model`` (one model), ``load`` (files, includes, compositions), ``dump``
(readable stage text). The entry point is :func:`load_spec`.
"""
from __future__ import annotations

from modelc.frontend.load import load_spec

__all__ = ["load_spec"]
