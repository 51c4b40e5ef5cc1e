/*
 * Generation with options (model.h: tfm_generate_options, tfm_generator,
 * tfm_model_generate_v2) on the shipped model: the defaults give
 * tfm_model_generate's tokens (whose 200 greedy characters equal
 * PyTorch's, test_model.c), callbacks stop and fail cleanly, EOS ids and
 * stop strings end where the greedy text says, and bad input is refused
 * with nothing written.  The processors are compared with PyTorch in
 * bindings/python/tests/test_generate_options.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <transformer/transformer.h>

enum { N = 60, SENTINEL = -7 };

typedef struct fixture {
    tfm_module *model;
    tfm_tokenizer *tok;
    int32_t prompt[16];
    int64_t n_prompt;
    int32_t greedy[N];    /* tfm_model_generate's */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(tfm_model_load(TFM_SHIPPED_MODEL, &f->model), TFM_OK);
    assert_int_equal(tfm_tokenizer_load(TFM_SHIPPED_MODEL, &f->tok), TFM_OK);
    const char *text = "And God said";
    assert_int_equal(tfm_tokenizer_encode(f->tok, text, strlen(text),
                                          f->prompt, 16, &f->n_prompt),
                     TFM_OK);
    assert_int_equal(tfm_model_generate(f->model, f->prompt, f->n_prompt, N,
                                        NULL, 0, f->greedy),
                     TFM_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tfm_tokenizer_free(f->tok);
    tfm_module_free(f->model);
    free(f);
    return 0;
}

static void fill_ids(int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = SENTINEL;
}

static void expect_untouched(const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i], SENTINEL);
}

static void defaults_equal_generate(void **state)
{
    fixture *f = *state;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    assert_int_equal(o.max_new_tokens, 100);
    assert_true(o.sampling.greedy);
    o.max_new_tokens = N;
    int32_t out[N];
    int64_t n = -1;
    tfm_stop_reason why = TFM_STOP_NONE;
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &o, out, N, &n, &why),
                     TFM_OK);
    assert_int_equal(n, N);
    assert_int_equal(why, TFM_STOP_MAX_NEW_TOKENS);
    assert_memory_equal(out, f->greedy, sizeof out);

    /* An older caller's struct (only struct_size and max_new_tokens): the
     * rest takes the defaults. */
    tfm_generate_options small;
    memset(&small, 0x5a, sizeof small);
    small.struct_size = offsetof(tfm_generate_options, max_new_tokens) +
                        sizeof(int64_t);
    small.max_new_tokens = 20;
    fill_ids(out, N);
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &small, out, N, &n, NULL),
                     TFM_OK);
    assert_int_equal(n, 20);
    assert_memory_equal(out, f->greedy, 20 * sizeof *out);
    expect_untouched(out + 20, N - 20);

    /* The generator, token by token, then nothing more. */
    tfm_generator *g = NULL;
    assert_int_equal(tfm_generator_create(f->model, f->prompt, f->n_prompt,
                                          &o, &g), TFM_OK);
    for (int i = 0; i < N; i++) {
        int32_t id = SENTINEL;
        int produced = 0;
        assert_int_equal(tfm_generator_stop_reason(g), TFM_STOP_NONE);
        assert_int_equal(tfm_generator_next(g, &id, &produced), TFM_OK);
        assert_int_equal(produced, 1);
        assert_int_equal(id, f->greedy[i]);
    }
    int32_t id = SENTINEL;
    int produced = 1;
    assert_int_equal(tfm_generator_next(g, &id, &produced), TFM_OK);
    assert_int_equal(produced, 0);
    assert_int_equal(id, SENTINEL);
    assert_int_equal(tfm_generator_count(g), N);
    assert_int_equal(tfm_generator_stop_reason(g), TFM_STOP_MAX_NEW_TOKENS);
    tfm_generator_free(g);
    tfm_generator_free(NULL);
    assert_int_equal(tfm_generator_stop_reason(NULL), TFM_STOP_NONE);
}

