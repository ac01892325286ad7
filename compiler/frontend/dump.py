"""Readable, deterministic text of the front end's stages (for ``--dump-ir`` and the spec digest).

Expressions print with ``sympy.sstr`` (canonical term order, independent of PYTHONHASHSEED).
"""
from __future__ import annotations

from modelc.frontend.yamlio import YList, YMap, YScalar
from modelc.ir import Model, Spec
from modelc.symdag import StrPrinterMemo


def format_yaml(node, indent: int = 0) -> str:
    """The located YAML tree: one value per line, with its line:col."""
    pad = "  " * indent
    if isinstance(node, YMap):
        lines = []
        for k, v in node.items.items():
            kl = node.keys[k].loc
            if isinstance(v, YScalar):
                lines.append(f"{pad}{k}: {v.value!r}    @{kl.line}:{kl.col}")
            else:
                lines.append(f"{pad}{k}:    @{kl.line}:{kl.col}")
                lines.append(format_yaml(v, indent + 1))
        return "\n".join(lines)
    if isinstance(node, YList):
        return "\n".join(f"{pad}- {i.value!r}" if isinstance(i, YScalar) else f"{pad}-\n{format_yaml(i, indent + 1)}"
                         for i in node.items)
    return f"{pad}{node.value!r}"


def _components(label: str, comps, sstr) -> list[str]:
    if len(comps) == 1:
        return [f"    {label} = {sstr(comps[0])}"]
    return [f"    {label}[{i}] = {sstr(c)}" for i, c in enumerate(comps)]


def format_model(m: Model, sstr=None) -> str:
    """``sstr``: the expression printer (``sympy.sstr``'s text; default a fresh
    :class:`~modelc.symdag.StrPrinterMemo`, which prints a shared subexpression once)."""
    sstr = sstr if sstr is not None else StrPrinterMemo()
    kind = "implicit" if m.is_implicit else "explicit"
    lines = [f"model {m.name} ({kind})" + (f"  # {m.doc}" if m.doc else "")]
    for p in m.parameters:
        lines.append(f"  parameter {p}" + (f"  # {p.doc}" if p.doc else ""))
    for v in m.inputs:
        lines.append(f"  input     {v}" + (f"  # {v.doc}" if v.doc else ""))
    unknowns = m.implicit.unknowns if m.is_implicit else ()
    for v in tuple(unknowns) + tuple(v for v in m.outputs if v not in unknowns):
        kind = "unknown " if v in unknowns else "output  "
        lines.append(f"  {kind}  {v}" + (f"  # {v.doc}" if v.doc else ""))
    if m.tangent is not None:
        lines.append(f"  {m.tangent}")
    for eq in m.equations:
        lines.append(f"  equation {eq.var.name}:")
        lines += _components(eq.var.name, eq.components, sstr)
    if m.implicit is not None:
        s = m.implicit
        if s.uses:
            lines.append(f"  uses {', '.join(s.uses)}")
        o = s.solver
        lines.append(f"  solver rtol={o.rtol!r} atol={o.atol!r} max_iter={o.max_iter} "
                     f"on_failure={o.on_failure} max_substeps={o.max_substeps}"
                     + (f" method={o.method}" if o.method != "newton" else "")
                     + (f" line_search={o.line_search}" if o.line_search else ""))
        for eq in s.residuals:
            lines.append(f"  residual {eq.var.name}:")
            lines += _components(f"R({eq.var.name})", eq.components, sstr)
        for eq in s.guess:
            lines.append(f"  guess {eq.var.name}:")
            lines += _components(f"{eq.var.name}0", eq.components, sstr)
    return "\n".join(lines)


def format_spec(spec: Spec) -> str:
    sstr = StrPrinterMemo()  # the models share subexpressions (instances, includes)
    parts = [format_model(m, sstr) for m in spec.models]
    for c in spec.compositions:
        keep = f" keep {', '.join(c.keep)}" if c.keep else ""
        tangent = f" {c.tangent}" if c.tangent else ""
        parts.append(f"compose {c.name} = [{', '.join(c.models)}]{keep}{tangent}"
                     + (f"  # {c.doc}" if c.doc else ""))
    return "\n\n".join(parts) + "\n"
