/* The storage types of weights (kernels/quant.h): row sizes, quantisation
 * as llama.cpp's reference (ggml-quants.c: quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref) and exact widening to float32.
 *
 * Widening has three paths, AVX-512, AVX2 and the x86-64 baseline (or the
 * plain C of other processors), compiled from the same always-inlined
 * bodies written with GCC's vector extensions and chosen once at run time
 * (__builtin_cpu_supports).  Every widened value is an exact bit
 * operation or one float32 product (or, for a subnormal binary16, one
 * exact subtraction): no sum, so no fused multiply-add can form, and the
 * paths give the same bits (tests/test_quant.c compares them).  The file
 * is compiled with -ffp-contract=off all the same: quantisation's
 * x / d + 8.5 must round twice, as in ggml. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/float16.h"
#include "kernels/quant.h"
#include "kernels/vmath.h"

#define Q8_0_BYTES 34 /* uint16 d + 32 int8 */
#define Q4_0_BYTES 18 /* uint16 d + 16 bytes of two 4-bit values */

int tfm__dtype_is_weight(int dtype)
{
    return dtype == TFM_DTYPE_F32 || dtype == TFM_DTYPE_F16 ||
           dtype == TFM_DTYPE_BF16 || dtype == TFM_DTYPE_Q8_0 ||
           dtype == TFM_DTYPE_Q4_0;
}

int64_t tfm__dtype_row_bytes(int dtype, int64_t n)
{
    if (n < 0)
        return -1;
    switch (dtype) {
    case TFM_DTYPE_F32:
        return n > INT64_MAX / 4 ? -1 : n * 4;
    case TFM_DTYPE_F16:
    case TFM_DTYPE_BF16:
        return n > INT64_MAX / 2 ? -1 : n * 2;
    case TFM_DTYPE_Q8_0:
        return n % TFM__QK ? -1 : n / TFM__QK * Q8_0_BYTES;
    case TFM_DTYPE_Q4_0:
        return n % TFM__QK ? -1 : n / TFM__QK * Q4_0_BYTES;
    default:
        return -1;
    }
}

/* ---- quantisation ------------------------------------------------------ */

static uint16_t float_to_f16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return tfm__f32_to_f16_bits(u);
}

static void put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v & 0xffu);
    p[1] = (unsigned char)(v >> 8);
}

static uint16_t get_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

/* One Q8_0 block: d = max|x| / 127 (float32), stored rounded to binary16;
 * id = 1 / d from the unrounded d (0 when d is 0); q = roundf(x * id),
 * halves away from zero. */
