/* Beam search (model.h: tfm_model_beam_search), Hugging Face's
 * BeamSearchScorer / BeamHypotheses semantics for one prompt.
 *
 * The running beams are rows: beam j's new tokens seq[j * M ..], its summed
 * log-probability score[j] and its next-token logits logp[j * V ..].  Per
 * step the 2 * num_beams best (beam, token) candidates are kept in a small
 * sorted array (insertion; the flat index beam * V + token breaks ties,
 * lower first); the finished hypotheses live in a list that keeps HF's
 * insertion order (deleting the worst shifts the rest), which decides the
 * order of equal scores at the end.
 *
 * Beam j's positions are in its own cache slot, slot[j] (num_beams slots,
 * made once): decoder-only models, a KV cache; encoder-decoder models,
 * the decoder's self-attention keys and values.  On reorder the first
 * child of each parent takes its parent's slot as it is; each further
 * child (a fork) gets a copy of it, written into the slot of a beam that
 * has no child (there are exactly as many of those as forks), so only
 * forks cost a copy.  Encoder-decoder models encode the source once and
 * project every decoder layer's cross-attention keys and values of it
 * once, shared by the beams (as transformers' generate keeps them in
 * past_key_values); each step then runs the decoder on the beams' new
 * tokens only, all beams in one pass (one product per projection). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/self_sized.h"
#include "models/model_impl.h"
#include "base/parallel.h"
#include "kernels/softmax.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

/* The first members a caller must have. */
#define OPTIONS_MIN_SIZE \
    (offsetof(tfm_beam_search_options, num_beams) + sizeof(int64_t))

/* HF's initial score of beams 1.. (and BeamHypotheses.worst_score). */
#define FIRST_STEP_SCORE (-1e9f)
#define WORST_SCORE_START 1e9

void tfm_beam_search_options_init(tfm_beam_search_options *options)
{
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->num_beams = 4;
    options->max_new_tokens = 20;
    options->length_penalty = 1.0;
    options->early_stopping = TFM_EARLY_STOPPING_FALSE;
    options->num_return_sequences = 1;
    options->eos_token_id = -1;
    options->pad_token_id = -1;
    options->decoder_start_token_id = -1;
    options->forced_eos_token_id = -1;
}

static tfm_status read_options(const tfm_beam_search_options *pub,
                               tfm_beam_search_options *o)
{
    tfm_beam_search_options_init(o);
    return tfm__self_sized_read(o, sizeof *o, pub, OPTIONS_MIN_SIZE,
                                "tfm_beam_search_options_init");
}

