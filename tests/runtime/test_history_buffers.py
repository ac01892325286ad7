"""The driver's steps recorded in place (modelc.runtime.history_buffers): a run of a compiled model
equals, bit for bit, the same run through the driver's regular step loop (the oracle: with
``history_buffers.applies`` patched to refuse, every step takes that loop), on fresh random
histories; with points that fail part-way (the loop takes over at that step), non-finite outputs of
an explicit model, per-point parameters, tangent steps, sub-stepping and float32."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from modelc.runtime import history_buffers
from modelc.runtime.driver import NonConvergenceWarning, run_history
from modelc.runtime.model import interpreting
from rt_helpers import HAVE_CC, IN_CI

BACKENDS = ("c", "torch") if HAVE_CC or IN_CI else ("torch",)
if interpreting():  # the Triton kernels on CPU tensors (tests/conftest.py)
    BACKENDS += ("triton",)


def _history(rng, steps, batch, scale):
    strain = np.zeros((steps, batch, 6))
    strain[1:] = np.cumsum(rng.normal(scale=scale, size=(steps - 1, batch, 6)), axis=0)
    time = np.cumsum(rng.uniform(0.1, 1.0, size=(steps, batch)), axis=0)
    return {"time": time, "strain": strain}


def _both(monkeypatch, model, hist, **kw):
    """(in place, regular loop) results of one run, and the step the in-place record stopped at."""
    stops = []
    record = history_buffers.record

    def spy(*a, **k):
        done = record(*a, **k)
        stops.append(done.stop)
        return done

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonConvergenceWarning)
        with monkeypatch.context() as mp:
            mp.setattr(history_buffers, "record", spy)
            fast = run_history(model, hist, progress=False, **kw)
        with monkeypatch.context() as mp:
            mp.setattr(history_buffers, "applies", lambda *a: False)
            slow = run_history(model, hist, progress=False, **kw)
    return fast, slow, stops


def _assert_same(fast, slow):
    assert sorted(fast) == sorted(slow) and fast.failed == slow.failed and fast.aliases == slow.aliases
    for k in slow:
        assert fast[k].dtype == slow[k].dtype and fast[k].shape == slow[k].shape, k
        np.testing.assert_array_equal(fast[k], slow[k], err_msg=k)  # (NaN where NaN)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["j2_voce_af", "perzyna_iso", "elastic"])
def test_recorded_in_place_equals_the_step_loop(monkeypatch, backend, name):
    import importlib

    model = importlib.import_module(f"modelc.generated.{name}").Model(backend=backend)
    rng = np.random.default_rng()
    hist = _history(rng, steps=9, batch=5, scale=2e-3)
    made = []
    make = history_buffers._CSteps.make.__func__
    monkeypatch.setattr(history_buffers._CSteps, "make",
                        classmethod(lambda cls, *a: made.append(make(cls, *a)) or made[-1]))
    fast, slow, stops = _both(monkeypatch, model, hist, tangent_steps=[2, 8])
    assert stops == [9], "every step recorded in place"
    assert (made[0] is not None) == (backend == "c"), "the C steps are the entry point's, on a table of words"
    _assert_same(fast, slow)
    assert fast.ok and fast["tangent"].shape == (2, 5, 6, 6) and np.isfinite(fast["tangent"]).all()
    if name != "elastic":  # the history is plastic: the Newton ran
        assert fast["iterations"].max() > 0 and np.nanmax(fast["equivalent_plastic_strain"]) > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_points_failing_part_way_hand_over_to_the_step_loop(monkeypatch, backend):
    from modelc.generated import j2_voce_af

    model = j2_voce_af.Model(backend=backend)
    rng = np.random.default_rng()
    hist = _history(rng, steps=10, batch=6, scale=1e-4)
    hist["strain"][6:, 2] += rng.normal(scale=5e-2, size=6)  # a jump far past yield at step 6
    # one Newton iteration: the elastic points converge, a plastic step fails
    fast, slow, stops = _both(monkeypatch, model, hist, solver={"max_iter": 1}, tangent_steps=[3, 7])
    assert stops and stops[0] <= 6 and 2 in fast.failed
    _assert_same(fast, slow)
    s = fast.failed[2]
    assert np.isnan(fast["stress"][s:, 2]).all() and not fast["converged"][s:, 2].any()
    assert np.isnan(fast["tangent"][1, 2]).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_outputs_of_an_explicit_model_fail_their_point(monkeypatch, backend):
    from modelc.generated import elastic

    model = elastic.Model(backend=backend)
    rng = np.random.default_rng()
    hist = _history(rng, steps=6, batch=3, scale=1e-3)
    hist["strain"][4:, 1] = 1e5  # E * 1e5 with E = 1e305: the stress overflows at step 4
    fast, slow, stops = _both(monkeypatch, model, hist, params={"E": [2e5, 1e305, 1e5]})
    assert stops == [4] and fast.failed == {1: 4}
    _assert_same(fast, slow)
    assert np.isinf(np.abs(fast["stress"][3:, 1])).sum() == 0 and np.isnan(fast["stress"][4:, 1]).all()


def test_a_direct_step_that_failed_is_redone_by_the_call_that_sub_steps(monkeypatch):
    """On the C backend a step runs the entry point directly; where points fail there and the model
    sub-steps, the model's own call redoes the step (it sub-steps what failed). The direct run of
    step 3 is made to fail one point (NaN, not converged): the run equals the step loop's."""
    from modelc.generated import j2_voce_af

    if "c" not in BACKENDS:
        pytest.skip("no C compiler on this machine (CI always has one)")
    run = history_buffers._CSteps.run
    seen = []

    def failing(self, n):
        run(self, n)
        if n == 3:
            seen.append(n)
            Y, _, status = self.outputs_at(n)
            Y[1] = float("nan")  # as the kernel leaves a point that did not converge
            status[0][1] = False

    model = j2_voce_af.Model(backend="c", on_failure="substep")
    hist = _history(np.random.default_rng(), steps=6, batch=3, scale=2e-3)
    monkeypatch.setattr(history_buffers._CSteps, "run", failing)
    fast, slow, stops = _both(monkeypatch, model, hist)
    assert seen == [3] and stops == [6] and fast.ok
    _assert_same(fast, slow)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sub_stepping_and_float32_runs(monkeypatch, backend):
    from modelc.generated import perzyna_iso

    rng = np.random.default_rng()
    hist = _history(rng, steps=7, batch=4, scale=3e-3)
    model = perzyna_iso.Model(backend=backend, on_failure="substep")
    fast, slow, stops = _both(monkeypatch, model, hist, solver={"max_iter": 3})
    assert stops == [7]
    _assert_same(fast, slow)
    model = perzyna_iso.Model(backend=backend, dtype=torch.float32)
    fast, slow, stops = _both(monkeypatch, model, hist, tangent_steps=[6])
    assert stops == [7] and fast["stress"].dtype == np.float32
    _assert_same(fast, slow)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["j2_linear_iso", "j2_voce_af", "elastic"])
