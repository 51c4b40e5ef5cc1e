/* The attention kernel's forward (attention_kernel.h: tfm__attention_run):
 * tiles, the online softmax, non-finite values, threading and the dilated
 * split; its backward is attention_backward.c, the state and per-row
 * helpers both share attention_kernel_impl.h.  Masks come from
 * attention_masks.h, positions (relative terms, sparse patterns) from
 * attention_positions.h, scores from attention_scores.h.
 *
 * Work items are (batch element, head, block of query rows), spread over
 * the library's threads (parallel.h).  Two paths, chosen by whether the
 * caller asked for the weights:
 *
 * - tiled (no weights): a block of up to TFM_TILED_ROWS queries meets the
 *   keys TFM_KEY_TILE at a time.  Each tile's logits are one cblas_sgemm,
 *   masks and the online softmax (running maximum and sum) run row by row,
 *   and a second cblas_sgemm accumulates the tile's values into the output
 *   rows, rescaled when the running maximum moves.  Only a tile of logits
 *   exists at a time (memory linear in the sequence length), and under a
 *   causal mask tiles after the block's last visible key are skipped.
 * - whole rows (weights requested): a block of queries gets its full rows
 *   of logits, written straight into the caller's weights, then the exact
 *   two-pass softmax and one product with the values.
 *
 * Masks are computed from indices (causal) or read from the caller's
 * tensors; no L x S mask is ever built.  Values in masked positions must
 * not reach the output even when they are NaN or infinite, but 0 * NaN =
 * NaN inside a matrix product.  So value rows holding non-finite numbers
 * are zeroed in a copy for the product, and then added back, row by row,
 * only for the queries that may see them.
 *
 * Per head h of batch element b (Vaswani et al. 2017, eq. (1)):
 *   s_ij = scale_h * score(q_i, k_j) + rel_h(j - p_i)     logits [L, S]
 *   s_ij = -inf where a mask or the sparse pattern hides key j
 *   w_ij = exp(s_ij - m_i) / l_i,  m_i = max_j s_ij,  l_i = sum_j exp(..)
 *   o_i  = sum_j w_ij v_j (+ sum_j w_ij r^V(j - p_i), Shaw)  out [L, d_v]
 */
#include <math.h>
#include <string.h>

#include "attention/attention_kernel_impl.h"
#include "base/error.h"
#include "base/parallel.h"
#include "base/gemm.h"
#include "kernels/softmax.h"
#include "kernels/vmath.h"
#include "base/workspace.h"

/* ==== Blocks ============================================================ */

#define TFM_QUERY_BLOCK 64      /* fewest query rows of a whole-row block */
#define TFM_BLOCK_FLOATS 131072 /* logits of a whole-row block: 512 KiB */
#define TFM_TILED_ROWS 128      /* most query rows of a tiled block */
#define TFM_KEY_TILE 512        /* keys per tile of the tiled path */

/* Query rows per block: enough that each product is large for OpenBLAS,
 * few enough that a block of logits (rows x S) stays about 512 KiB. */
static int64_t block_rows(int64_t L, int64_t S)
{
    int64_t rows = TFM_BLOCK_FLOATS / S;
    rows = rows < TFM_QUERY_BLOCK ? TFM_QUERY_BLOCK : rows;
    return rows < L ? rows : L;
}

/* ==== One row of logits: masked keys and Shaw's key terms ============== */

/* Whether key j is masked out for query row gi (the logit is -inf whatever
 * the scores are): tfm__mask_row's rules for one key. */
static int masked_at(const tfm__head_view *a, int64_t gi, int64_t j)
{
    const tfm__attention_job *jb = a->job;
    const tfm__masks *m = jb->masks;
    const int64_t S = jb->S;
    if (m->causal && j > gi + a->sh->offset)
        return 1;
    if (jb->sparse && !tfm__sparse_visible(jb->sparse, m->causal != 0, S,
                                           jb->q_pos0 + gi, j))
        return 1;
    float x = 0.0f;
    if (m->key_padding)
        x = tfm__mask_apply(x, m->key_padding[a->b * S + j],
                            m->key_padding_kind);
    if (m->attn && x != -INFINITY)
        x = tfm__mask_apply(x,
                            m->attn[a->b * m->attn_batch_stride +
                                    a->h * m->attn_head_stride + gi * S + j],
                            m->attn_kind);
    return x == -INFINITY;
}

