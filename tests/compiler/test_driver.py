"""The compile pipeline (modelc.driver): what it loads and how long a library model takes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r'''
import json, sys, time
t0 = time.perf_counter()
from modelc import driver
spec = driver.load_spec(sys.argv[1])
done = driver.compile_model(spec, "j2_linear_iso")
print(json.dumps({"torch": any(m == "torch" or m.startswith("torch.") for m in sys.modules),
                  "numpy": any(m == "numpy" or m.startswith("numpy.") for m in sys.modules),
                  "stages": [s.name for s in done.stages], "lines": len(done.source.splitlines())}))
'''


def test_compiling_a_model_does_not_import_torch():
    """Spec -> module source needs SymPy and Jinja2 only: `modelc compile` in a build step pays
    neither torch's import time (about 1.6 s) nor its install."""
    r = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "spec" / "library.yaml")], capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["torch"] is False
    assert out["numpy"] is False  # ~0.1 s of a cold compile: modelc.functions imports it lazily
    assert out["stages"] == ["compose", "positive", "differentiate", "lower", "cse", "blocks", "variants", "emit"]
    assert out["lines"] > 1000


# -- random specs through the whole pipeline -------------------------------------------------------

def _oracle():
    """The spec functions in NumPy (an independent evaluation of the same text)."""
    import numpy as np

    return dict(exp=np.exp, log=np.log, sqrt=np.sqrt, tanh=np.tanh, abs=np.abs, sign=np.sign,
                safe_div=lambda a, b: np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0),
                safe_sqrt=lambda a: np.sqrt(np.maximum(a, 0.0)), macaulay=lambda a: np.maximum(a, 0.0),
                min=np.minimum, max=np.maximum, heaviside=lambda a: (np.asarray(a) > 0).astype(float))


def _random_spec_expression(rng, depth):
    if depth == 0 or rng.random() < 0.2:
        if rng.random() < 0.7:
            return ["x", "y", "u"][rng.integers(3)]
        return ["2.0", "0.5", "3.0", "1.25", "(1/3)", "7.0", "sqrt(2)", "exp(1)"][rng.integers(8)]
    a, b = _random_spec_expression(rng, depth - 1), _random_spec_expression(rng, depth - 1)
    return [f"({a} + {b})", f"({a} - {b})", f"({a}*{b})", f"({a}/(1 + {b}**2))", f"({a})**2", f"({a})**3",
            f"exp(({a})/4)", f"log(1 + ({a})**2)", f"sqrt(1 + ({a})**2)", f"safe_div({a}, {b})",
            f"safe_sqrt({a})", f"macaulay({a})", f"min({a}, {b})", f"max({a}, {b})", f"abs({a})",
            f"tanh({a})", f"(1 + ({a})**2)**(-1.5)", f"(2 + ({a})**2)**({b}/4)", f"-({a})",
            f"heaviside({a})*{b}", f"sign({a})*({b})", f"(1 + ({a})**2)**(-2)"][rng.integers(22)]


