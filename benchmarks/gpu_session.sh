#!/usr/bin/env bash
# The GPU work of a session that is lent a GPU machine (the `device` tool: one H100 or H200, no
# network, at most 10 minutes per command and 30 minutes in all), as commands run there from the
# repository root. Everything it writes goes under $OUT, which the tool brings back.
#
# Prepare here first (this needs the network; modelc's own dependencies are already on that
# machine, only NEML2 travels as a wheel):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .whl \
#       neml2==3.1.0 pyzag==2.0.0 nmhit==0.3.6 pyro-ppl==1.9.2 pyro-api==0.1.2
#   (2.9 MB: NEML2 for torch 2.10-2.12 and what it needs beyond that machine's packages, checked
#   against its package list on 2026-11-25; NEML2 itself could not be imported here, torch 2.13)
# Then, one step per call, each with carry=[".whl"]:
#   bash benchmarks/gpu_session.sh tests    # the suite, CUDA tests included (~5 min on 16 cores)
#   bash benchmarks/gpu_session.sh cudatests  # the Triton tests compiled for this GPU (T_TESTS s)
#   bash benchmarks/gpu_session.sh bench    # benchmarks.run on the GPU, NEML2 on the same GPU
#   bash benchmarks/gpu_session.sh kernels  # registers and spills of every kernel as loaded, timed
#   bash benchmarks/gpu_session.sh layout   # the linear solve's two layouts timed (issue 13, ~5 min)
# or, when the lease is 15 minutes of device time (a machine start of ~30 s and calls of at most 10
# minutes), everything that matters in one call of ~9 minutes, each part under a time box (SIGINT;
# benchmarks.run writes its records after every configuration), packed in one archive:
#   bash benchmarks/gpu_session.sh session  # compiled-Triton tests, then benchmarks model by model
# or, for issue 13 (~5 minutes; T_TIME, T_TESTS and LIB_MODELS shorten it): every library kernel
# (value, tangent; float64, float32) timed under register caps at 4e6 points, then the
# compiled-Triton tests:
#   bash benchmarks/gpu_session.sh library
# and an A/B of the working tree's modules against another folder of modules (an earlier commit's,
# written here into the ignored .ab/base: `git show REV:generated/NAME.py > .ab/base/NAME.py`),
# carried with carry=[".ab"], in the same minute (~90 s for eight models):
#   T_COMPILE=55 T_AB=45 AB_MODELS="j2_voce_af perzyna_iso ..." bash benchmarks/gpu_session.sh ab
# and, where Nsight Compute reads the counters (Firecracker machines, KINDS.md), why a float32
# tangent kernel streams at half the float64 one's share of the memory's rate (~2 minutes):
#   bash benchmarks/gpu_session.sh profile
# and chaboche2_coupled against NEML2's chaboche on the same GPU (needs the NEML2 wheel; ~4 minutes):
#   bash benchmarks/gpu_session.sh chaboche
# A second call made at once (within the 30 s the machine stays warm) needs no new start: on
# 2026-11-26 `session` took 395 s of a 428 s hold and `layout` (time-boxed to 400 s) fitted after it.
# and commit what comes back under benchmarks/results/, naming the GPU (gpu.txt).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
step=${1:-}
case "$step" in tests|cudatests|bench|kernels|layout|session|library|ab|profile|chaboche) ;; *) echo "usage: $0 tests|cudatests|bench|kernels|layout|session|library|ab|profile|chaboche" >&2; exit 2 ;; esac

