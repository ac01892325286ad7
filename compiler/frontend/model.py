"""One model of a spec: its YAML mapping -> a typed :class:`modelc.ir.Model` (explicit or implicit).

Order of work (it matters for the names an expression can see): parameters, inputs and unknowns are
declared first; ``define`` entries are built in file order (each sees the ones above it); then the
equations (explicit) or the residuals and guesses (implicit). ``old(x)`` adds the previous-step
variable of ``x`` to the model's inputs, after the declared ones, in order of first use.
"""
from __future__ import annotations

import keyword
import re

import sympy as sp

from modelc.errors import SpecError
from modelc.frontend import schema
from modelc.frontend.expr import (RESERVED, Binding, Helper, Scope, Source, build_expr, did_you_mean,
                                  parse)
from modelc.frontend.tensor import OpError, TValue
from modelc.frontend.yamlio import YMap, YScalar
from modelc.ir import (Equation, ImplicitSystem, Loc, Model, Parameter, SolverOptions, Tangent, Variable,
                       component_symbols, param_symbols)
from modelc.runtime.checks import Interval
from modelc.runtime.types import TYPES, TensorType

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # always fullmatch: "$" accepts a trailing newline
QUALIFIED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*")
HELPER_KEY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\s*([^()]*?)\s*\)\s*")
ON_FAILURE = ("nan", "substep")
METHODS = ("newton", "halley")
LINE_SEARCH_MAX = 30


def old_name(name: str) -> str:
    """The qualified name of a variable's previous-step value (NEML2's convention):
    ``state/x`` -> ``old_state/x``, ``forces/x`` -> ``old_forces/x``, ``x`` -> ``old_x``."""
    return "old_" + name


def check_ident(name: str, loc: Loc, what: str) -> None:
    if not isinstance(name, str) or not IDENT.fullmatch(name) or keyword.iskeyword(name) or name.startswith("__"):
        raise SpecError(f"{what} {name!r} is not a valid name (letters, digits and _, not starting with a "
                        f"digit or __, not a Python keyword)", loc)
    if name in RESERVED:
        raise SpecError(f"{what} {name!r} clashes with the built-in {name!r}", loc,
                        hint="choose another local name; the qualified name (var:) can stay")


def tensor_type(node, where: str) -> TensorType:
    if isinstance(node, TensorType):
        return node
    name = node.value
    if name not in TYPES:
        raise SpecError(f"unknown type {name!r} for {where}", node.loc,
                        hint=did_you_mean(name, TYPES) or f"known types: {', '.join(TYPES)}")
    return TYPES[name]