def test_random_specs_agree_across_backends_and_with_numpy(tmp_path):
    """Fresh random specs (six outputs each, sums, products, powers, exp, log, sqrt, tanh, abs, sign,
    min, max, the safe functions, constants such as sqrt(2)) through the whole pipeline: the C and
    PyTorch backends against the spec's text evaluated by NumPy (values, 1e-9), against each other
    (every derivative, 1e-9), and the derivatives against central differences where the function is
    smooth. This found sqrt(2)**x failing on the PyTorch backend (TypeError in its generated code)."""
    import numpy as np
    import torch

    import modelc

    rng = np.random.default_rng()
    names = ["x", "y", "u"]
    oracle = _oracle()
    for k in range(3):
        exprs = [_random_spec_expression(rng, 3) for _ in range(6)]
        spec = tmp_path / f"r{k}.yaml"
        spec.write_text("models:\n  r:\n    inputs: {x: {}, y: {}, u: {}}\n    outputs: {%s}\n    equations:\n%s" % (
            ", ".join(f"o{i}: {{}}" for i in range(6)), "".join(f"      o{i}: {e}\n" for i, e in enumerate(exprs))))
        module = modelc.load(spec, "r")
        B = 64
        vals = rng.uniform(-2, 2, (3, B))

        def numpy_at(v):
            env = {**oracle, **dict(zip(names, v))}
            with np.errstate(all="ignore"):
                return np.stack([np.broadcast_to(eval(e, {"__builtins__": {}}, env), (B,)) for e in exprs])

        res = {}
        for backend in ("c", "torch"):
            out = module.Model(dtype=torch.float64, backend=backend)(
                {n: torch.tensor(v) for n, v in zip(names, vals)}, derivatives=True)
            res[backend] = (np.stack([out[f"o{i}"].numpy().reshape(B) for i in range(6)]),
                            np.stack([[out.jacobian[f"o{i}", n].numpy().reshape(B) for n in names] for i in range(6)]))
        want = numpy_at(vals)
        fin = np.isfinite(want)
        for backend, (got, _) in res.items():
            bad = fin & ~(np.abs(got - want) <= 1e-9 * (1 + np.abs(want)))
            assert not bad.any(), (backend, [exprs[i] for i in np.argwhere(bad)[:, 0]])
        (_, jc), (_, jt) = res["c"], res["torch"]
        assert np.array_equal(np.isfinite(jc), np.isfinite(jt)), exprs
        both = np.isfinite(jc)
        assert np.all(np.abs(jc - jt)[both] <= 1e-9 * (1 + np.abs(jt[both]))), exprs
        h = 1e-6
        for q in range(3):
            step = np.zeros_like(vals)
            step[q] = h
            fp, fm = numpy_at(vals + step), numpy_at(vals - step)
            fd = (fp - fm) / (2 * h)
            smooth = np.isfinite(fd) & np.isfinite(jt[:, q]) & (np.abs(fp + fm - 2 * want) < 1e-6 * (1 + np.abs(want)))
            bad = smooth & ~(np.abs(jt[:, q] - fd) <= 1e-4 * (1 + np.abs(fd)))
            assert not bad.any(), (names[q], [exprs[i] for i in np.argwhere(bad)[:, 0]])


_MONOTONE = [("u + u**3", lambda np, u: u + u**3), ("u + 0.5*tanh(u)", lambda np, u: u + 0.5 * np.tanh(u)),
             ("exp(u/3) + u", lambda np, u: np.exp(u / 3) + u), ("u + macaulay(u)", lambda np, u: u + np.maximum(u, 0)),
             ("2*u + sqrt(1 + u**2)", lambda np, u: 2 * u + np.sqrt(1 + u**2))]


def _random_right_side(rng, depth):
    if depth == 0 or rng.random() < 0.25:
        return ["x", "y"][rng.integers(2)] if rng.random() < 0.7 else ["2.0", "0.5", "(1/3)", "sqrt(2)"][rng.integers(4)]
    a, b = _random_right_side(rng, depth - 1), _random_right_side(rng, depth - 1)
    return [f"({a} + {b})", f"({a}*{b})", f"tanh({a})", f"exp(({a})/4)", f"safe_div({a}, 1 + ({b})**2)",
            f"macaulay({a})", f"sqrt(1 + ({a})**2)"][rng.integers(7)]


def test_random_implicit_models_find_the_root_and_its_derivative(tmp_path):
    """Fresh random implicit models m(u) = g(x, y), m strictly increasing (a unique root) and g a
    random expression: the C and PyTorch backends' Newton against the root found by bisection in
    NumPy, and the implicit-function-theorem derivative of w = u^2 + x by x against central
    differences of the bisection roots."""
    import numpy as np
    import torch

    import modelc

    rng = np.random.default_rng()
    env = dict(exp=np.exp, tanh=np.tanh, sqrt=np.sqrt, macaulay=lambda a: np.maximum(a, 0.0),
               safe_div=lambda a, b: np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0))
    for k in range(3):
        g = _random_right_side(rng, 3)
        mtext, mfun = _MONOTONE[rng.integers(len(_MONOTONE))]
        spec = tmp_path / f"n{k}.yaml"
        spec.write_text(f"models:\n  nm:\n    inputs: {{x: {{}}, y: {{}}}}\n    outputs: {{w: {{}}}}\n"
                        f"    implicit:\n      unknowns:\n        u: {{var: state/u}}\n      residuals:\n"
                        f"        u: {mtext} - ({g})\n      guess:\n        u: 0\n"
                        f"      solver: {{rtol: 1.0e-12, atol: 1.0e-12, max_iter: 60}}\n"
                        f"    equations:\n      w: u*u + x\n")
        module = modelc.load(spec, "nm")
        B = 32
        x, y = rng.uniform(-2, 2, (2, B))

        def root(xv):
            with np.errstate(all="ignore"):
                gv = np.broadcast_to(eval(g, {"__builtins__": {}}, {**env, "x": xv, "y": y}), (B,))
            lo, hi = np.full(B, -60.0), np.full(B, 60.0)
            for _ in range(200):
                mid = (lo + hi) / 2
                above = mfun(np, mid) > gv
                lo, hi = np.where(above, lo, mid), np.where(above, mid, hi)
            return (lo + hi) / 2

        u0 = root(x)
        h = 1e-6
        fd = ((root(x + h) ** 2 + x + h) - (root(x - h) ** 2 + x - h)) / (2 * h)
        smooth = np.abs(root(x + h) + root(x - h) - 2 * u0) < 1e-7 * (1 + np.abs(u0))
        assert smooth.sum() >= B // 2, (mtext, g)  # kinks (macaulay) at a few points at most
        for backend in ("c", "torch"):
            out = module.Model(dtype=torch.float64, backend=backend)({"x": torch.tensor(x), "y": torch.tensor(y)},
                                                                    derivatives=True)
            assert bool(out.status.converged.all()), (backend, mtext, g)
            np.testing.assert_allclose(out["w"].numpy().reshape(B), u0 * u0 + x, rtol=1e-9, atol=1e-9,
                                       err_msg=f"{backend}: {mtext} = {g}")
            dw = out.jacobian["w", "x"].numpy().reshape(B)
            np.testing.assert_allclose(dw[smooth], fd[smooth], rtol=1e-5, atol=1e-6, err_msg=f"{backend}: {mtext} = {g}")


