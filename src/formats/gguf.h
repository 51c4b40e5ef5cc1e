/* Internal: the GGUF v3 container reader (llama.cpp's model files).
 *
 * Layout (little-endian; spec: ggml's docs/gguf.md, ggml/src/gguf.cpp):
 *   "GGUF" u32 version (3) u64 n_tensors u64 n_kv
 *   n_kv x   { string key, u32 value type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type,
 *                 u64 offset (from the data section's start) }
 *   padding to general.alignment (u32, a power of two, default 32)
 *   data section: each tensor at its offset, a multiple of the alignment
 * string = u64 length + bytes (no NUL); value = scalar, string, or array
 * (u32 element type, u64 count, elements; no arrays of arrays).
 *
 * tfm__gguf_open maps the file read-only (MAP_PRIVATE, through the one
 * file door tfm__open_regular) and validates every byte of the header
 * before anything is kept: counts are bounded by the bytes left before
 * any allocation, keys and tensor names are non-empty, NUL-free, valid
 * UTF-8 and unique, tensor shapes of rank 1..4 with each ne >= 1 and a
 * product that fits, types F32, F16, BF16, Q8_0 and Q4_0 (rows a
 * multiple of 32 for the Q types; the others refused by ggml's name),
 * offsets aligned, every tensor's bytes inside the file and no two
 * overlapping.  String values are kept as bytes with their length (not
 * checked as UTF-8: a vocabulary may hold byte tokens).  Messages name
 * the file, the key or tensor and the byte offset.
 *
 * Every pointer handed out (tensor data, strings) points into the mapping
 * and stays valid until tfm__gguf_close, or, after
 * tfm__gguf_release_map, until its new owner unmaps it. */
#ifndef TFM_SRC_GGUF_H
#define TFM_SRC_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "transformer/status.h"

typedef struct tfm__gguf tfm__gguf;

/* Value types of GGUF v3 (gguf_type), as stored. */
enum {
    TFM__GGUF_U8 = 0, TFM__GGUF_I8, TFM__GGUF_U16, TFM__GGUF_I16,
    TFM__GGUF_U32, TFM__GGUF_I32, TFM__GGUF_F32, TFM__GGUF_BOOL,
    TFM__GGUF_STRING, TFM__GGUF_ARRAY, TFM__GGUF_U64, TFM__GGUF_I64,
    TFM__GGUF_F64,
    TFM__GGUF_TYPE_COUNT
};

/* The ggml tensor types the reader accepts (ggml.h: ggml_type). */
enum {
    TFM__GGML_F32 = 0, TFM__GGML_F16 = 1, TFM__GGML_Q4_0 = 2,
    TFM__GGML_Q8_0 = 8, TFM__GGML_BF16 = 30
};

#define TFM__GGUF_VERSION 3
#define TFM__GGUF_MAX_DIMS 4            /* GGML_MAX_DIMS */
#define TFM__GGUF_DEFAULT_ALIGNMENT 32  /* GGUF_DEFAULT_ALIGNMENT */

/* A string in the mapping: len bytes at ptr, NOT NUL-terminated. */
typedef struct tfm__gguf_str {
    const char *ptr;
    uint64_t len;
} tfm__gguf_str;

typedef struct tfm__gguf_tensor {
    char *name;           /* NUL-terminated copy */
    int n_dims;           /* 1..4 */
    int64_t ne[4];        /* ggml order: ne[0] is the fastest axis (columns);
                           * ne[n_dims..3] are 1 */
    uint32_t ggml_type;   /* as stored: TFM__GGML_* */
    int dtype;            /* tfm_dtype: F32, F16, BF16, Q8_0, Q4_0 */
    const void *data;     /* in the mapping, at a multiple of
                           * general.alignment from the file's start */
    uint64_t nbytes;
    uint64_t offset;      /* from the data section's start, as stored */
} tfm__gguf_tensor;

/* Opens and validates the GGUF file at path into *out (close it).
 * TFM_ERR_NULL_ARGUMENT, TFM_ERR_IO (cannot open or map, not a regular
 * file), TFM_ERR_FORMAT (malformed: message names the file, what and the
 * byte offset), TFM_ERR_UNSUPPORTED (version 1 or 2, a big-endian file, a
 * tensor type other than F32/F16/BF16/Q8_0/Q4_0, an empty tensor),
 * TFM_ERR_OVERFLOW, TFM_ERR_OUT_OF_MEMORY; *out untouched on error. */
tfm_status tfm__gguf_open(const char *path, tfm__gguf **out);

