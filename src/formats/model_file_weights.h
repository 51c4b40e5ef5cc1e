/* Internal: the parameters of a model file (formats/model_file.c) when
 * weights are stored in other types (transformer/weights.h).
 *
 * A weight stored as BF16 or F16 is written as that safetensors dtype; one
 * stored as Q8_0 or Q4_0 as a U8 tensor [rows, row bytes] of its blocks
 * (ggml's layout, quant.h) with the metadata key "tfm.dtype.<parameter>"
 * naming its type ("Q8_0", "Q4_0"); everything else as F32.  A file
 * without such keys is a model file as before 1.3. */
#ifndef TFM_SRC_MODEL_FILE_WEIGHTS_H
#define TFM_SRC_MODEL_FILE_WEIGHTS_H

#include "nn/module_impl.h"
#include "transformer/safetensors.h"

/* The metadata key prefix of block-typed weights. */
#define TFM__DTYPE_KEY "tfm.dtype."

/* Adds every parameter of model to w in its stored type.  Errors: those
 * of the writer (out of memory). */
tfm_status tfm__model_file_add_params(tfm_safetensors_writer *w,
                                      const tfm_module *model);

/* rank and shape (TFM_SAFETENSORS_MAX_RANK values) of tensor name as the
 * parameter it holds: a block-typed weight's [rows, row bytes] read back
 * as [rows, values].  TFM_OK or TFM_ERR_NOT_FOUND / TFM_ERR_FORMAT (a
 * "tfm.dtype." key that is not Q8_0 or Q4_0, or a tensor that does not
 * fit it; message set). */
tfm_status tfm__model_file_tensor_shape(const tfm_safetensors *f,
                                        const char *name, int *rank,
                                        int64_t *shape);

/* Whether f has any "tfm.dtype." key. */
int tfm__model_file_has_blocks(const tfm_safetensors *f);

/* Sets every parameter of model from f (the tensors were checked against
 * the configuration; each is checked again here): convertible weights
 * bound in keep_dtype (TFM_LOAD_DTYPE_AUTO: as stored), in place from
 * f's mapping when map_in_place and the bytes allow it; the others read
 * as float32.  No tensor of f may be left over.  Errors:
 * TFM_ERR_FORMAT, TFM_ERR_NON_FINITE, TFM_ERR_INVALID_ARGUMENT,
 * TFM_ERR_OUT_OF_MEMORY (messages name the tensor). */
tfm_status tfm__model_file_load_params(tfm_module *model,
                                       const tfm_safetensors *f,
                                       int keep_dtype, int map_in_place);

#endif
