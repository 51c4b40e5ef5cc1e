/* Whole models against PyTorch (tools/make_model_fixtures.py): loading model
 * files, full forward passes, and KV-cache decoding whose every step must
 * equal the full recompute. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <transformer/transformer.h>

#include "test_util.h"

#ifndef TFM_MODELS_DIR
#error "TFM_MODELS_DIR must point at tests/models"
#endif

#define TOL 1e-5

/* The fixture folder: argv[1] when given (a freshly generated set), else the
 * committed tests/models. */
static const char *models_dir = TFM_MODELS_DIR;

typedef struct ref_case {
    tfm_module *model;
    tfm_model_config config;
    int64_t B, L, S;
    int32_t *ids, *src, *tgt;   /* [B, L] / [B, S] / [B, L] */
    tfm_tensor *logits;         /* PyTorch's [B, L, V] */
} ref_case;

static int32_t *read_ids(tfm_safetensors *f, const char *name, int64_t *B,
                         int64_t *L)
{
    tfm_tensor *t = NULL;
    if (tfm_safetensors_read(f, name, &t) != TFM_OK)
        return NULL;
    *B = tfm_tensor_dim(t, 0);
    *L = tfm_tensor_dim(t, 1);
    int32_t *ids = malloc((size_t)tfm_tensor_numel(t) * sizeof *ids);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        ids[i] = (int32_t)tfm_tensor_data(t)[i];
    tfm_tensor_free(t);
    return ids;
}

static int32_t *read_ids_1d(tfm_safetensors *f, const char *name, int64_t *n)
{
    tfm_tensor *t = NULL;
    if (tfm_safetensors_read(f, name, &t) != TFM_OK)
        fail_msg("%s: %s", name, tfm_last_error());
    *n = tfm_tensor_numel(t);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int64_t i = 0; i < *n; i++)
        ids[i] = (int32_t)tfm_tensor_data(t)[i];
    tfm_tensor_free(t);
    return ids;
}

static void load_case(ref_case *c, const char *name)
{
    char path[512];
    memset(c, 0, sizeof *c);
    snprintf(path, sizeof path, "%s/%s.safetensors", models_dir, name);
    tfm_status st = tfm_model_load(path, &c->model);
    if (st != TFM_OK)
        fail_msg("loading %s: %s", path, tfm_last_error());
    assert_int_equal(tfm_model_get_config(c->model, &c->config), TFM_OK);
    snprintf(path, sizeof path, "%s/%s.ref.safetensors", models_dir, name);
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    if (c->config.architecture == TFM_ARCH_ENCODER_DECODER) {
        c->src = read_ids(f, "src_ids", &c->B, &c->S);
        c->tgt = read_ids(f, "tgt_ids", &c->B, &c->L);
        assert_non_null(c->src);
        assert_non_null(c->tgt);
    } else {
        c->ids = read_ids(f, "ids", &c->B, &c->L);
        assert_non_null(c->ids);
    }
    assert_int_equal(tfm_safetensors_read(f, "logits", &c->logits), TFM_OK);
    tfm_safetensors_close(f);
}

static void free_case(ref_case *c)
{
    tfm_module_free(c->model);
    free(c->ids);
    free(c->src);
    free(c->tgt);
    tfm_tensor_free(c->logits);
}

static void check_full_forward(const char *name)
{
    ref_case c;
    load_case(&c, name);
    const int64_t V = c.config.vocab_size;
    tfm_tensor *out = make3(c.B, c.L, V, NULL);
    tfm_status st =
        c.config.architecture == TFM_ARCH_ENCODER_DECODER
            ? tfm_model_seq2seq_logits(c.model, c.src, c.S, c.tgt, c.L, c.B,
                                       out)
            : tfm_model_logits(c.model, c.ids, c.B, c.L, out);
    if (st != TFM_OK)
        fail_msg("%s: %s", name, tfm_last_error());
    double e = rel_err(tfm_tensor_data(out), tfm_tensor_data(c.logits),
                       c.B * c.L * V);
    printf("  %-42s full forward  rel err %.3e\n", name, e);
    assert_true(e <= TOL);
    tfm_tensor_free(out);
    free_case(&c);
}

/* Prefill `prefill` tokens of each sequence, then one token per step: every
 * step's logits must equal PyTorch's full-sequence logits at that position. */
static void check_kv_cache(const char *name, int64_t prefill)
{
    ref_case c;
    load_case(&c, name);
    const int64_t V = c.config.vocab_size, L = c.L;
    tfm_kv_cache *cache = NULL;
    assert_int_equal(tfm_kv_cache_create(c.model, L, &cache), TFM_OK);
    tfm_tensor *step = make2(prefill, V, NULL);
    tfm_tensor *one = make2(1, V, NULL);
    double worst = 0;
    for (int64_t b = 0; b < c.B; b++) {
        const int32_t *ids = c.ids + b * L;
        const float *ref = tfm_tensor_data(c.logits) + b * L * V;
        tfm_kv_cache_reset(cache);
        assert_int_equal(tfm_kv_cache_length(cache), 0);
        assert_int_equal(tfm_kv_cache_decode(cache, ids, prefill, step),
                         TFM_OK);
        double e = rel_err(tfm_tensor_data(step), ref, prefill * V);
        worst = e > worst ? e : worst;
        for (int64_t t = prefill; t < L; t++) {
            assert_int_equal(tfm_kv_cache_decode(cache, ids + t, 1, one),
                             TFM_OK);
            e = rel_err(tfm_tensor_data(one), ref + t * V, V);
            worst = e > worst ? e : worst;
        }
        assert_int_equal(tfm_kv_cache_length(cache), L);
        /* Full: one more position is refused and changes nothing. */
        float before = tfm_tensor_data(one)[0];
        assert_int_equal(tfm_kv_cache_decode(cache, ids, 1, one),
                         TFM_ERR_CAPACITY);
        assert_int_equal(tfm_kv_cache_length(cache), L);
        assert_true(tfm_tensor_data(one)[0] == before);
    }
    printf("  %-42s KV cache (prefill %lld) worst rel err %.3e\n", name,
           (long long)prefill, worst);
    assert_true(worst <= TOL);
    tfm_tensor_free(step);
    tfm_tensor_free(one);
    tfm_kv_cache_free(cache);
    free_case(&c);
}

