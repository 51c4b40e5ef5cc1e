/* Scores and Shaw's relative terms of the attention kernel, and their
 * backward (attention_scores.h). */
#include <string.h>

#include "attention/attention_positions.h"
#include "attention/attention_scores.h"
#include "base/gemm.h"
#include "kernels/vmath.h"

/* ==== Scores ============================================================ */

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

void tfm__scores(const float *q, int64_t ldq, const float *k, int64_t ldk,
                 int64_t r, int64_t t, int64_t d, float scale,
                 const float *additive_v, float *dst, int64_t ld)
{
    if (!additive_v) {
        tfm__sgemm(0, 1, r, t, d, scale, q, ldq, k, ldk, 0.0f, dst, ld);
        return;
    }
    for (int64_t i = 0; i < r; i++)
        additive_row(q + i * ldq, k, ldk, t, additive_v, d, scale,
                     dst + i * ld);
}

/* ==== Shaw's relative terms (Shaw et al. 2018, eqs. (3)-(5)) ============ */

void tfm__shaw_key_terms(const float *q, int64_t ldq, int64_t r, int64_t d_k,
                         float scale, const float *shaw_k, int64_t K2,
                         float *qr)
{
    tfm__sgemm(0, 1, r, K2, d_k, scale, q, ldq, shaw_k, d_k, 0.0f, qr, K2);
}

void tfm__shaw_bucket_weights(int64_t k, int64_t shaw_lo, int64_t p,
                              const float *w, int64_t j0, int64_t n,
                              float *pb)
{
    for (int64_t j = 0; j < n; j++)
        pb[tfm__shaw_index(j0 + j - p, k) - shaw_lo] += w[j];
}

void tfm__shaw_value_term(const float *pb, int64_t r, int64_t K2,
                          const float *shaw_v, int64_t d_v, float *out,
                          int64_t ldo)
{
    tfm__sgemm(0, 0, r, d_v, K2, 1.0f, pb, K2, shaw_v, d_v, 1.0f, out, ldo);
}

/* ==== Backward ========================================================== */

/* One query row of tfm__additive_backward: dS of the t keys in ds.  The
 * outputs alias nothing (restrict: the loop over d_a vectorises). */
TFM_CLONES static void additive_grad_row(const float *restrict q,
                                         const float *restrict k,
                                         int64_t ldk, int64_t t,
                                         const float *restrict w, int64_t da,
                                         const float *restrict ds,
                                         float scale, float *restrict dq,
                                         float *restrict dk, int64_t lddk,
                                         float *restrict dw)
{
    for (int64_t c = 0; c < t; c++) {
        if (ds[c] == 0.0f)
            continue;
        const float g = scale * ds[c];
        const float *kc = k + c * ldk;
        float *dkc = dk + c * lddk;
        for (int64_t e = 0; e < da; e++) {
            const float th = tfm__tanh(q[e] + kc[e]);
            const float gd = g * w[e] * (1.0f - th * th);
            dq[e] += gd;
            dkc[e] += gd;
            dw[e] += g * th;
        }
    }
}

void tfm__additive_backward(const float *q, int64_t ldq, const float *k,
                            int64_t ldk, int64_t r, int64_t t, int64_t d,
                            float scale, const float *w, const float *ds,
                            int64_t ld, float *dq, int64_t lddq, float *dk,
                            int64_t lddk, float *dw)
{
    for (int64_t i = 0; i < r; i++)
        additive_grad_row(q + i * ldq, k, ldk, t, w, d, ds + i * ld, scale,
                          dq + i * lddq, dk, lddk, dw);
}

tfm__shaw_tile tfm__shaw_tile_of(int64_t k, int64_t lo, int64_t K2,
                                 int64_t p0, int64_t j0, int64_t r,
                                 int64_t t)
{
    /* Distances j - p from j0 - (p0 + r - 1) to j0 + t - 1 - p0. */
    const int64_t c_lo = tfm__shaw_index(j0 - (p0 + r - 1), k) - lo;
    const int64_t c_hi = tfm__shaw_index(j0 + t - 1 - p0, k) - lo;
    return (tfm__shaw_tile){ .k = k, .lo = lo, .K2 = K2, .c0 = c_lo,
                             .n = c_hi - c_lo + 1, .p0 = p0, .j0 = j0,
                             .r = r, .t = t };
}

void tfm__shaw_tile_key_terms(const tfm__shaw_tile *st, const float *q,
                              int64_t ldq, int64_t d_k, float scale,
                              const float *shaw_k, float *qr)
{
    tfm__sgemm(0, 1, st->r, st->n, d_k, scale, q, ldq,
               shaw_k + (st->lo + st->c0) * d_k, d_k, 0.0f, qr + st->c0,
               st->K2);
}

/* sums[i, c - lo] = sum over the tile's keys j with c(j - p_i) = c of
 * x[i, j] (x [r, t], row stride ld), on the tile's columns. */
static void tile_sums(const tfm__shaw_tile *st, const float *x, int64_t ld,
                      float *sums)
{
    for (int64_t i = 0; i < st->r; i++) {
        float *row = sums + i * st->K2;
        memset(row + st->c0, 0, (size_t)st->n * sizeof(float));
        tfm__shaw_bucket_weights(st->k, st->lo, st->p0 + i, x + i * ld,
                                 st->j0, st->t, row);
    }
}

void tfm__shaw_value_backward(const tfm__shaw_tile *st, const float *p,
                              int64_t ld, const float *d_o, int64_t lddo,
                              int64_t d_v, const float *shaw_v, float *sums,
                              float *dshaw_v, float *dp)
{
    const int64_t K2 = st->K2, c0 = st->c0, n = st->n, r = st->r;
    if (dshaw_v) {
        tile_sums(st, p, ld, sums);
        tfm__sgemm(1, 0, n, d_v, r, 1.0f, sums + c0, K2, d_o, lddo, 1.0f,
                   dshaw_v + c0 * d_v, d_v);
    }
    if (!dp)
        return;
    /* dOr[i, c - lo] = dO_i . r^V(c), gathered into the row by distance. */
    tfm__sgemm(0, 1, r, n, d_v, 1.0f, d_o, lddo,
               shaw_v + (st->lo + c0) * d_v, d_v, 0.0f, sums + c0, K2);
    const tfm__relative rel = { .kind = TFM_RELATIVE_SHAW,
                                .max_distance = st->k };
    for (int64_t i = 0; i < r; i++)
        tfm__relative_add(&rel, 0, 1, st->j0 - (st->p0 + i), NULL, 0,
                          sums + i * K2, st->lo, dp + i * ld, st->t);
}

void tfm__shaw_key_backward(const tfm__shaw_tile *st, const float *ds,
                            int64_t ld, const float *q, int64_t ldq,
                            int64_t d_k, float scale, const float *shaw_k,
                            float *sums, float *dq, int64_t lddq,
                            float *dshaw_k)
{
    const int64_t K2 = st->K2, c0 = st->c0, n = st->n, r = st->r;
    if (!dq && !dshaw_k)
        return;
    tile_sums(st, ds, ld, sums);
    if (dq)
        tfm__sgemm(0, 0, r, d_k, n, scale, sums + c0, K2,
                   shaw_k + (st->lo + c0) * d_k, d_k, 1.0f, dq, lddq);
    if (dshaw_k)
        tfm__sgemm(1, 0, n, d_k, r, scale, sums + c0, K2, q, ldq, 1.0f,
                   dshaw_k + c0 * d_k, d_k);
}
