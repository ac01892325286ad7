"""Tensor algebra of the spec language (modelc.frontend.tensor through the expression builder) and the
symbolic Mandel conversions (modelc.mandel), against NumPy full-tensor oracles on random values."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from modelc import mandel
from modelc.frontend.expr import Binding, Scope, build_expr
from modelc.frontend.tensor import TValue
from modelc.ir import Loc, Variable, component_symbols
from modelc.runtime.types import R2, SR2, SSR4, Scalar, Vec, WR2

S2 = np.sqrt(2.0)
PAIRS = [(0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1)]


def sym_full(m6):  # independent NumPy Mandel -> full
    A = np.zeros((3, 3))
    for k, (i, j) in enumerate(PAIRS):
        A[i, j] = A[j, i] = m6[k] / (1 if k < 3 else S2)
    return A


def full_sym(A):
    return np.array([A[i, j] * (1 if k < 3 else S2) for k, (i, j) in enumerate(PAIRS)])


def ssr4_full(m66):
    C = np.zeros((3, 3, 3, 3))
    for m, (i, j) in enumerate(PAIRS):
        for n, (k, l) in enumerate(PAIRS):
            v = m66[m, n] / ((1 if m < 3 else S2) * (1 if n < 3 else S2))
            for a, b in ((i, j), (j, i)):
                for c, d in ((k, l), (l, k)):
                    C[a, b, c, d] = v
    return C


class Env:
    """Random values for variables of every type, and a scope to build expressions in."""

    def __init__(self):
        rng = np.random.default_rng()
        self.num = {}
        self.scope = Scope()
        self.subs = {}
        spec = {"a": SR2, "b": SR2, "A": R2, "B": R2, "v": Vec, "w": Vec, "s": Scalar, "W": WR2}
        for name, t in spec.items():
            vals = rng.normal(size=t.size)
            if name == "A":
                vals = vals + 3 * np.eye(3).ravel()  # well conditioned
            self._add(name, t, vals)
        C = rng.normal(size=(6, 6))
        self._add("C", SSR4, (C + C.T).ravel())
        self._add("D", SSR4, rng.normal(size=36))
        sp_vals = rng.normal(size=6)
        sp_vals[:3] += 4.0
        self._add("P", SR2, sp_vals)  # positive definite-ish, invertible

    def _add(self, name, t, vals):
        var = Variable(f"x/{name}", t)
        syms = component_symbols(var.name, t)
        self.scope.names[name] = Binding("input", TValue(t, syms), var)
        self.subs.update({s: float(v) for s, v in zip(syms, vals)})
        self.num[name] = np.asarray(vals, dtype=float)

    def eval(self, text):
        v = build_expr(text, Loc("t.yaml", 1, 1, text), self.scope)
        return v.type, np.array([float(sp.sympify(c).xreplace(self.subs)) for c in v.comps])


@pytest.fixture
def env():
    return Env()


def close(x, y):
    np.testing.assert_allclose(np.asarray(x, float).ravel(), np.asarray(y, float).ravel(), rtol=1e-10, atol=1e-10)


def test_mandel_round_trips_and_identities(env):
    a, b = env.num["a"], env.num["b"]
    A = sym_full(a)
    full = mandel.sr2_to_full(tuple(sp.Float(v) for v in a))
    close([full[(i, j)] for i in range(3) for j in range(3)], A)
    close(mandel.full_to_sr2({(i, j): sp.Float(A[i, j]) for i in range(3) for j in range(3)}), a)
    C = env.num["C"].reshape(6, 6)
    full4 = mandel.ssr4_to_full(tuple(sp.Float(v) for v in C.ravel()))
    close([full4[k] for k in sorted(full4)], ssr4_full(C))
    close(mandel.full_to_ssr4(full4), C)
    assert mandel.SQRT2 == sp.sqrt(2)
    # the point of Mandel: a:b is a dot product and C:a a matrix product
    assert np.isclose(np.tensordot(A, sym_full(b)), a @ b)
    close(full_sym(np.einsum("ijkl,kl->ij", ssr4_full(C), A)), C @ a)


@pytest.mark.parametrize("text, check", [
    ("tr(a)", lambda n: np.trace(sym_full(n["a"]))),
    ("tr(A)", lambda n: np.trace(n["A"].reshape(3, 3))),
    ("vol(a)", lambda n: full_sym(np.trace(sym_full(n["a"])) / 3 * np.eye(3))),
    ("dev(a)", lambda n: full_sym(sym_full(n["a"]) - np.trace(sym_full(n["a"])) / 3 * np.eye(3))),
    ("dev(A)", lambda n: n["A"] - np.trace(n["A"].reshape(3, 3)) / 3 * np.eye(3).ravel()),
    ("norm(a)", lambda n: np.linalg.norm(sym_full(n["a"]))),
    ("norm(A)", lambda n: np.linalg.norm(n["A"])),
    ("norm(v)", lambda n: np.linalg.norm(n["v"])),
    ("norm(s)", lambda n: abs(n["s"][0])),
    ("ddot(a, b)", lambda n: np.tensordot(sym_full(n["a"]), sym_full(n["b"]))),
    ("ddot(A, B)", lambda n: n["A"] @ n["B"]),
    ("ddot(W, W)", lambda n: 2 * n["W"] @ n["W"]),
    ("ddot(C, a)", lambda n: full_sym(np.einsum("ijkl,kl->ij", ssr4_full(n["C"].reshape(6, 6)), sym_full(n["a"])))),
    ("ddot(a, C)", lambda n: full_sym(np.einsum("ij,ijkl->kl", sym_full(n["a"]), ssr4_full(n["C"].reshape(6, 6))))),
    ("ddot(C, D)", lambda n: n["C"].reshape(6, 6) @ n["D"].reshape(6, 6)),
    ("dot(v, w)", lambda n: n["v"] @ n["w"]),
    ("dot(A, v)", lambda n: n["A"].reshape(3, 3) @ n["v"]),
    ("dot(A, B)", lambda n: n["A"].reshape(3, 3) @ n["B"].reshape(3, 3)),
    ("dot(a, b)", lambda n: sym_full(n["a"]) @ sym_full(n["b"])),
    ("outer(a, b)", lambda n: np.outer(n["a"], n["b"])),
    ("outer(v, w)", lambda n: np.outer(n["v"], n["w"])),
    ("transpose(A)", lambda n: n["A"].reshape(3, 3).T),
    ("transpose(C)", lambda n: n["C"].reshape(6, 6).T),
    ("transpose(W)", lambda n: -n["W"]),
    ("sym(A)", lambda n: full_sym((n["A"].reshape(3, 3) + n["A"].reshape(3, 3).T) / 2)),
    ("skew(A)", lambda n: (lambda K: np.array([K[2, 1], K[0, 2], K[1, 0]]))((n["A"].reshape(3, 3) - n["A"].reshape(3, 3).T) / 2)),
    ("inv(P)", lambda n: full_sym(np.linalg.inv(sym_full(n["P"])))),
    ("inv(A)", lambda n: np.linalg.inv(n["A"].reshape(3, 3))),
    ("inv(s)", lambda n: 1 / n["s"]),
    ("det(P)", lambda n: np.linalg.det(sym_full(n["P"]))),
    ("det(A)", lambda n: np.linalg.det(n["A"].reshape(3, 3))),
    ("ddot(I4sym, a)", lambda n: n["a"]),
    ("ddot(I4vol, a)", lambda n: full_sym(np.trace(sym_full(n["a"])) / 3 * np.eye(3))),
    ("ddot(I4dev, a)", lambda n: full_sym(sym_full(n["a"]) - np.trace(sym_full(n["a"])) / 3 * np.eye(3))),
    ("tr(I2) + tr(IR2)", lambda n: 6.0),
    ("2*a - b/4 + s*I2", lambda n: 2 * n["a"] - n["b"] / 4 + n["s"][0] * np.array([1, 1, 1, 0, 0, 0])),
    ("-(a) + +b", lambda n: n["b"] - n["a"]),
    ("s**3 + exp(s) + log(abs(s)) + sqrt(abs(s))", lambda n: (lambda s: s**3 + np.exp(s) + np.log(abs(s)) + np.sqrt(abs(s)))(n["s"][0])),
    ("max(s, 0.25) + min(s, -0.25) + macaulay(s) + sign(s) + heaviside(s)",
     lambda n: (lambda s: max(s, .25) + min(s, -.25) + max(s, 0) + np.sign(s) + (s > 0))(n["s"][0])),
    ("where(s > 0, a, b)", lambda n: n["a"] if n["s"][0] > 0 else n["b"]),
    ("where(s <= 0.1, a, 2*a)", lambda n: n["a"] if n["s"][0] <= 0.1 else 2 * n["a"]),
    ("s if s >= 0 else -s", lambda n: abs(n["s"][0])),
    ("pi*s", lambda n: np.pi * n["s"][0]),
    # Einstein notation
    ("C[i,j,k,l]*a[k,l]", lambda n: n["C"].reshape(6, 6) @ n["a"]),
    ("a[i,j]*b[i,j]", lambda n: n["a"] @ n["b"]),
    ("A[i,k]*B[k,j]", lambda n: n["A"].reshape(3, 3) @ n["B"].reshape(3, 3)),
    ("A[j,i]", lambda n: n["A"].reshape(3, 3).T),
    ("A[i,i]", lambda n: np.trace(n["A"].reshape(3, 3))),
    ("v[i]*A[i,j]", lambda n: n["v"] @ n["A"].reshape(3, 3)),
    ("a[i,j]*b[k,l]", lambda n: np.outer(n["a"], n["b"])),
    ("2*a[i,j] - b[j,i]/2 + s*a[i,j]", lambda n: (2 + n["s"][0]) * n["a"] - n["b"] / 2),
    ("C[i,j,k,l]*a[k,l] + b", lambda n: n["C"].reshape(6, 6) @ n["a"] + n["b"]),
    ("-a[i,j]*a[i,j]", lambda n: -(n["a"] @ n["a"])),
])
def test_tensor_operations_against_numpy(env, text, check):
    _, got = env.eval(text)
    close(got, check(env.num | {"s": env.num["s"]}))


def test_result_types(env):
    cases = {"tr(a)": Scalar, "dev(a)": SR2, "outer(a, b)": SSR4, "outer(v, w)": R2, "skew(A)": WR2,
             "dot(a, b)": R2, "dot(A, v)": Vec, "C[i,j,k,l]*a[k,l]": SR2, "A[i,k]*B[k,j]": R2,
             "a[i,k]*a[k,j]": SR2, "v[i]": Vec, "a[i,j]*b[k,l]": SSR4, "diff(ddot(a, a), a)": SR2}
    for text, t in cases.items():
        assert env.eval(text)[0] is t, text


def test_diff_is_the_mandel_gradient(env):
    # d(a:b)/da = b in Mandel (the Mandel weights cancel), and d|dev a|/da = dev(a)/|dev a|
    close(env.eval("diff(ddot(a, b), a)")[1], env.num["b"])
    d = full_sym(sym_full(env.num["a"]) - np.trace(sym_full(env.num["a"])) / 3 * np.eye(3))
    close(env.eval("diff(norm(dev(a)), a)")[1], d / np.linalg.norm(d))
    close(env.eval("diff(s**2*tr(a), s)")[1], 2 * env.num["s"] * np.trace(sym_full(env.num["a"])))


@pytest.mark.parametrize("text, kink", [
    ("where(s > 0.3, s**3, 2*s)", 0.3),
    ("s if s >= -0.1 else -s**2", -0.1),
    ("max(s, 0.5*s + 0.1)*tr(a)", 0.2),
    ("min(s, 0.2)*ddot(a, b)", 0.2),
    ("macaulay(s - 0.2)**2*norm(dev(a))", 0.2),
    ("abs(s)*norm(a) + sign(s) + heaviside(s)", 0.0),
    ("(macaulay(s)/0.5)**2.5", 0.0),
])
def test_expression_derivatives_match_central_differences_on_both_sides_of_kinks(env, text, kink):
    from fe_util import lambdify

    v = build_expr(text, Loc("t.yaml", 1, 1, text), env.scope)
    syms = [sym for n in ("s", "a", "b") for sym in env.scope.names[n].value.comps]
    f = lambdify(syms, v.expr)
    grad = lambdify(syms, sp.Matrix([sp.diff(v.expr, x) for x in syms]))
    rng = np.random.default_rng()
    for side in (1.0, -1.0):
        x0 = np.array([env.subs[x] for x in syms])
        x0[0] = kink + side * rng.uniform(1e-2, 0.5)
        h = 1e-6
        fd = np.array([(f(*(x0 + h * e)) - f(*(x0 - h * e))) / (2 * h) for e in np.eye(len(syms))])
        np.testing.assert_allclose(np.asarray(grad(*x0), float).ravel(), fd, rtol=1e-6, atol=1e-7)


def test_det_and_inv_of_an_expression_keep_its_components_whole(env):
    """det and inv are written out as cofactors of the argument's components, never multiplied out:
    SymPy's Matrix.det expanded them (this argument: 71,615 operations and 5 s for det; a nested one
    from a random spec ran for over 10 minutes). The values still match NumPy's det and inv."""
    inner = "I2 + ddot(a, b)*ddot(outer(a, b), a) + tr(b)*a"
    _, arg = env.eval(inner)
    arg_ops = sum(sp.count_ops(c) for c in build_expr(inner, Loc("t.yaml", 1, 1, inner), env.scope).comps)
    for text in (f"det({inner})", f"inv({inner})"):
        value = build_expr(text, Loc("t.yaml", 1, 1, text), env.scope)
        assert sum(sp.count_ops(c) for c in value.comps) <= 20 * arg_ops, text
    _, d = env.eval(f"det({inner})")
    _, i = env.eval(f"inv({inner})")
    close(d, np.linalg.det(sym_full(arg)))
    close(sym_full(i), np.linalg.inv(sym_full(arg)))


