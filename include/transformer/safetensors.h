/*
 * libtransformer: reading and writing safetensors files.
 *
 * Source: the safetensors format (Hugging Face, 2022): an 8-byte
 * little-endian unsigned header length N, N bytes of UTF-8 JSON header, then
 * the raw little-endian tensor data.  The header maps each tensor name to
 * {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...], "data_offsets":
 * [begin, end]} with offsets relative to the start of the data, and may hold
 * "__metadata__": a map of string to string.
 *
 * Everything is validated before it is trusted; a file that fails any check
 * is refused with TFM_ERR_FORMAT (or TFM_ERR_UNSUPPORTED for a well-formed
 * file using an unknown dtype) and a message naming the problem: file
 * shorter than 8 bytes, header length larger than the file or than
 * TFM_SAFETENSORS_MAX_HEADER, header not UTF-8 or not JSON, an entry that is
 * not a tensor description, element counts that overflow, offsets outside
 * the data, end < begin, offsets that disagree with the shape's byte size,
 * tensors that overlap or leave gaps, bytes after the last tensor.  A file
 * with only "__metadata__" is valid.  The JSON is parsed by cJSON.
 */
#ifndef TRANSFORMER_SAFETENSORS_H
#define TRANSFORMER_SAFETENSORS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest accepted JSON header, in bytes (as the reference implementation). */
#define TFM_SAFETENSORS_MAX_HEADER 100000000

/* Largest rank a file's tensor may have. */
#define TFM_SAFETENSORS_MAX_RANK 8

/* Element types of safetensors files.  Append-only. */
typedef enum tfm_dtype {
    TFM_DTYPE_F32 = 0,
    TFM_DTYPE_F16 = 1,
    TFM_DTYPE_BF16 = 2,
    TFM_DTYPE_F64 = 3,
    TFM_DTYPE_I64 = 4,
    TFM_DTYPE_I32 = 5,
    TFM_DTYPE_I16 = 6,
    TFM_DTYPE_I8 = 7,
    TFM_DTYPE_U8 = 8,
    TFM_DTYPE_BOOL = 9,
    /* Since 1.3: llama.cpp's block types, for parameters kept quantised
     * (weights.h) and GGUF files; never a safetensors dtype. */
    TFM_DTYPE_Q8_0 = 10,   /* blocks of 32: fp16 scale d, 32 int8 q;
                            * value = d * q (34 bytes a block) */
    TFM_DTYPE_Q4_0 = 11,   /* blocks of 32: fp16 scale d, 16 bytes of
                            * 4-bit q (low nibbles: values 0..15, high
                            * nibbles: values 16..31); value = d * (q - 8)
                            * (18 bytes a block) */
    TFM_DTYPE_COUNT
} tfm_dtype;

/* An open, validated safetensors file. */
typedef struct tfm_safetensors tfm_safetensors;

/* Opens and validates a file.  The file is mapped into memory (mmap), not
 * copied; data may start at any byte offset.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_IO (cannot open, stat or map),
 * TFM_ERR_FORMAT, TFM_ERR_UNSUPPORTED, TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY.  On success *out is closed with
 * tfm_safetensors_close. */
TFM_API tfm_status tfm_safetensors_open(const char *path,
                                        tfm_safetensors **out);

/* Validates a file held in memory: data[0 .. size-1], borrowed (the caller
 * keeps it alive until tfm_safetensors_close).  Errors: as
 * tfm_safetensors_open, without TFM_ERR_IO. */
TFM_API tfm_status tfm_safetensors_open_memory(const void *data, size_t size,
                                               tfm_safetensors **out);

/* Closes (unmaps) the file.  NULL is a no-op. */
TFM_API void tfm_safetensors_close(tfm_safetensors *file);

/* Number of tensors (0 for NULL). */
TFM_API int64_t tfm_safetensors_count(const tfm_safetensors *file);

/* Name of tensor `index` (0 .. count-1, in the order of their data
 * offsets), or NULL out of range.  Owned by the file handle. */
TFM_API const char *tfm_safetensors_name(const tfm_safetensors *file,
                                         int64_t index);

/* dtype, rank (0 .. TFM_SAFETENSORS_MAX_RANK) and shape (caller array of
 * TFM_SAFETENSORS_MAX_RANK values) of the named tensor.  Any of dtype,
 * rank, shape may be NULL.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_NOT_FOUND. */
