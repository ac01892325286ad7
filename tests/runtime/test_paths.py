"""Path helpers of the runtime (runtime/paths.py): ``sanitize`` (identifiers from variable names),
``cache_folder`` (explicit, ``$MODELC_CACHE_DIR``, home), ``write_atomic`` (whole file or nothing,
ordinary permissions, safe under concurrent writers) and ``import_file`` (import a module from its
file, reuse it, never leave a half-imported module registered).

Oracles: identifiers written out by hand, file bytes read back, a reader that watches the file while
writers race, and the permission bits computed from the umask by hand."""
from __future__ import annotations

import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from modelc.runtime.paths import RESERVED, cache_folder, import_file, sanitize, write_atomic


@pytest.mark.parametrize("name,ident", [
    ("state/S[3]", "state_S_3"),             # every run of other characters -> one underscore
    ("old_state/internal/ep", "old_state_internal_ep"),
    ("$sigma_y", "p_sigma_y"),               # a parameter
    ("$", "p"),
    ("d(a)/d(b)", "d_a_d_b"),                # leading/trailing underscores stripped
    ("__x__", "x"),
    ("", "v"), ("///", "v"), ("σ", "v"),      # nothing left: a placeholder
    ("3x", "v_3x"), ("a b", "a_b"),
    ("class", "v_class"), ("lambda", "v_lambda"),        # Python keywords
    ("mask", "v_mask"), ("BLOCK", "v_BLOCK"),            # names the kernels use themselves
    ("IN0", "v_IN0"), ("IN12", "v_IN12"), ("in7_stride", "v_in7_stride"),  # the reserved pattern
    ("IN", "IN"), ("IN0x", "IN0x"), ("in_stride", "in_stride"),          # ... matched whole only
])
def test_sanitize(name, ident):
    assert sanitize(name) == ident
    assert ident.isidentifier()


def test_every_reserved_name_is_escaped_and_stays_an_identifier():
    for word in RESERVED:
        out = sanitize(word)
        assert out == "v_" + word and out.isidentifier() and out not in RESERVED


def test_cache_folder_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("MODELC_CACHE_DIR", str(tmp_path / "env"))
    assert cache_folder(tmp_path / "explicit") == tmp_path / "explicit"    # explicit wins
    assert cache_folder(str(tmp_path / "s")) == tmp_path / "s" and isinstance(cache_folder("x"), Path)
    assert cache_folder() == tmp_path / "env"
    monkeypatch.setenv("MODELC_CACHE_DIR", "")                             # empty: as if unset
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_folder() == tmp_path / "home" / ".cache" / "modelc"
    assert not (tmp_path / "home").exists()                                # it only names the folder


def test_write_atomic_writes_exact_text_with_ordinary_permissions(tmp_path):
    p = tmp_path / "a" / "b" / "m.py"          # parents are created
    text = "x = 'σ'\r\ny = 1\n"                 # UTF-8, and no newline translation
    old = os.umask(0o027)
    try:
        write_atomic(str(p), text)
    finally:
        os.umask(old)
    assert p.read_bytes() == text.encode("utf-8")
    assert stat.S_IMODE(p.stat().st_mode) == 0o640  # 0o666 & ~0o027, not mkstemp's 0o600
    write_atomic(p, "z = 2\n")                       # replaces a shorter/longer file whole
    assert p.read_text() == "z = 2\n"
    assert sorted(q.name for q in p.parent.iterdir()) == ["m.py"]  # no temporary left


def test_write_atomic_never_touches_the_umask(tmp_path, monkeypatch):
    """The permission bits come from the system applying the umask to a file created 0666, so a
    write never sets the process umask (the old fallback set it to 0 for a moment where /proc is
    absent, racing other threads); an explicit ``mode`` is applied as given."""
    from modelc.runtime.paths import write_atomic_bytes

    old = os.umask(0o022)
    try:
        def no_umask(*_):
            raise AssertionError("os.umask called")

        monkeypatch.setattr(os, "umask", no_umask)
        write_atomic_bytes(tmp_path / "a.bin", b"\x00\x01")
        write_atomic_bytes(tmp_path / "b.bin", b"x", mode=0o600)
        monkeypatch.undo()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.bin").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.bin").stat().st_mode) == 0o600
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["a.bin", "b.bin"]


def test_write_atomic_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "m.py"
    write_atomic(p, "old = 1\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(p, "new = '\ud800'\n")  # a lone surrogate cannot be encoded: fails mid-write
    assert p.read_text() == "old = 1\n"
    assert [q.name for q in tmp_path.iterdir()] == ["m.py"]


def test_write_atomic_concurrent_writers_never_expose_a_partial_file(tmp_path):
    p = tmp_path / "shared.py"
    texts = [f"# writer {i}\n" + chr(ord("a") + i) * 300_000 + "\n" for i in range(4)]
    write_atomic(p, texts[0])
    stop = threading.Event()
    seen, errors = set(), []

    def reader():
        while not stop.is_set():
            data = p.read_text()
            if data not in texts:
                errors.append(len(data))
            seen.add(data[:10])

    def writer(i):
        for _ in range(15):
            write_atomic(p, texts[i])

    r = threading.Thread(target=reader)
    r.start()
    ws = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    stop.set()
    r.join()
    assert not errors, f"partial reads of sizes {errors[:5]}"
    assert p.read_text() in texts
    assert [q.name for q in tmp_path.iterdir()] == ["shared.py"]


def test_import_file_registers_reuses_and_reimports(tmp_path, monkeypatch):
    name = "_modelc_test_paths_mod"
    monkeypatch.delitem(sys.modules, name, raising=False)
    a = tmp_path / "a.py"
    a.write_text("VALUE = 1\nCOUNT = [0]\nCOUNT[0] += 1\n")
    mod = import_file(a, name)
    assert mod.VALUE == 1 and mod.__file__ == str(a) and sys.modules[name] is mod
    assert import_file(a, name) is mod and mod.COUNT == [1]      # same file: not executed again
    b = tmp_path / "b.py"
    b.write_text("VALUE = 2\n")
    other = import_file(b, name)                                  # same name, another file
    assert other is not mod and other.VALUE == 2 and sys.modules[name] is other
    monkeypatch.delitem(sys.modules, name)


def test_import_file_failure_leaves_nothing_registered(tmp_path, monkeypatch):
    name = "_modelc_test_paths_broken"
    monkeypatch.delitem(sys.modules, name, raising=False)
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nassert __name__ in sys.modules\nraise ImportError('broken on purpose')\n")
    with pytest.raises(ImportError, match="broken on purpose"):
        import_file(bad, name)
    assert name not in sys.modules                 # registered during exec, removed on failure
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def f(:\n")
    with pytest.raises(SyntaxError):
        import_file(syntax, name)
    assert name not in sys.modules
    bad.write_text("VALUE = 3\n")                  # fixed: the next import runs it afresh
    assert import_file(bad, name).VALUE == 3
    monkeypatch.delitem(sys.modules, name)
