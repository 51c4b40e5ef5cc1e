/* GGUF v3 files, the container (gguf.h): opening (mapped) or a buffer,
 * validating the header, the tensor table and the data section, and the
 * tensor queries.  The metadata queries are gguf_values.c.
 *
 * The parser walks the header once with a bounds-checked cursor; every
 * count read from the file is checked against the bytes left (each
 * key-value pair takes at least 13 bytes, each tensor entry 32, each
 * array element its size, each string 8) before anything is allocated
 * for it, so the memory kept is a bounded multiple of the file's size.
 * Semantics follow ggml/src/gguf.cpp and docs/gguf.md of llama.cpp. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transformer/safetensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "base/utf8.h"
#include "formats/gguf.h"
#include "formats/gguf_impl.h"

#define HEADER_BYTES 24      /* magic, version, n_tensors, n_kv */
#define MIN_KV_BYTES 13      /* key length (8), type (4), a 1-byte value */
#define MIN_TENSOR_BYTES 32  /* name length, n_dims, ne[0], type, offset */

/* A key in a message, "%.*s": at most 200 of its bytes (never a precision
 * that a length over INT_MAX would make negative). */
#define KEY(kv) (int)((kv)->key_len < 200 ? (kv)->key_len : 200), (kv)->key

/* ---- Value types ------------------------------------------------------ */

size_t tfm__gguf_scalar_size(int t)
{
    switch (t) {
    case TFM__GGUF_U8: case TFM__GGUF_I8: case TFM__GGUF_BOOL: return 1;
    case TFM__GGUF_U16: case TFM__GGUF_I16: return 2;
    case TFM__GGUF_U32: case TFM__GGUF_I32: case TFM__GGUF_F32: return 4;
    case TFM__GGUF_U64: case TFM__GGUF_I64: case TFM__GGUF_F64: return 8;
    default: return 0;
    }
}

const char *tfm__gguf_type_name(int t)
{
    static const char *const names[TFM__GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
        "array", "u64", "i64", "f64"};
    return t >= 0 && t < TFM__GGUF_TYPE_COUNT ? names[t] : "?";
}

/* ---- ggml tensor types ------------------------------------------------ */

/* ggml's names of its types (ggml.c: type_traits), for messages; NULL for
 * numbers ggml never used or removed. */
static const char *ggml_type_name(uint32_t t)
{
    static const char *const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", NULL, NULL, "Q5_0", "Q5_1", "Q8_0",
        "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS",
        "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
        "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", NULL, NULL, NULL,
        "TQ1_0", "TQ2_0", NULL, NULL, NULL, "MXFP4", "NVFP4", "Q1_0",
        "Q2_0"};
    return t < sizeof names / sizeof names[0] ? names[t] : NULL;
}

/* The accepted types: tfm_dtype, values per block, bytes per block; 0 when
 * t is not one of them. */
static int accepted_type(uint32_t t, int *dtype, int64_t *block,
                         int64_t *block_bytes)
{
    switch (t) {
    case TFM__GGML_F32: *dtype = TFM_DTYPE_F32; *block = 1; *block_bytes = 4; return 1;
    case TFM__GGML_F16: *dtype = TFM_DTYPE_F16; *block = 1; *block_bytes = 2; return 1;
    case TFM__GGML_BF16: *dtype = TFM_DTYPE_BF16; *block = 1; *block_bytes = 2; return 1;
    case TFM__GGML_Q8_0: *dtype = TFM_DTYPE_Q8_0; *block = 32; *block_bytes = 34; return 1;
    case TFM__GGML_Q4_0: *dtype = TFM_DTYPE_Q4_0; *block = 32; *block_bytes = 18; return 1;
    default: return 0;
    }
}

/* ---- The cursor and its failures -------------------------------------- */

typedef struct cursor {
    const unsigned char *p;
    size_t size;
    size_t pos;
    const char *file;        /* for messages */
} cursor;