/* Shaw's key terms of one head's rows i0 .. i0+r-1: qr [r, K2]. */
static void key_terms(const tfm__head_view *a, int64_t i0, int64_t r,
                      float *qr)
{
    const tfm__attention_job *j = a->job;
    tfm__shaw_key_terms(a->q + i0 * j->ldq, j->ldq, r, j->d_k, a->scale,
                        j->relative->shaw_k + a->sh->shaw_lo * j->d_k,
                        a->sh->K2, qr);
}

/* ==== Non-finite values ================================================= */

/* Flags the value rows of (b, key/value head kvh) holding a NaN or an
 * infinity (vmath.h); returns how many. */
static int64_t flag_head(const tfm__attention_job *j, int64_t b, int64_t kvh,
                         unsigned char *flags)
{
    const float *v = j->v + b * j->v_bstride + kvh * j->v_hstride;
    int64_t n_bad = 0;
    for (int64_t r = 0; r < j->S; r++) {
        const int bad = tfm__has_nonfinite(v + r * j->ldv, j->d_v);
        flags[r] = (unsigned char)bad;
        n_bad += bad;
    }
    return n_bad;
}

/* Copies value rows j0 .. j0+n-1 into clean [n, d_v], zeros for the
 * flagged ones; returns how many were flagged. */
static int64_t clean_values(const tfm__head_view *a, int64_t j0, int64_t n,
                            float *clean)
{
    const int64_t dv = a->job->d_v;
    int64_t n_bad = 0;
    for (int64_t k = 0; k < n; k++) {
        if (a->bad[j0 + k]) {
            memset(clean + k * dv, 0, (size_t)dv * sizeof(float));
            n_bad++;
        } else {
            memcpy(clean + k * dv, a->v + (j0 + k) * a->job->ldv,
                   (size_t)dv * sizeof(float));
        }
    }
    return n_bad;
}

/* Adds back, for the queries that may see them, the flagged value rows j0
 * .. j0+n-1 weighted by p [r, n] (row stride ldp): a visible key's
 * non-finite value propagates even when its weight underflowed to 0
 * (0 * NaN is NaN); a masked key's never does. */
static void add_back_bad(const tfm__head_view *a, int64_t i0, int64_t r,
                         int64_t j0, int64_t n, const float *p, int64_t ldp,
                         float *out)
{
    const tfm__attention_job *j = a->job;
    for (int64_t k = 0; k < n; k++) {
        if (!a->bad[j0 + k])
            continue;
        const float *vk = a->v + (j0 + k) * j->ldv;
        for (int64_t i = 0; i < r; i++) {
            float w = p[i * ldp + k];
            if (w != 0.0f || !masked_at(a, i0 + i, j0 + k))
                for (int64_t c = 0; c < j->d_v; c++)
                    out[i * j->ldo + c] += w * vk[c];
        }
    }
}

/* ==== The two paths ===================================================== */

/* Query rows per block of a job: the whole-row path (weights requested)
 * or the tiled path.  Under a sparse pattern a block computes the whole
 * band of keys its rows span (rows + 2 * window wide), so narrow patterns
 * take fewer rows: a quarter of the window, or one BigBird block, between
 * 32 and TFM_TILED_ROWS (measured: 1.5 to 2 times faster than 128 rows for
 * windows of 64 to 256 and BigBird blocks of 64). */
static int64_t job_rows(const tfm__attention_job *j)
{
    if (j->weights)
        return block_rows(j->L, j->S);
    int64_t rows = TFM_TILED_ROWS;
    const tfm__sparse *sp = j->sparse;
    if (sp && sp->kind != TFM_SPARSE_NONE) {
        rows = sp->kind == TFM_SPARSE_BIGBIRD ? sp->block_size
               : sp->window / 4 * (sp->kind == TFM_SPARSE_DILATED
                                       ? sp->dilation : 1);
        rows = rows < 32 ? 32 : (rows > TFM_TILED_ROWS ? TFM_TILED_ROWS : rows);
    }
    return j->L < rows ? j->L : rows;
}

