/* Internal: the attention kernel shared by tfm_sdpa and multi-head
 * attention, and the validation of tfm_attention_masks. */
#ifndef TFM_SRC_ATTENTION_CORE_H
#define TFM_SRC_ATTENTION_CORE_H

#include "transformer/variants.h"

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

/* One attention call over every batch element and head:
 *   out[b, h] [L, d_v] = softmax(scale * q[b, h] k[b, h]^T + masks) v[b, h]
 * Element (b, h, i, c) of q lives at q[b * q_bstride + h * q_hstride +
 * i * ldq + c], and likewise for k, v and out.  weights: NULL, or per head
 * [B, H, L, S] (average 0), or the mean over the heads [B, L, S]
 * (average 1). */
typedef struct tfm__attention_job {
    const float *q, *k, *v;
    int64_t q_bstride, q_hstride, ldq;
    int64_t k_bstride, k_hstride, ldk;
    int64_t v_bstride, v_hstride, ldv;
    float *out;
    int64_t o_bstride, o_hstride, ldo;
    int64_t B, H, L, S, d_k, d_v;
    float scale;
    const tfm__masks *masks;
    float *weights;
    int average;
    /* ---- Variants (variants.h).  A zero-filled tail is plain scaled
     * dot-product attention with `scale`. */
    /* Query heads per key/value head (GQA/MQA): head h reads k and v at
     * (h / group) * k_hstride / v_hstride.  0 or 1: one each. */
    int64_t group;
    /* [H] per-head scale replacing `scale` (learned temperature), or NULL. */
    const float *head_scale;
    /* Additive score (Bahdanau): when non-NULL, [H, d_k] vectors v_h and
     * q, k already projected to d_k = d_a columns; the logit is
     * sum_a v_h[a] tanh(q[i, a] + k[j, a]) (times the scale), computed by
     * our own loop instead of the q k^T product. */
    const float *additive_v;
    /* Query row i is at position q_pos0 + i, key row j at position j. */
    int64_t q_pos0;
    /* Relative-position term, or NULL. */
    const struct tfm__relative *relative;
    /* Sparse pattern, or NULL. */
    const struct tfm__sparse *sparse;
} tfm__attention_job;

/* Relative-position term of the logits (variants.h), with the distance
 * d = j - p (key position minus query position). */
typedef struct tfm__relative {
    tfm_relative kind;
    /* ALiBi: logit += -slopes[h] * |d|.  [H] */
    const float *alibi_slopes;
    /* T5: logit += t5_bias[bucket(d) * H + h], [num_buckets, H]. */
    const float *t5_bias;
    int64_t num_buckets, max_distance;
    int bidirectional;
    /* Shaw (max_distance = k): logit += scale * q_i . shaw_k[c(d)], output
     * += sum_j w_ij shaw_v[c(d)] when shaw_v is non-NULL, c(d) = clip(d,
     * -k, k) + k; shaw_k [2k+1, d_k], shaw_v [2k+1, d_v], shared by the
     * heads. */
    const float *shaw_k, *shaw_v;
} tfm__relative;

/* Sparse pattern of visible keys by position (variants.h: tfm_sparsity,
 * with the same field meanings). */
typedef struct tfm__sparse {
    tfm_sparsity kind;
    int64_t window, dilation, n_global, block_size, n_random_blocks;
    uint64_t seed;
} tfm__sparse;

/* Runs the job on the library's threads (parallel.h), over batch elements,
 * heads and blocks of queries.  Scratch comes from the calling thread's
 * workspace before anything is written: fails only with
 * TFM_ERR_OUT_OF_MEMORY, and then writes nothing. */
tfm_status tfm__attention_run(const tfm__attention_job *job);

#endif