def test_index_product_of_large_tensors_is_typed_without_multiplying_out(env):
    """M N M with M = inv(...) (entries rational functions) is symmetric; deciding that used to
    multiply the entries out (over ten minutes for this M and N). The result is an SR2 with NumPy's
    values; M N A, not symmetric, is an R2."""
    for name, text in (("M", "inv(I2 + 0.1*a + 0.01*ddot(a, b)*b)"), ("N", "dev(a)*ddot(b, b) + ddot(outer(a, b), a)")):
        env.scope.names[name] = Binding("define", build_expr(text, Loc("t.yaml", 1, 1, text), env.scope))
    a, b = sym_full(env.num["a"]), sym_full(env.num["b"])
    M = np.linalg.inv(np.eye(3) + 0.1 * a + 0.01 * np.tensordot(a, b) * b)
    N = (a - np.trace(a) / 3 * np.eye(3)) * np.tensordot(b, b) + np.tensordot(b, a) * a
    t, got = env.eval("M[i,k]*N[k,l]*M[l,j]")
    assert t is SR2
    close(sym_full(got), M @ N @ M)
    t, got = env.eval("M[i,k]*N[k,l]*A[l,j]")
    assert t is R2
    close(got.reshape(3, 3), M @ N @ env.num["A"].reshape(3, 3))
