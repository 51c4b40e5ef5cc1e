/* GGUF files, the tensors (gguf.h): the tensor entries (rank 1..4, each
 * ne >= 1 with a size that fits, ggml types F32/F16/BF16/Q8_0/Q4_0 with
 * Q rows whole blocks, the others refused by ggml's name, offsets
 * aligned, names unique), the data section (after the header at the
 * alignment, every tensor inside the file, none overlapping: sorted by
 * offset) and the tensor queries.  gguf.c parses what comes before. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "transformer/safetensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_impl.h"

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
    static const struct { uint32_t type; int dtype, block, bytes; } types[] = {
        {TFM__GGML_F32, TFM_DTYPE_F32, 1, 4},
        {TFM__GGML_F16, TFM_DTYPE_F16, 1, 2},
        {TFM__GGML_BF16, TFM_DTYPE_BF16, 1, 2},
        {TFM__GGML_Q8_0, TFM_DTYPE_Q8_0, 32, 34},
        {TFM__GGML_Q4_0, TFM_DTYPE_Q4_0, 32, 18},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].type == t) {
            *dtype = types[i].dtype;
            *block = types[i].block;
            *block_bytes = types[i].bytes;
            return 1;
        }
    return 0;
}

/* ---- Tensor entries --------------------------------------------------- */

/* The shape, type and size of a tensor entry (name already read). */
static tfm_status take_tensor_info(tfm__gguf_cursor *c, tfm__gguf_tensor *t,
                                   uint32_t alignment)
{
    const char *name = t->name;
    size_t at = c->pos;
    uint32_t n_dims;
    tfm_status st = tfm__gguf_take_u32(c, "n_dims", &n_dims);
    if (st != TFM_OK)
        return st;
    if (n_dims < 1 || n_dims > TFM__GGUF_MAX_DIMS)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "tensor \"%.100s\": n_dims %" PRIu32 " at byte %zu is "
                     "not in 1..4", name, n_dims, at);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < TFM__GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        at = c->pos;
        uint64_t ne;
        if ((st = tfm__gguf_take_u64(c, "ne", &ne)) != TFM_OK)
            return st;
        if (ne > (uint64_t)INT64_MAX)
            return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                         "tensor \"%.100s\": ne[%d] = %" PRIu64 " at byte "
                         "%zu is larger than 2^63 - 1", name, d, ne, at);
        if (ne == 0)
            return tfm__gguf_failf(c, TFM_ERR_UNSUPPORTED,
                         "tensor \"%.100s\": ne[%d] = 0 at byte %zu (empty "
                         "tensors are not supported)", name, d, at);
        t->ne[d] = (int64_t)ne;
    }
    at = c->pos;
    if ((st = tfm__gguf_take_u32(c, "tensor type", &t->ggml_type)) != TFM_OK)
        return st;
    int64_t block = 0, block_bytes = 0;
    if (!accepted_type(t->ggml_type, &t->dtype, &block, &block_bytes)) {
        const char *tn = ggml_type_name(t->ggml_type);
        if (!tn)
            return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                         "tensor \"%.100s\": unknown ggml type %" PRIu32
                         " at byte %zu", name, t->ggml_type, at);
        return tfm__gguf_failf(c, TFM_ERR_UNSUPPORTED,
                     "tensor \"%.100s\": type %s (%" PRIu32 ") is not "
                     "supported (F32, F16, BF16, Q8_0 and Q4_0 are)", name,
                     tn, t->ggml_type);
    }
    if (t->ne[0] % block != 0)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "tensor \"%.100s\": %s rows of %" PRId64 " values are "
                     "not whole blocks of %" PRId64, name,
                     ggml_type_name(t->ggml_type), t->ne[0], block);
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(t->ne[0] / block, block_bytes, &nbytes) ||
        __builtin_mul_overflow(nbytes, t->ne[1], &nbytes) ||
        __builtin_mul_overflow(nbytes, t->ne[2], &nbytes) ||
        __builtin_mul_overflow(nbytes, t->ne[3], &nbytes))
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "tensor \"%.100s\": its size in bytes overflows "
                     "(shape %" PRId64 " x %" PRId64 " x %" PRId64 " x %"
                     PRId64 ")", name, t->ne[0], t->ne[1], t->ne[2],
                     t->ne[3]);
    t->nbytes = (uint64_t)nbytes;
    at = c->pos;
    if ((st = tfm__gguf_take_u64(c, "tensor offset", &t->offset)) != TFM_OK)
        return st;
    if (t->offset % alignment != 0)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
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

tfm_status tfm__gguf_take_tensors(tfm__gguf_cursor *c, tfm__gguf *g)
{
    for (int64_t i = 0; i < g->n_tensors; i++) {
        tfm__gguf_tensor *t = &g->tensors[i];
        tfm__gguf_str name = {NULL, 0};
        tfm_status st = tfm__gguf_take_name(c, "tensor name", &name);
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
            return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                                   "tensor \"%.100s\" appears twice",
                                   g->by_name[i]->name);
    return TFM_OK;
}

/* The data section: its start aligned, each tensor inside the file, no
 * two overlapping; then the data pointers. */
tfm_status tfm__gguf_place_data(tfm__gguf_cursor *c, tfm__gguf *g)
{
    const uint64_t a = g->alignment;
    const uint64_t end = c->pos;
    const uint64_t start = (end + a - 1) / a * a; /* end < 2^63, a <= 2^31 */
    g->data_start = start;
    if (g->n_tensors == 0)
        return TFM_OK;
    if (start > c->size)
        return tfm__gguf_failf(c, TFM_ERR_FORMAT,
                     "the data section would start at byte %" PRIu64
                     " (the header ends at %" PRIu64 ", aligned to %" PRIu64
                     "), past the end of the file (%zu bytes)", start, end,
                     a, c->size);
    const uint64_t room = c->size - start;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const tfm__gguf_tensor *t = &g->tensors[i];
        if (t->offset > room || t->nbytes > room - t->offset)
            return tfm__gguf_failf(c, TFM_ERR_FORMAT,
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
            st = tfm__gguf_failf(c, TFM_ERR_FORMAT,
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

/* ---- Queries ---------------------------------------------------------- */

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
