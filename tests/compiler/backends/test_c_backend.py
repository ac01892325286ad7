"""The C backend (modelc.backends.c_backend + modelc.runtime.cbuild): library models against the
generated PyTorch code (poisoned output buffers, status, NaN points), the custom functions against
their NumPy references, a linear solve that needs pivoting against numpy.linalg.solve, the build cache
(including concurrent builds) and the automatic backend choice without a compiler."""
from __future__ import annotations

import dataclasses

import math
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
import torch

from modelc import ir
from modelc.backends.c_backend import c_source
from modelc.runtime import cbuild
from modelc.runtime.types import Scalar
from rt_helpers import HAVE_CC, needs_cc

LIBRARY = Path(__file__).parents[3] / "spec" / "library.yaml"
MODELS = ("elastic", "j2_linear_iso", "j2_voce_af", "perzyna_iso")  # j2_perfect: like j2_linear_iso



@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A private C cache for this module (restores $MODELC_CACHE_DIR afterwards)."""
    old = os.environ.get("MODELC_CACHE_DIR")
    path = tmp_path_factory.mktemp("ccache")
    os.environ["MODELC_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("MODELC_CACHE_DIR", None)
    else:
        os.environ["MODELC_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def library(cache_dir, tmp_path_factory):
    from modelc import driver
    from modelc.backends.module import write_atomic
    from modelc.cache import import_file

    spec = driver.load_spec(LIBRARY)
    folder = tmp_path_factory.mktemp("clibrary")
    out = {}
    for name in MODELS:
        path = folder / f"{name}.py"
        write_atomic(path, driver.compile_model(spec, name).source)
        out[name] = import_file(path, f"c_backend_library_{name}")
    return out


def _inputs(m, B: int, seed: int) -> torch.Tensor:
    """Flat X (float64): strains of magnitude 1e-5..1e-2 (elastic and plastic points), zero old
    state, unit time step."""
    g = torch.Generator().manual_seed(seed)
    X = torch.zeros(B, m.input_axis.size, dtype=torch.float64)
    for name in m.input_axis.variable_names:
        a, b = m.input_axis.span(name)
        if name == "forces/t":
            X[:, a:b] = 1.0
        elif not name.startswith("old_"):
            mag = 10 ** (-5 + 3 * torch.rand(B, 1, generator=g, dtype=torch.float64))
            X[:, a:b] = torch.randn(B, b - a, generator=g, dtype=torch.float64) * mag
    return X


def _split(X, sizes):
    """Per-variable column views of X (what the C entry points read in place)."""
    out, a = [], 0
    for n in sizes:
        out.append(X[:, a:a + n])
        a += n
    return out


def _status(B, dtype, fill=True):
    """Poisoned status buffers: converged, iterations, residual norm."""
    return (torch.full((B,), fill, dtype=torch.bool), torch.full((B,), -7, dtype=torch.int32),
            torch.full((B,), math.nan, dtype=dtype))


def _poisoned_c(m, X, P, derivatives, threads=None, lib=None):
    B, nx = X.shape
    ny = m.output_axis.size
    Y = torch.full((B, ny), math.nan, dtype=m.dtype)
    J = torch.full((B, ny, nx), math.nan, dtype=m.dtype) if derivatives else None
    status = _status(B, m.dtype) if m.IMPLICIT else None
    sizes = [m.input_axis.type_of(n).size for n in m.input_axis.variable_names]
    (lib or m._general_lib())(_split(X, sizes), P.contiguous(), Y, J, status, threads)
    ST = None if status is None else torch.stack([status[0].to(m.dtype), status[1].to(m.dtype), status[2]], 1)
    return Y, J, ST


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-300))


@needs_cc
@pytest.mark.parametrize("name", MODELS)
def test_library_models_match_torch(library, name):
    """float64: every point converges in both backends, same iterations, tight agreement. float32
    (where Newton may stall at round-off in either backend): a failed point is NaN and flagged, and
    on the points both converged the C results are no worse than PyTorch's, both against float64."""
    mod = library[name]
    B = 300
    X64 = _inputs(mod.Model(backend="torch"), B, seed=zlib.crc32(name.encode()) % 1000)
    ref = {}
    for dtype in (torch.float64, torch.float32):
        mt, mc = mod.Model(dtype=dtype, backend="torch"), mod.Model(dtype=dtype, backend="c")
        assert mc.backend == "c"
        X = X64.to(dtype)
        P, _ = mt._param_tensor({}, torch.Size([B]))
        for deriv in (False, True):
            Yt, Jt, STt = mt.evaluate(X, P, deriv)
            Yc, Jc, STc = _poisoned_c(mc, X, P, deriv)
            assert (Jc is None) == (not deriv)
            ok = torch.ones(B, dtype=torch.bool)
            both = ok
            if mod.Model.IMPLICIT:
                assert not STc.isnan().any()
                ok = STc[:, 0] == 1
                both = ok & (STt[:, 0] == 1)
                assert set(STc[:, 0].tolist()) <= {0.0, 1.0}
            # every entry written: NaN exactly on the failed points, nowhere else
            assert torch.equal(Yc.isnan().any(-1), ~ok) and torch.equal(Yc.isnan().all(-1), ~ok)
            if deriv:
                assert torch.equal(Jc.isnan().flatten(1).any(-1), ~ok) and Jc[~ok].isnan().all()
            if dtype == torch.float64:
                assert bool(ok.all()) and bool(both.all())
                if mod.Model.IMPLICIT:
                    assert torch.equal(STc[:, 1], STt[:, 1])
                    assert _rel(STc[:, 2], STt[:, 2].clamp(min=1e-300)) < 1e-3 or float(STt[:, 2].max()) < 1e-9
                assert _rel(Yc, Yt) < 1e-10
                ref["Y"] = Yt
                if deriv:
                    assert _rel(Jc, Jt) < 1e-8
                    ref["J"] = Jt
            else:
                assert int(ok.sum()) >= int((STt[:, 0] == 1).sum()) - B // 10 if mod.Model.IMPLICIT else True
                assert int(both.sum()) >= B // 2
                Yr = ref["Y"][both]
                assert _rel(Yc[both].double(), Yr) <= 4 * _rel(Yt[both].double(), Yr) + 1e-5
                if deriv:
                    Jr = ref["J"][both]
                    assert _rel(Jc[both].double(), Jr) <= 4 * _rel(Jt[both].double(), Jr) + 1e-4
        if mod.Model.IMPLICIT and dtype == torch.float64:  # the points span elastic and plastic behaviour
            its = STc[:, 1]
            assert bool((its >= 1).any())  # some points flow (a Newton update was needed)
            assert bool((its <= 1).any()) or name == "perzyna_iso"


