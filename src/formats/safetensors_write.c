/* Safetensors files, the writing half (safetensors.h): the writer, which
 * keeps copies of the tensors and metadata sorted by name, builds the
 * header with cJSON, pads it with spaces so that the data starts at a
 * multiple of 8, and writes the file atomically: under a temporary name,
 * flushed, renamed into place, the directory flushed.  The reader is
 * safetensors_read.c.
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
#include <unistd.h>

#include <cJSON.h>

#include "transformer/safetensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/float16.h"
#include "base/utf8.h"
#include "formats/safetensors_impl.h"

/* A tensor name in a message (safetensors_impl.h). */
#define QUOTED TFM__ST_QUOTED

/* ---- Little-endian stores --------------------------------------------- */

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

/* ---- UTF-8 validation (utf8.h) --------------------------------------- */

static int is_utf8(const char *s)
{
    size_t at;
    return tfm__utf8_check((const unsigned char *)s, strlen(s), &at) == NULL;
}

/* ---- Writer ----------------------------------------------------------- */

typedef struct w_tensor {
    char *name;
    int rank;
    int64_t shape[TFM_MAX_RANK];
    int64_t numel;
    tfm_dtype dtype; /* F32, F16 or BF16: how the file stores it; U8: bytes */
    float *data;     /* own copy, converted when the file is written */
    unsigned char *bytes; /* U8 (tfm__safetensors_writer_add_bytes): own
                           * copy of numel bytes, written as they are */
} w_tensor;

struct tfm_safetensors_writer {
    w_tensor *tensors;  /* [count], sorted by name */
    size_t count, cap;
    tfm__st_meta *meta; /* [meta_count], sorted by key */
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
        tfm__free(writer->tensors[i].bytes);
    }
    tfm__free(writer->tensors);
    tfm__st_meta_free(writer->meta, (int64_t)writer->meta_count);
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

static const char *tensor_key(const tfm_safetensors_writer *w, size_t i)
{
    return w->tensors[i].name;
}

static const char *meta_key(const tfm_safetensors_writer *w, size_t i)
{
    return w->meta[i].key;
}

/* Index of the first of the n entries key(w, 0 .. n-1) (sorted) that is
 * >= name. */
static size_t position(const tfm_safetensors_writer *w, size_t n,
                       const char *(*key)(const tfm_safetensors_writer *,
                                          size_t),
                       const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(key(w, mid), name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the first tensor whose name is >= name. */
static size_t tensor_position(const tfm_safetensors_writer *w,
                              const char *name)
{
    return position(w, w->count, tensor_key, name);
}

static size_t meta_position(const tfm_safetensors_writer *w, const char *key)
{
    return position(w, w->meta_count, meta_key, key);
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
                         tfm__st_dtype_name(dtype));
    size_t pos = tensor_position(writer, name);
    w_tensor t = { 0 };
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

tfm_status tfm__safetensors_writer_add_bytes(tfm_safetensors_writer *writer,
                                             const char *name,
                                             int64_t rows, int64_t row_bytes,
                                             const void *bytes)
{
    size_t pos = tensor_position(writer, name);
    w_tensor t = { .rank = 2, .shape = { rows, row_bytes },
                   .numel = rows * row_bytes, .dtype = TFM_DTYPE_U8 };
    tfm_status st = check_name(writer, name, pos);
    void *array = writer->tensors;
    if (st == TFM_OK)
        st = grow(&array, &writer->cap, writer->count,
                  sizeof *writer->tensors);
    writer->tensors = array;
    if (st != TFM_OK)
        return st;
    t.name = tfm__strdup(name);
    t.bytes = tfm__malloc(t.numel > 0 ? (size_t)t.numel : 1);
    if (!t.name || !t.bytes) {
        tfm__free(t.name);
        tfm__free(t.bytes);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot copy tensor " QUOTED,
                         name);
    }
    memcpy(t.bytes, bytes, (size_t)t.numel);
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
    writer->meta[pos] = (tfm__st_meta){k, v};
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
    return (uint64_t)t->numel * tfm__st_dtype_sizes[t->dtype];
}

static int json_add_tensor(cJSON *root, const w_tensor *t, uint64_t begin)
{
    cJSON *obj = cJSON_AddObjectToObject(root, t->name);
    if (!obj || !cJSON_AddStringToObject(obj, "dtype",
                                         tfm__st_dtype_name(t->dtype)))
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
    const size_t size = tfm__st_dtype_sizes[t->dtype];
    if (t->bytes)
        return write_all(fd, t->bytes, (size_t)t->numel, path);
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
