/* Internal: the tensor struct (tensor.h) and validation helpers. */
#ifndef TFM_SRC_TENSOR_IMPL_H
#define TFM_SRC_TENSOR_IMPL_H

#include "transformer/tensor.h"

struct tfm_tensor {
    int rank;
    int64_t shape[TFM_MAX_RANK];
    int64_t numel;
    float *data;
    int owns_data;
};

/* Checks that t (named `what` in messages) is non-NULL and has exactly the
 * given rank and shape; a negative expected dimension matches any size.
 * Returns TFM_OK or a failure status with the message set. */
/* Checks the tensors of a row-wise operation: x [..., d_in] and out
 * [..., d_out] with x's leading dimensions, neither NULL (message set). */
tfm_status tfm__check_rows(const tfm_tensor *x, int64_t d_in,
                           const tfm_tensor *out, int64_t d_out);

tfm_status tfm__check_shape(const tfm_tensor *t, const char *what, int rank,
                            const int64_t *shape);

/* The arguments of a row-wise backward pass (Linear, LayerNorm,
 * feed-forward): x [..., d_in] the forward's input, grad_output [...,
 * d_out] with x's leading axes and finite, grad_input NULL or x's shape and
 * not overlapping grad_output.  TFM_OK, TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_SHAPE, TFM_ERR_NON_FINITE or TFM_ERR_INVALID_ARGUMENT (message
 * names `what`). */
tfm_status tfm__check_backward_rows(const char *what, const tfm_tensor *x,
                                    int64_t d_in,
                                    const tfm_tensor *grad_output,
                                    int64_t d_out,
                                    const tfm_tensor *grad_input);

/* Whether x[0 .. n-1] are all finite (no NaN, no infinity). */
int tfm__all_finite(const float *x, int64_t n);

/* Formats a shape as "[2, 3, 4]" into buf. */
void tfm__format_shape(char *buf, size_t size, int rank, const int64_t *shape);

#endif