/* "GGUF file "<file>": <message>" with status. */
static tfm_status failf(const cursor *c, tfm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tfm_status failf(const cursor *c, tfm_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tfm__fail(st, "GGUF file \"%.200s\": %s", c->file, msg);
}

static size_t left(const cursor *c)
{
    return c->size - c->pos;
}

/* n bytes at the cursor, advancing; what names them in the message. */
static tfm_status take(cursor *c, size_t n, const char *what,
                       const unsigned char **at)
{
    if (n > left(c))
        return failf(c, TFM_ERR_FORMAT,
                     "truncated: %s at byte %zu needs %zu bytes, %zu left",
                     what, c->pos, n, left(c));
    *at = c->p + c->pos;
    c->pos += n;
    return TFM_OK;
}

static tfm_status take_u32(cursor *c, const char *what, uint32_t *v)
{
    const unsigned char *at = NULL;
    tfm_status st = take(c, 4, what, &at);
    if (st == TFM_OK)
        *v = tfm__gguf_u32(at);
    return st;
}

static tfm_status take_u64(cursor *c, const char *what, uint64_t *v)
{
    const unsigned char *at = NULL;
    tfm_status st = take(c, 8, what, &at);
    if (st == TFM_OK)
        *v = tfm__gguf_u64(at);
    return st;
}

/* A string: u64 length then its bytes, inside the file. */
static tfm_status take_str(cursor *c, const char *what, tfm__gguf_str *s)
{
    const size_t at = c->pos;
    uint64_t len = 0;
    tfm_status st = take_u64(c, what, &len);
    if (st != TFM_OK)
        return st;
    if (len > left(c))
        return failf(c, TFM_ERR_FORMAT,
                     "%s at byte %zu: length %" PRIu64 " runs past the end "
                     "of the file (%zu bytes left)", what, at, len, left(c));
    s->ptr = (const char *)c->p + c->pos;
    s->len = len;
    c->pos += (size_t)len;
    return TFM_OK;
}

/* A key or tensor name: a string that is non-empty, NUL-free and valid
 * UTF-8. */
static tfm_status take_name(cursor *c, const char *what, tfm__gguf_str *s)
{
    const size_t at = c->pos;
    tfm_status st = take_str(c, what, s);
    if (st != TFM_OK)
        return st;
    if (s->len == 0)
        return failf(c, TFM_ERR_FORMAT, "%s at byte %zu is empty", what, at);
    if (memchr(s->ptr, '\0', (size_t)s->len))
        return failf(c, TFM_ERR_FORMAT, "%s at byte %zu holds a NUL byte",
                     what, at);
    size_t bad = 0;
    const char *why = tfm__utf8_check((const unsigned char *)s->ptr,
                                      (size_t)s->len, &bad);
    if (why)
        return failf(c, TFM_ERR_FORMAT,
                     "%s at byte %zu is not valid UTF-8 at byte %zu (%s)",
                     what, at, at + 8 + bad, why);
    return TFM_OK;
}

/* ---- Key-value pairs -------------------------------------------------- */

/* A value type read at byte at: one of the 13. */
static tfm_status check_type(const cursor *c, uint32_t t, size_t at,
                             const tfm__gguf_kv *kv)
{
    if (t >= TFM__GGUF_TYPE_COUNT)
        return failf(c, TFM_ERR_FORMAT,
                     "key \"%.*s\": unknown value type %" PRIu32
                     " at byte %zu", KEY(kv), t, at);
    return TFM_OK;
}

/* A bool's byte: 0 or 1. */
static tfm_status check_bools(const cursor *c, const tfm__gguf_kv *kv,
                              const unsigned char *v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (v[i] > 1)
            return failf(c, TFM_ERR_FORMAT,
                         "key \"%.*s\": bool value %u at byte %zu is "
                         "neither 0 nor 1", KEY(kv), v[i],
                         (size_t)(v + i - c->p));
    return TFM_OK;
}

/* An array's element type, count and elements (strings indexed). */
static tfm_status take_array(cursor *c, tfm__gguf_kv *kv)
{
    const size_t at = c->pos;
    uint32_t et;
    tfm_status st = take_u32(c, "array element type", &et);
    if (st == TFM_OK)
        st = check_type(c, et, at, kv);
    if (st != TFM_OK)
        return st;
    if (et == TFM__GGUF_ARRAY)
        return failf(c, TFM_ERR_FORMAT,
                     "key \"%.*s\": array of arrays at byte %zu (nested "
                     "arrays are not supported)", KEY(kv),
                     at);
    uint64_t n;
    if ((st = take_u64(c, "array length", &n)) != TFM_OK)
        return st;
    kv->elem_type = (int)et;
    kv->count = n;
    kv->value = c->p + c->pos;
    const size_t each = et == TFM__GGUF_STRING ? 8 : tfm__gguf_scalar_size((int)et);
    if (n > left(c) / each)
        return failf(c, TFM_ERR_FORMAT,
                     "key \"%.*s\": array of %" PRIu64 " %s at byte %zu "
                     "needs more than the %zu bytes left",
                     KEY(kv), n,
                     tfm__gguf_type_name((int)et), at, left(c));
    if (et != TFM__GGUF_STRING) {
        c->pos += (size_t)n * each;
        return et == TFM__GGUF_BOOL ? check_bools(c, kv, kv->value, n) : TFM_OK;
    }
    /* n * 8 bytes fit in the file, so the index is at most its size. */
    kv->str_at = tfm__malloc(n ? (size_t)n * sizeof *kv->str_at : 1);
    if (!kv->str_at)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "out of memory indexing %" PRIu64 " strings", n);
    for (uint64_t i = 0; i < n; i++) {
        kv->str_at[i] = (uint64_t)(c->pos - (size_t)(kv->value - c->p));
        tfm__gguf_str s;
        if ((st = take_str(c, "array string", &s)) != TFM_OK)
            return st;
    }
    return TFM_OK;
}

