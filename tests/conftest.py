"""Backend tests run Triton kernels under the interpreter (no GPU here); the variable must be set
before any generated module is imported (test.sh sets it too)."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def gen_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("generated")
