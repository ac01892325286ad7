"""The compiler's symbolic Mandel conversions (modelc.mandel), against identities worked by hand with
NumPy: SR2 storage and its double contraction as a dot product, the isotropic stiffness as a 6x6
Mandel matrix (Hooke's law from the Lame constants), SSR4 round trips, WR2 as the cross-product
matrix, the R2/Vec/Scalar layouts, and an unknown type named in the error."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from modelc.mandel import ORDER, PAIRS, POSITION, from_full, to_full
from modelc.runtime.types import R2, SR2, SSR4, TYPES, Scalar, TensorType, Vec, WR2

S2 = np.sqrt(2.0)


def _num(full: dict, shape: tuple[int, ...]) -> np.ndarray:
    """A full-index dict of SymPy numbers -> a float array."""
    out = np.zeros(shape)
    for idx, v in full.items():
        out[idx] = float(v)
    return out


def _mandel(A: np.ndarray) -> np.ndarray:
    """By hand: (xx, yy, zz, s2*yz, s2*xz, s2*xy) of a symmetric 3x3 matrix."""
    return np.array([A[0, 0], A[1, 1], A[2, 2], S2 * A[1, 2], S2 * A[0, 2], S2 * A[0, 1]])


def _sym(rng) -> np.ndarray:
    M = rng.normal(size=(3, 3))
    return (M + M.T) / 2


def test_sr2_storage_and_round_trip():
    c = sp.symbols("c0:6", real=True)
    full = to_full(SR2, c)
    assert len(full) == 9
    for (i, j), v in full.items():
        assert v == full[(j, i)]  # symmetric
    assert full[(0, 0)] == c[0] and full[(2, 2)] == c[2]
    assert sp.simplify(full[(1, 2)] - c[3] / sp.sqrt(2)) == 0
    assert sp.simplify(full[(0, 2)] - c[4] / sp.sqrt(2)) == 0
    assert sp.simplify(full[(1, 0)] - c[5] / sp.sqrt(2)) == 0
    back = from_full(SR2, full)
    assert all(sp.simplify(b - a) == 0 for a, b in zip(c, back))


def test_sr2_double_contraction_is_the_dot_product():
    rng = np.random.default_rng()
    A, B = _sym(rng), _sym(rng)
    a = np.array([float(x) for x in from_full(SR2, {(i, j): sp.Float(A[i, j], 30) for i in range(3)
                                                     for j in range(3)})])
    b = np.array([float(x) for x in from_full(SR2, {(i, j): sp.Float(B[i, j], 30) for i in range(3)
                                                     for j in range(3)})])
    np.testing.assert_allclose(a, _mandel(A), rtol=1e-14)
    np.testing.assert_allclose(a @ b, np.sum(A * B), rtol=1e-12)  # A : B
    np.testing.assert_allclose(_num(to_full(SR2, [sp.Float(x, 30) for x in a]), (3, 3)), A, rtol=1e-13,
                               atol=1e-15)


def test_full_to_sr2_keeps_the_symmetric_part():
    rng = np.random.default_rng()
    M = rng.normal(size=(3, 3))  # not symmetric
    got = np.array([float(x) for x in from_full(SR2, {(i, j): sp.Float(M[i, j], 30) for i in range(3)
                                                       for j in range(3)})])
    np.testing.assert_allclose(got, _mandel((M + M.T) / 2), rtol=1e-13)


def test_isotropic_stiffness_is_hookes_law_in_mandel():
    lam, mu = sp.symbols("lam mu", positive=True)
    d = lambda i, j: 1 if i == j else 0  # noqa: E731
    C = {(i, j, k, l): lam * d(i, j) * d(k, l) + mu * (d(i, k) * d(j, l) + d(i, l) * d(j, k))
         for i in range(3) for j in range(3) for k in range(3) for l in range(3)}
    M = sp.Matrix(6, 6, from_full(SSR4, C))
    expected = sp.zeros(6, 6)
    for m in range(3):
        for n in range(3):
            expected[m, n] = lam + (2 * mu if m == n else 0)
    for m in range(3, 6):
        expected[m, m] = 2 * mu  # Mandel: shear rows scale like the normal ones
    assert sp.simplify(M - expected) == sp.zeros(6, 6)
    # the 6x6 product is the stress: S = lam tr(e) I + 2 mu e, Lame constants from E and nu
    E, nu = 200000.0, 0.3
    lv, mv = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    e = _sym(np.random.default_rng()) * 1e-3
    S = lv * np.trace(e) * np.eye(3) + 2 * mv * e
    Mn = np.array(M.subs({lam: lv, mu: mv}).evalf(), dtype=float)
    np.testing.assert_allclose(Mn @ _mandel(e), _mandel(S), rtol=1e-12)


def test_ssr4_round_trip_and_minor_symmetries():
    rng = np.random.default_rng()
    vals = [sp.Float(x, 30) for x in rng.normal(size=36)]
    full = to_full(SSR4, vals)
    assert len(full) == 81
    for (i, j, k, l), v in full.items():
        assert v == full[(j, i, k, l)] == full[(i, j, l, k)]
    # C[0,1,1,2] = C_m5,n3 / (s2 s2): a shear-shear entry carries both weights
    assert float(full[(0, 1, 1, 2)]) == pytest.approx(float(vals[6 * 5 + 3]) / 2, rel=1e-14)
    assert float(full[(0, 0, 1, 2)]) == pytest.approx(float(vals[3]) / S2, rel=1e-14)
    back = np.array([float(x) for x in from_full(SSR4, full)])
    np.testing.assert_allclose(back, np.array([float(x) for x in vals]), rtol=1e-13)


def test_wr2_is_the_cross_product_matrix():
    rng = np.random.default_rng()
    w, v = rng.normal(size=3), rng.normal(size=3)
    W = _num(to_full(WR2, [sp.Float(x, 30) for x in w]), (3, 3))
    np.testing.assert_allclose(W, -W.T)
    np.testing.assert_allclose(W @ v, np.cross(w, v), rtol=1e-13)  # W v = w x v
    M = rng.normal(size=(3, 3))
    got = np.array([float(x) for x in from_full(WR2, {(i, j): sp.Float(M[i, j], 30) for i in range(3)
                                                       for j in range(3)})])
    K = (M - M.T) / 2  # the skew part's axial vector (w_zy, w_xz, w_yx)
    np.testing.assert_allclose(got, [K[2, 1], K[0, 2], K[1, 0]], rtol=1e-13)


def test_r2_vec_scalar_layouts():
    r = sp.symbols("r0:9")
    full = to_full(R2, r)
    assert full[(1, 2)] == r[5] and full[(2, 1)] == r[7]  # row-major, not symmetrised
    assert from_full(R2, full) == tuple(r)
    v = sp.symbols("v0:3")
    assert to_full(Vec, v) == {(0,): v[0], (1,): v[1], (2,): v[2]}
    assert from_full(Vec, to_full(Vec, v)) == tuple(v)
    s = sp.Symbol("s")
    assert to_full(Scalar, (s,)) == {(): s} and from_full(Scalar, {(): s}) == (s,)
    # every type's full index has ORDER[type] entries; PAIRS and POSITION agree both ways round
    for t in TYPES.values():
        comps = sp.symbols(f"x0:{t.size}") if t.size > 1 else (sp.Symbol("x"),)
        assert {len(k) for k in to_full(t, comps)} == {ORDER[t.name]}
    for m, (i, j) in enumerate(PAIRS):
        assert POSITION[(i, j)] == POSITION[(j, i)] == m


def test_unknown_type_is_named():
    odd = TensorType("SR3", (7,), "not a type modelc knows")
    with pytest.raises(KeyError, match="SR3"):
        to_full(odd, sp.symbols("c0:7"))
    with pytest.raises(KeyError, match="SR3"):
        from_full(odd, {})
