"""Output paths (runtime/outputs.py): ``check_output_file`` and ``check_output_folder`` accept what can
be written and reject, before any work, what certainly cannot (a folder for a file, a file for a
folder, a parent that is a file, an unwritable folder, a NUL or blank name), with an ``InputError``
naming the argument and the path; ``write_atomic_bytes`` writes whole files or nothing.

Oracles: bytes read back, the folder listed afterwards (no temporaries), and messages written out
by hand. Unwritable folders are simulated through ``os.access`` (the tests may run as root, for whom
permission bits do not deny)."""
from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from modelc.runtime.errors import InputError
from modelc.runtime.outputs import check_output_file, check_output_folder, write_atomic_bytes


def _deny_writes_to(monkeypatch, folder: Path):
    real = os.access

    def access(path, mode, *a, **k):
        if Path(path) == folder and mode & os.W_OK:
            return False
        return real(path, mode, *a, **k)

    monkeypatch.setattr(os, "access", access)


def test_check_output_file_accepts_new_existing_and_nested_files(tmp_path, monkeypatch):
    existing = tmp_path / "r.npz"
    existing.write_bytes(b"old")
    assert check_output_file(existing) == existing
    assert check_output_file(str(tmp_path / "new.png")) == tmp_path / "new.png"
    deep = tmp_path / "a" / "b" / "c.npz"          # missing parents: the nearest existing one is checked
    assert check_output_file(deep) == deep and not (tmp_path / "a").exists()   # nothing is created
    monkeypatch.chdir(tmp_path)
    assert check_output_file("bare.npz") == Path("bare.npz")   # a bare name: the working folder
    assert existing.read_bytes() == b"old"


def test_check_output_file_rejections_name_the_argument_and_path(tmp_path):
    parent = tmp_path / "f.txt"
    parent.write_text("x")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    cases = [
        (tmp_path, "--out", f"--out {tmp_path}: is a folder; give a file name"),
        (parent / "r.npz", "--out", f"--out {parent / 'r.npz'}: {parent} is not a folder, so "
                                    f"{parent / 'r.npz'} cannot be written"),
        (parent / "x" / "y" / "r.npz", "output", f"output {parent / 'x' / 'y' / 'r.npz'}: {parent} is not a "
                                                 f"folder, so {parent / 'x' / 'y' / 'r.npz'} cannot be written"),
        (fifo, "--plot", f"--plot {fifo}: exists and is not a regular file"),
        ("   ", "--plot", "--plot '   ': not a file name"),
        (str(tmp_path / "a\0b"), "output", f"output {str(tmp_path / 'a') + chr(0) + 'b'!r}: not a file name"),
    ]
    for path, what, message in cases:
        with pytest.raises(InputError) as info:
            check_output_file(path, what)
        assert str(info.value) == message


def test_check_output_file_suffixes(tmp_path):
    """``suffixes``: any case of one of them passes; another suffix, or none, is named with what to
    write instead; a folder is still reported as a folder first."""
    assert check_output_file(tmp_path / "r.NPZ", "--out", (".npz",)) == tmp_path / "r.NPZ"
    with pytest.raises(InputError, match=r"--plot .*r\.txt: expected a \.png or \.svg file name"):
        check_output_file(tmp_path / "r.txt", "--plot", (".png", ".svg"))
    with pytest.raises(InputError, match=r"--out .*results: name it R\.npz"):
        check_output_file(tmp_path / "results", "--out", (".npz",), "name it R.npz")
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        check_output_file(tmp_path / "d.npz", "--out", (".npz",))


