/* GGUF v3 files, the container (gguf.h): opening (mapped) or a buffer,
 * the bounds-checked cursor, validating the header and the key-value
 * pairs.  The tensor entries and the data section are gguf_tensors.c, the
 * metadata queries gguf_values.c.
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

/* ---- The cursor and its failures -------------------------------------- */

tfm_status tfm__gguf_failf(const tfm__gguf_cursor *c, tfm_status st,
                           const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tfm__fail(st, "GGUF file \"%.200s\": %s", c->file, msg);
}

static size_t left(const tfm__gguf_cursor *c)
{
    return c->size - c->pos;
}

/* n bytes at the cursor, advancing; what names them in the message. */
static tfm_status take(tfm__gguf_cursor *c, size_t n, const char *what,
                       const unsigned char **at)
{
    if (n > left(c))
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "truncated: %s at byte %zu needs %zu bytes, %zu left",
                     what, c->pos, n, left(c));
    *at = c->p + c->pos;
    c->pos += n;
    return TFM_OK;
}

tfm_status tfm__gguf_take_u32(tfm__gguf_cursor *c, const char *what,
                              uint32_t *v)
{
    const unsigned char *at = NULL;
    tfm_status st = take(c, 4, what, &at);
    if (st == TFM_OK)
        *v = tfm__gguf_u32(at);
    return st;
}

tfm_status tfm__gguf_take_u64(tfm__gguf_cursor *c, const char *what,
                              uint64_t *v)
{
    const unsigned char *at = NULL;
    tfm_status st = take(c, 8, what, &at);
    if (st == TFM_OK)
        *v = tfm__gguf_u64(at);
    return st;
}

/* A string: u64 length then its bytes, inside the file. */
static tfm_status take_str(tfm__gguf_cursor *c, const char *what,
                           tfm__gguf_str *s)
{
    const size_t at = c->pos;
    uint64_t len = 0;
    tfm_status st = tfm__gguf_take_u64(c, what, &len);
    if (st != TFM_OK)
        return st;
    if (len > left(c))
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "%s at byte %zu: length %" PRIu64 " runs past the end "
                     "of the file (%zu bytes left)", what, at, len, left(c));
    s->ptr = (const char *)c->p + c->pos;
    s->len = len;
    c->pos += (size_t)len;
    return TFM_OK;
}

/* A key or tensor name: a string that is non-empty, NUL-free and valid
 * UTF-8. */
tfm_status tfm__gguf_take_name(tfm__gguf_cursor *c, const char *what,
                               tfm__gguf_str *s)
{
    const size_t at = c->pos;
    tfm_status st = take_str(c, what, s);
    if (st != TFM_OK)
        return st;
    if (s->len == 0)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT, "%s at byte %zu is empty",
                               what, at);
    if (memchr(s->ptr, '\0', (size_t)s->len))
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                               "%s at byte %zu holds a NUL byte",
                               what, at);
    size_t bad = 0;
    const char *why = tfm__utf8_check((const unsigned char *)s->ptr,
                                      (size_t)s->len, &bad);
    if (why)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "%s at byte %zu is not valid UTF-8 at byte %zu (%s)",
                     what, at, at + 8 + bad, why);
    return TFM_OK;
}

/* ---- Key-value pairs -------------------------------------------------- */

/* A value type read at byte at: one of the 13. */
static tfm_status check_type(const tfm__gguf_cursor *c, uint32_t t, size_t at,
                             const tfm__gguf_kv *kv)
{
    if (t >= TFM__GGUF_TYPE_COUNT)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                               "key \"%.*s\": unknown value type %" PRIu32
                               " at byte %zu", KEY(kv), t, at);
    return TFM_OK;
}

/* A bool's byte: 0 or 1. */
static tfm_status check_bools(const tfm__gguf_cursor *c, const tfm__gguf_kv *kv,
                              const unsigned char *v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (v[i] > 1)
            return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                                   "key \"%.*s\": bool value %u at byte %zu is "
                                   "neither 0 nor 1", KEY(kv), v[i],
                                   (size_t)(v + i - c->p));
    return TFM_OK;
}

