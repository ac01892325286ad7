"""Draw the figures of docs/zoo/*.md: each zoo model run through a uniaxial strain history by the
runtime driver (the compiled module, torch backend, float64), beside NEML2's reference where one exists.

    python examples/zoo_plots.py            # writes docs/zoo/chaboche.png, gtn.png, norton.png, drucker_prager.png,
                                            # thermo_j2.png
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


def drucker_prager() -> Path:
    """Simple shear at a held volume after a hydrostatic compression: dilatancy (eta_bar) against the
    held volume builds up pressure, so the shear stress keeps rising; and a hydrostatic tension
    that ends at the apex of the cone."""
    m = modelc.load(REPO / "docs" / "zoo" / "drucker_prager.yaml", "drucker_prager").Model(
        dtype=torch.float64, backend="torch")
    P = {"E": 200000.0, "nu": 0.3, "eta": 0.6, "xi": 1.0, "c0": 100.0, "Q": 50.0, "b": 20.0}
    K, steps = P["E"] / (3 * (1 - 2 * P["nu"])), 200
    eta_bar = np.array([0.0, 0.15, 0.3, 0.6])  # 0.6 = eta: associated flow
    gam = np.linspace(0.0, 1e-2, steps + 1)
    strain = np.zeros((steps + 1, len(eta_bar), 6))
    strain[1:, :, :3] = -2e-4  # p = 3 K tr / 3 = -100 MPa, elastic
    strain[:, :, 5] = np.sqrt(2) * gam[:, None] / 2  # Mandel xy of the engineering shear gamma
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for k, c in enumerate(("C0", "C1", "C2", "C3")):
        out = run_history(m, {"time": np.arange(steps + 1.0)[:, None], "strain": strain[:, k:k + 1]},
                          params=P | {"eta_bar": float(eta_bar[k])}, progress=False)
        S = np.asarray(out["state/S"])[:, 0]
        p, q = S[:, :3].mean(axis=1), np.sqrt(0.5 * np.sum((S - S[:, :3].mean(axis=1, keepdims=True)
                                                            * np.array([1, 1, 1, 0, 0, 0])) ** 2, axis=1))
        lab = f"eta_bar = {eta_bar[k]:g}" + (" (associated)" if eta_bar[k] == P["eta"] else "")
        ax[0].plot(gam, S[:, 5] / np.sqrt(2), color=c, label=lab)
        ax[1].plot(p, q, color=c)
    # hydrostatic tension to the apex, then sheared there: the stress stays at the apex
    t_steps = 60
    ten = np.zeros((t_steps + 1, 1, 6))
    ten[:, 0, :3] = np.linspace(0.0, 1.5e-3, t_steps + 1)[:, None]
    ten[40:, 0, 5] = np.linspace(0.0, 2e-3, t_steps - 39)
    out = run_history(m, {"time": np.arange(t_steps + 1.0)[:, None], "strain": ten}, params=P | {"eta_bar": 0.3},
                      progress=False)
    S = np.asarray(out["state/S"])[:, 0]
    p = S[:, :3].mean(axis=1)
    q = np.sqrt(0.5 * np.sum((S - p[:, None] * np.array([1, 1, 1, 0, 0, 0])) ** 2, axis=1))
    ax[1].plot(p, q, "k--", label="tension to the apex, then shear")
    for c_, ls in ((P["c0"], ":"), (P["c0"] + P["Q"], "-.")):  # sqrt(J2) + eta p = xi c, xi = 1
        pp = np.linspace(-700, c_ / P["eta"], 50)
        ax[1].plot(pp, c_ - P["eta"] * pp, "k", ls=ls, lw=0.8)
    ax[0].set(xlabel="engineering shear strain gamma_xy", ylabel="shear stress xy (MPa)",
              title="simple shear at held volume after p = -100 MPa")
    ax[1].set(xlabel="p = tr(S)/3 (MPa)", ylabel="sqrt(J2) (MPa)",
              title="stress paths; cones of c0 (dotted), c0 + Q (dash-dot)")
    ax[0].legend(fontsize=8)
    ax[1].legend(fontsize=8)
    return _save(fig, "drucker_prager.png")


def thermo_j2() -> Path:
    """The tables (modulus and yield stress in the temperature), and a bar held at zero axial strain,
    free laterally, heated and cooled: the thermal stress meets the falling yield stress on heating
    and the reversed one on cooling, leaving a residual tension."""
    spec = REPO / "docs" / "zoo" / "thermo_j2.yaml"
    m = modelc.load(spec, "thermo_j2_return").Model(dtype=torch.float64, backend="torch")
    P = {p.name: p.default[0] for p in m.PARAMETERS}  # (a default is its flat components)
    knots = np.array([293.0, 573.0, 773.0, 973.0])
    T = np.linspace(250.0, 1050.0, 400)
    E = np.interp(T, knots, [P[f"E_{int(k)}"] for k in knots])
    sy = np.interp(T, knots, [P[f"sy_{int(k)}"] for k in knots])
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot(T, E / 1e3, "C0", label="E (GPa)")
    ax[0].plot(knots, [P[f"E_{int(k)}"] / 1e3 for k in knots], "C0o")
    ax[0].plot(T, sy, "C1", label="yield stress (MPa)")
    ax[0].plot(knots, [P[f"sy_{int(k)}"] for k in knots], "C1o")
    ax[0].set(xlabel="temperature (K)", title="the tables: interp(T, knots, values)")
    ax[0].legend(fontsize=8)
    steps = 200
    t = np.linspace(0.0, 1.0, steps + 1)
    tops = (523.0, 723.0, 923.0)
    temp = 293.0 + np.stack([(top - 293.0) * np.interp(t, [0, 0.5, 1], [0, 1, 0]) for top in tops], axis=1)
    out = run_history(m, {"time": np.stack([t] * len(tops), axis=1), "strain": np.zeros((steps + 1, len(tops), 6)),
                          "stress": np.zeros((steps + 1, len(tops), 6)), "temperature": temp,
                          "control": np.array([0, 1, 1, 1, 1, 1], bool)}, progress=False)
    assert out.ok, out.summary()
    S = np.asarray(out["stress"])
    for k, top in enumerate(tops):
        ax[1].plot(temp[:, k], S[:, k, 0], f"C{k + 2}", label=f"heated to {top:g} K and cooled")
    ax[1].plot(T, sy, "k:", lw=0.8, label="+- yield stress (unhardened)")
    ax[1].plot(T, -sy, "k:", lw=0.8)
    ax[1].set(xlabel="temperature (K)", ylabel="axial stress (MPa)", xlim=(250, 1000),
              title="bar held at zero axial strain, heated and cooled")
    ax[1].legend(fontsize=8)
    return _save(fig, "thermo_j2.png")


def _save(fig, name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(OUT / name, dpi=100)
    plt.close(fig)
    return OUT / name


if __name__ == "__main__":
    for f in (chaboche, gtn, norton, drucker_prager, thermo_j2):
        print("wrote", f())
