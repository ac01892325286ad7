"""modelc.backends.layout: the flat columns of X, P, Y and J that every backend uses, checked against
sizes and offsets counted by hand on a program whose variables are declared out of sub-axis order
(inputs and outputs are grouped by sub-axis, in order of first appearance; parameters keep their
declaration order), the Jacobian's entries and selections, and the errors on malformed programs."""
from __future__ import annotations

import pytest
import sympy as sp

from modelc.backends.layout import Layout
from modelc.errors import InternalError
from modelc.ir import Assign, Parameter, Program, Variable
from modelc.runtime.types import SR2, Scalar, Vec

# inputs, declared with the sub-axes interleaved: forces/E (6), old_state/ep (1), forces/t (1),
# old_forces/E (6). On the axis: forces/E 0-5, forces/t 6, old_state/ep 7, old_forces/E 8-13 (14).
E_IN, EP_OLD, T_IN, E_OLD = (Variable("forces/E", SR2), Variable("old_state/ep", Scalar),
                             Variable("forces/t", Scalar), Variable("old_forces/E", SR2))
# parameters, in declaration order: E 0, b 1-3, nu 4 (5)
P_E, P_B, P_NU = Parameter("E", Scalar), Parameter("b", Vec), Parameter("nu", Scalar)
# outputs: state/S (6), aux/w (3), state/ep (1); on the axis: state/S 0-5, state/ep 6, aux/w 7-9 (10)
S_OUT, W_OUT, EP_OUT = Variable("state/S", SR2), Variable("aux/w", Vec), Variable("state/ep", Scalar)


def _program(**kw) -> Program:
    E, t, ep_old = E_IN.symbols, T_IN.symbols[0], EP_OLD.symbols[0]
    (pE,), b, (nu,) = P_E.symbols, P_B.symbols, P_NU.symbols
    S, w, ep = S_OUT.symbols, W_OUT.symbols, EP_OUT.symbols[0]
    body = tuple(Assign(S[i], pE * E[i]) for i in range(6)) + tuple(Assign(w[i], b[i] * t) for i in range(3)) + (
        Assign(ep, ep_old + nu * t),)
    results = {"state/S": S, "aux/w": w, "state/ep": (ep,)}
    derivs = {("state/S", "forces/E"): tuple(tuple(pE if i == j else 0 for j in range(6)) for i in range(6)),
              ("aux/w", "forces/t"): tuple((b[i],) for i in range(3)),
              ("state/ep", "forces/t"): ((nu,),), ("state/ep", "old_state/ep"): ((1,),)}
    args = dict(name="p", inputs=(E_IN, EP_OLD, T_IN, E_OLD), parameters=(P_E, P_B, P_NU),
                outputs=(S_OUT, W_OUT, EP_OUT), body=body, results=results, derivatives=derivs)
    args.update(kw)
    return Program(**args)


def test_sizes_and_construction_from_a_program():
    p = _program()
    lay = Layout.of(p)
    assert lay == Layout((E_IN, EP_OLD, T_IN, E_OLD), (P_E, P_B, P_NU), (S_OUT, W_OUT, EP_OUT))
    assert (lay.nx, lay.np, lay.ny) == (14, 5, 10)
    empty = Layout((), (), ())
    assert (empty.nx, empty.np, empty.ny) == (0, 0, 0)


def test_input_axis_groups_variables_by_sub_axis():
    lay = Layout.of(_program())
    assert [(v.name, off) for v, off in lay.axis_inputs()] == [
        ("forces/E", 0), ("forces/t", 6), ("old_state/ep", 7), ("old_forces/E", 8)]
    cols = dict(lay.input_columns())
    assert len(cols) == 14 and sorted(cols.values()) == list(range(14))
    assert [cols[s] for s in E_IN.symbols] == [0, 1, 2, 3, 4, 5]
    assert cols[T_IN.symbols[0]] == 6 and cols[EP_OLD.symbols[0]] == 7
    assert [cols[s] for s in E_OLD.symbols] == [8, 9, 10, 11, 12, 13]


def test_parameter_columns_follow_declaration_order():
    lay = Layout.of(_program())
    assert lay.param_columns() == [(P_E.symbols[0], 0), (P_B.symbols[0], 1), (P_B.symbols[1], 2),
                                   (P_B.symbols[2], 3), (P_NU.symbols[0], 4)]
    assert lay.param_names_by_column() == ["E", "b", "b", "b", "nu"]


