"""The C backend's blocks of points (SIMD across points): the scalar build (``MC_W=1``, libm) against
the vectorized build (8 lanes, the template's inline exp/log/pow), on the library models and on the
vector math functions themselves, at 1e-12 relative in float64 on fresh random inputs; partial
blocks; results that do not depend on the number of threads; and the same bits from the builds for
other x86-64 levels (AVX2 only, baseline SSE2) as from this machine's."""
from __future__ import annotations

import math
import platform
from pathlib import Path
import zlib

import numpy as np
import pytest
import sympy as sp
import torch

from modelc.backends.c_backend import c_source
from modelc.runtime import cbuild

from rt_helpers import fn_program, skip_module_without_cc  # noqa: E402

skip_module_without_cc()

from test_c_backend import _inputs, _poisoned_c, cache_dir, library  # noqa: F401,E402


def _lib(mod, dtype, lanes):
    return cbuild.load_library(mod.Model.c_source, mod.Model.NAME, dtype, lanes=lanes)


@pytest.mark.parametrize("name", ["j2_linear_iso", "j2_voce_af", "perzyna_iso", "elastic"])
def test_scalar_and_simd_builds_agree(library, name):
    """1e-12 relative (to each output's, each Jacobian row's largest magnitude) in float64, same
    iterations and status, with blocks of 8 and of 16 points (the default of a Newton model with
    AVX-512); 101 points: full blocks and a partial one."""
    mod = library[name]
    m = mod.Model(backend="c")
    B = 101
    X = _inputs(m, B, seed=zlib.crc32(name.encode()) % 977 + 1)
    P, _ = m._param_tensor({}, torch.Size([B]))
    for deriv, lanes in ((False, 8), (True, 8), (False, 16), (True, 16)):
        Ys, Js, STs = _poisoned_c(m, X, P, deriv, lib=_lib(mod, torch.float64, 1))
        Yv, Jv, STv = _poisoned_c(m, X, P, deriv, lib=_lib(mod, torch.float64, lanes))
        assert not Yv.isnan().any()
        scale = Ys.abs().amax(0).clamp(min=1e-300)
        assert float(((Yv - Ys).abs() / scale).max()) <= 1e-12
        if deriv:  # relative to each Jacobian row's largest entry (some entries are round-off)
            jscale = Js.abs().amax(dim=(0, 2)).clamp(min=1e-300)[None, :, None]
            assert float(((Jv - Js).abs() / jscale).max()) <= 1e-12
        if STs is not None:
            assert torch.equal(STs[:, :2], STv[:, :2])


@pytest.mark.parametrize("name", ["j2_voce_af", "perzyna_iso"])
def test_tiled_loads_and_stores_match_the_scalar_build(library, name):
    """Inputs are staged and outputs written as 4 x 4 tiles on full blocks (mc_load, mc_store): the
    tangent variant on points with non-zero old state, inputs read as strided views of a wider
    tensor with a partial last block, per-point and shared parameters, agrees with the scalar build
    (entry by entry) to 1e-12, with every output entry written (poisoned buffers)."""
    mod = library[name]
    m = mod.Model(backend="c")
    B = 37  # 4 full blocks and 5 points
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) % 1000)
    sizes = [m.input_axis.type_of(n).size for n in m.input_axis.variable_names]
    wide = torch.randn(B, sum(sizes) + 3, generator=g, dtype=torch.float64) * 1e-3
    views, a = [], 2
    for n, k in zip(m.input_axis.variable_names, sizes):
        v = wide[:, a:a + k]
        if n == "forces/t":
            v.fill_(1.0)
        elif n in ("old_forces/t", "old_state/internal/gamma_rate"):
            v.zero_()
        elif n == "old_state/internal/ep":
            v.abs_()
        views.append(v)
        a += k
    rows, cols = (ax.size for ax in m.tangent_axes)
    for per_point in (False, True):
        P, _ = m._param_tensor({}, torch.Size([B if per_point else 1]))
        if per_point:
            P = P.expand(B, -1) * (1 + 0.1 * torch.rand(B, 1, generator=g, dtype=torch.float64))
        out = []
        for lanes in (1, 8):
            Y = torch.full((B, m.output_axis.size), math.nan, dtype=torch.float64)
            J = torch.full((B, rows, cols), math.nan, dtype=torch.float64)
            st = (torch.zeros(B, dtype=torch.bool), torch.full((B,), -7, dtype=torch.int32),
                  torch.full((B,), math.nan, dtype=torch.float64))
            _lib(mod, torch.float64, lanes)(views, P.contiguous(), Y, J, st, 1, variant="tangent")
            out.append((Y, J, st))
        (Ys, Js, ss), (Yv, Jv, sv) = out
        assert bool(ss[0].all()) and bool(sv[0].all()) and torch.equal(ss[1], sv[1])
        assert bool((ss[1] >= 1).any())  # some points flow
        assert not Yv.isnan().any() and not Jv.isnan().any()
        assert float(((Yv - Ys).abs() / Ys.abs().amax(0).clamp(min=1e-300)).max()) <= 1e-12
        jscale = Js.abs().amax(dim=(0, 2)).clamp(min=1e-300)[None, :, None]
        assert float(((Jv - Js).abs() / jscale).max()) <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("nout", range(1, 10))
