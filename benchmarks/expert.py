"""What an expert writes by hand in C: the radial return vectorized across points (``expert-c``).

The peer DESIGN.md names as the one that matters most ("expert C, SIMD across points"): the same
update as :mod:`benchmarks.baselines` (NEML2's formulation, reduced to one scalar unknown), written
once in C for a block of ``W`` points held in vector registers:

- GCC/Clang vector extensions, 8 doubles a vector (one AVX-512 register, two AVX2 or four SSE2
  ones: the same source builds and runs on any x86-64, and elsewhere; 16, 32 or 64 points a block
  on request, which measured slower);
- per block, the (N, 6) rows of the inputs are turned into component vectors by 4 x 4 transposes
  (AVX; element by element without it) through a buffer in L1, and the outputs written back the
  same way, with streaming stores of whole cache lines when the call moves more than the C
  backend's threshold (:func:`modelc.runtime.cbuild.stream_bytes`);
- the scalar Newton of j2_voce_af and perzyna_iso runs on all lanes of the block at once, updates
  masked per lane, until no lane is active (the baseline's test: |phi| <= 256 eps (|s_tr| + sigma_y));
- ``exp`` and ``log`` inline vector polynomials (Cody-Waite reduction, Estrin's scheme; within 4
  ulp of libm's, tested), ``sqrt`` the hardware instruction (AVX-512 / AVX / SSE2 intrinsics);
  perzyna_iso's y^n by multiplications when n is a whole number (1-64), else exp(n log y);
- the tangent in closed form, T = A 1(x)1 (normal block) + D I + v (x) n (36 multiply-adds a point);
- built with the C backend's compiler and flags (:mod:`modelc.runtime.cbuild`: ``-O2
  -march=native``, no fused multiply-add, no ``-ffast-math``), so its rounding is the same kind as
  modelc's C kernel and any difference is the code, not the compiler.

It writes into output tensors it allocated on its first call for a size and keeps (as the floor
does): the caller's arrays, the best case for it. Non-converged points (none in the benchmark's
workload) are returned as NaN. Parameters are arguments (doubles), as a general hand-written
update would take them.

Tangent derivation (j2_voce_af; q = 1 + g x, a = q s_tr - X_old, n = a/|a|, beta = -2 mu / phi'(x)
for a plastic point, else 0): dx/dE = beta n; da/dE = 2 mu q Idev + g beta s_tr (x) n;
dn/dE = (I - n n) da/dE / |a|; with w = s_tr - (n . s_tr) n and theta = 2 mu x q / |a|:
    T = C (I - n (x) dx/dE - x dn/dE)
      = (lambda + 2 mu theta / 3) 1(x)1 + 2 mu (1 - theta) I + (2 mu theta - 2 mu beta) n (x) n
        - (2 mu x g beta / |a|) w (x) n.
j2_linear_iso is the same with g = 0, X = 0 and a constant slope (x in closed form).
"""
from __future__ import annotations

import ctypes
from typing import Callable

import torch

from benchmarks import baselines as bl
from modelc.runtime.bufferpool import kept_empty

MODELS = ("j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso")
LANES = 8  #: points a block

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>
#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#ifndef W
#define W 8
#endif
#if defined(__GNUC__)
#define MC_X_INLINE static inline __attribute__((always_inline))
#else
#define MC_X_INLINE static inline
#endif
typedef double vd __attribute__((vector_size(8 * W)));
typedef int64_t vl __attribute__((vector_size(8 * W)));

MC_X_INLINE vd vbr(double x) { return (vd){0} + x; }
MC_X_INLINE vd vsel(vl m, vd a, vd b) { return (vd)(((vl)a & m) | ((vl)b & ~m)); }
MC_X_INLINE vd vmax(vd a, vd b) { return vsel(a > b, a, b); }
MC_X_INLINE vd vabs(vd a) { return (vd)((vl)a & ((vl){0} + INT64_MAX)); }
MC_X_INLINE int vany(vl m) {
    int64_t r = 0;
    for (int l = 0; l < W; ++l) r |= m[l];
    return r != 0;
}

