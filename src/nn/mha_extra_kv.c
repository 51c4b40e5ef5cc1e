/* Extra key/value rows of multi-head attention (mha_extra_kv.h): PyTorch's
 * add_bias_kv (torch.cat([k, bias_k.repeat(1, bsz, 1)])) and add_zero_attn
 * (torch.cat([k, zeros(bsz * num_heads, 1, head_dim)], dim=1)), with the
 * masks padded as F.pad(mask, (0, 1)) pads them. */
#include <string.h>

#include "nn/mha_extra_kv.h"
#include "base/workspace.h"

int64_t tfm__mha_extra_rows(const tfm__mha *m)
{
    return (m->bias_k ? 1 : 0) + (m->add_zero_attn ? 1 : 0);
}

/* dst [B, H_kv, S', d_k] (contiguous) = x's S rows, then bias's head slice
 * (when bias), then zeros, per batch element and head. */
static tfm__heads with_rows(const tfm__heads *x, const float *bias,
                            int64_t B, int64_t Hkv, int64_t S, int64_t S2,
                            int64_t dk, float *dst)
{
    const tfm__heads out = { dst, Hkv * S2 * dk, S2 * dk, dk };
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++) {
            const float *src = x->data + b * x->bstride + h * x->hstride;
            float *d = dst + b * out.bstride + h * out.hstride;
            for (int64_t r = 0; r < S; r++)
                memcpy(d + r * dk, src + r * x->ld, (size_t)dk * sizeof(float));
            int64_t r = S;
            if (bias)
                memcpy(d + r++ * dk, bias + h * dk, (size_t)dk * sizeof(float));
            if (r < S2)
                memset(d + r * dk, 0, (size_t)((S2 - r) * dk) * sizeof(float));
        }
    return out;
}

tfm_status tfm__mha_extra_kv(const tfm__mha *m, const tfm__heads *k,
                             const tfm__heads *v, int64_t B, int64_t L,
                             int64_t S, const tfm__masks *masks,
                             tfm__heads *k_out, tfm__heads *v_out,
                             tfm__masks *masks_out)
{
    const int64_t dk = m->d_k, Hkv = m->kv_dim / dk;
    const int64_t extra = tfm__mha_extra_rows(m), S2 = S + extra;
    float *kx = tfm__ws_floats((size_t)(B * Hkv * S2 * dk));
    float *vx = kx ? tfm__ws_floats((size_t)(B * Hkv * S2 * dk)) : NULL;
    if (!vx)
        return TFM_ERR_OUT_OF_MEMORY;
    tfm_status st = tfm__masks_pad(masks, B, m->n_heads, L, S, extra,
                                   masks_out);
    if (st != TFM_OK)
        return st;
    *k_out = with_rows(k, m->bias_k, B, Hkv, S, S2, dk, kx);
    *v_out = with_rows(v, m->bias_v, B, Hkv, S, S2, dk, vx);
    return TFM_OK;
}
