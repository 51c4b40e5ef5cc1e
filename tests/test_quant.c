/*
 * The storage types of weights (src/kernels/quant.h), white-box: this
 * program is built from the kernels' sources (tests/CMakeLists.txt), not
 * against the shared library, whose internal names are hidden.
 *
 *   - Q8_0 and Q4_0 blocks worked by hand from llama.cpp's reference
 *     (ggml-quants.c: quantize_row_q8_0_ref, quantize_row_q4_0_ref), the
 *     derivation next to each;
 *   - NaN and infinities refused, the output left as it was;
 *   - F16 / BF16 rounding ties, and their widening against the scalar
 *     conversions of base/float16.c on all 65,536 bit patterns;
 *   - widen(quantize(x)) against the values decoded here from the bytes
 *     with ldexp (an independent binary16 decoder), and within the
 *     quantisation's error bound of x;
 *   - the AVX-512, AVX2 and baseline widening paths give the same bits;
 *   - tfm__linear_stored equal, bit for bit, to tfm__sgemm on the widened
 *     matrix (bias preloaded, beta 1, as kernels/linear.c's tfm__linear),
 *     for n = 1, 3, 64 and odd output counts, several panels included.
 * gguf-py's numpy quantisers are compared on random rows by
 * tests/quant_reference.py (ctest quant_gguf_reference).
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/gemm.h"
#include "kernels/quant.h"

void tfm_testing_fail_allocation(long k); /* base/alloc.c */

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* binary16 decoded with ldexp, independently of base/float16.c. */
static double half_value(uint16_t h)
{
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31)
        return m ? NAN : s * INFINITY;
    if (e == 0)
        return s * ldexp(m, -24);
    return s * ldexp(1024 + m, e - 25);
}

static uint16_t le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* xorshift64*: deterministic data */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* roughly normal: sum of four uniforms in [-1, 1), times scale */
static float next_value(float scale)
{
    double s = 0.0;
    for (int i = 0; i < 4; i++)
        s += (double)(next_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    return (float)(s * scale);
}

/* ---- hand-worked blocks ------------------------------------------------ */

static void test_q8_0_zero_block(void **state)
{
    (void)state;
    /* amax = 0, d = 0 / 127 = +0 (fp16 0x0000), id = 0, q = roundf(0) = 0;
     * -0.0 inputs too: fabsf(-0.0) = 0 leaves amax 0 and d = +0, and
     * roundf(-0.0 * 0) = -0.0 converts to the integer 0. */
    float x[32];
    unsigned char b[34], want[34] = { 0 };
    for (int i = 0; i < 32; i++)
        x[i] = i % 2 ? -0.0f : 0.0f;
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q8_0, x, 32, b), TFM_OK);
    assert_memory_equal(b, want, 34);
    float w[32];
    tfm__widen_row(TFM_DTYPE_Q8_0, b, 32, w);
    for (int i = 0; i < 32; i++)
        assert_int_equal(float_bits(w[i]), 0); /* +0 * 0 = +0 */
}

static void test_q4_0_zero_block(void **state)
{
    (void)state;
    /* Q4_0 keeps m = 0.0f (its initial value) when no |x| exceeds 0, so
     * d = 0.0f / -8 = -0.0: fp16 0x8000, for +0.0 and -0.0 inputs alike.
     * (gguf-py takes m = x[argmax |x|] = x[0] instead, which gives +0 for
     * a block starting with -0.0: ggml's C is the reference here.)
     * id = 0, q = trunc(0 + 8.5) = 8 in both nibbles: bytes 0x88.
     * Widened: (8 - 8) * -0.0 = -0.0. */
    float x[32];
    unsigned char b[18], want[18];
    for (int i = 0; i < 32; i++)
        x[i] = i < 16 ? -0.0f : 0.0f;
    want[0] = 0x00;
    want[1] = 0x80;
    memset(want + 2, 0x88, 16);
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q4_0, x, 32, b), TFM_OK);
    assert_memory_equal(b, want, 18);
    float w[32];
    tfm__widen_row(TFM_DTYPE_Q4_0, b, 32, w);
    for (int i = 0; i < 32; i++)
        assert_int_equal(float_bits(w[i]), 0x80000000u);
}

