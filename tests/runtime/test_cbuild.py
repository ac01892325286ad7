"""runtime/cbuild.py: building, keying and loading the C backend's libraries (the shared kernel header:
test_cheader.py), the settings it reads from the environment, and the streaming-store decision of ``pack_args``. (The
generated code itself is tested in tests/compiler/backends/test_c_backend.py and test_c_simd.py.)"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import sympy as sp
import torch

from modelc import ir
from modelc.backends.c_backend import c_source
from modelc.runtime import cbuild, cheader
from modelc.runtime.types import Scalar
from rt_helpers import fn_program, needs_cc



def _small_source(tag: str) -> str:
    x0, x1 = ir.Variable("forces/x0", Scalar), ir.Variable("forces/x1", Scalar)
    a, b = x0.symbols[0], x1.symbols[0]
    out = ir.Variable("state/y0", Scalar)
    return c_source(ir.Program(f"small_{tag}", (x0, x1), (), (out,), (), {out.name: (a * b + sp.exp(a),)}))


def test_baked_flags_are_exact_and_checked():
    """Baked values reach the C compiler as hexadecimal literals (exact), one flag per column; a
    non-finite baked value is refused, and nothing baked adds no flag."""
    from modelc.runtime.errors import ModelcError

    flags = cbuild.baked_flags((None, 0.1, None, -3.0))
    assert flags == ["-DMC_BAKED_FLAGS={0,1,0,1}", f"-DMC_BAKED_VALUES={{0,{(0.1).hex()},0,{(-3.0).hex()}}}"]
    assert cbuild.baked_flags((None, None)) == [] and cbuild.baked_flags(()) == []
    with pytest.raises(ModelcError, match="finite"):
        cbuild.baked_flags((math.inf,))


def test_lanes_setting_is_checked(monkeypatch):
    monkeypatch.setenv("MODELC_C_LANES", "0")
    with pytest.raises(cbuild.CBuildError, match="MODELC_C_LANES"):
        cbuild.default_lanes()
    monkeypatch.setenv("MODELC_C_LANES", "4")
    assert cbuild.default_lanes() == 4


def test_cache_key_names_the_cpu_and_lanes(tmp_path):
    """Libraries built with -march=native are keyed on what it means here; lanes change the file."""
    cc = cbuild.compiler()
    if "-march=native" in cc.flags:
        assert cc.target
    src = c_source(fn_program("keyed", lambda a, b: [a + b]))
    p8, f8 = cbuild.library_path(src, "keyed", torch.float64, tmp_path, lanes=8)
    p1, f1 = cbuild.library_path(src, "keyed", torch.float64, tmp_path, lanes=1)
    assert p8 != p1 and "-DMC_W=1" in f1 and "-DMC_W=8" in f8


@needs_cc
def test_second_build_is_a_load(tmp_path, monkeypatch):
    src = _small_source("cache")
    lib = cbuild.load_library(src, "small", torch.float64, cache_dir=tmp_path)
    files = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert [f for f in files if f.endswith(".so")] == [lib.path.name] and lib.path.with_suffix(".c").exists()
    assert not [f for f in files if f.startswith(".")]  # no temporary files left
    cbuild._LOADED.clear()

    def no_build(*a, **k):
        raise AssertionError("rebuilt a cached library")

    monkeypatch.setattr(cbuild, "build", no_build)
    lib2 = cbuild.load_library(src, "small", torch.float64, cache_dir=tmp_path)
    X = torch.tensor([[0.5, 2.0]], dtype=torch.float64)
    Y = torch.empty(1, 1, dtype=torch.float64)
    lib2([X[:, :1], X[:, 1:]], torch.zeros(1, 1, dtype=torch.float64), Y)
    assert float(Y) == pytest.approx(1.0 + math.exp(0.5), rel=1e-15)
    # a different dtype is another library (compiled with -DMC_FLOAT32)
    monkeypatch.undo()
    lib32 = cbuild.load_library(src, "small", torch.float32, cache_dir=tmp_path)
    assert lib32.path != lib2.path and lib32.path.name.endswith("-f32-p0.so")


@needs_cc
def test_concurrent_builds(tmp_path):
    src = _small_source("concurrent")
    (tmp_path / "src.c").write_text(src)
    script = textwrap.dedent(f"""
        import sys, torch
        from modelc.runtime import cbuild
        src = open({str(tmp_path / 'src.c')!r}).read()
        lib = cbuild.load_library(src, "conc", torch.float64, cache_dir={str(tmp_path / 'cache')!r})
        X = torch.tensor([[1.0, 3.0]], dtype=torch.float64); Y = torch.empty(1, 1, dtype=torch.float64)
        lib([X[:, :1], X[:, 1:]], torch.zeros(1, 1, dtype=torch.float64), Y)
        print(float(Y))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert float(out.strip()) == pytest.approx(3.0 + math.e, rel=1e-15)
    files = sorted(p.name for p in (tmp_path / "cache" / "c").iterdir())
    assert len([f for f in files if f.endswith(".so")]) == 1
    assert not [f for f in files if f.startswith(".")]


