"""Programs -> one generated Python module (Triton kernels + PyTorch code + C source + a ``Model`` class).

:func:`emit_module` renders ``templates/module.py.j2`` (Jinja2, ``StrictUndefined``) from a small
context built here: function bodies come from the backends' printers, never from template logic.
The result is syntax-checked with :func:`ast.parse`; on failure the error shows the generated source
with line numbers. :func:`write_modules` writes files atomically (temp file + ``os.replace``).
Output is deterministic: no sets, no ids, no hashes of Python objects; the same Programs give the
same bytes in any process.
"""
from __future__ import annotations

import ast
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import jinja2
import sympy as sp

from modelc import __version__, ir
from modelc.backends.c_backend import c_source
from modelc.backends.layout import Layout
from modelc.backends.torch_backend import torch_body
from modelc.backends.triton_backend import baked_arg, triton_body
from modelc.errors import InternalError, ModelcError


@dataclass(frozen=True, slots=True)
class EmitOptions:
    """What changes the generated text (the driver's ``Options`` has the same fields)."""

    constant_params: tuple[str, ...] = ()  # parameters baked into the kernels as constexpr


def _template(name: str) -> jinja2.Template:
    from importlib.resources import files

    text = files("modelc.templates").joinpath(name).read_text(encoding="utf-8")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    return env.from_string(text)


def _numbered(source: str) -> str:
    return "\n".join(f"{i + 1:5d}  {line}" for i, line in enumerate(source.splitlines()))


def _state_pairs(inputs, news, prefix_new: str, prefix_old: str) -> tuple[tuple[str, str], ...]:
    """``(prefix_new/x, prefix_old/x)`` for every input ``prefix_old/x`` whose partner is in ``news``."""
    names_out = {v.name for v in news}
    pairs = []
    for v in inputs:
        if v.name.startswith(prefix_old + "/"):
            new = prefix_new + v.name[len(prefix_old):]
            if new in names_out:
                pairs.append((new, v.name))
    return tuple(pairs)


def _solver(program: ir.Program) -> dict:
    newtons = [s for s in program.body if isinstance(s, ir.Newton)]
    if not newtons:
        return {}
    s = newtons[0].solver
    return {"on_failure": s.on_failure, "max_substeps": int(s.max_substeps)}


def constant_jacobian(program: ir.Program) -> bool:
    """Whether ``program`` (explicit: no Newton) has a Jacobian that depends on no input, only on the
    parameters (linear elasticity): the runtime then computes it for one point and returns it
    broadcast over the batch when the parameters are shared."""
    from modelc.passes.lower import reads, writes

    if not program.derivatives or any(not isinstance(st, ir.Assign) for st in program.body):
        return False
    varying = {s for v in program.inputs for s in v.symbols}
    for st in program.body:  # symbols whose value depends on an input, in program order
        if reads(st) & varying:
            varying |= writes(st)
    return not any(sp.sympify(e).free_symbols & varying
                   for block in program.derivatives.values() for row in block for e in row)


