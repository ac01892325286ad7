"""modelc.export.render: C macro suffixes from variable names, user text made safe inside a C block
comment (checked by the C compiler), atomic ``write_files`` (folders created, exact bytes, overwrite,
no temporary left behind, also when a write fails), and templates that refuse undefined variables."""
from __future__ import annotations

import shutil
import subprocess

import jinja2
import pytest

from modelc.export.render import c_comment, macro, template, write_files


@pytest.mark.parametrize("name, expected", [
    ("state/S", "state_S"),
    ("old_state/internal/ep", "old_state_internal_ep"),
    ("state/internal/Ep", "state_internal_Ep"),      # case kept: Ep and ep differ
    ("forces/E[3]", "forces_E_3"),
    ("/a b-c.d/", "a_b_c_d"),                         # leading and trailing separators dropped
])
def test_macro_suffixes(name, expected):
    assert macro(name) == expected


@pytest.mark.parametrize("text, expected", [
    ("plain doc", "plain doc"),
    ("ends the comment */ here", "ends the comment * / here"),
    ("two\nlines", "two lines"),
    ("**/ and */*/", "** / and * /* /"),
])
def test_c_comment_text(text, expected):
    out = c_comment(text)
    assert out == expected and "*/" not in out and "\n" not in out


def test_c_comment_keeps_hostile_text_inside_the_comment(tmp_path):
    """A doc string that tries to close the comment and inject code compiles as a comment only."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "no C compiler: the exports need one"
    hostile = "units */ int injected = ; /* more\n#error escaped\n*/"
    src = tmp_path / "c.c"
    src.write_text(f"/* {c_comment(hostile)} */\nint ok = 1;\n")
    r = subprocess.run([cc, "-fsyntax-only", str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    src.write_text(f"/* {hostile} */\nint ok = 1;\n")  # the check itself can fail: raw text does not compile
    assert subprocess.run([cc, "-fsyntax-only", str(src)], capture_output=True, text=True).returncode != 0


def test_write_files_creates_the_folder_and_writes_exact_text(tmp_path):
    out = tmp_path / "a" / "b"
    files = {"m.h": "#define X 1\n", "m.c": "/* µ */\r\nint x;\n", "m.json": ""}
    paths = write_files(out, files)
    assert paths == [out / "m.h", out / "m.c", out / "m.json"]  # in the given order
    assert (out / "m.c").read_bytes() == "/* µ */\r\nint x;\n".encode("utf-8")  # no newline translation
    assert (out / "m.h").read_text() == "#define X 1\n" and (out / "m.json").read_bytes() == b""
    assert sorted(p.name for p in out.iterdir()) == ["m.c", "m.h", "m.json"]  # no temporary left


def test_write_files_replaces_existing_files(tmp_path):
    (tmp_path / "m.h").write_text("old text that is longer than the new one\n")
    write_files(str(tmp_path), {"m.h": "new\n"})
    assert (tmp_path / "m.h").read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.h"]


def test_a_failed_write_leaves_no_temporary(tmp_path):
    (tmp_path / "m.c").mkdir()  # the target name is taken by a folder: the final rename fails
    with pytest.raises(OSError):
        write_files(tmp_path, {"m.h": "h\n", "m.c": "c\n"})
    assert (tmp_path / "m.h").read_text() == "h\n"  # written before the failure
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.c", "m.h"] and (tmp_path / "m.c").is_dir()


def test_templates_refuse_undefined_variables():
    for name in ("export_c.h.j2", "umat.c.j2"):
        t = template(name)
        assert isinstance(t, jinja2.Template)
        with pytest.raises(jinja2.UndefinedError, match="is undefined"):
            t.render()
    with pytest.raises(FileNotFoundError):
        template("no_such_template.j2")
