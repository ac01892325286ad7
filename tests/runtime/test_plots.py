"""Plots of driver results (runtime/plots.py): ``plot_results`` writes the file the suffix asks for
(Agg backend) and draws, per point, the chosen component's stress-strain curve, stress against time
and the equivalent plastic strain (else the strain) against time; shear components without the
Mandel sqrt 2; times normalised when the points' spans differ; an X at the last converged state of
a point that failed; a legend of the labels up to 20 points, a colour bar beyond.

Oracle: the figure is taken as ``plot_results`` closes it and its lines' data are compared with the
arrays handed in, transformed by hand (never pixels)."""
from __future__ import annotations

import math
import sys

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from modelc.runtime.errors import InputError  # noqa: E402
from modelc.runtime.plots import plot_results  # noqa: E402

S2 = math.sqrt(2.0)


@pytest.fixture
def figures(monkeypatch):
    """The figures plot_results draws (kept when it closes them)."""
    kept, real = [], plt.close

    def close(fig=None):
        kept.append(fig)
        real(fig)

    monkeypatch.setattr(plt, "close", close)
    return kept


def _results(batch=2, steps=7, ep=True, spans=None):
    t = np.linspace(0.0, 2.0, steps)
    time = np.repeat(t[:, None], batch, axis=1) if spans is None else t[:, None] * np.asarray(spans)[None, :]
    k = np.arange(steps)[:, None, None]
    p = np.arange(batch)[None, :, None]
    c = np.arange(6)[None, None, :]
    out = {"time": time, "strain": 1e-3 * (k + 1) * (p + 1) + 1e-5 * c,
           "stress": 100.0 * k - 7.0 * p + c, "labels": np.array([f"amp {i}" for i in range(batch)])}
    if ep:
        out["equivalent_plastic_strain"] = 1e-4 * k[..., 0] * (p[..., 0] + 2)
    return out


def _data_lines(ax, labels):
    return [ln for ln in ax.lines if ln.get_label() in labels]


def _xs(ln):
    return np.asarray(ln.get_xdata(), dtype=float), np.asarray(ln.get_ydata(), dtype=float)


def test_writes_the_file_and_draws_each_point_on_three_panels(tmp_path, figures):
    r = _results()
    path = tmp_path / "new" / "run.png"                    # the folder is created
    got = plot_results(r, str(path), title="j2 demo", stress_units="MPa")
    assert got == path and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.get_backend().lower() == "agg"
    (fig,) = figures
    ax1, ax2, ax3 = fig.axes
    labels = ["amp 0", "amp 1"]
    assert fig.get_suptitle() == "j2 demo"
    assert [ax.get_title() for ax in fig.axes] == ["stress-strain", "stress vs time",
                                                    "equivalent plastic strain vs time"]
    assert ax1.get_xlabel() == r"strain $\varepsilon_{xx}$ [-]"
    assert ax1.get_ylabel() == ax2.get_ylabel() == r"stress $\sigma_{xx}$ [MPa]"
    assert ax2.get_xlabel() == ax3.get_xlabel() == "time [s]"
    assert ax3.get_ylabel() == "equivalent plastic strain [-]"
    for i in range(2):
        for ax, (x, y) in ((ax1, (r["strain"][:, i, 0], r["stress"][:, i, 0])),
                           (ax2, (r["time"][:, i], r["stress"][:, i, 0])),
                           (ax3, (r["time"][:, i], r["equivalent_plastic_strain"][:, i]))):
            ln = _data_lines(ax, labels)[i]
            np.testing.assert_array_equal(_xs(ln)[0], x)
            np.testing.assert_array_equal(_xs(ln)[1], y)
    a, b = _data_lines(ax1, labels)
    assert a.get_linestyle() == "-" and b.get_linestyle() == "--"   # later points dashed ...
    assert a.get_linewidth() == pytest.approx(2.8) and b.get_linewidth() == pytest.approx(1.2)  # ... thinner
    assert not [ln for ax in fig.axes for ln in ax.lines if ln.get_marker() == "X"]   # nothing failed
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == labels and legend.get_title().get_text() == "points"


def test_shear_component_without_mandel_factor_and_strain_panel_without_ep(tmp_path, figures):
    r = _results(ep=False)
    del r["labels"]                                          # default labels
    plot_results(r, tmp_path / "p.png", component=4, time_units="ms")
    (fig,) = figures
    ax1, ax2, ax3 = fig.axes
    labels = ["point 0", "point 1"]
    assert ax1.get_xlabel() == r"strain $\varepsilon_{xz}$ [-]" and ax1.get_ylabel() == r"stress $\sigma_{xz}$"
    assert ax3.get_title() == r"strain $\varepsilon_{xz}$ vs time" and ax3.get_xlabel() == "time [ms]"
    assert fig.get_suptitle() == "modelc run"
    for i in range(2):
        x, y = _xs(_data_lines(ax1, labels)[i])
        np.testing.assert_allclose(x, r["strain"][:, i, 4] / S2, rtol=1e-15)
        np.testing.assert_allclose(y, r["stress"][:, i, 4] / S2, rtol=1e-15)
        np.testing.assert_allclose(_xs(_data_lines(ax3, labels)[i])[1], r["strain"][:, i, 4] / S2, rtol=1e-15)