def _random_with_parameters(rng, depth):
    if depth == 0 or rng.random() < 0.2:
        return ["x", "y", "p", "q"][rng.integers(4)] if rng.random() < 0.75 else ["2.0", "(1/3)", "sqrt(2)"][rng.integers(3)]
    a, b = _random_with_parameters(rng, depth - 1), _random_with_parameters(rng, depth - 1)
    return [f"({a} + {b})", f"({a}*{b})", f"({a}/(1 + {b}**2))", f"({a})**3", f"exp(({a})/4)",
            f"log(1 + ({a})**2)", f"safe_div({a}, {b})", f"macaulay({a})", f"max({a}, {b})", f"tanh({a})",
            f"(2 + ({a})**2)**({b}/4)", f"sign({a})*({b})"][rng.integers(12)]


def test_random_specs_parameter_derivatives_and_autograd(tmp_path):
    """Fresh random specs over inputs x, y and parameters p (one value per point) and q (one shared
    value): on the C and PyTorch backends, derivatives="total" by p and q against central
    differences of the spec's text in NumPy, and autograd (x, p and q requiring grad) against the
    weighted sums of those Jacobian columns."""
    import numpy as np
    import torch

    import modelc

    rng = np.random.default_rng()
    oracle = _oracle()
    B, h = 40, 1e-6
    tested = 0
    for k in range(8):
        if tested == 2:
            break
        exprs = [_random_with_parameters(rng, 3) for _ in range(4)]
        spec = tmp_path / f"p{k}.yaml"
        spec.write_text("models:\n  r:\n    parameters: {p: {default: 0.7}, q: {default: -0.3}}\n"
                        "    inputs: {x: {}, y: {}}\n    outputs: {%s}\n    equations:\n%s" % (
                            ", ".join(f"o{i}: {{}}" for i in range(4)),
                            "".join(f"      o{i}: {e}\n" for i, e in enumerate(exprs))))
        module = modelc.load(spec, "r")
        x, y, p = rng.uniform(-2, 2, (3, B))
        q = float(rng.uniform(-2, 2))

        def numpy_at(pv, qv):
            env = {**oracle, "x": x, "y": y, "p": pv, "q": qv}
            with np.errstate(all="ignore"):
                return np.stack([np.broadcast_to(eval(e, {"__builtins__": {}}, env), (B,)) for e in exprs])

        want = numpy_at(p, q)
        if np.isfinite(want).mean() < 0.75:  # overflowing powers of powers: draw another spec
            continue
        tested += 1
        fds = {}
        for name, (plus, minus) in {"p": (numpy_at(p + h, q), numpy_at(p - h, q)),
                                    "q": (numpy_at(p, q + h), numpy_at(p, q - h))}.items():
            smooth = np.isfinite(plus - minus) & (np.abs(plus + minus - 2 * want) < 1e-6 * (1 + np.abs(want)))
            fds[name] = ((plus - minus) / (2 * h), smooth)
        for backend in ("c", "torch"):
            m = module.Model(dtype=torch.float64, backend=backend, q=q)
            out = m({"x": torch.tensor(x), "y": torch.tensor(y)}, derivatives="total", p=torch.tensor(p))
            got = np.stack([out[f"o{i}"].numpy().reshape(B) for i in range(4)])
            fin = np.isfinite(want)
            assert np.all(np.abs(got - want)[fin] <= 1e-9 * (1 + np.abs(want[fin]))), (backend, exprs)
            J = {n: np.stack([out.jacobian[f"o{i}", n].numpy().reshape(B) for i in range(4)]) for n in ("x", "p", "q")}
            for name, (fd, smooth) in fds.items():
                ok = smooth & np.isfinite(J[name])
                assert ok.sum() >= B, (backend, name, exprs)  # most of the 4 x B entries are smooth
                assert np.all(np.abs(J[name] - fd)[ok] <= 1e-4 * (1 + np.abs(fd[ok]))), (backend, name, exprs)
            xt, pt = torch.tensor(x, requires_grad=True), torch.tensor(p, requires_grad=True)
            qt = torch.tensor(q, dtype=torch.float64, requires_grad=True)
            w = rng.normal(size=(4, B))
            res = m({"x": xt, "y": torch.tensor(y)}, p=pt, q=qt)
            sum((torch.tensor(w[i]) * res[f"o{i}"].reshape(B)).sum() for i in range(4)).backward()
            finite = np.isfinite(J["x"]).all(0) & np.isfinite(J["p"]).all(0) & np.isfinite(J["q"]).all(0)
            np.testing.assert_allclose(xt.grad.numpy()[finite], (w * J["x"]).sum(0)[finite], rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(pt.grad.numpy()[finite], (w * J["p"]).sum(0)[finite], rtol=1e-10, atol=1e-12)
            if finite.all():
                np.testing.assert_allclose(float(qt.grad), (w * J["q"]).sum(), rtol=1e-9, atol=1e-12)
    assert tested == 2, "random specs kept overflowing"


def _random_contraction(rng, n):
    """Residuals u_i - old(u_i) - F_i(u, x, y) with F a contraction in u (each term a bounded-slope
    function of one unknown, or a product of two tanh, scaled so the slopes sum below 0.9): one
    root, found by fixed-point iteration in NumPy. Each F_i reads a random subset of the unknowns,
    so the Jacobian's sparsity pattern is random too."""
    slopes = {"tanh({u})": 1.0, "({u})/sqrt(1 + ({u})**2)": 1.0, "log(1 + ({u})**2)/2": 0.5,
              "macaulay(tanh({u}))": 1.0, "min(tanh({u}), 0.5)": 1.0}
    forcing = ["x", "y", "tanh(x*y)", "exp(x/4)", "sqrt(1 + y**2)"]
    terms = []
    for i in range(n):
        reads = [j for j in range(n) if rng.random() < 0.5] or [int(rng.integers(n))]
        parts = []
        for j in reads:
            kind = list(slopes)[rng.integers(len(slopes))]
            a = rng.uniform(-1, 1) * 0.8 / len(reads) / slopes[kind]
            parts.append(f"{a:.4f}*" + kind.format(u=f"u{j}*{rng.uniform(-1, 1):.3f} + {forcing[rng.integers(5)]}"))
        if len(reads) >= 2 and rng.random() < 0.5:
            parts.append(f"{0.1 / len(reads):.4f}*tanh(u{reads[0]})*tanh(u{reads[1]})")
        parts.append(forcing[rng.integers(5)])
        terms.append(" + ".join(parts))
    return terms


def test_random_implicit_systems_match_a_fixed_point_oracle(tmp_path):
    """Fresh random coupled systems of 2 to 6 scalar unknowns with random sparsity (the general
    path: the C backend's Newton step unrolled over the Jacobian's nonzeros, the LU solves of the
    PyTorch and Triton backends): the roots against NumPy's fixed-point iteration (1e-9), and the
    implicit-function derivatives d u / d x against central differences of those roots (1e-5)."""
    import numpy as np
    import torch

    import modelc

    rng = np.random.default_rng()
    env = dict(exp=np.exp, tanh=np.tanh, sqrt=np.sqrt, log=np.log, macaulay=lambda a: np.maximum(a, 0.0),
               min=np.minimum)
    B, h = 16, 1e-6
    for k in range(2):
        n = int(rng.integers(2, 7))
        terms = _random_contraction(rng, n)
        spec = tmp_path / f"sys{k}.yaml"
        spec.write_text("models:\n  s:\n    inputs: {x: {}, y: {}}\n    implicit:\n      unknowns:\n"
                        + "".join(f"        u{i}: {{var: state/u{i}}}\n" for i in range(n)) + "      residuals:\n"
                        + "".join(f"        u{i}: u{i} - old(u{i}) - ({t})\n" for i, t in enumerate(terms))
                        + "      solver: {rtol: 1.0e-12, atol: 1.0e-12, max_iter: 60}\n")
        module = modelc.load(spec, "s")
        x, y = rng.uniform(-2, 2, (2, B))
        old = rng.uniform(-1, 1, (n, B))

        def root(xv):
            u = old.copy()
            for _ in range(300):  # slopes below 0.9: 300 iterations are far below 1e-12
                e = {**env, "x": xv, "y": y, **{f"u{j}": u[j] for j in range(n)}}
                u = old + np.stack([np.broadcast_to(eval(t, {"__builtins__": {}}, e), (B,)) for t in terms])
            return u

        want, up, um = root(x), root(x + h), root(x - h)
        fd = (up - um) / (2 * h)
        smooth = np.abs(up + um - 2 * want) < 1e-7 * (1 + np.abs(want))  # away from the kinks
        inputs = {"x": torch.tensor(x), "y": torch.tensor(y),
                  **{f"old_state/u{j}": torch.tensor(old[j]) for j in range(n)}}
        for backend in ("c", "torch", "triton"):
            out = module.Model(dtype=torch.float64, backend=backend)(inputs, derivatives=True)
            assert bool(out.status.converged.all()), (backend, terms)
            got = np.stack([out[f"state/u{j}"].numpy().reshape(B) for j in range(n)])
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10, err_msg=f"{backend}: {terms}")
            J = np.stack([out.jacobian[f"state/u{j}", "x"].numpy().reshape(B) for j in range(n)])
            np.testing.assert_allclose(J[smooth], fd[smooth], rtol=1e-5, atol=1e-6, err_msg=f"{backend}: {terms}")


