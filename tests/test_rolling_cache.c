/* Generation past the context with a rolling KV cache
 * (tfm_kv_cache_create_rolling, and tfm_generator's past_context AUTO on
 * models without absolute positions).
 *
 * What the result must equal (model.h): with W = the cache's capacity and
 * one new position per call, the logits of position t equal row t of a
 * full pass over the whole sequence in which query t sees only keys
 * t-W+1 .. t, with RoPE at the absolute positions.  The reference here is
 * a second model with the same weights, a context of the whole sequence
 * and that band as its attention pattern (tfm_sparsity
 * TFM_SPARSE_SLIDING_WINDOW with window W-1, whose full pass
 * tests/test_variants.c checks against PyTorch), run by tfm_model_logits:
 * no cache, no rolling, no position origin. */
#include <malloc.h>
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

enum { V = 11, D = 16, W = 6, T = 26, PREFILL = 3 };

/* A decoder-only model of context ctx with attention *a, its parameters
 * from seed 29 in parameter order (the same for both twins). */
static tfm_module *model_with(const tfm_attention_config *a, int64_t ctx,
                              tfm_positional positional)
{
    tfm_model_config mc = {
        .architecture = TFM_ARCH_DECODER_ONLY,
        .layer = tfm_layer_config_default(D, 4),
        .vocab_size = V, .n_layers = 3, .context_length = ctx,
        .positional = positional,
    };
    mc.layer.d_ff = 24;
    tfm_model_options opt;
    tfm_model_options_init(&opt);
    opt.attention = *a;
    tfm_module *m = NULL;
    if (tfm_model_create_ex(&mc, &opt, &m) != TFM_OK)
        fail_msg("model: %s", tfm_last_error());
    randomize_params(m, 29, 5);
    return m;
}

static void ids_of(int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)((i * 7 + 3 + i / 5) % V);
}

