"""Calibrate j2_voce_af (J2 plasticity, Voce isotropic + Armstrong-Frederick kinematic hardening)
to measured-style stress-strain curves with torch.optim.LBFGS. See docs/calibration.md.

Synthetic "experiments": four strain-controlled loadings (isochoric tension, cyclic
isochoric tension-compression, cyclic shear, uniaxial strain) run with known parameters, plus Gaussian noise on the stresses. A
*population* of materials — one parameter set per entry of a named ``samples`` dim — is fitted in
one batched history per iteration: every model call evaluates all points of all samples at once,
and the gradient of the loss reaches every sample's parameters through the whole history (exact
per-step derivatives, the implicit-function theorem inside each step; modelc.runtime.simulate).

    python examples/calibrate_j2_voce_af.py                 # 4 x 120 steps, 2 samples, plot
    python examples/calibrate_j2_voce_af.py --steps 20      # short (what the test suite runs)
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

from modelc.generated import j2_voce_af
from modelc.runtime import TypedTensor, simulate

NAMES = ("E", "nu", "sigma_y", "R", "d", "C", "g")
#: the parameters that made the data, one column per sample
TRUE = {"E": (200e3, 150e3), "nu": (0.30, 0.33), "sigma_y": (100.0, 160.0), "R": (50.0, 80.0),
        "d": (20.0, 10.0), "C": (10e3, 5e3), "g": (100.0, 60.0)}
#: where the fit starts, for every sample: a factor 1.5-3 from the answer
START = {"E": 100e3, "nu": 0.25, "sigma_y": 300.0, "R": 150.0, "d": 5.0, "C": 30e3, "g": 300.0}
LOADINGS = ("isochoric tension", "cyclic isochoric tension-compression", "cyclic shear", "uniaxial strain")
ISOCHORIC = torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0], dtype=torch.float64)


def histories(steps: int) -> dict[str, torch.Tensor]:
    """time (steps, 4) and Mandel strain (steps, 4, 6) of the four loadings: three that probe the
    deviatoric response (hardening, Bauschinger effect) and one with a volumetric part (the bulk
    modulus, so that E and nu are both identifiable)."""
    t = torch.linspace(0.0, 1.0, steps, dtype=torch.float64)
    strain = torch.zeros(steps, 4, 6, dtype=torch.float64)
    strain[:, 0] = 0.2 * t[:, None] * ISOCHORIC  # to ep ~ 0.2: the Voce saturation shows
    strain[:, 1] = 0.02 * torch.sin(3 * math.pi * t)[:, None] * ISOCHORIC
    strain[:, 2, 5] = math.sqrt(2) * 0.01 * torch.sin(2 * math.pi * t)  # Mandel: sqrt 2 * eps_xy
    strain[:, 3, 0] = 0.004 * t
    return {"time": t[:, None].expand(steps, 4).numpy().copy(), "strain": strain.numpy()}


def samples(values) -> TypedTensor:
    """One value per sample, batched over the named ``samples`` dim."""
    return TypedTensor(torch.as_tensor(values, dtype=torch.float64), "Scalar", batch_names=("samples",))


def stresses(model, hist, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """Stress (steps, points, samples, 6) for parameters of shape (samples,)."""
    out = simulate(model, hist, params={k: samples(v) if v.dim() else v for k, v in params.items()})
    if not bool(out["converged"].all()):
        raise RuntimeError("a point did not converge")
    return out["state/S"]


def to_nu(start: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Poisson's ratio from an unconstrained variable: -1 + 1.5 sigmoid(logit((start + 1) / 1.5) +
    theta), inside (-1, 0.5) whatever theta is, ``start`` at theta = 0."""
    u = (start + 1.0) / 1.5
    return -1.0 + 1.5 * torch.sigmoid(torch.log(u / (1.0 - u)) + theta)


