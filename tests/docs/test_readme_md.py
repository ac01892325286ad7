"""README.md: the Python example on the first page runs as written (from the repository root)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_python_example_runs(monkeypatch, capsys):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("From Python:\n\n```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(compile(block, "README.md (From Python)", "exec"), scope)
    out, step = scope["out"], scope["step"]
    assert out["state/S"].shape == (1000, 6) and out.jacobian["state/S", "forces/E"].shape == (1000, 6, 6)
    assert out.status.all_converged and int(out.status.iterations.max()) >= 1  # some points flow
    assert "converged" in capsys.readouterr().out
    again = step()
    assert again.outputs.tensor.equal(out.outputs.tensor)