MC_X_INLINE vd vsqrt(vd x) {
#if defined(__AVX512F__)
    __m512d h[W / 8];
    memcpy(h, &x, sizeof x);
    for (int k = 0; k < W / 8; ++k) h[k] = _mm512_sqrt_pd(h[k]);
    memcpy(&x, h, sizeof x);
    return x;
#elif defined(__AVX__)
    __m256d h[W / 4];
    memcpy(h, &x, sizeof x);
    for (int k = 0; k < W / 4; ++k) h[k] = _mm256_sqrt_pd(h[k]);
    memcpy(&x, h, sizeof x);
    return x;
#elif defined(__SSE2__)
    __m128d h[W / 2];
    memcpy(h, &x, sizeof x);
    for (int k = 0; k < W / 2; ++k) h[k] = _mm_sqrt_pd(h[k]);
    memcpy(&x, h, sizeof x);
    return x;
#else
    for (int l = 0; l < W; ++l) x[l] = sqrt(x[l]);
    return x;
#endif
}

/* exp(x) for x in [-708, 709] (clamped there): x = k ln2 + r, |r| <= ln2/2, exp(r) by its Taylor
   series to degree 13 by Estrin's scheme (truncation below 1e-17 relative), 2^k put into the exponent bits */
MC_X_INLINE vd vexp(vd x) {
    x = vmax(vbr(-708.0), x);
    x = vsel(x > vbr(709.0), vbr(709.0), x);
    const vd shift = vbr(6755399441055744.0);  /* 1.5 * 2^52: adding it rounds to an integer */
    vd k = (x * vbr(1.4426950408889634) + shift) - shift;
    vd r = (x - k * vbr(0.6931471803691238)) - k * vbr(1.9082149292705877e-10);
    /* Estrin's scheme: pairs, then r^2, r^4, r^8 (a chain of ~5 multiply-adds, not Horner's 13) */
    const vd r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    const vd a0 = vbr(1.0) + r, a1 = vbr(0.5) + r * vbr(1.0 / 6.0), a2 = vbr(1.0 / 24.0) + r * vbr(1.0 / 120.0);
    const vd a3 = vbr(1.0 / 720.0) + r * vbr(1.0 / 5040.0), a4 = vbr(1.0 / 40320.0) + r * vbr(1.0 / 362880.0);
    const vd a5 = vbr(1.0 / 3628800.0) + r * vbr(1.0 / 39916800.0);
    const vd a6 = vbr(1.0 / 479001600.0) + r * vbr(1.0 / 6227020800.0);
    const vd p = ((a0 + r2 * a1) + r4 * (a2 + r2 * a3)) + r8 * ((a4 + r2 * a5) + r4 * a6);
    vl ki = __builtin_convertvector(k, vl);
    return p * (vd)((ki + 1023) << 52);
}

/* log(x) for positive normal x: x = 2^e m, m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s),
   s = (m - 1)/(m + 1), |s| <= 0.172, the odd series to s^23 by Estrin's scheme (truncation below
   1e-18 relative); 0 gives -inf (what pow(0, y > 0) = exp(y log 0) = 0 needs) */
MC_X_INLINE vd vlog(vd x) {
    const vl u = (vl)x;
    vd e = __builtin_convertvector((u >> 52) - 1023, vd);
    vd m = (vd)((u & ((vl){0} + 0x000fffffffffffffLL)) | ((vl){0} + 0x3ff0000000000000LL));
    const vl hi = m > vbr(1.4142135623730951);
    m = vsel(hi, m * vbr(0.5), m);
    e = vsel(hi, e + vbr(1.0), e);
    const vd s = (m - vbr(1.0)) / (m + vbr(1.0)), z = s * s, z2 = z * z, z4 = z2 * z2, z8 = z4 * z4;
    const vd c0 = vbr(2.0 / 3.0) + z * vbr(2.0 / 5.0), c1 = vbr(2.0 / 7.0) + z * vbr(2.0 / 9.0);
    const vd c2 = vbr(2.0 / 11.0) + z * vbr(2.0 / 13.0), c3 = vbr(2.0 / 15.0) + z * vbr(2.0 / 17.0);
    const vd c4 = vbr(2.0 / 19.0) + z * vbr(2.0 / 21.0);
    const vd q = ((c0 + z2 * c1) + z4 * (c2 + z2 * c3)) + z8 * (c4 + z2 * vbr(2.0 / 23.0));
    const vd r = e * vbr(0.6931471803691238) + ((s * vbr(2.0) + s * (z * q)) + e * vbr(1.9082149292705877e-10));
    return vsel(x == vbr(0.0), vbr(-INFINITY), r);
}

