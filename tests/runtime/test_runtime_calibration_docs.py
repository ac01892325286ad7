"""docs/calibration.md: every Python block on the page runs, in order, and its asserts hold."""
from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "calibration.md"


def test_calibration_page_examples_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 4
    env: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), env)  # noqa: S102 - the page's own examples
    out = capsys.readouterr().out
    for text in ("('forces/E', 'sigma_y')", "torch.Size([4, 6]) torch.Size([])",
                 "['params.K', 'params.sigma_y']", "torch.float32 torch.float32",
                 "torch.Size([20, 2, 6]) True", "torch.Size([20, 2, 3, 6])"):
        assert text in out, (text, out)