static tfm_status take_kv(cursor *c, tfm__gguf_kv *kv)
{
    tfm__gguf_str key = {NULL, 0};
    tfm_status st = take_name(c, "key", &key);
    if (st != TFM_OK)
        return st;
    kv->key = key.ptr;
    kv->key_len = key.len;
    const size_t at = c->pos;
    uint32_t t;
    if ((st = take_u32(c, "value type", &t)) != TFM_OK ||
        (st = check_type(c, t, at, kv)) != TFM_OK)
        return st;
    kv->type = (int)t;
    kv->value = c->p + c->pos;
    if (t == TFM__GGUF_ARRAY)
        return take_array(c, kv);
    if (t == TFM__GGUF_STRING) {
        tfm__gguf_str s;
        return take_str(c, "string value", &s);
    }
    const unsigned char *v = NULL;
    if ((st = take(c, tfm__gguf_scalar_size((int)t), "value", &v)) != TFM_OK)
        return st;
    return t == TFM__GGUF_BOOL ? check_bools(c, kv, v, 1) : TFM_OK;
}

static int compare_kv(const void *a, const void *b)
{
    const tfm__gguf_kv *x = *(const tfm__gguf_kv *const *)a;
    const tfm__gguf_kv *y = *(const tfm__gguf_kv *const *)b;
    const size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    const int d = memcmp(x->key, y->key, n);
    if (d)
        return d;
    return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* The key-value pairs, their sorted index, and general.alignment. */
static tfm_status take_kvs(cursor *c, tfm__gguf *g)
{
    for (int64_t i = 0; i < g->n_kv; i++) {
        tfm_status st = take_kv(c, &g->kv[i]);
        if (st != TFM_OK)
            return st;
    }
    for (int64_t i = 0; i < g->n_kv; i++)
        g->kv_by_key[i] = &g->kv[i];
    if (g->n_kv > 1)
        qsort(g->kv_by_key, (size_t)g->n_kv, sizeof *g->kv_by_key, compare_kv);
    for (int64_t i = 1; i < g->n_kv; i++)
        if (compare_kv(&g->kv_by_key[i - 1], &g->kv_by_key[i]) == 0)
            return failf(c, TFM_ERR_FORMAT, "key \"%.*s\" appears twice",
                         KEY(g->kv_by_key[i]));
    g->alignment = TFM__GGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < g->n_kv; i++) {
        const tfm__gguf_kv *kv = &g->kv[i];
        if (kv->key_len != 17 || memcmp(kv->key, "general.alignment", 17))
            continue;
        if (kv->type != TFM__GGUF_U32)
            return failf(c, TFM_ERR_FORMAT,
                         "general.alignment is a %s, expected u32",
                         tfm__gguf_type_name(kv->type));
        const uint32_t a = tfm__gguf_u32(kv->value);
        if (a == 0 || (a & (a - 1)) != 0)
            return failf(c, TFM_ERR_FORMAT,
                         "general.alignment %" PRIu32 " is not a power of "
                         "two", a);
        g->alignment = a;
    }
    return TFM_OK;
}