typedef struct recorder {
    int32_t ids[N];
    int64_t count;
    int64_t stop_at;    /* index at which to return `answer` */
    int answer;
} recorder;

static int record(void *user, int32_t id, int64_t index)
{
    recorder *r = user;
    assert_int_equal(index, r->count);
    r->ids[r->count++] = id;
    return index == r->stop_at ? r->answer : 0;
}

static void callback_streams_and_stops(void **state)
{
    fixture *f = *state;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = N;
    recorder r = { .stop_at = -1 };
    o.callback = record;
    o.callback_data = &r;
    int32_t out[N];
    int64_t n = -1;
    tfm_stop_reason why;
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &o, out, N, &n, &why), TFM_OK);
    assert_int_equal(r.count, N);
    assert_memory_equal(r.ids, f->greedy, sizeof r.ids);

    /* A positive answer stops after that token. */
    r = (recorder){ .stop_at = 4, .answer = 1 };
    fill_ids(out, N);
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &o, out, N, &n, &why), TFM_OK);
    assert_int_equal(n, 5);
    assert_int_equal(why, TFM_STOP_CALLBACK);
    assert_memory_equal(out, f->greedy, 5 * sizeof *out);
    expect_untouched(out + 5, N - 5);

    /* A negative one is a failure: nothing written. */
    r = (recorder){ .stop_at = 7, .answer = -3 };
    fill_ids(out, N);
    n = 99;
    why = TFM_STOP_NONE;
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &o, out, N, &n, &why),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "callback failed"));
    expect_untouched(out, N);
    assert_int_equal(n, 99);
    assert_int_equal(why, TFM_STOP_NONE);
}

static void eos_and_stop_strings(void **state)
{
    fixture *f = *state;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = N;
    /* EOS: the first occurrence of greedy[9]'s id ends it, inclusive. */
    const int32_t eos[2] = { 62, f->greedy[9] };
    int first = 0;
    while (f->greedy[first] != eos[1] && f->greedy[first] != eos[0])
        first++;
    o.eos_token_ids = eos;
    o.n_eos_token_ids = 2;
    int32_t out[N];
    int64_t n;
    tfm_stop_reason why;
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &o, out, N, &n, &why), TFM_OK);
    assert_int_equal(why, TFM_STOP_EOS);
    assert_int_equal(n, first + 1);
    assert_memory_equal(out, f->greedy, (size_t)n * sizeof *out);

    /* A stop string of three characters of the greedy text, spanning
     * three tokens: generation ends with its last one. */
    char text[N + 1];
    size_t len;
    assert_int_equal(tfm_tokenizer_decode(f->tok, f->greedy, N, text,
                                          sizeof text, &len), TFM_OK);
    char stop[4];
    memcpy(stop, text + 30, 3);
    stop[3] = '\0';
    const char *end = strstr(text, stop);
    assert_non_null(end);
    const int64_t want = (int64_t)(end - text) + 3;   /* one byte a token */
    const char *stops[2] = { "@@never@@", stop };
    tfm_generate_options_init(&o);
    o.max_new_tokens = N;
    o.stop_strings = stops;
    o.n_stop_strings = 2;
    o.tokenizer = f->tok;
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &o, out, N, &n, &why), TFM_OK);
    assert_int_equal(why, TFM_STOP_STRING);
    assert_int_equal(n, want);
    assert_memory_equal(out, f->greedy, (size_t)n * sizeof *out);
}