class ModelBuilder:
    """Builds one model; holds the scope and the variables as they are declared."""

    def __init__(self, name: str, node: YMap, loc: Loc, file_helpers: dict):
        self.name, self.node, self.loc = name, node, loc
        self.scope = Scope(helpers=dict(file_helpers), old=self._old)
        self.declared: dict[str, Loc] = {}      # local name -> where declared
        self.qualified: dict[str, Loc] = {}     # qualified name -> where declared
        self.olds: dict[str, Variable] = {}
        self.inputs: list[Variable] = []
        self.internal_unknowns: set[str] = set()
        self.initial: list[Equation] = []

    # -- declarations --------------------------------------------------------------------------
    def _declare_local(self, local: str, loc: Loc, what: str) -> None:
        check_ident(local, loc, what)
        if local in self.declared or local in self.scope.helpers:
            first = self.declared.get(local)
            raise SpecError(f"{what} {local!r} is declared twice in model {self.name!r}"
                            + (f" (first at line {first.line})" if first else " (it is a helper function)"),
                            loc)
        self.declared[local] = loc

    def _variables(self, mapping, role: str) -> list[tuple[str, Variable]]:
        out = []
        if mapping is None:
            return out
        for local, vnode in mapping.items.items():
            kloc = mapping.keys[local].loc
            self._declare_local(local, kloc, role)
            f = schema.check(vnode, "variable", f"{role} {local!r} of model {self.name!r}") \
                if not (isinstance(vnode, YScalar) and vnode.value is None) else \
                {"var": None, "type": "Scalar", "doc": "", "initial": None}
            qname = local if f["var"] is None else f["var"].value
            qloc = kloc if f["var"] is None else f["var"].loc
            if not QUALIFIED.fullmatch(qname):
                raise SpecError(f"{qname!r} is not a valid qualified variable name (names of letters, digits "
                                f"and _ separated by '/')", qloc)
            if qname in self.qualified:
                raise SpecError(f"variable {qname!r} appears twice in model {self.name!r} (first at line "
                                f"{self.qualified[qname].line})", qloc)
            self.qualified[qname] = qloc
            ttype = tensor_type(f["type"] if not isinstance(f["type"], str) else TYPES[f["type"]],
                                f"{role} {local!r}")
            doc = f["doc"] if isinstance(f["doc"], str) else f["doc"].value
            var = Variable(qname, ttype, doc, qloc)
            if f["initial"] is not None:
                self.initial.append(self._initial_value(f["initial"], var, role, local))
            out.append((local, var))
        return out

    def _initial_value(self, node, var: Variable, role: str, local: str) -> Equation:
        """``initial:`` of an output or unknown: an expression of parameters and numbers, of the
        variable's type, for a state variable (the driver carries ``state/x`` to ``old_state/x``)."""
        text, loc = _expr_node(node, f"the initial value of {local!r}")
        if role not in ("output", "unknown"):
            raise SpecError(f"{role} {local!r} declares an initial value; only a model's outputs and "
                            f"unknowns (the state it provides) have one", loc,
                            hint="declare it where the variable is provided")
        if not var.name.startswith("state/"):
            raise SpecError(f"{role} {local!r} ({var.name}) declares an initial value, but it is not a state "
                            f"variable: only state/... values are carried from step to step", loc,
                            hint=f"name it state/{var.name.split('/')[-1]} (var:) or drop 'initial'")
        value = build_expr(text, loc, self.scope)
        src = Source(text, loc)
        if value.type is not var.type:
            raise src.error(f"the initial value of {local!r} ({var.name}) must be a {var.type.name}, but this "
                            f"expression is a {value.type.name}",
                            hint="" if var.type.size == 1 else f"write e.g. 0.01*I2 for an {var.type.name}")
        comps = tuple(sp.sympify(c) for c in value.comps)
        params = {s for b in self.scope.names.values() if b.kind == "parameter" for s in b.value.comps}
        stray = sorted({str(s) for c in comps for s in c.free_symbols if s not in params})
        if stray:
            raise src.error(f"the initial value of {local!r} may use numbers and parameters only, not "
                            f"{', '.join(stray)}", hint="it is evaluated once, before the first step")
        return Equation(var, comps, loc)

    def _parameters(self, mapping) -> list[Parameter]:
        out = []
        if mapping is None:
            return out
        for pname, pnode in mapping.items.items():
            kloc = mapping.keys[pname].loc
            self._declare_local(pname, kloc, "parameter")
            f = schema.check(pnode, "parameter", f"parameter {pname!r} of model {self.name!r}") \
                if not (isinstance(pnode, YScalar) and pnode.value is None) else \
                {"type": "Scalar", "default": None, "units": "", "doc": "", "bounds": None}
            ttype = tensor_type(f["type"] if not isinstance(f["type"], str) else TYPES[f["type"]],
                                f"parameter {pname!r}")
            default = None
            if f["default"] is not None:
                d = f["default"]
                vals = tuple(float(i.value) for i in d.items) if hasattr(d, "items") and isinstance(d.items, tuple) \
                    else (float(d.value),)
                if len(vals) != ttype.size:
                    raise SpecError(f"default of parameter {pname!r} has {len(vals)} value"
                                    f"{'s' * (len(vals) != 1)}, its type {ttype.name} has {ttype.size} "
                                    f"components", d.loc)
                default = vals
            units = f["units"] if isinstance(f["units"], str) else str(f["units"].value)
            doc = f["doc"] if isinstance(f["doc"], str) else str(f["doc"].value)
            bounds = _bounds(f.get("bounds"), pname, default, f["default"])
            shared = bool(getattr(f.get("shared"), "value", False))
            p = Parameter(pname, ttype, default, units, doc, kloc, bounds=bounds, shared=shared)
            self.scope.names[pname] = Binding("parameter", TValue(ttype, param_symbols(pname, ttype)))
            out.append(p)
        return out

    def _outputs(self, mapping) -> list[tuple[str, Variable]]:
        """Declared outputs, bound so that ``old(x)`` reads an output's previous value (reading the
        output itself in an expression is an error: its equation defines it)."""
        out = self._variables(mapping, "output")
        for local, var in out:
            self._bind(local, var, "output")
        return out

    def _bind(self, local: str, var: Variable, kind: str) -> None:
        self.scope.names[local] = Binding(kind, TValue(var.type, component_symbols(var.name, var.type)), var)

    def _old(self, b: Binding) -> TValue:
        var = b.var
        if var.name in self.internal_unknowns:
            raise OpError(f"old() of unknown {var.name!r}: model {self.name!r} declares outputs, so its "
                          f"unknowns are internal to the solve and have no previous value", 0,
                          "take old() of an output, or give the unknown a guess without old()")
        name = old_name(var.name)
        if name not in self.olds:
            existing = next((v for v in self.inputs if v.name == name), None)
            if existing is not None and existing.type is not var.type:
                raise SpecError(f"input {name!r} is declared {existing.type.name}, but it is the previous "
                                f"value of {var.name!r}, a {var.type.name}", existing.loc)
            self.olds[name] = existing or Variable(name, var.type, f"{var.name} at the previous step", var.loc)
        v = self.olds[name]
        return TValue(v.type, component_symbols(v.name, v.type))

    # -- define --------------------------------------------------------------------------------
    def _defines(self, mapping) -> None:
        if mapping is None:
            return
        for key, vnode in mapping.items.items():
            kloc = mapping.keys[key].loc
            text, vloc = _expr_node(vnode, f"define {key!r}")
            m = HELPER_KEY.fullmatch(key)
            if m:
                fname, params = m.group(1), tuple(p.strip() for p in m.group(2).split(",") if p.strip())
                check_ident(fname, kloc, "helper function")
                for p in params:
                    check_ident(p, kloc, f"argument of {fname}()")
                if len(set(params)) != len(params):
                    raise SpecError(f"helper {fname}() repeats an argument name", kloc)
                if fname in self.declared or fname in self.scope.helpers:
                    raise SpecError(f"helper function {fname!r} clashes with another name in model "
                                    f"{self.name!r}", kloc)
                src = Source(text, vloc)
                self.scope.helpers[fname] = Helper(fname, params, parse(src), src)
                continue
            self._declare_local(key, kloc, "define")
            value = build_expr(text, vloc, self.scope)
            self.scope.names[key] = Binding("define", value, None, Source(text, vloc))

    # -- equations -----------------------------------------------------------------------------
    def _equations(self, mapping, targets: list[tuple[str, Variable]], what: str, required: bool,
                   default=None) -> tuple[Equation, ...]:
        by_local = dict(targets)
        given = {}
        if mapping is not None:
            for key, vnode in mapping.items.items():
                kloc = mapping.keys[key].loc
                if key not in by_local:
                    raise SpecError(f"{what}: {key!r} is not one of {', '.join(by_local) or '(none)'}", kloc,
                                    hint=did_you_mean(key, by_local))
                given[key] = vnode
        out = []
        for local, var in targets:
            if local not in given:
                if required or default is None:
                    loc = mapping.loc if mapping is not None else self.loc
                    raise SpecError(f"{what}: no expression for {local!r} ({var.name}, {var.type.name})", loc)
                value = default(local, var)
                loc = None
            else:
                text, loc = _expr_node(given[local], f"{what} {local!r}")
                value = build_expr(text, loc, self.scope)
                if value.type is not var.type:
                    src = Source(text, loc)
                    raise src.error(f"{local!r} ({var.name}) is {var.type.name}, but this expression is "
                                    f"{value.type.name}", None)
            comps = tuple(sp.sympify(c) for c in value.comps)
            out.append(Equation(var, comps, loc))
        return tuple(out)

    # -- implicit models ------------------------------------------------------------------------
    def _implicit(self, f: dict, implicit) -> tuple:
        """An implicit model's outputs, equations, system and ``uses`` nodes. With declared outputs
        (computed from the solution), the unknowns are internal: no previous value, a guess is
        required."""
        if f["equations"] is not None and f["outputs"] is None:
            raise SpecError(f"model {self.name!r} has 'equations' but no 'outputs': declare the variables "
                            f"the equations compute from the solved unknowns",
                            self.node.keys["equations"].loc)
        fi = schema.check(implicit, "implicit", f"implicit system of model {self.name!r}")
        unknowns = self._variables(fi["unknowns"], "unknown")
        for local, var in unknowns:
            self._bind(local, var, "unknown")
        # with declared outputs, the unknowns are the solver's own (not outputs, no previous value)
        self.internal_unknowns = {v.name for _, v in unknowns} if f["outputs"] is not None else set()
        outputs_l = self._outputs(f["outputs"])
        self._defines(f["define"])
        residuals = self._equations(fi["residuals"], unknowns, "residuals", True)
        if self.internal_unknowns:
            given = fi["guess"].items if fi["guess"] is not None else {}
            for local, var in unknowns:
                if local not in given:
                    raise SpecError(f"unknown {local!r} of model {self.name!r} needs a guess: the model "
                                    f"declares outputs, so its unknowns are internal to the solve and "
                                    f"have no previous value (e.g. guess: {{{local}: 0}})",
                                    fi["unknowns"].keys[local].loc)
        guess = self._equations(fi["guess"], unknowns, "guess", False,
                                default=lambda local, var: self._old(self.scope.names[local]))
        unknown_syms = {sym for _, v in unknowns for sym in v.symbols}
        for eq in guess:
            if eq.loc is not None and any(c.free_symbols & unknown_syms for c in eq.components):
                raise SpecError(f"the guess of {eq.var.name!r} depends on the unknowns; a guess is "
                                f"computed before the solve (use old(...) values, inputs and parameters)",
                                eq.loc)
        uses_nodes = fi["uses"].items if fi["uses"] else ()
        solver = _solver(fi["solver"])
        if solver.method == "halley" and (len(unknowns) != 1 or len(unknowns[0][1].symbols) != 1):
            raise SpecError(f"solver method 'halley' of model {self.name!r} needs one scalar unknown "
                            f"(it has {sum(len(v.symbols) for _, v in unknowns)} components); use "
                            f"'newton' for a system", fi["solver"].keys["method"].loc)
        system = ImplicitSystem(tuple(v for _, v in unknowns), residuals, guess,
                                tuple(u.value for u in uses_nodes), solver)
        if outputs_l:  # explicit outputs, computed from the solution (passes.compose splits them off)
            equations = self._equations(f["equations"], outputs_l, "equations", True)
            outputs = tuple(v for _, v in outputs_l)
        else:
            outputs = tuple(v for _, v in unknowns)
            equations = ()
        return outputs, equations, system, uses_nodes

    # -- the model -----------------------------------------------------------------------------
    def build(self) -> tuple[Model, tuple]:
        f = schema.check(self.node, "model", f"model {self.name!r}")
        implicit = f["implicit"]
        parameters = self._parameters(f["parameters"])
        inputs = self._variables(f["inputs"], "input")
        self.inputs = [v for _, v in inputs]
        for local, var in inputs:
            self._bind(local, var, "input")
        uses_nodes = ()
        if implicit is not None:
            outputs, equations, system, uses_nodes = self._implicit(f, implicit)
        else:
            if f["outputs"] is None:
                raise SpecError(f"model {self.name!r} has neither 'outputs' (an explicit model) nor "
                                f"'implicit' (an implicit model)", self.loc)
            outputs_l = self._outputs(f["outputs"])
            self._defines(f["define"])
            equations = self._equations(f["equations"], outputs_l, "equations", True)
            outputs = tuple(v for _, v in outputs_l)
            system = None
        extra = tuple(v for n, v in self.olds.items() if v not in self.inputs)
        doc = f["doc"] if isinstance(f["doc"], str) else str(f["doc"].value)
        tangent = tangent_decl(f["tangent"], f"model {self.name!r}", self.node.keys.get("tangent"))
        if tangent is not None:
            check_tangent(tangent, f"model {self.name!r}", [v.name for v in outputs],
                          [v.name for v in tuple(self.inputs) + extra] + [p.name for p in parameters])
        model = Model(self.name, tuple(self.inputs) + extra, outputs, tuple(parameters), equations, system,
                      doc=doc, loc=self.loc, tangent=tangent, initial=tuple(self.initial))
        return model, uses_nodes


