/* Safetensors files, the reading half (safetensors.h): opening a file
 * (mapped) or a buffer, validating its header, the queries on it, and
 * converting a tensor to float32, into a new tensor or straight into
 * caller memory (safetensors_impl.h).  The writer is safetensors_write.c.
 *
 * Layout: [u64 LE header length N][N bytes UTF-8 JSON][data section].
 * The reader maps the file read-only, checks every byte of the header
 * against the format before keeping anything, and converts tensors to
 * float32 on request with byte-wise little-endian loads (the data section
 * may start at any byte offset, so no float pointer into it is ever
 * dereferenced).
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
#include "base/file.h"
#include "base/float16.h"
#include "base/json_check.h"
#include "base/names.h"
#include "base/utf8.h"
#include "base/mapping.h"
#include "formats/safetensors_impl.h"

/* A tensor name in a message (safetensors_impl.h). */
#define QUOTED TFM__ST_QUOTED

/* Largest integer accepted in the JSON header, 2^53 - 1: cJSON keeps
 * numbers as doubles, every double up to here is an exact integer, and a
 * larger literal may have been rounded onto one. */
#define MAX_JSON_INTEGER 9007199254740991.0

#define DTYPE_UNKNOWN (-1)

/* ---- dtypes ----------------------------------------------------------- */

/* Bytes per element; the names ("F32", ...) are in names.c. */
const size_t tfm__st_dtype_sizes[TFM_DTYPE_COUNT] = {
    [TFM_DTYPE_F32] = 4, [TFM_DTYPE_F16] = 2, [TFM_DTYPE_BF16] = 2,
    [TFM_DTYPE_F64] = 8, [TFM_DTYPE_I64] = 8, [TFM_DTYPE_I32] = 4,
    [TFM_DTYPE_I16] = 2, [TFM_DTYPE_I8] = 1,  [TFM_DTYPE_U8] = 1,
    [TFM_DTYPE_BOOL] = 1,
};

static int dtype_from_string(const char *s)
{
    /* Q8_0 and Q4_0 are names of tfm_dtype but no safetensors dtype: a
     * file naming them holds an unknown dtype. */
    const int v = tfm__enum_lookup(TFM_ENUM_DTYPE, s);
    return v >= 0 && v < TFM_DTYPE_Q8_0 ? v : DTYPE_UNKNOWN;
}

static int dtype_is_float(int dtype)
{
    return dtype == TFM_DTYPE_F32 || dtype == TFM_DTYPE_F16 ||
           dtype == TFM_DTYPE_BF16 || dtype == TFM_DTYPE_F64;
}

/* ---- Little-endian loads, float conversions --------------------------- */

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

/* ---- The file handle -------------------------------------------------- */

typedef struct st_entry {
    char *name;
    int dtype; /* tfm_dtype, or DTYPE_UNKNOWN while validating */
    int rank;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    int64_t numel;
    uint64_t begin, end; /* byte offsets into the data section */
} st_entry;

struct tfm_safetensors {
    tfm__mapping *map;            /* the file, NULL for open_memory */
    const unsigned char *data;    /* the data section */
    uint64_t data_size;
    st_entry *entries;            /* [count], sorted by data offset */
    const st_entry **by_name;     /* [count], sorted by name */
    int64_t count;
    tfm__st_meta *meta;           /* [meta_count], sorted by key */
    int64_t meta_count;
};

void tfm__st_meta_free(tfm__st_meta *meta, int64_t n)
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
    tfm__st_meta_free(f->meta, f->meta_count);
    tfm__mapping_release(f->map);
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
    size_t esize =
        e->dtype == DTYPE_UNKNOWN ? 1 : tfm__st_dtype_sizes[e->dtype];
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
                         tfm__st_dtype_name(e->dtype), need);
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
    return strcmp(((const tfm__st_meta *)a)->key,
                  ((const tfm__st_meta *)b)->key);
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
        tfm__st_meta *slot = &f->meta[f->meta_count++];
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

tfm_status tfm_safetensors_open(const char *path, tfm_safetensors **out)
{
    if (!path || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !path ? "path" : "out");
    /* The library's one door (base/file.c, through base/mapping.c): no
     * blocking on a FIFO, nothing but a regular file after following
     * links. */
    tfm__mapping *map = NULL;
    tfm_safetensors *f = NULL;
    tfm_status st = tfm__mapping_open(path, 8, &map);
    if (st != TFM_OK)
        return st;
    if ((st = check_length(tfm__mapping_size(map))) == TFM_OK)
        st = parse_file(tfm__mapping_data(map), tfm__mapping_size(map), &f);
    if (st != TFM_OK) {
        tfm__mapping_release(map);
        return st;
    }
    f->map = map;
    *out = f;
    return TFM_OK;
}

tfm__mapping *tfm__safetensors_mapping(const tfm_safetensors *file)
{
    return file->map;
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

static const tfm__st_meta *find_meta(const tfm_safetensors *f,
                                     const char *key)
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
                         tfm__st_dtype_name(e->dtype));
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
    const size_t row_bytes = (size_t)cols * tfm__st_dtype_sizes[e->dtype];
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
    const tfm__st_meta *m = find_meta(file, key);
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

tfm_status tfm__safetensors_raw(const tfm_safetensors *file, const char *name,
                                int *dtype, const void **bytes,
                                uint64_t *nbytes)
{
    const st_entry *e;
    tfm_status st = lookup(file, name, &e);
    if (st != TFM_OK)
        return st;
    *dtype = e->dtype;
    *bytes = file->data + e->begin;
    *nbytes = e->end - e->begin;
    return TFM_OK;
}