/* Per-thread scratch in floats: logits (a block of whole rows, or one
 * tile), the running maxima and sums of the tiled path, a cleaned copy of
 * the values, and Shaw's per-row key terms and bucketed weights. */
static int64_t scratch_floats(const tfm__attention_job *j, int64_t K2)
{
    const int64_t rows = job_rows(j);
    const int64_t shaw = 2 * rows * K2;
    if (j->weights)
        return rows * j->S + j->S * j->d_v + shaw;
    return rows * TFM_KEY_TILE + 2 * rows + TFM_KEY_TILE * j->d_v + shaw;
}

/* One thread's scratch. */
typedef struct slot_scratch {
    float *f;                   /* scratch_floats(job) floats */
    int64_t *ranges;            /* [2 * range_cap] */
} slot_scratch;

/* The causal limit of rows i0 .. i0+r-1: one past their last visible key. */
static int64_t causal_limit(const tfm__head_view *a, int64_t i0, int64_t r)
{
    const int64_t S = a->job->S;
    if (!a->job->masks->causal)
        return S;
    int64_t n = i0 + r + a->sh->offset;
    return n < 0 ? 0 : (n > S ? S : n);
}

/* The tiled path (no weights requested): query rows i0 .. i0+r-1 against
 * the visible key ranges, TFM_KEY_TILE keys at a time, with the online
 * softmax, accumulating directly into the output rows.  Only a tile of
 * logits exists at a time; keys outside the causal limit and the sparse
 * pattern's ranges are never computed.  Per tile of logits s_ij and row i
 * (Milakov and Gimelshein 2018, "Online normalizer calculation for
 * softmax"; as FlashAttention, Dao et al. 2022, algorithm 1):
 *   m' = max(m_i, max_j s_ij),  alpha = exp(m_i - m'),
 *   l_i = alpha l_i + sum_j exp(s_ij - m'),
 *   o_i = alpha o_i + sum_j exp(s_ij - m') v_j       (one GEMM per tile)
 * and at the end o_i /= l_i (zeros when every key is masked). */