/* Runs generate_v2 and expects status, with nothing written. */
static void expect_refused(const fixture *f, const int32_t *prompt,
                           int64_t n_prompt, const tfm_generate_options *o,
                           int64_t capacity, tfm_status want,
                           const char *words)
{
    int32_t out[N];
    fill_ids(out, N);
    int64_t n = 99;
    tfm_stop_reason why = (tfm_stop_reason)77;
    tfm_status st = tfm_model_generate_v2(f->model, prompt, n_prompt, o, out,
                                          capacity, &n, &why);
    if (st != want)
        fail_msg("status %d, want %d (%s)", st, want, tfm_last_error());
    if (words && !strstr(tfm_last_error(), words))
        fail_msg("message '%s' lacks '%s'", tfm_last_error(), words);
    expect_untouched(out, N);
    assert_int_equal(n, 99);
    assert_int_equal(why, 77);
    tfm_generator *g = (tfm_generator *)(uintptr_t)0x5e47;
    if (capacity >= (o ? o->max_new_tokens : 100)) {
        assert_int_equal(tfm_generator_create(f->model, prompt, n_prompt, o,
                                              &g), want);
        assert_ptr_equal(g, (tfm_generator *)(uintptr_t)0x5e47);
    }
}

static void bad_input(void **state)
{
    fixture *f = *state;
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(f->model, &c), TFM_OK);
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = 10;
    expect_refused(f, f->prompt, 0, &o, N, TFM_ERR_INVALID_ARGUMENT, "empty");
    /* A prompt longer than the context is taken (long_prompt_is_its_tail),
     * but every id is checked, the dropped ones too. */
    int32_t *longer = calloc((size_t)c.context_length + 1, sizeof *longer);
    assert_non_null(longer);
    longer[0] = (int32_t)c.vocab_size;
    expect_refused(f, longer, c.context_length + 1, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "prompt");
    free(longer);
    int32_t bad_id[2] = { 1, (int32_t)c.vocab_size };
    expect_refused(f, bad_id, 2, &o, N, TFM_ERR_INVALID_ARGUMENT, NULL);
    expect_refused(f, f->prompt, f->n_prompt, &o, 9, TFM_ERR_CAPACITY,
                   "max_new_tokens");

    const int32_t eos = (int32_t)c.vocab_size;
    o.eos_token_ids = &eos;
    o.n_eos_token_ids = 1;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "vocabulary");
    tfm_generate_options_init(&o);
    o.max_new_tokens = 10;
    const char *stops[1] = { "" };
    o.stop_strings = stops;
    o.n_stop_strings = 1;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_NULL_ARGUMENT, "tokenizer");
    o.tokenizer = f->tok;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "empty");
    tfm_generate_options_init(&o);
    o.max_new_tokens = 10;
    o.repetition_penalty = 0.0f;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "repetition_penalty");
    o.repetition_penalty = 1.0f;
    o.no_repeat_ngram_size = -1;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "no_repeat_ngram_size");
    o.no_repeat_ngram_size = 0;
    o.min_new_tokens = -1;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "min_new_tokens");
    o.min_new_tokens = 0;
    o.sampling.greedy = 0;
    o.sampling.top_p = 0.0f;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "top_p");
    o.sampling = tfm_sampling_default();
    o.struct_size = 4;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "struct_size");
    tfm_generate_options_init(&o);
    o.max_new_tokens = (int64_t)TFM_MAX_NEW_TOKENS + 1;
    expect_refused(f, f->prompt, f->n_prompt, &o, INT64_MAX,
                   TFM_ERR_INVALID_ARGUMENT, "TFM_MAX_NEW_TOKENS");
    o.max_new_tokens = -1;
    expect_refused(f, f->prompt, f->n_prompt, &o, N,
                   TFM_ERR_INVALID_ARGUMENT, "max_new_tokens");

    int64_t n;
    tfm_module *mha = NULL;
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &mha), TFM_OK);
    tfm_generator *g = NULL;
    assert_int_equal(tfm_generator_create(mha, f->prompt, f->n_prompt, NULL,
                                          &g), TFM_ERR_WRONG_KIND);
    tfm_module_free(mha);
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           NULL, NULL, 100, &n, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    int32_t id;
    int produced;
    assert_int_equal(tfm_generator_next(NULL, &id, &produced),
                     TFM_ERR_NULL_ARGUMENT);
}

