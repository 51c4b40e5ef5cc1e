/* The attention kernel (attention_core.h).
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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_core.h"
#include "error.h"
#include "gemm.h"
#include "parallel.h"
#include "random.h"
#include "softmax.h"
#include "tensor_impl.h"
#include "vmath.h"
#include "workspace.h"

#define TFM_QUERY_BLOCK 64
#define TFM_BLOCK_FLOATS 131072
#define TFM_TILED_ROWS 128
#define TFM_KEY_TILE 512

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

/* Query rows per block: enough that each product is large for OpenBLAS,
 * few enough that a block of logits (rows x S) stays about 512 KiB. */
static int64_t block_rows(int64_t L, int64_t S)
{
    int64_t rows = TFM_BLOCK_FLOATS / S;
    rows = rows < TFM_QUERY_BLOCK ? TFM_QUERY_BLOCK : rows;
    return rows < L ? rows : L;
}

/* Read-only state of one run, shared by the threads. */
typedef struct run_shared {
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
} run_shared;

/* One (batch element, head) of a job, as the per-block code sees it. */
typedef struct head_view {
    const tfm__attention_job *job;
    const run_shared *sh;
    int64_t b, h;
    float scale;
    const float *q, *k, *v;
    float *out;
    const unsigned char *bad;   /* [S]: value row holds NaN or inf */
    int64_t n_bad;              /* how many rows of this head do */
} head_view;

static int64_t group_of(const tfm__attention_job *j)
{
    return j->group > 1 ? j->group : 1;
}

static head_view view_of(const run_shared *sh, int64_t b, int64_t h)
{
    const tfm__attention_job *j = sh->job;
    const int64_t kvh = h / group_of(j), bk = b * sh->H_kv + kvh;
    return (head_view){
        .job = j, .sh = sh, .b = b, .h = h,
        .scale = j->head_scale ? j->head_scale[h] : j->scale,
        .bad = sh->bad_flags + bk * j->S,
        .n_bad = sh->bad_count[bk],
        .q = j->q + b * j->q_bstride + h * j->q_hstride,
        .k = j->k + b * j->k_bstride + kvh * j->k_hstride,
        .v = j->v + b * j->v_bstride + kvh * j->v_hstride,
        .out = j->out + b * j->o_bstride + h * j->o_hstride,
    };
}

/* ---- Positions: relative terms and sparse patterns ------------------- */

/* T5's bucket of distance d = key - query (Raffel et al. 2020; the
 * arithmetic of Hugging Face's _relative_position_bucket, in float32 as
 * there, so that the buckets agree at their boundaries). */
static int32_t t5_bucket(int64_t d, int64_t num_buckets, int64_t max_distance,
                         int bidirectional)
{
    int64_t ret = 0, nb = num_buckets, n;
    if (bidirectional) {
        nb /= 2;
        ret += d > 0 ? nb : 0;
        n = d < 0 ? -d : d;
    } else {
        n = d < 0 ? -d : 0;
    }
    const int64_t max_exact = nb / 2;
    if (n < max_exact)
        return (int32_t)(ret + n);
    float x = logf((float)n / (float)max_exact) /
              (float)log((double)max_distance / (double)max_exact) *
              (float)(nb - max_exact);
    /* x >= nb (or NaN) would also overflow the conversion: the last
     * bucket. */
    if (!(x < (float)nb))
        return (int32_t)(ret + nb - 1);
    int64_t large = max_exact + (int64_t)x;
    return (int32_t)(ret + (large < nb - 1 ? large : nb - 1));
}

/* Random key block r of query block a (variants.h: TFM_SPARSE_BIGBIRD). */
static int64_t bigbird_random(const tfm__sparse *sp, int64_t a, int64_t r,
                              int64_t n_blocks)
{
    tfm_rng rng = { (sp->seed ^ ((uint64_t)a * 0x9E3779B97F4A7C15ull)) +
                    (uint64_t)r };
    return (int64_t)(tfm__rng_next(&rng) % (uint64_t)n_blocks);
}

/* Key blocks that random draws choose from for query block a. */
static int64_t bigbird_choices(const head_view *a, int64_t qb)
{
    const int64_t bs = a->job->sparse->block_size;
    return a->job->masks->causal ? qb + 1 : (a->job->S + bs - 1) / bs;
}

