"""`modelc export c`: the header, source, layout file and ABI page; the source built alone (no Python)
and called through ctypes against the generated PyTorch path on fresh random inputs; the C host
example of docs/integration.md built and run against run_history."""
from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import modelc
from modelc.cli import main as cli_main
from modelc.runtime import cbuild
from modelc.runtime.driver import run_history

DOC = Path(__file__).resolve().parents[3] / "docs" / "integration.md"


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler: the C backend and the exports need one")
    return cc


def _library(out: Path, name: str) -> ctypes.CDLL:
    """``NAME.c`` of an export in ``out`` built alone as a shared library, loaded."""
    r = subprocess.run([_cc(), "-O2", "-fPIC", "-shared", f"{name}.c", "-o", "lib.so", "-lm"], cwd=out,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(out / "lib.so"))


def _export(name: str, out: Path) -> dict:
    assert cli_main(["export", "c", name, "--out", str(out)]) == 0
    for ext in ("h", "c", "json", "md"):
        assert (out / f"{name}.{ext}").is_file()
    return json.loads((out / f"{name}.json").read_text())


@pytest.mark.parametrize("name, n", [("j2_linear_iso", 64), ("perzyna_iso", 64), ("elastic", 64),
                                     ("perzyna_iso", 9000)])
def test_built_alone_matches_the_python_path(tmp_path, name, n):
    """64 points: regular stores; 9000 points of perzyna_iso move more than the runtime's largest
    streaming threshold, so the exported kernel writes them with streaming stores."""
    layout = _export(name, tmp_path)
    lib = tmp_path / f"lib{name}.so"
    r = subprocess.run([_cc(), "-O2", "-fPIC", "-shared", f"{name}.c", "-o", lib.name, "-lm"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    c = ctypes.CDLL(str(lib))
    dp, i64 = ctypes.POINTER(ctypes.c_double), ctypes.c_int64
    for fn in ("value", "tangent"):
        getattr(c, f"{name}_{fn}").restype = i64

    model = modelc.load(name).Model(backend="torch")
    assert layout["nx"] == model.input_axis.size and layout["ny"] == model.output_axis.size
    for v in layout["inputs"]:  # the layout file agrees with the runtime's axis
        assert model.input_axis.offset(v["name"]) == v["offset"]
    for v in layout["outputs"]:
        assert model.output_axis.offset(v["name"]) == v["offset"]
    assert [p["name"] for p in layout["parameters"]] == list(model.parameter_info)

    rng = np.random.default_rng()
    streams = n * (layout["nx"] + layout["ny"] + 36) * 8 > cbuild.STREAM_FRACTION * cbuild.STREAM_CACHE_CAP
    assert streams == (n > 64)
    X = np.zeros((n, layout["nx"]))
    E = model.input_axis.span("forces/E")
    X[:, E[0]:E[1]] = rng.normal(scale=3e-3, size=(n, 6))
    if "forces/t" in model.input_axis:
        X[:, model.input_axis.span("forces/t")[0]] = rng.uniform(0.1, 2.0, n)
    for v in layout["inputs"]:
        if v["name"].startswith("old_state/"):
            X[:, v["offset"]:v["offset"] + v["size"]] = rng.normal(scale=1e-4, size=(n, v["size"])) \
                if v["name"].endswith("Ep") else 0.0
    P = np.zeros(layout["np"])
    assert c[f"{name}_default_parameters"](P.ctypes.data_as(dp)) == 0
    np.testing.assert_array_equal(P, [model.parameter_info[p["name"]].default[0] for p in layout["parameters"]])
    Y, T, ST = np.full((n, layout["ny"]), -7.0), np.full((n, 36), -7.0), np.full((n, 3), -7.0)
    failed = c[f"{name}_tangent"](n, X.ctypes.data_as(dp), P.ctypes.data_as(dp), 0, Y.ctypes.data_as(dp),
                                  T.ctypes.data_as(dp), ST.ctypes.data_as(dp))
    want = model(_labeled(model, X), derivatives=[("state/S", "forces/E")])
    assert failed == 0 and (ST[:, 0] == 1).all()
    np.testing.assert_allclose(Y, want.outputs.tensor.numpy(), rtol=1e-11, atol=1e-9)
    np.testing.assert_allclose(T.reshape(n, 6, 6), want.jacobian["state/S", "forces/E"].numpy(), rtol=1e-10,
                               atol=1e-6)
    Y2 = np.full_like(Y, -7.0)
    assert c[f"{name}_value"](n, X.ctypes.data_as(dp), P.ctypes.data_as(dp), 0, Y2.ctypes.data_as(dp), None) == 0
    np.testing.assert_allclose(Y2, Y, rtol=1e-13, atol=1e-12)  # value-only code: its own rounding
    # advance: old_state <- state, old_forces <- forces
    c[f"{name}_advance"](n, X.ctypes.data_as(dp), Y.ctypes.data_as(dp))
    for s in layout["state"]:
        a, b = model.input_axis.span(s["old_state"])
        o, _ = model.output_axis.span(s["state"])
        np.testing.assert_array_equal(X[:, a:b], Y[:, o:o + b - a])
    if "old_forces/t" in model.input_axis:
        np.testing.assert_array_equal(X[:, model.input_axis.span("old_forces/t")[0]],
                                      X[:, model.input_axis.span("forces/t")[0]])


def _labeled(model, X):
    from modelc.runtime.labeled import LabeledVector

    return LabeledVector(torch.as_tensor(X), model.input_axis)


def test_parameters_outside_their_bounds_compute_nothing(tmp_path):
    """A parameter that is not finite or outside its spec bounds makes _value and _tangent return -2
    with nothing written (as a Python call refuses it); _check_parameters names the first offending
    column, for a shared row and for one row per point; the layout file and the ABI page carry the
    bounds."""
    layout = _export("j2_voce_af", tmp_path)
    c = _library(tmp_path, "j2_voce_af")
    c.j2_voce_af_tangent.restype = ctypes.c_int64
    dp = ctypes.POINTER(ctypes.c_double)
    names = [p["name"] for p in layout["parameters"]]
    assert {p["name"]: p.get("bounds") for p in layout["parameters"]}["nu"] == "(-1, 0.5)"
    assert "| `nu` | 0.3 | (-1, 0.5) |" in (tmp_path / "j2_voce_af.md").read_text()
    n = 4
    X = np.zeros((n, layout["nx"]))
    X[:, 0] = 1e-3

    def call(P, stride):
        Y, T = np.full((n, layout["ny"]), -7.0), np.full((n, 36), -7.0)
        rc = c.j2_voce_af_tangent(n, X.ctypes.data_as(dp), P.ctypes.data_as(dp), stride, Y.ctypes.data_as(dp),
                                  T.ctypes.data_as(dp), None)
        bad = c.j2_voce_af_check_parameters(n if stride else 1, P.ctypes.data_as(dp), stride)
        return rc, bad, (Y == -7.0).all() and (T == -7.0).all()

    P = np.zeros(layout["np"])
    c.j2_voce_af_default_parameters(P.ctypes.data_as(dp))
    assert call(P, 0) == (0, -1, False)
    for name, value in [("nu", 0.5), ("E", 0.0), ("g", -1.0), ("R", float("nan")), ("sigma_y", float("inf"))]:
        Q = P.copy()
        Q[names.index(name)] = value
        assert call(Q, 0) == (-2, names.index(name), True), name
    rows = np.tile(P, (n, 1))
    rows[2, names.index("d")] = -3.0  # one row per point: the third point's d
    assert call(rows, layout["np"]) == (-2, names.index("d"), True)


def test_non_symmetric_tangent_is_row_major_d_stress_d_strain(tmp_path):
    """A model exported from a spec file (not the bundle): Drucker-Prager with non-associated flow
    (docs/zoo/drucker_prager.yaml), whose tangent is not symmetric, so ``dsde``'s orientation (row-major,
    dsde[i][j] = d S_i / d E_j) is checked by central differences of the exported ``_value`` itself."""
    spec = DOC.parents[1] / "docs" / "zoo" / "drucker_prager.yaml"
    assert cli_main(["export", "c", str(spec), "--model", "drucker_prager", "--out", str(tmp_path)]) == 0
    layout = json.loads((tmp_path / "drucker_prager.json").read_text())
    c = _library(tmp_path, "drucker_prager")
    c.drucker_prager_value.restype = c.drucker_prager_tangent.restype = ctypes.c_int64
    dp = ctypes.POINTER(ctypes.c_double)
    n, h = 16, 1e-9
    rng = np.random.default_rng()
    E0 = rng.normal(size=(n, 6))
    E0[:, :3] -= E0[:, :3].mean(axis=1, keepdims=True)  # a deviatoric direction ...
    E0 *= (rng.uniform(2e-3, 4e-3, n) / np.linalg.norm(E0, axis=1))[:, None]  # ... past yield (c0 / G = 1.3e-3)
    E0[:, :3] -= 2e-4  # and a little compression: every point on the cone
    X = np.zeros((13 * n, layout["nx"]))  # the points, then each with one strain component moved by +-h
    e = {v["name"]: v["offset"] for v in layout["inputs"]}["forces/E"]
    X[:, e:e + 6] = np.tile(E0, (13, 1))
    for j in range(6):
        X[(1 + j) * n:(2 + j) * n, e + j] += h
        X[(7 + j) * n:(8 + j) * n, e + j] -= h
    P = np.zeros(layout["np"])
    c.drucker_prager_default_parameters(P.ctypes.data_as(dp))
    Y, T, ST = np.zeros((13 * n, layout["ny"])), np.zeros((n, 36)), np.zeros((13 * n, 3))
    assert c.drucker_prager_value(13 * n, X.ctypes.data_as(dp), P.ctypes.data_as(dp), 0, Y.ctypes.data_as(dp),
                                  ST.ctypes.data_as(dp)) == 0
    assert c.drucker_prager_tangent(n, X.ctypes.data_as(dp), P.ctypes.data_as(dp), 0, np.zeros((n, layout["ny"]))
                                    .ctypes.data_as(dp), T.ctypes.data_as(dp), None) == 0
    s = {v["name"]: v["offset"] for v in layout["outputs"]}["state/S"]
    S = Y[:, s:s + 6].reshape(13, n, 6)
    fd = np.stack([(S[1 + j] - S[7 + j]) / (2 * h) for j in range(6)], axis=-1)  # [point, i, j]
    T = T.reshape(n, 6, 6)
    size = np.abs(fd).max(axis=(1, 2), keepdims=True)
    assert (np.abs(T - fd) <= 1e-6 * size).all()  # h = 1e-9 on strains of 1e-3: both errors below 1e-6
    assert (np.abs(T - T.transpose(0, 2, 1)).max(axis=(1, 2)) > 1e-2 * size[:, 0, 0]).all()
    assert (ST[:n, 1] >= 1).all()  # every point took a Newton step: all plastic


def test_initial_state_starts_from_the_declared_values(tmp_path):
    """gtn's porosity starts at phi0 (the spec's `initial: phi0`), not zero: _initial_state writes it
    from the parameters (one row per point here), and a history driven with _tangent and _advance
    from there matches run_history (which starts from the same declared values) at every step. A
    parameter out of its bounds writes nothing."""
    layout = _export("gtn", tmp_path)
    assert layout["initial"] == [{"old_state": "old_state/internal/phi", "declared": True}]
    c = _library(tmp_path, "gtn")
    c.gtn_tangent.restype = ctypes.c_int64
    dp = ctypes.POINTER(ctypes.c_double)
    n, steps = 3, 12
    names = [p["name"] for p in layout["parameters"]]
    P = np.zeros(layout["np"])
    c.gtn_default_parameters(P.ctypes.data_as(dp))
    rows = np.tile(P, (n, 1))
    phi0 = np.array([0.0, 0.01, 0.05])
    rows[:, names.index("phi0")] = phi0
    X = np.full((n, layout["nx"]), 7.0)
    assert c.gtn_initial_state(n, X.ctypes.data_as(dp), rows.ctypes.data_as(dp), layout["np"]) == 0
    off = {v["name"]: v["offset"] for v in layout["inputs"]}
    want0 = np.zeros_like(X)
    want0[:, off["old_state/internal/phi"]] = phi0
    np.testing.assert_array_equal(X, want0)
    bad = rows.copy()
    bad[1, names.index("phi0")] = 1.0  # outside [0, 1)
    X2 = np.full_like(X, 7.0)
    assert c.gtn_initial_state(n, X2.ctypes.data_as(dp), bad.ctypes.data_as(dp), layout["np"]) == -2
    assert (X2 == 7.0).all()
    t = np.linspace(0.0, 1.0, steps + 1)
    strain = np.zeros((steps + 1, n, 6))
    strain[:, :, :3] = 4e-3 * t[:, None, None] * np.array([1.0, -0.2, -0.2])  # tension with dilatation
    strain[:, :, 5] = 2e-3 * t[:, None]
    Y, T = np.zeros((n, layout["ny"])), np.zeros((n, 36))
    model = modelc.load("gtn").Model(backend="torch")
    want = run_history(model, {"time": np.repeat(t[:, None], n, 1), "strain": strain},
                       params={"phi0": phi0}, progress=False)
    ys = {v["name"]: v["offset"] for v in layout["outputs"]}
    for k in range(1, steps + 1):
        X[:, off["forces/E"]:off["forces/E"] + 6] = strain[k]
        X[:, off["forces/t"]] = t[k]
        assert c.gtn_tangent(n, X.ctypes.data_as(dp), rows.ctypes.data_as(dp), layout["np"], Y.ctypes.data_as(dp),
                             T.ctypes.data_as(dp), None) == 0
        np.testing.assert_allclose(Y[:, ys["state/S"]:ys["state/S"] + 6], want["stress"][k], rtol=1e-10, atol=1e-8)
        np.testing.assert_allclose(Y[:, ys["state/internal/phi"]], want["state/internal/phi"][k], rtol=1e-10,
                                   atol=1e-15)  # phi0 = 0 stays 0 to rounding (+-2e-20)
        c.gtn_advance(n, X.ctypes.data_as(dp), Y.ctypes.data_as(dp))
    assert want["state/internal/phi"][-1, 2] > 0.05  # the voids grew from phi0


def test_failed_points_are_counted_and_nan(tmp_path):
    layout = _export("perzyna_iso_coupled", tmp_path)  # the coupled system: its Newton fails on the middle point (the radial return converges)
    c = _library(tmp_path, "perzyna_iso_coupled")
    c.perzyna_iso_coupled_value.restype = ctypes.c_int64
    dp = ctypes.POINTER(ctypes.c_double)
    X = np.zeros((3, layout["nx"]))
    X[:, 0] = [1e-4, 1e-2, 1e-4]  # the middle point: a step Newton cannot take with n = 10, eta = 1
    X[:, 6] = 1.0
    P = np.zeros(layout["np"])
    c.perzyna_iso_coupled_default_parameters(P.ctypes.data_as(dp))
    names = [p["name"] for p in layout["parameters"]]
    P[names.index("n")], P[names.index("eta")] = 10.0, 1.0
    Y, ST = np.zeros((3, layout["ny"])), np.zeros((3, 3))
    assert c.perzyna_iso_coupled_value(3, X.ctypes.data_as(dp), P.ctypes.data_as(dp), 0, Y.ctypes.data_as(dp),
                               ST.ctypes.data_as(dp)) == 1
    assert list(ST[:, 0]) == [1.0, 0.0, 1.0] and np.isnan(Y[1]).all() and np.isfinite(Y[[0, 2]]).all()


def test_doc_example_host_program(tmp_path):
    """The C host program of docs/integration.md, built against the export, agrees with run_history."""
    text = DOC.read_text()
    src = re.search(r"```c\n(/\* host\.c.*?)```", text, re.S)
    assert src, "docs/integration.md lost its C host example"
    _export("j2_linear_iso", tmp_path)
    (tmp_path / "host.c").write_text(src.group(1))
    r = subprocess.run([_cc(), "-O2", "host.c", "j2_linear_iso.c", "-o", "host", "-lm"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(tmp_path / "host")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = np.array([[float(v) for v in line.split()] for line in out.stdout.split("\n") if line.strip()])
    # the same history in Python: 4 points, xx strain 0.001 * step * (i + 1), time = step
    steps = np.arange(11)
    strain = np.zeros((11, 4, 6))
    strain[:, :, 0] = 1e-3 * steps[:, None] * np.arange(1, 5)[None, :]
    res = run_history(modelc.load("j2_linear_iso").Model(backend="torch"),
                      {"time": np.repeat(steps[:, None], 4, 1).astype(float), "strain": strain},
                      tangent_steps=[10], progress=False)
    np.testing.assert_allclose(got[:, 0], res["stress"][10, :, 0], rtol=1e-12)
    np.testing.assert_allclose(got[:, 1], res["equivalent_plastic_strain"][10], rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(got[:, 2], res["tangent"][0, :, 0, 0], rtol=1e-10)


def test_two_names_of_one_c_macro_are_refused():
    """state/internal_ep and state/internal/ep would both be ..._Y_state_internal_ep in the header (a
    redefinition the host's compiler refuses): the export names both instead."""
    from types import SimpleNamespace

    from modelc.errors import InputError
    from modelc.export.c_interface import _vars

    slots = [SimpleNamespace(name=n, type="Scalar", offset=k, size=1)
             for k, n in enumerate(["state/internal_ep", "state/internal/ep"])]
    with pytest.raises(InputError, match=r"'state/internal_ep' and 'state/internal/ep' both become the C "
                                         r"macro suffix 'state_internal_ep'"):
        _vars(slots)
    assert [d["macro"] for d in _vars(slots[:1])] == ["state_internal_ep"]


def test_two_exported_models_link_into_one_host_and_run_vectorized(tmp_path):
    """The exported source embeds the C backend's batched code with its entry points static, so two
    models link into one library (no clash of mc_tangent, block_eval, ...); built with the
    documented SIMD flags, a call over 9000 points gives the Python path's tangent, and the exported
    source holds the vectorized block code (not the per-point loop of the UMAT)."""
    _export("j2_voce_af", tmp_path)
    _export("j2_linear_iso", tmp_path)
    src = (tmp_path / "j2_voce_af.c").read_text()
    assert "MC_ENTRY void mc_tangent(" in src and "#define MC_ENTRY static" in src
    assert "block_eval(" in src and "point_derivative" not in src
    flags = ["-O2", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd", "-fPIC", "-shared"]
    r = subprocess.run([_cc(), *flags, "j2_voce_af.c", "j2_linear_iso.c", "-o", "libboth.so", "-lm"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    c = ctypes.CDLL(str(tmp_path / "libboth.so"))
    m = modelc.load("j2_voce_af").Model(backend="torch")
    layout = json.loads((tmp_path / "j2_voce_af.json").read_text())
    n, g = 9000, np.random.default_rng()
    x = np.zeros((n, layout["nx"]))
    off = {v["name"]: v["offset"] for v in layout["inputs"]}
    x[:, off["forces/E"]:off["forces/E"] + 6] = 3e-3 * g.uniform(-1, 1, (n, 6))
    x[:, off["forces/t"]] = 1.0
    p = np.zeros(layout["np"])
    dp = ctypes.POINTER(ctypes.c_double)
    c.j2_voce_af_default_parameters(p.ctypes.data_as(dp))
    y, t, st = np.full((n, layout["ny"]), np.nan), np.full((n, 36), np.nan), np.zeros((n, 3))
    c.j2_voce_af_tangent.restype = ctypes.c_int64
    failed = c.j2_voce_af_tangent(ctypes.c_int64(n), x.ctypes.data_as(dp), p.ctypes.data_as(dp), ctypes.c_int64(0),
                                  y.ctypes.data_as(dp), t.ctypes.data_as(dp), st.ctypes.data_as(dp))
    assert failed == 0 and (st[:, 0] == 1).all() and (st[:, 1] > 0).any()
    inputs = {v["name"]: torch.tensor(x[:, v["offset"]:v["offset"] + v["size"]]).squeeze(-1) for v in layout["inputs"]}
    want = m(inputs, derivatives="tangent")
    np.testing.assert_allclose(t.reshape(n, 6, 6), want.jacobian["state/S", "forces/E"].numpy(), rtol=1e-9, atol=1e-6)


def test_doc_outputs_alloc_snippet(tmp_path):
    """The huge-page output allocation of docs/integration.md builds as C99 without warnings and
    returns 2 MiB aligned memory that can be written."""
    import sys

    if sys.platform != "linux":
        pytest.skip("MADV_HUGEPAGE is Linux's; the snippet says so")
    text = DOC.read_text()
    src = re.search(r"```c\n(#define _DEFAULT_SOURCE.*?)```", text, re.S)
    assert src, "docs/integration.md lost its outputs_alloc example"
    main = ("#include <stdint.h>\n#include <stdio.h>\nint main(void) {\n"
            "    double *y = outputs_alloc((size_t)5 << 20);\n    if (!y) return 2;\n"
            "    for (size_t i = 0; i < ((size_t)5 << 20) / 8; ++i) y[i] = (double)i;\n"
            "    printf(\"%d %g\\n\", (int)((uintptr_t)y % ((size_t)2 << 20)), y[12345]);\n    free(y);\n    return 0;\n}\n")
    (tmp_path / "alloc.c").write_text(src.group(1) + main)
    r = subprocess.run([_cc(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "alloc.c", "-o", "alloc"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(tmp_path / "alloc")], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["0", "12345"]