static void attend_block_tiled(const tfm__head_view *a, int64_t i0, int64_t r,
                               const slot_scratch *sc)
{
    const tfm__attention_job *j = a->job;
    const int64_t dv = j->d_v, T = TFM_KEY_TILE, K2 = a->sh->K2;
    const int64_t rows = job_rows(j);
    float *tile = sc->f;                /* [rows, T] logits, then weights */
    float *mrow = tile + rows * T;      /* [rows] running maxima m_i */
    float *lrow = mrow + rows;          /* [rows] running sums l_i */
    float *clean_v = lrow + rows;       /* [T, d_v] values, non-finite = 0 */
    float *qr = clean_v + T * dv;       /* [rows, K2] Shaw key terms */
    float *pb = qr + rows * K2;         /* [rows, K2] Shaw bucket weights */
    const int with_sv = tfm__shaw_values(j);
    const int drop = tfm__dropout_on(&j->dropout);
    float *out = a->out + i0 * j->ldo;
    for (int64_t i = 0; i < r; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
        memset(out + i * j->ldo, 0, (size_t)dv * sizeof(float));
    }
    if (K2) {
        key_terms(a, i0, r, qr);
        memset(pb, 0, (size_t)(r * K2) * sizeof(float));
    }

    const int64_t n_ranges =
        tfm__sparse_key_ranges(j->sparse, j->masks->causal != 0, j->S,
                               j->q_pos0 + i0, r, causal_limit(a, i0, r),
                               sc->ranges);
    for (int64_t g = 0; g < n_ranges; g++) {
        const int64_t lo = sc->ranges[2 * g], hi = sc->ranges[2 * g + 1];
        for (int64_t j0 = lo; j0 < hi; j0 += T) {
            const int64_t t = hi - j0 < T ? hi - j0 : T;
            tfm__head_scores(a, i0, r, j0, t, tile, T);
            for (int64_t i = 0; i < r; i++) {
                float *row = tile + i * T;
                tfm__mask_row(a, i0 + i, qr + i * K2, row, j0, t);
                float alpha =
                    tfm__softmax_online_step(row, t, &mrow[i], &lrow[i]);
                if (alpha != 1.0f) {
                    float *o = out + i * j->ldo;
                    for (int64_t c = 0; c < dv; c++)
                        o[c] *= alpha;
                    if (with_sv)
                        for (int64_t c = 0; c < K2; c++)
                            pb[i * K2 + c] *= alpha;
                }
                if (drop)
                    tfm__dropout_apply(&j->dropout,
                                       tfm__weight_index(a, i0 + i, j0), row,
                                       t);
                if (with_sv)
                    tfm__shaw_bucket_weights(j->relative->max_distance,
                                             a->sh->shaw_lo,
                                             j->q_pos0 + i0 + i, row, j0, t,
                                             pb + i * K2);
            }
            const float *v = a->v + j0 * j->ldv;
            int64_t ldv = j->ldv;
            int64_t n_bad = a->n_bad ? clean_values(a, j0, t, clean_v) : 0;
            if (n_bad) {
                v = clean_v;
                ldv = dv;
            }
            tfm__sgemm(0, 0, r, dv, t, 1.0f, tile, T, v, ldv, 1.0f, out,
                       j->ldo);
            if (n_bad)
                add_back_bad(a, i0, r, j0, t, tile, T, out);
        }
    }
    if (with_sv)
        tfm__shaw_value_term(pb, r, K2,
                             j->relative->shaw_v + a->sh->shaw_lo * dv, dv,
                             out, j->ldo);
    if (j->lse) {
        float *lse = j->lse + (a->b * j->H + a->h) * j->L + i0;
        for (int64_t i = 0; i < r; i++)
            lse[i] = lrow[i] == 0.0f ? -INFINITY : mrow[i] + logf(lrow[i]);
    }
    for (int64_t i = 0; i < r; i++) {
        float *o = out + i * j->ldo;
        if (lrow[i] == 0.0f) {
            /* Every key masked: zeros, not 0/0. */
            memset(o, 0, (size_t)dv * sizeof(float));
            continue;
        }
        const float inv = 1.0f / lrow[i];
        for (int64_t c = 0; c < dv; c++)
            o[c] *= inv;
    }
}

/* log sum_j exp(row[j]) of n logits (-inf when all are -inf or n = 0;
 * NaN propagates), for the training forward's saved log-sum-exp. */
static float row_lse(const float *row, int64_t n)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        m = row[j] > m || row[j] != row[j] ? row[j] : m;
    if (m == -INFINITY || m != m || m == INFINITY)
        return m;
    double l = 0.0;
    for (int64_t j = 0; j < n; j++)
        l += exp((double)row[j] - m);
    return m + (float)log(l);
}

/* The whole-row path (weights requested): query rows i0 .. i0+r-1 of one
 * head get their rows of logits p [r, n] (in the caller's weights, or in
 * scratch when averaging), the exact softmax row by row (softmax.h), and
 * out [r, d_v] = p v [n, d_v] in one GEMM; n is the causal limit.  With
 * averaged weights the caller has zeroed (or accumulated into) their rows,
 * which receive p / H. */
