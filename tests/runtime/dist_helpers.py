"""Helpers for the scale-out tests: small fake models and the worker script torchrun launches.

Run as a script (``torchrun ... dist_helpers.py HISTORY OUT DELAY CHUNK [TIMEOUT]``) it writes its
pid to ``OUT.pid-RANK`` and drives :class:`SlowElastic` through HISTORY with
``modelc.distributed.run_history``; a ModelcError is printed (no traceback) with exit status 2.
"""
from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

import torch


class Status(SimpleNamespace):
    pass


class Out(dict):
    status = None


class SlowElastic:
    """sigma = E * eps (componentwise), ``delay`` seconds per call; a point whose |eps_xx| exceeds
    ``limit`` does not converge (so failures can be placed at known points and steps)."""

    NAME = "slow_elastic"
    input_names = ["forces/E"]
    input_types = {"forces/E": "SR2"}
    output_names = ["state/S", "state/internal/ep"]
    output_types = {"state/S": "SR2", "state/internal/ep": "Scalar"}

    def __init__(self, delay: float = 0.0, limit: float = float("inf")):
        self.parameters = {"E": SimpleNamespace(default=1000.0)}
        self.delay, self.limit = delay, limit
        self.dtype, self.device = torch.float64, torch.device("cpu")

    def __call__(self, inputs, derivatives=False, **params):
        if self.delay:
            time.sleep(self.delay)
        eps = inputs["forces/E"]
        E = params.get("E", torch.tensor(1000.0, dtype=eps.dtype))
        E = E.reshape(-1, 1) if E.dim() == 1 else E
        out = Out({"state/S": E * eps, "state/internal/ep": eps[:, 0] * eps[:, 0]})
        ok = eps[:, 0].abs() <= self.limit
        out.status = Status(converged=ok, iterations=torch.full_like(eps[:, 0], 2).long(),
                            residual_norm=torch.where(ok, 1e-12, 1.0).to(eps.dtype))
        return out


def main(argv: list[str]) -> int:
    from modelc.distributed import run_history
    from modelc.errors import ModelcError

    history, out, delay, chunk = argv[0], argv[1], float(argv[2]), int(argv[3])
    timeout = float(argv[4]) if len(argv) > 4 else 60.0
    with open(f"{out}.pid-{os.environ.get('RANK', '0')}", "w") as f:
        f.write(str(os.getpid()))
    try:
        res = run_history(SlowElastic(delay), history, out, chunk_steps=chunk, progress=False,
                          timeout=timeout)
    except ModelcError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(res.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