static void quantize_q8_0_block(const float *x, unsigned char *b)
{
    float amax = 0.0f;
    for (int j = 0; j < TFM__QK; j++) {
        const float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_u16(b, float_to_f16_bits(d));
    for (int j = 0; j < TFM__QK; j++) {
        const float scaled = x[j] * id;
        b[2 + j] = (unsigned char)(int8_t)roundf(scaled);
    }
}

/* One Q4_0 block: m = the first value of largest magnitude (0.0f when all
 * are zeros, whatever their signs), d = m / -8 stored rounded to binary16,
 * id = 1 / d unrounded (0 when d is 0); q = min(15, trunc(x * id + 8.5)),
 * the product and the sum each rounded to float32.  Value j goes to the
 * low nibble of byte j, value j + 16 to its high nibble. */
static void quantize_q4_0_block(const float *x, unsigned char *b)
{
    float amax = 0.0f, m = 0.0f;
    for (int j = 0; j < TFM__QK; j++) {
        const float a = fabsf(x[j]);
        if (amax < a) {
            amax = a;
            m = x[j];
        }
    }
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_u16(b, float_to_f16_bits(d));
    for (int j = 0; j < TFM__QK / 2; j++) {
        const float s0 = x[j] * id;
        const float s1 = x[j + TFM__QK / 2] * id;
        const float o0 = s0 + 8.5f;
        const float o1 = s1 + 8.5f;
        const int q0 = (int)o0 < 15 ? (int)o0 : 15; /* o >= 0.5: trunc */
        const int q1 = (int)o1 < 15 ? (int)o1 : 15;
        b[2 + j] = (unsigned char)(q0 | q1 << 4);
    }
}

tfm_status tfm__quantize_row(int dtype, const float *src, int64_t n,
                             void *dst)
{
    const int64_t bytes = tfm__dtype_row_bytes(dtype, n);
    if (bytes < 0 || (n > 0 && (!src || !dst)))
        return TFM_ERR_INVALID_ARGUMENT;
    if (tfm__has_nonfinite(src, n))
        return TFM_ERR_NON_FINITE;
    unsigned char *out = dst;
    switch (dtype) {
    case TFM_DTYPE_F32:
        if (n > 0)
            memcpy(dst, src, (size_t)bytes);
        break;
    case TFM_DTYPE_F16:
    case TFM_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, src + i, sizeof u);
            put_u16(out + 2 * i, dtype == TFM_DTYPE_F16
                                     ? tfm__f32_to_f16_bits(u)
                                     : tfm__f32_to_bf16_bits(u));
        }
        break;
    case TFM_DTYPE_Q8_0:
        for (int64_t i = 0; i < n / TFM__QK; i++)
            quantize_q8_0_block(src + i * TFM__QK, out + i * Q8_0_BYTES);
        break;
    default: /* TFM_DTYPE_Q4_0 */
        for (int64_t i = 0; i < n / TFM__QK; i++)
            quantize_q4_0_block(src + i * TFM__QK, out + i * Q4_0_BYTES);
        break;
    }
    /* A value (F16) or a block's scale (Q8_0, Q4_0) past binary16's range
     * became an infinity: the weight cannot be stored so. */
    const int64_t step = dtype == TFM_DTYPE_F16    ? 2
                         : dtype == TFM_DTYPE_Q8_0 ? Q8_0_BYTES
                         : dtype == TFM_DTYPE_Q4_0 ? Q4_0_BYTES
                                                   : 0;
    for (int64_t at = 0; step && at < bytes; at += step)
        if ((get_u16(out + at) & 0x7c00u) == 0x7c00u)
            return TFM_ERR_OVERFLOW;
    return TFM_OK;
}

/* ---- widening ---------------------------------------------------------- */

/* The baseline path: sixteen lanes of GCC's vector extensions (four SSE
 * registers).  The AVX2 and AVX-512 paths (kernels/quant_x86.h) do the
 * same operations with intrinsics, where GCC 12 would split the vector
 * extensions' byte conversions into scalar code. */
typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef int8_t v16b __attribute__((vector_size(16)));
typedef uint8_t v16ub __attribute__((vector_size(16)));

/* How far ahead of the bytes being widened to prefetch: 4 KiB.  Widening
 * a Q8_0 matrix streamed from memory into a 256 KiB panel (AVX-512, Zen 4,
 * one thread) ran at 7.8 G weights/s without prefetching, 11.6 with 1 KiB,
 * 15.7 with 4 KiB and no faster further ahead (8 to 128 KiB), against
 * 31 G weights/s from a source already in cache: the memory stream, not
 * the conversion, is what bounds it. */
#define PREFETCH_AHEAD 4096

#define INLINE static inline __attribute__((always_inline))

/* binary16 -> binary32 on bits: the exponent rebiased by 112, infinities
 * and NaN (exponent 31) by 224 (payload kept, as tfm__f16_to_f32_bits);
 * zeros and subnormals m * 2^-24 as the float 2^-14 (1 + m / 1024) minus
 * 2^-14, an exact subtraction. */
