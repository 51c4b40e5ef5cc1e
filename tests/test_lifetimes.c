/*
 * Handles that refer to others, freed in any order (issue 44, kind 1;
 * src/base/lifetime.h).  Every pair the public headers have:
 *   optimizer -> module (or the module a child view is part of),
 *   KV cache  -> model,
 *   generator -> model, the tokenizer of its stop strings, the caller's
 *                options->cache.
 * For each: the owner freed first leaves the dependent's calls refused
 * with TFM_ERR_INVALID_ARGUMENT and a message naming what was freed, its
 * outputs untouched; freeing the dependent then releases the owner (no
 * invalid read, no leak: reliability.sh runs this suite under valgrind's
 * memcheck and ASan with leak checking); the other order works as before.
 * Threads freeing dependents while another frees the owner release it
 * exactly once (reliability.sh: TSan).  Allocation failures inside a
 * dependent's create leave the owner's count as it was (else the owner
 * leaks, which the leak checkers report).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <transformer/transformer.h>

#include "tiny_model.h"

void tfm_testing_fail_allocation(long k);

enum { VOCAB = 8, CTX = 16, SENTINEL = -7 };

static const char CHARS[VOCAB + 1] = "abcdefgh";

/* A one-layer decoder-only model, d_model 8, 2 heads, over CHARS. */
static tfm_module *tiny_decoder(void)
{
    tfm_model_config c = tiny_model_config(
        TFM_ARCH_DECODER_ONLY, tfm_layer_config_default(8, 2), VOCAB, 1, CTX);
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create(&c, &m), TFM_OK);
    return m;
}

/* A model with gradients from one loss backward (so a step has work). */
static tfm_module *trained_decoder(void)
{
    tfm_module *m = tiny_decoder();
    assert_int_equal(tfm_module_train(m, 1), TFM_OK);
    const int32_t ids[4] = { 1, 2, 3, 4 }, targets[4] = { 2, 3, 4, -100 };
    float loss = 0.0f;
    assert_int_equal(tfm_model_loss_backward(m, ids, 1, 4, targets, -100,
                                             0.0f, TFM_REDUCTION_MEAN, 1.0f,
                                             &loss),
                     TFM_OK);
    return m;
}

static tfm_optimizer *adamw(tfm_module *m)
{
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAMW);
    tfm_optimizer *opt = NULL;
    assert_int_equal(tfm_optimizer_create(m, &o, &opt), TFM_OK);
    return opt;
}

static void expect_error(tfm_status st, const char *part)
{
    assert_int_equal(st, TFM_ERR_INVALID_ARGUMENT);
    if (!strstr(tfm_last_error(), part))
        fail_msg("message \"%s\" lacks \"%s\"", tfm_last_error(), part);
}

static int64_t step_of(const tfm_optimizer *opt)
{
    float step = -1.0f;
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_create(1, (const int64_t[]){ 1 }, &t),
                     TFM_OK);
    assert_int_equal(tfm_optimizer_get_state(opt, "token_embedding.weight",
                                             "step", t),
                     TFM_OK);
    step = tfm_tensor_data(t)[0];
    tfm_tensor_free(t);
    return (int64_t)step;
}

/* ---- optimizer -> module ------------------------------------------------ */

static void optimizer_after_module_free(void **state)
{
    (void)state;
    tfm_module *m = trained_decoder();
    tfm_optimizer *opt = adamw(m);
    assert_int_equal(tfm_optimizer_step(opt), TFM_OK);
    assert_int_equal(step_of(opt), 1);
    tfm_module_free(m);     /* first: a use-after-free before issue 44 */
    expect_error(tfm_optimizer_step(opt),
                 "tfm_optimizer_step: the module this optimizer refers to "
                 "has been freed");
    tfm_clear_error();
    tfm_optimizer_zero_grad(opt);           /* void: does nothing */
    assert_non_null(strstr(tfm_last_error(),
                           "tfm_optimizer_zero_grad: the module this "
                           "optimizer refers to has been freed"));
    /* every other call that reads the module refuses the same way */
    float v[1] = { 7.0f };
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_wrap(1, (const int64_t[]){ 1 }, v, &t),
                     TFM_OK);
    double norm = -1.0;
    expect_error(tfm_optimizer_clip_grad_norm(opt, 1.0, 2.0, &norm),
                 "tfm_optimizer_clip_grad_norm: the module this optimizer "
                 "refers to has been freed");
    assert_true(norm == -1.0);
    expect_error(tfm_optimizer_set_weight_decay(opt, "token_embedding.weight",
                                                0.5),
                 "tfm_optimizer_set_weight_decay: the module this");
    expect_error(tfm_optimizer_get_state(opt, "token_embedding.weight",
                                         "step", t),
                 "tfm_optimizer_get_state: the module this");
    assert_true(v[0] == 7.0f);              /* nothing written */
    expect_error(tfm_optimizer_set_state(opt, "token_embedding.weight",
                                         "step", t),
                 "tfm_optimizer_set_state: the module this");
    tfm_tensor_free(t);
    expect_error(tfm_optimizer_save(opt, "/nonexistent-dir/opt.safetensors"),
                 "tfm_optimizer_save: the module this");
    expect_error(tfm_optimizer_load(opt, "/nonexistent-dir/opt.safetensors"),
                 "tfm_optimizer_load: the module this");
    assert_int_equal(tfm_optimizer_set_lr(opt, 0.5), TFM_OK);  /* own state */
    assert_true(tfm_optimizer_get_lr(opt) == 0.5);
    tfm_optimizer_free(opt);                /* releases the module */
}

