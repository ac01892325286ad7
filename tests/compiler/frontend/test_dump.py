"""modelc.frontend.dump: the exact text of the located YAML tree, of explicit and implicit models (roles,
docs, tangent, equations component by component, solver line, residuals, guesses) and of a spec with
its compositions, on hand-built inputs; the memoising printer gives ``sympy.sstr``'s text."""
from __future__ import annotations

import sympy as sp

from modelc.frontend.dump import format_model, format_spec, format_yaml
from modelc.frontend.yamlio import load_yaml_text
from modelc.ir import (ComposeDecl, Equation, ImplicitSystem, Loc, Model, Parameter, SolverOptions, Spec,
                       Tangent, Variable)
from modelc.runtime.types import SR2, Scalar, Vec

E_IN = Variable("forces/E", SR2, "strain")
T_IN = Variable("forces/t", Scalar)
S_OUT = Variable("state/S", SR2, "stress")
EP_OUT = Variable("state/ep", Scalar)
E0, E1, E2, E3, E4, E5 = E_IN.symbols
T = T_IN.symbols[0]

LIN = Model(
    name="lin", doc="linear",
    parameters=(Parameter("K", Scalar, (3.0,), "MPa", "bulk"), Parameter("G", SR2)),
    inputs=(E_IN, T_IN), outputs=(S_OUT, EP_OUT),
    equations=(Equation(S_OUT, (E0, 2 * E1, E2**2, sp.S.Zero, -E4, sp.Rational(1, 2))),
               Equation(EP_OUT, (T + 1,))),
    tangent=Tangent(("state/S",), ("forces/E",)))

LIN_TEXT = """\
model lin (explicit)  # linear
  parameter K: Scalar = 3.0 [MPa]  # bulk
  parameter G: SR2
  input     forces/E: SR2  # strain
  input     forces/t: Scalar
  output    state/S: SR2  # stress
  output    state/ep: Scalar
  tangent d(state/S) / d(forces/E)
  equation state/S:
    state/S[0] = forces/E[0]
    state/S[1] = 2*forces/E[1]
    state/S[2] = forces/E[2]**2
    state/S[3] = 0
    state/S[4] = -forces/E[4]
    state/S[5] = 1/2
  equation state/ep:
    state/ep = forces/t + 1"""

X_IN = Variable("forces/x", Scalar)
U = Variable("state/u", Scalar, "unknown u")
V = Variable("state/v", Vec)
W = Variable("state/w", Scalar)
x, u = X_IN.symbols[0], U.symbols[0]
v0, v1, v2 = V.symbols

IMP = Model(
    name="imp", inputs=(X_IN,), outputs=(W, U, V),  # the unknowns are listed first, whatever the order here
    equations=(Equation(W, (2 * u,)),),
    implicit=ImplicitSystem(
        unknowns=(U, V),
        residuals=(Equation(U, (u**3 - 8,)), Equation(V, (v0 - 1, v1**2, 3 * v2))),
        guess=(Equation(U, (x,)), Equation(V, (sp.S.One, sp.S.Zero, x**2))),
        uses=("a", "b"),
        solver=SolverOptions(rtol=1e-8, max_iter=10, method="halley")))

IMP_TEXT = """\
model imp (implicit)
  input     forces/x: Scalar
  unknown   state/u: Scalar  # unknown u
  unknown   state/v: Vec
  output    state/w: Scalar
  equation state/w:
    state/w = 2*state/u
  uses a, b
  solver rtol=1e-08 atol=1e-10 max_iter=10 on_failure=nan max_substeps=8 method=halley
  residual state/u:
    R(state/u) = state/u**3 - 8
  residual state/v:
    R(state/v)[0] = state/v[0] - 1
    R(state/v)[1] = state/v[1]**2
    R(state/v)[2] = 3*state/v[2]
  guess state/u:
    state/u0 = forces/x
  guess state/v:
    state/v0[0] = 1
    state/v0[1] = 0
    state/v0[2] = forces/x**2"""


