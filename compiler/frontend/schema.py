"""The spec's fields, declared as data: validation, error messages and docs/spec.md come from here.

Each section of a spec file has a table of :class:`Field` (name, kind, required, default, doc).
:func:`check` validates a YAML mapping against its table (unknown keys get a "did you mean", missing
required keys and wrong kinds name the section) and returns a dict with defaults filled in.
:func:`markdown` renders the tables for the docs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from modelc.errors import InputError, SpecError
from modelc.frontend.expr import did_you_mean
from modelc.frontend.limits import FLOAT_MAX, INT_MAX
from modelc.frontend.yamlio import YList, YMap, YScalar
from modelc.runtime.types import TYPES


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kind: str          # "str", "number", "int", "type", "expr", "names" (list of str), "map", "numbers"
    required: bool = False
    default: object = None
    doc: str = ""


_NO = object()

SCHEMA: dict[str, tuple[Field, ...]] = {
    "file": (
        Field("include", "names", False, (), "spec files whose models and compositions become available "
              "here (paths relative to this file)"),
        Field("define", "map", False, None, "file-level helper functions `name(args): expr`, callable from "
              "every model of this file"),
        Field("models", "map", False, None, "model name -> model (explicit or implicit)"),
        Field("instances", "map", False, None, "instance name -> a named copy of a model with its own "
              "parameters and variables (see `instance`)"),
        Field("sums", "map", False, None, "model name -> a model providing the sum of one variable over "
              "instances (see `sum`)"),
        Field("compose", "map", False, None, "composition name -> composition"),
    ),
    "model": (
        Field("doc", "str", False, "", "one-line description"),
        Field("parameters", "map", False, None, "parameter name -> parameter (names are global: two "
              "composed models may declare one name only if both mark it `shared: true`)"),
        Field("inputs", "map", False, None, "local name -> variable the model reads"),
        Field("outputs", "map", False, None, "local name -> variable the model provides (explicit models)"),
        Field("define", "map", False, None, "named sub-expressions `name: expr` (in order) and helper "
              "functions `name(args): expr`"),
        Field("equations", "map", False, None, "output local name -> expression (explicit models)"),
        Field("implicit", "map", False, None, "the implicit system (implicit models): unknowns, residuals, "
              "guess, uses, solver"),
        Field("tangent", "map", False, None, "derivative blocks a caller needs (e.g. of: [state/S], wrt: "
              "[forces/E]): the module gets a variant that computes only these"),
    ),
    "parameter": (
        Field("type", "type", False, "Scalar", "tensor type"),
        Field("default", "numbers", False, None, "default value (a number, or a list of the flat "
              "components for a tensor)"),
        Field("units", "str", False, "", "units, for documentation"),
        Field("doc", "str", False, "", "description"),
        Field("bounds", "interval", False, None, "allowed values, checked at every call: an interval "
              "`\"[0, 0.5)\"`, `\"(0, inf)\"` (quoted: `[`/`(` closed/open ends, `inf` for none), or a "
              "list `[lo, hi]` (closed); the default must lie inside"),
        Field("shared", "bool", False, False, "true: other models may declare this parameter too (one "
              "parameter, e.g. Young's modulus); every declaration must say so, or two declarations of a "
              "name are an error; an instance keeps a shared parameter's name"),
    ),
    "variable": (
        Field("var", "str", False, None, "qualified name (e.g. state/internal/ep); default: the local name"),
        Field("type", "type", False, "Scalar", "tensor type: " + ", ".join(TYPES)),
        Field("doc", "str", False, "", "description"),
        Field("initial", "expr", False, None, "initial value of a state output or unknown (`state/...`): "
              "a number or an expression of parameters (default: zero); the driver and "
              "`Model.initial_state` start from it"),
    ),
    "implicit": (
        Field("unknowns", "map", True, None, "local name -> variable solved for (these are the model's "
              "outputs)"),
        Field("residuals", "map", True, None, "unknown local name -> residual expression (same type as the "
              "unknown; zero at the solution)"),
        Field("guess", "map", False, None, "unknown local name -> initial guess expression over inputs, "
              "old values and parameters, not the unknowns (default: old(unknown))"),
        Field("uses", "names", False, (), "models whose outputs the residuals read; composition evaluates "
              "them inside the Newton loop with the unknowns as their inputs"),
        Field("solver", "map", False, None, "Newton options"),
    ),
    "solver": (
        Field("rtol", "number", False, 1e-10, "relative tolerance on the residual norm"),
        Field("atol", "number", False, 1e-10, "absolute tolerance on the residual norm"),
        Field("max_iter", "int", False, 25, "maximum Newton iterations"),
        Field("on_failure", "str", False, "nan", "'nan' (mark the point, NaN outputs) or 'substep' "
              "(cut the step and retry)"),
        Field("max_substeps", "int", False, 8, "maximum step cuts with on_failure: substep"),
        Field("method", "str", False, "newton", "'newton', or 'halley' for one scalar unknown (each step "
              "also uses the second derivative: fewer iterations, see docs)"),
        Field("line_search", "int", False, 0, "at most this many halvings of a Newton step while the "
              "residual norm does not decrease enough (backtracking, see docs; a halving is not an "
              "iteration; 0: full steps)"),
    ),
    "compose": (
        Field("models", "names", True, None, "the models (or earlier compositions) to wire together by "
              "variable name"),
        Field("keep", "names", False, (), "variables to expose as outputs even though a sub-model "
              "consumes them"),
        Field("doc", "str", False, "", "one-line description"),
        Field("tangent", "map", False, None, "derivative blocks a caller needs (e.g. of: [state/S], wrt: "
              "[forces/E]): the module gets a variant that computes only these"),
    ),
    "instance": (
        Field("block", "str", True, None, "the model to instantiate (an explicit model, or an implicit one "
              "without `uses`)"),
        Field("suffix", "name", True, None, "appended to the names the instance owns: parameter `C` -> "
              "`C1`, variable `state/internal/X` -> `state/internal/X1` (suffix 1)"),
        Field("own", "names", False, (), "qualified names of the block's inputs that belong to the instance "
              "(renamed with the suffix, their `old_` values too); the block's outputs always do"),
        Field("defaults", "map", False, None, "block parameter name -> this instance's default value"),
        Field("doc", "str", False, "", "one-line description (default: the block's)"),
    ),
    "sum": (
        Field("var", "str", True, None, "the block's qualified variable name (e.g. state/internal/X): the "
              "model provides it as the sum of the instances' renamed ones"),
        Field("over", "names", True, None, "the instances summed (instances of one block or of blocks "
              "declaring `var` with one type)"),
        Field("doc", "str", False, "", "one-line description"),
    ),
    "tangent": (
        Field("of", "names", True, None, "outputs (rows of the tangent)"),
        Field("wrt", "names", True, None, "inputs (columns of the tangent)"),
    ),
}

_KIND_DOC = {"str": "string", "number": "number", "int": "integer", "type": "type name",
             "expr": "expression", "names": "list of names", "map": "mapping",
             "numbers": "number or list of numbers", "bool": "true or false",
             "name": "name (letters, digits, _)",
             "interval": "interval such as \"[0, 0.5)\" or a list [lo, hi]"}


def _kind_ok(kind: str, node) -> bool:
    if kind == "map":
        return isinstance(node, YMap)
    if kind == "interval":
        return (isinstance(node, YScalar) and isinstance(node.value, str)) or (
            isinstance(node, YList) and len(node.items) == 2 and _kind_ok("numbers", node))
    if kind == "names":
        return isinstance(node, YList) and all(isinstance(i, YScalar) and isinstance(i.value, str)
                                               for i in node.items)
    if kind == "bool":
        return isinstance(node, YScalar) and isinstance(node.value, bool)
    if kind == "name":
        return isinstance(node, YScalar) and not isinstance(node.value, bool) and isinstance(
            node.value, (str, int)) and re.fullmatch(r"[A-Za-z0-9_]+", str(node.value)) is not None
    if not isinstance(node, (YScalar, YList)):
        return False
    if kind == "numbers":
        items = node.items if isinstance(node, YList) else (node,)
        return all(isinstance(i, YScalar) and isinstance(i.value, (int, float))
                   and not isinstance(i.value, bool) for i in items)
    if not isinstance(node, YScalar):
        return False
    v = node.value
    if kind == "str":
        return isinstance(v, str)
    if kind == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "type":
        return isinstance(v, str)
    if kind == "expr":
        return isinstance(v, (str, int, float)) and not isinstance(v, bool)
    raise AssertionError(kind)


def check(node, section: str, where: str) -> dict:
    """Validate ``node`` (a YMap) against ``SCHEMA[section]``; returns {field: node-or-default}."""
    fields = {f.name: f for f in SCHEMA[section]}
    if not isinstance(node, YMap):
        loc = getattr(node, "loc", None)
        raise SpecError(f"{where} must be a mapping with keys {', '.join(fields)}", loc)
    for key, knode in node.keys.items():
        if key not in fields:
            raise SpecError(f"unknown key {key!r} in {where}", knode.loc,
                            hint=did_you_mean(key, fields) or f"expected one of: {', '.join(fields)}")
    out = {}
    for f in fields.values():
        if f.name not in node.items:
            if f.required:
                raise SpecError(f"{where} is missing the required key {f.name!r} ({f.doc})", node.loc)
            out[f.name] = f.default
            continue
        value = node.items[f.name]
        if value is None or (isinstance(value, YScalar) and value.value is None):
            if f.required:
                raise SpecError(f"{where}: {f.name!r} must not be empty", node.keys[f.name].loc)
            out[f.name] = f.default
            continue
        if not _kind_ok(f.kind, value):
            kind = _KIND_DOC[f.kind]
            article = "" if f.kind == "bool" else "an " if kind[0] in "aeiou" else "a "
            raise SpecError(f"{where}: {f.name!r} must be {article}{kind}", value.loc)
        if f.kind == "int" and abs(value.value) > INT_MAX:  # an iteration count: a C int in the kernels
            raise SpecError(f"{where}: {f.name!r} is out of range (at most {INT_MAX})", value.loc)
        if f.kind in ("number", "numbers", "interval"):
            for item in (value.items if isinstance(value, YList) else (value,)):
                v = item.value
                if isinstance(v, float) and not math.isfinite(v):
                    raise SpecError(f"{where}: {f.name!r} must be finite, got {v}", item.loc)
                if isinstance(v, int) and abs(v) > FLOAT_MAX:
                    raise SpecError(f"{where}: {f.name!r} is beyond the largest float64", item.loc)
        out[f.name] = value
    return out


def markdown() -> str:
    """The schema tables, for docs/spec.md."""
    parts = []
    for section, fields in SCHEMA.items():
        parts.append(f"#### `{section}`\n\n| key | kind | required | default | meaning |\n|---|---|---|---|---|")
        for f in fields:
            d = "" if f.default in (None, (), "") else f"`{f.default}`"
            parts.append(f"| `{f.name}` | {_KIND_DOC[f.kind]} | {'yes' if f.required else 'no'} | {d} | {f.doc} |")
        parts.append("")
    return "\n".join(parts)


GENERATED = ("<!-- BEGIN GENERATED: {name} (python -m modelc.frontend.schema docs/spec.md) -->",
             "<!-- END GENERATED: {name} -->")


def generated_sections() -> dict[str, str]:
    from modelc.frontend.expr import markdown as builtins_markdown
    return {"schema": markdown(), "builtins": builtins_markdown()}


def render_docs(text: str, where: str = "the document") -> str:
    """``text`` with every generated section replaced by its current content. A section whose
    BEGIN or END marker is missing (or out of order) is an :class:`InputError` naming ``where``
    and the marker, with nothing replaced."""
    for name, body in generated_sections().items():
        begin, end = (g.format(name=name) for g in GENERATED)
        i, j = text.find(begin), text.find(end)
        if i < 0 or j < 0 or j < i:
            what = begin if i < 0 else end if j < 0 else f"{end} (before {begin})"
            raise InputError(f"{where}: the generated section {name!r} needs the marker line {what}; "
                             f"put both markers where the {name} table belongs")
        i += len(begin)
        text = text[:i] + "\n" + body.rstrip("\n") + "\n" + text[j:]
    return text


if __name__ == "__main__":  # regenerate the tables in docs/spec.md
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m modelc.frontend.schema docs/spec.md")
    path = sys.argv[1]
    try:
        with open(path, encoding="utf-8") as fh:
            old = fh.read()
        new = render_docs(old, path)
    except (OSError, InputError) as exc:
        sys.exit(f"error: {exc}")
    if new != old:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(new)
