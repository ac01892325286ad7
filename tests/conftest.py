"""Backend tests run Triton kernels under the interpreter (no GPU here); the variable must be set
before any generated module is imported (test.sh sets it too).

``MODELC_TEST_DEVICE=cuda`` (on a GPU machine: benchmarks/gpu_session.sh) leaves it unset, so the
library's Triton tests (tests/models, through ``library_helpers.compiled``) compile their kernels
and run them on the GPU; tests that hand CPU tensors to a kernel need the interpreter and are not
run that way."""
from __future__ import annotations

import os

if os.environ.get("MODELC_TEST_DEVICE") != "cuda":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def gen_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("generated")
