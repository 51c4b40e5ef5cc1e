/* Resolution of the public mask struct of one attention call
 * (attention_masks.h): enum values and tensor shapes checked once, before
 * the kernel runs. */
#include <string.h>

#include "attention/attention_masks.h"
#include "base/error.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

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


/* ---- Padding for extra keys (add_bias_kv, add_zero_attn) -------------- */

/* The value of a mask of this kind that leaves a key visible / hides it. */
static float visible_value(tfm_mask_kind k)
{
    return k == TFM_MASK_ALLOW ? 1.0f : 0.0f;
}

static float hidden_value(tfm_mask_kind k)
{
    return k == TFM_MASK_ALLOW ? 0.0f
           : k == TFM_MASK_BLOCK ? 1.0f : -INFINITY;
}

tfm_status tfm__masks_pad(const tfm__masks *in, int64_t B, int64_t H,
                          int64_t L, int64_t S, int64_t extra,
                          tfm__masks *out)
{
    const int64_t S2 = S + extra;
    tfm__masks m = *in;
    m.causal = TFM_CAUSAL_NONE;
    if (in->key_padding) {
        /* pad [B, S] -> [B, S + extra] */
        float *kp = tfm__ws_floats((size_t)(B * S2));
        if (!kp)
            return TFM_ERR_OUT_OF_MEMORY;
        const float vis = visible_value(in->key_padding_kind);
        for (int64_t b = 0; b < B; b++) {
            memcpy(kp + b * S2, in->key_padding + b * S,
                   (size_t)S * sizeof(float));
            for (int64_t j = S; j < S2; j++)
                kp[b * S2 + j] = vis;
        }
        m.key_padding = kp;
    }
    if (in->attn || in->causal != TFM_CAUSAL_NONE) {
        /* [Bm, Hm, L, S] -> [Bm, Hm, L, S + extra]; a causal mode alone
         * becomes a BLOCK mask [L, S + extra]. */
        const int64_t Bm = in->attn && in->attn_batch_stride ? B : 1;
        const int64_t Hm = in->attn && in->attn_head_stride ? H : 1;
        const tfm_mask_kind kind = in->attn ? in->attn_kind : TFM_MASK_BLOCK;
        float *am = tfm__ws_floats((size_t)(Bm * Hm * L * S2));
        if (!am)
            return TFM_ERR_OUT_OF_MEMORY;
        const int64_t offset = in->causal == TFM_CAUSAL_BOTTOM_RIGHT ? S - L
                                                                     : 0;
        const float vis = visible_value(kind), hid = hidden_value(kind);
        for (int64_t b = 0; b < Bm; b++)
            for (int64_t h = 0; h < Hm; h++)
                for (int64_t i = 0; i < L; i++) {
                    float *row = am + ((b * Hm + h) * L + i) * S2;
                    if (in->attn)
                        memcpy(row, in->attn + b * in->attn_batch_stride +
                                        h * in->attn_head_stride + i * S,
                               (size_t)S * sizeof(float));
                    else
                        for (int64_t j = 0; j < S; j++)
                            row[j] = vis;
                    if (in->causal != TFM_CAUSAL_NONE)
                        for (int64_t j = i + offset + 1; j < S; j++)
                            if (j >= 0)
                                row[j] = hid;
                    for (int64_t j = S; j < S2; j++)
                        row[j] = vis;
                }
        m.attn = am;
        m.attn_kind = kind;
        m.attn_batch_stride = Bm > 1 ? Hm * L * S2 : 0;
        m.attn_head_stride = Hm > 1 ? L * S2 : 0;
    }
    *out = m;
    return TFM_OK;
}

/* The floats an attention mask's data spans. */
static size_t attn_extent(const tfm__masks *m, int64_t B, int64_t H,
                          int64_t L, int64_t S)
{
    return (size_t)((m->attn_batch_stride ? (B - 1) * m->attn_batch_stride
                                          : 0) +
                    (m->attn_head_stride ? (H - 1) * m->attn_head_stride : 0) +
                    L * S);
}

int tfm__masks_copy(const tfm__masks *in, int64_t B, int64_t H, int64_t L,
                    int64_t S, tfm__masks *out)
{
    *out = in ? *in : (tfm__masks){ 0 };
    if (!in)
        return 1;
    if (in->key_padding) {
        float *c = tfm__ws_floats((size_t)(B * S));
        if (!c)
            return 0;
        memcpy(c, in->key_padding, (size_t)(B * S) * sizeof *c);
        out->key_padding = c;
    }
    if (in->attn) {
        const size_t n = attn_extent(in, B, H, L, S);
        float *c = tfm__ws_floats(n);
        if (!c)
            return 0;
        memcpy(c, in->attn, n * sizeof *c);
        out->attn = c;
    }
    return 1;
}

int tfm__masks_equal(const tfm__masks *a, const tfm__masks *in,
                     int64_t B, int64_t H, int64_t L, int64_t S)
{
    tfm__masks none = { 0 };
    if (!in)
        in = &none;
    if (a->causal != in->causal || !a->key_padding != !in->key_padding ||
        !a->attn != !in->attn)
        return 0;
    if (in->key_padding &&
        (a->key_padding_kind != in->key_padding_kind ||
         memcmp(a->key_padding, in->key_padding,
                (size_t)(B * S) * sizeof(float))))
        return 0;
    if (in->attn &&
        (a->attn_kind != in->attn_kind ||
         a->attn_batch_stride != in->attn_batch_stride ||
         a->attn_head_stride != in->attn_head_stride ||
         memcmp(a->attn, in->attn,
                attn_extent(in, B, H, L, S) * sizeof(float))))
        return 0;
    return 1;
}
