/* Scaled dot-product attention, the public function (attention.h). */
#include <math.h>
#include <string.h>

#include "attention_kernel.h"
#include "error.h"
#include "parallel.h"
#include "tensor_impl.h"

tfm_status tfm_sdpa(const tfm_tensor *q, const tfm_tensor *k,
                    const tfm_tensor *v, const tfm_attention_masks *masks,
                    float scale, tfm_tensor *out, tfm_tensor *weights)
{
    TFM__PLAN_PIN();
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

    const tfm__attention_job job = {
        .q = q->data, .q_bstride = H * L * dk, .q_hstride = L * dk, .ldq = dk,
        .k = k->data, .k_bstride = H * S * dk, .k_hstride = S * dk, .ldk = dk,
        .v = v->data, .v_bstride = H * S * dv, .v_hstride = S * dv, .ldv = dv,
        .out = out->data, .o_bstride = H * L * dv, .o_hstride = L * dv,
        .ldo = dv,
        .B = B, .H = H, .L = L, .S = S, .d_k = dk, .d_v = dv, .scale = scale,
        .masks = &m, .weights = weights ? weights->data : NULL, .average = 0,
    };
    return tfm__attention_run(&job);
}
