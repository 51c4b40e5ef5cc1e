/* Position logic of attention (attention_positions.h): relative-position
 * terms and sparse patterns, from positions alone. */
#include <math.h>
#include <stdlib.h>

#include "attention/attention_positions.h"
#include "base/random.h"

/* ==== Relative-position terms ========================================== */

void tfm__alibi_slopes(int64_t n, float *slopes)
{
    /* n' = 2^floor(log2 n) slopes 2^(-8h/n'), h = 1 .. n'; then the odd
     * h = 1, 3, 5, ... of the 2n' sequence 2^(-8h/(2n')) = 2^(-4h/n'). */
    int64_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    for (int64_t h = 0; h < n; h++) {
        double e = h < p ? -8.0 * (double)(h + 1) / (double)p
                         : -4.0 * (double)(2 * (h - p) + 1) / (double)p;
        slopes[h] = (float)exp2(e);
    }
}

/* T5's bucket of distance d = key - query (Raffel et al. 2020; the
 * arithmetic of Hugging Face's _relative_position_bucket, in float32 as
 * there, so that the buckets agree at their boundaries):
 *   bidirectional: half the buckets for d > 0, |d| in the other half;
 *   otherwise n = max(-d, 0);
 *   n < max_exact = nb/2: bucket n; beyond: max_exact + log(n / max_exact)
 *   / log(max_distance / max_exact) * (nb - max_exact), at most nb - 1. */
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

void tfm__t5_buckets(const tfm__relative *rel, int64_t d_min, int64_t n,
                     int32_t *bucket)
{
    for (int64_t x = 0; x < n; x++)
        bucket[x] = t5_bucket(d_min + x, rel->num_buckets, rel->max_distance,
                              rel->bidirectional);
}

void tfm__relative_add(const tfm__relative *rel, int64_t h, int64_t H,
                       int64_t d0, const int32_t *bucket, int64_t d_min,
                       const float *qr, int64_t shaw_lo, float *row,
                       int64_t n)
{
    switch (rel->kind) {
    case TFM_RELATIVE_ALIBI: {
        const float m = rel->alibi_slopes[h];
        for (int64_t j = 0; j < n; j++) {
            int64_t d = d0 + j;
            row[j] -= m * (float)(d < 0 ? -d : d);
        }
        break;
    }
    case TFM_RELATIVE_T5: {
        const int32_t *b = bucket + (d0 - d_min);
        const float *bias = rel->t5_bias + h;
        for (int64_t j = 0; j < n; j++)
            row[j] += bias[b[j] * H];
        break;
    }
    case TFM_RELATIVE_SHAW: {
        const int64_t k = rel->max_distance;
        for (int64_t j = 0; j < n; j++)
            row[j] += qr[tfm__shaw_index(d0 + j, k) - shaw_lo];
        break;
    }
    default:
        break;
    }
}

void tfm__distance_sums(const float *x, int64_t r, int64_t t, int64_t ld,
                        int64_t x0, float *sums)
{
    for (int64_t i = 0; i < r; i++) {
        const float *row = x + i * ld;
        float *s = sums + x0 - i;
        for (int64_t j = 0; j < t; j++)
            s[j] += row[j];
    }
}

void tfm__t5_bias_backward(const int32_t *bucket, int64_t n,
                           const float *sums, int64_t h, int64_t H,
                           float *dbias)
{
    for (int64_t x = 0; x < n; x++)
        dbias[(int64_t)bucket[x] * H + h] += sums[x];
}

/* ==== Sparse patterns ================================================== */

