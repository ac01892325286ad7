"""modelc.passes.variants: which variants (value, tangent, Jacobian, total) a program serves, the
statements each needs (masks counted by hand on small hand-built programs), dead statements dropped,
a linear solve split by right-hand-side columns, segments kept at Newton solves, and every variant's
view computing what the unsplit program computes (the reference interpreter as the oracle)."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from modelc.errors import InternalError
from modelc.interpret import interpret
from modelc.ir import Assign, LinearSolve, Newton, Parameter, Program, SolverOptions, Variable, Variant, view
from modelc.passes.variants import split_variants, standard_variants
from modelc.runtime.types import Scalar

XV, ZV, YV = Variable("forces/x", Scalar), Variable("forces/z", Scalar), Variable("state/y", Scalar)
PA = Parameter("a", Scalar, (1.5,))
(X,), (Z,), (Y,), (A,) = XV.symbols, ZV.symbols, YV.symbols, PA.symbols
T0, T1, T2, DX, DZ, DA = sp.symbols("t0 t1 t2 dx dz da", real=True)
TANGENT = (("state/y",), ("forces/x",))


def _program(total: bool = True) -> Program:
    """y = a x + z^2 and one linear solve whose three columns are the blocks d y / d x, d z, d $a (the
    values need not be derivatives: the pass reads only which symbols each block needs). t2 is dead."""
    body = (Assign(T0, A * X), Assign(T1, sp.sin(X)), Assign(T2, sp.exp(Z)), Assign(Y, T0 + Z ** 2),
            LinearSolve(A=((2 + X ** 2,),), B=((T1, 2 * Z, X),), targets=((DX, DZ, DA),)))
    derivs = {("state/y", "forces/x"): ((DX,),), ("state/y", "forces/z"): ((DZ,),), ("state/y", "$a"): ((DA,),)}
    return Program("p", (XV, ZV), (PA,), (YV,), body, {"state/y": (Y,)}, derivs,
                   jacobian_wrt=("forces/x", "forces/z", "$a") if total else None)


def test_standard_variants():
    p = _program()
    assert standard_variants(p, TANGENT) == (
        Variant("value", 1, False), Variant("tangent", 2, True, ("state/y",), ("forces/x",)),
        Variant("jacobian", 4, True), Variant("total", 8, True, None, ("forces/x", "forces/z", "$a")))
    assert [v.name for v in standard_variants(p, None)] == ["value", "jacobian", "total"]
    assert standard_variants(_program(total=False), None) == (Variant("value", 1, False), Variant("jacobian", 4, True))


def test_masks_and_column_groups():
    """value needs t0 and y; the tangent's column (t1, dx) is needed by tangent, Jacobian and total
    (2 | 4 | 8 = 14), dz by Jacobian and total (12), da by total alone (8); the solve is split into
    one per group, most variants first; t2 is dropped."""
    p = _program()
    out = split_variants(p, standard_variants(p, TANGENT))
    assert out.variants == standard_variants(p, TANGENT)
    assert out.masks == (15, 15, 14, 14, 12, 8)
    assert out.body[:3] == (Assign(T0, A * X), Assign(Y, T0 + Z ** 2), Assign(T1, sp.sin(X)))
    solves = out.body[3:]
    assert all(isinstance(s, LinearSolve) and s.A == ((2 + X ** 2,),) for s in solves)
    assert [(s.B, s.targets) for s in solves] == [(((T1,),), ((DX,),)), (((2 * Z,),), ((DZ,),)),
                                                  (((X,),), ((DA,),))]
    assert out.derivatives == p.derivatives and out.results == p.results and out.inputs == p.inputs


def test_blocks_no_variant_returns_are_dropped_with_their_statements():
    """Without the total variant nothing returns d y / d $a: its block goes, and so does its column of
    the solve; without any derivative variant only the value's statements remain."""
    p = _program(total=False)
    out = split_variants(p, standard_variants(p, TANGENT))
    assert set(out.derivatives) == {("state/y", "forces/x"), ("state/y", "forces/z")}
    assert out.masks == (7, 7, 6, 6, 4)
    assert all(DA not in s.targets[0] for s in out.body if isinstance(s, LinearSolve))
    value_only = split_variants(p, (Variant("value", 1, False),))
    assert value_only.body == (Assign(T0, A * X), Assign(Y, T0 + Z ** 2)) and value_only.masks == (1, 1)
    assert value_only.derivatives == {}


