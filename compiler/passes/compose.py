"""Composition: wire models together by the variables they share (NEML2's ComposedModel).

Given models that each declare what they consume (inputs) and provide (outputs), :func:`compose`
does, with no manual wiring:

1. dependency registration: model i depends on model j when i consumes a variable j provides;
2. input/output identification: the composed inputs are consumed and provided by nobody; the
   composed outputs are provided and consumed by nobody, plus those listed in ``keep``;
3. dependency resolution: a topological order, ties broken by declaration order (deterministic);
4. parameters merged by name (same name = same parameter; a type/default conflict is an error).

The chain rule is the differentiation pass's job (:mod:`modelc.passes.differentiate`).

Implicit models: ``ImplicitSystem.uses`` names models whose outputs the residuals read. Composing an
implicit model *resolves* it: the used models and a leaf that computes the residuals are composed
into one explicit *residual system* whose inputs are the unknowns and the implicit model's external
inputs, and which becomes the implicit model's single sub-model (``submodels == (system,)``). The
variables the used models provide are renamed ``<implicit>/<var>`` inside the system so that the
same building block (elasticity, say) can also appear in the outer composition without a clash.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping, Sequence

import sympy as sp

from modelc.errors import CompositionError, SpecError
from modelc.ir import ComposeDecl, Equation, Model, Parameter, Spec, Variable
from modelc.passes.symbols import local_name, residual_name


# --------------------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------------------
def compose(decl: ComposeDecl, available: Mapping[str, Model]) -> Model:
    """The composed model ``decl`` asks for, from the models in ``available`` (by name)."""
    models = []
    for name in decl.models:
        if name not in available:
            raise CompositionError(
                f"composition '{decl.name}': unknown model '{name}'"
                f"{_loc(decl)}; known models: {', '.join(sorted(available)) or '(none)'}")
        m = available[name]
        models.append(resolve_implicit(m, available) if m.is_implicit else m)
    declared = getattr(decl, "inputs", None) or None  # ComposeDecl.inputs, when the spec declares them
    composed = compose_models(decl.name, models, keep=decl.keep, declared_inputs=declared,
                              doc=decl.doc, loc=decl.loc, declared_state=True)
    return replace(composed, tangent=decl.tangent) if decl.tangent is not None else composed


def compose_spec_model(spec: Spec, name: str) -> Model:
    """Model ``name`` of ``spec``: a leaf model (implicit ones resolved) or a declared composition,
    composed (compositions may use other compositions, in any declaration order)."""
    leaves = {m.name: m for m in spec.models}
    decls = {d.name: d for d in spec.compositions}
    for d in spec.compositions:
        if d.name in leaves:
            raise CompositionError(f"'{d.name}' is declared both as a model and as a composition{_loc(d)}")
    done: dict[str, Model] = {}

    class _Available(Mapping):  # composes declared compositions on first use
        def __getitem__(self, key: str) -> Model:
            if key in leaves:
                return leaves[key]
            if key not in decls:
                raise KeyError(key)
            if key not in done:
                if key in stack:
                    raise CompositionError("compositions include each other: " + " -> ".join(stack + [key]))
                stack.append(key)
                done[key] = compose(decls[key], self)
                stack.pop()
            return done[key]

        def __iter__(self):
            return iter(list(leaves) + [d for d in decls if d not in leaves])

        def __len__(self):
            return len(leaves) + len(decls)

    stack: list[str] = []
    avail = _Available()
    if name not in leaves and name not in decls:
        raise CompositionError(f"{spec.path}: no model or composition named '{name}'; "
                               f"known: {', '.join(avail) or '(none)'}")
    m = avail[name]
    return resolve_implicit(m, avail) if m.is_implicit else m


def compose_models(name: str, models: Sequence[Model], *, keep: Iterable[str] = (),
                   declared_inputs: Iterable[str] | None = None, doc: str = "", loc=None,
                   declared_state: bool = False) -> Model:
    """Compose ``models`` (in declaration order) into one model called ``name``."""
    models = tuple(models)
    seen: dict[str, int] = {}
    for i, m in enumerate(models):
        if m.name in seen:
            raise CompositionError(f"composition '{name}': model '{m.name}' is listed twice")
        seen[m.name] = i

    # 1. dependency registration
    provider: dict[str, tuple[int, Variable]] = {}
    for i, m in enumerate(models):
        for v in m.outputs:
            if v.name in provider:
                j, first = provider[v.name]
                raise _located(
                    f"composition '{name}': variable '{v.name}' is provided by two models, "
                    f"'{models[j].name}'{_loc_of(first.loc)} and '{m.name}'", v.loc or m.loc,
                    "a variable has one provider: rename one of the outputs (var: ...), or compose the "
                    "two models separately")
            provider[v.name] = (i, v)
    deps: list[list[tuple[int, str]]] = []  # deps[i]: (j, variable) for each variable i takes from j
    for i, m in enumerate(models):
        d = []
        for v in m.inputs:
            if v.name in provider:
                j, pv = provider[v.name]
                if pv.type != v.type:
                    raise _located(
                        f"composition '{name}': type mismatch for '{v.name}': model '{models[j].name}' "
                        f"provides it as {pv.type.name}{_loc_of(pv.loc)}, model '{m.name}' consumes it as "
                        f"{v.type.name}", v.loc or m.loc)
                d.append((j, v.name))
        deps.append(d)

    # 3. dependency resolution (Kahn; the ready model declared first goes first)
    order = _toposort(name, models, deps, loc)
    ordered = tuple(models[i] for i in order)

    # 2. input/output identification
    consumed: dict[str, Variable] = {}
    consumer: dict[str, str] = {}
    for m in ordered:
        for v in m.inputs:
            if v.name in consumed and consumed[v.name].type != v.type and v.name not in provider:
                raise CompositionError(
                    f"composition '{name}': type mismatch for input '{v.name}': model "
                    f"'{consumer[v.name]}' consumes it as {consumed[v.name].type.name}, model "
                    f"'{m.name}' as {v.type.name}")
            consumed.setdefault(v.name, v)
            consumer.setdefault(v.name, m.name)
    keep = tuple(keep)
    for k in keep:
        if k not in provider:
            raise CompositionError(f"composition '{name}': 'keep' names '{k}', which no model provides"
                                   f"{_loc_of(loc)}")
    inputs = tuple(v for n, v in consumed.items() if n not in provider)
    if declared_inputs is not None:
        declared = set(declared_inputs)
        for v in inputs:
            if v.name not in declared:
                raise CompositionError(
                    f"composition '{name}': model '{consumer[v.name]}' consumes '{v.name}', which no "
                    f"model provides and which is not declared as an input{_loc_of(loc)}")
    outputs = tuple(v for m in ordered for v in m.outputs if v.name not in consumed or v.name in keep)
    check_state_wiring(name, ordered, inputs, outputs, loc, declared=declared_state)
    params = merge_parameters(name, ordered)
    out_names = {v.name for v in outputs}
    initial = tuple(eq for m in ordered for eq in m.initial if eq.var.name in out_names)
    return Model(name=name, inputs=inputs, outputs=outputs, parameters=params, submodels=ordered,
                 doc=doc, loc=loc, initial=initial)


def merge_parameters(where: str, models: Sequence[Model],
                     extra: Sequence[Parameter] = ()) -> tuple[Parameter, ...]:
    """Parameters of ``models`` merged by name (first appearance order); conflicts are errors.

    Names never merge silently: one declaration reached twice (a block used inside an implicit model
    and composed again outside it) is one parameter; two *different* declarations of one name (two
    spec locations) are one parameter only when both say ``shared: true``, else an error at the
    second. Parameters built without a location (by code, not a spec) merge when they agree."""
    merged: dict[str, tuple[Parameter, str]] = {p.name: (p, where) for p in extra}
    for m in models:
        for p in m.parameters:
            if p.name not in merged:
                merged[p.name] = (p, m.name)
                continue
            q, owner = merged[p.name]
            if p.loc is not None and q.loc is not None and p.loc != q.loc and not (p.shared and q.shared):
                unmarked = [f"'{n}'" for n, x in ((owner, q), (m.name, p)) if not x.shared]
                unmarked = "neither does" if len(unmarked) == 2 else f"{unmarked[0]} does not"
                raise _located(
                    f"composition '{where}': parameter '{p.name}' is declared by model '{owner}' (at {q.loc}) "
                    f"and by model '{m.name}'; two declarations are one parameter only when both say "
                    f"shared: true ({unmarked})", p.loc,
                    f"if they are one parameter, mark both `{p.name}: {{shared: true, ...}}`; if not, rename "
                    f"one, or give each block its own parameters with `instances:`")
            if q.type != p.type:
                raise _located(
                    f"composition '{where}': parameter '{p.name}' is {q.type.name} in '{owner}'"
                    f"{_loc_of(q.loc)} but {p.type.name} in '{m.name}'", p.loc)
            if q.default is not None and p.default is not None and tuple(q.default) != tuple(p.default):
                raise _located(
                    f"composition '{where}': parameter '{p.name}' has default {_d(q)} in '{owner}'"
                    f"{_loc_of(q.loc)} but {_d(p)} in '{m.name}'", p.loc)
            if q.bounds and p.bounds and q.bounds != p.bounds:
                raise _located(
                    f"composition '{where}': parameter '{p.name}' has bounds {q.bounds} in '{owner}'"
                    f"{_loc_of(q.loc)} but {p.bounds} in '{m.name}'", p.loc)
            if q.default is None and p.default is not None:
                merged[p.name] = (replace(p, bounds=p.bounds or q.bounds), m.name)
            elif p.bounds and not q.bounds:
                merged[p.name] = (replace(q, bounds=p.bounds), owner)
    return tuple(p for p, _ in merged.values())


# --------------------------------------------------------------------------------------------------
# implicit models
# --------------------------------------------------------------------------------------------------
def is_resolved(model: Model) -> bool:
    return model.is_implicit and len(model.submodels) == 1


def resolve_implicit(model: Model, available: Mapping[str, Model]) -> Model:
    """An implicit model with its residual system composed (see the module docstring)."""
    if is_resolved(model):
        return model
    if model.equations:
        return _split_outputs(model, available)
    system = model.implicit
    unknowns = {u.name for u in system.unknowns}
    used = []
    for n in system.uses:
        if n not in available:
            raise CompositionError(
                f"implicit model '{model.name}' uses unknown model '{n}'{_loc_of(model.loc)}; "
                f"known models: {', '.join(sorted(available)) or '(none)'}")
        u = available[n]
        if u.is_implicit or any(s.is_implicit for s in _walk(u)):
            raise CompositionError(f"implicit model '{model.name}' uses '{n}', which is itself implicit "
                                   "(nested implicit solves are not supported)")
        for v in u.outputs:
            if v.name in unknowns:
                raise CompositionError(
                    f"implicit model '{model.name}': used model '{n}' provides '{v.name}', which is an "
                    "unknown of the implicit model")
        used.append(u)
    mapping = {v.name: local_name(model.name, v.name) for u in used for v in u.outputs}
    renamed = [rename(u, mapping, f"{model.name}/") for u in used]
    symmap = _symbol_map([v for u in used for v in u.outputs], mapping)

    res_inputs = tuple(_renamed_var(v, mapping) for v in model.inputs)
    res_inputs += tuple(u for u in system.unknowns if u.name not in {v.name for v in res_inputs})
    res_vars = tuple(Variable(residual_name(model.name, u.name), u.type, doc=f"residual of {u.name}")
                     for u in system.unknowns)
    res_eqs = tuple(Equation(rv, tuple(sp.sympify(c).xreplace(symmap) for c in eq.components), eq.loc)
                    for rv, eq in zip(res_vars, system.residuals))
    leaf = Model(name=f"{model.name}/residual", inputs=res_inputs, outputs=res_vars,
                 parameters=model.parameters, equations=res_eqs, loc=model.loc)
    composed = compose_models(f"{model.name}/system", renamed + [leaf])
    composed = replace(composed, outputs=res_vars)

    guess_syms = set().union(*(sp.sympify(c).free_symbols for g in system.guess for c in g.components))
    for u in used:
        for v in u.outputs:
            if guess_syms & set(v.symbols):
                raise CompositionError(f"implicit model '{model.name}': the initial guess reads '{v.name}', "
                                       f"which used model '{u.name}' computes from the unknowns")
    inputs = tuple(v for v in composed.inputs if v.name not in unknowns)
    names = {v.name for v in inputs}
    inputs += tuple(v for v in model.inputs
                    if v.name not in names and v.name not in mapping and guess_syms & set(v.symbols))
    params = merge_parameters(model.name, [composed], extra=model.parameters)
    return replace(model, inputs=inputs, parameters=params, submodels=(composed,), partials=())


def _split_outputs(model: Model, available: Mapping[str, Model]) -> Model:
    """An implicit model with explicit outputs (``equations`` computed from the solved unknowns):
    the composition of

    - ``<model>/solve``: the implicit model proper, whose outputs are its unknowns; the outputs that
      a used model reads are computed inside it (a leaf among the models it uses), so that inside
      the Newton loop the used models see them at the current iterate (a hardening law reading
      ep(dgamma));
    - ``<model>/outputs``: an explicit leaf computing the outputs from the solution (it consumes the
      unknowns, so they are internal to the composition).

    The front end checks that the outputs do not read what a used model computes inside the solve."""
    system = model.implicit
    unknowns = tuple(system.unknowns)
    free = set().union(*(sp.sympify(c).free_symbols for eq in model.equations for c in eq.components))
    reads = tuple(v for v in model.inputs if free & set(v.symbols))
    reads += tuple(u for u in unknowns if u not in reads)
    leaf = Model(name=f"{model.name}/outputs", inputs=reads, outputs=model.outputs,
                 parameters=model.parameters, equations=model.equations, doc=model.doc, loc=model.loc)
    if leaf.name in available:
        raise CompositionError(f"implicit model '{model.name}': a model named '{leaf.name}' already exists")
    # inside the solve, only the outputs a used model reads (the rest would be computed and
    # differentiated at every iterate for nothing)
    read = {v.name for n in system.uses if n in available for v in available[n].inputs}
    inner = [eq for eq in model.equations if eq.var.name in read]
    uses, more = system.uses, {}
    if inner:
        ifree = set().union(*(sp.sympify(c).free_symbols for eq in inner for c in eq.components))
        more[leaf.name] = replace(leaf, inputs=tuple(v for v in reads if ifree & set(v.symbols)),
                                  outputs=tuple(eq.var for eq in inner), equations=tuple(inner))
        uses += (leaf.name,)
    solve = replace(model, name=f"{model.name}/solve", outputs=unknowns, equations=(),
                    implicit=replace(system, uses=uses), tangent=None)
    solve = resolve_implicit(solve, _With(available, more))
    return compose_models(model.name, [solve, leaf], doc=model.doc, loc=model.loc)


class _With(Mapping):
    """``base`` plus a few more models (by name)."""

    def __init__(self, base: Mapping[str, Model], more: Mapping[str, Model]):
        self.base, self.more = base, more

    def __getitem__(self, key: str) -> Model:
        return self.more[key] if key in self.more else self.base[key]

    def __iter__(self):
        return iter(list(self.base) + [k for k in self.more if k not in self.base])

    def __len__(self):
        return len(self.base) + len(self.more)


# --------------------------------------------------------------------------------------------------
# renaming
# --------------------------------------------------------------------------------------------------
def rename(model: Model, mapping: Mapping[str, str], prefix: str = "",
           symbols: Mapping[sp.Symbol, sp.Symbol] | None = None) -> Model:
    """``model`` with variables renamed by ``mapping`` (old -> new name) and its name (and its
    sub-models' names) prefixed by ``prefix``; ``symbols`` replaces more symbols in every expression
    (a block instance's parameters). Partials are dropped (differentiate again)."""
    variables = [v for m in _walk(model) for v in m.inputs + m.outputs]
    symmap = _symbol_map(variables, mapping)
    symmap.update(symbols or {})
    return _rename(model, mapping, symmap, prefix)


def _rename(m: Model, mapping, symmap, prefix) -> Model:
    def eqs(equations):
        return tuple(Equation(_renamed_var(e.var, mapping),
                              tuple(sp.sympify(c).xreplace(symmap) for c in e.components), e.loc)
                     for e in equations)
    implicit = m.implicit
    if implicit is not None:
        implicit = replace(implicit, unknowns=tuple(_renamed_var(v, mapping) for v in implicit.unknowns),
                           residuals=eqs(implicit.residuals), guess=eqs(implicit.guess))
    return replace(m, name=prefix + m.name,
                   inputs=tuple(_renamed_var(v, mapping) for v in m.inputs),
                   outputs=tuple(_renamed_var(v, mapping) for v in m.outputs),
                   equations=eqs(m.equations), implicit=implicit, initial=eqs(m.initial),
                   submodels=tuple(_rename(s, mapping, symmap, prefix) for s in m.submodels),
                   partials=())


def _renamed_var(v: Variable, mapping: Mapping[str, str]) -> Variable:
    return replace(v, name=mapping[v.name]) if v.name in mapping else v


def _symbol_map(variables: Iterable[Variable], mapping: Mapping[str, str]) -> dict:
    out = {}
    for v in variables:
        if v.name in mapping:
            out.update(zip(v.symbols, _renamed_var(v, mapping).symbols))
    return out


def _walk(m: Model):
    yield m
    for s in m.submodels:
        yield from _walk(s)


# --------------------------------------------------------------------------------------------------
# topological order and cycles
# --------------------------------------------------------------------------------------------------
def _toposort(name: str, models: Sequence[Model], deps: list[list[tuple[int, str]]], loc=None) -> list[int]:
    n = len(models)
    waiting = [set(j for j, _ in d) for d in deps]
    order: list[int] = []
    done = [False] * n
    while len(order) < n:
        ready = [i for i in range(n) if not done[i] and all(done[j] and j != i for j in waiting[i])]
        if not ready:
            message, loc, hint = _cycle_message(name, models, deps, done)
            raise _located(message, loc, hint)
        i = ready[0]
        done[i] = True
        order.append(i)
    return order


def _cycle_message(name, models, deps, done):
    """Walk back along unmet dependencies from the first stuck model until a model repeats."""
    start = next(i for i in range(len(models)) if not done[i])
    path: list[tuple[int, str]] = []  # (model, variable it consumes from the next model in path)
    visited: dict[int, int] = {}
    i = start
    while i not in visited:
        visited[i] = len(path)
        j, var = min((j, v) for j, v in deps[i] if not done[j])
        path.append((i, var))
        i = j
    cycle = path[visited[i]:]
    lines = [f"composition '{name}': dependency cycle:"]
    for k, (c, var) in enumerate(cycle):
        p = cycle[(k + 1) % len(cycle)][0]
        lines.append(f"  model '{models[c].name}'{_loc_of(models[c].loc)} consumes '{var}', provided by "
                     f"model '{models[p].name}'{_loc_of(models[p].loc)}")
    # the usual cause: a model that reads an implicit model's unknowns listed in compose, not in uses
    for k, (c, _) in enumerate(cycle):
        p = cycle[(k + 1) % len(cycle)][0]
        if models[p].is_implicit and models[c] is not models[p]:
            unknowns = {u.name for u in models[p].implicit.unknowns}
            if any(v.name in unknowns for v in models[c].inputs):
                feeds = next((v for v in models[c].outputs
                              if any(v.name == w.name for w in _walk_inputs(models[p]))), None)
                lines.append(f"  hint: model '{models[c].name}' reads unknowns of the implicit model "
                             f"'{models[p].name}'" + (f" and provides '{feeds.name}' to it" if feeds else "")
                             + f": list it under `implicit: uses: [{models[c].name}]` of "
                             f"'{models[p].name}' (it then runs inside the Newton loop), not in the "
                             f"composition's models")
                break
    implicit = [models[c] for c, _ in cycle if models[c].is_implicit]
    if implicit:
        m = implicit[0]
        feeders = [models[p].name for k, (c, _) in enumerate(cycle) if models[c] is m
                   for p in [cycle[(k + 1) % len(cycle)][0]]]
        hint = (f"an implicit model that reads a variable computed from its unknowns must list its provider "
                f"under `uses:` (implicit: uses: [{', '.join(feeders)}] in model '{m.name}'), so that the "
                "provider is evaluated inside its Newton loop")
    else:
        hint = "each variable must be computed before it is read: one of these models must not read the other's output"
    first = models[cycle[0][0]]
    return "\n".join(lines), first.loc, hint


def _located(message: str, loc, hint: str = "") -> CompositionError:
    """A CompositionError rendered like a SpecError: file:line:col, the spec text, a hint."""
    return CompositionError(str(SpecError(message, loc, hint=hint)))


def _walk_inputs(m: Model):
    """The inputs of ``m`` and of its resolved residual system (what an implicit model reads)."""
    yield from m.inputs
    for s in m.submodels:
        yield from s.inputs


def check_state_wiring(name: str, models: Sequence[Model], inputs: Sequence[Variable],
                       outputs: Sequence[Variable], loc=None, *, declared: bool = False) -> None:
    """Wiring mistakes that would only surface when the model runs, as composition errors with a
    hint: an ``old_state/x`` input whose ``state/x`` is consumed inside and not an output (a
    forgotten ``keep``); with ``declared`` (a spec's composition), a ``state/x`` input that no
    model provides (consumed, never produced)."""
    provided = {v.name: m.name for m in models for v in m.outputs}
    out_names = {v.name for v in outputs}
    for v in inputs:
        reader = next(m.name for m in models if any(w.name == v.name for w in m.inputs))
        if v.name.startswith("old_state/"):
            new = v.name[len("old_"):]
            if new in provided and new not in out_names:
                raise CompositionError(
                    f"composition '{name}'{_loc_of(loc)}: model '{reader}' reads '{v.name}', the previous "
                    f"value of '{new}', but '{new}' (provided by '{provided[new]}') is consumed inside the "
                    f"composition and is not one of its outputs, so it cannot be carried to the next step"
                    f"\n  hint: add it to the composition's keep: [{new}]")
        elif declared and v.name.startswith("state/"):
            raise CompositionError(
                f"composition '{name}'{_loc_of(loc)}: model '{reader}' consumes '{v.name}', which no model "
                f"of the composition provides (models: {', '.join(m.name for m in models)})"
                f"\n  hint: add the model that provides '{v.name}' to the composition's models, or, if "
                f"'{reader}' means its value at the previous step, read 'old_{v.name}' (old(...))")


def _loc(decl) -> str:
    return _loc_of(decl.loc)


def _loc_of(loc) -> str:
    return f" (at {loc})" if loc is not None else ""


def _d(p: Parameter) -> str:
    return str(p.default[0] if len(p.default) == 1 else p.default)