def test_scalar_solves_are_inline():
    """A one-unknown Newton (the radial returns) and its 1 x 1 tangent solve divide inline in the lane
    loop: no call, no staged A and B, and the block function keeps its values in one loop after the
    Newton instead of lane arrays between five (measured on j2_voce_af: speed unchanged, results
    bit-identical, C source about 950 lines shorter). The tangent's solve was expand_solve's
    x = b * (1/a) (``ls1_``); since passes.blocks it is a product with one shared reciprocal among
    the regrouped statements (``dcse_``), and no linear solve is left.
    The values are checked against PyTorch by test_library_models_match_torch; coupled systems keep
    mc_lu_solve."""
    import importlib

    src = importlib.import_module("modelc.generated.j2_voce_af").C_SOURCE
    assert "mc_lu_solve(1," not in src and "mc_A[" not in src and "mc_ls1_A" not in src
    assert "nt1_dx" in src and "ls1_" not in src and "const real dcse_" in src
    block = src[src.index("MC_INLINE void block_eval"):]
    assert block.count("MC_SIMD MC_LANES") == 2 and "real v_cse_" not in block
    coupled = importlib.import_module("modelc.generated.j2_perfect_coupled").C_SOURCE
    # its 7-unknown Newton step is unrolled in the iteration's loop (the LU only in the fallback for
    # lanes that fail: one body, newton_1_iterate, the unrolled step under V & 2 and the LU under
    # V & 1, which newton_1 and newton_1_lu call with those constants); its tangent's solve calls the LU
    body = _c_function(coupled, "newton_1_iterate")
    assert "if (V & 2) v_state_internal_Ep_0[l] = mc_act[l] ? v_state_internal_Ep_0[l] + nt1_dx_0" in body
    assert "if (V & 1) {\n        mc_lu_solve(7, 1, mc_A, mc_B, 0);" in body
    assert "mc_lu_solve(" not in _c_function(coupled, "newton_1") and ", a, 2);" in _c_function(coupled, "newton_1")
    call = _c_function(coupled, "newton_1_lu").split(") {", 1)[1]  # (its body: the call)
    assert "newton_1_iterate(" in call and "mc_redo" in call and call.rstrip().endswith(", a, 1);\n}")
    # the tangent's solve factors the matrix and keeps the pivots; the Jacobian's and the total's
    # columns go through the same factors (one factorisation per call, the same matrix staged once)
    block = coupled[coupled.index("MC_INLINE void block_eval"):]
    assert block.count("mc_lu_solve(") == 1 and "mc_lu_solve(7, 6, mc_ls1_A, mc_ls1_B, (V & 12) ? mc_ls1_piv : 0);" in block
    assert "mc_lu_apply(7, " in block and "mc_ls2_A" not in block and block.count("mc_ls1_A[") == 7 * 7 + 1


def _c_function(src: str, name: str) -> str:
    """The text of C function ``name`` in ``src`` (from its signature to the next function)."""
    start = src.find(f"static void {name}(")
    start = start if start >= 0 else src.index(f"MC_INLINE void {name}(")
    ends = [i for i in (src.find("\nstatic ", start + 1), src.find("\nMC_INLINE ", start + 1)) if i > 0]
    return src[start:min(ends)]


@needs_cc
def test_newton_step_unrolled_and_lu_agree(cache_dir, tmp_path, monkeypatch):
    """A 13-unknown Newton (hand-built, tests/compiler/backends/backend_programs.py) and its tangent
    through C: the step unrolled over the Jacobian's nonzeros (the default) and through mc_lu_solve
    (UNROLL_MAX below 13) agree with each other and with the generated PyTorch code, every point
    converged, in the same number of iterations."""
    from backend_programs import newton_system
    from modelc.backends import c_backend
    from modelc.backends.module import emit_module, write_atomic
    from modelc.cache import import_file

    _, full = newton_system(13, "newton13c")
    mods = {}
    for tag, umax in (("unrolled", c_backend.UNROLL_MAX), ("lu", 12)):
        monkeypatch.setattr(c_backend, "UNROLL_MAX", umax)
        path = tmp_path / f"newton13c_{tag}.py"
        write_atomic(path, emit_module(full))
        mods[tag] = import_file(path, f"c_newton13c_{tag}")
    assert "mc_lu_solve(13, 1, mc_A, mc_B, 0)" in _c_function(mods["lu"].C_SOURCE, "newton_1")
    assert "newton_1_lu" not in mods["lu"].C_SOURCE
    unrolled = _c_function(mods["unrolled"].C_SOURCE, "newton_1_iterate")  # (the step under V & 2)
    assert "if (V & 2) v_state_u12[l] = mc_act[l] ? v_state_u12[l] + nt1_dx_12" in unrolled
    g = torch.Generator().manual_seed(5)
    x = {f"forces/b{i}": torch.randn(40, generator=g, dtype=torch.float64) * 3 for i in range(13)}
    x.update({f"old_state/u{i}": torch.zeros(40, dtype=torch.float64) for i in range(13)})
    ref = mods["lu"].Model(backend="torch")(x, derivatives=True)
    outs = {tag: mod.Model(backend="c")(x, derivatives=True) for tag, mod in mods.items()}
    for tag, r in outs.items():
        assert r.status.all_converged, tag
        assert torch.equal(r.status.iterations, ref.status.iterations), tag
        assert _rel(r.outputs.tensor, ref.outputs.tensor) < 1e-13, tag
        assert _rel(r.jacobian.tensor, ref.jacobian.tensor) < 1e-12, tag
    assert _rel(outs["unrolled"].outputs.tensor, outs["lu"].outputs.tensor) < 1e-13


@needs_cc
def test_a_system_builds_its_step_after_the_blocks_test(cache_dir, tmp_path, monkeypatch):
    """A Newton over a system tests its lanes in one loop and builds the Jacobian and the step in the
    next, after the block's test, so the evaluation that ends a solve (every lane converged) builds
    none: the same arithmetic, so the same bits as the one loop it replaced (SPLIT_MIN_UNKNOWNS above
    the system's size), outputs, iterations, residual norms and the tangent, on the unrolled step
    and on the LU fallback; a scalar Newton (the radial returns) is split the same way."""
    import importlib

    from backend_programs import newton_system
    from modelc.backends import c_backend
    from modelc.backends.module import emit_module, write_atomic
    from modelc.cache import import_file

    _, full = newton_system(9, "newton9split")
    mods = {}
    for tag, smin, umax in (("split", 2, c_backend.UNROLL_MAX), ("one", 10, c_backend.UNROLL_MAX),
                            ("split-lu", 2, 8), ("one-lu", 10, 8)):
        monkeypatch.setattr(c_backend, "SPLIT_MIN_UNKNOWNS", smin)
        monkeypatch.setattr(c_backend, "UNROLL_MAX", umax)
        path = tmp_path / f"newton9_{tag.replace('-', '_')}.py"
        write_atomic(path, emit_module(full))
        mods[tag] = import_file(path, f"c_newton9_{tag.replace('-', '_')}")
    split = _c_function(mods["split"].C_SOURCE, "newton_1_iterate")
    loop = split[split.index("for (int it = 0; ; ++it) {"):]
    assert loop.startswith("for (int it = 0; ; ++it) {\n    MC_ITERATION_FENCE;")
    test = loop.index("if (!mc_any) break;")
    assert test < loop.index("mc_A[0 * MC_W + l] =") and test < loop.index("nt1_dx_0 =")
    one = _c_function(mods["one"].C_SOURCE, "newton_1_iterate")
    assert "MC_ITERATION_FENCE" not in one and one.index("nt1_dx_0 =") < one.index("if (!mc_any) break;")
    lu = _c_function(mods["split-lu"].C_SOURCE, "newton_1")
    assert lu.index("if (!mc_any) break;") < lu.index("mc_A[0 * MC_W + l] =") < lu.index("mc_lu_solve(9, 1, mc_A")
    g = torch.Generator().manual_seed(11)
    x = {f"forces/b{i}": torch.randn(37, generator=g, dtype=torch.float64) * 3 for i in range(9)}
    x.update({f"old_state/u{i}": torch.zeros(37, dtype=torch.float64) for i in range(9)})
    outs = {tag: mod.Model(backend="c")(x, derivatives=True) for tag, mod in mods.items()}
    for a, b in (("split", "one"), ("split-lu", "one-lu")):
        assert outs[a].status.all_converged and int(outs[a].status.iterations.max()) >= 2
        assert torch.equal(outs[a].outputs.tensor, outs[b].outputs.tensor), a
        assert torch.equal(outs[a].jacobian.tensor, outs[b].jacobian.tensor), a
        assert torch.equal(outs[a].status.iterations, outs[b].status.iterations), a
        assert torch.equal(outs[a].status.residual_norm, outs[b].status.residual_norm), a
    # a scalar Newton the same (j2_voce_af's Halley step: its J and H after the test)
    scalar = _c_function(importlib.import_module("modelc.generated.j2_voce_af").C_SOURCE, "newton_1")
    loop = scalar[scalar.index("for (int it = 0; ; ++it) {"):]
    assert loop.startswith("for (int it = 0; ; ++it) {\n    MC_ITERATION_FENCE;")
    assert loop.index("if (!mc_any) break;") < loop.index("const real nt1_dx =")


