/* Text generation from a decoder-only model (model.h): the tfm_generator,
 * one token per step, and its two loops, tfm_model_generate_v2 (options,
 * a per-token callback) and tfm_model_generate (sampling only, as since
 * 1.0).  A prefill of the prompt into a KV cache, then one token at a time;
 * past the context (model.h: tfm_past_context) a rolling cache, a
 * half-window shift, or a re-encode of the last context_length tokens.
 *
 * One step (tfm_generator_next):
 *   1. if the previous token is not yet in the cache, run it through
 *      (one position; past the context as past_context says: feed);
 *   2. copy the logits and apply the processors in Hugging Face's order
 *      (logits_processors.h): repetition penalty, no-repeat n-grams,
 *      the EOS mask of min_new_tokens;
 *   3. tfm_sample;
 *   4. stop conditions: EOS ids, stop strings on the decoded bytes (a tail
 *      of the generated text as long as the longest stop string, so that
 *      a match may span tokens), max_new_tokens;
 *   5. commit: append the id.  Until then nothing is changed, so a failing
 *      step leaves the generator as it was. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "transformer/tokenizer.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/lifetime.h"
#include "base/self_sized.h"
#include "generation/logits_processors.h"
#include "models/model_impl.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"

/* The default seed: the bindings' and transformer-generate's. */
#define DEFAULT_SEED 42

struct tfm_generator {
    const tfm__model *m;
    /* What the generator refers to, retained (base/lifetime.h): the model,
     * the tokenizer of the stop strings, the caller's options->cache.
     * Freed before the generator, each stays until tfm_generator_free,
     * and tfm_generator_next refuses (check_owners).  NULL: not held. */
    tfm_module *held_model;
    tfm__lifetime *held_tokenizer;
    tfm__lifetime *held_cache;
    tfm_kv_cache *cache;
    tfm_tensor *logits;        /* [1, vocab]: the next token's logits */
    float *scores;             /* [vocab]: processed copy */
    unsigned char *seen;       /* [vocab]: repetition-penalty scratch */
    int32_t *seq;              /* prompt then generated ids */
    int64_t n_prompt, len;     /* len = n_prompt + generated */
    int pending;               /* seq[len-1] not yet in the cache */
    int rolling;               /* the cache rolls (tfm_past_context) */
    int owns_cache;            /* 0: the caller's (options.cache) */
    int64_t reused;            /* prompt positions taken from it */
    tfm_generate_options o;    /* copied; the pointers below replace its */
    tfm_rng rng;
    int32_t *eos;              /* [o.n_eos_token_ids] */
    char **stops;              /* [o.n_stop_strings], NUL-terminated */
    size_t max_stop;           /* longest stop string's bytes */
    char *tail;                /* the generated text's last max_stop - 1
                                * bytes (of tail_len) */
    size_t tail_len;
    char *work;                /* scratch: tail + one token's bytes */
    size_t work_cap;
    tfm_stop_reason reason;
};

void tfm_generate_options_init(tfm_generate_options *options)
{
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->max_new_tokens = 100;
    options->sampling = tfm_sampling_default();
    options->seed = DEFAULT_SEED;
    options->repetition_penalty = 1.0f;
}

/* The first members a caller must have. */
#define OPTIONS_MIN_SIZE \
    (offsetof(tfm_generate_options, max_new_tokens) + sizeof(int64_t))

tfm_status tfm__generate_options_read(const tfm_generate_options *pub,
                                      tfm_generate_options *o)
{
    tfm_generate_options_init(o);
    return tfm__self_sized_read(o, sizeof *o, pub, OPTIONS_MIN_SIZE,
                                "tfm_generate_options_init");
}

tfm_status tfm__check_new_tokens(int64_t max_new_tokens,
                                 int64_t min_new_tokens, int64_t lowest_max)
{
    if (max_new_tokens < lowest_max || max_new_tokens > TFM_MAX_NEW_TOKENS)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "max_new_tokens (%lld) must be in %lld .. "
                         "TFM_MAX_NEW_TOKENS (%lld)",
                         (long long)max_new_tokens, (long long)lowest_max,
                         (long long)TFM_MAX_NEW_TOKENS);
    if (min_new_tokens < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "min_new_tokens (%lld) must be at least 0",
                         (long long)min_new_tokens);
    return TFM_OK;
}

