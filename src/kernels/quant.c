/* PLACEHOLDER (lead's scalar stand-in until branch quant lands): storage
 * types (quant.h). */
#include <math.h>
#include <string.h>

#include "base/float16.h"
#include "kernels/quant.h"

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
    case TFM_DTYPE_F32: return n * 4;
    case TFM_DTYPE_F16:
    case TFM_DTYPE_BF16: return n * 2;
    case TFM_DTYPE_Q8_0: return n % TFM__QK ? -1 : n / TFM__QK * 34;
    case TFM_DTYPE_Q4_0: return n % TFM__QK ? -1 : n / TFM__QK * 18;
    default: return -1;
    }
}

static float f16(uint16_t h)
{
    uint32_t b = tfm__f16_to_f32_bits(h);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint16_t to_f16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return tfm__f32_to_f16_bits(b);
}

tfm_status tfm__quantize_row(int dtype, const float *src, int64_t n,
                             void *dst)
{
    if (tfm__dtype_row_bytes(dtype, n) < 0)
        return TFM_ERR_INVALID_ARGUMENT;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(src[i]))
            return TFM_ERR_NON_FINITE;
    unsigned char *o = dst;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &src[i], 4);
        if (dtype == TFM_DTYPE_F32)
            memcpy(o + 4 * i, &src[i], 4);
        else if (dtype == TFM_DTYPE_F16) {
            uint16_t h = tfm__f32_to_f16_bits(b);
            memcpy(o + 2 * i, &h, 2);
        } else if (dtype == TFM_DTYPE_BF16) {
            uint16_t h = tfm__f32_to_bf16_bits(b);
            memcpy(o + 2 * i, &h, 2);
        }
    }
    if (dtype == TFM_DTYPE_Q8_0)
        for (int64_t k = 0; k < n / TFM__QK; k++) {
            const float *x = src + k * TFM__QK;
            float amax = 0.0f;
            for (int j = 0; j < TFM__QK; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            unsigned char *b = o + k * 34;
            uint16_t h = to_f16(d);
            memcpy(b, &h, 2);
            for (int j = 0; j < TFM__QK; j++)
                b[2 + j] = (unsigned char)(int8_t)roundf(x[j] * id);
        }
    if (dtype == TFM_DTYPE_Q4_0)
        for (int64_t k = 0; k < n / TFM__QK; k++) {
            const float *x = src + k * TFM__QK;
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < TFM__QK; j++)
                if (amax < fabsf(x[j])) {
                    amax = fabsf(x[j]);
                    max = x[j];
                }
            const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
            unsigned char *b = o + k * 18;
            uint16_t h = to_f16(d);
            memcpy(b, &h, 2);
            for (int j = 0; j < 16; j++) {
                int q0 = (int)(int8_t)(x[j] * id + 8.5f);
                int q1 = (int)(int8_t)(x[16 + j] * id + 8.5f);
                q0 = q0 < 15 ? q0 : 15;
                q1 = q1 < 15 ? q1 : 15;
                b[2 + j] = (unsigned char)(q0 | (q1 << 4));
            }
        }
    return TFM_OK;
}

void tfm__widen_row(int dtype, const void *src, int64_t n, float *dst)
{
    const unsigned char *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        uint32_t b;
        switch (dtype) {
        case TFM_DTYPE_F32: memcpy(&dst[i], s + 4 * i, 4); break;
        case TFM_DTYPE_F16:
            memcpy(&h, s + 2 * i, 2);
            dst[i] = f16(h);
            break;
        case TFM_DTYPE_BF16:
            memcpy(&h, s + 2 * i, 2);
            b = tfm__bf16_to_f32_bits(h);
            memcpy(&dst[i], &b, 4);
            break;
        case TFM_DTYPE_Q8_0: {
            const unsigned char *blk = s + (i / 32) * 34;
            memcpy(&h, blk, 2);
            dst[i] = f16(h) * (float)(int8_t)blk[2 + i % 32];
            break;
        }
        case TFM_DTYPE_Q4_0: {
            const unsigned char *blk = s + (i / 32) * 18;
            memcpy(&h, blk, 2);
            const int j = (int)(i % 32);
            const int q = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
            dst[i] = f16(h) * (float)(q - 8);
            break;
        }
        default: dst[i] = 0.0f;
        }
    }
}
