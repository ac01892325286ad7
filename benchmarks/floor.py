"""The memory floor of a model's update: a C loop that reads the same inputs and writes the same outputs
(same tensors, same bytes, fresh outputs like the other routes) with no arithmetic beyond a running
sum that keeps the reads alive. Two store kinds, because a floor measured with regular stores is about
half the real one when the outputs do not fit in cache (the read-for-ownership of every written line):

- ``floor``: regular stores;
- ``floor-nt``: non-temporal (streaming) stores where the compiler offers them (x86 SSE2), else regular.

Every route's time is reported as a fraction of the faster floor (``fraction_of_floor`` in run.py).
Built once with the C backend's compiler and cache (:mod:`modelc.runtime.cbuild`).
"""
from __future__ import annotations

import ctypes
from typing import Callable

import torch

SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
/* read every input array once (a sum keeps the loads), write every output array once */
static double mc_read(int nin, const double *const *x, const int64_t *len) {
    double s = 0;
    for (int v = 0; v < nin; ++v) {
        const double *p = x[v];
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int64_t i = 0;
        for (; i + 4 <= len[v]; i += 4) { a0 += p[i]; a1 += p[i + 1]; a2 += p[i + 2]; a3 += p[i + 3]; }
        for (; i < len[v]; ++i) a0 += p[i];
        s += (a0 + a1) + (a2 + a3);
    }
    return s;
}
void mc_floor(int nin, const double *const *x, const int64_t *len, int nout, double *const *y,
              const int64_t *ylen) {
    double s = mc_read(nin, x, len);
    for (int w = 0; w < nout; ++w)
        for (int64_t i = 0; i < ylen[w]; ++i) y[w][i] = s;
}
void mc_floor_nt(int nin, const double *const *x, const int64_t *len, int nout, double *const *y,
                 const int64_t *ylen) {
    double s = mc_read(nin, x, len);
    for (int w = 0; w < nout; ++w) {
        double *q = y[w];
        int64_t i = 0;
#if defined(__SSE2__)
        for (; i < ylen[w] && ((uintptr_t)(q + i) & 15); ++i) q[i] = s;
        __m128d v = _mm_set1_pd(s);
        for (; i + 2 <= ylen[w]; i += 2) _mm_stream_pd(q + i, v);
        _mm_sfence();
#endif
        for (; i < ylen[w]; ++i) q[i] = s;
    }
}
"""


def floor_steps(want: tuple[torch.Tensor, ...]) -> dict[str, Callable]:
    """``{"floor": step, "floor-nt": step}`` in the baseline convention (``step(*args, tangent)``),
    returning fresh tensors shaped like ``want`` (the outputs of one baseline call). float64 only."""
    from modelc.runtime import cbuild

    lib = cbuild.load_library_source(SOURCE, "memory_floor")
    shapes = [tuple(w.shape[1:]) for w in want]
    steps = {}
    for name, fn in (("floor", lib.mc_floor), ("floor-nt", lib.mc_floor_nt)):
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                       ctypes.c_void_p]
        fn.restype = None

        def step(*args, tangent: bool, fn=fn):
            B = args[0].shape[0]
            outs = [torch.empty(B, *s, dtype=torch.float64) for s in shapes]
            xs = [a.contiguous() for a in args]
            ptr = ctypes.c_int64 * len(xs)
            optr = ctypes.c_int64 * len(outs)
            fn(len(xs), ptr(*[a.data_ptr() for a in xs]), ptr(*[a.numel() for a in xs]), len(outs),
               optr(*[o.data_ptr() for o in outs]), optr(*[o.numel() for o in outs]))
            return tuple(outs)

        steps[name] = step
    return steps
