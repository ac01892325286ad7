"""The compile pipeline, in order. Every stage is a pure function in its own module; this file only
lists them (STYLE habit 1) and keeps each stage's result for ``--dump-ir``.

    spec file ─load_spec─▶ Spec ─compose─▶ Model ─differentiate─▶ Model(partials)
              ─lower─▶ Program ─cse─▶ Program ─blocks─▶ Program ─variants─▶ Program(masks)
              ─emit_module─▶ Python source

One Program per model serves every call: value only, value + d outputs / d inputs (``jacobian``),
value + d outputs / d (inputs and parameters) (``total``: what autograd and calibration use), and
(when the spec declares a ``tangent``) value + the declared derivative blocks only (which may name
parameters). Each statement carries the variants that need it; every backend emits the model once.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from modelc import ir
from modelc.options import CompileOptions


Options = CompileOptions  # the former name


@dataclass
class Stage:
    name: str
    result: object
    seconds: float


@dataclass
class Compiled:
    """The result of compiling one model: its program (every variant, see :mod:`modelc.passes.variants`),
    the module source and the stages' record. ``value``, ``full``, ``tangent`` and ``total`` are the
    program's variants on their own (:func:`modelc.ir.view`)."""

    model: ir.Model
    program: ir.Program
    source: str
    stages: list[Stage] = field(default_factory=list)

    def _view(self, name: str) -> ir.Program | None:
        if not any(v.name == name for v in self.program.variants):
            return None
        return ir.view(self.program, name)

    @property
    def value(self) -> ir.Program:
        return self._view("value")

    @property
    def full(self) -> ir.Program:
        """d outputs / d inputs (the ``jacobian`` variant)."""
        return self._view("jacobian")

    @property
    def tangent(self) -> ir.Program | None:
        """The declared tangent blocks only (None: none declared)."""
        return self._view("tangent")

    @property
    def total(self) -> ir.Program | None:
        """d outputs / d (inputs, parameters)."""
        return self._view("total")


def resolve_model(spec: ir.Spec, name: str) -> ir.Model:
    """The model called ``name`` in ``spec``: a leaf model, or a declared composition, composed."""
    from modelc.passes.compose import compose_spec_model

    return compose_spec_model(spec, name)


def declared_tangent(model: ir.Model) -> ir.Tangent | None:
    """The tangent declared for ``model`` (carried by the composed model: a composition's or a leaf
    model's), its names checked against the model's outputs and inputs (a SpecError at the name
    otherwise)."""
    from modelc.frontend.model import check_tangent

    tangent = model.tangent
    if tangent is not None:
        kind = "model" if not model.is_composed or model.is_implicit else "composition"
        check_tangent(tangent, f"{kind} {model.name!r}", [v.name for v in model.outputs],
                      [v.name for v in model.inputs] + [p.name for p in model.parameters])
    return tangent


def tangent_select(tangent: ir.Tangent, model: ir.Model) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(of, wrt)`` of a declared tangent as lowering names them (a parameter ``p`` as ``$p``)."""
    inputs = {v.name for v in model.inputs}
    params = {p.name for p in model.parameters}
    return tangent.of, tuple(n if n in inputs or n not in params else "$" + n for n in tangent.wrt)


@contextlib.contextmanager
def located_recursion(spec: ir.Spec, name: str, stage: str):
    """A pass that recursed past Python's limit (an expression nested deeper than the passes can
    follow, e.g. after composing many models) becomes a SpecError at the model, not a traceback."""
    try:
        yield
    except RecursionError:
        from modelc.errors import SpecError

        decl = next((d for d in (*spec.compositions, *spec.models) if d.name == name), None)
        raise SpecError(f"model {name!r} nests its expressions too deeply for the {stage} pass (Python's "
                        "recursion limit)", getattr(decl, "loc", None),
                        hint="split deep expressions into define entries; see docs/limits.md") from None


def lower_model(spec: ir.Spec, name: str, trace=None, *, verify: bool = False) -> Compiled:
    """Run the passes for model ``name`` of a loaded spec, up to (not including) code emission.

    ``trace(stage, text)``, when given, receives each stage's printed IR (``--dump-ir``);
    ``verify`` runs the IR verifier (:mod:`modelc.ir.verify`) on every stage's result (the tests do).
    """
    from modelc.ir.verify import verify_model, verify_program

    from modelc.passes.blocks import regroup
    from modelc.passes.cse import cse
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower
    from modelc.passes.positive import factor_positive
    from modelc.passes.variants import split_variants, standard_variants

    stages: list[Stage] = []

    def run(stage: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        with located_recursion(spec, name, stage):
            out = fn(*args, **kwargs)
        stages.append(Stage(stage, out, time.perf_counter() - t0))
        if verify:
            (verify_program if isinstance(out, ir.Program) else verify_model)(out)
        if trace is not None:
            trace(f"{name}.{stage}", str(out))
        return out

    model = run("compose", resolve_model, spec, name)
    model = run("positive", factor_positive, model)  # before the chain rule, which it shortens
    model = run("differentiate", differentiate, model)
    # one program computes everything any call asks for; the variants pass tags each statement
    # with the calls that need it (a call that does not ask for the tangent must not compute it)
    program = run("cse", cse, run("lower", lower, model, derivatives=True, parameters=True))
    decl = declared_tangent(model)
    select = tangent_select(decl, model) if decl is not None else None
    program = run("blocks", regroup, program, select)
    program = run("variants", split_variants, program, standard_variants(program, select))
    return Compiled(model, program, "", stages)


def compile_model(spec: ir.Spec, name: str, options: CompileOptions = CompileOptions(),
                  trace=None) -> Compiled:
    """Compile model ``name`` of a loaded spec to a module's source."""
    from modelc.backends.module import emit_module

    done = lower_model(spec, name, trace)
    t0 = time.perf_counter()
    with located_recursion(spec, name, "emit"):
        done.source = emit_module(done.program, spec=spec, options=options)
    done.stages.append(Stage("emit", done.source, time.perf_counter() - t0))
    return done


def load_spec(path: str | Path) -> ir.Spec:
    from modelc.frontend import load_spec as _load

    return _load(path)