def test_implicit_model_reading_shared_tensor_defines(tmp_path):
    """An implicit model whose residual reads a define four times, N = Q/(1 + |Q|) with Q an inverse
    of a tensor of rational entries (267,478 nodes as a tree: refused by the old tree-size limit;
    compiling it with that limit lifted took 206 s, the passes walking trees: now a few seconds):
    the roots on the C, PyTorch and Triton backends against a NumPy fixed-point iteration over full
    3x3 tensors, and d(T, g)/d a against central differences of those roots."""
    import numpy as np
    import torch

    import modelc
    from fe_util import SHARED_DEFINES
    from modelc.runtime.mandel import full_to_sr2, sr2_to_full

    spec = tmp_path / "shared.yaml"
    spec.write_text(SHARED_DEFINES)
    module = modelc.load(spec, "s")

    def full(m):  # the runtime's Mandel conversions (tests/runtime/test_mandel.py checks them)
        return sr2_to_full(torch.from_numpy(m)).numpy()

    def mandel(A):
        return full_to_sr2(torch.from_numpy(A)).numpy()

    def dev(A):
        return A - np.trace(A, axis1=-2, axis2=-1)[:, None, None] / 3 * np.eye(3)

    def ddot(A, C):
        return np.einsum("bij,bij->b", A, C)

    def solve(a6, T0, g0):
        A = full(a6)
        AA = ddot(A, A)[:, None, None] * A  # ddot(outer(a, a), a)
        M = AA / (1 + np.sqrt(ddot(AA, AA)))[:, None, None]
        Q = np.linalg.inv(3 * np.eye(3) + 0.1 * dev(M))
        N = Q / (1 + np.sqrt(ddot(Q, Q)))[:, None, None]
        T, g = full(T0), g0.copy()
        for _ in range(200):
            T, g = (full(T0) + (-0.1615 * np.tanh(ddot(dev(T), N))[:, None, None] * N
                                + 0.2 * np.tanh(g)[:, None, None] * N),
                    g0 + 0.1 * np.tanh(np.sqrt(ddot(dev(T), dev(T)))))
        return np.concatenate([mandel(T), g[:, None]], 1)

    rng = np.random.default_rng()
    B, h = 12, 1e-6
    a, T0 = rng.normal(size=(2, B, 6))
    g0 = rng.uniform(-1, 1, B)
    want = solve(a, T0, g0)
    fd = [(solve(a + h * e, T0, g0) - solve(a - h * e, T0, g0)) / (2 * h) for e in np.eye(6)]
    inputs = {"forces/a": torch.tensor(a), "old_state/T": torch.tensor(T0), "old_state/g": torch.tensor(g0)}
    for backend in ("c", "torch", "triton"):
        out = module.Model(dtype=torch.float64, backend=backend)(inputs, derivatives=True)
        assert bool(out.status.converged.all()), backend
        got = np.concatenate([out["state/T"].numpy(), out["state/g"].numpy().reshape(B, 1)], 1)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10, err_msg=backend)
        J = np.concatenate([out.jacobian["state/T", "forces/a"].numpy(),
                            out.jacobian["state/g", "forces/a"].numpy().reshape(B, 1, 6)], 1)
        for c in range(6):
            np.testing.assert_allclose(J[:, :, c], fd[c], rtol=1e-5, atol=1e-6, err_msg=f"{backend}, a[{c}]")


