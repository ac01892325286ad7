"""The IR verifier: checks the invariants every stage promises, so that a pass that breaks one is
caught right after it runs (the tests verify after every stage: ``driver.lower_model(...,
verify=True)``). A violation is an :class:`~modelc.errors.InternalError` naming the program or
model and the symbol.

Program rules (see :class:`~modelc.ir.Program`):

- define before use: every symbol a statement reads is an input or parameter component, or was
  assigned by an earlier statement (a Newton's body may also read its unknowns and earlier body
  assignments);
- single assignment per straight-line segment (segments are separated by Newton statements);
- Newton locals: nothing after a Newton reads a symbol assigned only in its body (its exports
  are read instead: values over the body, assigned by the solve; none with a line search);
- shapes: every output has a result with one entry per component; every derivative block is
  (output components) x (input components); a Newton's guess, residual, Jacobian and scale match
  its unknowns, and each guess is a number or a symbol; a linear solve's A is n x n, B and targets n x m.

Model rules: equations and residuals read only the model's inputs and parameters (and, in a
residual, its unknowns), with one component per entry of the variable's type; partial blocks have
the shape of their variables.
"""
from __future__ import annotations

import sympy as sp

from modelc.errors import InternalError
from modelc.ir.model import Model
from modelc.ir.program import Assign, LinearSolve, Newton, Program, view


def verify_program(p: Program) -> Program:
    """``p`` unchanged if it keeps every Program rule; InternalError otherwise."""
    def fail(msg: str):
        raise InternalError(f"program {p.name}: {msg}")

    if p.masks or p.variants:  # every variant on its own keeps the rules (what it reads, it computes)
        if len(p.masks) != len(p.body):
            fail(f"{len(p.masks)} masks for {len(p.body)} statements")
        bits = sum(v.bit for v in p.variants)
        if any(not m or m & ~bits for m in p.masks):
            fail("a statement's mask names no variant, or one the program does not serve")
        for v in p.variants:
            try:
                verify_program(view(p, v.name))
            except InternalError as exc:
                fail(f"variant {v.name}: {exc}")
        return p

    defined = {s for v in p.inputs + p.parameters for s in v.symbols}
    segment: set[sp.Symbol] = set()
    newton_locals: set[sp.Symbol] = set()

    def need(exprs, known, where: str):
        for e in exprs:
            missing = sp.sympify(e).free_symbols - known
            if missing:
                name = sorted(s.name for s in missing)[0]
                if newton_locals & missing:
                    fail(f"{where} reads {name}, a local of an earlier Newton solve")
                fail(f"{where} reads {name} before it is assigned")

    for k, st in enumerate(p.body):
        if isinstance(st, Assign):
            need([st.value], defined, f"statement {k} ({st.target})")
            if st.target in segment:
                fail(f"{st.target} is assigned twice in one straight-line segment")
            segment.add(st.target)
            defined.add(st.target)
            newton_locals.discard(st.target)
        elif isinstance(st, LinearSolve):
            n = len(st.A)
            if any(len(r) != n for r in st.A) or len(st.B) != n or len(st.targets) != n or any(
                    len(b) != len(t) for b, t in zip(st.B, st.targets)):
                fail(f"linear solve {k}: A is not n x n, or B and the targets are not n x m")
            need([e for m in (st.A, st.B) for r in m for e in r], defined, f"linear solve {k}")
            for t in (t for row in st.targets for t in row):
                if t in segment:
                    fail(f"{t} is assigned twice in one straight-line segment")
                segment.add(t)
                defined.add(t)
        elif isinstance(st, Newton):
            n = len(st.unknowns)
            if len(st.guess) != n or len(st.residual) != n or len(st.jacobian) != n or any(
                    len(r) != n for r in st.jacobian) or (st.residual_scale and len(st.residual_scale) != n):
                fail(f"Newton solve {k}: guess, residual, Jacobian or scale do not match its {n} unknowns")
            if st.curvature and (n != 1 or len(st.curvature) != 1):
                fail(f"Newton solve {k}: a curvature (Halley step) needs exactly one unknown")
            need(st.guess, defined, f"Newton solve {k} (guess)")
            if any(not sp.sympify(g).is_Atom for g in st.guess):
                fail(f"Newton solve {k}: a guess is an expression (lowering assigns it before the solve)")
            inner = defined | set(st.unknowns)
            local: set[sp.Symbol] = set()
            for a in st.body:
                need([a.value], inner, f"Newton solve {k} (body, {a.target})")
                if a.target in local:
                    fail(f"{a.target} is assigned twice in the body of Newton solve {k}")
                local.add(a.target)
                inner.add(a.target)
            need(list(st.residual) + [e for r in st.jacobian for e in r] + list(st.residual_scale)
                 + list(st.curvature), inner,
                 f"Newton solve {k} (residual)")
            need([x.value for x in st.exports], inner, f"Newton solve {k} (exports)")
            if st.exports and st.solver.line_search:
                fail(f"Newton solve {k}: exports need the evaluation that ends the solve, which a "
                     "line search's trial points are not")
            exported = [x.target for x in st.exports]
            if len(set(exported)) != len(exported) or set(exported) & (local | set(st.unknowns)):
                fail(f"Newton solve {k}: an export is assigned twice, or is a local or an unknown")
            outs = set(st.unknowns) | {st.converged, st.iterations, st.residual_norm} | set(exported)
            newton_locals |= local - outs - defined
            defined -= local - outs
            defined |= outs
            segment = set()
        else:
            fail(f"unknown statement {type(st).__name__}")
    for v in p.outputs:
        comps = p.results.get(v.name)
        if comps is None or len(comps) != v.type.size:
            fail(f"output {v.name} has {'no result' if comps is None else len(comps)} component(s), "
                 f"expected {v.type.size}")
        need(comps, defined, f"result {v.name}")
    sizes = {v.name: v.type.size for v in p.inputs + p.outputs}
    sizes.update({"$" + q.name: q.type.size for q in p.parameters})  # parameter columns (total variant)
    for (o, i), block in p.derivatives.items():
        if o not in sizes or i not in sizes or len(block) != sizes[o] or any(len(r) != sizes[i] for r in block):
            fail(f"derivative block d {o} / d {i} is not (output components) x (input components)")
        need([e for r in block for e in r], defined, f"derivative d {o} / d {i}")
    need(list(p.status.values()), defined, "status")
    return p