TFM_API tfm_status tfm_safetensors_info(const tfm_safetensors *file,
                                        const char *name, tfm_dtype *dtype,
                                        int *rank, int64_t *shape);

/* Reads the named tensor into a new float32 tensor (F32 copied; F16 and
 * BF16 converted exactly; F64 rounded to nearest).  Rank-0 tensors are read
 * as shape [1].
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND, TFM_ERR_UNSUPPORTED
 * (integer or bool dtype, rank > TFM_MAX_RANK, an empty dimension),
 * TFM_ERR_OUT_OF_MEMORY. *out is freed with tfm_tensor_free. */
TFM_API tfm_status tfm_safetensors_read(const tfm_safetensors *file,
                                        const char *name, tfm_tensor **out);

/* Value of the "__metadata__" entry `key`, or NULL when absent.  Owned by
 * the file handle. */
TFM_API const char *tfm_safetensors_metadata(const tfm_safetensors *file,
                                             const char *key);

/* Number of metadata entries, and the key of entry `index` (NULL out of
 * range). */
TFM_API int64_t tfm_safetensors_metadata_count(const tfm_safetensors *file);
TFM_API const char *tfm_safetensors_metadata_key(const tfm_safetensors *file,
                                                 int64_t index);

/* ---- Writing ---------------------------------------------------------- */

typedef struct tfm_safetensors_writer tfm_safetensors_writer;

/* Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_safetensors_writer_create(tfm_safetensors_writer **out);

/* Frees the writer.  NULL is a no-op. */
TFM_API void tfm_safetensors_writer_free(tfm_safetensors_writer *writer);

/* Adds a copy of tensor as F32 under name (names must be unique and not
 * "__metadata__"); tfm_safetensors_writer_add_as chooses F16 or BF16.  Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT
 * (duplicate or reserved name, name not valid UTF-8),
 * TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_safetensors_writer_add(tfm_safetensors_writer *writer,
                                              const char *name,
                                              const tfm_tensor *tensor);

/* Adds a copy of tensor under name, stored in the file as dtype:
 * TFM_DTYPE_F32 (exactly; the same as tfm_safetensors_writer_add),
 * TFM_DTYPE_F16 (IEEE 754 binary16) or TFM_DTYPE_BF16 (bfloat16, the upper
 * half of a binary32).  Both round to nearest, ties to even, as PyTorch's
 * Tensor.to(torch.float16) and Tensor.to(torch.bfloat16): in F16,
 * magnitudes of 65520 and more become infinity, those of 2^-25 and less
 * zero (with their sign), those below 2^-14 subnormal; in BF16 the range
 * is float32's.  NaN is written as a quiet NaN (F16: 0x7e00 with the sign
 * and top payload bits; BF16: 0x7fc0, c10::BFloat16's scalar conversion,
 * where torch's vectorised one writes 0xffff, also a NaN).  tfm_safetensors_read widens the values back exactly.
 * Since 1.2.
 * Errors: those of tfm_safetensors_writer_add; TFM_ERR_INVALID_ARGUMENT
 * (dtype not a tfm_dtype), TFM_ERR_UNSUPPORTED (a dtype other than F32,
 * F16, BF16). */
TFM_API tfm_status tfm_safetensors_writer_add_as(
    tfm_safetensors_writer *writer, const char *name,
    const tfm_tensor *tensor, tfm_dtype dtype);

/* Adds (or replaces) a metadata entry.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_INVALID_ARGUMENT (key or value not valid UTF-8),
 * TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_safetensors_writer_set_metadata(
    tfm_safetensors_writer *writer, const char *key, const char *value);

/* Writes the file: header padded with spaces so that the data starts at a
 * multiple of 8 bytes, tensors in name order, back to back.  The file is
 * written to a temporary name in the same directory, flushed to disk
 * (fsync), renamed over path, and the directory is flushed too (where it
 * can be opened): a failure or a crash leaves either the old file or the
 * whole new one, never a partial file.  The temporary name
 * ("<path>.tmp.<pid>.<n>", n counting the calls in the process) is unique
 * to the call, so threads saving to one path at once each write their own
 * file and the last rename wins.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_IO, TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_safetensors_writer_save(
    const tfm_safetensors_writer *writer, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_SAFETENSORS_H */