static void decoder_learned_full(void **s)
{
    (void)s;
    check_full_forward("decoder_learned_prenorm_gelu");
}

static void decoder_sinusoidal_full(void **s)
{
    (void)s;
    check_full_forward("decoder_sinusoidal_postnorm_relu_untied");
}

static void encoder_only_full(void **s)
{
    (void)s;
    check_full_forward("encoder_only_learned");
}

static void encoder_decoder_full(void **s)
{
    (void)s;
    check_full_forward("encoder_decoder_sinusoidal");
}

static void decoder_learned_cache(void **s)
{
    (void)s;
    check_kv_cache("decoder_learned_prenorm_gelu", 1);
    check_kv_cache("decoder_learned_prenorm_gelu", 5);
}

static void decoder_sinusoidal_cache(void **s)
{
    (void)s;
    check_kv_cache("decoder_sinusoidal_postnorm_relu_untied", 3);
}

/* Only-last logits of a prefill equal the last row of PyTorch's full
 * logits, pre-norm and post-norm: the last layer's feed-forward runs on
 * the last row only (its other rows are never read), while every layer's
 * keys and values are cached for all rows, so the next position's logits
 * (decoded on that cache) equal PyTorch's too. */
static void prefill_last_row_only(void **s)
{
    (void)s;
    static const char *const cases[] = {
        "decoder_learned_prenorm_gelu",
        "decoder_sinusoidal_postnorm_relu_untied"
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ref_case c;
        load_case(&c, cases[k]);
        const int64_t V = c.config.vocab_size;
        assert_true(c.L >= 8);
        tfm_kv_cache *cache = NULL;
        assert_int_equal(tfm_kv_cache_create(c.model, c.L, &cache), TFM_OK);
        tfm_tensor *one = make2(1, V, NULL);
        assert_int_equal(tfm_kv_cache_decode(cache, c.ids, 7, one), TFM_OK);
        double e = rel_err(tfm_tensor_data(one),
                           tfm_tensor_data(c.logits) + 6 * V, V);
        if (!(e <= TOL))
            fail_msg("%s: prefill's last row: relative error %g", cases[k],
                     e);
        assert_int_equal(tfm_kv_cache_decode(cache, c.ids + 7, 1, one),
                         TFM_OK);
        e = rel_err(tfm_tensor_data(one), tfm_tensor_data(c.logits) + 7 * V,
                    V);
        if (!(e <= TOL))
            fail_msg("%s: the next position: relative error %g", cases[k],
                     e);
        tfm_tensor_free(one);
        tfm_kv_cache_free(cache);
        free_case(&c);
    }
}

/* Greedy generation equals the argmax of full recomputes, step by step. */
static void generate_matches_recompute(void **s)
{
    (void)s;
    ref_case c;
    load_case(&c, "decoder_learned_prenorm_gelu");
    const int64_t V = c.config.vocab_size, ctx = c.config.context_length;
    const int64_t n_prompt = 3, n_new = 15; /* runs past the context (12) */
    int32_t seq[32], out[32];
    memcpy(seq, c.ids, n_prompt * sizeof *seq);
    assert_int_equal(tfm_model_generate(c.model, seq, n_prompt, n_new, NULL,
                                        0, out),
                     TFM_OK);
    tfm_tensor *logits = make3(1, ctx, V, NULL);
    int64_t len = n_prompt;
    for (int64_t t = 0; t < n_new; t++) {
        int64_t w = len < ctx ? len : ctx;
        tfm_tensor *lw = make3(1, w, V, NULL);
        assert_int_equal(tfm_model_logits(c.model, seq + len - w, 1, w, lw),
                         TFM_OK);
        const float *row = tfm_tensor_data(lw) + (w - 1) * V;
        int32_t best = 0;
        for (int32_t v = 1; v < V; v++)
            if (row[v] > row[best])
                best = v;
        assert_int_equal(out[t], best);
        seq[len++] = best;
        tfm_tensor_free(lw);
    }
    tfm_tensor_free(logits);
    free_case(&c);
}

/* A saved model loads back with identical parameters and logits. */
static void save_and_reload(void **s)
{
    (void)s;
    ref_case c;
    load_case(&c, "decoder_sinusoidal_postnorm_relu_untied");
    char path[] = "/tmp/tfm_model_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *keys[] = { "tfm.tokenizer" }, *values[] = { "char" };
    assert_int_equal(tfm_model_save(c.model, path, 1, keys, values), TFM_OK);
    tfm_module *again = NULL;
    assert_int_equal(tfm_model_load(path, &again), TFM_OK);
    assert_int_equal(tfm_module_num_parameters(again),
                     tfm_module_num_parameters(c.model));
    const int64_t V = c.config.vocab_size;
    tfm_tensor *a = make3(c.B, c.L, V, NULL), *b = make3(c.B, c.L, V, NULL);
    assert_int_equal(tfm_model_logits(c.model, c.ids, c.B, c.L, a), TFM_OK);
    assert_int_equal(tfm_model_logits(again, c.ids, c.B, c.L, b), TFM_OK);
    assert_memory_equal(tfm_tensor_data(a), tfm_tensor_data(b),
                        (size_t)(c.B * c.L * V) * sizeof(float));
    tfm_tensor_free(a);
    tfm_tensor_free(b);
    tfm_module_free(again);
    unlink(path);
    free_case(&c);
}

