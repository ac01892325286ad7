"""Drive an NEML2 model (an input file built from NEML2's blocks) through the reference history and
save its results: the shared loop of the ``make_*.py`` scripts beside this file. Runs INSIDE the NEML2
venv (``bash benchmarks/setup_neml2.sh``).

The history is the other references' (time and strain of j2_voce_af__uniaxial.npz: 8 points x 100
steps, uniaxial strain); each step starts from the previous converged step (row 0: ``initial``, zero
unless given). Tangents d stress / d strain are recorded at the same steps, with central differences of
the one-step map (h = 1e-8) beside them.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.neml2_runner import EagerRoute, _block  # noqa: E402,F401  (_block: for the make_* scripts)

FD_H = 1e-8


def run_history(name: str, hit: str, state: dict[str, int], params: dict[str, float],
                initial: dict[str, float] | None = None, extra: tuple[str, ...] = ("flow_rate",)) -> Path:
    """Run ``hit`` (top model "model") over the history; ``state``: NEML2 state name -> components (1 or
    6), carried from step to step; ``extra``: more scalar outputs to record. Writes
    ``<name>__uniaxial.npz`` beside this file."""
    torch.set_default_dtype(torch.float64)
    hist = np.load(HERE / "j2_voce_af__uniaxial.npz")
    time, strain, tsteps = hist["time"], hist["strain"], hist["tangent_steps"]
    rows, batch = time.shape
    path = Path(tempfile.mkdtemp(prefix=f"neml2_{name}_")) / f"{name}.i"
    path.write_text(hit)
    route = EagerRoute(str(path), torch.float64, compiled=False)
    print("inputs:", route.input_names, file=sys.stderr)
    T = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64)  # noqa: E731
    shape = lambda n: (rows, batch) + ((n,) if n > 1 else ())  # noqa: E731
    out = {"stress": np.zeros(shape(6))} | {k: np.zeros(shape(n)) for k, n in state.items()}
    out |= {k: np.zeros(shape(1)) for k in extra}
    for k, v in (initial or {}).items():
        out[k][0] = v
    tangents, fds = [], []

    def inputs(n: int, eps: np.ndarray, k: int = 1) -> dict[str, torch.Tensor]:
        vals = {"strain": T(eps), "t": T(np.tile(time[n], k)), "t~1": T(np.tile(time[n - 1], k))}
        for s in tuple(state) + extra:  # an extra output's old value is a predictor's guess (flow_rate~1)
            if s in state or s + "~1" in route.input_names:
                vals[s + "~1"] = T(np.concatenate([out[s][n - 1]] * k))
        missing = set(route.input_names) - set(vals)
        assert not missing, f"NEML2 asks for inputs this driver does not provide: {missing}"
        return {k_: vals[k_] for k_ in route.input_names}

    for n in range(1, rows):
        want_tangent = n in tsteps
        res = route(inputs(n, strain[n]), want_tangent)
        if n == 1:
            print("outputs:", sorted(res), file=sys.stderr)
        for k in out:
            out[k][n] = res[k].numpy().reshape(out[k][n].shape)
        if want_tangent:
            tangents.append(res["tangent"].numpy().reshape(batch, 6, 6))
            eye = np.eye(6) * FD_H
            big = np.concatenate([strain[n] + eye[j] for j in range(6)] + [strain[n] - eye[j] for j in range(6)])
            S = route(inputs(n, big, 12), False)["stress"].numpy().reshape(12, batch, 6)
            fds.append(np.stack([(S[j] - S[6 + j]) / (2 * FD_H) for j in range(6)], axis=-1))
    import neml2

    dest = HERE / f"{name}__uniaxial.npz"
    np.savez_compressed(dest, time=time, strain=strain, **out, tangent=np.stack(tangents),
                        tangent_fd=np.stack(fds), tangent_steps=tsteps,
                        params_json=json.dumps(params), **{f"param_{k}": v for k, v in params.items()},
                        neml2_version=str(getattr(neml2, "__version__", "?")), torch_version=torch.__version__)
    t, fd = np.stack(tangents), np.stack(fds)
    print(f"wrote {dest}; max |stress| {np.abs(out['stress']).max():.3f} MPa, "
          + ", ".join(f"{k} in [{out[k].min():.3e}, {out[k].max():.3e}]" for k in state)
          + f", tangent vs FD {np.abs(t - fd).max() / np.abs(t).max():.2e}", file=sys.stderr)
    return dest
