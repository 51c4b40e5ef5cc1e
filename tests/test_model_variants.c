/* Attention variants in whole models (model.h, variants.h) against
 * independently computed references: tools/make_variant_models.py builds
 * each model in PyTorch with a forward pass written from the papers'
 * equations and stores its float64 logits.  For every variant: the model
 * file's metadata selects it, tfm_model_logits equals the reference, KV-cache
 * decoding (prefill, then one token at a time) equals the full pass, a
 * saved model loads back with the same options and logits, and greedy
 * generation past the context length equals full recomputes.  Malformed
 * "tfm.attention.*" metadata is refused with TFM_ERR_FORMAT, and models with
 * default options (the shipped model, tests/models) load and save as
 * before. */
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
#ifndef TFM_SHIPPED_MODEL
#error "TFM_SHIPPED_MODEL must point at models/kjv-char.safetensors"
#endif

#define TOL 1e-5

/* The variant fixtures: argv[1] when given (a fresh set), else the
 * committed tests/models/variants. */
static const char *variants_dir = TFM_MODELS_DIR "/variants";

/* ---- the cases and the options their metadata must give ----------------- */

typedef struct variant_case {
    const char *name;
    tfm_positional positional;
    void (*expect)(tfm_model_options *o);   /* non-default options */
} variant_case;

static void gqa(tfm_model_options *o)
{
    o->positional_base = 1000.0;
    o->attention.n_kv_heads = 2;
}

static void mqa(tfm_model_options *o) { o->attention.n_kv_heads = 1; }

static void rope_adjacent(tfm_model_options *o)
{
    o->attention.rope = TFM_ROPE_ADJACENT;
}

static void rope_half_partial(tfm_model_options *o)
{
    o->attention.rope = TFM_ROPE_HALF;
    o->attention.rope_dims = 4;
    o->attention.rope_base = 500.0;
}

static void alibi(tfm_model_options *o)
{
    o->attention.relative = TFM_RELATIVE_ALIBI;
}

static void t5(tfm_model_options *o)
{
    o->attention.relative = TFM_RELATIVE_T5;
    o->attention.num_buckets = 8;
    o->attention.max_distance = 20;
    o->attention.bidirectional = 0;
}

static void shaw(tfm_model_options *o)
{
    o->attention.relative = TFM_RELATIVE_SHAW;
    o->attention.max_distance = 3;
    o->attention.relative_values = 1;
}

static void sliding(tfm_model_options *o)
{
    o->attention.sparsity = TFM_SPARSE_SLIDING_WINDOW;
    o->attention.window = 3;
}

static void bigbird(tfm_model_options *o)
{
    o->attention.sparsity = TFM_SPARSE_BIGBIRD;
    o->attention.block_size = 2;
    o->attention.window = 1;
    o->attention.n_global = 1;
    o->attention.n_random_blocks = 2;
    o->attention.seed = 7;
}

static void temperature(tfm_model_options *o)
{
    o->attention.score = TFM_SCORE_LEARNED_TEMPERATURE;
}

static void concat(tfm_model_options *o) { o->positional_base = 500.0; }

static const variant_case CASES[] = {
    { "gqa", TFM_POSITIONAL_SINUSOIDAL, gqa },
    { "mqa", TFM_POSITIONAL_LEARNED, mqa },
    { "rope_adjacent", TFM_POSITIONAL_NONE, rope_adjacent },
    { "rope_half_partial", TFM_POSITIONAL_NONE, rope_half_partial },
    { "alibi_6_heads", TFM_POSITIONAL_NONE, alibi },
    { "t5_buckets", TFM_POSITIONAL_NONE, t5 },
    { "shaw_values", TFM_POSITIONAL_LEARNED, shaw },
    { "sliding_window", TFM_POSITIONAL_LEARNED, sliding },
    { "bigbird", TFM_POSITIONAL_LEARNED, bigbird },
    { "learned_temperature", TFM_POSITIONAL_LEARNED, temperature },
    { "sinusoidal_concat", TFM_POSITIONAL_SINUSOIDAL_CONCAT, concat },
};

#define N_CASES (sizeof CASES / sizeof CASES[0])

/* Field by field (the structs may hold padding). */
static int options_equal(const tfm_model_options *a,
                         const tfm_model_options *b)
{
    const tfm_attention_config *x = &a->attention, *y = &b->attention;
    return a->positional_base == b->positional_base &&
           x->score == y->score && x->scale == y->scale &&
           x->additive_dim == y->additive_dim &&
           x->n_kv_heads == y->n_kv_heads && x->rope == y->rope &&
           x->rope_base == y->rope_base && x->rope_dims == y->rope_dims &&
           x->relative == y->relative && x->max_distance == y->max_distance &&
           !x->relative_values == !y->relative_values &&
           x->num_buckets == y->num_buckets &&
           !x->bidirectional == !y->bidirectional &&
           x->sparsity == y->sparsity && x->window == y->window &&
           x->dilation == y->dilation && x->n_global == y->n_global &&
           x->block_size == y->block_size &&
           x->n_random_blocks == y->n_random_blocks && x->seed == y->seed;
}

