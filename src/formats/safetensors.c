/* Safetensors files: a validating reader and a writer (safetensors.h).
 *
 * Layout: [u64 LE header length N][N bytes UTF-8 JSON][data section].
 * The reader maps the file read-only, checks every byte of the header
 * against the format before keeping anything, and converts tensors to
 * float32 on request with byte-wise little-endian loads (the data section
 * may start at any byte offset, so no float pointer into it is ever
 * dereferenced).  The writer builds the header with cJSON, pads it with
 * spaces so that the data starts at a multiple of 8, and writes the file
 * under a temporary name that is renamed into place.
 *
 * cJSON allocates with its own (process-wide) hooks; they are left alone,
 * since changing them would change every other cJSON user in the process.
 * Everything this file keeps goes through tfm__malloc and friends. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "transformer/safetensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/float16.h"
#include "base/json_check.h"
#include "base/names.h"
#include "formats/safetensors_impl.h"
#include "base/utf8.h"

/* Largest integer accepted in the JSON header, 2^53 - 1: cJSON keeps
 * numbers as doubles, every double up to here is an exact integer, and a
 * larger literal may have been rounded onto one. */
#define MAX_JSON_INTEGER 9007199254740991.0

/* Tensor names are quoted in messages, cut to this many bytes. */
#define QUOTED "\"%.100s\""

#define DTYPE_UNKNOWN (-1)

/* ---- dtypes ----------------------------------------------------------- */

/* Bytes per element; the names ("F32", ...) are in names.c. */
static const size_t DTYPE_SIZES[TFM_DTYPE_COUNT] = {
    [TFM_DTYPE_F32] = 4, [TFM_DTYPE_F16] = 2, [TFM_DTYPE_BF16] = 2,
    [TFM_DTYPE_F64] = 8, [TFM_DTYPE_I64] = 8, [TFM_DTYPE_I32] = 4,
    [TFM_DTYPE_I16] = 2, [TFM_DTYPE_I8] = 1,  [TFM_DTYPE_U8] = 1,
    [TFM_DTYPE_BOOL] = 1,
};

static int dtype_from_string(const char *s)
{
    const int v = tfm__enum_lookup(TFM_ENUM_DTYPE, s);
    return v >= 0 ? v : DTYPE_UNKNOWN;
}

static const char *dtype_name(int dtype)
{
    return tfm_enum_name(TFM_ENUM_DTYPE, dtype);
}

static int dtype_is_float(int dtype)
{
    return dtype == TFM_DTYPE_F32 || dtype == TFM_DTYPE_F16 ||
           dtype == TFM_DTYPE_BF16 || dtype == TFM_DTYPE_F64;
}

/* ---- Little-endian loads and stores, float conversions ---------------- */

static uint16_t load_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static uint32_t load_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t load_u64(const unsigned char *p)
{
    return (uint64_t)load_u32(p) | (uint64_t)load_u32(p + 4) << 32;
}

static void store_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void store_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void store_u64(unsigned char *p, uint64_t v)
{
    store_u32(p, (uint32_t)v);
    store_u32(p + 4, (uint32_t)(v >> 32));
}

static float float_from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* n elements of dtype at src (any alignment) -> float32 at dst[0],
 * dst[stride], ..., dst[(n-1) * stride]. */
static void convert_to_f32_strided(int dtype, const unsigned char *src,
                                   int64_t n, float *dst, int64_t stride)
{
    for (int64_t i = 0; i < n; i++) {
        float *out = dst + i * stride;
        switch (dtype) {
        case TFM_DTYPE_F32:
            *out = float_from_bits(load_u32(src + 4 * i));
            break;
        case TFM_DTYPE_F16:
            *out = float_from_bits(
                tfm__f16_to_f32_bits(load_u16(src + 2 * i)));
            break;
        case TFM_DTYPE_BF16:
            *out = float_from_bits(
                tfm__bf16_to_f32_bits(load_u16(src + 2 * i)));
            break;
        default: { /* F64, rounded to nearest */
            uint64_t bits = load_u64(src + 8 * i);
            double d;
            memcpy(&d, &bits, sizeof d);
            *out = (float)d;
            break;
        }
        }
    }
}

/* n elements of dtype at src (any alignment) -> n float32 at dst. */
static void convert_to_f32(int dtype, const unsigned char *src, int64_t n,
                           float *dst)
{
    convert_to_f32_strided(dtype, src, n, dst, 1);
}

/* ---- UTF-8 validation (utf8.h) --------------------------------------- */

static int is_utf8(const char *s)
{
    size_t at;
    return tfm__utf8_check((const unsigned char *)s, strlen(s), &at) == NULL;
}

/* ---- The file handle -------------------------------------------------- */

typedef struct st_entry {
    char *name;
    int dtype; /* tfm_dtype, or DTYPE_UNKNOWN while validating */
    int rank;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    int64_t numel;
    uint64_t begin, end; /* byte offsets into the data section */
} st_entry;

typedef struct st_meta {
    char *key;
    char *value;
} st_meta;

