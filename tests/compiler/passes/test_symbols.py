"""modelc.passes.symbols: the names of the symbols the passes introduce (partial-derivative entries,
Newton status, residual and local variable names, CSE temporaries), all from the registry of
modelc.ir (the same name is the same symbol), and which entries are referred to by symbol."""
from __future__ import annotations

import pytest
import sympy as sp

from modelc.ir import component_symbols
from modelc.passes.symbols import (Counter, is_partial_symbol, local_name, named, partial_symbol, ref,
                                   residual_name, status_symbols)
from modelc.runtime.types import SR2, Scalar

S = component_symbols("state/S", SR2)
E = component_symbols("forces/E", SR2)


def test_named_is_the_registrys_real_scalar_symbol():
    s = named("cse/7")
    assert s is named("cse/7") and s is component_symbols("cse/7", Scalar)[0]
    assert s.name == "cse/7" and s.is_real
    assert s != sp.Symbol("cse/7")  # a plain Symbol (no assumptions) is another symbol
    assert named("cse/8") is not s


def test_partial_symbol_names_its_entry():
    d = partial_symbol("elastic", S[0], E[1])
    assert d.name == "d(state/S[0])/d(forces/E[1])@elastic" and d.is_real
    assert d is partial_symbol("elastic", S[0], E[1])
    assert partial_symbol("elastic", S[1], E[0]) is not d and partial_symbol("flow", S[0], E[1]) is not d


@pytest.mark.parametrize("s, want", [
    (partial_symbol("m", S[2], E[3]), True),
    (sp.Symbol("d(a)/d(b)@x"), True),  # by its name, whatever its assumptions
    (S[0], False),
    (named("d(a)"), False),  # no ")/d("
    (named("dx/d(b)"), False),  # does not start with "d("
    (named("cse/0"), False),
    (partial_symbol("m", S[2], E[3]) * 2, False),  # an expression, not a symbol
    (sp.Integer(1), False),
])
def test_is_partial_symbol(s, want):
    assert is_partial_symbol(s) is want


def test_ref_inlines_numbers_and_lone_symbols_only():
    """An entry that is a number or a lone symbol is used as it is (no statement merely copies a
    symbol); anything else is referred to by the entry's partial symbol."""
    c = component_symbols("$C", Scalar)[0]
    other = partial_symbol("inner", S[0], E[0])
    for entry in (sp.Integer(0), sp.Rational(2, 3), sp.Float(1.5), c, E[4], other):
        assert ref("m", S[0], E[4], entry) is entry
    for entry in (2 * c, c + E[0], sp.exp(c), -other):
        assert ref("m", S[0], E[4], entry) is partial_symbol("m", S[0], E[4])


def test_status_symbols():
    conv, its, rn = status_symbols("j2/solve")
    assert (conv.name, its.name, rn.name) == ("j2/solve/converged", "j2/solve/iterations", "j2/solve/residual_norm")
    assert status_symbols("j2/solve") == (conv, its, rn) and all(s is named(s.name) for s in (conv, its, rn))


def test_residual_and_local_names():
    assert residual_name("update", "state/ep") == "update/residual/state/ep"
    assert local_name("update", "state/S") == "update/state/S"


def test_counter_numbers_from_zero_per_counter():
    c = Counter()
    assert [next(c).name for _ in range(3)] == ["cse/0", "cse/1", "cse/2"]
    assert iter(c) is c and c.n == 3
    t = Counter("t")
    first = next(t)
    assert first.name == "t/0" and first is named("t/0")
    assert next(Counter()) is named("cse/0")  # a new counter starts again: the same symbols
    assert next(c).name == "cse/3"
