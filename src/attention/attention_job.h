/* Internal: the one door into the attention kernel.
 *
 * Every attention call of the library (tfm_sdpa, tfm_attention_forward,
 * multi-head attention's self- and cross-attention, and KV-cache decoding)
 * describes its projected q, k, v and its output as a tfm__attention_args
 * and calls tfm__attend with its variant (variant.h; tfm_sdpa passes the
 * default one).  tfm__attend is the only place that
 *   - checks the variant's learned parameters (once per call),
 *   - computes the position of the first query (q_pos0),
 *   - applies rotary embeddings (rope.h),
 *   - runs the score's pre-transforms (GENERAL, ADDITIVE) and resolves the
 *     relative term and the sparse pattern,
 *   - fills the kernel's tfm__attention_job and calls tfm__attention_run.
 */
#ifndef TFM_SRC_ATTENTION_JOB_H
#define TFM_SRC_ATTENTION_JOB_H

#include "attention/attention_kernel.h"
#include "transformer/tensor.h"
#include "attention/variant.h"

/* A [B, heads, rows, cols] operand: element (b, h, r, c) lives at
 * data[b * bstride + h * hstride + r * ld + c]. */
typedef struct tfm__heads {
    float *data;
    int64_t bstride, hstride, ld;
} tfm__heads;

/* One attention call, before the variant:
 *   q   [B, H, L, d_k]       H = the variant's n_heads
 *   k   [B, H_kv, S, d_k]    H_kv = the variant's n_kv_heads
 *   v   [B, H_kv, S, d_v]
 *   out [B, H, L, d_v]       written
 * weights: NULL, or per head [B, H, L, S] (average 0), or the mean over
 * the heads [B, L, S] (average 1), written.  masks: resolved
 * (attention_masks.h), never NULL.  scale: 0 = the variant's own; another
 * value replaces it (tfm_sdpa's argument).
 * RoPE (variant with rope): q row i is rotated for position q_pos0 + i and
 * key row j for position j, for j >= k_rotated (rows below k_rotated are
 * already rotated: a KV cache's).  rope_in_place: q and k are the caller's
 * scratch and are rotated where they are; otherwise they are only read
 * and rotated copies are made. */
typedef struct tfm__attention_args {
    tfm__heads q, k, v, out;
    int64_t B, L, S;
    const tfm__masks *masks;
    float *weights;
    int average;
    float scale;
    int rope_in_place;
    int64_t k_rotated;
    /* RoPE only: query row i turns for position rope_origin + q_pos0 + i
     * and key row j for rope_origin + j (a rolling KV cache's absolute
     * position of its row 0; 0 elsewhere).  Distances, masks and the
     * sparse patterns keep the row positions above. */
    int64_t rope_origin;
    /* Training: NULL, or [B, H, L] receiving each query row's log-sum-exp
     * (attention_kernel.h: tfm__attention_job.lse) for the backward. */
    float *lse;
    /* Training: dropout on the attention weights (attention_kernel.h:
     * tfm__attention_job.dropout); the backward must get the same.
     * Zeroed: none. */
    tfm__dropout dropout;
    /* Non-zero: every value row is known finite (attention_kernel.h:
     * tfm__attention_job.values_finite). */
    int values_finite;
} tfm__attention_args;

/* The gradients of one call (tfm__attend_backward):
 *   dout [B, H, L, d_v]   read: the gradient of the forward's out
 *   lse  [B, H, L]        read: what the forward saved (args.lse)
 *   dq [B, H, L, d_k], dk [B, H_kv, S, d_k], dv [B, H_kv, S, d_v]
 *                         written (overwritten); data NULL: not wanted. */
typedef struct tfm__attention_grad_args {
    tfm__heads dout, dq, dk, dv;
    const float *lse;
    /* LEARNED_TEMPERATURE: [H], the temperatures' gradient, accumulated
     * (+=); NULL: not wanted (then dq must be wanted for it). */
    float *dtemperature;
    /* GENERAL: [H, d_k, d_k], the score matrices' gradient, accumulated;
     * NULL: not wanted. */
    float *dscore_weight;
    /* ADDITIVE: [H, d_a, d_k], [H, d_a, d_k] and [H, d_a], the gradients
     * of additive_query, additive_key and additive_v, accumulated; NULL:
     * not wanted. */
    float *dadditive_query, *dadditive_key, *dadditive_v;
    /* Shaw: [2k+1, d_k] and (relative_values) [2k+1, d_v], the gradients
     * of relative_key and relative_value, accumulated; NULL: not wanted. */
    float *drelative_key, *drelative_value;
    /* T5: [num_buckets, H], the bias table's gradient, accumulated; NULL:
     * not wanted. */
    float *dt5_bias;
} tfm__attention_grad_args;

/* Runs the call with variant v.  Query row i is at position q_pos0 + i,
 * q_pos0 = S - L under TFM_CAUSAL_BOTTOM_RIGHT, else 0; key row j at j.
 * Scratch comes from the thread's workspace before out and weights are
 * written.  Errors: TFM_ERR_INVALID_ARGUMENT (a learned temperature <= 0
 * or not finite, message set), TFM_ERR_OUT_OF_MEMORY; then out and
 * weights are not written (under rope_in_place q and k may be). */
tfm_status tfm__attend(const tfm__variant *v, const tfm__attention_args *a);

/* The backward of tfm__attend with the same variant and args (a->out
 * holding the forward's output, a->weights and a->lse ignored): the input
 * gradients g->dq, dk, dv and the variant's parameter gradients
 * (attention_kernel.h: tfm__attention_backward_run; memory linear in L
 * and S).  Every variant has one: every score (the dot products with
 * their scale or the call's, the learned temperature, Luong's general
 * and Bahdanau's additive scores: the projections' gradients as GEMMs,
 * the tanh terms tile by tile), grouped-query heads, RoPE, every
 * relative term (ALiBi, Shaw's keys and values, T5's bias), every sparse
 * pattern and every mask.  Errors: TFM_ERR_INVALID_ARGUMENT (keys rotated
 * beforehand, a KV cache's; a learned temperature <= 0 or not finite),
 * TFM_ERR_OUT_OF_MEMORY; then nothing is written. */
tfm_status tfm__attend_backward(const tfm__variant *v,
                                const tfm__attention_args *a,
                                const tfm__attention_grad_args *g);

/* The operand of a contiguous [B, heads, rows, cols] tensor. */
tfm__heads tfm__heads_of(const tfm_tensor *t);

/* tfm__attend on the public functions' contiguous tensors (tfm_sdpa,
 * tfm_attention_forward), already checked against the variant's sizes:
 * q [B, H, L, d_k], k [B, H_kv, S, d_k], v [B, H_kv, S, d_v], out
 * [B, H, L, d_v], weights [B, H, L, S] or NULL; q and k are only read. */
tfm_status tfm__attend_tensors(const tfm__variant *var, const tfm_tensor *q,
                               const tfm_tensor *k, const tfm_tensor *v,
                               const tfm__masks *masks, float scale,
                               tfm_tensor *out, tfm_tensor *weights);

#endif
