"""The Model IR: what the front end produces, composition wires and differentiation sharpens.

A :class:`Model` is a function from its input variables (and parameters) to its output variables.
Every tensor variable is already expanded to scalar components: an SR2 variable ``state/S`` is six
SymPy symbols (see :func:`component_symbols`), and each output is a tuple of SymPy expressions over
input and parameter component symbols, in Mandel order. An *implicit* model instead declares unknowns
and residuals; its outputs are its unknowns. Everything is immutable (frozen dataclasses, tuples,
SymPy expressions as leaves).

Symbols: every component symbol is created by :func:`component_symbols` / :func:`param_symbols`
(a registry, so the same name always gives the same symbol, and naming is deterministic). Symbol
names are the qualified variable name, with ``[i]`` for a component of a non-scalar type; backends
map them to identifiers of their own.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

import sympy as sp

from modelc.runtime.types import TensorType


# --------------------------------------------------------------------------------------------------
# source locations
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Loc:
    """Where something came from in a spec file: 1-based line and column, and the source text."""

    file: str
    line: int
    col: int
    text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


# --------------------------------------------------------------------------------------------------
# symbols
# --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _symbol(name: str) -> sp.Symbol:
    return sp.Symbol(name, real=True)


def component_symbols(name: str, ttype: TensorType) -> tuple[sp.Symbol, ...]:
    """The scalar symbols of variable ``name`` (flat storage order: Mandel for SR2, row-major else)."""
    if ttype.size == 1 and not ttype.base_shape:
        return (_symbol(name),)
    return tuple(_symbol(f"{name}[{i}]") for i in range(ttype.size))


def param_symbols(name: str, ttype: TensorType) -> tuple[sp.Symbol, ...]:
    """The scalar symbols of parameter ``name``; distinct from any variable's by a ``$`` prefix."""
    return component_symbols("$" + name, ttype)


# --------------------------------------------------------------------------------------------------
# model IR
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Variable:
    """A typed, named quantity a model consumes or provides (``forces/E``, ``state/S``, ...)."""

    name: str
    type: TensorType
    doc: str = ""
    loc: Loc | None = field(default=None, compare=False)

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return component_symbols(self.name, self.type)

    def __str__(self) -> str:
        return f"{self.name}: {self.type.name}"


@dataclass(frozen=True, slots=True)
class Parameter:
    """A material parameter: default value per component (flat storage order), units and doc."""

    name: str
    type: TensorType
    default: tuple[float, ...] | None = None
    units: str = ""
    doc: str = ""
    loc: Loc | None = field(default=None, compare=False)
    bounds: str = ""  # allowed values, an interval such as "[0, 0.5)" (modelc.runtime.checks.Interval)
    #: declared ``shared: true``: other models may declare the same parameter (see passes.compose)
    shared: bool = False

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return param_symbols(self.name, self.type)

    def __str__(self) -> str:
        d = "" if self.default is None else f" = {self.default[0] if len(self.default) == 1 else self.default}"
        u = f" [{self.units}]" if self.units else ""
        b = f" in {self.bounds}" if self.bounds else ""
        return f"{self.name}: {self.type.name}{d}{u}{b}"


@dataclass(frozen=True, slots=True)
class Equation:
    """``var := components`` — one output (or residual) of a model, component-wise."""

    var: Variable
    components: tuple[sp.Expr, ...]
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class SolverOptions:
    """Newton options of an implicit model."""

    rtol: float = 1e-10
    atol: float = 1e-10
    max_iter: int = 25
    on_failure: str = "nan"  # "nan" (mark the point, NaN outputs) or "substep" (cut the step and retry)
    max_substeps: int = 8
    #: "newton", or "halley" for a solve with one scalar unknown: each step also uses d2R/du2
    #: (cubic convergence; see modelc.ir.Newton.curvature)
    method: str = "newton"
    #: at most this many halvings of a Newton step (backtracking line search): a step is cut while
    #: ``||R(u + a du)||^2 > (1 - 2 LINE_SEARCH_C a) ||R(u)||^2`` (Armijo's sufficient decrease of
    #: ``||R||^2``, ``a`` = 1, 1/2, ...); ``max_iter`` counts accepted steps, not the halvings
    #: (modelc.backends.statements.LineSearch). 0: full steps (Newton)
    line_search: int = 0


