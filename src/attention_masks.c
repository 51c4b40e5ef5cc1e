/* Resolution of the public mask struct of one attention call
 * (attention_masks.h): enum values and tensor shapes checked once, before
 * the kernel runs. */
#include <string.h>

#include "attention_masks.h"
#include "error.h"
#include "tensor_impl.h"

static int valid_kind(tfm_mask_kind k)
{
    return k == TFM_MASK_BLOCK || k == TFM_MASK_ALLOW ||
           k == TFM_MASK_ADDITIVE;
}

tfm_status tfm__masks_resolve(const tfm_attention_masks *pub, int64_t batch,
                              int64_t heads, int64_t L, int64_t S,
                              const char *what, tfm__masks *out)
{
    tfm__masks m;
    memset(&m, 0, sizeof m);
    if (!pub) {
        *out = m;
        return TFM_OK;
    }
    if (pub->causal != TFM_CAUSAL_NONE && pub->causal != TFM_CAUSAL_TOP_LEFT &&
        pub->causal != TFM_CAUSAL_BOTTOM_RIGHT)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: unknown causal mode %d", what, (int)pub->causal);
    m.causal = pub->causal;
    if (pub->key_padding_mask) {
        if (!valid_kind(pub->key_padding_kind))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: unknown key_padding_kind %d", what,
                             (int)pub->key_padding_kind);
        const int64_t shape[2] = { batch, S };
        tfm_status st = tfm__check_shape(pub->key_padding_mask,
                                         "key_padding_mask", 2, shape);
        if (st != TFM_OK)
            return st;
        m.key_padding = pub->key_padding_mask->data;
        m.key_padding_kind = pub->key_padding_kind;
    }
    if (pub->attn_mask) {
        const tfm_tensor *t = pub->attn_mask;
        if (!valid_kind(pub->attn_mask_kind))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: unknown attn_mask_kind %d", what,
                             (int)pub->attn_mask_kind);
        int64_t shape[4];
        tfm_status st;
        if (t->rank == 2) {
            shape[0] = L, shape[1] = S;
            m.attn_batch_stride = 0, m.attn_head_stride = 0;
        } else if (t->rank == 3) {
            shape[0] = batch, shape[1] = L, shape[2] = S;
            m.attn_batch_stride = L * S, m.attn_head_stride = 0;
        } else {
            shape[0] = batch, shape[1] = heads, shape[2] = L, shape[3] = S;
            m.attn_batch_stride = heads * L * S, m.attn_head_stride = L * S;
            if (t->rank != 4)
                return tfm__fail(TFM_ERR_SHAPE,
                                 "%s: attn_mask has rank %d, expected 2 "
                                 "[L, S], 3 [B, L, S] or 4 [B, H, L, S]",
                                 what, t->rank);
        }
        if ((st = tfm__check_shape(t, "attn_mask", t->rank, shape)) != TFM_OK)
            return st;
        m.attn = t->data;
        m.attn_kind = pub->attn_mask_kind;
    }
    *out = m;
    return TFM_OK;
}

