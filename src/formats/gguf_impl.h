/* Internal: what the GGUF reader's files share (gguf.c opens, parses the
 * header and the key-value pairs; gguf_tensors.c the tensor entries and
 * the data section; gguf_values.c answers the metadata queries): the
 * handle, the parsed key-value pairs, the cursor and little-endian
 * loads. */
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

/* The parser's position in the file's bytes (gguf.c). */
typedef struct tfm__gguf_cursor {
    const unsigned char *p;
    size_t size;
    size_t pos;
    const char *file;        /* for messages */
} tfm__gguf_cursor;

/* Sets the message "GGUF file "<file>": <fmt...>" and returns st. */
tfm_status tfm__gguf_failf(const tfm__gguf_cursor *c, tfm_status st,
                           const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reads at the cursor and advances, or TFM_ERR_FORMAT "truncated: <what>
 * at byte N ...": a u32, a u64, a name (a string that is non-empty,
 * NUL-free and valid UTF-8; *s points into the file). */
tfm_status tfm__gguf_take_u32(tfm__gguf_cursor *c, const char *what,
                              uint32_t *v);
tfm_status tfm__gguf_take_u64(tfm__gguf_cursor *c, const char *what,
                              uint64_t *v);
tfm_status tfm__gguf_take_name(tfm__gguf_cursor *c, const char *what,
                               tfm__gguf_str *s);

/* gguf_tensors.c: the g->n_tensors entries at the cursor into
 * g->tensors (names unique, shapes and types checked, offsets aligned,
 * g->by_name sorted); then the data section placed after the header (each
 * tensor inside the file, none overlapping) and the data pointers set. */
tfm_status tfm__gguf_take_tensors(tfm__gguf_cursor *c, tfm__gguf *g);
tfm_status tfm__gguf_place_data(tfm__gguf_cursor *c, tfm__gguf *g);

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