/* 4 x 4 transposes: rows d + k * ds (k < 4) get the columns of the tile at rows s + k * ss */
MC_X_INLINE void tile4(const double *s, int64_t ss, double *d, int64_t ds) {
#if defined(__AVX__)
    const __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + ss);
    const __m256d r2 = _mm256_loadu_pd(s + 2 * ss), r3 = _mm256_loadu_pd(s + 3 * ss);
    const __m256d lo01 = _mm256_unpacklo_pd(r0, r1), hi01 = _mm256_unpackhi_pd(r0, r1);
    const __m256d lo23 = _mm256_unpacklo_pd(r2, r3), hi23 = _mm256_unpackhi_pd(r2, r3);
    _mm256_storeu_pd(d, _mm256_permute2f128_pd(lo01, lo23, 0x20));
    _mm256_storeu_pd(d + ds, _mm256_permute2f128_pd(hi01, hi23, 0x20));
    _mm256_storeu_pd(d + 2 * ds, _mm256_permute2f128_pd(lo01, lo23, 0x31));
    _mm256_storeu_pd(d + 3 * ds, _mm256_permute2f128_pd(hi01, hi23, 0x31));
#else
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) d[j * ds + i] = s[i * ss + j];
#endif
}

/* d (cols x rows, row stride ds) = the transpose of s (rows x cols, row stride ss): 4 x 4 tiles,
   the rest entry by entry */
MC_X_INLINE void transpose(const double *s, int64_t ss, double *d, int64_t ds, int rows, int cols) {
    const int r4 = rows & ~3, c4 = cols & ~3;
    for (int i = 0; i < r4; i += 4) {
        for (int j = 0; j < c4; j += 4) tile4(s + i * ss + j, ss, d + j * ds + i, ds);
        for (int k = i; k < i + 4; ++k)
            for (int j = c4; j < cols; ++j) d[j * ds + k] = s[k * ss + j];
    }
    for (int k = r4; k < rows; ++k)
        for (int j = 0; j < cols; ++j) d[j * ds + k] = s[k * ss + j];
}
/* the rows of nl points (c components each, contiguous) -> lane-major block m[c][W]; lanes past nl
   repeat point 0 */
MC_X_INLINE void to_lanes(double *m, const double *p, int c, int nl) {
    transpose(p, c, m, W, nl, c);
    for (int j = 0; j < c; ++j)
        for (int l = nl; l < W; ++l) m[j * W + l] = m[j * W];
}
/* lane-major block m[c][W] -> the rows of its first nl points */
MC_X_INLINE void to_rows(double *p, const double *m, int c, int nl) {
    transpose(m, W, p, c, c, nl);
}
/* the rows of a block's outputs (c components a point): staged in L1, then streamed (whole cache
   lines, no read-for-ownership) when ``nt`` (outputs larger than the cache) and the block's rows
   start a line; else written in place */
MC_X_INLINE void put_rows(double *p, const double *m, int c, int nl, int nt) {
#if defined(__AVX__)
    if (nt && nl == W && !((uintptr_t)p & 63)) {
        double q[36 * W] __attribute__((aligned(64)));
        if (c == 1) memcpy(q, m, W * sizeof(double));
        else to_rows(q, m, c, W);
        for (int i = 0; i < c * W; i += 8) {
            _mm256_stream_pd(p + i, _mm256_load_pd(q + i));
            _mm256_stream_pd(p + i + 4, _mm256_load_pd(q + i + 4));
        }
        return;
    }
#endif
    (void)nt;
    if (c == 1) { for (int l = 0; l < nl; ++l) p[l] = m[l]; return; }
    to_rows(p, m, c, nl);
}

