"""Scheduling (modelc.passes.schedule): same statements, every dependency kept, fewer values live."""
from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from modelc import driver
from modelc.errors import InternalError
from modelc.ir import Assign, Newton
from modelc.ir.analysis import reads, writes
from modelc.passes.schedule import _pressure, schedule

SPEC = Path(__file__).parents[3] / "spec" / "library.yaml"


@pytest.fixture(scope="module")
def spec():
    return driver.load_spec(SPEC)


def _sinks(program):
    """The Triton backend's sinks, simplified: each tangent row, then the outputs."""
    out = [set(sp.sympify(e).free_symbols) for comps in program.results.values() for e in comps]
    tangent = next(v for v in program.variants if v.name == "tangent")
    for key, block in program.derivatives.items():
        if key[0] in tangent.of and key[1] in tangent.wrt:
            out += [set().union(*(sp.sympify(e).free_symbols for e in row)) for row in block]
    return out, tangent.bit


def _check_order(before, after):
    assert sorted(map(str, after.body)) == sorted(map(str, before.body))
    pairs = {(str(s), m) for s, m in zip(before.body, before.masks)}
    assert {(str(s), m) for s, m in zip(after.body, after.masks)} == pairs  # masks travel with statements
    defined = set()
    everything = set().union(*(writes(s) for s in after.body))
    for st in after.body:
        assert not (reads(st) & everything) - defined, f"{st} reads a value defined after it"
        defined |= writes(st)
    newtons = [i for i, s in enumerate(before.body) if isinstance(s, Newton)]
    assert len(newtons) == sum(isinstance(s, Newton) for s in after.body)


@pytest.mark.parametrize("name", ["j2_linear_iso", "perzyna_iso", "j2_voce_af"])
def test_schedule_keeps_statements_and_dependencies_and_lowers_pressure(spec, name):
    program = driver.compile_model(spec, name).program
    sinks, bit = _sinks(program)
    scheduled = schedule(program, sinks, bit)
    _check_order(program, scheduled)

    def pressure(p):  # of the last segment (after the solve, where the tangent is)
        start = max((i + 1 for i, s in enumerate(p.body) if isinstance(s, Newton)), default=0)
        body = p.body[start:]
        return _pressure(list(range(len(body))), [reads(s) for s in body], [writes(s) for s in body],
                         [bool(m & bit) for m in p.masks[start:]], sinks, set())

    assert pressure(scheduled) < pressure(program)


def test_statements_the_solve_does_not_read_move_after_it(spec):
    """perzyna_iso: nothing computed before the Newton solve is left there unless the solve reads it."""
    program = driver.compile_model(spec, "perzyna_iso").program
    scheduled = schedule(program, _sinks(program)[0], 2)
    k = next(i for i, s in enumerate(scheduled.body) if isinstance(s, Newton))
    need = reads(scheduled.body[k])
    for st in reversed(scheduled.body[:k]):
        assert writes(st) & need, f"{st} is computed before the solve but not read by it"
        need |= reads(st)


def test_schedule_refuses_a_program_without_variants():
    from passes_helpers import leaf, sym, var
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower

    x = sym("x")
    p = lower(differentiate(leaf("m", [var("x")], {var("y"): x * x})), derivatives=False)
    with pytest.raises(InternalError, match="not split into variants"):
        schedule(p, [], 1)


def test_sink_by_sink_depth_first():
    """Two independent chains, each a sink, interleaved: each chain is placed whole, one after the
    other (two values live at most, instead of three)."""
    from modelc.ir import Program
    from modelc.passes.schedule import _segment
    from modelc.symdag import FreeSymbols

    a = sp.symbols("a0:4", real=True)
    b = sp.symbols("b0:3", real=True)
    x = sp.Symbol("x", real=True)
    # interleaved as the variants pass would leave them
    stmts = [Assign(a[0], x + 1), Assign(b[0], x + 2), Assign(a[1], a[0] * 2), Assign(b[1], b[0] * 3),
             Assign(a[2], a[1] + x), Assign(b[2], b[1] + x), Assign(a[3], a[2] * a[0])]
    order = _segment(stmts, [1] * len(stmts), [{a[3]}, {b[2]}], set(), 1, FreeSymbols())
    targets = [stmts[i].target for i in order]
    assert targets in ([*a, *b], [*b, *a])