static void attend_block(const tfm__head_view *a, int64_t i0, int64_t r,
                         const slot_scratch *sc)
{
    const tfm__attention_job *j = a->job;
    const int64_t L = j->L, S = j->S, dv = j->d_v, K2 = a->sh->K2;
    const int64_t rows = block_rows(L, S);
    float *block = sc->f;               /* [rows, S] weights (averaged) */
    float *clean_v = block + rows * S;  /* [S, d_v] values, non-finite = 0 */
    float *qr = clean_v + S * dv;       /* [rows, K2] Shaw key terms */
    float *pb = qr + rows * K2;         /* [rows, K2] Shaw bucket weights */
    const int with_sv = tfm__shaw_values(j);
    const int64_t n = causal_limit(a, i0, r);

    const float *v = a->v;
    int64_t ldv = j->ldv;
    int64_t n_bad = a->n_bad ? clean_values(a, 0, n, clean_v) : 0;
    if (n_bad) {
        v = clean_v;
        ldv = dv;
    }

    const int in_place = !j->average;
    float *p = in_place
                   ? j->weights + ((a->b * j->H + a->h) * L + i0) * S
                   : block;
    const int64_t ldp = S;
    float *out = a->out + i0 * j->ldo;

    if (K2) {
        key_terms(a, i0, r, qr);
        memset(pb, 0, (size_t)(r * K2) * sizeof(float));
    }
    tfm__head_scores(a, i0, r, 0, n, p, ldp);
    for (int64_t i = 0; i < r; i++) {
        float *row = p + i * ldp;
        tfm__mask_row(a, i0 + i, qr + i * K2, row, 0, n);
        if (j->lse)
            j->lse[(a->b * j->H + a->h) * L + i0 + i] = row_lse(row, n);
        tfm__softmax_row(row, n);
        if (in_place && n < S)
            memset(row + n, 0, (size_t)(S - n) * sizeof(float));
        if (tfm__dropout_on(&j->dropout))
            tfm__dropout_apply(&j->dropout, tfm__weight_index(a, i0 + i, 0),
                               row, n);
        if (with_sv)
            tfm__shaw_bucket_weights(j->relative->max_distance,
                                     a->sh->shaw_lo, j->q_pos0 + i0 + i,
                                     row, 0, n, pb + i * K2);
    }
    tfm__sgemm(0, 0, r, dv, n, 1.0f, p, ldp, v, ldv, 0.0f, out, j->ldo);
    if (with_sv)
        tfm__shaw_value_term(pb, r, K2,
                             j->relative->shaw_v + a->sh->shaw_lo * dv, dv,
                             out, j->ldo);

    if (n_bad)
        add_back_bad(a, i0, r, 0, n, p, ldp, out);
    if (j->average) {
        const float f = 1.0f / (float)j->H;
        for (int64_t i = 0; i < r; i++) {
            float *dst = j->weights + (a->b * L + i0 + i) * S;
            const float *src = p + i * ldp;
            for (int64_t k = 0; k < n; k++)
                dst[k] += f * src[k];
        }
    }
}

/* ==== Running a job on the threads ====================================== */

/* What the pool's items read: the run and every thread slot's scratch. */
typedef struct run_ctx {
    const tfm__run_shared *sh;
    float *scratch;         /* [slots, slot_floats] (scratch_floats) */
    int64_t *ranges;        /* [slots, slot_ranges] visible key ranges */
    int64_t slot_floats, slot_ranges;
    int64_t n_blocks, rows;
} run_ctx;

/* Items: key/value heads (b, kvh) = b * H_kv + kvh; flags their
 * non-finite value rows. */
static void flag_items(void *arg, int64_t begin, int64_t end, int slot)
{
    const run_ctx *c = arg;
    const tfm__run_shared *sh = c->sh;
    (void)slot;
    for (int64_t bk = begin; bk < end; bk++)
        sh->bad_count[bk] =
            flag_head(sh->job, bk / sh->H_kv, bk % sh->H_kv,
                      sh->bad_flags + bk * sh->job->S);
}

/* Items: (b, h, block) in that order; with averaged weights (b, block),
 * the heads of a block accumulating in order h = 0 .. H-1 in one thread,
 * so the sum does not depend on the thread count. */