def test_normal_components_keep_their_values(tmp_path, figures):
    r = _results()
    plot_results(r, tmp_path / "p.png", component=2)
    x, y = _xs(_data_lines(figures[0].axes[0], ["amp 0", "amp 1"])[1])
    np.testing.assert_array_equal(x, r["strain"][:, 1, 2])
    np.testing.assert_array_equal(y, r["stress"][:, 1, 2])


def test_points_with_different_time_spans_are_plotted_against_their_own_fraction(tmp_path, figures):
    r = _results(spans=[1.0, 3.0])
    r["time"] = r["time"] + np.array([0.0, 5.0])           # and different starts
    plot_results(r, tmp_path / "p.png")
    (fig,) = figures
    assert fig.axes[1].get_xlabel() == "time / total time of the point [-]"
    for ax in fig.axes[1:]:
        for ln in _data_lines(ax, ["amp 0", "amp 1"]):
            np.testing.assert_allclose(_xs(ln)[0], np.linspace(0.0, 1.0, 7), atol=1e-15)


def test_failed_points_get_an_x_at_their_last_converged_state(tmp_path, figures):
    r = _results(batch=3)
    conv = np.ones((7, 3), dtype=bool)
    conv[4:, 1] = False                                      # point 1: last converged step 3
    conv[0:, 2] = False                                      # point 2: failed at once, nothing to mark
    r["converged"] = conv
    plot_results(r, tmp_path / "p.png", title="T")
    (fig,) = figures
    assert fig.get_suptitle() == "T  (2 point(s) did not converge: X marks each one's last converged state)"
    for ax, (x, y) in zip(fig.axes, ((r["strain"][3, 1, 0], r["stress"][3, 1, 0]),
                                     (r["time"][3, 1], r["stress"][3, 1, 0]),
                                     (r["time"][3, 1], r["equivalent_plastic_strain"][3, 1]))):
        (mark,) = [ln for ln in ax.lines if ln.get_marker() == "X"]
        assert (_xs(mark)[0].tolist(), _xs(mark)[1].tolist()) == ([x], [y])


def test_many_points_get_a_colour_bar_and_solid_lines(tmp_path, figures):
    r = _results(batch=25, steps=4)
    plot_results(r, tmp_path / "p.png")
    (fig,) = figures
    assert fig.legends == [] and len(fig.axes) == 4          # three panels and the colour bar
    assert fig.axes[3].get_ylabel() == "point index"
    lines = _data_lines(fig.axes[0], [f"amp {i}" for i in range(25)])
    assert len(lines) == 25 and {ln.get_linestyle() for ln in lines} == {"-"}
    assert {ln.get_linewidth() for ln in lines} == {1.2}
    assert len({tuple(ln.get_color()) for ln in lines}) == 25  # one colour per point


def test_eleven_to_twenty_points_use_distinct_qualitative_colours(tmp_path, figures):
    plot_results(_results(batch=12, steps=3), tmp_path / "p.png")
    lines = _data_lines(figures[0].axes[0], [f"amp {i}" for i in range(12)])
    assert [ln.get_color() for ln in lines] == list(plt.get_cmap("tab20").colors[:12])
    assert len(figures[0].legends[0].get_texts()) == 12


@pytest.mark.parametrize("suffix,magic", [(".svg", b"<?xml"), (".pdf", b"%PDF-")])
def test_format_follows_the_suffix(tmp_path, suffix, magic):
    p = plot_results(_results(), tmp_path / f"p{suffix}")
    assert p.suffix == suffix and p.read_bytes().startswith(magic)
    assert [q.name for q in tmp_path.iterdir()] == [p.name]


def test_without_matplotlib_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # `import matplotlib` raises ImportError
    with pytest.raises(InputError, match=r"^plotting needs matplotlib: pip install 'modelc\[plot\]'$"):
        plot_results(_results(), tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()


def test_a_negative_component_is_rejected_or_means_the_same_as_its_positive_index(tmp_path, figures):
    r = _results()
    try:
        plot_results(r, tmp_path / "neg.png", component=-1)
    except InputError as exc:
        assert "component" in str(exc)
        return
    plot_results(r, tmp_path / "pos.png", component=5)
    neg, pos = figures
    for a, b in zip(neg.axes, pos.axes):
        np.testing.assert_array_equal(_xs(a.lines[0])[1], _xs(b.lines[0])[1])


@pytest.mark.parametrize("component", [6, -7, 2.0, True, "xy"])
def test_a_component_out_of_range_is_an_input_error(tmp_path, component):
    """component names one of the six Mandel components (-6 .. 5, as an index): anything else is
    refused with the argument named, before a file is written."""
    with pytest.raises(InputError, match=r"^plot_results: component must be 0 to 5"):
        plot_results(_results(), tmp_path / "p.png", component=component)
    assert not (tmp_path / "p.png").exists()


def test_results_without_stress_are_an_input_error(tmp_path):
    r = {k: v for k, v in _results().items() if k != "stress"}
    with pytest.raises(InputError, match=r"no 'stress'"):
        plot_results(r, tmp_path / "p.png")
