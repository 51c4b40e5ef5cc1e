/* Text generation from a decoder-only model (model.h: tfm_model_generate):
 * a prefill of the prompt into a KV cache, then one sampled token at a time,
 * re-encoding the last context_length tokens when the cache is full. */
#include <string.h>

#include "alloc.h"
#include "error.h"
#include "model_impl.h"
#include "parallel.h"
#include "tensor_impl.h"

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

    /* seq [n_prompt + max_new]: the prompt, then each sampled id; logits
     * [1, V]: the next position's scores, rewritten by every decode. */
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
    /* Prefill: the last min(n_prompt, ctx) prompt tokens in one call. */
    int64_t window = len < ctx ? len : ctx;
    if ((st = tfm_kv_cache_decode(cache, seq + len - window, window, logits)))
        goto done;
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    /* Sample from the last logits, then feed the sampled id back (no
     * decode after the last one). */
    for (int64_t t = 0; t < max_new; t++) {
        int32_t id;
        if ((st = tfm_sample(logits->data, V, sampling, &rng, &id)))
            goto done;
        seq[len++] = id;
        if (t + 1 == max_new)
            break;
        if (tfm_kv_cache_length(cache) < tfm_kv_cache_capacity(cache)) {
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
