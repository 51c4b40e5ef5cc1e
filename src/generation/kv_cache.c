/* KV-cache decoding for decoder-only models (model.h): the cache holds
 * every block's keys and values of the positions seen so far, so that n new
 * positions cost O(n * length) attention instead of a full pass.
 * Generation on top of it is in generate.c.
 *
 * A rolling cache (tfm__kv_cache_create_rolling; generation past the
 * context of a model without absolute positions) drops its oldest
 * positions when new ones do not fit.  Its rows live in a buffer of twice
 * the capacity: the held positions are rows start .. start+length-1, in
 * order, so the attention door sees the keys as an ordinary cache; once
 * the next positions would pass the end of the buffer the held rows move
 * to the front (one copy of `capacity` rows per `capacity` dropped
 * positions instead of one per step).  Keys keep the RoPE rotation of
 * their absolute position (origin + row), so queries turn for theirs. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/lifetime.h"
#include "models/model_impl.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

struct tfm_kv_cache {
    /* First (base/lifetime.h): a generator using the cache
     * (options->cache) keeps it, freed, until the generator is freed. */
    tfm__lifetime life;
    /* The model, retained (tfm__module_retain): freed before the cache,
     * it stays until tfm_kv_cache_free, and decoding refuses. */
    const tfm__model *model;
    int64_t capacity, length;
    int64_t storage;        /* rows per layer: capacity, twice that when
                             * rolling */
    int64_t start;          /* the first held row (rolling; else 0) */
    int64_t origin;         /* the absolute position of row start */
    int rolling;
    int64_t kv_dim;         /* key/value columns per position: n_kv_heads
                             * * d_k (variants.h; d_model without GQA) */
    float *keys, *values;   /* [n_layers, storage, kv_dim] each, one
                             * buffer (values = keys + that size) */
    /* [n_layers]: value rows with a NaN or an infinity written since the
     * cache was last empty (mha.h: tfm__cached_seq.v_nonfinite).  Rows
     * dropped or truncated away still count until the cache empties: the
     * count only ever says "maybe", and 0 lets attention skip its scan. */
    int64_t *v_nonfinite;
    int32_t *ids;           /* [storage]: the token id of each row (a
                             * generator's prefix reuse, model.h) */
};

static void destroy(tfm_kv_cache *cache)
{
    tfm__free(cache->v_nonfinite);
    /* (values are in the same buffer) */
    tfm__free_large(cache->keys, (size_t)(2 * (cache->values - cache->keys)) *
                                     sizeof(float));
    tfm__free(cache->ids);
    if (cache->model)
        tfm__module_release((tfm_module *)&cache->model->base);
    tfm__free(cache);
}

static void destroy_zombie(tfm__lifetime *life)
{
    destroy((tfm_kv_cache *)(void *)life);
}

static tfm_status create(const tfm_module *model, int64_t capacity,
                         int rolling, tfm_kv_cache **out)
{
    tfm_status st = tfm__model_check_with(model, 1u << TFM_ARCH_DECODER_ONLY,
                                          out, "out");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    if (capacity < 1 || capacity > m->config.context_length)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "capacity %lld must be between 1 and the context "
                         "length %lld", (long long)capacity,
                         (long long)m->config.context_length);
    const int64_t kv_dim = tfm__model_kv_dim(&m->config, &m->options);
    const int64_t storage = rolling ? 2 * capacity : capacity;
    /* keys and values: one buffer [2, n_layers, storage, kv_dim] */
    const int64_t dims[4] = { 2, m->config.n_layers, storage, kv_dim };
    int64_t n;
    if (!tfm__checked_numel(dims, 4, sizeof(float), &n))
        return tfm__fail(TFM_ERR_OVERFLOW, "KV cache size overflows");
    n /= 2;
    tfm_kv_cache *c = tfm__calloc(1, sizeof *c);
    if (c) {
        tfm__lifetime_init(&c->life, destroy_zombie);
        /* Written a row per layer at a time as the cache fills: in huge
         * pages (alloc.h) a batch of 16 sequences of the d512, 8-layer
         * model took about 150 page faults of 4 KiB per decoding step, at
         * 10-15 us each in a virtual machine. */
        c->keys = tfm__malloc_large((size_t)(2 * n) * sizeof(float));
        c->values = c->keys ? c->keys + n : NULL;
        c->ids = c->values ? tfm__malloc((size_t)storage * sizeof(int32_t))
                           : NULL;
        c->v_nonfinite =
            c->ids ? tfm__calloc((size_t)m->config.n_layers,
                                 sizeof *c->v_nonfinite)
                   : NULL;
    }
    if (!c || !c->v_nonfinite) {
        tfm_kv_cache_free(c);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a KV cache of %lld floats",
                         (long long)(2 * n));
    }
    if (!tfm__module_retain(model, "tfm_kv_cache_create")) {
        tfm_kv_cache_free(c);
        return TFM_ERR_INVALID_ARGUMENT;
    }
    c->model = m;
    c->capacity = capacity;
    c->storage = storage;
    c->rolling = rolling;
    c->kv_dim = kv_dim;
    *out = c;
    return TFM_OK;
}

