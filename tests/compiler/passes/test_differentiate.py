"""Differentiation: leaf partials, the chain rule (the seed's four total derivatives), finite
differences of composed functions, implicit-model bookkeeping."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from modelc.interpret import interpret
from modelc.ir import ComposeDecl
from modelc.passes.compose import compose
from modelc.passes.differentiate import differentiable, differentiate
from modelc.passes.lower import lower
from modelc.passes.symbols import partial_symbol
from modelc.runtime.types import SR2
from passes_helpers import central_fd, leaf, param, psym, seed_models, sym, var

X = ("x1", "x2", "x3", "x4")


def _symbolic_seed():
    """The seed's example with undefined functions f, g, h."""
    F, G, H = sp.Function("F"), sp.Function("G"), sp.Function("H")
    x1, x2, x3, x4, y1, y2 = (sym(n) for n in ("x1", "x2", "x3", "x4", "y1", "y2"))
    f = leaf("f", [var("x1"), var("x2")], {var("y1"): F(x1, x2)})
    g = leaf("g", [var("y1"), var("x3")], {var("y2"): G(y1, x3)})
    h = leaf("h", [var("y1"), var("y2"), var("x4")], {var("y"): H(y1, y2, x4)})
    return f, g, h


def _expand_totals(model):
    """{total symbol: expression over leaf partial symbols only}."""
    defs = {}
    variables = {v.name: v for s in model.submodels for v in differentiable(s) + s.outputs}
    for p in model.partials:
        for a, row in zip(variables[p.of].symbols, p.block):
            for b, e in zip(variables[p.wrt].symbols, row):
                defs[partial_symbol(model.name, a, b)] = sp.sympify(e).xreplace(defs)
    return defs


def test_seed_four_total_derivatives():
    f, g, h = _symbolic_seed()
    m = differentiate(compose(ComposeDecl("r", ("h", "g", "f")), {"f": f, "g": g, "h": h}))
    y, y1, y2, x1, x2, x3, x4 = (sym(n) for n in ("y", "y1", "y2", "x1", "x2", "x3", "x4"))
    d = lambda model, a, b: partial_symbol(model, a, b)  # noqa: E731
    hy1, hy2, hx4 = d("h", y, y1), d("h", y, y2), d("h", y, x4)
    gy1, gx3 = d("g", y2, y1), d("g", y2, x3)
    fx1, fx2 = d("f", y1, x1), d("f", y1, x2)
    seed = {  # the seed's formulas, verbatim
        "x1": (hy1 + hy2 * gy1) * fx1,
        "x2": (hy1 + hy2 * gy1) * fx2,
        "x3": hy2 * gx3,
        "x4": hx4,
    }
    defs = _expand_totals(m)
    totals = {p.wrt: p.block[0][0] for p in m.partials if p.of == "y"}
    assert set(totals) == set(X)
    for x, formula in seed.items():
        assert sp.expand(sp.sympify(totals[x]).xreplace(defs) - formula) == 0, x
    # and the leaf partials are what sympy says
    leafs = {s.name: s for s in m.submodels}
    hb = {p.wrt: p.block[0][0] for p in leafs["h"].partials}
    assert hb["y1"] == sp.diff(h.equations[0].components[0], y1)
    assert set(hb) == {"y1", "y2", "x4"}  # structural zeros absent


def test_seed_totals_equal_direct_derivative_of_the_composed_function():
    f, g, h = seed_models()
    m = differentiate(compose(ComposeDecl("r", ("f", "g", "h")), {"f": f, "g": g, "h": h}))
    # substitute: leaf partial symbols -> leaf expressions, y1/y2 -> their definitions
    x1, x2, x3 = sym("x1"), sym("x2"), sym("x3")
    y1e = f.equations[0].components[0]
    y2e = g.equations[0].components[0].xreplace({sym("y1"): y1e})
    env = {sym("y1"): y1e, sym("y2"): y2e}
    leaf_defs = {}
    for s in m.submodels:
        for p in s.partials:
            wrt = next(v for v in differentiable(s) if v.name == p.wrt)  # an input or a parameter $p
            a, b = s.variable(p.of).symbols[0], wrt.symbols[0]
            leaf_defs[partial_symbol(s.name, a, b)] = sp.sympify(p.block[0][0]).xreplace(env)
    defs = _expand_totals(m)
    ye = h.equations[0].components[0].xreplace(env)
    seen = set()
    for p in m.partials:
        if p.of == "y":
            total = sp.sympify(p.block[0][0]).xreplace(defs).xreplace(leaf_defs).xreplace(env)
            assert sp.simplify(total - sp.diff(ye, sym(p.wrt))) == 0  # sym("$a") is parameter a's symbol
            seen.add(p.wrt)
    assert {"x1", "x2", "x3", "x4"} <= seen and any(w.startswith("$") for w in seen)


