/* Scaled dot-product attention, the public functions (attention.h): the
 * default variant through the one door (attention_job.h), forward and
 * backward. */
#include <math.h>
#include <string.h>

#include "attention/attention_job.h"
#include "base/error.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

static tfm_status check_all(int n, const tfm_tensor *const *t,
                            const char *const *names, const int *ranks,
                            const int64_t (*shapes)[4]);

/* Checks the operands of one call, q, k, v and those of out [B, H, L,
 * d_v], weights [B, H, L, S] and lse [B, H, L] that are not NULL, and
 * resolves the masks; sizes into sz = { B, H, L, S, d_k, d_v }. */
static tfm_status sdpa_check(const char *what, const tfm_tensor *q,
                             const tfm_tensor *k, const tfm_tensor *v,
                             const tfm_attention_masks *masks, float scale,
                             const tfm_tensor *out, const tfm_tensor *weights,
                             const tfm_tensor *lse, tfm__masks *m,
                             int64_t sz[6])
{
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
    if ((st = tfm__check_shape(v, "v", 4, v_shape)) != TFM_OK)
        return st;
    const tfm_tensor *t[3] = { out, weights, lse };
    const char *names[3] = { "out", "weights", "lse" };
    const int ranks[3] = { 4, 4, 3 };
    const int64_t shapes[3][4] = { { B, H, L, dv }, { B, H, L, S },
                                   { B, H, L } };
    if ((st = check_all(3, t, names, ranks, shapes)) != TFM_OK)
        return st;
    if (!isfinite(scale))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "scale is not finite");
    if ((st = tfm__masks_resolve(masks, B, H, L, S, what, m)) != TFM_OK)
        return st;
    const int64_t s[6] = { B, H, L, S, dk, dv };
    memcpy(sz, s, sizeof s);
    return TFM_OK;
}