def tangent_decl(node, where: str, key=None) -> Tangent | None:
    """``tangent: {of: [...], wrt: [...]}`` of a model or composition (None when absent)."""
    if node is None:
        return None
    f = schema.check(node, "tangent", f"the tangent of {where}")
    names, locs = {}, []
    for side in ("of", "wrt"):
        items = f[side].items
        if not items:
            raise SpecError(f"the tangent of {where}: '{side}' lists no variables", f[side].loc)
        seen = []
        for item in items:
            if item.value in seen:
                raise SpecError(f"the tangent of {where} lists {item.value!r} twice in '{side}'", item.loc)
            seen.append(item.value)
            locs.append(item.loc)
        names[side] = tuple(seen)
    return Tangent(names["of"], names["wrt"], getattr(key, "loc", None) or node.loc, tuple(locs))


def check_tangent(t: Tangent, where: str, outputs, inputs) -> None:
    """Every ``of`` name is an output and every ``wrt`` name an input (or a parameter: ``inputs`` lists
    both) of the model, or a SpecError at the name."""
    for side, names, pool, what in (("of", t.of, outputs, "outputs"), ("wrt", t.wrt, inputs, "inputs or parameters")):
        for n in names:
            if n not in pool:
                raise SpecError(f"the tangent of {where} names {n!r} in '{side}', which is not one of its "
                                f"{what} ({', '.join(pool) or 'none'})", t.loc_of(n),
                                hint=did_you_mean(n, pool))