@needs_cc
def test_non_contiguous_and_wrong_dtype_are_rejected(tmp_path):
    from modelc.errors import ModelcError

    src = _small_source("checks")
    lib = cbuild.load_library(src, "small", torch.float64, cache_dir=tmp_path)
    P, Y = torch.zeros(1, 1, dtype=torch.float64), torch.empty(4, 1, dtype=torch.float64)
    x = torch.zeros(4, 1, dtype=torch.float64)
    with pytest.raises(ModelcError, match="contiguous"):
        lib([x, x], P, torch.empty(4, 2, dtype=torch.float64)[:, ::2])
    with pytest.raises(ModelcError, match="4 rows"):
        lib([x, torch.zeros(3, 1, dtype=torch.float64)], P, Y)
    with pytest.raises(ModelcError, match="float64"):
        lib([x, torch.zeros(4, 1)], P, Y)
    with pytest.raises(ModelcError, match="no tangent entry point"):
        lib([x, x], P, Y, torch.empty(4, 1, 2, dtype=torch.float64), variant="tangent")


def test_streaming_counts_the_bytes_read_and_written(monkeypatch):
    """``pack_args`` streams when inputs, parameters, outputs and Jacobian together exceed the
    threshold (outputs alone did before: a call repeated on arrays that no longer fit in cache paid
    a read for ownership per output line); a broadcast input or parameter row (row stride 0) counts
    once, a broadcast Jacobian not at all."""
    B, f64 = 1000, torch.float64
    X = [torch.zeros(B, 6, dtype=f64), torch.zeros(1, 1, dtype=f64).expand(B, 1)]  # 6 per point + 1
    P = torch.zeros(1, 3, dtype=f64)
    Y, J = torch.zeros(B, 4, dtype=f64), torch.zeros(B, 2, 2, dtype=f64)
    moved = 8 * (B * 6 + 1 + 3 + B * 4 + B * 4)
    for threshold, flag in ((moved - 1, 1), (moved, 0)):
        monkeypatch.setattr(cbuild, "stream_bytes", lambda t=threshold: t)
        assert cbuild.pack_args(X, P, Y, J, None)[-1] == flag
    monkeypatch.setattr(cbuild, "stream_bytes", lambda: 8 * (B * 6 + 1 + 3 + B * 4) - 1)
    assert cbuild.pack_args(X, P, Y, J[:1].expand(B, 2, 2), None)[-1] == 1
    assert cbuild.pack_args(X, P, Y[:, :2], J[:1].expand(B, 2, 2), None)[-1] == 0


def test_stream_threshold_setting_is_checked(monkeypatch):
    cbuild.stream_bytes.cache_clear()
    try:
        monkeypatch.setenv("MODELC_C_STREAM_BYTES", "lots")
        with pytest.raises(cbuild.CBuildError, match="MODELC_C_STREAM_BYTES"):
            cbuild.stream_bytes()
        monkeypatch.setenv("MODELC_C_STREAM_BYTES", "4096")
        assert cbuild.stream_bytes() == 4096
    finally:
        cbuild.stream_bytes.cache_clear()


@pytest.mark.parametrize("reported, threshold", [(480 << 20, 4 << 20), (32 << 20, 4 << 20), (8 << 20, 4 << 20),
                                                 (4 << 20, 2 << 20), (0, 4 << 20)])
def test_stream_threshold_is_half_the_cache_a_core_can_keep(monkeypatch, reported, threshold):
    """Half the largest cache Linux reports, but of no more than 8 MiB: a virtual machine reports the
    host's whole L3 (480 MiB on an Intel Xeon VM, where streaming stores won from ~4 MiB moved and
    by 2x at 56 MiB, a size the reported cache would have kept on regular stores); 8 MiB where the
    system reports none (0)."""
    monkeypatch.delenv("MODELC_C_STREAM_BYTES", raising=False)
    monkeypatch.setattr(cbuild, "reported_cache_bytes", lambda: reported)
    cbuild.stream_bytes.cache_clear()
    try:
        assert cbuild.stream_bytes() == threshold
    finally:
        cbuild.stream_bytes.cache_clear()


