/* Rotary position embeddings (rope.h). */
#include <math.h>

#include "kernels/rope.h"

void tfm__rope_apply(float *x, int64_t rows, int64_t ld, int64_t heads,
                     int64_t hstride, int64_t pos0, tfm_rope layout,
                     int64_t rope_dims, double base, int inverse)
{
    if (layout == TFM_ROPE_NONE || rope_dims < 2)
        return;
    const int64_t half = rope_dims / 2;
    /* Pair i is (a_i, b_i): offsets of its two dimensions in a head. */
    const int64_t a_step = layout == TFM_ROPE_ADJACENT ? 2 : 1;
    const int64_t b_off = layout == TFM_ROPE_ADJACENT ? 1 : half;
    const double log_base = log(base);
    for (int64_t r = 0; r < rows; r++) {
        const double p = (double)(pos0 + r);
        for (int64_t i = 0; i < half; i++) {
            /* theta = p * base^(-2i/rope_dims) */
            const double inv_freq =
                exp(-(double)(2 * i) / (double)rope_dims * log_base);
            const double theta = p * inv_freq;
            const double c = cos(theta),
                         s = inverse ? -sin(theta) : sin(theta);
            for (int64_t h = 0; h < heads; h++) {
                float *row = x + h * hstride + r * ld;
                float *pa = row + i * a_step, *pb = pa + b_off;
                const double a = *pa, b = *pb;
                *pa = (float)(a * c - b * s);
                *pb = (float)(a * s + b * c);
            }
        }
    }
}