static void errors_leave_outputs(void **s)
{
    (void)s;
    ref_case c;
    load_case(&c, "decoder_learned_prenorm_gelu");
    const int64_t V = c.config.vocab_size;
    tfm_tensor *out = make3(1, 3, V, NULL);
    fill(out, 42.0f);
    int32_t bad[3] = { 0, (int32_t)V, 1 };
    assert_int_equal(tfm_model_logits(c.model, bad, 1, 3, out),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "outside the vocabulary"));
    int32_t long_ids[13] = { 0 };
    tfm_tensor *big = make3(1, 13, V, NULL);
    assert_int_equal(tfm_model_logits(c.model, long_ids, 1, 13, big),
                     TFM_ERR_CAPACITY);
    tfm_tensor *wrong = make3(1, 3, V + 1, NULL);
    assert_int_equal(tfm_model_logits(c.model, c.ids, 1, 3, wrong),
                     TFM_ERR_SHAPE);
    expect_all_equal(out, 42.0f, "out after errors");
    tfm_kv_cache *cache = NULL;
    assert_int_equal(tfm_kv_cache_create(c.model, 13, &cache),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_null(cache);
    tfm_module *mha = NULL;
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &mha), TFM_OK);
    assert_int_equal(tfm_kv_cache_create(mha, 4, &cache), TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_model_load("/nonexistent/model.safetensors", &mha),
                     TFM_ERR_IO);
    tfm_module_free(mha);
    FREE_TENSORS(out, big, wrong);
    free_case(&c);
}

/* The shipped model against PyTorch (tools/make_generation_reference.py):
 * tfm_model_generate's 200 greedy characters equal PyTorch's, and the logits
 * of every step, computed through the KV cache with the window sliding past
 * the context length, match PyTorch's to 1e-5. */
static void shipped_model_greedy(void **s)
{
    (void)s;
    char path[512];
    tfm_module *model = NULL;
    if (tfm_model_load(TFM_SHIPPED_MODEL, &model) != TFM_OK)
        fail_msg("loading %s: %s", TFM_SHIPPED_MODEL, tfm_last_error());
    snprintf(path, sizeof path, "%s/kjv_greedy.ref.safetensors", models_dir);
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    int64_t P, N;
    int32_t *prompt = read_ids_1d(f, "prompt_ids", &P);
    int32_t *ref_ids = read_ids_1d(f, "ids", &N);
    tfm_tensor *ref = NULL;
    assert_int_equal(tfm_safetensors_read(f, "logits", &ref), TFM_OK);
    tfm_safetensors_close(f);

    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(model, &c), TFM_OK);
    const int64_t V = c.vocab_size, ctx = c.context_length;
    assert_int_equal(tfm_tensor_dim(ref, 1), V);
    assert_true(P + N > ctx); /* the window must slide */

    int32_t *ids = malloc((size_t)N * sizeof *ids);
    assert_int_equal(tfm_model_generate(model, prompt, P, N, NULL, 0, ids),
                     TFM_OK);
    int64_t same = 0;
    while (same < N && ids[same] == ref_ids[same])
        same++;
    printf("  shipped model: %lld of %lld greedy characters equal PyTorch's\n",
           (long long)same, (long long)N);
    assert_int_equal(same, N);

    /* Per-step logits, fed PyTorch's own choices. */
    int32_t *seq = malloc((size_t)(P + N) * sizeof *seq);
    memcpy(seq, prompt, (size_t)P * sizeof *seq);
    int64_t len = P;
    tfm_kv_cache *cache = NULL;
    tfm_tensor *logits = make2(1, V, NULL);
    assert_int_equal(tfm_kv_cache_create(model, ctx, &cache), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(cache, seq, len, logits), TFM_OK);
    double worst = 0;
    for (int64_t t = 0; t < N; t++) {
        double e = rel_err(tfm_tensor_data(logits),
                           tfm_tensor_data(ref) + t * V, V);
        worst = e > worst ? e : worst;
        seq[len++] = ref_ids[t];
        if (tfm_kv_cache_length(cache) < ctx) {
            assert_int_equal(tfm_kv_cache_decode(cache, &ref_ids[t], 1, logits),
                             TFM_OK);
        } else {
            tfm_kv_cache_reset(cache);
            assert_int_equal(
                tfm_kv_cache_decode(cache, seq + len - ctx, ctx, logits),
                TFM_OK);
        }
    }
    printf("  shipped model: worst per-step logits rel err %.3e\n", worst);
    assert_true(worst <= TOL);
    tfm_kv_cache_free(cache);
    tfm_tensor_free(logits);
    tfm_tensor_free(ref);
    free(seq);
    free(ids);
    free(prompt);
    free(ref_ids);
    tfm_module_free(model);
}

/* A PyTorch checkpoint loads by name, without renaming: the nn.Transformer
 * state_dict in tests/fixtures/transformer_post.safetensors (its tensors
 * are "param.<state_dict name>") through tfm_module_load_safetensors, then
 * the forward pass equals PyTorch's output stored beside it.  A failed load
 * leaves the module unchanged. */
