/* modelc_kernel.h: what every C source of modelc's C backend (modelc.backends.c_backend) shares, one
   copy for all models: the real type, the points-per-block choice, vector exp/log/pow, the block LU
   solve, the moves between the caller's rows and a block's lanes, the argument block. A model's
   source defines NIN, NP, NY (its input variables, parameter and output components) and MC_NEWTON
   (1: it has a Newton solve), then includes this file; modelc.runtime.cbuild compiles it with
   -I <this folder> and keys its library cache on this file's text as well as the source's.
   `modelc export c` writes it inline, so an exported source stands alone. MC_KERNEL_ABI changes
   whenever what a model's source relies on here changes. */
#ifndef MODELC_KERNEL_H
#define MODELC_KERNEL_H
#define MC_KERNEL_ABI 6
#if !defined(NIN) || !defined(NP) || !defined(NY) || !defined(MC_NEWTON)
#error "modelc_kernel.h: define NIN, NP, NY and MC_NEWTON before including it"
#endif

#include <stdint.h>
#include <string.h>
#include <float.h>
#include <math.h>
#if defined(__SSE2__)  /* (x86-64: the float block moves need SSE2 only) */
#include <immintrin.h>
#endif
#include <tgmath.h>

#ifdef MC_FLOAT32
typedef float real;
#define MC_EPS FLT_EPSILON
#else
typedef double real;
#define MC_EPS DBL_EPSILON
#endif
#define MC_NAN ((real)NAN)
#define MC_INF ((real)INFINITY)
#if defined(__GNUC__)
#define MC_INLINE static inline __attribute__((always_inline))
#else
#define MC_INLINE static inline
#endif
/* the top of each iteration of a Newton whose step is built after the block's convergence test
   (modelc.backends.c_backend.SPLIT_MIN_UNKNOWNS: every Newton without a line search): the compiler
   moves no memory access across it. Without it GCC 12 (with cbuild's NEWTON_FLAGS) moved work
   between the iterations of perzyna_iso_coupled's solve and ran the call 1.6x slower; with it, 4%
   faster than the one loop before (benchmarks/results/20261129T122500Z-cpu-newton-test-first.md).
   No instruction. */
#if defined(__GNUC__)
#define MC_ITERATION_FENCE __asm__ volatile("" ::: "memory")
#else
#define MC_ITERATION_FENCE ((void)0)
#endif

/* Points are evaluated in blocks of MC_W lanes: every per-point statement sits in a loop over the
   lanes of a block (`MC_LANES`), which the C compiler vectorizes (`omp simd`); a Newton iterates
   until no lane of the block is active. -DMC_W=1 is the scalar build (one point at a time, libm).
   By default a block is 8 points; a model with a Newton solve takes 16 with AVX-512 in double
   (measured 1.1-1.3x over 8 on j2_voce_af and perzyna_iso; with AVX2 alone 8 is faster, see
   docs/backends.md). GCC's tuning for AVX-512 CPUs prefers 256-bit vectors, so a value of such a
   block is four registers, unless the source says MC_WIDE 1 or 2 (the runtime then builds it with
   -mprefer-vector-width=512: two registers a value; runtime/cbuild.py). A float32 source that says
   MC_WIDE 2 (a Newton over a system) is built so too, with MC_WIDE_VECTORS: 16 points a block, one
   512-bit register a value. Any other float32 block holds as many bytes a value as double's: 16
   points (32 with a Newton solve and AVX-512); with 8, one vector a value, its Newton waited on one
   dependency chain: 1.2-1.8x slower (benchmarks/results/20261129T050500Z-cpu-float32-lanes.md). */
#ifndef MC_W
#if defined(__AVX512F__) && !defined(MC_FLOAT32) && MC_NEWTON
#define MC_W 16
#elif defined(__AVX512F__) && defined(MC_FLOAT32) && defined(MC_WIDE_VECTORS)
#define MC_W 16
#elif defined(__AVX512F__) && defined(MC_FLOAT32) && MC_NEWTON
#define MC_W 32
#elif defined(MC_FLOAT32)
#define MC_W 16
#else
#define MC_W 8
#endif
#endif
#if MC_W > 1 && (defined(_OPENMP) || defined(MC_OMP_SIMD))
#define MC_SIMD _Pragma("omp simd")
#else
#define MC_SIMD
#endif
#define MC_LANES for (int l = 0; l < MC_W; ++l)

