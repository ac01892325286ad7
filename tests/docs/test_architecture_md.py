"""docs/architecture.md's claim that the tests mirror the code: every module under compiler/ and
runtime/ has its test file, tests/<folder>/test_<module>.py."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_has_its_test_file():
    modules = [p for top in ("compiler", "runtime") for p in (ROOT / top).rglob("*.py")
               if not p.name.startswith("__")]
    assert len(modules) > 50  # the walk found the code
    missing = [str(p.relative_to(ROOT)) for p in modules
               if not (ROOT / "tests" / p.parent.relative_to(ROOT) / f"test_{p.name}").is_file()]
    assert missing == [], f"modules without tests/<folder>/test_<module>.py: {missing}"