@dataclass(frozen=True, slots=True)
class ImplicitSystem:
    """Unknowns ``u`` and residuals ``R(u, x)`` with ``R = 0`` at the solution.

    ``residuals[i]`` belongs to ``unknowns[i]`` (same type). Residual expressions may use variables
    provided by the models named in ``uses``: composition inlines those (with ``u`` as their input)
    before the system is solved. ``guess[i]`` is the initial value of ``unknowns[i]`` (default: its
    value at the previous step, an input of the model).
    """

    unknowns: tuple[Variable, ...]
    residuals: tuple[Equation, ...]
    guess: tuple[Equation, ...]
    uses: tuple[str, ...] = ()
    solver: SolverOptions = SolverOptions()


@dataclass(frozen=True, slots=True)
class Partial:
    """The block d ``of`` / d ``wrt`` of a model's derivative (rows: ``of`` components, columns:
    ``wrt`` components). Entries may be expressions over the model's inputs and parameters, or (for a
    composed model) over the partial-derivative symbols of its sub-models (see lowering).

    Sharpened by ``passes.differentiate``: a composed model's partials hold the total derivative of
    *every* variable its sub-models provide (outputs and intermediates) w.r.t. its inputs, in
    evaluation order; an implicit model's are the symbols ``d(u)/d(x)@model`` that lowering assigns
    with a LinearSolve (see ``passes.symbols`` for the naming).

    ``traceless``: ``of`` is a symmetric tensor (SR2, Mandel) whose trace does not depend on
    ``wrt`` — rows 0-2 (the diagonal) sum to zero in every column, e.g. a plastic strain's
    increment along a deviatoric flow direction (set by ``passes.differentiate``, which uses it to
    drop the trace terms of the chain rule).

    ``blind``: ``wrt`` is an SR2 and ``of`` does not change when the same value is added to its
    first three components (the diagonal) — columns 0-2 sum to zero in every row, e.g. a J2 flow
    direction or yield function of a stress, which read its deviator only (set and used likewise)."""

    of: str
    wrt: str
    block: tuple[tuple[sp.Expr, ...], ...]
    traceless: bool = False
    blind: bool = False


@dataclass(frozen=True, slots=True)
class Tangent:
    """The derivative blocks a spec declares as the model's *tangent*: d ``of`` / d ``wrt`` for every
    listed output and input (e.g. ``state/S`` by ``forces/E``, the consistent tangent a finite-element
    code needs). The generated module gets a third variant that computes and stores only these blocks
    (see ``Program.jacobian_of``); a call asking for them uses it."""

    of: tuple[str, ...]
    wrt: tuple[str, ...]
    loc: Loc | None = field(default=None, compare=False)
    #: where each name was written (``of`` then ``wrt``), for errors
    name_locs: tuple[Loc | None, ...] = field(default=(), compare=False)

    def loc_of(self, name: str) -> Loc | None:
        names = self.of + self.wrt
        return self.name_locs[names.index(name)] if name in names and self.name_locs else self.loc

    def __str__(self) -> str:
        return f"tangent d({', '.join(self.of)}) / d({', '.join(self.wrt)})"