tfm__sparse tfm__sparse_clamp(const tfm__sparse *in, int64_t q_pos0,
                              int64_t L, int64_t S)
{
    /* Every distance |p - j| and position |p|, |j| of the call is below
     * D, so sizes beyond D behave as D (or D + 1) does. */
    tfm__sparse sp = *in;
    const int64_t D = (q_pos0 < 0 ? -q_pos0 : q_pos0) + L + S;
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

/* Random key block r of query block a (variants.h: TFM_SPARSE_BIGBIRD):
 * SplitMix64 seeded with (seed ^ (a * golden ratio)) + r, mod n_blocks. */
static int64_t bigbird_random(const tfm__sparse *sp, int64_t a, int64_t r,
                              int64_t n_blocks)
{
    tfm_rng rng = { (sp->seed ^ ((uint64_t)a * 0x9E3779B97F4A7C15ull)) +
                    (uint64_t)r };
    return (int64_t)(tfm__rng_next(&rng) % (uint64_t)n_blocks);
}

/* Key blocks that random draws choose from for query block qb: those up
 * to qb under a causal mask, else all ceil(S / block_size). */
static int64_t bigbird_choices(const tfm__sparse *sp, int causal, int64_t S,
                               int64_t qb)
{
    const int64_t bs = sp->block_size;
    return causal ? qb + 1 : (S + bs - 1) / bs;
}

int tfm__sparse_visible(const tfm__sparse *sp, int causal, int64_t S,
                        int64_t p, int64_t j)
{
    const int64_t g = sp->n_global;
    switch (sp->kind) {
    case TFM_SPARSE_SLIDING_WINDOW:
    case TFM_SPARSE_DILATED: {
        /* Longformer: |p - j| <= window * dil, dil dividing p - j. */
        if (p < g || j < g)
            return 1;
        const int64_t dil = sp->kind == TFM_SPARSE_DILATED ? sp->dilation : 1;
        const int64_t d = p > j ? p - j : j - p;
        return d <= sp->window * dil && d % dil == 0;
    }
    case TFM_SPARSE_BIGBIRD: {
        /* BigBird: global blocks, the window of blocks, random blocks. */
        const int64_t bs = sp->block_size, qa = p / bs, kb = j / bs;
        if (qa < g || kb < g || (qa > kb ? qa - kb : kb - qa) <= sp->window)
            return 1;
        const int64_t n = bigbird_choices(sp, causal, S, qa);
        for (int64_t r = 0; r < sp->n_random_blocks; r++)
            if (bigbird_random(sp, qa, r, n) == kb)
                return 1;
        return 0;
    }
    default:
        return 1;
    }
}

void tfm__sparse_mask_row(const tfm__sparse *sp, int causal, int64_t S,
                          int64_t p, float *row, int64_t j0, int64_t n)
{
    const int64_t g = sp->n_global;
    if (sp->kind == TFM_SPARSE_BIGBIRD) {
        const int64_t bs = sp->block_size;
        for (int64_t c = 0; c < n;) {
            const int64_t kb = (j0 + c) / bs;
            int64_t end = (kb + 1) * bs - j0;
            end = end < n ? end : n;
            if (!tfm__sparse_visible(sp, causal, S, p, kb * bs))
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

/* ---- Visible key ranges of a block of queries */

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
 * blocks of [0, n): key ranges then take every key instead (a superset),
 * so that the number of ranges never exceeds the number of key blocks. */
static int many_draws(const tfm__sparse *sp, int64_t a0, int64_t a1,
                      int64_t n)
{
    const int64_t nr = sp->n_random_blocks;
    return nr > 0 && a1 - a0 + 1 > key_blocks(sp, n) / nr;
}

/* The global keys, the window, and at most one range per random draw of
 * the (rows - 1) / block_size + 2 query blocks, never more than the key
 * blocks (many_draws). */
int64_t tfm__sparse_range_cap(const tfm__sparse *sp, int64_t S, int64_t rows)
{
    if (!sp || sp->kind != TFM_SPARSE_BIGBIRD)
        return 2;
    const int64_t blocks = rows / sp->block_size + 2;
    const int64_t kb = key_blocks(sp, S);
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

int64_t tfm__sparse_key_ranges(const tfm__sparse *sp, int causal, int64_t S,
                               int64_t P0, int64_t r, int64_t n, int64_t *rg)
{
    const int64_t P1 = P0 + r - 1;
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
            const int64_t choices = bigbird_choices(sp, causal, S, qa);
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
