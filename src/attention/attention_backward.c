/* The attention kernel's backward (attention_kernel.h:
 * tfm__attention_backward_run): FlashAttention-2, Dao 2023, algorithm 2.
 * Per tile of queries and keys the logits are recomputed with the
 * forward's masks, positions and scores (attention_kernel_impl.h) and its
 * log-sum-exp; work items are (batch element, key/value head, chunk of
 * keys), and dq's chunk parts and the variants' parameter gradients are
 * added in a fixed order, so the bits do not depend on the thread count. */
#include <math.h>
#include <string.h>

#include "attention/attention_kernel_impl.h"
#include "base/error.h"
#include "base/gemm.h"
#include "base/parallel.h"
#include "kernels/vmath.h"
#include "base/workspace.h"

#define TFM_BWD_ROWS 128    /* Br: query rows of a backward tile */
#define TFM_BWD_KEYS 128    /* Bc: keys of a backward tile */
#define TFM_BWD_SPLIT 8     /* work items a backward aims at (shapes only) */

/* What the backward's items read. */
typedef struct bwd_ctx {
    const tfm__run_shared *sh;
    const tfm__attention_grads *g;
    float *D;               /* [B, H, L]: D_i = dO_i . O_i */
    float *dq_parts;        /* [B, H, n_chunks - 1, L, d_k] or NULL */
    float *scratch;         /* [slots, slot_floats]: P, dP / dS, Shaw's
                             * [Br, K2] sums */
    /* The variants' parameter gradients of each item (bwd_part), added
     * into the caller's in item order at the end (bwd_params). */
    float *parts;           /* [items, part_floats] */
    int64_t part_floats, n_dist, slot_floats;
    int64_t n_chunks, n_tiles;
} bwd_ctx;

/* One item's parameter gradients of one query head (NULL: not wanted). */
typedef struct bwd_part {
    float *dw;              /* [d_k]: additive_v of the head */
    float *dt5;             /* [n_dist]: dS summed per distance - d_min */
    float *dshaw_k;         /* [K2, d_k], shared by the group's heads */
    float *dshaw_v;         /* [K2, d_v] */
} bwd_part;

/* Chunks of keys per key/value head: enough items for TFM_BWD_SPLIT
 * threads when there are few heads, from the shapes alone (never the
 * thread count), so that the sums do not depend on it. */
static int64_t bwd_chunks(const tfm__attention_job *j, int64_t H_kv,
                          int64_t n_tiles)
{
    const int64_t heads = j->B * H_kv;
    int64_t nc = heads >= TFM_BWD_SPLIT || heads == 0
                     ? 1
                     : (TFM_BWD_SPLIT + heads - 1) / heads;
    nc = nc < n_tiles ? nc : n_tiles;
    return nc < 1 ? 1 : nc;
}

/* Items: query heads (b, h) = b * H + h.  D of their rows, and their dq
 * zeroed (the chunks accumulate into it). */
static void bwd_rows(void *arg, int64_t begin, int64_t end, int slot)
{
    const bwd_ctx *c = arg;
    const tfm__attention_job *j = c->sh->job;
    const tfm__attention_grads *g = c->g;
    (void)slot;
    for (int64_t bh = begin; bh < end; bh++) {
        const int64_t b = bh / j->H, h = bh % j->H;
        const float *o = j->out + b * j->o_bstride + h * j->o_hstride;
        const float *d_o = g->dout + b * g->do_bstride + h * g->do_hstride;
        float *D = c->D + bh * j->L;
        for (int64_t i = 0; i < j->L; i++) {
            float s = 0.0f;
            for (int64_t e = 0; e < j->d_v; e++)
                s += d_o[i * g->lddo + e] * o[i * j->ldo + e];
            D[i] = s;
        }
        if (g->dq)
            for (int64_t i = 0; i < j->L; i++)
                memset(g->dq + b * g->dq_bstride + h * g->dq_hstride +
                           i * g->lddq,
                       0, (size_t)j->d_k * sizeof(float));
    }
}

/* P [r, t] (row stride ld) <- exp(s - lse_i) of the masked logits in
 * place (0 where masked, and for a row whose keys are all masked). */