def test_tiles_move_every_row_and_column_exactly(cache_dir, monkeypatch, nout, stream, dtype):
    """mc_load and mc_store (4 x 4 tiles, then 2 x 4 tiles for two columns left, then entry by entry;
    AVX2 registers in double, SSE2 in float) on a program that only moves numbers: an SR2 input read
    as a strided view (6 = 4 + 2 columns) and ``nout`` outputs that are its components permuted and
    negated (1-9 columns: every remainder), 37 points (4 blocks of 8 and a partial one), regular and
    streaming stores. The result must be the permutation exactly, as the scalar build gives it too."""
    from modelc import ir
    from modelc.runtime.types import SR2, Scalar

    if stream:  # every call streams its outputs (the threshold a call must move more than: 0 bytes)
        monkeypatch.setattr(cbuild, "stream_bytes", lambda: 0)
    E = ir.Variable("forces/E", SR2)
    e = E.symbols
    outs = tuple(ir.Variable(f"state/o{k}", Scalar) for k in range(nout))
    perm = [(5 * k + 1) % 6 for k in range(nout)]
    exprs = {o.name: ((-1) ** k * e[perm[k]],) for k, o in enumerate(outs)}
    prog = ir.Program(f"tiles{nout}", (E,), (), outs, (), exprs)
    B = 37
    wide = torch.randn(B, 9, generator=torch.Generator().manual_seed(nout), dtype=dtype)
    x = wide[:, 2:8]  # rows 9 apart, components contiguous
    want = torch.stack([(-1) ** k * x[:, perm[k]] for k in range(nout)], dim=1)
    for lanes in (1, 8):
        lib = cbuild.load_library(c_source(prog), prog.name, dtype, lanes=lanes)
        Y = torch.full((B, nout), math.nan, dtype=dtype)
        lib([x], torch.zeros(1, 0, dtype=dtype), Y)
        assert torch.equal(Y, want), (lanes, (Y - want).abs().max())


def _run(prog, x, y, lanes, dtype=torch.float64):
    lib = cbuild.load_library(c_source(prog), prog.name, dtype, lanes=lanes)
    Y = torch.full((x.shape[0], len(prog.outputs)), math.nan, dtype=dtype)
    P = torch.stack([x, y], dim=1).to(dtype).contiguous()
    lib([torch.zeros(x.shape[0], 1, dtype=dtype)], P, Y)
    return Y


