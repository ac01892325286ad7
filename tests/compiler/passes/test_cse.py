"""CSE: values unchanged, fewer operations, deterministic names and output across processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from modelc.interpret import interpret
from modelc.ir import Assign, ComposeDecl, Newton
from modelc.passes.compose import compose
from modelc.passes.cse import count_ops, cse
from modelc.passes.differentiate import differentiate
from modelc.passes.lower import lower
from passes_helpers import coupled, coupled_inputs, leaf, seed_models, sym, var

HERE = Path(__file__).parent


def _seed_program(derivatives=True):
    f, g, h = seed_models()
    m = differentiate(compose(ComposeDecl("r", ("h", "g", "f")), {"f": f, "g": g, "h": h}))
    return lower(differentiate(m), derivatives=derivatives)


def test_cse_preserves_values_and_derivatives():
    P = _seed_program()
    Q = cse(P)
    rng = np.random.default_rng()
    x = {n: rng.uniform(-1, 1, 9) for n in ("x1", "x2", "x3", "x4")}
    (r1, d1, _), (r2, d2, _) = interpret(P, x), interpret(Q, x)
    np.testing.assert_allclose(r2["y"], r1["y"], rtol=1e-14)
    assert d1.keys() == d2.keys()
    for k in d1:
        np.testing.assert_allclose(d2[k], d1[k], rtol=1e-12, atol=1e-15)


def test_cse_shares_subexpressions_and_counts_ops():
    x = sym("x")
    e = sp.exp(sp.sin(x) ** 2 + 1)
    m = differentiate(leaf("m", [var("x")], {var("a"): e * x, var("b"): e + x}))
    P = lower(differentiate(m), derivatives=True)
    Q = cse(P)
    before, after = count_ops(P), count_ops(Q)
    assert set(before) >= {"adds", "muls", "divs", "pows", "calls", "total", "assigns"}
    assert after["calls"] < before["calls"] and after["total"] < before["total"]
    # exp(sin(x)**2 + 1) is computed exactly once
    exps = [st for st in Q.body if isinstance(st, Assign) and st.value.has(sp.exp)]
    assert sum(sp.sympify(st.value).count(sp.exp) for st in exps) == 1
    assert cse(Q).body == Q.body or count_ops(cse(Q))["total"] <= after["total"]


def test_cse_names_are_numbered_and_unique():
    Q = cse(_seed_program())
    names = [st.target.name for st in Q.body if st.target.name.startswith("cse/")]
    assert len(names) == len(set(names)) and names
    assert [int(n.split("/")[1]) for n in names] == sorted(int(n.split("/")[1]) for n in names)


def test_cse_in_newton_body_keeps_solution():
    model, _, _ = coupled(1)
    P = lower(differentiate(model), derivatives=True)
    Q = cse(P)
    nq = next(s for s in Q.body if isinstance(s, Newton))
    # the body counts its own names (the same solve is the same statement in every program, but for
    # what it hands to the statements after it: those of the value program read fewer exports)
    assert all(st.target.name.startswith("ncse/") for st in nq.body)
    nv = next(s for s in cse(lower(differentiate(model), derivatives=False)).body if isinstance(s, Newton))
    assert replace(nq, exports=()) == replace(nv, exports=())
    x = coupled_inputs(model, np.random.default_rng())
    (r1, d1, s1), (r2, d2, s2) = interpret(P, x), interpret(Q, x)
    assert s2["converged"].all()
    for k in r1:
        np.testing.assert_allclose(r2[k], r1[k], rtol=1e-12, atol=1e-14)
    for k in d1:
        np.testing.assert_allclose(d2[k], d1[k], rtol=1e-10, atol=1e-12)


def test_newton_invariants_are_hoisted_out_of_the_iteration():
    """j2_voce_af's radial return: after cse no iteration-dependent statement, residual or Jacobian
    entry holds a subexpression of two or more operations that does not depend on the unknown (the
    trial stress inside the Armstrong-Frederick direction was recomputed at every iteration); the
    hoisted solve still gives the same solution (the library tests compare it with NEML2)."""
    from modelc import driver

    spec = driver.load_spec(Path(__file__).parents[3] / "spec" / "library.yaml")
    done = driver.lower_model(spec, "j2_voce_af")
    nt = next(s for s in done.value.body if isinstance(s, Newton))
    varying = set(nt.unknowns)
    for a in nt.body:
        if sp.sympify(a.value).free_symbols & varying:
            varying.add(a.target)
    checked = [a.value for a in nt.body if a.target in varying] + list(nt.residual) + \
        [e for row in nt.jacobian for e in row] + list(nt.residual_scale)
    assert len(checked) > 3
    for e in checked:
        for sub in sp.preorder_traversal(sp.sympify(e)):
            if isinstance(sub, sp.Expr) and not sub.is_Atom and sub.free_symbols and \
                    not (sub.free_symbols & varying):
                assert sp.count_ops(sub) < 2, f"invariant {sub} is computed at every iteration"
    hoisted = [a for a in nt.body if a.target not in varying]
    assert len(hoisted) >= 6  # at least the six trial-stress components


def test_linear_solve_shares_one_cse_unit_with_its_segment(monkeypatch):
    """j2_voce_af with its tangent: the residual system at the solution (the solve's A and B) and
    the outputs after the solve are one CSE unit, so the norm of the direction (a sqrt) is computed
    once outside the Newton solve (twice before, once for each side of the solve), and the Voce
    hardening (an exp) once; since the solve hands the exp to the statements after it
    (ir.Newton.exports, test_exports.py), it is computed there no more. Statements before the solve read none of its
    solutions, and the program verifies (the numbers are checked against NEML2 and the other
    backends in tests/models). The CSE stage's program: passes.blocks then turns the 1 x 1 solve
    into products with one reciprocal (test_blocks.py)."""
    from modelc import driver
    from modelc.ir import LinearSolve, verify
    from modelc.ir.analysis import reads

    _without_blocks(monkeypatch)

    spec = driver.load_spec(Path(__file__).parents[3] / "spec" / "library.yaml")
    done = driver.lower_model(spec, "j2_voce_af")
    prog = done.program
    body = [st for st in prog.body if not isinstance(st, Newton)]
    calls: dict[str, int] = {}
    for st in body:
        if isinstance(st, Assign):
            for q in sp.preorder_traversal(sp.sympify(st.value)):
                if isinstance(q, sp.Function):
                    calls[q.func.__name__] = calls.get(q.func.__name__, 0) + 1
    assert calls.get("safe_sqrt") == 1 and calls.get("exp", 0) == 0, calls
    handed = [sp.sympify(v) for st in prog.body if isinstance(st, Newton)
              for v in ({a.target: a.value for a in st.body}.get(x.value, x.value) for x in st.exports)]
    assert sum(v.has(sp.exp) for v in handed) == 1
    k = next(i for i, st in enumerate(prog.body) if isinstance(st, LinearSolve))
    solved = {t for row in prog.body[k].targets for t in row}
    assert not any(reads(st) & solved for st in prog.body[:k])
    assert any(reads(st) & solved for st in prog.body[k + 1:])
    verify.verify_program(prog)


def _without_blocks(monkeypatch) -> None:
    """The pipeline without the ``blocks`` stage (passes.blocks, which regroups the derivative
    blocks after CSE): what these tests measure is the CSE pass."""
    import modelc.passes.blocks as blocks_pass

    monkeypatch.setattr(blocks_pass, "regroup", lambda program, select=None: program)


def _ops(model: str, view: str | None = "tangent") -> dict[str, int]:
    """count_ops of ``model``'s program (all variants: what each segment's reduction is chosen by),
    or of one variant's view of it."""
    from modelc import driver
    from modelc.ir import program as P

    spec = driver.load_spec(Path(__file__).parents[3] / "spec" / "library.yaml")
    program = driver.lower_model(spec, model).program
    return count_ops(program if view is None else P.view(program, view))


