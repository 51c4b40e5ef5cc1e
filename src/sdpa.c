/* Scaled dot-product attention, the public function (attention.h). */
#include <math.h>
#include <string.h>

#include "attention_core.h"
#include "error.h"
#include "tensor_impl.h"
#include "workspace.h"

tfm_status tfm_sdpa(const tfm_tensor *q, const tfm_tensor *k,
                    const tfm_tensor *v, const tfm_attention_masks *masks,
                    float scale, tfm_tensor *out, tfm_tensor *weights)
{
    if (!q || !k || !v || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "tfm_sdpa: %s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : "out");
    if (q->rank != 4)
        return tfm__fail(TFM_ERR_SHAPE,
                         "q has rank %d, expected 4 [B, H, L, d_k]", q->rank);
    const int64_t B = q->shape[0], H = q->shape[1], L = q->shape[2],
                  dk = q->shape[3];
    if (k->rank != 4)
        return tfm__fail(TFM_ERR_SHAPE,
                         "k has rank %d, expected 4 [B, H, S, d_k]", k->rank);
    const int64_t S = k->shape[2];
    const int64_t k_shape[4] = { B, H, S, dk };
    tfm_status st = tfm__check_shape(k, "k", 4, k_shape);
    if (st != TFM_OK)
        return st;
    if (v->rank != 4)
        return tfm__fail(TFM_ERR_SHAPE,
                         "v has rank %d, expected 4 [B, H, S, d_v]", v->rank);
    const int64_t dv = v->shape[3];
    const int64_t v_shape[4] = { B, H, S, dv };
    const int64_t o_shape[4] = { B, H, L, dv };
    const int64_t w_shape[4] = { B, H, L, S };
    if ((st = tfm__check_shape(v, "v", 4, v_shape)) != TFM_OK ||
        (st = tfm__check_shape(out, "out", 4, o_shape)) != TFM_OK ||
        (weights && (st = tfm__check_shape(weights, "weights", 4, w_shape)) !=
                        TFM_OK))
        return st;
    if (!isfinite(scale))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "scale is not finite");
    if (scale == 0.0f)
        scale = (float)(1.0 / sqrt((double)dk));
    tfm__masks m;
    if ((st = tfm__masks_resolve(masks, B, H, L, S, "tfm_sdpa", &m)) != TFM_OK)
        return st;

    tfm__ws_mark mark = tfm__ws_save();
    float *scratch = tfm__ws_floats((size_t)tfm__attention_scratch(L, S, dv));
    if (!scratch) {
        tfm__ws_restore(mark);
        return TFM_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t bh = b * H + h;
            tfm__head_args a = {
                .q = q->data + bh * L * dk, .ldq = dk,
                .k = k->data + bh * S * dk, .ldk = dk,
                .v = v->data + bh * S * dv, .ldv = dv,
                .out = out->data + bh * L * dv, .ldo = dv,
                .L = L, .S = S, .d_k = dk, .d_v = dv, .scale = scale,
                .masks = &m, .b = b, .h = h,
                .weights = weights ? weights->data + bh * L * S : NULL,
                .scratch = scratch,
            };
            tfm__attention_head(&a);
        }
    tfm__ws_restore(mark);
    return TFM_OK;
}
