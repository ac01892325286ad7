"""Halley's method for one-unknown solves (``solver: {method: halley}``) and the shared powers it
relies on (``powr_shift``): the step formula, the solution against closed forms and an independent
numpy solve, fewer iterations than Newton from the same guess, every backend against the
reference interpreter, the tangent against its closed form, and the errors for bad specs."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from modelc import driver
from modelc.backends.module import write_atomic
from modelc.cache import import_file
from modelc.errors import SpecError
from modelc.functions import FUNCTIONS, powr, powr_shift
from modelc.interpret import interpret
from modelc.ir import Newton, SolverOptions
from modelc.passes.cse import _share_powers, cse
from modelc.passes.differentiate import differentiate
from modelc.passes.expand_solve import halley_step
from modelc.passes.lower import lower
from modelc.runtime.model import t_powr_shift
from passes_helpers import implicit, param, psym, sym, var


def _step(r, J, H) -> float:
    """The step's assignments evaluated in float64 (numpy: NaN compares false, as in C)."""
    rs, Js, Hs, t = sp.symbols("r J H t", real=True)
    env = {rs: r, Js: J, Hs: H}
    with np.errstate(all="ignore"):
        for a in halley_step(rs, Js, Hs, t, "h"):
            args = sorted(a.value.free_symbols, key=str)
            env[a.target] = float(sp.lambdify(args, a.value, "numpy")(*(env[s] for s in args)))
    return env[t]


def test_step_formula_and_its_guard():
    # |r H| <= J^2: Halley's step, the Newton step times 1 / (1 - r H / (2 J^2))
    assert _step(0.1, 2.0, 3.0) == pytest.approx(-2 * 0.1 * 2.0 / (2 * 4.0 - 0.3), rel=1e-15)
    assert _step(0.1, 2.0, 3.0) == pytest.approx((-0.1 / 2.0) / (1 - 0.1 * 3.0 / 8.0), rel=1e-15)
    # far from the root (|r H| > J^2) or a non-finite H: the Newton step
    assert _step(10.0, 1.0, 1.0) == -10.0
    assert _step(0.1, 2.0, math.nan) == pytest.approx(-0.05, rel=1e-15)
    assert _step(0.0, 2.0, 5.0) == 0.0


def _quadratic(method: str):
    """Backward Euler of u' = -k u^2: R = u - u_old + dt k u^2; u = (-1 + sqrt(1 + 4 dt k u_old)) / (2 dt k)."""
    u, uo, dt, k = sym("state/u"), sym("old_state/u"), sym("forces/dt"), psym("k")
    return implicit("decay", [var("old_state/u"), var("forces/dt")], [var("state/u")],
                    [u - uo + dt * k * u ** 2], [uo], params=[param("k", 2.0)],
                    solver=SolverOptions(rtol=1e-13, atol=1e-300, method=method))


def test_quadratic_closed_form_and_fewer_iterations():
    rng = np.random.default_rng()
    x = {"old_state/u": rng.uniform(0.1, 20.0, 200), "forces/dt": rng.uniform(0.01, 1.0, 200)}
    uo, dt, k = x["old_state/u"], x["forces/dt"], 2.0
    exact = (-1 + np.sqrt(1 + 4 * dt * k * uo)) / (2 * dt * k)
    its = {}
    for method in ("newton", "halley"):
        prog = cse(lower(differentiate(_quadratic(method)), derivatives=True))
        (newton,) = [s for s in prog.body if isinstance(s, Newton)]
        assert bool(newton.curvature) == (method == "halley")
        res, der, status = interpret(prog, x)
        assert status["converged"].all()
        np.testing.assert_allclose(res["state/u"], exact, rtol=1e-11)
        # the tangent is the implicit-function theorem's at the solution, for either method
        np.testing.assert_allclose(der[("state/u", "old_state/u")][:, 0, 0], 1 / (1 + 2 * dt * k * exact),
                                   rtol=1e-10)
        its[method] = status["iterations"]
    # d2R/du2 = 2 dt k: exact curvature, cubic convergence from u_old
    assert (its["halley"] <= its["newton"]).all() and its["halley"].sum() < its["newton"].sum()


def test_curvature_is_the_second_derivative():
    prog = lower(differentiate(_quadratic("halley")), derivatives=False)
    (newton,) = [s for s in prog.body if isinstance(s, Newton)]
    assert sp.simplify(newton.curvature[0] - 2 * sym("forces/dt") * psym("k")) == 0


# ------------------------------------------------------------------------------------ shared powers
def test_share_powers_leaves_one_power_per_chain():
    y, n = sp.symbols("y n", positive=True)
    exprs = [powr(y, n), n * powr(y, n - 1), n * (n - 1) * powr(y, n - 2), powr(y, n + sp.Rational(1, 2))]
    out = _share_powers(exprs)
    pw = set().union(*(e.atoms(powr) for e in out))
    assert pw == {powr(y, n), powr(y, n + sp.Rational(1, 2))}  # n + 1/2 is no integer apart: its own
    assert sum(len(e.atoms(powr_shift)) for e in out) >= 2
    rng = np.random.default_rng()
    for _ in range(5):
        vals = {y: rng.uniform(0.1, 3.0), n: rng.uniform(1.2, 6.0)}
        for a, b in zip(exprs, out):
            f = sp.lambdify([y, n], b, modules=[{"powr": lambda x, e: x ** e,
                                                 "powr_shift": FUNCTIONS["powr_shift"].numpy}, "numpy"])
            assert float(f(vals[y], vals[n])) == pytest.approx(float(a.subs(vals).rewrite(sp.Pow).evalf()
                                                                      if a.has(powr) else a.subs(vals)),
                                                               rel=1e-14)


