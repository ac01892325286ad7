"""The plug-in point for modelc in the benchmark: fill in these functions once the compiler lands.

Contract (the same as benchmarks/baselines.py, so results compare directly):
``modelc_step(model_name, backend, dtype, device)`` returns ``step(E, dt, *old_state, tangent=bool)``
where ``E`` is (B, 6) Mandel strain, ``dt`` (B,), ``old_state`` the tensors named by
``baselines.STATE[model_name]`` (e.g. ``state/internal/Ep`` (B, 6), ``state/internal/ep`` (B,)), all of
``dtype`` on ``device``; it returns a tuple in the order of ``baselines.output_names(model_name, tangent)``:
stress, new internal state, gamma_rate (plastic models), and the (B, 6, 6) tangent when asked.
``model_name`` is one of ``baselines.MODELS`` (map it to the library spec); parameters are
``baselines.params_for(model_name)``. Until implemented, the benchmark skips modelc with a note.
"""

from __future__ import annotations

from typing import Callable

import torch


class ModelcUnavailable(RuntimeError):
    """modelc (or this backend of it) cannot be benchmarked here; the message says why."""


def modelc_backends(device: torch.device) -> list[str]:
    """modelc backends to benchmark on ``device`` (e.g. ["torch"] on CPU, ["triton", "torch"] on CUDA)."""
    return ["auto"]


def modelc_step(model_name: str, backend: str, dtype: torch.dtype, device: torch.device) -> Callable:
    """A compiled modelc model wrapped in the baseline calling convention (see module doc)."""
    raise ModelcUnavailable("modelc hook not implemented yet (benchmarks/modelc_hook.py: modelc_step)")


def modelc_compile(model_name: str, out_dir: str) -> dict[str, float]:
    """Compile the library spec of ``model_name`` into ``out_dir`` and import it.

    Returns {"compile_s": spec -> module written, "import_s": import of the module}; first-call latency
    is measured by the runner on the callable of ``modelc_step``.
    """
    raise ModelcUnavailable("modelc hook not implemented yet (benchmarks/modelc_hook.py: modelc_compile)")