static tfm_status check_options(const tfm__model *m,
                                const tfm_generate_options *o)
{
    const int64_t V = m->config.vocab_size;
    tfm_status st = tfm__check_new_tokens(o->max_new_tokens,
                                          o->min_new_tokens, 0);
    if (st != TFM_OK)
        return st;
    if (!(o->repetition_penalty > 0.0f) || isinf(o->repetition_penalty))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "repetition_penalty (%g) must be positive and "
                         "finite (1: no penalty)",
                         (double)o->repetition_penalty);
    if ((unsigned)o->past_context >= (unsigned)TFM_PAST_CONTEXT_COUNT)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "past_context (%d) is not a tfm_past_context value",
                         (int)o->past_context);
    if (o->cache) {
        if (tfm__kv_cache_model(o->cache) != m)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "options->cache belongs to another model");
        if (tfm_kv_cache_capacity(o->cache) != m->config.context_length)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "options->cache holds %lld positions: a "
                             "generator's cache holds the context length "
                             "%lld", (long long)tfm_kv_cache_capacity(o->cache),
                             (long long)m->config.context_length);
        if (tfm__kv_cache_rolls(o->cache) &&
            o->past_context == TFM_PAST_CONTEXT_REENCODE)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "options->cache is a rolling cache, and "
                             "past_context is TFM_PAST_CONTEXT_REENCODE");
        /* AUTO rolls on this model (the generator's own cache would):
         * a plain cache would shift instead, other tokens past the
         * context than a generation without it. */
        if (!tfm__kv_cache_rolls(o->cache) &&
            o->past_context == TFM_PAST_CONTEXT_AUTO && tfm__model_rolls(m))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "options->cache is not a rolling cache, and "
                             "past_context TFM_PAST_CONTEXT_AUTO rolls on "
                             "this model: make it with "
                             "tfm_kv_cache_create_rolling, or use "
                             "TFM_PAST_CONTEXT_REENCODE");
    }
    if (o->no_repeat_ngram_size < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "no_repeat_ngram_size (%lld) must be at least 0",
                         (long long)o->no_repeat_ngram_size);
    if (o->n_eos_token_ids < 0 || o->n_stop_strings < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_eos_token_ids (%lld) and n_stop_strings (%lld) "
                         "must be at least 0", (long long)o->n_eos_token_ids,
                         (long long)o->n_stop_strings);
    if (o->n_eos_token_ids > 0 && !o->eos_token_ids)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "eos_token_ids is NULL");
    for (int64_t i = 0; i < o->n_eos_token_ids; i++)
        if (o->eos_token_ids[i] < 0 || o->eos_token_ids[i] >= V)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "eos_token_ids[%lld] = %d is outside the "
                             "vocabulary (0 .. %lld)", (long long)i,
                             (int)o->eos_token_ids[i], (long long)(V - 1));
    if (o->n_stop_strings > 0) {
        if (!o->stop_strings)
            return tfm__fail(TFM_ERR_NULL_ARGUMENT, "stop_strings is NULL");
        if (!o->tokenizer)
            return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                             "stop strings need a tokenizer to decode the "
                             "tokens (options->tokenizer is NULL)");
        if (tfm_tokenizer_vocab_size(o->tokenizer) != V)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "the tokenizer has %lld tokens, the model %lld",
                             (long long)tfm_tokenizer_vocab_size(o->tokenizer),
                             (long long)V);
        for (int64_t i = 0; i < o->n_stop_strings; i++)
            if (!o->stop_strings[i] || !o->stop_strings[i][0])
                return tfm__fail(o->stop_strings[i] ? TFM_ERR_INVALID_ARGUMENT
                                                    : TFM_ERR_NULL_ARGUMENT,
                                 "stop_strings[%lld] is %s", (long long)i,
                                 o->stop_strings[i] ? "empty" : "NULL");
    }
    if (!o->sampling.greedy) {
        /* tfm_sample's own checks, on a one-token row. */
        const float zero = 0.0f;
        tfm_rng r = { 0 };
        int32_t id;
        tfm_status st = tfm_sample(&zero, 1, &o->sampling, &r, &id);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

void tfm_generator_free(tfm_generator *g)
{
    if (!g)
        return;
    if (g->owns_cache)
        tfm_kv_cache_free(g->cache);
    if (g->held_cache)
        tfm__lifetime_release(g->held_cache);
    if (g->held_tokenizer)
        tfm__lifetime_release(g->held_tokenizer);
    tfm__module_release(g->held_model);
    tfm_tensor_free(g->logits);
    tfm__free(g->scores);
    tfm__free(g->seen);
    tfm__free(g->seq);
    tfm__free(g->eos);
    if (g->stops)
        for (int64_t i = 0; i < g->o.n_stop_strings; i++)
            tfm__free(g->stops[i]);
    tfm__free(g->stops);
    tfm__free(g->tail);
    tfm__free(g->work);
    tfm__free(g);
}

/* Retains what g refers to (model, stop-string tokenizer, caller's cache):
 * TFM_OK, or TFM_ERR_INVALID_ARGUMENT for one whose free was already
 * called (what is retained so far is released by tfm_generator_free). */
static tfm_status hold_owners(tfm_generator *g)
{
    const char *what = "tfm_generator_create";
    if (!(g->held_model = tfm__module_retain(&g->m->base, what)))
        return TFM_ERR_INVALID_ARGUMENT;
    if (g->o.n_stop_strings > 0) {
        tfm__lifetime *l = tfm__lifetime_of(g->o.tokenizer);
        if (!tfm__lifetime_retain(l))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: options->tokenizer was already freed",
                             what);
        g->held_tokenizer = l;
    }
    if (g->o.cache) {
        tfm__lifetime *l = tfm__lifetime_of(g->o.cache);
        if (!tfm__lifetime_retain(l))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: options->cache was already freed", what);
        g->held_cache = l;
    }
    return TFM_OK;
}