TFM_CLONES static void bwd_probs(float *p, int64_t r, int64_t t, int64_t ld,
                                 const float *lse)
{
    for (int64_t i = 0; i < r; i++) {
        float *row = p + i * ld;
        const float l = lse[i];
        if (l == -INFINITY) {
            memset(row, 0, (size_t)t * sizeof(float));
            continue;
        }
        for (int64_t c = 0; c < t; c++)
            row[c] = tfm__exp_nonpositive(row[c] - l);
    }
}

/* dS [r, t] <- P (dP - D_i), exactly 0 where P is 0 (a masked key's
 * non-finite value must not reach the gradients through dP). */
TFM_CLONES static void bwd_dscores(const float *p, float *ds, int64_t r,
                                   int64_t t, int64_t ld, const float *D)
{
    for (int64_t i = 0; i < r; i++) {
        const float d = D[i];
        const float *pr = p + i * ld;
        float *sr = ds + i * ld;
        for (int64_t c = 0; c < t; c++)
            sr[c] = pr[c] == 0.0f ? 0.0f : pr[c] * (sr[c] - d);
    }
}

/* One tile: query rows i0 .. i0+r-1 of head view a against keys j0 ..
 * j0+t-1.  dK, dV: the key/value head's gradient rows from 0 (NULL: not
 * wanted); dQ: this chunk's dq of the head (row stride lddq) or NULL;
 * pt: the item's parameter gradients; sums: Shaw's [Br, K2] scratch;
 * Pd: [Br, Bc] scratch for the dropped weights (under dropout). */
static void bwd_tile(const tfm__head_view *a, const bwd_ctx *c, int64_t i0,
                     int64_t r, int64_t j0, int64_t t, float *P, float *dS,
                     const float *d_o, const float *lse, const float *D,
                     float *dK, float *dV, float *dQ, int64_t lddq,
                     const bwd_part *pt, float *sums, float *Pd)
{
    const tfm__attention_job *j = a->job;
    const tfm__attention_grads *g = c->g;
    const int64_t ld = TFM_BWD_KEYS;
    const tfm__relative *rel = j->relative;
    const float *qi = a->q + i0 * j->ldq;
    const int shaw = rel && rel->kind == TFM_RELATIVE_SHAW;
    const tfm__shaw_tile st =
        shaw ? tfm__shaw_tile_of(rel->max_distance, a->sh->shaw_lo,
                                 a->sh->K2, j->q_pos0 + i0, j0, r, t)
             : (tfm__shaw_tile){ 0 };
    tfm__head_scores(a, i0, r, j0, t, P, ld);
    if (shaw)
        tfm__shaw_tile_key_terms(&st, qi, j->ldq, j->d_k, a->scale,
                                 rel->shaw_k, sums);
    for (int64_t i = 0; i < r; i++)
        tfm__mask_row(a, i0 + i, shaw ? sums + i * st.K2 : NULL, P + i * ld,
                      j0, t);
    bwd_probs(P, r, t, ld, lse + i0);
    /* Pv: the weights the values met (dropped under dropout). */
    const int drop = tfm__dropout_on(&j->dropout);
    const float *Pv = P;
    if (drop) {
        tfm__dropout_copy_rows(&j->dropout, tfm__weight_index(a, i0, j0),
                               (uint64_t)j->S, P, Pd, r, t, ld);
        Pv = Pd;
    }
    const float *dOi = d_o + i0 * g->lddo;
    if (dV)
        tfm__sgemm(1, 0, t, j->d_v, r, 1.0f, Pv, ld, dOi, g->lddo, 1.0f,
                   dV + j0 * g->lddv, g->lddv);
    if (!dK && !dQ && !pt->dw && !pt->dt5 && !pt->dshaw_k && !pt->dshaw_v)
        return;
    tfm__sgemm(0, 1, r, t, j->d_v, 1.0f, dOi, g->lddo, a->v + j0 * j->ldv,
               j->ldv, 0.0f, dS, ld);
    if (tfm__shaw_values(j))
        tfm__shaw_value_backward(&st, Pv, ld, dOi, g->lddo, j->d_v,
                                 rel->shaw_v, sums, pt->dshaw_v, dS);
    if (drop)   /* the gradient of the undropped weights */
        tfm__dropout_apply_rows(&j->dropout, tfm__weight_index(a, i0, j0),
                                (uint64_t)j->S, dS, r, t, ld);
    bwd_dscores(P, dS, r, t, ld, D + i0);
    if (pt->dt5)
        tfm__distance_sums(dS, r, t, ld, j0 - (j->q_pos0 + i0) - a->sh->d_min,
                           pt->dt5);
    if (shaw)
        tfm__shaw_key_backward(&st, dS, ld, qi, j->ldq, j->d_k, a->scale,
                               rel->shaw_k, sums, dQ ? dQ + i0 * lddq : NULL,
                               lddq, pt->dshaw_k);
    if (j->additive_v) {
        tfm__additive_backward(qi, j->ldq, a->k + j0 * j->ldk, j->ldk, r, t,
                               j->d_k, a->scale, j->additive_v + a->h * j->d_k,
                               dS, ld, dQ + i0 * lddq, lddq,
                               dK + j0 * g->lddk, g->lddk, pt->dw);
        return;
    }
    if (dK)
        tfm__sgemm(1, 0, t, j->d_k, r, a->scale, dS, ld, qi, j->ldq, 1.0f,
                   dK + j0 * g->lddk, g->lddk);
    if (dQ)
        tfm__sgemm(0, 0, r, j->d_k, t, a->scale, dS, ld, a->k + j0 * j->ldk,
                   j->ldk, 1.0f, dQ + i0 * lddq, lddq);
}

