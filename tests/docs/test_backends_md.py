"""docs/backends.md: every Python example on the page runs, its asserts hold, and what it prints is
what the page says. The examples' batch sizes (B = 100_000, 1_000_000) are cut to 2000 points here:
the same code paths (C backend, out=, reused blocks, bind, bake, specialize) at a test's cost."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
BLOCKS = 5


def _blocks():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_page_has_the_examples_this_test_runs():
    assert len(_blocks()) == BLOCKS, "docs/backends.md: update this test's count with the page"


@pytest.mark.parametrize("i", range(BLOCKS))
def test_backends_page_python_examples_run(i, tmp_path, monkeypatch, capsys):
    code = _blocks()[i]
    small = re.sub(r"^B = [0-9_]+$", "B = 2000", code, flags=re.M)
    monkeypatch.chdir(tmp_path)
    old = torch.get_default_dtype()
    scope = {}
    try:
        exec(compile(small, f"{DOC.name}[python block {i}]", "exec"), scope)
    finally:
        torch.set_default_dtype(old)
    printed = capsys.readouterr().out.splitlines()
    if "out=buffers" in code:                       # the out= example: results written in place
        assert scope["res"] is scope["buffers"][1] and scope["C"].shape == (2000, 6, 6)
    if "release_buffers" in code:
        assert scope["res"]["state/internal/ep"].max() > 0     # the points yield
    if "bound()" in code:
        assert scope["res"] is scope["bound"].result
    if "specialize=False" in code:                  # specialized and general libraries agree
        assert printed[0] == "('n',)"
        assert float(printed[1]) < 1e-12
    if "bake=" in code and "specialize" not in code:
        assert not torch.equal(scope["out"]["state/S"], scope["out3"]["state/S"])