struct tfm_safetensors {
    void *map;                    /* mmap'd file, NULL for open_memory */
    size_t map_size;
    const unsigned char *data;    /* the data section */
    uint64_t data_size;
    st_entry *entries;            /* [count], sorted by data offset */
    const st_entry **by_name;     /* [count], sorted by name */
    int64_t count;
    st_meta *meta;                /* [meta_count], sorted by key */
    int64_t meta_count;
};

static void free_meta(st_meta *meta, int64_t n)
{
    for (int64_t i = 0; meta && i < n; i++) {
        tfm__free(meta[i].key);
        tfm__free(meta[i].value);
    }
    tfm__free(meta);
}

static void free_file(tfm_safetensors *f)
{
    for (int64_t i = 0; f->entries && i < f->count; i++)
        tfm__free(f->entries[i].name);
    tfm__free(f->entries);
    tfm__free(f->by_name);
    free_meta(f->meta, f->meta_count);
    if (f->map)
        munmap(f->map, f->map_size);
    tfm__free(f);
}

void tfm_safetensors_close(tfm_safetensors *file)
{
    if (file)
        free_file(file);
}

/* ---- JSON values ------------------------------------------------------ */

/* Reads a JSON non-negative integer (at most 2^53 - 1) into *out.
 * Returns NULL, or why the item is not one. */
static const char *json_uint(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return "is not a number";
    double v = item->valuedouble;
    if (v < 0.0)
        return "is negative";
    if (v > MAX_JSON_INTEGER)
        return "is larger than 2^53 - 1";
    if ((double)(uint64_t)v != v)
        return "is not an integer";
    *out = (uint64_t)v;
    return NULL;
}

/* The failure for a bad integer: "tensor "w": shape[1] is negative (-3)". */
static tfm_status fail_uint(const char *name, const char *what, int index,
                            const char *why, const cJSON *item)
{
    if (cJSON_IsNumber(item))
        return tfm__fail(TFM_ERR_FORMAT, "tensor " QUOTED ": %s[%d] %s (%.17g)",
                         name, what, index, why, item->valuedouble);
    return tfm__fail(TFM_ERR_FORMAT, "tensor " QUOTED ": %s[%d] %s", name,
                     what, index, why);
}

static int array_size(const cJSON *array)
{
    int n = 0;
    for (const cJSON *c = array->child; c; c = c->next)
        n++;
    return n;
}

/* ---- Tensor entries --------------------------------------------------- */

/* Finds the three members of a tensor entry, refusing any other. */
static tfm_status entry_members(const cJSON *item, const char *name,
                                const cJSON *members[3])
{
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    if (!cJSON_IsObject(item))
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED " is not a JSON object", name);
    members[0] = members[1] = members[2] = NULL;
    for (const cJSON *m = item->child; m; m = m->next) {
        int k = 0;
        while (k < 3 && strcmp(m->string, keys[k]) != 0)
            k++;
        if (k == 3)
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor " QUOTED " has an unexpected key "
                             "\"%.40s\" (expected only dtype, shape, "
                             "data_offsets)", name, m->string);
        if (members[k])
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor " QUOTED " has a duplicate key \"%s\"",
                             name, keys[k]);
        members[k] = m;
    }
    for (int k = 0; k < 3; k++)
        if (!members[k])
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor " QUOTED " is missing the key \"%s\"",
                             name, keys[k]);
    return TFM_OK;
}

static tfm_status parse_shape(const cJSON *shape, st_entry *e)
{
    if (!cJSON_IsArray(shape))
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED ": shape is not a JSON array",
                         e->name);
    int rank = array_size(shape);
    if (rank > TFM_SAFETENSORS_MAX_RANK)
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED ": shape has rank %d, more than "
                         "the maximum rank %d", e->name, rank,
                         TFM_SAFETENSORS_MAX_RANK);
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t v;
        const char *why = json_uint(d, &v);
        if (why)
            return fail_uint(e->name, "shape", i, why, d);
        e->shape[i] = (int64_t)v;
    }
    e->rank = rank;
    return TFM_OK;
}

static tfm_status parse_offsets(const cJSON *offsets, uint64_t data_size,
                                st_entry *e)
{
    if (!cJSON_IsArray(offsets) || array_size(offsets) != 2)
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED ": data_offsets is not an array "
                         "of two integers", e->name);
    uint64_t v[2];
    int i = 0;
    for (const cJSON *o = offsets->child; o; o = o->next, i++) {
        const char *why = json_uint(o, &v[i]);
        if (why)
            return fail_uint(e->name, "data_offsets", i, why, o);
    }
    e->begin = v[0];
    e->end = v[1];
    if (e->end < e->begin)
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED ": data_offsets end %" PRIu64
                         " < begin %" PRIu64, e->name, e->end, e->begin);
    if (e->end > data_size)
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED ": data_offsets end %" PRIu64
                         " is beyond the data section (%" PRIu64 " bytes)",
                         e->name, e->end, data_size);
    return TFM_OK;
}

/* Element count, and for a known dtype, that the offsets span exactly
 * numel * element size bytes. */