def test_vector_exp_log_pow_match_libm(cache_dir):
    """The inline exp, log and pow of the vectorized build against libm (the scalar build) and numpy:
    within 2 ulp (exp, log) and (2 + 2|y ln x|) ulp (pow) over their whole range, and the same special
    values (0, inf, NaN, subnormals, negative bases)."""
    g = np.random.default_rng(11)
    n = 4000
    xe = np.concatenate([g.uniform(-745, 709.7, n), g.uniform(-1, 1, n), [0.0, -0.0, 709.78, -744.4, -746.0,
                        710.0, math.inf, -math.inf, math.nan, 1e-300, -1e-300]])
    xl = np.concatenate([10.0 ** g.uniform(-320, 308, n), g.uniform(0.5, 2.0, n),
                         [0.0, -0.0, 1.0, 5e-324, 2.2250738585072014e-308, math.inf, -1.0, math.nan, 1e308]])
    m = min(len(xe), len(xl))
    px = np.concatenate([g.uniform(0, 10, n), [0.0, 0.0, 1.0, -2.0, -2.0, -2.0, math.nan, 2.0, math.inf, 0.5]])
    py = np.concatenate([g.uniform(-30, 30, n), [2.5, -1.5, math.nan, 3.0, 2.0, 0.5, 0.0, math.nan, -1.0, 1e3]])
    k = min(len(px), len(py), m)
    prog = fn_program("vecmath", lambda a, b: [sp.exp(a), sp.log(b), sp.Pow(a, b, evaluate=False)])
    cols = [torch.tensor(xe[:m]), torch.tensor(xl[:m])]
    vec = _run(prog, *cols, lanes=8).numpy()
    sca = _run(prog, *cols, lanes=1).numpy()
    with np.errstate(all="ignore"):
        ref_exp, ref_log = np.exp(xe[:m]), np.log(xl[:m])
    for got, want in ((vec[:, 0], ref_exp), (vec[:, 1], ref_log), (sca[:, 0], ref_exp), (sca[:, 1], ref_log)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        fin = np.isfinite(want) & (want != 0)
        np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
        ulp = np.abs(got[fin] - want[fin]) / np.spacing(np.abs(want[fin]))
        assert ulp.max() <= 2.0, ulp.max()
    powp = fn_program("vecpow", lambda a, b: [sp.Pow(a, b, evaluate=False)])
    cols = [torch.tensor(px[:k]), torch.tensor(py[:k])]
    vec, sca = _run(powp, *cols, lanes=8).numpy()[:, 0], _run(powp, *cols, lanes=1).numpy()[:, 0]
    with np.errstate(all="ignore"):
        want = np.power(px[:k], py[:k])
    np.testing.assert_array_equal(np.isnan(vec), np.isnan(want))
    fin = np.isfinite(want) & (want != 0)
    np.testing.assert_array_equal(vec[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    with np.errstate(all="ignore"):
        bound = np.nan_to_num(2.0 + 2.0 * np.abs(py[:k] * np.log(np.abs(px[:k]))), nan=2.0)
    ulp = np.abs(vec[fin] - want[fin]) / np.spacing(np.abs(want[fin]))
    assert (ulp <= bound[fin]).all(), (ulp / bound[fin]).max()
    assert float(np.max(np.abs(vec[fin] - sca[fin]) / np.abs(sca[fin]))) <= 1e-12


def test_guess_pow_is_pow_to_a_tenth_of_a_micro(cache_dir):
    """mc_gpow (the non-integer powers of a Newton solve's first guess, c_printer.GuessPow) against
    NumPy's pow on fresh random points: within 1e-7 |y| + 1e-8 relative over bases from 1e-250 to
    1e250, mc_pow's special values (0, inf, NaN, 1, negative bases, y = 0), the same bits in the
    scalar and vector builds (so both start a solve from the same guess)."""
    from modelc.backends.c_printer import GuessPow

    g = np.random.default_rng()
    n = 4000
    px = np.concatenate([10.0 ** g.uniform(-250, 250, n), g.uniform(0, 10, n), g.uniform(-3, 3, 40).round(),
                         [0.0, 0.0, 1.0, -2.0, -2.0, -2.0, math.nan, 2.0, math.inf, 0.5, math.inf, 2.0, 5e-320]])
    py = np.concatenate([g.uniform(-1.2, 1.2, n), g.uniform(-30, 30, n), g.uniform(-4, 4, 40).round(),
                         [2.5, -1.5, math.nan, 3.0, 2.0, 0.5, 0.0, math.nan, -1.0, 1e3, -2.5, 1e4, 0.5]])
    prog = fn_program("guesspow", lambda a, b: [GuessPow(a, b), sp.Pow(a, b, evaluate=False)])
    cols = [torch.tensor(px), torch.tensor(py)]
    vec = _run(prog, *cols, lanes=8).numpy()
    sca = _run(prog, *cols, lanes=1).numpy()
    assert "mc_gpow(" in c_source(prog)
    np.testing.assert_array_equal(vec[:, 0], sca[:, 0])
    got, exact = vec[:, 0], vec[:, 1]
    with np.errstate(all="ignore"):
        want = np.power(px, py)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    special = ~np.isfinite(want) | (want == 0) | (np.abs(want) < 4.450147717014403e-308)
    np.testing.assert_array_equal(got[special & ~np.isnan(want) & (np.abs(want) >= 4.450147717014403e-308)],
                                  exact[special & ~np.isnan(want) & (np.abs(want) >= 4.450147717014403e-308)])
    fin = ~special & ~np.isnan(want)
    rel = np.abs(got[fin] - want[fin]) / np.abs(want[fin])
    bad = ~(rel <= 1e-7 * np.nan_to_num(np.abs(py[fin])) + 1e-8)  # (1^NaN = 1)
    assert not bad.any(), (px[fin][bad][:5], py[fin][bad][:5], got[fin][bad][:5], want[fin][bad][:5])
    assert 1e-12 < rel.max()  # (an approximation: not the exact pow)


def test_vector_sinh_cosh_match_libm(cache_dir):
    """mc_sinh and mc_cosh of the vectorized build (from the vector exp: libm's keep a lane loop
    scalar) against numpy: within 16 ulp over their whole range (both branches of sinh, the
    overflow edge of cosh at 710.47), the special values exactly (signed zeros, infinities, NaN),
    and the scalar build (libm) within 1e-12."""
    g = np.random.default_rng(12)
    x = np.concatenate([g.uniform(-710.4, 710.4, 3000), g.uniform(-0.6, 0.6, 3000), 10.0 ** g.uniform(-300, 0, 500),
                        [0.0, -0.0, 0.5, -0.5, np.nextafter(0.5, 0), 710.0, -710.47, 711.0, -711.0, 1e-310,
                         math.inf, -math.inf, math.nan]])
    prog = fn_program("vechyp", lambda a, b: [sp.sinh(a), sp.cosh(b)])
    cols = [torch.tensor(x), torch.tensor(x)]
    vec = _run(prog, *cols, lanes=8).numpy()
    sca = _run(prog, *cols, lanes=1).numpy()
    assert "mc_sinh(" in c_source(prog) and "mc_cosh(" in c_source(prog)
    with np.errstate(all="ignore"):
        refs = (np.sinh(x), np.cosh(x))
    for k, want in enumerate(refs):
        got = vec[:, k]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        fin = np.isfinite(want) & (want != 0)
        np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
        np.testing.assert_array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
        ulp = np.abs(got[fin] - want[fin]) / np.spacing(np.abs(want[fin]))
        assert ulp.max() <= 16.0, (k, ulp.max())
        both = fin & np.isfinite(sca[:, k])
        assert float(np.max(np.abs(got[both] - sca[both, k]) / np.abs(sca[both, k]))) <= 1e-12


@pytest.mark.parametrize("fn", ["expm1", "log1p", "tanh", "asinh", "acosh", "atanh"])
def test_vector_expm1_log1p_and_inverse_hyperbolics_match_libm(cache_dir, fn):
    """mc_expm1, mc_log1p, mc_tanh, mc_asinh, mc_acosh and mc_atanh of the vectorized build (from the
    vector exp and log: libm's keep a lane loop scalar) against numpy: within 4 ulp over their
    domains (the small arguments where a naive exp(x) - 1 or log(1 + x) cancels, both sides of
    every branch point: |x| = 1/2, 20, 1e8), the special values exactly (signed zeros, infinities,
    NaN, the domain's ends: log1p(-1), acosh(1), atanh(+-1), NaN outside), and the scalar build
    (libm) within 1e-12. Also the spec spellings print as the header's functions."""
    from modelc import functions as F

    g = np.random.default_rng(13)
    small = 10.0 ** g.uniform(-300, 0, 800) * g.choice([-1.0, 1.0], 800)
    edges = [0.0, -0.0, 0.5, -0.5, np.nextafter(0.5, 0), np.nextafter(-0.5, 0), 20.0, -20.0,
             np.nextafter(20.0, 0), 1e8, np.nextafter(1e8, 0), -1e8, 1.0, -1.0, np.nextafter(1.0, 0),
             np.nextafter(-1.0, 0), 1e-310, math.inf, -math.inf, math.nan, 1e300, -1e300]
    domain = {"expm1": g.uniform(-745, 709.7, 2000), "log1p": np.concatenate(
                  [g.uniform(-1, 3, 1000), 10.0 ** g.uniform(-3, 300, 1000)]),
              "tanh": g.uniform(-25, 25, 2000), "asinh": np.concatenate(
                  [g.uniform(-10, 10, 1000), 10.0 ** g.uniform(0, 300, 1000) * g.choice([-1.0, 1.0], 1000)]),
              "acosh": np.concatenate([1.0 + 10.0 ** g.uniform(-16, 0, 1000), 10.0 ** g.uniform(0, 300, 1000)]),
              "atanh": g.uniform(-1, 1, 2000)}[fn]
    x = np.concatenate([domain, small, g.uniform(-0.6, 0.6, 500), edges])
    cls = getattr(F, f"{fn}_")
    prog = fn_program(f"vec{fn}", lambda a, b: [cls(a), cls(b)])
    assert f"mc_{fn}(" in c_source(prog)
    cols = [torch.tensor(x), torch.tensor(x)]
    vec = _run(prog, *cols, lanes=8).numpy()[:, 0]
    sca = _run(prog, *cols, lanes=1).numpy()[:, 0]
    with np.errstate(all="ignore"):
        want = getattr(np, {"asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh"}.get(fn, fn))(x)
    np.testing.assert_array_equal(np.isnan(vec), np.isnan(want))
    fin = np.isfinite(want) & (want != 0)
    np.testing.assert_array_equal(vec[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    np.testing.assert_array_equal(np.signbit(vec[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
    ulp = np.abs(vec[fin] - want[fin]) / np.spacing(np.abs(want[fin]))
    assert ulp.max() <= 4.0, (fn, ulp.max(), x[fin][np.argmax(ulp)])
    both = fin & np.isfinite(sca)
    assert float(np.max(np.abs(vec[both] - sca[both]) / np.abs(sca[both]))) <= 1e-12


def test_vector_atan2_matches_libm(cache_dir):
    """mc_atan2 of the vectorized build (Cephes' atan: libm's kept a lane loop scalar) against numpy:
    within 4 ulp on random points of every octant, near the axes and the diagonals, at every scale,
    and libm's special values exactly (signed zeros: atan2(+-0, -0) = +-pi; infinities: +-pi/4,
    +-3 pi/4; NaN); the scalar build (libm) within 1e-12."""
    from modelc import functions as F

    g = np.random.default_rng(14)
    n = 3000
    ang = g.uniform(-math.pi, math.pi, n)
    rad = 10.0 ** g.uniform(-300, 300, n)
    y = np.concatenate([rad * np.sin(ang), g.standard_normal(n), g.uniform(-1, 1, n) * 1e-12])
    x = np.concatenate([rad * np.cos(ang), g.standard_normal(n), np.where(g.random(n) < 0.5, -1.0, 1.0)])
    d = g.standard_normal(500)
    y, x = np.concatenate([y, d, d, -d]), np.concatenate([x, d * (1 + 1e-9), -d, d])  # the diagonals
    special = [0.0, -0.0, 1.0, -1.0, 1e-310, -1e-310, math.inf, -math.inf, math.nan]
    sy, sx = np.meshgrid(special, special)
    y, x = np.concatenate([y, sy.ravel()]), np.concatenate([x, sx.ravel()])
    prog = fn_program("vecatan2", lambda a, b: [F.atan2_(a, b)])
    assert "mc_atan2(" in c_source(prog)
    cols = [torch.tensor(y), torch.tensor(x)]
    vec = _run(prog, *cols, lanes=8).numpy()[:, 0]
    sca = _run(prog, *cols, lanes=1).numpy()[:, 0]
    want = np.arctan2(y, x)
    np.testing.assert_array_equal(np.isnan(vec), np.isnan(want))
    np.testing.assert_array_equal(np.signbit(vec[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
    fin = (want != 0) & ~np.isnan(want)
    ulp = np.abs(vec[fin] - want[fin]) / np.spacing(np.abs(want[fin]))
    assert ulp.max() <= 4.0, (ulp.max(), y[fin][np.argmax(ulp)], x[fin][np.argmax(ulp)])
    np.testing.assert_array_equal(vec[want == 0], want[want == 0])
    assert float(np.max(np.abs(vec[fin] - sca[fin]) / np.abs(sca[fin]))) <= 1e-12


def _run_baked(prog, x, k: int, lanes: int = 8):
    """``prog`` on parameters x (per point) and y baked into the library as the constant ``k``."""
    lib = cbuild.load_library(c_source(prog), prog.name, torch.float64, lanes=lanes, baked=(None, float(k)))
    Y = torch.full((x.shape[0], len(prog.outputs)), math.nan, dtype=torch.float64)
    P = torch.stack([x, torch.full_like(x, math.nan)], dim=1).contiguous()  # y's column is never read
    lib([torch.zeros(x.shape[0], 1, dtype=torch.float64)], P, Y)
    return Y[:, 0].numpy()


@pytest.mark.parametrize("k", [-7, -2, -1, 0, 1, 2, 3, 5, 8, 17, 63])
def test_pow_with_a_baked_integer_exponent(cache_dir, k):
    """pow(x, k) with k a compile-time integer (a baked parameter) is binary powering: exact where
    every product is (integer bases, results below 2^53: the exp/log path is not), within
    (|k| + 1) 2^-53 of the exactly rounded power on random bases of both signs, and C's special
    values (0, -0, infinities, NaN, 1, -1; -0 to a negative odd power is -inf)."""
    from fractions import Fraction

    powp = fn_program("bakedpow", lambda a, b: [sp.Pow(a, b, evaluate=False)])
    g = np.random.default_rng(100 + k)
    ints = np.arange(2.0, 40.0)
    ints = ints[np.abs(k) * np.log2(ints) < 53]  # |x^k| exactly representable (k >= 0), or 1 / it
    rand = np.concatenate([g.uniform(-3, 3, 300), 10.0 ** g.uniform(-4, 4, 300)])
    rand = rand[np.abs(k) * np.log2(np.abs(rand)) < 1000]  # finite, normal results
    special = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, -2.0])
    x = np.concatenate([ints, rand, special])
    got = _run_baked(powp, torch.tensor(x), k)
    n_int, n_rand = len(ints), len(rand)
    if k >= 0:
        np.testing.assert_array_equal(got[:n_int], ints ** k)
    want = np.array([float(Fraction(v) ** k) for v in rand])
    rel = np.abs(got[n_int:n_int + n_rand] - want) / np.abs(want)
    assert rel.max() <= (abs(k) + 1) * 2.0 ** -53, rel.max()
    with np.errstate(all="ignore"):
        ref = np.power(special, float(k))
    np.testing.assert_array_equal(got[-len(special):], ref)  # NaN == NaN, and the sign of zeros:
    np.testing.assert_array_equal(np.signbit(got[-len(special):]), np.signbit(ref))


def test_float32_vector_math(cache_dir):
    """float32: the vectorized build computes exp/log in double and rounds once (within 1 float ulp)."""
    g = np.random.default_rng(5)
    x = torch.tensor(g.uniform(-80, 80, 3000))
    y = torch.tensor(10.0 ** g.uniform(-30, 30, 3000))
    prog = fn_program("vecmath32", lambda a, b: [sp.exp(a), sp.log(b)])
    got = _run(prog, x, y, lanes=8, dtype=torch.float32).double().numpy()
    xf, yf = x.float().double().numpy(), y.float().double().numpy()
    for k, want in enumerate((np.exp(xf), np.log(yf))):
        fin = np.isfinite(want.astype(np.float32)) & (np.abs(want) > 1e-37)
        ulp = np.abs(got[fin, k] - want[fin]) / np.spacing(np.abs(want[fin]).astype(np.float32))
        assert ulp.max() <= 1.0


@pytest.mark.parametrize("name", ["j2_linear_iso", "j2_voce_af", "perzyna_iso"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_streaming_stores_write_what_regular_stores_write(library, monkeypatch, name, dtype):
    """Outputs larger than the cache go out with streaming stores from a block staged in L1
    (``MC_STREAM``, chosen by ``pack_args``), and so do the status's iteration counts and residual
    norms (``mc_store_status``). Forced on for a small call, the results are bit for bit those of
    regular stores: 37 points (a partial last block), outputs and status arrays 1, 2 and 5 entries
    past a cache line (the lines a block shares with its neighbours are written with regular stores),
    and outputs with a row stride wider than a row (the regular path), with every entry written
    (poisoned buffers: NaN, -1 iterations, and flags 0 where every point converges). A streaming
    call also prefetches the next block's input rows and per-point parameters (mc_prefetch_rows)
    and, for writing, the last output line of the block after it (mc_prefetch_out, past the end too):
    inputs as column views of one array (rows wider than their components) and as contiguous
    copies, its outputs are the same bits."""
    mod = library[name]
    m = mod.Model(backend="c", dtype=dtype)
    B = 37
    X = _inputs(m, B, seed=13).to(dtype)
    P, _ = m._param_tensor({}, torch.Size([B]))
    sizes = [m.input_axis.type_of(n).size for n in m.input_axis.variable_names]
    views = list(torch.split(X, sizes, dim=1))
    rows, cols = (ax.size for ax in m.tangent_axes)
    ny = m.output_axis.size

    def call(stream: bool, shift: int, pad: int, inputs=views):
        monkeypatch.setattr(cbuild, "stream_bytes", lambda: -1 if stream else 1 << 62)
        ybuf = torch.full((B * (ny + pad) + 8,), math.nan, dtype=dtype)
        Y = ybuf[shift:shift + B * (ny + pad)].view(B, ny + pad)[:, :ny]
        J = torch.full((B, rows, cols), math.nan, dtype=dtype)
        st = (torch.zeros(B + 8, dtype=torch.bool)[shift:shift + B],
              torch.full((B + 8,), -1, dtype=torch.int32)[shift:shift + B],
              torch.full((B + 8,), math.nan, dtype=dtype)[shift:shift + B])
        args = cbuild.pack_args(inputs, P.contiguous(), Y, J, st)  # (the raw entry: Y's row stride is free)
        assert args[-1] == int(stream)
        m._general_lib().run("tangent", B, args, 1)
        return (Y.clone(), J, *st)

    want = call(False, 0, 0)
    assert not want[0].isnan().any() and not want[1].isnan().any()
    if mod.Model.IMPLICIT:  # (an explicit model has no status: its arrays stay as they were)
        assert want[2].all() and (want[3] >= 0).all() and not want[4].isnan().any()
    n = 5 if mod.Model.IMPLICIT else 2
    for shift, pad in ((0, 0), (1, 0), (2, 0), (5, 0), (0, 3)):  # 16 bytes off: a host's malloc'd rows
        got = call(True, shift, pad)
        assert all(torch.equal(a, b) for a, b in zip(got[:n], want[:n])), (shift, pad)
    assert all(v.stride(0) != v.shape[1] for v in views if v.shape[1] > 1)  # (rows apart: the other branch)
    got = call(True, 0, 0, [v.contiguous() for v in views])
    assert all(torch.equal(a, b) for a, b in zip(got[:n], want[:n]))




#: other x86-64 levels than this machine's: AVX2 without AVX-512 (blocks of 8, the 4 x 4 register
#: transposes) and the baseline x86-64 (SSE2: no transposes, no FMA), each appended to -march=native
_X86_LEVELS = {"avx2": "-mno-avx512f", "sse2": "-march=x86-64 -mtune=generic"}


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 instruction sets")
@pytest.mark.parametrize("name, dtype", [("j2_voce_af", torch.float64), ("perzyna_iso", torch.float32)])
def test_other_x86_levels_give_the_same_bits(library, monkeypatch, name, dtype):
    """The same source built for an AVX2-only and for a baseline (SSE2) x86-64 CPU gives this
    machine's results bit for bit (a point's arithmetic does not depend on the vector width: the
    same operations in the same order, no fused multiply-add, the template's own exp/log/pow), with
    the same iterations, on full and partial blocks: what CI checks on one CPU holds on the others.
    Tangent variant, 37 points with elastic and plastic ones."""
    mod = library[name]
    m = mod.Model(backend="c", dtype=dtype)
    X = _inputs(m, 37, seed=zlib.crc32(name.encode()) % 991 + 3).to(dtype)
    P, _ = m._param_tensor({}, torch.Size([37]))
    runs = {"native": _poisoned_c(m, X, P, True, lib=_lib(mod, dtype, None))}
    for level, flags in _X86_LEVELS.items():
        monkeypatch.setenv("MODELC_CFLAGS", flags)
        assert flags.split()[0] in cbuild.compiler().flags
        runs[level] = _poisoned_c(m, X, P, True, lib=_lib(mod, dtype, None))
    Y, J, ST = runs["native"]
    assert not Y.isnan().any() and not J.isnan().any() and bool((ST[:, 1] >= 1).any())  # some points flow
    for level in _X86_LEVELS:
        y, j, st = runs[level]
        assert torch.equal(y, Y) and torch.equal(j, J) and torch.equal(st, ST), level


@pytest.mark.parametrize("name", ["gtn", "j2_voce_af", "perzyna_iso", "perzyna_iso_coupled", "elementary"])
def test_every_lane_loop_vectorizes(tmp_path, name):
    """Every ``MC_SIMD MC_LANES`` loop of a library model's C source is vectorized when compiled for
    AVX2 (x86-64-v3, whatever this machine is: compiled, not run). A libm call in a loop (gtn's cosh
    and sinh, 4x slower) or the NaN-propagating max chain keeps a loop scalar without any other
    sign; GCC's vectorizer report (-fopt-info-vec) names each loop it vectorized. ``elementary``:
    a program of every function the header computes (exp, log, pow, the hyperbolic functions and
    their inverses, expm1, log1p, atan2: every elementary function of the spec language; the guess
    powers, mc_gpow)."""
    import importlib
    import re
    import subprocess

    from modelc.runtime import cheader

    cc = cbuild.compiler()
    macros = subprocess.run([cc.path, "-dM", "-E", "-x", "c", "/dev/null"], capture_output=True, text=True).stdout
    if "__GNUC__" not in macros or "__clang__" in macros:
        pytest.skip(f"needs GCC's -fopt-info-vec report; the C compiler is {cc.version.splitlines()[0]}")
    if name == "elementary":
        from modelc import functions as F

        from modelc.backends.c_printer import GuessPow

        fns = [F.sinh_, F.cosh_, F.tanh_, F.asinh_, F.acosh_, F.atanh_, F.expm1_, F.log1p_]
        src = c_source(fn_program("elementary", lambda a, b: [sp.exp(a) * sp.log(b) + sp.Pow(a, b, evaluate=False)
                                                              + GuessPow(a, b)]
                                  + [f(a) + f(b) for f in fns] + [F.atan2_(a, b)]))
    else:
        src = importlib.import_module(f"modelc.generated.{name}").C_SOURCE  # (the header by #include)
    assert cheader.KERNEL_INCLUDE in src
    path = tmp_path / f"{name}.c"
    path.write_text(src)
    flags = [f for f in cc.flags if not f.startswith("-march=") and f not in ("-shared",)]
    r = subprocess.run([cc.path, *flags, "-march=x86-64-v3", "-DMC_W=8", f"-I{Path(cheader.__file__).parent}",
                        "-c", str(path), "-o", str(tmp_path / "x.o"), "-fopt-info-vec-optimized"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:2000]
    done = {int(m.group(1)) for m in re.finditer(rf"{re.escape(path.name)}:(\d+):\d+: optimized: loop vectorized",
                                                 r.stdout + r.stderr)}
    # GCC reports a loop at a line of its body (its first statement's, or later): a loop is
    # vectorized when a report falls between its line and its closing brace
    lines = src.splitlines()
    loops = []
    for k, line in enumerate(lines):
        if "MC_SIMD MC_LANES {" in line:
            indent = line[:len(line) - len(line.lstrip())]
            end = next(j for j in range(k + 1, len(lines)) if lines[j] == indent + "}")
            loops.append((k + 1, end + 1))
    assert loops
    scalar = [a for a, b in loops if not any(a <= d <= b for d in done)]
    assert not scalar, f"{name}: lane loops not vectorized at lines {scalar} of its C source"
