/*
 * Beam search (model.h: tfm_model_beam_search) against exhaustive search.
 *
 * With num_beams = vocab_size and max_new_tokens = 2 a beam search keeps
 * every first token, so its best sequences are the best of all vocab_size^2
 * two-token continuations (and, with an EOS, of the one-token [EOS]): the
 * search may drop a two-token candidate only when num_beams others of the
 * same length score at least as much.  The test enumerates them all with
 * full forward passes (tfm_model_logits / tfm_model_seq2seq_logits, not
 * the KV cache the search uses), takes log_softmax in double, scores each
 * as HF does (summed log-probability / generated_length ** length_penalty,
 * the prompt not counted) and compares the best num_return_sequences:
 * ids exactly, scores within 1e-5.  Done on the shipped decoder-only model
 * and on the encoder-decoder test model.  Also: num_beams = 1 is greedy
 * decoding (tfm_model_generate), a prompt longer than the context is
 * its tail, and bad input is refused with nothing written.  HF's early stopping and longer searches are compared with a
 * PyTorch beam search in bindings/python/tests/test_beam_search.py.
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

enum { SENTINEL = -7, MAXV = 64, MAXR = 8 };

typedef struct candidate {
    int32_t ids[2];
    int64_t len;
    double score;
} candidate;

static void log_softmax(const float *x, int64_t n, double *out)
{
    double max = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    for (int64_t i = 0; i < n; i++)
        sum += exp((double)x[i] - max);
    for (int64_t i = 0; i < n; i++)
        out[i] = (double)x[i] - max - log(sum);
}

/* Log-probabilities of the first new token, lp1 [V], and of the second
 * after each first one, lp2 [V, V], by full passes over prompt + x. */
static void exhaustive_logprobs(tfm_module *model, const int32_t *prompt,
                                int64_t n, int32_t start, double *lp1,
                                double *lp2)
{
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(model, &c), TFM_OK);
    const int64_t V = c.vocab_size;
    const int enc_dec = c.architecture == TFM_ARCH_ENCODER_DECODER;
    /* Decoder-only: rows prompt + [x]; encoder-decoder: the targets
     * [start, x] after the source prompt (repeated per row). */
    const int64_t L = enc_dec ? 2 : n + 1;
    int32_t *ids = malloc((size_t)(V * L) * sizeof *ids);
    int32_t *src = malloc((size_t)(V * n) * sizeof *src);
    assert_non_null(ids);
    assert_non_null(src);
    for (int64_t x = 0; x < V; x++) {
        memcpy(src + x * n, prompt, (size_t)n * sizeof *src);
        if (enc_dec)
            ids[x * L] = start;
        else
            memcpy(ids + x * L, prompt, (size_t)n * sizeof *ids);
        ids[x * L + L - 1] = (int32_t)x;
    }
    const int64_t shape[3] = { V, L, V };
    tfm_tensor *logits = NULL;
    assert_int_equal(tfm_tensor_create(3, shape, &logits), TFM_OK);
    if (enc_dec)
        assert_int_equal(tfm_model_seq2seq_logits(model, src, n, ids, L, V,
                                                  logits),
                         TFM_OK);
    else
        assert_int_equal(tfm_model_logits(model, ids, V, L, logits), TFM_OK);
    const float *y = tfm_tensor_data(logits);
    log_softmax(y + (L - 2) * V, V, lp1);
    for (int64_t x = 0; x < V; x++)
        log_softmax(y + (x * L + L - 1) * V, V, lp2 + x * V);
    tfm_tensor_free(logits);
    free(ids);
    free(src);
}

