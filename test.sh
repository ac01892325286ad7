#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite, in parallel over the machine's cores.
# Triton kernels run under the interpreter (no GPU needed); OMP_NUM_THREADS=1 avoids the 20x slowdown
# of oversubscribed eager torch when pytest runs one worker per core.
set -uo pipefail
cd "$(dirname "$0")"
./setup.sh || exit 1
. .venv/bin/activate
# nproc honours OMP_NUM_THREADS: count the cores before setting it, or pytest runs one worker.
workers=${MODELC_TEST_WORKERS:-$(nproc)}
export TRITON_INTERPRET=1 OMP_NUM_THREADS=1 PYTHONHASHSEED=0
python -m pytest -n "$workers" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