/* TFM_OK, or TFM_ERR_INVALID_ARGUMENT naming the first thing g refers to
 * whose free was called since tfm_generator_create. */
static tfm_status check_owners(const tfm_generator *g, const char *what)
{
    const char *freed =
        tfm__module_freed(g->held_model)
            ? "the model this generator refers to has been freed "
              "(tfm_module_free)"
        : g->held_tokenizer && tfm__lifetime_closed(g->held_tokenizer)
            ? "the tokenizer of its stop strings (options->tokenizer) has "
              "been freed (tfm_tokenizer_free)"
        : g->held_cache && tfm__lifetime_closed(g->held_cache)
            ? "the KV cache it uses (options->cache) has been freed "
              "(tfm_kv_cache_free)"
            : NULL;
    if (freed)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: %s; nothing was changed", what, freed);
    return TFM_OK;
}

/* Allocates everything after the checks; fails only with out-of-memory. */
static tfm_status allocate(tfm_generator *g, int64_t V)
{
    const tfm_generate_options *o = &g->o;
    const int64_t total = g->n_prompt + o->max_new_tokens;
    g->scores = tfm__malloc((size_t)V * sizeof *g->scores);
    g->seen = tfm__calloc((size_t)V, 1);
    g->seq = tfm__malloc((size_t)total * sizeof *g->seq);
    if (!g->scores || !g->seen || !g->seq)
        return TFM_ERR_OUT_OF_MEMORY;
    if (o->n_eos_token_ids > 0) {
        g->eos = tfm__malloc((size_t)o->n_eos_token_ids * sizeof *g->eos);
        if (!g->eos)
            return TFM_ERR_OUT_OF_MEMORY;
        memcpy(g->eos, o->eos_token_ids,
               (size_t)o->n_eos_token_ids * sizeof *g->eos);
    }
    if (o->n_stop_strings > 0) {
        g->stops = tfm__calloc((size_t)o->n_stop_strings, sizeof *g->stops);
        if (!g->stops)
            return TFM_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < o->n_stop_strings; i++) {
            g->stops[i] = tfm__strdup(o->stop_strings[i]);
            if (!g->stops[i])
                return TFM_ERR_OUT_OF_MEMORY;
            size_t n = strlen(g->stops[i]);
            if (n > g->max_stop)
                g->max_stop = n;
        }
        g->tail = tfm__malloc(g->max_stop);
        g->work_cap = g->max_stop + 64;
        g->work = tfm__malloc(g->work_cap);
        if (!g->tail || !g->work)
            return TFM_ERR_OUT_OF_MEMORY;
    }
    /* The pointers of the copy are the generator's own from now on. */
    g->o.eos_token_ids = g->eos;
    g->o.stop_strings = (const char *const *)g->stops;
    return TFM_OK;
}

/* tfm_generator_create.  A prompt longer than the context is taken as its
 * last context_length tokens (tfm_model_generate's contract since 1.0,
 * transformer-generate's and llama.cpp's): every id is checked, then the
 * head is dropped, so that the generator (cache, processors, stop
 * strings) is exactly that of the tail alone. */
