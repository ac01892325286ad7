"""The compiler's intermediate representations.

Two levels, both immutable (frozen dataclasses, tuples, SymPy expressions as leaves):

1. **Model IR** (what the front end produces and composition consumes). A :class:`Model` is a
   function from its input variables (and parameters) to its output variables. Every tensor variable
   is already expanded to scalar components: an SR2 variable ``state/S`` is six SymPy symbols (see
   :func:`component_symbols`), and each output is a tuple of SymPy expressions over input and
   parameter component symbols, in Mandel order. An *implicit* model instead declares unknowns and
   residuals; its outputs are its unknowns.

2. **Program IR** (what lowering produces and the backends consume). A :class:`Program` is a
   straight-line list of statements over batch-wise scalar values — :class:`Assign`,
   :class:`Newton` (a whole Newton solve, emitted as a loop with a per-point convergence mask) and
   :class:`LinearSolve` (an unrolled, sparsity-aware elimination) — plus which symbols hold the
   outputs and the requested derivatives. Backends print a Program; they never see Models.

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
    with a LinearSolve (see ``passes.symbols`` for the naming)."""

    of: str
    wrt: str
    block: tuple[tuple[sp.Expr, ...], ...]


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
    - implicit: ``implicit`` is set, the outputs are its unknowns, ``equations`` is empty;
    - composed: ``submodels`` holds the sub-models in evaluation order (topologically sorted, ties by
      declaration order); wiring is by variable name; ``inputs``/``outputs`` are the composed ones.

    ``partials`` is filled by the differentiation pass (structurally zero blocks are absent).

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
    tangent: Tangent | None = None  # declared in the spec (leaf models); compositions: ComposeDecl

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


# --------------------------------------------------------------------------------------------------
# program IR
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Assign:
    """``target = value`` for every batch point."""

    target: sp.Symbol
    value: sp.Expr


@dataclass(frozen=True, slots=True)
class LinearSolve:
    """Solve ``A X = B`` per point; ``X[i][j]`` is assigned to ``targets[i][j]``.

    ``A`` is n x n, ``B`` n x m, entries are expressions over symbols already assigned; structural
    zeros are ``sympy.S.Zero`` and the backend eliminates only over structurally nonzero entries.
    """

    A: tuple[tuple[sp.Expr, ...], ...]
    B: tuple[tuple[sp.Expr, ...], ...]
    targets: tuple[tuple[sp.Symbol, ...], ...]


#: the relative Newton tolerance is at least this many machine epsilons of the dtype (every backend,
#: and the reference interpreter, apply it to the residual-scale test of :class:`Newton`)
RTOL_FLOOR_EPS = 32


@dataclass(frozen=True, slots=True)
class Newton:
    """A Newton solve for ``unknowns`` with a per-point convergence mask.

    Start from ``guess``; each iteration evaluates ``body`` (assignments that may read the
    unknowns), then the ``residual`` and ``jacobian`` (dR/du) expressions, solves J du = -R and
    updates the points that have not converged. Convergence: ||R|| <= atol, or every
    |R_i| <= rtol * residual_scale[i] (or, when no scale is given, ||R|| <= rtol ||R0||), with rtol
    floored at a few ulps of the dtype.
    After the loop, ``unknowns`` hold the solution, and ``converged``, ``iterations`` and
    ``residual_norm`` hold the per-point status.
    """

    unknowns: tuple[sp.Symbol, ...]
    guess: tuple[sp.Expr, ...]
    body: tuple[Assign, ...]
    residual: tuple[sp.Expr, ...]
    jacobian: tuple[tuple[sp.Expr, ...], ...]
    solver: SolverOptions
    converged: sp.Symbol
    iterations: sp.Symbol
    residual_norm: sp.Symbol
    #: per residual component, the sum of the magnitudes of its terms (same symbols as ``residual``).
    #: A point counts as converged when every |R_i| <= rtol_eff * residual_scale[i]: each residual
    #: is zero to within the relative tolerance of the terms it is made of. Unlike rtol * ||R0|| this
    #: does not mix units, and it makes float32 (and tight float64 tolerances) reachable: an elastic
    #: step whose first residual is already at round-off level converges at once. Empty: the
    #: backends fall back to ||R|| <= rtol_eff * ||R0||.
    residual_scale: tuple[sp.Expr, ...] = ()