static tfm_status check_size(st_entry *e)
{
    size_t esize = e->dtype == DTYPE_UNKNOWN ? 1 : DTYPE_SIZES[e->dtype];
    if (!tfm__checked_numel(e->shape, e->rank, esize, &e->numel))
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED ": the element count of its shape "
                         "overflows", e->name);
    if (e->dtype == DTYPE_UNKNOWN)
        return TFM_OK;
    uint64_t need = (uint64_t)e->numel * esize;
    if (e->end - e->begin != need)
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED ": data_offsets [%" PRIu64
                         ", %" PRIu64 "] hold %" PRIu64 " bytes but %" PRId64
                         " elements of %s need %" PRIu64, e->name, e->begin,
                         e->end, e->end - e->begin, e->numel,
                         dtype_name(e->dtype), need);
    return TFM_OK;
}

/* Validates one tensor entry into e (whose name is already set).  An
 * unknown dtype string is kept as DTYPE_UNKNOWN for the caller. */
static tfm_status parse_entry(const cJSON *item, uint64_t data_size,
                              st_entry *e)
{
    const cJSON *m[3];
    tfm_status st = entry_members(item, e->name, m);
    if (st != TFM_OK)
        return st;
    if (!cJSON_IsString(m[0]))
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor " QUOTED ": dtype is not a JSON string",
                         e->name);
    e->dtype = dtype_from_string(m[0]->valuestring);
    if ((st = parse_shape(m[1], e)) != TFM_OK ||
        (st = parse_offsets(m[2], data_size, e)) != TFM_OK)
        return st;
    return check_size(e);
}

/* ---- Ordering and layout ---------------------------------------------- */

static int compare_offsets(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int compare_names(const void *a, const void *b)
{
    const st_entry *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int compare_meta(const void *a, const void *b)
{
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

/* Builds the name index; two entries of one name are refused. */
static tfm_status index_names(tfm_safetensors *f)
{
    f->by_name = tfm__malloc((size_t)f->count * sizeof *f->by_name);
    if (!f->by_name)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate the safetensors name index");
    for (int64_t i = 0; i < f->count; i++)
        f->by_name[i] = &f->entries[i];
    qsort(f->by_name, (size_t)f->count, sizeof *f->by_name, compare_names);
    for (int64_t i = 1; i < f->count; i++)
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
            return tfm__fail(TFM_ERR_FORMAT, "duplicate tensor name " QUOTED,
                             f->by_name[i]->name);
    return TFM_OK;
}

/* The tensors, sorted by offset, must tile the data section exactly:
 * the first starts at 0, each starts where the previous ended, the last
 * ends at the end of the data. */
static tfm_status check_layout(const tfm_safetensors *f)
{
    uint64_t pos = 0;
    for (int64_t i = 0; i < f->count; i++) {
        const st_entry *e = &f->entries[i];
        if (e->begin < pos)
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor " QUOTED " overlaps tensor " QUOTED
                             " (begins at %" PRIu64 ", which ends at %" PRIu64
                             ")", e->name, f->entries[i - 1].name, e->begin,
                             pos);
        if (e->begin > pos)
            return tfm__fail(TFM_ERR_FORMAT,
                             "gap of %" PRIu64 " bytes in the data section "
                             "before tensor " QUOTED " (begins at %" PRIu64
                             ", expected %" PRIu64 ")", e->begin - pos,
                             e->name, e->begin, pos);
        pos = e->end;
    }
    if (pos != f->data_size)
        return tfm__fail(TFM_ERR_FORMAT,
                         "%" PRIu64 " trailing bytes after the last tensor: "
                         "the data section has %" PRIu64 " bytes, the "
                         "tensors cover %" PRIu64, f->data_size - pos,
                         f->data_size, pos);
    return TFM_OK;
}

/* Run last, on an otherwise valid header: an unknown dtype string. */
static tfm_status check_dtypes(const cJSON *root, const tfm_safetensors *f)
{
    for (int64_t i = 0; i < f->count; i++) {
        const char *name = f->entries[i].name;
        if (f->entries[i].dtype != DTYPE_UNKNOWN)
            continue;
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, name);
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "tensor " QUOTED " has an unknown dtype \"%.20s\"",
                         name, cJSON_GetStringValue(dtype));
    }
    return TFM_OK;
}

/* ---- Header ----------------------------------------------------------- */

static tfm_status parse_metadata(const cJSON *meta, tfm_safetensors *f)
{
    if (!cJSON_IsObject(meta))
        return tfm__fail(TFM_ERR_FORMAT,
                         "__metadata__ is not a JSON object");
    int n = array_size(meta);
    f->meta = tfm__calloc((size_t)n, sizeof *f->meta);
    if (!f->meta)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate %d metadata entries", n);
    for (const cJSON *m = meta->child; m; m = m->next) {
        if (!cJSON_IsString(m))
            return tfm__fail(TFM_ERR_FORMAT,
                             "__metadata__ value of key " QUOTED
                             " is not a string", m->string);
        st_meta *slot = &f->meta[f->meta_count++];
        slot->key = tfm__strdup(m->string);
        slot->value = tfm__strdup(m->valuestring);
        if (!slot->key || !slot->value)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "cannot copy the metadata entry " QUOTED,
                             m->string);
    }
    qsort(f->meta, (size_t)f->meta_count, sizeof *f->meta, compare_meta);
    for (int64_t i = 1; i < f->meta_count; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0)
            return tfm__fail(TFM_ERR_FORMAT,
                             "duplicate __metadata__ key " QUOTED,
                             f->meta[i].key);
    return TFM_OK;
}