def test_chain_rule_products_are_shared_and_never_cost_more(monkeypatch):
    """perzyna_iso's tangent: each entry dEp_i/dE_j = P(Ep_i, y) * dy/dE_j + ... Flattened, the
    partial's factors (2 E n N_i dt ... y^(n-1)) were multiplied again in every entry; kept whole,
    the partial is one common subexpression (multiplications 342 -> 260 in the tangent, both with
    common factors taken out of sums; 514 -> 343 before that). Where flattening is cheaper (a
    coupled system's Newton body), the pass keeps the flattened reduction: no model's program costs
    more than with the flattened reduction alone (the alternative switched off). Measured without
    passes.positive, which takes the trial stress's factor 2 G out of its norm before the chain rule
    and so part of the same repetition (with it the tangent's multiplications are 216 kept whole,
    265 flattened)."""
    import modelc.passes.cse as cse_pass
    import modelc.passes.positive as positive_pass

    monkeypatch.setattr(positive_pass, "factor_positive", lambda model: model)
    _without_blocks(monkeypatch)
    models = ("perzyna_iso", "j2_perfect_coupled")
    both = {m: _ops(m) for m in models}
    whole = {m: _ops(m, None) for m in models}
    monkeypatch.setattr(cse_pass, "_inline_products", lambda value, rule: value.xreplace(rule))
    flat = {m: _ops(m) for m in models}
    flat_whole = {m: _ops(m, None) for m in models}
    assert both["perzyna_iso"]["muls"] < 0.8 * flat["perzyna_iso"]["muls"], (both, flat)
    assert both["perzyna_iso"]["total"] < flat["perzyna_iso"]["total"], (both, flat)
    for m in models:
        assert whole[m]["total"] <= flat_whole[m]["total"], (m, whole[m], flat_whole[m])