/* An item's parameter gradients: [group, d_k] additive_v (always with the
 * additive score, whose loop writes it), [group, n_dist] T5 distances,
 * [K2, d_k] Shaw keys, [K2, d_v] Shaw values, each present when wanted;
 * returns their floats (bwd_part_of's layout). */
static int64_t bwd_part_floats(const bwd_ctx *c)
{
    const tfm__attention_job *j = c->sh->job;
    const tfm__attention_grads *g = c->g;
    const int64_t group = tfm__group_of(j), K2 = c->sh->K2;
    return (j->additive_v ? group * j->d_k : 0) +
           (g->dt5_bias ? group * c->n_dist : 0) +
           (g->dshaw_k ? K2 * j->d_k : 0) + (g->dshaw_v ? K2 * j->d_v : 0);
}

/* The pointers of query head hg (of the group) into an item's part. */
static bwd_part bwd_part_of(const bwd_ctx *c, float *part, int64_t hg)
{
    const tfm__attention_job *j = c->sh->job;
    const tfm__attention_grads *g = c->g;
    const int64_t group = tfm__group_of(j), K2 = c->sh->K2;
    bwd_part pt = { 0 };
    if (!part)
        return pt;
    if (j->additive_v) {
        pt.dw = part + hg * j->d_k;
        part += group * j->d_k;
    }
    if (g->dt5_bias) {
        pt.dt5 = part + hg * c->n_dist;
        part += group * c->n_dist;
    }
    if (g->dshaw_k) {
        pt.dshaw_k = part;
        part += K2 * j->d_k;
    }
    if (g->dshaw_v)
        pt.dshaw_v = part;
    return pt;
}

/* The items' parameter gradients added into the caller's, in item order
 * (the same sums for every thread count). */
