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
#include <string.h>

#include "attention_core.h"
#include "error.h"
#include "gemm.h"
#include "parallel.h"
#include "softmax.h"
#include "tensor_impl.h"
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

/* One (batch element, head) of a job, as the per-block code sees it. */
typedef struct head_view {
    const tfm__attention_job *job;
    int64_t b, h;
    const float *q, *k, *v;
    float *out;
    const unsigned char *bad;   /* [S]: value row holds NaN or inf */
    int64_t n_bad;              /* how many rows of this head do */
} head_view;

/* Per job: which value rows are non-finite, found once per head. */
typedef struct bad_rows {
    unsigned char *flags;       /* [B * H * S] */
    int64_t *count;             /* [B * H] */
} bad_rows;

static head_view view_of(const tfm__attention_job *j, const bad_rows *bad,
                         int64_t b, int64_t h)
{
    return (head_view){
        .job = j, .b = b, .h = h,
        .bad = bad->flags + (b * j->H + h) * j->S,
        .n_bad = bad->count[b * j->H + h],
        .q = j->q + b * j->q_bstride + h * j->q_hstride,
        .k = j->k + b * j->k_bstride + h * j->k_hstride,
        .v = j->v + b * j->v_bstride + h * j->v_hstride,
        .out = j->out + b * j->o_bstride + h * j->o_hstride,
    };
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

/* Masks row `gi` of the logits (n visible columns at most) in place. */
static void mask_row(const head_view *a, int64_t gi, int64_t offset,
                     float *row, int64_t j0, int64_t n)
{
    const tfm__masks *m = a->job->masks;
    const int64_t S = a->job->S;
    /* row[c] is key j0 + c; `last` counts in row coordinates. */
    int64_t last = (m->causal ? gi + offset : S - 1) - j0;
    const float *kp =
        m->key_padding ? m->key_padding + a->b * S + j0 : NULL;
    const float *am = m->attn ? m->attn + a->b * m->attn_batch_stride +
                                    a->h * m->attn_head_stride + gi * S + j0
                              : NULL;
    if (!kp && !am) {
        for (int64_t j = last + 1 < 0 ? 0 : last + 1; j < n; j++)
            row[j] = -INFINITY;
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        if (j > last) {
            row[j] = -INFINITY;
            continue;
        }
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
static int masked_at(const head_view *a, int64_t gi, int64_t offset,
                     int64_t j)
{
    const tfm__masks *m = a->job->masks;
    const int64_t S = a->job->S;
    if (m->causal && j > gi + offset)
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

/* Flags the value rows of head (b, h) holding a NaN or an infinity (all
 * exponent bits set), with integer tests the compiler vectorises; returns
 * how many. */
static int64_t flag_head(const tfm__attention_job *j, int64_t b, int64_t h,
                         unsigned char *flags)
{
    const float *v = j->v + b * j->v_bstride + h * j->v_hstride;
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
                         int64_t offset, int64_t j0, int64_t n,
                         const float *p, int64_t ldp, float *out)
{
    const tfm__attention_job *j = a->job;
    for (int64_t k = 0; k < n; k++) {
        if (!a->bad[j0 + k])
            continue;
        const float *vk = a->v + (j0 + k) * j->ldv;
        for (int64_t i = 0; i < r; i++) {
            float w = p[i * ldp + k];
            if (w != 0.0f || !masked_at(a, i0 + i, offset, j0 + k))
                for (int64_t c = 0; c < j->d_v; c++)
                    out[i * j->ldo + c] += w * vk[c];
        }
    }
}

/* Query rows per block of a job: the whole-row path (weights requested)
 * or the tiled path. */
static int64_t job_rows(const tfm__attention_job *j)
{
    if (j->weights)
        return block_rows(j->L, j->S);
    return j->L < TFM_TILED_ROWS ? j->L : TFM_TILED_ROWS;
}

/* Per-thread scratch: logits (a block of whole rows, or one tile), the
 * running maxima and sums of the tiled path, and a cleaned copy of the
 * values. */
static int64_t scratch_floats(const tfm__attention_job *j)
{
    const int64_t rows = job_rows(j);
    if (j->weights)
        return rows * j->S + j->S * j->d_v;
    return rows * TFM_KEY_TILE + 2 * rows + TFM_KEY_TILE * j->d_v;
}

/* The tiled path (no weights requested): query rows i0 .. i0+r-1 against
 * tiles of TFM_KEY_TILE keys, with the online softmax, accumulating
 * directly into the output rows.  Only a tile of logits exists at a time,
 * and under a causal mask tiles past the block's last visible key are never
 * computed. */
static void attend_block_tiled(const head_view *a, int64_t i0, int64_t r,
                               float *scratch)
{
    const tfm__attention_job *j = a->job;
    const int64_t L = j->L, S = j->S, dv = j->d_v, T = TFM_KEY_TILE;
    const int64_t rows = job_rows(j);
    float *tile = scratch;
    float *mrow = tile + rows * T;
    float *lrow = mrow + rows;
    float *clean_v = lrow + rows;
    const int64_t offset =
        j->masks->causal == TFM_CAUSAL_BOTTOM_RIGHT ? S - L : 0;
    int64_t n = S;
    if (j->masks->causal) {
        n = i0 + r + offset;
        n = n < 0 ? 0 : (n > S ? S : n);
    }
    float *out = a->out + i0 * j->ldo;
    for (int64_t i = 0; i < r; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
        memset(out + i * j->ldo, 0, (size_t)dv * sizeof(float));
    }

    for (int64_t j0 = 0; j0 < n; j0 += T) {
        const int64_t t = n - j0 < T ? n - j0 : T;
        tfm__sgemm(0, 1, r, t, j->d_k, j->scale, a->q + i0 * j->ldq, j->ldq,
                   a->k + j0 * j->ldk, j->ldk, 0.0f, tile, T);
        for (int64_t i = 0; i < r; i++) {
            float *row = tile + i * T;
            mask_row(a, i0 + i, offset, row, j0, t);
            float alpha =
                tfm__softmax_online_step(row, t, &mrow[i], &lrow[i]);
            if (alpha != 1.0f) {
                float *o = out + i * j->ldo;
                for (int64_t c = 0; c < dv; c++)
                    o[c] *= alpha;
            }
        }
        const float *v = a->v + j0 * j->ldv;
        int64_t ldv = j->ldv;
        int64_t n_bad = a->n_bad ? clean_values(a, j0, t, clean_v) : 0;
        if (n_bad) {
            v = clean_v;
            ldv = dv;
        }
        tfm__sgemm(0, 0, r, dv, t, 1.0f, tile, T, v, ldv, 1.0f, out, j->ldo);
        if (n_bad)
            add_back_bad(a, i0, r, offset, j0, t, tile, T, out);
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

/* Query rows i0 .. i0+r-1 of one head.  With averaged weights the caller
 * has zeroed (or accumulated into) their rows. */
static void attend_block(const head_view *a, int64_t i0, int64_t r,
                         float *scratch)
{
    const tfm__attention_job *j = a->job;
    const int64_t L = j->L, S = j->S, dv = j->d_v;
    const int64_t rows = block_rows(L, S);
    float *block = scratch;
    float *clean_v = block + rows * S;
    const int64_t offset =
        j->masks->causal == TFM_CAUSAL_BOTTOM_RIGHT ? S - L : 0;
    int64_t n = S;
    if (j->masks->causal) {
        n = i0 + r + offset; /* one past the last visible key */
        n = n < 0 ? 0 : (n > S ? S : n);
    }

    const float *v = a->v;
    int64_t ldv = j->ldv;
    int64_t n_bad = a->n_bad ? clean_values(a, 0, n, clean_v) : 0;
    if (n_bad) {
        v = clean_v;
        ldv = dv;
    }

    const int in_place = j->weights && !j->average;
    float *p = in_place
                   ? j->weights + ((a->b * j->H + a->h) * L + i0) * S
                   : block;
    const int64_t ldp = S;
    float *out = a->out + i0 * j->ldo;

    tfm__sgemm(0, 1, r, n, j->d_k, j->scale, a->q + i0 * j->ldq, j->ldq, a->k,
               j->ldk, 0.0f, p, ldp);
    for (int64_t i = 0; i < r; i++) {
        float *row = p + i * ldp;
        mask_row(a, i0 + i, offset, row, 0, n);
        tfm__softmax_row(row, n);
        if (in_place && n < S)
            memset(row + n, 0, (size_t)(S - n) * sizeof(float));
    }
    tfm__sgemm(0, 0, r, dv, n, 1.0f, p, ldp, v, ldv, 0.0f, out, j->ldo);

    if (n_bad)
        add_back_bad(a, i0, r, offset, 0, n, p, ldp, out);
    if (j->weights && j->average) {
        const float f = 1.0f / (float)j->H;
        for (int64_t i = 0; i < r; i++) {
            float *dst = j->weights + (a->b * L + i0 + i) * S;
            const float *src = p + i * ldp;
            for (int64_t k = 0; k < n; k++)
                dst[k] += f * src[k];
        }
    }
}

typedef struct run_ctx {
    const tfm__attention_job *job;
    float *scratch;         /* slots x scratch_floats(job) */
    int64_t n_blocks, rows;
    bad_rows bad;
} run_ctx;

/* Items: heads (b, h) = b * H + h; flags their non-finite value rows. */
static void flag_items(void *arg, int64_t begin, int64_t end, int slot)
{
    const run_ctx *c = arg;
    const tfm__attention_job *j = c->job;
    (void)slot;
    for (int64_t bh = begin; bh < end; bh++)
        c->bad.count[bh] = flag_head(j, bh / j->H, bh % j->H,
                                     c->bad.flags + bh * j->S);
}

/* Items: (b, h, block) in that order; with averaged weights (b, block),
 * the heads of a block accumulating in order h = 0 .. H-1 in one thread,
 * so the sum does not depend on the thread count. */
static void run_items(void *arg, int64_t begin, int64_t end, int slot)
{
    const run_ctx *c = arg;
    const tfm__attention_job *j = c->job;
    float *scratch = c->scratch + slot * scratch_floats(j);
    for (int64_t item = begin; item < end; item++) {
        /* Blocks in the order 0, n-1, 1, n-2, ...: under a causal mask
         * later blocks see more keys, and this order gives every thread's
         * contiguous range of items a similar amount of work. */
        int64_t z = item % c->n_blocks, rest = item / c->n_blocks;
        int64_t blk = z % 2 == 0 ? z / 2 : c->n_blocks - 1 - z / 2;
        int64_t i0 = blk * c->rows;
        int64_t r = j->L - i0 < c->rows ? j->L - i0 : c->rows;
        if (j->average) {
            int64_t b = rest;
            if (j->weights)
                memset(j->weights + (b * j->L + i0) * j->S, 0,
                       (size_t)(r * j->S) * sizeof(float));
            for (int64_t h = 0; h < j->H; h++) {
                head_view a = view_of(j, &c->bad, b, h);
                if (j->weights)
                    attend_block(&a, i0, r, scratch);
                else
                    attend_block_tiled(&a, i0, r, scratch);
            }
        } else {
            head_view a = view_of(j, &c->bad, rest / j->H, rest % j->H);
            if (j->weights)
                attend_block(&a, i0, r, scratch);
            else
                attend_block_tiled(&a, i0, r, scratch);
        }
    }
}

tfm_status tfm__attention_run(const tfm__attention_job *job)
{
    const int slots = tfm__parallel_slots();
    tfm__ws_mark mark = tfm__ws_save();
    const int64_t heads = job->B * job->H;
    float *scratch = tfm__ws_floats((size_t)(slots * scratch_floats(job)));
    int64_t *count = scratch ? tfm__ws_alloc((size_t)heads * sizeof *count)
                             : NULL;
    unsigned char *flags =
        count ? tfm__ws_alloc((size_t)(heads * job->S)) : NULL;
    if (!flags) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate attention scratch memory");
    }
    run_ctx c = { job, scratch, 0, job_rows(job), { flags, count } };
    c.n_blocks = (job->L + c.rows - 1) / c.rows;
    tfm__parallel_for(heads, 4, flag_items, &c);
    int64_t items = job->B * (job->average ? 1 : job->H) * c.n_blocks;
    tfm__parallel_for(items, 1, run_items, &c);
    tfm__ws_restore(mark);
    return TFM_OK;
}
