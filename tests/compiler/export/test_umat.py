"""`modelc export umat`: the UMAT compiled alone, then called from a Fortran driver (gfortran) the way
a host code calls it, through multiaxial histories. Oracles: closed forms of j2_linear_iso (elastic
steps; monotonic pure shear above yield, stress and DDSDDE), the generated PyTorch path (run_history
with backend="torch") for multiaxial histories, and the PyTorch path's status for PNEWDT.

gfortran is required in CI (.ci/run installs it); on a developer machine without it the Fortran tests
are skipped with that reason."""
from __future__ import annotations

import ctypes
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import modelc
from modelc.cli import main as cli_main
from modelc.runtime import mandel
from modelc.runtime.driver import run_history
from rt_helpers import IN_CI

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
E, NU, K, SY = 200000.0, 0.3, 2000.0, 100.0
G, LAM = E / (2 * (1 + NU)), E * NU / ((1 + NU) * (1 - 2 * NU))


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if IN_CI:
            pytest.fail(f"{tool} is required in CI (.ci/run installs it with apt-get)")
        pytest.skip(f"{tool} is not installed (apt-get install {tool}); required in CI")
    return path


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(model, spec=None) -> (driver executable, umat json)``, exported and compiled once per
    model (a bundled model, or ``model`` of the spec file ``spec``)."""
    cache = {}

    def get(name: str, spec: Path | None = None):
        if name not in cache:
            gfortran, cc = _need("gfortran"), _need("cc")
            out = tmp_path_factory.mktemp(name)
            which = [str(spec), "--model", name] if spec else [name]
            assert cli_main(["export", "umat", *which, "--out", str(out)]) == 0
            src = out / f"{name}_umat.c"
            # the documented stand-alone build works as is
            r = subprocess.run([cc, "-shared", "-fPIC", "-O2", src.name, "-lm"], cwd=out,
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            r = subprocess.run([cc, "-O2", "-c", str(src), "-o", str(out / "umat.o")], capture_output=True,
                               text=True)
            assert r.returncode == 0, r.stderr
            r = subprocess.run([gfortran, "-O1", str(HERE / "umat_driver.f90"), str(out / "umat.o"), "-lm",
                                "-o", str(out / "driver")], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            cache[name] = (out / "driver", json.loads((out / f"{name}_umat.json").read_text()))
        return cache[name]

    return get


def _run_driver(driver: Path, props, nstatv: int, times, dstran, tmp: Path):
    """Run the Fortran host: returns pnewdt (n,), stress (n, 6), statev (n, nstatv), ddsdde (n, 6, 6)."""
    lines = [str(len(props)), " ".join(repr(float(p)) for p in props), str(nstatv), str(len(dstran))]
    for k, d in enumerate(dstran):
        lines.append(" ".join(repr(float(v)) for v in [times[k], times[k + 1] - times[k], *d]))
    (tmp / "in.txt").write_text("\n".join(lines) + "\n")
    r = subprocess.run([str(driver), str(tmp / "in.txt"), str(tmp / "out.txt")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = np.atleast_2d(np.loadtxt(tmp / "out.txt"))
    dd = out[:, 7 + nstatv:].reshape(-1, 6, 6).transpose(0, 2, 1)  # Fortran column-major -> [i, j]
    return out[:, 0], out[:, 1:7], out[:, 7:7 + nstatv], dd


def _props(info, **overrides):
    return [overrides.get(n, d) for n, d in zip(info["props"], info["props_default"])]


def test_umat_json_describes_props_and_statev(build):
    _, info = build("j2_linear_iso")
    assert info["props"] == ["E", "nu", "sigma_y", "K"]
    assert info["statev"] == [["state/internal/Ep", 6], ["state/internal/ep", 1]]
    assert info["nstatv"] == 7 and info["ntens"] == 6 and info["voigt_order"] == ["11", "22", "33", "12", "13", "23"]


def test_j2_linear_iso_closed_forms_elastic_and_pure_shear(build, tmp_path):
    driver, info = build("j2_linear_iso")
    # 1. an elastic multiaxial step: sigma = lambda tr(e) I + 2 G e, DDSDDE the isotropic stiffness
    rng = np.random.default_rng()
    d = rng.uniform(-2e-4, 2e-4, 6)  # Abaqus order, engineering shear
    pnew, s, sv, dd = _run_driver(driver, _props(info), 8, [0.0, 1.0], [d], tmp_path)
    eps = np.array([[d[0], d[3] / 2, d[4] / 2], [d[3] / 2, d[1], d[5] / 2], [d[4] / 2, d[5] / 2, d[2]]])
    sig = LAM * np.trace(eps) * np.eye(3) + 2 * G * eps
    want = [sig[0, 0], sig[1, 1], sig[2, 2], sig[0, 1], sig[0, 2], sig[1, 2]]
    np.testing.assert_allclose(s[0], want, rtol=1e-12, atol=1e-9)
    D = np.zeros((6, 6))
    D[:3, :3] = LAM
    D[:3, :3] += 2 * G * np.eye(3)
    D[3:, 3:] = G * np.eye(3)
    np.testing.assert_allclose(dd[0], D, rtol=1e-12, atol=1e-6)
    assert pnew[0] >= 1 and np.all(sv[0] == 0)
    # 2. monotonic pure shear gamma_12 past yield (tau_y = sy / sqrt3): with hardening K,
    #    tau = (G gamma + sqrt3 G sy / K) / (1 + 3 G / K) and d tau / d gamma = G / (1 + 3 G / K)
    n = 20
    gam = np.linspace(0, 4e-3, n + 1)
    dstran = np.zeros((n, 6))
    dstran[:, 3] = np.diff(gam)
    pnew, s, sv, dd = _run_driver(driver, _props(info), 8, np.linspace(0, 1, n + 1), dstran, tmp_path)
    assert (pnew >= 1).all()
    tau_el = G * gam[1:]
    plastic = tau_el > SY / math.sqrt(3)
    assert plastic.any() and (~plastic).any()
    tau = np.where(plastic, (G * gam[1:] + math.sqrt(3) * G * SY / K) / (1 + 3 * G / K), tau_el)
    np.testing.assert_allclose(s[:, 3], tau, rtol=1e-11)
    np.testing.assert_allclose(s[:, [0, 1, 2, 4, 5]], 0.0, atol=1e-9)
    np.testing.assert_allclose(dd[:, 3, 3], np.where(plastic, G / (1 + 3 * G / K), G), rtol=1e-10)
    ep = np.where(plastic, (math.sqrt(3) * tau - SY) / K, 0.0)
    np.testing.assert_allclose(sv[:, 6], ep, rtol=1e-10, atol=1e-15)  # STATEV(7) = ep
    np.testing.assert_allclose(sv[:, 5] / math.sqrt(2), math.sqrt(3) / 2 * ep, rtol=1e-10, atol=1e-15)  # Ep_xy


def _python_path(name, times, dstran, **params):
    """The same history through the generated PyTorch code: stress and tangent in Abaqus Voigt."""
    strain_v = np.concatenate([np.zeros((1, 6)), np.cumsum(dstran, axis=0)])
    strain_m = mandel.voigt_to_sr2(torch.as_tensor(strain_v), "strain", "abaqus").numpy()
    model = modelc.load(name).Model(backend="torch")
    res = run_history(model, {"time": np.asarray(times)[:, None], "strain": strain_m[:, None, :]},
                      params=params, tangent_steps=range(1, len(times)), progress=False)
    stress = mandel.sr2_to_voigt(torch.as_tensor(res["stress"][1:, 0]), "stress", "abaqus").numpy()
    dd = mandel.ssr4_to_voigt(torch.as_tensor(res["tangent"][:, 0]), "stiffness", "abaqus").numpy()
    return res, stress, dd


@pytest.mark.parametrize("name", ["j2_linear_iso", "j2_voce_af", "perzyna_iso", "gtn"])
def test_multiaxial_history_matches_python_path(build, tmp_path, name):
    """Tension with shear, then reversal into compression with the other shears: loading, elastic
    unloading and reverse yielding, with STATEV handed back each increment. gtn's porosity starts at
    its declared initial value phi0 (the Python path's start) although the host starts STATEV at
    zero: STATEV's last slot marks the point initialized."""
    driver, info = build(name)
    rng = np.random.default_rng()
    n = 36
    path = np.zeros((n + 1, 6))
    s = np.linspace(0.0, 1.0, n + 1)
    wave = np.interp(s, [0, 0.4, 1.0], [0, 1, -0.8])
    direction = np.array([1.0, -0.3, -0.3, 0.6, 0.2, -0.4]) + rng.uniform(-0.1, 0.1, 6)
    path = wave[:, None] * 4e-3 * direction
    path[:, 3:] += np.sin(np.pi * s)[:, None] * rng.uniform(-1e-3, 1e-3, 3)  # non-proportional
    times = np.linspace(0.0, 5.0, n + 1)
    dstran = np.diff(path, axis=0)
    pnew, stress, statev, dd = _run_driver(driver, _props(info), info["nstatv"], times, dstran, tmp_path)
    assert (pnew >= 1).all()
    res, stress_py, dd_py = _python_path(name, times, dstran)
    assert res.ok
    scale = np.abs(stress_py).max()
    np.testing.assert_allclose(stress, stress_py, rtol=1e-10, atol=1e-10 * scale)
    np.testing.assert_allclose(dd, dd_py, rtol=1e-9, atol=1e-9 * E)
    off = 0
    for var, size in info["statev"]:
        if var == "modelc/initialized":
            assert name == "gtn" and (statev[:, off] == 1).all()
            continue
        want = res[var][1:, 0].reshape(n, size)
        np.testing.assert_allclose(statev[:, off:off + size], want, rtol=1e-9,
                                   atol=1e-9 * max(np.abs(want).max(), 1e-12), err_msg=var)
        off += size
    assert res["equivalent_plastic_strain"][-1, 0] > 0  # it did yield


def test_non_symmetric_ddsdde_is_the_difference_quotient_of_the_umats_stress(build, tmp_path):
    """Drucker-Prager with non-associated flow (docs/zoo/drucker_prager.yaml): its consistent tangent is
    not symmetric, so DDSDDE's orientation (column-major, DDSDDE(i, j) = d STRESS(i) / d STRAN(j)) is
    checked by the UMAT's own stress: a plastic increment after a preload, and the same increment with
    each DSTRAN component moved by +-h (engineering shear, as the host hands it). Central differences
    with h = 1e-9 on increments of 1e-3 to 4e-3: truncation and rounding both under 1e-6 of the tangent."""
    driver, info = build("drucker_prager", REPO / "docs" / "zoo" / "drucker_prager.yaml")
    assert info["props"] == ["E", "nu", "eta", "eta_bar", "xi", "c0", "Q", "b"]
    rng = np.random.default_rng()
    pre = np.array([-2e-4, -2e-4, -2e-4, 0, 0, 0])  # a little compression, elastic
    inc = np.concatenate([rng.uniform(-3e-4, 3e-4, 3), rng.uniform(2e-3, 4e-3, 3) * rng.choice([-1, 1], 3)])
    props, h = _props(info), 1e-9

    def stress_and_tangent(d):
        pnew, s, sv, dd = _run_driver(driver, props, info["nstatv"], [0.0, 1.0, 2.0], [pre, d], tmp_path)
        assert (pnew >= 1).all()
        return s[1], dd[1], sv

    s, dd, sv = stress_and_tangent(inc)
    fd = np.zeros((6, 6))
    for j in range(6):
        e = np.zeros(6)
        e[j] = h
        fd[:, j] = (stress_and_tangent(inc + e)[0] - stress_and_tangent(inc - e)[0]) / (2 * h)
    size = np.abs(fd).max()
    np.testing.assert_allclose(dd, fd, rtol=0, atol=1e-6 * size)
    assert np.abs(dd - dd.T).max() > 1e-2 * size  # not symmetric: a transposed DDSDDE would fail
    assert info["statev"][-1][0] == "state/internal/ep"
    assert sv[0, -1] == 0 and sv[1, -1] > 1e-5  # the preload is elastic, the increment plastic


def test_pnewdt_when_a_point_does_not_converge(build, tmp_path):
    """Perzyna with n = 10, eta = 1: the Python path's Newton fails on a large step; the UMAT asks for a
    smaller step (PNEWDT < 1) and leaves STRESS and STATEV as they were; smaller steps then pass."""
    driver, info = build("perzyna_iso_coupled")  # its Newton fails on the big step (the radial return converges)
    params = {"n": 10.0, "eta": 1.0}
    props = _props(info, **params)
    small = np.zeros(6)
    small[0] = 4e-4  # elastic
    big = np.zeros(6)
    big[0] = 1e-2
    times = [0.0, 0.1, 1.1]
    model = modelc.load("perzyna_iso_coupled").Model(backend="torch")
    strain_m = mandel.voigt_to_sr2(torch.as_tensor(np.array([0 * small, small, small + big])), "strain",
                                   "abaqus").numpy()
    with pytest.warns(Warning):
        py = run_history(model, {"time": np.array(times)[:, None], "strain": strain_m[:, None]},
                         params=params, progress=False)
    assert py.failed == {0: 2}  # the oracle: the second step does not converge
    pnew, stress, statev, dd = _run_driver(driver, props, info["nstatv"], times, [small, big], tmp_path)
    assert pnew[0] >= 1 and pnew[1] == 0.5
    np.testing.assert_array_equal(stress[1], stress[0])  # untouched: the host may retry
    np.testing.assert_array_equal(statev[1], statev[0])
    assert np.isfinite(stress).all()


def test_configuration_errors_stop_the_host(build, tmp_path):
    driver, info = build("j2_linear_iso")
    lines = ["3", "1 2 3", "8", "1", "0 1 0 0 0 0 0 0"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    r = subprocess.run([str(driver), str(tmp_path / "in.txt"), str(tmp_path / "out.txt")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "j2_linear_iso_umat: NPROPS = 3, expected 4" in r.stderr


def _umat_library(spec: Path, name: str, out: Path) -> ctypes.CDLL:
    """The UMAT of ``name`` in ``spec`` built as a shared library, for a host written with ctypes."""
    assert cli_main(["export", "umat", str(spec), "--model", name, "--out", str(out)]) == 0
    r = subprocess.run([_need("cc"), "-shared", "-fPIC", "-O2", f"{name}_umat.c", "-o", "umat.so", "-lm"], cwd=out,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(out / "umat.so"))


def _call_umat(lib, props, stress, statev, stran, dstran, t, dt, temp, dtemp):
    """One UMAT call the way a host makes it; returns (pnewdt, DDSDDE as [i, j])."""
    d = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
    i32 = lambda v: ctypes.byref(ctypes.c_int(v))  # noqa: E731
    dd, props = np.zeros(36), d(props)
    scalars = [np.zeros(1) for _ in range(7)]  # sse, spd, scd, rpl, drpldt, predef, dpred
    pnewdt = np.array([1.0])
    ptr = lambda a: a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))  # noqa: E731
    lib.umat_(ptr(stress), ptr(statev), ptr(dd), ptr(scalars[0]), ptr(scalars[1]), ptr(scalars[2]),
              ptr(scalars[3]), ptr(np.zeros(6)), ptr(np.zeros(6)), ptr(scalars[4]), ptr(d(stran)), ptr(d(dstran)),
              ptr(d([t, t])), ptr(d([dt])), ptr(d([temp])), ptr(d([dtemp])), ptr(scalars[5]), ptr(scalars[6]),
              ctypes.c_char_p(b"THERMO"), i32(3), i32(3), i32(6), i32(len(statev)), ptr(props), i32(len(props)),
              ptr(np.zeros(3)), ptr(np.eye(3)), ptr(pnewdt), ptr(d([1.0])), ptr(np.eye(3)), ptr(np.eye(3)),
              i32(1), i32(1), i32(1), i32(1), i32(1), i32(1), ctypes.c_size_t(6))
    return float(pnewdt[0]), dd.reshape(6, 6).T  # Fortran column-major -> [i, j]


def test_temperature_reaches_the_model(tmp_path):
    """forces/T = TEMP + DTEMP and old_forces/T = TEMP (tests/models/specs/thermoelastic.yaml:
    a modulus that falls with the temperature and a thermal strain accumulated from its change):
    three increments heating and straining, STRESS, STATEV and DDSDDE against the closed form."""
    lib = _umat_library(REPO / "tests" / "models" / "specs" / "thermoelastic.yaml", "thermoelastic", tmp_path)
    info = json.loads((tmp_path / "thermoelastic_umat.json").read_text())
    P = dict(zip(info["props"], info["props_default"]))
    rng = np.random.default_rng()
    stress, statev, stran = np.zeros(6), np.zeros(info["nstatv"]), np.zeros(6)
    temps = [300.0, 350.0, 420.0, 380.0]  # TEMP at the start of each increment, then the end
    for k in range(3):
        dstran = rng.uniform(-1e-3, 1e-3, 6)
        pnew, dd = _call_umat(lib, list(P.values()), stress, statev, stran, dstran, float(k), 1.0, temps[k],
                              temps[k + 1] - temps[k])
        assert pnew >= 1
        stran = stran + dstran
        T = temps[k + 1]
        E = P["E0"] * (1 - P["kE"] * (T - P["T0"]))
        lam, G = E * P["nu"] / ((1 + P["nu"]) * (1 - 2 * P["nu"])), E / (2 * (1 + P["nu"]))
        eth = P["alpha"] * (T - temps[0])  # accumulated from the first increment's start
        e = stran.copy()
        e[3:] /= 2  # engineering -> tensor shear
        e[:3] -= eth
        want = 2 * G * e
        want[:3] += lam * e[:3].sum()
        np.testing.assert_allclose(stress, want, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(statev[:3], eth, rtol=1e-12)  # STATEV: eth (Mandel), normal part
        D = np.zeros((6, 6))
        D[:3, :3] = lam
        D[:3, :3] += 2 * G * np.eye(3)
        D[3:, 3:] = G * np.eye(3)
        np.testing.assert_allclose(dd, D, rtol=1e-12, atol=1e-6)


def test_temperature_tables_in_a_plastic_umat_match_the_python_path(tmp_path):
    """docs/zoo/thermo_j2.yaml (modulus and yield stress as interp tables in forces/T): a strain path
    through yield while the temperature rises across the tables' knots (293 -> 900 K) and falls,
    one UMAT call per increment (TEMP, DTEMP), against run_history with the same temperatures:
    STRESS, DDSDDE and STATEV each increment."""
    spec = REPO / "docs" / "zoo" / "thermo_j2.yaml"
    lib = _umat_library(spec, "thermo_j2_return", tmp_path)
    info = json.loads((tmp_path / "thermo_j2_return_umat.json").read_text())
    P = dict(zip(info["props"], info["props_default"]))
    n = 24
    s = np.linspace(0.0, 1.0, n + 1)
    temps = 293.0 + 607.0 * np.interp(s, [0, 0.7, 1], [0, 1, 0.6])
    path = np.outer(np.interp(s, [0, 0.6, 1], [0, 1, 0.3]), [3e-3, -1e-3, -1e-3, 2e-3, 0.0, 1e-3])  # Abaqus Voigt
    dstran = np.diff(path, axis=0)
    stress, statev, stran = np.zeros(6), np.zeros(info["nstatv"]), np.zeros(6)
    got_s, got_dd, got_sv = [], [], []
    for k in range(n):
        pnew, dd = _call_umat(lib, list(P.values()), stress, statev, stran, dstran[k], s[k], s[k + 1] - s[k],
                              temps[k], temps[k + 1] - temps[k])
        assert pnew >= 1
        stran = stran + dstran[k]
        got_s.append(stress.copy()), got_dd.append(dd), got_sv.append(statev.copy())
    strain_m = mandel.voigt_to_sr2(torch.as_tensor(path), "strain", "abaqus").numpy()
    model = modelc.load(spec, "thermo_j2_return").Model(backend="torch")
    res = run_history(model, {"time": s[:, None], "strain": strain_m[:, None, :], "temperature": temps[:, None]},
                      tangent_steps=range(1, n + 1), progress=False)
    assert res.ok and res["equivalent_plastic_strain"][-1, 0] > 1e-3  # it yielded, the tables moved it
    want_s = mandel.sr2_to_voigt(torch.as_tensor(res["stress"][1:, 0]), "stress", "abaqus").numpy()
    want_dd = mandel.ssr4_to_voigt(torch.as_tensor(res["tangent"][:, 0]), "stiffness", "abaqus").numpy()
    scale = np.abs(want_s).max()
    np.testing.assert_allclose(np.array(got_s), want_s, rtol=1e-10, atol=1e-10 * scale)
    np.testing.assert_allclose(np.array(got_dd), want_dd, rtol=1e-9, atol=1e-9 * P["E_293"])
    off = 0
    for var, size in info["statev"]:
        want = res[var][1:, 0].reshape(n, size)
        np.testing.assert_allclose(np.array(got_sv)[:, off:off + size], want, rtol=1e-9,
                                   atol=1e-9 * max(np.abs(want).max(), 1e-12), err_msg=var)
        off += size


def test_an_input_the_host_cannot_provide_is_refused(tmp_path, capsys):
    spec = tmp_path / "pressure.yaml"
    spec.write_text("models:\n  pressurized:\n    inputs:\n      eps: {var: forces/E, type: SR2}\n"
                    "      q: {var: forces/q}\n    outputs:\n      S: {var: state/S, type: SR2}\n"
                    "    equations:\n      S: 1000*eps + q*I2\n")
    assert cli_main(["export", "umat", str(spec), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert "'forces/q', which a UMAT cannot provide" in err and "forces/T" in err
    assert not (tmp_path / "out" / "pressurized_umat.c").exists()
