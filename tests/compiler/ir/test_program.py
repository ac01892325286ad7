"""modelc.ir.program: the variants a Program serves (its own, or value and its Jacobian), which
derivative blocks a variant returns (``selects``), one variant's view (its statements by mask, its
blocks, its Jacobian selection; an unknown name is a KeyError), and the readable, deterministic
listing ``format_program`` / ``str``, line by line on hand-built programs."""
from __future__ import annotations

import pytest
import sympy as sp

from modelc.ir import (VARIANT_BITS, Assign, Equation, LinearSolve, Loc, Newton, Parameter,
                       Program, SolverOptions, Variable, Variant, format_program, variants_of, view)
from modelc.ir.program import selects
from modelc.runtime.types import Scalar

XV, YV, WV = Variable("forces/x", Scalar), Variable("state/y", Scalar), Variable("state/w", Scalar)
PA = Parameter("a", Scalar, (2.0,), "MPa")
(X,), (Y,), (W,), (A,) = XV.symbols, YV.symbols, WV.symbols, PA.symbols
T, D = sp.symbols("t d", real=True)
BLOCKS = {("state/y", "forces/x"): ((D,),), ("state/w", "forces/x"): ((2,),), ("state/y", "$a"): ((X,),)}
VARIANTS = (Variant("value", 1, False), Variant("tangent", 2, True, ("state/w",), ("forces/x",)),
            Variant("jacobian", 4, True), Variant("total", 8, True, None, ("forces/x", "$a")))


def _program(**kw) -> Program:
    body = (Assign(Y, A * X), Assign(W, 2 * X), Assign(T, sp.cos(X)), Assign(D, A * T))
    args = dict(name="p", inputs=(XV,), parameters=(PA,), outputs=(YV, WV), body=body,
                results={"state/y": (Y,), "state/w": (W,)}, derivatives=BLOCKS)
    args.update(kw)
    return Program(**args)


def test_variant_bits_are_distinct_flags():
    """Masks are unions of these bits, so each is one bit of its own."""
    bits = list(VARIANT_BITS.values())
    assert all(b > 0 and b & (b - 1) == 0 for b in bits) and len(set(bits)) == len(bits)
    assert VARIANT_BITS == {"value": 1, "tangent": 2, "jacobian": 4, "total": 8}


def test_variants_of_a_program_that_computes_one_thing():
    assert variants_of(_program()) == (Variant("value", 1, False), Variant("jacobian", 4, True))
    tangent = _program(jacobian_of=("state/w",), jacobian_wrt=("forces/x",))
    assert variants_of(tangent) == (Variant("value", 1, False),
                                    Variant("tangent", 2, True, ("state/w",), ("forces/x",)))
    assert variants_of(_program(variants=VARIANTS, masks=(15, 15, 12, 12))) == VARIANTS


@pytest.mark.parametrize("variant, blocks", [
    (VARIANTS[0], set()),
    (VARIANTS[1], {("state/w", "forces/x")}),
    (VARIANTS[2], {("state/y", "forces/x"), ("state/w", "forces/x")}),  # no parameter without wrt
    (VARIANTS[3], set(BLOCKS)),
    (Variant("rows", 4, True, ("state/y",), None), {("state/y", "forces/x")}),
    (Variant("params", 8, True, None, ("$a",)), {("state/y", "$a")}),
])
def test_selects(variant, blocks):
    assert {k for k in BLOCKS if selects(variant, *k)} == blocks


def test_view_of_a_split_program():
    p = _program(variants=VARIANTS, masks=(15, 3, 12, 12))
    value = view(p, "value")
    assert value.body == p.body[:2] and value.derivatives == {}
    assert (value.variants, value.masks, value.jacobian_of, value.jacobian_wrt) == ((), (), None, None)
    tangent = view(p, "tangent")
    assert tangent.body == p.body[:2] and tangent.derivatives == {("state/w", "forces/x"): ((2,),)}
    assert (tangent.jacobian_of, tangent.jacobian_wrt) == (("state/w",), ("forces/x",))
    total = view(p, "total")
    assert total.body == (p.body[0],) + p.body[2:] and total.derivatives == BLOCKS
    assert total.jacobian_wrt == ("forces/x", "$a")
    # a view is a program of its own: its variants are value and its Jacobian
    assert [v.name for v in variants_of(tangent)] == ["value", "tangent"]
    assert (p.variants, p.masks) == (VARIANTS, (15, 3, 12, 12))  # the program itself is unchanged