static void bwd_params(const bwd_ctx *c, int64_t items)
{
    const tfm__attention_job *j = c->sh->job;
    const tfm__attention_grads *g = c->g;
    const int64_t group = tfm__group_of(j), K2 = c->sh->K2, NC = c->n_chunks;
    const int64_t lo = c->sh->shaw_lo;
    for (int64_t item = 0; item < items; item++) {
        const int64_t kvh = item / NC % c->sh->H_kv;
        float *part = c->parts + item * c->part_floats;
        for (int64_t hg = 0; hg < group; hg++) {
            const int64_t h = kvh * group + hg;
            const bwd_part pt = bwd_part_of(c, part, hg);
            for (int64_t e = 0; g->dadditive_v && e < j->d_k; e++)
                g->dadditive_v[h * j->d_k + e] += pt.dw[e];
            if (pt.dt5)
                tfm__t5_bias_backward(c->sh->t5_bucket, c->n_dist, pt.dt5, h,
                                      j->H, g->dt5_bias);
        }
        const bwd_part pt = bwd_part_of(c, part, 0);
        for (int64_t e = 0; pt.dshaw_k && e < K2 * j->d_k; e++)
            g->dshaw_k[lo * j->d_k + e] += pt.dshaw_k[e];
        for (int64_t e = 0; pt.dshaw_v && e < K2 * j->d_v; e++)
            g->dshaw_v[lo * j->d_v + e] += pt.dshaw_v[e];
    }
}

/* Items: (b, key/value head kvh, chunk) = (b * H_kv + kvh) * n_chunks +
 * chunk.  The chunk's rows of dk and dv are this item's alone; so is the
 * dq of chunk 0 (the caller's) and of the other chunks (dq_parts).  The
 * query heads of a group accumulate in order h = kvh * group .. */
static void bwd_items(void *arg, int64_t begin, int64_t end, int slot)
{
    const bwd_ctx *c = arg;
    const tfm__run_shared *sh = c->sh;
    const tfm__attention_job *j = sh->job;
    const tfm__attention_grads *g = c->g;
    const int64_t Br = TFM_BWD_ROWS, Bc = TFM_BWD_KEYS, NC = c->n_chunks;
    const int64_t group = tfm__group_of(j), L = j->L, S = j->S;
    float *P = c->scratch + (int64_t)slot * c->slot_floats, *dS = P + Br * Bc;
    for (int64_t item = begin; item < end; item++) {
        float *part = c->parts ? c->parts + item * c->part_floats : NULL;
        if (part)
            memset(part, 0, (size_t)c->part_floats * sizeof(float));
        const int64_t ch = item % NC, bk = item / NC;
        const int64_t b = bk / sh->H_kv, kvh = bk % sh->H_kv;
        const int64_t k_lo = ch * c->n_tiles / NC * Bc;
        int64_t k_hi = (ch + 1) * c->n_tiles / NC * Bc;
        k_hi = k_hi < S ? k_hi : S;
        float *dK = g->dk ? g->dk + b * g->dk_bstride + kvh * g->dk_hstride
                          : NULL;
        float *dV = g->dv ? g->dv + b * g->dv_bstride + kvh * g->dv_hstride
                          : NULL;
        for (int64_t s = k_lo; s < k_hi; s++) {
            if (dK)
                memset(dK + s * g->lddk, 0, (size_t)j->d_k * sizeof(float));
            if (dV)
                memset(dV + s * g->lddv, 0, (size_t)j->d_v * sizeof(float));
        }
        for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
            const tfm__head_view a = tfm__view_of(sh, b, h);
            const bwd_part pt = bwd_part_of(c, part, h - kvh * group);
            const int64_t bh = b * j->H + h;
            const float *d_o = g->dout + b * g->do_bstride + h * g->do_hstride;
            float *dQ = NULL;
            int64_t lddq = g->lddq;
            if (g->dq && ch == 0) {
                dQ = g->dq + b * g->dq_bstride + h * g->dq_hstride;
            } else if (g->dq) {
                dQ = c->dq_parts + (bh * (NC - 1) + ch - 1) * L * j->d_k;
                lddq = j->d_k;
                memset(dQ, 0, (size_t)(L * j->d_k) * sizeof(float));
            }
            for (int64_t j0 = k_lo; j0 < k_hi; j0 += Bc) {
                const int64_t t = k_hi - j0 < Bc ? k_hi - j0 : Bc;
                /* Causal: key j0 is first visible to row j0 - offset. */
                int64_t i_start = j->masks->causal ? j0 - sh->offset : 0;
                i_start = i_start < 0 ? 0 : i_start;
                for (int64_t i0 = i_start; i0 < L; i0 += Br) {
                    const int64_t r = L - i0 < Br ? L - i0 : Br;
                    bwd_tile(&a, c, i0, r, j0, t, P, dS, d_o,
                             g->lse + bh * L, c->D + bh * L, dK, dV, dQ,
                             lddq, &pt, dS + Br * Bc,
                             dS + Br * Bc + Br * sh->K2);
                }
            }
        }
    }
}

