"""Value checks at the call boundary: parameter bounds, finite parameters, non-finite inputs.

A parameter's ``bounds`` (declared in the spec, see docs/spec.md) is an interval written
``[lo, hi]``, ``(lo, hi)``, ``[lo, hi)`` or ``(lo, hi]`` (``inf`` / ``-inf`` for no bound, always
with an open end). :class:`Interval` parses it (the compiler uses the same parser, so a spec and a
generated module agree) and checks values. Every parameter value must be finite, bounds or not:
a NaN parameter makes every comparison false, which a yield condition reads as "elastic", a
plausible and wrong answer.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelc.runtime.errors import InputError

if TYPE_CHECKING:  # the compiler parses bounds with Interval and never needs torch
    import torch

_NUM = r"[-+]?(?:inf|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_INTERVAL = re.compile(rf"\s*([\[(])\s*({_NUM})\s*,\s*({_NUM})\s*([\])])\s*")


@dataclass(frozen=True, slots=True)
class Interval:
    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool

    @classmethod
    def parse(cls, text: str) -> "Interval":
        """``"[0, 0.5)"`` -> Interval; ValueError with the reason otherwise."""
        m = _INTERVAL.fullmatch(text)
        if m is None:
            raise ValueError(f"bounds {text!r} is not an interval such as [0, 0.5) or (0, inf)")
        lo, hi = float(m.group(2)), float(m.group(3))
        for text_end, v in ((m.group(2), lo), (m.group(3), hi)):
            if math.isinf(v) and "inf" not in text_end.lower():  # 1e400: beyond float64, not "inf"
                raise ValueError(f"bounds {text!r}: {text_end} is beyond the largest float64 "
                                 "(1.797e308); write inf for no bound")
        lo_closed, hi_closed = m.group(1) == "[", m.group(4) == "]"
        if (lo_closed and math.isinf(lo)) or (hi_closed and math.isinf(hi)):
            raise ValueError(f"bounds {text!r}: an infinite end is open, e.g. (0, inf)")
        if math.isinf(lo) and lo > 0 or math.isinf(hi) and hi < 0:
            raise ValueError(f"bounds {text!r}: the lower end is -inf or finite, the upper end inf or finite")
        if not (lo < hi or (lo == hi and lo_closed and hi_closed)):
            raise ValueError(f"bounds {text!r} is empty: its lower end must be below its upper end")
        return cls(lo, hi, lo_closed, hi_closed)

    def __str__(self) -> str:
        def num(x: float) -> str:
            return ("-inf" if x < 0 else "inf") if math.isinf(x) else f"{x:g}"
        return f"{'[' if self.lo_closed else '('}{num(self.lo)}, {num(self.hi)}{']' if self.hi_closed else ')'}"

    def inside(self, v: torch.Tensor) -> torch.Tensor:
        """Elementwise: is ``v`` in the interval."""
        lo_ok = v >= self.lo if self.lo_closed else v > self.lo
        hi_ok = v <= self.hi if self.hi_closed else v < self.hi
        return lo_ok & hi_ok

    def contains(self, x: float) -> bool:
        return bool(self.inside(float(x)))


def check_parameter(model: str, name: str, v: "torch.Tensor", bounds: str = "") -> None:
    """Refuse a non-finite value of parameter ``name``, or one outside its ``bounds``; the error
    names the parameter, the first bad value and (for a batched parameter) where it is."""
    import torch

    if v.device.type == "meta":  # shapes only: no values to check
        return
    ok = torch.isfinite(v)
    what = "is not finite"
    if bool(ok.all()) and bounds:
        ok = Interval.parse(bounds).inside(v)
        what = f"is outside its bounds {bounds}"
    if bool(ok.all()):
        return
    bad = torch.nonzero(~ok)[0].tolist()
    value = v[tuple(bad)].item() if v.dim() else v.item()
    at = f" (at index {tuple(bad)})" if v.numel() > 1 else ""
    raise InputError(f"model {model}: parameter {name} = {value!r}{at} {what}")


def nonfinite_rows(X: "torch.Tensor") -> "torch.Tensor | None":
    """The rows of ``X (B, n)`` holding a NaN or an infinity, as a bool mask, or None when every
    value is finite (the common case costs one sum over ``X``)."""
    import torch

    if X.numel() == 0 or bool(torch.isfinite(X.sum())):
        return None
    bad = ~torch.isfinite(X).all(dim=1)
    return bad if bool(bad.any()) else None