/* Finds the single "__metadata__" member (or none) and counts the rest. */
static tfm_status scan_root(const cJSON *root, const cJSON **meta,
                            int64_t *n_tensors)
{
    *meta = NULL;
    *n_tensors = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") != 0) {
            ++*n_tensors;
            continue;
        }
        if (*meta)
            return tfm__fail(TFM_ERR_FORMAT,
                             "duplicate name \"__metadata__\" in the header");
        *meta = c;
    }
    return TFM_OK;
}

static tfm_status parse_entries(const cJSON *root, tfm_safetensors *f,
                                int64_t n)
{
    f->entries = tfm__calloc((size_t)n, sizeof *f->entries);
    if (!f->entries)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate %lld tensor entries", (long long)n);
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0)
            continue;
        st_entry *e = &f->entries[f->count++];
        e->name = tfm__strdup(c->string);
        if (!e->name)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "cannot copy the tensor name " QUOTED,
                             c->string);
        tfm_status st = parse_entry(c, f->data_size, e);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* Everything after the parsed JSON object must be JSON whitespace (the
 * writer pads with spaces). */
static tfm_status check_json_end(const char *text, size_t n, const char *end)
{
    for (const char *p = end; p < text + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return tfm__fail(TFM_ERR_FORMAT,
                             "header is not valid JSON: unexpected bytes "
                             "after the JSON value at byte %zu",
                             (size_t)(p - text));
    return TFM_OK;
}

/* Parses the NUL-terminated header text[0..n-1] into *root. */
static tfm_status parse_json(const char *text, size_t n, cJSON **root)
{
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!json) {
        size_t at = end && end >= text && end <= text + n
                        ? (size_t)(end - text) : 0;
        return tfm__fail(TFM_ERR_FORMAT,
                         "header is not valid JSON (error near byte %zu)",
                         at);
    }
    tfm_status st = check_json_end(text, n, end);
    if (st == TFM_OK && !cJSON_IsObject(json))
        st = tfm__fail(TFM_ERR_FORMAT, "header is not a JSON object");
    if (st != TFM_OK) {
        cJSON_Delete(json);
        return st;
    }
    *root = json;
    return TFM_OK;
}

static tfm_status build_from_json(const cJSON *root, tfm_safetensors *f)
{
    const cJSON *meta;
    int64_t n;
    tfm_status st = scan_root(root, &meta, &n);
    if (st == TFM_OK && meta)
        st = parse_metadata(meta, f);
    if (st == TFM_OK)
        st = parse_entries(root, f, n);
    if (st != TFM_OK)
        return st;
    qsort(f->entries, (size_t)f->count, sizeof *f->entries, compare_offsets);
    if ((st = index_names(f)) != TFM_OK || (st = check_layout(f)) != TFM_OK)
        return st;
    return check_dtypes(root, f);
}

/* Checks the raw header bytes before anything is allocated. */
static tfm_status check_header_bytes(const unsigned char *h, size_t n)
{
    size_t at;
    const char *why = tfm__utf8_check(h, n, &at);
    if (why)
        return tfm__fail(TFM_ERR_FORMAT,
                         "header is not valid UTF-8: %s at byte %zu", why, at);
    const unsigned char *nul = memchr(h, 0, n);
    if (nul)
        return tfm__fail(TFM_ERR_FORMAT,
                         "header is not valid JSON: NUL byte at byte %zu",
                         (size_t)(nul - h));
    if (n >= 3 && h[0] == 0xef && h[1] == 0xbb && h[2] == 0xbf)
        return tfm__fail(TFM_ERR_FORMAT,
                         "header is not valid JSON: it starts with a byte "
                         "order mark");
    return TFM_OK;
}

static tfm_status check_length(size_t size)
{
    if (size < 8)
        return tfm__fail(TFM_ERR_FORMAT,
                         "file is %zu bytes, too short for the 8-byte header "
                         "length", size);
    return TFM_OK;
}

/* Validates bytes[0..size-1] into a new handle (map fields left NULL). */
static tfm_status parse_file(const unsigned char *bytes, size_t size,
                             tfm_safetensors **out)
{
    tfm_status st = check_length(size);
    if (st != TFM_OK)
        return st;
    uint64_t n = load_u64(bytes);
    if (n > TFM_SAFETENSORS_MAX_HEADER)
        return tfm__fail(TFM_ERR_FORMAT,
                         "header length %" PRIu64 " exceeds the maximum of "
                         "%d bytes", n, TFM_SAFETENSORS_MAX_HEADER);
    if (n > size - 8)
        return tfm__fail(TFM_ERR_FORMAT,
                         "header length %" PRIu64 " exceeds the %zu bytes "
                         "that follow it in the file", n, size - 8);
    if ((st = check_header_bytes(bytes + 8, (size_t)n)) != TFM_OK)
        return st;

    char *text = tfm__malloc((size_t)n + 1);
    tfm_safetensors *f = tfm__calloc(1, sizeof *f);
    cJSON *root = NULL;
    if (!text || !f) {
        st = tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                       "cannot allocate a %" PRIu64 "-byte header", n);
    } else {
        memcpy(text, bytes + 8, (size_t)n);
        text[n] = '\0';
        f->data = bytes + 8 + n;
        f->data_size = size - 8 - n;
        st = parse_json(text, (size_t)n, &root);
        if (st == TFM_OK)
            st = tfm__json_check_nul(text, (size_t)n, root, NULL);
    }
    if (st == TFM_OK)
        st = build_from_json(root, f);
    cJSON_Delete(root);
    tfm__free(text);
    if (st != TFM_OK) {
        if (f)
            free_file(f);
        return st;
    }
    *out = f;
    return TFM_OK;
}

