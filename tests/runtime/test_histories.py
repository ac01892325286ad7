"""Strain histories (modelc.runtime.histories): the generator against NEML2's reference files
(bit for bit), the bundled file against the generator, and validation of user histories."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from modelc.errors import InputError
from modelc.runtime.histories import (BUNDLED_HISTORIES, History, as_history, bundled_history,
                                      bundled_history_path, load_history, uniaxial_strain_history)

REF_DIR = Path(__file__).resolve().parents[1] / "reference" / "neml2"
MODELS = ["elastic", "j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso"]


@pytest.mark.parametrize("model", MODELS)
def test_generator_reproduces_reference_history_exactly(model):
    with np.load(REF_DIR / f"{model}__uniaxial.npz") as ref:
        h = uniaxial_strain_history(ref["amplitude"], ref["total_time"], steps=100)
        np.testing.assert_array_equal(h["time"], ref["time"])
        np.testing.assert_array_equal(h["strain"], ref["strain"])
        np.testing.assert_array_equal(h["amplitude"], ref["amplitude"])
        np.testing.assert_array_equal(h["total_time"], ref["total_time"])
        # and the README's description of it
        assert h["strain"].shape == (101, 8, 6) and h["time"].shape == (101, 8)
        for n, sign in ((25, 1), (75, -1), (100, 0)):
            np.testing.assert_array_equal(h["strain"][n, :, 0], sign * ref["amplitude"])


def test_bundled_history_is_what_the_generator_writes():
    path = bundled_history_path("uniaxial")
    assert path.is_file() and path.stat().st_size < 20_000
    arrays = uniaxial_strain_history(**BUNDLED_HISTORIES["uniaxial"])  # what make_histories.py writes
    with np.load(path) as committed:
        assert sorted(committed.files) == sorted(arrays), "stale: run spec/histories/make_histories.py"
        for k, v in arrays.items():
            np.testing.assert_array_equal(committed[k], v, err_msg=f"stale {k}: run make_histories.py")
    h = bundled_history()
    assert isinstance(h, History) and (h.steps, h.batch) == (101, 8)
    assert h.labels[0] == "A=0.005, T=10 s" and h.labels[7] == "A=0.01, T=1000 s"


@pytest.mark.parametrize("steps", [1, 3, 4, 7, 40, 101])
def test_waveform_any_step_count(steps):
    rng = np.random.default_rng()
    amp, total = rng.uniform(-0.03, 0.03, size=3), rng.uniform(0.01, 100.0, size=3)
    comp = int(rng.integers(0, 6))
    h = uniaxial_strain_history(amp, total, steps, component=comp)
    s = np.arange(steps + 1) / steps
    expect = np.where(s <= 0.25, 4 * s, np.where(s <= 0.75, 2 - 4 * s, 4 * s - 4))[:, None] * amp
    np.testing.assert_allclose(h["strain"][..., comp], expect, rtol=0, atol=1e-15)
    others = np.delete(h["strain"], comp, axis=-1)
    assert not others.any()
    np.testing.assert_allclose(h["time"], s[:, None] * total, rtol=1e-15)
    np.testing.assert_allclose(np.diff(h["time"], axis=0), np.broadcast_to(total / steps, (steps, 3)),
                               rtol=1e-9)
    assert as_history(h).batch == 3  # what it builds is a valid history


def test_scalar_total_time_broadcasts():
    h = uniaxial_strain_history([0.01, 0.02], 5.0, steps=8)
    np.testing.assert_array_equal(h["time"][-1], [5.0, 5.0])


@pytest.mark.parametrize("kwargs,message", [
    (dict(amplitudes=[], total_times=1.0), "non-empty"),
    (dict(amplitudes=[0.01], total_times=0.0), "total_times finite and > 0"),
    (dict(amplitudes=[np.nan], total_times=1.0), "amplitudes must be finite"),
    (dict(amplitudes=[0.01], total_times=1.0, steps=0), "positive integer"),
    (dict(amplitudes=[0.01], total_times=1.0, steps=2.5), "positive integer"),
    (dict(amplitudes=[0.01], total_times=1.0, component=6), "Mandel index"),
])
def test_generator_rejects_bad_arguments(kwargs, message):
    with pytest.raises(InputError, match=message):
        uniaxial_strain_history(**kwargs)


def test_reference_result_file_is_a_valid_history():
    h = load_history(REF_DIR / "j2_voce_af__uniaxial.npz")  # extra arrays are ignored
    assert (h.steps, h.batch) == (101, 8) and h.labels == tuple(f"point {i}" for i in range(8))


def test_as_history_validation_messages(tmp_path):
    good = uniaxial_strain_history([0.01, 0.02], 1.0, steps=4)
    with pytest.raises(InputError, match="mapping of arrays or a path"):
        as_history(42)
    with pytest.raises(InputError, match=r"'labels' must have shape \(batch,\) = \(2,\)"):
        as_history({**good, "labels": np.array(["a"])})
    with pytest.raises(InputError, match="'time' must hold numbers"):
        as_history({**good, "time": np.array([["a", "b"]] * 5)})
    with pytest.raises(InputError, match="arrays present: strain"):
        as_history({"strain": good["strain"]})
    with pytest.raises(InputError, match="no bundled history named 'cyclic'; bundled: uniaxial"):
        bundled_history_path("cyclic")
    p = tmp_path / "h.npz"
    np.savez(p, **good)
    assert as_history(str(p)).batch == 2 and as_history(p).labels == tuple(good["labels"])
    assert as_history(as_history(good)) is not None
