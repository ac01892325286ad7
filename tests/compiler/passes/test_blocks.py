"""Derivative blocks regrouped as rows times columns (passes.blocks, the ``blocks`` stage).

Two things are asserted: the regrouped program computes the same numbers as the program before the
stage (the reference interpreter on fresh random plastic and elastic points: results exactly,
every derivative block to 1e-12 of its largest entry, finite differences of the value for the
tangent itself), and it takes fewer operations for the declared tangent and for no variant more.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from modelc import driver, ir
from modelc.ir import Assign, LinearSolve
from modelc.ir.interpret import interpret
from modelc.ir.verify import verify_program
from modelc.passes.blocks import MAX_TERMS, regroup, regroup_blocks
from modelc.passes.cse import count_ops
from modelc.passes.variants import split_variants, standard_variants

LIBRARY = Path(__file__).resolve().parents[3] / "spec" / "library.yaml"
#: (model, the least share of the tangent variant's operations the stage removes), measured
#: 2026-11-29: 313 -> 156, 466 -> 298, 655 -> 522 (see passes/blocks.py)
RADIAL = [("j2_linear_iso", 0.4), ("perzyna_iso", 0.3), ("j2_voce_af", 0.15)]


@pytest.fixture(scope="module")
def spec():
    return driver.load_spec(LIBRARY)


def _stages(spec, name):
    done = driver.lower_model(spec, name, verify=True)
    before = next(s.result for s in done.stages if s.name == "cse")
    after = next(s.result for s in done.stages if s.name == "blocks")
    decl = driver.declared_tangent(done.model)
    select = driver.tangent_select(decl, done.model) if decl is not None else None
    return before, after, select


def _ops(program, select, variant):
    split = split_variants(program, standard_variants(program, select))
    return count_ops(ir.view(split, variant))["total"]


def _points(rng, n=48):
    """Strains from well inside the yield surface to far beyond it, and some purely volumetric."""
    scale = rng.choice([1e-5, 1e-3, 5e-3, 2e-2], size=n)[:, None]
    eps = rng.normal(size=(n, 6)) * scale
    eps[:4, 3:] = 0
    eps[:4, :3] = rng.normal(size=(4, 1)) * 1e-3  # hydrostatic: a deviator of rounding noise
    return eps


def _inputs(program, rng):
    n = 48
    out = {}
    for v in program.inputs:
        shape = v.type.base_shape
        if v.name == "forces/E":
            out[v.name] = _points(rng, n)
        elif v.name == "forces/t":
            out[v.name] = np.ones(n)
        elif v.name.startswith("old_state/"):
            out[v.name] = rng.normal(size=(n, *shape)) * 1e-3 if v.name.endswith(("Ep", "X")) else np.zeros((n, *shape))
        else:
            out[v.name] = np.zeros((n, *shape))
    return out


@pytest.mark.parametrize("name,share", RADIAL)
def test_regrouped_tangent_takes_fewer_operations(spec, name, share):
    before, after, select = _stages(spec, name)
    assert after is not before
    old, new = _ops(before, select, "tangent"), _ops(after, select, "tangent")
    assert new <= (1 - share) * old, (old, new)
    for variant in ("value", "jacobian", "total"):  # and no variant takes more
        assert _ops(after, select, variant) <= _ops(before, select, variant), variant


@pytest.mark.parametrize("name", [n for n, _ in RADIAL] + ["j2_perfect", "norton", "elastic"])
def test_regrouped_program_computes_the_same_numbers(spec, name):
    before, after, _ = _stages(spec, name)
    rng = np.random.default_rng()
    inputs = _inputs(before, rng)
    r0, d0, s0 = interpret(before, inputs)
    r1, d1, s1 = interpret(after, inputs)
    for k in r0:  # the results are not touched: bit for bit
        np.testing.assert_array_equal(r1[k], r0[k])
    for k in s0:
        np.testing.assert_array_equal(s1[k], s0[k])
    assert d0.keys() == d1.keys()
    for key in d0:  # the derivatives: by rounding only
        scale = np.abs(d0[key]).max() or 1.0
        assert np.abs(d1[key] - d0[key]).max() <= 1e-12 * scale, key


def test_regrouped_tangent_matches_finite_differences(spec):
    """An oracle independent of both programs: central differences of the stress in the strain."""
    before, after, _ = _stages(spec, "j2_voce_af")
    rng = np.random.default_rng()
    inputs = _inputs(after, rng)
    eps = inputs["forces/E"][4:]  # (not the hydrostatic points: a kink at the yield surface)
    inputs = {k: v[4:] for k, v in inputs.items()}
    _, d, status = interpret(after, inputs)
    assert status["converged"].all()
    h = 1e-7 * np.maximum(np.abs(eps).max(axis=1, keepdims=True), 1e-6)
    fd = np.empty_like(d[("state/S", "forces/E")])
    for j in range(6):
        up, down = dict(inputs), dict(inputs)
        up["forces/E"] = eps.copy()
        down["forces/E"] = eps.copy()
        up["forces/E"][:, j] += h[:, 0]
        down["forces/E"][:, j] -= h[:, 0]
        fd[:, :, j] = (interpret(after, up)[0]["state/S"] - interpret(after, down)[0]["state/S"]) / (2 * h)
    t = d[("state/S", "forces/E")]
    rel = np.abs(t - fd).max(axis=(1, 2)) / np.abs(t).max(axis=(1, 2))
    # points that cross the yield surface within +-h have a kink: no finite difference there
    assert np.median(rel) < 1e-6 and (rel < 1e-5).mean() > 0.9, rel


def test_one_by_one_solves_become_a_shared_reciprocal(spec):
    """The 1 x 1 system of the implicit-function theorem is gone from the tangent's statements: its
    solutions are products with one reciprocal, and the entries read them as row times column."""
    before, after, select = _stages(spec, "perzyna_iso")
    view_before = ir.view(split_variants(before, standard_variants(before, select)), "tangent")
    view_after = ir.view(split_variants(after, standard_variants(after, select)), "tangent")
    assert any(isinstance(s, LinearSolve) for s in view_before.body)
    assert not any(isinstance(s, LinearSolve) for s in view_after.body)
    verify_program(after)


def test_nothing_to_regroup_leaves_the_program_as_it_is(spec):
    """A coupled system's blocks read the solution of its n x n solve: nothing to gain, same object."""
    before, after, _ = _stages(spec, "j2_perfect_coupled")
    assert after is before


def test_an_entry_that_would_expand_too_far_leaves_the_program_as_it_is():
    """A derivative entry whose sum of products would exceed MAX_TERMS: not expanded, not touched."""
    from modelc.passes.symbols import named
    xs = [named(f"x{k}") for k in range(12)]
    t = named("t0")
    big = sp.Add(*xs) ** 3  # (12 + 2 choose 3) = 364 products
    assert sp.binomial(12 + 2, 3) > MAX_TERMS
    prog = ir.Program(
        name="big", inputs=(), parameters=(),
        outputs=(), body=(Assign(t, big),), results={}, derivatives={("y", "x"): ((t * xs[0],),)})
    assert regroup_blocks(prog) is prog
    assert regroup(prog) is prog
