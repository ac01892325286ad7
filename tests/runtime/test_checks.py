"""Values at the call boundary (issue 15): non-finite or out-of-bounds parameters are refused naming
the parameter; points with non-finite inputs are never returned as converged plausible numbers;
histories hold real numbers only."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from modelc.cache import import_file
from modelc.errors import InputError
from modelc.runtime.checks import Interval, check_parameter, nonfinite_rows
from modelc.runtime.histories import as_history, uniaxial_strain_history
from modelc.runtime.model import interpreting

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ["torch", "c"] + (["triton"] if interpreting() else [])  # triton: the interpreter (tests/conftest.py)


def _generated(name: str):
    return import_file(REPO / "generated" / f"{name}.py", f"_rt_checks_{name}")


def _j2_inputs(n: int, strain: float = 0.01):
    """Inputs of the library's j2_linear_iso_coupled (implicit: it has a status): uniaxial strain, one second, zero old state."""
    mod = _generated("j2_linear_iso_coupled")
    x = {}
    for v in mod.Model.INPUTS:
        shape = (n, 6) if v.type == "SR2" else (n,)
        x[v.name] = torch.zeros(shape, dtype=torch.float64)
    x["forces/E"][:, 0] = strain
    x["forces/t"][:] = 1.0
    return mod, x


# -- intervals -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, inside, outside", [
    ("[0, 0.5)", [0.0, 0.25, 0.4999], [-1e-9, 0.5, 1.0]),
    ("(0, inf)", [1e-300, 1.0, 1e300], [0.0, -1.0]),
    ("(-inf, 3]", [-1e300, 3.0], [3.0000001]),
    ("[2, 2]", [2.0], [1.999, 2.001]),
    ("(-1, 0.5)", [-0.999, 0.0], [-1.0, 0.5]),
])
def test_interval_membership(text, inside, outside):
    iv = Interval.parse(text)
    assert Interval.parse(str(iv)) == iv  # the canonical text parses back to the same interval
    assert all(iv.contains(x) for x in inside)
    assert not any(iv.contains(x) for x in outside)
    assert not iv.contains(math.nan)


@pytest.mark.parametrize("text", ["", "[0, 1", "0 <= x < 1", "[1, 0]", "(0, 0)", "[-inf, 0)", "(0, inf]",
                                  "(inf, 1)", "(0, 1e400)", "(-1e309, 0]"])
def test_bad_intervals(text):
    with pytest.raises(ValueError):
        Interval.parse(text)