@needs_cc
def test_a_source_in_parts_builds_each_part_on_first_use_with_the_same_bits(tmp_path):
    """A model's source declares two parts (value and tangent: what a step needs; jacobian and
    total): loading builds part 0 alone, the first jacobian or total call builds part 1, and every
    entry point gives the bits of the whole source built as one library. perzyna_iso (a Newton
    solve), 700 random points."""
    from modelc.generated import perzyna_iso

    src = perzyna_iso.C_SOURCE
    assert cbuild.source_parts(src) == {"value": 0, "tangent": 0, "jacobian": 1, "total": 1}
    assert cbuild.source_parts(_small_source("parts")) == {"value": 0, "jacobian": 1}  # no parameters: no total
    lib = cbuild.load_library(src, "parts", torch.float64, cache_dir=tmp_path)
    assert lib.variants == ("value", "jacobian", "tangent", "total")
    built = sorted(p.name for p in (tmp_path / "c").glob("*.so"))
    assert len(built) == 1 and built[0].endswith("-f64-p0.so")
    path, flags = cbuild.library_path(src, "whole", torch.float64, tmp_path)  # no part: every entry point
    cbuild.build(cheader.standalone(src), path, flags)
    whole = cbuild.CLibrary(path, torch.float64, cbuild.default_lanes(), widths=cbuild.source_widths(src))
    assert whole.variants == lib.variants

    m = perzyna_iso.Model(backend="torch")
    inputs = _random_inputs(m, 700, torch.float64, 1e-3, 11)
    P = m._param_tensor({}, torch.Size([1]))[0]
    for variant in ("value", "tangent", "jacobian", "total"):
        got, want = (_call(library, m, inputs, P, variant, torch.float64) for library in (lib, whole))
        assert all(torch.equal(a, b) for a, b in zip(got, want)), variant
        assert bool(got[1].gt(0).any())  # some points iterated (the check is not on trivial points)
        if variant == "tangent":  # part 1 not built yet
            assert len(list((tmp_path / "c").glob("parts-*.so"))) == 1
    assert sorted(p.name[-6:] for p in (tmp_path / "c").glob("parts-*.so")) == ["-p0.so", "-p1.so"]


def _random_inputs(m, B: int, dtype, scale: float, seed: int) -> list[torch.Tensor]:
    """One (B, size) tensor per input variable in the library's argument order (the input axis',
    which need not be Model.INPUTS'), random strains and states, time 0.5 after 0."""
    g = torch.Generator().manual_seed(seed)
    names = list(m.input_axis.variable_names)
    inputs = [(scale * torch.randn(B, m.input_axis.storage_size(n), generator=g, dtype=torch.float64)).to(dtype)
              for n in names]
    inputs[names.index("forces/t")] = torch.full((B, 1), 0.5, dtype=dtype)
    inputs[names.index("old_forces/t")] = torch.zeros(B, 1, dtype=dtype)
    return inputs


def _call(library, m, inputs, P, variant: str, dtype) -> list[torch.Tensor]:
    """[Y, iterations, residual norm] (+ [J]) of one direct library call into fresh tensors."""
    B = inputs[0].shape[0]
    Y = torch.empty(B, m.output_axis.size, dtype=dtype)
    J = None if variant == "value" else torch.empty(B, *m._jacobian_shape(variant), dtype=dtype)
    st = (torch.empty(B, dtype=torch.bool), torch.empty(B, dtype=torch.int32), torch.empty(B, dtype=dtype))
    library(inputs, P, Y, J, st, variant=variant)
    return [Y, st[1], st[2]] + ([J] if J is not None else [])