def test_every_view_computes_what_the_unsplit_program_computes():
    p = _program()
    out = split_variants(p, standard_variants(p, TANGENT))
    rng = np.random.default_rng()
    inputs = {"forces/x": rng.uniform(-2, 2, 8), "forces/z": rng.uniform(-2, 2, 8)}
    params = {"a": rng.uniform(0.5, 2, 8)}
    res, der, _ = interpret(p, inputs, params)
    np.testing.assert_allclose(res["state/y"], params["a"] * inputs["forces/x"] + inputs["forces/z"] ** 2)
    blocks = {"value": set(), "tangent": {("state/y", "forces/x")},
              "jacobian": {("state/y", "forces/x"), ("state/y", "forces/z")}, "total": set(p.derivatives)}
    for name, want in blocks.items():
        v = view(out, name)
        assert set(v.derivatives) == want
        r, d, _ = interpret(v, inputs, params)
        np.testing.assert_array_equal(r["state/y"], res["state/y"])
        for key in want:  # (a split solve may round differently: LAPACK sees fewer columns)
            np.testing.assert_allclose(d[key], der[key], rtol=1e-14, atol=1e-15)


def _newton_program() -> Program:
    """u^3 + u = x by Newton, w = 2 u + sin x; d w / d x = 2 du/dx + cos x with du/dx from the
    implicit function theorem. cos x (s) is computed before the solve."""
    wv = Variable("state/w", Scalar)
    (w,) = wv.symbols
    u, s, du = sp.symbols("u s du", real=True)
    conv, its, rn = sp.symbols("conv its rn", real=True)
    nt = Newton((u,), (X,), (), (u ** 3 + u - X,), ((3 * u ** 2 + 1,),), SolverOptions(rtol=1e-14, atol=1e-14),
                conv, its, rn)
    body = (Assign(s, sp.cos(X)), nt, Assign(w, 2 * u + sp.sin(X)),
            LinearSolve(((3 * u ** 2 + 1,),), ((sp.S.One,),), ((du,),)))
    return Program("nt", (XV,), (), (wv,), body, {"state/w": (w,)}, {("state/w", "forces/x"): ((2 * du + s,),)},
                   {"converged": conv, "iterations": its, "residual_norm": rn})


def test_statements_stay_in_their_segment():
    """Sorting by how many variants need a statement happens within each straight-line segment: the
    Jacobian-only s stays before the Newton solve (sorted over the whole body it would follow it)."""
    p = _newton_program()
    out = split_variants(p, standard_variants(p, None))
    assert out.body == p.body and out.masks == (4, 5, 5, 4)
    rng = np.random.default_rng()
    x = rng.uniform(-3, 3, 6)
    r, d, st = interpret(view(out, "jacobian"), {"forces/x": x})
    u = (r["state/w"] - np.sin(x)) / 2
    np.testing.assert_allclose(u ** 3 + u, x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d[("state/w", "forces/x")][:, 0, 0], 2 / (3 * u ** 2 + 1) + np.cos(x), rtol=1e-12)
    assert st["converged"].all()
    value = view(out, "value")
    assert value.body == p.body[1:3] and value.derivatives == {}


def test_a_split_program_is_refused():
    p = _program()
    out = split_variants(p, standard_variants(p, TANGENT))
    with pytest.raises(InternalError, match="split_variants: program p is already split"):
        split_variants(out, out.variants)
