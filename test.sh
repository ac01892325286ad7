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
# MODELC_TEST_CPU=avx2 or x86-64-v2: run as on an older x86-64 CPU on this one. NumPy (the Triton
# interpreter's arithmetic), ATen, OpenBLAS/MKL and the C backend are each held to that instruction
# set, so float32 results come out as they would there (a float32 bound once passed on AVX-512 and
# failed on an AVX2-only AMD EPYC because NumPy's vector exp/log differ by instruction set).
case "${MODELC_TEST_CPU:-}" in
  "") ;;
  avx2)
    export NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" ATEN_CPU_CAPABILITY=avx2 \
      MODELC_CFLAGS="${MODELC_CFLAGS:-} -mno-avx512f" OPENBLAS_CORETYPE=Haswell MKL_ENABLE_INSTRUCTIONS=AVX2 ;;
  x86-64-v2)
    export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" ATEN_CPU_CAPABILITY=default \
      MODELC_CFLAGS="${MODELC_CFLAGS:-} -march=x86-64-v2 -mtune=generic" OPENBLAS_CORETYPE=Nehalem \
      MKL_ENABLE_INSTRUCTIONS=SSE4_2 ;;
  *) echo "test.sh: MODELC_TEST_CPU must be avx2 or x86-64-v2, got '$MODELC_TEST_CPU'" >&2; exit 2 ;;
esac
if [ -n "${MODELC_TEST_CPU:-}" ]; then
  [ "$(uname -m)" = x86_64 ] || { echo "test.sh: MODELC_TEST_CPU needs an x86-64 machine" >&2; exit 2; }
  python -c 'import numpy, torch; f = numpy._core._multiarray_umath.__cpu_features__; print("test.sh: NumPy dispatches", [k for k in ("X86_V4", "X86_V3") if f.get(k)] or "its baseline", "- ATen", torch.backends.cpu.get_cpu_capability())' || exit 1
  echo "test.sh: C flags added:$MODELC_CFLAGS"
fi
python -m pytest -n "$workers" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
