"""``modelc.results``: results of runs, one ``.npz`` file or a distributed run's directory (see
:mod:`modelc.runtime.results`)."""
from __future__ import annotations

from modelc.runtime.results import Plan, Results, load

__all__ = ["load", "Results", "Plan"]
