/* Internal: branch-free elementary functions that the compiler vectorises
 * inside loops, shared by the softmax, the activations and the additive
 * attention score (with an eight-lane form, tfm__v8, where the compiler
 * does not vectorise by itself), the test for non-finite values, and
 * TFM_CLONES, which compiles a function for AVX2 and for the baseline (the
 * loader picks the one the processor runs). */
#ifndef TFM_SRC_VMATH_H
#define TFM_SRC_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* e^x for x <= 0: a Cephes-style polynomial (range reduction by ln 2,
 * degree-6 polynomial, scaling by 2^n through the exponent bits).  Relative
 * error below 2e-7; inputs below -87.3 (e^-87.3 is about 1e-38) give
 * exactly 0, so -inf gives exactly 0; NaN gives NaN. */
static inline float tfm__exp_nonpositive(float x)
{
    const float lo = -87.3365447f;
    float xc = x >= lo ? x : lo; /* NaN becomes lo: no NaN reaches the int
                                  * conversion below */
    float n = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r2 + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float e = x >= lo ? y * scale : 0.0f;
    return x != x ? x : e;
}

/* Eight floats as one value (GCC's vector extension: an AVX register in
 * TFM_CLONES' AVX2 clone, two SSE registers in the baseline one), for row
 * loops that the compiler does not vectorise by itself: a NaN-skipping
 * maximum, and the exponential below, whose lanes must not spill.  The
 * functions are always inlined (into a TFM_CLONES function they take its
 * target; src/CMakeLists.txt silences GCC's note that a 32-byte vector is
 * passed differently without AVX: no such call is made). */
typedef float tfm__v8 __attribute__((vector_size(32)));
#define TFM_ALWAYS_INLINE __attribute__((always_inline))
typedef int32_t tfm__v8i __attribute__((vector_size(32)));

static inline TFM_ALWAYS_INLINE tfm__v8 tfm__v8_splat(float x)
{
    return (tfm__v8){ x, x, x, x, x, x, x, x };
}

static inline TFM_ALWAYS_INLINE tfm__v8 tfm__v8_load(const float *p)
{
    tfm__v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline TFM_ALWAYS_INLINE void tfm__v8_store(float *p, tfm__v8 v)
{
    memcpy(p, &v, sizeof v);
}

/* mask ? a : b lane by lane (mask lanes all ones or all zeros). */
static inline TFM_ALWAYS_INLINE tfm__v8 tfm__v8_select(tfm__v8i mask, tfm__v8 a, tfm__v8 b)
{
    return (tfm__v8)(((tfm__v8i)a & mask) | ((tfm__v8i)b & ~mask));
}

/* tfm__exp_nonpositive on eight lanes, bit for bit: the same operations in
 * the same order (floor through truncation and a correction, exact for
 * the clamped range), so a row's values do not depend on which lanes
 * computed them. */
static inline TFM_ALWAYS_INLINE tfm__v8 tfm__v8_exp_nonpositive(tfm__v8 x)
{
    const tfm__v8 lo = tfm__v8_splat(-87.3365447f);
    const tfm__v8i in = x >= lo; /* false for NaN */
    const tfm__v8 xc = tfm__v8_select(in, x, lo);
    const tfm__v8 t = xc * 1.44269504088896341f + 0.5f;
    tfm__v8i ni = __builtin_convertvector(t, tfm__v8i);
    ni += (tfm__v8i)(__builtin_convertvector(ni, tfm__v8) > t); /* -1 */
    const tfm__v8 n = __builtin_convertvector(ni, tfm__v8);
    const tfm__v8 r = xc - n * 0.693359375f - n * -2.12194440e-4f;
    const tfm__v8 r2 = r * r;
    tfm__v8 p = tfm__v8_splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const tfm__v8 y = p * r2 + r + 1.0f;
    const tfm__v8 scale = (tfm__v8)((ni + 127) << 23);
    const tfm__v8 e = tfm__v8_select(in, y * scale, tfm__v8_splat(0.0f));
    return tfm__v8_select(x != x, x, e);
}

/* 1 when x[0..n-1] holds a NaN or an infinity (all exponent bits set),
 * else 0: integer tests the compiler vectorises.  The attention kernel's
 * scan of value rows and the KV cache's check of the rows it is given. */
static inline int tfm__has_nonfinite(const float *x, int64_t n)
{
    uint32_t bad = 0;
    for (int64_t c = 0; c < n; c++) {
        uint32_t u;
        memcpy(&u, x + c, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return (int)bad;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TFM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TFM_CLONES
#endif

/* tanh(x), branch-free: x - x^3/3 + 2x^5/15 - 17x^7/315 below |x| = 0.1
 * (truncation error under 6e-9 relative there), otherwise
 * sign(x) (1 - t) / (1 + t) with t = e^(-2|x|).  Measured against double
 * tanh on [-20, 20] in steps of 1e-5: relative error at most 2.7e-7,
 * absolute at most 9e-8.  +-inf give +-1, NaN gives NaN. */
static inline float tfm__tanh(float x)
{
    const float a = fabsf(x);
    const float x2 = x * x;
    const float small =
        x * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f +
                                                x2 * (-17.0f / 315.0f))));
    const float t = tfm__exp_nonpositive(-2.0f * a);
    const float large = copysignf((1.0f - t) / (1.0f + t), x);
    return a < 0.1f ? small : large;
}

/* Phi(x) = erfc(-x / sqrt 2) / 2, the standard normal CDF, branch-free.
 * erfc(a) for a = |x| / sqrt 2 >= 0 by the Chebyshev fit of Press et al.,
 * Numerical Recipes (2nd ed., sec. 6.2, erfcc): t = 1 / (1 + a / 2),
 * erfc(a) = t exp(-a^2 + P(t)), P of degree 9 (relative error below
 * 1.2e-7 for every a >= 0); exp(-a^2) as exp(-h^2) exp(-(a - h)(a + h))
 * with h = a cut to 12 significant bits (h^2 exact), so the large
 * argument loses nothing to rounding; erfc(-a) = 2 - erfc(a).  Measured
 * against double erfc of the same float argument -x / sqrt 2 on [-14, 14]
 * in steps of 1e-5: relative error at most 4.5e-7 where Phi > 1e-37
 * (tests/test_vmath.c).  Against Phi of the exact x the float rounding of
 * that argument dominates for large negative x (up to 1e-5 near -11, as
 * for glibc's erfcf and PyTorch's float GELU).  NaN gives NaN.
 * x Phi(x) is the exact GELU (Hendrycks & Gimpel 2016). */
static inline float tfm__normal_cdf(float x)
{
    const float z = x * -0.70710678118654752f;
    float a = fabsf(z);
    a = a < 10.0f ? a : 10.0f; /* erfc(10) ~ 2e-45; NaN becomes 10 */
    const float t = 1.0f / (1.0f + 0.5f * a);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    uint32_t bits;
    memcpy(&bits, &a, sizeof bits);
    bits &= 0xFFFFF000u;
    float h;
    memcpy(&h, &bits, sizeof h);
    const float rest = p - (a - h) * (a + h);
    /* rest <= 3e-8 (P(1) rounds to about that): exp of it stays within
     * the polynomial's range. */
    const float e = tfm__exp_nonpositive(-h * h) *
                    tfm__exp_nonpositive(rest < 0.0f ? rest : 0.0f);
    const float half_erfc = 0.5f * t * e;
    const float cdf = z >= 0.0f ? half_erfc : 1.0f - half_erfc;
    return x != x ? x : cdf;
}

#endif
