/* Sinusoidal positional encodings (embedding.h, variants.h): the
 * interleaved layout of Vaswani et al. section 3.5 and the concatenated
 * sin | cos layout of fairseq and tensor2tensor. */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "nn/embedding_impl.h"
#include "base/tensor_impl.h"
#include "transformer/embedding.h"

/* Column c of the encoding of position pos in a d-wide table.
 *   interleaved: PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos
 *                of the same angle;
 *   concat:      PE(pos, i) = sin(pos * base^(-i/(h-1))), PE(pos, h+i) = cos
 *                of the same angle, h = d/2; an odd d's last column is 0. */
static double pe_value(int64_t pos, int64_t c, int64_t d, double base,
                       tfm_sinusoidal_layout layout)
{
    if (layout == TFM_SINUSOIDAL_INTERLEAVED) {
        double a = (double)pos / pow(base, (double)(c / 2 * 2) / (double)d);
        return c % 2 == 0 ? sin(a) : cos(a);
    }
    const int64_t h = d / 2;
    if (c >= 2 * h)
        return 0.0;
    const int64_t i = c < h ? c : c - h;
    double a = (double)pos * pow(base, -(double)i / (double)(h - 1));
    return c < h ? sin(a) : cos(a);
}

static tfm_status check_args(int64_t offset, double *base)
{
    if (offset < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "offset %lld is negative",
                         (long long)offset);
    if (*base == 0.0)
        *base = 10000.0;
    if (!isfinite(*base) || *base <= 1.0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "base %g must be finite and greater than 1", *base);
    return TFM_OK;
}

tfm_status tfm__sinusoidal_layout_check(tfm_sinusoidal_layout layout,
                                        int64_t d)
{
    if (layout != TFM_SINUSOIDAL_INTERLEAVED &&
        layout != TFM_SINUSOIDAL_CONCAT)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "unknown sinusoidal layout %d", (int)layout);
    if (layout == TFM_SINUSOIDAL_CONCAT && d < 4)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "the concatenated sinusoidal layout needs d_model "
                         ">= 4, not %lld", (long long)d);
    return TFM_OK;
}

tfm_status tfm_sinusoidal_encoding_ex(tfm_tensor *pe, int64_t offset,
                                      double base,
                                      tfm_sinusoidal_layout layout)
{
    const int64_t want[2] = { -1, -1 };
    tfm_status st = tfm__check_shape(pe, "pe", 2, want);
    if (st != TFM_OK || (st = check_args(offset, &base)) != TFM_OK ||
        (st = tfm__sinusoidal_layout_check(layout, pe->shape[1])) != TFM_OK)
        return st;
    memset(pe->data, 0, (size_t)pe->numel * sizeof(float));
    tfm__add_sinusoidal(pe->data, 1, pe->shape[0], pe->shape[1], offset, base,
                        layout);
    return TFM_OK;
}

tfm_status tfm_sinusoidal_encoding(tfm_tensor *pe, int64_t offset, double base)
{
    return tfm_sinusoidal_encoding_ex(pe, offset, base,
                                      TFM_SINUSOIDAL_INTERLEAVED);
}

tfm_status tfm_add_sinusoidal_encoding(tfm_tensor *x, int64_t offset,
                                       double base)
{
    const int64_t want[3] = { -1, -1, -1 };
    tfm_status st = tfm__check_shape(x, "x", 3, want);
    if (st != TFM_OK || (st = check_args(offset, &base)) != TFM_OK)
        return st;
    tfm__add_sinusoidal(x->data, x->shape[0], x->shape[1], x->shape[2], offset,
                        base, TFM_SINUSOIDAL_INTERLEAVED);
    return TFM_OK;
}

void tfm__add_sinusoidal(float *x, int64_t B, int64_t L, int64_t d,
                         int64_t offset, double base,
                         tfm_sinusoidal_layout layout)
{
    for (int64_t i = 0; i < L; i++)
        for (int64_t c = 0; c < d; c++) {
            float v = (float)pe_value(offset + i, c, d, base, layout);
            for (int64_t b = 0; b < B; b++)
                x[(b * L + i) * d + c] += v;
        }
}
