"""Module emission: determinism across processes and hash seeds, the golden file, syntax checking,
atomic writes, and the errors of emit_module."""
from __future__ import annotations

import difflib
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import backend_programs as bp
from modelc.options import CompileOptions
from modelc.backends.module import check_source, emit_module, write_atomic, write_modules
from modelc.errors import InternalError, ModelcError

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "elastic.py"

CHILD = r'''
import hashlib, sys
sys.path.insert(0, sys.argv[1])
import backend_programs as bp
from modelc.backends.module import emit_module
for name in ("elastic", "newton3", "solve3"):
    v, f = bp.ALL[name]()
    print(name, hashlib.sha256(emit_module(f).encode()).hexdigest())
try:
    from modelc import driver
    spec = driver.load_spec(sys.argv[2])
    for name in ("elastic", "j2_perfect"):
        print(name, hashlib.sha256(driver.compile_model(spec, name).source.encode()).hexdigest())
except Exception as e:  # the front end/passes are tested elsewhere
    print("library-unavailable", type(e).__name__)
'''


def test_byte_identical_across_processes_and_hash_seeds():
    repo = HERE.parents[2]
    outs = []
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", CHILD, str(HERE), str(repo / "spec" / "library.yaml")],
                           capture_output=True, text=True, env=env, timeout=300, cwd=repo)
        assert r.returncode == 0, r.stderr[-3000:]
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    assert outs[0].count("\n") >= 3


def test_golden_module():
    v, f = bp.elastic()
    text = emit_module(f)
    if os.environ.get("MODELC_UPDATE_GOLDEN") == "1":
        write_atomic(GOLDEN, text)
    want = GOLDEN.read_text(encoding="utf-8")
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "golden", "now", n=1))
        pytest.fail("generated module differs from tests/compiler/backends/golden/elastic.py "
                    "(review, then regenerate with MODELC_UPDATE_GOLDEN=1):\n" + diff[:6000])


def test_header_and_structure():
    v, f = bp.newton_system(3, "newton3")
    text = emit_module(f)
    head = text.splitlines()[:8]
    assert any("do not edit" in line for line in head)
    assert any("model:       newton3" in line for line in head)
    assert any("spec hash:" in line for line in head)
    assert "def _torch_eval(X, P, V, O=(-1.0, -1.0, -1)):" in text and "def _kernel(" in text and "V: tl.constexpr" in text
    assert "class Model(CompiledModel):" in text and "VARIANTS = {'value': 1, 'jacobian': 4}" in text
    # the value variant computes no derivative: the implicit-function theorem's linear solve sits
    # under a guard that the value bit (1) fails, in the PyTorch function and the Triton kernel
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if "# linear solve" in line:
            indent = len(line) - len(line.lstrip())
            guard = next(g for g in reversed(lines[:k]) if len(g) - len(g.lstrip()) < indent)
            m = re.match(r"\s*if V & (\d+):", guard)
            assert m and not int(m.group(1)) & 1, guard
    assert sum("# linear solve" in line for line in lines) == 2
    assert "**" not in text.split("class Model")[0].replace('"""', "")


def test_generated_torch_code_binds_every_runtime_helper():
    """The PyTorch spellings call the runtime's helpers by the names of TORCH_HELPERS: a generated
    module binds each of them, to the runtime's function (a name the template forgot to import would
    only fail when a spec first used that function)."""
    import importlib

    from modelc.runtime.model import TORCH_HELPERS

    ns: dict = {}
    exec(compile(emit_module(bp.elastic()[1]), "elastic.py", "exec"), ns)  # our own emitted module
    for name, fn in TORCH_HELPERS.items():
        assert ns.get(name) is fn, name
    mod = importlib.import_module("modelc.generated.gtn")
    assert all(getattr(mod, name) is fn for name, fn in TORCH_HELPERS.items())


def test_bad_bake_option_names_the_parameter():
    v, f = bp.elastic()
    with pytest.raises(ModelcError, match="cannot bake unknown parameter.*Q"):
        emit_module(f, options=CompileOptions(constant_params=("Q",)))


def test_syntax_errors_show_numbered_source():
    with pytest.raises(InternalError, match=r"(?s)not valid Python.*    2  def f\("):
        check_source("x = 1\ndef f(:\n", "test module")


def test_atomic_writes(tmp_path):
    p = tmp_path / "sub" / "m.py"
    write_atomic(p, "a = 1\n")
    write_atomic(p, "a = 2\n")
    assert p.read_text() == "a = 2\n"
    assert not [q for q in p.parent.iterdir() if q.name != "m.py"]  # no temp files left
    assert (p.stat().st_mode & 0o444) == 0o444
    paths = write_modules({"b.py": "b = 1\n", "a.py": "a = 1\n"}, tmp_path / "out")
    assert [q.name for q in paths] == ["a.py", "b.py"]
    assert hashlib.sha256((tmp_path / "out" / "b.py").read_bytes()).hexdigest()


TRACE_SPEC = '''\
models:
  scale:
    doc: "Scaled strain.\\nA second line with \\"\\"\\" quotes and a back\\\\slash"
    parameters:
      k: {default: 2.0}
    inputs:
      eps: {var: forces/E, type: SR2}
    outputs:
      S: {var: state/S, type: SR2}
    equations:
      S: k*eps
compose:
  both:
    doc: The composition's own doc
    models: [scale]
'''


def test_header_names_spec_line_and_doc(tmp_path, monkeypatch):
    """Traceability: the header names the spec file and the line of the model's declaration (a
    path relative to the working folder, so the bytes do not depend on where the checkout is) and
    quotes the doc; user text with quotes and backslashes stays data."""
    from modelc import driver
    from modelc.runtime.paths import import_file

    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "t.yaml").write_text(TRACE_SPEC)
    monkeypatch.chdir(tmp_path)
    spec = driver.load_spec("specs/t.yaml")
    leaf = driver.compile_model(spec, "scale").source
    assert "# model:       scale, declared at specs/t.yaml:2\n" in leaf
    assert "#   Scaled strain.\n#   A second line with \"\"\" quotes and a back\\slash\n" in leaf
    comp = driver.compile_model(spec, "both").source
    assert "# model:       both, declared at specs/t.yaml:13\n" in comp
    assert "#   The composition's own doc\n" in comp and "Compiled model" not in comp
    write_atomic(tmp_path / "scale.py", leaf)
    mod = import_file(tmp_path / "scale.py", "trace_scale")
    assert 'A second line with """ quotes and a back\\slash' in mod.__doc__
    assert driver.lower_model(spec, "scale").value.doc.startswith("Scaled strain.")