static tfm_status check_options(const tfm__model *m, int64_t n_prompt,
                                const tfm_beam_search_options *o)
{
    const int64_t V = m->config.vocab_size, ctx = m->config.context_length;
    const int enc_dec = m->config.architecture == TFM_ARCH_ENCODER_DECODER;
    if (o->num_beams < 1 || o->num_beams > V)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "num_beams (%lld) must be in 1 .. the vocabulary "
                         "size %lld", (long long)o->num_beams, (long long)V);
    if (o->num_return_sequences < 1 ||
        o->num_return_sequences > o->num_beams)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "num_return_sequences (%lld) must be in 1 .. "
                         "num_beams (%lld)",
                         (long long)o->num_return_sequences,
                         (long long)o->num_beams);
    tfm_status st = tfm__check_new_tokens(o->max_new_tokens,
                                          o->min_new_tokens, 1);
    if (st != TFM_OK)
        return st;
    if (!isfinite(o->length_penalty))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "length_penalty (%g) must be finite",
                         o->length_penalty);
    if (o->early_stopping != TFM_EARLY_STOPPING_FALSE &&
        o->early_stopping != TFM_EARLY_STOPPING_TRUE &&
        o->early_stopping != TFM_EARLY_STOPPING_NEVER)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "early_stopping (%d) must be 0 (False), 1 (True) "
                         "or 2 (\"never\")", o->early_stopping);
    if (o->eos_token_id < -1 || o->eos_token_id >= V)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "eos_token_id %d is outside the vocabulary (0 .. "
                         "%lld; -1: none)", (int)o->eos_token_id,
                         (long long)(V - 1));
    if (o->n_suppress_tokens < 0 ||
        (o->n_suppress_tokens > 0 && !o->suppress_tokens))
        return tfm__fail(o->n_suppress_tokens < 0 ? TFM_ERR_INVALID_ARGUMENT
                                                  : TFM_ERR_NULL_ARGUMENT,
                         "n_suppress_tokens (%lld) must be >= 0, with "
                         "suppress_tokens non-NULL when > 0",
                         (long long)o->n_suppress_tokens);
    if (o->forced_eos_token_id < -1 || o->forced_eos_token_id >= V)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "forced_eos_token_id %d is outside the vocabulary "
                         "(0 .. %lld; -1: none)", (int)o->forced_eos_token_id,
                         (long long)(V - 1));
    for (int64_t i = 0; i < o->n_suppress_tokens; i++)
        if (o->suppress_tokens[i] < 0 || o->suppress_tokens[i] >= V)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "suppress_tokens[%lld] = %d is outside the "
                             "vocabulary (0 .. %lld)", (long long)i,
                             (int)o->suppress_tokens[i], (long long)(V - 1));
    if (enc_dec && (o->decoder_start_token_id < 0 ||
                    o->decoder_start_token_id >= V))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "an encoder-decoder model needs a "
                         "decoder_start_token_id in 0 .. %lld (got %d)",
                         (long long)(V - 1), (int)o->decoder_start_token_id);
    /* A decoder-only prompt longer than the context is cut to its last
     * context_length tokens by the caller (tfm_generator's contract), and
     * past the context the beams go on as tfm_generator's do (model.h:
     * tfm_past_context, AUTO; feed_beam).  An encoder-decoder model has
     * neither: the encoder reads the whole source at positions 0 ..
     * context_length - 1, every target token attends to all of it, and
     * the decoder's own positions end there too. */
    if (enc_dec && n_prompt > ctx)
        return tfm__fail(TFM_ERR_CAPACITY,
                         "the source has %lld tokens, more than the context "
                         "length %lld: an encoder-decoder model reads its "
                         "whole source at once and cannot drop any of it "
                         "(split the source, or cut it yourself)",
                         (long long)n_prompt, (long long)ctx);
    if (enc_dec && o->max_new_tokens > ctx)
        return tfm__fail(TFM_ERR_CAPACITY,
                         "the decoder start token and max_new_tokens (%lld) "
                         "- 1 exceed the context length %lld: an "
                         "encoder-decoder model's target does not slide "
                         "past its context", (long long)o->max_new_tokens,
                         (long long)ctx);
    return TFM_OK;
}

/* ---- Finished hypotheses (HF's BeamHypotheses) --------------------------- */

typedef struct hypotheses {
    int64_t capacity;      /* num_beams (slots: capacity + 1) */
    int64_t M;             /* tokens per slot */
    double length_penalty;
    int early_stopping;
    int32_t *tokens;       /* [capacity + 1, M] */
    int64_t *length;       /* [capacity + 1] */
    double *score;         /* [capacity + 1] */
    unsigned char *used;   /* [capacity + 1] */
    int64_t *order;        /* [capacity + 1]: slots in insertion order */
    int64_t n;
    double worst;
} hypotheses;

/* BeamHypotheses.add: tokens [len] (the new tokens, an EOS included) with
 * summed log-probability sum over generated_len = len tokens. */
