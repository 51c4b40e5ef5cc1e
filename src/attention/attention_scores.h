/* Internal: the logits of a tile of queries against a tile of keys
 * (variants.h: tfm_score), and Shaw's relative key and value terms
 * (Shaw, Uszkoreit and Vaswani 2018, eqs. (3)-(5)), for the attention
 * kernel (attention_kernel.c).  All matrices are row-major with the given
 * row strides (ld*). */
#ifndef TFM_SRC_ATTENTION_SCORES_H
#define TFM_SRC_ATTENTION_SCORES_H

#include <stdint.h>

/* dst [r, t] (row stride ld) = the scaled scores of the r query rows q
 * [r, d] against the t key rows k [t, d]:
 *   additive_v NULL:  dst = scale * q k^T                (one GEMM)
 *   otherwise:        dst[i, j] = scale * sum_a additive_v[a]
 *                                 tanh(q[i, a] + k[j, a])   (d = d_a)
 * (Bahdanau et al. 2014, eq. (6), with q and k already projected by
 * W_q,h and W_k,h; additive_v is the head's v_h [d_a]). */
void tfm__scores(const float *q, int64_t ldq, const float *k, int64_t ldk,
                 int64_t r, int64_t t, int64_t d, float scale,
                 const float *additive_v, float *dst, int64_t ld);

/* Shaw's key term of r queries: qr [r, K2] = scale * q [r, d_k] r^K^T,
 * for the K2 table rows r^K = shaw_k [K2, d_k] the call's distances
 * reach (the logit of key j then adds qr[c(j - p)], attention_positions.h:
 * tfm__relative_add). */
void tfm__shaw_key_terms(const float *q, int64_t ldq, int64_t r, int64_t d_k,
                         float scale, const float *shaw_k, int64_t K2,
                         float *qr);

/* Shaw's value term, first half: pb[c - shaw_lo] += w[j] for the weights
 * w[0 .. n-1] of keys j0 .. j0+n-1 of the query at position p, c =
 * clip(j - p, -k, k) + k their table row (k = max_distance). */
void tfm__shaw_bucket_weights(int64_t k, int64_t shaw_lo, int64_t p,
                              const float *w, int64_t j0, int64_t n,
                              float *pb);

/* Shaw's value term, second half: out [r, d_v] (row stride ldo) += pb
 * [r, K2] shaw_v [K2, d_v], i.e. o_i += sum_j w_ij r^V(c(j - p_i)). */
void tfm__shaw_value_term(const float *pb, int64_t r, int64_t K2,
                          const float *shaw_v, int64_t d_v, float *out,
                          int64_t ldo);

/* ==== Backward (attention_backward.c: tfm__attention_backward_run) ====== */

/* The additive score's backward on a tile, from dS [r, t] (row stride
 * ld), the gradient of the scaled logits of tfm__scores: with t_ija =
 * tanh(q[i, a] + k[j, a]) and g_ij = scale dS[i, j],
 *   dq [r, d] (row stride lddq) += sum_j g_ij w[a] (1 - t_ija^2),
 *   dk [t, d] (row stride lddk) += sum_i g_ij w[a] (1 - t_ija^2),
 *   dw [d]                      += sum_ij g_ij t_ija
 * (all three written: none may be NULL); entries with dS = 0 (masked) are
 * skipped. */
void tfm__additive_backward(const float *q, int64_t ldq, const float *k,
                            int64_t ldk, int64_t r, int64_t t, int64_t d,
                            float scale, const float *w, const float *ds,
                            int64_t ld, float *dq, int64_t lddq, float *dk,
                            int64_t lddk, float *dw);

/* A backward tile of r queries (row 0 at position p0) and t keys (from
 * key j0) under Shaw's term: the table rows its distances reach are
 * lo + c0 .. lo + c0 + n - 1, lo being the run's first row (shaw_lo);
 * per-query sums over the table rows live in [r, K2] arrays (row stride
 * K2, columns c - lo), of which the tile touches columns c0 .. c0+n-1. */
typedef struct tfm__shaw_tile {
    int64_t k, lo, K2, c0, n;
    int64_t p0, j0, r, t;
} tfm__shaw_tile;

/* The tile of r queries at p0 and t keys at j0, for max_distance k and a
 * run whose table rows start at lo (K2 of them). */
tfm__shaw_tile tfm__shaw_tile_of(int64_t k, int64_t lo, int64_t K2,
                                 int64_t p0, int64_t j0, int64_t r,
                                 int64_t t);

/* Shaw's key terms of the tile (tfm__shaw_key_terms on its columns only):
 * qr[i, c - lo] = scale q_i . r^K(c) for its table rows c. */
void tfm__shaw_tile_key_terms(const tfm__shaw_tile *st, const float *q,
                              int64_t ldq, int64_t d_k, float scale,
                              const float *shaw_k, float *qr);

/* Shaw's value term backward on a tile, from its probabilities p [r, t]
 * (row stride ld) and dO [r, d_v] (row stride lddo), with sums [r, K2]
 * as scratch:
 *   dshaw_v [K2, d_v] += pb^T dO, pb[i, c] = sum_{j: c(j - p_i) = c} p_ij
 *   dp [r, t] (row stride ld) += dO_i . r^V(c(j - p_i))
 * (dshaw_v and dp NULL when not wanted). */
void tfm__shaw_value_backward(const tfm__shaw_tile *st, const float *p,
                              int64_t ld, const float *d_o, int64_t lddo,
                              int64_t d_v, const float *shaw_v, float *sums,
                              float *dshaw_v, float *dp);

/* Shaw's key term backward on a tile, from dS [r, t] (row stride ld), q
 * [r, d_k] and sums [r, K2] as scratch: with dSb[i, c] = sum_{j: c(j -
 * p_i) = c} dS_ij,
 *   dq [r, d_k] (row stride lddq) += scale dSb r^K,
 *   dshaw_k [K2, d_k]             += scale dSb^T q
 * (either NULL when not wanted). */
void tfm__shaw_key_backward(const tfm__shaw_tile *st, const float *ds,
                            int64_t ld, const float *q, int64_t ldq,
                            int64_t d_k, float scale, const float *shaw_k,
                            float *sums, float *dq, int64_t lddq,
                            float *dshaw_k);

#endif