/* Whether the sparse pattern lets query position p see key position j. */
static int sparse_visible(const head_view *a, int64_t p, int64_t j)
{
    const tfm__sparse *sp = a->job->sparse;
    const int64_t g = sp->n_global;
    switch (sp->kind) {
    case TFM_SPARSE_SLIDING_WINDOW:
    case TFM_SPARSE_DILATED: {
        if (p < g || j < g)
            return 1;
        const int64_t dil = sp->kind == TFM_SPARSE_DILATED ? sp->dilation : 1;
        const int64_t d = p > j ? p - j : j - p;
        return d <= sp->window * dil && d % dil == 0;
    }
    case TFM_SPARSE_BIGBIRD: {
        const int64_t bs = sp->block_size, qa = p / bs, kb = j / bs;
        if (qa < g || kb < g || (qa > kb ? qa - kb : kb - qa) <= sp->window)
            return 1;
        const int64_t n = bigbird_choices(a, qa);
        for (int64_t r = 0; r < sp->n_random_blocks; r++)
            if (bigbird_random(sp, qa, r, n) == kb)
                return 1;
        return 0;
    }
    default:
        return 1;
    }
}

/* Appends [lo, hi) clipped to [0, n) to the list rg of *cnt ranges. */
static void add_range(int64_t *rg, int64_t *cnt, int64_t lo, int64_t hi,
                      int64_t n)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > n ? n : hi;
    if (lo < hi) {
        rg[2 * *cnt] = lo;
        rg[2 * *cnt + 1] = hi;
        ++*cnt;
    }
}

/* Key blocks of BigBird in keys [0, n). */
static int64_t key_blocks(const tfm__sparse *sp, int64_t n)
{
    return n > 0 ? (n - 1) / sp->block_size + 1 : 0;
}

/* Whether the random draws of query blocks a0 .. a1 are more than the key
 * blocks of [0, n): key_ranges then takes every key instead (a superset),
 * so that the number of ranges never exceeds the number of key blocks. */
static int many_draws(const tfm__sparse *sp, int64_t a0, int64_t a1,
                      int64_t n)
{
    const int64_t nr = sp->n_random_blocks;
    return nr > 0 && a1 - a0 + 1 > key_blocks(sp, n) / nr;
}

/* Most ranges key_ranges can produce for blocks of `rows` query rows:
 * the global keys, the window, and at most one per random draw of the
 * (rows - 1) / block_size + 2 query blocks, never more than the key
 * blocks (many_draws). */
static int64_t range_cap(const tfm__attention_job *j, int64_t rows)
{
    if (!j->sparse || j->sparse->kind != TFM_SPARSE_BIGBIRD)
        return 2;
    const tfm__sparse *sp = j->sparse;
    const int64_t blocks = rows / sp->block_size + 2;
    const int64_t kb = key_blocks(sp, j->S);
    return 2 + (sp->n_random_blocks > 0 && blocks > kb / sp->n_random_blocks
                    ? kb
                    : blocks * sp->n_random_blocks);
}