static void hyp_add(hypotheses *h, const int32_t *tokens, int64_t len,
                    float sum)
{
    const double score = (double)sum / pow((double)len, h->length_penalty);
    if (!(h->n < h->capacity || score > h->worst))
        return;
    int64_t slot = 0;
    while (h->used[slot])
        slot++;
    h->used[slot] = 1;
    memcpy(h->tokens + slot * h->M, tokens, (size_t)len * sizeof *tokens);
    h->length[slot] = len;
    h->score[slot] = score;
    h->order[h->n++] = slot;
    if (h->n > h->capacity) {
        /* sorted((s, idx)): delete the first, the worst score becomes the
         * second's. */
        int64_t first = 0;
        for (int64_t i = 1; i < h->n; i++)
            if (h->score[h->order[i]] < h->score[h->order[first]])
                first = i;
        double second = INFINITY;
        for (int64_t i = 0; i < h->n; i++)
            if (i != first && h->score[h->order[i]] < second)
                second = h->score[h->order[i]];
        h->used[h->order[first]] = 0;
        memmove(h->order + first, h->order + first + 1,
                (size_t)(h->n - first - 1) * sizeof *h->order);
        h->n--;
        h->worst = second;
    } else if (score < h->worst) {
        h->worst = score;
    }
}

/* BeamHypotheses.is_done with the best candidate's summed log-probability
 * and the generated length (the new token included). */
static int hyp_done(const hypotheses *h, float best, int64_t generated)
{
    if (h->n < h->capacity)
        return 0;
    if (h->early_stopping == TFM_EARLY_STOPPING_TRUE)
        return 1;
    int64_t len = generated;
    if (h->early_stopping == TFM_EARLY_STOPPING_NEVER &&
        h->length_penalty > 0.0)
        len = h->M;
    return h->worst >= (double)best / pow((double)len, h->length_penalty);
}

/* ---- The search ------------------------------------------------------------- */

typedef struct search {
    const tfm__model *m;
    tfm_beam_search_options o;
    int64_t nb, K, M, V;
    float *logp;           /* [nb, V]: logits, then log-probabilities */
    float *score, *next_score;        /* [nb] */
    int32_t *seq, *next_seq;          /* [nb, M] */
    int32_t *token;                   /* [nb] */
    int64_t *parent;                  /* [nb] */
    float *cand_score;                /* [K] */
    int64_t *cand_index;              /* [K]: beam * V + token */
    hypotheses hyp;
    int64_t *slot, *next_slot;        /* [nb]: beam j's cache slot */
    unsigned char *taken;             /* [nb]: reorder scratch, by slot */
    /* decoder-only */
    tfm_kv_cache **cache;             /* [nb]: by slot */
    tfm_tensor *row;                  /* [1, V] */
    const int32_t *prompt;            /* [n_prompt], the caller's */
    int64_t n_prompt;
    int rolling;                      /* the caches roll (tfm__model_rolls) */
    int32_t *window;                  /* [context_length]: a re-encode's */
    /* encoder-decoder */
    float *memory;                    /* [S, d]: the encoder's output */
    int64_t S;
    float *memory_kv;                 /* [n_layers, S, 2 kv]: the decoder
                                       * layers' cross-attention keys and
                                       * values of it */
    float *dec_keys, *dec_values;     /* [nb, n_layers, M, kv] each, by
                                       * slot: the decoder's self-attention
                                       * cache (M positions: the start token
                                       * and M - 1 new ones) */
    int64_t dec_layers, dec_kv;       /* n_layers, kv (= d_model: decoder
                                       * layers have the default variant) */
    tfm__cached_seq *seqs;            /* [nb]: a step's views of the slots */
    float *x;                         /* [nb, d]: a step's hidden states */
} search;

static void search_free(search *s)
{
    if (s->cache)
        for (int64_t j = 0; j < s->nb; j++)
            tfm_kv_cache_free(s->cache[j]);
    tfm__free(s->cache);
    tfm__free(s->slot);
    tfm__free(s->next_slot);
    tfm__free(s->taken);
    tfm_tensor_free(s->row);
    tfm__free(s->logp);
    tfm__free(s->score);
    tfm__free(s->next_score);
    tfm__free(s->seq);
    tfm__free(s->next_seq);
    tfm__free(s->token);
    tfm__free(s->parent);
    tfm__free(s->cand_score);
    tfm__free(s->cand_index);
    tfm__free(s->hyp.tokens);
    tfm__free(s->hyp.length);
    tfm__free(s->hyp.score);
    tfm__free(s->hyp.used);
    tfm__free(s->hyp.order);
    tfm__free(s->memory);
    tfm__free(s->memory_kv);
    tfm__free(s->dec_keys);
    tfm__free(s->dec_values);
    tfm__free(s->seqs);
    tfm__free(s->x);
    tfm__free(s->window);
}

