#!/usr/bin/env bash
# Create a SEPARATE virtual environment with NEML2 3.1.0 for the benchmarks.
#
# neml2 3.1.0's compiled Newton loop is built against torch 2.12.1 (under torch 2.13 its implicit
# models fail for batches > 1), and torch 2.12.1 on PyPI is only the CUDA build (several GB; it runs
# on a CPU-only machine). This venv is never imported by modelc: benchmarks/neml2_runner.py runs in
# it as a subprocess.
#
# Usage: bash benchmarks/setup_neml2.sh [VENV_DIR]   (default: <repo>/.neml2-venv)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${1:-$repo/.neml2-venv}"
py="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --upgrade pip >/dev/null
"$venv/bin/python" -m pip install "torch==2.12.1" numpy
"$venv/bin/python" -m pip install "neml2==3.1.0"
"$venv/bin/python" - <<'PY'
import torch, neml2
print("torch", torch.__version__, "neml2", getattr(neml2, "__version__", "?"))
PY
echo "NEML2 venv ready: $venv"
