"""`modelc graph SPEC [--model NAME] [--format dot|mermaid|svg|png] [-o FILE]`: the dependency graph.

Sub-models are boxes in evaluation order (an implicit model drawn on its own shows its residual
system: the models it uses, renamed ``<model>/...``, with the unknowns as inputs) (implicit ones say so and list their unknowns); composed
inputs are green ovals, composed outputs blue ovals; every edge carries the variables it passes.
DOT and Mermaid are text (stdout or ``-o``); SVG/PNG run Graphviz's ``dot`` when it is installed.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from modelc.errors import InputError
from modelc.ir import Model

FORMATS = ("dot", "mermaid", "svg", "png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="spec file (YAML)")
    p.add_argument("--model", help="model or composition to draw (default: the last composition, "
                                   "else the last model)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="output format (default: from the -o suffix: .dot, .gv or .txt; .mmd; .svg; .png; "
                        "none: dot; another suffix is an error)")
    p.add_argument("-o", "--output", help="output file (default: stdout for text formats, "
                                          "MODEL.FORMAT for images)")


def main(args: argparse.Namespace) -> int:
    from modelc.frontend import load_spec
    from modelc.passes.compose import compose_spec_model

    fmt = args.format or format_of(args.output)  # (before the spec's work: a bad -o is told at once)
    spec = load_spec(args.spec)
    name = args.model
    if name is None:
        name = spec.compositions[-1].name if spec.compositions else spec.models[-1].name
    model = compose_spec_model(spec, name)
    if fmt in ("dot", "mermaid"):
        text = to_dot(model) if fmt == "dot" else to_mermaid(model)
        if args.output:
            Path(args.output).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    out = Path(args.output or f"{name.replace('/', '_')}.{fmt}")
    return render_image(to_dot(model), out, fmt)


#: -o suffixes that name a format (no suffix, or .txt: DOT text)
SUFFIXES = {"": "dot", "txt": "dot", "dot": "dot", "gv": "dot", "mmd": "mermaid", "mermaid": "mermaid",
            "svg": "svg", "png": "png"}


def format_of(output: str | None) -> str:
    """The format an ``-o`` file name asks for; an :class:`InputError` for a suffix that names none
    (``-o graph.pdf`` would otherwise get DOT text under a PDF's name)."""
    suffix = Path(output).suffix.lstrip(".").lower() if output else ""
    if suffix not in SUFFIXES:
        raise InputError(f"-o {output}: .{suffix} is not a format modelc graph writes; name the file "
                         ".dot, .gv, .mmd, .svg or .png, or pass --format " + "|".join(FORMATS))
    return SUFFIXES[suffix]


def render_image(dot_text: str, out: Path, fmt: str) -> int:
    """Run Graphviz; without it, write the DOT file next to ``out`` and say how to get Graphviz."""
    exe = shutil.which("dot")
    if exe is None:
        dot_file = out.with_suffix(".dot")
        dot_file.write_text(dot_text)
        print(f"modelc graph: Graphviz's 'dot' program is not installed, so no {fmt.upper()} was made; "
              f"wrote the graph as DOT to {dot_file} instead.\n  Install Graphviz (Debian/Ubuntu: "
              f"'apt-get install graphviz'; macOS: 'brew install graphviz'; conda: 'conda install "
              f"graphviz') and run: dot -T{fmt} {dot_file} -o {out}", file=sys.stderr)
        return 0
    subprocess.run([exe, f"-T{fmt}", "-o", str(out)], input=dot_text.encode(), check=True)
    return 0


# --------------------------------------------------------------------------------------------------
# the graph, as data, then as text
# --------------------------------------------------------------------------------------------------
def graph_of(model: Model):
    """(nodes, edges): nodes are (id, label, kind) with kind in model/implicit/input/output; edges
    are (source id, target id, variable names). An implicit model on its own is drawn as its
    residual system (the models it uses, with the unknowns among the inputs)."""
    if model.is_implicit and model.submodels:
        model = model.submodels[0]
    subs = model.submodels if model.is_composed and not model.is_implicit else (model,)
    nodes, edges = [], {}
    provider = {}
    for k, s in enumerate(subs):
        label = s.name
        kind = "model"
        if s.is_implicit:
            kind = "implicit"
            label += " (implicit: " + ", ".join(u.name for u in s.implicit.unknowns) + ")"
        nodes.append((f"m{k}", label, kind))
        for v in s.outputs:
            provider[v.name] = f"m{k}"
    inputs = {v.name: f"i{k}" for k, v in enumerate(model.inputs)}
    outputs = {v.name: f"o{k}" for k, v in enumerate(model.outputs)}
    nodes += [(i, n, "input") for n, i in inputs.items()]
    nodes += [(o, n, "output") for n, o in outputs.items()]

    def edge(a, b, var):
        edges.setdefault((a, b), []).append(var)

    for k, s in enumerate(subs):
        for v in s.inputs:
            src = provider.get(v.name) if s is not model else None
            src = src or inputs.get(v.name)
            if src is not None:
                edge(src, f"m{k}", v.name)
    for n, o in outputs.items():
        edge(provider[n], o, n)
    return nodes, [(a, b, tuple(vs)) for (a, b), vs in edges.items()]


_DOT_STYLE = {
    "model": 'shape=box, style="rounded"',
    "implicit": 'shape=box, style="rounded,bold", peripheries=2',
    "input": 'shape=oval, style=filled, fillcolor="#d8f0d8"',
    "output": 'shape=oval, style=filled, fillcolor="#d8e4f8"',
}


def to_dot(model: Model) -> str:
    nodes, edges = graph_of(model)
    lines = [f'digraph "{model.name}" {{', "  rankdir=LR;",
             f'  label="{model.name}: inputs green, outputs blue"; labelloc=t;']
    for nid, label, kind in nodes:
        lines.append(f'  {nid} [label="{label}", {_DOT_STYLE[kind]}];')
    for a, b, vs in edges:
        label = ", ".join(vs)
        lines.append(f'  {a} -> {b} [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(model: Model) -> str:
    nodes, edges = graph_of(model)
    shape = {"model": ('["', '"]'), "implicit": ('[["', '"]]'), "input": ('(["', '"])'),
             "output": ('(["', '"])')}
    lines = ["flowchart LR"]
    for nid, label, kind in nodes:
        o, c = shape[kind]
        cls = f":::{kind}" if kind in ("input", "output", "implicit") else ""
        lines.append(f"  {nid}{o}{label}{c}{cls}")
    for a, b, vs in edges:
        label = ", ".join(vs)
        lines.append(f'  {a} -->|"{label}"| {b}')
    lines += ["  classDef input fill:#d8f0d8", "  classDef output fill:#d8e4f8",
              "  classDef implicit stroke-width:3px"]
    return "\n".join(lines) + "\n"
