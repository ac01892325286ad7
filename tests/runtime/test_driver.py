"""The transient driver (modelc.runtime.driver) and `modelc run`, against hand-written fake models.

The fakes satisfy the compiled-model protocol the driver codes against (input/output names and types,
parameters, a call returning outputs, a Jacobian with ``block`` and a per-point status). Oracles:
closed forms (elasticity; uniaxial-strain perfect plasticity as a scalar clip recursion), NEML2's
reference results (stresses, internal variables, tangents), and finite differences.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import modelc
from modelc.cli import main as cli_main
from modelc.errors import InputError
from modelc.runtime.driver import (NonConvergenceWarning, load_results, plot_results, run_history,
                                  save_results)
from modelc.runtime.histories import uniaxial_strain_history
from modelc.runtime.types import SR2, Scalar

REF = str(Path(__file__).resolve().parents[1] / "reference" / "neml2" / "{}__uniaxial.npz")
ONE = torch.tensor([1.0, 1, 1, 0, 0, 0], dtype=torch.float64)


# --------------------------------------------------------------------------------------------------
# Fake compiled models


class FakeResult:
    def __init__(self, outputs, jacobian=None, status=None):
        self._out, self.jacobian, self.status = outputs, jacobian, status

    def __getitem__(self, name):
        return self._out[name]


class FakeJacobian:
    def __init__(self, blocks):
        self._blocks = blocks

    def __getitem__(self, key):  # as LabeledMatrix: J["state/S", "forces/E"] -> (batch, 6, 6)
        return self._blocks[key]


class AxisStub:
    """A LabeledAxis stand-in: ``variable_names`` and ``type_of``."""

    def __init__(self, types):
        self._types = types
        self.variable_names = tuple(types)

    def type_of(self, name):
        return self._types[name]


def _param(model, params, name, batch, dtype):
    """A parameter as (batch,): the override (scalar or per point) or the default."""
    v = (params or {}).get(name, model.parameters[name].default)
    return torch.as_tensor(v, dtype=dtype).expand(batch)


def _iso_stiffness(E, nu, dtype):
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    one = ONE.to(dtype)
    return lam * torch.outer(one, one) + 2 * mu * torch.eye(6, dtype=dtype), lam, mu


class FakeElastic:
    """sigma = C eps, with C isotropic plus an optional non-symmetric perturbation (to tell d S/d E
    from its transpose). Explicit: no status. Uses an axis stub for its types."""

    def __init__(self, extra=None):
        self.parameters = {"E": SimpleNamespace(default=200000.0), "nu": SimpleNamespace(default=0.3)}
        self.input_axis = AxisStub({"forces/E": SR2})
        self.output_axis = AxisStub({"state/S": SR2})
        self.extra = extra
        self.calls = []

    def stiffness(self, dtype, params=None):
        E = float((params or {}).get("E", 200000.0))
        C = _iso_stiffness(E, 0.3, dtype)[0]
        return C if self.extra is None else C + self.extra.to(dtype)

    def __call__(self, inputs, derivatives=False, **params):
        eps = inputs["forces/E"]
        self.calls.append((set(inputs), eps.dtype, derivatives))
        C = self.stiffness(eps.dtype, params)
        jac = FakeJacobian({("state/S", "forces/E"): C.expand(eps.shape[0], 6, 6)}) if derivatives else None
        return FakeResult({"state/S": eps @ C.T}, jac, None)


class FakeJ2:
    """J2 radial return with linear isotropic hardening (K = 0: perfect plasticity), in NEML2's
    variables: ep is the usual equivalent plastic strain, Ep += sqrt(3/2) dp N with N the unit flow
    direction, flow rate gammadot = sqrt(3/2) dp / dt. Consistent tangent in closed form:
    D = K_b 1(x)1 + 2 mu theta Idev - 2 mu theta_bar N(x)N, theta = 1 - 3 mu dp / vm_trial,
    theta_bar = 1 / (1 + H / (3 mu)) - (1 - theta)."""

    def __init__(self, hardening=True, fail_above=None, garbage=False):
        self.hardening = hardening
        self.fail_above, self.garbage = fail_above, garbage
        self.parameters = {k: SimpleNamespace(default=v) for k, v in
                           dict(E=200000.0, nu=0.3, sigma_y=100.0, K=2000.0).items()
                           if k != "K" or hardening}
        ins = {"forces/E": SR2, "forces/t": Scalar, "old_forces/t": Scalar,
               "old_state/internal/Ep": SR2}
        outs = {"state/S": SR2, "state/internal/Ep": SR2, "state/internal/gamma_rate": Scalar}
        if hardening:
            ins["old_state/internal/ep"] = Scalar
            outs["state/internal/ep"] = Scalar
        self.input_types, self.output_types = ins, outs
        self.input_names, self.output_names = tuple(ins), tuple(outs)
        self.max_dead_input = 0.0

    def __call__(self, inputs, derivatives=False, **params):
        eps, Ep0 = inputs["forces/E"], inputs["old_state/internal/Ep"]
        dt = inputs["forces/t"] - inputs["old_forces/t"]
        ep0 = inputs.get("old_state/internal/ep", torch.zeros_like(dt))
        dtype, b = eps.dtype, eps.shape[0]
        E, nu, sy = (_param(self, params, k, b, dtype) for k in ("E", "nu", "sigma_y"))
        H = _param(self, params, "K", b, dtype) if self.hardening else torch.zeros_like(E)
        lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
        one = ONE.to(dtype)
        ee = eps - Ep0
        s_tr = (lam * ee[:, :3].sum(1))[:, None] * one + 2 * mu[:, None] * ee
        dev = s_tr - s_tr[:, :3].sum(1, keepdim=True) / 3 * one
        ndev = torch.sqrt((dev * dev).sum(1))
        vm = math.sqrt(1.5) * ndev
        f = vm - sy - H * ep0
        dp = torch.clamp(f, min=0.0) / (3 * mu + H)
        N = dev / torch.where(ndev > 0, ndev, torch.ones_like(ndev))[:, None]
        S = s_tr - (2 * mu * math.sqrt(1.5) * dp)[:, None] * N
        out = {"state/S": S, "state/internal/Ep": Ep0 + (math.sqrt(1.5) * dp)[:, None] * N,
               "state/internal/gamma_rate": math.sqrt(1.5) * dp / dt}
        if self.hardening:
            out["state/internal/ep"] = ep0 + dp
        plastic = dp > 0
        conv = torch.ones_like(plastic)
        if self.fail_above is not None:
            conv = eps[:, 0].abs() <= self.fail_above
            if not self.garbage:
                out = {k: torch.where(conv.reshape(-1, *[1] * (v.dim() - 1)), v, torch.nan)
                       for k, v in out.items()}
        status = SimpleNamespace(converged=conv, iterations=1 + plastic.long(),
                                 residual_norm=torch.zeros_like(dt))
        jac = None
        if derivatives:
            Kb = E / (3 * (1 - 2 * nu))
            theta = torch.where(plastic, 1 - 3 * mu * dp / torch.where(plastic, vm, 1.0), 1.0)
            theta_bar = torch.where(plastic, 1 / (1 + H / (3 * mu)) - (1 - theta), 0.0)
            Idev = torch.eye(6, dtype=dtype) - torch.outer(one, one) / 3
            D = (Kb[:, None, None] * torch.outer(one, one) + (2 * mu * theta)[:, None, None] * Idev
                 - (2 * mu * theta_bar)[:, None, None] * N[:, :, None] * N[:, None, :])
            jac = FakeJacobian({("state/S", "forces/E"): D})
        return FakeResult(out, jac, status)


# --------------------------------------------------------------------------------------------------
# The driver


def _random_history(rng, steps, batch, scale=1e-3):
    strain = np.zeros((steps, batch, 6))
    strain[1:] = np.cumsum(rng.normal(scale=scale, size=(steps - 1, batch, 6)), axis=0)
    time = np.cumsum(rng.uniform(0.1, 1.0, size=(steps, batch)), axis=0)
    return {"time": time, "strain": strain}


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
def test_elastic_closed_form_and_tangent_orientation(dtype, rtol):
    rng = np.random.default_rng()
    extra = torch.as_tensor(rng.normal(scale=5e4, size=(6, 6)))  # non-symmetric on purpose
    model = FakeElastic(extra)
    hist = _random_history(rng, steps=7, batch=5)
    res = run_history(model, hist, dtype=dtype, tangent_steps=[3, 1], progress=False)
    C = model.stiffness(torch.float64).numpy()
    expect = hist["strain"] @ C.T
    bound = (np.abs(hist["strain"]) @ np.abs(C).T).max()  # rounding scales with |C| |eps|
    np.testing.assert_allclose(res["stress"], expect, rtol=rtol, atol=rtol * bound)
    assert res["stress"].dtype == (np.float64 if dtype == torch.float64 else np.float32)
    np.testing.assert_array_equal(res["tangent_steps"], [1, 3])
    np.testing.assert_allclose(res["tangent"], np.broadcast_to(C, (2, 5, 6, 6)), rtol=rtol,
                               atol=rtol * np.abs(C).max())
    assert res["converged"].all() and not res["iterations"].any() and res.ok
    np.testing.assert_array_equal(res["stress"][0], 0.0)
    # only declared inputs are passed, in the requested dtype; derivatives only where asked
    assert all(c[0] == {"forces/E"} and c[1] == dtype for c in model.calls)
    assert [c[2] for c in model.calls] == [True, False, True, False, False, False]


def _clip_oracle(eps_xx, E, nu, sy):
    """Uniaxial strain, perfect plasticity: q = sxx - syy is clipped to [-sy, sy] in increments
    2 mu d eps; p = K_b eps. sxx = p + 2/3 q, syy = szz = p - 1/3 q."""
    mu, Kb = E / (2 * (1 + nu)), E / (3 * (1 - 2 * nu))
    q = np.zeros_like(eps_xx)
    for n in range(1, len(eps_xx)):
        q[n] = np.clip(q[n - 1] + 2 * mu * (eps_xx[n] - eps_xx[n - 1]), -sy, sy)
    return Kb * eps_xx + 2 / 3 * q, Kb * eps_xx - 1 / 3 * q, q


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
def test_perfect_plasticity_uniaxial_strain_plateau(dtype, rtol):
    rng = np.random.default_rng()
    amps = rng.uniform(1e-4, 0.02, size=4)
    hist = uniaxial_strain_history(amps, rng.uniform(0.5, 5.0, size=4), steps=int(rng.integers(9, 40)))
    res = run_history(FakeJ2(hardening=False), hist, dtype=dtype, progress=False)
    sxx, syy, q = _clip_oracle(hist["strain"][..., 0], 200000.0, 0.3, 100.0)
    scale = np.abs(sxx).max()
    np.testing.assert_allclose(res["stress"][..., 0], sxx, atol=rtol * scale)
    np.testing.assert_allclose(res["stress"][..., 1], syy, atol=rtol * scale)
    np.testing.assert_allclose(res["stress"][..., 2], syy, atol=rtol * scale)
    on_surface = np.abs(q) >= 100.0
    assert on_surface.any()  # the plateau is reached ...
    plateau = res["stress"][..., 0] - res["stress"][..., 1]
    np.testing.assert_allclose(np.abs(plateau[on_surface]), 100.0, rtol=rtol)  # ... and held
    assert "plastic_strain" in res and "flow_rate" in res and "equivalent_plastic_strain" not in res
    assert res["plastic_strain"] is res["state/internal/Ep"]
    # the status is passed through per point and step (the fake takes 2 iterations when plastic)
    np.testing.assert_array_equal(res["iterations"][1:], 1 + (res["flow_rate"][1:] > 0))
    assert (res["iterations"][1:] == 2).any() and res["iterations"][0].sum() == 0


@pytest.mark.parametrize("name,hardening", [("j2_perfect", False), ("j2_linear_iso", True)])
def test_matches_neml2_reference(name, hardening):
    """Driver sequencing, state carrying and names against NEML2's results (tolerance: the README
    reports independent radial returns reproduce them to ~1e-10 relative)."""
    ref = np.load(REF.format(name))
    res = run_history(FakeJ2(hardening), ref, tangent_steps=ref["tangent_steps"], progress=False)
    keys = ["stress", "plastic_strain", "flow_rate"] + (["equivalent_plastic_strain"] if hardening else [])
    for k in keys:
        np.testing.assert_allclose(res[k], ref[k], rtol=1e-9, atol=1e-9 * np.abs(ref[k]).max(), err_msg=k)
    np.testing.assert_allclose(res["tangent"], ref["tangent"], rtol=1e-9, atol=1e-9 * 2e5)
    np.testing.assert_array_equal(res["time"], ref["time"])


def test_tangent_matches_finite_differences_of_one_step():
    rng = np.random.default_rng()
    hist = uniaxial_strain_history([0.004, 0.01], [1.0, 2.0], steps=12)
    hist["strain"][1:, :, 1:] += rng.normal(scale=1e-3, size=(12, 2, 5))
    n, h = 9, 1e-7
    res = run_history(FakeJ2(), hist, tangent_steps=[n], progress=False)
    fd = np.zeros((2, 6, 6))
    for j in range(6):
        cols = []
        for sign in (1, -1):
            short = {"time": hist["time"][: n + 1], "strain": hist["strain"][: n + 1].copy()}
            short["strain"][n, :, j] += sign * h
            cols.append(run_history(FakeJ2(), short, progress=False)["stress"][n])
        fd[:, :, j] = (cols[0] - cols[1]) / (2 * h)
    np.testing.assert_allclose(res["tangent"][0], fd, rtol=1e-5, atol=1e-5 * 2e5)


def test_non_converged_points_are_nan_and_summarised():
    hist = uniaxial_strain_history([0.002, 0.01, 0.004, 0.02], 1.0, steps=20)
    good = run_history(FakeJ2(), hist, progress=False)
    model = FakeJ2(fail_above=0.005)
    with pytest.warns(NonConvergenceWarning, match=r"2 of 4 point\(s\) did not converge"):
        res = run_history(model, hist, tangent_steps=[5, 10], progress=False)
    assert not res.ok and set(res.failed) == {1, 3}
    first = {p: int(np.argmax(np.abs(hist["strain"][:, p, 0]) > 0.005)) for p in (1, 3)}
    assert res.failed == first
    for p in (0, 2):  # untouched by the others' failure
        np.testing.assert_array_equal(res["stress"][:, p], good["stress"][:, p])
        assert res["converged"][:, p].all()
    for p, s in first.items():
        assert res["converged"][:s, p].all() and not res["converged"][s:, p].any()
        assert np.isnan(res["stress"][s:, p]).all() and np.isfinite(res["stress"][:s, p]).all()
        assert np.isnan(res["state/internal/ep"][s:, p]).all()
        assert (res["iterations"][s + 1:, p] == 0).all()
    assert np.isnan(res["tangent"][1, 1]).all() and np.isfinite(res["tangent"][:, 0]).all()
    text = res.summary()
    assert "2 of 4 point(s) did not converge" in text
    assert f"point 1 (A=0.01, T=1 s) from step {first[1]}" in text and f"step {first[3]}" in text


def test_non_converged_finite_garbage_is_never_returned_as_good():
    hist = uniaxial_strain_history([0.01], 1.0, steps=8)
    with pytest.warns(NonConvergenceWarning):
        res = run_history(FakeJ2(fail_above=0.005, garbage=True), hist, progress=False)
    s = res.failed[0]
    assert np.isnan(res["stress"][s:, 0]).all() and not res["converged"][s:, 0].any()


def test_parameter_overrides_scalar_and_per_point():
    hist = uniaxial_strain_history([0.01, 0.01, 0.01], 1.0, steps=10)
    res = run_history(FakeJ2(hardening=False), hist, params={"sigma_y": [50.0, 100.0, 150.0]},
                      progress=False)
    q = res["stress"][2, :, 0] - res["stress"][2, :, 1]  # loading, on the plateau
    np.testing.assert_allclose(q, [50.0, 100.0, 150.0], rtol=1e-12)
    res = run_history(FakeJ2(hardening=False), hist, params={"sigma_y": 70.0}, progress=False)
    np.testing.assert_allclose(res["stress"][2, :, 0] - res["stress"][2, :, 1], 70.0, rtol=1e-12)


@pytest.mark.parametrize("params,message", [
    ({"sigma_Y": 1.0}, "unknown parameter 'sigma_Y'; did you mean 'sigma_y'?"),
    ({"sigma_y": [1.0, 2.0]}, "expected a number or 3 values"),
    ({"sigma_y": "abc"}, "expected a number or one number per point"),
    ({"E": float("nan")}, "parameter 'E' is not finite"),
])
def test_bad_parameters(params, message):
    hist = uniaxial_strain_history([0.01, 0.01, 0.01], 1.0, steps=4)
    with pytest.raises(InputError, match=message.replace("?", r"\?").replace("(", r"\(")):
        run_history(FakeJ2(), hist, params=params, progress=False)


def test_bad_wiring_and_tangent_steps():
    hist = uniaxial_strain_history([0.01], 1.0, steps=4)
    m = FakeJ2()
    with pytest.raises(InputError, match=r"tangent step\(s\) \[0, 5\] out of range.*1\.\.4"):
        run_history(m, hist, tangent_steps=[0, 2, 5], progress=False)
    m.input_types = {**m.input_types, "forces/T": Scalar}
    m.input_names = tuple(m.input_types)
    with pytest.raises(InputError, match=r"the model reads 'forces/T' \(the temperature\): give the history a "
                                         r"'temperature' array"):
        run_history(m, hist, progress=False)
    m.input_types = {**m.input_types, "forces/P": Scalar}
    m.input_names = tuple(m.input_types)
    with pytest.raises(InputError, match="model input 'forces/P' is not driven"):
        run_history(m, {**hist, "temperature": np.zeros_like(hist["time"])}, progress=False)
    m = FakeElastic()
    m.output_axis = AxisStub({})
    with pytest.raises(InputError, match="no output 'state/S'"):
        run_history(m, hist, progress=False)
    m = FakeJ2()
    m.output_types = {k: v for k, v in m.output_types.items() if k != "state/internal/ep"}
    m.output_names = tuple(m.output_types)
    with pytest.raises(InputError, match="'old_state/internal/ep' has no matching output"):
        run_history(m, hist, progress=False)


def test_progress_off_prints_nothing_and_results_round_trip(tmp_path, capsys):
    hist = uniaxial_strain_history([0.01, 0.02], [1.0, 3.0], steps=16)
    res = run_history(FakeJ2(), hist, progress=True)  # stderr is not a TTY under pytest
    assert capsys.readouterr().err == ""
    path = save_results(res, tmp_path / "sub" / "r.npz")
    with np.load(path) as back:
        assert set(back.files) == set(res) | {"aliases"}  # each array once, the aliases as metadata
        for k in res:
            np.testing.assert_array_equal(back[k], res[k])
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temporary left behind
    # each array is stored once: no two stored arrays are the same object, and the aliases resolve
    ids = [id(v) for v in res.values()]
    assert len(ids) == len(set(ids))
    assert res.aliases["state/S"] == "stress" and res["state/S"] is res["stress"]
    assert res.aliases["state/internal/Ep"] == "plastic_strain" and "state/internal/Ep" not in dict(res)
    back = load_results(path)
    assert back.aliases == res.aliases and back.failed == res.failed == {}
    np.testing.assert_array_equal(back["state/internal/ep"], res["equivalent_plastic_strain"])


def test_plot_writes_png(tmp_path):
    hist = uniaxial_strain_history(np.linspace(0.002, 0.02, 14), 1.0, steps=12)  # > 12: colour bar
    with pytest.warns(NonConvergenceWarning):
        res = run_history(FakeJ2(fail_above=0.015), hist, progress=False)
    for name, r in (("many.png", res), ("elastic.png", run_history(FakeElastic(), hist, progress=False))):
        p = plot_results(r, tmp_path / name, title=name)
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


# --------------------------------------------------------------------------------------------------
# `modelc run`


@pytest.fixture
def fake_load(monkeypatch, tmp_path):
    calls = []

    def load(spec, model=None, **kw):  # as modelc.load: returns the generated module
        def build(**kw):
            calls.append((spec, model, kw))
            return FakeJ2()
        return SimpleNamespace(Model=build)

    monkeypatch.setattr(modelc, "load", load, raising=False)
    spec = tmp_path / "j2.yaml"
    spec.write_text("models: {}\n")
    return SimpleNamespace(calls=calls, spec=str(spec), tmp=tmp_path)


def _history_file(tmp, **arrays):
    base = uniaxial_strain_history([0.005, 0.01], [1.0, 2.0], steps=8)
    base.update(arrays)
    path = tmp / "h.npz"
    np.savez(path, **{k: v for k, v in base.items() if v is not None})
    return str(path)


def test_cli_run_writes_results_table_and_plot(fake_load, capsys):
    out, png = fake_load.tmp / "r.npz", fake_load.tmp / "p.png"
    rc = cli_main(["run", fake_load.spec, "--history", _history_file(fake_load.tmp), "--out", str(out),
                   "--model", "j2", "--set", "sigma_y=120", "--dtype", "float32",
                   "--tangent-steps", "2,6", "--plot", str(png)])
    text = capsys.readouterr().out
    assert rc == 0
    assert fake_load.calls[0][1] == "j2" and fake_load.calls[0][2]["dtype"] == torch.float32
    with np.load(out) as r:
        assert r["stress"].shape == (9, 2, 6) and r["stress"].dtype == np.float32
        assert r["converged"].shape == r["iterations"].shape == (9, 2) and r["converged"].all()
        assert r["tangent"].shape == (2, 2, 6, 6) and "equivalent_plastic_strain" in r.files
        assert "state/internal/ep" not in r.files and "state/internal/ep" in str(r["aliases"])
        q = r["stress"][2, 1, 0] - r["stress"][2, 1, 1]
        assert abs(q - (120 + 2000 * r["equivalent_plastic_strain"][2, 1])) < 1e-2
    assert "peak |sxx|" in text and "final ep" in text and "all 2 point(s) converged" in text
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_run_exit_1_when_points_fail(fake_load, monkeypatch, capsys):
    monkeypatch.setattr(modelc, "load", lambda spec, model=None: SimpleNamespace(
        Model=lambda **kw: FakeJ2(fail_above=0.007)))
    rc = cli_main(["run", fake_load.spec, "--history", _history_file(fake_load.tmp),
                   "--out", str(fake_load.tmp / "r.npz")])
    out, err = capsys.readouterr()
    assert rc == 1 and "1 of 2 point(s) did not converge" in out and "Warning" not in err
    assert (fake_load.tmp / "r.npz").is_file()


def _bad(tmp):
    h = uniaxial_strain_history([0.005, 0.01], [1.0, 2.0], steps=8)
    nan_strain = h["strain"].copy()
    nan_strain[3, 1, 2] = np.nan
    shifted = h["strain"].copy()
    shifted[0, 1, 0] = 1e-4
    back = h["time"].copy()
    back[4, 0] = back[3, 0]
    return {
        "missing time": ([], dict(time=None), r"missing array\(s\) 'time'"),
        "missing strain": ([], dict(strain=None), r"missing array\(s\) 'strain'"),
        "strain shape": ([], dict(strain=h["strain"][..., :3]), r"'strain' must have shape \(steps, batch, 6\)"),
        "time shape": ([], dict(time=h["time"][:, :1]), "'strain' has \\(steps, batch\\) = \\(9, 2\\) but 'time'"),
        "time 1-D": ([], dict(time=h["time"][:, 0]), r"'time' must have shape \(steps, batch\)"),
        "non-finite": ([], dict(strain=nan_strain), r"'strain' has 1 non-finite value\(s\), the first at index \(3, 1, 2\)"),
        "not from zero": ([], dict(strain=shifted), r"must start from zero strain .* point\(s\) 1"),
        "time stalls": ([], dict(time=back), "'time' must increase strictly.*point 0"),
        "one row": ([], dict(time=h["time"][:1], strain=h["strain"][:1]), "at least one step"),
        "unknown param": (["--set", "sigmay=3"], {}, "unknown parameter 'sigmay'; did you mean 'sigma_y'"),
        "set no value": (["--set", "E"], {}, "--set 'E': expected NAME=VALUE"),
        "set empty": (["--set", "E="], {}, "--set 'E=': expected NAME=VALUE"),
        "set not number": (["--set", "E=abc"], {}, "'abc' is not a number"),
        "set twice": (["--set", "E=1", "--set", "E=2"], {}, "'E' is set twice"),
        "set wrong length": (["--set", "E=1,2,3"], {}, "expected a number or 2 values"),
        "tangent steps": (["--tangent-steps", "0,3"], {}, r"tangent step\(s\) \[0\] out of range"),
        "tangent steps text": (["--tangent-steps", "x"], {}, "expected step numbers"),
        "plot suffix": (["--plot", str(tmp / "p.txt")], {}, "expected a .png"),
        "device": (["--device", "tpu"], {}, "expected cpu or cuda"),
    }


@pytest.mark.parametrize("case", list(_bad(Path("/tmp"))))
def test_cli_run_bad_input(case, fake_load, capsys):
    extra, arrays, message = _bad(fake_load.tmp)[case]
    rc = cli_main(["run", fake_load.spec, "--history", _history_file(fake_load.tmp, **arrays),
                   "--out", str(fake_load.tmp / "r.npz"), *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert re.search(message, err), err
    assert "Traceback" not in err and not (fake_load.tmp / "r.npz").exists()


def test_cli_run_missing_files_and_compiler(fake_load, monkeypatch, capsys):
    out = str(fake_load.tmp / "r.npz")
    assert cli_main(["run", fake_load.spec, "--history", str(fake_load.tmp / "nope.npz"), "--out", out]) == 2
    assert "nope.npz: history file not found" in capsys.readouterr().err
    (fake_load.tmp / "junk.npz").write_text("not a zip")
    assert cli_main(["run", fake_load.spec, "--history", str(fake_load.tmp / "junk.npz"), "--out", out]) == 2
    assert "cannot read as an .npz history file" in capsys.readouterr().err
    hist = _history_file(fake_load.tmp)
    assert cli_main(["run", str(fake_load.tmp / "no.yaml"), "--history", hist, "--out", out]) == 2
    assert "no.yaml: spec file not found" in capsys.readouterr().err
    monkeypatch.delattr(modelc, "load")
    assert cli_main(["run", fake_load.spec, "--history", hist, "--out", out]) == 2
    assert "no compiler entry point (modelc.load)" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert cli_main(["run", fake_load.spec, "--history", hist, "--out", out, "--device", "cuda"]) == 2
        assert "CUDA is not available" in capsys.readouterr().err
    for name in ("r.txt", "results"):  # NumPy would write an .npz under any name: refused before the run
        assert cli_main(["run", fake_load.spec, "--history", hist, "--out", str(fake_load.tmp / name)]) == 2
        assert f"--out {fake_load.tmp / name}: results are written as NumPy .npz" in capsys.readouterr().err
        assert not (fake_load.tmp / name).exists() and not fake_load.calls


# --------------------------------------------------------------------------------------------------
# `modelc demo`


def test_demo_runs_bundled_history(fake_load, monkeypatch, capsys):
    lib = fake_load.tmp / "lib"
    lib.mkdir()
    (lib / "library.yaml").write_text("compose:\n  j2_linear_iso: {doc: a fake}\n")
    monkeypatch.setattr("modelc.bundled.spec_dir", lambda: lib)
    out = fake_load.tmp / "demo"
    assert cli_main(["demo", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert fake_load.calls[-1][0].endswith("library.yaml") and fake_load.calls[-1][1] == "j2_linear_iso"
    assert "strain A=0.008, T=10 s" in text and "1200 of 1200 point-steps converged" in text
    assert (out / "results.npz").is_file() and (out / "stress_strain.png").is_file()
    with np.load(out / "results.npz") as r:  # uniaxial stress: the lateral stresses are held at zero
        assert np.abs(r["stress"][..., 1:]).max() <= 1e-8 * np.abs(r["stress"][..., 0]).max()
        assert r["control"][..., 1:].all() and not r["control"][..., 0].any()
    assert cli_main(["demo", "--model", "nosuch", "--out", str(out)]) == 2
    assert "no bundled model named 'nosuch'" in capsys.readouterr().err
    monkeypatch.delattr(modelc, "load")
    assert cli_main(["demo", "--out", str(out)]) == 2
    assert "modelc.load" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# The real compiler, end to end (the bundled library through modelc.load)

LIBRARY = Path(__file__).resolve().parents[2] / "spec" / "library.yaml"


def test_real_demo_uniaxial_stress_loops(tmp_path, capsys):
    """`modelc demo` (j2_linear_iso from the bundled library, cyclic uniaxial stress): the prescribed xx
    strain is the history's, the lateral stresses stay at zero, and on every plastic step the stress
    sits on the yield surface |sxx| = sigma_y + K ep, in tension and in compression (loops)."""
    assert cli_main(["demo", "--out", str(tmp_path), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "library.yaml" in text and "1200 of 1200 point-steps converged" in text
    assert (tmp_path / "stress_strain.png").read_bytes()[:4] == b"\x89PNG"
    from modelc.commands.demo import AMPLITUDES, CYCLES, STEPS, TOTAL_TIMES
    from modelc.runtime.histories import uniaxial_stress_history

    h = uniaxial_stress_history(AMPLITUDES, TOTAL_TIMES, STEPS, cycles=CYCLES)
    with np.load(tmp_path / "results.npz") as res:
        assert res["converged"].all()
        np.testing.assert_array_equal(res["strain"][..., 0], h["strain"][..., 0])
        s, ep = res["stress"][..., 0], res["equivalent_plastic_strain"]
        assert np.abs(res["stress"][..., 1:]).max() <= 1e-8 * np.abs(s).max()
        plastic = np.diff(ep, axis=0) > 0
        np.testing.assert_allclose(np.abs(s[1:][plastic]), 100.0 + 2000.0 * ep[1:][plastic], rtol=1e-9)
        assert (s[1:][plastic] > 0).any() and (s[1:][plastic] < 0).any()


def test_real_cli_run_elastic(tmp_path, capsys):
    out = tmp_path / "r.npz"
    hist = tmp_path / "h.npz"
    np.savez(hist, **uniaxial_strain_history([0.001, -0.002], [1.0, 2.0], steps=6))
    rc = cli_main(["run", str(LIBRARY), "--model", "elastic", "--history", str(hist), "--out", str(out),
                   "--set", "E=100000", "--dtype", "float32", "--tangent-steps", "3"])
    assert rc == 0, capsys.readouterr()
    C = _iso_stiffness(1e5, 0.3, torch.float64)[0].numpy()
    with np.load(out) as r:
        np.testing.assert_allclose(r["stress"], r["strain"] @ C.T, rtol=1e-5, atol=1e-5 * 200)
        np.testing.assert_allclose(r["tangent"][0], np.broadcast_to(C, (2, 6, 6)), rtol=1e-5, atol=1e-2)


class FakeSubstepping(FakeElastic):
    """An elastic model built with on_failure="substep": records the old forces it is handed."""

    on_failure = "substep"

    def __call__(self, inputs, derivatives=False, old_forces=None, **params):
        self.old = getattr(self, "old", []) + [None if old_forces is None else old_forces["forces/E"].clone()]
        return super().__call__(inputs, derivatives, **params)


def test_substepping_models_get_the_previous_strain():
    rng = np.random.default_rng()
    hist = _random_history(rng, 5, 3)
    m = FakeSubstepping()
    run_history(m, hist, progress=False)
    # step n is handed the strain of step n-1 (row 0 for the first step), so it can cut the step
    assert len(m.old) == 4
    for n, old in enumerate(m.old, start=1):
        np.testing.assert_array_equal(old.numpy(), hist["strain"][n - 1])
    plain = FakeElastic()
    run_history(plain, hist, progress=False)  # a model that does not sub-step gets no old_forces
    assert len(plain.calls) == 4


def test_a_run_continued_from_its_carry_equals_the_whole_run():
    """run_history(initial=carry) (how modelc.runtime.distributed runs chunks): the second half,
    started from the first half's last row, equals the whole run's rows bit for bit."""
    from modelc.runtime.driver import Carry
    from modelc.runtime.histories import History

    hist = uniaxial_strain_history([0.002, 0.004, 0.001], [1.0, 2.0, 3.0], steps=12)
    m = FakeJ2(fail_above=0.0035)  # plastic state to carry, and a failed point (1) carried as dead
    with pytest.warns(NonConvergenceWarning):
        whole = run_history(m, hist, progress=False)
    with pytest.warns(NonConvergenceWarning):
        first = run_history(m, {k: v[:6] for k, v in hist.items()}, progress=False)
    assert first.failed == {1: 3} and whole["state/internal/ep"][5, 0] > 0
    from modelc.runtime.driver import variable_shapes

    outs = list(variable_shapes(m, "output"))  # the model's outputs (results store some under aliases)
    carry = first.carry(outs)
    assert isinstance(carry, Carry)
    rest = History(time=hist["time"][5:], strain=hist["strain"][5:], labels=tuple(hist["labels"]))
    second = run_history(m, rest, progress=False, initial=carry)
    for k in outs + ["converged", "iterations", "residual_norm"]:
        np.testing.assert_array_equal(second[k][1:], whole[k][6:], err_msg=k)


def test_a_stress_controlled_run_continued_from_its_carry_equals_the_whole_run():
    """With stress control the carry holds the strain solved at the last row: the second half starts
    its control Newton and its old strain from it (the history's own row holds zeros there), and
    equals the whole run bit for bit; a carried strain of the wrong shape is named."""
    import modelc
    from modelc.runtime.driver import Carry, variable_shapes
    from modelc.runtime.histories import as_history, uniaxial_stress_history

    m = modelc.load("j2_linear_iso").Model(dtype=torch.float64, backend="c")
    hist = as_history(uniaxial_stress_history([0.004, -0.006], [1.0, 2.0], steps=16))
    whole = run_history(m, hist, progress=False)
    rows = lambda sl: {k: getattr(hist, k)[sl] for k in ("time", "strain", "stress", "control")}  # noqa: E731
    first = run_history(m, rows(slice(0, 9)), progress=False)
    outs = list(variable_shapes(m, "output"))
    carry = first.carry(outs)
    assert np.abs(carry.strain[:, 1]).min() > 1e-4  # a lateral strain was solved for
    rest = rows(slice(8, None))
    second = run_history(m, rest, progress=False, initial=carry)
    for k in outs + ["strain", "converged"]:
        np.testing.assert_array_equal(second[k][1:], whole[k][9:], err_msg=k)
    with pytest.raises(InputError, match=r"the carried strain has shape \(3, 6\), expected \(2, 6\)"):
        run_history(m, rest, progress=False, initial=Carry(carry.state, carry.alive, np.zeros((3, 6))))


THERMO = Path(__file__).resolve().parents[1] / "models" / "specs" / "thermoelastic.yaml"


def _thermo_closed_form(strain: np.ndarray, temperature: np.ndarray, p: dict) -> np.ndarray:
    """The thermoelastic spec's stress (steps, batch, 6): E(T) = E0 (1 - kE (T - T0)), the thermal
    strain alpha (T - T[row 0]) I accumulated from row 0's temperature."""
    E = p["E0"] * (1 - p["kE"] * (temperature - p["T0"]))
    lam, G = E * p["nu"] / ((1 + p["nu"]) * (1 - 2 * p["nu"])), E / (2 * (1 + p["nu"]))
    e = strain.copy()
    e[..., :3] -= (p["alpha"] * (temperature - temperature[:1]))[..., None]
    S = 2 * G[..., None] * e
    S[..., :3] += (lam * e[..., :3].sum(axis=-1))[..., None]
    return S


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_a_temperature_history_drives_forces_T(backend):
    """A history's 'temperature' (steps, batch) is forces/T of each row and old_forces/T of the next
    (NEML2's names): the thermoelastic spec against its closed form at every step, strain-controlled
    on a random path and under mixed control with every stress held at zero (free thermal expansion:
    the strain is the thermal strain alone)."""
    m = modelc.load(THERMO, "thermoelastic").Model(backend=backend)
    p = {k: float(v.default[0]) for k, v in m.parameter_info.items()}
    rng = np.random.default_rng()
    steps, batch = 25, 3
    t = np.repeat(np.linspace(0.0, 10.0, steps)[:, None], batch, axis=1)
    T = 300.0 + np.cumsum(rng.uniform(-20.0, 40.0, (steps, batch)), axis=0)
    strain = np.concatenate([np.zeros((1, batch, 6)), np.cumsum(rng.normal(0, 2e-4, (steps - 1, batch, 6)), axis=0)])
    res = run_history(m, {"time": t, "strain": strain, "temperature": T}, progress=False)
    np.testing.assert_allclose(res["stress"][1:], _thermo_closed_form(strain, T, p)[1:], rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(res["temperature"], T)
    free = run_history(m, {"time": t, "strain": np.zeros_like(strain), "stress": np.zeros_like(strain),
                           "control": np.ones(6, bool), "temperature": T}, progress=False)
    want = np.zeros_like(strain)
    want[..., :3] = (p["alpha"] * (T - T[:1]))[..., None]
    np.testing.assert_allclose(free["strain"], want, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(free["stress"], 0.0, atol=1e-9)
    with pytest.raises(InputError, match=r"'temperature' must have shape \(steps, batch\)"):
        run_history(m, {"time": t, "strain": strain, "temperature": T[:, :2]}, progress=False)
    with pytest.raises(InputError, match="the model reads 'forces/T'"):
        run_history(m, {"time": t, "strain": strain}, progress=False)