static void run_items(void *arg, int64_t begin, int64_t end, int slot)
{
    const run_ctx *c = arg;
    const tfm__attention_job *j = c->sh->job;
    const slot_scratch sc = { c->scratch + slot * c->slot_floats,
                              c->ranges + slot * c->slot_ranges };
    for (int64_t item = begin; item < end; item++) {
        /* Blocks in the order 0, n-1, 1, n-2, ...: under a causal mask
         * later blocks see more keys, and this order gives every thread's
         * contiguous range of items a similar amount of work. */
        int64_t z = item % c->n_blocks, rest = item / c->n_blocks;
        int64_t blk = z % 2 == 0 ? z / 2 : c->n_blocks - 1 - z / 2;
        int64_t i0 = blk * c->rows;
        int64_t r = j->L - i0 < c->rows ? j->L - i0 : c->rows;
        int64_t b = j->average ? rest : rest / j->H;
        int64_t h0 = j->average ? 0 : rest % j->H;
        int64_t h1 = j->average ? j->H : h0 + 1;
        if (j->average && j->weights)
            memset(j->weights + (b * j->L + i0) * j->S, 0,
                   (size_t)(r * j->S) * sizeof(float));
        for (int64_t h = h0; h < h1; h++) {
            tfm__head_view a = tfm__view_of(c->sh, b, h);
            if (j->weights)
                attend_block(&a, i0, r, &sc);
            else
                attend_block_tiled(&a, i0, r, &sc);
        }
    }
}

/* Runs a job whose causal mask lets row i see keys j <= i + offset: the
 * per-run tables (Shaw's reachable rows, T5's buckets of the run's
 * L + S - 1 distances), every thread slot's scratch, the non-finite flags
 * of the value rows, then the (b, h, block) items on the pool. */
static tfm_status run_job(const tfm__attention_job *job, int64_t offset)
{
    /* One snapshot: the scratch below holds plan.slots slots, and both
     * parallel loops split into at most that many pieces. */
    const tfm__plan plan = tfm__plan_now();
    const int slots = plan.slots;
    tfm__run_shared sh = { .job = job, .H_kv = job->H / tfm__group_of(job) };
    sh.offset = offset;
    const tfm__relative *rel = job->relative;
    const int64_t n_dist = tfm__relative_tables(job, &sh);

    run_ctx c = { .sh = &sh, .rows = job_rows(job) };
    c.n_blocks = (job->L + c.rows - 1) / c.rows;
    c.slot_floats = scratch_floats(job, sh.K2);
    c.slot_ranges = 2 * tfm__sparse_range_cap(job->sparse, job->S, c.rows);
    const int64_t kv_heads = job->B * sh.H_kv;

    tfm__ws_mark mark = tfm__ws_save();
    /* scratch [slots, slot_floats], ranges [slots, slot_ranges],
     * bad_count [B * H_kv], bad_flags [B * H_kv, S], bucket [L + S - 1] */
    c.scratch = tfm__ws_floats((size_t)(slots * c.slot_floats));
    c.ranges = c.scratch ? tfm__ws_alloc((size_t)(slots * c.slot_ranges) *
                                         sizeof(int64_t))
                         : NULL;
    sh.bad_count = c.ranges ? tfm__ws_alloc((size_t)kv_heads *
                                            sizeof(int64_t))
                            : NULL;
    sh.bad_flags = sh.bad_count ? tfm__ws_alloc((size_t)(kv_heads * job->S))
                                : NULL;
    int32_t *bucket = NULL;
    if (sh.bad_flags && rel && rel->kind == TFM_RELATIVE_T5)
        bucket = tfm__ws_alloc((size_t)n_dist * sizeof(int32_t));
    if (!sh.bad_flags || (rel && rel->kind == TFM_RELATIVE_T5 && !bucket)) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate attention scratch memory");
    }
    if (bucket) {
        tfm__t5_buckets(rel, sh.d_min, n_dist, bucket);
        sh.t5_bucket = bucket;
    }
    if (job->values_finite)
        memset(sh.bad_count, 0, (size_t)kv_heads * sizeof *sh.bad_count);
    else
        tfm__parallel_for(plan, kv_heads, 4, flag_items, &c);
    int64_t items = job->B * (job->average ? 1 : job->H) * c.n_blocks;
    tfm__parallel_for(plan, items, 1, run_items, &c);
    tfm__ws_restore(mark);
    return TFM_OK;
}

/* ==== The dilated split ================================================= */

/* Largest dilation run as separate windows (each class costs a pass over
 * the job's setup). */