def test_view_of_an_unsplit_program_and_unknown_variants():
    p = _program()
    assert view(p, "value").derivatives == {} and view(p, "value").body == p.body
    assert view(p, "jacobian").derivatives == BLOCKS
    with pytest.raises(KeyError, match="program p has no variant 'total'"):
        view(p, "total")
    with pytest.raises(KeyError, match="program p has no variant 'jacobian'"):
        view(_program(jacobian_of=("state/w",), jacobian_wrt=("forces/x",)), "jacobian")


def test_format_program_lists_a_split_program():
    p = _program(variants=VARIANTS[:2], masks=(3, 3, 2, 2), derivatives={("state/w", "forces/x"): ((2,),)},
                 loc=Loc("lib.yaml", 7, 3), initial=(Equation(WV, (A / 2,)),), jacobian_of=("state/w",),
                 jacobian_wrt=("forces/x",))
    assert str(p) == format_program(p)
    assert format_program(p).splitlines() == [
        "program p  # lib.yaml:7",
        "  in  forces/x: Scalar",
        "  par a: Scalar = 2.0 [MPa]",
        "  out state/y: Scalar",
        "  out state/w: Scalar",
        "  init state/w = ($a/2)",
        "  variant value (bit 1)",
        "  variant tangent (bit 2) d(state/w)/d(forces/x)",
        "  [ 3] state/y = $a*forces/x",
        "  [ 3] state/w = 2*forces/x",
        "  [ 2] t = cos(forces/x)",
        "  [ 2] d = $a*t",
        "  result state/y = (state/y)",
        "  result state/w = (state/w)",
        "  derivative d(state/w)/d(forces/x) = [2]",
        "  jacobian rows state/w; columns forces/x",
    ]


def test_format_program_lists_solves_newtons_and_status():
    u, du, conv, its, rn, r = sp.symbols("u du conv its rn r", real=True)
    nt = Newton((u,), (X,), (Assign(r, u ** 3 - X),), (r + u,), ((3 * u ** 2 + 1,),), SolverOptions(max_iter=7),
                conv, its, rn, curvature=(6 * u,))
    ls = LinearSolve(((3 * u ** 2 + 1, sp.S.Zero), (sp.S.One, sp.S(2))), ((sp.S.One,), (X,)), ((du,), (T,)))
    p = Program("q", (XV,), (), (YV,), (nt, ls, Assign(Y, u)), {"state/y": (Y,)}, {("state/y", "forces/x"): ((du,),)},
                {"converged": conv, "iterations": its, "residual_norm": rn})
    assert format_program(p).splitlines() == [
        "program q",
        "  in  forces/x: Scalar",
        "  out state/y: Scalar",
        f"  newton ['u'] ({SolverOptions(max_iter=7)}) -> conv, its, rn",
        "    guess u = forces/x",
        "    r = -forces/x + u**3",
        "    R[0] = r + u",
        "    J[0] = ['3*u**2 + 1']",
        "    H[0] = 6*u",
        "  solve A X = B for X = [['du'], ['t']]",
        "    A[0] = ['3*u**2 + 1', '0']",
        "    A[1] = ['1', '2']",
        "    B[0] = ['1']",
        "    B[1] = ['forces/x']",
        "  state/y = u",
        "  result state/y = (state/y)",
        "  derivative d(state/y)/d(forces/x) = [du]",
        "  status converged = conv",
        "  status iterations = its",
        "  status residual_norm = rn",
    ]