static void test_q8_0_ties(void **state)
{
    (void)state;
    /* amax = 127 (x[31]), so d = 127 / 127 = 1 exactly (fp16 0x3c00) and
     * id = 1: q = roundf(x), halves away from zero (not to even):
     * 2.5 -> 3, -2.5 -> -3, 0.5 -> 1, -0.5 -> -1, 1.5 -> 2, 126.5 -> 127,
     * -126.5 -> -127, 3.4999998 -> 3, 0.49999997 -> 0; the rest are 0. */
    float x[32] = { 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f,
                    3.4999998f, 0.49999997f };
    x[31] = 127.0f;
    const int8_t q[32] = { 3, -3, 1, -1, 2, 127, -127, 3, 0,
                           [31] = 127 };
    unsigned char b[34];
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q8_0, x, 32, b), TFM_OK);
    assert_int_equal(le16(b), 0x3c00);
    assert_memory_equal(b + 2, q, 32);
    float w[32];
    tfm__widen_row(TFM_DTYPE_Q8_0, b, 32, w);
    for (int i = 0; i < 32; i++)
        assert_true(w[i] == (float)q[i]);
}

static void test_q4_0_ties_and_clamp(void **state)
{
    (void)state;
    /* m = -8 (x[0], the first of largest magnitude: x[1] = 8 ties it in
     * magnitude but comes later), d = -8 / -8 = 1 (0x3c00), id = 1;
     * q = min(15, trunc(x + 8.5)):
     *   -8 -> 0.5 -> 0         8 -> 16.5 -> 16 -> clamped 15
     *   7 -> 15.5 -> 15      6.5 -> 15                -0.5 -> 8
     *   0.5 -> 9            -1.5 -> 7               -7.9 -> 0.6 -> 0
     *   the rest 0 -> 8.5 -> 8.
     * Widened: (q - 8) * 1, so 8 comes back as 7. */
    float x[32] = { -8.0f, 8.0f, 7.0f, 6.5f, -0.5f, 0.5f, -1.5f, -7.9f };
    const int q[32] = { 0, 15, 15, 15, 8, 9, 7, 0, 8, 8, 8, 8, 8, 8, 8, 8,
                        8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8 };
    unsigned char b[18];
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q4_0, x, 32, b), TFM_OK);
    assert_int_equal(le16(b), 0x3c00);
    for (int j = 0; j < 16; j++)
        assert_int_equal(b[2 + j], q[j] | q[j + 16] << 4);
    float w[32];
    tfm__widen_row(TFM_DTYPE_Q4_0, b, 32, w);
    for (int i = 0; i < 32; i++)
        assert_true(w[i] == (float)(q[i] - 8));
    /* m = +8: d = -1 (0xbc00), id = -1, so 8 -> -8 + 8.5 -> 0 and widens
     * back to (0 - 8) * -1 = 8; -8 -> 16.5 -> 15 -> (15 - 8) * -1 = -7. */
    float y[32] = { 8.0f, -8.0f };
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q4_0, y, 32, b), TFM_OK);
    assert_int_equal(le16(b), 0xbc00);
    assert_int_equal(b[2], 0x80); /* q0 = 0, q16 = 0 * -1 + 8.5 -> 8 */
    assert_int_equal(b[3], 0x8f);
    tfm__widen_row(TFM_DTYPE_Q4_0, b, 32, w);
    assert_true(w[0] == 8.0f && w[1] == -7.0f && w[2] == 0.0f);
}