def calibrate(steps: int = 120, noise: float = 1.0, iterations: int = 150, seed: int = 0,
              verbose: bool = True) -> dict:
    model = j2_voce_af.Model(dtype=torch.float64)  # the C backend on the CPU
    hist = histories(steps)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        clean = stresses(model, hist, {k: torch.tensor(TRUE[k]) for k in NAMES})
        data = clean + noise * torch.randn(clean.shape, generator=gen, dtype=torch.float64)
    n = len(TRUE["E"])
    start = {k: torch.full((n,), START[k], dtype=torch.float64) for k in NAMES}
    # unconstrained variables of order 1 for the optimiser, mapped onto each parameter's bounds
    # (Model.PARAMETERS: a value outside them is refused): logarithms for the positive ones, a
    # logistic map onto (-1, 0.5) for nu (a line search tries long steps: nu = 0.25 exp(theta) had
    # reached 2.5)
    theta = {k: torch.zeros(n, dtype=torch.float64, requires_grad=True) for k in NAMES}
    opt = torch.optim.LBFGS(list(theta.values()), lr=1.0, max_iter=iterations, history_size=20,
                            tolerance_grad=1e-12, tolerance_change=1e-14, line_search_fn="strong_wolfe")
    # every curve weighs the same: residuals relative to the curve's largest stress
    scale = data.abs().amax(dim=(0, 3), keepdim=True)  # (1, loadings, samples, 1)
    calls, trace = [0], []

    def params():
        return {k: to_nu(start[k], theta[k]) if k == "nu" else start[k] * torch.exp(theta[k]) for k in NAMES}

    def closure():
        opt.zero_grad()
        loss = ((stresses(model, hist, params()) - data) / scale).square().mean()
        loss.backward()
        calls[0] += 1
        trace.append(float(loss.detach()))
        return loss

    t0 = time.perf_counter()
    opt.step(closure)
    elapsed = time.perf_counter() - t0
    with torch.no_grad():
        fitted = {k: v.clone() for k, v in params().items()}
        fit = stresses(model, hist, fitted)
    errors = {k: ((fitted[k] - torch.tensor(TRUE[k])) / torch.tensor(TRUE[k])).abs() for k in NAMES}
    if verbose:
        print(f"{calls[0]} loss and gradient evaluations in {elapsed:.1f} s; loss {trace[0]:.3e} -> "
              f"{trace[-1]:.3e} (the noise alone: {float(((data - clean) / scale).square().mean()):.3e})")
        print(f"{'parameter':>10} " + " ".join(f"{'sample ' + str(s) + ': true':>16} {'fit':>10} {'error':>7}"
                                                for s in range(n)))
        for k in NAMES:
            print(f"{k:>10} " + " ".join(f"{TRUE[k][s]:16.6g} {float(fitted[k][s]):10.6g} "
                                         f"{100 * float(errors[k][s]):6.2f}%" for s in range(n)))
    return {"fitted": fitted, "errors": errors, "data": data, "fit": fit, "hist": hist, "calls": calls[0],
            "seconds": elapsed, "trace": trace}


def plot(result: dict, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist, data, fit = result["hist"], result["data"], result["fit"]
    n = data.shape[2]
    comps = ((0, 0, "xx"), (1, 0, "xx"), (2, 5, "xy"), (3, 0, "xx"))
    fig, axes = plt.subplots(n, 4, figsize=(18, 4 * n), layout="constrained", squeeze=False)
    for s in range(n):
        for j, (p, c, lab) in enumerate(comps):
            ax = axes[s, j]
            f = 1 / math.sqrt(2) if c >= 3 else 1.0  # Mandel shear -> tensor component
            x = hist["strain"][:, p, c] * f
            ax.plot(x, data[:, p, s, c] * f, ".", ms=3, color="0.5", label="data (noisy)")
            ax.plot(x, fit[:, p, s, c] * f, "-", color=f"C{s}", lw=1.6, label="fit")
            ax.set_title(f"sample {s}: {LOADINGS[p]}")
            ax.set_xlabel(rf"strain $\varepsilon_{{{lab}}}$")
            ax.set_ylabel(rf"stress $\sigma_{{{lab}}}$ [MPa]")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle("j2_voce_af calibrated with L-BFGS through modelc (exact gradients through the history)")
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=120, help="steps per loading history")
    ap.add_argument("--noise", type=float, default=1.0, help="standard deviation of the stress noise [MPa]")
    ap.add_argument("--iterations", type=int, default=150, help="L-BFGS iterations at most (it stops on its own tolerances)")
    ap.add_argument("--plot", default="calibration.png", help="where to draw data vs fit ('' for none)")
    args = ap.parse_args(argv)
    result = calibrate(args.steps, args.noise, args.iterations)
    if args.plot:
        print(f"plot: {plot(result, args.plot)}")
    worst = max(float(e.max()) for e in result["errors"].values())
    print(f"largest parameter error: {100 * worst:.3f}%")
    return 0 if worst < 0.01 else 1


if __name__ == "__main__":
    raise SystemExit(main())