def test_check_output_file_rejects_an_unwritable_folder(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    _deny_writes_to(monkeypatch, ro)
    with pytest.raises(InputError, match=f"^--out {ro / 'sub' / 'r.npz'}: the folder {ro} is not writable$"):
        check_output_file(ro / "sub" / "r.npz", "--out")
    assert check_output_file(tmp_path / "ok.npz", "--out") == tmp_path / "ok.npz"


def test_check_output_folder(tmp_path, monkeypatch):
    assert check_output_folder(tmp_path) == tmp_path
    assert check_output_folder(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()
    f = tmp_path / "f.npz"
    f.write_bytes(b"")
    for path, message in [
        (f, f"--out {f}: exists and is not a folder"),
        (f / "sub", f"--out {f / 'sub'}: {f} is not a folder, so {f / 'sub'} cannot be written"),
        ("\t", "--out '\\t': not a folder name"),
    ]:
        with pytest.raises(InputError) as info:
            check_output_folder(path, "--out")
        assert str(info.value) == message
    ro = tmp_path / "ro"
    ro.mkdir()
    _deny_writes_to(monkeypatch, ro)
    with pytest.raises(InputError, match=f"^output folder {ro}: the folder is not writable$"):
        check_output_folder(ro)
    with pytest.raises(InputError, match=f"^output folder {ro / 'x'}: the folder {ro} is not writable$"):
        check_output_folder(ro / "x")


def test_write_atomic_bytes_writes_whole_files_and_creates_parents(tmp_path):
    p = tmp_path / "a" / "b" / "r.npz"
    data = bytes(range(256)) * 4000
    assert write_atomic_bytes(str(p), data) == p
    assert p.read_bytes() == data
    assert write_atomic_bytes(p, b"short") == p and p.read_bytes() == b"short"   # replaced whole
    assert [q.name for q in p.parent.iterdir()] == ["r.npz"]


def test_write_atomic_bytes_failures_name_the_path_and_leave_nothing(tmp_path):
    target = tmp_path / "d"
    target.mkdir()
    (target / "inside").write_text("keep")
    with pytest.raises(InputError, match=rf"^--out {target}: cannot write it \(Is a directory\)$"):
        write_atomic_bytes(target, b"data", "--out")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["d"]          # the temporary is removed
    assert [q.name for q in target.iterdir()] == ["inside"]
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match=rf"^output {f / 'r.npz'}: cannot write it \(.+\)$"):
        write_atomic_bytes(f / "r.npz", b"data")
    assert f.read_text() == "x"


def _write_many(args):
    path, byte = args
    for _ in range(10):
        write_atomic_bytes(path, bytes([byte]) * 500_000)
    return byte


def test_write_atomic_bytes_from_concurrent_processes_leaves_one_whole_file(tmp_path):
    p = tmp_path / "shared.bin"
    write_atomic_bytes(p, bytes([9]) * 500_000)
    partial = []
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        job = pool.map_async(_write_many, [(str(p), b) for b in (1, 2, 3)])
        while not job.ready():  # a reader meanwhile sees one writer's whole file, never a mix
            seen = p.read_bytes()
            if len(seen) != 500_000 or len(set(seen)) != 1:
                partial.append(len(seen))
        done = job.get(timeout=60)
    assert sorted(done) == [1, 2, 3] and not partial, partial[:5]
    data = p.read_bytes()
    assert len(data) == 500_000 and len(set(data)) == 1 and data[0] in (1, 2, 3)
    assert [q.name for q in tmp_path.iterdir()] == ["shared.bin"]


def test_threads_writing_one_path_never_fail_or_mix(tmp_path):
    """Threads of one process writing the same file: each write is whole (the temporary file has a
    unique name; it used to be named by the process id, and threads removed each other's)."""
    import threading

    target = tmp_path / "out.bin"
    blobs = [bytes([k]) * 200_000 for k in range(6)]
    errors = []

    def writer(blob):
        for _ in range(20):
            try:
                write_atomic_bytes(target, blob)
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in blobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_bytes() in blobs
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]  # no temporary file left


def test_a_written_file_is_an_ordinary_file(tmp_path):
    """0666 less the umask, like open() would make it (not mkstemp's 0600)."""
    umask = os.umask(0o022)
    try:
        p = write_atomic_bytes(tmp_path / "a.bin", b"x")
    finally:
        os.umask(umask)
    assert (p.stat().st_mode & 0o777) == 0o644
