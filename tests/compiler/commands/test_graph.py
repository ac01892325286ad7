"""`modelc graph`: DOT and Mermaid text of hand-built compositions, and the image fallback."""
from __future__ import annotations

import re
import shutil

import pytest

from modelc.commands import graph
from modelc.ir import ComposeDecl
from modelc.passes.compose import compose
from passes_helpers import coupled, seed_models


def _seed():
    f, g, h = seed_models()
    return compose(ComposeDecl("r", ("h", "g", "f")), {"f": f, "g": g, "h": h})


def _dot_edges(text):
    nodes = dict(re.findall(r'^\s+(\w+) \[label="([^"]*)"', text, re.M))
    return nodes, {(nodes[a], nodes[b], lab) for a, b, lab in re.findall(r'(\w+) -> (\w+) \[label="([^"]*)"\]', text)}


def test_dot_has_models_variables_on_edges_and_marked_io():
    text = graph.to_dot(_seed())
    assert text.startswith('digraph "r" {') and text.rstrip().endswith("}")
    nodes, edges = _dot_edges(text)
    assert {("f", "g", "y1"), ("f", "h", "y1"), ("g", "h", "y2"), ("x1", "f", "x1"), ("x4", "h", "x4"),
            ("h", "y", "y")} <= edges
    assert len(edges) == 8  # 4 inputs, y1 to g and to h, y2, y out
    for name in ("x1", "x2", "x3", "x4"):
        assert re.search(rf'label="{name}", shape=oval, style=filled, fillcolor="#d8f0d8"', text)
    assert re.search(r'label="y", shape=oval, style=filled, fillcolor="#d8e4f8"', text)


def test_mermaid():
    text = graph.to_mermaid(_seed())
    assert text.startswith("flowchart LR\n")
    assert re.search(r'm0\["f"\]', text) and '-->|"y1"|' in text
    assert re.search(r'i0\(\["x1"\]\):::input', text) and re.search(r'o0\(\["y"\]\):::output', text)
    assert "classDef input" in text and "classDef output" in text


def test_implicit_models_are_marked():
    model = coupled(1)[0]
    dot = graph.to_dot(model)
    assert "update (implicit: state/X, state/q)" in dot and "peripheries=2" in dot
    nodes, edges = _dot_edges(dot)
    assert ("update (implicit: state/X, state/q)", "stress", "state/X") in edges
    assert ":::implicit" in graph.to_mermaid(model)


def test_image_without_graphviz_falls_back_to_dot(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    out = tmp_path / "g.svg"
    assert graph.render_image(graph.to_dot(_seed()), out, "svg") == 0
    assert not out.exists() and (tmp_path / "g.dot").read_text().startswith("digraph")
    assert "apt-get install graphviz" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
def test_image_with_graphviz(tmp_path):
    out = tmp_path / "g.svg"
    graph.render_image(graph.to_dot(_seed()), out, "svg")
    assert "<svg" in out.read_text()


def test_cli_on_the_library_spec(tmp_path, capsys):
    pytest.importorskip("modelc.frontend.load")
    from pathlib import Path

    from modelc.cli import main

    spec = Path(__file__).parents[3] / "spec" / "library.yaml"
    if not spec.exists():
        pytest.skip("spec/library.yaml not there")
    out = tmp_path / "g.mmd"
    assert main(["graph", str(spec), "--model", "j2_perfect_coupled", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("flowchart LR") and "(implicit:" in text and '-->|"state/S"|' in text
    assert main(["graph", str(spec), "--model", "no_such_model"]) == 2
    assert "no model or composition named 'no_such_model'" in capsys.readouterr().err
    # a suffix that names no format is refused (DOT text under a .pdf name would mislead); .txt is DOT
    bad = tmp_path / "g.pdf"
    assert main(["graph", str(spec), "--model", "j2_perfect", "-o", str(bad)]) == 2
    assert ".pdf is not a format modelc graph writes" in capsys.readouterr().err and not bad.exists()
    assert main(["graph", str(spec), "--model", "j2_perfect", "-o", str(bad), "--format", "dot"]) == 0
    assert bad.read_text().startswith("digraph")
    assert main(["graph", str(spec), "--model", "j2_perfect", "-o", str(tmp_path / "g.txt")]) == 0
    assert (tmp_path / "g.txt").read_text().startswith("digraph")