/* NaN-propagating minimum / maximum (like torch.minimum / torch.maximum) */
MC_INLINE real mc_min(real a, real b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
MC_INLINE real mc_max(real a, real b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
/* the spec's functions whose argument the expression would name twice (printed inline, a nested
   argument doubles the source at each level): macaulay, safe_sqrt's clamp, sign, max and min (the
   first argument at a tie), safe_div */
MC_INLINE real mc_pos(real x) { return x < 0 ? 0 : x; }
MC_INLINE real mc_sign(real x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }
MC_INLINE real mc_ge(real a, real b) { return a >= b ? a : (a < b ? b : a + b); }
MC_INLINE real mc_le(real a, real b) { return a <= b ? a : (a > b ? b : a + b); }
MC_INLINE real mc_sdiv(real a, real b) { return b != 0 ? a / b : 0; }

/* the bits of a double, and back */
MC_INLINE double mc_bits_to_d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
MC_INLINE uint64_t mc_d_to_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

#if MC_W > 1
/* Branch-free exp, log and pow that the compiler vectorizes (libm calls would keep a lane loop
   scalar). Computed in double for both dtypes. Accuracy, tested against libm (the scalar build)
   in tests/compiler/backends/test_c_simd.py: exp and log within 2 ulp; pow(x, y) = exp(y log x)
   within (2 + 2|y ln x|) ulp (<= 4e-13 relative for any finite non-zero result). */

/* exp(x) = 2^k exp(r): k = nearest integer to x / ln 2, r = x - k ln 2 (Cody-Waite: k ln2_hi is
   exact), |r| <= 0.35; exp(r) by its Taylor polynomial of degree 13 (truncation < 2^-57 relative);
   2^k applied as two factors so that subnormal results are right. x is clamped to [-746, 709.8]
   (0 and inf beyond); NaN stays NaN. */
MC_INLINE double mc_exp_d(double x) {
    const double shift = 6755399441055744.0; /* 1.5 * 2^52: x + shift rounds x to an integer */
    double xc = x < -746.0 ? -746.0 : x;
    xc = xc > 709.8 ? 709.8 : xc;
    double kd = xc * 1.4426950408889634 + shift;
    int64_t k = (int64_t)(mc_d_to_bits(kd) - 0x4338000000000000ULL);
    double kh = (kd - shift) * 0.5 + shift;
    int64_t k1 = (int64_t)(mc_d_to_bits(kh) - 0x4338000000000000ULL);
    kd -= shift;
    double r = (xc - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
    /* the polynomial by Estrin's scheme (pairs, then r^2, r^4, r^8): a dependency chain of ~5
       multiply-adds instead of Horner's 13 */
    const double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    const double a0 = 1.0 + r, a1 = 0.5 + r * (1.0 / 6.0), a2 = 1.0 / 24.0 + r * (1.0 / 120.0);
    const double a3 = 1.0 / 720.0 + r * (1.0 / 5040.0), a4 = 1.0 / 40320.0 + r * (1.0 / 362880.0);
    const double a5 = 1.0 / 3628800.0 + r * (1.0 / 39916800.0), a6 = 1.0 / 479001600.0 + r * (1.0 / 6227020800.0);
    const double b0 = a0 + r2 * a1, b1 = a2 + r2 * a3, b2 = a4 + r2 * a5;
    const double p = (b0 + r4 * b1) + r8 * (b2 + r4 * a6);
    double s1 = mc_bits_to_d((uint64_t)(k1 + 1023) << 52);
    double s2 = mc_bits_to_d((uint64_t)(k - k1 + 1023) << 52);
    return (p * s1) * s2;
}

/* log(x) = e ln 2 + log(m), x = 2^e m with m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s),
   s = (m - 1) / (m + 1), |s| <= 0.172: the odd series to s^23 (truncation < 2^-60 relative).
   Subnormal x is scaled by 2^54 first; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf. */
MC_INLINE double mc_log_d(double x) {
    const double magic = 4503599627370496.0; /* 2^52: the bits of magic + n, n < 2^52, hold n */
    int sub = x < 2.2250738585072014e-308;
    double xs = sub ? x * 18014398509481984.0 : x;
    uint64_t u = mc_d_to_bits(xs);
    double e = (mc_bits_to_d(0x4330000000000000ULL | (u >> 52)) - magic) - (sub ? 1077.0 : 1023.0);
    double m = mc_bits_to_d((u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
    int hi = m > 1.4142135623730951;
    m = hi ? m * 0.5 : m;
    e = hi ? e + 1.0 : e;
    double s = (m - 1.0) / (m + 1.0);
    double z = s * s;
    /* 2/3 + 2/5 z + ... + 2/23 z^10 by Estrin's scheme (pairs, then z^2, z^4, z^8) */
    const double z2 = z * z, z4 = z2 * z2, z8 = z4 * z4;
    const double c0 = 2.0 / 3.0 + z * (2.0 / 5.0), c1 = 2.0 / 7.0 + z * (2.0 / 9.0);
    const double c2 = 2.0 / 11.0 + z * (2.0 / 13.0), c3 = 2.0 / 15.0 + z * (2.0 / 17.0);
    const double c4 = 2.0 / 19.0 + z * (2.0 / 21.0);
    const double p = (c0 + z2 * c1) + z4 * (c2 + z2 * c3) + z8 * (c4 + z2 * (2.0 / 23.0));
    double lm = s * 2.0 + s * (z * p);
    double r = e * 6.93147180369123816490e-01 + (lm + e * 1.90821492927058770002e-10);
    r = x == INFINITY ? x : r;
    r = x == 0.0 ? -INFINITY : r;
    return x < 0.0 || x != x ? NAN : r;
}

/* pow(x, y) = exp(y log |x|), with C's special cases: pow(x, 0) = 1 and pow(1, y) = 1 (NaN too);
   x < 0: NaN unless y is an integer (then the sign of x^y). An exponent the C compiler knows to be
   an integer k, |k| <= 63 (a baked parameter, or an expression of baked parameters), is binary
   powering instead: at most 10 multiplications (and 1 / x^|k| for k < 0) where exp and log take
   ~70 operations. Relative error <= |k| 2^-53 to first order (x^(2^j) by j squarings carries
   2^j - 1 roundings, the products of the set bits one each: |k| - 1 in all, the reciprocal one
   more; <= 7e-15 for |k| <= 63); the same special cases (x^0 = 1, NaN, infinities, signed
   zeros). Tested against exactly rounded powers. */
#if defined(__GNUC__)
#define MC_CONST_INT(y) (__builtin_constant_p(y) && (y) >= -63.0 && (y) <= 63.0 && (y) == (double)(int)(y))
#else
#define MC_CONST_INT(y) 0
#endif
MC_INLINE double mc_powi_d(double x, int k) {
    const int e = k < 0 ? -k : k;
    double r = (e & 1) ? x : 1.0, b = x;
    /* every test below is on a constant: the compiler keeps only this k's multiplications */
    if (e >= 2) { b *= b; if (e & 2) r *= b; }
    if (e >= 4) { b *= b; if (e & 4) r *= b; }
    if (e >= 8) { b *= b; if (e & 8) r *= b; }
    if (e >= 16) { b *= b; if (e & 16) r *= b; }
    if (e >= 32) { b *= b; if (e & 32) r *= b; }
    return k < 0 ? 1.0 / r : r;
}
MC_INLINE double mc_pow_d(double x, double y) {
    if (MC_CONST_INT(y))
        return mc_powi_d(x, (int)y);
    double r = mc_exp_d(y * mc_log_d(fabs(x)));
    int yint = floor(y) == y;
    int yodd = yint && floor(y * 0.5) != y * 0.5;
    r = x < 0.0 ? (yint ? (yodd ? -r : r) : NAN) : r;
    return (y == 0.0 || x == 1.0) ? 1.0 : r;
}
/* sinh and cosh from the exp above (libm's would keep a lane loop scalar: gtn's Newton ran scalar).
   With h = exp(|x| / 2): e^|x| / 2 = (h / 2) h, finite up to |x| = 710.47 as cosh itself, and
   e^-|x| / 2 = 1 / (2 h h). cosh is their sum. sinh is their difference for |x| >= 1/2 (cancellation
   costs at most a factor coth(1/2) = 2.2) and below that x times its Taylor series to x^18 / 19!
   (truncation below 2e-26 relative). Within 16 ulp of libm (tests/compiler/backends/test_c_simd.py),
   the same special values (signed zeros, infinities, NaN). */
MC_INLINE double mc_cosh_d(double x) {
    const double h = mc_exp_d(0.5 * fabs(x));
    return (0.5 * h) * h + 0.5 / (h * h);
}
MC_INLINE double mc_sinh_d(double x) {
    const double a = fabs(x), h = mc_exp_d(0.5 * a);
    const double big = (0.5 * h) * h - 0.5 / (h * h);
    const double x2 = x * x;
    double p = 1.0 + x2 * (1.0 / 342.0);  /* 1 + x^2 / (18 * 19) */
    p = 1.0 + x2 * (1.0 / 272.0) * p;
    p = 1.0 + x2 * (1.0 / 210.0) * p;
    p = 1.0 + x2 * (1.0 / 156.0) * p;
    p = 1.0 + x2 * (1.0 / 110.0) * p;
    p = 1.0 + x2 * (1.0 / 72.0) * p;
    p = 1.0 + x2 * (1.0 / 42.0) * p;
    p = 1.0 + x2 * (1.0 / 20.0) * p;
    p = 1.0 + x2 * (1.0 / 6.0) * p;  /* 1 + x^2 / 3! (1 + x^2 / (4 * 5) (...)) */
    return a < 0.5 ? x * p : (x < 0 ? -big : big);
}
/* expm1, log1p and the other hyperbolic functions, from the exp and log above (libm's keep a lane
   loop scalar), without their cancellations:
   - expm1(x): |x| < 1/2 its Taylor series to x^16 / 16! (truncation below 2^-60 relative), else
     exp(x) - 1 (relative error at most 2.6 times exp's: e^(1/2) / (e^(1/2) - 1));
   - log1p(x) = log(u) x / (u - 1) with u = 1 + x rounded (the factor corrects u's rounding;
     x itself when u == 1);
   - tanh(x) = t / (t + 2), t = expm1(2|x|), with the sign of x; +-1 beyond |x| = 20;
   - asinh(x) = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) with the sign of x, log(2|x|) beyond 1e8;
   - acosh(x) = log1p(t + sqrt(t (t + 2))), t = x - 1, log(2x) beyond 1e8; NaN below 1;
   - atanh(x) = log1p(2|x| / (1 - |x|)) / 2 with the sign of x; +-inf at +-1, NaN beyond.
   Within 4 ulp of libm (3 measured; tests/compiler/backends/test_c_simd.py), the same special values. */
MC_INLINE double mc_expm1_d(double x) {
    const double x2 = x * x, x4 = x2 * x2, x8 = x4 * x4;
    /* x (1 + x/2! + ... + x^15/16!) by Estrin's scheme */
    const double a0 = 1.0 + x * 0.5, a1 = 1.0 / 6.0 + x * (1.0 / 24.0);
    const double a2 = 1.0 / 120.0 + x * (1.0 / 720.0), a3 = 1.0 / 5040.0 + x * (1.0 / 40320.0);
    const double a4 = 1.0 / 362880.0 + x * (1.0 / 3628800.0), a5 = 1.0 / 39916800.0 + x * (1.0 / 479001600.0);
    const double a6 = 1.0 / 6227020800.0 + x * (1.0 / 87178291200.0);
    const double a7 = 1.0 / 1307674368000.0 + x * (1.0 / 20922789888000.0);
    const double p = ((a0 + x2 * a1) + x4 * (a2 + x2 * a3)) + x8 * ((a4 + x2 * a5) + x4 * (a6 + x2 * a7));
    const double small = x * p;
    const double big = mc_exp_d(x) - 1.0;
    return fabs(x) < 0.5 ? small : big;
}
MC_INLINE double mc_log1p_d(double x) {
    const double u = 1.0 + x;
    const double d = u - 1.0;
    const double r = mc_log_d(u) * (x / (d != 0.0 ? d : 1.0));
    return d == 0.0 ? x : (x == INFINITY ? x : r);
}
MC_INLINE double mc_tanh_d(double x) {
    const double a = fabs(x) > 20.0 ? 20.0 : fabs(x);
    const double t = mc_expm1_d(2.0 * a);
    const double r = fabs(x) > 20.0 ? 1.0 : t / (t + 2.0);
    return x != x ? x : copysign(r, x);
}
MC_INLINE double mc_asinh_d(double x) {
    const double a = fabs(x), ac = a > 1e8 ? 1.0 : a;
    const double r = a > 1e8 ? mc_log_d(a) + 6.93147180559945309417e-01
                             : mc_log1p_d(ac + ac * ac / (1.0 + sqrt(1.0 + ac * ac)));
    return x != x ? x : copysign(r, x);
}
MC_INLINE double mc_acosh_d(double x) {
    const double t = (x > 1e8 ? 1.0 : x) - 1.0;
    const double r = x > 1e8 ? mc_log_d(x) + 6.93147180559945309417e-01 : mc_log1p_d(t + sqrt(t * (t + 2.0)));
    return x < 1.0 ? NAN : r;
}
MC_INLINE double mc_atanh_d(double x) {
    const double a = fabs(x);
    const double r = 0.5 * mc_log1p_d(2.0 * a / (1.0 - a));
    return ((a > 1.0) | (x != x)) ? NAN : copysign(a == 1.0 ? INFINITY : r, x);
}
/* atan(x): Cephes' reduction (|x| > tan(3 pi/8): pi/2 + atan(-1/|x|); |x| > 0.66: pi/4 +
   atan((|x| - 1)/(|x| + 1)), the low bits of pi/2 and pi/4 added back) and its 4/5 rational
   approximation on |t| <= 0.66, the sign of x. atan2(y, x) from it: atan(min/max) of |x|, |y|, then
   pi/2 - . when |y| > |x|, pi - . when x is negative (-0 included), the sign of y; libm's special
   values (zeros, infinities: +-pi/4, +-3 pi/4, NaN). Within 4 ulp of libm (test_c_simd.py). */
MC_INLINE double mc_atan_d(double x) {
    const double a = fabs(x);
    const int big = a > 2.414213562373095, mid = a > 0.66;
    const double t = big ? -1.0 / (big ? a : 1.0) : (mid ? (a - 1.0) / (a + 1.0) : a);
    const double y0 = big ? 1.5707963267948966 : (mid ? 0.7853981633974483 : 0.0);
    const double lo = big ? 6.123233995736766e-17 : (mid ? 3.061616997868383e-17 : 0.0);
    const double z = t * t;
    double p = -8.750608600031904122785e-1 * z - 1.615753718733365076637e1;
    p = p * z - 7.500855792314704667340e1;
    p = p * z - 1.228866684490136173410e2;
    p = p * z - 6.485021904942025371773e1;
    double q = z + 2.485846490142306297962e1;
    q = q * z + 1.650270098316988542046e2;
    q = q * z + 4.328810604912902668951e2;
    q = q * z + 4.853903996359136964868e2;
    q = q * z + 1.945506571482613964425e2;
    const double r = y0 + ((t * (z * p / q) + t) + lo);
    return x != x ? x : copysign(r, x);
}
MC_INLINE double mc_atan2_d(double y, double x) {
    /* (conditions on doubles only, no ||, && or signbit: GCC would not vectorize a loop that also
       holds mc_pow's int conditions) */
    const double ax = fabs(x), ay = fabs(y);
    const double num = ay > ax ? ax : ay, den = ay > ax ? ay : ax;
    const double q = den != 0.0 ? (den != INFINITY ? num / den : (num == den ? 1.0 : 0.0)) : 0.0;
    double r = mc_atan_d(q);
    r = ay > ax ? 1.5707963267948966 - r + 6.123233995736766e-17 : r;
    r = copysign(1.0, x) < 0.0 ? 3.141592653589793 - r + 1.2246467991473532e-16 : r;  /* x < 0 or -0 */
    return x != x ? x : (y != y ? y : copysign(r, y));
}
#define mc_atan2(y, x) ((real)mc_atan2_d((double)(y), (double)(x)))
#define mc_exp(x) ((real)mc_exp_d((double)(x)))
#define mc_log(x) ((real)mc_log_d((double)(x)))
#define mc_pow(x, y) ((real)mc_pow_d((double)(x), (double)(y)))
#define mc_sinh(x) ((real)mc_sinh_d((double)(x)))
#define mc_cosh(x) ((real)mc_cosh_d((double)(x)))
#define mc_expm1(x) ((real)mc_expm1_d((double)(x)))
#define mc_log1p(x) ((real)mc_log1p_d((double)(x)))
#define mc_tanh(x) ((real)mc_tanh_d((double)(x)))
#define mc_asinh(x) ((real)mc_asinh_d((double)(x)))
#define mc_acosh(x) ((real)mc_acosh_d((double)(x)))
#define mc_atanh(x) ((real)mc_atanh_d((double)(x)))
#else
#define MC_CONST_INT(y) 0
MC_INLINE double mc_powi_d(double x, int k) { return pow(x, k); }
#define mc_exp(x) exp(x)
#define mc_log(x) log(x)
#define mc_pow(x, y) pow(x, y)
#define mc_sinh(x) sinh(x)
#define mc_cosh(x) cosh(x)
#define mc_expm1(x) expm1(x)
#define mc_log1p(x) log1p(x)
#define mc_tanh(x) tanh(x)
#define mc_asinh(x) asinh(x)
#define mc_acosh(x) acosh(x)
#define mc_atanh(x) atanh(x)
#define mc_atan2(y, x) atan2(y, x)
#endif
/* A Newton solve's first guess: pow(x, y) to about 1e-7 relative, where mc_pow is exact to a few
   ulp (c_backend: the non-integer powers of a guess assignment; the guess only seeds the solve,
   whose result and stopping test are those of the exact residual). exp2(y log2 |x|): log2 of the
   mantissa m in [sqrt(1/2), sqrt(2)) as t q(t), t = m - 1, q of degree 7 (Chebyshev fit, 8.7e-8
   absolute), 2^f for f in [-1/2, 1/2] of degree 6 (2.6e-9 relative), both by Estrin's scheme, and
   no division: relative error below 1e-7 |y| + 1e-8 (tested). Results beyond 2^1024 are inf, below
   2^-1021 zero; subnormal x scaled first; mc_pow's special values (x^0 = 1, 1^y = 1, NaN,
   infinities, zeros, negative bases) and its binary powering for an exponent the compiler knows
   to be an integer. The scalar build (MC_W 1) computes it too: the same guesses, the same
   iterations. perzyna_iso's guess (a^-2 + b^-2)^(-1/2), b^-2 = (f / (c dt))^(-2/n): its tangent
   call 1.04x-1.08x faster together with the Newton exports (c_ab --fresh, 1e5 points). */
MC_INLINE double mc_gpow_d(double x, double y) {
    if (MC_CONST_INT(y))
        return mc_powi_d(x, (int)y);
    const double ax = fabs(x);
    const int sub = ax < 2.2250738585072014e-308;
    const uint64_t u = mc_d_to_bits(sub ? ax * 18014398509481984.0 : ax);
    double e = (mc_bits_to_d(0x4330000000000000ULL | (u >> 52)) - 4503599627370496.0) - (sub ? 1077.0 : 1023.0);
    double m = mc_bits_to_d((u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
    const int hi = m > 1.4142135623730951;
    m = hi ? m * 0.5 : m;
    e = hi ? e + 1.0 : e;
    const double t = m - 1.0, t2 = t * t, t4 = t2 * t2;
    const double q = ((1.4426949579955686 + t * -0.721352758765295) + t2 * (0.4809240385767598 + t * -0.36024198590589845))
        + t4 * ((0.2870756111741508 + t * -0.24882180565981904) + t2 * (0.23420985106656295 + t * -0.1462035340079919));
    const double z = y * (e + t * q);
    const double zc = z < -1021.0 ? -1021.0 : (z > 1024.0 ? 1024.0 : z);
    const double shift = 6755399441055744.0; /* 1.5 * 2^52: zc + shift rounds zc to an integer */
    const double kd = zc + shift;
    const int64_t k = (int64_t)(mc_d_to_bits(kd) - 0x4338000000000000ULL);
    const double f = zc - (kd - shift), f2 = f * f, f4 = f2 * f2;
    const double p = ((0.9999999999595478 + f * 0.6931472067106216) + f2 * (0.24022651213594645 + f * 0.05550327214208566))
        + f4 * ((0.00961802560297271 + f * 0.0013400432165421815) + f2 * 0.00015469731978885992);
    double r = (p * mc_bits_to_d((uint64_t)(k + 1022) << 52)) * 2.0;  /* 2^(k - 1) normal for k in [-1021, 1024] */
    r = z > 1024.0 ? INFINITY : (z < -1021.0 ? 0.0 : r);
    r = ax == 0.0 ? (y < 0.0 ? INFINITY : 0.0) : r;
    r = ax == INFINITY ? (y < 0.0 ? 0.0 : INFINITY) : r;
    const int yint = floor(y) == y;
    const int yodd = yint && floor(y * 0.5) != y * 0.5;
    r = x < 0.0 ? (yint ? (yodd ? -r : r) : NAN) : r;
    r = y != y ? y : (x != x ? x : r);
    return (y == 0.0 || x == 1.0) ? 1.0 : r;
}
#define mc_gpow(x, y) ((real)mc_gpow_d((double)(x), (double)(y)))
/* powr(a, e) from P = powr(a, e + 1) (modelc.functions.powr_shift): P / a, one division where a
   second power would take an exp; at a = 0 the value of powr(0, e) (0, 1 or inf by the sign of e,
   NaN for a NaN e). An exponent the compiler knows to be an integer (baked) is binary powering, as
   in mc_pow. */
MC_INLINE double mc_powr_shift_d(double P, double a, double e) {
    if (MC_CONST_INT(e))
        return mc_powi_d(a, (int)e);
    double z = e > 0.0 ? 0.0 : (e == 0.0 ? 1.0 : (e < 0.0 ? INFINITY : NAN));
    return a != 0.0 ? P / a : z;
}
#define mc_powr_shift(P, a, e) ((real)mc_powr_shift_d((double)(P), (double)(a), (double)(e)))

/* Solve A X = B for every lane of a block, in place (X overwrites B, A its factors): A n x n, B n x m,
   entry (i, j) of lane l at a[(i * n + j) * MC_W + l]. LU with scaled partial pivoting per lane: at
   step k, a search over the rows i >= k finds each lane's first row with the largest |a[i][k]|
   relative to the row's largest entry (branch-free selects; see mc_lu_solve); then each row that is some lane's pivot is exchanged with row k in those lanes, by
   vectorized selects (usually one or two rows per step; a lane whose pivot is already in place
   exchanges nothing). The factors stay in A: the multipliers below the diagonal, the pivots'
   reciprocals on it. `piv` (NULL: not kept) receives each step's pivot row per lane,
   piv[k * MC_W + l], for mc_lu_apply to solve more right-hand sides through the same factors with
   the same operations: the variants of a call that need several groups of columns of one system
   (Jacobian, total) factor it once. */

/* the rows below k that are some lane's pivot at step k, p[l] (n <= 64; larger: not used, 0) */
MC_INLINE uint64_t mc_lu_rows(const int n, const int k, const int *restrict p) {
    uint64_t rows = 0;
    if (n > 64) return 0;
    MC_LANES rows |= (uint64_t)1 << p[l];
    return rows & ~(((uint64_t)2 << k) - 1);
}
/* in the rows of x (w entries a row), entries c0 .. c1-1 of rows k and i exchanged in the lanes
   whose pivot p[l] is i */
MC_INLINE void mc_lu_swap(real *restrict x, const int w, const int c0, const int c1, const int k, const int i,
                          const int *restrict p) {
    for (int c = c0; c < c1; ++c) {
        real *u = x + (k * w + c) * MC_W, *q = x + (i * w + c) * MC_W;
        MC_SIMD MC_LANES {
            const int s = p[l] == i;
            const real t = u[l];
            u[l] = s ? q[l] : t;
            q[l] = s ? t : q[l];
        }
    }
}
/* in the rows of x (w entries a row), entries c0 .. c1-1 of row i less f times row k's */
MC_INLINE void mc_lu_axpy(real *restrict x, const int w, const int c0, const int c1, const int k, const int i,
                          const real *restrict f) {
    for (int c = c0; c < c1; ++c) {
        const real *u = x + (k * w + c) * MC_W;
        real *q = x + (i * w + c) * MC_W;
        MC_SIMD MC_LANES q[l] -= f[l] * u[l];
    }
}
/* the back substitution of the m columns at b through the factors at a */
MC_INLINE void mc_lu_back(const int n, const int m, const real *restrict a, real *restrict b) {
    for (int i = n - 1; i >= 0; --i) {
        for (int j = i + 1; j < n; ++j) {  /* per right-hand side, the same order of operations over j */
            const real *u = a + (i * n + j) * MC_W;
            int nz = 0;
            MC_LANES nz |= u[l] != 0;
            if (!nz) continue;
            for (int c = 0; c < m; ++c) {
                real *q = b + (i * m + c) * MC_W;
                const real *p = b + (j * m + c) * MC_W;
                MC_SIMD MC_LANES q[l] -= u[l] * p[l];
            }
        }
        const real *d = a + (i * n + i) * MC_W;
        for (int c = 0; c < m; ++c) {
            real *q = b + (i * m + c) * MC_W;
            MC_SIMD MC_LANES q[l] *= d[l];
        }
    }
}
/* Scaled partial pivoting: the pivot of column k is the first row i >= k with the largest
   |a[i][k]| / max_j |a[i][j]| (each row's largest entry in the matrix as given). Rows of a coupled
   system come in different units (a strain row's entries ~1, a stress row's ~1e5): plain partial
   pivoting took the stress row's small-in-its-units entry as the pivot, and the elimination then
   cancelled its large entries against the strain rows' (j2_perfect_coupled's float32 tangent: 430
   units of round-off in d Ep / d E instead of 32; tests/models/test_library_tangent.py). Only the
   choice of the pivots depends on the scales; the arithmetic is that of the unscaled rows. */
static inline void mc_lu_solve(const int n, const int m, real *restrict a, real *restrict b, int *restrict piv) {
    real sc[n * MC_W];  /* 1 / the row's largest |entry| (row i at sc[i * MC_W]), exchanged with its row */
    for (int i = 0; i < n; ++i) {
        real mx[MC_W];
        MC_SIMD MC_LANES mx[l] = 0;
        for (int j = 0; j < n; ++j) {
            MC_SIMD MC_LANES {
                const real v = fabs(a[(i * n + j) * MC_W + l]);
                mx[l] = v > mx[l] ? v : mx[l];
            }
        }
        MC_SIMD MC_LANES sc[i * MC_W + l] = ((real)1) / mx[l];
    }
    for (int k = 0; k < n; ++k) {
        int own[MC_W];
        int *restrict p = piv ? piv + k * MC_W : own;
        real big[MC_W];
        MC_SIMD MC_LANES { p[l] = k; big[l] = fabs(a[(k * n + k) * MC_W + l]) * sc[k * MC_W + l]; }
        for (int i = k + 1; i < n; ++i) {
            MC_SIMD MC_LANES {
                const real v = fabs(a[(i * n + k) * MC_W + l]) * sc[i * MC_W + l];
                const int s = v > big[l];
                big[l] = s ? v : big[l];
                p[l] = s ? i : p[l];
            }
        }
        const uint64_t rows = mc_lu_rows(n, k, p);
        for (int i = k + 1; i < n; ++i) {
            if (n <= 64 && !((rows >> i) & 1)) continue;
            mc_lu_swap(a, n, k, n, k, i, p);
            mc_lu_swap(b, m, 0, m, k, i, p);
            mc_lu_swap(sc, 1, 0, 1, k, i, p);
        }
        real *d = a + (k * n + k) * MC_W;
        MC_SIMD MC_LANES d[l] = ((real)1) / d[l];
        for (int i = k + 1; i < n; ++i) {
            real f[MC_W];
            int nz = 0;
            MC_SIMD MC_LANES f[l] = a[(i * n + k) * MC_W + l] * d[l];
            if (piv) {  /* the multiplier kept for mc_lu_apply */
                MC_SIMD MC_LANES a[(i * n + k) * MC_W + l] = f[l];
            }
            MC_LANES nz |= f[l] != 0;
            if (!nz) continue;  /* a zero below the pivot in every lane (a sparse Jacobian): nothing to do */
            mc_lu_axpy(a, n, k + 1, n, k, i, f);
            mc_lu_axpy(b, m, 0, m, k, i, f);
        }
    }
    mc_lu_back(n, m, a, b);
}
/* Solve A X = B, B n x m, through the factors and pivots an earlier mc_lu_solve left in a and piv:
   the same operations on each column as if mc_lu_solve had solved it with its own columns. */
static inline void mc_lu_apply(const int n, const int m, const real *restrict a, const int *restrict piv,
                               real *restrict b) {
    for (int k = 0; k < n; ++k) {
        const int *restrict p = piv + k * MC_W;
        const uint64_t rows = mc_lu_rows(n, k, p);
        for (int i = k + 1; i < n; ++i) {
            if (n <= 64 && !((rows >> i) & 1)) continue;
            mc_lu_swap(b, m, 0, m, k, i, p);
        }
        for (int i = k + 1; i < n; ++i) {
            const real *f = a + (i * n + k) * MC_W;
            int nz = 0;
            MC_LANES nz |= f[l] != 0;
            if (!nz) continue;
            mc_lu_axpy(b, m, 0, m, k, i, f);
        }
    }
    mc_lu_back(n, m, a, b);
}

/* Between the caller's rows (point-major: entry c of point l at y[l * ys + c]) and a block's lanes
   (lane-major: entry c of lane l at s[c * MC_W + l]). A full block with AVX2 in double, or SSE2 in
   float (MC_W a multiple of 4), moves as 4 x 4 tiles transposed in registers (per 16 entries: 4
   loads, 8 shuffles, 4 stores) instead of 16 scalar copies; the rest entry by entry. */
#if defined(__AVX2__) && !defined(MC_FLOAT32) && MC_W % 4 == 0
#define MC_TILES 1
/* rows d + k * ds (k < 4) get the columns of the 4 x 4 tile at rows s + k * ss */
MC_INLINE void mc_tile(const real *restrict s, const int64_t ss, real *restrict d, const int64_t ds) {
    const __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + ss);
    const __m256d r2 = _mm256_loadu_pd(s + 2 * ss), r3 = _mm256_loadu_pd(s + 3 * ss);
    const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
    const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
    _mm256_storeu_pd(d, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd(d + ds, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd(d + 2 * ds, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd(d + 3 * ds, _mm256_permute2f128_pd(t1, t3, 0x31));
}
/* the two columns a block has left after its 4 x 4 tiles (6 = 4 + 2 components, 14 = 12 + 2), as
   2 x 4 tiles: rows d, d + ds get the columns of the 4 rows s + k * ss (two entries each) */
MC_INLINE void mc_tile42(const real *restrict s, const int64_t ss, real *restrict d, const int64_t ds) {
    const __m256d t0 = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(s)), _mm_loadu_pd(s + 2 * ss), 1);
    const __m256d t1 = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(s + ss)), _mm_loadu_pd(s + 3 * ss), 1);
    _mm256_storeu_pd(d, _mm256_unpacklo_pd(t0, t1));
    _mm256_storeu_pd(d + ds, _mm256_unpackhi_pd(t0, t1));
}
/* and back: rows d + k * ds (k < 4) get the two entries of column k of the rows s, s + ss */
MC_INLINE void mc_tile24(const real *restrict s, const int64_t ss, real *restrict d, const int64_t ds) {
    const __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + ss);
    const __m256d lo = _mm256_unpacklo_pd(r0, r1), hi = _mm256_unpackhi_pd(r0, r1);
    _mm_storeu_pd(d, _mm256_castpd256_pd128(lo));
    _mm_storeu_pd(d + ds, _mm256_castpd256_pd128(hi));
    _mm_storeu_pd(d + 2 * ds, _mm256_extractf128_pd(lo, 1));
    _mm_storeu_pd(d + 3 * ds, _mm256_extractf128_pd(hi, 1));
}
#elif defined(__SSE2__) && defined(MC_FLOAT32) && MC_W % 4 == 0
/* the same three moves in float, 128-bit vectors of 4 (until 2026-11-29 float moved entry by entry:
   its tangent calls ran 1.5-2x slower than double's on an AVX-512 EPYC;
   benchmarks/results/20261129T044500Z-cpu-float32-tiles.md) */
#define MC_TILES 1
MC_INLINE void mc_tile(const real *restrict s, const int64_t ss, real *restrict d, const int64_t ds) {
    __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + ss), r2 = _mm_loadu_ps(s + 2 * ss), r3 = _mm_loadu_ps(s + 3 * ss);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(d, r0);
    _mm_storeu_ps(d + ds, r1);
    _mm_storeu_ps(d + 2 * ds, r2);
    _mm_storeu_ps(d + 3 * ds, r3);
}
MC_INLINE void mc_tile42(const real *restrict s, const int64_t ss, real *restrict d, const int64_t ds) {
    /* (pairs of floats through __m64, which may alias anything) */
    const __m128 ab = _mm_loadh_pi(_mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)s), (const __m64 *)(s + ss));
    const __m128 ce = _mm_loadh_pi(_mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(s + 2 * ss)), (const __m64 *)(s + 3 * ss));
    _mm_storeu_ps(d, _mm_shuffle_ps(ab, ce, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm_storeu_ps(d + ds, _mm_shuffle_ps(ab, ce, _MM_SHUFFLE(3, 1, 3, 1)));
}
MC_INLINE void mc_tile24(const real *restrict s, const int64_t ss, real *restrict d, const int64_t ds) {
    const __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + ss);
    const __m128 lo = _mm_unpacklo_ps(r0, r1), hi = _mm_unpackhi_ps(r0, r1);
    _mm_storel_pi((__m64 *)d, lo);
    _mm_storeh_pi((__m64 *)(d + ds), lo);
    _mm_storel_pi((__m64 *)(d + 2 * ds), hi);
    _mm_storeh_pi((__m64 *)(d + 3 * ds), hi);
}
#else
#define MC_TILES 0
#endif

/* entries 0 .. nc-1 of lanes 0 .. nl-1 of the block s to the rows y + l * ys (ys = 0, a broadcast
   Jacobian: every lane writes the same row). With ``nt`` (a call whose outputs exceed the cache, see
   mc_args.flags) and rows that follow each other (ys == nc), a full block is staged in L1 in the
   caller's layout and written with streaming stores (whole cache lines, no read-for-ownership). Only
   the lines the block fills whole are streamed: a line it shares with a neighbouring block (rows
   that do not start on a cache line, e.g. a host's malloc'd array, 16-byte aligned) is written with
   regular stores by both, never half streamed (that made a host's export call 2.5x slower: the line
   goes back and forth between the cache and the write-combining buffers). */
#if defined(__AVX__)
/* n values from s to y: regular stores up to y's first cache-line boundary and after its last whole
   line, the whole lines between with streaming stores (two 32-byte stores a line) */
MC_INLINE void mc_stream(real *restrict y, const real *restrict s, const int n) {
    const int step = 32 / (int)sizeof(real), line = 64 / (int)sizeof(real);
    int i = 0;
    for (; i < n && ((uintptr_t)(y + i) & 63); ++i) y[i] = s[i];
    for (; i + line <= n; i += line) {
#ifdef MC_FLOAT32
        _mm256_stream_ps(y + i, _mm256_loadu_ps(s + i));
        _mm256_stream_ps(y + i + step, _mm256_loadu_ps(s + i + step));
#else
        _mm256_stream_pd(y + i, _mm256_loadu_pd(s + i));
        _mm256_stream_pd(y + i + step, _mm256_loadu_pd(s + i + step));
#endif
    }
    for (; i < n; ++i) y[i] = s[i];
}
#endif

MC_INLINE void mc_store(real *restrict y, const int64_t ys, const real *restrict s, const int nc, const int nl,
                        const int nt) {
#if defined(__AVX__)
    if (nt && nl == MC_W && ys == nc) {
        /* (a full Jacobian's block is hundreds of entries a point: its staging on the stack, line aligned) */
        real qs[MC_W * nc + 64 / sizeof(real)];  /* (the slack the alignment below may skip) */
        real *q = (real *)(((uintptr_t)qs + 63) & ~(uintptr_t)63);
#if MC_TILES
        const int n4 = nc & ~3;
        for (int l = 0; l < MC_W; l += 4) {
            for (int c = 0; c < n4; c += 4) mc_tile(s + c * MC_W + l, MC_W, q + l * nc + c, nc);
            const int n2 = nc - n4 >= 2 ? n4 + 2 : n4;
            if (n2 > n4) mc_tile24(s + n4 * MC_W + l, MC_W, q + l * nc + n4, nc);
            for (int k = 0; k < 4; ++k)
                for (int c = n2; c < nc; ++c) q[(l + k) * nc + c] = s[c * MC_W + l + k];
        }
#else
        for (int l = 0; l < MC_W; ++l)
            for (int c = 0; c < nc; ++c) q[l * nc + c] = s[c * MC_W + l];
#endif
        mc_stream(y, q, MC_W * nc);
        return;
    }
#else
    (void)nt;
#endif
#if MC_TILES
    if (nl == MC_W) {
        const int n4 = nc & ~3;
        for (int l = 0; l < MC_W; l += 4) {
            for (int c = 0; c < n4; c += 4) mc_tile(s + c * MC_W + l, MC_W, y + l * ys + c, ys);
            const int n2 = nc - n4 >= 2 ? n4 + 2 : n4;
            if (n2 > n4) mc_tile24(s + n4 * MC_W + l, MC_W, y + l * ys + n4, ys);
            for (int k = 0; k < 4; ++k)
                for (int c = n2; c < nc; ++c) y[(l + k) * ys + c] = s[c * MC_W + l + k];
        }
        return;
    }
#endif
    for (int l = 0; l < nl; ++l)
        for (int c = 0; c < nc; ++c) y[l * ys + c] = s[c * MC_W + l];
}

/* after a thread's last streaming store: make them visible before the call returns */
MC_INLINE void mc_fence(const int nt) {
#if defined(__AVX__)
    if (nt) _mm_sfence();
#else
    (void)nt;
#endif
}

/* the block d from entries 0 .. nc-1 of the rows x + l * xs; lanes nl .. MC_W-1 repeat row nl-1 */
MC_INLINE void mc_load(real *restrict d, const real *restrict x, const int64_t xs, const int nc, const int nl) {
#if MC_TILES
    if (nl == MC_W) {
        const int n4 = nc & ~3;
        for (int l = 0; l < MC_W; l += 4) {
            for (int c = 0; c < n4; c += 4) mc_tile(x + l * xs + c, xs, d + c * MC_W + l, MC_W);
            const int n2 = nc - n4 >= 2 ? n4 + 2 : n4;
            if (n2 > n4) mc_tile42(x + l * xs + n4, xs, d + n4 * MC_W + l, MC_W);
            for (int c = n2; c < nc; ++c)
                for (int k = 0; k < 4; ++k) d[c * MC_W + l + k] = x[(l + k) * xs + c];
        }
        return;
    }
#endif
    for (int l = 0; l < MC_W; ++l) {
        const real *r = x + (int64_t)(l < nl ? l : nl - 1) * xs;
        for (int c = 0; c < nc; ++c) d[c * MC_W + l] = r[c];
    }
}

/* baked parameters (the module's BAKED, see modelc.runtime.cbuild): the runtime builds a library per
   set of their values with -DMC_BAKED_FLAGS={0, 1, ...} (one flag per parameter column) and
   -DMC_BAKED_VALUES={...}; every read of parameter column c is MC_P(c, the lane's value), so a baked
   column is a compile-time constant the C compiler folds (a constant integer exponent becomes
   multiplications in mc_pow). Without them, MC_P(c, x) is x. */
#ifdef MC_BAKED_FLAGS
static const signed char mc_baked_flag[NP] = MC_BAKED_FLAGS;
static const real mc_baked_value[NP] = MC_BAKED_VALUES;
#define MC_P(c, x) (mc_baked_flag[c] ? mc_baked_value[c] : (x))
#else
#define MC_P(c, x) (x)
#endif

/* where a call's data lies: input variable v of point i at x[v] + i * xs[v] (components contiguous);
   parameters at p + i * ps (ps = 0: shared); outputs at y + i * ys; the Jacobian at j + i * js;
   status (implicit models) at conv[i] (1/0), iters[i], rnorm[i] */
typedef struct {
    const real *x[NIN];
    int64_t xs[NIN];
    const real *p;
    int64_t ps;
    real *y;
    int64_t ys;
    real *j;
    int64_t js;
    uint8_t *conv;
    int32_t *iters;
    real *rnorm;
    real rtol, atol;  /* the call's Newton options; negative: each solve's spec value */
    int maxit;
    int flags;  /* MC_STREAM: write full blocks with streaming stores (a call moving more than half the cache) */
} mc_args;
#define MC_STREAM 1

/* an entry point's args: NIN input pointers, NIN row strides, p, ps, y, ys, j, js, conv, iters, rnorm,
   then the Newton options: rtol and atol (the bits of a double), max_iter; then the flags */
static void mc_unpack(const int64_t *restrict args, mc_args *restrict a) {
    for (int v = 0; v < NIN; ++v) {
        a->x[v] = (const real *)(intptr_t)args[v];
        a->xs[v] = args[NIN + v];
    }
    const int64_t *r = args + 2 * NIN;
    a->p = (const real *)(intptr_t)r[0];
    a->ps = r[1];
    a->y = (real *)(intptr_t)r[2];
    a->ys = r[3];
    a->j = (real *)(intptr_t)r[4];
    a->js = r[5];
    a->conv = (uint8_t *)(intptr_t)r[6];
    a->iters = (int32_t *)(intptr_t)r[7];
    a->rnorm = (real *)(intptr_t)r[8];
    double tol;
    memcpy(&tol, &r[9], 8);
    a->rtol = (real)tol;
    memcpy(&tol, &r[10], 8);
    a->atol = (real)tol;
    a->maxit = (int)r[11];
    a->flags = (int)r[12];
}

/* the next block's input rows and per-point parameters, fetched into the cache while this block
   computes, in a call that streams its outputs (MC_STREAM: its data come from memory, not the
   cache). Without it a block's transposing loads (mc_load) waited on memory: the hardware
   prefetcher runs a few lines ahead of a stream, and a block of 16 points reads 12 lines of each
   6-component input at once. Measured on j2_voce_af's tangent call at 1e5 points with its inputs
   coming from memory (benchmarks/c_ab.py --sets 4): 13% less time; in cache the flag is off
   (benchmarks/results/20261129T034900Z-cpu-input-prefetch.md). ``nc`` components a row, rows ``xs``
   apart: rows one after the other, every line of the block's rows; rows apart (a column view of a
   wider array), every line of each row; one row for all points (xs 0), nothing. Past the end of an
   array it is harmless: a prefetch never faults. */
MC_INLINE void mc_prefetch_rows(const real *restrict x, const int64_t xs, const int nc) {
    const int64_t row = nc * (int64_t)sizeof(real);
    if (xs == 0) return;
    const int rows = xs == nc ? 1 : MC_W;  /* rows one after the other: one span of MC_W rows */
    const int64_t span = xs == nc ? MC_W * row : row;
    for (int l = 0; l < rows; ++l) {
        const char *r = (const char *)(x + l * xs);
        for (int64_t o = 0; o < span; o += 64) __builtin_prefetch(r + o, 0, 3);
        __builtin_prefetch(r + span - 1, 0, 3);  /* the last line, when the span starts past a line's start */
    }
}

/* in a call that streams its outputs, the last line of rows i - MC_W .. i - 1 of an output array (the
   block after this one; one it shares with the block after that where rows do not end on a line)
   fetched for writing while this block computes: the page walks of 4 KiB pages and the read for
   ownership of a shared line are done before that block's stores come. Measured on an AMD EPYC VM
   (2026-11-29, 1e5 points, 1 thread, docs/performance.md): tangent calls into 4 KiB pages
   1.01-1.28x faster, level with huge pages; into huge pages 0.99-1.07x (values 0.97-1.03x); a C
   host's malloc'd (16-byte aligned) outputs 1.1-2.6x. */
MC_INLINE void mc_prefetch_out(const real *restrict y, const int64_t ys, const int64_t i) {
    if (y && ys) __builtin_prefetch(y + i * ys - 1, 1, 3);  /* never faults, past the end too */
}

/* a block's status (implicit models): converged flags, iteration counts, residual norms. In a call
   that streams its outputs, a full block's counts and norms go out as whole cache lines with
   streaming stores too, and the flags (a byte a point: a line holds the flags of several blocks, so
   regular stores) have their line fetched for writing a few blocks ahead. Written point by point
   with regular stores (each line read for ownership when the block gets there) the three arrays
   cost j2_voce_af's tangent call 4-7 of 44-46 ns a point with its inputs coming from memory; so
   written, the call is 3-4% faster there (j2_voce_af, perzyna_iso), and j2_voce_af_coupled 8%
   (benchmarks/results/20261129T020232Z-cpu-status-stores.md). */
MC_INLINE void mc_store_status(const mc_args *restrict a, const int64_t i0, const int nl, const int *restrict ok,
                               const int *restrict it, const real *restrict rn) {
    uint8_t *c = a->conv + i0;
    int32_t *k = a->iters + i0;
    if (a->flags & MC_STREAM) __builtin_prefetch(c + 256, 1, 0);  /* never faults, past the end too */
    for (int l = 0; l < nl; ++l) c[l] = (uint8_t)ok[l];
#if defined(__AVX__)
    if ((a->flags & MC_STREAM) && nl == MC_W) {
        mc_stream(a->rnorm + i0, rn, MC_W);
        int l = 0;
        for (; l < MC_W && ((uintptr_t)(k + l) & 63); ++l) k[l] = it[l];
        for (; l + 16 <= MC_W; l += 16) {  /* whole lines of 16 counts */
            _mm256_stream_si256((__m256i *)(k + l), _mm256_loadu_si256((const __m256i *)(it + l)));
            _mm256_stream_si256((__m256i *)(k + l + 8), _mm256_loadu_si256((const __m256i *)(it + l + 8)));
        }
        for (; l < MC_W; ++l) k[l] = it[l];
        return;
    }
#endif
    for (int l = 0; l < nl; ++l) {
        k[l] = it[l];
        a->rnorm[i0 + l] = rn[l];
    }
}

#endif /* MODELC_KERNEL_H */