static void test_equal_negatives(void **state)
{
    (void)state;
    /* All -3.  Q8_0: d = 3 / 127 = 0.0236220..., in fp16 2^-6 * 1.51181
     * -> mantissa 0.51181 * 1024 = 524.09 -> 524: 0x2400 | 0x20c = 0x260c,
     * i.e. 1548 * 2^-16.  id = 1 / fl(3/127) = 42.333..; -3 * id rounds
     * to -127 (0x81).  Widened: -127 * 1548 * 2^-16 = -196596 * 2^-16 =
     * -2.99981689453125, exact in float32. */
    float x[32];
    for (int i = 0; i < 32; i++)
        x[i] = -3.0f;
    unsigned char b[34];
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q8_0, x, 32, b), TFM_OK);
    assert_int_equal(le16(b), 0x260c);
    for (int i = 0; i < 32; i++)
        assert_int_equal(b[2 + i], 0x81);
    float w[32];
    tfm__widen_row(TFM_DTYPE_Q8_0, b, 32, w);
    for (int i = 0; i < 32; i++)
        assert_true(w[i] == -2.99981689453125f);
    /* Q4_0: m = -3, d = -3 / -8 = 0.375 = 1.5 * 2^-2 (0x3600), id =
     * fl(1 / 0.375) = 2.6666667461; -3 * id = -8.00000024 rounds to -8.0
     * (floats near 8 are 9.5e-7 apart); -8 + 8.5 = 0.5 -> q = 0: bytes 0.
     * Widened: (0 - 8) * 0.375 = -3 exactly. */
    unsigned char c[18];
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q4_0, x, 32, c), TFM_OK);
    assert_int_equal(le16(c), 0x3600);
    for (int j = 0; j < 16; j++)
        assert_int_equal(c[2 + j], 0);
    tfm__widen_row(TFM_DTYPE_Q4_0, c, 32, w);
    for (int i = 0; i < 32; i++)
        assert_true(w[i] == -3.0f);
}

static void test_huge_value(void **state)
{
    (void)state;
    /* 1e30 among ones.  Q8_0: d = 1e30 / 127 = 7.9e27 overflows binary16
     * (largest finite 65504): ggml would store +inf (0x7c00) and widen
     * the block to inf and NaN; we refuse it (TFM_ERR_OVERFLOW).  Q4_0:
     * d = 1e30 / -8 likewise.  The largest block that fits: amax = 65504
     * * 127 = 8319008 gives d = 65504 exactly (0x7bff), q = 127 for it. */
    float x[32];
    for (int i = 0; i < 32; i++)
        x[i] = 1.0f;
    x[0] = 1e30f;
    unsigned char b[34], c[18];
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q8_0, x, 32, b),
                     TFM_ERR_OVERFLOW);
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q4_0, x, 32, c),
                     TFM_ERR_OVERFLOW);
    x[0] = 8319008.0f;
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q8_0, x, 32, b), TFM_OK);
    assert_int_equal(le16(b), 0x7bff);
    assert_int_equal(b[2], 127);
    float w[32];
    tfm__widen_row(TFM_DTYPE_Q8_0, b, 32, w);
    assert_true(w[0] == 8319008.0f);
    /* 9e6 / 127 = 70866 > 65504 (and rounds past 65520): refused. */
    x[0] = 9e6f;
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q8_0, x, 32, b),
                     TFM_ERR_OVERFLOW);
}

static void test_non_finite_refused(void **state)
{
    (void)state;
    const int types[] = { TFM_DTYPE_F32, TFM_DTYPE_F16, TFM_DTYPE_BF16,
                          TFM_DTYPE_Q8_0, TFM_DTYPE_Q4_0 };
    const float bad[] = { NAN, -NAN, INFINITY, -INFINITY };
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            float x[64];
            for (int i = 0; i < 64; i++)
                x[i] = (float)i * 0.25f;
            x[37] = bad[k];
            unsigned char b[256], before[256];
            memset(b, 0xa5, sizeof b);
            memcpy(before, b, sizeof b);
            assert_int_equal(tfm__quantize_row(types[t], x, 64, b),
                             TFM_ERR_NON_FINITE);
            assert_memory_equal(b, before, sizeof b);
        }
}

