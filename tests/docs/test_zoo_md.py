"""docs/zoo/*.md stay true: every page has its figure (committed, made by examples/zoo_plots.py), names a
test that exists, and every YAML block it shows is a verbatim excerpt of the spec file it documents."""
from __future__ import annotations

import re

import pytest

from fe_util import REPO

PAGES = {"chaboche": ("spec/chaboche.yaml", "spec/library.yaml"), "gtn": ("spec/gtn.yaml", "spec/library.yaml"),
         "norton": ("spec/creep.yaml", "spec/library.yaml"), "drucker_prager": ("docs/zoo/drucker_prager.yaml",),
         "thermo_j2": ("docs/zoo/thermo_j2.yaml",)}


@pytest.mark.parametrize("page", PAGES)
def test_zoo_page_is_current(page):
    text = (REPO / "docs" / "zoo" / f"{page}.md").read_text()
    assert "![" in text and f"({page}.png)" in text and (REPO / "docs" / "zoo" / f"{page}.png").stat().st_size > 10000
    for test in re.findall(r"tests/models/(test_\w+\.py)", text):
        assert (REPO / "tests" / "models" / test).is_file(), test
    specs = "\n".join((REPO / s).read_text() for s in PAGES[page])
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert blocks
    for b in blocks:
        assert b in specs, f"docs/zoo/{page}.md shows YAML that is not in {PAGES[page]}: regenerate the excerpt"
