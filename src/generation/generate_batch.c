/* Batched generation (model.h: tfm_model_generate_batch): one
 * tfm_generator per sequence (its checks, prefill, processors, sampling
 * and stop conditions, so that each sequence is generated exactly as
 * alone), with the steps of all running sequences that append one token
 * to their caches done together (tfm__kv_cache_decode_rows: one pass of
 * the blocks over a batch of rows, attention per cache).
 *
 * One step:
 *   1. every running generator whose next step starts with a cache append
 *      of its last token gives its cache, token and logits row; those are
 *      decoded as one batch;
 *   2. every running generator makes its token (tfm_generator_next, which
 *      finds its logits ready, or past the context re-encodes itself).
 * Until the end nothing is written to the caller's buffers. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "models/model_impl.h"
#include "base/parallel.h"

/* The per-call state: the generators and the batch step's arrays. */
typedef struct batch {
    int64_t n;
    tfm_generator **gens;   /* [n] */
    tfm_kv_cache **caches;  /* [n]: this step's rows */
    int32_t *ids;           /* [n] */
    float **logits;         /* [n] */
    int64_t *which;         /* [n]: the generator of each row */
} batch;

static void batch_free(batch *b)
{
    if (b->gens)
        for (int64_t i = 0; i < b->n; i++)
            tfm_generator_free(b->gens[i]);
    tfm__free(b->gens);
    tfm__free(b->caches);
    tfm__free(b->ids);
    tfm__free(b->logits);
    tfm__free(b->which);
}

/* The argument checks that come before any generator. */
static tfm_status check_args(const tfm_module *model,
                             const int32_t *const *prompts,
                             const int64_t *n_prompts, int64_t n,
                             const tfm_generate_options *o,
                             const int32_t *out_ids, const int64_t *n_out)
{
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_DECODER_ONLY, "model");
    if (st != TFM_OK)
        return st;
    if (!prompts || !n_prompts || !n_out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !prompts ? "prompts" : !n_prompts ? "n_prompts"
                                                           : "n_out");
    if (n < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "batch (%lld) must be at least 1", (long long)n);
    if ((st = tfm__check_new_tokens(o->max_new_tokens, o->min_new_tokens, 0)))
        return st;
    if (o->callback)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "options->callback is not supported by "
                         "tfm_model_generate_batch (it has no sequence "
                         "argument)");
    if (o->cache)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "options->cache is for one sequence: "
                         "tfm_model_generate_batch keeps a cache per "
                         "sequence");
    if (o->max_new_tokens > 0 && !out_ids)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out_ids is NULL");
    if (n > INT64_MAX / 64 ||
        (o->max_new_tokens > 0 && n > INT64_MAX / 8 / o->max_new_tokens))
        return tfm__fail(TFM_ERR_OVERFLOW,
                         "batch (%lld) * max_new_tokens (%lld) overflows",
                         (long long)n, (long long)o->max_new_tokens);
    for (int64_t i = 0; i < n; i++)
        if (!prompts[i])
            return tfm__fail(TFM_ERR_NULL_ARGUMENT, "prompts[%lld] is NULL",
                             (long long)i);
    return TFM_OK;
}

/* Makes the generators; a failing prompt's message names it. */
static tfm_status start(batch *b, const tfm_module *model,
                        const int32_t *const *prompts,
                        const int64_t *n_prompts,
                        const tfm_generate_options *o)
{
    const size_t n = (size_t)b->n;
    b->gens = tfm__calloc(n, sizeof *b->gens);
    b->caches = tfm__malloc(n * sizeof *b->caches);
    b->ids = tfm__malloc(n * sizeof *b->ids);
    b->logits = tfm__malloc(n * sizeof *b->logits);
    b->which = tfm__malloc(n * sizeof *b->which);
    if (!b->gens || !b->caches || !b->ids || !b->logits || !b->which)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a batch of %lld sequences",
                         (long long)b->n);
    for (int64_t i = 0; i < b->n; i++) {
        tfm_status st = tfm_generator_create(model, prompts[i], n_prompts[i],
                                             o, &b->gens[i]);
        if (st != TFM_OK) {
            char msg[512];
            strncpy(msg, tfm_last_error(), sizeof msg - 1);
            msg[sizeof msg - 1] = '\0';
            return tfm__fail(st, "prompt %lld: %s", (long long)i, msg);
        }
    }
    return TFM_OK;
}

/* One step of every running sequence; *running: whether any still runs. */
static tfm_status step(batch *b, int *running)
{
    int64_t rows = 0;
    for (int64_t i = 0; i < b->n; i++) {
        tfm_kv_cache *c = tfm__generator_pending(b->gens[i], &b->ids[rows],
                                                 &b->logits[rows]);
        if (c) {
            b->caches[rows] = c;
            b->which[rows++] = i;
        }
    }
    tfm_status st;
    if (rows > 0) {
        if ((st = tfm__kv_cache_decode_rows(b->caches, b->ids, rows,
                                            b->logits)) != TFM_OK)
            return st;
        for (int64_t r = 0; r < rows; r++)
            tfm__generator_fed(b->gens[b->which[r]]);
    }
    *running = 0;
    for (int64_t i = 0; i < b->n; i++) {
        tfm_generator *g = b->gens[i];
        int32_t id;
        int produced;
        if (tfm_generator_stop_reason(g) != TFM_STOP_NONE)
            continue;
        if ((st = tfm_generator_next(g, &id, &produced)) != TFM_OK)
            return st;
        if (tfm_generator_stop_reason(g) == TFM_STOP_NONE)
            *running = 1;
    }
    return TFM_OK;
}

tfm_status tfm_model_generate_batch(const tfm_module *model,
                                    const int32_t *const *prompts,
                                    const int64_t *n_prompts, int64_t n,
                                    const tfm_generate_options *options,
                                    int32_t *out_ids, int64_t *n_out,
                                    tfm_stop_reason *reasons)
{
    TFM__PLAN_PIN();
    tfm_generate_options o;
    tfm_status st = tfm__generate_options_read(options, &o);
    if (st != TFM_OK ||
        (st = check_args(model, prompts, n_prompts, n, &o, out_ids, n_out)))
        return st;
    batch b = { .n = n };
    int running = o.max_new_tokens > 0;
    st = start(&b, model, prompts, n_prompts, &o);
    while (st == TFM_OK && running)
        st = step(&b, &running);
    if (st == TFM_OK) {
        const int64_t M = o.max_new_tokens;
        for (int64_t i = 0; i < n; i++) {
            const int64_t k = tfm_generator_count(b.gens[i]);
            if (k > 0)
                memcpy(out_ids + i * M, tfm__generator_ids(b.gens[i]),
                       (size_t)k * sizeof *out_ids);
            n_out[i] = k;
            if (reasons)
                reasons[i] = tfm_generator_stop_reason(b.gens[i]);
        }
    }
    batch_free(&b);
    return st;
}