/* ---- Opening ---------------------------------------------------------- */

tfm_status tfm_safetensors_open_memory(const void *data, size_t size,
                                       tfm_safetensors **out)
{
    if (!data || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !data ? "data" : "out");
    return parse_file(data, size, out);
}

/* Opens path and maps it; *size is its length (at least 8). */
static tfm_status map_file(const char *path, void **map, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tfm__fail(TFM_ERR_IO, "cannot open \"%s\": %s", path,
                         strerror(errno));
    struct stat sb;
    tfm_status st = TFM_OK;
    if (fstat(fd, &sb) != 0)
        st = tfm__fail(TFM_ERR_IO, "cannot stat \"%s\": %s", path,
                       strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = tfm__fail(TFM_ERR_IO, "\"%s\" is not a regular file", path);
    else if ((uintmax_t)sb.st_size > SIZE_MAX)
        st = tfm__fail(TFM_ERR_OVERFLOW, "\"%s\" is too large to map", path);
    else
        st = check_length((size_t)sb.st_size);
    if (st == TFM_OK) {
        *size = (size_t)sb.st_size;
        *map = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (*map == MAP_FAILED)
            st = tfm__fail(TFM_ERR_IO, "cannot map \"%s\": %s", path,
                           strerror(errno));
    }
    close(fd);
    return st;
}

tfm_status tfm_safetensors_open(const char *path, tfm_safetensors **out)
{
    if (!path || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !path ? "path" : "out");
    void *map = NULL;
    size_t size = 0;
    tfm_safetensors *f = NULL;
    tfm_status st = map_file(path, &map, &size);
    if (st != TFM_OK)
        return st;
    st = parse_file(map, size, &f);
    if (st != TFM_OK) {
        munmap(map, size);
        return st;
    }
    f->map = map;
    f->map_size = size;
    *out = f;
    return TFM_OK;
}

/* ---- Queries ---------------------------------------------------------- */

static const st_entry *find_entry(const tfm_safetensors *f, const char *name)
{
    size_t lo = 0, hi = (size_t)f->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->by_name[mid]->name);
        if (c == 0)
            return f->by_name[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

static const st_meta *find_meta(const tfm_safetensors *f, const char *key)
{
    for (size_t lo = 0, hi = (size_t)f->meta_count; lo < hi;) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, f->meta[mid].key);
        if (c == 0)
            return &f->meta[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

int64_t tfm_safetensors_count(const tfm_safetensors *file)
{
    return file ? file->count : 0;
}

const char *tfm_safetensors_name(const tfm_safetensors *file, int64_t index)
{
    if (!file || index < 0 || index >= file->count)
        return NULL;
    return file->entries[index].name;
}

/* The named entry, or a failure with the message set. */
static tfm_status lookup(const tfm_safetensors *file, const char *name,
                         const st_entry **e)
{
    if (!file || !name)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !file ? "file" : "name");
    *e = find_entry(file, name);
    if (!*e)
        return tfm__fail(TFM_ERR_NOT_FOUND, "no tensor named " QUOTED
                         " in the safetensors file", name);
    return TFM_OK;
}

tfm_status tfm_safetensors_info(const tfm_safetensors *file, const char *name,
                                tfm_dtype *dtype, int *rank, int64_t *shape)
{
    const st_entry *e;
    tfm_status st = lookup(file, name, &e);
    if (st != TFM_OK)
        return st;
    if (dtype)
        *dtype = (tfm_dtype)e->dtype;
    if (rank)
        *rank = e->rank;
    if (shape)
        memcpy(shape, e->shape, (size_t)e->rank * sizeof *shape);
    return TFM_OK;
}

/* Whether the entry can become a float32 tfm_tensor. */
static tfm_status check_readable(const st_entry *e)
{
    if (!dtype_is_float(e->dtype))
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "tensor " QUOTED " has dtype %s; only F32, F16, "
                         "BF16 and F64 can be read as float32", e->name,
                         dtype_name(e->dtype));
    if (e->rank > TFM_MAX_RANK)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "tensor " QUOTED " has rank %d, more than %d",
                         e->name, e->rank, TFM_MAX_RANK);
    for (int i = 0; i < e->rank; i++)
        if (e->shape[i] == 0)
            return tfm__fail(TFM_ERR_UNSUPPORTED,
                             "tensor " QUOTED " has an empty dimension %d",
                             e->name, i);
    return TFM_OK;
}