/* ---- loading a case --------------------------------------------------------- */

typedef struct loaded {
    tfm_module *model;
    tfm_model_config config;
    int64_t B, L;
    int32_t *ids;           /* [B, L] */
    tfm_tensor *logits;     /* the reference [B, L, V] */
} loaded;

static void load(loaded *c, const char *name)
{
    char path[512];
    memset(c, 0, sizeof *c);
    snprintf(path, sizeof path, "%s/%s.safetensors", variants_dir, name);
    if (tfm_model_load(path, &c->model) != TFM_OK)
        fail_msg("loading %s: %s", path, tfm_last_error());
    assert_int_equal(tfm_model_get_config(c->model, &c->config), TFM_OK);
    snprintf(path, sizeof path, "%s/%s.ref.safetensors", variants_dir, name);
    tfm_safetensors *f = NULL;
    tfm_tensor *ids = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_read(f, "ids", &ids), TFM_OK);
    assert_int_equal(tfm_safetensors_read(f, "logits", &c->logits), TFM_OK);
    tfm_safetensors_close(f);
    c->B = tfm_tensor_dim(ids, 0);
    c->L = tfm_tensor_dim(ids, 1);
    c->ids = malloc((size_t)(c->B * c->L) * sizeof *c->ids);
    for (int64_t i = 0; i < c->B * c->L; i++)
        c->ids[i] = (int32_t)tfm_tensor_data(ids)[i];
    tfm_tensor_free(ids);
}

static void unload(loaded *c)
{
    tfm_module_free(c->model);
    tfm_tensor_free(c->logits);
    free(c->ids);
}

static double worse(double a, double b) { return b > a || b != b ? b : a; }

/* The full pass of the loaded model: logits [B, L, V] (caller frees). */
static tfm_tensor *full_pass(const loaded *c)
{
    tfm_tensor *out = make3(c->B, c->L, c->config.vocab_size, NULL);
    if (tfm_model_logits(c->model, c->ids, c->B, c->L, out) != TFM_OK)
        fail_msg("tfm_model_logits: %s", tfm_last_error());
    return out;
}

/* KV-cache decoding of every sequence: prefill `prefill` tokens, then one
 * per step; the worst rel err of any step's logits against ref [B, L, V]. */
static double cache_err(const loaded *c, int64_t prefill, const float *ref)
{
    const int64_t V = c->config.vocab_size, L = c->L;
    tfm_kv_cache *cache = NULL;
    assert_int_equal(tfm_kv_cache_create(c->model, L, &cache), TFM_OK);
    tfm_tensor *first = make2(prefill, V, NULL), *one = make2(1, V, NULL);
    double worst = 0;
    for (int64_t b = 0; b < c->B; b++) {
        const int32_t *ids = c->ids + b * L;
        const float *r = ref + b * L * V;
        tfm_kv_cache_reset(cache);
        if (tfm_kv_cache_decode(cache, ids, prefill, first) != TFM_OK)
            fail_msg("prefill: %s", tfm_last_error());
        worst = worse(worst, rel_err(tfm_tensor_data(first), r, prefill * V));
        for (int64_t t = prefill; t < L; t++) {
            if (tfm_kv_cache_decode(cache, ids + t, 1, one) != TFM_OK)
                fail_msg("decode step %lld: %s", (long long)t,
                         tfm_last_error());
            worst = worse(worst, rel_err(tfm_tensor_data(one), r + t * V, V));
        }
        assert_int_equal(tfm_kv_cache_length(cache), L);
    }
    FREE_TENSORS(first, one);
    tfm_kv_cache_free(cache);
    return worst;
}

/* ---- every variant: metadata, full pass, KV cache ---------------------------- */

static void variants_match_reference(void **s)
{
    (void)s;
    double worst_full = 0, worst_cache = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        const variant_case *vc = &CASES[i];
        loaded c;
        load(&c, vc->name);
        /* The metadata gave the options the generator wrote. */
        tfm_model_options want, got;
        tfm_model_options_init(&want);
        tfm_model_options_init(&got);
        vc->expect(&want);
        assert_int_equal(tfm_model_get_options(c.model, &got), TFM_OK);
        if (!options_equal(&got, &want))
            fail_msg("%s: the options read from the metadata differ",
                     vc->name);
        assert_int_equal(c.config.positional, vc->positional);

        const int64_t n = c.B * c.L * c.config.vocab_size;
        const float *ref = tfm_tensor_data(c.logits);
        tfm_tensor *full = full_pass(&c);
        double e_full = rel_err(tfm_tensor_data(full), ref, n);
        /* The cache against PyTorch and against our own full pass. */
        double e_cache = 0;
        const int64_t prefills[2] = { 1, 5 };
        for (int p = 0; p < 2; p++) {
            e_cache = worse(e_cache, cache_err(&c, prefills[p], ref));
            e_cache = worse(e_cache, cache_err(&c, prefills[p],
                                               tfm_tensor_data(full)));
        }
        printf("  %-22s full pass rel err %.3e   KV cache %.3e\n", vc->name,
               e_full, e_cache);
        worst_full = worse(worst_full, e_full);
        worst_cache = worse(worst_cache, e_cache);
        if (!(e_full <= TOL) || !(e_cache <= TOL))
            fail_msg("%s: above the tolerance %g", vc->name, TOL);
        tfm_tensor_free(full);
        unload(&c);
    }
    printf("  worst: full pass %.3e, KV cache %.3e (%zu variants)\n",
           worst_full, worst_cache, N_CASES);
}