def _bounds(node, pname: str, default, default_node) -> str:
    """A parameter's ``bounds`` in the runtime's canonical text (``"[0, 0.5)"``), or "" for none;
    the default must lie inside."""
    if node is None:
        return ""
    if isinstance(node, YScalar):
        text = node.value
    else:
        lo, hi = (i.value for i in node.items)
        text = f"[{lo!r}, {hi!r}]"
    try:
        interval = Interval.parse(text)
    except ValueError as exc:
        hint = "e.g. bounds: \"[0, 0.5)\" or bounds: \"(0, inf)\"" if "not an interval" in str(exc) else ""
        raise SpecError(f"parameter {pname!r}: {exc}", node.loc, hint=hint) from None
    for x in default or ():
        if not interval.contains(x):
            raise SpecError(f"the default {x!r} of parameter {pname!r} is outside its bounds {interval}",
                            default_node.loc)
    return str(interval)


def _expr_node(node, what: str) -> tuple[str, Loc]:
    if not isinstance(node, YScalar) or isinstance(node.value, bool) or node.value is None \
            or not isinstance(node.value, (str, int, float)):
        raise SpecError(f"{what} must be an expression (a string or a number)", getattr(node, "loc", None))
    return str(node.value), node.loc


def _solver(node) -> SolverOptions:
    if node is None:
        return SolverOptions()
    f = schema.check(node, "solver", "solver options")
    vals = {k: (v.value if isinstance(v, YScalar) else v) for k, v in f.items()}
    for k in ("rtol", "atol"):
        if not vals[k] >= 0:
            raise SpecError(f"solver option {k!r} must be >= 0", f[k].loc)
    for k in ("max_iter", "max_substeps"):
        if not vals[k] >= 1:
            raise SpecError(f"solver option {k!r} must be >= 1", f[k].loc)
    if vals["on_failure"] not in ON_FAILURE:
        raise SpecError(f"solver option 'on_failure' must be one of {', '.join(ON_FAILURE)}",
                        f["on_failure"].loc, hint=did_you_mean(vals["on_failure"], ON_FAILURE))
    if vals["method"] not in METHODS:
        raise SpecError(f"solver option 'method' must be one of {', '.join(METHODS)}",
                        f["method"].loc, hint=did_you_mean(vals["method"], METHODS))
    if not 0 <= vals["line_search"] <= LINE_SEARCH_MAX:
        raise SpecError(f"solver option 'line_search' must be in [0, {LINE_SEARCH_MAX}] (0: full Newton steps; "
                        f"{LINE_SEARCH_MAX} halvings cut a step to 1e-9 of its length)", f["line_search"].loc)
    if vals["line_search"] and vals["method"] != "newton":
        raise SpecError(f"solver option 'line_search' needs method: newton (a {vals['method']} step is not "
                        "a descent direction of the residual norm)", f["line_search"].loc)
    return SolverOptions(float(vals["rtol"]), float(vals["atol"]), int(vals["max_iter"]),
                         vals["on_failure"], int(vals["max_substeps"]), vals["method"],
                         int(vals["line_search"]))


def file_helpers(mapping) -> dict:
    """Helper functions declared at file level (``define:`` next to ``models:``)."""
    out = {}
    if mapping is None:
        return out
    for key, vnode in mapping.items.items():
        kloc = mapping.keys[key].loc
        m = HELPER_KEY.fullmatch(key)
        if not m:
            raise SpecError(f"file-level define {key!r} must be a helper function `name(args): expr`", kloc,
                            hint="named values belong in a model's define section")
        fname, params = m.group(1), tuple(p.strip() for p in m.group(2).split(",") if p.strip())
        check_ident(fname, kloc, "helper function")
        for p in params:
            check_ident(p, kloc, f"argument of {fname}()")
        text, vloc = _expr_node(vnode, f"define {key!r}")
        src = Source(text, vloc)
        out[fname] = Helper(fname, params, parse(src), src)
    return out
