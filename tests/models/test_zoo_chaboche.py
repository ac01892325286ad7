"""The library's Chaboche model (spec/chaboche.yaml: two instances of the Armstrong-Frederick block and
their sum) against the same model written as two hand-renamed copies of the block
(tests/models/specs/chaboche2_copied.yaml, the spec before block instances existed): same system, same
numbers. Every step of every point from NEML2's converged state of the row before, through the passes
and the reference interpreter, float64, solver tolerance 1e-13: the two agree to 1e-12 (relative, per
point) in every state and in the consistent tangent. (test_chaboche2_coupled.py checks the library model
itself against NEML2's reference on every backend.)"""
from __future__ import annotations

import functools

import numpy as np

from library_helpers import (REPO, STRAIN, STRESS, forced_inputs, per_point_rel_err, program,
                             reference, reference_params, with_solver_tolerance)

COPIED = REPO / "tests" / "models" / "specs" / "chaboche2_copied.yaml"
STEPS, POINTS = np.arange(1, 101), np.arange(8)
TOL = 1e-13
STATES = ("state/S", "state/internal/Ep", "state/internal/ep", "state/internal/X1", "state/internal/X2")


@functools.lru_cache(maxsize=None)
def _copied_program():
    from modelc.frontend import load_spec
    from modelc.passes.compose import compose_spec_model
    from modelc.passes.cse import cse
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower

    return cse(lower(differentiate(compose_spec_model(load_spec(COPIED), "chaboche2_copied")), derivatives=True))


def _run(prog):
    from modelc.interpret import interpret

    ref = reference("chaboche2_coupled")
    prog = with_solver_tolerance(prog, TOL)
    ins = forced_inputs([v.name for v in prog.inputs], ref, STEPS, POINTS)
    res, der, status = interpret(prog, ins, reference_params("chaboche2_coupled"))
    assert np.all(status["converged"])
    return res, der


def test_instances_give_the_copied_blocks_results():
    inst, copied = program("chaboche2_coupled"), _copied_program()
    assert [v.name for v in inst.inputs] == [v.name for v in copied.inputs]
    assert [v.name for v in inst.outputs] == [v.name for v in copied.outputs]
    assert sorted(p.name for p in inst.parameters) == sorted(p.name for p in copied.parameters)
    (r1, d1), (r2, d2) = _run(inst), _run(copied)
    shape = (len(STEPS), len(POINTS))
    for name in STATES:
        a = np.asarray(r1[name]).reshape(*shape, -1)
        err = per_point_rel_err(a, np.asarray(r2[name]).reshape(a.shape))
        assert err <= 1e-12, f"{name}: instances vs copies {err:.2e}"
        assert np.abs(a).max() > 1e-6, f"{name} is trivially zero"
    t1 = np.asarray(d1[(STRESS, STRAIN)]).reshape(*shape, 6, 6)
    err = per_point_rel_err(t1, np.asarray(d2[(STRESS, STRAIN)]).reshape(t1.shape))
    assert err <= 1e-12, f"tangent: instances vs copies {err:.2e}"