def test_check_parameter_names_the_value_and_index():
    check_parameter("m", "nu", torch.tensor([0.1, 0.2]), "[0, 0.5)")
    with pytest.raises(InputError, match=r"parameter nu = 0\.7 \(at index \(1,\)\) is outside its bounds"):
        check_parameter("m", "nu", torch.tensor([0.1, 0.7], dtype=torch.float64), "[0, 0.5)")
    with pytest.raises(InputError, match="parameter E = nan is not finite"):
        check_parameter("m", "E", torch.tensor(float("nan")))
    with pytest.raises(InputError, match="parameter E = -inf"):
        check_parameter("m", "E", torch.tensor([1.0, -math.inf]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_parameter_row_check_agrees_with_each_parameters_interval(dtype):
    """A call checks its parameter row against per-column limits in one comparison; the oracle is
    :func:`check_parameter` on the one value (its Interval): for every bounded parameter of a
    library model, values at each finite end, one number of the dtype either side of it, the
    infinities and NaN, per point beside a valid value, are accepted or refused alike, with the same
    message."""
    mod = _generated("j2_voce_af")
    m = mod.Model(backend="torch", dtype=dtype)
    x = {v.name: torch.zeros((2, 6) if v.type == "SR2" else (2,), dtype=dtype) for v in mod.Model.INPUTS}
    x["forces/t"][:] = 1.0
    bounded = [p for p in m.PARAMETERS if p.bounds]
    assert len(bounded) >= 5
    for p in bounded:
        iv = Interval.parse(p.bounds)
        ends = [torch.tensor(e, dtype=dtype) for e in (iv.lo, iv.hi) if math.isfinite(e)]
        values = [math.inf, -math.inf, math.nan]
        for e in ends:
            for to in (-math.inf, math.inf):
                values.append(float(torch.nextafter(e, torch.tensor(to, dtype=dtype))))
            values.append(float(e))
        seen = set()
        for value in values:
            v = torch.tensor([p.default[0], value], dtype=dtype)
            try:
                check_parameter(m.NAME, p.name, v, p.bounds)
                want = None
            except InputError as exc:
                want = str(exc)
            try:
                m(x, **{p.name: v})
                got = None
            except InputError as exc:
                got = str(exc)
            assert got == want, (p.name, value)
            seen.add(got is None)
        assert seen == {True, False}, p.name  # some values at the ends accepted, some refused


def test_nonfinite_rows():
    X = torch.rand(5, 3, dtype=torch.float64)
    assert nonfinite_rows(X) is None
    assert nonfinite_rows(torch.full((4, 2), 1e308, dtype=torch.float64)) is None  # sum overflows: rows fine
    X[1, 2], X[3, 0] = math.nan, -math.inf
    assert nonfinite_rows(X).tolist() == [False, True, False, True, False]
    assert nonfinite_rows(torch.empty(0, 3)) is None


# -- parameters at the call ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_parameter_is_refused_by_name(backend, value):
    """The issue's case: sigma_y = NaN gave every point 'converged' with an elastic stress above yield."""
    mod, x = _j2_inputs(4)
    m = mod.Model(backend=backend)
    with pytest.raises(InputError, match="parameter sigma_y = .* is not finite"):
        m(x, sigma_y=value)
    per_point = torch.tensor([100.0, value, 100.0, 100.0], dtype=torch.float64)
    with pytest.raises(InputError, match=r"parameter sigma_y = .* \(at index \(1,\)\) is not finite"):
        m(x, sigma_y=per_point)
    m.set_parameters(sigma_y=value)
    with pytest.raises(InputError, match="sigma_y"):
        m(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_input_points_are_failed_not_converged(backend):
    mod, x = _j2_inputs(5)
    m = mod.Model(backend=backend)
    ref = m(x, derivatives=True)
    assert bool(ref.status.converged.all())
    for k, (name, bad) in enumerate([("forces/E", math.nan), ("old_state/internal/ep", math.inf),
                                     ("forces/t", math.nan)]):
        xb = {n: v.clone() for n, v in x.items()}
        xb[name][2 if k != 1 else 4] = bad
        r = m(xb, derivatives=True)
        i = 2 if k != 1 else 4
        assert not bool(r.status.converged[i])
        assert torch.isnan(r["state/S"][i]).all() and torch.isnan(r.jacobian.tensor[i]).all()
        others = [j for j in range(5) if j != i]
        assert bool(r.status.converged[others].all())
        torch.testing.assert_close(r["state/S"][others], ref["state/S"][others], rtol=0, atol=0)
        assert "1 FAILED" in r.status.summary()


@pytest.mark.parametrize("backend", BACKENDS)
def test_affine_models_propagate_nan_by_themselves(backend):
    mod = _generated("elastic")
    m = mod.Model(backend=backend)
    E = torch.rand(3, 6, dtype=torch.float64)
    E[1, 3] = math.nan
    r = m({"forces/E": E}, derivatives=True)
    S = r["state/S"]
    assert torch.isnan(S[1]).any() and torch.isfinite(S[[0, 2]]).all()


def test_declared_bounds_are_refused_at_the_api(tmp_path):
    import modelc

    spec = tmp_path / "b.yaml"
    spec.write_text(textwrap.dedent("""
        models:
          lin:
            parameters:
              nu: {default: 0.3, bounds: "[0, 0.5)"}
              E: {default: 1.0, bounds: "(0, inf)"}
            inputs:
              x: {var: forces/x}
            outputs:
              y: {var: state/y}
            equations:
              y: E*x/(1 - 2*nu)
        """))
    mod = modelc.load(spec, cache_dir=tmp_path / "cache")
    assert [p.bounds for p in mod.Model.PARAMETERS] == ["[0, 0.5)", "(0, inf)"]
    for backend in BACKENDS:
        m = mod.Model(backend=backend)
        x = {"forces/x": torch.ones(3, dtype=torch.float64)}
        torch.testing.assert_close(m(x, nu=0.25)["state/y"], torch.full((3,), 2.0, dtype=torch.float64))
        with pytest.raises(InputError, match=r"parameter nu = 0\.5 is outside its bounds \[0, 0\.5\)"):
            m(x, nu=0.5)  # 1 - 2 nu = 0: an infinite 'result' otherwise
        with pytest.raises(InputError, match=r"parameter E = 0\.0 is outside its bounds \(0, inf\)"):
            m(x, E=0.0)
        with pytest.raises(InputError, match=r"parameter nu = -0\.1 \(at index \(2,\)\)"):
            m(x, nu=torch.tensor([0.1, 0.2, -0.1], dtype=torch.float64))
        with pytest.raises(InputError, match="parameter nu"):
            mod.Model(backend=backend, nu=0.9)(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_library_declares_physical_bounds(backend):
    """The bundled models refuse what no material has (a plausible number otherwise): E <= 0,
    nu outside (-1, 1/2), a negative yield stress, kinematic modulus, recovery or saturation rate,
    a viscosity <= 0; a parameter that is not a number is refused by name."""
    for name, bad in [("j2_voce_af", {"E": -1.0}), ("j2_voce_af", {"nu": 0.5}), ("j2_voce_af", {"nu": -1.0}),
                      ("j2_voce_af", {"sigma_y": -5.0}), ("j2_voce_af", {"C": -1.0}), ("j2_voce_af", {"g": -0.5}),
                      ("j2_voce_af", {"d": -2.0}), ("perzyna_iso", {"eta": 0.0}), ("perzyna_iso", {"n": -1.0})]:
        mod = _generated(name)
        m = mod.Model(backend=backend)
        x = {v.name: torch.zeros((3, 6) if v.type == "SR2" else (3,), dtype=torch.float64) for v in mod.Model.INPUTS}
        (key, value), = bad.items()
        with pytest.raises(InputError, match=rf"model {name}: parameter {key} = {value!r} is outside its bounds"):
            m(x, **bad)
    mod = _generated("j2_voce_af")
    m = mod.Model(backend=backend)
    x = {v.name: torch.zeros((3, 6) if v.type == "SR2" else (3,), dtype=torch.float64) for v in mod.Model.INPUTS}
    with pytest.raises(InputError, match="parameter sigma_y must be a number or a tensor, got str 'abc'"):
        m(x, sigma_y="abc")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for a machine without CUDA")
def test_a_cuda_model_without_cuda_is_a_clear_error():
    with pytest.raises(InputError, match=r"device cuda: this torch .* (has no CUDA support|sees no CUDA device)"):
        _generated("elastic").Model(device="cuda")


# -- histories -------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, what", [
    (lambda a: a.astype(np.complex128) + 1e-3j, "complex numbers"),
    (lambda a: a.astype(str), "strings"),
    (lambda a: a.astype(object), "Python objects"),
    (lambda a: a > 0, "booleans"),
])
def test_histories_hold_real_numbers_only(bad, what):
    good = uniaxial_strain_history([0.01, 0.02], 1.0, steps=4)
    for key in ("time", "strain"):
        with pytest.raises(InputError, match=f"'{key}' must hold numbers \\(real ones\\), but it holds {what}"):
            as_history({**good, key: bad(good[key])})


def test_complex_history_file_is_refused_by_the_cli(tmp_path, capsys):
    from modelc.cli import main

    good = uniaxial_strain_history([0.01], 1.0, steps=3)
    h = tmp_path / "h.npz"
    np.savez(h, time=good["time"], strain=good["strain"].astype(np.complex128))
    out = tmp_path / "r.npz"
    rc = main(["run", str(REPO / "spec" / "elasticity.yaml"), "--model", "elasticity_total",
               "--history", str(h), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "complex numbers" in err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == [h]