/* Everything the search needs, once; out-of-memory (message set) or the
 * errors of tfm_kv_cache_create. */
static tfm_status search_alloc(search *s, int64_t n_prompt)
{
    const int64_t nb = s->nb, M = s->M, V = s->V;
    const int64_t d = s->m->config.layer.d_model;
    const int64_t dims_logp[2] = { nb, V }, dims_seq[2] = { nb + 1, M };
    int64_t n_logp, n_seq;
    if (!tfm__checked_numel(dims_logp, 2, sizeof(float), &n_logp) ||
        !tfm__checked_numel(dims_seq, 2, sizeof(int32_t), &n_seq))
        return tfm__fail(TFM_ERR_OVERFLOW, "beam search buffers overflow");
    s->logp = tfm__malloc((size_t)n_logp * sizeof(float));
    s->score = tfm__malloc((size_t)nb * sizeof(float));
    s->next_score = tfm__malloc((size_t)nb * sizeof(float));
    s->seq = tfm__malloc((size_t)n_seq * sizeof(int32_t));
    s->next_seq = tfm__malloc((size_t)n_seq * sizeof(int32_t));
    s->token = tfm__malloc((size_t)nb * sizeof(int32_t));
    s->parent = tfm__malloc((size_t)nb * sizeof(int64_t));
    s->cand_score = tfm__malloc((size_t)s->K * sizeof(float));
    s->cand_index = tfm__malloc((size_t)s->K * sizeof(int64_t));
    s->hyp.tokens = tfm__malloc((size_t)n_seq * sizeof(int32_t));
    s->hyp.length = tfm__malloc((size_t)(nb + 1) * sizeof(int64_t));
    s->hyp.score = tfm__malloc((size_t)(nb + 1) * sizeof(double));
    s->hyp.used = tfm__calloc((size_t)(nb + 1), 1);
    s->hyp.order = tfm__malloc((size_t)(nb + 1) * sizeof(int64_t));
    s->slot = tfm__malloc((size_t)nb * sizeof(int64_t));
    s->next_slot = tfm__malloc((size_t)nb * sizeof(int64_t));
    s->taken = tfm__calloc((size_t)nb, 1);
    if (!s->logp || !s->score || !s->next_score || !s->seq ||
        !s->next_seq || !s->token || !s->parent || !s->cand_score ||
        !s->cand_index || !s->hyp.tokens || !s->hyp.length ||
        !s->hyp.score || !s->hyp.used || !s->hyp.order || !s->slot ||
        !s->next_slot || !s->taken)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a beam search of %lld beams",
                         (long long)nb);
    for (int64_t j = 0; j < nb; j++)
        s->slot[j] = j;
    if (s->m->config.architecture == TFM_ARCH_DECODER_ONLY) {
        const int64_t ctx = s->m->config.context_length;
        const int64_t cap = n_prompt + M - 1 < ctx ? n_prompt + M - 1 : ctx;
        const int64_t shape[2] = { 1, V };
        s->rolling = cap == ctx && tfm__model_rolls(s->m);
        s->cache = tfm__calloc((size_t)nb, sizeof *s->cache);
        s->window = tfm__malloc((size_t)ctx * sizeof(int32_t));
        if (!s->cache || !s->window)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "cannot allocate %lld KV caches",
                             (long long)nb);
        tfm_status st = tfm_tensor_create(2, shape, &s->row);
        for (int64_t j = 0; j < nb && st == TFM_OK; j++)
            st = s->rolling ? tfm__kv_cache_create_rolling(&s->m->base, cap,
                                                           &s->cache[j])
                            : tfm_kv_cache_create(&s->m->base, cap,
                                                  &s->cache[j]);
        return st;
    }
    const tfm__stack *dec = s->m->decoder;
    s->S = n_prompt;
    s->dec_layers = dec->n_layers;
    s->dec_kv = d;
    const int64_t dims_mem[3] = { dec->n_layers, n_prompt, 2 * d };
    const int64_t dims_dec[4] = { nb, dec->n_layers, M, d };
    int64_t n_mem, n_dec;
    if (!tfm__checked_numel(dims_mem, 3, sizeof(float), &n_mem) ||
        !tfm__checked_numel(dims_dec, 4, sizeof(float), &n_dec))
        return tfm__fail(TFM_ERR_OVERFLOW, "beam search buffers overflow");
    s->memory = tfm__malloc((size_t)(n_prompt * d) * sizeof(float));
    s->memory_kv = tfm__malloc((size_t)n_mem * sizeof(float));
    s->dec_keys = tfm__malloc((size_t)n_dec * sizeof(float));
    s->dec_values = tfm__malloc((size_t)n_dec * sizeof(float));
    s->seqs = tfm__malloc((size_t)nb * sizeof *s->seqs);
    s->x = tfm__malloc((size_t)(nb * d) * sizeof(float));
    if (!s->memory || !s->memory_kv || !s->dec_keys || !s->dec_values ||
        !s->seqs || !s->x)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a beam search of %lld beams",
                         (long long)nb);
    return TFM_OK;
}