/* qsort order of ranges (lo, hi) by lo. */
static int range_order(const void *x, const void *y)
{
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The keys (within [0, n)) that query rows i0 .. i0+r-1 may see under the
 * sparse pattern, as sorted disjoint ranges rg[2c] .. rg[2c+1]-1; returns
 * their count.  A superset: the per-key test in mask_row decides.  The
 * ranges' total length is bounded by the pattern, not by S. */
static int64_t key_ranges(const head_view *a, int64_t i0, int64_t r,
                          int64_t n, int64_t *rg)
{
    const tfm__sparse *sp = a->job->sparse;
    const int64_t P0 = a->job->q_pos0 + i0, P1 = P0 + r - 1;
    int64_t cnt = 0;
    if (!sp || sp->kind == TFM_SPARSE_NONE) {
        add_range(rg, &cnt, 0, n, n);
        return cnt;
    }
    const int64_t g = sp->n_global;
    if (sp->kind == TFM_SPARSE_BIGBIRD) {
        const int64_t bs = sp->block_size, a0 = P0 / bs, a1 = P1 / bs;
        if (a0 < g) {
            add_range(rg, &cnt, 0, n, n);
            return cnt;
        }
        if (many_draws(sp, a0, a1, n)) {
            add_range(rg, &cnt, 0, n, n);
            return cnt;
        }
        add_range(rg, &cnt, 0, g * bs, n);
        add_range(rg, &cnt, (a0 - sp->window) * bs, (a1 + sp->window + 1) * bs,
                  n);
        for (int64_t qa = a0; qa <= a1; qa++) {
            const int64_t choices = bigbird_choices(a, qa);
            for (int64_t k = 0; k < sp->n_random_blocks; k++) {
                int64_t kb = bigbird_random(sp, qa, k, choices);
                add_range(rg, &cnt, kb * bs, (kb + 1) * bs, n);
            }
        }
    } else {
        if (P0 < g) {
            add_range(rg, &cnt, 0, n, n);
            return cnt;
        }
        const int64_t span =
            sp->window * (sp->kind == TFM_SPARSE_DILATED ? sp->dilation : 1);
        add_range(rg, &cnt, 0, g, n);
        add_range(rg, &cnt, P0 - span, P1 + span + 1, n);
    }
    /* Sort by start (up to one range per key block: qsort, not a
     * quadratic sort), then merge overlaps. */
    qsort(rg, (size_t)cnt, 2 * sizeof *rg, range_order);
    int64_t m = 0;
    for (int64_t x = 0; x < cnt; x++) {
        if (m > 0 && rg[2 * x] <= rg[2 * m - 1]) {
            if (rg[2 * x + 1] > rg[2 * m - 1])
                rg[2 * m - 1] = rg[2 * x + 1];
        } else {
            rg[2 * m] = rg[2 * x], rg[2 * m + 1] = rg[2 * x + 1];
            m++;
        }
    }
    return m;
}

/* Clipped Shaw index of distance d: clip(d, -k, k) + k. */
static inline int64_t shaw_index(int64_t d, int64_t k)
{
    return (d < -k ? -k : d > k ? k : d) + k;
}

/* Adds the relative-position term to logits row[0 .. n-1] (keys j0 ..)
 * of the query at position p.  qr: Shaw's scale * q_p . r^K(c), [K2]. */
static void add_relative(const head_view *a, int64_t p, const float *qr,
                         float *row, int64_t j0, int64_t n)
{
    const tfm__relative *rel = a->job->relative;
    const int64_t d0 = j0 - p;  /* distance of row[0] */
    switch (rel->kind) {
    case TFM_RELATIVE_ALIBI: {
        const float m = rel->alibi_slopes[a->h];
        for (int64_t j = 0; j < n; j++) {
            int64_t d = d0 + j;
            row[j] -= m * (float)(d < 0 ? -d : d);
        }
        break;
    }
    case TFM_RELATIVE_T5: {
        const int32_t *bucket = a->sh->t5_bucket + (d0 - a->sh->d_min);
        const float *bias = rel->t5_bias + a->h;
        const int64_t H = a->job->H;
        for (int64_t j = 0; j < n; j++)
            row[j] += bias[bucket[j] * H];
        break;
    }
    case TFM_RELATIVE_SHAW: {
        const int64_t k = rel->max_distance;
        for (int64_t j = 0; j < n; j++)
            row[j] += qr[shaw_index(d0 + j, k) - a->sh->shaw_lo];
        break;
    }
    default:
        break;
    }
}

/* Sets row[j] (key j0 + j, j < n) to -inf where the sparse pattern hides
 * the key from query position p: by whole intervals for the windows and by
 * whole key blocks for BigBird, so that the per-key work stays small. */
static void sparse_mask_row(const head_view *a, int64_t p, float *row,
                            int64_t j0, int64_t n)
{
    const tfm__sparse *sp = a->job->sparse;
    const int64_t g = sp->n_global;
    if (sp->kind == TFM_SPARSE_BIGBIRD) {
        const int64_t bs = sp->block_size;
        for (int64_t c = 0; c < n;) {
            const int64_t kb = (j0 + c) / bs;
            int64_t end = (kb + 1) * bs - j0;
            end = end < n ? end : n;
            if (!sparse_visible(a, p, kb * bs))
                for (; c < end; c++)
                    row[c] = -INFINITY;
            c = end;
        }
        return;
    }
    if (p < g)
        return;
    const int64_t dil = sp->kind == TFM_SPARSE_DILATED ? sp->dilation : 1;
    const int64_t span = sp->window * dil;
    /* Columns of global keys stay; outside [p - span, p + span] nothing
     * else is visible; inside, only distances divisible by dil. */
    int64_t c = g - j0 > 0 ? g - j0 : 0;
    int64_t lo = p - span - j0, hi = p + span + 1 - j0;
    lo = lo < c ? c : (lo > n ? n : lo);
    hi = hi < lo ? lo : (hi > n ? n : hi);
    for (int64_t j = c; j < lo; j++)
        row[j] = -INFINITY;
    if (dil > 1)
        for (int64_t j = lo; j < hi; j++)
            if ((p - (j0 + j)) % dil != 0)
                row[j] = -INFINITY;
    for (int64_t j = hi; j < n; j++)
        row[j] = -INFINITY;
}

/* Applies one mask value to a logit: returns -inf when masked. */
static inline float apply_mask(float x, float m, tfm_mask_kind kind)
{
    switch (kind) {
    case TFM_MASK_BLOCK: return m != 0.0f ? -INFINITY : x;
    case TFM_MASK_ALLOW: return m == 0.0f ? -INFINITY : x;
    default: return m == -INFINITY ? -INFINITY : x + m;
    }
}

/* Finishes row `gi` of the logits (keys j0 .. j0+n-1) in place: the
 * relative-position term, then the causal mask, the sparse pattern and the
 * mask tensors. */
static void mask_row(const head_view *a, int64_t gi, const float *qr,
                     float *row, int64_t j0, int64_t n)
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
        add_relative(a, p, qr, row, j0, lim);
    if (jb->sparse && jb->sparse->kind != TFM_SPARSE_NONE)
        sparse_mask_row(a, p, row, j0, lim);
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
            x = apply_mask(x, kp[j], m->key_padding_kind);
        if (am && x != -INFINITY)
            x = apply_mask(x, am[j], m->attn_kind);
        row[j] = x;
    }
}