def _tangent_by_parameter_program(n: int, name: str):
    """backend_programs.newton_system with d u / d $c as well (the implicit function theorem's
    right-hand side -dR/dc = -u^3 next to the identity for d u / d b), its tangent declared as every
    u by the parameter $c: split into variants, the system's column groups are (tangent, total) for
    d u / d c and (jacobian, total) for d u / d b, so neither runs for every derivative variant."""
    from backend_programs import newton_system
    from modelc.passes.variants import split_variants, standard_variants

    _, full = newton_system(n, name)
    nt = full.body[0]
    u = list(nt.unknowns)
    bs = [v for v in full.inputs if v.name.startswith("forces/")]
    dudb = [[sp.Symbol(f"d{i}_{j}", real=True) for j in range(n)] for i in range(n)]
    dudc = [sp.Symbol(f"dc{i}", real=True) for i in range(n)]
    B = tuple(tuple([sp.S.One if i == j else sp.S.Zero for j in range(n)] + [-u[i] ** 3]) for i in range(n))
    ls = ir.LinearSolve(nt.jacobian, B, tuple(tuple(dudb[i] + [dudc[i]]) for i in range(n)))
    outs = full.outputs
    derivs = {(outs[i].name, bs[j].name): ((dudb[i][j],),) for i in range(n) for j in range(n)}
    derivs.update({(outs[i].name, "$c"): ((dudc[i],),) for i in range(n)})
    p = ir.Program(name, full.inputs, full.parameters, outs, (nt, ls), full.results, derivs, full.status,
                   jacobian_wrt=tuple(v.name for v in full.inputs) + ("$c",))
    return split_variants(p, standard_variants(p, (tuple(o.name for o in outs), ("$c",))))


@needs_cc
def test_a_system_no_column_group_of_which_runs_for_every_variant_is_factored_on_its_own(tmp_path):
    """A tangent declared by a parameter needs columns of the system that the Jacobian does not, and
    the Jacobian columns the tangent does not: the system is then factored on its own under the
    union of the variants (mc_lu_solve with no right-hand side, its pivots kept) and both groups
    solve through mc_lu_apply. Each call's derivatives against the closed forms d u / d b =
    (M + 3 c diag(u^2))^-1 and d u / d c = -(M + 3 c diag(u^2))^-1 u^3, and against the PyTorch code
    (which eliminates the shared matrix once as well)."""
    import re

    from backend_programs import matrix
    from modelc.backends.module import emit_module, write_atomic
    from modelc.cache import import_file

    n = 3
    prog = _tangent_by_parameter_program(n, "ctangentc")
    assert [m for st, m in zip(prog.body, prog.masks) if isinstance(st, ir.LinearSolve)] == [10, 12]
    path = tmp_path / "ctangentc.py"
    write_atomic(path, emit_module(prog))
    mod = import_file(path, "c_tangent_by_parameter")
    block = mod.C_SOURCE[mod.C_SOURCE.index("MC_INLINE void block_eval"):]
    assert re.findall(r"mc_lu_\w+\([^;]*;", block) == [
        "mc_lu_solve(3, 0, mc_ls1_A, 0, mc_ls1_piv);", "mc_lu_apply(3, 1, mc_ls1_A, mc_ls1_piv, mc_ls1_B);",
        "mc_lu_apply(3, 3, mc_ls1_A, mc_ls1_piv, mc_ls2_B);"]
    g = torch.Generator().manual_seed(8)
    x = {f"forces/b{i}": torch.randn(21, generator=g, dtype=torch.float64) * 3 for i in range(n)}
    x.update({f"old_state/u{i}": torch.zeros(21, dtype=torch.float64) for i in range(n)})
    M = np.array(matrix(n), dtype=float)
    for backend in ("c", "torch"):
        m = mod.Model(backend=backend)
        calls = {d: m(x, derivatives=d) for d in ("tangent", True, "total")}
        u = calls["tangent"].outputs.tensor.numpy()
        Jinv = np.linalg.inv(M[None] + 1.5 * np.einsum("ij,pj->pij", np.eye(n), u ** 2))  # c = 0.5
        dudb, dudc = Jinv, -np.einsum("pij,pj->pi", Jinv, u ** 3)
        for d, r in calls.items():
            assert r.status.all_converged and torch.equal(r.outputs.tensor, calls["tangent"].outputs.tensor)
            J = r.jacobian
            for i in range(n):
                if d in ("tangent", "total"):
                    np.testing.assert_allclose(J[f"state/u{i}", "c"].numpy().ravel(), dudc[:, i], rtol=1e-12,
                                               atol=1e-14, err_msg=f"{backend} {d}")
                if d in (True, "total"):
                    for j in range(n):
                        np.testing.assert_allclose(J[f"state/u{i}", f"forces/b{j}"].numpy().ravel(), dudb[:, i, j],
                                                   rtol=1e-12, atol=1e-14, err_msg=f"{backend} {d}")


@needs_cc
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_newton_step_pivots_where_at_risk(cache_dir, tmp_path, dtype):
    """A Newton whose Jacobian [[eps, 1], [1, 1 + 3 c u1^2]] has an unanchored pivot: the unrolled C
    step exchanges rows per point (eps 0, 1e-30, -1e-20: no static pivot would do), eps = 0 gives the
    closed form, and every point's residual, evaluated here in NumPy, is at round-off."""
    from backend_programs import newton_pivot
    from modelc.backends.module import emit_module, write_atomic
    from modelc.cache import import_file

    _, full = newton_pivot()
    path = tmp_path / f"newton_pivot_{str(dtype)[-2:]}.py"
    write_atomic(path, emit_module(full))
    mod = import_file(path, f"c_newton_pivot_{str(dtype)[-2:]}")
    assert "if (V & 2) v_state_u0[l] = mc_act[l] ?" in _c_function(mod.C_SOURCE, "newton_1_iterate")
    eps = torch.tensor([0.0, 1e-30, -1e-20, 1e-9, 0.5, 2.0, -0.25, 0.0, 3.0], dtype=torch.float64)
    g = torch.Generator().manual_seed(8)
    b = torch.randn(9, 3, generator=g, dtype=torch.float64)
    x = {"forces/eps": eps.to(dtype), "forces/b": b.to(dtype),
         "old_state/u0": torch.zeros(9, dtype=dtype), "old_state/u1": torch.zeros(9, dtype=dtype)}
    r = mod.Model(backend="c", dtype=dtype)(x)
    assert r.status.all_converged
    u0, u1 = r["state/u0"].double(), r["state/u1"].double()
    e, c = eps, 0.5
    R0 = e * u0 + u1 - b[:, 0]
    R1 = u0 + u1 + c * u1 ** 3 - b[:, 1]
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    scale = 1 + b[:, :2].abs().max() + (c * u1.abs() ** 3).max()
    assert float(torch.stack([R0, R1]).abs().max()) < tol * scale
    zero = eps == 0
    b0 = b[zero, 0]
    torch.testing.assert_close(u1[zero], b0, rtol=tol, atol=tol)
    torch.testing.assert_close(u0[zero], b[zero, 1] - b0 - c * b0 ** 3, rtol=tol, atol=tol * scale)