/* ---- Tensor entries --------------------------------------------------- */

/* The shape, type and size of a tensor entry (name already read). */
static tfm_status take_tensor_info(cursor *c, tfm__gguf_tensor *t,
                                   uint32_t alignment)
{
    const char *name = t->name;
    size_t at = c->pos;
    uint32_t n_dims;
    tfm_status st = take_u32(c, "n_dims", &n_dims);
    if (st != TFM_OK)
        return st;
    if (n_dims < 1 || n_dims > TFM__GGUF_MAX_DIMS)
        return failf(c, TFM_ERR_FORMAT,
                     "tensor \"%.100s\": n_dims %" PRIu32 " at byte %zu is "
                     "not in 1..4", name, n_dims, at);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < TFM__GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        at = c->pos;
        uint64_t ne;
        if ((st = take_u64(c, "ne", &ne)) != TFM_OK)
            return st;
        if (ne > (uint64_t)INT64_MAX)
            return failf(c, TFM_ERR_FORMAT,
                         "tensor \"%.100s\": ne[%d] = %" PRIu64 " at byte "
                         "%zu is larger than 2^63 - 1", name, d, ne, at);
        if (ne == 0)
            return failf(c, TFM_ERR_UNSUPPORTED,
                         "tensor \"%.100s\": ne[%d] = 0 at byte %zu (empty "
                         "tensors are not supported)", name, d, at);
        t->ne[d] = (int64_t)ne;
    }
    at = c->pos;
    if ((st = take_u32(c, "tensor type", &t->ggml_type)) != TFM_OK)
        return st;
    int64_t block = 0, block_bytes = 0;
    if (!accepted_type(t->ggml_type, &t->dtype, &block, &block_bytes)) {
        const char *tn = ggml_type_name(t->ggml_type);
        if (!tn)
            return failf(c, TFM_ERR_FORMAT,
                         "tensor \"%.100s\": unknown ggml type %" PRIu32
                         " at byte %zu", name, t->ggml_type, at);
        return failf(c, TFM_ERR_UNSUPPORTED,
                     "tensor \"%.100s\": type %s (%" PRIu32 ") is not "
                     "supported (F32, F16, BF16, Q8_0 and Q4_0 are)", name,
                     tn, t->ggml_type);
    }
    if (t->ne[0] % block != 0)
        return failf(c, TFM_ERR_FORMAT,
                     "tensor \"%.100s\": %s rows of %" PRId64 " values are "
                     "not whole blocks of %" PRId64, name,
                     ggml_type_name(t->ggml_type), t->ne[0], block);
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(t->ne[0] / block, block_bytes, &nbytes) ||
        __builtin_mul_overflow(nbytes, t->ne[1], &nbytes) ||
        __builtin_mul_overflow(nbytes, t->ne[2], &nbytes) ||
        __builtin_mul_overflow(nbytes, t->ne[3], &nbytes))
        return failf(c, TFM_ERR_FORMAT,
                     "tensor \"%.100s\": its size in bytes overflows "
                     "(shape %" PRId64 " x %" PRId64 " x %" PRId64 " x %"
                     PRId64 ")", name, t->ne[0], t->ne[1], t->ne[2],
                     t->ne[3]);
    t->nbytes = (uint64_t)nbytes;
    at = c->pos;
    if ((st = take_u64(c, "tensor offset", &t->offset)) != TFM_OK)
        return st;
    if (t->offset % alignment != 0)
        return failf(c, TFM_ERR_FORMAT,
                     "tensor \"%.100s\": offset %" PRIu64 " at byte %zu is "
                     "not a multiple of the alignment %" PRIu32, name,
                     t->offset, at, alignment);
    return TFM_OK;
}

