/* KV-cache decoding and generation for decoder-only models (model.h). */
#include <string.h>

#include "alloc.h"
#include "error.h"
#include "model_impl.h"
#include "parallel.h"
#include "tensor_impl.h"
#include "workspace.h"

struct tfm_kv_cache {
    const tfm__model *model;
    int64_t capacity, length;
    int64_t kv_dim;         /* key/value columns per position: n_kv_heads
                             * * d_k (variants.h; d_model without GQA) */
    float *keys, *values;   /* [n_layers, capacity, kv_dim] each */
};

tfm_status tfm_kv_cache_create(const tfm_module *model, int64_t capacity,
                               tfm_kv_cache **out)
{
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_DECODER_ONLY, "model");
    if (st != TFM_OK)
        return st;
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    const tfm__model *m = (const tfm__model *)model;
    if (capacity < 1 || capacity > m->config.context_length)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "capacity %lld must be between 1 and the context "
                         "length %lld", (long long)capacity,
                         (long long)m->config.context_length);
    const int64_t kv_dim = tfm__model_kv_dim(&m->config, &m->options);
    const int64_t dims[3] = { m->config.n_layers, capacity, kv_dim };
    int64_t n;
    if (!tfm__checked_numel(dims, 3, sizeof(float), &n))
        return tfm__fail(TFM_ERR_OVERFLOW, "KV cache size overflows");
    tfm_kv_cache *c = tfm__calloc(1, sizeof *c);
    if (c) {
        c->keys = tfm__malloc((size_t)n * sizeof(float));
        c->values = c->keys ? tfm__malloc((size_t)n * sizeof(float)) : NULL;
    }
    if (!c || !c->values) {
        tfm_kv_cache_free(c);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a KV cache of %lld floats",
                         (long long)(2 * n));
    }
    c->model = m;
    c->capacity = capacity;
    c->kv_dim = kv_dim;
    *out = c;
    return TFM_OK;
}

void tfm_kv_cache_free(tfm_kv_cache *cache)
{
    if (!cache)
        return;
    tfm__free(cache->keys);
    tfm__free(cache->values);
    tfm__free(cache);
}

void tfm_kv_cache_reset(tfm_kv_cache *cache)
{
    if (cache)
        cache->length = 0;
}

int64_t tfm_kv_cache_length(const tfm_kv_cache *cache)
{
    return cache ? cache->length : 0;
}

int64_t tfm_kv_cache_capacity(const tfm_kv_cache *cache)
{
    return cache ? cache->capacity : 0;
}

/* Runs n new positions through every block over the cache; h [n, d] holds
 * the final hidden states.  The blocks' attention places the new queries
 * and keys at positions length .. length+n-1 (RoPE, relative terms and
 * sparse patterns use them).  Fails only with out-of-memory. */
static tfm_status decode_blocks(const tfm_kv_cache *c, float *h, int64_t n)
{
    const tfm__model *m = c->model;
    const tfm__stack *s = m->stack;
    const int64_t stride = c->capacity * c->kv_dim;
    for (int64_t i = 0; i < s->n_layers; i++) {
        const tfm__encoder_layer *l =
            (const tfm__encoder_layer *)s->layers[i];
        tfm__sublayer sa = tfm__cached_attention_sublayer(
            l->self_attn, n, c->keys + i * stride, c->values + i * stride,
            c->length);
        tfm_status st = tfm__encoder_layer_run_with(l, h, n, &sa);
        if (st != TFM_OK)
            return st;
    }
    tfm__layer_norm_run(s->norm, h, n, h);
    return TFM_OK;
}