_SCRIPT = textwrap.dedent("""
    from modelc.ir import ComposeDecl
    from modelc.passes.compose import compose
    from modelc.passes.cse import cse, count_ops
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower
    from passes_helpers import seed_models
    from passes_helpers import coupled
    f, g, h = seed_models()
    m = compose(ComposeDecl("r", ("h", "g", "f")), {"f": f, "g": g, "h": h})
    print([s.name for s in m.submodels])
    for model in (m, coupled(2)[0]):
        for d in (False, True):
            p = lower(differentiate(model), derivatives=d)
            print(p)
            q = cse(p)
            print(q)
            print(count_ops(q))
""")


def test_identical_output_across_hash_seeds():
    outs = []
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(HERE))
        r = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, cwd=HERE)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    assert "newton" in outs[0] and "cse/0" in outs[0]


def test_compound_power_bases_become_subexpressions():
    """Integer powers are expanded before printing: a compound base is computed (and printed)
    once, as a subexpression of its own; values are unchanged."""
    from modelc.ir import Assign, Program, Variable
    from modelc.runtime.types import Scalar

    a, b = (Variable(n, Scalar) for n in ("a", "b"))
    y = Variable("y", Scalar)
    sa, sb, sy = a.symbols[0], b.symbols[0], y.symbols[0]
    P = Program("p", (a, b), (), (y,), (Assign(sy, (sa - sb) ** 2 + 1 / (sa + sb) ** 3 + sp.sqrt(sa + 2 * sb)),),
                {"y": (sy,)})
    Q = cse(P)
    for st in Q.body:
        for pw in st.value.atoms(sp.Pow):
            if pw.exp.is_Integer and abs(pw.exp) >= 2:
                assert pw.base.is_Symbol, st
    x = {"a": np.array([0.3, 2.0]), "b": np.array([-1.1, 0.5])}
    np.testing.assert_allclose(interpret(Q, x)[0]["y"], interpret(P, x)[0]["y"], rtol=1e-15)