/* Save -> load keeps the options and gives bit-identical logits. */
static void variants_round_trip(void **s)
{
    (void)s;
    for (size_t i = 0; i < N_CASES; i++) {
        loaded c;
        load(&c, CASES[i].name);
        char path[] = "/tmp/tfm_variant_XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        if (tfm_model_save(c.model, path, 0, NULL, NULL) != TFM_OK)
            fail_msg("%s: save: %s", CASES[i].name, tfm_last_error());
        tfm_module *again = NULL;
        if (tfm_model_load(path, &again) != TFM_OK)
            fail_msg("%s: reload: %s", CASES[i].name, tfm_last_error());
        tfm_model_options a, b;
        tfm_model_options_init(&a);
        tfm_model_options_init(&b);
        assert_int_equal(tfm_model_get_options(c.model, &a), TFM_OK);
        assert_int_equal(tfm_model_get_options(again, &b), TFM_OK);
        assert_true(options_equal(&a, &b));
        tfm_model_config ca, cb;
        assert_int_equal(tfm_model_get_config(again, &cb), TFM_OK);
        ca = c.config;
        assert_int_equal(ca.positional, cb.positional);
        tfm_tensor *x = full_pass(&c);
        loaded d = c;
        d.model = again;
        tfm_tensor *y = full_pass(&d);
        assert_memory_equal(tfm_tensor_data(x), tfm_tensor_data(y),
                            (size_t)tfm_tensor_numel(x) * sizeof(float));
        FREE_TENSORS(x, y);
        tfm_module_free(again);
        unlink(path);
        unload(&c);
    }
}

/* Greedy generation past the context length (the window slides and is
 * encoded afresh from position 0) equals the argmax of full recomputes of
 * the last context_length tokens, for every variant. */
static void variants_generate_sliding(void **s)
{
    (void)s;
    for (size_t i = 0; i < N_CASES; i++) {
        loaded c;
        load(&c, CASES[i].name);
        const int64_t V = c.config.vocab_size, ctx = c.config.context_length;
        const int64_t n_prompt = 4, n_new = ctx + 5;
        int32_t *seq = malloc((size_t)(n_prompt + n_new) * sizeof *seq);
        int32_t *out = malloc((size_t)n_new * sizeof *out);
        memcpy(seq, c.ids, (size_t)n_prompt * sizeof *seq);
        if (tfm_model_generate(c.model, seq, n_prompt, n_new, NULL, 0, out) !=
            TFM_OK)
            fail_msg("%s: generate: %s", CASES[i].name, tfm_last_error());
        int64_t len = n_prompt;
        for (int64_t t = 0; t < n_new; t++) {
            const int64_t w = len < ctx ? len : ctx;
            tfm_tensor *lw = make3(1, w, V, NULL);
            assert_int_equal(
                tfm_model_logits(c.model, seq + len - w, 1, w, lw), TFM_OK);
            const float *row = tfm_tensor_data(lw) + (w - 1) * V;
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++)
                if (row[v] > row[best])
                    best = v;
            if (out[t] != best)
                fail_msg("%s: step %lld generated %d, the full pass's argmax "
                         "is %d", CASES[i].name, (long long)t, out[t], best);
            seq[len++] = best;
            tfm_tensor_free(lw);
        }
        free(seq);
        free(out);
        unload(&c);
    }
}

/* ---- metadata: malformed values, tensors that disagree ---------------------- */

/* Copies src to a temporary file with metadata key set to value (NULL:
 * removed) and returns tfm_model_load's status on it; *model is freed. */
