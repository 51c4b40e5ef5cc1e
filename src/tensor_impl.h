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

/* Formats a shape as "[2, 3, 4]" into buf. */
void tfm__format_shape(char *buf, size_t size, int rank, const int64_t *shape);

#endif