def _tensor_chain():
    eps = sym("forces/E", SR2)
    mu, lam = psym("mu"), psym("lambda")
    tr = eps[0] + eps[1] + eps[2]
    s = tuple(2 * mu * eps[i] + (lam * tr if i < 3 else 0) for i in range(6))
    a = leaf("elastic", [var("forces/E", SR2)], {var("state/S", SR2): s}, [param("mu", 1.3), param("lambda", 0.8)])
    S = sym("state/S", SR2)
    b = leaf("norm", [var("state/S", SR2)], {var("state/q"): sp.sqrt(1 + sum(c ** 2 for c in S))})
    q = sym("state/q")
    c = leaf("scale", [var("state/S", SR2), var("state/q"), var("forces/t")],
             {var("state/T", SR2): tuple(S[i] * q * sp.exp(-sym("forces/t") * S[i]) for i in range(6))})
    return {"elastic": a, "norm": b, "scale": c}


@pytest.mark.parametrize("nested", [False, True])
def test_composed_derivatives_match_finite_differences(nested):
    rng = np.random.default_rng()
    if nested:
        f, g, h = seed_models()
        inner = compose(ComposeDecl("fg", ("g", "f"), keep=("y1",)), {"f": f, "g": g})
        model = compose(ComposeDecl("r", ("h", "fg")), {"fg": inner, "h": h})
        x = {n: rng.uniform(-1, 1, size=7) for n in X}
    else:
        model = compose(ComposeDecl("t", ("scale", "norm", "elastic"), keep=("state/q",)), _tensor_chain())
        x = {"forces/E": rng.uniform(-0.5, 0.5, size=(7, 6)), "forces/t": rng.uniform(0, 1, size=7)}
    model = differentiate(model)
    value = lower(differentiate(model), derivatives=False)
    full = lower(differentiate(model), derivatives=True)
    assert not value.derivatives
    res, der, _ = interpret(full, x)
    res0, _, _ = interpret(value, x)
    for o in model.outputs:
        np.testing.assert_allclose(res[o.name], res0[o.name], rtol=1e-14)
        for i in model.inputs:
            fd = central_fd(lambda xx: interpret(value, xx)[0][o.name].reshape(7, -1), x, i.name)
            got = der.get((o.name, i.name), np.zeros_like(fd))
            np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8, err_msg=f"d{o.name}/d{i.name}")


@pytest.mark.parametrize("select", [False, True])
def test_parameter_derivatives_match_finite_differences(select):
    """d outputs / d parameters (the chain rule through a composition, parameters shared by several
    models) against central differences in the parameters; only what is asked for is computed."""
    rng = np.random.default_rng()
    model = differentiate(compose(ComposeDecl("t", ("scale", "norm", "elastic"), keep=("state/q",)),
                                  _tensor_chain()))
    x = {"forces/E": rng.uniform(-0.5, 0.5, size=(7, 6)), "forces/t": rng.uniform(0, 1, size=7)}
    prm = {"mu": rng.uniform(1, 2, size=7), "lambda": rng.uniform(0.5, 1, size=7)}
    if select:
        prog = lower(model, derivatives=True, select=(("state/T",), ("$mu",)))
        assert set(prog.derivatives) == {("state/T", "$mu")} and prog.jacobian_wrt == ("$mu",)
    else:
        prog = lower(model, derivatives=True, parameters=True)
        assert prog.jacobian_wrt == ("forces/E", "forces/t", "$mu", "$lambda")
        assert not any(w.startswith("$") for _, w in lower(model, derivatives=True).derivatives)
    value = lower(model, derivatives=False)
    _, der, _ = interpret(prog, x, prm)
    for o in ("state/T", "state/q"):
        for name in (("mu",) if select else ("mu", "lambda")):
            def f(pp):
                return interpret(value, x, {**prm, name: pp[name]})[0][o].reshape(7, -1)
            fd = central_fd(f, {name: prm[name]}, name)
            got = der.get((o, "$" + name))
            if select and o != "state/T":
                assert got is None
                continue
            np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8, err_msg=f"d{o}/d{name}")


