/*
 * Batched generation (model.h: tfm_model_generate_batch) on the shipped
 * model: a batch of ragged prompts (1, 5, 17 and 40 tokens) gives each
 * sequence the tokens tfm_model_generate_v2 gives it alone, greedy and
 * sampled with the processors, with EOS ending sequences at different
 * steps and past the context; the batch decoding step's logits equal each
 * cache's own decode within 1e-5 (on the shipped model and on a RoPE +
 * GQA model whose rolling caches run past the context); prompts longer
 * than the context are their last context_length ids; bad input is
 * refused with nothing written.  The Python tests compare the batch with
 * a left-padded PyTorch decode (attention mask, position ids).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <transformer/transformer.h>

#include "test_util.h"

/* Test hook (src/kv_cache.c; not API): one batch decoding step, one new
 * token per cache, logits [n, vocab]. */
tfm_status tfm_testing_kv_cache_decode_rows(tfm_kv_cache *const *caches,
                                            const int32_t *ids, int64_t n,
                                            float *logits);

enum { B = 4, M = 40, SENTINEL = -7 };
static const int64_t lengths[B] = { 1, 5, 17, 40 };

typedef struct fixture {
    tfm_module *model;
    int64_t vocab, ctx;
    int32_t ids[B][64];
    const int32_t *prompts[B];
    int64_t n_prompts[B];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    tfm_tokenizer *tok = NULL;
    assert_int_equal(tfm_model_load(TFM_SHIPPED_MODEL, &f->model), TFM_OK);
    assert_int_equal(tfm_tokenizer_load(TFM_SHIPPED_MODEL, &tok), TFM_OK);
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(f->model, &c), TFM_OK);
    f->vocab = c.vocab_size;
    f->ctx = c.context_length;
    const char *text = "In the beginning God created the heaven and the "
                       "earth. And the earth was without form";
    for (int i = 0; i < B; i++) {
        /* Each prompt a different stretch of the text. */
        int64_t n = 0;
        const char *from = text + 3 * i;
        assert_int_equal(tfm_tokenizer_encode(tok, from, (size_t)lengths[i],
                                              f->ids[i], 64, &n), TFM_OK);
        assert_int_equal(n, lengths[i]);
        f->prompts[i] = f->ids[i];
        f->n_prompts[i] = n;
    }
    tfm_tokenizer_free(tok);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tfm_module_free(f->model);
    free(f);
    return 0;
}

/* The batch against each prompt alone with the same options; returns the
 * batch's lengths and reasons for further checks. */
static void expect_as_alone(const fixture *f, const tfm_generate_options *o,
                            int64_t n, int64_t *n_out, tfm_stop_reason *why)
{
    const int64_t m = o->max_new_tokens;
    int32_t *out = malloc((size_t)(n * m) * sizeof *out);
    int32_t *alone = malloc((size_t)m * sizeof *alone);
    assert_true(out && alone);
    for (int64_t i = 0; i < n * m; i++)
        out[i] = SENTINEL;
    assert_int_equal(tfm_model_generate_batch(f->model, f->prompts,
                                              f->n_prompts, n, o, out, n_out,
                                              why), TFM_OK);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = -1;
        tfm_stop_reason r = TFM_STOP_NONE;
        assert_int_equal(tfm_model_generate_v2(f->model, f->prompts[i],
                                               f->n_prompts[i], o, alone, m,
                                               &k, &r), TFM_OK);
        assert_int_equal(n_out[i], k);
        assert_int_equal(why[i], r);
        assert_memory_equal(out + i * m, alone, (size_t)k * sizeof *alone);
        for (int64_t j = k; j < m; j++)
            assert_int_equal(out[i * m + j], SENTINEL);
    }
    free(out);
    free(alone);
}

static void greedy_as_alone(void **state)
{
    fixture *f = *state;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = M;
    int64_t n_out[B];
    tfm_stop_reason why[B];
    expect_as_alone(f, &o, B, n_out, why);
    for (int i = 0; i < B; i++) {
        assert_int_equal(n_out[i], M);
        assert_int_equal(why[i], TFM_STOP_MAX_NEW_TOKENS);
    }
    /* A batch of one, and the sub-batches, too. */
    expect_as_alone(f, &o, 1, n_out, why);
    expect_as_alone(f, &o, 3, n_out, why);
}