def test_random_compositions_match_numpy(tmp_path):
    """Fresh random compositions of the kind the library is made of: an implicit update whose
    residual reads an explicit rate model (``uses``: evaluated inside the Newton loop, at every
    iterate) and an explicit model after it, composed with ``keep``. On the C, PyTorch and Triton
    backends: the state and the output against NumPy (a fixed-point iteration: the rate's slope in
    u is below 1), their derivatives by x against central differences."""
    import re

    import numpy as np
    import torch

    import modelc

    rng = np.random.default_rng()
    env = _oracle()
    B, h = 20, 1e-6
    for k in range(2):
        gx = re.sub(r"\by\b", "x", _random_right_side(rng, 2))
        a, b, c = np.round(rng.uniform(-1, 1, 3), 3)
        rate = f"{a}*tanh({b}*u + {gx}) + {c}*u/sqrt(1 + u**2)"  # slope in u below 2: 0.4*rate contracts
        post = re.sub(r"\by\b", "u", _random_right_side(rng, 3))
        spec = tmp_path / f"c{k}.yaml"
        spec.write_text(f"""models:
  rate:
    inputs: {{u: {{var: state/u}}, x: {{var: forces/x}}}}
    outputs: {{r: {{var: state/r}}}}
    equations: {{r: "{rate}"}}
  update:
    inputs: {{r: {{var: state/r}}}}
    implicit:
      unknowns: {{u: {{var: state/u}}}}
      residuals: {{u: u - old(u) - 0.4*r}}
      uses: [rate]
      solver: {{rtol: 1.0e-12, atol: 1.0e-12, max_iter: 60}}
  post:
    inputs: {{u: {{var: state/u}}, x: {{var: forces/x}}}}
    outputs: {{w: {{var: state/w}}}}
    equations: {{w: "{post}"}}
compose:
  both:
    models: [update, post]
    keep: [state/u]
""")
        module = modelc.load(spec, "both")
        x, old = rng.uniform(-2, 2, B), rng.uniform(-1, 1, B)

        def solve(xv):
            u = old.copy()
            with np.errstate(all="ignore"):
                for _ in range(300):
                    u = old + 0.4 * np.broadcast_to(eval(rate, {"__builtins__": {}}, {**env, "u": u, "x": xv}), (B,))
                return np.stack([u, np.broadcast_to(eval(post, {"__builtins__": {}}, {**env, "u": u, "x": xv}), (B,))])

        want, up, um = solve(x), solve(x + h), solve(x - h)
        fd = (up - um) / (2 * h)
        smooth = np.isfinite(fd) & (np.abs(up + um - 2 * want) < 1e-7 * (1 + np.abs(want)))
        for backend in ("c", "torch", "triton"):
            m = module.Model(dtype=torch.float64, backend=backend)
            assert {v.name for v in m.INPUTS} == {"forces/x", "old_state/u"}
            out = m({"forces/x": torch.tensor(x), "old_state/u": torch.tensor(old)}, derivatives=True)
            assert bool(out.status.converged.all()), (backend, rate, post)
            got = np.stack([out[v].numpy().reshape(B) for v in ("state/u", "state/w")])
            fin = np.isfinite(want)
            np.testing.assert_allclose(got[fin], want[fin], rtol=1e-9, atol=1e-10, err_msg=f"{backend}: {rate}; {post}")
            J = np.stack([out.jacobian[v, "forces/x"].numpy().reshape(B) for v in ("state/u", "state/w")])
            np.testing.assert_allclose(J[smooth], fd[smooth], rtol=1e-5, atol=1e-6, err_msg=f"{backend}: {rate}; {post}")