/* Encoder-decoder: logits rows logp[0 .. B-1] of beams 0 .. B-1 after
 * their token at target position t (tokens [B]; position 0 holds the
 * decoder start token), their slots holding positions 0 .. t-1. */
static tfm_status seq2seq_step(search *s, const int32_t *tokens, int64_t B,
                               int64_t t)
{
    const tfm__model *m = s->m;
    const int64_t per_slot = s->dec_layers * s->M * s->dec_kv;
    for (int64_t b = 0; b < B; b++)
        s->seqs[b] = (tfm__cached_seq){ 1, t, 0,
                                        s->dec_keys + s->slot[b] * per_slot,
                                        s->dec_values + s->slot[b] * per_slot,
                                        s->M * s->dec_kv, NULL };
    tfm__model_embed(m, tokens, B, 1, t, s->x);
    tfm_status st = tfm__stack_run_decoder_cached(m->decoder, s->x, B,
                                                  s->seqs, s->memory_kv,
                                                  s->S);
    return st != TFM_OK ? st : tfm__model_head(m, s->x, B, s->logp);
}

static void copy_slot(search *s, int64_t dst, int64_t src, int64_t t);

/* The first step's logits, beam 0's, in every row, and beam 0's positions
 * in every slot: beams 1.. start as copies of beam 0 (HF's input_ids
 * repeated num_beams times), so one of them taken as a parent (its score
 * -1e9, with fewer than 2 num_beams candidates from beam 0: a tiny
 * vocabulary) continues the same prefix. */
static tfm_status prefill(search *s, const int32_t *prompt, int64_t n_prompt)
{
    const tfm__model *m = s->m;
    const int64_t V = s->V;
    tfm_status st;
    if (m->config.architecture == TFM_ARCH_DECODER_ONLY) {
        if ((st = tfm_kv_cache_decode(s->cache[0], prompt, n_prompt, s->row)))
            return st;
        memcpy(s->logp, s->row->data, (size_t)V * sizeof(float));
    } else {
        const tfm__masks none = { 0 };
        tfm__model_embed(m, prompt, 1, n_prompt, 0, s->memory);
        if ((st = tfm__stack_run(m->encoder, s->memory, 1, n_prompt, NULL, 0,
                                 &none, NULL, 0)))
            return st;
        tfm__stack_memory_kv(m->decoder, s->memory, n_prompt, s->memory_kv);
        if ((st = seq2seq_step(s, &s->o.decoder_start_token_id, 1, 0)))
            return st;
    }
    for (int64_t b = 1; b < s->nb; b++) {
        memcpy(s->logp + b * V, s->logp, (size_t)V * sizeof(float));
        copy_slot(s, b, 0, 1);
    }
    return TFM_OK;
}