static int by_score_desc(const void *a, const void *b)
{
    const double sa = ((const candidate *)a)->score;
    const double sb = ((const candidate *)b)->score;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

/* The search with num_beams = V, max_new_tokens = 2 against enumeration. */
static void check_exhaustive(tfm_module *model, const int32_t *prompt,
                             int64_t n, int32_t eos, double length_penalty,
                             int64_t R, int32_t start)
{
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(model, &c), TFM_OK);
    const int64_t V = c.vocab_size;
    assert_true(V <= MAXV && R <= MAXR);
    double *lp1 = malloc((size_t)V * sizeof *lp1);
    double *lp2 = malloc((size_t)(V * V) * sizeof *lp2);
    candidate *all = malloc((size_t)(V * V + 1) * sizeof *all);
    assert_non_null(lp1);
    assert_non_null(lp2);
    assert_non_null(all);
    exhaustive_logprobs(model, prompt, n, start, lp1, lp2);
    int64_t k = 0;
    for (int32_t x = 0; x < V; x++) {
        if (x == eos) {
            all[k++] = (candidate){ { x, -1 }, 1,
                                    lp1[x] / pow(1.0, length_penalty) };
            continue;
        }
        for (int32_t y = 0; y < V; y++)
            all[k++] = (candidate){ { x, y }, 2,
                                    (lp1[x] + lp2[x * V + y]) /
                                        pow(2.0, length_penalty) };
    }
    qsort(all, (size_t)k, sizeof *all, by_score_desc);

    tfm_beam_search_options o;
    tfm_beam_search_options_init(&o);
    o.num_beams = V;
    o.max_new_tokens = 2;
    o.length_penalty = length_penalty;
    o.num_return_sequences = R;
    o.eos_token_id = eos;
    o.pad_token_id = SENTINEL;
    o.decoder_start_token_id = start;
    int32_t ids[MAXR * 2];
    int64_t lengths[MAXR];
    float scores[MAXR];
    assert_int_equal(tfm_model_beam_search(model, prompt, n, &o, ids,
                                           lengths, scores),
                     TFM_OK);
    for (int64_t r = 0; r < R; r++) {
        assert_int_equal(lengths[r], all[r].len);
        assert_int_equal(ids[r * 2], all[r].ids[0]);
        assert_int_equal(ids[r * 2 + 1],
                         all[r].len == 2 ? all[r].ids[1] : SENTINEL);
        assert_true(fabs((double)scores[r] - all[r].score) < 1e-5);
    }
    free(lp1);
    free(lp2);
    free(all);
}

static tfm_module *load_shipped(int32_t *prompt, int64_t *n)
{
    tfm_module *model = NULL;
    tfm_tokenizer *tok = NULL;
    assert_int_equal(tfm_model_load(TFM_SHIPPED_MODEL, &model), TFM_OK);
    assert_int_equal(tfm_tokenizer_load(TFM_SHIPPED_MODEL, &tok), TFM_OK);
    const char *text = "And God said";
    assert_int_equal(tfm_tokenizer_encode(tok, text, strlen(text), prompt, 32,
                                          n),
                     TFM_OK);
    tfm_tokenizer_free(tok);
    return model;
}

static void test_decoder_only_exhaustive(void **state)
{
    (void)state;
    int32_t prompt[32];
    int64_t n = 0;
    tfm_module *model = load_shipped(prompt, &n);
    /* No EOS: the 5 best two-character continuations. */
    check_exhaustive(model, prompt, n, -1, 1.0, 5, -1);
    /* An EOS (the space, the likeliest first character after "said" is
     * checked below to be among the first ones) with length penalties that
     * favour short (-1: sum * len, 0: plain sum) and long sequences. */
    int32_t space = -1;
    tfm_tokenizer *tok = NULL;
    assert_int_equal(tfm_tokenizer_load(TFM_SHIPPED_MODEL, &tok), TFM_OK);
    int64_t n_space = 0;
    assert_int_equal(tfm_tokenizer_encode(tok, " ", 1, &space, 1, &n_space),
                     TFM_OK);
    tfm_tokenizer_free(tok);
    assert_int_equal(n_space, 1);
    check_exhaustive(model, prompt, n, space, 1.0, 8, -1);
    check_exhaustive(model, prompt, n, space, 0.0, 8, -1);
    check_exhaustive(model, prompt, n, space, 2.0, 8, -1);
    check_exhaustive(model, prompt, n, space, -1.0, 3, -1);
    tfm_module_free(model);
}

