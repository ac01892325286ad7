"""Verified cache artifacts (runtime/cachefiles.py): the digest file's name and content, ``verified``
on intact, edited, truncated, replaced and digest-less artifacts (and on things that are not files),
and ``usable_folder`` on writable folders and on unusable ones (a temporary fallback, warned once per
folder). The whole-pipeline cache tests are in tests/compiler/backends/test_cache_integrity.py.

Oracle: SHA-256 digests computed here with hashlib from the bytes written."""
from __future__ import annotations

import hashlib
import os
import threading
import warnings

import pytest

from modelc.runtime.cachefiles import (DIGEST_SUFFIX, digest_path, file_digest, usable_folder, verified,
                                       write_digest)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_digest_path_appends_the_suffix_to_the_full_name(tmp_path):
    assert DIGEST_SUFFIX == ".sha256"
    assert digest_path(tmp_path / "lib.cpython.so") == tmp_path / "lib.cpython.so.sha256"
    assert digest_path(tmp_path / "m.py") == tmp_path / "m.py.sha256"   # not m.sha256


def test_file_digest_streams_over_chunk_boundaries(tmp_path):
    for size in (0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 17):
        data = bytes((i * 7 + size) % 251 for i in range(size)) if size < 4096 else os.urandom(size)
        p = tmp_path / f"f{size}"
        p.write_bytes(data)
        assert file_digest(p) == _sha(data), size


def test_write_digest_records_the_hash_as_one_ascii_line(tmp_path):
    lib = tmp_path / "lib.so"
    data = b"\x7fELF" + bytes(range(256)) * 10
    lib.write_bytes(data)
    write_digest(lib)
    assert digest_path(lib).read_bytes() == (_sha(data) + "\n").encode("ascii")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib.so", "lib.so.sha256"]  # no temporary
    assert verified(lib)


def test_verified_rejects_edited_truncated_replaced_and_unrecorded_artifacts(tmp_path):
    mod = tmp_path / "m.py"
    text = "A = 1\n" * 1000
    mod.write_text(text)
    write_digest(mod)
    assert verified(mod)
    mod.write_text(text[:-1] + "2")                     # edited, same length
    assert not verified(mod)
    mod.write_text(text[:100])                          # truncated
    assert not verified(mod)
    mod.write_text(text)                                # the recorded bytes again: trusted again
    assert verified(mod)
    digest_path(mod).write_text(_sha(b"something else") + "\n")   # a digest of other bytes
    assert not verified(mod)
    digest_path(mod).write_text("  " + _sha(text.encode()) + " \n\n")  # surrounding whitespace is fine
    assert verified(mod)
    digest_path(mod).write_text(_sha(text.encode()).upper() + "\n")   # hex is compared exactly
    assert not verified(mod)
    digest_path(mod).write_bytes(b"\xff\xfe not ascii")             # undecodable: False, no exception
    assert not verified(mod)
    digest_path(mod).unlink()                                      # no digest at all
    assert not verified(mod)


def test_verified_is_false_for_what_is_not_a_regular_file(tmp_path):
    assert not verified(tmp_path / "missing.so")
    d = tmp_path / "dir.so"
    d.mkdir()
    digest_path(d).write_text(_sha(b"") + "\n")
    assert not verified(d)                               # a folder, even with a digest next to it
    target = tmp_path / "real.so"
    target.write_bytes(b"abc")
    write_digest(target)
    link = tmp_path / "link.so"
    link.symlink_to(target)
    digest_path(link).write_text(_sha(b"abc") + "\n")
    assert verified(link)                                # a symlink to a verified file is followed
    target.unlink()
    assert not verified(link)                            # dangling


def test_concurrent_digest_writers_leave_one_whole_digest(tmp_path):
    lib = tmp_path / "lib.so"
    data = os.urandom(1 << 18)
    lib.write_bytes(data)
    errors = []

    def work():
        try:
            for _ in range(20):
                write_digest(lib)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert digest_path(lib).read_text("ascii") == _sha(data) + "\n" and verified(lib)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib.so", "lib.so.sha256"]


def test_usable_folder_creates_and_returns_a_writable_folder(tmp_path):
    folder = tmp_path / "a" / "b" / "cache"
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # no warning for a good folder
        assert usable_folder(folder) == folder
    assert folder.is_dir() and list(folder.iterdir()) == []   # the write probe is removed
    (folder / "keep.py").write_text("x")
    assert usable_folder(folder) == folder and [p.name for p in folder.iterdir()] == ["keep.py"]


def test_unusable_folder_falls_back_to_one_temporary_folder_warned_once_per_folder(tmp_path):
    file = tmp_path / "a_file"
    file.write_text("not a folder")
    with pytest.warns(RuntimeWarning) as rec:
        first = usable_folder(file)                      # the path itself is a regular file
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert msg.startswith(f"modelc: cache folder {file} is not usable (")
    assert msg.endswith(f"using the temporary cache {first} for this process")
    assert first.is_dir() and first != file and os.access(first, os.W_OK)
    assert file.read_text() == "not a folder"            # untouched
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # the same folder again: no second warning
        assert usable_folder(file) == first
    other = tmp_path / "other_file"
    other.write_text("x")
    with pytest.warns(RuntimeWarning, match="other_file"):
        assert usable_folder(other) == first             # another folder: warned, same fallback


def test_the_digest_is_readable_like_its_artifact(tmp_path):
    """A digest file is an ordinary file (0666 less the umask), so the other users of a shared cache
    can verify the artifact instead of rebuilding it (mkstemp's 0600 made it private)."""
    umask = os.umask(0o022)
    try:
        art = tmp_path / "lib.so"
        art.write_bytes(b"\x7fELF...")
        write_digest(art)
    finally:
        os.umask(umask)
    assert (digest_path(art).stat().st_mode & 0o777) == 0o644
    assert verified(art)
