"""The compile pipeline (modelc.driver): what it loads and how long a library model takes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r'''
import json, sys, time
t0 = time.perf_counter()
from modelc import driver
spec = driver.load_spec(sys.argv[1])
done = driver.compile_model(spec, "j2_linear_iso")
print(json.dumps({"torch": any(m == "torch" or m.startswith("torch.") for m in sys.modules),
                  "numpy": any(m == "numpy" or m.startswith("numpy.") for m in sys.modules),
                  "stages": [s.name for s in done.stages], "lines": len(done.source.splitlines())}))
'''


def test_compiling_a_model_does_not_import_torch():
    """Spec -> module source needs SymPy and Jinja2 only: `modelc compile` in a build step pays
    neither torch's import time (about 1.6 s) nor its install."""
    r = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "spec" / "library.yaml")], capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["torch"] is False
    assert out["numpy"] is False  # ~0.1 s of a cold compile: modelc.functions imports it lazily
    assert out["stages"] == ["compose", "positive", "differentiate", "lower", "cse", "variants", "emit"]
    assert out["lines"] > 1000
