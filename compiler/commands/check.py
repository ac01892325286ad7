"""`modelc check SPEC...`: validate specs and print each model's variables, layout and operation counts.

``--dump-ir DIR`` writes the IR after every stage to ``DIR/<spec stem>/NN_<stage>.txt`` (readable,
byte-identical across runs and PYTHONHASHSEED values).
"""
from __future__ import annotations

import argparse
import os
import sys

import sympy as sp

from modelc.frontend import load_spec
from modelc.ir import Model, Spec


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("specs", nargs="+", metavar="SPEC", help="spec files (YAML)")
    p.add_argument("--dump-ir", metavar="DIR", default=None,
                   help="write the IR after every stage to DIR/<spec>/NN_<stage>.txt")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (specs, models, variables with offsets, counts)")


def count_ops(exprs) -> int:
    return int(sum(sp.count_ops(e) for e in exprs))


def _layout(title: str, variables) -> list[str]:
    lines = [f"  {title}:"]
    off = 0
    for v in variables:
        lines.append(f"    {v.name:<36} {v.type.name:<7} offset {off:>3}  size {v.type.size}")
        off += v.type.size
    lines.append(f"    {'(total)':<36} {'':<7} {'':>10}  size {off}")
    return lines


def describe_model(m: Model) -> str:
    kind = "implicit" if m.is_implicit else "explicit"
    lines = [f"model {m.name} ({kind})" + (f": {m.doc}" if m.doc else "")]
    if m.parameters:
        lines.append("  parameters:")
        for p in m.parameters:
            d = "" if p.default is None else (f" = {p.default[0]!r}" if len(p.default) == 1 else f" = {p.default}")
            lines.append(f"    {p.name:<36} {p.type.name:<7}{d}" + (f" [{p.units}]" if p.units else ""))
    lines += _layout("inputs", m.inputs)
    if m.is_implicit and m.equations:  # outputs computed from the solved (internal) unknowns
        lines += _layout("unknowns", m.implicit.unknowns)
        lines += _layout("outputs (from the solution)", m.outputs)
    else:
        lines += _layout("unknowns (outputs)" if m.is_implicit else "outputs", m.outputs)
    lines.append("  operation counts (before CSE):")
    eqs = (m.implicit.residuals if m.implicit is not None else ()) + m.equations
    total = 0
    for eq in eqs:
        n = count_ops(eq.components)
        total += n
        label = f"R({eq.var.name})" if m.is_implicit and eq.var in m.implicit.unknowns else eq.var.name
        lines.append(f"    {label:<36} {n:>6}")
    lines.append(f"    {'(total)':<36} {total:>6}")
    if m.implicit is not None and m.implicit.uses:
        lines.append(f"  uses: {', '.join(m.implicit.uses)}")
    return "\n".join(lines)


def describe(spec: Spec) -> str:
    parts = [f"spec {spec.path}: {len(spec.models)} models, {len(spec.compositions)} compositions "
             f"(digest {spec.digest[:12]})"]
    parts += [describe_model(m) for m in spec.models]
    for c in spec.compositions:
        keep = f" keep [{', '.join(c.keep)}]" if c.keep else ""
        parts.append(f"composition {c.name} = [{', '.join(c.models)}]{keep}" + (f": {c.doc}" if c.doc else ""))
    return "\n\n".join(parts)


class IRDumper:
    """Writes one file per stage, numbered in order."""

    def __init__(self, root: str, spec_path: str):
        self.dir = os.path.join(root, os.path.splitext(os.path.basename(spec_path))[0])
        os.makedirs(self.dir, exist_ok=True)
        self.n = 0

    def __call__(self, stage: str, text: str) -> None:
        self.n += 1
        path = os.path.join(self.dir, f"{self.n:02d}_{stage}.txt")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
        os.replace(tmp, path)


def describe_compiled(spec: Spec, trace=None) -> str:
    """Run the passes on every composition of ``spec``; report operation counts after CSE and the
    time each stage took."""
    from modelc.driver import lower_model
    from modelc.passes.cse import count_ops as program_ops

    parts = []
    for c in spec.compositions:
        done = lower_model(spec, c.name, trace)
        lines = [f"compiled {c.name}: inputs {', '.join(v.name for v in done.model.inputs)}",
                 f"  outputs {', '.join(v.name for v in done.model.outputs)}",
                 "  operation counts after CSE (per point; newton_* = one Newton iteration):"]
        progs = [("value", done.value), ("value+jacobian", done.full)]
        if done.tangent is not None:
            progs.append(("value+tangent", done.tangent))
        for label, prog in progs:
            ops = program_ops(prog)
            shown = ", ".join(f"{k} {v}" for k, v in ops.items() if v)
            lines.append(f"    {label:<15} {shown}")
        lines.append("  passes: " + ", ".join(f"{s.name} {s.seconds:.2f}s" for s in done.stages))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _vars_json(variables) -> list[dict]:
    out, off = [], 0
    for v in variables:
        out.append({"name": v.name, "type": v.type.name, "offset": off, "size": v.type.size})
        off += v.type.size
    return out


def model_json(m: Model) -> dict:
    eqs = m.implicit.residuals if m.implicit is not None else m.equations
    return {"name": m.name, "kind": "implicit" if m.is_implicit else "explicit", "doc": m.doc,
            "parameters": [{"name": p.name, "type": p.type.name, "units": p.units,
                            "default": None if p.default is None else list(p.default)} for p in m.parameters],
            "inputs": _vars_json(m.inputs), "outputs": _vars_json(m.outputs),
            "operations": {(f"R({eq.var.name})" if m.is_implicit else eq.var.name): count_ops(eq.components)
                           for eq in eqs}}


def spec_json(spec: Spec) -> dict:
    """The machine-readable form of what ``modelc check`` prints for one spec."""
    from modelc.driver import lower_model
    from modelc.passes.cse import count_ops as program_ops

    comps = []
    for c in spec.compositions:
        done = lower_model(spec, c.name)
        progs = {"value": done.value, "value+jacobian": done.full}
        if done.tangent is not None:
            progs["value+tangent"] = done.tangent
        comps.append({"name": c.name, "doc": c.doc, "models": list(c.models), "keep": list(c.keep),
                      "inputs": _vars_json(done.model.inputs), "outputs": _vars_json(done.model.outputs),
                      "operations_after_cse": {k: {n: int(v) for n, v in program_ops(p).items()}
                                               for k, p in progs.items()}})
    return {"spec": str(spec.path), "digest": spec.digest, "models": [model_json(m) for m in spec.models],
            "compositions": comps}


def main(args: argparse.Namespace) -> int:
    if getattr(args, "json", False):
        import json

        docs = [spec_json(load_spec(path)) for path in args.specs]
        sys.stdout.write(json.dumps({"specs": docs}, indent=2) + "\n")
        return 0
    for path in args.specs:
        trace = IRDumper(args.dump_ir, path) if args.dump_ir else None
        spec = load_spec(path, trace=trace)
        sys.stdout.write(describe(spec) + "\n\n")
        compiled = describe_compiled(spec, trace)
        if compiled:
            sys.stdout.write(compiled + "\n\n")
    return 0