/* Whether key j is masked out for query row gi (the logit is -inf whatever
 * the scores are). */
static int masked_at(const head_view *a, int64_t gi, int64_t j)
{
    const tfm__attention_job *jb = a->job;
    const tfm__masks *m = jb->masks;
    const int64_t S = jb->S;
    if (m->causal && j > gi + a->sh->offset)
        return 1;
    if (jb->sparse && !sparse_visible(a, jb->q_pos0 + gi, j))
        return 1;
    float x = 0.0f;
    if (m->key_padding)
        x = apply_mask(x, m->key_padding[a->b * S + j], m->key_padding_kind);
    if (m->attn && x != -INFINITY)
        x = apply_mask(x,
                       m->attn[a->b * m->attn_batch_stride +
                               a->h * m->attn_head_stride + gi * S + j],
                       m->attn_kind);
    return x == -INFINITY;
}

/* ---- Scores ------------------------------------------------------------ */

/* Lanes of the additive score's partial sums: the loop over d_a runs over
 * ADDITIVE_LANES independent accumulators so that it vectorises without
 * reassociating one running sum. */
#define ADDITIVE_LANES 8

/* dst[c] = scale * sum_e w[e] tanh(q[e] + k_c[e]) for the t keys k_c
 * (rows of k, stride ldk), d_a = da (Bahdanau et al. 2014, eq. (6)). */
TFM_CLONES static void additive_row(const float *q, const float *k,
                                    int64_t ldk, int64_t t, const float *w,
                                    int64_t da, float scale, float *dst)
{
    for (int64_t c = 0; c < t; c++) {
        const float *kc = k + c * ldk;
        float lane[ADDITIVE_LANES] = { 0 };
        int64_t e = 0;
        for (; e + ADDITIVE_LANES <= da; e += ADDITIVE_LANES)
            for (int l = 0; l < ADDITIVE_LANES; l++)
                lane[l] += w[e + l] * tfm__tanh(q[e + l] + kc[e + l]);
        float s = 0.0f;
        for (; e < da; e++)
            s += w[e] * tfm__tanh(q[e] + kc[e]);
        for (int l = 0; l < ADDITIVE_LANES; l++)
            s += lane[l];
        dst[c] = scale * s;
    }
}