/* Prefix reuse (tfm_generate_options.cache): a chat whose every turn's
 * prompt is the conversation so far.  Each turn's tokens equal a
 * generation without the cache (greedy and sampled, and past the context,
 * where the half-window shift happens at the same step as without it);
 * tfm_generator_reused_tokens is the common prefix of the cache's
 * positions (the previous prompt and its tokens but the last) and the new
 * prompt, worked out by hand below. */
static void generate_fresh(const fixture *f, const int32_t *prompt,
                           int64_t n_prompt, const tfm_generate_options *o,
                           int32_t *out, int64_t *n)
{
    tfm_generate_options plain = *o;
    plain.cache = NULL;
    assert_int_equal(tfm_model_generate_v2(f->model, prompt, n_prompt, &plain,
                                           out, plain.max_new_tokens, n,
                                           NULL), TFM_OK);
}

static int64_t generate_cached(const fixture *f, const int32_t *prompt,
                               int64_t n_prompt,
                               const tfm_generate_options *o, int32_t *out,
                               int64_t *n)
{
    tfm_generator *g = NULL;
    assert_int_equal(tfm_generator_create(f->model, prompt, n_prompt, o, &g),
                     TFM_OK);
    *n = 0;
    int produced = 1;
    while (produced) {
        assert_int_equal(tfm_generator_next(g, out + *n, &produced), TFM_OK);
        *n += produced;
    }
    int64_t reused = tfm_generator_reused_tokens(g);
    tfm_generator_free(g);   /* the caller's cache stays */
    return reused;
}

static void prefix_reuse(void **state)
{
    fixture *f = *state;
    enum { TURN = 40, EXTRA = 9, CAP = 256 };
    tfm_kv_cache *cache = NULL;
    assert_int_equal(tfm_kv_cache_create(f->model, 128, &cache), TFM_OK);
    for (int sampled = 0; sampled < 2; sampled++) {
        tfm_generate_options o;
        tfm_generate_options_init(&o);
        o.max_new_tokens = TURN;
        if (sampled) {
            o.sampling.greedy = 0;
            o.sampling.temperature = 0.9f;
            o.sampling.top_k = 20;
            o.seed = 7;
        }
        o.cache = cache;
        tfm_kv_cache_reset(cache);
        int32_t conv[CAP], mine[CAP], ref[CAP];
        int64_t len = f->n_prompt, n = 0, n_ref = 0;
        memcpy(conv, f->prompt, (size_t)len * sizeof *conv);
        int64_t held = 0;   /* positions the cache holds: conv[0 .. held) */
        /* Turns 1-2 fit in the context (12 + 40 = 52, 52 + 9 + 40 = 101);
         * turn 3's 110 + 40 passes 128, and the shift is the same with and
         * without the cache. */
        for (int turn = 0; turn < 3; turn++) {
            generate_fresh(f, conv, len, &o, ref, &n_ref);
            int64_t reused = generate_cached(f, conv, len, &o, mine, &n);
            assert_int_equal(n, n_ref);
            assert_memory_equal(mine, ref, (size_t)n * sizeof *mine);
            /* The common prefix: what the cache held, but never the last
             * prompt token. */
            assert_int_equal(reused, held < len - 1 ? held : len - 1);
            if (len + n - 1 <= 128)
                assert_int_equal(tfm_kv_cache_length(cache), len + n - 1);
            held = len + n - 1;
            /* The next prompt: the conversation, then the user's turn. */
            memcpy(conv + len, mine, (size_t)n * sizeof *conv);
            len += n;
            for (int i = 0; i < EXTRA; i++)
                conv[len++] = f->prompt[i % f->n_prompt];
        }
        /* A prompt that leaves the cached prefix at position 5: only those
         * five positions are reused. */
        o.max_new_tokens = 20;
        generate_fresh(f, f->prompt, f->n_prompt, &o, ref, &n_ref);
        tfm_kv_cache_reset(cache);
        assert_int_equal(generate_cached(f, f->prompt, f->n_prompt, &o, mine,
                                         &n), 0);
        int32_t other[16];
        memcpy(other, f->prompt, sizeof other);
        other[5] = (other[5] + 1) % 60;
        generate_fresh(f, other, f->n_prompt, &o, ref, &n_ref);
        assert_int_equal(generate_cached(f, other, f->n_prompt, &o, mine,
                                         &n), 5);
        assert_int_equal(n, n_ref);
        assert_memory_equal(mine, ref, (size_t)n * sizeof *mine);
    }

    /* Refused: a cache of another model or of another capacity; nothing
     * is written and the cache keeps what it held. */
    tfm_module *twin = NULL;
    assert_int_equal(tfm_model_load(TFM_SHIPPED_MODEL, &twin), TFM_OK);
    tfm_kv_cache *other_model = NULL, *small = NULL;
    assert_int_equal(tfm_kv_cache_create(twin, 128, &other_model), TFM_OK);
    assert_int_equal(tfm_kv_cache_create(f->model, 64, &small), TFM_OK);
    const int64_t before = tfm_kv_cache_length(cache);
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = 5;
    int32_t out[5];
    int64_t n = -1;
    fill_ids(out, 5);
    o.cache = other_model;
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &o, out, 5, &n, NULL),
                     TFM_ERR_INVALID_ARGUMENT);
    o.cache = small;
    assert_int_equal(tfm_model_generate_v2(f->model, f->prompt, f->n_prompt,
                                           &o, out, 5, &n, NULL),
                     TFM_ERR_INVALID_ARGUMENT);
    expect_untouched(out, 5);
    assert_int_equal(n, -1);
    assert_int_equal(tfm_kv_cache_length(cache), before);
    assert_int_equal(tfm_generator_reused_tokens(NULL), 0);
    tfm_kv_cache_free(small);
    tfm_kv_cache_free(other_model);
    tfm_module_free(twin);
    tfm_kv_cache_free(cache);
}