static void check_rolling(const tfm_attention_config *a, const char *what)
{
    tfm_attention_config band = *a;
    if (band.sparsity == TFM_SPARSE_NONE) {
        band.sparsity = TFM_SPARSE_SLIDING_WINDOW;
        band.window = W - 1;
    }
    tfm_module *small = model_with(a, W, TFM_POSITIONAL_NONE);
    tfm_module *whole = model_with(&band, T, TFM_POSITIONAL_NONE);
    int32_t ids[T];
    ids_of(ids, T);
    tfm_tensor *full = make3(1, T, V, NULL), *step = make2(T, V, NULL);
    if (tfm_model_logits(whole, ids, 1, T, full) != TFM_OK)
        fail_msg("%s: logits: %s", what, tfm_last_error());

    tfm_kv_cache *cache = NULL;
    assert_int_equal(tfm_kv_cache_create_rolling(small, W, &cache), TFM_OK);
    assert_int_equal(tfm_kv_cache_capacity(cache), W);
    float *sd = tfm_tensor_data(step);
    tfm_tensor *first = NULL, *one = NULL;
    assert_int_equal(tfm_tensor_wrap(2, (const int64_t[]){ PREFILL, V }, sd,
                                     &first), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(cache, ids, PREFILL, first), TFM_OK);
    for (int t = PREFILL; t < T; t++) {
        assert_int_equal(tfm_tensor_wrap(2, (const int64_t[]){ 1, V },
                                         sd + t * V, &one), TFM_OK);
        if (tfm_kv_cache_decode(cache, ids + t, 1, one) != TFM_OK)
            fail_msg("%s: decode %d: %s", what, t, tfm_last_error());
        tfm_tensor_free(one);
        assert_int_equal(tfm_kv_cache_length(cache), t + 1 < W ? t + 1 : W);
    }
    const float *fd = tfm_tensor_data_const(full);
    double err = 0, ref = 0;
    for (int i = 0; i < T * V; i++) {
        err = fmax(err, fabs((double)sd[i] - fd[i]));
        ref = fmax(ref, fabs((double)fd[i]));
    }
    print_message("rolling %-26s %d positions, window %d: rel err %.2e\n",
                  what, T, W, err / ref);
    if (!(err / ref <= 1e-5))
        fail_msg("%s: rolling logits differ from the banded pass (%g)",
                 what, err / ref);

    /* The generator rolls too: greedy tokens past the context equal the
     * argmax of the banded full pass over the sequence so far. */
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = T - PREFILL;
    int32_t out[T], seq[T];
    int64_t n = 0;
    assert_int_equal(tfm_model_generate_v2(small, ids, PREFILL, &o, out, T,
                                           &n, NULL), TFM_OK);
    assert_int_equal(n, T - PREFILL);
    memcpy(seq, ids, PREFILL * sizeof *seq);
    for (int len = PREFILL; len < T; len++) {
        tfm_tensor *lg = make3(1, len, V, NULL);
        assert_int_equal(tfm_model_logits(whole, seq, 1, len, lg), TFM_OK);
        const float *row = tfm_tensor_data_const(lg) + (len - 1) * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best])
                best = v;
        seq[len] = best;
        tfm_tensor_free(lg);
        if (out[len - PREFILL] != best)
            fail_msg("%s: generated token %d is %d, the banded pass's "
                     "argmax %d", what, len - PREFILL, out[len - PREFILL],
                     best);
    }
    /* The same with the caller's rolling cache (options.cache): the same
     * tokens; then the cache has dropped its first positions, so a second
     * call reuses none of them (its RoPE origin is not 0) and still gives
     * the same tokens. */
    tfm_kv_cache *mine = NULL;
    assert_int_equal(tfm_kv_cache_create_rolling(small, W, &mine), TFM_OK);
    o.cache = mine;
    for (int call = 0; call < 2; call++) {
        int32_t again[T];
        tfm_generator *g = NULL;
        assert_int_equal(tfm_generator_create(small, ids, PREFILL, &o, &g),
                         TFM_OK);
        assert_int_equal(tfm_generator_reused_tokens(g), 0);
        int64_t k = 0;
        int produced = 1;
        while (produced) {
            assert_int_equal(tfm_generator_next(g, again + k, &produced),
                             TFM_OK);
            k += produced;
        }
        tfm_generator_free(g);
        assert_int_equal(k, T - PREFILL);
        assert_memory_equal(again, out, (size_t)k * sizeof *again);
        assert_int_equal(tfm_kv_cache_length(mine), W);
    }
    o.past_context = TFM_PAST_CONTEXT_REENCODE;   /* a rolling cache cannot */
    assert_int_equal(tfm_model_generate_v2(small, ids, PREFILL, &o, out, T,
                                           &n, NULL), TFM_ERR_INVALID_ARGUMENT);
    o.past_context = TFM_PAST_CONTEXT_AUTO;
    o.cache = NULL;
    tfm_kv_cache_free(mine);
    /* A beam search of one beam is greedy decoding, past the context on
     * the rolling caches too. */
    tfm_beam_search_options bo;
    tfm_beam_search_options_init(&bo);
    bo.num_beams = 1;
    bo.max_new_tokens = T - PREFILL;
    int32_t beam[T];
    int64_t beam_len = 0;
    float beam_score = 0;
    if (tfm_model_beam_search(small, ids, PREFILL, &bo, beam, &beam_len,
                              &beam_score) != TFM_OK)
        fail_msg("%s: beam search: %s", what, tfm_last_error());
    assert_int_equal(beam_len, T - PREFILL);
    assert_memory_equal(beam, seq + PREFILL, (T - PREFILL) * sizeof *beam);
    tfm_kv_cache_free(cache);
    FREE_TENSORS(full, step, first);
    tfm_module_free(small);
    tfm_module_free(whole);
}

static void test_rolling_variants(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    check_rolling(&c, "no positions");
    c.rope = TFM_ROPE_ADJACENT;
    c.n_kv_heads = 2;
    check_rolling(&c, "rope adjacent gqa");
    tfm_attention_config_init(&c);
    c.rope = TFM_ROPE_HALF;
    c.rope_dims = 2;
    c.rope_base = 50.0;
    check_rolling(&c, "rope half partial");
    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_ALIBI;
    check_rolling(&c, "alibi");
    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_T5;
    c.num_buckets = 8;
    c.max_distance = 16;
    check_rolling(&c, "t5");
    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_SHAW;
    c.max_distance = 3;
    c.relative_values = 1;
    check_rolling(&c, "shaw");
    tfm_attention_config_init(&c);
    c.rope = TFM_ROPE_ADJACENT;
    c.sparsity = TFM_SPARSE_SLIDING_WINDOW;
    c.window = 2;   /* narrower than the cache: the band is the model's */
    check_rolling(&c, "rope sliding window 2");
}

/* Errors: models with absolute positions or global tokens cannot roll; a
 * rolling cache still refuses more new positions than its capacity; a
 * plain cache still refuses to overflow; *out and the cache unchanged. */