static tfm_status generator_create(const tfm_module *model,
                                   const int32_t *prompt, int64_t n_prompt,
                                   const tfm_generate_options *options,
                                   tfm_generator **out)
{
    tfm_status st = tfm__model_check_with(model, 1u << TFM_ARCH_DECODER_ONLY,
                                          out, "out");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t ctx = m->config.context_length, V = m->config.vocab_size;
    if (n_prompt < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "the prompt is empty (n_prompt = %lld): give at "
                         "least one token", (long long)n_prompt);
    if ((st = tfm__model_check_ids(m, prompt, n_prompt, "prompt")))
        return st;
    if (n_prompt > ctx) {
        prompt += n_prompt - ctx;
        n_prompt = ctx;
    }
    tfm_generate_options o;
    if ((st = tfm__generate_options_read(options, &o)) ||
        (st = check_options(m, &o)))
        return st;
    if (n_prompt > INT64_MAX / 8 - o.max_new_tokens)
        return tfm__fail(TFM_ERR_OVERFLOW, "sequence length overflows");

    tfm_generator *g = tfm__calloc(1, sizeof *g);
    if (!g)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a generator");
    g->m = m;
    g->o = o;
    g->n_prompt = n_prompt;
    if ((st = hold_owners(g)) != TFM_OK) {
        tfm_generator_free(g);
        return st;
    }
    const int64_t shape[2] = { 1, V };
    if ((st = allocate(g, V)) != TFM_OK) {
        tfm_generator_free(g);
        return tfm__fail(st, "cannot allocate a generator for %lld + %lld "
                             "tokens", (long long)n_prompt,
                         (long long)o.max_new_tokens);
    }
    int64_t reused = 0;
    if (o.cache) {
        g->cache = o.cache;
        g->rolling = tfm__kv_cache_rolls(o.cache);
        if ((st = tfm_tensor_create(2, shape, &g->logits))) {
            tfm_generator_free(g);
            return st;
        }
        /* Keep the common prefix, run the rest (at least one token). */
        reused = tfm__kv_cache_common_prefix(o.cache, prompt, n_prompt - 1);
        tfm__kv_cache_truncate(o.cache, reused);
    } else {
        /* Room for what this generation feeds: the prompt and
         * every new token but the last, the context at most (a model of
         * 131072 positions generating 20 tokens reserves 20 or so). */
        const int64_t fed = n_prompt + o.max_new_tokens - 1;
        const int64_t cap = fed >= ctx ? ctx : fed > n_prompt ? fed : n_prompt;
        g->owns_cache = 1;
        g->rolling = cap == ctx && o.past_context == TFM_PAST_CONTEXT_AUTO &&
                     tfm__model_rolls(m);
        if ((st = g->rolling
                      ? tfm__kv_cache_create_rolling(model, cap, &g->cache)
                      : tfm_kv_cache_create(model, cap, &g->cache)) ||
            (st = tfm_tensor_create(2, shape, &g->logits))) {
            tfm_generator_free(g);
            return st;
        }
    }
    if ((st = tfm_kv_cache_decode(g->cache, prompt + reused, n_prompt - reused,
                                  g->logits))) {
        tfm_generator_free(g);
        return st;
    }
    memcpy(g->seq, prompt, (size_t)n_prompt * sizeof *g->seq);
    g->len = n_prompt;
    g->reused = reused;
    tfm_rng_seed(&g->rng, o.seed);
    if (o.max_new_tokens == 0)
        g->reason = TFM_STOP_MAX_NEW_TOKENS;
    *out = g;
    return TFM_OK;
}

tfm_status tfm_generator_create(const tfm_module *model,
                                const int32_t *prompt, int64_t n_prompt,
                                const tfm_generate_options *options,
                                tfm_generator **out)
{
    TFM__PLAN_PIN();
    return generator_create(model, prompt, n_prompt, options, out);
}

/* Step 1: the logits after seq[len-1].  The cache always holds a run of
 * tokens ending at seq[len-2] (a rolling one: its last ctx - 1 at most),
 * except after a failed re-encode, which leaves it empty. */
static tfm_status feed(tfm_generator *g)
{
    const int64_t ctx = g->m->config.context_length;
    tfm_kv_cache *c = g->cache;
    const int64_t held = tfm_kv_cache_length(c);
    if (g->rolling || (held > 0 && held < ctx))
        return tfm_kv_cache_decode(c, g->seq + g->len - 1, 1, g->logits);
    /* Re-encode the last `keep` tokens afresh at positions 0 ..: the whole
     * window (TFM_PAST_CONTEXT_REENCODE), or half of it.  A failure leaves
     * the cache empty, and the next try re-encodes. */
    int64_t keep = g->o.past_context == TFM_PAST_CONTEXT_REENCODE
                       ? ctx : ctx - ctx / 2;
    if (keep > g->len)
        keep = g->len;
    tfm_kv_cache_reset(c);
    return tfm_kv_cache_decode(c, g->seq + g->len - keep, keep, g->logits);
}