/* Slot `dst` <- slot `src`'s positions: a decoder-only KV cache, or the
 * decoder's t cached positions of every layer (t tokens generated). */
static void copy_slot(search *s, int64_t dst, int64_t src, int64_t t)
{
    if (s->cache) {
        tfm__kv_cache_copy(s->cache[dst], s->cache[src]);
        return;
    }
    const int64_t kv = s->dec_kv, per_layer = s->M * kv;
    const int64_t per_slot = s->dec_layers * per_layer;
    for (int64_t i = 0; i < s->dec_layers; i++) {
        const int64_t a = dst * per_slot + i * per_layer;
        const int64_t b = src * per_slot + i * per_layer;
        memcpy(s->dec_keys + a, s->dec_keys + b,
               (size_t)(t * kv) * sizeof(float));
        memcpy(s->dec_values + a, s->dec_values + b,
               (size_t)(t * kv) * sizeof(float));
    }
}

/* slot[j] <- the parent's positions for every new beam j (see the top of
 * the file): first children take their parent's slot, then forks copy
 * theirs into the slots nobody took.  The sources are all taken slots,
 * the destinations untaken ones, so no copy reads a slot already
 * overwritten.  t tokens generated. */
static void reorder_slots(search *s, int64_t t)
{
    const int64_t nb = s->nb;
    memset(s->taken, 0, (size_t)nb);
    for (int64_t j = 0; j < nb; j++) {
        const int64_t p = s->slot[s->parent[j]];
        s->next_slot[j] = -1;
        if (!s->taken[p]) {
            s->taken[p] = 1;
            s->next_slot[j] = p;
        }
    }
    int64_t free_slot = 0;
    for (int64_t j = 0; j < nb; j++) {
        if (s->next_slot[j] >= 0)
            continue;
        while (s->taken[free_slot])
            free_slot++;
        s->next_slot[j] = free_slot++;
        copy_slot(s, s->next_slot[j], s->slot[s->parent[j]], t);
    }
    int64_t *swap = s->slot;
    s->slot = s->next_slot;
    s->next_slot = swap;
}

/* Beam j's logits after its last token (t tokens generated; the cache
 * holds a run of the prompt and seq[j] ending before it), as
 * tfm_generator's feed with TFM_PAST_CONTEXT_AUTO: one position, on a
 * rolling cache past the context, or, for a full cache of a model with
 * absolute positions, the last ceil(W/2) tokens afresh. */
static tfm_status feed_beam(search *s, int64_t j, int64_t t)
{
    tfm_kv_cache *c = s->cache[s->slot[j]];
    const int64_t ctx = s->m->config.context_length;
    if (s->rolling || tfm_kv_cache_length(c) < ctx)
        return tfm_kv_cache_decode(c, &s->token[j], 1, s->row);
    const int64_t keep = ctx - ctx / 2, total = s->n_prompt + t;
    for (int64_t i = 0; i < keep; i++) {
        const int64_t p = total - keep + i;
        s->window[i] = p < s->n_prompt ? s->prompt[p]
                                       : s->seq[j * s->M + p - s->n_prompt];
    }
    tfm_kv_cache_reset(c);
    return tfm_kv_cache_decode(c, s->window, keep, s->row);
}

/* The logits of the next step: each beam's last token after its parent's
 * positions (t tokens generated). */
static tfm_status advance(search *s, int64_t t)
{
    const int64_t V = s->V;
    reorder_slots(s, t);
    if (s->m->config.architecture != TFM_ARCH_DECODER_ONLY)
        return seq2seq_step(s, s->token, s->nb, t);
    for (int64_t j = 0; j < s->nb; j++) {
        tfm_status st = feed_beam(s, j, t);
        if (st != TFM_OK)
            return st;
        memcpy(s->logp + j * V, s->row->data, (size_t)V * sizeof(float));
    }
    return TFM_OK;
}

