/* Internal to kernels/quant.c, included once there: the AVX2 and AVX-512
 * widening paths, with intrinsics, each function compiled for its target
 * (GCC and Clang's target attribute) and chosen at run time.  They do what
 * quant.c's baseline bodies do, operation for operation (the binary16
 * conversion on bits with one exact subtraction for subnormals, int8 and
 * 4-bit values converted exactly and multiplied once by the block's
 * scale), so every path gives the same bits.  Each loop prefetches
 * PREFETCH_AHEAD bytes ahead and leaves the tail (under one vector) to
 * the baseline body. */
#ifndef TFM_SRC_QUANT_X86_H
#define TFM_SRC_QUANT_X86_H

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))
#define AVX512 __attribute__((target("avx512f")))

/* ---- AVX2: eight lanes ------------------------------------------------- */

AVX2 static inline __m256 f16x8_avx2(__m128i h)
{
    const __m256i u = _mm256_cvtepu16_epi32(h);
    const __m256i sign = _mm256_slli_epi32(
        _mm256_and_si256(u, _mm256_set1_epi32(0x8000)), 16);
    __m256i em = _mm256_slli_epi32(
        _mm256_and_si256(u, _mm256_set1_epi32(0x7fff)), 13);
    const __m256i e = _mm256_and_si256(em, _mm256_set1_epi32(0x0f800000));
    const __m256i rebias = _mm256_set1_epi32(112 << 23);
    em = _mm256_add_epi32(em, rebias);
    em = _mm256_add_epi32(
        em, _mm256_and_si256(
                _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0x0f800000)), rebias));
    const __m256i low = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
    em = _mm256_add_epi32(em, _mm256_and_si256(low, _mm256_set1_epi32(1 << 23)));
    const __m256i sub = _mm256_castps_si256(_mm256_sub_ps(
        _mm256_castsi256_ps(em), _mm256_set1_ps(6.103515625e-05f)));
    const __m256i bits = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(low, sub),
                        _mm256_andnot_si256(low, em)), sign);
    return _mm256_castsi256_ps(bits);
}

AVX2 static void widen_f16_avx2(const void *src, int64_t n, float *dst)
{
    const unsigned char *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)s + 2 * i + PREFETCH_AHEAD, _MM_HINT_T0);
        const __m128i h0 = _mm_loadu_si128((const __m128i *)(s + 2 * i));
        const __m128i h1 = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));
        _mm256_storeu_ps(dst + i, f16x8_avx2(h0));
        _mm256_storeu_ps(dst + i + 8, f16x8_avx2(h1));
    }
    widen_f16_body(s + 2 * i, n - i, dst + i);
}

AVX2 static void widen_bf16_avx2(const void *src, int64_t n, float *dst)
{
    const unsigned char *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)s + 2 * i + PREFETCH_AHEAD, _MM_HINT_T0);
        const __m128i h0 = _mm_loadu_si128((const __m128i *)(s + 2 * i));
        const __m128i h1 = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16));
        _mm256_storeu_si256((__m256i *)(dst + i + 8),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16));
    }
    widen_bf16_body(s + 2 * i, n - i, dst + i);
}

AVX2 static void widen_q8_0_avx2(const void *src, int64_t n, float *dst)
{
    const unsigned char *b = src;
    for (int64_t k = 0; k < n / TFM__QK; k++, b += Q8_0_BYTES) {
        _mm_prefetch((const char *)b + PREFETCH_AHEAD, _MM_HINT_T0);
        const __m256 d = _mm256_set1_ps(half_to_float(get_u16(b)));
        float *o = dst + k * TFM__QK;
        for (int g = 0; g < 4; g++) {
            const __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + 8 * g));
            _mm256_storeu_ps(o + 8 * g,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(
                                               _mm256_cvtepi8_epi32(q)), d));
        }
    }
}