@needs_cc
@pytest.mark.parametrize("name", ["j2_linear_iso", "elastic"])
def test_nan_points_fail_and_public_call(library, name):
    mod = library[name]
    mc, mt = mod.Model(backend="c"), mod.Model(backend="torch")
    X = _inputs(mt, 20, seed=5)
    X[3, 0] = math.nan
    P, _ = mt._param_tensor({}, torch.Size([20]))
    Yc, Jc, STc = _poisoned_c(mc, X, P, True)
    Yt, Jt, STt = mt.evaluate(X, P, True)
    ok = torch.ones(20, dtype=torch.bool)
    ok[3] = False
    if mod.Model.IMPLICIT or not mod.Model.CONSTANT_JACOBIAN:
        # the kernel itself fails a point with a NaN input whole (as the public call does), and only it
        assert Yc[3].isnan().all() and Jc[3].isnan().all()
        assert not Yc[ok].isnan().any() and not Jc[ok].isnan().any()
    else:  # an affine model: the NaN propagates to what depends on it, as in PyTorch
        assert torch.equal(Yc.isnan(), Yt.isnan()) and torch.equal(Jc.isnan(), Jt.isnan())
    assert Yc[3].isnan().any()
    if mod.Model.IMPLICIT:  # a failed Newton: the whole point is NaN
        assert Yc[3].isnan().all() and Jc[3].isnan().all()
        assert STc[3, 0] == 0 and STt[3, 0] == 0
        assert torch.equal(STc[:, 0], STt[:, 0])
    assert _rel(Yc[ok], Yt[ok]) < 1e-10 and _rel(Jc[ok], Jt[ok]) < 1e-8
    # the public call, with per-point parameters (P row stride B) and a 2-d batch
    inputs = {n: X[:, slice(*mt.input_axis.span(n))].reshape(4, 5, -1).squeeze(-1)
              if mt.input_axis.type_of(n).size == 1 else X[:, slice(*mt.input_axis.span(n))].reshape(4, 5, -1)
              for n in mt.input_axis.variable_names}
    E = torch.linspace(150e3, 250e3, 20, dtype=torch.float64).reshape(4, 5)
    a, b = mt(inputs, derivatives=True, E=E), mc(inputs, derivatives=True, E=E)
    fin = ~a.outputs.tensor.isnan().any(-1)
    assert torch.equal(fin, ~b.outputs.tensor.isnan().any(-1))
    assert _rel(b.outputs.tensor[fin], a.outputs.tensor[fin]) < 1e-10
    assert _rel(b.jacobian.tensor[fin], a.jacobian.tensor[fin]) < 1e-8
    assert (b.status is None) == (a.status is None)


@needs_cc
def test_baked_parameters_on_the_c_backend(library, tmp_path):
    """A module compiled with ``constant_params`` (``--bake``) builds one C library per set of baked
    values, with those values compiled in: perzyna_iso with its exponent n baked (pow(y, n) becomes
    multiplications) agrees with the runtime-parameter module to 1e-12 (outputs, tangent, status),
    for the model's value and for a per-call override (another library: the results follow n); the
    bound fast path uses the baked library too. A per-point value of a baked parameter is refused and
    nothing is written."""
    from modelc import driver
    from modelc.backends.module import write_atomic
    from modelc.cache import import_file
    from modelc.errors import InputError
    from modelc.options import CompileOptions

    spec = driver.load_spec(LIBRARY)
    path = tmp_path / "perzyna_iso_baked.py"
    write_atomic(path, driver.compile_model(spec, "perzyna_iso", CompileOptions(constant_params=("n",))).source)
    baked = import_file(path, "c_backend_perzyna_baked")
    assert baked.Model.BAKED == ("n",) and "MC_P(" in baked.Model.c_source
    mb, mr = baked.Model(backend="c"), library["perzyna_iso"].Model(backend="c", specialize=False)
    B = 45
    X = _inputs(mr, B, seed=21)
    inputs = {n: X[:, slice(*mr.input_axis.span(n))].squeeze(-1) for n in mr.input_axis.variable_names}
    results = {}
    for n in (5.0, 3.0):
        a = mr(inputs, derivatives="tangent", n=n)
        b = mb(inputs, derivatives="tangent", n=n)
        assert bool(a.status.converged.all()) and torch.equal(a.status.iterations, b.status.iterations)
        assert bool((a.status.iterations >= 2).any())  # points flow
        assert _rel(b.outputs.tensor, a.outputs.tensor) <= 1e-12
        assert _rel(b.jacobian.tensor, a.jacobian.tensor) <= 1e-12
        results[n] = b.outputs.tensor
    assert _rel(results[3.0], results[5.0]) > 1e-6  # the second library has n = 3 compiled in
    assert len(mb._baked_libs) == 2 and all(lib.path.name.endswith("-baked.so") for lib in mb._baked_libs.values())
    bound = mb.bind(inputs, derivatives="tangent")
    assert bound.fast
    again = bound()
    assert _rel(again.outputs.tensor, mr(inputs, derivatives="tangent").outputs.tensor) <= 1e-12
    out = mb(inputs, derivatives="tangent")
    before = out.outputs.tensor.clone()
    with pytest.raises(InputError, match="parameter n is baked into the kernel and must be one shared value"):
        mb(inputs, derivatives="tangent", out=out, n=torch.linspace(3.0, 5.0, B, dtype=torch.float64))
    assert torch.equal(out.outputs.tensor, before)


@needs_cc
def test_bake_at_run_time(library):
    """``Model(..., bake=...)`` bakes parameters into the C library of any module, without
    recompiling it (the source reads every parameter through MC_P): perzyna_iso with n, and with
    every parameter (bake=True), agrees with the unbaked call to 1e-12; a name that is not a
    parameter is refused, and so is training a baked parameter."""
    from modelc.errors import InputError

    mod = library["perzyna_iso"]
    plain = mod.Model(backend="c", specialize=False)
    X = _inputs(plain, 33, seed=4)
    inputs = {n: X[:, slice(*plain.input_axis.span(n))].squeeze(-1) for n in plain.input_axis.variable_names}
    want = plain(inputs, derivatives="tangent")
    for bake, names in ((["n"], ("n",)), (True, tuple(plain.parameter_info))):
        m = mod.Model(backend="c", bake=bake)
        assert m.c_baked == names
        got = m(inputs, derivatives="tangent")
        assert _rel(got.outputs.tensor, want.outputs.tensor) <= 1e-12
        assert _rel(got.jacobian.tensor, want.jacobian.tensor) <= 1e-12
        assert [lib.path.name.endswith("-baked.so") for lib in m._baked_libs.values()] == [True]
    with pytest.raises(InputError, match="unknown parameter.*q"):
        mod.Model(backend="c", bake=["q"])
    with pytest.raises(InputError, match="baked into the C library"):
        mod.Model(backend="c", bake="n").trainable("n")


