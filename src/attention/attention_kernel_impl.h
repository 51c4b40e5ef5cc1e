/* Internal: what the attention kernel's forward (attention_kernel.c) and
 * its backward (attention_backward.c) share, and nothing else includes:
 * the per-run state, the per-head view, and the per-row helpers both run
 * in their inner loops (the logits' masks and positions, the scores of a
 * tile, the dropout index of a weight), static inline so that each stays
 * inlined in both files.  The kernel's door is attention_kernel.h. */
#ifndef TFM_SRC_ATTENTION_KERNEL_IMPL_H
#define TFM_SRC_ATTENTION_KERNEL_IMPL_H

#include <math.h>
#include <stdint.h>

#include "attention/attention_kernel.h"
#include "attention/attention_scores.h"

/* ==== Per-run state and per-head views ================================== */

/* Read-only state of one run, shared by the threads. */
typedef struct tfm__run_shared {
    const tfm__attention_job *job;
    int64_t H_kv;               /* key/value heads: H / group */
    int64_t offset;             /* causal: key j visible when j <= i + offset */
    /* Shaw: the table rows the run's distances reach, shaw_lo .. shaw_lo
     * + K2 - 1 (at most 2 * max_distance + 1, and at most L + S - 1
     * however large max_distance is); K2 = 0 without Shaw. */
    int64_t K2, shaw_lo;
    const int32_t *t5_bucket;   /* T5: bucket of distance d at d - d_min */
    int64_t d_min;              /* smallest distance j - p of the run */
    unsigned char *bad_flags;   /* [B * H_kv * S]: value row non-finite */
    int64_t *bad_count;         /* [B * H_kv] */
} tfm__run_shared;

/* One (batch element, head) of a job, as the per-block code sees it. */
typedef struct tfm__head_view {
    const tfm__attention_job *job;
    const tfm__run_shared *sh;
    int64_t b, h;
    float scale;
    const float *q, *k, *v;
    float *out;
    const unsigned char *bad;   /* [S]: value row holds NaN or inf */
    int64_t n_bad;              /* how many rows of this head do */
} tfm__head_view;

/* Query heads per key/value head (GQA, MQA): 1 when unset. */
static inline int64_t tfm__group_of(const tfm__attention_job *j)
{
    return j->group > 1 ? j->group : 1;
}

/* The view of (b, h): q [L, d_k], k [S, d_k], v [S, d_v] of its key/value
 * head h / group, out [L, d_v], all with the job's row strides. */
static inline tfm__head_view tfm__view_of(const tfm__run_shared *sh,
                                          int64_t b, int64_t h)
{
    const tfm__attention_job *j = sh->job;
    const int64_t kvh = h / tfm__group_of(j), bk = b * sh->H_kv + kvh;
    return (tfm__head_view){
        .job = j, .sh = sh, .b = b, .h = h,
        .scale = j->head_scale ? j->head_scale[h] : j->scale,
        .bad = sh->bad_flags ? sh->bad_flags + bk * j->S : NULL,
        .n_bad = sh->bad_count ? sh->bad_count[bk] : 0,
        .q = j->q + b * j->q_bstride + h * j->q_hstride,
        .k = j->k + b * j->k_bstride + kvh * j->k_hstride,
        .v = j->v + b * j->v_bstride + kvh * j->v_hstride,
        .out = j->out + b * j->o_bstride + h * j->o_hstride,
    };
}

/* ==== One row of logits: positions and masks ============================ */

/* Finishes row `gi` of the logits (keys j0 .. j0+n-1) in place: the
 * causal mask (keys j > gi + offset to -inf), the relative-position term
 * and the sparse pattern (attention_positions.h), then the mask tensors
 * (attention_masks.h).  qr: Shaw's key terms of this row [K2]. */