/* The same on one value, inline (a block's scale). */
INLINE float half_to_float(uint16_t h)
{
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    const uint32_t e = em & 0x0f800000u;
    em += 112u << 23;
    if (e == 0x0f800000u) {
        em += 112u << 23;
    } else if (e == 0u) {
        em += 1u << 23;
        float f;
        memcpy(&f, &em, sizeof f);
        f -= 6.103515625e-05f;
        memcpy(&em, &f, sizeof em);
    }
    em |= (uint32_t)(h & 0x8000u) << 16;
    float r;
    memcpy(&r, &em, sizeof r);
    return r;
}

INLINE void widen_f16_body(const void *src, int64_t n, float *dst)
{
    const unsigned char *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __builtin_prefetch(s + 2 * i + PREFETCH_AHEAD);
        v16h h;
        memcpy(&h, s + 2 * i, sizeof h);
        const v16u u = __builtin_convertvector(h, v16u);
        const v16u sign = (u & 0x8000u) << 16;
        v16u em = (u & 0x7fffu) << 13;
        const v16u e = em & 0x0f800000u;
        em += 112u << 23;
        em += (v16u)(e == 0x0f800000u) & (112u << 23);
        const v16u low = (v16u)(e == 0u);
        em += low & (1u << 23);
        const v16f sub = (v16f)em - 6.103515625e-05f; /* 2^-14 */
        const v16u bits = ((low & (v16u)sub) | (~low & em)) | sign;
        memcpy(dst + i, &bits, sizeof bits);
    }
    for (; i < n; i++) {
        const uint32_t u = tfm__f16_to_f32_bits(get_u16(s + 2 * i));
        memcpy(dst + i, &u, sizeof u);
    }
}

INLINE void widen_bf16_body(const void *src, int64_t n, float *dst)
{
    const unsigned char *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __builtin_prefetch(s + 2 * i + PREFETCH_AHEAD);
        v16h h;
        memcpy(&h, s + 2 * i, sizeof h);
        const v16u bits = __builtin_convertvector(h, v16u) << 16;
        memcpy(dst + i, &bits, sizeof bits);
    }
    for (; i < n; i++) {
        const uint32_t u = (uint32_t)get_u16(s + 2 * i) << 16;
        memcpy(dst + i, &u, sizeof u);
    }
}

INLINE void widen_q8_0_body(const void *src, int64_t n, float *dst)
{
    const unsigned char *b = src;
    for (int64_t k = 0; k < n / TFM__QK; k++, b += Q8_0_BYTES) {
        __builtin_prefetch(b + PREFETCH_AHEAD);
        const float d = half_to_float(get_u16(b));
        v16b q0, q1;
        memcpy(&q0, b + 2, sizeof q0);
        memcpy(&q1, b + 18, sizeof q1);
        const v16f f0 = __builtin_convertvector(
                            __builtin_convertvector(q0, v16i), v16f) * d;
        const v16f f1 = __builtin_convertvector(
                            __builtin_convertvector(q1, v16i), v16f) * d;
        memcpy(dst + k * TFM__QK, &f0, sizeof f0);
        memcpy(dst + k * TFM__QK + 16, &f1, sizeof f1);
    }
}

INLINE void widen_q4_0_body(const void *src, int64_t n, float *dst)
{
    const unsigned char *b = src;
    for (int64_t k = 0; k < n / TFM__QK; k++, b += Q4_0_BYTES) {
        __builtin_prefetch(b + PREFETCH_AHEAD);
        const float d = half_to_float(get_u16(b));
        v16ub q;
        memcpy(&q, b + 2, sizeof q);
        const v16i lo = __builtin_convertvector(q & 0x0f, v16i) - 8;
        const v16i hi = __builtin_convertvector(q >> 4, v16i) - 8;
        const v16f f0 = __builtin_convertvector(lo, v16f) * d;
        const v16f f1 = __builtin_convertvector(hi, v16f) * d;
        memcpy(dst + k * TFM__QK, &f0, sizeof f0);
        memcpy(dst + k * TFM__QK + 16, &f1, sizeof f1);
    }
}