Statement = Assign | LinearSolve | Newton


@dataclass(frozen=True, slots=True)
class Program:
    """A straight-line program that evaluates a (composed) model for every batch point.

    ``inputs`` and ``parameters`` are read; ``outputs[var]`` are the expressions (usually symbols)
    written for each output component; ``derivatives[(out, in)]`` the d out / d in block (rows: out
    components, columns: in components), present only for blocks that are not structurally zero.
    ``status`` names the per-point solver status symbols (empty for explicit programs).

    Sharpened by ``passes.lower``: a symbol is assigned at most once per straight-line segment
    (segments are separated by Newton statements); a later segment may assign it again (e.g. the
    residual system recomputed at the solution after a Newton), and every read sees the latest
    assignment in program order. A Newton body's assignments are local to the solve: nothing after
    the Newton reads them without assigning them again. Status values: ``converged`` is boolean,
    ``iterations`` an integer, ``residual_norm`` a float (2-norm of the residual).
    """

    name: str
    inputs: tuple[Variable, ...]
    parameters: tuple[Parameter, ...]
    outputs: tuple[Variable, ...]
    body: tuple[Statement, ...]
    results: Mapping[str, tuple[sp.Expr, ...]]
    derivatives: Mapping[tuple[str, str], tuple[tuple[sp.Expr, ...], ...]] = field(default_factory=dict)
    status: Mapping[str, sp.Symbol] = field(default_factory=dict)
    #: the Jacobian's rows and columns (output and input names, in ``outputs``/``inputs`` order) when
    #: the program computes a selection (a tangent); None: every output by every input
    jacobian_of: tuple[str, ...] | None = None
    jacobian_wrt: tuple[str, ...] | None = None

    def __str__(self) -> str:
        return format_program(self)


def format_program(p: Program) -> str:
    """A readable, deterministic listing of a Program (what ``--dump-ir`` writes)."""
    lines = [f"program {p.name}"]
    lines += [f"  in  {v}" for v in p.inputs]
    lines += [f"  par {q}" for q in p.parameters]
    lines += [f"  out {v}" for v in p.outputs]
    lines += _format_body(p.body, "  ")
    for name, comps in p.results.items():
        lines.append(f"  result {name} = ({', '.join(sp.sstr(c) for c in comps)})")
    for (o, i), block in p.derivatives.items():
        rows = "; ".join(", ".join(sp.sstr(e) for e in row) for row in block)
        lines.append(f"  derivative d({o})/d({i}) = [{rows}]")
    for k, s in p.status.items():
        lines.append(f"  status {k} = {s}")
    if p.jacobian_of is not None:
        lines.append(f"  jacobian rows {', '.join(p.jacobian_of)}; columns {', '.join(p.jacobian_wrt or ())}")
    return "\n".join(lines)


def _format_body(body, indent: str) -> list[str]:
    lines = []
    for st in body:
        if isinstance(st, Assign):
            lines.append(f"{indent}{st.target} = {sp.sstr(st.value)}")
        elif isinstance(st, LinearSolve):
            lines.append(f"{indent}solve A X = B for X = {[[t.name for t in row] for row in st.targets]}")
            lines += [f"{indent}  A[{i}] = {[sp.sstr(e) for e in row]}" for i, row in enumerate(st.A)]
            lines += [f"{indent}  B[{i}] = {[sp.sstr(e) for e in row]}" for i, row in enumerate(st.B)]
        else:
            lines.append(f"{indent}newton {[u.name for u in st.unknowns]} ({st.solver}) -> "
                         f"{st.converged}, {st.iterations}, {st.residual_norm}")
            lines += [f"{indent}  guess {u} = {sp.sstr(g)}" for u, g in zip(st.unknowns, st.guess)]
            lines += _format_body(st.body, indent + "  ")
            lines += [f"{indent}  R[{i}] = {sp.sstr(r)}" for i, r in enumerate(st.residual)]
            lines += [f"{indent}  J[{i}] = {[sp.sstr(e) for e in row]}" for i, row in enumerate(st.jacobian)]
    return lines