/* A prompt longer than the context (issue 44): every generation call of a
 * decoder-only model takes it as its last context_length ids, as
 * tfm_model_generate has since 1.0 (and transformer-generate, llama.cpp).
 * References: tfm_model_generate on the same long prompt (its sliding
 * window equals PyTorch's, test_model.c) and each call on the tail alone;
 * a head of other ids changes nothing, the processors included. */
enum { LONG_NEW = 12, LONG_EXTRA = 37 };

static void v2_of(const fixture *f, const int32_t *p, int64_t n,
                  const tfm_generate_options *o, int32_t *out)
{
    const int64_t m = o->max_new_tokens;
    int64_t n_out = -1;
    tfm_stop_reason why = TFM_STOP_NONE;
    if (tfm_model_generate_v2(f->model, p, n, o, out, m, &n_out, &why) !=
        TFM_OK)
        fail_msg("generate_v2 of %lld ids: %s", (long long)n,
                 tfm_last_error());
    assert_int_equal(n_out, m);
    assert_int_equal(why, TFM_STOP_MAX_NEW_TOKENS);
}

static void long_prompt_is_its_tail(void **state)
{
    fixture *f = *state;
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(f->model, &c), TFM_OK);
    const int64_t ctx = c.context_length, L = ctx + LONG_EXTRA;
    const char *text =
        "In the beginning God created the heaven and the earth. And the "
        "earth was without form, and void; and darkness was upon the face "
        "of the deep. And the Spirit of God moved upon the face of the "
        "waters. And God said, Let there be light: and there was light.";
    const size_t bytes = strlen(text);
    int32_t *ids = malloc(bytes * sizeof *ids);
    int32_t *other = malloc((size_t)L * sizeof *other);
    assert_non_null(ids);
    assert_non_null(other);
    int64_t n = 0;
    assert_int_equal(tfm_tokenizer_encode(f->tok, text, bytes, ids,
                                          (int64_t)bytes, &n), TFM_OK);
    assert_true(n >= L);
    const int32_t *tail = ids + LONG_EXTRA;
    /* The same tail after another head (the ids in another order). */
    memcpy(other, ids, (size_t)L * sizeof *other);
    for (int64_t i = 0; i < LONG_EXTRA; i++)
        other[i] = ids[(i * 7 + 3) % L];
    assert_true(memcmp(other, ids, LONG_EXTRA * sizeof *ids) != 0);

    const tfm_sampling modes[2] = { tfm_sampling_default(),
                                    { 0, 0.8f, 10, 0.95f } };
    for (int mode = 0; mode < 2; mode++) {
        const uint64_t seed = 1234;
        int32_t v1_long[LONG_NEW], v1_tail[LONG_NEW], got[LONG_NEW];
        int32_t want[LONG_NEW];
        assert_int_equal(tfm_model_generate(f->model, ids, L, LONG_NEW,
                                            &modes[mode], seed, v1_long),
                         TFM_OK);
        assert_int_equal(tfm_model_generate(f->model, tail, ctx, LONG_NEW,
                                            &modes[mode], seed, v1_tail),
                         TFM_OK);
        assert_memory_equal(v1_long, v1_tail, sizeof v1_long);

        /* v1's past_context: v2 and the generator give v1's tokens. */
        tfm_generate_options o;
        tfm_generate_options_init(&o);
        o.max_new_tokens = LONG_NEW;
        o.sampling = modes[mode];
        o.seed = seed;
        o.past_context = TFM_PAST_CONTEXT_REENCODE;
        fill_ids(got, LONG_NEW);
        v2_of(f, ids, L, &o, got);
        assert_memory_equal(got, v1_long, sizeof got);
        tfm_generator *g = NULL;
        assert_int_equal(tfm_generator_create(f->model, ids, L, &o, &g),
                         TFM_OK);
        for (int i = 0; i < LONG_NEW; i++) {
            int produced = 0;
            assert_int_equal(tfm_generator_next(g, &got[i], &produced),
                             TFM_OK);
            assert_int_equal(produced, 1);
        }
        assert_int_equal(tfm_generator_count(g), LONG_NEW);
        assert_int_equal(tfm_generator_stop_reason(g),
                         TFM_STOP_MAX_NEW_TOKENS);
        tfm_generator_free(g);
        assert_memory_equal(got, v1_long, sizeof got);

        /* The default half-window shift with the processors: the tail
         * alone, whatever the head (the penalty sees no dropped id). */
        o.past_context = TFM_PAST_CONTEXT_AUTO;
        o.repetition_penalty = 1.3f;
        o.no_repeat_ngram_size = 3;
        v2_of(f, tail, ctx, &o, want);
        v2_of(f, ids, L, &o, got);
        assert_memory_equal(got, want, sizeof got);
        v2_of(f, other, L, &o, got);
        assert_memory_equal(got, want, sizeof got);

        /* Prefix reuse: a cache left holding the tail (one new token, so
         * nothing slid) gives its ctx - 1 positions to the next call. */
        tfm_kv_cache *cache = NULL;
        assert_int_equal(tfm_kv_cache_create(f->model, ctx, &cache), TFM_OK);
        tfm_generate_options one = o;
        one.max_new_tokens = 1;
        one.cache = cache;
        v2_of(f, ids, L, &one, got);
        assert_int_equal(tfm_kv_cache_length(cache), ctx);
        o.cache = cache;
        assert_int_equal(tfm_generator_create(f->model, other, L, &o, &g),
                         TFM_OK);
        assert_int_equal(tfm_generator_reused_tokens(g), ctx - 1);
        for (int i = 0; i < LONG_NEW; i++) {
            int produced = 0;
            assert_int_equal(tfm_generator_next(g, &got[i], &produced),
                             TFM_OK);
        }
        tfm_generator_free(g);
        assert_memory_equal(got, want, sizeof got);
        tfm_kv_cache_free(cache);
    }
    free(other);
    free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_equal_generate),
        cmocka_unit_test(callback_streams_and_stops),
        cmocka_unit_test(eos_and_stop_strings),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(prefix_reuse),
        cmocka_unit_test(long_prompt_is_its_tail),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