static void load_pytorch_checkpoint(void **s)
{
    (void)s;
    const char *path = TFM_FIXTURES_DIR "/transformer_post.safetensors";
    tfm_layer_config c = tfm_layer_config_default(8, 2);
    c.d_ff = 16;
    tfm_module *t = NULL;
    assert_int_equal(tfm_transformer_create(&c, 2, 2, &t), TFM_OK);
    /* Wrong prefix: nothing under it, every parameter missing. */
    assert_int_equal(tfm_module_load_safetensors(t, path, "weights.", 1),
                     TFM_ERR_FORMAT);
    assert_non_null(strstr(tfm_last_error(), "lacks the parameter"));
    /* Strict with no prefix: the inputs and outputs are extra tensors. */
    assert_int_equal(tfm_module_load_safetensors(t, path, NULL, 1),
                     TFM_ERR_FORMAT);
    tfm_tensor *w = make2(24, 8, NULL);
    assert_int_equal(tfm_module_get_parameter(
                         t, "encoder.layers.0.self_attn.in_proj_weight", w),
                     TFM_OK);
    expect_all_equal(w, 0.0f, "parameter after a failed load");
    assert_int_equal(tfm_module_load_safetensors(t, path, "param.", 1),
                     TFM_OK);

    tfm_safetensors *f = NULL;
    tfm_tensor *src = NULL, *tgt = NULL, *ref = NULL, *spad = NULL,
               *mpad = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_read(f, "input.src", &src), TFM_OK);
    assert_int_equal(tfm_safetensors_read(f, "input.tgt", &tgt), TFM_OK);
    assert_int_equal(tfm_safetensors_read(f, "output.out", &ref), TFM_OK);
    assert_int_equal(
        tfm_safetensors_read(f, "input.src_key_padding_mask", &spad), TFM_OK);
    assert_int_equal(
        tfm_safetensors_read(f, "input.memory_key_padding_mask", &mpad),
        TFM_OK);
    tfm_safetensors_close(f);
    tfm_attention_masks sm = { .key_padding_mask = spad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    tfm_attention_masks tm = { .causal = TFM_CAUSAL_TOP_LEFT };
    tfm_attention_masks mm = { .key_padding_mask = mpad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    tfm_tensor *out = make3(tfm_tensor_dim(tgt, 0), tfm_tensor_dim(tgt, 1), 8,
                            NULL);
    assert_int_equal(tfm_transformer_forward(t, src, tgt, &sm, &tm, &mm, out),
                     TFM_OK);
    double e = rel_err(tfm_tensor_data(out), tfm_tensor_data(ref),
                       tfm_tensor_numel(ref));
    printf("  nn.Transformer checkpoint: rel err %.3e\n", e);
    assert_true(e <= TOL);
    FREE_TENSORS(w, src, tgt, ref, spad, mpad, out);
    tfm_module_free(t);
}

/* Metadata alone cannot make tfm_model_load reserve memory: a file with no
 * tensors whose configuration asks for 100000 layers of width 4096 (about
 * 200 GB) is refused before anything is allocated for the model. */
static void hostile_metadata_refused_early(void **s)
{
    (void)s;
    char path[] = "/tmp/tfm_hostile_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tfm_safetensors_writer *w = NULL;
    assert_int_equal(tfm_safetensors_writer_create(&w), TFM_OK);
    const char *kv[][2] = {
        { "format", "libtransformer" }, { "tfm.architecture", "decoder_only" },
        { "tfm.vocab_size", "100" }, { "tfm.d_model", "4096" },
        { "tfm.n_heads", "8" }, { "tfm.n_layers", "100000" },
        { "tfm.d_ff", "16384" }, { "tfm.context_length", "8" },
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        assert_int_equal(
            tfm_safetensors_writer_set_metadata(w, kv[i][0], kv[i][1]), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_save(w, path), TFM_OK);
    tfm_safetensors_writer_free(w);
    tfm_module *m = SENTINEL_MODULE;
    assert_int_equal(tfm_model_load(path, &m), TFM_ERR_FORMAT);
    assert_ptr_equal(m, SENTINEL_MODULE);
    assert_non_null(strstr(tfm_last_error(), "token_embedding.weight"));
    unlink(path);
}

/* A decoder-only model: d_model 8, 2 heads, d_ff 16, 11 tokens, 1 layer,
 * context 8 (zero weights). */
static tfm_module *small_decoder(void)
{
    tfm_layer_config layer = tfm_layer_config_default(8, 2);
    layer.d_ff = 16;
    const tfm_model_config mc =
        tiny_model_config(TFM_ARCH_DECODER_ONLY, layer, 11, 1, 8);
    tfm_module *model = NULL;
    assert_int_equal(tfm_model_create(&mc, &model), TFM_OK);
    return model;
}

/* Rewrites the safetensors file at path with metadata key = value (added,
 * or replacing the file's own), through the public reader and writer. */
static void resave_with(const char *path, const char *key, const char *value)
{
    tfm_safetensors *f = NULL;
    tfm_safetensors_writer *w = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_create(&w), TFM_OK);
    for (int64_t i = 0; i < tfm_safetensors_count(f); i++) {
        tfm_tensor *t = NULL;
        const char *name = tfm_safetensors_name(f, i);
        assert_int_equal(tfm_safetensors_read(f, name, &t), TFM_OK);
        assert_int_equal(tfm_safetensors_writer_add(w, name, t), TFM_OK);
        tfm_tensor_free(t);
    }
    for (int64_t i = 0; i < tfm_safetensors_metadata_count(f); i++) {
        const char *k = tfm_safetensors_metadata_key(f, i);
        assert_int_equal(tfm_safetensors_writer_set_metadata(
                             w, k, tfm_safetensors_metadata(f, k)),
                         TFM_OK);
    }
    assert_int_equal(tfm_safetensors_writer_set_metadata(w, key, value),
                     TFM_OK);
    tfm_safetensors_close(f);
    assert_int_equal(tfm_safetensors_writer_save(w, path), TFM_OK);
    tfm_safetensors_writer_free(w);
}

/* Saves small_decoder(), rewrites its file with metadata key = value
 * (replacing the configuration's own) and loads it: the status, *m on
 * success. */
static tfm_status load_with(const char *key, const char *value,
                            tfm_module **m)
{
    tfm_module *model = small_decoder();
    char path[] = "/tmp/tfm_meta_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tfm_model_save(model, path, 0, NULL, NULL), TFM_OK);
    tfm_module_free(model);
    resave_with(path, key, value);
    tfm_status st = tfm_model_load(path, m);
    unlink(path);
    return st;
}

static void expect_metadata_refused(const char *key, const char *value)
{
    tfm_module *m = SENTINEL_MODULE;
    tfm_status st = load_with(key, value, &m);
    if (st != TFM_ERR_FORMAT || m != SENTINEL_MODULE)
        fail_msg("\"%s\": \"%s\" loaded (%s)", key, value,
                 tfm_status_string(st));
    if (!strstr(tfm_last_error(), key))
        fail_msg("\"%s\": \"%s\": the error does not name the key: %s", key,
                 value, tfm_last_error());
}

static void expect_metadata_loads(const char *key, const char *value)
{
    tfm_module *m = NULL;
    if (load_with(key, value, &m) != TFM_OK)
        fail_msg("\"%s\": \"%s\" refused: %s", key, value, tfm_last_error());
    tfm_module_free(m);
}

/* tfm_model_save's extra metadata adds to the model file's own and never
 * replaces it: "format" and every configuration key (a "tfm.attention.*"
 * key too) are refused before anything is written, and the tokenizer's
 * and other keys are written. */
static void save_extra_metadata_cannot_override(void **s)
{
    (void)s;
    tfm_module *model = small_decoder();
    char path[] = "/tmp/tfm_extra_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "old", 3), 3);
    close(fd);
    static const char *const reserved[] = {
        "format", "tfm.d_model", "tfm.n_layers", "tfm.vocab_size",
        "tfm.bias", "tfm.head_bias", "tfm.attention.score",
        "tfm.attention.anything"
    };
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        const char *keys[] = { "tfm.tokenizer", reserved[i] };
        const char *values[] = { "char", "1" };
        assert_int_equal(tfm_model_save(model, path, 2, keys, values),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tfm_last_error(), reserved[i]));
    }
    const char *null_value[] = { NULL };
    const char *one_key[] = { "note" };
    assert_int_equal(tfm_model_save(model, path, 1, one_key, null_value),
                     TFM_ERR_NULL_ARGUMENT);
    char buf[8] = { 0 };   /* nothing written over the old file */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof buf, f), 3);
    fclose(f);
    assert_string_equal(buf, "old");
    const char *keys[] = { "tfm.tokenizer", "tfm.vocab", "note" };
    const char *values[] = { "char", "abcdefghijk", "kept" };
    assert_int_equal(tfm_model_save(model, path, 3, keys, values), TFM_OK);
    tfm_safetensors *file = NULL;
    assert_int_equal(tfm_safetensors_open(path, &file), TFM_OK);
    assert_string_equal(tfm_safetensors_metadata(file, "note"), "kept");
    assert_string_equal(tfm_safetensors_metadata(file, "tfm.d_model"), "8");
    tfm_safetensors_close(file);
    unlink(path);
    tfm_module_free(model);
}

