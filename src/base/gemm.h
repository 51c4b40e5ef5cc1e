/* Internal: the one door to OpenBLAS.  Every matrix product of the library
 * (projections, Q K^T, A V, feed-forward) goes through these functions,
 * which call cblas_sgemm (cblas_sgemv when the product has a single row, as
 * in a decoding step); there is no hand-written matrix product. */
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

/* Linear layer as nn.Linear: y [n, out] = x [n, in] W^T + bias, with
 * W [out, in] row-major and bias [out] or NULL.  Row strides: x ldx,
 * y ldy (usually in and out). */
void tfm__linear(const float *x, int64_t ldx, int64_t n, int64_t in,
                 const float *w, const float *bias, int64_t out, float *y,
                 int64_t ldy);

/* The same, split over the library's threads: by rows of x when there are
 * many, else by output columns (one token's projections). */
void tfm__linear_parallel(const float *x, int64_t ldx, int64_t n, int64_t in,
                          const float *w, const float *bias, int64_t out,
                          float *y, int64_t ldy);

/* The backward of tfm__linear (torch.autograd's for nn.Linear), split over
 * the library's threads:
 *   grad_x [n, in]   = grad_y W                  (written; NULL: skipped)
 *   grad_w [out, in] += grad_y^T x               (accumulated; NULL: skipped)
 *   grad_b [out]     += sum over rows of grad_y  (accumulated in double
 *                                                 through bias_acc [out]
 *                                                 scratch; NULL: skipped)
 * x [n, in] (row stride ldx), grad_y [n, out] (row stride ldg), W [out,
 * in].  grad_x is written last, so it may be x itself (never grad_y).
 * Every product is one cblas_sgemm per block of 64 output rows (weight
 * gradient) or input rows (input gradient), blocks fixed by the shapes, so
 * the bits do not depend on the thread count.  Cannot fail. */
void tfm__linear_backward(const float *x, int64_t ldx, int64_t n, int64_t in,
                          const float *w, int64_t out, const float *grad_y,
                          int64_t ldg, float *grad_x, float *grad_w,
                          float *grad_b, double *bias_acc);

#endif