static void test_sizes_and_arguments(void **state)
{
    (void)state;
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_F32, 10), 40);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_F16, 10), 20);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_BF16, 10), 20);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_Q8_0, 64), 68);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_Q4_0, 64), 36);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_Q8_0, 48), -1);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_Q4_0, 31), -1);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_F64, 4), -1);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_F32, -1), -1);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_F32, INT64_MAX / 2), -1);
    assert_int_equal(tfm__dtype_row_bytes(TFM_DTYPE_Q4_0, 0), 0);
    assert_true(tfm__dtype_is_weight(TFM_DTYPE_Q4_0));
    assert_true(tfm__dtype_is_weight(TFM_DTYPE_F32));
    assert_false(tfm__dtype_is_weight(TFM_DTYPE_I8));
    assert_false(tfm__dtype_is_weight(-1));
    float x[32] = { 0 };
    unsigned char b[64];
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q8_0, x, 16, b),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_I8, x, 32, b),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_F16, NULL, 32, b),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_F16, x, 0, NULL), TFM_OK);
}

/* ---- F16 / BF16 -------------------------------------------------------- */

static void test_half_ties(void **state)
{
    (void)state;
    /* binary16 has 10 mantissa bits: 1 + 2^-11 lies half-way between 1
     * (even) and 1 + 2^-10: 0x3c00; 1 + 3 * 2^-11 half-way between
     * 1 + 2^-10 (odd) and 1 + 2^-9: 0x3c02.  65504 is the largest half
     * (0x7bff); 65519 rounds down to it, 65520 (half-way to 2^16) to even,
     * i.e. infinity.  Subnormals step by 2^-24: 2^-25 ties to 0, 3 * 2^-25
     * to 2 * 2^-24 (0x0002), -3 * 2^-25 to 0x8002. */
    const float x[] = { 1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 65519.0f,
                        0x1p-25f, 0x3p-25f, -0x3p-25f };
    const uint16_t want[] = { 0x3c00, 0x3c02, 0x7bff, 0x0000, 0x0002,
                              0x8002 };
    unsigned char b[14];
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_F16, x, 6, b), TFM_OK);
    for (int i = 0; i < 6; i++)
        assert_int_equal(le16(b + 2 * i), want[i]);
    /* 65520 would round to infinity: refused (TFM_ERR_OVERFLOW). */
    const float big[] = { 1.0f, -65520.0f };
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_F16, big, 2, b),
                     TFM_ERR_OVERFLOW);
    /* bfloat16 keeps 7 mantissa bits: 1 + 2^-8 ties to 1 (0x3f80),
     * 1 + 3 * 2^-8 to 1 + 2^-6 (0x3f82), -(1 + 3 * 2^-8) to 0xbf82. */
    const float y[] = { 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -1.0f - 0x3p-8f };
    const uint16_t bwant[] = { 0x3f80, 0x3f82, 0xbf82 };
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_BF16, y, 3, b), TFM_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(le16(b + 2 * i), bwant[i]);
}

/* All 65,536 patterns widened on every path: binary16 against the ldexp
 * decoder (and NaN payloads kept: top mantissa bits), bfloat16 as the
 * upper half. */
