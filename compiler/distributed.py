"""``modelc.distributed``: sharded runs under torchrun (see :mod:`modelc.runtime.distributed` and
docs/scale-out.md)."""
from __future__ import annotations

from modelc.runtime.distributed import Context, RankFailed, device_for_rank, init, run_history

__all__ = ["run_history", "RankFailed", "Context", "init", "device_for_rank"]
