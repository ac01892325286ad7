"""modelc.runtime: labeled, batched tensors and what generated models import."""
from __future__ import annotations

from modelc.runtime.types import R2, SR2, SSR4, TYPES, WR2, Scalar, TensorType, Vec, tensor_type

__all__ = ["TensorType", "Scalar", "Vec", "SR2", "R2", "SSR4", "WR2", "TYPES", "tensor_type"]
