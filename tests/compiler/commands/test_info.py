"""`modelc info` (modelc.commands.info): the C compiler it names runs and says the version shown;
the instruction sets it reports are ones this CPU has (/proc/cpuinfo); the streaming threshold and
threads are the ones the backend uses, $MODELC_C_STREAM_BYTES shown as their source; a missing
compiler is reported as the C backend being unavailable, with the reason, and exit status 0."""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from modelc.cli import main as cli_main
from modelc.runtime import cbuild


def _info(*args: str) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = cli_main(["info", *args])
    return status, buf.getvalue()


@pytest.fixture
def fresh_threshold():
    cbuild.stream_bytes.cache_clear()
    yield
    cbuild.stream_bytes.cache_clear()


def test_info_names_a_compiler_that_runs_and_what_the_cpu_has(fresh_threshold, monkeypatch):
    monkeypatch.delenv("MODELC_C_STREAM_BYTES", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        status, out = _info("--json")
    finally:
        torch.set_num_threads(before)
    assert status == 0
    c = json.loads(out)["backends"]["c"]
    assert c["available"], c
    version = subprocess.run([c["compiler"], "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    assert c["version"] == version
    assert c["threads"] == 1 and "-O2" in c["flags"]
    assert c["stream_bytes"] == cbuild.stream_bytes() <= 4 << 20
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file() and "-march=native" in c["flags"]:
        flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
        for isa in set(c["instruction_sets"]) & {"avx2", "fma", "avx512f"}:
            assert isa in flags, (isa, "reported, but not in /proc/cpuinfo")


def test_info_shows_the_threshold_a_setting_gives(fresh_threshold, monkeypatch):
    monkeypatch.setenv("MODELC_C_STREAM_BYTES", str(3 << 20))
    status, out = _info()
    assert status == 0
    assert re.search(r"streaming stores above 3 MiB moved per call \(\$MODELC_C_STREAM_BYTES\)", out), out


def test_a_missing_compiler_is_reported_not_raised(monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-here")
    status, out = _info()
    assert status == 0
    assert "c       unavailable: the C compiler $CC='no-such-compiler-here' was not found" in out
    assert "torch " in out and "always" in out
