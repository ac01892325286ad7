"""modelc.interpret, the old name of the reference interpreter (now modelc.ir.interpret): the alias is
that very module, even imported first in a fresh process, and works as the oracle through it: the
bundled ``elastic`` lowered and interpreted is Hooke's law with its exact tangent, a Newton solve of a
small implicit spec finds the cubic's root (and marks the points it cannot solve), Skeel's condition
number by hand."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import modelc.interpret as alias
import modelc.ir.interpret as moved
from modelc import driver
from modelc.errors import InputError
from modelc.interpret import interpret, program_var, skeel_condition

LIBRARY = Path(__file__).resolve().parents[2] / "spec" / "library.yaml"
E0, NU0 = 200000.0, 0.3


def _stiffness(E, nu):
    """Hooke's law as a 6x6 Mandel matrix: lam 1x1 + 2 mu I."""
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    C = 2 * mu * np.eye(6)
    C[:3, :3] += lam
    return C


@pytest.fixture(scope="module")
def elastic():
    return driver.lower_model(driver.load_spec(LIBRARY), "elastic")


def _cubic(tmp_path, max_iter=None, c="{default: 1.0}"):
    solver = f"\n      solver: {{max_iter: {max_iter}}}" if max_iter else ""
    spec = tmp_path / "cubic.yaml"
    spec.write_text(textwrap.dedent("""\
        models:
          cubic:
            parameters:
              c: CPARAM
            inputs:
              a: {var: forces/a}
            implicit:
              unknowns:
                x: {var: state/x}
              residuals:
                x: x**3 + c*x - a""").replace("CPARAM", c) + solver + "\n")
    return driver.lower_model(driver.load_spec(spec), "cubic").total


def test_the_old_name_is_the_moved_module():
    assert alias is moved
    assert sys.modules["modelc.interpret"] is sys.modules["modelc.ir.interpret"]
    assert (interpret, skeel_condition, program_var) == (moved.interpret, moved.skeel_condition,
                                                         moved.program_var)


def test_the_alias_imported_first_in_a_fresh_process():
    code = ("import sys; from modelc.interpret import interpret; import modelc.ir.interpret as m; "
            "print(interpret is m.interpret, sys.modules['modelc.interpret'] is m)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "True"]


def test_elastic_is_hookes_law_with_its_tangent(elastic):
    rng = np.random.default_rng()
    eps = 1e-3 * rng.normal(size=(5, 6))
    res, der, status = interpret(elastic.tangent, {"forces/E": eps})
    C = _stiffness(E0, NU0)
    np.testing.assert_allclose(res["state/S"], eps @ C.T, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(der[("state/S", "forces/E")], np.broadcast_to(C, (5, 6, 6)), rtol=1e-12,
                               atol=1e-9)
    assert status == {}  # closed form: nothing to converge
    E, nu = rng.uniform(1e5, 3e5, 5), rng.uniform(0.1, 0.45, 5)  # one value per point
    res, _, _ = interpret(elastic.tangent, {"forces/E": torch.tensor(eps)}, {"E": E, "nu": nu})
    assert isinstance(res["state/S"], torch.Tensor)
    want = np.stack([_stiffness(a, b) @ x for a, b, x in zip(E, nu, eps)])
    np.testing.assert_allclose(res["state/S"].numpy(), want, rtol=1e-12, atol=1e-9)
    assert program_var(elastic.tangent, "state/S").type.name == "SR2"
    with pytest.raises(KeyError, match="state/X"):
        program_var(elastic.tangent, "state/X")


def test_newton_finds_the_root_and_its_implicit_derivatives(tmp_path):
    prog = _cubic(tmp_path)
    a, c = np.array([0.0, 2.0, 10.0, 36.0]), np.array([1.0, 1.0, 1.0, 3.0])
    res, der, status = interpret(prog, {"forces/a": a, "old_state/x": np.zeros(4)}, {"c": c})
    x, root = res["state/x"], np.array([0.0, 1.0, 2.0, 3.0])  # x^3 + c x = a; 27 + 3*3 = 36
    # the stopping test (residual within rtol = 1e-10 of its terms' size) bounds the distance to the root
    bound = 1e-10 * (root ** 3 + c * root + a) / (3 * root ** 2 + c)
    assert np.all(np.abs(x - root) <= 1.01 * bound + 1e-15), (x - root, bound)
    assert status["converged"].all() and status["iterations"][0] == 0 and status["iterations"][1:].min() > 0
    # implicit function theorem: dx/da = 1 / (3x^2 + c), dx/dc = -x / (3x^2 + c)
    denom = 3 * x ** 2 + c
    np.testing.assert_allclose(der[("state/x", "forces/a")][:, 0, 0], 1 / denom, rtol=1e-10)
    np.testing.assert_allclose(der[("state/x", "$c")][:, 0, 0], -x / denom, rtol=1e-10, atol=1e-15)


def test_newton_failure_is_nan_and_not_converged(tmp_path):
    prog = _cubic(tmp_path, max_iter=1)
    res, _, status = interpret(prog, {"forces/a": np.array([0.0, 1000.0]), "old_state/x": np.zeros(2)})
    assert status["converged"].tolist() == [True, False]
    assert res["state/x"][0] == 0.0 and np.isnan(res["state/x"][1])


def test_missing_values_are_named(tmp_path):
    # the previous state is an input of a step: forgetting it is named
    with pytest.raises(InputError, match="program 'cubic': missing input 'old_state/x'"):
        interpret(_cubic(tmp_path), {"forces/a": np.ones(2)})
    # a parameter the spec gives no default needs a value
    prog = _cubic(tmp_path, c="{doc: no default}")
    with pytest.raises(InputError, match="program 'cubic': parameter 'c' has no default and no value"):
        interpret(prog, {"forces/a": np.ones(2), "old_state/x": np.zeros(2)})
    res, _, _ = interpret(prog, {"forces/a": np.full(2, 10.0), "old_state/x": np.zeros(2)}, {"c": 1.0})
    np.testing.assert_allclose(res["state/x"], 2.0, rtol=1e-9)


def test_skeel_condition_by_hand():
    A = np.array([[[2.0, 0.0], [0.0, 1e-6]],    # diagonal: 1 whatever the scales
                  [[1.0, 1.0], [0.0, 1.0]],     # |A^-1| |A| = [[1, 2], [0, 1]]: 3
                  [[1.0, 2.0], [2.0, 4.0]],     # singular
                  [[np.nan, 0.0], [0.0, 1.0]]])  # not finite
    np.testing.assert_allclose(skeel_condition(A), [1.0, 3.0, np.inf, np.inf])
    assert skeel_condition(np.eye(3)) == 1.0  # one matrix, no batch
