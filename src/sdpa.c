/* Scaled dot-product attention, the public function (attention.h): the
 * default variant through the one door (attention_job.h). */
#include <math.h>

#include "attention_job.h"
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
    tfm__masks m;
    if ((st = tfm__masks_resolve(masks, B, H, L, S, "tfm_sdpa", &m)) != TFM_OK)
        return st;

    /* Plain attention is the default variant (variants.h): H heads of
     * widths d_k and d_v; `scale` (0: 1/sqrt(d_k)) replaces its scale. */
    tfm__variant var;
    if ((st = tfm__variant_init(&var, NULL, H, dk, dv)) != TFM_OK)
        return st;
    return tfm__attend_tensors(&var, q, k, v, &m, scale, out, weights);
}