def test_negative_powers_reuse_a_reciprocal():
    """x / b**3 before 1/b and y / b**2 after it: both become products of the reciprocal, which
    moves up to the first of them; the values agree with the divisions to a few ulps."""
    from modelc.passes.cse import _share_reciprocals

    b, x, y, s0, s1, s2, s3 = sp.symbols("b x y s0 s1 s2 s3", real=True)
    reps = [(s0, b + 1), (s1, x * s0 ** -3), (s2, s0 ** -1), (s3, y * s0 ** -2)]
    out, red = _share_reciprocals(reps, [s1 + s3 + s2 * x])
    assert [t for t, _ in out] == [s0, s2, s1, s3]  # the reciprocal moved before its first power
    assert all(not any(p.is_Pow and p.exp.is_Integer and p.exp <= -2 for p in sp.preorder_traversal(v))
               for _, v in out)
    rng = np.random.default_rng()
    for _ in range(20):
        env = {b: rng.uniform(-3, 3), x: rng.normal(), y: rng.normal()}
        want = dict(env)
        for t, v in reps:
            want[t] = float(v.subs(want))
        got = dict(env)
        for t, v in out:
            got[t] = float(v.subs(got))
        for t in (s1, s2, s3):
            assert got[t] == pytest.approx(want[t], rel=1e-14)


def test_differences_named_once_and_values_kept():
    """c*x - c*y in several sums becomes one z = x - y; pairs seen once with a unit coefficient stay;
    the rewritten expressions agree with the originals at random points."""
    from modelc.passes.cse import _share_differences
    from modelc.passes.symbols import Counter

    e, p, q, r, a = sp.symbols("e p q r a", real=True)
    third = sp.Rational(4, 9)
    exprs = [third * e - third * p + a, 2 * e - 2 * p, sp.exp(3 * q - 3 * e) * a, r - a]
    counter = Counter("t")
    known = {}
    stmts, out = _share_differences(exprs, counter, known)
    targets = [t for t, _ in stmts]
    assert [sp.sympify(v) for _, v in stmts][0] == e - p  # seen twice: named first
    assert len(stmts) == 2  # e - p, and q - e (coefficient 3, seen once); r - a (unit, once) is not
    assert not out[3].free_symbols & set(targets)
    for s in out[:2]:
        assert not s.has(p)  # every e - p pair went
    assert set(known) == {frozenset((e, p)), frozenset((q, e))}
    # a later segment reuses the named difference, even where the pair occurs once with a unit
    # coefficient, and names nothing new
    again, later = _share_differences([e - p + r], counter, known)
    assert again == [] and sp.Add(*later[0].args) == targets[0] + r
    rng = np.random.default_rng()
    for _ in range(20):
        env = {s: rng.normal() for s in (e, p, q, r, a)}
        for t, v in stmts:
            env[t] = float(sp.sympify(v).subs(env))
        for before, after in zip(exprs, out):
            want = float(before.subs(env))
            assert float(after.subs(env)) == pytest.approx(want, rel=1e-13, abs=1e-13)


def test_difference_named_before_a_solve_serves_after_it():
    """perzyna_iso: the strain differences eps_i - Ep_i named before the Newton solve are what the
    code after it reads; no statement after the solve reads the strain itself."""
    from modelc import driver

    spec = driver.load_spec(Path(__file__).parents[3] / "spec" / "library.yaml")
    program = driver.compile_model(spec, "perzyna_iso").program
    k = next(i for i, st in enumerate(program.body) if isinstance(st, Newton))
    for st in program.body[k + 1:]:
        names = {s.name for s in sp.sympify(st.value).free_symbols} if isinstance(st, Assign) else set()
        assert not {f"forces/E[{i}]" for i in range(3)} & names, st


def test_strain_difference_shared_in_a_radial_return():
    """j2_linear_iso: the derivatives of dev(eps - old(Ep)) read the six differences eps_i - Ep_i,
    computed once each (before the pass they were re-expanded as 4/9*eps_i - 4/9*Ep_i per entry)."""
    from modelc import driver

    spec = driver.load_spec(Path(__file__).parents[3] / "spec" / "library.yaml")
    program = driver.compile_model(spec, "j2_linear_iso").program
    eps = {f"forces/E[{i}]" for i in range(6)}
    readers = [st for st in program.body if isinstance(st, Assign)
               and {s.name for s in sp.sympify(st.value).free_symbols} & eps]
    diffs = [st for st in readers if sp.sympify(st.value).is_Add and len(st.value.args) == 2]
    assert len(diffs) == 6
    assert len(readers) == 6  # nothing else reads the strain