/* Items: query heads (b, h): dq += the parts of chunks 1 .. n-1, in order. */
static void bwd_reduce(void *arg, int64_t begin, int64_t end, int slot)
{
    const bwd_ctx *c = arg;
    const tfm__attention_job *j = c->sh->job;
    const tfm__attention_grads *g = c->g;
    const int64_t NC = c->n_chunks, L = j->L, dk = j->d_k;
    (void)slot;
    for (int64_t bh = begin; bh < end; bh++) {
        float *dq = g->dq + bh / j->H * g->dq_bstride +
                    bh % j->H * g->dq_hstride;
        for (int64_t ch = 1; ch < NC; ch++) {
            const float *part = c->dq_parts + (bh * (NC - 1) + ch - 1) * L * dk;
            for (int64_t i = 0; i < L; i++)
                for (int64_t e = 0; e < dk; e++)
                    dq[i * g->lddq + e] += part[i * dk + e];
        }
    }
}

tfm_status tfm__attention_backward_run(const tfm__attention_job *in,
                                       const tfm__attention_grads *g)
{
    tfm__attention_job job = *in;
    tfm__sparse sparse;
    if (in->sparse) {
        sparse = tfm__sparse_clamp(in->sparse, in->q_pos0, in->L, in->S);
        job.sparse = &sparse;
    }
    const tfm__plan plan = tfm__plan_now();
    tfm__run_shared sh = { .job = &job, .H_kv = job.H / tfm__group_of(&job),
                           .offset = job.q_pos0 };
    const int64_t Br = TFM_BWD_ROWS, Bc = TFM_BWD_KEYS;
    bwd_ctx c = { .sh = &sh, .g = g };
    c.n_dist = tfm__relative_tables(&job, &sh);
    c.n_tiles = (job.S + Bc - 1) / Bc;
    c.n_chunks = bwd_chunks(&job, sh.H_kv, c.n_tiles);
    /* P, dS, Shaw's sums, then the dropped weights under dropout. */
    c.slot_floats = 2 * Br * Bc + Br * sh.K2 +
                    (tfm__dropout_on(&job.dropout) ? Br * Bc : 0);
    c.part_floats = bwd_part_floats(&c);
    const int64_t BH = job.B * job.H;
    const int64_t items = job.B * sh.H_kv * c.n_chunks;
    const int t5 = job.relative && job.relative->kind == TFM_RELATIVE_T5;

    tfm__ws_mark mark = tfm__ws_save();
    c.D = tfm__ws_floats((size_t)(BH * job.L + 1));
    c.scratch = c.D ? tfm__ws_floats((size_t)(plan.slots * c.slot_floats))
                    : NULL;
    int ok = c.scratch != NULL;
    if (ok && g->dq && c.n_chunks > 1)
        ok = (c.dq_parts = tfm__ws_floats((size_t)(
                  BH * (c.n_chunks - 1) * job.L * job.d_k))) != NULL;
    if (ok && c.part_floats)
        ok = (c.parts = tfm__ws_floats((size_t)(items * c.part_floats))) !=
             NULL;
    int32_t *bucket = NULL;
    if (ok && t5)
        ok = (bucket = tfm__ws_alloc((size_t)c.n_dist * sizeof(int32_t))) !=
             NULL;
    if (!ok) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate attention backward scratch memory");
    }
    if (bucket) {
        tfm__t5_buckets(job.relative, sh.d_min, c.n_dist, bucket);
        sh.t5_bucket = bucket;
    }
    tfm__parallel_for(plan, BH, 1, bwd_rows, &c);
    tfm__parallel_for(plan, items, 1, bwd_items, &c);
    if (c.dq_parts)
        tfm__parallel_for(plan, BH, 1, bwd_reduce, &c);
    if (c.parts)
        bwd_params(&c, items);
    tfm__ws_restore(mark);
    return TFM_OK;
}