static void test_encoder_decoder_exhaustive(void **state)
{
    (void)state;
    tfm_module *model = NULL;
    assert_int_equal(tfm_model_load(TFM_MODELS_DIR
                                    "/encoder_decoder_sinusoidal.safetensors",
                                    &model),
                     TFM_OK);
    const int32_t src[5] = { 3, 7, 1, 12, 5 };
    check_exhaustive(model, src, 5, -1, 1.0, 6, 0);
    check_exhaustive(model, src, 5, 2, 1.0, 6, 0);
    check_exhaustive(model, src, 5, 2, 2.0, 4, 1);
    tfm_module_free(model);
}

/* num_beams = 1 without an EOS is greedy decoding; the score is the
 * greedy sequence's summed log-probability over its length. */
static void test_one_beam_is_greedy(void **state)
{
    (void)state;
    enum { M = 30 };
    int32_t prompt[32];
    int64_t n = 0;
    tfm_module *model = load_shipped(prompt, &n);
    int32_t greedy[M], ids[M];
    assert_int_equal(tfm_model_generate(model, prompt, n, M, NULL, 0, greedy),
                     TFM_OK);
    tfm_beam_search_options o;
    tfm_beam_search_options_init(&o);
    o.num_beams = 1;
    o.max_new_tokens = M;
    int64_t len = 0;
    float score = 0.0f;
    assert_int_equal(tfm_model_beam_search(model, prompt, n, &o, ids, &len,
                                           &score),
                     TFM_OK);
    assert_int_equal(len, M);
    assert_memory_equal(ids, greedy, sizeof ids);
    /* The score from full passes over prompt + greedy. */
    int32_t seq[32 + M];
    memcpy(seq, prompt, (size_t)n * sizeof *seq);
    memcpy(seq + n, greedy, sizeof greedy);
    const int64_t shape[3] = { 1, n + M, 63 };
    tfm_tensor *logits = NULL;
    assert_int_equal(tfm_tensor_create(3, shape, &logits), TFM_OK);
    assert_int_equal(tfm_model_logits(model, seq, 1, n + M, logits), TFM_OK);
    double lp[63], sum = 0.0;
    for (int64_t t = 0; t < M; t++) {
        log_softmax(tfm_tensor_data(logits) + (n - 1 + t) * 63, 63, lp);
        sum += lp[greedy[t]];
    }
    assert_true(fabs((double)score - sum / M) < 1e-5);
    tfm_tensor_free(logits);
    tfm_module_free(model);
}

static void expect_refused(tfm_module *model, const int32_t *prompt,
                           int64_t n, const tfm_beam_search_options *o,
                           tfm_status want)
{
    int32_t ids[4 * 8];
    int64_t lengths[4];
    float scores[4];
    for (int i = 0; i < 32; i++)
        ids[i] = SENTINEL;
    for (int i = 0; i < 4; i++) {
        lengths[i] = SENTINEL;
        scores[i] = (float)SENTINEL;
    }
    assert_int_equal(tfm_model_beam_search(model, prompt, n, o, ids, lengths,
                                           scores),
                     want);
    assert_true(strlen(tfm_last_error()) > 0);
    for (int i = 0; i < 32; i++)
        assert_int_equal(ids[i], SENTINEL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(lengths[i], SENTINEL);
        assert_true(scores[i] == (float)SENTINEL);
    }
}