/* The same on size bytes at data (for the fuzzer and tests; the caller
 * keeps data alive and unchanged while *out is open).  Alignment is
 * counted from data, so tensor pointers are aligned in memory only when
 * data is. */
tfm_status tfm__gguf_open_memory(const void *data, size_t size,
                                 tfm__gguf **out);

/* NULL ok; unmaps the file unless tfm__gguf_release_map handed it on. */
void tfm__gguf_close(tfm__gguf *g);

/* The path given to tfm__gguf_open, or "(memory)". */
const char *tfm__gguf_path(const tfm__gguf *g);

/* general.alignment, or the default, 32. */
uint32_t tfm__gguf_alignment(const tfm__gguf *g);

/* Tensors in file order: i in [0, n_tensors), else NULL. */
int64_t tfm__gguf_n_tensors(const tfm__gguf *g);
const tfm__gguf_tensor *tfm__gguf_tensor_at(const tfm__gguf *g, int64_t i);

/* The tensor named name (binary search), or NULL (no message set). */
const tfm__gguf_tensor *tfm__gguf_find_tensor(const tfm__gguf *g,
                                              const char *name);

/* Metadata, in file order: i in [0, n_kv); the key (valid UTF-8, not
 * NUL-terminated) and its type (TFM__GGUF_*); TFM_ERR_INVALID_ARGUMENT
 * when i is out of range. */
int64_t tfm__gguf_n_kv(const tfm__gguf *g);
tfm_status tfm__gguf_kv_at(const tfm__gguf *g, int64_t i, tfm__gguf_str *key,
                           int *type);

/* Metadata by key.  Each returns TFM_OK, TFM_ERR_NOT_FOUND (absent;
 * message names the key and file) or TFM_ERR_FORMAT (present with
 * another type, or a value that does not fit; message); *v untouched on
 * error. */
tfm_status tfm__gguf_get_str(const tfm__gguf *g, const char *key,
                             tfm__gguf_str *v);
/* Any integer type (U8..I64) whose value fits. */
tfm_status tfm__gguf_get_u32(const tfm__gguf *g, const char *key,
                             uint32_t *v);
tfm_status tfm__gguf_get_i64(const tfm__gguf *g, const char *key,
                             int64_t *v);
/* Any integer type whose value is not negative. */
tfm_status tfm__gguf_get_u64(const tfm__gguf *g, const char *key,
                             uint64_t *v);
/* F32, or F64 rounded to nearest (a finite F64 beyond float's range is
 * TFM_ERR_FORMAT). */
tfm_status tfm__gguf_get_f32(const tfm__gguf *g, const char *key, float *v);
/* BOOL: *v = 0 or 1. */
tfm_status tfm__gguf_get_bool(const tfm__gguf *g, const char *key, int *v);
/* The raw value of a scalar key of any integer or float type, as a
 * double (u64/i64 beyond 2^53 rounded); for dumps. */
tfm_status tfm__gguf_get_number(const tfm__gguf *g, const char *key,
                                double *v);

/* Arrays: *elem_type (TFM__GGUF_*, never ARRAY) and *count. */
tfm_status tfm__gguf_get_array(const tfm__gguf *g, const char *key,
                               int *elem_type, uint64_t *count);
/* Element i of an array (O(1): string arrays are indexed at open).
 * TFM_ERR_NOT_FOUND, TFM_ERR_FORMAT (not an array, or elements of
 * another type / a value that does not fit), TFM_ERR_INVALID_ARGUMENT
 * (i >= count). */
tfm_status tfm__gguf_array_str(const tfm__gguf *g, const char *key,
                               uint64_t i, tfm__gguf_str *v);
/* F32 or F64 elements (rounded). */
tfm_status tfm__gguf_array_f32(const tfm__gguf *g, const char *key,
                               uint64_t i, float *v);
/* I32, or any other integer type whose value fits (BOOL not included). */
tfm_status tfm__gguf_array_i32(const tfm__gguf *g, const char *key,
                               uint64_t i, int32_t *v);
/* Any numeric or BOOL element as a double; for dumps. */
tfm_status tfm__gguf_array_number(const tfm__gguf *g, const char *key,
                                  uint64_t i, double *v);

/* The whole file's bytes (the mapping, or the caller's buffer). */
const void *tfm__gguf_map(const tfm__gguf *g, size_t *size);

/* Hands the mapping on: returns its start (NULL for tfm__gguf_open_memory
 * or when already released) with its length in *size; the caller then
 * owns it (munmap(start, *size)) and tfm__gguf_close no longer unmaps.
 * Pointers into it stay valid until the new owner unmaps it. */
void *tfm__gguf_release_map(tfm__gguf *g, size_t *size);

#endif