tfm_status tfm_kv_cache_decode(tfm_kv_cache *cache, const int32_t *ids,
                               int64_t n, tfm_tensor *logits)
{
    TFM__PLAN_PIN();
    if (!cache)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "cache is NULL");
    const tfm__model *m = cache->model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    if (n < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n (%lld) must be at least 1", (long long)n);
    tfm_status st = tfm__model_check_ids(m, ids, n, "ids");
    if (st != TFM_OK)
        return st;
    if (!logits)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "logits is NULL");
    const int64_t all[2] = { n, V }, last[2] = { 1, V };
    const int only_last = n > 1 && logits->rank == 2 && logits->shape[0] == 1;
    if ((st = tfm__check_shape(logits, "logits", 2, only_last ? last : all)))
        return st;
    if (n > cache->capacity - cache->length)
        return tfm__fail(TFM_ERR_CAPACITY,
                         "%lld new positions do not fit: the cache holds "
                         "%lld of %lld", (long long)n,
                         (long long)cache->length, (long long)cache->capacity);

    tfm__ws_mark mark = tfm__ws_save();
    float *h = tfm__ws_floats((size_t)(n * d));
    float *out = h ? tfm__ws_floats((size_t)(n * V)) : NULL;
    st = TFM_ERR_OUT_OF_MEMORY;
    if (out) {
        tfm__model_embed(m, ids, 1, n, cache->length, h);
        st = decode_blocks(cache, h, n);
        if (st == TFM_OK) {
            const int64_t rows = only_last ? 1 : n;
            tfm__model_head(m, h + (n - rows) * d, rows, out);
            memcpy(logits->data, out, (size_t)(rows * V) * sizeof(float));
            cache->length += n;
        }
    }
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm_model_generate(const tfm_module *model, const int32_t *prompt,
                              int64_t n_prompt, int64_t max_new,
                              const tfm_sampling *sampling, uint64_t seed,
                              int32_t *out_ids)
{
    TFM__PLAN_PIN();
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_DECODER_ONLY, "model");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    if (n_prompt < 1 || max_new < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_prompt (%lld) must be at least 1 and max_new "
                         "(%lld) at least 0", (long long)n_prompt,
                         (long long)max_new);
    if ((st = tfm__model_check_ids(m, prompt, n_prompt, "prompt")))
        return st;
    if (max_new > 0 && !out_ids)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out_ids is NULL");
    if (max_new == 0)
        return TFM_OK;
    const tfm_sampling greedy = tfm_sampling_default();
    if (!sampling)
        sampling = &greedy;
    const int64_t ctx = m->config.context_length, V = m->config.vocab_size;
    if (n_prompt > INT64_MAX / 2 - max_new)
        return tfm__fail(TFM_ERR_OVERFLOW, "sequence length overflows");

    const int64_t total = n_prompt + max_new;
    int32_t *seq = tfm__malloc((size_t)total * sizeof *seq);
    tfm_kv_cache *cache = NULL;
    tfm_tensor *logits = NULL;
    const int64_t shape[2] = { 1, V };
    if (!seq) {
        st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate %lld ids",
                       (long long)total);
        goto done;
    }
    if ((st = tfm_kv_cache_create(model, ctx, &cache)) ||
        (st = tfm_tensor_create(2, shape, &logits)))
        goto done;
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    int64_t len = n_prompt;
    int64_t window = len < ctx ? len : ctx;
    if ((st = tfm_kv_cache_decode(cache, seq + len - window, window, logits)))
        goto done;
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    for (int64_t t = 0; t < max_new; t++) {
        int32_t id;
        if ((st = tfm_sample(logits->data, V, sampling, &rng, &id)))
            goto done;
        seq[len++] = id;
        if (t + 1 == max_new)
            break;
        if (cache->length < cache->capacity) {
            st = tfm_kv_cache_decode(cache, &id, 1, logits);
        } else {
            /* The window slides: encode the last ctx tokens afresh. */
            tfm_kv_cache_reset(cache);
            st = tfm_kv_cache_decode(cache, seq + len - ctx, ctx, logits);
        }
        if (st != TFM_OK)
            goto done;
    }
    memcpy(out_ids, seq + n_prompt, (size_t)max_new * sizeof *seq);
done:
    tfm__free(seq);
    tfm_kv_cache_free(cache);
    tfm_tensor_free(logits);
    return st;
}