typedef void widen_fn(const void *src, int64_t n, float *dst);

typedef struct widen_path {
    widen_fn *f16, *bf16, *q8_0, *q4_0;
} widen_path;

#define WIDEN_PATH(name, attr)                                              \
    attr static void widen_f16_##name(const void *s, int64_t n, float *d)  \
    {                                                                       \
        widen_f16_body(s, n, d);                                            \
    }                                                                       \
    attr static void widen_bf16_##name(const void *s, int64_t n, float *d) \
    {                                                                       \
        widen_bf16_body(s, n, d);                                           \
    }                                                                       \
    attr static void widen_q8_0_##name(const void *s, int64_t n, float *d) \
    {                                                                       \
        widen_q8_0_body(s, n, d);                                           \
    }                                                                       \
    attr static void widen_q4_0_##name(const void *s, int64_t n, float *d) \
    {                                                                       \
        widen_q4_0_body(s, n, d);                                           \
    }

WIDEN_PATH(base, )
#if defined(__x86_64__) && defined(__GNUC__)
#define TFM_QUANT_X86 1
#include "kernels/quant_x86.h"
#endif

static const widen_path paths[TFM__WIDEN_PATHS] = {
    { widen_f16_base, widen_bf16_base, widen_q8_0_base, widen_q4_0_base },
#ifdef TFM_QUANT_X86
    { widen_f16_avx2, widen_bf16_avx2, widen_q8_0_avx2, widen_q4_0_avx2 },
    { widen_f16_avx512, widen_bf16_avx512, widen_q8_0_avx512,
      widen_q4_0_avx512 },
#else
    { widen_f16_base, widen_bf16_base, widen_q8_0_base, widen_q4_0_base },
    { widen_f16_base, widen_bf16_base, widen_q8_0_base, widen_q4_0_base },
#endif
};

int tfm__widen_path_supported(int path)
{
    if (path == TFM__WIDEN_BASE)
        return 1;
#ifdef TFM_QUANT_X86
    __builtin_cpu_init();
    if (path == TFM__WIDEN_AVX2)
        return __builtin_cpu_supports("avx2") != 0;
    if (path == TFM__WIDEN_AVX512)
        return __builtin_cpu_supports("avx512f") != 0;
#endif
    return 0;
}

/* The path in use: -1 until the first widening picks the widest one the
 * processor runs.  Every thread that races to pick it picks the same. */
static int current_path = -1;

static int path_now(void)
{
    int p = __atomic_load_n(&current_path, __ATOMIC_RELAXED);
    if (p < 0) {
        p = tfm__widen_path_supported(TFM__WIDEN_AVX512) ? TFM__WIDEN_AVX512
            : tfm__widen_path_supported(TFM__WIDEN_AVX2) ? TFM__WIDEN_AVX2
                                                         : TFM__WIDEN_BASE;
        __atomic_store_n(&current_path, p, __ATOMIC_RELAXED);
    }
    return p;
}

int tfm__widen_use_path(int path)
{
    if (path < 0 || path >= TFM__WIDEN_PATHS ||
        !tfm__widen_path_supported(path))
        return -1;
    const int before = path_now();
    __atomic_store_n(&current_path, path, __ATOMIC_RELAXED);
    return before;
}

void tfm__widen_row(int dtype, const void *src, int64_t n, float *dst)
{
    if (n <= 0)
        return;
    const widen_path *p = &paths[path_now()];
    switch (dtype) {
    case TFM_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case TFM_DTYPE_F16:
        p->f16(src, n, dst);
        break;
    case TFM_DTYPE_BF16:
        p->bf16(src, n, dst);
        break;
    case TFM_DTYPE_Q8_0:
        p->q8_0(src, n, dst);
        break;
    case TFM_DTYPE_Q4_0:
        p->q4_0(src, n, dst);
        break;
    default:
        break;
    }
}