/* dst [r, t] (row stride ld) = the scaled scores of query rows i0 ..
 * i0+r-1 against keys j0 .. j0+t-1: one product scale * q k^T, or the
 * additive score scale * sum_a v[a] tanh(q[i, a] + k[j, a]). */
static void scores(const head_view *a, int64_t i0, int64_t r, int64_t j0,
                   int64_t t, float *dst, int64_t ld)
{
    const tfm__attention_job *j = a->job;
    if (!j->additive_v) {
        tfm__sgemm(0, 1, r, t, j->d_k, a->scale, a->q + i0 * j->ldq, j->ldq,
                   a->k + j0 * j->ldk, j->ldk, 0.0f, dst, ld);
        return;
    }
    const float *w = j->additive_v + a->h * j->d_k;
    for (int64_t i = 0; i < r; i++)
        additive_row(a->q + (i0 + i) * j->ldq, a->k + j0 * j->ldk, j->ldk, t,
                     w, j->d_k, a->scale, dst + i * ld);
}

/* Shaw's key term of rows i0 .. i0+r-1: qr [r, K2] = scale * q r^K^T. */
static void shaw_key_terms(const head_view *a, int64_t i0, int64_t r,
                           float *qr)
{
    const tfm__attention_job *j = a->job;
    const int64_t K2 = a->sh->K2;
    tfm__sgemm(0, 1, r, K2, j->d_k, a->scale, a->q + i0 * j->ldq, j->ldq,
               j->relative->shaw_k + a->sh->shaw_lo * j->d_k, j->d_k, 0.0f,
               qr, K2);
}

/* Shaw's value term: pb[c] += the weights p[0 .. n-1] (keys j0 ..) of the
 * query at position p_q whose clipped distance index is c. */
static void shaw_bucket_weights(const head_view *a, int64_t p_q,
                                const float *p, int64_t j0, int64_t n,
                                float *pb)
{
    const int64_t k = a->job->relative->max_distance;
    for (int64_t j = 0; j < n; j++)
        pb[shaw_index(j0 + j - p_q, k) - a->sh->shaw_lo] += p[j];
}

static int shaw_values(const tfm__attention_job *j)
{
    return j->relative && j->relative->kind == TFM_RELATIVE_SHAW &&
           j->relative->shaw_v;
}

/* ---- Non-finite values ------------------------------------------------- */

/* Flags the value rows of (b, key/value head kvh) holding a NaN or an
 * infinity (all exponent bits set), with integer tests the compiler
 * vectorises; returns how many. */