static void test_rolling_errors(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    tfm_module *learned = model_with(&c, W, TFM_POSITIONAL_LEARNED);
    tfm_kv_cache *cache = (tfm_kv_cache *)&c;
    assert_int_equal(tfm_kv_cache_create_rolling(learned, W, &cache),
                     TFM_ERR_UNSUPPORTED);
    assert_ptr_equal(cache, (tfm_kv_cache *)&c);
    tfm_module_free(learned);
    c.sparsity = TFM_SPARSE_SLIDING_WINDOW;
    c.window = 2;
    c.n_global = 1;
    tfm_module *global = model_with(&c, W, TFM_POSITIONAL_NONE);
    assert_int_equal(tfm_kv_cache_create_rolling(global, W, &cache),
                     TFM_ERR_UNSUPPORTED);
    tfm_module_free(global);

    tfm_attention_config_init(&c);
    c.rope = TFM_ROPE_ADJACENT;
    tfm_module *m = model_with(&c, W, TFM_POSITIONAL_NONE);
    assert_int_equal(tfm_kv_cache_create_rolling(m, W + 1, &cache),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_kv_cache_create_rolling(NULL, W, &cache),
                     TFM_ERR_NULL_ARGUMENT);
    int32_t ids[W + 1];
    ids_of(ids, W + 1);
    tfm_tensor *lg = make2(1, V, NULL);
    assert_int_equal(tfm_kv_cache_create_rolling(m, W, &cache), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(cache, ids, W + 1, lg),
                     TFM_ERR_CAPACITY);
    assert_int_equal(tfm_kv_cache_length(cache), 0);
    assert_int_equal(tfm_kv_cache_decode(cache, ids, W, lg), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(cache, ids, 1, lg), TFM_OK);
    assert_int_equal(tfm_kv_cache_length(cache), W);
    tfm_kv_cache_free(cache);
    tfm_kv_cache *plain = NULL;
    assert_int_equal(tfm_kv_cache_create(m, W, &plain), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(plain, ids, W, lg), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(plain, ids, 1, lg),
                     TFM_ERR_CAPACITY);
    assert_int_equal(tfm_kv_cache_length(plain), W);
    tfm_kv_cache_free(plain);

    /* past_context outside tfm_past_context is refused. */
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.past_context = TFM_PAST_CONTEXT_COUNT;
    tfm_generator *g = NULL;
    assert_int_equal(tfm_generator_create(m, ids, 2, &o, &g),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_null(g);
    tfm_tensor_free(lg);
    tfm_module_free(m);
}

/* Prefix reuse past the context (tfm_generate_options.cache): the tokens
 * are those of a generation without the cache (model.h).  On a RoPE model
 * past_context AUTO rolls; a caller's rolling cache gives the same tokens
 * as the generator's own, and a plain cache (which would shift instead)
 * is refused, as a rolling one is with REENCODE, the cache unchanged. */
static void test_rolling_prefix_reuse(void **state)
{
    (void)state;
    enum { M = 40 };
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.rope = TFM_ROPE_ADJACENT;
    tfm_module *m = model_with(&c, W, TFM_POSITIONAL_NONE);
    /* Weights whose greedy tokens past the context differ between the
     * rolling cache and the half-window shift (the ones of model_with
     * happen to give the same tokens either way). */
    randomize_params(m, 15, 5);
    const int32_t prompt[3] = { 1, 4, 7 };
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = M;
    int32_t ref[M], mine[M], shifted[M];
    int64_t n_ref = 0, n = 0;
    assert_int_equal(tfm_model_generate_v2(m, prompt, 3, &o, ref, M, &n_ref,
                                           NULL), TFM_OK);
    assert_int_equal(n_ref, M);
    /* The shift's tokens (REENCODE is not it, but differs the same way):
     * the rolling ones must differ from some other scheme's, or this
     * test proves nothing. */
    o.past_context = TFM_PAST_CONTEXT_REENCODE;
    assert_int_equal(tfm_model_generate_v2(m, prompt, 3, &o, shifted, M, &n,
                                           NULL), TFM_OK);
    assert_true(memcmp(shifted, ref, sizeof ref) != 0);
    o.past_context = TFM_PAST_CONTEXT_AUTO;

    tfm_kv_cache *rolling = NULL, *plain = NULL;
    assert_int_equal(tfm_kv_cache_create_rolling(m, W, &rolling), TFM_OK);
    o.cache = rolling;
    assert_int_equal(tfm_model_generate_v2(m, prompt, 3, &o, mine, M, &n,
                                           NULL), TFM_OK);
    assert_int_equal(n, M);
    assert_memory_equal(mine, ref, sizeof ref);

    /* A plain cache cannot roll: refused, nothing written, the cache as
     * it was (it used to shift, giving other tokens than without it). */
    assert_int_equal(tfm_kv_cache_create(m, W, &plain), TFM_OK);
    tfm_tensor *lg = make2(1, V, NULL);
    assert_int_equal(tfm_kv_cache_decode(plain, prompt, 2, lg), TFM_OK);
    o.cache = plain;
    n = -1;
    for (int i = 0; i < M; i++)
        mine[i] = -7;
    assert_int_equal(tfm_model_generate_v2(m, prompt, 3, &o, mine, M, &n,
                                           NULL), TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(n, -1);
    assert_int_equal(mine[0], -7);
    assert_int_equal(tfm_kv_cache_length(plain), 2);
    /* REENCODE with the plain cache: the tokens of REENCODE alone. */
    o.past_context = TFM_PAST_CONTEXT_REENCODE;
    assert_int_equal(tfm_model_generate_v2(m, prompt, 3, &o, mine, M, &n,
                                           NULL), TFM_OK);
    assert_int_equal(n, M);
    assert_memory_equal(mine, shifted, sizeof shifted);
    tfm_tensor_free(lg);
    tfm_kv_cache_free(plain);
    tfm_kv_cache_free(rolling);
    tfm_module_free(m);
}

/* Bytes the heap holds now (glibc: arena + mmapped blocks). */
static size_t heap_bytes(void)
{
    const struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TFM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TFM_TEST_SANITIZED 1
#endif
#endif

/* A generator's own cache holds what the generation feeds (the prompt and
 * every new token but the last), not the whole context: a RoPE model of
 * 2^21 positions generating 20 tokens reserves kilobytes where the full
 * context's rolling cache is 3 layers x (K, V) x 2 x 2^21 x 16 floats =
 * 1.5 GiB.  Its tokens equal those of the same weights with a context of
 * 64, and at a context of W those of 1 .. W - 3 new tokens after a
 * 3-token prompt (all inside the context, the boundary fed == W
 * included). */
static void test_generator_reserves_what_it_feeds(void **state)
{
    (void)state;
    enum { M = 20 };
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.rope = TFM_ROPE_ADJACENT;
    tfm_module *big = model_with(&c, (int64_t)1 << 21, TFM_POSITIONAL_NONE);
    tfm_module *ref = model_with(&c, 64, TFM_POSITIONAL_NONE);
    tfm_module *small = model_with(&c, W, TFM_POSITIONAL_NONE);
    const int32_t prompt[3] = { 1, 4, 7 };
    tfm_generate_options o;
    tfm_generate_options_init(&o);
    o.max_new_tokens = M;
    int32_t want[M], got[M];
    int64_t n = 0;
    assert_int_equal(tfm_model_generate_v2(ref, prompt, 3, &o, want, M, &n,
                                           NULL), TFM_OK);
    assert_int_equal(n, M);

    const size_t before = heap_bytes();
    tfm_generator *g = NULL;
    assert_int_equal(tfm_generator_create(big, prompt, 3, &o, &g), TFM_OK);
    const size_t held = heap_bytes() - before;
#ifndef TFM_TEST_SANITIZED
    assert_true(held < ((size_t)64 << 20));
#else
    (void)held;  /* the sanitizers' allocators are not glibc's */
#endif
    for (int i = 0; i < M; i++) {
        int produced = 0;
        assert_int_equal(tfm_generator_next(g, &got[i], &produced), TFM_OK);
        assert_true(produced);
        assert_int_equal(got[i], want[i]);
    }
    tfm_generator_free(g);

    for (int k = 1; k <= W - 3; k++) {
        o.max_new_tokens = k;
        n = 0;
        assert_int_equal(tfm_model_generate_v2(small, prompt, 3, &o, got, M,
                                               &n, NULL), TFM_OK);
        assert_int_equal(n, k);
        assert_memory_equal(got, want, (size_t)k * sizeof *got);
    }
    tfm_module_free(small);
    tfm_module_free(ref);
    tfm_module_free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rolling_variants),
        cmocka_unit_test(test_rolling_errors),
        cmocka_unit_test(test_rolling_prefix_reuse),
        cmocka_unit_test(test_generator_reserves_what_it_feeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