static tfm_status load_with(const char *name, const char *key,
                            const char *value)
{
    char src[512], path[] = "/tmp/tfm_variant_meta_XXXXXX";
    snprintf(src, sizeof src, "%s/%s.safetensors", variants_dir, name);
    tfm_safetensors *f = NULL;
    tfm_safetensors_writer *w = NULL;
    assert_int_equal(tfm_safetensors_open(src, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_create(&w), TFM_OK);
    for (int64_t i = 0; i < tfm_safetensors_count(f); i++) {
        const char *tn = tfm_safetensors_name(f, i);
        tfm_tensor *t = NULL;
        assert_int_equal(tfm_safetensors_read(f, tn, &t), TFM_OK);
        assert_int_equal(tfm_safetensors_writer_add(w, tn, t), TFM_OK);
        tfm_tensor_free(t);
    }
    for (int64_t i = 0; i < tfm_safetensors_metadata_count(f); i++) {
        const char *k = tfm_safetensors_metadata_key(f, i);
        if (strcmp(k, key) != 0)
            assert_int_equal(tfm_safetensors_writer_set_metadata(
                                 w, k, tfm_safetensors_metadata(f, k)),
                             TFM_OK);
    }
    if (value)
        assert_int_equal(tfm_safetensors_writer_set_metadata(w, key, value),
                         TFM_OK);
    tfm_safetensors_close(f);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tfm_safetensors_writer_save(w, path), TFM_OK);
    tfm_safetensors_writer_free(w);
    tfm_module *m = SENTINEL_MODULE;
    tfm_status st = tfm_model_load(path, &m);
    if (st == TFM_OK)
        tfm_module_free(m);
    else
        assert_ptr_equal(m, SENTINEL_MODULE);
    unlink(path);
    return st;
}

static void malformed_metadata(void **s)
{
    (void)s;
    static const struct {
        const char *file, *key, *value;
    } bad[] = {
        { "rope_adjacent", "tfm.attention.rope", "sideways" },
        { "rope_adjacent", "tfm.attention.rope_base", "ten thousand" },
        { "rope_adjacent", "tfm.attention.rope_base", "nan" },
        { "rope_adjacent", "tfm.attention.rope_base", "1e999" },
        { "rope_adjacent", "tfm.attention.rope_dims", "-4" },
        { "gqa", "tfm.attention.n_kv_heads", "two" },
        { "gqa", "tfm.attention.n_kv_heads", "2.0" },
        { "gqa", "tfm.attention.n_kv_heads", "99999999999999999999" },
        { "gqa", "tfm.positional_base", "" },
        { "gqa", "tfm.positional_base", "inf" },
        { "shaw_values", "tfm.attention.relative_values", "maybe" },
        { "shaw_values", "tfm.attention.relative", "Shaw" },
        { "bigbird", "tfm.attention.seed", "-1" },
        { "bigbird", "tfm.attention.seed", "18446744073709551616" },
        { "bigbird", "tfm.attention.sparsity", "random" },
        { "learned_temperature", "tfm.attention.score", "cosine" },
        { "learned_temperature", "tfm.attention.scale", "1e39" },
        { "t5_buckets", "tfm.attention.bidirectional", "yes" },
        { "sinusoidal_concat", "tfm.positional", "sinusoidal_halves" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tfm_status st = load_with(bad[i].file, bad[i].key, bad[i].value);
        if (st != TFM_ERR_FORMAT ||
            !strstr(tfm_last_error(), bad[i].key))
            fail_msg("%s = \"%s\": status %d, message \"%s\"", bad[i].key,
                     bad[i].value, (int)st, tfm_last_error());
    }
    /* Well-formed values the file's tensors contradict are refused before
     * the model is allocated: GQA's key/value rows, Shaw's table, T5's
     * buckets, the temperature that a plain model lacks. */
    static const struct {
        const char *file, *key, *value, *tensor;
    } shape[] = {
        { "gqa", "tfm.attention.n_kv_heads", "4", "in_proj_weight" },
        { "gqa", "tfm.attention.n_kv_heads", NULL, "in_proj_weight" },
        { "mqa", "tfm.attention.n_kv_heads", "2", "in_proj_weight" },
        { "shaw_values", "tfm.attention.max_distance", "1000000000",
          "relative_key.weight" },
        { "t5_buckets", "tfm.attention.num_buckets", "16",
          "relative_attention_bias.weight" },
        { "rope_adjacent", "tfm.attention.score", "learned_temperature",
          "temperature" },
    };
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        tfm_status st = load_with(shape[i].file, shape[i].key, shape[i].value);
        /* The message names the tensor and says what the file holds: its
         * shape, or that it lacks the tensor. */
        if (st != TFM_ERR_FORMAT || !strstr(tfm_last_error(), shape[i].tensor) ||
            (!strstr(tfm_last_error(), "has shape [") &&
             !strstr(tfm_last_error(), "file lacks")))
            fail_msg("%s = %s: status %d, message \"%s\"", shape[i].key,
                     shape[i].value ? shape[i].value : "(absent)", (int)st,
                     tfm_last_error());
    }
    /* Well-formed but invalid: what tfm_model_create_ex says. */
    assert_int_equal(load_with("gqa", "tfm.attention.n_kv_heads", "3"),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(load_with("rope_half_partial", "tfm.attention.rope_dims",
                               "5"),
                     TFM_ERR_INVALID_ARGUMENT);
    /* An unknown key under "tfm.attention." (here a misspelt "rope") is
     * refused, naming it: it used to be ignored, and the file loaded as a
     * model without RoPE.  Keys outside that namespace (informational ones
     * such as the shipped model's "tfm.train_steps") are ignored. */
    static const char *const unknown[] = { "tfm.attention.rop",
                                           "tfm.attention.comment",
                                           "tfm.attention." };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        tfm_status st = load_with("gqa", unknown[i], "half");
        if (st != TFM_ERR_FORMAT || !strstr(tfm_last_error(), unknown[i]))
            fail_msg("%s: status %d, message \"%s\"", unknown[i], (int)st,
                     tfm_last_error());
    }
    assert_int_equal(load_with("gqa", "tfm.train_steps", "1500"), TFM_OK);
    assert_int_equal(load_with("gqa", "comment", "hello"), TFM_OK);
}

