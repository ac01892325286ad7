"""The C backend's shared header, ``modelc_kernel.h`` (shipped beside this file): what every model's C
source has in common (vector exp/log/pow, the LU routine, loads and stores, the argument block), one
copy for all models. A generated source includes it by the line :data:`KERNEL_INCLUDE` and checks
``MC_KERNEL_ABI`` after it; :func:`standalone` writes the header's text in place of that line, which
is what :mod:`modelc.runtime.cbuild` hashes, compiles and keeps, and what ``modelc export`` ships.

Needs neither torch nor the compiler: the compiler (which must not import torch) reads the ABI
number here when it prints a source.
"""
from __future__ import annotations

import functools
from pathlib import Path

from modelc.runtime.errors import ModelcError

KERNEL_HEADER = Path(__file__).with_name("modelc_kernel.h")
KERNEL_INCLUDE = '#include "modelc_kernel.h"'


@functools.lru_cache(maxsize=1)
def kernel_header() -> str:
    """The text of ``modelc_kernel.h``."""
    try:
        return KERNEL_HEADER.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelcError(f"C backend: cannot read {KERNEL_HEADER} (a broken installation?): {exc}") from None


def kernel_abi() -> int:
    """``MC_KERNEL_ABI`` of the shipped header: a generated source checks it after the include."""
    for line in kernel_header().splitlines():
        if line.startswith("#define MC_KERNEL_ABI "):
            return int(line.split()[2])
    raise ModelcError(f"C backend: {KERNEL_HEADER} defines no MC_KERNEL_ABI (a broken installation?)")


def standalone(source: str) -> str:
    """``source`` with its line ``#include "modelc_kernel.h"`` replaced by the header's text (a
    changed header thus changes the text that is hashed and built). A source without that line is
    returned as it is."""
    line = KERNEL_INCLUDE + "\n"
    if line not in source:
        return source
    return source.replace(line, kernel_header(), 1)
