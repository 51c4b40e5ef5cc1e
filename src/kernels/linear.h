/* Internal: the one door of every product with a layer's weight matrix
 * (nn.Linear's y = x W^T + b, forward and backward).  W is named by its
 * float pointer into the parameter storage of its module: a weight kept
 * in float32 is multiplied where it lies (base/gemm.h); a weight stored
 * in 16-, 8- or 4-bit (transformer/weights.h; kernels/weight_store.h
 * finds it by that pointer) is widened panel by panel and multiplied
 * (kernels/quant.h).  The backward takes float32 weights only: a module
 * with stored weights does not train. */
#ifndef TFM_SRC_LINEAR_KERNEL_H
#define TFM_SRC_LINEAR_KERNEL_H

#include <stdint.h>

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
