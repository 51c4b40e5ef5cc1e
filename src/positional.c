/* Sinusoidal positional encoding (embedding.h; Vaswani et al. 3.5). */
#include <math.h>

#include "error.h"
#include "embedding_impl.h"
#include "tensor_impl.h"
#include "transformer/embedding.h"

/* PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(same angle). */
static double angle(int64_t pos, int64_t dim, int64_t d, double base)
{
    int64_t pair = dim / 2 * 2;
    return (double)pos / pow(base, (double)pair / (double)d);
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

tfm_status tfm_sinusoidal_encoding(tfm_tensor *pe, int64_t offset, double base)
{
    const int64_t want[2] = { -1, -1 };
    tfm_status st = tfm__check_shape(pe, "pe", 2, want);
    if (st != TFM_OK || (st = check_args(offset, &base)) != TFM_OK)
        return st;
    const int64_t L = pe->shape[0], d = pe->shape[1];
    for (int64_t i = 0; i < L; i++)
        for (int64_t c = 0; c < d; c++) {
            double a = angle(offset + i, c, d, base);
            pe->data[i * d + c] = (float)(c % 2 == 0 ? sin(a) : cos(a));
        }
    return TFM_OK;
}

tfm_status tfm_add_sinusoidal_encoding(tfm_tensor *x, int64_t offset,
                                       double base)
{
    const int64_t want[3] = { -1, -1, -1 };
    tfm_status st = tfm__check_shape(x, "x", 3, want);
    if (st != TFM_OK || (st = check_args(offset, &base)) != TFM_OK)
        return st;
    tfm__add_sinusoidal(x->data, x->shape[0], x->shape[1], x->shape[2], offset,
                        base);
    return TFM_OK;
}

void tfm__add_sinusoidal(float *x, int64_t B, int64_t L, int64_t d,
                         int64_t offset, double base)
{
    for (int64_t i = 0; i < L; i++)
        for (int64_t c = 0; c < d; c++) {
            double a = angle(offset + i, c, d, base);
            float v = (float)(c % 2 == 0 ? sin(a) : cos(a));
            for (int64_t b = 0; b < B; b++)
                x[(b * L + i) * d + c] += v;
        }
}