/* after the last streaming store: visible before the call returns */
MC_X_INLINE void fence(int nt) {
#if defined(__AVX__)
    if (nt) _mm_sfence();
#endif
    (void)nt;
}

MC_X_INLINE void rows_in(vd *v, const double *p, int c, int nl) {
    double m[6 * W] __attribute__((aligned(64)));
    to_lanes(m, p, c, nl);
    memcpy(v, m, c * sizeof(vd));
}
MC_X_INLINE void rows_out(double *p, const vd *v, int c, int nl, int nt) {
    double m[6 * W] __attribute__((aligned(64)));
    memcpy(m, v, c * sizeof(vd));
    put_rows(p, m, c, nl, nt);
}
MC_X_INLINE vd scal_in(const double *p, int nl) {
    vd v;
    if (nl == W) { memcpy(&v, p, sizeof v); return v; }
    for (int l = 0; l < W; ++l) v[l] = p[l < nl ? l : 0];
    return v;
}
MC_X_INLINE void scal_out(double *p, vd v, int nl, int nt) {
    double m[W] __attribute__((aligned(64)));
    memcpy(m, &v, sizeof v);
    put_rows(p, m, 1, nl, nt);
}

/* T = A 1(x)1 (normal block) + D I + v (x) n, computed lane-major, written as rows of 36 */
MC_X_INLINE void tangent_out(double *t, vd A, vd D, const vd *v, const vd *n, int nl, int nt) {
    vd m[36] __attribute__((aligned(64)));
    for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {
            vd e = v[i] * n[j];
            if (i < 3 && j < 3) e += A;
            if (i == j) e += D;
            m[6 * i + j] = e;
        }
    put_rows(t, (const double *)m, 36, nl, nt);
}

MC_X_INLINE void deviator(vd *s) {
    vd m = (s[0] + s[1] + s[2]) * vbr(1.0 / 3.0);
    s[0] -= m; s[1] -= m; s[2] -= m;
}

#define SQ23 0.816496580927726
#define NEWTON_MAX_IT 30

/* the elastic predictor of a block: old plastic strain, trial stress, its deviator; returns |dev| */
MC_X_INLINE vd trial(vd *ep6, vd *Str, vd *st, const double *E, const double *Ep, double lam, double mu2,
                       int nl) {
    vd e[6];
    rows_in(e, E, 6, nl);
    rows_in(ep6, Ep, 6, nl);
    for (int j = 0; j < 6; ++j) Str[j] = vbr(mu2) * (e[j] - ep6[j]);
    const vd tr = (e[0] - ep6[0]) + (e[1] - ep6[1]) + (e[2] - ep6[2]);
    for (int j = 0; j < 3; ++j) Str[j] += vbr(lam) * tr;
    for (int j = 0; j < 6; ++j) st[j] = Str[j];
    deviator(st);
    vd nst = vbr(0);
    for (int j = 0; j < 6; ++j) nst += st[j] * st[j];
    return vsqrt(nst);
}

/* the radial return's update along n by x: S = S_tr - 2 mu x n, Ep' = Ep + x n, ep' = ep + sqrt(2/3) x
   (epn NULL: none) */
MC_X_INLINE void radial_out(double *S, double *Epn, double *epn, const vd *Str, const vd *ep6, const vd *nn,
                              vd eo, vd x, double mu2, int nl, int nt) {
    vd out[6];
    for (int j = 0; j < 6; ++j) out[j] = Str[j] - vbr(mu2) * x * nn[j];
    rows_out(S, out, 6, nl, nt);
    for (int j = 0; j < 6; ++j) out[j] = ep6[j] + x * nn[j];
    rows_out(Epn, out, 6, nl, nt);
    if (epn) scal_out(epn, eo + vbr(SQ23) * x, nl, nt);
}