static int64_t flag_head(const tfm__attention_job *j, int64_t b, int64_t kvh,
                         unsigned char *flags)
{
    const float *v = j->v + b * j->v_bstride + kvh * j->v_hstride;
    int64_t n_bad = 0;
    for (int64_t r = 0; r < j->S; r++) {
        const float *row = v + r * j->ldv;
        uint32_t bad = 0;
        for (int64_t c = 0; c < j->d_v; c++) {
            uint32_t u;
            memcpy(&u, row + c, sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        flags[r] = (unsigned char)bad;
        n_bad += bad;
    }
    return n_bad;
}

/* Copies value rows j0 .. j0+n-1 into clean [n, d_v], zeros for the
 * flagged ones; returns how many were flagged. */
static int64_t clean_values(const head_view *a, int64_t j0, int64_t n,
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
static void add_back_bad(const head_view *a, int64_t i0, int64_t r,
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

/* ---- The two paths ------------------------------------------------------ */

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
static int64_t causal_limit(const head_view *a, int64_t i0, int64_t r)
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
 * pattern's ranges are never computed. */
static void attend_block_tiled(const head_view *a, int64_t i0, int64_t r,
                               const slot_scratch *sc)
{
    const tfm__attention_job *j = a->job;
    const int64_t dv = j->d_v, T = TFM_KEY_TILE, K2 = a->sh->K2;
    const int64_t rows = job_rows(j);
    float *tile = sc->f;
    float *mrow = tile + rows * T;
    float *lrow = mrow + rows;
    float *clean_v = lrow + rows;
    float *qr = clean_v + T * dv;       /* [rows, K2] */
    float *pb = qr + rows * K2;         /* [rows, K2] */
    const int with_sv = shaw_values(j);
    float *out = a->out + i0 * j->ldo;
    for (int64_t i = 0; i < r; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
        memset(out + i * j->ldo, 0, (size_t)dv * sizeof(float));
    }
    if (K2) {
        shaw_key_terms(a, i0, r, qr);
        memset(pb, 0, (size_t)(r * K2) * sizeof(float));
    }

    const int64_t n_ranges =
        key_ranges(a, i0, r, causal_limit(a, i0, r), sc->ranges);
    for (int64_t g = 0; g < n_ranges; g++) {
        const int64_t lo = sc->ranges[2 * g], hi = sc->ranges[2 * g + 1];
        for (int64_t j0 = lo; j0 < hi; j0 += T) {
            const int64_t t = hi - j0 < T ? hi - j0 : T;
            scores(a, i0, r, j0, t, tile, T);
            for (int64_t i = 0; i < r; i++) {
                float *row = tile + i * T;
                mask_row(a, i0 + i, qr + i * K2, row, j0, t);
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
                if (with_sv)
                    shaw_bucket_weights(a, j->q_pos0 + i0 + i, row, j0, t,
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
        tfm__sgemm(0, 0, r, dv, K2, 1.0f, pb, K2,
                   j->relative->shaw_v + a->sh->shaw_lo * dv, dv,
                   1.0f, out, j->ldo);
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

/* The whole-row path (weights requested): query rows i0 .. i0+r-1 of one
 * head.  With averaged weights the caller has zeroed (or accumulated into)
 * their rows. */
static void attend_block(const head_view *a, int64_t i0, int64_t r,
                         const slot_scratch *sc)
{
    const tfm__attention_job *j = a->job;
    const int64_t L = j->L, S = j->S, dv = j->d_v, K2 = a->sh->K2;
    const int64_t rows = block_rows(L, S);
    float *block = sc->f;
    float *clean_v = block + rows * S;
    float *qr = clean_v + S * dv;       /* [rows, K2] */
    float *pb = qr + rows * K2;         /* [rows, K2] */
    const int with_sv = shaw_values(j);
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
        shaw_key_terms(a, i0, r, qr);
        memset(pb, 0, (size_t)(r * K2) * sizeof(float));
    }
    scores(a, i0, r, 0, n, p, ldp);
    for (int64_t i = 0; i < r; i++) {
        float *row = p + i * ldp;
        mask_row(a, i0 + i, qr + i * K2, row, 0, n);
        tfm__softmax_row(row, n);
        if (in_place && n < S)
            memset(row + n, 0, (size_t)(S - n) * sizeof(float));
        if (with_sv)
            shaw_bucket_weights(a, j->q_pos0 + i0 + i, row, 0, n,
                                pb + i * K2);
    }
    tfm__sgemm(0, 0, r, dv, n, 1.0f, p, ldp, v, ldv, 0.0f, out, j->ldo);
    if (with_sv)
        tfm__sgemm(0, 0, r, dv, K2, 1.0f, pb, K2,
                   j->relative->shaw_v + a->sh->shaw_lo * dv, dv,
                   1.0f, out, j->ldo);

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

/* ---- Running a job ------------------------------------------------------ */

typedef struct run_ctx {
    const run_shared *sh;
    float *scratch;         /* slots x scratch_floats */
    int64_t *ranges;        /* slots x 2 * range_cap */
    int64_t slot_floats, slot_ranges;
    int64_t n_blocks, rows;
} run_ctx;

/* Items: key/value heads (b, kvh) = b * H_kv + kvh; flags their
 * non-finite value rows. */
static void flag_items(void *arg, int64_t begin, int64_t end, int slot)
{
    const run_ctx *c = arg;
    const run_shared *sh = c->sh;
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
            head_view a = view_of(c->sh, b, h);
            if (j->weights)
                attend_block(&a, i0, r, &sc);
            else
                attend_block_tiled(&a, i0, r, &sc);
        }
    }
}

/* The job's sparse pattern with its sizes clamped to the run's positions,
 * as an equivalent pattern: no visible set changes, and the kernel's
 * position arithmetic (window * dilation, (block + window) * block_size,
 * n_global * block_size, p + span) stays far from overflow however large
 * the config's values are (they may be up to INT64_MAX).  Every distance
 * |p - j| and position |p|, |j| of the run is below D. */
static tfm__sparse clamp_sparse(const tfm__attention_job *j)
{
    tfm__sparse sp = *j->sparse;
    const int64_t D =
        (j->q_pos0 < 0 ? -j->q_pos0 : j->q_pos0) + j->L + j->S;
    if (sp.kind == TFM_SPARSE_BIGBIRD) {
        /* Blocks of D or more positions: every position in block 0. */
        if (sp.block_size > D)
            sp.block_size = D;
        /* Above any |block| and any distance between two blocks. */
        const int64_t blocks = 2 * (D / sp.block_size + 1);
        sp.window = sp.window < blocks ? sp.window : blocks;
        sp.n_global = sp.n_global < blocks ? sp.n_global : blocks;
    } else if (sp.kind == TFM_SPARSE_SLIDING_WINDOW ||
               sp.kind == TFM_SPARSE_DILATED) {
        int64_t dil = sp.kind == TFM_SPARSE_DILATED ? sp.dilation : 1;
        /* A dilation beyond D leaves distance 0 only, as D + 1 does. */
        if (dil > D)
            dil = sp.dilation = D + 1;
        /* window * dil > D lets every distance within the window test. */
        const int64_t w = D / dil + 1;
        sp.window = sp.window < w ? sp.window : w;
        sp.n_global = sp.n_global < D ? sp.n_global : D;
    }
    return sp;
}

/* Runs a job whose causal mask lets row i see keys j <= i + offset. */
static tfm_status run_job(const tfm__attention_job *job, int64_t offset)
{
    /* One snapshot: the scratch below holds plan.slots slots, and both
     * parallel loops split into at most that many pieces. */
    const tfm__plan plan = tfm__plan_now();
    const int slots = plan.slots;
    run_shared sh = { .job = job, .H_kv = job->H / group_of(job) };
    sh.offset = offset;
    const tfm__relative *rel = job->relative;
    if (rel && rel->kind == TFM_RELATIVE_SHAW) {
        const int64_t k = rel->max_distance;
        sh.shaw_lo = shaw_index(-(job->q_pos0 + job->L - 1), k);
        sh.K2 = shaw_index(job->S - 1 - job->q_pos0, k) - sh.shaw_lo + 1;
    }
    /* Distances j - p of the run: from -(q_pos0 + L - 1) to S-1 - q_pos0. */
    sh.d_min = -(job->q_pos0 + job->L - 1);
    const int64_t n_dist = job->S + job->L - 1;

    run_ctx c = { .sh = &sh, .rows = job_rows(job) };
    c.n_blocks = (job->L + c.rows - 1) / c.rows;
    c.slot_floats = scratch_floats(job, sh.K2);
    c.slot_ranges = 2 * range_cap(job, c.rows);
    const int64_t kv_heads = job->B * sh.H_kv;

    tfm__ws_mark mark = tfm__ws_save();
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
        for (int64_t x = 0; x < n_dist; x++)
            bucket[x] = t5_bucket(sh.d_min + x, rel->num_buckets,
                                  rel->max_distance, rel->bidirectional);
        sh.t5_bucket = bucket;
    }
    tfm__parallel_for(plan, kv_heads, 4, flag_items, &c);
    int64_t items = job->B * (job->average ? 1 : job->H) * c.n_blocks;
    tfm__parallel_for(plan, items, 1, run_items, &c);
    tfm__ws_restore(mark);
    return TFM_OK;
}

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
           sp->n_global == 0 && !j->weights && !j->relative &&
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
    float *tmp = tfm__ws_floats((size_t)(B * H * L * dv));
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
        sparse = clamp_sparse(in);
        job.sparse = &sparse;
    }
    const int64_t offset =
        job.masks->causal == TFM_CAUSAL_BOTTOM_RIGHT ? job.S - job.L : 0;
    if (dilated_as_windows(&job))
        return run_dilated(&job, offset);
    return run_job(&job, offset);
}
