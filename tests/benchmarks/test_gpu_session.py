"""benchmarks/gpu_session.sh runs only on a lent GPU machine, where a mistake costs device time: here
it must at least parse, refuse an unknown step before doing anything, and name only modules that
exist in what it runs."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_session.sh"


def test_the_script_parses_and_refuses_an_unknown_step(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    r = subprocess.run(["bash", str(SCRIPT), "nonsense"], capture_output=True, text=True, cwd=tmp_path,
                       env={"OUT": str(tmp_path / "out"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and "usage:" in r.stderr, (r.returncode, r.stderr)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_every_python_module_it_runs_exists():
    text = SCRIPT.read_text()
    modules = set(re.findall(r"python3 -m (benchmarks\.\w+)", text))
    assert modules, "no benchmark modules found in the script"
    root = SCRIPT.parents[1]
    for mod in sorted(modules):
        assert (root / (mod.replace(".", "/") + ".py")).is_file(), mod
