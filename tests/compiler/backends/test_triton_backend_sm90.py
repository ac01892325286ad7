"""Every generated kernel also compiles for a GPU target without a GPU (triton.compile to PTX), so
errors that only compiled mode sees (types of loop-carried values, fp64 math, constexpr handling)
are caught here, not on a user's machine.

Under TRITON_INTERPRET=1 the decorator yields interpreter objects, so the compile runs in a child
process without that variable, importing the generated files (kernels must live in real files)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backend_programs import generated

pytest.importorskip("triton")

CHILD = r'''
import importlib.util, json, sys
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from modelc.backends.triton_backend import aot_signature

out = []
for path, baked in json.loads(sys.argv[1]):
    spec = importlib.util.spec_from_file_location("gpu_compile_" + str(len(out)), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for kname in ("value", "jacobian"):
        for dt in ("fp64", "fp32"):
            k = mod._kernel
            sig = aot_signature(k.arg_names, dt)
            consts = dict(baked, V=mod.Model.VARIANTS[kname], DTYPE=tl.float64 if dt == "fp64" else tl.float32,
                          EPS=2.2e-16 if dt == "fp64" else 1.2e-07, BLOCK=128, P_SHARED=True)
            c = triton.compile(ASTSource(fn=k, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32))
            ptx = c.asm["ptx"]
            out.append([path, kname, dt, ".entry" in ptx, "ld.global" in ptx, "st.global" in ptx,
                        ptx.count("ex2.approx")])
print(json.dumps(out))
'''


def compile_in_child(items) -> list:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(items)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_kernels_compile_for_sm90(gen_dir):
    items = [[generated(name, gen_dir).__file__, {}] for name in ("elastic", "newton3", "solve3", "pivot2")]
    items.append([generated("elastic", gen_dir, constant_params=("E", "nu")).__file__,
                  {"c_E": 2.0e5, "c_nu": 0.3}])
    results = compile_in_child(items)
    assert len(results) == len(items) * 4
    for path, kname, dt, entry, loads, stores, _ in results:
        assert entry and loads and stores, (path, kname, dt)


def test_baked_exponent_compiles_to_multiplications_for_sm90(tmp_path):
    """perzyna_iso with n baked (= 5) compiles for sm_90, its powers of n folded at compile time:
    in float32, where exp and log are ex2/lg2 instructions, the baked kernels keep only the guess's
    non-integer power (-2/n), the runtime-parameter ones exponentiate in the Newton loop too."""
    from pathlib import Path

    from modelc import driver
    from modelc.backends.module import write_atomic
    from modelc.options import CompileOptions

    spec = driver.load_spec(Path(__file__).parents[3] / "spec" / "library.yaml")
    paths = []
    for bake in ((), ("n",)):
        path = tmp_path / f"perzyna_iso_{len(bake)}.py"
        write_atomic(path, driver.compile_model(spec, "perzyna_iso", CompileOptions(constant_params=bake)).source)
        paths.append(str(path))
    results = compile_in_child([[paths[0], {}], [paths[1], {"c_n": 5.0}]])
    ex2 = {(p, k, dt): n for p, k, dt, entry, loads, stores, n in results if entry and loads and stores}
    assert len(ex2) == 8
    for kname in ("value", "jacobian"):
        runtime, baked = ex2[paths[0], kname, "fp32"], ex2[paths[1], kname, "fp32"]
        assert baked == 1 and runtime > baked, (kname, runtime, baked)


DETACH_CHILD = r'''
import collections, importlib.util, json, re, sys, time
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from modelc.backends.triton_backend import aot_attrs, aot_signature

out = {}
for label, path in json.loads(sys.argv[1]).items():
    spec = importlib.util.spec_from_file_location("detach_" + label, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    k = mod._kernel
    for dt in ("fp64", "fp32"):
        sig = aot_signature(k.arg_names, dt)
        consts = dict(V=mod.Model.VARIANTS["tangent"], DTYPE=tl.float64 if dt == "fp64" else tl.float32,
                      EPS=2.2e-16 if dt == "fp64" else 1.2e-07, BLOCK=128, P_SHARED=False)
        # (parameters per point: every access is a point's own; a shared row is one load per program,
        # whose layout the coalescing pass may choose differently)
        c = triton.compile(ASTSource(fn=k, signature=sig, constexprs=consts, attrs=aot_attrs(k.arg_names, sig)),
                           target=GPUTarget("cuda", 90, 32))
        ops = collections.Counter(re.findall(r"\b((?:ld|st)\.global[\w.]*)", c.asm["ptx"]))
        out[label + "-" + dt] = {"ops": dict(ops), "shared": c.metadata.shared}
print(json.dumps(out))
'''


def test_detached_memory_operations_compile_to_the_same_accesses(tmp_path, monkeypatch):
    """A large coupled system's kernel routes every load and store through a one-trip loop (_Rows,
    detach: the GPU compile of chaboche2_coupled's float64 tangent kernel went from 146 s to 17 s).
    For sm_90 it must make the same global loads and stores (kind and width) as the straight form,
    so no access loses its vectorisation or alignment."""
    from modelc.backends import triton_backend
    from modelc.driver import compile_model, load_spec
    from modelc.options import CompileOptions

    spec = load_spec(__import__("pathlib").Path(__file__).resolve().parents[3] / "spec" / "library.yaml")

    def kernel_of(name: str, label: str) -> tuple[str, str]:
        path = tmp_path / f"{label}.py"
        path.write_text(compile_model(spec, name, CompileOptions()).source)
        text = path.read_text()
        return str(path), text[text.index("    def _kernel("):text.index("C_SOURCE = ")]

    paths = {}
    # j2_perfect_coupled (7 unknowns) is not detached by default (triton_backend.DETACH_MIN_UNKNOWNS),
    # and is compiled both ways here
    paths["straight"], kernel = kernel_of("j2_perfect_coupled", "straight")
    assert "one trip" not in kernel
    monkeypatch.setattr(triton_backend, "_detach", lambda program: True)
    paths["detached"], kernel = kernel_of("j2_perfect_coupled", "detached")
    assert "one trip" in kernel
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", DETACH_CHILD, json.dumps(paths)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for dt in ("fp64", "fp32"):
        detached, straight = got["detached-" + dt], got["straight-" + dt]
        assert detached["ops"] == straight["ops"], (dt, got)
        assert detached["ops"], got
        assert detached["shared"] <= straight["shared"], (dt, got)