/* Steps 1-2: log-probabilities plus beam scores, the K best candidates
 * (t tokens generated so far). */
static tfm_status select_candidates(search *s, int64_t t)
{
    const int64_t V = s->V, K = s->K;
    const int32_t eos = s->o.eos_token_id;
    int64_t n = 0;
    for (int64_t b = 0; b < s->nb; b++) {
        float *row = s->logp + b * V;
        tfm__log_softmax_row(row, V, row);
        if (row[0] != row[0])
            return tfm__fail(TFM_ERR_NON_FINITE,
                             "beam %lld's logits hold a NaN or infinity "
                             "(step %lld)", (long long)b, (long long)t);
        if (eos >= 0 && t < s->o.min_new_tokens)
            row[eos] = -INFINITY;
        for (int64_t i = 0; i < s->o.n_suppress_tokens; i++)
            row[s->o.suppress_tokens[i]] = -INFINITY;
        const int32_t forced = s->o.forced_eos_token_id;
        if (forced >= 0 && t == s->o.max_new_tokens - 1)
            for (int64_t v = 0; v < V; v++)
                row[v] = v == forced ? 0.0f : -INFINITY;
        if (s->o.renormalize_logits) { /* unless every token is banned */
            int64_t v = 0;
            while (v < V && row[v] == -INFINITY)
                v++;
            if (v < V)
                tfm__log_softmax_row(row, V, row);
        }
        const float base = s->score[b];
        for (int64_t v = 0; v < V; v++) {
            const float x = row[v] + base;
            /* Insert after every candidate scoring >= x (equal scores keep
             * the lower index first). */
            if (n == K && !(x > s->cand_score[K - 1]))
                continue;
            int64_t i = n < K ? n++ : K - 1;
            while (i > 0 && s->cand_score[i - 1] < x) {
                s->cand_score[i] = s->cand_score[i - 1];
                s->cand_index[i] = s->cand_index[i - 1];
                i--;
            }
            s->cand_score[i] = x;
            s->cand_index[i] = b * V + v;
        }
    }
    return TFM_OK;
}

/* Steps 3-5 (BeamSearchScorer.process) and the new beams; returns whether
 * the search is done. */
static tfm_status process(search *s, int64_t t, int *done)
{
    const int64_t V = s->V, M = s->M, nb = s->nb;
    const int32_t eos = s->o.eos_token_id;
    int64_t j = 0;
    for (int64_t k = 0; k < s->K && j < nb; k++) {
        const int64_t b = s->cand_index[k] / V;
        const int32_t v = (int32_t)(s->cand_index[k] % V);
        if (v == eos) {
            if (k >= nb)
                continue;
            /* The parent's tokens, then the EOS. */
            int32_t *tmp = s->next_seq + nb * M;   /* the spare row */
            memcpy(tmp, s->seq + b * M, (size_t)t * sizeof(int32_t));
            tmp[t] = eos;
            hyp_add(&s->hyp, tmp, t + 1, s->cand_score[k]);
        } else {
            s->next_score[j] = s->cand_score[k];
            s->token[j] = v;
            s->parent[j] = b;
            j++;
        }
    }
    if (j < nb)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "only %lld of %lld beams can continue: the "
                         "vocabulary (%lld) is too small beside "
                         "eos_token_id", (long long)j, (long long)nb,
                         (long long)V);
    *done = hyp_done(&s->hyp, s->cand_score[0], t + 1);
    for (j = 0; j < nb; j++) {
        memcpy(s->next_seq + j * M, s->seq + s->parent[j] * M,
               (size_t)t * sizeof(int32_t));
        s->next_seq[j * M + t] = s->token[j];
    }
    int32_t *sw = s->seq;
    s->seq = s->next_seq;
    s->next_seq = sw;
    float *sc = s->score;
    s->score = s->next_score;
    s->next_score = sc;
    return TFM_OK;
}