def emit_module(value: ir.Program, full: ir.Program, *, spec: ir.Spec | None = None,
                options=None, source: str | None = None, tangent: ir.Program | None = None,
                total: ir.Program | None = None) -> str:
    """The generated module's source for the value-only program ``value``, the program with
    derivatives ``full``, and when given, the program computing only the declared tangent blocks
    and the program computing d outputs / d (inputs, parameters) ``total`` (same inputs,
    parameters and outputs)."""
    options = options if options is not None else EmitOptions()
    layout = Layout.of(value)
    if any(Layout.of(p) != layout for p in (full, tangent, total) if p is not None):
        raise InternalError(f"program {value.name}: the value and derivative programs differ in their "
                            "inputs, parameters or outputs")
    baked = frozenset(getattr(options, "constant_params", ()) or ())
    unknown = sorted(baked - {p.name for p in value.parameters})
    if unknown:
        raise ModelcError(f"model {value.name}: cannot bake unknown parameter(s) {', '.join(unknown)}; "
                          f"parameters: {', '.join(p.name for p in value.parameters) or '(none)'}")
    src = source if source is not None else (display_path(spec.path) if spec is not None else "(built in code)")
    spec_hash = spec.digest if spec is not None and spec.digest else "(none)"
    implicit = any(isinstance(s, ir.Newton) for s in value.body)

    kernels, torch_fns = [], []
    variants = [("value", value, False), ("jacobian", full, True)]
    if tangent is not None:
        variants.append(("tangent", tangent, True))
    if total is not None:
        variants.append(("total", total, True))
    for variant, prog, deriv in variants:
        what = "outputs and d outputs / d inputs" if deriv else "outputs only (no derivative computed)"
        if prog is total:
            what = "outputs and d outputs / d (inputs, parameters)"
        if prog is tangent:
            what = (f"outputs and the tangent d({', '.join(tangent.jacobian_of or ())}) / "
                    f"d({', '.join(_names(tangent.jacobian_wrt or ()))}) only")
        torch_fns.append({"name": f"_torch_{variant}", "doc": f"{value.name}: {what}.",
                          "lines": torch_body(prog, layout, deriv)})
        lines, baked_args = triton_body(prog, layout, deriv, baked)
        sig = ("X, P, Y, J, ST, n, x_stride, p_stride, y_stride, j_stride, st_stride, "
               + "".join(f"{a}: tl.constexpr, " for a in baked_args) + "DTYPE: tl.constexpr, EPS: tl.constexpr, BLOCK: tl.constexpr")
        kernels.append({"name": f"_kernel_{variant}", "doc": f"{value.name}: {what}.", "lines": lines,
                        "signature": sig})

    def var_info(v: ir.Variable) -> str:
        return f"{v.name!r}, {v.type.name!r}, {v.doc!r}"

    def par_info(p: ir.Parameter) -> str:
        default = None if p.default is None else tuple(float(x) for x in p.default)
        return f"{p.name!r}, {p.type.name!r}, {default!r}, {p.units!r}, {p.doc!r}"

    doc = (getattr(spec.model(value.name), "doc", "") if spec is not None and _has(spec, value.name)
           else "") or f"Compiled model {value.name}."
    ctx = {
        "title": f"{value.name} — generated by modelc",
        "version": __version__, "source": src, "model": value.name, "spec_hash": spec_hash,
        "model_repr": repr(value.name), "source_repr": repr(src), "spec_hash_repr": repr(spec_hash),
        "doc": doc, "doc_line": doc.strip().splitlines()[0] if doc.strip() else "",
        "first_output": value.outputs[0].name if value.outputs else "",
        "implicit": implicit,
        "nx": layout.nx, "ny": layout.ny, "np": layout.np,
        "torch_functions": torch_fns, "kernels": kernels,
        "c_source": c_source(value, full, tangent, total),
        "tangent": tangent is not None,
        "total": total is not None,
        "tangent_repr": repr(None if tangent is None else (tuple(tangent.jacobian_of or ()),
                                                           _names(tangent.jacobian_wrt or ()))),
        "inputs": [var_info(v) for v in value.inputs],
        "outputs": [var_info(v) for v in value.outputs],
        "parameters": [par_info(p) for p in value.parameters],
        "state_repr": repr(_state_pairs(value.inputs, value.outputs, "state", "old_state")),
        "forces_repr": repr(_state_pairs(value.inputs, value.inputs, "forces", "old_forces")),
        "solver_repr": repr(_solver(value)),
        "constant_repr": repr(tuple(name for name, prog in (("jacobian", full), ("tangent", tangent),
                                                            ("total", total))
                                    if prog is not None and constant_jacobian(prog))),
        "baked_repr": repr(tuple(sorted(baked))),
        "baked_args_repr": repr(tuple((p.name, tuple(baked_arg(s) for s in p.symbols))
                                      for p in value.parameters if p.name in baked)),
    }
    text = _template("module.py.j2").render(**ctx)
    check_source(text, f"generated module for {value.name}")
    return text


def _names(wrt) -> tuple[str, ...]:
    """Jacobian column names as the runtime spells them: a parameter ``$p`` is ``p``."""
    return tuple(n[1:] if n.startswith("$") else n for n in wrt)


def display_path(path: str) -> str:
    """A spec path as written into headers: relative to the working folder when under it (so the
    generated files do not depend on where the checkout lives), with '/' separators."""
    p = os.fspath(path)
    if os.path.isabs(p):
        rel = os.path.relpath(p)
        p = rel if not rel.startswith("..") else os.path.basename(p)
    return p.replace(os.sep, "/")


def _has(spec: ir.Spec, name: str) -> bool:
    try:
        spec.model(name)
        return True
    except KeyError:
        return False


def check_source(text: str, what: str) -> None:
    """``ast.parse`` the generated source; on failure show it with line numbers."""
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise InternalError(f"{what} is not valid Python ({exc.msg} at line {exc.lineno}):\n"
                            f"{_numbered(text)}") from None


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temp file in the same folder, then ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; generated files are ordinary files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_modules(modules: Mapping[str, str], out_dir: str | Path) -> list[Path]:
    """Write ``{file name: source}`` into ``out_dir`` atomically, in sorted order; returns the paths."""
    paths = []
    for name in sorted(modules):
        p = Path(out_dir) / name
        write_atomic(p, modules[name])
        paths.append(p)
    return paths


def module_file_name(model_name: str) -> str:
    """The file name of a model's generated module (``j2_perfect`` -> ``j2_perfect.py``)."""
    from modelc.backends.names import sanitize

    return sanitize(model_name) + ".py"
