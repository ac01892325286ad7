"""The IR verifier (modelc.ir.verify): every stage of every library model passes it, and each rule
catches a program that breaks it; a pass whose precondition is unmet raises InternalError."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import sympy as sp

from modelc import driver
from modelc.errors import InternalError
from modelc.ir import Assign, Newton, Program, SolverOptions, Variable
from modelc.ir.verify import verify_model, verify_program
from modelc.passes.lower import lower
from modelc.runtime.types import Scalar

LIBRARY = Path(__file__).resolve().parents[3] / "spec" / "library.yaml"


@pytest.fixture(scope="module")
def spec():
    return driver.load_spec(LIBRARY)


@pytest.mark.parametrize("name", ["elastic", "j2_linear_iso", "j2_voce_af"])
def test_every_stage_of_library_models_verifies(spec, name):
    done = driver.lower_model(spec, name, verify=True)
    kinds = [s.name for s in done.stages]
    assert kinds == ["compose", "positive", "differentiate", "lower", "cse", "blocks", "variants"]
    assert [v.name for v in done.program.variants] == ["value", "tangent", "jacobian", "total"]


def test_a_variant_that_reads_what_it_does_not_compute_fails(spec):
    """The variants' masks are verified per variant: a statement needed by the value call that reads
    a symbol only the derivative calls compute is caught."""
    done = driver.lower_model(spec, "j2_linear_iso")
    p = done.program
    # a statement the value call skips, and a later one that reads it
    k, reader = next((k, i) for k, m in enumerate(p.masks) if not m & 1 and isinstance(p.body[k], Assign)
                     for i in range(k + 1, len(p.body)) if isinstance(p.body[i], Assign)
                     and p.body[k].target in p.body[i].value.free_symbols)
    masks = list(p.masks)
    masks[reader] |= 1
    with pytest.raises(InternalError, match="variant value: .* reads .* before it is assigned"):
        verify_program(replace(p, masks=tuple(masks)))
    with pytest.raises(InternalError, match="masks for"):
        verify_program(replace(p, masks=p.masks[:-1]))


def _vars():
    a, y = Variable("a", Scalar), Variable("y", Scalar)
    return a, y, a.symbols[0], y.symbols[0]


def test_define_before_use():
    a, y, sa, sy = _vars()
    t = sp.Symbol("t", real=True)
    bad = Program("p", (a,), (), (y,), (Assign(sy, t + sa), Assign(t, 2 * sa)), {"y": (sy,)})
    with pytest.raises(InternalError, match="reads t before it is assigned"):
        verify_program(bad)
    good = replace(bad, body=tuple(reversed(bad.body)))
    assert verify_program(good) is good


def test_single_assignment_per_segment():
    a, y, sa, sy = _vars()
    bad = Program("p", (a,), (), (y,), (Assign(sy, sa), Assign(sy, 2 * sa)), {"y": (sy,)})
    with pytest.raises(InternalError, match="assigned twice"):
        verify_program(bad)


def _newton_program(read_local: bool) -> Program:
    a, y, sa, sy = _vars()
    u, loc = sp.Symbol("u", real=True), sp.Symbol("local", real=True)
    conv, its, rn = (sp.Symbol(n, real=True) for n in ("conv", "its", "rn"))
    nt = Newton((u,), (sa,), (Assign(loc, u * u),), (loc - sa,), ((2 * u,),), SolverOptions(), conv, its, rn)
    after = Assign(sy, loc if read_local else u)
    return Program("p", (a,), (), (y,), (nt, after), {"y": (sy,)})


def test_newton_locals_do_not_leave_the_solve():
    assert verify_program(_newton_program(False))
    with pytest.raises(InternalError, match="local of an earlier Newton"):
        verify_program(_newton_program(True))


def test_a_newton_guess_is_a_number_or_a_symbol(spec):
    """An expression guess is assigned before the solve by lowering (where CSE shares it); a Newton
    that still holds one is refused. perzyna_iso's guess (a closed form of the trial state) is such
    an assignment before the solve, and its value (a Macaulay bracket of the trial yield function)
    does not read the symbol it defines."""
    p = _newton_program(False)
    nt, after = p.body
    bad = replace(p, body=(replace(nt, guess=(2 * nt.guess[0],)), after))
    with pytest.raises(InternalError, match="a guess is an expression"):
        verify_program(bad)
    prog = next(s.result for s in driver.lower_model(spec, "perzyna_iso", verify=True).stages
                if s.name == "lower")
    k, newton = next((k, st) for k, st in enumerate(prog.body) if isinstance(st, Newton))
    (g,) = newton.guess
    assert g.name == "perzyna_iso_radial_return/solve/guess/state/internal/gamma_rate_root"
    (assign,) = [st for st in prog.body[:k] if isinstance(st, Assign) and st.target == g]
    assert "macaulay" in str(assign.value) and g not in assign.value.free_symbols


def test_shapes_of_results_and_blocks():
    a, y, sa, sy = _vars()
    p = Program("p", (a,), (), (y,), (Assign(sy, sa),), {"y": (sy, sy)})
    with pytest.raises(InternalError, match="output y has 2 component"):
        verify_program(p)
    q = Program("p", (a,), (), (y,), (Assign(sy, sa),), {"y": (sy,)}, {("y", "a"): ((1, 2),)})
    with pytest.raises(InternalError, match="derivative block"):
        verify_program(q)


def test_model_rules(spec):
    m = spec.model("elasticity_total")
    assert verify_model(m) is m
    eq = m.equations[0]
    stray = sp.Symbol("stray", real=True)
    bad = replace(m, equations=(replace(eq, components=(eq.components[0] + stray,) + eq.components[1:]),))
    with pytest.raises(InternalError, match="reads stray"):
        verify_model(bad)


def test_lower_requires_a_differentiated_model(spec):
    """The driver owns the order: lowering an implicit model that was not differentiated is a bug
    (InternalError), not a reason to run the earlier pass."""
    model = driver.resolve_model(spec, "j2_perfect_coupled")
    with pytest.raises(InternalError, match="not differentiated"):
        lower(model, derivatives=False)