tfm_status tfm_model_beam_search(const tfm_module *model,
                                 const int32_t *prompt, int64_t n_prompt,
                                 const tfm_beam_search_options *options,
                                 int32_t *out_ids, int64_t *out_lengths,
                                 float *out_scores)
{
    TFM__PLAN_PIN();
    const unsigned kinds = (1u << TFM_ARCH_DECODER_ONLY) |
                           (1u << TFM_ARCH_ENCODER_DECODER);
    tfm_status st = tfm__model_check(model, kinds, "model");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    if (n_prompt < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "the prompt is empty (n_prompt = %lld): give at "
                         "least one token", (long long)n_prompt);
    if ((st = tfm__model_check_ids(m, prompt, n_prompt, "prompt")))
        return st;
    /* A decoder-only prompt longer than the context: its last
     * context_length tokens (as tfm_generator_create takes one). */
    if (m->config.architecture == TFM_ARCH_DECODER_ONLY &&
        n_prompt > m->config.context_length) {
        prompt += n_prompt - m->config.context_length;
        n_prompt = m->config.context_length;
    }
    search s;
    memset(&s, 0, sizeof s);
    if ((st = read_options(options, &s.o)) ||
        (st = check_options(m, n_prompt, &s.o)))
        return st;
    if (!out_ids || !out_lengths)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !out_ids ? "out_ids" : "out_lengths");
    s.m = m;
    s.nb = s.o.num_beams;
    s.M = s.o.max_new_tokens;
    s.V = m->config.vocab_size;
    s.K = 2 * s.nb < s.nb * s.V ? 2 * s.nb : s.nb * s.V;
    s.hyp.capacity = s.nb;
    s.hyp.M = s.M;
    s.hyp.length_penalty = s.o.length_penalty;
    s.hyp.early_stopping = s.o.early_stopping;
    s.hyp.worst = WORST_SCORE_START;
    s.prompt = prompt;
    s.n_prompt = n_prompt;
    if ((st = search_alloc(&s, n_prompt)) ||
        (st = prefill(&s, prompt, n_prompt)))
        goto done;
    s.score[0] = 0.0f;
    for (int64_t b = 1; b < s.nb; b++)
        s.score[b] = FIRST_STEP_SCORE;

    int finished = 0;
    int64_t t = 0;
    for (;;) {
        if ((st = select_candidates(&s, t)) ||
            (st = process(&s, t, &finished)))
            goto done;
        t++;
        if (finished || t == s.M)
            break;
        if ((st = advance(&s, t)))
            goto done;
    }
    /* BeamSearchScorer.finalize: the running beams too, unless done. */
    if (!finished)
        for (int64_t j = 0; j < s.nb; j++)
            hyp_add(&s.hyp, s.seq + j * s.M, t, s.score[j]);
    /* sorted(beams, key=score).pop(): best first, equal scores the later
     * one first.  A stable insertion sort, ascending, read backwards. */
    hypotheses *h = &s.hyp;
    for (int64_t i = 1; i < h->n; i++) {
        const int64_t slot = h->order[i];
        int64_t k = i;
        while (k > 0 && h->score[h->order[k - 1]] > h->score[slot]) {
            h->order[k] = h->order[k - 1];
            k--;
        }
        h->order[k] = slot;
    }
    for (int64_t r = 0; r < s.o.num_return_sequences; r++) {
        const int64_t slot = h->order[h->n - 1 - r];
        int32_t *row = out_ids + r * s.M;
        memcpy(row, h->tokens + slot * s.M,
               (size_t)h->length[slot] * sizeof *row);
        for (int64_t i = h->length[slot]; i < s.M; i++)
            row[i] = s.o.pad_token_id;
        out_lengths[r] = h->length[slot];
        if (out_scores)
            out_scores[r] = (float)h->score[slot];
    }
done:
    search_free(&s);
    return st;
}
