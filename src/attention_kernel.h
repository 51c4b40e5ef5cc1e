/* Internal: the attention kernel.  One job describes one attention call
 * over every batch element and head, already projected (and rotated, and
 * pre-transformed by the score); tfm__attention_run computes it.  Jobs are
 * built in one place, attention_job.c; nothing else calls the kernel. */
#ifndef TFM_SRC_ATTENTION_KERNEL_H
#define TFM_SRC_ATTENTION_KERNEL_H

#include "attention_masks.h"
#include "attention_positions.h"

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
    /* Query row i is at position q_pos0 + i, key row j at position j:
     * q_pos0 = S - L under TFM_CAUSAL_BOTTOM_RIGHT, else 0, which is also
     * the causal offset (attention.h: row i sees keys j <= i + q_pos0). */
    int64_t q_pos0;
    /* Relative-position term, or NULL. */
    const struct tfm__relative *relative;
    /* Sparse pattern, or NULL. */
    const struct tfm__sparse *sparse;
} tfm__attention_job;

/* Runs the job on the library's threads (parallel.h), over batch elements,
 * heads and blocks of queries.  Scratch comes from the calling thread's
 * workspace before anything is written: fails only with
 * TFM_ERR_OUT_OF_MEMORY, and then writes nothing. */
tfm_status tfm__attention_run(const tfm__attention_job *job);

#endif
