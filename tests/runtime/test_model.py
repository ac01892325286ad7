"""runtime.model.CompiledModel at the call boundary: validation, parameters, batching, labeled I/O."""
from __future__ import annotations

import pytest
import torch

from backend_programs import elastic_numpy, generated
from modelc.errors import InputError
from modelc.runtime.labeled import LabeledVector


@pytest.fixture
def elastic(gen_dir):
    return generated("elastic", gen_dir)


def test_input_errors_name_the_problem(elastic):
    m = elastic.Model()
    e = torch.zeros(4, 6, dtype=torch.float64)
    with pytest.raises(InputError, match="missing input.*forces/E"):
        m({})
    with pytest.raises(InputError, match="unknown input.*forces/T"):
        m({"forces/E": e, "forces/T": e})
    with pytest.raises(InputError, match="dtype torch.float32.*float64"):
        m({"forces/E": e.float()})
    with pytest.raises(InputError, match=r"SR2: its shape must end in \(6,\), got \(4, 3\)"):
        m({"forces/E": e[:, :3]})
    with pytest.raises(InputError, match="is on meta"):
        m({"forces/E": torch.zeros(4, 6, dtype=torch.float64, device="meta")})
    with pytest.raises(InputError, match="LabeledVector or a dict"):
        m(e)