/* j2_voce_af: E, dt, Ep, X, ep -> S, Ep', X', ep', gamma_rate, T (T skipped when t == 0) */
void expert_j2_voce_af(int64_t n, int nt, const double *E, const double *dt, const double *Ep, const double *Xo,
                       const double *epo, double *S, double *Epn, double *Xn, double *epn, double *gam,
                       double *t, double Ey, double nu, double sy, double R, double d, double C, double g) {
    const double lam = Ey * nu / ((1 + nu) * (1 - 2 * nu)), mu = Ey / (2 * (1 + nu)), mu2 = 2 * mu;
    const double eps = 2.220446049250313e-16;
    for (int64_t i0 = 0; i0 < n; i0 += W) {
        const int nl = n - i0 < W ? (int)(n - i0) : W;
        vd ep6[6], Str[6], st[6], xo[6];
        const vd nst = trial(ep6, Str, st, E + 6 * i0, Ep + 6 * i0, lam, mu2, nl);
        rows_in(xo, Xo + 6 * i0, 6, nl);
        const vd eo = scal_in(epo + i0, nl), h = scal_in(dt + i0, nl);
        const vd tol = vbr(256 * eps) * (nst + vbr(sy));
        vd x = vbr(0), q, a[6], na, e_, phi, dphi;
        vl plastic = (vl){0};
        for (int it = 0; ; ++it) {
            q = vbr(1) + vbr(g) * x;
            const vd iq = vbr(1) / q;
            vd aa = vbr(0), as = vbr(0);
            for (int j = 0; j < 6; ++j) {
                a[j] = q * st[j] - xo[j];
                aa += a[j] * a[j];
                as += a[j] * st[j];
            }
            na = vsqrt(aa);
            e_ = vexp(vbr(-d) * (eo + vbr(SQ23) * x));
            const vd c3 = vbr(2.0 / 3.0 * C) * iq;
            phi = na * iq - (vbr(mu2) + c3) * x - vbr(SQ23) * (vbr(sy) + vbr(R) * (vbr(1) - e_));
            if (it == 0) plastic = phi > vbr(0);
            const vl act = plastic & (vabs(phi) > tol);
            if (!vany(act) || it == NEWTON_MAX_IT) {
                if (vany(act)) x = vsel(act, vbr(NAN), x);
                break;
            }
            dphi = vbr(g) * as / na * iq - vbr(g) * na * iq * iq - vbr(mu2) - c3 * iq
                 - vbr(2.0 / 3.0 * R * d) * e_;
            x = vsel(act, vmax(x - phi / dphi, vbr(0)), x);
        }
        /* the last evaluation is at the final x: q, a, na, phi' there */
        dphi = vbr(g) * ({ vd as = vbr(0); for (int j = 0; j < 6; ++j) as += a[j] * st[j]; as; }) / na / q
             - vbr(g) * na / (q * q) - vbr(mu2) - vbr(2.0 / 3.0 * C) / (q * q) - vbr(2.0 / 3.0 * R * d) * e_;
        const vd ina = vbr(1) / na, iq = vbr(1) / q;
        vd nn[6], out[6];
        for (int j = 0; j < 6; ++j) nn[j] = a[j] * ina;
        radial_out(S + 6 * i0, Epn + 6 * i0, epn + i0, Str, ep6, nn, eo, x, mu2, nl, nt);
        for (int j = 0; j < 6; ++j) out[j] = (xo[j] + vbr(2.0 / 3.0 * C) * x * nn[j]) * iq;
        rows_out(Xn + 6 * i0, out, 6, nl, nt);
        scal_out(gam + i0, x / h, nl, nt);
        if (t) {
            const vd beta = vsel(plastic, vbr(-mu2) / dphi, vbr(0));
            const vd theta = vbr(mu2) * x * q * ina;
            const vd kappa = vbr(mu2 * g) * x * beta * ina;
            vd ns = vbr(0);
            for (int j = 0; j < 6; ++j) ns += nn[j] * st[j];
            vd v[6];
            const vd c = vbr(mu2) * (theta - beta);
            for (int j = 0; j < 6; ++j) v[j] = c * nn[j] - kappa * (st[j] - ns * nn[j]);
            tangent_out(t + 36 * i0, vbr(lam) + vbr(mu2 / 3.0) * theta, vbr(mu2) * (vbr(1) - theta), v, nn, nl, nt);
        }
    }
    fence(nt);
}