def test_newton_flags_go_to_newton_sources_only(tmp_path):
    """A source with a Newton solve is built with the compiler's NEWTON_FLAGS (when it takes them),
    a closed form without; a source that asks for wide vectors gets WIDE_FLAGS (MC_WIDE 1: in
    float64; 2, a system: in both dtypes); the flags are part of the cache key through the flag
    list."""
    from modelc.generated import j2_linear_iso, j2_voce_af, perzyna_iso, perzyna_iso_coupled

    cc = cbuild.compiler()
    assert cc.newton_flags in ((), cbuild.NEWTON_FLAGS)
    assert cc.wide_flags in ((), cbuild.WIDE_FLAGS)

    def flags(mod, dtype):
        return cbuild.library_path(mod.C_SOURCE, mod.__name__.rsplit(".")[-1], dtype, tmp_path)[1]

    assert "#define MC_NEWTON 1" in perzyna_iso.C_SOURCE and "#define MC_NEWTON 0" in j2_linear_iso.C_SOURCE
    assert "#define MC_WIDE 1" in j2_voce_af.C_SOURCE and "#define MC_WIDE 0" in perzyna_iso.C_SOURCE
    assert "#define MC_WIDE 2" in perzyna_iso_coupled.C_SOURCE
    for mod, dtype, newton, wide in ((perzyna_iso, torch.float64, True, False),
                                     (j2_voce_af, torch.float64, True, True),
                                     (j2_voce_af, torch.float32, True, False),  # float32: systems only
                                     (perzyna_iso_coupled, torch.float32, True, True),
                                     (perzyna_iso_coupled, torch.float64, True, True),
                                     (j2_linear_iso, torch.float64, False, False)):
        got = flags(mod, dtype)
        assert all(f in got for f in cc.newton_flags) if newton else not any(f in got for f in cbuild.NEWTON_FLAGS)
        assert all(f in got for f in cc.wide_flags) if wide else not any(f in got for f in cbuild.WIDE_FLAGS), \
            (mod.__name__, dtype)


@needs_cc
def test_wide_flags_follow_the_instruction_set(tmp_path):
    """The 512-bit preference is taken where the build's flags (``-march=native`` and
    ``$MODELC_CFLAGS``, e.g. ``-mno-avx512f`` in ``MODELC_TEST_CPU=avx2``) define ``__AVX512F__``
    and the compiler takes it, both asked of the compiler here on their own, and only there."""
    cc = cbuild.compiler()
    r = subprocess.run([cc.path, *cc.flags, "-dM", "-E", "-x", "c", os.devnull], capture_output=True,
                       text=True, timeout=60)
    avx512 = r.returncode == 0 and "#define __AVX512F__ 1" in r.stdout
    src = tmp_path / "t.c"
    src.write_text("double f(double x) { return 2 * x; }\n")
    takes = subprocess.run([cc.path, *cc.flags, "-Werror", *cbuild.WIDE_FLAGS, str(src), "-o", str(tmp_path / "t.so")],
                           capture_output=True, timeout=120).returncode == 0
    chosen = "-mprefer-vector-width" in os.environ.get("MODELC_CFLAGS", "")
    assert cc.wide_flags == (cbuild.WIDE_FLAGS if avx512 and takes and not chosen else ())
    # a vector width the user names in $MODELC_CFLAGS is theirs: no wide builds then
    mine = cbuild._compiler_info(cc.path, (os.environ.get("MODELC_CFLAGS", "") + " -mprefer-vector-width=256").strip())
    assert mine.wide_flags == () and mine.flags[-1] == "-mprefer-vector-width=256"


@needs_cc
@pytest.mark.parametrize("name, dtype", [("j2_voce_af", torch.float64), ("j2_voce_af", torch.float32),
                                         ("perzyna_iso_coupled", torch.float32)])
def test_newton_flags_change_no_number(tmp_path, name, dtype):
    """The scheduler flags reorder instructions, the wide-vector flags change the vector width (and
    a float32 system's points per block) only: a Newton model (j2_voce_af: a scalar solve with an
    exp; perzyna_iso_coupled: a system, in float32 the only dtype whose block size the flags change)
    built with and without them gives the same bits for every entry point, on fresh random points
    of which most iterate."""
    import importlib

    mod = importlib.import_module(f"modelc.generated.{name}")
    cc = cbuild.compiler()
    src = cheader.standalone(mod.C_SOURCE)
    flags = cbuild.library_path(src, "probe", dtype, tmp_path)[1]
    extra = tuple(f for f in cc.newton_flags + cc.wide_flags if f in flags)
    if not extra:
        pytest.skip(f"{cc.version}: the compiler does not take {' '.join(cbuild.NEWTON_FLAGS)}, or no AVX-512")
    libs = []
    for tag, drop in (("with", ()), ("without", extra)):
        path, flags = cbuild.library_path(src, f"sched-{tag}", dtype, tmp_path)
        assert all(f in flags for f in extra)
        cbuild.build(src, path, [f for f in flags if f not in drop])
        libs.append(cbuild.CLibrary(path, dtype, cbuild.default_lanes(), widths=cbuild.source_widths(src)))
    if any(f in extra for f in cc.wide_flags):  # the flags change the machine code, not the numbers
        assert libs[0].path.read_bytes() != libs[1].path.read_bytes()
    m = mod.Model(backend="torch", dtype=dtype)
    inputs = _random_inputs(m, 1000, dtype, 2e-3, int(torch.randint(0, 2**31, ()).item()))
    P = m._param_tensor({}, torch.Size([1]))[0]
    for variant in ("value", "tangent", "jacobian", "total"):
        got = [_call(library, m, inputs, P, variant, dtype) for library in libs]
        for a, b in zip(*got):  # bit for bit, NaN (a point that failed) included
            assert torch.equal(a.view(torch.int8) if a.is_floating_point() else a,
                               b.view(torch.int8) if b.is_floating_point() else b), variant
        assert float(got[0][1].gt(1).float().mean()) > 0.5  # most points iterated more than once
        assert float(got[0][0].isfinite().all(1).float().mean()) > 0.9  # and converged