static void test_half_widen_all_patterns(void **state)
{
    (void)state;
    enum { N = 65536 };
    unsigned char *b = malloc(2 * N);
    float *w = malloc(sizeof(float) * N);
    assert_non_null(b);
    assert_non_null(w);
    for (int i = 0; i < N; i++) {
        b[2 * i] = (unsigned char)(i & 0xff);
        b[2 * i + 1] = (unsigned char)(i >> 8);
    }
    for (int path = 0; path < TFM__WIDEN_PATHS; path++) {
        const int before = tfm__widen_use_path(path);
        if (before < 0)
            continue;
        tfm__widen_row(TFM_DTYPE_F16, b, N, w);
        for (int i = 0; i < N; i++) {
            const double v = half_value((uint16_t)i);
            if (isnan(v))
                assert_int_equal(float_bits(w[i]),
                                 (uint32_t)(i & 0x8000) << 16 | 0x7f800000u |
                                     (uint32_t)(i & 0x3ff) << 13);
            else
                assert_true((double)w[i] == v &&
                            !signbit(w[i]) == !signbit(v));
        }
        tfm__widen_row(TFM_DTYPE_BF16, b, N, w);
        for (int i = 0; i < N; i++)
            assert_int_equal(float_bits(w[i]), (uint32_t)i << 16);
        /* odd lengths: the scalar tail */
        tfm__widen_row(TFM_DTYPE_F16, b + 2 * 0x3c00, 7, w);
        for (int i = 0; i < 7; i++)
            assert_true((double)w[i] == half_value((uint16_t)(0x3c00 + i)));
        tfm__widen_use_path(before);
    }
    free(b);
    free(w);
}

/* ---- widen(quantize(x)) ------------------------------------------------ */

static void test_roundtrip(void **state)
{
    (void)state;
    enum { N = 32 * 40 };
    float *x = malloc(sizeof(float) * N), *w = malloc(sizeof(float) * N);
    unsigned char *b = malloc(4 * N);
    assert_true(x && w && b);
    for (int i = 0; i < N; i++) /* blocks at scales 1e-6 .. 1e3 */
        x[i] = next_value(powf(10.0f, (float)(i / 32 % 10) - 6.0f));
    /* Q8_0 */
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q8_0, x, N, b), TFM_OK);
    tfm__widen_row(TFM_DTYPE_Q8_0, b, N, w);
    for (int k = 0; k < N / 32; k++) {
        const unsigned char *blk = b + 34 * k;
        const double d = half_value(le16(blk));
        double amax = 0.0;
        for (int j = 0; j < 32; j++)
            amax = fmax(amax, fabs(x[32 * k + j]));
        for (int j = 0; j < 32; j++) {
            const double v = d * (int8_t)blk[2 + j];
            assert_true((double)w[32 * k + j] == v);
            /* |x - q d'| <= d / 2 + 127 |d - d'|, where the binary16
             * rounding |d - d'| <= max(d 2^-11, 2^-25) (subnormal d) */
            assert_true(fabs(x[32 * k + j] - v) <=
                        amax / 127 * 0.5 * 1.0001 +
                            127 * fmax(amax / 127 * 0x1p-11, 0x1p-25));
        }
    }
    /* Q4_0: m[k], block k's first value of largest magnitude */
    float m[N / 32];
    for (int k = 0; k < N / 32; k++) {
        m[k] = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[32 * k + j]) > fabsf(m[k]))
                m[k] = x[32 * k + j];
    }
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_Q4_0, x, N, b), TFM_OK);
    tfm__widen_row(TFM_DTYPE_Q4_0, b, N, w);
    for (int k = 0; k < N / 32; k++) {
        const unsigned char *blk = b + 18 * k;
        const double d = half_value(le16(blk));
        double amax = 0.0;
        for (int j = 0; j < 32; j++)
            amax = fmax(amax, fabs(x[32 * k + j]));
        for (int j = 0; j < 32; j++) {
            const int q = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
            const double v = d * (q - 8);
            assert_true((double)w[32 * k + j] == v);
            /* |d| = amax / 8: within |d| / 2 plus 8 times the binary16
             * rounding of d, except where x / d > 7.5 (opposite in sign
             * to the extreme m, within amax / 16 of -m): q clamps at 15
             * and x - 7 d is below |d| */
            const double over = x[32 * k + j] * (-8.0 / m[k]);
            assert_true(fabs(x[32 * k + j] - v) <=
                        amax / 8 * (over < 7.5 ? 0.5 : 1.0) * 1.0001 +
                            8 * fmax(amax / 8 * 0x1p-11, 0x1p-25));
        }
    }
    /* F16 and BF16 within half an ulp of their format */
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_F16, x, N, b), TFM_OK);
    tfm__widen_row(TFM_DTYPE_F16, b, N, w);
    for (int i = 0; i < N; i++) {
        assert_true((double)w[i] == half_value(le16(b + 2 * i)));
        assert_true(fabs(w[i] - x[i]) <=
                    fmax(fabs(x[i]) * 0x1p-11, 0x1p-25));
    }
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_BF16, x, N, b), TFM_OK);
    tfm__widen_row(TFM_DTYPE_BF16, b, N, w);
    for (int i = 0; i < N; i++) {
        assert_int_equal(float_bits(w[i]), (uint32_t)le16(b + 2 * i) << 16);
        assert_true(fabs(w[i] - x[i]) <= fabs(x[i]) * 0x1p-8);
    }
    /* F32 is a copy */
    assert_int_equal(tfm__quantize_row(TFM_DTYPE_F32, x, N, b), TFM_OK);
    tfm__widen_row(TFM_DTYPE_F32, b, N, w);
    assert_memory_equal(w, x, sizeof(float) * N);
    free(x);
    free(w);
    free(b);
}