def verify_model(m: Model) -> Model:
    """``m`` unchanged if it keeps the Model rules (recursively); InternalError otherwise."""
    def fail(msg: str):
        raise InternalError(f"model {m.name}: {msg}")

    known = {s for v in m.inputs + m.parameters for s in v.symbols}
    for eq in m.equations:
        if len(eq.components) != eq.var.type.size:
            fail(f"equation of {eq.var.name} has {len(eq.components)} components, expected {eq.var.type.size}")
        if not m.is_composed:
            extra = set().union(*(sp.sympify(c).free_symbols for c in eq.components)) - known
            if extra:
                fail(f"equation of {eq.var.name} reads {sorted(s.name for s in extra)[0]}, not an input or parameter")
    if m.implicit is not None and not m.submodels:
        inner = known | {s for u in m.implicit.unknowns for s in u.symbols}
        for eq in m.implicit.residuals:
            extra = set().union(*(sp.sympify(c).free_symbols for c in eq.components)) - inner
            if extra and not m.implicit.uses:
                fail(f"residual of {eq.var.name} reads {sorted(s.name for s in extra)[0]}")
    sizes = {v.name: v.type.size for sub in (m, *m.submodels) for v in sub.inputs + sub.outputs}
    for p in m.partials:
        if p.of in sizes and p.wrt in sizes and (len(p.block) != sizes[p.of] or any(
                len(r) != sizes[p.wrt] for r in p.block)):
            fail(f"partial d {p.of} / d {p.wrt} is not {sizes[p.of]} x {sizes[p.wrt]}")
    for sub in m.submodels:
        verify_model(sub)
    return m
