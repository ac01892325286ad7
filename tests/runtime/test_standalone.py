"""The runtime stands alone: importing and running a generated module, on every backend, loads
neither SymPy nor any compiler package (STYLE: "the runtime never imports the compiler").

Each check runs in a fresh interpreter, so nothing imported by the test session can hide an import.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = sorted(p.stem for p in (ROOT / "generated").glob("*.py") if p.stem != "__init__")

# Anything under modelc that is neither the runtime nor a generated module is compiler code.
_CHECK = r"""
import json, sys
allowed = ("modelc.runtime", "modelc.generated")
def compiler_modules():
    bad = [m for m in sys.modules if m == "sympy" or m.startswith("sympy.")]
    bad += [m for m in sys.modules if m.startswith("modelc.") and not m.startswith(allowed)]
    return sorted(bad)
"""

_RUN = _CHECK + r"""
import importlib, torch
backends = sys.argv[2].split(",")
mod = importlib.import_module("modelc.generated." + sys.argv[1])
done = []
for backend in backends:
    m = mod.Model(dtype=torch.float64, backend=backend)
    assert m.backend == backend, (backend, m.backend)
    gen = torch.Generator().manual_seed(0)
    inputs = {}
    for v in m.INPUTS:
        size = m.input_axis.storage_size(v.name)
        inputs[v.name] = 1e-4 * torch.randn(3, size, generator=gen, dtype=torch.float64)
    if "forces/t" in inputs:
        inputs["forces/t"] = torch.ones(3, 1, dtype=torch.float64)
        inputs["old_forces/t"] = torch.zeros(3, 1, dtype=torch.float64)
    inputs = {k: (x[:, 0] if m.input_axis.storage_size(k) == 1 else x) for k, x in inputs.items()}
    for derivatives in (False, True):
        out = m(inputs, derivatives=derivatives)
        y = out[m.OUTPUTS[0].name]
        assert torch.isfinite(y).all(), (backend, derivatives)
    done.append(backend)
print(json.dumps({"done": done, "loaded": compiler_modules()}))
"""


def _python(code: str, *args: str) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_import_modelc_loads_no_compiler():
    out = _python(_CHECK + "import modelc, modelc.runtime\nprint(json.dumps(compiler_modules()))")
    assert out == []


@pytest.mark.parametrize("name", GENERATED)
def test_running_a_generated_module_loads_no_compiler(name):
    out = _python(_RUN, name, "torch,c,triton")
    assert out["done"] == ["torch", "c", "triton"]
    assert out["loaded"] == [], f"running {name} imported compiler modules: {out['loaded']}"


def test_the_check_sees_a_compiler_import():
    """The guard can fail: importing the compiler's IR is reported."""
    out = _python(_CHECK + "import modelc.ir\nprint(json.dumps(compiler_modules()))")
    assert "sympy" in out and "modelc.ir" in out
