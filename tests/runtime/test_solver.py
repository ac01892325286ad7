"""Run-time Newton options (modelc.runtime.solver): per model object and per call, on every backend,
validated, and recorded by the driver."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from modelc.runtime.errors import InputError

BACKENDS = ["torch", "c", "triton"]


def _model(backend, **kw):
    from modelc.generated import j2_voce_af

    if backend == "triton" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton kernels run here under TRITON_INTERPRET=1 only")
    return j2_voce_af.Model(backend=backend, **kw)


def _inputs(m, B=16):
    """One step from the virgin state, far into the plastic range (several Newton iterations)."""
    ins = m.initial_state(B)
    g = torch.Generator().manual_seed(3)
    E = torch.zeros(B, 6, dtype=torch.float64)
    E[:, 0] = torch.linspace(0.002, 0.02, B)
    E[:, 1:3] = -0.5 * E[:, :1]
    ins["forces/E"] = E + 1e-4 * torch.randn(B, 6, dtype=torch.float64, generator=g)
    ins["forces/t"] = torch.full((B,), 1.0, dtype=torch.float64)
    return ins


@pytest.mark.parametrize("backend", BACKENDS)
def test_iteration_limit_and_tolerances_per_call_on_every_backend(backend):
    m = _model(backend)
    ins = _inputs(m)
    ref = m(ins, derivatives="tangent")
    assert bool(ref.status.converged.all())
    its = ref.status.iterations
    assert int(its.max()) >= 3  # the case needs several iterations
    # max_iter 1: the points that needed more are marked failed (NaN), never a plausible number
    one = m(ins, derivatives="tangent", solver={"max_iter": 1})
    failed = ~one.status.converged
    assert torch.equal(failed, its > 1)
    assert bool(torch.isnan(one["state/S"][failed]).all())
    torch.testing.assert_close(one["state/S"][~failed], ref["state/S"][~failed], rtol=0, atol=0)
    # max_iter 0: no update at all
    assert int(m(ins, solver={"max_iter": 0}).status.iterations.max()) == 0
    # a loose relative tolerance stops earlier, still near the root; a tight one is no worse
    loose = m(ins, solver={"rtol": 1e-3, "atol": 0.0})
    assert bool(loose.status.converged.all()) and bool((loose.status.iterations <= its).all())
    assert int(loose.status.iterations.sum()) < int(its.sum())
    err = (loose["state/S"] - ref["state/S"]).abs().max() / ref["state/S"].abs().max()
    assert 0 < float(err) < 1e-2
    # the object's options are back to the spec's after a call with its own
    again = m(ins, derivatives="tangent")
    assert torch.equal(again.status.iterations, its)


def test_object_options_call_options_and_their_record():
    m = _model("c", max_iter=1)
    ins = _inputs(m)
    assert not bool(m(ins).status.converged.all())
    assert bool(m(ins, solver={"max_iter": 30}).status.converged.all())
    info = m.solver_info()
    assert info["max_iter"] == {"value": 1, "from": "model"}
    assert info["rtol"]["from"] == "spec" and info["rtol"]["value"] == m.SOLVER["rtol"]
    m.set_solver(max_iter=None, rtol=1e-12)
    assert m.solver_info()["max_iter"] == {"value": m.SOLVER["max_iter"], "from": "spec"}
    assert m.solver_info()["rtol"] == {"value": 1e-12, "from": "model"}
    assert bool(m(ins).status.converged.all())


@pytest.mark.parametrize("bad, message", [
    ({"tol": 1e-8}, "unknown Newton option 'tol'; the options are rtol, atol, max_iter"),
    ({"rtol": -1e-8}, "rtol must be a finite number >= 0, got -1e-08"),
    ({"atol": float("nan")}, "atol must be a finite number >= 0, got nan"),
    ({"max_iter": 2.5}, "max_iter must be an integer >= 0, got 2.5"),
    ({"max_iter": True}, "max_iter must be an integer >= 0, got True"),
])
def test_bad_options_are_clear_errors_at_the_call_and_the_constructor(bad, message):
    m = _model("torch")
    with pytest.raises(InputError, match="j2_voce_af: solver=: " + message.replace("(", r"\(")):
        m(_inputs(m), solver=bad)
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        m.set_solver(**bad)
    if "tol" not in bad:
        with pytest.raises(InputError, match=message.replace("(", r"\(")):
            _model("torch", **bad)


def test_the_driver_records_the_options_and_saves_them(tmp_path):
    from modelc.runtime.driver import load_results, run_history, save_results
    from modelc.runtime.histories import uniaxial_strain_history

    m = _model("c")
    h = uniaxial_strain_history([0.02, 0.01], [1.0, 10.0], steps=12)
    with pytest.warns(Warning):  # some points fail with max_iter 1
        tight = run_history(m, h, solver={"max_iter": 1}, progress=False)
    assert tight.solver["max_iter"] == {"value": 1, "from": "model"} and tight.failed
    assert m.solver_info()["max_iter"]["from"] == "spec"  # the run's options do not stay on the object
    ok = run_history(m, h, progress=False)
    assert ok.ok and ok.solver["max_iter"]["from"] == "spec"
    back = load_results(save_results(tight, tmp_path / "r.npz"))
    assert back.solver == tight.solver and "solver" not in back
    np.testing.assert_array_equal(back["converged"], tight["converged"])


def test_cli_run_takes_the_options_and_reports_them(tmp_path):
    from modelc.runtime.histories import uniaxial_strain_history

    h = uniaxial_strain_history([0.02], [1.0], steps=8)
    np.savez(tmp_path / "h.npz", time=h["time"], strain=h["strain"])
    spec = os.path.join(os.path.dirname(__file__), "..", "..", "spec", "library.yaml")
    r = subprocess.run([sys.executable, "-m", "modelc.cli", "run", spec, "--model", "j2_voce_af", "--history",
                        str(tmp_path / "h.npz"), "--out", str(tmp_path / "r.npz"), "--max-iter", "40", "--rtol",
                        "1e-9", "--json", "--no-progress"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["solver"]["max_iter"] == {"value": 40, "from": "model"}
    assert out["solver"]["rtol"] == {"value": 1e-9, "from": "model"}
    assert out["solver"]["atol"]["from"] == "spec"
