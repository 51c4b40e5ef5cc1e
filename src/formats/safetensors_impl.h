/* Internal: what the safetensors reader (safetensors_read.c) and writer
 * (safetensors_write.c) share, and reading a safetensors tensor straight
 * into caller memory (for hub_model.c). */
#ifndef TFM_SRC_SAFETENSORS_IMPL_H
#define TFM_SRC_SAFETENSORS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "transformer/safetensors.h"
#include "transformer/names.h"

/* A tensor name in a message: quoted, cut to 100 bytes ("%s"'s place). */
#define TFM__ST_QUOTED "\"%.100s\""

/* Bytes per element of each tfm_dtype (safetensors_read.c); the names
 * ("F32", ...) are in names.c. */
extern const size_t tfm__st_dtype_sizes[TFM_DTYPE_COUNT];

/* The dtype's name as the file spells it ("F32", ...). */
static inline const char *tfm__st_dtype_name(int dtype)
{
    return tfm_enum_name(TFM_ENUM_DTYPE, dtype);
}

/* One "__metadata__" entry: both strings owned (tfm__malloc). */
typedef struct tfm__st_meta {
    char *key;
    char *value;
} tfm__st_meta;

/* Frees the n entries' strings and the array itself; meta may be NULL. */
void tfm__st_meta_free(tfm__st_meta *meta, int64_t n);

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
