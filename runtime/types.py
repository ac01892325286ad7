"""The tensor types modelc knows, as one table shared by the runtime and the compiler.

Every variable has one of these types. A type fixes the *base shape* (the trailing, logical
dimensions of a batched tensor) and the *storage size* (the number of scalar components it occupies
on a flat labeled axis). Symmetric tensors are stored in Mandel notation, in NEML2's order::

    SR2  = (xx, yy, zz, sqrt2*yz, sqrt2*xz, sqrt2*xy)

so that SR2:SR2 is a plain dot product and SSR4 acts on SR2 as a plain 6x6 matrix product.
The sqrt(2) factors themselves live in :mod:`modelc.runtime.mandel` (and its symbolic twin in the
compiler), nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor type: its name, base shape and storage size."""

    name: str
    base_shape: tuple[int, ...]
    doc: str

    @property
    def size(self) -> int:
        """Number of scalar components on a flat axis."""
        return prod(self.base_shape) if self.base_shape else 1

    @property
    def base_dim(self) -> int:
        return len(self.base_shape)

    def __str__(self) -> str:
        return self.name


Scalar = TensorType("Scalar", (), "a scalar")
Vec = TensorType("Vec", (3,), "a 3-vector")
SR2 = TensorType("SR2", (6,), "a symmetric 2nd-order tensor, Mandel (xx, yy, zz, s2*yz, s2*xz, s2*xy)")
R2 = TensorType("R2", (3, 3), "a full 2nd-order tensor, row-major 3x3")
SSR4 = TensorType("SSR4", (6, 6), "a 4th-order tensor with minor symmetries, 6x6 Mandel")
WR2 = TensorType("WR2", (3,), "a skew 2nd-order tensor, stored as its axial vector (w_zy, w_xz, w_yx)")

TYPES: dict[str, TensorType] = {t.name: t for t in (Scalar, Vec, SR2, R2, SSR4, WR2)}


def tensor_type(name: str) -> TensorType:
    """Look a type up by name; raises ``KeyError`` naming the known types."""
    try:
        return TYPES[name]
    except KeyError:
        raise KeyError(f"unknown tensor type {name!r}; known types: {', '.join(TYPES)}") from None
