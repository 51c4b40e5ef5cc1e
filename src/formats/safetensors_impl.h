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

/* The mapping of a file opened by tfm_safetensors_open (NULL for
 * tfm_safetensors_open_memory): a loader that binds tensors where they
 * lie retains it (base/mapping.h). */
struct tfm__mapping *tfm__safetensors_mapping(const tfm_safetensors *file);

/* The named tensor as stored: *dtype (a tfm_dtype, or -1 when the file
 * names a dtype this library does not know), its bytes and their count.
 * Errors: TFM_ERR_NOT_FOUND (message set). */
tfm_status tfm__safetensors_raw(const tfm_safetensors *file, const char *name,
                                int *dtype, const void **bytes,
                                uint64_t *nbytes);

/* Adds a copy of rows * row_bytes bytes under name as a U8 tensor [rows,
 * row_bytes] (a weight stored in a block type, which model files record
 * in their metadata: formats/model_file.c).  Errors: those of
 * tfm_safetensors_writer_add (a duplicate or invalid name, out of
 * memory). */
tfm_status tfm__safetensors_writer_add_bytes(tfm_safetensors_writer *writer,
                                             const char *name,
                                             int64_t rows, int64_t row_bytes,
                                             const void *bytes);

#endif
