"""Moved: the linear-solve expansion is an IR-to-IR lowering, :mod:`modelc.passes.expand_solve`.
This name stays an alias of that module (code written against the old path keeps working)."""
import sys

from modelc.passes import expand_solve as _moved

sys.modules[__name__] = _moved