def test_differentiate_is_idempotent_and_float32():
    f, g, h = seed_models()
    m = differentiate(compose(ComposeDecl("r", ("f", "g", "h")), {"f": f, "g": g, "h": h}))
    assert differentiate(m) is m
    rng = np.random.default_rng()
    x64 = {n: rng.uniform(-1, 1, size=5) for n in X}
    x32 = {n: v.astype(np.float32) for n, v in x64.items()}
    P = lower(differentiate(m), derivatives=True)
    r64, d64, _ = interpret(P, x64)
    r32, d32, _ = interpret(P, x32)
    assert r32["y"].dtype == np.float32 and d32[("y", "x1")].dtype == np.float32
    np.testing.assert_allclose(r32["y"], r64["y"], rtol=1e-4, atol=1e-5)
    for k in d64:
        np.testing.assert_allclose(d32[k], d64[k], rtol=1e-3, atol=1e-4)


def _flow_chain(traceless: bool):
    """Ep = g(eps) * dev(eps) (traceless in eps) or g(eps) * eps (not), then the isotropic
    elasticity S = 2 mu (eps - Ep) + lambda tr(eps - Ep) I, composed."""
    eps, Ep = sym("forces/E", SR2), sym("state/Ep", SR2)
    mu, lam = psym("mu"), psym("lambda")
    tr = eps[0] + eps[1] + eps[2]
    g = sp.sqrt(1 + sum(c ** 2 for c in eps)) / 3
    dev = tuple(eps[i] - (tr / 3 if i < 3 else 0) for i in range(6))
    flow = leaf("flow", [var("forces/E", SR2)],
                {var("state/Ep", SR2): tuple(g * (d if traceless else e) for d, e in zip(dev, eps))})
    el = tuple(eps[i] - Ep[i] for i in range(6))
    tr_el = el[0] + el[1] + el[2]
    elastic = leaf("elastic", [var("forces/E", SR2), var("state/Ep", SR2)],
                   {var("state/S", SR2): tuple(2 * mu * el[i] + (lam * tr_el if i < 3 else 0) for i in range(6))},
                   [param("mu", 1.3), param("lambda", 0.8)])
    return compose(ComposeDecl("c", ("elastic", "flow"), keep=("state/Ep",)), {"flow": flow, "elastic": elastic})


@pytest.mark.parametrize("traceless", [True, False])
def test_traceless_flow_drops_the_trace_terms_of_the_chain_rule(traceless):
    """An SR2 whose trace does not depend on an input is marked traceless in it; a product
    P(S, Ep) T(Ep, eps) then takes lambda * tr(dEp/deps) (zero) out: rows 0-2 of the composed
    tangent read one entry of P's diagonal block instead of three. The derivatives still match
    central differences either way."""
    model = differentiate(_flow_chain(traceless))
    flow = next(s for s in model.submodels if s.name == "flow")
    elastic = next(s for s in model.submodels if s.name == "elastic")
    assert [p.traceless for p in flow.partials] == [traceless]
    assert not any(p.traceless for p in elastic.partials)  # S's trace reads eps and Ep
    total = next(p for p in model.partials if (p.of, p.wrt) == ("state/S", "forces/E"))
    Ep, E = sym("state/Ep", SR2), sym("forces/E", SR2)
    for i in range(3):
        for j in range(6):
            diagonal = {partial_symbol("flow", Ep[k], E[j]) for k in range(3)}  # dEp_k/dE_j, k < 3
            read = sp.sympify(total.block[i][j]).free_symbols & diagonal
            assert len(read) == (1 if traceless else 3), (i, j, total.block[i][j])
    rng = np.random.default_rng()
    x = {"forces/E": rng.uniform(-0.5, 0.5, size=(7, 6))}
    value, full = lower(model, derivatives=False), lower(model, derivatives=True)
    _, der, _ = interpret(full, x)
    for o in ("state/S", "state/Ep"):
        fd = central_fd(lambda xx: interpret(value, xx)[0][o].reshape(7, -1), x, "forces/E")
        np.testing.assert_allclose(der[(o, "forces/E")], fd, rtol=1e-6, atol=1e-8, err_msg=o)


