/* PLACEHOLDER (lead's stand-in until branch quant lands): the product
 * with a stored weight (quant.h), one row at a time. */
#include "base/gemm.h"
#include "base/workspace.h"
#include "kernels/quant.h"

void tfm__linear_stored(const float *x, int64_t ldx, int64_t n, int64_t in,
                        const tfm__wview *w, const float *bias, int64_t out,
                        float *y, int64_t ldy)
{
    const tfm__ws_mark mark = tfm__ws_save();
    float *panel = tfm__ws_alloc((size_t)(in * out) * sizeof *panel);
    for (int64_t o = 0; o < out; o++)
        tfm__widen_row(w->dtype, w->data + o * w->row_bytes, in,
                       panel + o * in);
    if (bias)
        for (int64_t i = 0; i < n; i++)
            for (int64_t o = 0; o < out; o++)
                y[i * ldy + o] = bias[o];
    tfm__sgemm(0, 1, n, out, in, 1.0f, x, ldx, panel, in, bias ? 1.0f : 0.0f,
               y, ldy);
    tfm__ws_restore(mark);
}