AVX2 static void widen_q4_0_avx2(const void *src, int64_t n, float *dst)
{
    const unsigned char *b = src;
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m256i eight = _mm256_set1_epi32(8);
    for (int64_t k = 0; k < n / TFM__QK; k++, b += Q4_0_BYTES) {
        _mm_prefetch((const char *)b + PREFETCH_AHEAD, _MM_HINT_T0);
        const __m256 d = _mm256_set1_ps(half_to_float(get_u16(b)));
        const __m128i q = _mm_loadu_si128((const __m128i *)(b + 2));
        const __m128i lo = _mm_and_si128(q, nib);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), nib);
        const __m128i parts[4] = { lo, _mm_srli_si128(lo, 8), hi,
                                   _mm_srli_si128(hi, 8) };
        float *o = dst + k * TFM__QK;
        for (int g = 0; g < 4; g++) {
            const __m256i v =
                _mm256_sub_epi32(_mm256_cvtepu8_epi32(parts[g]), eight);
            _mm256_storeu_ps(o + 8 * g,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
        }
    }
}

/* ---- AVX-512: sixteen lanes -------------------------------------------- */

AVX512 static inline __m512 f16x16_avx512(__m256i h)
{
    const __m512i u = _mm512_cvtepu16_epi32(h);
    const __m512i sign = _mm512_slli_epi32(
        _mm512_and_si512(u, _mm512_set1_epi32(0x8000)), 16);
    __m512i em = _mm512_slli_epi32(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fff)), 13);
    const __m512i e = _mm512_and_si512(em, _mm512_set1_epi32(0x0f800000));
    const __m512i rebias = _mm512_set1_epi32(112 << 23);
    em = _mm512_add_epi32(em, rebias);
    const __mmask16 top =
        _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0x0f800000));
    em = _mm512_mask_add_epi32(em, top, em, rebias);
    const __mmask16 low = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
    em = _mm512_mask_add_epi32(em, low, em, _mm512_set1_epi32(1 << 23));
    const __m512i sub = _mm512_castps_si512(_mm512_sub_ps(
        _mm512_castsi512_ps(em), _mm512_set1_ps(6.103515625e-05f)));
    em = _mm512_mask_blend_epi32(low, em, sub);
    return _mm512_castsi512_ps(_mm512_or_si512(em, sign));
}

AVX512 static void widen_f16_avx512(const void *src, int64_t n, float *dst)
{
    const unsigned char *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)s + 2 * i + PREFETCH_AHEAD, _MM_HINT_T0);
        const __m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
        _mm512_storeu_ps(dst + i, f16x16_avx512(h));
    }
    widen_f16_body(s + 2 * i, n - i, dst + i);
}

AVX512 static void widen_bf16_avx512(const void *src, int64_t n, float *dst)
{
    const unsigned char *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)s + 2 * i + PREFETCH_AHEAD, _MM_HINT_T0);
        const __m256i h = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
        _mm512_storeu_si512(dst + i,
                            _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    widen_bf16_body(s + 2 * i, n - i, dst + i);
}

AVX512 static void widen_q8_0_avx512(const void *src, int64_t n, float *dst)
{
    const unsigned char *b = src;
    for (int64_t k = 0; k < n / TFM__QK; k++, b += Q8_0_BYTES) {
        _mm_prefetch((const char *)b + PREFETCH_AHEAD, _MM_HINT_T0);
        const __m512 d = _mm512_set1_ps(half_to_float(get_u16(b)));
        const __m128i q0 = _mm_loadu_si128((const __m128i *)(b + 2));
        const __m128i q1 = _mm_loadu_si128((const __m128i *)(b + 18));
        float *o = dst + k * TFM__QK;
        _mm512_storeu_ps(o, _mm512_mul_ps(
                                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d));
        _mm512_storeu_ps(o + 16,
                         _mm512_mul_ps(
                             _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d));
    }
}

AVX512 static void widen_q4_0_avx512(const void *src, int64_t n, float *dst)
{
    const unsigned char *b = src;
    const __m512i nib = _mm512_set1_epi32(0x0f);
    const __m512i eight = _mm512_set1_epi32(8);
    for (int64_t k = 0; k < n / TFM__QK; k++, b += Q4_0_BYTES) {
        _mm_prefetch((const char *)b + PREFETCH_AHEAD, _MM_HINT_T0);
        const __m512 d = _mm512_set1_ps(half_to_float(get_u16(b)));
        const __m512i q =
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)));
        const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, nib), eight);
        const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
        float *o = dst + k * TFM__QK;
        _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
        _mm512_storeu_ps(o + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
    }
}

#undef AVX2
#undef AVX512

#endif
