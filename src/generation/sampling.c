/* Sampling (model.h): a SplitMix64 generator and greedy / temperature /
 * top-k / top-p decoding.
 *
 * SplitMix64 (Steele, Lea, Flood 2014), the constants of Vigna's public
 * domain splitmix64.c: a Weyl sequence through a 64-bit finaliser.
 *
 * tfm_sample, when not greedy:
 *   p_i = exp((x_i - max x) / T), in double (the max subtracted first, so
 *         nothing overflows; the max has p = 1 exactly);
 *   candidates sorted by p descending, ties to the lower id;
 *   top-k keeps the first k; top-p keeps the shortest prefix of those whose
 *         renormalised cumulative probability reaches top_p (at least one);
 *   one uniform u in [0, 1) picks the first candidate whose cumulative
 *         probability exceeds u times the kept total.
 * Infinite logits: if the largest logit is +inf (or every logit is -inf),
 * the tokens equal to it share the probability equally. */
#include <math.h>
#include <stdlib.h>

#include "transformer/model.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/random.h"

/* Vocabularies up to this size are sorted in a stack buffer. */
#define STACK_CANDIDATES 512

/* ---- Random numbers --------------------------------------------------- */

void tfm_rng_seed(tfm_rng *rng, uint64_t seed)
{
    if (rng)
        rng->state = seed;
}

uint64_t tfm__rng_next(tfm_rng *rng)
{
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t tfm_rng_next(tfm_rng *rng)
{
    return rng ? tfm__rng_next(rng) : 0;
}

float tfm_rng_uniform(tfm_rng *rng)
{
    if (!rng)
        return 0.0f;
    /* The top 24 bits: every value k * 2^-24 is exact in a float. */
    return (float)(tfm__rng_next(rng) >> 40) * 0x1.0p-24f;
}

tfm_sampling tfm_sampling_default(void)
{
    tfm_sampling s = { 1, 1.0f, 0, 1.0f };
    return s;
}

/* ---- Sampling --------------------------------------------------------- */

typedef struct candidate {
    double p;     /* unnormalised probability */
    int32_t id;
} candidate;

/* Probability descending, then id ascending: a total order, so the sort
 * result does not depend on qsort's algorithm. */
static int compare_candidates(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Index of the largest logit, ties to the lowest id. */
static int32_t argmax(const float *logits, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return (int32_t)best;
}

tfm_status tfm_sample(const float *logits, int64_t vocab_size,
                      const tfm_sampling *sampling, tfm_rng *rng, int32_t *id)
{
    if (!logits)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "logits is NULL");
    if (!sampling)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "sampling is NULL");
    if (!id)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "id is NULL");
    if (vocab_size < 1 || vocab_size > (int64_t)INT32_MAX + 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "vocab_size (%lld) must be in 1 .. 2^31",
                         (long long)vocab_size);
    if (!sampling->greedy) {
        if (!rng)
            return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                             "rng is NULL (needed unless greedy)");
        float t = sampling->temperature;
        if (!(t > 0.0f) || isinf(t))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "temperature (%g) must be positive and finite",
                             (double)t);
        if (sampling->top_k < 0)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "top_k (%lld) must be 0 (no limit) or positive",
                             (long long)sampling->top_k);
        float p = sampling->top_p;
        if (!(p > 0.0f && p <= 1.0f))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "top_p (%g) must be in (0, 1]", (double)p);
    }
    for (int64_t i = 0; i < vocab_size; i++)
        if (isnan(logits[i]))
            return tfm__fail(TFM_ERR_NON_FINITE, "logit %lld is NaN",
                             (long long)i);

    if (sampling->greedy) {
        *id = argmax(logits, vocab_size);
        return TFM_OK;
    }

    candidate stack_buf[STACK_CANDIDATES];
    candidate *c = stack_buf;
    if (vocab_size > STACK_CANDIDATES) {
        size_t bytes;
        if (!tfm__mul_size((size_t)vocab_size, sizeof *c, &bytes))
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "vocab_size %lld is too large to sort",
                             (long long)vocab_size);
        c = tfm__malloc(bytes);
        if (!c)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "out of memory sorting %lld candidates",
                             (long long)vocab_size);
    }

    /* Probabilities relative to the largest logit. */
    const double m = logits[argmax(logits, vocab_size)];
    const double temperature = sampling->temperature;
    for (int64_t i = 0; i < vocab_size; i++) {
        double x = logits[i];
        c[i].id = (int32_t)i;
        if (isinf(m))   /* +inf present, or all -inf: the maxima share */
            c[i].p = x == m ? 1.0 : 0.0;
        else
            c[i].p = exp((x - m) / temperature);
    }
    qsort(c, (size_t)vocab_size, sizeof *c, compare_candidates);

    /* Top-k, then top-p on the renormalised top-k. */
    int64_t kept = vocab_size;
    if (sampling->top_k > 0 && sampling->top_k < kept)
        kept = sampling->top_k;
    double total = 0.0;
    for (int64_t i = 0; i < kept; i++)
        total += c[i].p;
    if (sampling->top_p < 1.0f) {
        const double target = (double)sampling->top_p * total;
        double cum = 0.0;
        int64_t n = 0;
        while (n < kept) {
            cum += c[n++].p;
            if (cum >= target)
                break;
        }
        kept = n;
        total = cum;
    }

    /* One draw over the kept candidates, in sorted order. */
    const double u = (double)tfm_rng_uniform(rng) * total;
    int32_t chosen = c[0].id;
    double cum = 0.0;
    for (int64_t i = 0; i < kept; i++) {
        if (c[i].p <= 0.0)
            break;          /* sorted: only zeros follow */
        chosen = c[i].id;   /* rounding: fall back on the last positive */
        cum += c[i].p;
        if (u < cum)
            break;
    }
    if (c != stack_buf)
        tfm__free(c);
    *id = chosen;
    return TFM_OK;
}
