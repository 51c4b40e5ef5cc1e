/* Internal: reading a safetensors tensor straight into caller memory. */
#ifndef TFM_SRC_SAFETENSORS_IMPL_H
#define TFM_SRC_SAFETENSORS_IMPL_H

#include "transformer/safetensors.h"

/* Converts the named tensor (F32, F16, BF16 or F64, as
 * tfm_safetensors_read) into dst, which holds its element count of floats:
 * in the file's row-major order, or, with transpose (rank 2 only), as the
 * transpose: file [rows, cols] -> dst [cols, rows].  No other memory is
 * allocated.  Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND,
 * TFM_ERR_UNSUPPORTED (a dtype that is not a float, an empty dimension,
 * transpose of a tensor that is not rank 2); dst is untouched on error. */
tfm_status tfm__safetensors_read_into(const tfm_safetensors *file,
                                      const char *name, int transpose,
                                      float *dst);

#endif
