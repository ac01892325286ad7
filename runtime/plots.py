"""Plots of driver results: stress-strain curves (hysteresis loops), stress and equivalent plastic
strain against time. matplotlib (the ``plot`` extra) is imported only here, with the Agg backend."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping

import numpy as np

from modelc.runtime.errors import InputError

__all__ = ["plot_results"]

_COMPONENTS = ("xx", "yy", "zz", "yz", "xz", "xy")


def _colors(plt, batch: int):
    """Qualitative colours that tell points apart (tab10, then tab20), else a colormap."""
    if batch <= 10:
        return plt.get_cmap("tab10").colors[:batch]
    if batch <= 20:
        return plt.get_cmap("tab20").colors[:batch]
    return plt.get_cmap("viridis")(np.linspace(0.0, 0.9, batch))


def plot_results(results: Mapping[str, np.ndarray], path: "str | os.PathLike[str]", *,
                 title: str | None = None, component: int = 0, stress_units: str | None = None,
                 time_units: str = "s") -> Path:
    """Stress-strain curves of one component (one line per point: a cycle draws its hysteresis
    loop), that stress against time, and the equivalent plastic strain against time when there is
    one (else the strain against time). Shear components are plotted as tensor components (the
    Mandel sqrt 2 removed). ``stress_units`` labels the stress axes (e.g. "MPa"). Written with
    matplotlib's Agg backend (.png, .svg or .pdf from the file name)."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install 'modelc[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(component, bool) or not isinstance(component, int) or not -6 <= component < 6:
        raise InputError(f"plot_results: component must be 0 to 5 (Mandel order xx, yy, zz, yz, xz, xy), "
                         f"got {component!r}")
    component %= 6  # -1 is xy, as for a list
    for key in ("strain", "stress", "time"):
        if key not in results:
            raise InputError(f"plot_results: the results have no {key!r} (a driver run's results: "
                             "time, strain, stress)")
    comp = _COMPONENTS[component]
    strain, stress = results["strain"][..., component], results["stress"][..., component]
    if component >= 3:  # Mandel shear carries sqrt 2: plot the tensor components
        strain, stress = strain / math.sqrt(2.0), stress / math.sqrt(2.0)
    time = results["time"]
    batch = strain.shape[1]
    labels = [str(x) for x in results.get("labels", [f"point {i}" for i in range(batch)])]
    conv = results.get("converged", np.ones(time.shape, dtype=bool))
    colors = _colors(plt, batch)
    # later points are drawn thinner and dashed on top of earlier ones: curves that coincide (the
    # same amplitude at another rate of a rate-independent model) stay visible
    widths = np.linspace(2.8, 1.2, batch) if batch > 1 else [1.6]
    styles = ["-", (0, (5, 2))]
    first_bad = np.where(conv.all(axis=0), 0, np.argmin(conv, axis=0))  # 0: never failed
    s_unit = f" [{stress_units}]" if stress_units else ""
    s_label = rf"stress $\sigma_{{{comp}}}${s_unit}"
    e_label = rf"strain $\varepsilon_{{{comp}}}$ [-]"

    same_span = np.allclose(time[-1], time[-1, 0]) and np.allclose(time[0], time[0, 0])
    t_plot = time if same_span else (time - time[0]) / (time[-1] - time[0])
    t_label = f"time [{time_units}]" if same_span else "time / total time of the point [-]"
    ep = results.get("equivalent_plastic_strain")
    y3, y3_label = (ep, "equivalent plastic strain [-]") if ep is not None else (strain, e_label)

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.8), layout="constrained")
    panels = ((ax1, strain, stress, e_label, s_label, "stress-strain"),
              (ax2, t_plot, stress, t_label, s_label, "stress vs time"),
              (ax3, t_plot, y3, t_label, y3_label, f"{y3_label.split(' [')[0]} vs time"))
    for ax, x, y, xl, yl, sub in panels:
        for i in range(batch):
            ax.plot(x[:, i], y[:, i], color=colors[i], ls=styles[i % 2] if batch <= 20 else "-",
                    lw=widths[i] if batch <= 20 else 1.2, label=labels[i])
            if first_bad[i] > 0:  # the last converged state of a point that then failed
                k = first_bad[i] - 1
                ax.plot(x[k, i], y[k, i], "X", color="crimson", ms=9, zorder=5)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(sub)
        ax.axhline(0.0, color="0.8", lw=0.8, zorder=0)
        ax.axvline(0.0, color="0.8", lw=0.8, zorder=0)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(plt.MaxNLocator(nbins=5))

    if batch <= 20:
        fig.legend(*ax1.get_legend_handles_labels(), loc="outside right center", fontsize=8,
                   title="points", title_fontsize=8, frameon=False)
    else:
        sm = plt.cm.ScalarMappable(cmap="viridis", norm=plt.Normalize(0, batch - 1))
        fig.colorbar(sm, ax=(ax1, ax2, ax3), label="point index")
    failed = int((~conv.all(axis=0)).sum())
    sup = title or "modelc run"
    if failed:
        sup += f"  ({failed} point(s) did not converge: X marks each one's last converged state)"
    fig.suptitle(sup)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p