/* Issue 13: numbers in metadata are the whole string in one spelling
 * (src/number_parse.h): strtoll and strtod skipped leading white space,
 * so "tfm.d_model": " 8" or "\n8" loaded as 8; reals took hexadecimal,
 * "inf" and "nan" spellings.  And an escaped NUL in a value cut it: an
 * architecture "decoder_only\u0000x" loaded as "decoder_only". */
static void metadata_strict_syntax(void **s)
{
    (void)s;
    static const char *const bad_ints[] = { " 8", "\n8", "\t8", "8 ", "8\n",
                                            "+8", "0x8", "8.0", "1e1", "",
                                            "-8", "8a" };
    for (size_t i = 0; i < sizeof bad_ints / sizeof bad_ints[0]; i++) {
        expect_metadata_refused("tfm.d_model", bad_ints[i]);
        expect_metadata_refused("tfm.n_layers", bad_ints[i]);
    }
    expect_metadata_loads("tfm.d_model", "08");
    static const char *const bad_reals[] = { " 1e-5", "\n1e-5", "1e-5 ",
                                             "+1e-5", "0x1p-17", "inf", "nan",
                                             "-inf", "1e-5f", ".", "1e",
                                             "1e400", "" };
    for (size_t i = 0; i < sizeof bad_reals / sizeof bad_reals[0]; i++) {
        expect_metadata_refused("tfm.layer_norm_eps", bad_reals[i]);
        expect_metadata_refused("tfm.positional_base", bad_reals[i]);
    }
    static const char *const good_reals[] = { "1e-05", "0.00001", ".00001",
                                              "1E-5", "1e+0", "2." };
    for (size_t i = 0; i < sizeof good_reals / sizeof good_reals[0]; i++)
        expect_metadata_loads("tfm.layer_norm_eps", good_reals[i]);
}

/* Issue 13: max_new beyond TFM_MAX_NEW_TOKENS is refused before anything
 * is allocated (the ids of the whole sequence were allocated up front:
 * 2^40 new tokens asked for 4 TiB); out_ids untouched. */
static void generate_refuses_huge_max_new(void **s)
{
    (void)s;
    tfm_module *model = small_decoder();
    const int32_t prompt[2] = { 1, 2 };
    int32_t out[3] = { -7, -7, -7 };
    const int64_t huge[] = { (int64_t)1 << 40, INT64_MAX,
                             TFM_MAX_NEW_TOKENS + 1 };
    for (int i = 0; i < 3; i++) {
        tfm_testing_fail_allocation(1); /* any allocation would fail */
        tfm_status st =
            tfm_model_generate(model, prompt, 2, huge[i], NULL, 0, out);
        tfm_testing_fail_allocation(0);
        assert_int_equal(st, TFM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tfm_last_error(), "TFM_MAX_NEW_TOKENS"));
        assert_int_equal(out[0], -7);
    }
    assert_int_equal(tfm_model_generate(model, prompt, 2, 3, NULL, 0, out),
                     TFM_OK);
    tfm_module_free(model);
}

/* tfm_model_create_v2 with bias 0 (PyTorch 2.x's bias=False in every
 * block).  Reference: the model with biases, given the bias-free model's
 * weights and zero biases, computes x W^T + 0 and LayerNorm(x) * w + 0,
 * the same function; its own path is checked against PyTorch by the
 * fixture tests above.  Per architecture: no "*.bias" parameter, as many
 * parameters fewer as the biases counted, logits equal, and a save/load
 * round trip that keeps the bias-free layout ("tfm.bias" = "false"). */
static int ends_with_bias(const char *name)
{
    size_t len = strlen(name);
    return len >= 4 && strcmp(name + len - 4, "bias") == 0;
}

