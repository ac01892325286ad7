"""docs/runtime.md: every example on the page runs and prints what the page says (doctest)."""
from __future__ import annotations

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"


def test_runtime_page_examples_run():
    result = doctest.testfile(str(DOC), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 20
    assert result.failed == 0
