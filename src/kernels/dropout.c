/* Dropout masks (dropout.h). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/dropout.h"
#include "base/error.h"
#include "transformer/module.h"
#include "kernels/vmath.h"

tfm__dropout tfm__dropout_make(float p, uint64_t key)
{
    tfm__dropout d = { 0 };
    if (!(p > 0.0f) || key == 0)
        return d;
    d.p = p;
    d.key = key;
    if (p >= 1.0f) {
        d.p = 1.0f;
        d.threshold = (uint64_t)1 << 32;
        d.scale = 0.0f;
        return d;
    }
    d.threshold = (uint64_t)((double)p * 4294967296.0);
    /* torch: noise.bernoulli_(1 - p).div_(1 - p), a float tensor over the
     * double scalar: 1.0f / (float)(1 - p). */
    d.scale = 1.0f / (float)(1.0 - (double)p);
    return d;
}

TFM_CLONES void tfm__dropout_copy_rows(const tfm__dropout *d, uint64_t index0,
                                       uint64_t index_stride, const float *src,
                                       float *dst, int64_t rows, int64_t cols,
                                       int64_t ld)
{
    const uint64_t key = d->key, thr = d->threshold;
    const float scale = d->scale;
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t base = index0 + (uint64_t)r * index_stride;
        const float *s = src + r * ld;
        float *o = dst + r * ld;
        for (int64_t c = 0; c < cols; c++) {
            const int keep =
                (tfm__dropout_hash(key, base + (uint64_t)c) >> 32) >= thr;
            o[c] = keep ? s[c] * scale : 0.0f;
        }
    }
}

void tfm__dropout_apply_rows(const tfm__dropout *d, uint64_t index0,
                             uint64_t index_stride, float *x, int64_t rows,
                             int64_t cols, int64_t ld)
{
    tfm__dropout_copy_rows(d, index0, index_stride, x, x, rows, cols, ld);
}

void tfm__dropout_apply(const tfm__dropout *d, uint64_t index0, float *x,
                        int64_t n)
{
    tfm__dropout_copy_rows(d, index0, 0, x, x, 1, n, n);
}