@pytest.mark.parametrize("e, at0", [(1.5, 0.0), (0.0, 1.0), (-0.5, math.inf)])
def test_powr_shift_at_zero_is_the_power_of_zero(e, at0):
    ref = FUNCTIONS["powr_shift"].numpy
    assert float(ref(0.0, 0.0, e)) == at0
    got = t_powr_shift(torch.tensor([0.0, 2.0], dtype=torch.float64), torch.tensor([0.0, 2.0], dtype=torch.float64),
                       torch.tensor(e, dtype=torch.float64))
    assert float(got[0]) == at0 and float(got[1]) == 1.0  # 2**(e + 1) / 2 with P = 2: 1
    assert math.isnan(float(ref(1.0, 0.0, math.nan)))


# ------------------------------------------------------------------------------------ every backend
SPEC = """
models:
  powerlaw_decay:
    doc: backward Euler of u' = -k u^p
    parameters:
      k: {default: 3.0}
      p: {default: 2.5}
    inputs:
      t: {var: forces/t}
    define:
      dt: t - old(t)
    implicit:
      unknowns:
        u: {var: state/u}
      residuals:
        u: u - old(u) + dt*k*u**p
      solver: {rtol: 1.0e-12, atol: 1.0e-300, max_iter: 40, method: METHOD}
"""


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("halley")
    out = {}
    for method in ("newton", "halley"):
        spec_path = folder / f"{method}.yaml"
        spec_path.write_text(SPEC.replace("METHOD", method))
        path = folder / f"powerlaw_{method}.py"
        write_atomic(path, driver.compile_model(driver.load_spec(spec_path), "powerlaw_decay").source)
        out[method] = import_file(path, f"halley_test_powerlaw_{method}")
    return out


def _bisect(uo, c, p):
    """The root of u - uo + c u^p on [0, uo], by bisection in float64 (an independent oracle)."""
    lo, hi = np.zeros_like(uo), uo.copy()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        pos = mid - uo + c * mid ** p > 0
        hi, lo = np.where(pos, mid, hi), np.where(pos, lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("backend, p", [("torch", 2.5), ("c", 2.5), ("triton", 2.5),
                                        ("c", 1.0), ("c", 1.5), ("torch", 1.5), ("c", 7.0)])
def test_power_law_on_the_backends(modules, backend, p):
    """p = 1: H = 0 (Halley is Newton); 1 < p < 2: u**(p - 2) is infinite at u = 0 (a point that
    converges at once, before any step); p = 7: a stiff power."""
    rng = np.random.default_rng()
    B = 300
    uo = rng.uniform(0.0, 5.0, B)
    uo[:3] = [0.0, 1e-300, 40.0]  # u = 0 (powr_shift at its zero base), a subnormal-range u, a stiff point
    dt = rng.uniform(0.01, 2.0, B)
    k = 3.0
    exact = _bisect(uo, dt * k, p)
    ins = {"forces/t": torch.tensor(dt), "old_forces/t": torch.zeros(B, dtype=torch.float64),
           "old_state/u": torch.tensor(uo)}
    its = {}
    for method, mod in modules.items():
        m = mod.Model(dtype=torch.float64, backend=backend, p=p)
        r = m(ins, derivatives=True)
        u = r["state/u"].numpy().reshape(-1)
        assert bool(r.status.converged.all())
        np.testing.assert_allclose(u, exact, rtol=1e-11, atol=1e-300)
        # du/du_old = 1 / (1 + dt k p u^(p-1)) at the solution (implicit-function theorem)
        dudo = r.jacobian["state/u", "old_state/u"].numpy().reshape(-1)
        np.testing.assert_allclose(dudo, 1 / (1 + dt * k * p * exact ** (p - 1)), rtol=1e-10)
        its[method] = r.status.iterations.numpy().reshape(-1)
    assert (its["halley"] <= its["newton"] + 1).all()
    assert its["halley"].sum() < its["newton"].sum() if p != 1.0 else (its["halley"] == its["newton"]).all()


def test_float32_halley_meets_the_float32_tolerance(modules):
    rng = np.random.default_rng()
    B = 200
    uo, dt = rng.uniform(0.1, 5.0, B), rng.uniform(0.01, 2.0, B)
    exact = _bisect(uo, dt * 3.0, 2.5)
    ins = {"forces/t": torch.tensor(dt, dtype=torch.float32), "old_forces/t": torch.zeros(B),
           "old_state/u": torch.tensor(uo, dtype=torch.float32)}
    for backend in ("torch", "c"):
        r = modules["halley"].Model(dtype=torch.float32, backend=backend)(ins)
        assert bool(r.status.converged.all())
        # float32: rtol floored at 32 eps; |u - exact| <= that times the terms of R over dR/du >= 1
        np.testing.assert_allclose(r["state/u"].numpy().reshape(-1), exact, rtol=64 * 2.0 ** -23 * 3)


# ------------------------------------------------------------------------------------ errors
def test_halley_needs_one_scalar_unknown(tmp_path):
    spec = SPEC.replace("METHOD", "halley").replace("u: {var: state/u}", "u: {var: state/u, type: SR2}") \
        .replace("u - old(u) + dt*k*u**p", "u - old(u) + dt*k*u")
    path = tmp_path / "bad.yaml"
    path.write_text(spec)
    with pytest.raises(SpecError) as e:
        driver.compile_model(driver.load_spec(path), "powerlaw_decay")
    text = str(e.value)
    assert "halley" in text and "one scalar unknown" in text and "bad.yaml" in text


def test_unknown_method_is_located_with_a_hint(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(SPEC.replace("METHOD", "haley"))
    with pytest.raises(SpecError) as e:
        driver.compile_model(driver.load_spec(path), "powerlaw_decay")
    text = str(e.value)
    assert "method" in text and "halley" in text and "typo.yaml" in text