@needs_cc
def test_exponent_specialization(library, monkeypatch):
    """perzyna_iso's exponent n (the module's ``EXPONENTS``): with an integer value shared by every
    point, the C backend runs a library with n baked in (binary powering instead of exp and log),
    one per value; a non-integer, a per-point value or ``specialize=False`` run the general library.
    Every route agrees with the generated PyTorch code and with the general library to 1e-12
    (outputs and tangent), the bound fast path included; past ``MAX_SPECIALIZED`` libraries a new
    value runs the general one (still right); a non-boolean ``specialize`` is refused."""
    import modelc.runtime.model as rmodel
    from modelc.errors import InputError

    mod = library["perzyna_iso"]
    assert mod.Model.EXPONENTS == ("n",) and library["j2_voce_af"].Model.EXPONENTS == ()
    m, general, ref = mod.Model(backend="c"), mod.Model(backend="c", specialize=False), mod.Model(backend="torch")
    B = 40
    X = _inputs(m, B, seed=31)
    inputs = {k: X[:, slice(*m.input_axis.span(k))].squeeze(-1) for k in m.input_axis.variable_names}
    for n, libs in ((5.0, 1), (5.5, 1), (2.0, 2), (torch.full((B,), 2.0, dtype=torch.float64), 2)):
        got, gen, want = (x(inputs, derivatives="tangent", n=n) for x in (m, general, ref))
        assert bool(want.status.converged.all()) and bool((want.status.iterations >= 2).any())
        for a in (gen, want):
            assert _rel(got.outputs.tensor, a.outputs.tensor) <= 1e-12
            assert _rel(got.jacobian.tensor, a.jacobian.tensor) <= 1e-12
        assert len(m._baked_libs) == libs, n
        assert all(lib.path.name.endswith("-baked.so") for lib in m._baked_libs.values())
    assert not general._baked_libs
    bound = m.bind(inputs, derivatives="tangent")
    assert bound.fast
    assert torch.equal(bound().outputs.tensor, m(inputs, derivatives="tangent").outputs.tensor)
    with torch.inference_mode():  # inference tensors (no version counter) take the same route
        fresh = mod.Model(backend="c")
        assert torch.equal(fresh(inputs, derivatives="tangent").outputs.tensor, bound.result.outputs.tensor)
        assert len(fresh._baked_libs) == 1
    monkeypatch.setattr(rmodel, "MAX_SPECIALIZED", 2)
    got, want = m(inputs, derivatives="tangent", n=3.0), ref(inputs, derivatives="tangent", n=3.0)
    assert len(m._baked_libs) == 2 and _rel(got.jacobian.tensor, want.jacobian.tensor) <= 1e-12
    with pytest.raises(InputError, match="specialize must be True or False"):
        mod.Model(backend="c", specialize="yes")


def test_the_remembered_library_follows_the_model_parameters(library):
    """The C library chosen for the model's own shared parameter row is remembered between calls
    (``Model._c_library``), and forgotten when a value changes: ``set_parameters``, an in-place write
    into a parameter's buffer, a call's override. Each call agrees with the PyTorch code."""
    mod = library["perzyna_iso"]
    m, ref = mod.Model(backend="c"), mod.Model(backend="torch")
    X = _inputs(m, 24, seed=5)
    inputs = {k: X[:, slice(*m.input_axis.span(k))].squeeze(-1) for k in m.input_axis.variable_names}
    before = len(m._baked_libs)  # (the default n's library, built with the model)

    def check(n, libs, override=False):
        over = {"n": n} if override else {}
        got, want = m(inputs, derivatives="tangent", **over), ref(inputs, derivatives="tangent", n=n)
        assert _rel(got.outputs.tensor, want.outputs.tensor) <= 1e-12, n
        assert _rel(got.jacobian.tensor, want.jacobian.tensor) <= 1e-12, n
        assert len(m._baked_libs) == before + libs, n
        return m._c_lib_memo[3] if "_c_lib_memo" in m.__dict__ else None

    m.set_parameters(n=2.0)
    two = check(2.0, 1)
    assert two is m._baked_libs[(None,) * 5 + (2.0,)] and check(2.0, 1) is two  # remembered
    m.set_parameters(n=5.5)
    assert check(5.5, 1) is m._general_lib()  # a non-integer exponent: the general library
    m.params.n.fill_(3.0)  # in place: the row is rebuilt, the choice made again
    three = check(3.0, 2)
    assert three is not two and three is not m._general_lib()
    assert check(4.0, 3, override=True) is three  # an override runs its own library, leaves the memo


def test_cuda_and_errors_are_clear(library):
    from modelc.errors import InputError

    mod = library["elastic"]
    with pytest.raises(InputError, match="CPU only"):
        mod.Model(device="cuda", backend="c")
    with pytest.raises(InputError, match="backend must be"):
        mod.Model(backend="fortran")


# --------------------------------------------------------------------------------------------------
# hand-built programs: custom functions, pivoting
# --------------------------------------------------------------------------------------------------
def _scalar_program(name, n_in, exprs_of, body=()):
    ins = tuple(ir.Variable(f"forces/x{i}", Scalar) for i in range(n_in))
    syms = [v.symbols[0] for v in ins]
    exprs = exprs_of(*syms)
    outs = tuple(ir.Variable(f"state/y{k}", Scalar) for k in range(len(exprs)))
    results = {o.name: (e,) for o, e in zip(outs, exprs)}
    return ir.Program(name, ins, (), outs, tuple(body), results)


def _run_program(prog, X, dtype=torch.float64, lanes=None):
    lib = cbuild.load_library(c_source(prog), prog.name, dtype, lanes=lanes)
    Y = torch.full((X.shape[0], len(prog.outputs)), math.nan, dtype=dtype)
    X = X.to(dtype).contiguous()
    lib(_split(X, [v.type.size for v in prog.inputs]), torch.zeros(1, 1, dtype=dtype), Y)
    return Y


def test_every_function_has_a_c_spelling():
    from modelc.functions import FUNCTIONS

    for name, rule in FUNCTIONS.items():
        assert isinstance(rule.c, str) and rule.c, name
        text = rule.c.format(*[f"a{i}" for i in range(rule.nargs)])
        assert all(f"a{i}" in text for i in range(rule.nargs)), name