def test_source_widths_match_the_layout():
    """The widths a source declares (MC_WIDTHS, NP, NY) are the model's own: each input's
    components in the library's order, the parameter columns, the outputs, each derivative's
    entries per point (checked against the model's axes, not against the same source)."""
    from modelc.generated import j2_voce_af, perzyna_iso

    for mod in (j2_voce_af, perzyna_iso):
        w = cbuild.source_widths(mod.C_SOURCE)
        m = mod.Model(backend="torch")
        assert w.inputs == tuple(m.input_axis.storage_size(n) for n in m.input_axis.variable_names)
        assert w.ny == m.output_axis.size and w.np == len(mod.Model.PARAMETERS)
        nx = sum(w.inputs)
        assert w.derivatives == {"tangent": 36, "jacobian": w.ny * nx, "total": w.ny * (nx + w.np)}
        assert tuple(m._jacobian_shape("jacobian")) == (w.ny, nx)
    assert cbuild.source_widths("/* a hand-written source */") is None


@needs_cc
def test_a_row_of_the_wrong_width_is_refused_before_the_call(tmp_path):
    """A call whose input, parameter, output or Jacobian rows are not the library's width gets a
    clear error and nothing is read or written (before, an input passed in another variable's
    order was read past its end: j2_voce_af's Model.INPUTS order is not its library's)."""
    from modelc.generated import j2_voce_af
    from modelc.runtime.errors import ModelcError

    lib = cbuild.load_library(j2_voce_af.C_SOURCE, "widths", torch.float64, cache_dir=tmp_path)
    m = j2_voce_af.Model(backend="torch")
    B = 5

    def rows(names):
        return [torch.zeros(B, m.input_axis.storage_size(n), dtype=torch.float64) for n in names]

    P = m._param_tensor({}, torch.Size([1]))[0]
    st = (torch.zeros(B, dtype=torch.bool), torch.zeros(B, dtype=torch.int32), torch.zeros(B, dtype=torch.float64))
    Y = torch.full((B, m.output_axis.size), 7.0, dtype=torch.float64)
    wrong = [v.name for v in j2_voce_af.Model.INPUTS]
    assert wrong != list(m.input_axis.variable_names)
    with pytest.raises(ModelcError, match=r"input 2 has 1 values per point, the library's row holds 6"):
        lib(rows(wrong), P, Y, None, st, variant="value")
    assert bool((Y == 7.0).all())  # nothing written
    good = rows(m.input_axis.variable_names)
    with pytest.raises(ModelcError, match=r"2 input tensors, the library reads 6"):
        lib(good[:2], P, Y, None, st, variant="value")
    with pytest.raises(ModelcError, match=r"Y has 19 values per point, the library's row holds 20"):
        lib(good, P, Y[:, :19].contiguous(), None, st, variant="value")
    with pytest.raises(ModelcError, match=r"P has 6 values per point, the library's row holds 7"):
        lib(good, P[:, :6].contiguous(), Y, None, st, variant="value")
    with pytest.raises(ModelcError, match=r"J has 35 values per point, the library's row holds 36"):
        lib(good, P, Y, torch.zeros(B, 35, dtype=torch.float64), st, variant="tangent")
    assert bool((Y == 7.0).all())
    good[list(m.input_axis.variable_names).index("forces/t")] = torch.full((B, 1), 0.5, dtype=torch.float64)
    lib(good, P, Y, torch.zeros(B, 6, 6, dtype=torch.float64), st, variant="tangent")  # the right widths run
    assert bool(st[0].all()) and not bool((Y == 7.0).any())