static void sampled_as_alone(void **state)
{
    fixture *f = *state;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = M;
    o.sampling.greedy = 0;
    o.sampling.temperature = 0.9f;
    o.sampling.top_k = 20;
    o.sampling.top_p = 0.95f;
    o.seed = 1234;
    o.repetition_penalty = 1.3f;
    o.no_repeat_ngram_size = 3;
    int64_t n_out[B];
    tfm_stop_reason why[B];
    expect_as_alone(f, &o, B, n_out, why);
    o.seed = 5;
    o.sampling.temperature = 1.5f;
    o.sampling.top_k = 0;
    o.sampling.top_p = 1.0f;
    expect_as_alone(f, &o, B, n_out, why);
}

/* EOS ids that end some sequences early and not others, with
 * min_new_tokens holding them back at first. */
static void eos_at_different_steps(void **state)
{
    fixture *f = *state;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = M;
    int32_t out[B * M];
    int64_t n_out[B];
    tfm_stop_reason why[B];
    assert_int_equal(tfm_model_generate_batch(f->model, f->prompts,
                                              f->n_prompts, B, &o, out, n_out,
                                              why), TFM_OK);
    /* EOS: sequence 0's token at step 6 (a space or letter that may occur
     * in the others at other steps), and sequence 2's at step 12. */
    const int32_t eos[2] = { out[0 * M + 6], out[2 * M + 12] };
    o.eos_token_ids = eos;
    o.n_eos_token_ids = 2;
    expect_as_alone(f, &o, B, n_out, why);
    int early = 0, stopped_eos = 0;
    for (int i = 0; i < B; i++) {
        stopped_eos += why[i] == TFM_STOP_EOS;
        early += n_out[i] < M;
    }
    assert_true(stopped_eos >= 2);
    assert_true(n_out[0] <= 7 && n_out[2] <= 13);
    /* Not all at the same step. */
    int same = 1;
    for (int i = 1; i < B; i++)
        same &= n_out[i] == n_out[0];
    assert_false(same);
    (void)early;
    o.min_new_tokens = 10;
    expect_as_alone(f, &o, B, n_out, why);
    for (int i = 0; i < B; i++)
        assert_true(n_out[i] >= 10);
}

/* Past the context (learned positions: the half-window shift re-encodes
 * a sequence alone, the other steps stay batched). */
static void past_the_context(void **state)
{
    fixture *f = *state;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = f->ctx + 20 - 40;   /* the 40-token prompt passes it */
    int64_t n_out[B];
    tfm_stop_reason why[B];
    expect_as_alone(f, &o, B, n_out, why);
}

/* Prompts longer than the context (issue 44), beside short ones: each is
 * taken as its last context_length ids, as tfm_model_generate (since 1.0)
 * and tfm_generator_create take one.  Its row equals tfm_model_generate's
 * on the same long prompt (past_context REENCODE, v1's; greedy and
 * sampled) and, with the default past_context and the processors, the
 * tail's alone; the short prompts' rows are as alone. */
static void long_prompts(void **state)
{
    fixture *f = *state;
    enum { EXTRA = 23 };
    const int64_t L = f->ctx + EXTRA;
    int32_t *lng = malloc((size_t)L * sizeof *lng);
    int32_t *out = malloc((size_t)(B * M) * sizeof *out);
    assert_true(lng && out);
    for (int64_t i = 0; i < L; i++)   /* the 40-token text, and again */
        lng[i] = f->ids[3][i % lengths[3]];
    const int32_t *tail = lng + EXTRA;
    const int32_t *P[B] = { lng, f->prompts[1], tail, f->prompts[3] };
    const int64_t N[B] = { L, f->n_prompts[1], f->ctx, f->n_prompts[3] };
    const tfm_sampling modes[2] = { tfm_sampling_default(),
                                    { 0, 0.9f, 20, 0.95f } };
    for (int mode = 0; mode < 2; mode++) {
        tfm_generate_options o;
        tfm_generate_options_init(&o);
        o.max_new_tokens = M;
        o.sampling = modes[mode];
        o.seed = 77;
        o.past_context = TFM_PAST_CONTEXT_REENCODE;
        for (int pass = 0; pass < 2; pass++) {
            int64_t n_out[B];
            tfm_stop_reason why[B];
            int32_t want[M], alone[M];
            assert_int_equal(tfm_model_generate_batch(f->model, P, N, B, &o,
                                                      out, n_out, why),
                             TFM_OK);
            if (pass == 0) {
                assert_int_equal(tfm_model_generate(f->model, lng, L, M,
                                                    &modes[mode], 77, want),
                                 TFM_OK);
            } else {
                int64_t k = -1;
                assert_int_equal(tfm_model_generate_v2(f->model, tail,
                                                       f->ctx, &o, want, M,
                                                       &k, NULL), TFM_OK);
                assert_int_equal(k, M);
            }
            for (int i = 0; i < B; i++) {
                assert_int_equal(n_out[i], M);
                assert_int_equal(why[i], TFM_STOP_MAX_NEW_TOKENS);
                int64_t k = -1;
                assert_int_equal(tfm_model_generate_v2(f->model, P[i], N[i],
                                                       &o, alone, M, &k,
                                                       NULL), TFM_OK);
                assert_int_equal(k, M);
                assert_memory_equal(out + i * M, alone, sizeof alone);
                if (P[i] == lng || P[i] == tail)
                    assert_memory_equal(out + i * M, want, sizeof want);
            }
            /* Then the default past_context, with the processors. */
            o.past_context = TFM_PAST_CONTEXT_AUTO;
            o.repetition_penalty = 1.3f;
            o.no_repeat_ngram_size = 3;
        }
    }
    free(out);
    free(lng);
}