tfm_status tfm_kv_cache_create(const tfm_module *model, int64_t capacity,
                               tfm_kv_cache **out)
{
    return create(model, capacity, 0, out);
}

tfm_status tfm__kv_cache_create_rolling(const tfm_module *model,
                                        int64_t capacity, tfm_kv_cache **out)
{
    return create(model, capacity, 1, out);
}

tfm_status tfm_kv_cache_create_rolling(const tfm_module *model,
                                       int64_t capacity, tfm_kv_cache **out)
{
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_DECODER_ONLY, "model");
    if (st != TFM_OK)
        return st;
    if (!tfm__model_rolls((const tfm__model *)model))
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "a rolling cache needs a model whose attention "
                         "depends on distances only (no learned or "
                         "sinusoidal positions, global tokens or BigBird "
                         "blocks)");
    return create(model, capacity, 1, out);
}

int tfm__model_rolls(const tfm__model *m)
{
    const tfm_attention_config *a = &m->options.attention;
    if (m->config.positional != TFM_POSITIONAL_NONE)
        return 0;
    /* Relative terms (Shaw, T5, ALiBi) and RoPE depend on distances only;
     * global tokens and BigBird's blocks on absolute positions. */
    return a->n_global == 0 && (a->sparsity == TFM_SPARSE_NONE ||
                                a->sparsity == TFM_SPARSE_SLIDING_WINDOW ||
                                a->sparsity == TFM_SPARSE_DILATED);
}

/* Moves the held rows of every layer to the front of the buffer. */
static void compact(tfm_kv_cache *c)
{
    const int64_t layers = c->model->config.n_layers;
    const int64_t stride = c->storage * c->kv_dim;
    const size_t bytes = (size_t)(c->length * c->kv_dim) * sizeof(float);
    for (int64_t i = 0; i < layers && c->start > 0; i++) {
        memmove(c->keys + i * stride, c->keys + i * stride +
                c->start * c->kv_dim, bytes);
        memmove(c->values + i * stride, c->values + i * stride +
                c->start * c->kv_dim, bytes);
    }
    if (c->start > 0)
        memmove(c->ids, c->ids + c->start,
                (size_t)c->length * sizeof *c->ids);
    c->start = 0;
}

/* The cache holds nothing: no row can be non-finite. */
static void emptied(tfm_kv_cache *c)
{
    c->length = c->start = c->origin = 0;
    memset(c->v_nonfinite, 0,
           (size_t)c->model->config.n_layers * sizeof *c->v_nonfinite);
}

void tfm_kv_cache_free(tfm_kv_cache *cache)
{
    /* With a generator using it left, the generator's free destroys it. */
    if (cache && tfm__lifetime_close(&cache->life))
        destroy(cache);
}

tfm_status tfm__kv_cache_check_model(const tfm_kv_cache *c, const char *what)
{
    if (tfm__module_freed(&c->model->base))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: the model this KV cache refers to has been "
                         "freed (tfm_module_free)", what);
    return TFM_OK;
}

void tfm_kv_cache_reset(tfm_kv_cache *cache)
{
    if (cache)
        emptied(cache);
}

int64_t tfm_kv_cache_length(const tfm_kv_cache *cache)
{
    return cache ? cache->length : 0;
}

int64_t tfm_kv_cache_capacity(const tfm_kv_cache *cache)
{
    return cache ? cache->capacity : 0;
}

