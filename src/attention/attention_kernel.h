/* Internal: the attention kernel, the one door to it.  One job describes
 * one attention call over every batch element and head, already projected
 * (and rotated, and pre-transformed by the score); tfm__attention_run
 * computes it (attention_kernel.c), tfm__attention_backward_run its
 * gradients (attention_backward.c).  Jobs are built in one place,
 * attention_job.c; nothing else calls the kernel. */
#ifndef TFM_SRC_ATTENTION_KERNEL_H
#define TFM_SRC_ATTENTION_KERNEL_H

#include "attention/attention_masks.h"
#include "kernels/dropout.h"
#include "attention/attention_positions.h"

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
    /* Training (a backward will follow): NULL, or [B, H, L] receiving each
     * row's log-sum-exp of its logits, lse[(b * H + h) * L + i] =
     * log sum_j exp(s_ij) over the visible keys (-inf for a row whose keys
     * are all masked), which tfm__attention_backward_run reads.  The
     * outputs are the same bits with or without it. */
    float *lse;
    /* Training: dropout on the attention weights (dropout.h), element
     * (b, h, i, j) of [B, H, L, S] at index ((b H + h) L + i) S + j: out =
     * dropout(softmax(...)) v, and the weights output holds the dropped
     * weights (torch.nn.functional.multi_head_attention_forward's order).
     * The log-sum-exp is the undropped softmax's.  Zeroed: none. */
    tfm__dropout dropout;
    /* Non-zero: the caller knows every value row is finite (a KV cache
     * that checked its rows as they were written), so the kernel skips
     * its scan of the values for NaN and infinities. */
    int values_finite;
} tfm__attention_job;

/* Runs the job on the library's threads (parallel.h), over batch elements,
 * heads and blocks of queries.  Scratch comes from the calling thread's
 * workspace before anything is written: fails only with
 * TFM_ERR_OUT_OF_MEMORY, and then writes nothing. */
tfm_status tfm__attention_run(const tfm__attention_job *job);

/* The gradients of one job (FlashAttention-2's backward, Dao 2023,
 * algorithm 2).  dout [B, H, L, d_v] is the gradient of job->out (read, with
 * job->out itself, which must hold the forward's output); lse [B, H, L] the
 * forward's (job->lse).  dq [B, H, L, d_k], dk [B, H_kv, S, d_k], dv [B,
 * H_kv, S, d_v] are written (overwritten), each NULL when not wanted;
 * element strides as the job's operands. */
typedef struct tfm__attention_grads {
    const float *dout;
    int64_t do_bstride, do_hstride, lddo;
    const float *lse;
    float *dq;
    int64_t dq_bstride, dq_hstride, lddq;
    float *dk;
    int64_t dk_bstride, dk_hstride, lddk;
    float *dv;
    int64_t dv_bstride, dv_hstride, lddv;
    /* The variants' parameter gradients, accumulated (+=) after every
     * tile has run; NULL: not wanted.
     *   dadditive_v [H, d_k]        the additive score's v_h (d_k = d_a)
     *   dt5_bias    [num_buckets, H]             the T5 bias
     *   dshaw_k [2k+1, d_k], dshaw_v [2k+1, d_v]  Shaw's r^K and r^V */
    float *dadditive_v, *dt5_bias, *dshaw_k, *dshaw_v;
} tfm__attention_grads;

/* The backward of job (every job: the dot-product and additive scores
 * with scale or head_scale, group, every relative term, sparse patterns
 * and every mask).  Per tile of Br queries and Bc keys the logits are
 * recomputed from q, k and lse (no L x S matrix exists): P = exp(s - lse),
 * dV += P^T dO, dP = dO V^T, dS = P (dP - D) with D_i = dO_i . O_i,
 * dK += scale dS^T Q, dQ += scale dS K, every product one cblas_sgemm;
 * under dropout (mask M, scale c) dV += (c M P)^T dO and dP = c M (dO
 * V^T), D_i = dO_i . O_i still (O the dropped forward's output), so the
 * mask is regenerated per tile and never stored.
 * The additive score replaces the last two by its own loop over the
 * tile's r x t x d_a tanh terms (attention_scores.h; an additive job must
 * want dq and dk, as the door's always does); Shaw adds dP +=
 * dO r^V(c)^T, d r^V += (P summed per table row)^T dO, dQ += scale
 * (dS summed per table row) r^K and d r^K += scale (that sum)^T Q, as
 * GEMMs over the table rows the tile reaches; T5's bias gradient is dS
 * summed per distance, then per bucket.
 * Work items are (batch element, key/value head, chunk of keys) with a
 * chunk count that depends on the shapes only, and the chunks' dQ parts
 * are added in a fixed order: the result is the same bits for every thread
 * count.  Scratch comes first: fails only with TFM_ERR_OUT_OF_MEMORY, and
 * then writes nothing. */
tfm_status tfm__attention_backward_run(const tfm__attention_job *job,
                                       const tfm__attention_grads *g);

#endif