static void bias_free_models(void **s)
{
    (void)s;
    const tfm_architecture archs[] = { TFM_ARCH_DECODER_ONLY,
                                       TFM_ARCH_ENCODER_ONLY,
                                       TFM_ARCH_ENCODER_DECODER };
    for (int a = 0; a < 3; a++) {
        tfm_layer_config layer = tfm_layer_config_default(8, 2);
        layer.d_ff = 16;
        layer.norm_first = a == 1;
        tfm_model_config c = tiny_model_config(archs[a], layer, 11, 2, 6);
        if (archs[a] == TFM_ARCH_ENCODER_DECODER) {
            c.n_layers = 0;
            c.n_encoder_layers = 2;
            c.n_decoder_layers = 1;
        }
        tfm_layer_options lo;
        tfm_layer_options_init(&lo);
        lo.bias = 0;
        tfm_module *plain = NULL, *nobias = NULL;
        assert_int_equal(tfm_model_create_ex(&c, NULL, &plain), TFM_OK);
        assert_int_equal(tfm_model_create_v2(&c, NULL, &lo, &nobias), TFM_OK);
        assert_int_equal(tfm_model_has_bias(plain), 1);
        assert_int_equal(tfm_model_has_bias(nobias), 0);
        tfm_rng rng;
        tfm_rng_seed(&rng, 7 + (uint64_t)a);
        assert_int_equal(tfm_module_reset_parameters(nobias, &rng), TFM_OK);
        int n_bias = 0;
        for (int i = 0; i < tfm_module_parameter_count(plain); i++)
            n_bias += ends_with_bias(tfm_module_parameter_name(plain, i));
        assert_true(n_bias > 0);
        assert_int_equal(tfm_module_parameter_count(nobias),
                         tfm_module_parameter_count(plain) - n_bias);
        for (int i = 0; i < tfm_module_parameter_count(nobias); i++) {
            const char *name = tfm_module_parameter_name(nobias, i);
            assert_false(ends_with_bias(name));
            int rank = 0;
            int64_t shape[TFM_MAX_RANK];
            assert_int_equal(tfm_module_parameter_shape(nobias, name, &rank,
                                                        shape), TFM_OK);
            tfm_tensor *t = make(rank, shape, NULL);
            assert_int_equal(tfm_module_get_parameter(nobias, name, t),
                             TFM_OK);
            assert_int_equal(tfm_module_set_parameter(plain, name, t), TFM_OK);
            tfm_tensor_free(t);
        }
        const int64_t B = 2, L = 5, V = c.vocab_size;
        const int32_t ids[10] = { 1, 4, 0, 9, 3, 10, 2, 2, 7, 5 };
        tfm_tensor *want = make3(B, L, V, NULL), *got = make3(B, L, V, NULL),
                   *again = make3(B, L, V, NULL);
        tfm_module *loaded = NULL;
        char path[] = "/tmp/tfm_nobias_XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(tfm_model_save(nobias, path, 0, NULL, NULL), TFM_OK);
        assert_int_equal(tfm_model_load(path, &loaded), TFM_OK);
        assert_int_equal(tfm_model_has_bias(loaded), 0);
        const tfm_module *models[3] = { plain, nobias, loaded };
        tfm_tensor *outs[3] = { want, got, again };
        for (int k = 0; k < 3; k++) {
            if (archs[a] == TFM_ARCH_ENCODER_DECODER)
                assert_int_equal(tfm_model_seq2seq_logits(models[k], ids, L,
                                                          ids, L, B, outs[k]),
                                 TFM_OK);
            else
                assert_int_equal(tfm_model_logits(models[k], ids, B, L,
                                                  outs[k]), TFM_OK);
        }
        EXPECT_CLOSE(got, want, 1e-6, "bias-free logits");
        expect_bit_identical(again, got, "bias-free logits after load");
        FREE_TENSORS(want, got, again);
        tfm_module_free(loaded);
        unlink(path);
        tfm_module_free(plain);
        tfm_module_free(nobias);
    }
}

/* tfm_model_create_v2's own errors, and a "tfm.bias" value that is not a
 * boolean refused when loading. */