static int compare_name(const void *a, const void *b)
{
    return strcmp((*(const tfm__gguf_tensor *const *)a)->name,
                  (*(const tfm__gguf_tensor *const *)b)->name);
}

static int compare_offset(const void *a, const void *b)
{
    const tfm__gguf_tensor *x = *(const tfm__gguf_tensor *const *)a;
    const tfm__gguf_tensor *y = *(const tfm__gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static tfm_status take_tensors(cursor *c, tfm__gguf *g)
{
    for (int64_t i = 0; i < g->n_tensors; i++) {
        tfm__gguf_tensor *t = &g->tensors[i];
        tfm__gguf_str name = {NULL, 0};
        tfm_status st = take_name(c, "tensor name", &name);
        if (st != TFM_OK)
            return st;
        t->name = tfm__malloc((size_t)name.len + 1);
        if (!t->name)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "out of memory for a tensor name");
        memcpy(t->name, name.ptr, (size_t)name.len);
        t->name[name.len] = '\0';
        if ((st = take_tensor_info(c, t, g->alignment)) != TFM_OK)
            return st;
    }
    for (int64_t i = 0; i < g->n_tensors; i++)
        g->by_name[i] = &g->tensors[i];
    if (g->n_tensors > 1)
        qsort(g->by_name, (size_t)g->n_tensors, sizeof *g->by_name,
              compare_name);
    for (int64_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->by_name[i - 1]->name, g->by_name[i]->name) == 0)
            return failf(c, TFM_ERR_FORMAT,
                         "tensor \"%.100s\" appears twice",
                         g->by_name[i]->name);
    return TFM_OK;
}

/* The data section: its start aligned, each tensor inside the file, no
 * two overlapping; then the data pointers. */
static tfm_status place_data(cursor *c, tfm__gguf *g)
{
    const uint64_t a = g->alignment;
    const uint64_t end = c->pos;
    const uint64_t start = (end + a - 1) / a * a; /* end < 2^63, a <= 2^31 */
    g->data_start = start;
    if (g->n_tensors == 0)
        return TFM_OK;
    if (start > c->size)
        return failf(c, TFM_ERR_FORMAT,
                     "the data section would start at byte %" PRIu64
                     " (the header ends at %" PRIu64 ", aligned to %" PRIu64
                     "), past the end of the file (%zu bytes)", start, end,
                     a, c->size);
    const uint64_t room = c->size - start;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const tfm__gguf_tensor *t = &g->tensors[i];
        if (t->offset > room || t->nbytes > room - t->offset)
            return failf(c, TFM_ERR_FORMAT,
                         "tensor \"%.100s\": its %" PRIu64 " bytes at "
                         "offset %" PRIu64 " of the data section (byte %"
                         PRIu64 ") run past the end of the file (%zu "
                         "bytes)", t->name, t->nbytes, t->offset, start,
                         c->size);
    }
    /* by_name is free to reuse for the offset order, then re-sorted. */
    const tfm__gguf_tensor **order = g->by_name;
    qsort(order, (size_t)g->n_tensors, sizeof *order, compare_offset);
    tfm_status st = TFM_OK;
    for (int64_t i = 1; i < g->n_tensors && st == TFM_OK; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
            st = failf(c, TFM_ERR_FORMAT,
                       "tensors \"%.100s\" (bytes %" PRIu64 "..%" PRIu64
                       ") and \"%.100s\" (from %" PRIu64 ") overlap in the "
                       "data section", order[i - 1]->name,
                       order[i - 1]->offset,
                       order[i - 1]->offset + order[i - 1]->nbytes,
                       order[i]->name, order[i]->offset);
    qsort(order, (size_t)g->n_tensors, sizeof *order, compare_name);
    if (st != TFM_OK)
        return st;
    for (int64_t i = 0; i < g->n_tensors; i++)
        g->tensors[i].data = c->p + start + g->tensors[i].offset;
    return TFM_OK;
}

