"""The compile options: one frozen object, passed explicitly from the CLI or ``modelc.load`` through
the driver to emission (STYLE habit 13). Every field changes the generated text, so all of them
(and nothing else) go into the cache key (:func:`CompileOptions.cache_fields`)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from modelc.errors import ModelcError


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """What changes the generated module."""

    #: parameters baked into the kernels as compile-time constants (constexpr), sorted
    constant_params: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "constant_params", tuple(sorted(set(self.constant_params))))

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> "CompileOptions":
        """Options given by name (``modelc.load(..., constant_params=[...])``); an unknown name is
        an error listing the known ones."""
        known = {f.name for f in fields(cls)}
        bad = sorted(set(options) - known)
        if bad:
            raise ModelcError(f"unknown compile option(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
        values = {}
        for k, v in options.items():  # every option is a list of names today
            if isinstance(v, str):
                v = (v,)
            if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) and x for x in v):
                raise ModelcError(f"compile option {k}: expected a parameter name or a list of names, "
                                  f"got {v!r}")
            values[k] = tuple(v)
        return cls(**values)

    def cache_fields(self) -> dict[str, Any]:
        """The fields as plain data for the cache key (every field changes the output)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