static float max_diff(const float *a, const float *b, int64_t n)
{
    float d = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > d)
            d = fabsf(a[i] - b[i]);
    return d;
}

/* Steps of the batch decode against each cache's own tfm_kv_cache_decode
 * from the same prefill. */
static void expect_batch_logits(tfm_module *model, const int32_t *const *p,
                                const int64_t *np, int64_t n, int64_t steps,
                                int64_t capacity, int rolling, float tol)
{
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(model, &c), TFM_OK);
    const int64_t V = c.vocab_size;
    tfm_kv_cache *batch[B], *alone[B];
    float *lb = malloc((size_t)(n * V) * sizeof *lb);
    float *la = malloc((size_t)(n * V) * sizeof *la);
    assert_true(lb && la);
    int32_t ids[B];
    float worst = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        tfm_tensor *t = NULL;
        const int64_t shape[2] = { 1, V };
        assert_int_equal(tfm_tensor_create(2, shape, &t), TFM_OK);
        for (int k = 0; k < 2; k++) {
            tfm_kv_cache **cc = k ? &alone[i] : &batch[i];
            assert_int_equal(rolling
                                 ? tfm_kv_cache_create_rolling(model, capacity,
                                                               cc)
                                 : tfm_kv_cache_create(model, capacity, cc),
                             TFM_OK);
            assert_int_equal(tfm_kv_cache_decode(*cc, p[i], np[i], t),
                             TFM_OK);
        }
        ids[i] = p[i][np[i] - 1];
        tfm_tensor_free(t);
    }
    for (int64_t s = 0; s < steps; s++) {
        assert_int_equal(tfm_testing_kv_cache_decode_rows(batch, ids, n, lb),
                         TFM_OK);
        for (int64_t i = 0; i < n; i++) {
            tfm_tensor *t = NULL;
            const int64_t shape[2] = { 1, V };
            assert_int_equal(tfm_tensor_create(2, shape, &t), TFM_OK);
            assert_int_equal(tfm_kv_cache_decode(alone[i], &ids[i], 1, t),
                             TFM_OK);
            memcpy(la + i * V, tfm_tensor_data(t), (size_t)V * sizeof *la);
            tfm_tensor_free(t);
            assert_int_equal(tfm_kv_cache_length(batch[i]),
                             tfm_kv_cache_length(alone[i]));
            /* The next token: a walk through the vocabulary. */
            ids[i] = (int32_t)((ids[i] * 7 + 3 + s + i) % V);
        }
        const float d = max_diff(lb, la, n * V);
        if (d > worst)
            worst = d;
    }
    print_message("batch decode: max |logit difference| %.3g over %lld "
                  "steps\n", (double)worst, (long long)steps);
    assert_true(worst <= tol);
    for (int64_t i = 0; i < n; i++) {
        tfm_kv_cache_free(batch[i]);
        tfm_kv_cache_free(alone[i]);
    }
    free(lb);
    free(la);
}

