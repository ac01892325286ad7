"""Run-time Newton options of a generated model: tolerances and the iteration limit.

The spec gives each implicit model's defaults (``solver: {rtol, atol, max_iter}``); a caller may
override them per model object (``Model(..., rtol=1e-12)``, :meth:`CompiledModel.set_solver`) and per
call (``m(inputs, solver={"max_iter": 50})``; a call's values win over the object's). The generated code
takes them as one triple ``(rtol, atol, max_iter)`` in which a negative entry means "the spec's value
for this solve" (:data:`SPEC`), so a model with several Newton solves keeps each solve's own defaults
for what is not overridden. The relative tolerance is still floored at a few ulps of the dtype (a
float64 tolerance cannot be met in float32; see ``ir.Newton``).

Example::

    m = Model(rtol=1e-12, max_iter=40)          # every call of this object
    r = m(inputs, solver={"atol": 1e-14})       # this call: rtol 1e-12, atol 1e-14, max_iter 40
    m.solver_info()                             # what a call uses now, and where each value comes from
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

from modelc.runtime.errors import InputError

KEYS = ("rtol", "atol", "max_iter")
#: the triple that keeps every spec default
SPEC = (-1.0, -1.0, -1)


def check(options: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """``options`` validated: only :data:`KEYS`, tolerances finite and >= 0, ``max_iter`` an integer
    >= 0; None values are dropped (the default applies). An :class:`InputError` naming ``where``
    and the offending entry otherwise."""
    out: dict[str, Any] = {}
    for key, value in dict(options or {}).items():
        if key not in KEYS:
            raise InputError(f"{where}: unknown Newton option {key!r}; the options are {', '.join(KEYS)}")
        if value is None:
            continue
        if key == "max_iter":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise InputError(f"{where}: max_iter must be an integer >= 0, got {value!r}")
            out[key] = int(value)
        else:
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                    or value < 0:
                raise InputError(f"{where}: {key} must be a finite number >= 0, got {value!r}")
            out[key] = float(value)
    return out


def triple(options: Mapping[str, Any]) -> tuple[float, float, int]:
    """The ``(rtol, atol, max_iter)`` the generated code takes (negative: the spec's value)."""
    return (float(options.get("rtol", -1.0)), float(options.get("atol", -1.0)), int(options.get("max_iter", -1)))


def info(spec: Mapping[str, Any], model: Mapping[str, Any], call: Mapping[str, Any]) -> dict[str, Any]:
    """Each option's value and where it comes from (``spec``, ``model`` or ``call``): what a run records."""
    out: dict[str, Any] = {}
    for key in KEYS:
        for source, values in (("call", call), ("model", model), ("spec", spec)):
            if key in values:
                out[key] = {"value": values[key], "from": source}
                break
    return out