static void optimizer_before_module_free(void **state)
{
    (void)state;
    tfm_module *m = trained_decoder();
    tfm_optimizer *a = adamw(m), *b = adamw(m);
    tfm_optimizer_free(a);
    assert_int_equal(tfm_optimizer_step(b), TFM_OK);   /* b still holds it */
    tfm_optimizer_free(b);
    tfm_module_free(m);                     /* no dependent left: freed */
}

/* An optimizer of a child view holds the module the caller owns. */
static void optimizer_of_child_after_parent_free(void **state)
{
    (void)state;
    tfm_module *m = trained_decoder();
    tfm_module *layer = NULL;
    assert_int_equal(tfm_module_child(m, "layers.0.self_attn", &layer),
                     TFM_OK);
    tfm_optimizer *opt = adamw(layer);
    assert_int_equal(tfm_optimizer_step(opt), TFM_OK);
    tfm_module_free(layer);                 /* a part: does nothing */
    assert_int_equal(tfm_optimizer_step(opt), TFM_OK);
    tfm_module_free(m);
    expect_error(tfm_optimizer_step(opt), "has been freed");
    tfm_optimizer_free(opt);
}

/* ---- KV cache -> model -------------------------------------------------- */

static void cache_after_model_free(void **state)
{
    (void)state;
    tfm_module *m = tiny_decoder();
    tfm_kv_cache *c = NULL;
    assert_int_equal(tfm_kv_cache_create(m, CTX, &c), TFM_OK);
    tfm_tensor *logits = NULL;
    assert_int_equal(tfm_tensor_create(2, (const int64_t[]){ 1, VOCAB },
                                       &logits),
                     TFM_OK);
    const int32_t id = 3;
    assert_int_equal(tfm_kv_cache_decode(c, &id, 1, logits), TFM_OK);
    tfm_module_free(m);
    for (int i = 0; i < VOCAB; i++)
        tfm_tensor_data(logits)[i] = (float)SENTINEL;
    expect_error(tfm_kv_cache_decode(c, &id, 1, logits),
                 "tfm_kv_cache_decode: the model this KV cache refers to "
                 "has been freed");
    for (int i = 0; i < VOCAB; i++)
        assert_true(tfm_tensor_data(logits)[i] == (float)SENTINEL);
    assert_int_equal(tfm_kv_cache_length(c), 1);
    assert_int_equal(tfm_kv_cache_capacity(c), CTX);
    tfm_kv_cache_reset(c);                  /* its own memory: fine */
    assert_int_equal(tfm_kv_cache_length(c), 0);
    tfm_kv_cache_free(c);
    tfm_tensor_free(logits);
}

static void cache_before_model_free(void **state)
{
    (void)state;
    tfm_module *m = tiny_decoder();
    tfm_kv_cache *c = NULL;
    assert_int_equal(tfm_kv_cache_create(m, 4, &c), TFM_OK);
    tfm_kv_cache_free(c);
    tfm_module_free(m);
}

/* ---- generator -> model, tokenizer, options->cache ---------------------- */

typedef struct gen_fixture {
    tfm_module *model;
    tfm_tokenizer *tok;
    tfm_kv_cache *cache;
    tfm_generator *gen;
} gen_fixture;

/* A generator of 10 new tokens on the tiny model with a stop string that
 * never matches (so every step decodes with the tokenizer) and the
 * caller's cache. */