/* linear isotropic hardening, closed form (no iteration): E, dt, Ep, ep -> S, Ep', ep', gamma_rate,
   T; without the equivalent plastic strain (epo and epn NULL, K 0) perfect plasticity */
static void j2_linear(int64_t n, int nt, const double *E, const double *dt, const double *Ep, const double *epo,
                      double *S, double *Epn, double *epn, double *gam, double *t,
                      double Ey, double nu, double sy, double K) {
    const double lam = Ey * nu / ((1 + nu) * (1 - 2 * nu)), mu = Ey / (2 * (1 + nu)), mu2 = 2 * mu;
    const double c = mu2 + 2.0 / 3.0 * K;
    for (int64_t i0 = 0; i0 < n; i0 += W) {
        const int nl = n - i0 < W ? (int)(n - i0) : W;
        vd ep6[6], Str[6], st[6];
        const vd nst = trial(ep6, Str, st, E + 6 * i0, Ep + 6 * i0, lam, mu2, nl);
        const vd eo = epo ? scal_in(epo + i0, nl) : vbr(0), h = scal_in(dt + i0, nl);
        const vd f = nst - vbr(SQ23) * (vbr(sy) + vbr(K) * eo);
        const vl plastic = f > vbr(0);
        const vd x = vsel(plastic, f * vbr(1.0 / c), vbr(0));
        const vd ina = vbr(1) / nst;
        vd nn[6];
        for (int j = 0; j < 6; ++j) nn[j] = st[j] * ina;
        radial_out(S + 6 * i0, Epn + 6 * i0, epn ? epn + i0 : NULL, Str, ep6, nn, eo, x, mu2, nl, nt);
        scal_out(gam + i0, x / h, nl, nt);
        if (t) {
            /* D = C - a n(x)n - b (Idev - n(x)n): a = (2 mu)^2 / c (plastic), b = (2 mu)^2 x / |s_tr| */
            const vd av = vsel(plastic, vbr(mu2 * mu2 / c), vbr(0)), b = vbr(mu2 * mu2) * x * ina;
            vd v[6];
            for (int j = 0; j < 6; ++j) v[j] = (b - av) * nn[j];
            tangent_out(t + 36 * i0, vbr(lam) + b * vbr(1.0 / 3.0), vbr(mu2) - b, v, nn, nl, nt);
        }
    }
    fence(nt);
}

void expert_j2_linear_iso(int64_t n, int nt, const double *E, const double *dt, const double *Ep,
                          const double *epo, double *S, double *Epn, double *epn, double *gam, double *t,
                          double Ey, double nu, double sy, double K) {
    j2_linear(n, nt, E, dt, Ep, epo, S, Epn, epn, gam, t, Ey, nu, sy, K);
}
/* j2_perfect: E, dt, Ep -> S, Ep', gamma_rate, T */
void expert_j2_perfect(int64_t n, int nt, const double *E, const double *dt, const double *Ep,
                       double *S, double *Epn, double *gam, double *t, double Ey, double nu, double sy) {
    j2_linear(n, nt, E, dt, Ep, NULL, S, Epn, NULL, gam, t, Ey, nu, sy, 0.0);
}

/* y^k for a whole k >= 1 (the same for every point of a call: the branches are predicted) */
MC_X_INLINE vd vpowi(vd y, int k) {
    vd r = vbr(1.0), b = y;
    for (;;) {
        if (k & 1) r *= b;
        k >>= 1;
        if (!k) return r;
        b *= b;
    }
}

/* perzyna_iso: E, dt, Ep, ep -> S, Ep', ep', gamma_rate, T. Newton on y = gamma_rate^(1/n):
   psi(y) = <f_tr> - c dt y^n - eta y from the baseline's y0; y^n by multiplications when n is a
   whole number from 1 to 64 (as an expert writing for a known material would), else exp(n log y) */