def test_factor_sums_takes_the_most_shared_factor_out_first():
    from modelc.passes.cse import _factor_sums

    a, b, c, x, y, z = sp.symbols("a b c x y z")
    got, = _factor_sums([a * x + a * y + z])
    assert got == a * (x + y) + z
    got, = _factor_sums([a * b * x - a * b * y + a * z])  # a in three terms, then b in two
    assert got == a * (b * (x - y) + z)
    got, = _factor_sums([2 * x + 2 * y + c])  # numbers are not factors
    assert got == 2 * x + 2 * y + c
    got, = _factor_sums([sp.exp(a * x + a * y)])  # inside a function's argument too
    assert got == sp.exp(a * (x + y))
    for e, r in zip([a * x + a * y + z, a * b * x - a * b * y + a * z], _factor_sums([a * x + a * y + z, a * b * x - a * b * y + a * z])):
        assert sp.expand(e - r) == 0


def test_factored_sums_are_kept_where_they_cost_less(monkeypatch):
    """j2_perfect's tangent: d(macaulay(f)/|s| * s_i)/d eps_j holds (H/|s| - m/|s|**2) * c_ij in 30
    entries; with common factors taken out, cse shares the bracket and each entry is one
    multiplication (tangent 375 -> 317 operations). The factored reduction of a segment is kept only
    where it is cheaper: no model's program (all variants) costs more than with factoring switched
    off. (One variant's share may: the coupled twins' tangents take 4-7 more of ~920 operations for
    37-64 fewer in the whole program.) The numbers are checked against NEML2, finite differences and
    the other backends in tests/models. Measured without passes.positive: with the norm's factor
    2 G taken out before the chain rule, j2_perfect's entries no longer hold that bracket (its
    tangent is 318 operations either way)."""
    import modelc.passes.cse as cse_pass
    import modelc.passes.positive as positive_pass

    monkeypatch.setattr(positive_pass, "factor_positive", lambda model: model)
    models = ("j2_perfect", "j2_voce_af", "perzyna_iso_coupled")
    tangent = _ops("j2_perfect")
    whole = {m: _ops(m, None) for m in models}
    monkeypatch.setattr(cse_pass, "_factor_sums", lambda exprs: exprs)
    assert tangent["total"] < 0.9 * _ops("j2_perfect")["total"]
    for m in models:
        plain = _ops(m, None)
        assert whole[m]["total"] <= plain["total"], (m, whole[m], plain)


def test_constants_are_never_named():
    """A constant common subexpression (sqrt(6) in sqrt(6)/3 x y and sqrt(6)/3 y^2, which CSE named
    cse/0; 2 + e and sqrt(2) in the others) stays inline, where the printers fold it into a literal:
    named, it was a Python float in the generated PyTorch code, which torch.log and torch.where
    refuse (sqrt(2)**x's derivative)."""
    x, y = sym("x"), sym("y")
    r2, r6 = sp.sqrt(2), sp.sqrt(6)
    m = differentiate(leaf("m", [var("x"), var("y")], {var("a"): r2 * x + r2 ** x, var("b"): r6 / 3 * x * y,
                                                       var("c"): r6 / 3 * y * y + sp.log(2 + sp.E + x)}))
    Q = cse(lower(differentiate(m), derivatives=True))
    assigns = [st for st in Q.body if isinstance(st, Assign)]
    assert assigns and not [st for st in assigns if sp.sympify(st.value).is_number and st.target.name.startswith("cse")]
    rng = np.random.default_rng()
    xv = {"x": rng.uniform(0, 2, 8), "y": rng.uniform(-1, 1, 8)}
    P = lower(differentiate(m), derivatives=True)
    (r1, d1, _), (r2_, d2, _) = interpret(P, xv), interpret(Q, xv)
    for k in r1:
        np.testing.assert_allclose(r2_[k], r1[k], rtol=1e-14)
    for k in d1:
        np.testing.assert_allclose(d2[k], d1[k], rtol=1e-13, atol=1e-15)