tfm_status tfm_kv_cache_decode(tfm_kv_cache *cache, const int32_t *ids,
                               int64_t n, tfm_tensor *logits)
{
    TFM__PLAN_PIN();
    if (!cache)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "cache is NULL");
    tfm_status st = tfm__kv_cache_check_model(cache, "tfm_kv_cache_decode");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = cache->model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    if (n < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n (%lld) must be at least 1", (long long)n);
    st = tfm__model_check_ids(m, ids, n, "ids");
    if (st != TFM_OK)
        return st;
    if (!logits)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "logits is NULL");
    const int64_t all[2] = { n, V }, last[2] = { 1, V };
    const int only_last = n > 1 && logits->rank == 2 && logits->shape[0] == 1;
    if ((st = tfm__check_shape(logits, "logits", 2, only_last ? last : all)))
        return st;
    /* drop: the oldest positions a rolling cache lets go for these */
    int64_t drop = 0;
    if (cache->rolling && n <= cache->capacity &&
        n > cache->capacity - cache->length)
        drop = n - (cache->capacity - cache->length);
    if (n > cache->capacity - cache->length + drop)
        return tfm__fail(TFM_ERR_CAPACITY,
                         "%lld new positions do not fit: the cache holds "
                         "%lld of %lld", (long long)n,
                         (long long)cache->length, (long long)cache->capacity);

    /* h [n, d]: the new positions' hidden states; out [n, V] (or [1, V]):
     * their logits, copied to the caller only on success. */
    tfm__ws_mark mark = tfm__ws_save();
    float *h = tfm__ws_floats((size_t)(n * d));
    float *out = h ? tfm__ws_floats((size_t)(n * V)) : NULL;
    st = TFM_ERR_OUT_OF_MEMORY;
    if (out) {
        /* The new rows go after the held ones (a failure leaves these
         * as they were); the view starts after the dropped ones. */
        if (cache->start + cache->length + n > cache->storage)
            compact(cache);
        const int64_t first = cache->start + drop, past = cache->length - drop;
        const int64_t kv = cache->kv_dim;
        tfm__model_embed(m, ids, 1, n, past, h);
        st = tfm__stack_run_cached(m->stack, h, n, cache->keys + first * kv,
                                   cache->values + first * kv,
                                   cache->storage * kv, past,
                                   cache->origin + drop, only_last ? 1 : n,
                                   cache->v_nonfinite);
        if (st == TFM_OK) {
            const int64_t rows = only_last ? 1 : n;
            st = tfm__model_head(m, h + (n - rows) * d, rows, out);
        }
        if (st == TFM_OK) {
            const int64_t rows = only_last ? 1 : n;
            memcpy(logits->data, out, (size_t)(rows * V) * sizeof(float));
            memcpy(cache->ids + first + past, ids, (size_t)n * sizeof *ids);
            cache->start = first;
            cache->origin += drop;
            cache->length = past + n;
        }
    }
    tfm__ws_restore(mark);
    return st;
}

void tfm__kv_cache_copy(tfm_kv_cache *dst, const tfm_kv_cache *src)
{
    const int64_t layers = src->model->config.n_layers;
    const int64_t from = src->storage * src->kv_dim;
    const int64_t to = dst->storage * dst->kv_dim;
    const int64_t first = src->start * src->kv_dim;
    const size_t bytes = (size_t)(src->length * src->kv_dim) * sizeof(float);
    for (int64_t i = 0; i < layers; i++) {
        memcpy(dst->keys + i * to, src->keys + i * from + first, bytes);
        memcpy(dst->values + i * to, src->values + i * from + first, bytes);
    }
    memcpy(dst->ids, src->ids + src->start,
           (size_t)src->length * sizeof *dst->ids);
    memcpy(dst->v_nonfinite, src->v_nonfinite,
           (size_t)layers * sizeof *dst->v_nonfinite);
    dst->length = src->length;
    dst->start = 0;
    dst->origin = src->origin;
}

int64_t tfm__kv_cache_common_prefix(const tfm_kv_cache *c,
                                    const int32_t *ids, int64_t n)
{
    if (c->origin != 0)   /* a rolling cache that dropped its first rows */
        return 0;
    const int32_t *held = c->ids + c->start;
    int64_t k = 0;
    while (k < n && k < c->length && held[k] == ids[k])
        k++;
    return k;
}

void tfm__kv_cache_truncate(tfm_kv_cache *c, int64_t length)
{
    if (length < c->length)
        c->length = length;
    if (c->length == 0)
        emptied(c);
}

const tfm__model *tfm__kv_cache_model(const tfm_kv_cache *c)
{
    return c->model;
}