void expert_perzyna_iso(int64_t n, int nt, const double *E, const double *dt, const double *Ep, const double *epo,
                        double *S, double *Epn, double *epn, double *gam, double *t,
                        double Ey, double nu, double sy, double K, double eta, double m) {
    const double lam = Ey * nu / ((1 + nu) * (1 - 2 * nu)), mu = Ey / (2 * (1 + nu)), mu2 = 2 * mu;
    const double c = mu2 + 2.0 / 3.0 * K, eps = 2.220446049250313e-16;
    const int ki = m >= 1 && m <= 64 && m == (double)(int)m ? (int)m : 0;
    for (int64_t i0 = 0; i0 < n; i0 += W) {
        const int nl = n - i0 < W ? (int)(n - i0) : W;
        vd ep6[6], Str[6], st[6];
        const vd nst = trial(ep6, Str, st, E + 6 * i0, Ep + 6 * i0, lam, mu2, nl);
        const vd eo = scal_in(epo + i0, nl), h = scal_in(dt + i0, nl);
        const vd f = nst - vbr(SQ23) * (vbr(sy) + vbr(K) * eo);
        const vl plastic = f > vbr(0);
        const vd fp = vsel(plastic, f, vbr(0)), cdt = vbr(c) * h;
        /* y0 = 1 / sqrt((eta/f)^2 + (f/(c dt))^(-2/n)); 0 outside the yield surface */
        const vd ia = vbr(eta) / fp, ib = vexp(vbr(-2.0 / m) * vlog(fp / cdt));
        vd y = vsel(plastic, vbr(1) / vsqrt(ia * ia + ib), vbr(0));
        const vd tol = vbr(256 * eps) * (nst + vbr(sy));
        vd yn, yn1;
        for (int it = 0; ; ++it) {
            yn = ki ? vpowi(y, ki) : vexp(vbr(m) * vlog(y));
            const vd psi = fp - cdt * yn - vbr(eta) * y;
            const vl act = plastic & (vabs(psi) > tol);
            if (!vany(act) || it == NEWTON_MAX_IT) {
                if (vany(act)) y = vsel(act, vbr(NAN), y);
                break;
            }
            yn1 = vsel(y > vbr(0), yn / y, vbr(0));
            const vd dpsi = vbr(-m) * cdt * yn1 - vbr(eta);
            y = vsel(act, vmax(y - psi / dpsi, vbr(0)), y);
        }
        yn = vsel(y != y, y, vsel(plastic, yn, vbr(0)));
        const vd x = h * yn, ina = vbr(1) / nst;
        vd nn[6];
        for (int j = 0; j < 6; ++j) nn[j] = st[j] * ina;
        radial_out(S + 6 * i0, Epn + 6 * i0, epn + i0, Str, ep6, nn, eo, x, mu2, nl, nt);
        scal_out(gam + i0, yn, nl, nt);
        if (t) {
            /* D = C - (2 mu)^2 h n(x)n - b (Idev - n(x)n), h = w / (c w + eta), w = dt n y^(n-1),
               b = (2 mu)^2 x / |s_tr| */
            const vd w = h * vbr(m) * vsel(y > vbr(0), yn / y, vbr(0));
            const vd hh = vsel(plastic, w / (vbr(c) * w + vbr(eta)), vbr(0)), b = vbr(mu2 * mu2) * x * ina;
            vd v[6];
            for (int j = 0; j < 6; ++j) v[j] = (b - vbr(mu2 * mu2) * hh) * nn[j];
            tangent_out(t + 36 * i0, vbr(lam) + b * vbr(1.0 / 3.0), vbr(mu2) - b, v, nn, nl, nt);
        }
    }
    fence(nt);
}

/* the vector exp and log on n values (tests compare them with libm); a partial last block repeats
   its first value in the lanes past n */