static void batch_logits_shipped(void **state)
{
    fixture *f = *state;
    expect_batch_logits(f->model, f->prompts, f->n_prompts, B, 30, f->ctx, 0,
                        1e-5f);
    /* Full caches are refused, none advanced. */
    tfm_kv_cache *c = NULL;
    assert_int_equal(tfm_kv_cache_create(f->model, 1, &c), TFM_OK);
    tfm_tensor *t = NULL;
    const int64_t shape[2] = { 1, f->vocab };
    assert_int_equal(tfm_tensor_create(2, shape, &t), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(c, f->prompts[0], 1, t), TFM_OK);
    assert_int_equal(tfm_testing_kv_cache_decode_rows(&c, f->prompts[0], 1,
                                                      tfm_tensor_data(t)),
                     TFM_ERR_CAPACITY);
    assert_int_equal(tfm_kv_cache_length(c), 1);
    tfm_tensor_free(t);
    tfm_kv_cache_free(c);
}

/* RoPE and grouped-query attention without absolute positions: rolling
 * caches run past their capacity (drops, compaction) in the batch. */
static void batch_logits_rope_rolling(void **state)
{
    (void)state;
    enum { V = 13, W = 8 };
    tfm_model_config mc = {
        .architecture = TFM_ARCH_DECODER_ONLY,
        .layer = tfm_layer_config_default(16, 4),
        .vocab_size = V, .n_layers = 2, .context_length = W,
        .positional = TFM_POSITIONAL_NONE,
    };
    mc.layer.d_ff = 24;
    tfm_model_options opt;
    tfm_model_options_init(&opt);
    opt.attention.rope = TFM_ROPE_HALF;
    opt.attention.n_kv_heads = 2;
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create_ex(&mc, &opt, &m), TFM_OK);
    randomize_params(m, 31, 3);
    const int32_t a[1] = { 2 }, b[3] = { 5, 1, 9 }, c[7] = { 0, 1, 2, 3, 4, 5,
                                                            6 };
    const int32_t *p[3] = { a, b, c };
    const int64_t np[3] = { 1, 3, 7 };
    expect_batch_logits(m, p, np, 3, 3 * W, W, 1, 1e-5f);
    tfm_module_free(m);
}

