"""Programs -> one generated Python module (Triton kernels + PyTorch code + C source + a ``Model`` class).

:func:`emit_module` renders ``templates/module.py.j2`` (Jinja2, ``StrictUndefined``) from a small
context built here: function bodies come from the backends' printers, never from template logic.
The result is compiled to bytecode (:func:`check_source`); on failure the error shows the generated source
with line numbers. :func:`write_modules` writes files atomically (temp file + ``os.replace``).
Output is deterministic: no sets, no ids, no hashes of Python objects; the same Programs give the
same bytes in any process.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import jinja2

from modelc import __version__, ir
from modelc.backends.c_backend import c_source
from modelc.backends.layout import Layout
from modelc.backends.statements import Helpers
from modelc.backends.torch_backend import TORCH_LINALG_MIN_N, torch_body
from modelc.backends.triton_backend import baked_arg, kernel_maxnreg, kernel_signature, triton_body
from modelc.backends.triton_math import helpers_for, helper_source
from modelc.ir.analysis import constant_variants, exponent_parameters
from modelc.errors import InternalError, ModelcError
from modelc.options import CompileOptions
from modelc.runtime.paths import sanitize, write_atomic


EmitOptions = CompileOptions  # the former name: one options object from the CLI to emission


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
    return {"on_failure": s.on_failure, "max_substeps": int(s.max_substeps), "rtol": float(s.rtol),
            "atol": float(s.atol), "max_iter": int(s.max_iter)}


def _initial_function(value: ir.Program) -> list[str] | None:
    """The body of ``_torch_initial(X, P)`` -> ``(Y, None, None)``: the declared initial values
    (``Program.initial``, over parameters only) on their own output axis; None when none is declared.
    It is the PyTorch backend's code for a program with no inputs, so parameters (shared or per point)
    are read exactly as in the model's own functions."""
    if not value.initial:
        return None
    prog = ir.Program(name=f"{value.name}/initial", inputs=(), parameters=value.parameters,
                      outputs=tuple(eq.var for eq in value.initial), body=(),
                      results={eq.var.name: eq.components for eq in value.initial},
                      variants=(ir.Variant("value", ir.VARIANT_BITS["value"], False),))
    return torch_body(prog, Layout.of(prog))