@needs_cc
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_custom_functions_match_numpy(cache_dir, dtype):
    """Every function's C spelling against NumPy, and its NaN semantics against PyTorch's. The values
    come in as per-point parameters: a NaN *input* fails the whole point in the kernel (see
    test_nan_points_fail_and_public_call), parameters reach the functions as they are."""
    from modelc.functions import FUNCTIONS
    from modelc.runtime.model import TORCH_HELPERS

    rules = list(FUNCTIONS.values())
    vals = np.array([0.0, -0.0, 1.5, -2.25, 0.3, -1e-3, 4.0, math.nan])
    g = np.random.default_rng(7)
    X = np.stack([np.concatenate([vals, g.normal(size=40)]) for _ in range(3)], axis=1)
    X[:, 1] = np.roll(X[:, 1], 3)
    X[:, 2] = np.roll(X[:, 2], 5)
    X[5, 1] = X[5, 0]  # a tie for max/min

    def exprs(a, b, c):
        args = (a, b, c)
        out = [r.cls(*args[:r.nargs]) for r in rules]
        out += [sp.Min(a, b), sp.Max(a, b, c), sp.Abs(a), sp.exp(a) + sp.sqrt(b * b) + a ** -3,
                sp.Piecewise((a, a > b), (b * 2, True)), sp.tanh(c) * sp.cos(a) ** 2]
        return out

    params = tuple(ir.Parameter(f"q{i}", Scalar) for i in range(3))
    prog = _scalar_program(f"fns_{str(dtype)[-2:]}", 1, lambda _: exprs(*(q.symbols[0] for q in params)))
    prog = dataclasses.replace(prog, parameters=params)
    lib = cbuild.load_library(c_source(prog), prog.name, dtype)
    Y = torch.full((X.shape[0], len(prog.outputs)), math.nan, dtype=dtype)
    lib([torch.zeros(X.shape[0], 1, dtype=dtype)], torch.from_numpy(X).to(dtype).contiguous(), Y)
    Y = Y.double().numpy()
    a, b, c = X.T
    with np.errstate(all="ignore"):
        ref = [r.numpy(*(a, b, c)[:r.nargs]) for r in rules]
        ref += [torch.minimum(torch.from_numpy(a), torch.from_numpy(b)).numpy(),
                np.maximum(np.maximum(a, b), c), np.abs(a), np.exp(a) + np.abs(b) + a ** -3.0,
                np.where(a > b, a, 2 * b), np.tanh(c) * np.cos(a) ** 2]
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    finite = ~np.isnan(X).any(axis=1)
    for k, r in enumerate(ref):  # NumPy references away from NaN
        r = np.broadcast_to(np.asarray(r, dtype=float), a.shape)
        np.testing.assert_allclose(Y[finite, k], r[finite], rtol=tol, atol=tol,
                                   err_msg=f"output {k} ({prog.results[f'state/y{k}'][0]})")
    # everywhere, NaN included: the PyTorch spelling (the backends' common NaN semantics)
    env = {"torch": torch, **TORCH_HELPERS, **{f"a{i}": torch.from_numpy(X[:, i]) for i in range(3)}}
    for k, r in enumerate(rules):
        want = eval(r.torch.format(*[f"a{i}" for i in range(r.nargs)]), env).numpy()
        np.testing.assert_allclose(Y[:, k], want, rtol=tol, atol=tol, equal_nan=True, err_msg=r.name)


@needs_cc
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n", [4, 10])
@pytest.mark.parametrize("lanes", [1, 8])  # the scalar build, and blocks of 8 points
def test_linear_solve_with_zero_diagonal_needs_pivoting(cache_dir, dtype, n, lanes):
    """An n x n system with a zero structural diagonal (a saddle point) and a tiny (1e-13) pivot that
    only row exchanges solve accurately; two right-hand sides share the factorisation. 50 points: the
    last block of 8 is partial."""
    ins = tuple(ir.Variable(f"forces/a{i}", Scalar) for i in range(n * n + 2 * n))
    s = [v.symbols[0] for v in ins]
    A = [[s[i * n + j] for j in range(n)] for i in range(n)]
    A[0][0] = sp.S.Zero
    A[2][2] = sp.S.Zero
    B = [[s[n * n + 2 * i], s[n * n + 2 * i + 1]] for i in range(n)]
    tg = [[sp.Symbol(f"x{i}_{c}", real=True) for c in range(2)] for i in range(n)]
    outs = tuple(ir.Variable(f"state/x{i}_{c}", Scalar) for i in range(n) for c in range(2))
    body = (ir.LinearSolve(tuple(map(tuple, A)), tuple(map(tuple, B)), tuple(map(tuple, tg))),)
    prog = ir.Program(f"pivot_{n}_{str(dtype)[-2:]}_{lanes}", ins, (), outs, body,
                      {f"state/x{i}_{c}": (tg[i][c],) for i in range(n) for c in range(2)})
    g = np.random.default_rng(3)
    Xn = g.normal(size=(50, len(ins)))
    Xn[:, 1 * n + 1] = 1e-13 * g.normal(size=50)  # tiny A[1][1]
    X = torch.from_numpy(Xn)
    Y = _run_program(prog, X, dtype, lanes).double().numpy()
    Am = Xn[:, : n * n].reshape(-1, n, n).copy()
    Am[:, 0, 0] = 0
    Am[:, 2, 2] = 0
    Bm = Xn[:, n * n:].reshape(-1, n, 2)
    ref = np.linalg.solve(Am, Bm).reshape(-1, 2 * n)
    cond = np.linalg.cond(Am)
    good = cond < 1e6
    tol = 1e-10 if dtype == torch.float64 else 1e-3
    np.testing.assert_allclose(Y[good], ref[good], rtol=tol, atol=tol * np.abs(ref[good]).max())


# --------------------------------------------------------------------------------------------------
# build cache and automatic choice
# --------------------------------------------------------------------------------------------------