# modelc from this working tree without installing it (pyproject's package-dir as links: modelc is
# compiler/, modelc.runtime is runtime/, ...); its dependencies are already on that machine
rm -rf /tmp/mc && mkdir -p /tmp/mc/modelc
for f in compiler/*; do ln -s "$PWD/$f" /tmp/mc/modelc/; done
for d in runtime templates spec generated; do ln -s "$PWD/$d" "/tmp/mc/modelc/$d"; done
export PYTHONPATH=/tmp/mc
if compgen -G ".whl/*.whl" >/dev/null; then  # NEML2 (and anything else carried)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/mc:/tmp/site
fi
python3 -c "import modelc.runtime, sympy, jinja2, yaml" || { echo "modelc does not import here"; exit 1; }
{ nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"; } \
  | tee "$OUT/gpu.txt"

# the library's Triton tests with their kernels compiled and run on this GPU (MODELC_TEST_DEVICE=cuda:
# tests/conftest.py then leaves TRITON_INTERPRET unset) and the runtime's CUDA tests, one line per
# test (-v: what a time box cut off shows), into $1
cuda_tests() {
  MODELC_TEST_DEVICE=cuda timeout -s INT "${T_TESTS:-180}" python3 -m pytest -v -n "${NPROC:-16}" \
    -p no:cacheprovider tests/models tests/runtime/test_tensors.py tests/runtime/test_callpath.py \
    -k "triton or cuda" 2>&1 | tee "$1"
}

case "$step" in
  cudatests)  # step 1 of `session` alone
    cuda_tests "$OUT/tests.log"
    ;;
  tests)
    # TRITON_INTERPRET stays 1 for the suite (its Triton tests run on CPU tensors); the tests that
    # need a CUDA device run for real here. Compiled kernels on the GPU: `session` (its step 1).
    python3 -m pytest -q -n "${NPROC:-16}" -p no:cacheprovider ${TESTS:-tests} 2>&1 | tee "$OUT/tests.log"
    ;;
  bench)
    # every route checked against the hand-written eager update before it is timed (a compiled
    # Triton kernel that disagrees is recorded with its error, not a time)
    python3 -m benchmarks.run --device cuda --sizes 1000 100000 1000000 --dtypes float64 float32 \
      --impls modelc eager compile neml2 --neml2-python "$(command -v python3)" --repeats 10 \
      --max-seconds 4 --out "$OUT" --tag gpu 2>&1 | tee "$OUT/bench.log"
    ;;
  kernels)
    # registers and spills as Triton loaded the kernels, and their throughput, per model: as
    # compiled by default (a coupled system's module asks for 255 registers), with no cap at all
    # (ptxas then compiled the largest float64 twins for 32 registers and 3x the spills: which runs
    # faster is what this measures), then under issue 13's budget of 128 registers per thread
    for cap in "" none 128; do
      MODELC_TRITON_MAXNREG=$cap python3 -m benchmarks.run --device cuda --sizes 1000000 --dtypes float64 float32 \
        --tangent yes --impls modelc --repeats 10 --out "$OUT" --tag "gpu-kernels${cap:+-cap$cap}" 2>&1 \
        | tee -a "$OUT/kernels.log"
    done
    ;;
  layout)
    # one n x n solve per point: the backend's unrolled layout against the tile layout, registers
    # as compiled and points per second on this GPU (the unrolled n = 19 kernel alone takes ~4 min
    # to compile: left out here, its registers and spills are in the committed no-GPU report)
    python3 -m benchmarks.layout_probe --time --sizes 6 13 --out "$OUT" --tag gpu 2>&1 | tee "$OUT/layout.log"
    python3 -m benchmarks.layout_probe --time --sizes 19 --layouts tile --out "$OUT" --tag gpu19 2>&1 \
      | tee -a "$OUT/layout.log"
    ;;
  library)
    # every library kernel (value, tangent; float64, float32) timed at 4e6 points under register
    # caps, each checked against the PyTorch backend. (The A/Bs this step queued until 2026-11-27 are
    # decided: results/20261127T153000Z-cuda-h200-ab-session.md; `ab` below times new ones.)
    R=/tmp/library && rm -rf $R && mkdir -p $R && cp "$OUT/gpu.txt" $R/
    # 1. compile every kernel first, one process per model and dtype, 16 at a time (Triton's cache)
    models=${LIB_MODELS:-$(python3 -c "from benchmarks.gpu_kernels import MODELS; print(' '.join(MODELS))")}
    { for m in $models; do for d in fp64 fp32; do echo "--models $m --dtypes $d"; done; done; } \
      | timeout -s INT "${T_COMPILE:-120}" xargs -P 16 -L 1 python3 -m benchmarks.gpu_library --compile-only \
      2>&1 | tee -a $R/library.log
    pkill -INT -f "benchmarks.gpu_library --compile-only"; sleep 1; pkill -9 -f "benchmarks.gpu_library --compile-only"
    # 2. every library kernel under each register cap
    timeout -s INT "${T_TIME:-150}" python3 -m benchmarks.gpu_library --sizes 4000000 --out $R --models $models \
      --tag gpu 2>&1 | tee -a $R/library.log
    # 3. the library's Triton tests compiled and run on this GPU, when T_TESTS (seconds) is given
    [ "${T_TESTS:-0}" = 0 ] || cuda_tests $R/tests.log
    tar -czf "$OUT/library.tgz" -C $R .
    ;;
  ab)
    # the working tree's modules (generated/) against those of another folder (AB_BASE, e.g. an
    # earlier commit's, written here into the ignored .ab/base and carried), models AB_MODELS: every
    # kernel compiled first, 16 at a time, then each set timed at 4e6 points in the same minute
    # (checked against the PyTorch backend), the base first
    base=${AB_BASE:-.ab/base}
    { for m in ${AB_MODELS:?AB_MODELS: the models}; do for d in fp64 fp32; do
        echo "--models $m --dtypes $d --caps module"; echo "--models $m --dtypes $d --caps module --modules $base"
      done; done; } | timeout -s INT "${T_COMPILE:-60}" xargs -P 16 -L 1 python3 -m benchmarks.gpu_library --compile-only \
      2>&1 | tee -a "$OUT/ab.log"
    pkill -INT -f "benchmarks.gpu_library --compile-only"; sleep 1; pkill -9 -f "benchmarks.gpu_library --compile-only"
    timeout -s INT "${T_AB:-45}" python3 -m benchmarks.gpu_library --sizes 4000000 --out "$OUT" --models $AB_MODELS \
      --modules "$base" --caps module --tag gpu-ab-before 2>&1 | tee -a "$OUT/ab.log"
    timeout -s INT "${T_AB:-45}" python3 -m benchmarks.gpu_library --sizes 4000000 --out "$OUT" --models $AB_MODELS \
      --caps module --tag gpu-ab-after 2>&1 | tee -a "$OUT/ab.log"
    python3 -m benchmarks.gpu_library --compare "$OUT"/*-gpu-ab-before.json "$OUT"/*-gpu-ab-after.json \
      | tee "$OUT/ab-compare.md"
    ;;
  profile)
    # j2_voce_af's tangent kernel in float32 and float64 at 4e6 points under Nsight Compute: memory
    # throughput, L1/L2 sectors per request of its stores, warp stall reasons (text, into $OUT)
    timeout -s INT "${T_PROFILE:-240}" ncu --clock-control none -k regex:'^_kernel' \
      --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section WarpStateStats \
      --section LaunchStats --section Occupancy \
      python3 -m benchmarks.gpu_library --models ${PROFILE_MODELS:-j2_voce_af} --dtypes fp32 fp64 \
      --variants value tangent --caps module --sizes 4000000 --repeats 1 --calls 1 --out "$OUT" --tag profiled \
      2>&1 | tee "$OUT/profile.log"
    ;;
  chaboche)
    # one step with the tangent, the 800 problems of the NEML2 reference history tiled, both checked
    # against that history first (NEML2's eager route holds ~80 KB per point at 1e5: no 1e6 for it)
    timeout -s INT "${T_CHABOCHE:-300}" python3 -m benchmarks.chaboche --device cuda --sizes 10000 100000 \
      --neml2-python "$(command -v python3)" --repeats 5 --max-seconds 20 --out "$OUT" --tag gpu 2>&1 \
      | tee "$OUT/chaboche.log"
    ;;
  session)
    # 1. the library's Triton tests compiled and run on this GPU (cuda_tests above)
    R=/tmp/session && rm -rf $R && mkdir -p $R && cp "$OUT/gpu.txt" $R/
    cuda_tests $R/tests.log
    # 2. float64 at 1e6 and 1e7 points, value and tangent: modelc, the hand-written update eager and
    #    under torch.compile, NEML2, one process per model so that a time box cuts one model at most
    #    (records are written after every configuration). On an H200, 1e6 points is 100-300 us of
    #    memory traffic, where the host's work per call still shows: 1e7 is the kernels' own rate.
    for m in ${MODELS:-perzyna_iso j2_linear_iso j2_perfect elastic j2_voce_af}; do
      timeout -s INT "${T_MODEL:-75}" python3 -m benchmarks.run --device cuda --models "$m" --sizes 1000000 10000000 \
        --dtypes float64 --impls modelc eager compile neml2 --neml2-python "$(command -v python3)" \
        --repeats 10 --max-seconds 1 --out $R --tag "gpu-f64-$m" 2>&1 | tee -a $R/bench.log
    done
    # 3. what a call costs besides its kernel on this GPU: the regular call, out=, the bound call and
    #    the kernel launch alone, at 1e3 and 1e6 points
    timeout -s INT "${T_CALL:-40}" python3 -m benchmarks.call_overhead --device cuda --sizes 1000 1000000 \
      --out $R --tag gpu 2>&1 | tee -a $R/bench.log
    # 4. float32, and 1e4 points (launch overhead), without torch.compile (its compilations cost most)
    timeout -s INT "${T_F32:-70}" python3 -m benchmarks.run --device cuda --sizes 10000 1000000 --dtypes float32 \
      --impls modelc eager neml2 --neml2-python "$(command -v python3)" --repeats 10 --max-seconds 0.5 \
      --out $R --tag gpu-f32 2>&1 | tee -a $R/bench.log
    tar -czf "$OUT/session.tgz" -C $R .
    ;;
esac