/* Step 4 for stop strings: whether the text of id, after the tail, ends a
 * stop string's occurrence inside it; *work_len the bytes of tail + text
 * in g->work.  Errors of tfm_tokenizer_decode_v2 and out-of-memory. */
static tfm_status match_stop(tfm_generator *g, int32_t id, int *hit,
                             size_t *work_len)
{
    const struct tfm_tokenizer *tok = g->o.tokenizer;
    size_t n = 0;
    memcpy(g->work, g->tail, g->tail_len);
    tfm_status st = tfm_tokenizer_decode_v2(tok, &id, 1, 0,
                                            g->work + g->tail_len,
                                            g->work_cap - g->tail_len, &n);
    if (st == TFM_ERR_CAPACITY) {
        size_t cap = g->tail_len + n + 1;
        char *w = tfm__realloc(g->work, cap);
        if (!w)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "cannot decode token %d", (int)id);
        g->work = w;
        g->work_cap = cap;
        st = tfm_tokenizer_decode_v2(tok, &id, 1, 0, g->work + g->tail_len,
                                     g->work_cap - g->tail_len, &n);
    }
    if (st != TFM_OK)
        return st;
    const size_t total = g->tail_len + n;
    *hit = 0;
    for (int64_t i = 0; i < g->o.n_stop_strings && !*hit; i++) {
        const char *s = g->stops[i];
        const size_t k = strlen(s);
        /* Occurrences ending after the tail: start > tail_len - k. */
        size_t start = g->tail_len >= k ? g->tail_len - k + 1 : 0;
        for (; start + k <= total; start++)
            if (memcmp(g->work + start, s, k) == 0) {
                *hit = 1;
                break;
            }
    }
    *work_len = total;
    return TFM_OK;
}

tfm_status tfm_generator_next(tfm_generator *g, int32_t *id, int *produced)
{
    TFM__PLAN_PIN();
    if (!g || !id || !produced)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !g ? "generator" : !id ? "id" : "produced");
    tfm_status st = check_owners(g, "tfm_generator_next");
    if (st != TFM_OK)
        return st;
    if (g->reason != TFM_STOP_NONE) {
        *produced = 0;
        return TFM_OK;
    }
    const tfm_generate_options *o = &g->o;
    const int64_t V = g->m->config.vocab_size;
    const int64_t n_new = g->len - g->n_prompt;
    if (g->pending) {
        if ((st = feed(g)) != TFM_OK)
            return st;
        g->pending = 0;
    }
    float *x = g->scores;
    memcpy(x, g->logits->data, (size_t)V * sizeof *x);
    if (o->repetition_penalty != 1.0f)
        tfm__repetition_penalty(x, g->seq, g->len, o->repetition_penalty,
                                g->seen);
    tfm__no_repeat_ngram(x, g->seq, g->len, o->no_repeat_ngram_size);
    if (n_new < o->min_new_tokens)
        for (int64_t i = 0; i < o->n_eos_token_ids; i++)
            x[g->eos[i]] = -INFINITY;
    tfm_rng rng = g->rng;
    int32_t next;
    if ((st = tfm_sample(x, V, &o->sampling, &rng, &next)) != TFM_OK)
        return st;

    tfm_stop_reason reason = TFM_STOP_NONE;
    for (int64_t i = 0; i < o->n_eos_token_ids; i++)
        if (next == g->eos[i])
            reason = TFM_STOP_EOS;
    size_t work_len = 0;
    if (o->n_stop_strings > 0) {
        int hit = 0;
        if ((st = match_stop(g, next, &hit, &work_len)) != TFM_OK)
            return st;
        if (hit && reason == TFM_STOP_NONE)
            reason = TFM_STOP_STRING;
    }
    if (reason == TFM_STOP_NONE && n_new + 1 == o->max_new_tokens)
        reason = TFM_STOP_MAX_NEW_TOKENS;

    /* Commit. */
    if (o->n_stop_strings > 0) {
        const size_t keep =
            work_len < g->max_stop - 1 ? work_len : g->max_stop - 1;
        memcpy(g->tail, g->work + work_len - keep, keep);
        g->tail_len = keep;
    }
    g->rng = rng;
    g->seq[g->len++] = next;
    g->pending = 1;
    g->reason = reason;
    *id = next;
    *produced = 1;
    return TFM_OK;
}

