/* Internal: the attention kernel shared by tfm_sdpa and multi-head
 * attention, and the validation of tfm_attention_masks. */
#ifndef TFM_SRC_ATTENTION_CORE_H
#define TFM_SRC_ATTENTION_CORE_H

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

/* Floats of scratch that tfm__attention_head needs for given sizes. */
int64_t tfm__attention_scratch(int64_t L, int64_t S, int64_t d_v);

/* Attention of one batch element b and head h:
 *   out [L, d_v] = softmax(scale * q k^T + masks) v
 * q [L, d_k] (row stride ldq), k [S, d_k] (ldk), v [S, d_v] (ldv), out row
 * stride ldo.  weights: NULL or [L, S] rows of stride S receiving the
 * weights; when `average` is nonzero they are instead accumulated as
 * weights += average_factor * P (the caller zeroes them first).
 * scratch: tfm__attention_scratch(L, S, d_v) floats. */
typedef struct tfm__head_args {
    const float *q, *k, *v;
    int64_t ldq, ldk, ldv;
    float *out;
    int64_t ldo;
    int64_t L, S, d_k, d_v;
    float scale;
    const tfm__masks *masks;
    int64_t b, h;
    float *weights;
    int average;
    float average_factor;
    float *scratch;
} tfm__head_args;

void tfm__attention_head(const tfm__head_args *a);

#endif
