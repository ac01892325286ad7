"""Draw the figures of docs/zoo/*.md: each zoo model run through a uniaxial strain history by the
runtime driver (the compiled module, torch backend, float64), beside NEML2's reference where one exists.

    python examples/zoo_plots.py            # writes docs/zoo/chaboche.png, gtn.png, norton.png
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import modelc  # noqa: E402
from modelc.runtime.driver import run_history  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REF = REPO / "tests" / "reference" / "neml2"
OUT = REPO / "docs" / "zoo"


def _reference(name: str) -> tuple[dict, dict]:
    with np.load(REF / f"{name}__uniaxial.npz") as z:
        ref = {k: z[k] for k in z.files}
    return ref, {k: float(v) for k, v in json.loads(str(ref["params_json"])).items()}


def _run(model: str, ref: dict, params: dict):
    m = modelc.load(model).Model(dtype=torch.float64, backend="torch")
    out = run_history(m, {"time": ref["time"], "strain": ref["strain"]}, params=params, progress=False)
    assert out.ok, out.summary()
    return lambda name: np.asarray(out[name])


def chaboche() -> Path:
    ref, params = _reference("chaboche2_coupled")
    out = _run("chaboche2_coupled", ref, params)
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for p, c in ((0, "C0"), (3, "C1"), (4, "C2")):
        lab = f"A = {ref['strain'][:, p, 0].max():.3f}, T = {ref['time'][-1, p]:g} s"
        ax[0].plot(ref["strain"][:, p, 0], ref["stress"][:, p, 0], "o", ms=3, color=c, alpha=0.4)
        ax[0].plot(ref["strain"][:, p, 0], out("state/S")[:, p, 0], color=c, label=lab)
        ax[1].plot(ref["time"][:, p] / ref["time"][-1, p], out("state/internal/X1")[:, p, 0], color=c)
        ax[1].plot(ref["time"][:, p] / ref["time"][-1, p], out("state/internal/X2")[:, p, 0], "--", color=c)
    ax[0].set(xlabel="strain xx", ylabel="stress xx (MPa)", title="chaboche2_coupled (lines), NEML2 (dots)")
    ax[1].set(xlabel="t / T", ylabel="back stress xx (MPa)", title="X1 (solid, C1 = 10000, g1 = 100), X2 (dashed)")
    ax[0].legend(fontsize=8)
    return _save(fig, "chaboche.png")


def gtn() -> Path:
    ref, params = _reference("gtn")
    out = _run("gtn", ref, params)
    j2 = _run("gtn", ref, params | {"phi0": 0.0, "q1": 0.0, "q3": 0.0})  # no voids: von Mises
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for p, c in ((0, "C0"), (1, "C1"), (3, "C2")):
        ax[0].plot(ref["strain"][:, p, 0], out("state/S")[:, p, 0], color=c,
                   label=f"A = {ref['strain'][:, p, 0].max():.3f}")
        ax[0].plot(ref["strain"][:, p, 0], j2("state/S")[:, p, 0], ":", color=c)
        ax[0].plot(ref["strain"][:, p, 0], ref["stress"][:, p, 0], "o", ms=3, color=c, alpha=0.4)
        ax[1].plot(ref["time"][:, p] / ref["time"][-1, p], out("state/internal/phi")[:, p], color=c)
        ax[1].plot(ref["time"][:, p] / ref["time"][-1, p], ref["void_fraction"][:, p], "o", ms=3, color=c, alpha=0.4)
    ax[0].set(xlabel="strain xx (uniaxial strain)", ylabel="stress xx (MPa)",
              title="gtn (lines), NEML2 (dots), no voids (dotted)")
    ax[1].set(xlabel="t / T", ylabel="porosity phi", title="porosity from phi0 = 0.01")
    ax[0].legend(fontsize=8)
    return _save(fig, "gtn.png")


def norton() -> Path:
    """Stress relaxation at a held strain and constant-stress creep (the closed form as dots)."""
    E, nu, A, n = 200000.0, 0.3, 2.0e-15, 4.5
    params = {"E": E, "nu": nu, "A": A, "n": n}
    m = modelc.load("norton").Model(dtype=torch.float64, backend="torch")
    t = np.geomspace(1e-2, 1e5, 120)
    t = np.concatenate([[0.0], t])[:, None].repeat(3, axis=1)
    sig = np.array([60.0, 100.0, 150.0])
    cr, el = np.array([1.0, -0.5, -0.5, 0, 0, 0]), np.array([1.0, -nu, -nu, 0, 0, 0]) / E
    creep = sig[None, :, None] * el + (A * sig ** n)[None, :, None] * t[..., None] * cr
    creep[0] = 0
    hold = np.zeros_like(creep)
    hold[1:] = sig[None, :, None] * el  # the strain of sigma, held: the stress relaxes
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    oc = run_history(m, {"time": t, "strain": creep}, params=params, progress=False)
    oh = run_history(m, {"time": t, "strain": hold}, params=params, progress=False)
    for p, c in enumerate(("C0", "C1", "C2")):
        ax[0].loglog(t[1:, p], np.asarray(oc["state/internal/ep"])[1:, p], color=c, label=f"sigma = {sig[p]:g} MPa")
        ax[0].loglog(t[1::8, p], A * sig[p] ** n * t[1::8, p], "o", ms=3, color=c, alpha=0.5)
        ax[1].semilogx(t[1:, p], np.asarray(oh["state/S"])[1:, p, 0], color=c)
    ax[0].set(xlabel="t (s)", ylabel="equivalent creep strain", title="constant stress: model (lines), A sigma^n t (dots)")
    ax[1].set(xlabel="t (s)", ylabel="stress xx (MPa)", title="relaxation at the held strain sigma / E (uniaxial)")
    ax[0].legend(fontsize=8)
    return _save(fig, "norton.png")


def _save(fig, name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(OUT / name, dpi=100)
    plt.close(fig)
    return OUT / name


if __name__ == "__main__":
    for f in (chaboche, gtn, norton):
        print("wrote", f())