static gen_fixture make_generator(void)
{
    gen_fixture f = { 0 };
    f.model = tiny_decoder();
    assert_int_equal(tfm_tokenizer_create(CHARS, &f.tok), TFM_OK);
    assert_int_equal(tfm_kv_cache_create(f.model, CTX, &f.cache), TFM_OK);
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = 10;
    o.past_context = TFM_PAST_CONTEXT_REENCODE;
    const char *stops[1] = { "zz" };
    o.stop_strings = stops;
    o.n_stop_strings = 1;
    o.tokenizer = f.tok;
    o.cache = f.cache;
    const int32_t prompt[3] = { 0, 1, 2 };
    assert_int_equal(tfm_generator_create(f.model, prompt, 3, &o, &f.gen),
                     TFM_OK);
    int32_t id = SENTINEL;
    int produced = 0;
    assert_int_equal(tfm_generator_next(f.gen, &id, &produced), TFM_OK);
    assert_int_equal(produced, 1);
    assert_int_equal(tfm_generator_count(f.gen), 1);
    return f;
}

/* The next step is refused naming `part`; nothing is written. */
static void expect_next_refused(tfm_generator *g, const char *part)
{
    int32_t id = SENTINEL;
    int produced = SENTINEL;
    expect_error(tfm_generator_next(g, &id, &produced), part);
    assert_int_equal(id, SENTINEL);
    assert_int_equal(produced, SENTINEL);
    assert_int_equal(tfm_generator_count(g), 1);
    assert_int_equal(tfm_generator_stop_reason(g), TFM_STOP_NONE);
}

static void generator_after_model_free(void **state)
{
    (void)state;
    gen_fixture f = make_generator();
    tfm_module_free(f.model);               /* the cache holds it too */
    expect_next_refused(f.gen, "tfm_generator_next: the model this "
                               "generator refers to has been freed");
    tfm_kv_cache_free(f.cache);
    tfm_generator_free(f.gen);              /* the last: frees the model */
    tfm_tokenizer_free(f.tok);
}

static void generator_after_tokenizer_free(void **state)
{
    (void)state;
    gen_fixture f = make_generator();
    tfm_tokenizer_free(f.tok);
    expect_next_refused(f.gen, "the tokenizer of its stop strings "
                               "(options->tokenizer) has been freed");
    tfm_generator_free(f.gen);              /* frees the tokenizer */
    tfm_kv_cache_free(f.cache);
    tfm_module_free(f.model);
}

static void generator_after_cache_free(void **state)
{
    (void)state;
    gen_fixture f = make_generator();
    tfm_kv_cache_free(f.cache);
    expect_next_refused(f.gen, "the KV cache it uses (options->cache) has "
                               "been freed");
    tfm_module_free(f.model);
    tfm_tokenizer_free(f.tok);
    tfm_generator_free(f.gen);              /* frees cache, model, tokenizer */
}

static void generator_freed_last_of_all_orders(void **state)
{
    (void)state;
    /* The six orders of the three owners' frees, the generator's last,
     * and the generator's first. */
    static const int orders[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
                                      { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };
    for (int k = 0; k < 7; k++) {
        gen_fixture f = make_generator();
        if (k == 6)
            tfm_generator_free(f.gen);
        for (int i = 0; i < 3; i++) {
            switch (k < 6 ? orders[k][i] : i) {
            case 0: tfm_module_free(f.model); break;
            case 1: tfm_tokenizer_free(f.tok); break;
            default: tfm_kv_cache_free(f.cache); break;
            }
        }
        if (k < 6)
            tfm_generator_free(f.gen);
    }
}

/* The generator's own cache, and a tokenizer given without stop strings
 * (not used, so not held). */
static void generator_own_cache(void **state)
{
    (void)state;
    tfm_module *m = tiny_decoder();
    tfm_tokenizer *tok = NULL;
    assert_int_equal(tfm_tokenizer_create(CHARS, &tok), TFM_OK);
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = 4;
    o.tokenizer = tok;
    tfm_generator *g = NULL;
    const int32_t prompt[2] = { 5, 6 };
    assert_int_equal(tfm_generator_create(m, prompt, 2, &o, &g), TFM_OK);
    tfm_tokenizer_free(tok);                /* not held: freed now */
    int32_t id;
    int produced;
    assert_int_equal(tfm_generator_next(g, &id, &produced), TFM_OK);
    tfm_module_free(m);
    expect_error(tfm_generator_next(g, &id, &produced),
                 "the model this generator refers to has been freed");
    tfm_generator_free(g);
}

/* ---- Allocation failures ------------------------------------------------ */

/* Each create failing at every allocation in turn: the owners' counts
 * are as before (each owner is freed at once at the end, which the leak
 * checkers see). */
static void failed_creates_hold_nothing(void **state)
{
    (void)state;
    tfm_module *m = trained_decoder();
    tfm_tokenizer *tok = NULL;
    assert_int_equal(tfm_tokenizer_create(CHARS, &tok), TFM_OK);
    tfm_kv_cache *shared = NULL;
    assert_int_equal(tfm_kv_cache_create(m, CTX, &shared), TFM_OK);
    for (int what = 0; what < 3; what++) {
        for (long k = 1; k < 100; k++) {
            tfm_testing_fail_allocation(k);
            tfm_status st;
            if (what == 0) {
                tfm_optimizer_options o;
                tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAM);
                tfm_optimizer *opt = NULL;
                st = tfm_optimizer_create(m, &o, &opt);
                tfm_testing_fail_allocation(0);
                tfm_optimizer_free(opt);
            } else if (what == 1) {
                tfm_kv_cache *c = NULL;
                st = tfm_kv_cache_create(m, CTX, &c);
                tfm_testing_fail_allocation(0);
                tfm_kv_cache_free(c);
            } else {
                tfm_generate_options o;
                tfm_generate_options_init(&o);
                o.max_new_tokens = 3;
                o.past_context = TFM_PAST_CONTEXT_REENCODE;
                const char *stops[1] = { "zz" };
                o.stop_strings = stops;
                o.n_stop_strings = 1;
                o.tokenizer = tok;
                o.cache = shared;
                const int32_t prompt[2] = { 1, 2 };
                tfm_generator *g = NULL;
                st = tfm_generator_create(m, prompt, 2, &o, &g);
                tfm_testing_fail_allocation(0);
                tfm_generator_free(g);
            }
            if (st == TFM_OK)
                break;
            assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
        }
    }
    tfm_kv_cache_free(shared);
    tfm_tokenizer_free(tok);
    tfm_module_free(m);
}