def _direction_chain(deviatoric: bool):
    """S = 2 mu (eps - Ep) + lambda tr(eps - Ep) I, then a direction N = dev(S) / sqrt(1 + |dev S|^2)
    (blind to S's trace) or N = S / sqrt(1 + |S|^2) (not), composed."""
    eps, Ep, S = sym("forces/E", SR2), sym("forces/Ep", SR2), sym("state/S", SR2)
    mu, lam = psym("mu"), psym("lambda")
    el = tuple(eps[i] - Ep[i] for i in range(6))
    tr_el = el[0] + el[1] + el[2]
    elastic = leaf("elastic", [var("forces/E", SR2), var("forces/Ep", SR2)],
                   {var("state/S", SR2): tuple(2 * mu * el[i] + (lam * tr_el if i < 3 else 0) for i in range(6))},
                   [param("mu", 1.3), param("lambda", 0.8)])
    tr = S[0] + S[1] + S[2]
    d = tuple(S[i] - (tr / 3 if i < 3 else 0) for i in range(6)) if deviatoric else tuple(S)
    norm = sp.sqrt(1 + sum(c ** 2 for c in d))
    direction = leaf("direction", [var("state/S", SR2)], {var("state/N", SR2): tuple(c / norm for c in d)})
    return compose(ComposeDecl("c", ("direction", "elastic"), keep=("state/S",)),
                   {"elastic": elastic, "direction": direction})


@pytest.mark.parametrize("deviatoric", [True, False])
def test_direction_blind_to_the_trace_drops_lambda_from_the_chain_rule(deviatoric):
    """A direction that reads the stress deviator only is marked blind to the stress's trace; the
    product P(N, S) T(S, Ep) then takes each column's common entry (-lambda) out of T's first three
    rows, so d N / d Ep no longer involves lambda at all (it cancelled only numerically before).
    Derivatives match central differences either way."""
    model = differentiate(_direction_chain(deviatoric))
    subs = {s.name: s for s in model.submodels}
    assert [p.blind for p in subs["direction"].partials] == [deviatoric]
    assert not any(p.blind for p in subs["elastic"].partials if p.wrt == "forces/Ep")
    lam = psym("lambda")
    values = {}
    for s in model.submodels:
        for p in s.partials:
            wrt = next(v for v in differentiable(s) if v.name == p.wrt)
            for a, row in zip(s.variable(p.of).symbols, p.block):
                for b, e in zip(wrt.symbols, row):
                    values[partial_symbol(s.name, a, b)] = sp.sympify(e)
    total = next(p for p in model.partials if (p.of, p.wrt) == ("state/N", "forces/Ep"))
    reads_lambda = any(lam in sp.sympify(e).xreplace(values).free_symbols for row in total.block for e in row)
    assert reads_lambda is not deviatoric
    rng = np.random.default_rng()
    x = {"forces/E": rng.uniform(-0.5, 0.5, size=(7, 6)), "forces/Ep": rng.uniform(-0.2, 0.2, size=(7, 6))}
    value, full = lower(model, derivatives=False), lower(model, derivatives=True)
    _, der, _ = interpret(full, x)
    for i in ("forces/E", "forces/Ep"):
        fd = central_fd(lambda xx: interpret(value, xx)[0]["state/N"].reshape(7, -1), x, i)
        np.testing.assert_allclose(der[("state/N", i)], fd, rtol=1e-6, atol=1e-8, err_msg=i)


def test_blind_derivative_of_a_traceless_total_is_taken_once():
    """P(N, v) blind to v's trace times a traceless T(v, eps): either rewrite alone keeps the product,
    both together would not (P' T' = P T + 3 a c^T). The derivatives match central differences."""
    eps, v = sym("forces/E", SR2), sym("state/v", SR2)
    mu, lam = psym("mu"), psym("lambda")
    tr = eps[0] + eps[1] + eps[2]
    # v = 2 mu dev(eps): traceless in eps, its columns (2/3, -1/3, -1/3) 2 mu share an entry too
    first = leaf("first", [var("forces/E", SR2)],
                 {var("state/v", SR2): tuple(2 * mu * (eps[i] - (tr / 3 if i < 3 else 0)) for i in range(6))},
                 [param("mu", 1.3)])
    trv = v[0] + v[1] + v[2]
    # N = (1 + lambda) dev(v): rows of P(N, v) like (2/3, -1/3, -1/3) (1 + lambda), a shared entry that
    # the traceless rewrite takes out, and blind to v's trace
    d = tuple(v[i] - (trv / 3 if i < 3 else 0) for i in range(6))
    second = leaf("second", [var("state/v", SR2)], {var("state/N", SR2): tuple(c * (1 + lam) for c in d)},
                  [param("lambda", 0.8)])
    model = differentiate(compose(ComposeDecl("c", ("second", "first"), keep=("state/v",)),
                                  {"first": first, "second": second}))
    subs = {s.name: s for s in model.submodels}
    assert [p.traceless for p in subs["first"].partials if p.wrt == "forces/E"] == [True]
    assert [p.blind for p in subs["second"].partials if p.wrt == "state/v"] == [True]
    _assert_matches_fd(model, "state/N", 0.5, 7)