@dataclass(frozen=True, slots=True)
class Model:
    """A model: inputs -> outputs, given parameters.

    Three kinds, one class (so a composed model composes again):

    - explicit: ``equations`` give each output;
    - implicit: ``implicit`` is set, the outputs are its unknowns, ``equations`` is empty; or, with
      explicit outputs, ``equations`` compute ``outputs`` from the solved unknowns (which are then
      internal); composition splits such a model into the solve and an outputs leaf;
    - composed: ``submodels`` holds the sub-models in evaluation order (topologically sorted, ties by
      declaration order); wiring is by variable name; ``inputs``/``outputs`` are the composed ones.

    ``partials`` is filled by the differentiation pass (structurally zero blocks are absent), which
    also sets ``differentiated``.

    A *resolved* implicit model (what ``passes.compose`` makes of one) has ``implicit`` set and
    exactly one sub-model: its residual system, an explicit (composed) model whose inputs are the
    unknowns and the implicit model's inputs and whose outputs are the residuals
    ``<model>/residual/<unknown>``; the variables provided by the models it ``uses`` are renamed
    ``<model>/<var>`` inside it. Check ``is_implicit`` before ``is_composed``.
    """

    name: str
    inputs: tuple[Variable, ...]
    outputs: tuple[Variable, ...]
    parameters: tuple[Parameter, ...] = ()
    equations: tuple[Equation, ...] = ()
    implicit: ImplicitSystem | None = None
    submodels: tuple["Model", ...] = ()
    partials: tuple[Partial, ...] = ()
    doc: str = ""
    loc: Loc | None = field(default=None, compare=False)
    tangent: Tangent | None = None  # declared in the spec (a leaf model's, or its composition's)
    #: declared initial values of state outputs (``state/...``): expressions over parameters and
    #: numbers only; a composition carries those of its outputs (undeclared ones start at zero)
    initial: tuple[Equation, ...] = ()
    #: set by the differentiation pass: ``partials`` holds every nonzero block (a leaf whose
    #: derivatives are all zero, ``sign(x) sqrt(2)``, has none and is differentiated all the same)
    differentiated: bool = field(default=False, compare=False)

    @property
    def is_composed(self) -> bool:
        return bool(self.submodels)

    @property
    def is_implicit(self) -> bool:
        return self.implicit is not None

    def variable(self, name: str) -> Variable:
        for v in self.inputs + self.outputs:
            if v.name == name:
                return v
        raise KeyError(name)

    def __str__(self) -> str:  # a compact, readable dump; passes may print more
        lines = [f"model {self.name}{' (implicit)' if self.is_implicit else ''}"]
        lines += [f"  in  {v}" for v in self.inputs]
        lines += [f"  out {v}" for v in self.outputs]
        lines += [f"  par {p}" for p in self.parameters]
        lines += [f"  init {eq.var.name} = ({', '.join(sp.sstr(c) for c in eq.components)})"
                  for eq in self.initial]
        for eq in self.equations:
            for i, c in enumerate(eq.components):
                lines.append(f"  {eq.var.name}[{i}] = {sp.sstr(c)}")
        if self.implicit is not None:
            for eq in self.implicit.residuals:
                for i, c in enumerate(eq.components):
                    lines.append(f"  R({eq.var.name})[{i}] = {sp.sstr(c)}")
        for p in self.partials:
            nz = sum(1 for row in p.block for e in row if e != 0)
            lines.append(f"  partial d({p.of})/d({p.wrt}): {len(p.block)}x{len(p.block[0]) if p.block else 0}, "
                         f"{nz} nonzero")
            lines += [f"    {', '.join(sp.sstr(e) for e in row)}" for row in p.block]
        for sub in self.submodels:
            lines.append("  submodel " + str(sub).replace("\n", "\n  "))
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ComposeDecl:
    """A composition the spec asks for: ``name`` is made of ``models`` (names); ``keep`` lists
    variables to expose as outputs even though another sub-model consumes them."""

    name: str
    models: tuple[str, ...]
    keep: tuple[str, ...] = ()
    doc: str = ""
    loc: Loc | None = field(default=None, compare=False)
    #: optional: the variables the spec declares as the composition's inputs; when given (not None,
    #: not empty), a consumed variable that no model provides and is not listed is a composition error
    inputs: tuple[str, ...] | None = None
    tangent: Tangent | None = None  # the derivative blocks declared as the composition's tangent


@dataclass(frozen=True, slots=True)
class Spec:
    """A loaded spec file (includes resolved): its models and the compositions it declares, in
    declaration order. ``digest`` hashes the normalised content (for caches and file headers)."""

    path: str
    models: tuple[Model, ...]
    compositions: tuple[ComposeDecl, ...] = ()
    digest: str = ""

    def model(self, name: str) -> Model:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)
