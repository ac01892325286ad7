"""Analyses of the Program IR (modelc.ir.analysis): which parameters make up a power's exponent
(the runtime's exponent specialization bakes integer values of exactly these)."""
from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from modelc import driver
from modelc.functions import powr, powr_shift
from modelc.ir import Assign, Program, Variable
from modelc.ir.analysis import exponent_parameters
from modelc.ir.model import Parameter
from modelc.runtime.types import Scalar

LIBRARY = Path(__file__).resolve().parents[3] / "spec" / "library.yaml"


def test_exponent_parameters_of_a_hand_built_program():
    """A power counts when its exponent holds parameters and numbers only (y**n, powr(y, m - 1),
    powr_shift(P, y, 2/q), in statements and results alike); not when it also holds a variable
    (y**(a*x)), nor an integer power (y**2) or a parameter used elsewhere (c*y)."""
    x, y = (Variable(f"forces/{n}", Scalar) for n in ("x", "y"))
    params = tuple(Parameter(n, Scalar) for n in ("c", "n", "a", "m", "q", "unused"))
    c, n, a, m, q, _ = (p.symbols[0] for p in params)
    xs, ys = x.symbols[0], y.symbols[0]
    t = sp.Symbol("t")
    outs = tuple(Variable(f"state/o{k}", Scalar) for k in range(4))
    body = (Assign(t, ys**n + c * ys),)
    results = {outs[0].name: (t,), outs[1].name: (powr(ys, m - 1),),
               outs[2].name: (ys**(a * xs) + ys**2,), outs[3].name: (powr_shift(t, ys, 2 / q),)}
    prog = Program("p", (x, y), params, outs, body, results)
    assert exponent_parameters(prog) == ("n", "m", "q")


@pytest.mark.parametrize("name, want", [("perzyna_iso", ("n",)), ("norton", ("n",)),
                                        ("j2_voce_af", ()), ("elastic", ())])
def test_exponent_parameters_of_library_models(name, want):
    """perzyna_iso's and norton's rate exponent n (in the residual, the guess and the tangent), and
    none in models without a general power."""
    compiled = driver.lower_model(driver.load_spec(LIBRARY), name)
    assert exponent_parameters(compiled.program) == want
