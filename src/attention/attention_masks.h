/* Internal: the masks of one attention call (attention.h:
 * tfm_attention_masks), checked once and kept as raw pointers for the
 * kernel, and the rule by which one mask value changes one logit. */
#ifndef TFM_SRC_ATTENTION_MASKS_H
#define TFM_SRC_ATTENTION_MASKS_H

#include <math.h>

#include "transformer/attention.h"

/* Validated masks of one call, as raw pointers. */
typedef struct tfm__masks {
    tfm_causal causal;
    const float *key_padding;       /* [B, S] or NULL */
    tfm_mask_kind key_padding_kind;
    const float *attn;              /* see attn_batch_stride... or NULL */
    tfm_mask_kind attn_kind;
    int64_t attn_batch_stride;      /* 0 when broadcast over the batch */
    int64_t attn_head_stride;       /* 0 when broadcast over the heads */
} tfm__masks;

/* Checks pub (NULL means no masks) against B, H, L, S and fills *out.
 * `what` names the call in messages.  Returns TFM_OK or an error status
 * (message set). */
tfm_status tfm__masks_resolve(const tfm_attention_masks *pub, int64_t batch,
                              int64_t heads, int64_t L, int64_t S,
                              const char *what, tfm__masks *out);

/* The masks of a call whose S keys are followed by `extra` keys that
 * every query sees, as PyTorch pads attn_mask and key_padding_mask with
 * zeros for add_bias_kv and add_zero_attn (F.multi_head_attention_forward,
 * 1.13): *out describes S + extra keys, in copies from the thread's
 * workspace ([B, S + extra] padding; attention mask [Bm, Hm, L, S + extra]
 * with in's broadcast axes kept); a causal mode becomes part of the
 * attention mask (hiding key j < S from query i when j > i + offset) and
 * out->causal is TFM_CAUSAL_NONE.  in is not changed; out may not be in.
 * Returns TFM_OK or TFM_ERR_OUT_OF_MEMORY (message not set). */
tfm_status tfm__masks_pad(const tfm__masks *in, int64_t B, int64_t H,
                          int64_t L, int64_t S, int64_t extra,
                          tfm__masks *out);

/* *out = in (NULL: no masks) with its key padding and attention mask
 * data copied into the calling thread's workspace ([B, S]; the attention
 * mask's span under its strides for B, H, L, S).  Returns 0 when out of
 * memory (message set). */
int tfm__masks_copy(const tfm__masks *in, int64_t B, int64_t H, int64_t L,
                    int64_t S, tfm__masks *out);

/* Whether in (NULL: no masks) has the mode, kinds, strides and values of
 * a (resolved for the same B, H, L, S). */
int tfm__masks_equal(const tfm__masks *a, const tfm__masks *in, int64_t B,
                     int64_t H, int64_t L, int64_t S);

/* One mask value m applied to logit x (attention.h: tfm_mask_kind):
 * BLOCK hides the key when m != 0, ALLOW when m == 0, ADDITIVE returns
 * x + m (and -inf, not x - inf, when m is -inf). */
static inline float tfm__mask_apply(float x, float m, tfm_mask_kind kind)
{
    switch (kind) {
    case TFM_MASK_BLOCK: return m != 0.0f ? -INFINITY : x;
    case TFM_MASK_ALLOW: return m == 0.0f ? -INFINITY : x;
    default: return m == -INFINITY ? -INFINITY : x + m;
    }
}

#endif
