/* The OpenBLAS wrapper (gemm.h). */
#include <cblas.h>
#include <string.h>

#include "gemm.h"

void tfm__sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float *a, int64_t lda, const float *b,
                int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        /* Empty sum: C = beta * C (BLAS would do the same; be explicit). */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n,
                (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
                (blasint)ldc);
}

void tfm__linear(const float *x, int64_t ldx, int64_t n, int64_t in,
                 const float *w, const float *bias, int64_t out, float *y,
                 int64_t ldy)
{
    float beta = 0.0f;
    if (bias) {
        for (int64_t i = 0; i < n; i++)
            memcpy(y + i * ldy, bias, (size_t)out * sizeof(float));
        beta = 1.0f;
    }
    tfm__sgemm(0, 1, n, out, in, 1.0f, x, ldx, w, in, beta, y, ldy);
}