tfm_status tfm_safetensors_read(const tfm_safetensors *file, const char *name,
                                tfm_tensor **out)
{
    const st_entry *e;
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm_status st = lookup(file, name, &e);
    if (st != TFM_OK)
        return st;
    if ((st = check_readable(e)) != TFM_OK)
        return st;
    int64_t shape[TFM_MAX_RANK] = {1};
    int rank = e->rank ? e->rank : 1; /* rank 0 reads as [1] */
    memcpy(shape, e->shape, (size_t)e->rank * sizeof *shape);
    tfm_tensor *t = NULL;
    if ((st = tfm_tensor_create(rank, shape, &t)) != TFM_OK)
        return st;
    convert_to_f32(e->dtype, file->data + e->begin, tfm_tensor_numel(t),
                   tfm_tensor_data(t));
    *out = t;
    return TFM_OK;
}

tfm_status tfm__safetensors_read_into(const tfm_safetensors *file,
                                      const char *name, int transpose,
                                      float *dst)
{
    const st_entry *e;
    if (!dst)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "dst is NULL");
    tfm_status st = lookup(file, name, &e);
    if (st != TFM_OK || (st = check_readable(e)) != TFM_OK)
        return st;
    const unsigned char *src = file->data + e->begin;
    if (!transpose) {
        convert_to_f32(e->dtype, src, e->numel, dst);
        return TFM_OK;
    }
    if (e->rank != 2)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "tensor " QUOTED " has rank %d; only a matrix can "
                         "be read transposed", e->name, e->rank);
    const int64_t rows = e->shape[0], cols = e->shape[1];
    const size_t row_bytes = (size_t)cols * DTYPE_SIZES[e->dtype];
    /* File row r becomes column r of dst [cols, rows]. */
    for (int64_t r = 0; r < rows; r++)
        convert_to_f32_strided(e->dtype, src + (size_t)r * row_bytes, cols,
                               dst + r, rows);
    return TFM_OK;
}

const char *tfm_safetensors_metadata(const tfm_safetensors *file,
                                     const char *key)
{
    if (!file || !key)
        return NULL;
    const st_meta *m = find_meta(file, key);
    return m ? m->value : NULL;
}

int64_t tfm_safetensors_metadata_count(const tfm_safetensors *file)
{
    return file ? file->meta_count : 0;
}

const char *tfm_safetensors_metadata_key(const tfm_safetensors *file,
                                         int64_t index)
{
    if (!file || index < 0 || index >= file->meta_count)
        return NULL;
    return file->meta[index].key;
}

/* ---- Writer ----------------------------------------------------------- */

typedef struct w_tensor {
    char *name;
    int rank;
    int64_t shape[TFM_MAX_RANK];
    int64_t numel;
    tfm_dtype dtype; /* F32, F16 or BF16: how the file stores it */
    float *data;     /* own copy, converted when the file is written */
} w_tensor;

struct tfm_safetensors_writer {
    w_tensor *tensors; /* [count], sorted by name */
    size_t count, cap;
    st_meta *meta;     /* [meta_count], sorted by key */
    size_t meta_count, meta_cap;
};

tfm_status tfm_safetensors_writer_create(tfm_safetensors_writer **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm_safetensors_writer *w = tfm__calloc(1, sizeof *w);
    if (!w)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a safetensors writer");
    *out = w;
    return TFM_OK;
}

void tfm_safetensors_writer_free(tfm_safetensors_writer *writer)
{
    if (!writer)
        return;
    for (size_t i = 0; i < writer->count; i++) {
        tfm__free(writer->tensors[i].name);
        tfm__free(writer->tensors[i].data);
    }
    tfm__free(writer->tensors);
    free_meta(writer->meta, (int64_t)writer->meta_count);
    tfm__free(writer);
}

/* Makes room for one more element in *array (of *cap elements of size
 * elem, count used). */
static tfm_status grow(void **array, size_t *cap, size_t count, size_t elem)
{
    if (count < *cap)
        return TFM_OK;
    size_t new_cap = *cap ? 2 * *cap : 8, bytes;
    if (!tfm__mul_size(new_cap, elem, &bytes))
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "too many writer entries");
    void *p = tfm__realloc(*array, bytes);
    if (!p)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot grow the safetensors writer");
    *array = p;
    *cap = new_cap;
    return TFM_OK;
}