def test_output_entries_are_placed_on_the_output_axis():
    p = _program()
    entries = Layout.of(p).output_entries(p)
    S, w, ep = S_OUT.symbols, W_OUT.symbols, EP_OUT.symbols[0]
    assert entries == [(0, S[0]), (1, S[1]), (2, S[2]), (3, S[3]), (4, S[4]), (5, S[5]),
                       (7, w[0]), (8, w[1]), (9, w[2]), (6, ep)]
    # numbers in the results become SymPy numbers
    q = _program(results={"state/S": (0,) * 6, "aux/w": (1.5, 0, 0), "state/ep": (ep,)})
    assert Layout.of(q).output_entries(q)[6] == (7, sp.Float(1.5))


def test_output_errors_name_the_output():
    p = _program(results={"state/S": S_OUT.symbols, "state/ep": EP_OUT.symbols})
    with pytest.raises(InternalError, match="program p: output aux/w has no result component"):
        Layout.of(p).output_entries(p)
    q = _program(results={"state/S": S_OUT.symbols[:5], "aux/w": W_OUT.symbols, "state/ep": EP_OUT.symbols})
    with pytest.raises(InternalError, match=r"output state/S has 5 component\(s\), expected 6"):
        Layout.of(q).output_entries(q)


def test_full_jacobian_entries_row_major_with_zeros():
    p = _program()
    lay = Layout.of(p)
    assert lay.jacobian_shape(p) == (10, 14)
    entries = lay.jacobian_entries(p)
    assert [rc for rc, _ in entries] == [(r, c) for r in range(10) for c in range(14)]
    (pE,), b, (nu,) = P_E.symbols, P_B.symbols, P_NU.symbols
    want = {(i, i): pE for i in range(6)}  # dS/dE: rows 0-5, columns 0-5
    want.update({(7 + i, 6): b[i] for i in range(3)})  # dw/dt: rows 7-9, column 6
    want.update({(6, 6): nu, (6, 7): sp.S.One})  # dep/dt, dep/dep_old
    nonzero = {rc: e for rc, e in entries if e != 0}
    assert nonzero == want


def test_a_selected_jacobian_has_its_own_axes_with_parameters_last():
    """Rows: the selected outputs; columns: the selected inputs, then the selected parameters
    ($name) in parameter order, whatever order the selection lists them in."""
    p = _program(jacobian_of=("state/ep", "aux/w"), jacobian_wrt=("$nu", "old_state/ep", "$b", "forces/t"),
                 derivatives={("aux/w", "forces/t"): tuple((bi,) for bi in P_B.symbols),
                              ("state/ep", "$nu"): ((T_IN.symbols[0],),),
                              ("state/ep", "old_state/ep"): ((1,),)})
    lay = Layout.of(p)
    rows, cols = lay.jacobian_variables(p)
    assert [v.name for v in rows] == ["aux/w", "state/ep"]
    assert [v.name for v in cols] == ["old_state/ep", "forces/t", "$b", "$nu"]
    # each axis groups by sub-axis in order of first appearance among the *selected* variables:
    # rows aux/w 0-2, state/ep 3; columns old_state/ep 0, forces/t 1 (forces/E, which came first on
    # the input axis, is not selected), $b 2-4, $nu 5
    assert lay.jacobian_shape(p) == (4, 6)
    nonzero = {rc: e for rc, e in lay.jacobian_entries(p) if e != 0}
    assert nonzero == {(0, 1): P_B.symbols[0], (1, 1): P_B.symbols[1], (2, 1): P_B.symbols[2],
                       (3, 5): T_IN.symbols[0], (3, 0): sp.S.One}
    assert len(lay.jacobian_entries(p)) == 24


def test_jacobian_errors():
    p = _program(jacobian_of=("state/ep",), jacobian_wrt=("forces/t",))  # dS/dE, dw/dt not selected
    with pytest.raises(InternalError, match=r"block d state/S / d forces/E is not over a \(selected\) output"):
        Layout.of(p).jacobian_entries(p)
    q = _program(derivatives={("state/ep", "forces/E"): ((1, 2, 3),)})
    with pytest.raises(InternalError, match="block d state/ep / d forces/E has the wrong shape"):
        Layout.of(q).jacobian_entries(q)
    r = _program(derivatives={("aux/w", "forces/t"): ((1,), (2,))})
    with pytest.raises(InternalError, match="block d aux/w / d forces/t has the wrong shape"):
        Layout.of(r).jacobian_entries(r)
