"""The memory floor of a model's update: a C loop that reads the same inputs and writes the same outputs
(same tensors, same bytes) with no arithmetic beyond a running sum that keeps the reads alive. It
writes into output tensors it allocated on its first call for that size and keeps (since
2026-11-26: before, fresh ones every call, which at 1e6 points made it pay the page faults of new
memory; modelc's plain calls now reuse the blocks of dropped results on the CPU and ran under a
floor that paid them, see docs/backends.md, reuse_outputs). The floor is the least any route can
cost. Two store kinds, because a floor measured with regular stores is about
half the real one when the outputs do not fit in cache (the read-for-ownership of every written line):

- ``floor``: regular stores;
- ``floor-nt``: non-temporal (streaming) stores where the compiler offers them (x86 SSE2), else regular.

Every route's time is reported as a fraction of the faster floor (``fraction_of_floor`` in run.py).
The floor runs on as many threads as the modelc call (``torch.get_num_threads()``, which the C
backend's OpenMP region uses too): before 2026-11-25 it ran on one thread whatever the setting, so
runs made with 2 threads overstated every route's fraction (see benchmarks/README.md).
Built once with the C backend's compiler and cache (:mod:`modelc.runtime.cbuild`).
"""
from __future__ import annotations

import ctypes
from typing import Callable

import torch

from modelc.runtime.bufferpool import kept_empty

SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
/* read every input array once (a sum keeps the loads), write every output array once; ``threads``
   OpenMP threads, like the modelc call it is the floor of (one where OpenMP is not built in) */
static double mc_read(int nin, const double *const *x, const int64_t *len, int threads) {
    double s = 0;
    for (int v = 0; v < nin; ++v) {
        const double *p = x[v];
        const int64_t n4 = len[v] / 4;
        double a = 0;
#ifdef _OPENMP
        #pragma omp parallel for reduction(+:a) schedule(static) num_threads(threads) if(threads > 1)
#endif
        for (int64_t k = 0; k < n4; ++k) a += (p[4 * k] + p[4 * k + 1]) + (p[4 * k + 2] + p[4 * k + 3]);
        for (int64_t i = 4 * n4; i < len[v]; ++i) a += p[i];
        s += a;
    }
    (void)threads;
    return s;
}
void mc_floor(int nin, const double *const *x, const int64_t *len, int nout, double *const *y,
              const int64_t *ylen, int threads) {
    double s = mc_read(nin, x, len, threads);
    for (int w = 0; w < nout; ++w) {
        double *q = y[w];
#ifdef _OPENMP
        #pragma omp parallel for schedule(static) num_threads(threads) if(threads > 1)
#endif
        for (int64_t i = 0; i < ylen[w]; ++i) q[i] = s;
    }
}
void mc_floor_nt(int nin, const double *const *x, const int64_t *len, int nout, double *const *y,
                 const int64_t *ylen, int threads) {
    double s = mc_read(nin, x, len, threads);
    for (int w = 0; w < nout; ++w) {
        double *q = y[w];
        int64_t i = 0;
#if defined(__SSE2__)
        for (; i < ylen[w] && ((uintptr_t)(q + i) & 63); ++i) q[i] = s;  /* to a cache-line boundary */
        const int64_t head = i, lines = (ylen[w] - head) / 8;
#ifdef _OPENMP
        #pragma omp parallel num_threads(threads) if(threads > 1)
#endif
        {
            const __m128d v = _mm_set1_pd(s);
#ifdef _OPENMP
            #pragma omp for schedule(static)
#endif
            for (int64_t k = 0; k < lines; ++k) {
                double *c = q + head + 8 * k;
                _mm_stream_pd(c, v); _mm_stream_pd(c + 2, v); _mm_stream_pd(c + 4, v); _mm_stream_pd(c + 6, v);
            }
            _mm_sfence();
        }
        i = head + 8 * lines;
#endif
        for (; i < ylen[w]; ++i) q[i] = s;
    }
    (void)threads;
}
"""


def floor_steps(want: tuple[torch.Tensor, ...]) -> dict[str, Callable]:
    """``{"floor": step, "floor-nt": step}`` in the baseline convention (``step(*args, tangent)``),
    returning tensors shaped like ``want`` (the outputs of one baseline call), the same ones at every
    call of a size. float64 only."""
    from modelc.runtime import cbuild

    lib = cbuild.load_library_source(SOURCE, "memory_floor")
    shapes = [tuple(w.shape[1:]) for w in want]
    steps = {}
    for name, fn in (("floor", lib.mc_floor), ("floor-nt", lib.mc_floor_nt)):
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_int]
        fn.restype = None

        kept: dict[int, list[torch.Tensor]] = {}

        def step(*args, tangent: bool, fn=fn, kept=kept):
            B = args[0].shape[0]
            if B not in kept:
                kept[B] = [kept_empty((B, *s), torch.float64) for s in shapes]
            outs = kept[B]
            xs = [a.contiguous() for a in args]
            ptr = ctypes.c_int64 * len(xs)
            optr = ctypes.c_int64 * len(outs)
            fn(len(xs), ptr(*[a.data_ptr() for a in xs]), ptr(*[a.numel() for a in xs]), len(outs),
               optr(*[o.data_ptr() for o in outs]), optr(*[o.numel() for o in outs]), torch.get_num_threads())
            return tuple(outs)

        steps[name] = step
    return steps