/* A learned temperature <= 0, non-finite-reciprocal or tiny in a file: the
 * loader used to accept it and every forward pass then failed (found by
 * fuzz_model_load, whose promise is that a loaded model runs).  Now
 * TFM_ERR_FORMAT naming the tensor, *out untouched. */
static void temperature_in_file_refused(void **s)
{
    (void)s;
    static const float bad[] = { 0.0f, -1.0f, -6.5e-17f, 1e-39f };
    char src[512];
    snprintf(src, sizeof src, "%s/learned_temperature.safetensors",
             variants_dir);
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        char path[] = "/tmp/tfm_variant_temp_XXXXXX";
        tfm_safetensors *f = NULL;
        tfm_safetensors_writer *w = NULL;
        assert_int_equal(tfm_safetensors_open(src, &f), TFM_OK);
        assert_int_equal(tfm_safetensors_writer_create(&w), TFM_OK);
        int replaced = 0;
        for (int64_t i = 0; i < tfm_safetensors_count(f); i++) {
            const char *tn = tfm_safetensors_name(f, i);
            tfm_tensor *t = NULL;
            assert_int_equal(tfm_safetensors_read(f, tn, &t), TFM_OK);
            if (strcmp(tn, "layers.1.self_attn.temperature") == 0) {
                tfm_tensor_data(t)[tfm_tensor_numel(t) - 1] = bad[b];
                replaced = 1;
            }
            assert_int_equal(tfm_safetensors_writer_add(w, tn, t), TFM_OK);
            tfm_tensor_free(t);
        }
        assert_true(replaced);
        for (int64_t i = 0; i < tfm_safetensors_metadata_count(f); i++) {
            const char *k = tfm_safetensors_metadata_key(f, i);
            assert_int_equal(tfm_safetensors_writer_set_metadata(
                                 w, k, tfm_safetensors_metadata(f, k)),
                             TFM_OK);
        }
        tfm_safetensors_close(f);
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(tfm_safetensors_writer_save(w, path), TFM_OK);
        tfm_safetensors_writer_free(w);
        tfm_module *m = SENTINEL_MODULE;
        tfm_status st = tfm_model_load(path, &m);
        unlink(path);
        if (st != TFM_ERR_FORMAT ||
            !strstr(tfm_last_error(), "layers.1.self_attn.temperature"))
            fail_msg("temperature %g: status %d, message \"%s\"",
                     (double)bad[b], (int)st, tfm_last_error());
        assert_ptr_equal(m, SENTINEL_MODULE);
    }
}

/* ---- default options: files as before ---------------------------------------- */

/* Saves model and checks that the file's metadata keys are those of the
 * file it came from (`orig`), with the same values except the reformatted
 * layer_norm_eps; keys the library does not write (tokenizer, training
 * notes) may be missing. */
static void expect_same_metadata(const tfm_module *model, const char *orig)
{
    char path[] = "/tmp/tfm_default_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tfm_model_save(model, path, 0, NULL, NULL), TFM_OK);
    tfm_safetensors *a = NULL, *b = NULL;
    assert_int_equal(tfm_safetensors_open(orig, &a), TFM_OK);
    assert_int_equal(tfm_safetensors_open(path, &b), TFM_OK);
    for (int64_t i = 0; i < tfm_safetensors_metadata_count(b); i++) {
        const char *k = tfm_safetensors_metadata_key(b, i);
        const char *was = tfm_safetensors_metadata(a, k);
        if (!was)
            fail_msg("%s: saving it adds the key \"%s\"", orig, k);
        if (strcmp(k, "tfm.layer_norm_eps") != 0 &&
            strcmp(was, tfm_safetensors_metadata(b, k)) != 0)
            fail_msg("%s: \"%s\" was \"%s\", saved as \"%s\"", orig, k, was,
                     tfm_safetensors_metadata(b, k));
    }
    for (int64_t i = 0; i < tfm_safetensors_metadata_count(a); i++) {
        const char *k = tfm_safetensors_metadata_key(a, i);
        if (!tfm_safetensors_metadata(b, k) &&
            strncmp(k, "tfm.tokenizer", 13) != 0 &&
            strncmp(k, "tfm.vocab", 9) != 0 &&
            strncmp(k, "tfm.train", 9) != 0 && strncmp(k, "tfm.val", 7) != 0)
            fail_msg("%s: saving it drops the key \"%s\"", orig, k);
    }
    tfm_safetensors_close(a);
    tfm_safetensors_close(b);
    unlink(path);
}