def test_auto_falls_back_to_torch_without_a_compiler(library, monkeypatch, tmp_path):
    from modelc.errors import ModelcError
    from modelc.runtime import model as runtime_model

    mod = library["elastic"]
    for env in ({"CC": str(tmp_path / "no-such-cc")}, {"PATH": str(tmp_path)}):
        monkeypatch.delenv("CC", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(runtime_model, "_WARNED", set())
        cbuild._LOADED.clear()
        with pytest.warns(RuntimeWarning, match="C backend is unavailable"):
            m = mod.Model()
        assert m.backend == "torch"
        with pytest.raises(ModelcError, match="C compiler"):
            mod.Model(backend="c")
        monkeypatch.undo()
    if HAVE_CC:
        assert mod.Model().backend == "c"
        assert mod.Model(dtype=torch.float32).backend == "c"


@needs_cc
def test_construction_builds_the_library_its_values_call(library, monkeypatch):
    """A model on the C backend builds, when it is made, the library a call with its own parameter
    values runs, and only that one: perzyna_iso with n = 5 the specialized library (the general one
    is built when a call needs it), with n = 5.5 the general one. A library that does not build
    sends an automatic backend to PyTorch with a warning, and is an error for backend='c'."""
    import modelc.runtime.model as rmodel
    from modelc.errors import ModelcError

    mod = library["perzyna_iso"]
    m = mod.Model(backend="c")
    assert m._clib is None and len(m._baked_libs) == 1
    m5 = mod.Model(backend="c", n=5.5)
    assert m5._clib is not None and not m5._baked_libs
    X = _inputs(m, 12, seed=2)
    inputs = {k: X[:, slice(*m.input_axis.span(k))].squeeze(-1) for k in m.input_axis.variable_names}
    a, b = m(inputs, derivatives="tangent", n=5.5), m5(inputs, derivatives="tangent")
    assert m._clib is not None and torch.equal(a.jacobian.tensor, b.jacobian.tensor)

    def fail(*args, **kwargs):
        raise cbuild.CBuildError("the C compiler failed (simulated)")

    monkeypatch.setattr(cbuild, "load_library", fail)
    monkeypatch.setattr(rmodel, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="C backend is unavailable .*simulated"):
        auto = mod.Model()
    assert auto.backend == "torch" and bool(auto(inputs).status.converged.all())
    with pytest.raises(ModelcError, match="simulated"):
        mod.Model(backend="c")


@needs_cc
def test_a_part_that_does_not_build_at_the_call(library, monkeypatch, tmp_path):
    """The jacobian/total part of a library is built on the first call that asks for it: when that
    build fails, an automatic backend falls back to PyTorch with a warning and answers that call
    (the PyTorch backend's numbers), backend='c' raises; the value and tangent part still served
    the calls before."""
    import modelc.runtime.model as rmodel
    from modelc.errors import ModelcError

    monkeypatch.setenv("MODELC_CACHE_DIR", str(tmp_path))  # an empty cache: every part is built here
    cbuild._LOADED.clear()
    real = cbuild.build

    def build(source, path, flags):
        if "-DMC_PART=1" in flags:
            raise cbuild.CBuildError("C backend: compiling part 1 failed (simulated)")
        return real(source, path, flags)

    monkeypatch.setattr(cbuild, "build", build)
    monkeypatch.setattr(rmodel, "_WARNED", set())
    mod = library["j2_linear_iso"]
    auto, strict = mod.Model(), mod.Model(backend="c")
    assert auto.backend == "c" and strict.backend == "c"
    X = _inputs(auto, 9, seed=4)
    inputs = {k: X[:, slice(*auto.input_axis.span(k))].squeeze(-1) for k in auto.input_axis.variable_names}
    assert auto(inputs, derivatives="tangent").jacobian is not None  # part 0: built
    with pytest.warns(RuntimeWarning, match="C backend is unavailable .*part 1 failed"):
        full = auto(inputs, derivatives=True)
    assert auto.backend == "torch"
    want = mod.Model(backend="torch")(inputs, derivatives=True)
    assert torch.equal(full.jacobian.tensor, want.jacobian.tensor)
    with pytest.raises(ModelcError, match="part 1 failed"):
        strict(inputs, derivatives=True)
    cbuild._LOADED.clear()


@needs_cc
def test_threads_give_identical_results(library):
    """The OpenMP loop over blocks (2 and 3 threads, enough points to go parallel) computes exactly
    the serial result: a point's block never depends on the thread count."""
    mod = library["j2_voce_af"]  # a Newton solve per point: status written too
    mc = mod.Model(backend="c")
    X = _inputs(mc, 1000, seed=9)
    P, _ = mc._param_tensor({}, torch.Size([1000]))
    outs = [_poisoned_c(mc, X, P, True, threads=threads) for threads in (1, 2, 3)]
    for other in outs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(outs[0], other))
    assert not outs[1][0].isnan().any()


def test_derivative_read_only_by_its_store_is_computed_in_the_store():
    """The C block function computes a derivative that nothing but its store reads in that store
    (one line, the same code for the compiler): no ``const real dN`` is left whose only other use is
    one ``o_j`` store. Named model variables keep their declaration."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "generated" / "j2_voce_af.py").read_text()
    c = text[text.index("C_SOURCE = "):text.index("class Model(")]
    block = c[c.index("void block_eval("):]
    block = block[:block.index("\n}\n")]
    lines = block.splitlines()
    assert any("o_j[" in ln and "? (" in ln for ln in lines)  # entries computed where stored
    for m in re.finditer(r"const real (d\d+) = ", block):
        name = m.group(1)
        users = [ln for ln in lines if re.search(rf"\b{name}\b", ln) and f"const real {name} =" not in ln]
        assert not (len(users) == 1 and "o_j[" in users[0]), f"{name} is declared for one store"
    assert "const real state_S_0 = " in block  # a named output keeps its line


def test_pivot_guard_is_printed_as_comparisons():
    """The unrolled solve's guard |p| >= c Max(|o1|, |o2|) becomes |p| >= c |o1| & |p| >= c |o2| (GCC
    vectorizes comparisons, not the NaN-propagating max chain): the same truth value at random points,
    and other assignments pass through unchanged."""
    from modelc.backends.c_backend import _guard_without_max

    from modelc.backends.c_backend import GUARD_CHUNK

    p = sp.Symbol("p", real=True)
    t = sp.Symbol("ok")
    g = np.random.default_rng(4)
    for n in (3, GUARD_CHUNK, 2 * GUARD_CHUNK + 1):  # one assignment, and a chain of them
        others = sp.symbols(f"o0:{n}", real=True)
        guard = ir.Assign(t, sp.GreaterThan(sp.Abs(p), sp.Float(1e-12) * sp.Max(*(sp.Abs(o) for o in others))))
        out = _guard_without_max(guard)
        assert len(out) == -(-n // GUARD_CHUNK) and out[-1].target == t
        assert all(isinstance(a.value, sp.And) and not a.value.has(sp.Max) for a in out)
        for _ in range(100):
            vals = dict(zip((p,) + others, g.normal(size=n + 1) * 10.0 ** g.integers(-14, 3, size=n + 1)))
            env = dict(vals)
            for a in out:  # evaluated in order, as the C lines run
                env[a.target] = bool(a.value.subs(env))
            assert bool(guard.value.subs(vals)) == env[t]
    a, b = sp.symbols("a b", real=True)
    other = ir.Assign(sp.Symbol("x", real=True), sp.Max(a, b) * 2)
    assert _guard_without_max(other) == [other]


@needs_cc
def test_lanes_the_unrolled_newton_fails_are_solved_again(cache_dir, tmp_path, monkeypatch):
    """With the pivot guard made to trip at every step (expand_solve.GUARD = 1e30 while the module is
    emitted), the unrolled Newton fails every lane; each is solved again from the guess by
    newton_1_lu (the LU with partial pivoting): every point converges, to the generated PyTorch
    code's values, with the fallback's iteration count. (gtn: 4 of 20,000 random points failed the
    unrolled step, as they fail the Triton kernel's, and converge in C through the fallback.)"""
    from backend_programs import newton_system
    from modelc.backends.module import emit_module, write_atomic
    from modelc.cache import import_file
    from modelc.passes import expand_solve

    _, full = newton_system(5, "newton5c")
    monkeypatch.setattr(expand_solve, "GUARD", 1e30)
    path = tmp_path / "newton5c_guard.py"
    write_atomic(path, emit_module(full))
    mod = import_file(path, "c_newton5c_guard")
    assert "1e+30" in _c_function(mod.C_SOURCE, "newton_1_iterate") or "1.0e+30" in _c_function(mod.C_SOURCE, "newton_1_iterate")
    g = torch.Generator().manual_seed(6)
    x = {f"forces/b{i}": torch.randn(21, generator=g, dtype=torch.float64) * 3 for i in range(5)}
    x.update({f"old_state/u{i}": torch.zeros(21, dtype=torch.float64) for i in range(5)})
    ref = mod.Model(backend="torch")(x, derivatives=True)
    out = mod.Model(backend="c")(x, derivatives=True)
    assert out.status.all_converged and bool((out.status.iterations >= 2).all())
    assert torch.equal(out.status.iterations, ref.status.iterations)
    assert _rel(out.outputs.tensor, ref.outputs.tensor) < 1e-13
    assert _rel(out.jacobian.tensor, ref.jacobian.tensor) < 1e-12


def test_wide_vectors_are_asked_for_by_systems_and_large_blocks():
    """``#define MC_WIDE 2`` (512-bit vectors on AVX-512 in both dtypes, runtime/cbuild.py) in
    exactly the library sources with a Newton over two or more unknowns (the sizes README's table
    states), ``1`` (float64 only) in those with a lane loop over ``WIDE_LOOP`` lines, counted here
    from the source itself; the others say 0."""
    import importlib
    import re

    from modelc.backends import c_backend

    systems = {"j2_perfect_coupled", "j2_linear_iso_coupled", "j2_voce_af_coupled", "perzyna_iso_coupled",
               "chaboche2_coupled", "gtn"}
    names = sorted(systems | {"elastic", "j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso", "norton"})
    for name in names:
        src = importlib.import_module(f"modelc.generated.{name}").C_SOURCE
        widest, cur = 0, None
        for line in src.splitlines():  # lines between a lane loop's opening and its closing brace
            s = line.strip()
            if s.endswith("MC_LANES {"):
                cur, depth = 0, len(line) - len(line.lstrip())
            elif cur is not None and s == "}" and len(line) - len(line.lstrip()) == depth:
                widest, cur = max(widest, cur), None
            elif cur is not None:
                cur += 1
        want = 2 if name in systems else int(widest > c_backend.WIDE_LOOP)
        assert re.search(rf"^#define MC_WIDE {want}$", src, re.M), (name, widest)
    assert "#define MC_WIDE 1" in importlib.import_module("modelc.generated.j2_voce_af").C_SOURCE
    assert "#define MC_WIDE 0" in importlib.import_module("modelc.generated.norton").C_SOURCE


@needs_cc
def test_only_a_newton_guess_takes_the_approximate_power():
    """perzyna_iso's first guess (a^-2 + b^-2)^(-1/2), b^-2 = (f / (c dt))^(-2/n), is the one place
    its C source computes mc_gpow (a power to ~1e-7, c_printer.GuessPow); every other power is
    mc_pow. The solve starts elsewhere than the PyTorch backend's (exact) guess and ends where it
    does: on fresh random steps the two agree to 1e-12, every point converged."""
    from modelc.generated import perzyna_iso as M

    gpow = [line for line in M.C_SOURCE.splitlines() if "mc_gpow(" in line]
    assert len(gpow) == 1 and "_solve_guess_" in gpow[0].split("=")[0], gpow
    assert "mc_pow(" in M.C_SOURCE
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ()).item()))
    n = 200
    scale = torch.tensor([1e-5, 1e-3, 1e-2, 3e-2])[torch.randint(0, 4, (n,), generator=g)][:, None]
    ref_model = M.Model(backend="torch")
    x = {name: torch.zeros((n, *ref_model.input_axis.type_of(name).base_shape), dtype=torch.float64)
         for name in ref_model.input_axis.variable_names}
    x["forces/E"] = torch.randn(n, 6, generator=g, dtype=torch.float64) * scale
    x["forces/t"] = torch.rand(n, generator=g, dtype=torch.float64) * 10 + 1e-3
    ref = ref_model(x, derivatives="tangent")
    out = M.Model(backend="c")(x, derivatives="tangent")
    assert ref.status.all_converged and out.status.all_converged
    assert _rel(out.outputs.tensor, ref.outputs.tensor) < 1e-12
    assert _rel(out.jacobian.tensor, ref.jacobian.tensor) < 1e-12


