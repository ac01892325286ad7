"""Moved: the reference interpreter lives in the IR package, :mod:`modelc.ir.interpret`. This name
stays an alias of that module (code and tests written against the old path keep working)."""
import sys

from modelc.ir import interpret as _moved

sys.modules[__name__] = _moved
