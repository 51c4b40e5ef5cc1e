/*
 * libtransformer: tensors.
 *
 * A tfm_tensor is a float32 array of rank 1 to TFM_MAX_RANK, row-major and
 * contiguous (the last axis varies fastest), as numpy and PyTorch hold it.
 * Every dimension is at least 1.  Activations are batch first:
 * [batch, seq, d_model].
 *
 * A tensor either owns its data (tfm_tensor_create, tfm_tensor_create_copy)
 * or wraps memory that the caller owns (tfm_tensor_wrap, no copy: the caller
 * keeps that memory alive and unmoved until tfm_tensor_free).
 *
 * Boolean masks are float tensors too: 0.0 is false, any other value true.
 */
#ifndef TRANSFORMER_TENSOR_H
#define TRANSFORMER_TENSOR_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFM_MAX_RANK 4

typedef struct tfm_tensor tfm_tensor;

/* Creates a zero-filled tensor of shape shape[0..rank-1].
 * Errors: TFM_ERR_NULL_ARGUMENT (shape or out NULL), TFM_ERR_INVALID_ARGUMENT
 * (rank not in 1..TFM_MAX_RANK, a dimension < 1), TFM_ERR_OVERFLOW (the byte
 * size does not fit in size_t / int64), TFM_ERR_OUT_OF_MEMORY.
 * On success *out is a new tensor, freed with tfm_tensor_free. */
TFM_API tfm_status tfm_tensor_create(int rank, const int64_t *shape,
                                     tfm_tensor **out);

/* As tfm_tensor_create, then copies numel floats from data (which the
 * caller keeps).  Errors: those of tfm_tensor_create; data NULL gives
 * TFM_ERR_NULL_ARGUMENT. */
TFM_API tfm_status tfm_tensor_create_copy(int rank, const int64_t *shape,
                                          const float *data,
                                          tfm_tensor **out);

/* Wraps caller memory without copying: the tensor reads and writes data
 * directly.  data must hold numel floats, stay valid until tfm_tensor_free,
 * and is never freed by the library.  Errors: as tfm_tensor_create. */
TFM_API tfm_status tfm_tensor_wrap(int rank, const int64_t *shape,
                                   float *data, tfm_tensor **out);

/* Frees the tensor (and its data when it owns it).  NULL is a no-op. */
TFM_API void tfm_tensor_free(tfm_tensor *tensor);

/* Rank (1..TFM_MAX_RANK), or 0 for a NULL tensor. */
TFM_API int tfm_tensor_rank(const tfm_tensor *tensor);

/* Size of axis `axis` (negative counts from the end, -1 is the last), or 0
 * for a NULL tensor or an axis out of range. */
TFM_API int64_t tfm_tensor_dim(const tfm_tensor *tensor, int axis);

/* Number of elements (product of the dimensions), 0 for NULL. */
TFM_API int64_t tfm_tensor_numel(const tfm_tensor *tensor);

/* The data, numel floats row-major; NULL for a NULL tensor.  Owned by the
 * tensor (or by the caller for a wrapped tensor). */
TFM_API float *tfm_tensor_data(tfm_tensor *tensor);
TFM_API const float *tfm_tensor_data_const(const tfm_tensor *tensor);

/* Copies src's elements into dst; both must have the same shape.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_SHAPE (dst unchanged). */
TFM_API tfm_status tfm_tensor_copy(tfm_tensor *dst, const tfm_tensor *src);

/* Residual connection: x <- x + y, elementwise; same shape required.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_SHAPE (x unchanged). */
TFM_API tfm_status tfm_tensor_add(tfm_tensor *x, const tfm_tensor *y);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_TENSOR_H */