/* Index of the first tensor whose name is >= name. */
static size_t tensor_position(const tfm_safetensors_writer *w,
                              const char *name)
{
    size_t lo = 0, hi = w->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(w->tensors[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t meta_position(const tfm_safetensors_writer *w, const char *key)
{
    size_t lo = 0, hi = w->meta_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(w->meta[mid].key, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static tfm_status check_name(const tfm_safetensors_writer *w,
                             const char *name, size_t pos)
{
    if (strcmp(name, "__metadata__") == 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "the tensor name \"__metadata__\" is reserved");
    if (!is_utf8(name))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "the tensor name is not valid UTF-8");
    if (pos < w->count && strcmp(w->tensors[pos].name, name) == 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "duplicate tensor name " QUOTED, name);
    return TFM_OK;
}

/* Copies name and the tensor's shape and data into t. */
static tfm_status copy_tensor(const char *name, const tfm_tensor *tensor,
                              w_tensor *t)
{
    t->rank = tfm_tensor_rank(tensor);
    for (int i = 0; i < t->rank; i++)
        t->shape[i] = tfm_tensor_dim(tensor, i);
    t->numel = tfm_tensor_numel(tensor);
    t->name = tfm__strdup(name);
    t->data = tfm__malloc((size_t)t->numel * sizeof(float));
    if (!t->name || !t->data) {
        tfm__free(t->name);
        tfm__free(t->data);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot copy tensor " QUOTED,
                         name);
    }
    memcpy(t->data, tfm_tensor_data_const(tensor),
           (size_t)t->numel * sizeof(float));
    return TFM_OK;
}

tfm_status tfm_safetensors_writer_add(tfm_safetensors_writer *writer,
                                      const char *name,
                                      const tfm_tensor *tensor)
{
    return tfm_safetensors_writer_add_as(writer, name, tensor, TFM_DTYPE_F32);
}

tfm_status tfm_safetensors_writer_add_as(tfm_safetensors_writer *writer,
                                         const char *name,
                                         const tfm_tensor *tensor,
                                         tfm_dtype dtype)
{
    if (!writer || !name || !tensor)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !writer ? "writer" : !name ? "name" : "tensor");
    if ((int)dtype < 0 || (int)dtype >= TFM_DTYPE_COUNT)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "dtype %d is not a tfm_dtype", (int)dtype);
    if (dtype != TFM_DTYPE_F32 && dtype != TFM_DTYPE_F16 &&
        dtype != TFM_DTYPE_BF16)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "the writer stores F32, F16 or BF16, not %s",
                         dtype_name(dtype));
    size_t pos = tensor_position(writer, name);
    w_tensor t;
    tfm_status st = check_name(writer, name, pos);
    void *array = writer->tensors;
    if (st == TFM_OK)
        st = grow(&array, &writer->cap, writer->count,
                  sizeof *writer->tensors);
    writer->tensors = array;
    if (st == TFM_OK)
        st = copy_tensor(name, tensor, &t);
    if (st != TFM_OK)
        return st;
    t.dtype = dtype;
    memmove(&writer->tensors[pos + 1], &writer->tensors[pos],
            (writer->count - pos) * sizeof *writer->tensors);
    writer->tensors[pos] = t;
    writer->count++;
    return TFM_OK;
}

tfm_status tfm_safetensors_writer_set_metadata(tfm_safetensors_writer *writer,
                                               const char *key,
                                               const char *value)
{
    if (!writer || !key || !value)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !writer ? "writer" : !key ? "key" : "value");
    if (!is_utf8(key) || !is_utf8(value))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "metadata %s is not valid UTF-8",
                         !is_utf8(key) ? "key" : "value");
    size_t pos = meta_position(writer, key);
    int replace = pos < writer->meta_count &&
                  strcmp(writer->meta[pos].key, key) == 0;
    void *array = writer->meta;
    tfm_status st = replace ? TFM_OK
                            : grow(&array, &writer->meta_cap,
                                   writer->meta_count, sizeof *writer->meta);
    writer->meta = array;
    if (st != TFM_OK)
        return st;
    char *v = tfm__strdup(value);
    char *k = replace ? NULL : tfm__strdup(key);
    if (!v || (!replace && !k)) {
        tfm__free(v);
        tfm__free(k);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot copy the metadata entry " QUOTED, key);
    }
    if (replace) {
        tfm__free(writer->meta[pos].value);
        writer->meta[pos].value = v;
        return TFM_OK;
    }
    memmove(&writer->meta[pos + 1], &writer->meta[pos],
            (writer->meta_count - pos) * sizeof *writer->meta);
    writer->meta[pos] = (st_meta){k, v};
    writer->meta_count++;
    return TFM_OK;
}

/* ---- Writer: the JSON header ------------------------------------------ */

/* Appends an exact decimal integer to a JSON array (as raw JSON text, so
 * that large values never print in exponent form). */
static int json_append_uint(cJSON *array, uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    cJSON *item = cJSON_CreateRaw(buf);
    if (!item)
        return 0;
    if (!cJSON_AddItemToArray(array, item)) {
        cJSON_Delete(item);
        return 0;
    }
    return 1;
}

/* Bytes of t in the file (numel fits a tensor in memory, so no overflow). */
static uint64_t tensor_bytes(const w_tensor *t)
{
    return (uint64_t)t->numel * DTYPE_SIZES[t->dtype];
}

static int json_add_tensor(cJSON *root, const w_tensor *t, uint64_t begin)
{
    cJSON *obj = cJSON_AddObjectToObject(root, t->name);
    if (!obj || !cJSON_AddStringToObject(obj, "dtype", dtype_name(t->dtype)))
        return 0;
    cJSON *shape = cJSON_AddArrayToObject(obj, "shape");
    if (!shape)
        return 0;
    for (int i = 0; i < t->rank; i++)
        if (!json_append_uint(shape, (uint64_t)t->shape[i]))
            return 0;
    cJSON *offsets = cJSON_AddArrayToObject(obj, "data_offsets");
    return offsets && json_append_uint(offsets, begin) &&
           json_append_uint(offsets, begin + tensor_bytes(t));
}

static int json_fill(cJSON *root, const tfm_safetensors_writer *w)
{
    if (w->meta_count) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        if (!meta)
            return 0;
        for (size_t i = 0; i < w->meta_count; i++)
            if (!cJSON_AddStringToObject(meta, w->meta[i].key,
                                         w->meta[i].value))
                return 0;
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->count; i++) {
        if (!json_add_tensor(root, &w->tensors[i], offset))
            return 0;
        offset += tensor_bytes(&w->tensors[i]);
    }
    return 1;
}

