"""Generated modules of hand-built programs: Triton kernel (interpreter) vs generated PyTorch vs an
independent oracle (closed forms, torch.linalg, Newton with autograd), float32 and float64, with
outputs poisoned (NaN) beforehand so an unwritten element shows."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from backend_programs import elastic_numpy, generated, matrix

DTYPES = [torch.float64, torch.float32]
TOL = {torch.float64: 1e-11, torch.float32: 2e-4}


def launch(mod, X, P, derivatives, dtype, shared=True, **consts):
    """Call a kernel directly on NaN-poisoned outputs (status poisoned too: not converged, -1
    iterations, NaN residual), each input variable a column view of ``X``; the status is returned
    stacked as ``(B, 3)`` like the generated PyTorch function's."""
    import triton.language as tl

    from modelc.runtime.axis import LabeledAxis

    B, nx = X.shape
    ny = sum(math.prod(_shape(v.type)) for v in mod.Model.OUTPUTS)
    axis = LabeledAxis.from_variables([(v.name, v.type) for v in mod.Model.INPUTS])
    views = [X[:, slice(*axis.span(name))] for name in axis.variable_names]
    Y = torch.full((B, ny), float("nan"), dtype=dtype)
    J = torch.full((B, ny, nx), float("nan"), dtype=dtype)
    CV, IT = torch.zeros(B, dtype=torch.bool), torch.full((B,), -1, dtype=torch.int32)
    RN = torch.full((B,), float("nan"), dtype=dtype)
    V = mod.Model.VARIANTS["jacobian" if derivatives else "value"]
    block = 8  # several programs, last one partial
    O = torch.tensor([-1.0, -1.0, -1.0], dtype=dtype)  # the spec's Newton options
    mod._kernel[(triton_cdiv(B, block),)](*views, P, Y, J, CV, IT, RN, O, B, *(v.stride(0) for v in views),
                                          0 if shared else P.stride(0), Y.stride(0), J.stride(0), 0, **consts, V=V,
                                          DTYPE=tl.float64 if dtype == torch.float64 else tl.float32,
                                          EPS=torch.finfo(dtype).eps, BLOCK=block, P_SHARED=shared)
    return Y, J, torch.stack([CV.to(dtype), IT.to(dtype), RN], dim=1)


def triton_cdiv(a, b):
    return (a + b - 1) // b