/* ---- Threads ------------------------------------------------------------ */

enum { THREADS = 6, ROUNDS = 20 };

typedef struct race {
    pthread_barrier_t *start;
    tfm_optimizer *opt;
    tfm_kv_cache *cache;
    tfm_generator *gen;
} race;

static void *free_dependent(void *arg)
{
    race *r = arg;
    pthread_barrier_wait(r->start);
    tfm_optimizer_free(r->opt);
    tfm_kv_cache_free(r->cache);
    tfm_generator_free(r->gen);
    return NULL;
}

/* THREADS threads free the dependents of one model and one tokenizer
 * while the main thread frees both owners: each is freed exactly once
 * (no double free, no leak, no data race under TSan), whoever is last. */
static void threads_free_dependents_and_owner(void **state)
{
    (void)state;
    for (int round = 0; round < ROUNDS; round++) {
        tfm_module *m = tiny_decoder();
        tfm_tokenizer *tok = NULL;
        assert_int_equal(tfm_tokenizer_create(CHARS, &tok), TFM_OK);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, THREADS + 1);
        race r[THREADS];
        pthread_t th[THREADS];
        for (int i = 0; i < THREADS; i++) {
            r[i] = (race){ &start, NULL, NULL, NULL };
            r[i].opt = adamw(m);
            assert_int_equal(tfm_kv_cache_create(m, 4, &r[i].cache), TFM_OK);
            tfm_generate_options o;
            tfm_generate_options_init(&o);
            o.max_new_tokens = 2;
            const char *stops[1] = { "zz" };
            o.stop_strings = stops;
            o.n_stop_strings = 1;
            o.tokenizer = tok;
            const int32_t prompt[1] = { (int32_t)i };
            assert_int_equal(tfm_generator_create(m, prompt, 1, &o,
                                                  &r[i].gen),
                             TFM_OK);
            assert_int_equal(pthread_create(&th[i], NULL, free_dependent,
                                            &r[i]), 0);
        }
        pthread_barrier_wait(&start);
        if (round % 2)
            tfm_module_free(m);
        tfm_tokenizer_free(tok);
        if (!(round % 2))
            tfm_module_free(m);
        for (int i = 0; i < THREADS; i++)
            assert_int_equal(pthread_join(th[i], NULL), 0);
        pthread_barrier_destroy(&start);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(optimizer_after_module_free),
        cmocka_unit_test(optimizer_before_module_free),
        cmocka_unit_test(optimizer_of_child_after_parent_free),
        cmocka_unit_test(cache_after_model_free),
        cmocka_unit_test(cache_before_model_free),
        cmocka_unit_test(generator_after_model_free),
        cmocka_unit_test(generator_after_tokenizer_free),
        cmocka_unit_test(generator_after_cache_free),
        cmocka_unit_test(generator_freed_last_of_all_orders),
        cmocka_unit_test(generator_own_cache),
        cmocka_unit_test(failed_creates_hold_nothing),
        cmocka_unit_test(threads_free_dependents_and_owner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