static void bad_input(void **state)
{
    fixture *f = *state;
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = 4;
    int32_t out[B * 4];
    int64_t n_out[B];
    tfm_stop_reason why[B];
    for (int i = 0; i < B * 4; i++)
        out[i] = SENTINEL;
    for (int i = 0; i < B; i++) {
        n_out[i] = SENTINEL;
        why[i] = (tfm_stop_reason)SENTINEL;
    }
#define EXPECT_FAIL(status, ...)                                            \
    do {                                                                    \
        assert_int_equal(tfm_model_generate_batch(__VA_ARGS__), status);    \
        assert_true(strlen(tfm_last_error()) > 0);                          \
        for (int i_ = 0; i_ < B * 4; i_++)                                  \
            assert_int_equal(out[i_], SENTINEL);                            \
        for (int i_ = 0; i_ < B; i_++) {                                    \
            assert_int_equal(n_out[i_], SENTINEL);                          \
            assert_int_equal((int)why[i_], SENTINEL);                       \
        }                                                                   \
    } while (0)
    const int32_t *const *P = f->prompts;
    const int64_t *N = f->n_prompts;
    EXPECT_FAIL(TFM_ERR_NULL_ARGUMENT, NULL, P, N, B, &o, out, n_out, why);
    EXPECT_FAIL(TFM_ERR_NULL_ARGUMENT, f->model, NULL, N, B, &o, out, n_out,
                why);
    EXPECT_FAIL(TFM_ERR_NULL_ARGUMENT, f->model, P, NULL, B, &o, out, n_out,
                why);
    EXPECT_FAIL(TFM_ERR_NULL_ARGUMENT, f->model, P, N, B, &o, NULL, n_out,
                why);
    EXPECT_FAIL(TFM_ERR_NULL_ARGUMENT, f->model, P, N, B, &o, out, NULL, why);
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, P, N, 0, &o, out, n_out,
                why);
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, P, N, -3, &o, out, n_out,
                why);
    EXPECT_FAIL(TFM_ERR_OVERFLOW, f->model, P, N, INT64_MAX / 2, &o, out,
                n_out, why);
    const int32_t *with_null[B] = { P[0], P[1], NULL, P[3] };
    EXPECT_FAIL(TFM_ERR_NULL_ARGUMENT, f->model, with_null, N, B, &o, out,
                n_out, why);
    int64_t empty[B] = { N[0], 0, N[2], N[3] };
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, P, empty, B, &o, out,
                n_out, why);
    assert_non_null(strstr(tfm_last_error(), "prompt 1"));
    /* A long prompt is taken (long_prompts), its dropped ids checked. */
    int32_t *longer = calloc((size_t)f->ctx + 1, sizeof *longer);
    assert_non_null(longer);
    longer[0] = (int32_t)f->vocab;
    const int32_t *with_long[B] = { P[0], P[1], P[2], longer };
    int64_t too_long[B] = { N[0], N[1], N[2], f->ctx + 1 };
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, with_long, too_long, B,
                &o, out, n_out, why);
    assert_non_null(strstr(tfm_last_error(), "prompt 3"));
    free(longer);
    const int32_t bad_ids[2] = { 1, (int32_t)f->vocab };
    const int32_t *with_bad[B] = { P[0], bad_ids, P[2], P[3] };
    int64_t two[B] = { N[0], 2, N[2], N[3] };
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, with_bad, two, B, &o, out,
                n_out, why);
    const int32_t negative[1] = { -1 };
    const int32_t *with_neg[B] = { negative, P[1], P[2], P[3] };
    int64_t one[B] = { 1, N[1], N[2], N[3] };
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, with_neg, one, B, &o, out,
                n_out, why);

    tfm_generate_options bad = o;
    const int32_t eos = (int32_t)f->vocab;
    bad.eos_token_ids = &eos;
    bad.n_eos_token_ids = 1;
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, P, N, B, &bad, out, n_out,
                why);
    bad = o;
    bad.max_new_tokens = -1;
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, P, N, B, &bad, out, n_out,
                why);
    bad = o;
    bad.sampling.greedy = 0;
    bad.sampling.temperature = 0.0f;
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, P, N, B, &bad, out, n_out,
                why);
    bad = o;
    bad.struct_size = 4;
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, P, N, B, &bad, out, n_out,
                why);
    bad = o;
    bad.callback = (tfm_token_callback)1;
    EXPECT_FAIL(TFM_ERR_UNSUPPORTED, f->model, P, N, B, &bad, out, n_out,
                why);
    /* One cache per sequence: a caller's cache (prefix reuse) cannot
     * serve the batch. */
    bad = o;
    tfm_kv_cache *shared = NULL;
    assert_int_equal(tfm_kv_cache_create(f->model, 128, &shared), TFM_OK);
    bad.cache = shared;
    EXPECT_FAIL(TFM_ERR_INVALID_ARGUMENT, f->model, P, N, B, &bad, out, n_out,
                why);
    tfm_kv_cache_free(shared);

    /* Not a decoder-only model. */
    tfm_module *layer = NULL;
    tfm_layer_config lc = tfm_layer_config_default(8, 2);
    assert_int_equal(tfm_encoder_layer_create(&lc, &layer), TFM_OK);
    EXPECT_FAIL(TFM_ERR_WRONG_KIND, layer, P, N, B, &o, out, n_out, why);
    tfm_module_free(layer);

    /* Out of memory at every allocation: a clean failure, nothing
     * written, until the allocations run out. */
    for (long k = 1; k < 200; k++) {
        tfm_testing_fail_allocation(k);
        tfm_status st = tfm_model_generate_batch(f->model, P, N, B, &o, out,
                                                 n_out, why);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK)
            break;
        assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
        for (int i = 0; i < B * 4; i++)
            assert_int_equal(out[i], SENTINEL);
    }
    /* max_new_tokens 0: nothing generated, out_ids may be NULL. */
    o.max_new_tokens = 0;
    assert_int_equal(tfm_model_generate_batch(f->model, P, N, B, &o, NULL,
                                              n_out, why), TFM_OK);
    for (int i = 0; i < B; i++) {
        assert_int_equal(n_out[i], 0);
        assert_int_equal(why[i], TFM_STOP_MAX_NEW_TOKENS);
    }
#undef EXPECT_FAIL
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_as_alone),
        cmocka_unit_test(sampled_as_alone),
        cmocka_unit_test(eos_at_different_steps),
        cmocka_unit_test(past_the_context),
        cmocka_unit_test(long_prompts),
        cmocka_unit_test(batch_logits_shipped),
        cmocka_unit_test(batch_logits_rope_rolling),
        cmocka_unit_test(bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