def _shape(tname):
    from modelc.runtime.types import TYPES

    return TYPES[tname].base_shape or (1,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_elastic_matches_closed_form_both_backends(gen_dir, dtype):
    mod = generated("elastic", gen_dir)
    g = torch.Generator().manual_seed(1)
    B = 13
    strain = torch.randn(B, 6, generator=g, dtype=torch.float64) * 1e-3
    E, nu = 1000 + 1e5 * torch.rand(1, generator=g).item(), 0.1 + 0.3 * torch.rand(1, generator=g).item()
    S_ref, C_ref = elastic_numpy(strain.numpy(), E, nu)
    for backend in ("torch", "triton"):
        m = mod.Model(dtype=dtype, backend=backend, E=E, nu=nu)
        out = m({"forces/E": strain.to(dtype)}, derivatives=True)
        scale = np.abs(S_ref).max()
        assert np.allclose(out["state/S"].double().numpy(), S_ref, rtol=TOL[dtype], atol=TOL[dtype] * scale)
        J = out.jacobian["state/S", "forces/E"].double().numpy()
        assert np.allclose(J, np.broadcast_to(C_ref, J.shape), rtol=TOL[dtype], atol=TOL[dtype] * E)
        assert out.status is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_implicit_kernels_write_every_element(gen_dir, dtype):
    mod = generated("newton3", gen_dir)
    B = 11
    X = torch.cat([torch.randn(B, 3, dtype=dtype), torch.zeros(B, 3, dtype=dtype)], 1)
    P = torch.tensor([[0.5]], dtype=dtype)
    Y, J, ST = launch(mod, X, P, True, dtype)
    Yt, Jt, STt = mod._torch_eval(X, P, mod.Model.VARIANTS["jacobian"])
    for a, b in ((Y, Yt), (J, Jt)):
        assert not a.isnan().any()
        assert torch.allclose(a, b, rtol=10 * TOL[dtype], atol=10 * TOL[dtype])
    assert (ST[:, 0] == 1).all() and (ST[:, 1] >= 1).all() and (ST[:, 2] >= 0).all()
    assert torch.equal(ST[:, 0], STt[:, 0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_write_every_element(gen_dir, dtype):
    mod = generated("elastic", gen_dir)
    X = torch.randn(11, 6, dtype=dtype)
    P = torch.tensor([[2e5, 0.3]], dtype=dtype)
    Y, J, _ = launch(mod, X, P, True, dtype)
    Yt, Jt, _ = mod._torch_eval(X, P, mod.Model.VARIANTS["jacobian"])
    assert not Y.isnan().any() and not J.isnan().any()
    assert torch.allclose(Y, Yt, rtol=TOL[dtype]) and torch.allclose(J, Jt, rtol=TOL[dtype])
    Y, J, _ = launch(mod, X, P, False, dtype)
    assert not Y.isnan().any() and J.isnan().all()  # the value kernel computes no derivative


def _newton_oracle(b, c, n):
    """Solve M u + c u^3 = b per point with torch.autograd Jacobians (float64), and du/db = J^-1."""
    M = torch.tensor(matrix(n), dtype=torch.float64)
    u = torch.zeros_like(b)
    for _ in range(60):
        R = u @ M.T + c * u ** 3 - b
        Jm = M + torch.diag_embed(3 * c * u ** 2)
        u = u - torch.linalg.solve(Jm, R.unsqueeze(-1)).squeeze(-1)
    Jm = M + torch.diag_embed(3 * c * u ** 2)
    return u, torch.linalg.inv(Jm)


@pytest.mark.parametrize("n", [1, 3, 13])
@pytest.mark.parametrize("dtype", DTYPES)
def test_newton_systems(gen_dir, n, dtype):
    mod = generated(f"newton{n}", gen_dir)
    g = torch.Generator().manual_seed(n)
    B = 9
    b = torch.randn(B, n, generator=g, dtype=torch.float64) * 3
    c = 0.2 + torch.rand(B, generator=g, dtype=torch.float64)  # a batched parameter
    u_ref, dudb_ref = _newton_oracle(b, c.unsqueeze(-1), n)
    inputs = {f"forces/b{i}": b[:, i].to(dtype) for i in range(n)}
    inputs.update({f"old_state/u{i}": torch.zeros(B, dtype=dtype) for i in range(n)})
    # the step is built only while a point of the program updates (the last evaluation builds none)
    src = Path(mod.__file__).read_text()
    loop = src[src.index("while todo1 > 0:"):]
    assert loop.index("update1 = ") < loop.index("todo1 = tl.sum(update1") < loop.index("if todo1 > 0:")
    its = {}
    for backend in ("torch", "triton"):
        m = mod.Model(dtype=dtype, backend=backend)
        out = m(inputs, derivatives=True, c=c.to(dtype))
        assert out.status.all_converged, out.status.summary()
        assert int(out.status.iterations.max()) >= 2
        its[backend] = out.status.iterations
        u = torch.stack([out[f"state/u{i}"] for i in range(n)], -1).double()
        tol = 1e-10 if dtype == torch.float64 else 1e-3
        assert torch.allclose(u, u_ref, atol=tol, rtol=tol)
        J = out.jacobian.tensor.double()
        col = {nm: m.input_axis.offset(nm) for nm in m.input_axis.variable_names}
        row = {nm: m.output_axis.offset(nm) for nm in m.output_axis.variable_names}
        for i in range(n):
            for j in range(n):
                assert torch.allclose(J[:, row[f"state/u{i}"], col[f"forces/b{j}"]], dudb_ref[:, i, j],
                                      atol=tol, rtol=tol)
            assert (J[:, row[f"state/u{i}"], col[f"old_state/u{i}"]] == 0).all()
        # value-only call: same outputs, no jacobian
        out_v = m(inputs, c=c.to(dtype))
        assert torch.equal(out_v.outputs.tensor, out.outputs.tensor)
        with pytest.raises(Exception, match="derivatives=True"):
            out_v.jacobian
    assert torch.equal(its["torch"], its["triton"])  # the same steps counted on both


def test_newton_failure_gives_nan_and_status(gen_dir):
    mod = generated("newton3", gen_dir)
    B = 5
    inputs = {f"forces/b{i}": torch.ones(B, dtype=torch.float64) for i in range(3)}
    inputs.update({f"old_state/u{i}": torch.zeros(B, dtype=torch.float64) for i in range(3)})
    inputs["forces/b1"] = torch.tensor([1.0, float("nan"), 1.0, 1.0, float("inf")], dtype=torch.float64)
    for backend in ("torch", "triton"):
        out = mod.Model(backend=backend)(inputs, derivatives=True)
        conv = out.status.converged
        assert conv.tolist() == [True, False, True, True, False]
        assert out["state/u0"][~conv].isnan().all() and not out["state/u0"][conv].isnan().any()
        assert out.jacobian.tensor[~conv].isnan().all()
        s = out.status.summary()
        assert "3 of 5 points converged" in s and "2 FAILED" in s and "1, 4" in s


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_solve_with_zero_structural_diagonal(gen_dir, dtype):
    mod = generated("solve3", gen_dir)
    g = torch.Generator().manual_seed(3)
    A = torch.randn(10, 3, 3, generator=g, dtype=torch.float64)
    A[:, 0, 0] = 0  # structurally zero in the program: only the static ordering can fix this
    A[:, 1, 2] = 0
    A[:, 2, 1] = 0
    b = torch.randn(10, 3, generator=g, dtype=torch.float64)
    x_ref = torch.linalg.solve(A, b)
    for backend in ("torch", "triton"):
        out = mod.Model(dtype=dtype, backend=backend)({"forces/A": A.to(dtype), "forces/b": b.to(dtype)})
        tol = 1e-10 if dtype == torch.float64 else 1e-3
        assert torch.allclose(out["state/x"].double(), x_ref, rtol=tol, atol=tol * x_ref.abs().max())


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_solve_tiny_pivot_needs_dynamic_pivoting(gen_dir, dtype):
    mod = generated("pivot2", gen_dir)
    eps = torch.tensor([1e-30, -1e-20, 1e-9, 0.5, 2.0, 0.0], dtype=torch.float64)
    b = torch.randn(6, 3, dtype=torch.float64)
    A = torch.zeros(6, 2, 2, dtype=torch.float64)
    A[:, 0, 0], A[:, 0, 1], A[:, 1, 0], A[:, 1, 1] = eps, 1, 1, 1
    x_ref = torch.linalg.solve(A, b[:, :2])
    # without pivoting the first row would give x = (b0 - x1) / eps: catastrophic for tiny eps
    for backend in ("torch", "triton"):
        out = mod.Model(dtype=dtype, backend=backend)({"forces/eps": eps.to(dtype), "forces/b": b.to(dtype)})
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        assert torch.allclose(out["state/x"][:, :2].double(), x_ref, rtol=tol, atol=tol)
        assert torch.equal(out["state/x"][:, 2], b[:, 2].to(dtype))


_POWK_KERNEL = """
@triton.jit
def k_powk(X, Y, n, K: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(X + i, mask=m, other=1.0)
    tl.store(Y + i, _mc_powk(x, K), mask=m)
"""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # log of a negative base on the exp/log path
@pytest.mark.parametrize("k", [-3.0, 0.0, 1.0, 2.0, 5.0, 63.0, 2.5, 0.3])
def test_compile_time_power_helper(tmp_path, k):
    """_mc_powk (a power whose exponent is a constexpr: baked parameters) under the interpreter: an
    integer K is binary powering, exact where every product is (integer bases), within |K| 2^-53 of
    the exactly rounded power, the sign of a negative base kept (as torch.pow and the C backend do),
    C's special values; a non-integer K is exp(K log x) (NaN for a negative base, like powr)."""
    import importlib.util
    from fractions import Fraction

    from modelc.backends import triton_math

    path = tmp_path / "powk_kernel.py"
    path.write_text("import triton\nimport triton.language as tl\n" + triton_math.helper_source(["_mc_powk"])
                    + _POWK_KERNEL)
    spec = importlib.util.spec_from_file_location("powk_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    g = np.random.default_rng(int(k) + 50)
    x = np.concatenate([np.arange(2.0, 9.0), g.uniform(-3, 3, 40), [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0]])
    y = torch.empty(len(x), dtype=torch.float64)
    mod.k_powk[(1,)](torch.tensor(x), y, len(x), K=k, BLOCK=64)
    got = y.numpy()
    with np.errstate(all="ignore"):
        ref = np.power(x, k)
    if k != int(k):  # exp(K log x)
        pos = x > 0
        np.testing.assert_allclose(got[pos], ref[pos], rtol=1e-14)
        assert np.isnan(got[x < 0]).all()
        return
    if k >= 0:
        np.testing.assert_array_equal(got[:7][np.arange(2.0, 9.0) ** k < 2.0 ** 53], (np.arange(2.0, 9.0) ** k)[
            np.arange(2.0, 9.0) ** k < 2.0 ** 53])
    fin = np.isfinite(x) & (x != 0)
    want = np.array([float(Fraction(v) ** int(k)) for v in x[fin]])
    assert (np.abs(got[fin] - want) <= (abs(k) + 1) * 2.0 ** -53 * np.abs(want)).all()
    special = ~fin
    np.testing.assert_array_equal(got[special], ref[special])
    np.testing.assert_array_equal(np.signbit(got[special]), np.signbit(ref[special]))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # masked 0/0 lanes
def test_baked_exponent_is_a_compile_time_power(tmp_path):
    """perzyna_iso with its exponent n baked: every power of n in the kernel and its Newton helper
    (which takes the baked constexpr arguments) goes through _mc_powk with the exponent folded at
    compile time (y**n, y**(n - 1), the guess's (...)**(-2/n)); under the interpreter the kernel
    matches the PyTorch backend to 1e-12 for an integer and a non-integer n."""
    from pathlib import Path

    from modelc import driver
    from modelc.backends.module import write_atomic
    from modelc.cache import import_file
    from modelc.options import CompileOptions

    spec = driver.load_spec(Path(__file__).parents[3] / "spec" / "library.yaml")
    path = tmp_path / "perzyna_iso_baked_n.py"
    write_atomic(path, driver.compile_model(spec, "perzyna_iso", CompileOptions(constant_params=("n",))).source)
    mod = import_file(path, "triton_perzyna_baked_n")
    text = path.read_text()
    assert "_mc_powk(state_internal_gamma_rate_root, c_n)" in text
    assert "_mc_powk(state_internal_gamma_rate_root, (-1.0 + c_n))" in text
    assert "c_n: tl.constexpr" in text[text.index("def _triton_newton_1"):]
    g = torch.Generator().manual_seed(8)
    B = 24
    inputs = {"forces/E": torch.randn(B, 6, generator=g, dtype=torch.float64) * 3e-3,
              "forces/t": torch.ones(B, dtype=torch.float64), "old_forces/t": torch.zeros(B, dtype=torch.float64),
              "old_state/internal/Ep": torch.zeros(B, 6, dtype=torch.float64),
              "old_state/internal/ep": torch.zeros(B, dtype=torch.float64)}
    for n in (5.0, 2.5):
        a = mod.Model(backend="torch", n=n)(inputs, derivatives="tangent")
        b = mod.Model(backend="triton", n=n)(inputs, derivatives="tangent")
        assert bool(a.status.converged.all()) and bool(b.status.converged.all())
        assert bool((a.status.iterations >= 2).any())  # points flow
        for u, v in ((b.outputs.tensor, a.outputs.tensor), (b.jacobian.tensor, a.jacobian.tensor)):
            assert float((u - v).abs().max() / v.abs().max()) <= 1e-12


@pytest.mark.parametrize("dtype", DTYPES)
def test_baked_parameters_agree_with_runtime_parameters(gen_dir, dtype):
    runtime = generated("elastic", gen_dir)
    baked = generated("elastic", gen_dir, constant_params=("E", "nu"))
    assert baked.Model.BAKED == ("E", "nu")
    assert "c_E: tl.constexpr" in open(baked.__file__).read()
    strain = torch.randn(7, 6, dtype=dtype)
    a = runtime.Model(dtype=dtype, backend="triton", E=123e3, nu=0.27)({"forces/E": strain}, derivatives=True)
    b = baked.Model(dtype=dtype, backend="triton", E=123e3, nu=0.27)({"forces/E": strain}, derivatives=True)
    assert torch.allclose(a.outputs.tensor, b.outputs.tensor, rtol=TOL[dtype])
    assert torch.allclose(a.jacobian.tensor, b.jacobian.tensor, rtol=TOL[dtype])
    with pytest.raises(Exception, match="baked"):
        baked.Model(backend="triton")({"forces/E": torch.randn(7, 6, dtype=torch.float64)},
                                      E=torch.full((7,), 2e5, dtype=torch.float64))


def test_tangent_chunks_stored_as_soon_as_computed():
    """j2_linear_iso's kernel: each 4-entry chunk of the 6x6 tangent is stored once, right after the
    statements it reads (modelc.passes.schedule), so the first store comes before the last entry is
    computed; the outputs' row likewise comes before any tangent entry. In float32 two neighbouring
    chunks are stored together (8 columns, 32 bytes, as 4 float64 columns are: STORE_BYTES), once
    both are computed; a last odd chunk is stored alone in either dtype."""
    import inspect
    import re

    from modelc.generated import j2_linear_iso

    src = inspect.getsource(j2_linear_iso._kernel.fn)
    lines = src.splitlines()
    heads = [(i, int(m.group(1)), int(m.group(2))) for i, l in enumerate(lines)
             if (m := re.search(r"if V & 2:  # tangent: entries (\d+) \.\. (\d+) of", l))]
    fours = {start: i for i, start, end in heads if end - start == 3}
    pairs = {start: i for i, start, end in heads if end - start == 7}
    assert sorted(fours) == list(range(0, 36, 4)) and sorted(pairs) == list(range(0, 32, 8)), heads
    assert len(heads) == len(fours) + len(pairs)
    for start, i in list(fours.items()) + list(pairs.items()):  # each guard holds its chunk's store
        width = 8 if start in pairs and pairs[start] == i else 4
        dtype = {8: "tl.float32", 4: "tl.float64" if start < 32 else None}[width]
        if dtype:
            assert lines[i + 1].strip().startswith(f"if DTYPE == {dtype}:"), (start, lines[i + 1])
        store = next(l for l in lines[i + 1:] if "tl.store(" in l)
        assert "tl.store(J + row[:, None] * j_stride + " + (f"{start} + " if start else "tl.arange") in store
        assert f"mask[:, None] & (tl.arange(0, {width})[None, :] < {width})" in store, (start, store)
    for start, i in pairs.items():  # after both of its chunks are computed (and stored in float64)
        assert i > fours[start] and i > fours[start + 4], (start, heads)
    entry = re.compile(r"^\s+(d|dcse_)\d+ = ")  # (entries, and since passes.blocks the row vectors they read)
    first_store = min(fours.values())
    assert any(entry.match(l) for l in lines[first_store:])  # entries still computed after the first store
    first_y = min(i for i, l in enumerate(lines) if "tl.store(Y" in l)
    assert first_y < first_store


def test_only_large_systems_detach_their_memory_operations():
    """One-trip loads and stores (triton_backend._detach) in the kernels of systems of
    DETACH_MIN_UNKNOWNS unknowns or more (j2_voce_af_coupled's 14, chaboche2_coupled's 19), for
    their GPU compile time; the smaller twins (7-9 unknowns) and the radial returns (one unknown, or
    none: j2_perfect is closed-form) run straight, which was faster on an H200 (gtn: level). The
    float64 register cap follows the system, not the detaching: 255 for every coupled system, 128
    for the value and tangent kernels of the radial returns."""
    import importlib
    import inspect

    from modelc.backends import triton_backend as tb
    from modelc.driver import load_spec, lower_model

    spec = load_spec(Path(__file__).resolve().parents[3] / "spec" / "library.yaml")
    sizes = {}
    for name in ("j2_perfect", "j2_voce_af", "j2_perfect_coupled", "perzyna_iso_coupled", "gtn",
                 "j2_voce_af_coupled", "chaboche2_coupled"):
        program = lower_model(spec, name).program
        sizes[name] = tb._system_size(program)
        mod = importlib.import_module(f"modelc.generated.{name}")
        detached = "one trip" in inspect.getsource(mod._kernel.fn)
        assert detached == (sizes[name] >= tb.DETACH_MIN_UNKNOWNS), (name, sizes[name])
        caps = mod.Model.TRITON_MAXNREG_F64
        assert caps["tangent"] == (255 if sizes[name] > 1 else 128), (name, caps)
    assert sizes == {"j2_perfect": 0, "j2_voce_af": 1, "j2_perfect_coupled": 7, "perzyna_iso_coupled": 8,
                     "gtn": 9, "j2_voce_af_coupled": 14, "chaboche2_coupled": 19}


def test_variants_share_one_elimination_of_an_implicit_models_matrix():
    """The tangent, Jacobian and total variants of an implicit model each solve with its dR/du: the
    kernel eliminates that matrix once, under the union of their variants, and each variant
    substitutes its own right-hand sides (the numbers: the full-Jacobian tests of every library
    model under TRITON_INTERPRET, tests/models/test_library_tangent.py)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "generated" / "j2_voce_af_coupled.py").read_text()
    kernel = text[text.index("if triton is not None:"):text.index("C_SOURCE = ")]
    assert kernel.count("# elimination lu") == 1
    assert kernel.count("through elimination lu1") == 3
    assert "unrolled over structural nonzeros\n" in kernel.split("# elimination lu1")[1].splitlines(True)[0]


def test_linear_solves_go_through_shared_helpers():
    """A Triton module's solves larger than 1x1 run through helpers emitted once per module
    (modelc.backends.triton_backend, TritonEmitter): the Newton step and the tangent call the same
    elimination helper, every forward/back helper is called, and no two helpers have the same body.
    (The numbers: the generated kernels' linear-solve tests above and the library's tangent tests.)"""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "generated" / "j2_voce_af_coupled.py").read_text()
    triton_part = text[text.index("if triton is not None:"):text.index("C_SOURCE = ")]
    newton = triton_part[triton_part.index("def _triton_newton_1("):triton_part.index("def _kernel(")]
    kernel = triton_part[triton_part.index("def _kernel("):]
    assert triton_part.count("def _triton_lu1(") == 1 and "def _triton_lu2(" not in triton_part
    assert "= _triton_lu1(" in newton and "= _triton_lu1(" in kernel
    names = re.findall(r"def (_triton_lu1_(?:forward|back)\d+)\(", triton_part)
    assert any("forward" in n for n in names) and any("back" in n for n in names)
    bodies = []
    for name in names:
        assert f"= {name}(" in triton_part, f"{name} is never called"
        body = triton_part[triton_part.index(f"def {name}("):]
        body = body[body.index('"""', body.index('"""') + 3):body.index("@triton.jit") if "@triton.jit" in body else None]
        bodies.append(body)
    assert len(set(bodies)) == len(bodies)


@pytest.mark.parametrize("dtype", DTYPES)
def test_points_the_kernel_fails_are_solved_again(tmp_path, monkeypatch, dtype):
    """With the pivot guard made to trip at every step (expand_solve.GUARD = 1e30 while the module is
    emitted), the kernel's Newton fails every point; the runtime (TRITON_RETRY, set for 4 or more
    unknowns) solves each again with the generated PyTorch code, whose LU pivots partially: every
    point converges, to the PyTorch backend's values and iteration counts. Turned off, the same
    kernel leaves every point failed (NaN)."""
    from backend_programs import newton_system
    from modelc.backends.module import emit_module, write_atomic
    from modelc.cache import import_file
    from modelc.passes import expand_solve

    _, full = newton_system(5, "newton5t")
    monkeypatch.setattr(expand_solve, "GUARD", 1e30)
    path = tmp_path / "newton5t_guard.py"
    write_atomic(path, emit_module(full))
    mod = import_file(path, f"triton_newton5t_guard_{str(dtype)[6:]}")
    assert mod.Model.TRITON_RETRY
    g = torch.Generator().manual_seed(6)
    x = {f"forces/b{i}": (torch.randn(21, generator=g, dtype=torch.float64) * 3).to(dtype) for i in range(5)}
    x.update({f"old_state/u{i}": torch.zeros(21, dtype=dtype) for i in range(5)})

    class KernelAlone(mod.Model):
        TRITON_RETRY = False

    alone = KernelAlone(backend="triton", dtype=dtype)(x, derivatives=True)
    assert not alone.status.converged.any() and torch.isnan(alone.outputs.tensor).all()
    ref = mod.Model(backend="torch", dtype=dtype)(x, derivatives=True)
    out = mod.Model(backend="triton", dtype=dtype)(x, derivatives=True)
    assert ref.status.all_converged and out.status.all_converged
    assert torch.equal(out.status.iterations, ref.status.iterations)
    tol = TOL[dtype]
    torch.testing.assert_close(out.outputs.tensor, ref.outputs.tensor, rtol=tol, atol=tol)
    torch.testing.assert_close(out.jacobian.tensor, ref.jacobian.tensor, rtol=tol, atol=tol)
    # a point with a non-finite input stays failed (the retry leaves the kernel's verdict alone)
    x["forces/b2"][5] = float("inf")
    bad = mod.Model(backend="triton", dtype=dtype)(x, derivatives=True)
    assert bad.status.converged.tolist() == [i != 5 for i in range(21)]
    assert torch.isnan(bad.outputs.tensor[5]).all() and torch.isnan(bad.jacobian.tensor[5]).all()
