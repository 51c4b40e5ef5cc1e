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

#endif
