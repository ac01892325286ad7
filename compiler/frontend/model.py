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
from modelc.frontend.tensor import TValue
from modelc.frontend.yamlio import YMap, YScalar
from modelc.ir import (Equation, ImplicitSystem, Loc, Model, Parameter, SolverOptions, Tangent, Variable,
                       component_symbols, param_symbols)
from modelc.runtime.types import TYPES, TensorType

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUALIFIED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")
HELPER_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\s*([^()]*?)\s*\)\s*$")
ON_FAILURE = ("nan", "substep")


def old_name(name: str) -> str:
    """The qualified name of a variable's previous-step value (NEML2's convention):
    ``state/x`` -> ``old_state/x``, ``forces/x`` -> ``old_forces/x``, ``x`` -> ``old_x``."""
    return "old_" + name


def check_ident(name: str, loc: Loc, what: str) -> None:
    if not IDENT.match(name) or keyword.iskeyword(name) or name.startswith("__"):
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
                {"var": None, "type": "Scalar", "doc": ""}
            qname = local if f["var"] is None else f["var"].value
            qloc = kloc if f["var"] is None else f["var"].loc
            if not QUALIFIED.match(qname):
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
            out.append((local, var))
        return out

    def _parameters(self, mapping) -> list[Parameter]:
        out = []
        if mapping is None:
            return out
        for pname, pnode in mapping.items.items():
            kloc = mapping.keys[pname].loc
            self._declare_local(pname, kloc, "parameter")
            f = schema.check(pnode, "parameter", f"parameter {pname!r} of model {self.name!r}") \
                if not (isinstance(pnode, YScalar) and pnode.value is None) else \
                {"type": "Scalar", "default": None, "units": "", "doc": ""}
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
            p = Parameter(pname, ttype, default, units, doc, kloc)
            self.scope.names[pname] = Binding("parameter", TValue(ttype, param_symbols(pname, ttype)))
            out.append(p)
        return out

    def _bind(self, local: str, var: Variable, kind: str) -> None:
        self.scope.names[local] = Binding(kind, TValue(var.type, component_symbols(var.name, var.type)), var)

    def _old(self, b: Binding) -> TValue:
        var = b.var
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
            m = HELPER_KEY.match(key)
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
            self.scope.names[key] = Binding("define", value)

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
            for key in ("outputs", "equations"):
                if f[key] is not None:
                    raise SpecError(f"model {self.name!r} is implicit: its outputs are its unknowns, so it "
                                    f"has no {key!r}", self.node.keys[key].loc)
            fi = schema.check(implicit, "implicit", f"implicit system of model {self.name!r}")
            unknowns = self._variables(fi["unknowns"], "unknown")
            for local, var in unknowns:
                self._bind(local, var, "unknown")
            self._defines(f["define"])
            residuals = self._equations(fi["residuals"], unknowns, "residuals", True)
            guess = self._equations(fi["guess"], unknowns, "guess", False,
                                    default=lambda local, var: self._old(self.scope.names[local]))
            unknown_syms = {sym for _, v in unknowns for sym in v.symbols}
            for eq in guess:
                if eq.loc is not None and any(c.free_symbols & unknown_syms for c in eq.components):
                    raise SpecError(f"the guess of {eq.var.name!r} depends on the unknowns; a guess is "
                                    f"computed before the solve (use old(...) values, inputs and parameters)",
                                    eq.loc)
            uses_nodes = fi["uses"].items if fi["uses"] else ()
            system = ImplicitSystem(tuple(v for _, v in unknowns), residuals, guess,
                                    tuple(u.value for u in uses_nodes), _solver(fi["solver"]))
            outputs = tuple(v for _, v in unknowns)
            equations = ()
        else:
            if f["outputs"] is None:
                raise SpecError(f"model {self.name!r} has neither 'outputs' (an explicit model) nor "
                                f"'implicit' (an implicit model)", self.loc)
            outputs_l = self._variables(f["outputs"], "output")
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
                      doc=doc, loc=self.loc, tangent=tangent)
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
    return SolverOptions(float(vals["rtol"]), float(vals["atol"]), int(vals["max_iter"]),
                         vals["on_failure"], int(vals["max_substeps"]))


def file_helpers(mapping) -> dict:
    """Helper functions declared at file level (``define:`` next to ``models:``)."""
    out = {}
    if mapping is None:
        return out
    for key, vnode in mapping.items.items():
        kloc = mapping.keys[key].loc
        m = HELPER_KEY.match(key)
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
