/* Internal: position logic of attention (variants.h, "Positions"): the
 * relative-position terms of the logits (Shaw, T5 buckets, ALiBi) and the
 * sparse patterns of visible keys (sliding and dilated windows, global
 * tokens, BigBird), all computed from the query position p and the key
 * position j, never stored as an L x S matrix.
 *
 * Query row i of a call is at position p = q_pos0 + i, key row j at j;
 * distances are d = j - p (key minus query). */
#ifndef TFM_SRC_ATTENTION_POSITIONS_H
#define TFM_SRC_ATTENTION_POSITIONS_H

#include <stdint.h>

#include "transformer/attention.h"

/* ==== Relative-position terms ========================================== */

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

/* ALiBi slopes of n heads (Press et al. 2022, section 3; variants.h) into
 * slopes[n]. */
void tfm__alibi_slopes(int64_t n, float *slopes);

/* T5's buckets (Raffel et al. 2020, section 2.1; Hugging Face's
 * _relative_position_bucket) of the n distances d_min .. d_min+n-1 into
 * bucket[n]. */
void tfm__t5_buckets(const tfm__relative *rel, int64_t d_min, int64_t n,
                     int32_t *bucket);

/* Shaw's clipped table row of distance d (Shaw et al. 2018, eq. (3)):
 * clip(d, -k, k) + k, in 0 .. 2k. */
static inline int64_t tfm__shaw_index(int64_t d, int64_t k)
{
    return (d < -k ? -k : d > k ? k : d) + k;
}

/* Adds the relative-position term of head h (of H) to the logits
 * row[0 .. n-1] of one query, whose row[0] is at distance d0:
 *   ALiBi  row[j] -= slopes[h] |d0 + j|
 *   T5     row[j] += t5_bias[bucket(d0 + j), h], bucket[] holding the
 *          buckets of the distances d_min .. (tfm__t5_buckets)
 *   Shaw   row[j] += qr[c(d0 + j) - shaw_lo], qr = scale q . r^K(c) for
 *          the table rows shaw_lo .. (tfm__shaw_key_terms). */
void tfm__relative_add(const tfm__relative *rel, int64_t h, int64_t H,
                       int64_t d0, const int32_t *bucket, int64_t d_min,
                       const float *qr, int64_t shaw_lo, float *row,
                       int64_t n);

/* T5's backward: sums[x] += x_ij over a tile x [r, t] (row stride ld) of
 * logit gradients, by distance, x = d - d_min, where the tile's entry
 * (0, 0) is at distance d_min + x0 and (i, j) at d_min + x0 - i + j. */
void tfm__distance_sums(const float *x, int64_t r, int64_t t, int64_t ld,
                        int64_t x0, float *sums);

/* T5's backward: dbias[bucket[x], h] += sums[x] for the n distances of
 * sums (tfm__distance_sums), into dbias [num_buckets, H]. */
void tfm__t5_bias_backward(const int32_t *bucket, int64_t n,
                           const float *sums, int64_t h, int64_t H,
                           float *dbias);

/* ==== Sparse patterns ================================================== */

/* Sparse pattern of visible keys by position (variants.h: tfm_sparsity,
 * with the same field meanings). */
typedef struct tfm__sparse {
    tfm_sparsity kind;
    int64_t window, dilation, n_global, block_size, n_random_blocks;
    uint64_t seed;
} tfm__sparse;

/* The functions below take the pattern sp of a call with S keys; `causal`
 * is nonzero under a causal mask (BigBird then draws a query block's
 * random blocks among the blocks up to its own). */

/* sp with its sizes clamped to a call whose queries sit at positions
 * q_pos0 .. q_pos0+L-1 and keys at 0 .. S-1: an equivalent pattern (no
 * visible set changes) whose position arithmetic cannot overflow however
 * large the config's sizes are (up to INT64_MAX). */
tfm__sparse tfm__sparse_clamp(const tfm__sparse *sp, int64_t q_pos0,
                              int64_t L, int64_t S);

/* Whether query position p sees key position j under sp. */
int tfm__sparse_visible(const tfm__sparse *sp, int causal, int64_t S,
                        int64_t p, int64_t j);

/* Sets row[c] (key j0 + c, c < n) to -inf where sp hides the key from
 * query position p: by whole intervals for the windows and by whole key
 * blocks for BigBird, so that the per-key work stays small. */
void tfm__sparse_mask_row(const tfm__sparse *sp, int causal, int64_t S,
                          int64_t p, float *row, int64_t j0, int64_t n);

/* The keys (within [0, n)) that query positions P0 .. P0+r-1 may see
 * under sp (NULL or TFM_SPARSE_NONE: all of them), as sorted disjoint
 * ranges rg[2c] .. rg[2c+1]-1; returns their count, at most
 * tfm__sparse_range_cap(sp, S, r).  A superset: the per-key masks decide.
 * The ranges' total length is bounded by the pattern, not by S. */
int64_t tfm__sparse_key_ranges(const tfm__sparse *sp, int causal, int64_t S,
                               int64_t P0, int64_t r, int64_t n, int64_t *rg);

/* Most ranges tfm__sparse_key_ranges can return for `rows` query rows. */
int64_t tfm__sparse_range_cap(const tfm__sparse *sp, int64_t S, int64_t rows);

#endif