/* Checks optional tensors t[0 .. n-1] (NULL skipped) against shapes. */
static tfm_status check_all(int n, const tfm_tensor *const *t,
                            const char *const *names, const int *ranks,
                            const int64_t (*shapes)[4])
{
    for (int i = 0; i < n; i++) {
        if (!t[i])
            continue;
        tfm_status st = tfm__check_shape(t[i], names[i], ranks[i], shapes[i]);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* tfm_sdpa and tfm_sdpa_lse: the checks, then the default variant through
 * the door, with weights or lse (one of them NULL). */
static tfm_status sdpa_forward(const char *what, const tfm_tensor *q,
                               const tfm_tensor *k, const tfm_tensor *v,
                               const tfm_attention_masks *masks, float scale,
                               tfm_tensor *out, tfm_tensor *weights,
                               tfm_tensor *lse)
{
    tfm__masks m;
    int64_t z[6] = { 0 };
    tfm_status st = sdpa_check(what, q, k, v, masks, scale, out, weights,
                               lse, &m, z);
    if (st != TFM_OK)
        return st;
    /* Plain attention is the default variant (variants.h): H heads of
     * widths d_k and d_v; `scale` (0: 1/sqrt(d_k)) replaces its scale. */
    tfm__variant var;
    if ((st = tfm__variant_init(&var, NULL, z[1], z[4], z[5])) != TFM_OK)
        return st;
    const tfm__attention_args args = {
        .q = tfm__heads_of(q), .k = tfm__heads_of(k), .v = tfm__heads_of(v),
        .out = tfm__heads_of(out), .B = z[0], .L = z[2], .S = z[3],
        .masks = &m, .weights = weights ? weights->data : NULL,
        .scale = scale, .lse = lse ? lse->data : NULL,
    };
    return tfm__attend(&var, &args);
}

tfm_status tfm_sdpa(const tfm_tensor *q, const tfm_tensor *k,
                    const tfm_tensor *v, const tfm_attention_masks *masks,
                    float scale, tfm_tensor *out, tfm_tensor *weights)
{
    TFM__PLAN_PIN();
    if (!q || !k || !v || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "tfm_sdpa: %s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : "out");
    return sdpa_forward("tfm_sdpa", q, k, v, masks, scale, out, weights,
                        NULL);
}

tfm_status tfm_sdpa_lse(const tfm_tensor *q, const tfm_tensor *k,
                        const tfm_tensor *v,
                        const tfm_attention_masks *masks, float scale,
                        tfm_tensor *out, tfm_tensor *lse)
{
    TFM__PLAN_PIN();
    if (!q || !k || !v || !out || !lse)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "tfm_sdpa_lse: %s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : !out ? "out"
                                                              : "lse");
    return sdpa_forward("tfm_sdpa_lse", q, k, v, masks, scale, out, NULL,
                        lse);
}

tfm_status tfm_sdpa_backward(const tfm_tensor *q, const tfm_tensor *k,
                             const tfm_tensor *v,
                             const tfm_attention_masks *masks, float scale,
                             const tfm_tensor *out, const tfm_tensor *lse,
                             const tfm_tensor *grad_out, tfm_tensor *grad_q,
                             tfm_tensor *grad_k, tfm_tensor *grad_v)
{
    TFM__PLAN_PIN();
    if (!q || !k || !v || !grad_out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_sdpa_backward: %s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : "grad_out");
    if (!out != !lse)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_sdpa_backward: %s is NULL but %s is not "
                         "(pass both from tfm_sdpa_lse, or neither)",
                         !out ? "out" : "lse", !out ? "lse" : "out");
    tfm__masks m;
    int64_t z[6] = { 0 };
    tfm_status st = sdpa_check("tfm_sdpa_backward", q, k, v, masks, scale,
                               out, NULL, lse, &m, z);
    if (st != TFM_OK)
        return st;
    const int64_t B = z[0], H = z[1], L = z[2], S = z[3], dk = z[4],
                  dv = z[5];
    const tfm_tensor *t[4] = { grad_out, grad_q, grad_k, grad_v };
    const char *names[4] = { "grad_out", "grad_q", "grad_k", "grad_v" };
    const int ranks[4] = { 4, 4, 4, 4 };
    const int64_t shapes[4][4] = { { B, H, L, dv }, { B, H, L, dk },
                                   { B, H, S, dk }, { B, H, S, dv } };
    if ((st = check_all(4, t, names, ranks, shapes)) != TFM_OK)
        return st;
    if (!tfm__all_finite(grad_out->data, B * H * L * dv))
        return tfm__fail(TFM_ERR_NON_FINITE,
                         "tfm_sdpa_backward: grad_out holds NaN or infinity");
    tfm__variant var;
    if ((st = tfm__variant_init(&var, NULL, H, dk, dv)) != TFM_OK)
        return st;

    tfm__attention_args args = {
        .q = tfm__heads_of(q), .k = tfm__heads_of(k), .v = tfm__heads_of(v),
        .B = B, .L = L, .S = S, .masks = &m, .scale = scale,
    };
    tfm__ws_mark mark = tfm__ws_save();
    const float *lse_data = lse ? lse->data : NULL;
    if (out) {
        args.out = tfm__heads_of(out);
    } else {
        /* Not saved: the forward again, into scratch. */
        float *o = tfm__ws_floats((size_t)(B * H * L * dv + 1));
        float *l = o ? tfm__ws_floats((size_t)(B * H * L + 1)) : NULL;
        if (!l) {
            tfm__ws_restore(mark);
            return TFM_ERR_OUT_OF_MEMORY;
        }
        args.out = (tfm__heads){ o, H * L * dv, L * dv, dv };
        args.lse = l;
        if ((st = tfm__attend(&var, &args)) != TFM_OK) {
            tfm__ws_restore(mark);
            return st;
        }
        lse_data = l;
    }
    const tfm__heads none = { 0 };
    const tfm__attention_grad_args g = {
        .dout = tfm__heads_of(grad_out),
        .dq = grad_q ? tfm__heads_of(grad_q) : none,
        .dk = grad_k ? tfm__heads_of(grad_k) : none,
        .dv = grad_v ? tfm__heads_of(grad_v) : none,
        .lse = lse_data,
    };
    st = tfm__attend_backward(&var, &args, &g);
    tfm__ws_restore(mark);
    return st;
}