static void default_options_unchanged(void **s)
{
    (void)s;
    static const char *const files[] = {
        TFM_SHIPPED_MODEL,
        TFM_MODELS_DIR "/decoder_learned_prenorm_gelu.safetensors",
        TFM_MODELS_DIR "/decoder_sinusoidal_postnorm_relu_untied.safetensors",
        TFM_MODELS_DIR "/encoder_only_learned.safetensors",
        TFM_MODELS_DIR "/encoder_decoder_sinusoidal.safetensors",
    };
    tfm_model_options def;
    tfm_model_options_init(&def);
    assert_true(def.positional_base == 10000.0);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        tfm_module *m = NULL;
        if (tfm_model_load(files[i], &m) != TFM_OK)
            fail_msg("%s: %s", files[i], tfm_last_error());
        tfm_model_options o;
        tfm_model_options_init(&o);
        o.attention.window = 77; /* overwritten */
        assert_int_equal(tfm_model_get_options(m, &o), TFM_OK);
        assert_true(options_equal(&o, &def));
        assert_int_equal(o.struct_size, sizeof o);
        expect_same_metadata(m, files[i]);
        tfm_module_free(m);
    }
}

/* ---- the API: options, ABI sizes, errors ------------------------------------ */

static tfm_model_config small_config(tfm_architecture arch)
{
    tfm_layer_config layer = tfm_layer_config_default(16, 4);
    layer.d_ff = 32;
    tfm_model_config c = tiny_model_config(arch, layer, 11, 2, 8);
    c.n_encoder_layers = 1;
    c.n_decoder_layers = 1;
    return c;
}

static void create_ex_options(void **s)
{
    (void)s;
    tfm_model_config c = small_config(TFM_ARCH_DECODER_ONLY);
    tfm_model_options o;
    tfm_model_options_init(&o);
    o.attention.n_kv_heads = 2;
    o.attention.rope = TFM_ROPE_HALF;
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create_ex(&c, &o, &m), TFM_OK);
    /* GQA: key and value rows of 2 heads of 4 columns. */
    tfm_tensor *w = make2(16 + 2 * 8, 16, NULL);
    assert_int_equal(
        tfm_module_get_parameter(m, "layers.1.self_attn.in_proj_weight", w),
        TFM_OK);
    tfm_tensor_free(w);

    /* A caller built against a smaller struct: only struct_size bytes are
     * read and written. */
    tfm_model_options small;
    memset(&small, 0xAB, sizeof small);
    small.struct_size = offsetof(tfm_model_options, attention);
    assert_int_equal(tfm_model_get_options(m, &small), TFM_OK);
    assert_true(small.positional_base == 10000.0);
    const unsigned char *tail = (const unsigned char *)&small.attention;
    for (size_t i = 0; i < sizeof small.attention; i++)
        assert_int_equal(tail[i], 0xAB);
    tfm_module *plain = NULL;
    small.positional_base = 0; /* 0 = 10000 */
    assert_int_equal(tfm_model_create_ex(&c, &small, &plain), TFM_OK);
    tfm_model_options got;
    tfm_model_options_init(&got);
    assert_int_equal(tfm_model_get_options(plain, &got), TFM_OK);
    tfm_model_options def;
    tfm_model_options_init(&def);
    assert_true(options_equal(&got, &def));
    tfm_module_free(plain);

    /* Too small to hold struct_size and positional_base. */
    small.struct_size = sizeof(size_t);
    assert_int_equal(tfm_model_get_options(m, &small),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_module *out = SENTINEL_MODULE;
    assert_int_equal(tfm_model_create_ex(&c, &small, &out),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(out, SENTINEL_MODULE);
    assert_int_equal(tfm_model_get_options(m, NULL), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_model_get_options(NULL, &got), TFM_ERR_NULL_ARGUMENT);
    tfm_module *mha = NULL;
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &mha), TFM_OK);
    assert_int_equal(tfm_model_get_options(mha, &got), TFM_ERR_WRONG_KIND);
    tfm_module_free(mha);

    /* The KV cache holds n_kv_heads * d_k columns and agrees with the full
     * pass on a model with random parameters. */
    tfm_tensor *p = NULL;
    const char *name;
    for (int i = 0; (name = tfm_module_parameter_name(m, i)) != NULL; i++) {
        int64_t shape[TFM_MAX_RANK];
        int rank = 0;
        assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape),
                         TFM_OK);
        p = make(rank, shape, NULL);
        fill_random(p, 100u + (uint32_t)i);
        assert_int_equal(tfm_module_set_parameter(m, name, p), TFM_OK);
        tfm_tensor_free(p);
    }
    int32_t ids[8] = { 1, 5, 2, 9, 0, 3, 10, 4 };
    tfm_tensor *full = make3(1, 8, 11, NULL), *step = make2(1, 11, NULL);
    assert_int_equal(tfm_model_logits(m, ids, 1, 8, full), TFM_OK);
    tfm_kv_cache *cache = NULL;
    assert_int_equal(tfm_kv_cache_create(m, 8, &cache), TFM_OK);
    double e = 0;
    for (int t = 0; t < 8; t++) {
        assert_int_equal(tfm_kv_cache_decode(cache, ids + t, 1, step), TFM_OK);
        e = worse(e, rel_err(tfm_tensor_data(step),
                             tfm_tensor_data(full) + t * 11, 11));
    }
    assert_true(e <= TOL);
    tfm_kv_cache_free(cache);
    FREE_TENSORS(full, step);
    tfm_module_free(m);
}

