"""The passes on a real library model (front end -> compose -> differentiate -> lower -> cse),
checked through the reference interpreter: Newton converges, tangent = finite differences."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from modelc.interpret import interpret
from passes_helpers import central_fd

SPEC = Path(__file__).parents[2] / "spec" / "library.yaml"


def test_j2_voce_af_coupled_tangent_matches_finite_differences(capsys):
    pytest.importorskip("modelc.frontend.load")
    if not SPEC.exists():
        pytest.skip("spec/library.yaml not there")
    from modelc.frontend import load_spec
    from modelc.passes.compose import compose_spec_model
    from modelc.passes.cse import cse
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower

    t0 = time.perf_counter()
    model = differentiate(compose_spec_model(load_spec(SPEC), "j2_voce_af_coupled"))
    full, value = cse(lower(model, derivatives=True)), cse(lower(model, derivatives=False))
    seconds = time.perf_counter() - t0
    rng = np.random.default_rng()
    n = 3
    x = {}
    for v in model.inputs:
        if v.name == "forces/E":  # beyond yield in tension, random shear
            x[v.name] = rng.uniform(-2e-3, 2e-3, (n, 6))
            x[v.name][:, 0] += 4e-3
        elif v.name == "forces/t":
            x[v.name] = np.ones(n)
        else:
            x[v.name] = np.zeros((n,) + v.type.base_shape)
    res, der, status = interpret(full, x)
    assert status["converged"].all() and (status["iterations"] > 1).all()
    assert np.all(res["state/internal/ep"] > 0)  # it did yield
    fd = central_fd(lambda xx: interpret(value, xx)[0]["state/S"].reshape(n, -1), x, "forces/E", eps=1e-8)
    np.testing.assert_allclose(der[("state/S", "forces/E")], fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
    with capsys.disabled():
        print(f"\n[j2_voce_af_coupled ({sum(u.type.size for u in model.submodels[0].implicit.unknowns)} unknowns): "
              f"compose + differentiate + lower + cse (x2) in {seconds:.2f} s]")
