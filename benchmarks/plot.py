"""Throughput vs batch size plots of a benchmark result (benchmarks/run.py JSON)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

STYLE = {  # impl prefix -> (colour, marker); the first prefix that matches
    "modelc-c-bound": ("magenta", "<"),
    "modelc-c-baked": ("crimson", "p"),
    "modelc-c": ("tab:red", "o"),
    "modelc-triton": ("darkred", "*"),
    "modelc-torch": ("tab:orange", "h"),
    "modelc": ("tab:red", "o"),
    "torch-eager": ("tab:blue", "s"),
    "torch-compile": ("tab:cyan", "D"),
    "neml2-eager": ("tab:green", "^"),
    "neml2-compile": ("tab:olive", "v"),
    "neml2-aoti": ("tab:purple", "P"),
    "expert-c": ("black", "*"),
    "floor": ("tab:gray", "x"),
}


def _style(impl: str) -> tuple[str, str]:
    if impl.endswith("-coupled"):  # the `_coupled` twin of a library model (any backend)
        return ("tab:brown", ">")
    for prefix, s in STYLE.items():
        if impl.startswith(prefix):
            return s
    return ("tab:gray", "x")


def plot(result: dict, path: Path) -> None:
    """One row per dtype, one column per model; solid = with tangent, dashed = without."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in result["records"] if "points_per_s" in r]
    models = list(dict.fromkeys(r["model"] for r in recs))
    dtypes = list(dict.fromkeys(r["dtype"] for r in recs))
    if not recs:
        return
    fig, axes = plt.subplots(len(dtypes), len(models), figsize=(3.6 * len(models), 3.3 * len(dtypes)),
                             squeeze=False, sharex=True)
    for i, dt in enumerate(dtypes):
        for j, m in enumerate(models):
            ax = axes[i][j]
            for impl in dict.fromkeys(r["impl"] for r in recs):
                for tangent, ls in ((True, "-"), (False, "--")):
                    pts = sorted((r["size"], r["points_per_s"]) for r in recs
                                 if (r["model"], r["dtype"], r["impl"], r["tangent"]) == (m, dt, impl, tangent))
                    if pts:
                        c, mk = _style(impl)
                        ax.plot(*zip(*pts), ls=ls, color=c, marker=mk, ms=4,
                                label=f"{impl} ({'with' if tangent else 'no'} tangent)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{m} ({dt})", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(dtypes) - 1:
                ax.set_xlabel("batch size (points)")
            if j == 0:
                ax.set_ylabel("points / s")
    handles, labels = {}, {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    mach = result.get("machine", {})
    fig.suptitle(f"one backward-Euler step, median of repeats — {mach.get('cpu', '?')} "
                 f"({mach.get('cores', '?')} cores){', ' + mach['gpu'] if mach.get('gpu') else ''}; "
                 "solid: with tangent, dashed: without", fontsize=10)
    ncol = min(6, len(handles))
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center", ncol=ncol,
               fontsize=8, frameon=False)
    # the figure grows by the legend's rows (~0.17 in each) so that the axes keep their height
    legend_in = 0.1 + 0.17 * -(-len(handles) // ncol)
    fig.set_figheight(fig.get_figheight() + legend_in)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    src = Path(sys.argv[1])
    plot(json.loads(src.read_text()), src.with_suffix(".png"))