static void bias_free_errors(void **s)
{
    (void)s;
    tfm_model_config c = tiny_model_config(
        TFM_ARCH_DECODER_ONLY, tfm_layer_config_default(8, 2), 11, 1, 6);
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    tfm_attention_config att;
    tfm_attention_config_init(&att);
    lo.attention = &att;
    tfm_module *m = SENTINEL_MODULE;
    assert_int_equal(tfm_model_create_v2(&c, NULL, &lo, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "options->attention"));
    lo.attention = NULL;
    lo.struct_size = 1;
    assert_int_equal(tfm_model_create_v2(&c, NULL, &lo, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(m, SENTINEL_MODULE);
    assert_int_equal(tfm_model_has_bias(NULL), -1);
    tfm_module *norm = NULL;
    assert_int_equal(tfm_layer_norm_create(4, 1e-5f, &norm), TFM_OK);
    assert_int_equal(tfm_model_has_bias(norm), -1);
    tfm_module_free(norm);
    assert_int_equal(tfm_model_create_v2(&c, NULL, NULL, &m), TFM_OK);
    char path[] = "/tmp/tfm_badbias_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tfm_model_save(m, path, 0, NULL, NULL), TFM_OK);
    resave_with(path, "tfm.bias", "maybe");
    tfm_module *loaded = SENTINEL_MODULE;
    assert_int_equal(tfm_model_load(path, &loaded), TFM_ERR_FORMAT);
    assert_non_null(strstr(tfm_last_error(), "tfm.bias"));
    assert_ptr_equal(loaded, SENTINEL_MODULE);
    unlink(path);
    tfm_module_free(m);
}

/* tfm_model_logits_v2 (the values against float64 torch BERT and GPT-2 in
 * bindings/python/tests/test_hub_bert.py): NULL inputs, or none set, or a
 * mask of ones and types of zeros, give tfm_model_logits' logits exactly;
 * type 1 and padding change them; bad inputs are refused with logits
 * untouched. */
static void model_inputs(void **s)
{
    (void)s;
    tfm_layer_config layer = tfm_layer_config_default(8, 2);
    layer.d_ff = 16;
    tfm_model_config c = tiny_model_config(TFM_ARCH_ENCODER_ONLY, layer, 11,
                                           1, 6);
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    lo.type_vocab_size = 2;
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create_v2(&c, NULL, &lo, &m), TFM_OK);
    tfm_rng rng;
    tfm_rng_seed(&rng, 7);
    assert_int_equal(tfm_module_reset_parameters(m, &rng), TFM_OK);
    enum { B = 2, L = 5, V = 11 };
    const int32_t ids[B * L] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    int32_t types[B * L] = { 0 }, mask[B * L];
    for (int i = 0; i < B * L; i++)
        mask[i] = 1;
    tfm_tensor *want = NULL, *got = NULL;
    const int64_t shape[3] = { B, L, V };
    assert_int_equal(tfm_tensor_create(3, shape, &want), TFM_OK);
    assert_int_equal(tfm_tensor_create(3, shape, &got), TFM_OK);
    assert_int_equal(tfm_model_logits(m, ids, B, L, want), TFM_OK);
    const float *w = tfm_tensor_data_const(want);
    float *g = tfm_tensor_data(got);
    tfm_model_inputs in;
    tfm_model_inputs_init(&in);
    const tfm_model_inputs *cases[2] = { NULL, &in };
    for (int k = 0; k < 3; k++) {
        if (k == 2) {
            in.token_type_ids = types;
            in.attention_mask = mask;
        }
        assert_int_equal(tfm_model_logits_v2(m, ids, B, L, k < 2 ? cases[k]
                                                                 : &in, got),
                         TFM_OK);
        assert_memory_equal(g, w, sizeof(float) * B * L * V);
    }
    types[3] = 1;
    mask[B * L - 1] = 0;
    assert_int_equal(tfm_model_logits_v2(m, ids, B, L, &in, got), TFM_OK);
    assert_true(g[3 * V] != w[3 * V]);               /* its own type */
    assert_true(g[(L + 1) * V] != w[(L + 1) * V]);   /* a padding key */
    for (int i = 0; i < B * L * V; i++)
        g[i] = 7.0f;
    const int32_t bad_types[B * L] = { 0, 0, 2 };
    const int32_t bad_mask[B * L] = { 1, 1, 1, 5, 1, 1, 1, 1, 1, 1 };
    in.token_type_ids = bad_types;
    assert_int_equal(tfm_model_logits_v2(m, ids, B, L, &in, got),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "token_type_ids[2]"));
    in.token_type_ids = types;
    in.attention_mask = bad_mask;
    assert_int_equal(tfm_model_logits_v2(m, ids, B, L, &in, got),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "attention_mask[3]"));
    in.struct_size = 1;
    assert_int_equal(tfm_model_logits_v2(m, ids, B, L, &in, got),
                     TFM_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < B * L * V; i++)
        assert_true(g[i] == 7.0f);
    /* A struct_size ending inside a pointer member takes none of its
     * bytes (the member keeps its default, NULL): half a pointer was
     * dereferenced before.  Sizes 12 and 20 end inside token_type_ids and
     * attention_mask; pointers that must not be read stand there. */
    tfm_model_inputs_init(&in);
    in.token_type_ids = (const int32_t *)(uintptr_t)0x5a5a5a5a5a5a5a5aULL;
    in.attention_mask = (const int32_t *)(uintptr_t)0x5a5a5a5a5a5a5a5aULL;
    for (size_t size = 8; size < offsetof(tfm_model_inputs, attention_mask);
         size++) {
        in.struct_size = size;   /* neither member whole: plain logits */
        assert_int_equal(tfm_model_logits_v2(m, ids, B, L, &in, got),
                         TFM_OK);
        assert_memory_equal(g, w, sizeof(float) * B * L * V);
    }
    in.token_type_ids = types;   /* whole; the mask cut: types only */
    in.struct_size = offsetof(tfm_model_inputs, attention_mask) + 4;
    assert_int_equal(tfm_model_logits_v2(m, ids, B, L, &in, got), TFM_OK);
    assert_true(g[3 * V] != w[3 * V]);
    assert_true(g[(L + 1) * V] == w[(L + 1) * V]);   /* no padding */
    tfm_module_free(m);
    /* no token-type table: token_type_ids refused, a mask taken */
    c = tiny_model_config(TFM_ARCH_DECODER_ONLY, layer, 11, 1, 6);
    assert_int_equal(tfm_model_create(&c, &m), TFM_OK);
    tfm_model_inputs_init(&in);
    in.token_type_ids = types;
    assert_int_equal(tfm_model_logits_v2(m, ids, B, L, &in, got),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "token-type table"));
    in.token_type_ids = NULL;
    in.attention_mask = mask;
    assert_int_equal(tfm_model_logits_v2(m, ids, B, L, &in, got), TFM_OK);
    tfm_module_free(m);
    tfm_tensor_free(want);
    tfm_tensor_free(got);
}

/* The model parts in tfm_layer_options: every layer, stack and
 * nn.Transformer constructor refuses them and the encoder-decoder model
 * BERT's (TFM_ERR_INVALID_ARGUMENT, *out untouched), while it takes
 * final_norm 0 (neither stack has its norm) and head_bias ("lm_head.bias"
 * [vocab], Marian's), type_vocab_size out of
 * range is refused, tfm_model_get_layer_options reports them, and a file
 * whose "tfm.type_vocab_size" disagrees with its tensors is refused before
 * anything is allocated for it (the values themselves are checked against
 * float64 torch in bindings/python/tests/test_hub_bert.py). */