static inline void tfm__mask_row(const tfm__head_view *a, int64_t gi,
                                 const float *qr, float *row, int64_t j0,
                                 int64_t n)
{
    const tfm__attention_job *jb = a->job;
    const tfm__masks *m = jb->masks;
    const int64_t S = jb->S, p = jb->q_pos0 + gi;
    /* row[c] is key j0 + c; `lim` counts the columns the causal mask
     * leaves, in row coordinates. */
    int64_t lim = (m->causal ? gi + a->sh->offset + 1 : S) - j0;
    lim = lim < 0 ? 0 : (lim > n ? n : lim);
    for (int64_t j = lim; j < n; j++)
        row[j] = -INFINITY;
    if (jb->relative)
        tfm__relative_add(jb->relative, a->h, jb->H, j0 - p, a->sh->t5_bucket,
                          a->sh->d_min, qr, a->sh->shaw_lo, row, lim);
    if (jb->sparse && jb->sparse->kind != TFM_SPARSE_NONE)
        tfm__sparse_mask_row(jb->sparse, m->causal != 0, S, p, row, j0, lim);
    const float *kp =
        m->key_padding ? m->key_padding + a->b * S + j0 : NULL;
    const float *am = m->attn ? m->attn + a->b * m->attn_batch_stride +
                                    a->h * m->attn_head_stride + gi * S + j0
                              : NULL;
    if (!kp && !am)
        return;
    for (int64_t j = 0; j < lim; j++) {
        float x = row[j];
        if (kp)
            x = tfm__mask_apply(x, kp[j], m->key_padding_kind);
        if (am && x != -INFINITY)
            x = tfm__mask_apply(x, am[j], m->attn_kind);
        row[j] = x;
    }
}

/* The scores of one head, rows i0 .. i0+r-1 against keys j0 .. j0+t-1,
 * into dst [r, t] (row stride ld): attention_scores.h. */
static inline void tfm__head_scores(const tfm__head_view *a, int64_t i0,
                                    int64_t r, int64_t j0, int64_t t,
                                    float *dst, int64_t ld)
{
    const tfm__attention_job *j = a->job;
    tfm__scores(a->q + i0 * j->ldq, j->ldq, a->k + j0 * j->ldk, j->ldk, r, t,
                j->d_k, a->scale,
                j->additive_v ? j->additive_v + a->h * j->d_k : NULL, dst, ld);
}

/* Whether the job adds Shaw's value term r^V. */
static inline int tfm__shaw_values(const tfm__attention_job *j)
{
    return j->relative && j->relative->kind == TFM_RELATIVE_SHAW &&
           j->relative->shaw_v;
}

/* The dropout index of attention weight (row i, key j) of head view a
 * (attention_kernel.h: tfm__attention_job.dropout). */
static inline uint64_t tfm__weight_index(const tfm__head_view *a, int64_t i,
                                         int64_t j)
{
    const tfm__attention_job *jb = a->job;
    return (uint64_t)(((a->b * jb->H + a->h) * jb->L + i) * jb->S + j);
}

/* The run's relative tables: Shaw's reachable table rows (sh->K2,
 * sh->shaw_lo) and the smallest distance sh->d_min; returns the number
 * of distances, L + S - 1 (T5's buckets). */
static inline int64_t tfm__relative_tables(const tfm__attention_job *job,
                                           tfm__run_shared *sh)
{
    const tfm__relative *rel = job->relative;
    if (rel && rel->kind == TFM_RELATIVE_SHAW) {
        const int64_t k = rel->max_distance;
        sh->shaw_lo = tfm__shaw_index(-(job->q_pos0 + job->L - 1), k);
        sh->K2 = tfm__shaw_index(job->S - 1 - job->q_pos0, k) - sh->shaw_lo +
                 1;
    }
    /* Distances j - p of the run: from -(q_pos0 + L - 1) to S-1 - q_pos0. */
    sh->d_min = -(job->q_pos0 + job->L - 1);
    return job->S + job->L - 1;
}

#endif