static void elementwise(int64_t n, const double *x, double *y, vd (*f)(vd)) {
    for (int64_t i = 0; i < n; i += W) {
        vd v;
        for (int l = 0; l < W; ++l) v[l] = x[i + l < n ? i + l : i];
        v = f(v);
        for (int l = 0; l < W && i + l < n; ++l) y[i + l] = v[l];
    }
}
static vd vexp_(vd v) { return vexp(v); }
static vd vlog_(vd v) { return vlog(v); }
void expert_vexp(int64_t n, const double *x, double *y) { elementwise(n, x, y, vexp_); }
void expert_vlog(int64_t n, const double *x, double *y) { elementwise(n, x, y, vlog_); }
"""

_ARGS = {  # C argument order after n: inputs, outputs (tangent last), parameters
    "j2_voce_af": (5, 5, ("E", "nu", "sigma_y", "R", "d", "C", "g")),
    "j2_perfect": (3, 3, ("E", "nu", "sigma_y")),
    "j2_linear_iso": (4, 4, ("E", "nu", "sigma_y", "K")),
    "perzyna_iso": (4, 4, ("E", "nu", "sigma_y", "K", "eta", "n")),
}


def _library(lanes: int) -> ctypes.CDLL:
    if lanes not in (8, 16, 32, 64):
        raise ValueError(f"lanes must be 8, 16, 32 or 64 (a power of two vector), got {lanes}")
    from modelc.runtime import cbuild

    return cbuild.load_library_source(f"#define W {lanes}\n" + SOURCE, f"expert_update-w{lanes}")


def elementary(name: str, x: torch.Tensor, lanes: int = LANES) -> torch.Tensor:
    """The kernels' vector ``exp`` or ``log`` applied to a float64 CPU tensor (for tests)."""
    if name not in ("exp", "log"):
        raise ValueError(f"no vector {name!r} (have: exp, log)")
    fn = getattr(_library(lanes), f"expert_v{name}")
    fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = None
    x = x.to(torch.float64).contiguous().reshape(-1)
    y = torch.empty_like(x)
    fn(x.numel(), x.data_ptr(), y.data_ptr())
    return y


def expert_step(model: str, lanes: int = LANES, params: dict[str, float] | None = None) -> Callable:
    """``step(E, dt, *old_state, tangent=bool)`` in the baseline convention (float64, CPU); ``lanes``
    points a block (8, 16, 32 or 64); ``params`` override the reference parameters. The outputs are
    tensors the step keeps per batch size: the next call of that size overwrites them."""
    if model not in _ARGS:
        raise ValueError(f"no expert C update for {model!r} (have: {', '.join(MODELS)})")
    from modelc.runtime import cbuild

    lib = _library(lanes)
    fn = getattr(lib, f"expert_{model}")
    nin, nout, pnames = _ARGS[model]
    fn.argtypes = [ctypes.c_int64, ctypes.c_int, *[ctypes.c_void_p] * (nin + nout + 1), *[ctypes.c_double] * len(pnames)]
    fn.restype = None
    p = bl.params_for(model, **(params or {}))
    pvals = [float(p[k]) for k in pnames]
    names = bl.output_names(model, True)
    kept: dict[int, list[torch.Tensor]] = {}

    def step(*args: torch.Tensor, tangent: bool) -> tuple[torch.Tensor, ...]:
        if len(args) != nin:
            raise TypeError(f"expert {model} takes {nin} tensors (E, dt, *old state), got {len(args)}")
        if any(a.dtype != torch.float64 or a.device.type != "cpu" for a in args):
            raise TypeError("the expert C update runs float64 CPU tensors only")
        B = args[0].shape[0]
        shapes = [(B, 6), (B,), *[(B, *bl.SHAPES[nm]) for nm in bl.STATE[model]]]
        if [tuple(a.shape) for a in args] != shapes:
            raise ValueError(f"expert {model}: shapes {[tuple(a.shape) for a in args]}, want {shapes}")
        if B not in kept:
            kept[B] = [kept_empty((B, *bl.SHAPES.get(nm, (6, 6))), torch.float64) for nm in names]
        outs = kept[B]
        xs = [a.contiguous() for a in args]
        moved = sum(t.numel() for t in (*xs, *outs[:len(outs) - (not tangent)])) * 8
        fn(B, int(moved > cbuild.stream_bytes()), *[a.data_ptr() for a in xs], *[o.data_ptr() for o in outs[:-1]],
           outs[-1].data_ptr() if tangent else None, *pvals)
        return tuple(outs if tangent else outs[:-1])

    return step