@pytest.mark.parametrize("name", ["j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso", "norton"])
def test_a_symmetric_tangent_still_goes_out_whole(name):
    """Since passes.blocks, a radial return's tangent has equal entries ((3, 4) and (4, 3) are one
    expression); each gets a staging slot of its own, so the block's 36 entries are stored with one
    mc_store (streaming stores at 1e5 points), not through the scatter table point by point (which
    made perzyna_iso's tangent call 2x slower). The values are checked against PyTorch elsewhere."""
    import importlib
    import re

    src = importlib.import_module(f"modelc.generated.{name}").C_SOURCE
    assert "if (V == 2) mc_store(a->j + i0 * a->js, a->js, o_j, 36, nl, a->flags & MC_STREAM);" in src
    assert "if (V == 2) {" not in src
    staged = {int(k) for k in re.findall(r"if \(V & 2\) o_j\[(\d+) \* MC_W \+ l\]", src)}
    assert staged == set(range(36))


@pytest.mark.parametrize("name", ["j2_voce_af", "perzyna_iso", "elastic"])
def test_a_full_jacobian_goes_out_whole_where_it_is_mostly_nonzero(name):
    """d outputs / d inputs (V == 4) and by the parameters too (V == 8): staged in the caller's layout,
    structural zeros included, and written with one mc_store (streaming stores at large batches)
    instead of a table scattered point by point, where at least half the entries are nonzero and the
    block has at most DENSE_MAX entries (j2_voce_af: 382 of 420). (Not gtn here: on random points its two
    backends' Newton iterates can differ at the solver's edge, 2e-7 of the scale on one point.) elastic's 12 of 36 keep the table. Checked against the PyTorch backend
    on fresh random points in a batch that streams and ends in a partial block."""
    import importlib

    import torch

    from modelc.backends.c_backend import DENSE_FRACTION

    M = importlib.import_module(f"modelc.generated.{name}")
    src = M.C_SOURCE
    dense = name != "elastic"
    assert ("if (V == 4) mc_store(a->j + i0 * a->js, a->js, o_j," in src) == dense
    assert ("if (V == 4 || V == 8) {" in src) == (not dense)
    rng = np.random.default_rng()
    n = 5003
    c, t = M.Model(dtype=torch.float64, backend="c"), M.Model(dtype=torch.float64, backend="torch")
    inputs = {}
    for k in c.input_axis.variable_names:
        shape = c.input_axis.type_of(k).base_shape
        inputs[k] = torch.tensor(rng.normal(size=(n, *shape)) * rng.choice([1e-4, 1e-3, 1e-2], size=(n,) + (1,) * len(shape)))
    if "forces/t" in inputs:
        inputs["forces/t"] = torch.ones(n, dtype=torch.float64)
        inputs["old_forces/t"] = torch.zeros(n, dtype=torch.float64)
    for derivatives in (True, "total"):
        a, b = c(inputs, derivatives=derivatives).jacobian.tensor, t(inputs, derivatives=derivatives).jacobian.tensor
        # a failed point is NaN in every entry (the layout marks whole rows)
        for x in (a, b):
            nan = torch.isnan(x).flatten(1)
            assert bool((nan.all(dim=1) | ~nan.any(dim=1)).all())
        both = ~torch.isnan(a).flatten(1).any(dim=1) & ~torch.isnan(b).flatten(1).any(dim=1)
        assert float(both.double().mean()) > 0.5
        a, b = a[both], b[both]
        if derivatives is True:  # (the group is dense when the Jacobian and the total both are)
            nonzero = float((b != 0).any(dim=0).double().mean())
            assert (nonzero >= DENSE_FRACTION) == dense, nonzero
        # (a misplaced entry is off by the block's scale)
        scale = float(b.nan_to_num().abs().max())
        assert float((a - b).nan_to_num().abs().max()) <= 1e-9 * scale, derivatives