def test_blind_proved_by_a_shift_along_the_identity_where_expansion_gives_up(monkeypatch):
    """A direction of dev(S) too large for the row sums to be examined (more distinct
    subexpressions than _TRACE_NODES, lowered here to 100) is still found blind: shifting S's
    normal components by a fresh c leaves its components free of c. One that reads tr(S) (the same
    size) is not, nor is a small one that does; the small deviatoric one is blind by either route.
    At the real threshold the row sums are examined: 2561 operations as a tree (over the old
    count_ops bound of 2000) but 220 distinct subexpressions."""
    from modelc.passes import differentiate as D
    from modelc.symdag import distinct_nodes

    S = sym("state/S", SR2)
    x = var("state/S", SR2)
    tr = S[0] + S[1] + S[2]
    d = [S[i] - (tr / 3 if i < 3 else 0) for i in range(6)]
    nrm = sp.sqrt(sum(c ** 2 for c in d))
    big = sum(sp.Rational(1, k) * nrm ** k for k in range(1, 12))  # a hardening-like polynomial of |dev S|
    for comps, blind in (([c / nrm * big for c in d], True), ([c / nrm * big + tr for c in d], False),
                         (list(d), True), ([c + tr ** 2 for c in d], False)):
        block = tuple(tuple(sp.diff(c, s) for s in S) for c in comps)
        assert D._blind(x, block, comps) is blind
        if blind and comps[0] is not d[0]:
            row = sp.Add(*block[0][:3])
            assert sp.count_ops(row) > 2000 and distinct_nodes((row,), 10**6) < D._TRACE_NODES
            assert D._blind(x, block)  # the row sums alone decide it at the real threshold
            with monkeypatch.context() as m:  # (but not where they are too large to examine)
                m.setattr(D, "_TRACE_NODES", 100)
                assert distinct_nodes((row,), 10**6) > D._TRACE_NODES and not D._blind(x, block)
                assert D._blind(x, block, comps)
    assert D._blind(x, tuple(tuple(sp.diff(c, s) for s in S) for c in d))


@pytest.mark.parametrize("traceless", [True, False])
def test_traceless_decided_without_multiplying_the_trace_out(traceless):
    """Ep = g**12 dev(eps) (or g**12 eps), g = 1 + tr(eps)/7 + eps:eps/5: the trace was expanded to
    see which symbols it reads, and g**12 multiplies out into about 3e5 terms (a compile of such a
    spec ran for minutes). It is now decided by the derivatives of the trace being identically zero
    (symdag.Identity): traceless exactly when it is, and the derivatives match central differences."""
    eps = sym("forces/E", SR2)
    tr = eps[0] + eps[1] + eps[2]
    g = 1 + tr / 7 + sum(c ** 2 for c in eps) / 5
    dev = tuple(eps[i] - (tr / 3 if i < 3 else 0) for i in range(6))
    flow = leaf("flow", [var("forces/E", SR2)],
                {var("state/Ep", SR2): tuple(g ** 12 * (d if traceless else e) for d, e in zip(dev, eps))})
    model = differentiate(flow)
    assert [p.traceless for p in model.partials] == [traceless]
    _assert_matches_fd(model, "state/Ep", 0.2, 5)


def _assert_matches_fd(model, out: str, scale: float, points: int) -> None:
    """d out / d forces/E of ``model`` (interpreted) against central differences at random strains."""
    x = {"forces/E": np.random.default_rng().uniform(-scale, scale, size=(points, 6))}
    value, full = lower(model, derivatives=False), lower(model, derivatives=True)
    _, der, _ = interpret(full, x)
    fd = central_fd(lambda xx: interpret(value, xx)[0][out].reshape(points, -1), x, "forces/E")
    np.testing.assert_allclose(der[(out, "forces/E")], fd, rtol=1e-6, atol=1e-8)