def emit_module(program: ir.Program, *, spec: ir.Spec | None = None, options=None,
                source: str | None = None) -> str:
    """The generated module's source for ``program`` and the variants it serves
    (:mod:`modelc.passes.variants`; a program without variants serves ``value`` and its derivatives):
    one PyTorch function, one Triton kernel and one C block function, each taking the variant's bit."""
    from modelc.backends.statements import with_variants

    options = options if options is not None else CompileOptions()
    program = with_variants(program)
    value = program
    layout = Layout.of(program)
    baked = frozenset(options.constant_params)
    unknown = sorted(baked - {p.name for p in value.parameters})
    if unknown:
        raise ModelcError(f"model {value.name}: cannot bake unknown parameter(s) {', '.join(unknown)}; "
                          f"parameters: {', '.join(p.name for p in value.parameters) or '(none)'}")
    src = source if source is not None else (display_path(spec.path) if spec is not None else "(built in code)")
    spec_hash = spec.digest if spec is not None and spec.digest else "(none)"
    implicit = any(isinstance(s, ir.Newton) for s in value.body)
    variants = {v.name: v for v in program.variants}
    tangent = variants.get("tangent")

    # each Newton solve once per backend: helpers the function and the kernel call
    torch_helpers, triton_helpers = Helpers("_torch_newton_"), Helpers("_triton_newton_")
    what = "; ".join(f"{v.bit} {v.name}" for v in program.variants)
    torch_lines = torch_body(program, layout, helpers=torch_helpers)
    kernel_lines, baked_args = triton_body(program, layout, baked, helpers=triton_helpers)
    sig = kernel_signature(layout, baked_args)
    doc = f"{value.name}, variant V ({what}): Y, J (None for value), ST (None for explicit models)."
    torch_fns = [{"name": "_torch_eval", "doc": doc, "lines": torch_lines}]
    kernels = [{"name": "_kernel", "doc": f"{value.name}, variant V ({what}).", "lines": kernel_lines,
                "signature": sig}]

    initial = _initial_function(value)

    def var_info(v: ir.Variable) -> str:
        return f"{v.name!r}, {v.type.name!r}, {v.doc!r}"

    def par_info(p: ir.Parameter) -> str:
        default = None if p.default is None else tuple(float(x) for x in p.default)
        bounds = f", bounds={p.bounds!r}" if p.bounds else ""
        return f"{p.name!r}, {p.type.name!r}, {default!r}, {p.units!r}, {p.doc!r}{bounds}"

    doc = value.doc.strip() or f"Compiled model {value.name}."
    where = src if value.loc is None else f"{display_path(value.loc.file)}:{value.loc.line}"
    doc_line = doc.splitlines()[0]
    use = ("Use::\n\n    m = Model(dtype=torch.float64, device=\"cpu\")\n"
           "    out = m({...inputs by name...}, derivatives=True)\n"
           f"    out[\"{value.outputs[0].name if value.outputs else ''}\"], out.jacobian"
           + (", out.status.summary()" if implicit else "") + "\n")
    ctx = {
        "title": f"{value.name} — generated by modelc",
        "version": __version__, "source": src, "model": value.name, "spec_hash": spec_hash,
        "model_repr": repr(value.name), "source_repr": repr(src), "spec_hash_repr": repr(spec_hash),
        # spec text reaches the module only as string literals and escaped comments (never raw)
        "source_comment": comment_text(src), "where_comment": comment_text(where),
        "doc_comment": "\n".join(f"#   {comment_text(line)}".rstrip() for line in doc.splitlines()),
        "module_doc": py_string(f"{value.name}: generated by modelc from {where}.\n\n{doc}\n\n{use}"),
        "class_doc": py_string(f"{value.name}: {doc_line}"),
        "c_source_literal": raw_string(c_source(program)),
        "first_output": value.outputs[0].name if value.outputs else "",
        "implicit": implicit,
        "nx": layout.nx, "ny": layout.ny, "np": layout.np,
        "torch_functions": torch_fns, "kernels": kernels,
        "torch_helpers": torch_helpers.lines, "triton_helpers": triton_helpers.lines,
        "triton_math": helper_source(helpers_for(
            [ln for k in kernels for ln in k["lines"]] + list(triton_helpers.lines))).splitlines(),
        "tangent": tangent is not None,
        "total": "total" in variants,
        "variants_repr": repr({v.name: v.bit for v in program.variants}),
        "tangent_repr": repr(None if tangent is None else (tuple(tangent.of or ()), _names(tangent.wrt or ()))),
        "inputs": [var_info(v) for v in value.inputs],
        "outputs": [var_info(v) for v in value.outputs],
        "parameters": [par_info(p) for p in value.parameters],
        "state_repr": repr(_state_pairs(value.inputs, value.outputs, "state", "old_state")),
        "forces_repr": repr(_state_pairs(value.inputs, value.inputs, "forces", "old_forces")),
        "solver_repr": repr(_solver(value)),
        "initial": initial,
        "initial_vars": [var_info(eq.var) for eq in value.initial],
        "constant_repr": repr(constant_variants(program)),
        "baked_repr": repr(tuple(sorted(baked))),
        "exponents_repr": repr(tuple(p for p in exponent_parameters(program) if p not in baked)),
        "triton_maxnreg_repr": repr(kernel_maxnreg(program)),
        "triton_retry": _triton_retry(value),
        "baked_args_repr": repr(tuple((p.name, tuple(baked_arg(s) for s in p.symbols))
                                      for p in value.parameters if p.name in baked)),
    }
    text = _template("module.py.j2").render(**ctx)
    check_source(text, f"generated module for {value.name}")
    return text


def _triton_retry(program: ir.Program) -> bool:
    """Whether the runtime solves the points the Triton kernel fails again with the generated PyTorch
    code (``Model.TRITON_RETRY``): for a Newton of ``TORCH_LINALG_MIN_N`` or more unknowns, whose step
    the kernel eliminates with static pivots guarded where they are at risk (``"auto"``,
    :mod:`modelc.passes.expand_solve`), and the PyTorch code with LAPACK's partially pivoted LU. Far
    from the solution a guarded pivot can cancel (4 of 20,000 random gtn points): the kernel then
    reports the point as not converged where partial pivoting converges it."""
    return any(isinstance(s, ir.Newton) and len(s.unknowns) >= TORCH_LINALG_MIN_N for s in program.body)


def py_string(text: str) -> str:
    """A Python literal for ``text``: a readable triple-quoted string when that is exact, else repr()."""
    plain = all(c == "\n" or c.isprintable() for c in text) and "\\" not in text and '"""' not in text
    if plain and not text.endswith('"'):
        return '"""' + text + '"""'
    return repr(text)


def raw_string(text: str) -> str:
    """A Python literal for ``text`` (C source): a raw triple-quoted string when that is exact."""
    if "\'\'\'" not in text and not text.endswith("\\") and all(c == "\n" or c.isprintable() for c in text):
        return "r\'\'\'\n" + text + "\'\'\'"
    return repr("\n" + text)


def comment_text(text: str) -> str:
    """``text`` for a ``#`` comment: one line (control characters escaped as in repr())."""
    if all(c.isprintable() for c in text):
        return text
    return repr(text)[1:-1]


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


def check_source(text: str, what: str) -> None:
    """Compile the generated source to bytecode (everything short of running it); on failure show it
    with line numbers."""
    try:
        compile(text, what, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL character
        exc = exc if isinstance(exc, SyntaxError) else SyntaxError(str(exc))
        raise InternalError(f"{what} is not valid Python ({exc.msg} at line {exc.lineno}):\n"
                            f"{_numbered(text)}") from None


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
    return sanitize(model_name) + ".py"
