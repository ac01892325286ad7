"""Loading a spec file: includes, models, compositions -> :class:`modelc.ir.Spec`.

Stages (each reported to ``trace(stage, text)`` when given, for ``--dump-ir``):

1. ``yaml``: every file read (includes first, depth-first, each file once), as located YAML;
2. ``models``: the typed Model IR of every model and the declared compositions.

Includes are resolved relative to the including file; a file included twice (a diamond) is loaded
once; an include cycle is an error naming the chain. Model and composition names are unique across
all files loaded.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable

from modelc.errors import SpecError
from modelc.frontend import schema
from modelc.frontend.dump import format_spec, format_yaml
from modelc.frontend.expr import did_you_mean
from modelc.frontend.instances import build_instance, build_sum
from modelc.frontend.limits import MAX_INCLUDE_DEPTH, read_spec_file
from modelc.frontend.model import ModelBuilder, check_ident, file_helpers, tangent_decl
from modelc.frontend.yamlio import YScalar, load_yaml_text
from modelc.ir import ComposeDecl, Loc, Spec

Trace = Callable[[str, str], None]


@dataclass
class _State:
    models: dict = field(default_factory=dict)        # name -> Model
    compositions: dict = field(default_factory=dict)  # name -> ComposeDecl
    loaded: set = field(default_factory=set)          # real paths
    instances: dict = field(default_factory=dict)     # name -> instances.Instance
    yaml_dumps: list = field(default_factory=list)


def _where_defined(st: _State, name: str) -> Loc | None:
    obj = st.models.get(name) or st.compositions.get(name)
    return obj.loc if obj is not None else None


def _load_file(path: str, st: _State, stack: tuple[str, ...], loc: Loc | None) -> None:
    if "\0" in path:
        raise SpecError(f"cannot read spec file {path!r}: a file name cannot hold a NUL character", loc)
    real = os.path.realpath(path)
    if real in stack:
        chain = " -> ".join(os.path.basename(p) for p in stack[stack.index(real):] + (real,))
        raise SpecError(f"include cycle: {chain}", loc)
    if real in st.loaded:
        return
    if len(stack) >= MAX_INCLUDE_DEPTH:
        raise SpecError(f"includes nested more than {MAX_INCLUDE_DEPTH} deep ({os.path.basename(stack[0])} -> "
                        f"... -> {os.path.basename(path)})", loc)
    text = read_spec_file(path, loc)
    root = load_yaml_text(text, path)
    if root is None:
        raise SpecError("the spec file is empty", Loc(path, 1, 1))
    f = schema.check(root, "file", f"spec file {os.path.basename(path)!r}")
    for inc in (f["include"].items if f["include"] else ()):
        if not isinstance(inc, YScalar) or not isinstance(inc.value, str):
            raise SpecError("include entries must be file names", inc.loc)
        _load_file(os.path.normpath(os.path.join(os.path.dirname(path), inc.value)), st, stack + (real,),
                   inc.loc)
    st.loaded.add(real)
    st.yaml_dumps.append(f"# {path}\n{format_yaml(root)}")
    helpers = file_helpers(f["define"])
    pending_uses = []
    if f["models"] is not None:
        for name, node in f["models"].items.items():
            kloc = f["models"].keys[name].loc
            check_ident(name, kloc, "model")
            if name in st.models or name in st.compositions:
                first = _where_defined(st, name)
                raise SpecError(f"model {name!r} is defined twice (first at {first})", kloc)
            model, uses = ModelBuilder(name, node, kloc, helpers).build()
            st.models[name] = model
            pending_uses.append((model, uses))
    for section in ("instances", "sums"):
        for name, node in (f[section].items.items() if f[section] is not None else ()):
            kloc = f[section].keys[name].loc
            check_ident(name, kloc, section[:-1])
            if name in st.models or name in st.compositions:
                raise SpecError(f"{section[:-1]} {name!r} clashes with the model or composition defined at "
                                f"{_where_defined(st, name)}", kloc)
            if section == "instances":
                st.models[name], st.instances[name] = build_instance(name, node, kloc, st.models)
            else:
                st.models[name] = build_sum(name, node, kloc, st.instances, st.models)
    # a model may use a model defined below it in the same file, or an instance or sum of it
    for model, uses in pending_uses:
        for u in uses:
            if u.value not in st.models:
                raise SpecError(f"model {model.name!r} uses unknown model {u.value!r}", u.loc,
                                hint=did_you_mean(u.value, st.models) or "include the file that defines it")
            if u.value == model.name:
                raise SpecError(f"model {model.name!r} cannot use itself", u.loc)
            if st.models[u.value].is_implicit:
                raise SpecError(f"model {model.name!r} uses {u.value!r}, which is implicit: the models "
                                f"in 'uses' must be explicit", u.loc)
        _check_solution_outputs(model, st)
    if f["compose"] is not None:
        for name, node in f["compose"].items.items():
            kloc = f["compose"].keys[name].loc
            check_ident(name, kloc, "composition")
            if name in st.models or name in st.compositions:
                raise SpecError(f"composition {name!r} clashes with the model or composition defined at "
                                f"{_where_defined(st, name)}", kloc)
            st.compositions[name] = _compose(name, node, kloc, st)


def _check_solution_outputs(model, st: _State) -> None:
    """The outputs of an implicit model are computed after the solve, from the unknowns and the
    model's own inputs: they cannot read what a used model computes inside the solve."""
    if not (model.is_implicit and model.equations):
        return
    inside = {s: (v.name, u) for u in model.implicit.uses for v in st.models[u].outputs for s in v.symbols}
    for eq in model.equations:
        hit = sorted((inside[s] for c in eq.components for s in c.free_symbols if s in inside))
        if hit:
            var, used = hit[0]
            raise SpecError(f"the equation of output {eq.var.name!r} reads {var!r}, which used model "
                            f"{used!r} computes inside the solve; outputs are computed after the solve "
                            f"from the unknowns, inputs, parameters and old values", eq.loc,
                            hint="compute it in the equation itself (a define entry can share the expression "
                                 "with the residual)")