def test_model_options_are_checked(elastic, monkeypatch):
    with pytest.raises(InputError, match="unknown parameter.*Q.*E, nu"):
        elastic.Model(Q=1.0)
    with pytest.raises(InputError, match="unknown parameter.*G"):
        elastic.Model()({"forces/E": torch.zeros(1, 6, dtype=torch.float64)}, G=3.0)
    with pytest.raises(InputError, match="dtype must be"):
        elastic.Model(dtype=torch.float16)
    with pytest.raises(InputError, match="backend must be"):
        elastic.Model(backend="cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(InputError, match="TRITON_INTERPRET=1"):
        elastic.Model(backend="triton")
    # auto on CPU: the C backend when a C compiler is found, else generated PyTorch
    from modelc.runtime.cbuild import find_compiler
    try:
        find_compiler()
        expected = "c"
    except Exception:
        expected = "torch"
    assert elastic.Model().backend == expected


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_batched_parameters_and_batch_dims(elastic, backend):
    g = torch.Generator().manual_seed(5)
    strain = torch.randn(2, 3, 6, generator=g, dtype=torch.float64) * 1e-3
    E = 1e5 + 1e5 * torch.rand(2, 3, generator=g, dtype=torch.float64)  # one per point
    out = elastic.Model(backend=backend, nu=0.25)({"forces/E": strain}, derivatives=True, E=E)
    assert out["state/S"].shape == (2, 3, 6)
    assert out.jacobian["state/S", "forces/E"].shape == (2, 3, 6, 6)
    for i in range(2):
        for j in range(3):
            S, C = elastic_numpy(strain[i, j].numpy(), float(E[i, j]), 0.25)
            assert torch.allclose(out["state/S"][i, j], torch.as_tensor(S), rtol=1e-12)
            assert torch.allclose(out.jacobian["state/S", "forces/E"][i, j], torch.as_tensor(C), rtol=1e-12)
    # a parameter batched over a broadcastable shape (per row)
    out2 = elastic.Model(backend=backend)({"forces/E": strain}, E=E[:, :1])
    S, _ = elastic_numpy(strain[1, 2].numpy(), float(E[1, 0]), 0.3)
    assert torch.allclose(out2["state/S"][1, 2], torch.as_tensor(S), rtol=1e-12)
    with pytest.raises(InputError, match="does not broadcast"):
        elastic.Model(backend=backend)({"forces/E": strain}, E=torch.ones(5, dtype=torch.float64))


@pytest.mark.parametrize("backend", ["torch", "triton", "c"])
def test_a_model_built_and_called_under_inference_mode(elastic, backend):
    """A model built under ``torch.inference_mode`` (its parameter values are inference tensors,
    which have no version counter) is called like any other: the stress equals the closed form, in
    inference mode and after it, and a parameter changed in place is seen by the next call."""
    strain = torch.linspace(-1e-3, 2e-3, 12, dtype=torch.float64).reshape(2, 6)
    with torch.inference_mode():
        m = elastic.Model(backend=backend, E=1.5e5, nu=0.25)
        first = m({"forces/E": strain})["state/S"].clone()
        m.params.E.fill_(2e5)  # in place: the next call sees it
        second = m({"forces/E": strain})["state/S"].clone()
    for got, E in ((first, 1.5e5), (second, 2e5)):
        S, _ = elastic_numpy(strain[1].numpy(), E, 0.25)
        assert torch.allclose(got[1], torch.as_tensor(S), rtol=1e-12)
    S, _ = elastic_numpy(strain[0].numpy(), 2e5, 0.25)
    assert torch.allclose(m({"forces/E": strain})["state/S"][0], torch.as_tensor(S), rtol=1e-12)


def test_labeled_vector_in_and_views_out(elastic):
    m = elastic.Model()
    x = LabeledVector(torch.randn(5, 6, dtype=torch.float64), m.input_axis)
    out = m(x)
    assert isinstance(out.outputs, LabeledVector) and out.outputs.axis == m.output_axis
    S = out["state/S"]
    assert S.data_ptr() == out.outputs.tensor.data_ptr()  # a view, not a copy
    assert torch.allclose(S, m({"forces/E": x["forces/E"]})["state/S"])
    assert "state/S" in out and "forces/E" not in out


def test_description(elastic):
    m = elastic.Model()
    text = m.describe()
    assert "forces/" in text and "E: Scalar = 210000 [MPa]" in text
    assert m.parameter_info["nu"].default == (0.3,)
    assert list(m.parameters()) == []  # a torch.nn.Module: no trainable parameter unless asked for
    assert f"backend={m.backend!r}" in repr(m) and m.backend in ("c", "torch")


def test_triton_missing_is_a_clear_error_and_auto_picks_another_backend():
    """Without triton (kernels None, as a module imported where triton is absent), backend='triton'
    says what to install; 'auto' still runs (C or PyTorch)."""
    from modelc.generated import elastic

    class NoTriton(elastic.Model):
        kernel = None

    with pytest.raises(InputError, match=r"triton package, which is not installed .*modelc\[gpu\]"):
        NoTriton(backend="triton")
    m = NoTriton()
    assert m.backend in ("c", "torch")
    eps = torch.zeros(2, 6, dtype=torch.float64)
    assert torch.equal(m({"forces/E": eps})["state/S"], torch.zeros(2, 6, dtype=torch.float64))


def test_triton_register_cap_setting(elastic, monkeypatch):
    """$MODELC_TRITON_MAXNREG caps registers per thread in every Triton launch (for measuring a
    register budget on a GPU): a bad value is an InputError naming the variable, raised before
    anything is computed; a good one is accepted by the launch (the interpreter ignores it) and
    changes no number."""
    from modelc.runtime.model import triton_launch_options

    strain = torch.randn(9, 6, dtype=torch.float64) * 1e-3
    want = elastic.Model(backend="triton")({"forces/E": strain}, derivatives=True)
    for bad in ("lots", "8", "300"):
        monkeypatch.setenv("MODELC_TRITON_MAXNREG", bad)
        with pytest.raises(InputError, match="MODELC_TRITON_MAXNREG must be a whole number"):
            elastic.Model(backend="triton")({"forces/E": strain})
    monkeypatch.setenv("MODELC_TRITON_MAXNREG", "128")
    assert triton_launch_options() == {"maxnreg": 128}
    got = elastic.Model(backend="triton")({"forces/E": strain}, derivatives=True)
    assert torch.equal(got.outputs.tensor, want.outputs.tensor)
    assert torch.equal(got.jacobian.tensor, want.jacobian.tensor)
    assert triton_launch_options(255) == {"maxnreg": 128}  # the setting wins over a module's cap
    monkeypatch.setenv("MODELC_TRITON_MAXNREG", "none")
    assert triton_launch_options(255) == {}
    monkeypatch.delenv("MODELC_TRITON_MAXNREG")
    assert triton_launch_options() == {}
    assert triton_launch_options(255) == {"maxnreg": 255}


def test_generated_modules_cap_float64_registers():
    """The float64 kernels of a coupled system and every full-Jacobian kernel ask ptxas for at most
    255 registers (uncapped, it compiled the largest ones for 32 registers and 3x the spills), the
    value and tangent kernels of a radial return or an elastic model for 128 (faster on an H200);
    float32 leaves ptxas its choice. The number it makes on sm_90:
    tests/compiler/backends/test_triton_backend_sm90.py."""
    from modelc.generated import chaboche2_coupled, elastic, j2_linear_iso, j2_voce_af, j2_voce_af_coupled
    from modelc.runtime.model import float64_register_cap

    for m in (j2_voce_af_coupled, chaboche2_coupled):
        assert {float64_register_cap(m.Model, v) for v in ("value", "tangent", "jacobian", None)} == {255}
    for m in (j2_voce_af, j2_linear_iso, elastic):
        assert [float64_register_cap(m.Model, v) for v in ("value", "tangent", "jacobian", None)] == [128, 128, 255, 128]

    class Old:  # a module generated before the per-variant caps: one number (or None) for all
        TRITON_MAXNREG_F64 = 255
    assert float64_register_cap(Old, "tangent") == 255 and float64_register_cap(object(), "value") is None


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_models_and_results_copy_and_pickle(backend):
    """``copy.deepcopy(model)``, ``pickle`` and ``torch.save(model)`` of a model that has run (its C
    libraries loaded: ctypes handles stay behind and are loaded again) give a model that computes
    the same bits and is independent of the original; a result deep-copies and pickles with its
    labeled outputs and Jacobian (the copy owns its memory)."""
    import copy
    import io
    import pickle

    from modelc.generated import perzyna_iso

    m = perzyna_iso.Model(backend=backend)
    g = torch.Generator().manual_seed(3)
    x = {n: 1e-3 * torch.randn(5, *m.input_axis.type_of(n).base_shape, generator=g, dtype=torch.float64)
         for n in m.input_axis.variable_names}
    x["forces/t"] = torch.full((5,), 1.0, dtype=torch.float64)
    x["old_forces/t"] = torch.zeros(5, dtype=torch.float64)
    r = m(x, derivatives="tangent")
    assert bool(r.status.converged.all())
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    copies = [copy.deepcopy(m), pickle.loads(pickle.dumps(m)), torch.load(buf, weights_only=False)]
    for c in copies:
        assert c.backend == m.backend
        rc = c(x, derivatives="tangent")
        assert torch.equal(rc.outputs.tensor, r.outputs.tensor) and torch.equal(rc.jacobian.tensor, r.jacobian.tensor)
    copies[0].set_parameters(sigma_y=150.0)
    assert float(m.params.sigma_y) == 100.0 and not torch.equal(copies[0](x)["state/S"], r["state/S"])
    for rr in (copy.deepcopy(r), pickle.loads(pickle.dumps(r))):
        assert torch.equal(rr["state/S"], r["state/S"]) and torch.equal(rr.jacobian.tensor, r.jacobian.tensor)
        assert rr.outputs.tensor.data_ptr() != r.outputs.tensor.data_ptr()
        assert torch.equal(rr.status.iterations, r.status.iterations)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for a machine without CUDA")
def test_moving_to_cuda_without_cuda_is_a_clear_error(elastic):
    with pytest.raises(InputError, match="elastic: cannot move the model there: "):
        elastic.Model().to("cuda")