int tfm__kv_cache_rolls(const tfm_kv_cache *c)
{
    return c->rolling;
}

/* ---- One token for each of several caches (a batch decoding step) ----- */

/* The row sequence i's new position goes to in caches[i], after dropping
 * the oldest held one of a full rolling cache (compacting first when the
 * row would pass the buffer's end); *seq describes the view. */
static void batch_view(tfm_kv_cache *c, tfm__cached_seq *seq, int64_t *first)
{
    const int64_t drop = c->rolling && c->length == c->capacity ? 1 : 0;
    if (c->start + c->length + 1 > c->storage)
        compact(c);
    const int64_t kv = c->kv_dim;
    *first = c->start + drop;
    *seq = (tfm__cached_seq){ 1, c->length - drop, c->origin + drop,
                              c->keys + *first * kv, c->values + *first * kv,
                              c->storage * kv, c->v_nonfinite };
}

tfm_status tfm__kv_cache_decode_rows(tfm_kv_cache *const *caches,
                                     const int32_t *ids, int64_t n,
                                     float *const *logits)
{
    const tfm__model *m = caches[0]->model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    tfm_status st = tfm__kv_cache_check_model(caches[0], "decoding a batch");
    if (st != TFM_OK)
        return st;
    for (int64_t i = 0; i < n; i++)
        if (!caches[i]->rolling && caches[i]->length >= caches[i]->capacity)
            return tfm__fail(TFM_ERR_CAPACITY,
                             "cache %lld is full (%lld positions)",
                             (long long)i, (long long)caches[i]->capacity);
    /* h [n, d]: the new positions' hidden states; out [n, V]: their
     * logits; seqs [n]: each row's cache view. */
    tfm__ws_mark mark = tfm__ws_save();
    float *h = tfm__ws_floats((size_t)(n * d));
    float *out = h ? tfm__ws_floats((size_t)(n * V)) : NULL;
    tfm__cached_seq *seqs = out ? tfm__ws_alloc((size_t)n * sizeof *seqs)
                                : NULL;
    int64_t *first = seqs ? tfm__ws_alloc((size_t)n * sizeof *first) : NULL;
    st = TFM_ERR_OUT_OF_MEMORY;
    if (first) {
        for (int64_t i = 0; i < n; i++) {
            batch_view(caches[i], &seqs[i], &first[i]);
            tfm__model_embed(m, ids + i, 1, 1, seqs[i].past, h + i * d);
        }
        st = tfm__stack_run_cached_seqs(m->stack, h, n, seqs);
    }
    if (st == TFM_OK)
        st = tfm__model_head(m, h, n, out);
    if (st == TFM_OK) {
        for (int64_t i = 0; i < n; i++) {
            tfm_kv_cache *c = caches[i];
            memcpy(logits[i], out + i * V, (size_t)V * sizeof(float));
            c->ids[first[i] + seqs[i].past] = ids[i];
            c->origin += first[i] - c->start;
            c->start = first[i];
            c->length = seqs[i].past + 1;
        }
    } else if (st == TFM_ERR_OUT_OF_MEMORY && !first) {
        st = tfm__fail(st, "cannot decode a batch of %lld tokens",
                       (long long)n);
    }
    tfm__ws_restore(mark);
    return st;
}

/* Test hook (tests/test_generate_batch.c; not API, docs/ABI.md): the
 * batch decoding step above with its checks, logits [n, vocab]. */
__attribute__((visibility("default"))) tfm_status
tfm_testing_kv_cache_decode_rows(tfm_kv_cache *const *caches,
                                 const int32_t *ids, int64_t n, float *logits)
{
    TFM__PLAN_PIN();
    if (!caches || !ids || !logits || n < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "bad arguments");
    const tfm__model *m = caches[0]->model;
    const int64_t V = m->config.vocab_size;
    for (int64_t i = 0; i < n; i++) {
        if (caches[i]->model != m)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "caches of different models");
        tfm_status st = tfm__model_check_ids(m, ids + i, 1, "ids");
        if (st != TFM_OK)
            return st;
    }
    tfm__ws_mark mark = tfm__ws_save();
    float **rows = tfm__ws_alloc((size_t)n * sizeof *rows);
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    if (rows) {
        for (int64_t i = 0; i < n; i++)
            rows[i] = logits + i * V;
        st = tfm__kv_cache_decode_rows(caches, ids, n, rows);
    }
    tfm__ws_restore(mark);
    return st;
}