def test_format_yaml_prints_one_value_per_line_with_its_key_location():
    tree = load_yaml_text('a: 1\nb:\n  - x\n  - {c: 2.5}\n  - [y, 3]\nd: "hi"\nf: ~\n', "f.yaml")
    assert format_yaml(tree) == ("a: 1    @1:1\n"
                                 "b:    @2:1\n"
                                 "  - 'x'\n"
                                 "  -\n"
                                 "    c: 2.5    @4:6\n"
                                 "  -\n"
                                 "    - 'y'\n"
                                 "    - 3\n"
                                 "d: 'hi'    @6:1\n"
                                 "f: None    @7:1")


def test_format_yaml_of_a_list_and_of_a_scalar():
    tree = load_yaml_text("- 1\n- two\n- {k: true}\n", "f.yaml")
    assert format_yaml(tree) == "- 1\n- 'two'\n-\n  k: True    @3:4"
    assert format_yaml(load_yaml_text("just text\n", "f.yaml")) == "'just text'"
    assert format_yaml(load_yaml_text("7\n", "f.yaml"), indent=2) == "    7"


def test_format_model_explicit():
    assert format_model(LIN) == LIN_TEXT


def test_format_model_implicit_with_outputs_uses_and_solver():
    assert format_model(IMP) == IMP_TEXT
    plain = Model(name="p", inputs=(X_IN,), outputs=(U,),
                  implicit=ImplicitSystem((U,), (Equation(U, (u - 2,)),), (Equation(U, (sp.S.Zero,)),)))
    text = format_model(plain).split("\n")
    # the default solver: no method (newton is the default), no 'uses' line
    assert text[3] == "  solver rtol=1e-10 atol=1e-10 max_iter=25 on_failure=nan max_substeps=8"
    assert not any(line.startswith("  uses") for line in text)
    assert text == ["model p (implicit)", "  input     forces/x: Scalar",
                    "  unknown   state/u: Scalar  # unknown u", text[3], "  residual state/u:",
                    "    R(state/u) = state/u - 2", "  guess state/u:", "    state/u0 = 0"]


def test_format_model_takes_the_expression_printer():
    assert format_model(LIN, sstr=lambda e: "<e>").split("\n")[-1] == "    state/ep = <e>"
    assert format_model(LIN, sstr=sp.sstr) == LIN_TEXT


def test_shared_subexpressions_print_as_sympy_sstr_does():
    """The default printer prints a subexpression shared by many components once and reuses its text:
    the text must be sympy.sstr's, Floats (trailing zeros at the top level only) included."""
    s = x + T + sp.exp(sp.Float(2.5) * x)
    comps = (s**2, 2 * s, s, -s, 1 / s, sp.Float(2.5), sp.Float(2.5) * s, sp.exp(s) * s, sp.sqrt(s) - s**2)
    ys = tuple(Variable(f"y{i}", Scalar) for i in range(len(comps)))
    m = Model(name="m", inputs=(X_IN, T_IN), outputs=ys,
              equations=tuple(Equation(y, (c,)) for y, c in zip(ys, comps)))
    lines = [line for line in format_model(m).split("\n") if line.startswith("    ")]
    assert lines == [f"    y{i} = {sp.sstr(c)}" for i, c in enumerate(comps)]
    assert lines[5] == "    y5 = 2.50000000000000" and "2.5*forces/x" in lines[2]


def test_format_spec_joins_models_and_compositions():
    spec = Spec("s.yaml", (LIN, IMP), (
        ComposeDecl("both", ("lin", "imp"), keep=("state/u", "state/w"), doc="the two",
                    tangent=Tangent(("state/S",), ("forces/E",))),
        ComposeDecl("one", ("lin",), loc=Loc("s.yaml", 9, 3))))
    assert format_spec(spec) == (LIN_TEXT + "\n\n" + IMP_TEXT + "\n\n"
                                 "compose both = [lin, imp] keep state/u, state/w tangent d(state/S) / d(forces/E)"
                                 "  # the two\n\n"
                                 "compose one = [lin]\n")
    assert format_spec(Spec("e.yaml", ())) == "\n"
