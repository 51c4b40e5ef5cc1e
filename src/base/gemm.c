/* The OpenBLAS wrapper (gemm.h). */
#include <cblas.h>
#include <string.h>

#include "base/gemm.h"
#include "base/parallel.h"

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
    if (m == 1) {
        /* One row (a decoding step): a matrix-vector product reads B once,
         * where sgemm would first pack all of it. */
        const blasint inc_a = trans_a ? (blasint)lda : 1;
        if (trans_b) /* B [n, k]: c = alpha B a + beta c */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)k,
                        alpha, b, (blasint)ldb, a, inc_a, beta, c, 1);
        else /* B [k, n]: c = alpha B^T a + beta c */
            cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)k, (blasint)n,
                        alpha, b, (blasint)ldb, a, inc_a, beta, c, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n,
                (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
                (blasint)ldc);
}

void tfm__blas_single_thread(void)
{
    openblas_set_num_threads(1);
}