static void create_ex_errors(void **s)
{
    (void)s;
    tfm_model_options o;
    tfm_model_options_init(&o);
    tfm_module *m = SENTINEL_MODULE;
    /* Encoder-decoder models take plain attention only. */
    tfm_model_config ed = small_config(TFM_ARCH_ENCODER_DECODER);
    o.attention.relative = TFM_RELATIVE_ALIBI;
    assert_int_equal(tfm_model_create_ex(&ed, &o, &m), TFM_ERR_UNSUPPORTED);
    assert_ptr_equal(m, SENTINEL_MODULE);
    tfm_model_options_init(&o);
    assert_int_equal(tfm_model_create_ex(&ed, &o, &m), TFM_OK);
    tfm_module_free(m);
    m = SENTINEL_MODULE;
    /* An invalid variant is refused before anything is allocated. */
    tfm_model_config c = small_config(TFM_ARCH_ENCODER_ONLY);
    o.attention.n_kv_heads = 3;
    assert_int_equal(tfm_model_create_ex(&c, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "n_kv_heads"));
    tfm_model_options_init(&o);
    o.attention.rope = TFM_ROPE_ADJACENT;
    o.attention.rope_dims = 6; /* d_k is 4 */
    assert_int_equal(tfm_model_create_ex(&c, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_model_options_init(&o);
    o.positional_base = 1.0;
    c.positional = TFM_POSITIONAL_SINUSOIDAL_CONCAT;
    assert_int_equal(tfm_model_create_ex(&c, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    o.positional_base = NAN;
    assert_int_equal(tfm_model_create_ex(&c, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    c.positional = (tfm_positional)4;
    assert_int_equal(tfm_model_create(&c, &m), TFM_ERR_INVALID_ARGUMENT);
    /* The concatenated layout needs d_model >= 4. */
    c.positional = TFM_POSITIONAL_SINUSOIDAL_CONCAT;
    c.layer = tfm_layer_config_default(2, 1);
    c.layer.d_ff = 4;
    assert_int_equal(tfm_model_create(&c, &m), TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(m, SENTINEL_MODULE);
    /* Encoder-only models take variants (bidirectional). */
    c = small_config(TFM_ARCH_ENCODER_ONLY);
    tfm_model_options_init(&o);
    o.attention.sparsity = TFM_SPARSE_SLIDING_WINDOW;
    o.attention.window = 2;
    assert_int_equal(tfm_model_create_ex(&c, &o, &m), TFM_OK);
    tfm_model_options got;
    tfm_model_options_init(&got);
    assert_int_equal(tfm_model_get_options(m, &got), TFM_OK);
    assert_true(options_equal(&got, &o));
    tfm_module_free(m);
}

/* tfm_sinusoidal_encoding_ex, CONCAT, d = 6, base 100: h = 3 frequencies
 * 100^(-i/2) = 1, 0.1, 0.01; position 2 (offset 2, row 0):
 *   sin 2 = 0.90929742682568170, sin 0.2 = 0.19866933079506122,
 *   sin 0.02 = 0.019998666693333080, cos 2 = -0.41614683654714241,
 *   cos 0.2 = 0.98006657784124163, cos 0.02 = 0.99980000666657776.
 * d = 7 adds a 0 column.  INTERLEAVED equals tfm_sinusoidal_encoding. */
static void sinusoidal_concat_values(void **s)
{
    (void)s;
    const double want[6] = { 0.90929742682568170,  0.19866933079506122,
                             0.019998666693333080, -0.41614683654714241,
                             0.98006657784124163,  0.99980000666657776 };
    tfm_tensor *pe = make2(2, 6, NULL);
    assert_int_equal(
        tfm_sinusoidal_encoding_ex(pe, 2, 100.0, TFM_SINUSOIDAL_CONCAT),
        TFM_OK);
    for (int c = 0; c < 6; c++)
        assert_true(fabs(tfm_tensor_data(pe)[c] - want[c]) <= 1e-7);
    /* Row 1 is position 3: sin 3 = 0.14112000805986721. */
    assert_true(fabs(tfm_tensor_data(pe)[6] - 0.14112000805986721) <= 1e-7);
    tfm_tensor_free(pe);

    tfm_tensor *odd = make2(1, 7, NULL);
    assert_int_equal(
        tfm_sinusoidal_encoding_ex(odd, 2, 100.0, TFM_SINUSOIDAL_CONCAT),
        TFM_OK);
    for (int c = 0; c < 6; c++)
        assert_true(fabs(tfm_tensor_data(odd)[c] - want[c]) <= 1e-7);
    assert_true(tfm_tensor_data(odd)[6] == 0.0f);
    tfm_tensor_free(odd);

    tfm_tensor *a = make2(5, 10, NULL), *b = make2(5, 10, NULL);
    assert_int_equal(tfm_sinusoidal_encoding(a, 3, 0.0), TFM_OK);
    assert_int_equal(
        tfm_sinusoidal_encoding_ex(b, 3, 0.0, TFM_SINUSOIDAL_INTERLEAVED),
        TFM_OK);
    assert_memory_equal(tfm_tensor_data(a), tfm_tensor_data(b),
                        50 * sizeof(float));
    /* Errors leave pe unchanged. */
    tfm_tensor *small = make2(3, 3, NULL);
    fill(small, 42.0f);
    assert_int_equal(
        tfm_sinusoidal_encoding_ex(small, 0, 0.0, TFM_SINUSOIDAL_CONCAT),
        TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_sinusoidal_encoding_ex(small, 0, 0.0,
                                                (tfm_sinusoidal_layout)2),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(
        tfm_sinusoidal_encoding_ex(small, -1, 0.0, TFM_SINUSOIDAL_INTERLEAVED),
        TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(
        tfm_sinusoidal_encoding_ex(NULL, 0, 0.0, TFM_SINUSOIDAL_INTERLEAVED),
        TFM_ERR_NULL_ARGUMENT);
    expect_all_equal(small, 42.0f, "pe after errors");
    FREE_TENSORS(a, b, small);
}

/* Out of memory at every allocation of loading a variant model, creating
 * its KV cache and decoding: the failing call says so, leaves its output
 * (and the cache) as it was, and leaks nothing (valgrind runs this). */
static void variants_out_of_memory(void **s)
{
    (void)s;
    static const char *const names[] = { "gqa", "shaw_values", "bigbird",
                                         "rope_half_partial" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.safetensors", variants_dir,
                 names[i]);
        tfm_module *m = SENTINEL_MODULE;
        tfm_status st = TFM_ERR_OUT_OF_MEMORY;
        for (long k = 1; st != TFM_OK; k++) {
            tfm_testing_fail_allocation(k);
            st = tfm_model_load(path, &m);
            tfm_testing_fail_allocation(0);
            if (st != TFM_OK) {
                assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
                assert_ptr_equal(m, SENTINEL_MODULE);
            }
        }
        int32_t ids[6] = { 1, 2, 3, 4, 5, 6 };
        tfm_model_config c;
        assert_int_equal(tfm_model_get_config(m, &c), TFM_OK);
        tfm_tensor *logits = make2(1, c.vocab_size, NULL);
        tfm_tensor *want = make2(1, c.vocab_size, NULL);
        tfm_kv_cache *ref = NULL;
        assert_int_equal(tfm_kv_cache_create(m, 6, &ref), TFM_OK);
        assert_int_equal(tfm_kv_cache_decode(ref, ids, 5, want), TFM_OK);
        assert_int_equal(tfm_kv_cache_decode(ref, ids + 5, 1, want), TFM_OK);
        tfm_kv_cache *cache = NULL;
        st = TFM_ERR_OUT_OF_MEMORY;
        for (long k = 1; st != TFM_OK; k++) {
            tfm_testing_fail_allocation(k);
            st = tfm_kv_cache_create(m, 6, &cache);
            tfm_testing_fail_allocation(0);
            if (st != TFM_OK)
                assert_null(cache);
        }
        assert_int_equal(tfm_kv_cache_decode(cache, ids, 5, logits), TFM_OK);
        tfm_workspace_release(); /* so that decoding allocates again */
        st = TFM_ERR_OUT_OF_MEMORY;
        for (long k = 1; st != TFM_OK; k++) {
            fill(logits, 42.0f);
            tfm_testing_fail_allocation(k);
            st = tfm_kv_cache_decode(cache, ids + 5, 1, logits);
            tfm_testing_fail_allocation(0);
            if (st != TFM_OK) {
                assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
                assert_int_equal(tfm_kv_cache_length(cache), 5);
                expect_all_equal(logits, 42.0f, "logits after a failure");
                tfm_workspace_release();
            }
        }
        assert_memory_equal(tfm_tensor_data(logits), tfm_tensor_data(want),
                            (size_t)c.vocab_size * sizeof(float));
        tfm_kv_cache_free(cache);
        tfm_kv_cache_free(ref);
        FREE_TENSORS(logits, want);
        tfm_module_free(m);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1)
        variants_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(variants_match_reference),
        cmocka_unit_test(variants_round_trip),
        cmocka_unit_test(variants_generate_sliding),
        cmocka_unit_test(malformed_metadata),
        cmocka_unit_test(temperature_in_file_refused),
        cmocka_unit_test(default_options_unchanged),
        cmocka_unit_test(create_ex_options),
        cmocka_unit_test(create_ex_errors),
        cmocka_unit_test(sinusoidal_concat_values),
        cmocka_unit_test(variants_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