/* The unpadded header text, freed with cJSON_free. */
static tfm_status build_header(const tfm_safetensors_writer *w, char **out)
{
    cJSON *root = cJSON_CreateObject();
    char *text = root && json_fill(root, w) ? cJSON_PrintUnformatted(root)
                                            : NULL;
    cJSON_Delete(root);
    if (!text)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot build the safetensors header");
    *out = text;
    return TFM_OK;
}

/* ---- Writer: the file ------------------------------------------------- */

static tfm_status write_all(int fd, const void *buf, size_t n,
                            const char *path)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return tfm__fail(TFM_ERR_IO, "cannot write \"%s\": %s", path,
                             k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
    }
    return TFM_OK;
}

/* Length field, header text and its space padding. */
static tfm_status write_header(int fd, const char *json, const char *path)
{
    static const char spaces[9] = "        ";
    size_t len = strlen(json);
    size_t pad = (8 - (8 + len) % 8) % 8;
    unsigned char field[8];
    store_u64(field, (uint64_t)(len + pad));
    tfm_status st = write_all(fd, field, sizeof field, path);
    if (st == TFM_OK)
        st = write_all(fd, json, len, path);
    if (st == TFM_OK)
        st = write_all(fd, spaces, pad, path);
    return st;
}

/* One tensor as little-endian bytes of its dtype (float16.h converts F16
 * and BF16), through a stack buffer. */
static tfm_status write_tensor(int fd, const w_tensor *t, const char *path)
{
    unsigned char buf[4096];
    const size_t size = DTYPE_SIZES[t->dtype];
    const int64_t per = (int64_t)(sizeof buf / 4);
    for (int64_t i = 0; i < t->numel; i += per) {
        int64_t k = t->numel - i < per ? t->numel - i : per;
        for (int64_t j = 0; j < k; j++) {
            uint32_t bits;
            memcpy(&bits, &t->data[i + j], sizeof bits);
            if (t->dtype == TFM_DTYPE_F32)
                store_u32(buf + 4 * j, bits);
            else
                store_u16(buf + 2 * j, t->dtype == TFM_DTYPE_F16
                                           ? tfm__f32_to_f16_bits(bits)
                                           : tfm__f32_to_bf16_bits(bits));
        }
        tfm_status st = write_all(fd, buf, (size_t)k * size, path);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* Writes the whole file to the open descriptor, flushed to disk. */
static tfm_status write_contents(int fd, const tfm_safetensors_writer *w,
                                 const char *json, const char *path)
{
    tfm_status st = write_header(fd, json, path);
    for (size_t i = 0; st == TFM_OK && i < w->count; i++)
        st = write_tensor(fd, &w->tensors[i], path);
    if (st == TFM_OK && fsync(fd) != 0)
        st = tfm__fail(TFM_ERR_IO, "cannot flush \"%s\": %s", path,
                       strerror(errno));
    return st;
}

/* Flushes the directory holding path, so that the rename itself survives
 * a crash.  Best effort: a directory that cannot be opened for reading, or
 * a file system without directory fsync, leaves the (complete, renamed)
 * file as it is. */
static void sync_directory(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    (void)fsync(fd);
    close(fd);
}

/* Writes to tmp (flushed with fsync), then renames tmp to path and flushes
 * the directory; removes tmp on failure. */
static tfm_status write_file(const tfm_safetensors_writer *w, const char *json,
                             const char *tmp, const char *path)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return tfm__fail(TFM_ERR_IO, "cannot create \"%s\": %s", tmp,
                         strerror(errno));
    tfm_status st = write_contents(fd, w, json, tmp);
    if (close(fd) != 0 && st == TFM_OK)
        st = tfm__fail(TFM_ERR_IO, "cannot close \"%s\": %s", tmp,
                       strerror(errno));
    if (st == TFM_OK && rename(tmp, path) != 0)
        st = tfm__fail(TFM_ERR_IO, "cannot rename \"%s\" to \"%s\": %s", tmp,
                       path, strerror(errno));
    if (st != TFM_OK)
        unlink(tmp);
    else
        sync_directory(path);
    return st;
}

tfm_status tfm_safetensors_writer_save(const tfm_safetensors_writer *writer,
                                       const char *path)
{
    if (!writer || !path)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !writer ? "writer" : "path");
    /* The temporary name is unique to the process and the call, so that
     * threads saving to the same path never write into one file (the
     * last rename wins, each file whole). */
    static _Atomic unsigned long calls;
    size_t tmp_size = strlen(path) + 48;
    char *tmp = tfm__malloc(tmp_size);
    if (!tmp)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a temporary file name");
    snprintf(tmp, tmp_size, "%s.tmp.%ld.%lu", path, (long)getpid(),
             (unsigned long)++calls);
    char *json = NULL;
    tfm_status st = build_header(writer, &json);
    if (st == TFM_OK)
        st = write_file(writer, json, tmp, path);
    cJSON_free(json);
    tfm__free(tmp);
    return st;
}