static void test_bad_input(void **state)
{
    (void)state;
    int32_t prompt[200];
    int64_t n = 0;
    tfm_module *model = load_shipped(prompt, &n);
    tfm_beam_search_options base, o;
    tfm_beam_search_options_init(&base);
    assert_int_equal(base.struct_size, sizeof base);
    assert_int_equal(base.num_beams, 4);
    base.max_new_tokens = 8;
    base.num_return_sequences = 4;

    o = base;
    expect_refused(model, prompt, 0, &o, TFM_ERR_INVALID_ARGUMENT);
    expect_refused(model, NULL, n, &o, TFM_ERR_NULL_ARGUMENT);
    expect_refused(NULL, prompt, n, &o, TFM_ERR_NULL_ARGUMENT);
    /* A prompt longer than the context (128) is taken
     * (test_long_prompt_is_its_tail), but its dropped ids are checked. */
    for (int i = 0; i < 200; i++)
        prompt[i] = prompt[i % n];
    prompt[0] = 63;
    expect_refused(model, prompt, 129, &o, TFM_ERR_INVALID_ARGUMENT);
    prompt[0] = prompt[n];
    /* 125 + max_new_tokens past the context is allowed since the beams
     * roll or shift (test_beam_search.py, test_rolling_cache) */
    int32_t bad_id[2] = { 1, 63 };
    expect_refused(model, bad_id, 2, &o, TFM_ERR_INVALID_ARGUMENT);
    o = base;
    o.eos_token_id = 63;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    o.eos_token_id = -2;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    o = base;
    o.num_beams = 0;
    o.num_return_sequences = 0;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    o.num_beams = 64;
    o.num_return_sequences = 1;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    o = base;
    o.num_beams = 3;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    o = base;
    o.max_new_tokens = 0;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    o = base;
    o.length_penalty = NAN;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    o = base;
    o.early_stopping = 3;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    o = base;
    o.struct_size = 4;
    expect_refused(model, prompt, n, &o, TFM_ERR_INVALID_ARGUMENT);
    {
        /* A struct_size ending inside suppress_tokens (a pointer) takes
         * none of its bytes: the search runs as a caller without it,
         * where it read half a pointer before. */
        int32_t ids_a[4 * 8], ids_b[4 * 8];
        int64_t len_a[4], len_b[4];
        float sc_a[4], sc_b[4];
        o = base;
        o.suppress_tokens = (const int32_t *)(uintptr_t)0x5a5a5a5a5a5a5a5aULL;
        o.n_suppress_tokens = 3;
        o.struct_size = offsetof(tfm_beam_search_options, suppress_tokens);
        assert_int_equal(tfm_model_beam_search(model, prompt, n, &o, ids_a,
                                               len_a, sc_a),
                         TFM_OK);
        o.struct_size += 4;
        assert_int_equal(tfm_model_beam_search(model, prompt, n, &o, ids_b,
                                               len_b, sc_b),
                         TFM_OK);
        assert_memory_equal(ids_a, ids_b, sizeof ids_a);
        assert_memory_equal(len_a, len_b, sizeof len_a);
        assert_memory_equal(sc_a, sc_b, sizeof sc_a);
    }
    /* NULL outputs (out_scores may be NULL). */
    o = base;
    int64_t len[4];
    int32_t ids[32];
    assert_int_equal(tfm_model_beam_search(model, prompt, n, &o, NULL, len,
                                           NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_model_beam_search(model, prompt, n, &o, ids, NULL,
                                           NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_model_beam_search(model, prompt, n, &o, ids, len,
                                           NULL),
                     TFM_OK);
    /* options NULL: the defaults (4 beams, 20 tokens, one sequence). */
    int32_t ids20[20];
    assert_int_equal(tfm_model_beam_search(model, prompt, n, NULL, ids20, len,
                                           NULL),
                     TFM_OK);
    assert_int_equal(len[0], 20);
    /* An encoder-decoder model needs a decoder start token; an
     * encoder-only model is refused. */
    tfm_module *s2s = NULL;
    assert_int_equal(tfm_model_load(TFM_MODELS_DIR
                                    "/encoder_decoder_sinusoidal.safetensors",
                                    &s2s),
                     TFM_OK);
    const int32_t src[3] = { 1, 2, 3 };
    o = base;
    expect_refused(s2s, src, 3, &o, TFM_ERR_INVALID_ARGUMENT);
    o.decoder_start_token_id = 0;
    o.max_new_tokens = 11;   /* context 10 */
    expect_refused(s2s, src, 3, &o, TFM_ERR_CAPACITY);
    assert_non_null(strstr(tfm_last_error(), "does not slide"));
    /* A source longer than the context: an encoder-decoder model cannot
     * drop any of it (the one long prompt refused), and says why. */
    int32_t long_src[11];
    for (int i = 0; i < 11; i++)
        long_src[i] = 1 + i % 4;
    o.max_new_tokens = 4;
    expect_refused(s2s, long_src, 11, &o, TFM_ERR_CAPACITY);
    assert_non_null(strstr(tfm_last_error(), "cannot drop"));
    int32_t fit[4 * 4];
    int64_t fit_len[4];
    assert_int_equal(tfm_model_beam_search(s2s, long_src, 10, &o, fit,
                                           fit_len, NULL), TFM_OK);
    tfm_module_free(s2s);
    tfm_module *enc = NULL;
    assert_int_equal(tfm_model_load(TFM_MODELS_DIR
                                    "/encoder_only_learned.safetensors", &enc),
                     TFM_OK);
    expect_refused(enc, src, 3, &base, TFM_ERR_WRONG_KIND);
    tfm_module_free(enc);
    tfm_module_free(model);
}

/* A decoder-only prompt longer than the context (issue 44) is its last
 * context_length ids, as tfm_generator_create takes one: the beams, their
 * lengths and scores are the tail's exactly, and one beam is greedy
 * generation (tfm_model_generate_v2, past_context AUTO as the beams) of
 * the long prompt. */
static void test_long_prompt_is_its_tail(void **state)
{
    (void)state;
    enum { EXTRA = 22, R = 4, M1 = 20 };
    int32_t prompt[200];
    int64_t n = 0;
    tfm_module *model = load_shipped(prompt, &n);
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(model, &c), TFM_OK);
    const int64_t L = c.context_length + EXTRA;
    assert_true(L <= 200);
    for (int64_t i = n; i < L; i++)
        prompt[i] = prompt[(i * 5) % n];
    tfm_beam_search_options o;
    tfm_beam_search_options_init(&o);
    o.num_beams = R;
    o.num_return_sequences = R;
    o.max_new_tokens = 8;
    int32_t ids[R * 8], want_ids[R * 8];
    int64_t len[R], want_len[R];
    float score[R], want_score[R];
    assert_int_equal(tfm_model_beam_search(model, prompt + EXTRA,
                                           c.context_length, &o, want_ids,
                                           want_len, want_score), TFM_OK);
    assert_int_equal(tfm_model_beam_search(model, prompt, L, &o, ids, len,
                                           score), TFM_OK);
    assert_memory_equal(ids, want_ids, sizeof ids);
    assert_memory_equal(len, want_len, sizeof len);
    assert_memory_equal(score, want_score, sizeof score);

    o.num_beams = 1;
    o.num_return_sequences = 1;
    o.max_new_tokens = M1;
    int32_t one[M1], greedy[M1];
    tfm_generate_options g;
    tfm_generate_options_init(&g);
    g.max_new_tokens = M1;
    int64_t k = -1;
    assert_int_equal(tfm_model_generate_v2(model, prompt, L, &g, greedy, M1,
                                           &k, NULL), TFM_OK);
    assert_int_equal(k, M1);
    assert_int_equal(tfm_model_beam_search(model, prompt, L, &o, one, len,
                                           NULL), TFM_OK);
    assert_int_equal(len[0], M1);
    assert_memory_equal(one, greedy, sizeof one);
    tfm_module_free(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decoder_only_exhaustive),
        cmocka_unit_test(test_encoder_decoder_exhaustive),
        cmocka_unit_test(test_one_beam_is_greedy),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_long_prompt_is_its_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