def _compose(name: str, node, kloc: Loc, st: _State) -> ComposeDecl:
    c = schema.check(node, "compose", f"composition {name!r}")
    names = []
    for m in c["models"].items:
        if m.value not in st.models and m.value not in st.compositions:
            raise SpecError(f"composition {name!r}: unknown model {m.value!r}", m.loc,
                            hint=did_you_mean(m.value, set(st.models) | set(st.compositions))
                            or "include the file that defines it")
        if m.value in names:
            raise SpecError(f"composition {name!r} lists {m.value!r} twice", m.loc)
        names.append(m.value)
    if not names:
        raise SpecError(f"composition {name!r} has no models", c["models"].loc)
    keep = tuple(k.value for k in (c["keep"].items if c["keep"] else ()))
    if c["keep"] and all(n in st.models for n in names):
        provided = {v.name for n in names for v in st.models[n].outputs}
        for k in c["keep"].items:
            if k.value not in provided:
                raise SpecError(f"composition {name!r} keeps {k.value!r}, which none of its models provides",
                                k.loc, hint=did_you_mean(k.value, provided))
    doc = c["doc"] if isinstance(c["doc"], str) else str(c["doc"].value)
    # the tangent's names are checked against the composed inputs and outputs when it is composed
    tangent = tangent_decl(c["tangent"], f"composition {name!r}", node.keys.get("tangent"))
    return ComposeDecl(name, tuple(names), keep, doc, kloc, tangent=tangent)


def load_spec(path, trace: Trace | None = None) -> Spec:
    """Load a spec file (includes resolved) into the Model IR. Raises SpecError for user errors."""
    path = os.fspath(path)
    st = _State()
    _load_file(path, st, (), None)
    if trace is not None:
        trace("yaml", "\n".join(st.yaml_dumps))
    spec = Spec(path, tuple(st.models.values()), tuple(st.compositions.values()))
    text = format_spec(spec)
    spec = Spec(path, spec.models, spec.compositions, hashlib.sha256(text.encode()).hexdigest())
    if trace is not None:
        trace("models", text)
    return spec
