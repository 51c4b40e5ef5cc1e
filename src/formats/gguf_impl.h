/* Internal: what the GGUF reader's files share (gguf.c parses and
 * validates, gguf_values.c answers the metadata queries): the handle, the
 * parsed key-value pairs and little-endian loads. */
#ifndef TFM_SRC_GGUF_IMPL_H
#define TFM_SRC_GGUF_IMPL_H

#include <stdint.h>
#include <string.h>

#include "formats/gguf.h"

/* One key-value pair; every pointer is into the file's bytes. */
typedef struct tfm__gguf_kv {
    const char *key;              /* key_len bytes, valid UTF-8, no NUL */
    uint64_t key_len;
    int type;                     /* TFM__GGUF_* */
    int elem_type;                /* arrays: the elements' type */
    uint64_t count;               /* arrays: the element count */
    const unsigned char *value;   /* scalar: its bytes; string: its u64
                                   * length; array: its first element */
    uint64_t *str_at;             /* arrays of strings: [count] offsets
                                   * from value of each element's length */
} tfm__gguf_kv;

struct tfm__gguf {
    const unsigned char *bytes;   /* the whole file */
    size_t size;
    void *map;                    /* owned mapping, NULL for memory / once
                                   * released */
    size_t map_size;
    char *path;                   /* "(memory)" for open_memory */
    uint32_t alignment;
    uint64_t data_start;          /* file offset of the data section */
    tfm__gguf_kv *kv;             /* [n_kv], in file order */
    const tfm__gguf_kv **kv_by_key; /* [n_kv], sorted by key */
    int64_t n_kv;
    tfm__gguf_tensor *tensors;    /* [n_tensors], in file order */
    const tfm__gguf_tensor **by_name; /* [n_tensors], sorted by name */
    int64_t n_tensors;
};

/* Bytes of one scalar of value type t (0 for STRING and ARRAY). */
size_t tfm__gguf_scalar_size(int t);

/* The value type's name ("u32", "string", ...; "?" if unknown). */
const char *tfm__gguf_type_name(int t);

static inline uint16_t tfm__gguf_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static inline uint32_t tfm__gguf_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline uint64_t tfm__gguf_u64(const unsigned char *p)
{
    return (uint64_t)tfm__gguf_u32(p) | (uint64_t)tfm__gguf_u32(p + 4) << 32;
}

#endif
