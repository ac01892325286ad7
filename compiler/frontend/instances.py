"""Block instances and sums over them: ``instances:`` and ``sums:`` of a spec file -> models.

An instance is a named copy of a model (the *block*) that owns its parameters and some of its
variables, renamed with the instance's ``suffix``: parameter ``C`` -> ``C1``, variable
``state/internal/X`` -> ``state/internal/X1`` (and ``old_state/internal/X`` -> ``old_state/internal/X1``).
The block's outputs always belong to the instance (two instances cannot provide one variable);
``own:`` lists the inputs that do too (the back stress an Armstrong-Frederick rate reads). A parameter
the block marks ``shared: true`` keeps its name (one value for every instance). ``defaults:`` gives the
instance its own default values.

A sum ``{var: state/internal/X, over: [i1, i2]}`` is an explicit model providing ``var`` as the sum of
the instances' renamed ``var``: the model that reads the total (the overstress ``S - X``) is written once.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from modelc.errors import SpecError
from modelc.frontend import schema
from modelc.frontend.expr import did_you_mean
from modelc.frontend.model import _bounds, old_name
from modelc.frontend.yamlio import YList, YScalar
from modelc.ir import Equation, Loc, Model, Tangent, Variable, param_symbols
from modelc.passes.compose import rename


@dataclass(frozen=True, slots=True)
class Instance:
    """What a sum needs to know of an instance: its block and the variable names it renamed."""

    block: str
    mapping: tuple[tuple[str, str], ...]  # block's qualified name -> the instance's


def build_instance(name: str, node, kloc: Loc, models: dict) -> tuple[Model, Instance]:
    f = schema.check(node, "instance", f"instance {name!r}")
    bnode = f["block"]
    block = models.get(bnode.value)
    if block is None:
        raise SpecError(f"instance {name!r}: unknown model {bnode.value!r}", bnode.loc,
                        hint=did_you_mean(bnode.value, models) or "include the file that defines it (a block is "
                                                                  "a model, not a composition)")
    if block.is_implicit and block.implicit.uses:
        raise SpecError(f"instance {name!r}: block {block.name!r} is an implicit model that uses other models "
                        f"({', '.join(block.implicit.uses)}); instantiate those blocks instead", bnode.loc)
    suffix = str(f["suffix"].value)
    inputs = {v.name: v for v in block.inputs}
    owned = [v.name for v in block.outputs]
    for item in (f["own"].items if f["own"] else ()):
        if item.value not in inputs:
            raise SpecError(f"instance {name!r}: block {block.name!r} has no input {item.value!r} to own",
                            item.loc, hint=did_you_mean(item.value, inputs)
                            or f"its inputs: {', '.join(inputs) or '(none)'}")
        owned.append(item.value)
    mapping = {}
    for q in owned:
        mapping[q] = q + suffix
        mapping[old_name(q)] = old_name(q + suffix)
    params, psyms = _parameters(name, block, suffix, f["defaults"], kloc)
    model = rename(block, mapping, symbols=psyms)
    tangent = None
    if block.tangent is not None:
        t = block.tangent
        tangent = Tangent(tuple(mapping.get(n, n) for n in t.of),
                          tuple(mapping.get(n, _renamed_param(n, block, suffix)) for n in t.wrt), t.loc, t.name_locs)
    doc = f["doc"] if isinstance(f["doc"], str) else str(f["doc"].value)
    model = replace(model, name=name, parameters=params, doc=doc or block.doc, loc=kloc, tangent=tangent)
    return model, Instance(block.name, tuple((q, mapping[q]) for q in owned))


def _renamed_param(n: str, block: Model, suffix: str) -> str:
    return next((p.name + suffix for p in block.parameters if p.name == n and not p.shared), n)


def _parameters(name: str, block: Model, suffix: str, defaults, kloc: Loc):
    """The instance's parameters (own ones renamed, located at the instance) and their symbol map."""
    by_name = {p.name: p for p in block.parameters}
    given = {}
    if defaults is not None:
        for key, vnode in defaults.items.items():
            dloc = defaults.keys[key].loc
            if key not in by_name:
                raise SpecError(f"instance {name!r}: block {block.name!r} has no parameter {key!r}", dloc,
                                hint=did_you_mean(key, by_name) or f"its parameters: {', '.join(by_name) or '(none)'}")
            if by_name[key].shared:
                raise SpecError(f"instance {name!r}: parameter {key!r} is shared (one value for every model that "
                                f"declares it), so an instance cannot give it its own default", dloc)
            if not schema._kind_ok("numbers", vnode):
                raise SpecError(f"instance {name!r}: the default of {key!r} must be a number or a list of "
                                f"numbers", vnode.loc)
            vals = tuple(float(i.value) for i in (vnode.items if isinstance(vnode, YList) else (vnode,)))
            if len(vals) != by_name[key].type.size:
                raise SpecError(f"instance {name!r}: the default of {key!r} has {len(vals)} values, its type "
                                f"{by_name[key].type.name} has {by_name[key].type.size}", vnode.loc)
            if by_name[key].bounds:
                _bounds(YScalar(by_name[key].bounds, vnode.loc), key, vals, vnode)
            given[key] = vals
    params, psyms = [], {}
    for p in block.parameters:
        if p.shared:
            params.append(p)
            continue
        q = replace(p, name=p.name + suffix, default=given.get(p.name, p.default), loc=kloc,
                    doc=f"{p.doc} ({name})" if p.doc else f"({name})")
        psyms.update(zip(param_symbols(p.name, p.type), param_symbols(q.name, q.type)))
        params.append(q)
    return tuple(params), psyms


def build_sum(name: str, node, kloc: Loc, instances: dict, models: dict) -> Model:
    f = schema.check(node, "sum", f"sum {name!r}")
    var = f["var"].value
    inputs, ttype = [], None
    for item in f["over"].items:
        inst = instances.get(item.value)
        if inst is None:
            raise SpecError(f"sum {name!r}: {item.value!r} is not an instance", item.loc,
                            hint=did_you_mean(item.value, instances) or "declare it under instances:")
        renamed = dict(inst.mapping).get(var)
        if renamed is None:
            raise SpecError(f"sum {name!r}: instance {item.value!r} does not own {var!r} (it owns "
                            f"{', '.join(dict(inst.mapping)) or 'nothing'})", item.loc,
                            hint=f"list it under own: of instance {item.value!r}" if any(
                                v.name == var for v in models[item.value].inputs) else did_you_mean(
                                var, dict(inst.mapping)))
        v = models[item.value].variable(renamed)
        if ttype is not None and v.type is not ttype:
            raise SpecError(f"sum {name!r}: {renamed!r} is {v.type.name}, the others are {ttype.name}", item.loc)
        if any(w.name == renamed for w in inputs):
            raise SpecError(f"sum {name!r} lists {item.value!r} twice", item.loc)
        ttype = v.type
        inputs.append(v)
    if not inputs:
        raise SpecError(f"sum {name!r}: 'over' lists no instances", f["over"].loc)
    doc = f["doc"] if isinstance(f["doc"], str) else str(f["doc"].value)
    out = Variable(var, ttype, doc or f"sum of {', '.join(v.name for v in inputs)}", f["var"].loc)
    comps = tuple(sp.Add(*c) for c in zip(*(v.symbols for v in inputs)))
    return Model(name, tuple(inputs), (out,), (), (Equation(out, comps, kloc),), doc=out.doc, loc=kloc)
