/* Scores and Shaw's relative terms of the attention kernel
 * (attention_scores.h). */
#include "attention_positions.h"
#include "attention_scores.h"
#include "gemm.h"
#include "vmath.h"

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