#define TFM_MAX_SPLIT_DILATION 64

/* Whether the job's dilated window runs as sliding windows over the
 * residue classes (run_dilated): without global tokens, relative terms,
 * mask tensors or the weights output, whose indexing is by position. */
static int dilated_as_windows(const tfm__attention_job *j)
{
    const tfm__sparse *sp = j->sparse;
    return sp && sp->kind == TFM_SPARSE_DILATED && sp->dilation > 1 &&
           sp->dilation <= TFM_MAX_SPLIT_DILATION && sp->dilation <= j->S &&
           sp->n_global == 0 && !j->weights && !j->relative && !j->lse &&
           !tfm__dropout_on(&j->dropout) &&
           !j->masks->key_padding && !j->masks->attn;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* A dilated window (Longformer) is a sliding window within each class of
 * positions mod `dilation`: query p sees key j only when dilation divides
 * p - j, so the queries and keys of class rho are every dilation-th row (a
 * strided view: the GEMMs take dilation times the row stride), and there
 * |p' - j'| <= window in class coordinates p = rho + dilation * p'.
 * Running the classes as sliding windows skips the (dilation - 1) /
 * dilation of each key band that the general path computes and masks.
 * The classes write into scratch [B, H, L, d_v], copied to the output once
 * every class has succeeded, so that a failure writes nothing. */
static tfm_status run_dilated(const tfm__attention_job *j, int64_t offset)
{
    const int64_t dil = j->sparse->dilation, B = j->B, H = j->H, L = j->L;
    const int64_t dv = j->d_v;
    tfm__ws_mark mark = tfm__ws_save();
    float *tmp = tfm__ws_floats((size_t)(B * H * L * dv)); /* [B, H, L, d_v] */
    if (!tmp) {
        tfm__ws_restore(mark);
        return TFM_ERR_OUT_OF_MEMORY;
    }
    const tfm__sparse window = { .kind = TFM_SPARSE_SLIDING_WINDOW,
                                 .window = j->sparse->window };
    tfm_status st = TFM_OK;
    for (int64_t rho = 0; rho < dil && st == TFM_OK; rho++) {
        /* First query row of the class: q_pos0 + i_first = rho mod dil. */
        const int64_t i_first = ((rho - j->q_pos0) % dil + dil) % dil;
        if (i_first >= L)
            continue;
        tfm__attention_job c = *j;
        c.q = j->q + i_first * j->ldq;
        c.ldq = j->ldq * dil;
        c.k = j->k + rho * j->ldk;
        c.ldk = j->ldk * dil;
        c.v = j->v + rho * j->ldv;
        c.ldv = j->ldv * dil;
        c.out = tmp + i_first * dv;
        c.o_bstride = H * L * dv;
        c.o_hstride = L * dv;
        c.ldo = dv * dil;
        c.L = (L - 1 - i_first) / dil + 1;
        c.S = (j->S - 1 - rho) / dil + 1;   /* >= 1: rho < dil <= S */
        c.q_pos0 = (j->q_pos0 + i_first - rho) / dil;   /* exact */
        c.sparse = &window;
        /* Key rho + dil j' visible to row i_first + dil i' when it is at
         * most that row + offset. */
        st = run_job(&c, floor_div(i_first + offset - rho, dil));
    }
    if (st == TFM_OK)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < L; i++)
                    memcpy(j->out + b * j->o_bstride + h * j->o_hstride +
                               i * j->ldo,
                           tmp + ((b * H + h) * L + i) * dv,
                           (size_t)dv * sizeof(float));
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__attention_run(const tfm__attention_job *in)
{
    tfm__attention_job job = *in;
    tfm__sparse sparse;
    if (in->sparse) {
        sparse = tfm__sparse_clamp(in->sparse, in->q_pos0, in->L, in->S);
        job.sparse = &sparse;
    }
    /* The causal offset is the first query's position (attention_job.c). */
    if (dilated_as_windows(&job))
        return run_dilated(&job, job.q_pos0);
    return run_job(&job, job.q_pos0);
}