/* ---- the vector paths -------------------------------------------------- */

static void test_paths_identical(void **state)
{
    (void)state;
    enum { N = 32 * 300 + 0 };
    /* Room for N values of the widest stored type, F16 / BF16's 2 bytes
     * (a Q8_0 block is 34 / 32 bytes a value). */
    unsigned char *b = malloc(2 * N);
    float *ref = malloc(sizeof(float) * N), *w = malloc(sizeof(float) * N);
    assert_true(b && ref && w);
    for (int i = 0; i < 2 * N; i++)
        b[i] = (unsigned char)(next_u64() >> 56);
    /* the scales of the Q8_0 / Q4_0 blocks: every kind of binary16,
     * subnormal, zero, infinity and NaN included */
    const int types[] = { TFM_DTYPE_F16, TFM_DTYPE_BF16, TFM_DTYPE_Q8_0,
                          TFM_DTYPE_Q4_0 };
    const int lengths[] = { N, N - 32, 32, 64 };
    printf("widening paths run here:");
    for (int p = 0; p < TFM__WIDEN_PATHS; p++)
        if (tfm__widen_path_supported(p))
            printf(" %s", p == 0 ? "baseline" : p == 1 ? "AVX2" : "AVX-512");
    printf("\n");
    for (size_t t = 0; t < 4; t++)
        for (size_t l = 0; l < 4; l++) {
            const int n = lengths[l] - (types[t] < TFM_DTYPE_Q8_0 ? 5 : 0);
            const int before = tfm__widen_use_path(TFM__WIDEN_BASE);
            tfm__widen_row(types[t], b, n, ref);
            for (int p = 1; p < TFM__WIDEN_PATHS; p++) {
                if (tfm__widen_use_path(p) < 0)
                    continue;
                memset(w, 0, sizeof(float) * N);
                tfm__widen_row(types[t], b, n, w);
                assert_memory_equal(w, ref, sizeof(float) * (size_t)n);
            }
            tfm__widen_use_path(before);
        }
    free(b);
    free(ref);
    free(w);
}

/* ---- tfm__linear_stored ------------------------------------------------- */

typedef struct product_case {
    int64_t n, in, out;
} product_case;

/* y = x W^T + bias with W stored as dtype.  exact: bit for bit equal to
 * tfm__sgemm on the widened W (bias preloaded, beta 1), as a one-row
 * product must be (sgemv sums each output over the inputs alone, so
 * splitting the outputs into panels changes no bit).  Always: within
 * 1e-5 of sum |x w| + |b| of the float64 product with the widened W.
 * Returns 1 when y's bits equal the whole-matrix sgemm's. */