/* ---- The handle ------------------------------------------------------- */

static void free_handle(tfm__gguf *g)
{
    for (int64_t i = 0; g->kv && i < g->n_kv; i++)
        tfm__free(g->kv[i].str_at);
    for (int64_t i = 0; g->tensors && i < g->n_tensors; i++)
        tfm__free(g->tensors[i].name);
    tfm__free(g->kv);
    tfm__free(g->kv_by_key);
    tfm__free(g->tensors);
    tfm__free(g->by_name);
    tfm__free(g->path);
    if (g->map)
        munmap(g->map, g->map_size);
    tfm__free(g);
}

void tfm__gguf_close(tfm__gguf *g)
{
    if (g)
        free_handle(g);
}

/* The header: magic, version, counts bounded by the bytes left. */
static tfm_status take_header(cursor *c, uint64_t *n_tensors, uint64_t *n_kv)
{
    if (c->size < 4 || memcmp(c->p, "GGUF", 4) != 0)
        return failf(c, TFM_ERR_FORMAT,
                     "not a GGUF file (it does not begin with \"GGUF\")");
    if (c->size < HEADER_BYTES)
        return failf(c, TFM_ERR_FORMAT,
                     "truncated: %zu bytes, the header needs %d", c->size,
                     HEADER_BYTES);
    const uint32_t v = tfm__gguf_u32(c->p + 4);
    if (v != 0 && (v & 0xFFFFu) == 0)
        return failf(c, TFM_ERR_UNSUPPORTED,
                     "a big-endian GGUF file (version reads as 0x%08" PRIx32
                     "); only little-endian files are supported", v);
    if (v == 1 || v == 2)
        return failf(c, TFM_ERR_UNSUPPORTED,
                     "GGUF version %" PRIu32 " is not supported (only 3)", v);
    if (v != TFM__GGUF_VERSION)
        return failf(c, v == 0 ? TFM_ERR_FORMAT : TFM_ERR_UNSUPPORTED,
                     "unknown GGUF version %" PRIu32 " (only 3 is supported)",
                     v);
    *n_tensors = tfm__gguf_u64(c->p + 8);
    *n_kv = tfm__gguf_u64(c->p + 16);
    c->pos = HEADER_BYTES;
    const size_t rest = left(c);
    if (*n_kv > rest / MIN_KV_BYTES)
        return failf(c, TFM_ERR_FORMAT,
                     "%" PRIu64 " key-value pairs cannot fit in the %zu "
                     "bytes after the header", *n_kv, rest);
    if (*n_tensors > rest / MIN_TENSOR_BYTES ||
        *n_kv * MIN_KV_BYTES + *n_tensors * MIN_TENSOR_BYTES > rest)
        return failf(c, TFM_ERR_FORMAT,
                     "%" PRIu64 " tensors and %" PRIu64 " key-value pairs "
                     "cannot fit in the %zu bytes after the header",
                     *n_tensors, *n_kv, rest);
    return TFM_OK;
}

