/* Internal: the one door to OpenBLAS.  Every matrix product of the library
 * (projections, Q K^T, A V, feed-forward) goes through these functions,
 * which call cblas_sgemm (cblas_sgemv when the product has a single row, as
 * in a decoding step); there is no hand-written matrix product.  Products
 * with a layer's weight go through kernels/linear.h, which brings stored
 * (16-, 8-, 4-bit) weights here widened. */
#ifndef TFM_SRC_GEMM_H
#define TFM_SRC_GEMM_H

#include <stdint.h>

/* C [m, n] = alpha * op(A) op(B) + beta * C, row-major, with leading
 * dimensions lda, ldb, ldc; op(X) = X^T when trans_x is nonzero.
 * A is [m, k] (or [k, m] transposed), B is [k, n] (or [n, k] transposed). */
void tfm__sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float *a, int64_t lda, const float *b,
                int64_t ldb, float beta, float *c, int64_t ldc);

/* Makes OpenBLAS single-threaded, process-wide (parallel.h explains). */
void tfm__blas_single_thread(void);

#endif
