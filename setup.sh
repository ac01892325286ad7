#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install modelc into it.
# torch and triton are pinned here (not in pyproject.toml): torch 2.13.0 is the CPU build that these
# machines have on disk; an unpinned torch would pull several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")"
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TRITON_VERSION=${TRITON_VERSION:-3.7.1}
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.modelc-installed
want="torch==$TORCH_VERSION triton==$TRITON_VERSION $(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q "torch==$TORCH_VERSION" "triton==$TRITON_VERSION"
  python -m pip install -q -e '.[gpu,test]'
  echo "$want" > "$stamp"
fi
# Fail loudly if the resolver gave us anything other than the pinned versions.
python - "$TORCH_VERSION" "$TRITON_VERSION" <<'PY'
import sys, torch, triton
want_torch, want_triton = sys.argv[1], sys.argv[2]
if torch.__version__.split("+")[0] != want_torch or triton.__version__ != want_triton:
    sys.exit(f"setup.sh: expected torch {want_torch} and triton {want_triton}, "
             f"got torch {torch.__version__} and triton {triton.__version__}")
PY