static tfm_status parse(const unsigned char *p, size_t size, const char *file,
                        tfm__gguf **out)
{
    cursor c = {p, size, 0, file};
    uint64_t n_tensors = 0, n_kv = 0;
    tfm_status st = take_header(&c, &n_tensors, &n_kv);
    if (st != TFM_OK)
        return st;
    tfm__gguf *g = tfm__calloc(1, sizeof *g);
    if (!g)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    /* Both counts are below size / 13, so these products fit. */
    g->bytes = p;
    g->size = size;
    g->path = tfm__strdup(file);
    g->kv = tfm__calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->kv_by_key = tfm__calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv_by_key);
    g->tensors = tfm__calloc(n_tensors ? (size_t)n_tensors : 1,
                             sizeof *g->tensors);
    g->by_name = tfm__calloc(n_tensors ? (size_t)n_tensors : 1,
                             sizeof *g->by_name);
    if (!g->path || !g->kv || !g->kv_by_key || !g->tensors || !g->by_name) {
        free_handle(g);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "out of memory for %" PRIu64 " keys and %" PRIu64
                         " tensors", n_kv, n_tensors);
    }
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    if ((st = take_kvs(&c, g)) != TFM_OK ||
        (st = take_tensors(&c, g)) != TFM_OK ||
        (st = place_data(&c, g)) != TFM_OK) {
        free_handle(g);
        return st;
    }
    *out = g;
    return TFM_OK;
}

tfm_status tfm__gguf_open_memory(const void *data, size_t size,
                                 tfm__gguf **out)
{
    if (!data || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !data ? "data" : "out");
    return parse(data, size, "(memory)", out);
}

tfm_status tfm__gguf_open(const char *path, tfm__gguf **out)
{
    if (!path || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !path ? "path" : "out");
    int fd = -1;
    size_t size = 0;
    tfm_status st = tfm__open_regular(path, 0, &fd, &size);
    if (st != TFM_OK)
        return st;
    if (size < HEADER_BYTES) {
        close(fd);
        const cursor c = {NULL, size, 0, path};
        return failf(&c, TFM_ERR_FORMAT,
                     "truncated: %zu bytes, the header needs %d", size,
                     HEADER_BYTES);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    close(fd);
    if (map == MAP_FAILED)
        return tfm__fail(TFM_ERR_IO, "cannot map \"%s\": %s", path,
                         strerror(err));
    tfm__gguf *g = NULL;
    st = parse(map, size, path, &g);
    if (st != TFM_OK) {
        munmap(map, size);
        return st;
    }
    g->map = map;
    g->map_size = size;
    *out = g;
    return TFM_OK;
}

/* ---- Queries ---------------------------------------------------------- */

const char *tfm__gguf_path(const tfm__gguf *g)
{
    return g ? g->path : NULL;
}

uint32_t tfm__gguf_alignment(const tfm__gguf *g)
{
    return g ? g->alignment : 0;
}

int64_t tfm__gguf_n_tensors(const tfm__gguf *g)
{
    return g ? g->n_tensors : 0;
}

const tfm__gguf_tensor *tfm__gguf_tensor_at(const tfm__gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const tfm__gguf_tensor *tfm__gguf_find_tensor(const tfm__gguf *g,
                                              const char *name)
{
    if (!g || !name)
        return NULL;
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const int d = strcmp(g->by_name[mid]->name, name);
        if (d == 0)
            return g->by_name[mid];
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const void *tfm__gguf_map(const tfm__gguf *g, size_t *size)
{
    if (!g)
        return NULL;
    if (size)
        *size = g->size;
    return g->bytes;
}

void *tfm__gguf_release_map(tfm__gguf *g, size_t *size)
{
    if (!g || !g->map)
        return NULL;
    void *map = g->map;
    if (size)
        *size = g->map_size;
    g->map = NULL;
    return map;
}