/* An array's element type, count and elements (strings indexed). */
static tfm_status take_array(tfm__gguf_cursor *c, tfm__gguf_kv *kv)
{
    const size_t at = c->pos;
    uint32_t et;
    tfm_status st = tfm__gguf_take_u32(c, "array element type", &et);
    if (st == TFM_OK)
        st = check_type(c, et, at, kv);
    if (st != TFM_OK)
        return st;
    if (et == TFM__GGUF_ARRAY)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "key \"%.*s\": array of arrays at byte %zu (nested "
                     "arrays are not supported)", KEY(kv),
                     at);
    uint64_t n;
    if ((st = tfm__gguf_take_u64(c, "array length", &n)) != TFM_OK)
        return st;
    kv->elem_type = (int)et;
    kv->count = n;
    kv->value = c->p + c->pos;
    const size_t each =
        et == TFM__GGUF_STRING ? 8 : tfm__gguf_scalar_size((int)et);
    if (n > left(c) / each)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
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

static tfm_status take_kv(tfm__gguf_cursor *c, tfm__gguf_kv *kv)
{
    tfm__gguf_str key = {NULL, 0};
    tfm_status st = tfm__gguf_take_name(c, "key", &key);
    if (st != TFM_OK)
        return st;
    kv->key = key.ptr;
    kv->key_len = key.len;
    const size_t at = c->pos;
    uint32_t t;
    if ((st = tfm__gguf_take_u32(c, "value type", &t)) != TFM_OK ||
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
    if ((st = take(c, tfm__gguf_scalar_size((int)t), "value", &v)) !=
        TFM_OK)
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
static tfm_status take_kvs(tfm__gguf_cursor *c, tfm__gguf *g)
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
            return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                                   "key \"%.*s\" appears twice",
                                   KEY(g->kv_by_key[i]));
    g->alignment = TFM__GGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < g->n_kv; i++) {
        const tfm__gguf_kv *kv = &g->kv[i];
        if (kv->key_len != 17 || memcmp(kv->key, "general.alignment", 17))
            continue;
        if (kv->type != TFM__GGUF_U32)
            return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                                   "general.alignment is a %s, expected u32",
                                   tfm__gguf_type_name(kv->type));
        const uint32_t a = tfm__gguf_u32(kv->value);
        if (a == 0 || (a & (a - 1)) != 0)
            return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                         "general.alignment %" PRIu32 " is not a power of "
                         "two", a);
        g->alignment = a;
    }
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
static tfm_status take_header(tfm__gguf_cursor *c, uint64_t *n_tensors,
                              uint64_t *n_kv)
{
    if (c->size < 4 || memcmp(c->p, "GGUF", 4) != 0)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "not a GGUF file (it does not begin with \"GGUF\")");
    if (c->size < HEADER_BYTES)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "truncated: %zu bytes, the header needs %d", c->size,
                     HEADER_BYTES);
    const uint32_t v = tfm__gguf_u32(c->p + 4);
    if (v != 0 && (v & 0xFFFFu) == 0)
        return tfm__gguf_failf(c, TFM_ERR_UNSUPPORTED,
                     "a big-endian GGUF file (version reads as 0x%08" PRIx32
                     "); only little-endian files are supported", v);
    if (v == 1 || v == 2)
        return tfm__gguf_failf(c, TFM_ERR_UNSUPPORTED,
                     "GGUF version %" PRIu32 " is not supported (only 3)", v);
    if (v != TFM__GGUF_VERSION)
        return tfm__gguf_failf(c, v == 0 ? TFM_ERR_FORMAT : TFM_ERR_UNSUPPORTED,
                     "unknown GGUF version %" PRIu32 " (only 3 is supported)",
                     v);
    *n_tensors = tfm__gguf_u64(c->p + 8);
    *n_kv = tfm__gguf_u64(c->p + 16);
    c->pos = HEADER_BYTES;
    const size_t rest = left(c);
    if (*n_kv > rest / MIN_KV_BYTES)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "%" PRIu64 " key-value pairs cannot fit in the %zu "
                     "bytes after the header", *n_kv, rest);
    if (*n_tensors > rest / MIN_TENSOR_BYTES ||
        *n_kv * MIN_KV_BYTES + *n_tensors * MIN_TENSOR_BYTES > rest)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "%" PRIu64 " tensors and %" PRIu64 " key-value pairs "
                     "cannot fit in the %zu bytes after the header",
                     *n_tensors, *n_kv, rest);
    return TFM_OK;
}

static tfm_status parse(const unsigned char *p, size_t size, const char *file,
                        tfm__gguf **out)
{
    tfm__gguf_cursor c = {p, size, 0, file};
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
        (st = tfm__gguf_take_tensors(&c, g)) != TFM_OK ||
        (st = tfm__gguf_place_data(&c, g)) != TFM_OK) {
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
        const tfm__gguf_cursor c = {NULL, size, 0, path};
        return tfm__gguf_failf(&c, TFM_ERR_FORMAT,
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
