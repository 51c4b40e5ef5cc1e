/* BERT's masked-language-model inputs and targets (training.h): Devlin et
 * al. 2019, section 3.1 (15 % of the positions; of those 80 % [MASK], 10 %
 * a random token, 10 % unchanged), chosen per position as Hugging Face's
 * DataCollatorForLanguageModeling does, from the library's seeded
 * SplitMix64 generator (random.h). */
#include "base/error.h"
#include "base/random.h"
#include "transformer/model.h"
#include "transformer/training.h"

static int never_masked(int32_t id, const int32_t *never, int n)
{
    for (int k = 0; k < n; k++)
        if (never[k] == id)
            return 1;
    return 0;
}

/* floor(r * v / 2^64) for v < 2^31, exactly, in 64-bit arithmetic: with
 * r = hi * 2^32 + lo, it is floor((hi * v + floor(lo * v / 2^32)) / 2^32). */
static int32_t random_id(uint64_t r, uint64_t v)
{
    const uint64_t hi = r >> 32, lo = r & 0xffffffffu;
    return (int32_t)((hi * v + ((lo * v) >> 32)) >> 32);
}

tfm_status tfm_masked_lm_inputs(const int32_t *ids, int64_t n,
                                int32_t vocab_size, int32_t mask_id,
                                float mask_prob, const int32_t *never_mask,
                                int n_never_mask, int32_t ignore_index,
                                struct tfm_rng *rng, int32_t *inputs,
                                int32_t *targets)
{
    if (!ids || !inputs || !targets || !rng ||
        (n_never_mask > 0 && !never_mask))
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_masked_lm_inputs: ids, inputs, targets and rng "
                         "are required (and never_mask when n_never_mask > "
                         "0)");
    if (n < 0 || vocab_size < 1 || n_never_mask < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_masked_lm_inputs: n %lld, vocab_size %d, "
                         "n_never_mask %d: expected n >= 0, vocab_size >= 1, "
                         "n_never_mask >= 0", (long long)n, (int)vocab_size,
                         n_never_mask);
    if (!(mask_prob >= 0.0f && mask_prob <= 1.0f))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_masked_lm_inputs: mask_prob %g is not in "
                         "[0, 1]", (double)mask_prob);
    if (mask_id < 0 || mask_id >= vocab_size)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_masked_lm_inputs: mask_id %d is not in [0, %d)",
                         (int)mask_id, (int)vocab_size);
    for (int64_t i = 0; i < n; i++) {
        const int32_t id = ids[i];
        targets[i] = ignore_index;
        inputs[i] = id;
        if (never_masked(id, never_mask, n_never_mask))
            continue;
        if (!(tfm_rng_uniform(rng) < mask_prob))
            continue;
        targets[i] = id;
        const float u = tfm_rng_uniform(rng);
        if (u < 0.8f) {
            inputs[i] = mask_id;
        } else if (u < 0.9f) {
            inputs[i] = random_id(tfm__rng_next(rng), (uint64_t)vocab_size);
        }
    }
    return TFM_OK;
}