def test_stress_controlled_runs_recorded_in_place_equal_the_step_loop(monkeypatch, backend, name):
    """Uniaxial stress cycles (the lateral components stress-free, xx stress prescribed), with
    strain-controlled rows between them and tangents at mixed and plain steps; for j2_voce_af some
    targets lie beyond what its saturating hardening can carry: those points fail part-way and the
    step loop takes over there. On the C backend the control Newton's evaluations are the tangent
    entry point on a table of words (but for elastic's constant tangent, which the call computes for
    one point)."""
    import importlib

    from modelc.runtime.histories import uniaxial_stress_history

    model = importlib.import_module(f"modelc.generated.{name}").Model(backend=backend)
    rng = np.random.default_rng()
    amps = rng.uniform(150.0, 330.0, size=4)
    hist = uniaxial_stress_history(list(amps), 1.0, steps=14, controlled="stress")
    hist = {k: hist[k] for k in ("time", "strain", "stress", "control")}
    rows = hist["time"].shape[0]
    hist["control"] = np.broadcast_to(hist["control"], hist["stress"].shape).copy()
    hist["control"][5] = False  # one strain-controlled row (the strain rows hold the prescribed 0)
    made = []
    init = history_buffers._Mixed.__init__

    def spy(self, *a):
        init(self, *a)
        made.append(self.direct)

    monkeypatch.setattr(history_buffers._Mixed, "__init__", spy)
    fast, slow, stops = _both(monkeypatch, model, hist, tangent_steps=[3, 5, 13])
    assert made and (made[0] is not None) == (backend == "c")  # elastic too: its constant tangent per point
    _assert_same(fast, slow)
    assert fast["control_iterations"].max() >= 1
    assert np.isfinite(fast["tangent"][0][fast["converged"][3]]).all()
    if fast.ok:
        assert stops == [rows]
        ctrl = hist["control"][1:]
        np.testing.assert_allclose(fast["stress"][1:][ctrl], hist["stress"][1:][ctrl], atol=1e-7 * amps.max())
    else:
        assert stops and stops[0] == min(fast.failed.values())


def test_runs_the_in_place_record_does_not_take(monkeypatch):
    """Dead points at row 0 (a continued run): the regular loop (``record`` is never called), with
    the results it always gave."""
    from modelc.generated import j2_linear_iso
    from modelc.runtime.driver import Carry, variable_shapes

    calls = []
    monkeypatch.setattr(history_buffers, "record", lambda *a, **k: calls.append(1))
    model = j2_linear_iso.Model(backend=BACKENDS[0])
    hist = _history(np.random.default_rng(), steps=4, batch=2, scale=1e-3)
    dead = Carry({n: np.zeros((2, *s)) for n, s in variable_shapes(model, "output").items()},
                 np.array([True, False]))
    res = run_history(model, hist, progress=False, initial=dead)
    assert calls == [] and np.isnan(res["stress"][1:, 1]).all() and np.isfinite(res["stress"][:, 0]).all()
