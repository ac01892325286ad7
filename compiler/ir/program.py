"""The Program IR: what lowering produces and the backends consume.

A :class:`Program` is a straight-line list of statements over batch-wise scalar values —
:class:`Assign`, :class:`Newton` (a whole Newton solve, emitted as a loop with a per-point
convergence mask) and :class:`LinearSolve` (an unrolled, sparsity-aware elimination) — plus which
symbols hold the outputs and the requested derivatives. Backends print a Program; they never see
Models. Immutable like the Model IR (:mod:`modelc.ir.model`), whose variables, parameters and
solver options it reuses.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

import sympy as sp

from modelc.ir.model import Equation, Loc, Parameter, SolverOptions, Variable


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

#: the largest value a relative stopping test trusts (finite in float32 too): ``||R0||`` of the
#: unscaled test, and each residual scale, which is 0 above it (passes.lower._residual_scale): an
#: overflowed scale made ``|R| <= rtol * inf`` hold for any finite or infinite residual (float32
#: chaboche2_coupled "converged" on 2% strain steps to a stress 15x the solution's, norton at its
#: first guess to 1e28 MPa)
FINITE_MAX = 3.0e38

#: Armijo's constant of the backtracking line search (``SolverOptions.line_search``): a trial step
#: ``a du`` is kept when ``||R(u + a du)||^2 <= (1 - 2 LINE_SEARCH_C a) ||R(u)||^2`` (for a Newton
#: step, ``d/da ||R||^2 = -2 ||R||^2`` at ``a = 0``: the trial keeps 1e-4 of the decrease the
#: linearization promises), else it is halved. Every backend and the reference interpreter use it.
LINE_SEARCH_C = 1.0e-4


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
    #: ``(d2R/du2,)`` for a Halley solve (``solver.method == "halley"``, one scalar unknown; same
    #: symbols as ``residual``), else empty. A Halley step is ``du = -2 R J / (2 J^2 - R H)`` where
    #: ``|R H| <= J^2`` (the Newton step scaled by 2/3..2), else the Newton step ``-R / J``
    #: (:func:`modelc.passes.expand_solve.halley_step`, the one formula every backend prints).
    curvature: tuple[sp.Expr, ...] = ()
    #: values the solve hands to what follows it: after the loop each target holds its expression
    #: (over the body's symbols, the unknowns and what the solve reads) at the solution. The
    #: evaluation that ends a solve (every point converged or stopped) is made at the unknowns'
    #: final values, so a backend may keep what it computed there instead of computing it again
    #: (the C backend's lane arrays: j2_voce_af's 1/(1 + g dgamma) and Voce exponential);
    #: :mod:`modelc.passes.cse` makes them from the function calls and reciprocals of the residual
    #: and its scale that the statements after the solve would compute again (no norms). A backend
    #: that keeps no loop values evaluates them after the loop (:func:`export_values`).
    exports: tuple[Assign, ...] = ()


def inlined_body(st: "Newton") -> dict:
    """Each body symbol of ``st`` -> its value with the body's earlier assignments put in their place
    (an expression over the unknowns and what the solve reads)."""
    from modelc.symdag import xreplace

    flat: dict = {}
    for a in st.body:
        value = sp.sympify(a.value)
        flat[a.target] = xreplace(value, flat) if flat else value
    return flat


def export_values(st: "Newton") -> tuple[Assign, ...]:
    """``st.exports`` with the body's assignments they read put in their place (:func:`inlined_body`),
    which a backend that keeps no values of the loop (PyTorch, Triton, the interpreter) evaluates
    after it. Inlined, a power of a baked exponent is one the Triton printer sees whole (``n - 1`` of
    parameters, not a hoisted body symbol)."""
    from modelc.symdag import xreplace

    flat = inlined_body(st)
    return tuple(Assign(x.target, xreplace(sp.sympify(x.value), flat)) for x in st.exports)


Statement = Assign | LinearSolve | Newton


@dataclass(frozen=True, slots=True)
class Variant:
    """One thing a caller can ask a model for, computed by the same Program: ``value`` (outputs
    only), ``tangent`` (outputs and the declared derivative blocks ``of`` x ``wrt``), ``jacobian``
    (outputs and d outputs / d inputs) or ``total`` (outputs and d outputs / d (inputs, parameters)).
    ``bit`` is its flag in :attr:`Program.masks` and the selector the generated code takes (``V``);
    ``of`` / ``wrt`` name the Jacobian's rows and columns (None: every output / every input; a
    parameter ``p`` is ``$p``)."""

    name: str
    bit: int
    derivatives: bool
    of: tuple[str, ...] | None = None
    wrt: tuple[str, ...] | None = None


#: the variants' bits (the selector ``V`` of the generated functions and kernels)
VARIANT_BITS = {"value": 1, "tangent": 2, "jacobian": 4, "total": 8}


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
    #: the model's documentation and where it was declared (traceability: the generated module's
    #: header names the spec file and line and quotes the doc; nothing goes back to the Spec for them)
    doc: str = ""
    loc: Loc | None = field(default=None, compare=False)
    #: declared initial values of state outputs, over parameter symbols only (``Model.initial``)
    initial: tuple[Equation, ...] = ()
    #: what the program serves (``passes.variants``): empty for a program that computes one thing
    #: (its derivatives, if any, are its Jacobian). With variants, ``masks[k]`` holds the bits of the
    #: variants that need statement ``k`` (the backends guard it by them) and ``derivatives`` holds
    #: every block any variant returns.
    variants: tuple[Variant, ...] = ()
    masks: tuple[int, ...] = ()

    def __str__(self) -> str:
        return format_program(self)


def variants_of(p: Program) -> tuple[Variant, ...]:
    """The variants ``p`` serves: its own, or (a program that computes one thing) ``value`` and its
    Jacobian: ``jacobian`` (every output by every input; all zero when ``p`` has no derivative
    block) or, for a selection, ``tangent``."""
    if p.variants:
        return p.variants
    name = "jacobian" if p.jacobian_of is None and p.jacobian_wrt is None else "tangent"
    return (Variant("value", VARIANT_BITS["value"], False),
            Variant(name, VARIANT_BITS[name], True, p.jacobian_of, p.jacobian_wrt))


def selects(v: Variant, of: str, wrt: str) -> bool:
    """Whether variant ``v`` returns the derivative block d ``of`` / d ``wrt``."""
    if not v.derivatives:
        return False
    if v.wrt is None and wrt.startswith("$"):
        return False
    return (v.of is None or of in v.of) and (v.wrt is None or wrt in v.wrt)


def view(p: Program, name: str) -> Program:
    """The program that computes variant ``name`` of ``p`` alone: the statements it needs (no masks)
    and the derivative blocks it returns, with its Jacobian selection."""
    v = next((x for x in variants_of(p) if x.name == name), None)
    if v is None:
        raise KeyError(f"program {p.name} has no variant {name!r}")
    body = p.body if not p.masks else tuple(st for st, m in zip(p.body, p.masks) if m & v.bit)
    derivs = {k: b for k, b in p.derivatives.items() if selects(v, *k)} if p.variants else (
        dict(p.derivatives) if v.derivatives else {})
    return replace(p, body=body, derivatives=derivs, jacobian_of=v.of, jacobian_wrt=v.wrt, variants=(),
                   masks=())




def format_program(p: Program) -> str:
    """A readable, deterministic listing of a Program (what ``--dump-ir`` writes)."""
    lines = [f"program {p.name}" + (f"  # {p.loc.file}:{p.loc.line}" if p.loc is not None else "")]
    lines += [f"  in  {v}" for v in p.inputs]
    lines += [f"  par {q}" for q in p.parameters]
    lines += [f"  out {v}" for v in p.outputs]
    lines += [f"  init {eq.var.name} = ({', '.join(sp.sstr(c) for c in eq.components)})" for eq in p.initial]
    for v in p.variants:
        sel = "" if not v.derivatives else f" d({', '.join(v.of or ('*',))})/d({', '.join(v.wrt or ('*',))})"
        lines.append(f"  variant {v.name} (bit {v.bit}){sel}")
    if p.masks:  # each statement under the bits of the variants that need it
        for st, m in zip(p.body, p.masks):
            lines += _format_body((st,), f"  [{m:2d}] ")
    else:
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
            lines += [f"{indent}  H[{i}] = {sp.sstr(h)}" for i, h in enumerate(st.curvature)]
            lines += [f"{indent}  export {x.target} = {sp.sstr(x.value)}" for x in st.exports]
    return lines