static void model_parts(void **s)
{
    (void)s;
    tfm_layer_config layer = tfm_layer_config_default(8, 2);
    layer.d_ff = 16;
    for (int part = 0; part < 5; part++) {
        tfm_layer_options lo;
        tfm_layer_options_init(&lo);
        if (part == 0)
            lo.type_vocab_size = 2;
        else if (part == 1)
            lo.embedding_norm = 1;
        else if (part == 2)
            lo.final_norm = 0;
        else if (part == 3)
            lo.head_transform = 1;
        else
            lo.head_bias = 1;
        tfm_module *m = SENTINEL_MODULE;
        assert_int_equal(tfm_encoder_layer_create_v2(&layer, &lo, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tfm_last_error(), "model parts"));
        assert_int_equal(tfm_decoder_layer_create_v2(&layer, &lo, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_int_equal(tfm_encoder_create_v2(&layer, 2, 1, &lo, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_int_equal(tfm_decoder_create_v2(&layer, 2, 1, &lo, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_int_equal(tfm_transformer_create_v2(&layer, 1, 1, &lo, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        tfm_model_config c = tiny_model_config(TFM_ARCH_ENCODER_DECODER,
                                               layer, 11, 0, 6);
        c.n_encoder_layers = 1;
        c.n_decoder_layers = 1;
        if (part == 2 || part == 4) { /* Marian's: taken */
            assert_int_equal(tfm_model_create_v2(&c, NULL, &lo, &m), TFM_OK);
            int64_t shape[TFM_MAX_RANK];
            int rank = 0;
            const tfm_status norm = tfm_module_parameter_shape(
                m, "transformer.decoder.norm.weight", &rank, shape);
            const tfm_status bias = tfm_module_parameter_shape(
                m, "lm_head.bias", &rank, shape);
            assert_int_equal(norm == TFM_OK, part == 4);
            assert_int_equal(bias == TFM_OK, part == 4);
            if (part == 4)
                assert_true(rank == 1 && shape[0] == 11);
            tfm_layer_options got;
            tfm_layer_options_init(&got);
            assert_int_equal(tfm_model_get_layer_options(m, &got), TFM_OK);
            assert_int_equal(got.final_norm, part == 4);
            assert_int_equal(got.head_bias, part == 4);
            tfm_module_free(m);
            m = SENTINEL_MODULE;
            continue;
        }
        assert_int_equal(tfm_model_create_v2(&c, NULL, &lo, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tfm_last_error(), "encoder-decoder"));
        assert_ptr_equal(m, SENTINEL_MODULE);
    }
    tfm_model_config c = tiny_model_config(TFM_ARCH_ENCODER_ONLY, layer, 11,
                                           2, 6);
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    tfm_module *m = SENTINEL_MODULE;
    const int64_t bad[] = { -1, (int64_t)INT32_MAX + 1 };
    for (int i = 0; i < 2; i++) {
        lo.type_vocab_size = bad[i];
        assert_int_equal(tfm_model_create_v2(&c, NULL, &lo, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tfm_last_error(), "type_vocab_size"));
        assert_ptr_equal(m, SENTINEL_MODULE);
    }
    lo.type_vocab_size = 3;
    lo.embedding_norm = 1;
    lo.final_norm = 0;
    lo.head_transform = 1;
    assert_int_equal(tfm_model_create_v2(&c, NULL, &lo, &m), TFM_OK);
    tfm_layer_options got;
    tfm_layer_options_init(&got);
    assert_int_equal(tfm_model_get_layer_options(m, &got), TFM_OK);
    assert_int_equal(got.type_vocab_size, 3);
    assert_int_equal(got.embedding_norm, 1);
    assert_int_equal(got.final_norm, 0);
    assert_int_equal(got.head_transform, 1);
    const int64_t d = 8, V = 11;
    /* 11*8 + 6*8 (positions) + 3*8 (types) + 2*8 (embedding norm) + the
     * blocks + 8*8 + 8 + 2*8 (transform, its norm) + 11 (logits' bias): */
    int rank = 0;
    int64_t shape[TFM_MAX_RANK];
    assert_int_equal(tfm_module_parameter_shape(m, "lm_head.bias", &rank,
                                                shape), TFM_OK);
    assert_int_equal(rank, 1);
    assert_int_equal(shape[0], V);
    assert_int_equal(tfm_module_parameter_shape(m, "head_transform.weight",
                                                &rank, shape), TFM_OK);
    assert_int_equal(shape[0], d);
    assert_int_equal(shape[1], d);
    assert_int_equal(tfm_module_parameter_shape(m, "norm.weight", &rank,
                                                shape), TFM_ERR_NOT_FOUND);
    char path[] = "/tmp/tfm_parts_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tfm_model_save(m, path, 0, NULL, NULL), TFM_OK);
    resave_with(path, "tfm.type_vocab_size", "1000000000");
    tfm_module *loaded = SENTINEL_MODULE;
    assert_int_equal(tfm_model_load(path, &loaded), TFM_ERR_FORMAT);
    assert_non_null(strstr(tfm_last_error(), "token_type_embedding.weight"));
    assert_ptr_equal(loaded, SENTINEL_MODULE);
    resave_with(path, "tfm.type_vocab_size", "3");
    assert_int_equal(tfm_model_load(path, &loaded), TFM_OK);
    tfm_layer_options_init(&got);
    assert_int_equal(tfm_model_get_layer_options(loaded, &got), TFM_OK);
    assert_int_equal(got.type_vocab_size, 3);
    assert_int_equal(got.head_transform, 1);
    assert_int_equal(got.final_norm, 0);
    unlink(path);
    tfm_module_free(loaded);
    tfm_module_free(m);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        models_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decoder_learned_full),
        cmocka_unit_test(decoder_sinusoidal_full),
        cmocka_unit_test(encoder_only_full),
        cmocka_unit_test(encoder_decoder_full),
        cmocka_unit_test(decoder_learned_cache),
        cmocka_unit_test(decoder_sinusoidal_cache),
        cmocka_unit_test(prefill_last_row_only),
        cmocka_unit_test(generate_matches_recompute),
        cmocka_unit_test(save_and_reload),
        cmocka_unit_test(errors_leave_outputs),
        cmocka_unit_test(shipped_model_greedy),
        cmocka_unit_test(load_pytorch_checkpoint),
        cmocka_unit_test(hostile_metadata_refused_early),
        cmocka_unit_test(metadata_strict_syntax),
        cmocka_unit_test(save_extra_metadata_cannot_override),
        cmocka_unit_test(generate_refuses_huge_max_new),
        cmocka_unit_test(bias_free_models),
        cmocka_unit_test(bias_free_errors),
        cmocka_unit_test(model_parts),
        cmocka_unit_test(model_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
