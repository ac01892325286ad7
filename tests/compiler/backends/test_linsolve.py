"""modelc.backends.linsolve: the name left behind when the linear-solve expansion moved to
modelc.passes.expand_solve. It is an alias of that module (the same module object, so the same
functions, classes and constants), whichever of the two paths is imported first."""
from __future__ import annotations

import importlib
import subprocess
import sys

from modelc.passes import expand_solve

# the moved module's public objects (what code written against the old path imports)
PUBLIC = ("Factor", "GUARD", "PIVOTING_MODES", "anchored", "at_risk", "back", "expand_solve", "factor",
          "forward", "halley_step", "max_of", "structural_matching", "substitute")


def test_the_old_path_is_the_moved_module():
    import modelc.backends.linsolve as old

    assert old is expand_solve
    assert sys.modules["modelc.backends.linsolve"] is expand_solve
    assert importlib.import_module("modelc.backends.linsolve") is expand_solve


def test_names_imported_from_the_old_path_are_the_moved_objects():
    from modelc.backends import linsolve

    for name in PUBLIC:
        assert getattr(linsolve, name) is getattr(expand_solve, name), name
    from modelc.backends.linsolve import expand_solve as fn, factor, substitute

    assert (fn, factor, substitute) == (expand_solve.expand_solve, expand_solve.factor, expand_solve.substitute)


def test_the_package_attribute_is_the_moved_module():
    import modelc.backends

    importlib.import_module("modelc.backends.linsolve")
    assert modelc.backends.linsolve is expand_solve


def test_the_alias_holds_when_the_old_path_is_imported_first():
    """In a fresh interpreter that has not imported modelc.passes.expand_solve yet."""
    code = ("import sys\n"
            "assert 'modelc.passes.expand_solve' not in sys.modules\n"
            "import modelc.backends.linsolve as old\n"
            "from modelc.passes import expand_solve as new\n"
            "assert old is new and sys.modules['modelc.backends.linsolve'] is new\n"
            "from modelc.backends.linsolve import halley_step\n"
            "assert halley_step is new.halley_step\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