static int check_product(int dtype, product_case c, int with_bias, int exact)
{
    const int64_t ldx = c.in + 3, ldy = c.out + 5;
    const int64_t rb = tfm__dtype_row_bytes(dtype, c.in);
    float *x = malloc(sizeof(float) * (size_t)(c.n * ldx));
    float *wf = malloc(sizeof(float) * (size_t)(c.out * c.in));
    float *wide = malloc(sizeof(float) * (size_t)(c.out * c.in));
    unsigned char *ws = malloc((size_t)(rb * c.out));
    float *bias = malloc(sizeof(float) * (size_t)c.out);
    float *y = malloc(sizeof(float) * (size_t)(c.n * ldy));
    float *want = malloc(sizeof(float) * (size_t)(c.n * ldy));
    assert_true(x && wf && wide && ws && bias && y && want);
    for (int64_t i = 0; i < c.n * ldx; i++)
        x[i] = next_value(1.0f);
    for (int64_t i = 0; i < c.out * c.in; i++)
        wf[i] = next_value(0.05f);
    for (int64_t o = 0; o < c.out; o++)
        bias[o] = next_value(0.5f);
    for (int64_t o = 0; o < c.out; o++)
        assert_int_equal(tfm__quantize_row(dtype, wf + o * c.in, c.in,
                                           ws + o * rb), TFM_OK);
    tfm__widen_row(dtype, ws, c.out * c.in, wide);
    for (int64_t i = 0; i < c.n * ldy; i++)
        y[i] = want[i] = 12345.0f; /* gaps between rows must stay */
    float beta = 0.0f;
    if (with_bias) {
        for (int64_t i = 0; i < c.n; i++)
            memcpy(want + i * ldy, bias, sizeof(float) * (size_t)c.out);
        beta = 1.0f;
    }
    tfm__sgemm(0, 1, c.n, c.out, c.in, 1.0f, x, ldx, wide, c.in, beta, want,
               ldy);
    const tfm__wview view = { dtype, ws, c.out, c.in, rb };
    tfm__linear_stored(x, ldx, c.n, c.in, &view, with_bias ? bias : NULL,
                       c.out, y, ldy);
    int same = 1;
    for (int64_t i = 0; i < c.n; i++)
        for (int64_t o = 0; o < ldy; o++) {
            const float a = y[i * ldy + o], e = want[i * ldy + o];
            const int equal = float_bits(a) == float_bits(e);
            same &= equal;
            if ((exact || o >= c.out) && !equal)
                fail_msg("dtype %d n %lld in %lld out %lld bias %d: "
                         "y[%lld][%lld] = %.9g, sgemm %.9g", dtype,
                         (long long)c.n, (long long)c.in, (long long)c.out,
                         with_bias, (long long)i, (long long)o, a, e);
            if (o >= c.out)
                continue;
            double ref = with_bias ? bias[o] : 0.0;
            double mag = fabs(ref);
            for (int64_t k = 0; k < c.in; k++) {
                const double t = (double)x[i * ldx + k] * wide[o * c.in + k];
                ref += t;
                mag += fabs(t);
            }
            if (!(fabs(a - ref) <= 1e-5 * mag))
                fail_msg("dtype %d n %lld in %lld out %lld: y[%lld][%lld] = "
                         "%.9g, float64 %.9g", dtype, (long long)c.n,
                         (long long)c.in, (long long)c.out, (long long)i,
                         (long long)o, a, ref);
        }
    free(x);
    free(wf);
    free(wide);
    free(ws);
    free(bias);
    free(y);
    free(want);
    return same;
}

static const product_case product_cases[] = {
    { 1, 32, 1 },     { 1, 64, 7 },      { 3, 96, 17 },   { 64, 64, 33 },
    { 1, 1024, 100 }, /* 32-row panels: 4 panels, the last of 4 rows */
    { 3, 1024, 129 }, { 64, 256, 257 },  { 1, 768, 3072 / 4 + 3 },
    { 1, 4096, 41 },  /* the 16-row minimum panel: 3 panels */
    { 64, 2048, 67 }, { 3, 32, 1000 },   { 1, 96, 1001 },
    { 1, 3072, 769 }, { 1, 2048, 2047 },
};

