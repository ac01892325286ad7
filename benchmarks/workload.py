"""Benchmark inputs: realistic one-step problems taken from the reference uniaxial histories.

Needs only torch and numpy, so both the main process and the NEML2 venv subprocess import it.

The pool for a model is every step of the reference history (8 points x 100 steps = 800 problems:
new strain, dt, and the converged old state of the previous step), a realistic mix of elastic
loading, plastic flow, unloading and reversal at slow and fast rates. The history is the one of
shared/reference/neml2/README.md, rebuilt here and driven by the hand-written baseline (which the
tests check against NEML2's arrays). A batch of B points tiles the pool.
"""

from __future__ import annotations

import numpy as np
import torch

from . import baselines as bl

AMPLITUDES = (0.005, 0.01, 0.015, 0.02, 0.01, 0.01, 0.01, 0.01)
TOTAL_TIMES = (10.0, 10.0, 10.0, 10.0, 0.1, 1.0, 100.0, 1000.0)
STEPS = 100


def uniaxial_history(dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference uniaxial-strain history: strain (101, 8, 6) and time (101, 8)."""
    i = np.arange(STEPS + 1, dtype=np.float64)
    shape = np.interp(i, [0, 25, 75, 100], [0.0, 1.0, -1.0, 0.0])
    strain = np.zeros((STEPS + 1, len(AMPLITUDES), 6))
    strain[:, :, 0] = shape[:, None] * np.asarray(AMPLITUDES)[None, :]
    time = i[:, None] * (np.asarray(TOTAL_TIMES)[None, :] / STEPS)
    return torch.tensor(strain, dtype=dtype), torch.tensor(time, dtype=dtype)


def pool(model: str, params: dict[str, float] | None = None) -> dict[str, torch.Tensor]:
    """All (step) problems of the history, float64: {"forces/E", "dt", old-state names, "old_gamma_rate"}."""
    strain, time = uniaxial_history()
    hist = bl.run_history(model, strain, time, params)
    out = {bl.STRAIN: strain[1:].reshape(-1, 6), "dt": (time[1:] - time[:-1]).reshape(-1)}
    for name in bl.STATE[model]:
        out[name] = hist[name][:-1].reshape(-1, *bl.SHAPES[name])
    if bl.GAMMA in hist:  # NEML2's predictor starts from the previous flow rate
        out["old_gamma_rate"] = hist[bl.GAMMA][:-1].reshape(-1)
    return out


def batch(p: dict[str, torch.Tensor], size: int, dtype: torch.dtype, device: str | torch.device = "cpu",
          offset: int = 0) -> dict[str, torch.Tensor]:
    """``size`` points tiled from the pool (starting at ``offset``, so rotated copies differ)."""
    n = next(iter(p.values())).shape[0]
    idx = (torch.arange(size) + offset) % n
    return {k: v[idx].to(dtype=dtype, device=device).contiguous() for k, v in p.items()}


def args_of(model: str, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Positional arguments of a baseline-convention step: (E, dt, *old_state)."""
    return (b[bl.STRAIN], b["dt"], *(b[n] for n in bl.STATE[model]))


def bytes_per_point(model: str, tangent: bool, dtype: torch.dtype) -> int:
    """Bytes that must move per point: every input read once, every output written once."""
    size = torch.empty((), dtype=dtype).element_size()
    ins = 6 + 1 + sum(int(np.prod(bl.SHAPES[n])) for n in bl.STATE[model])
    outs = sum(int(np.prod(bl.SHAPES.get(n, (6, 6)))) for n in bl.output_names(model, tangent))
    return (ins + outs) * size