tfm_kv_cache *tfm__generator_pending(tfm_generator *g, int32_t *id,
                                     float **logits)
{
    const int64_t held = tfm_kv_cache_length(g->cache);
    if (!g->pending || g->reason != TFM_STOP_NONE ||
        !(g->rolling || (held > 0 && held < g->m->config.context_length)))
        return NULL;
    *id = g->seq[g->len - 1];
    *logits = g->logits->data;
    return g->cache;
}

void tfm__generator_fed(tfm_generator *g)
{
    g->pending = 0;
}

const int32_t *tfm__generator_ids(const tfm_generator *g)
{
    return g->seq + g->n_prompt;
}

tfm_stop_reason tfm_generator_stop_reason(const tfm_generator *g)
{
    return g ? g->reason : TFM_STOP_NONE;
}

int64_t tfm_generator_reused_tokens(const tfm_generator *generator)
{
    return generator ? generator->reused : 0;
}

int64_t tfm_generator_count(const tfm_generator *g)
{
    return g ? g->len - g->n_prompt : 0;
}

tfm_status tfm_model_generate_v2(const tfm_module *model,
                                 const int32_t *prompt, int64_t n_prompt,
                                 const tfm_generate_options *options,
                                 int32_t *out_ids, int64_t capacity,
                                 int64_t *n_out, tfm_stop_reason *reason)
{
    TFM__PLAN_PIN();
    tfm_generate_options o;
    tfm_status st = tfm__generate_options_read(options, &o);
    if (st != TFM_OK)
        return st;
    if (!n_out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "n_out is NULL");
    if (o.max_new_tokens > 0 && !out_ids)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out_ids is NULL");
    if (capacity < o.max_new_tokens)
        return tfm__fail(TFM_ERR_CAPACITY,
                         "out_ids holds %lld ids, max_new_tokens is %lld",
                         (long long)capacity, (long long)o.max_new_tokens);
    tfm_generator *g = NULL;
    if ((st = generator_create(model, prompt, n_prompt, &o, &g)))
        return st;
    for (;;) {
        int32_t id;
        int produced;
        if ((st = tfm_generator_next(g, &id, &produced)) != TFM_OK)
            goto done;
        if (!produced)
            break;
        if (o.callback) {
            const int r =
                o.callback(o.callback_data, id, tfm_generator_count(g) - 1);
            if (r < 0) {
                st = tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                               "the token callback failed (returned %d) at "
                               "token %lld", r,
                               (long long)(tfm_generator_count(g) - 1));
                goto done;
            }
            if (r > 0 && g->reason == TFM_STOP_NONE)
                g->reason = TFM_STOP_CALLBACK;
        }
    }
    const int64_t n = tfm_generator_count(g);
    if (n > 0)
        memcpy(out_ids, g->seq + g->n_prompt, (size_t)n * sizeof *out_ids);
    *n_out = n;
    if (reason)
        *reason = g->reason;
done:
    tfm_generator_free(g);
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
    if (n_prompt < 1 || max_new < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_prompt (%lld) must be at least 1 and max_new "
                         "(%lld) at least 0", (long long)n_prompt,
                         (long long)max_new);
    if (max_new > TFM_MAX_NEW_TOKENS)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "max_new (%lld) exceeds TFM_MAX_NEW_TOKENS (%lld)",
                         (long long)max_new, (long long)TFM_MAX_NEW_TOKENS);
    if ((st = tfm__model_check_ids((const tfm__model *)model, prompt,
                                   n_prompt, "prompt")))
        return st;
    if (max_new > 0 && !out_ids)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out_ids is NULL");
    if (max_new == 0)
        return TFM_OK;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = max_new;
    if (sampling)
        o.sampling = *sampling;
    o.seed = seed;
    o.past_context = TFM_PAST_CONTEXT_REENCODE;   /* 1.0's contract */
    tfm_generator *g = NULL;
    if ((st = generator_create(model, prompt, n_prompt, &o, &g)))
        return st;
    int32_t id;
    int produced = 1;
    while (produced && (st = tfm_generator_next(g, &id, &produced)) == TFM_OK)
        ;
    if (st == TFM_OK)
        memcpy(out_ids, g->seq + g->n_prompt,
               (size_t)max_new * sizeof *out_ids);
    tfm_generator_free(g);
    return st;
}