/* n = 1: bits equal to the whole-matrix sgemv.  n > 1: within rounding
 * of the float64 product; OpenBLAS's sgemm may pick another kernel (or
 * summation order) for a panel's column count than for the whole
 * matrix's, so its bits may differ: counted, printed, not required. */
static void test_linear_stored(void **state)
{
    (void)state;
    const int types[] = { TFM_DTYPE_F32, TFM_DTYPE_F16, TFM_DTYPE_BF16,
                          TFM_DTYPE_Q8_0, TFM_DTYPE_Q4_0 };
    int many = 0, many_same = 0;
    for (size_t t = 0; t < 5; t++)
        for (size_t k = 0; k < sizeof product_cases / sizeof *product_cases;
             k++)
            for (int b = 0; b < 2; b++) {
                const int one = product_cases[k].n == 1;
                const int same =
                    check_product(types[t], product_cases[k], b, one);
                if (!one) {
                    many++;
                    many_same += same;
                }
            }
    printf("n > 1: %d of %d products bit-equal to the whole-matrix sgemm\n",
           many_same, many);
}

static void test_linear_stored_empty(void **state)
{
    (void)state;
    /* in = 0: y = bias (or 0); n = 0 or out = 0: nothing written */
    float y[6] = { 7, 7, 7, 7, 7, 7 };
    const float bias[3] = { 1, 2, 3 };
    const tfm__wview view = { TFM_DTYPE_Q8_0, (const unsigned char *)"", 3,
                              0, 0 };
    tfm__linear_stored(NULL, 0, 2, 0, &view, bias, 3, y, 3);
    for (int i = 0; i < 6; i++)
        assert_true(y[i] == bias[i % 3]);
    tfm__linear_stored(NULL, 0, 2, 0, &view, NULL, 3, y, 3);
    for (int i = 0; i < 6; i++)
        assert_true(y[i] == 0.0f);
    y[0] = 5.0f;
    tfm__linear_stored(NULL, 0, 0, 0, &view, bias, 3, y, 3);
    tfm__linear_stored(NULL, 0, 2, 0, &view, bias, 0, y, 3);
    assert_true(y[0] == 5.0f);
}

/* The workspace cannot grow: a fresh thread (an empty arena) whose first
 * allocation fails takes the stack panel; rows longer than it are summed
 * in chunks.  The values are those of the product, to rounding. */
static void *fallback_thread(void *arg)
{
    (void)arg;
    const product_case cases[] = { { 1, 1024, 37 }, { 3, 8192 + 64, 5 },
                                   { 2, 96, 300 } };
    for (size_t k = 0; k < 3; k++) {
        tfm_testing_fail_allocation(1);
        (void)check_product(TFM_DTYPE_Q8_0, cases[k], 1, 0);
        tfm_testing_fail_allocation(0);
    }
    return NULL;
}

static void test_linear_stored_stack_fallback(void **state)
{
    (void)state;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fallback_thread, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

int main(void)
{
    tfm__blas_single_thread(); /* as the library's thread pool does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_zero_block),
        cmocka_unit_test(test_q4_0_zero_block),
        cmocka_unit_test(test_q8_0_ties),
        cmocka_unit_test(test_q4_0_ties_and_clamp),
        cmocka_unit_test(test_equal_negatives),
        cmocka_unit_test(test_huge_value),
        cmocka_unit_test(test_non_finite_refused),
        cmocka_unit_test(test_sizes_and_arguments),
        cmocka_unit_test(test_half_ties),
        cmocka_unit_test(test_half_widen_all_patterns),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_paths_identical),
        cmocka_unit_test(test_linear_stored),
        cmocka_unit_test(test_linear_stored_empty),
        cmocka_unit_test(test_linear_stored_stack_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
