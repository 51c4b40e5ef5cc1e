/*
 * Hugging Face hub checkpoint directories from C (model.h: tfm_model_load
 * on a directory, src/hub_model.c).  argv[1] is a directory written by
 * bindings/python/tests/hub_gpt2_reference.py -- a tiny random GPT-2 in
 * GPT2LMHeadModel's layout (config.json, model.safetensors with Conv1D
 * weights [in, out] and the causal-mask buffers) -- or by
 * hub_llama_reference.py -- a Llama in LlamaForCausalLM's layout (RMSNorm,
 * SwiGLU, grouped-query attention, rotary positions, untied head) -- or by
 * hub_bert_reference.py -- a BERT in BertForMaskedLM's layout (post-norm
 * encoder, token types, embedding LayerNorm, the masked-LM head
 * transform) -- or by hub_marian_reference.py -- an opus-mt Marian in
 * MarianMTModel's layout (post-norm encoder-decoder, sinusoidal position
 * tables, final_logits_bias, the pad id banned in generation) -- with
 * reference.json, the logits and (decoders) 12 greedy ids of the forward
 * pass in torch float64 (written from transformers' modeling_gpt2 /
 * modeling_llama / modeling_bert / modeling_marian; Marian's logits are
 * those of a decoder input given the prompt as the source).  Checked: the logits
 * within 1e-5 of the largest, the greedy ids equal, every allocation
 * failing in turn gives TFM_ERR_OUT_OF_MEMORY with *out unchanged (the
 * load; and a training step's forward and backward, which then leave the
 * logits and the gradients as they were), and bad
 * directories (no config.json, malformed JSON, another model_type, a
 * config.json the weights contradict) are refused with the key or tensor
 * named and *out unchanged.
 */
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
#include <cJSON.h>
#include <transformer/transformer.h>

/* Internal test hook of the library (src/alloc.c): the k-th allocation
 * from now fails; 0 disarms it. */
void tfm_testing_fail_allocation(long k);

#define SENTINEL ((tfm_module *)(uintptr_t)0x5e47)

static const char *dir;
static int llama; /* config.json's model_type is "llama" */
static int bert;  /* ... or "bert" */
static int marian; /* ... or "marian" */
#define FAMILY (llama ? "Llama" : bert ? "BERT" : marian ? "Marian" : "GPT-2")

typedef struct reference {
    int32_t prompt[64];
    int n_prompt;
    int32_t decoder_input[64]; /* Marian: the target the logits are of */
    int n_decoder_input;
    double *logits;      /* [T, vocab]: T = n_prompt, Marian's
                          * n_decoder_input */
    int n_logits;
    int32_t greedy[64];
    int n_greedy;
} reference;

static char *slurp(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (size)
        *size = n;
    return buf;
}

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static int ints(const cJSON *a, int32_t *out, int cap)
{
    int n = 0;
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next) {
        assert_true(n < cap);
        out[n++] = (int32_t)e->valuedouble;
    }
    return n;
}

static void load_reference(reference *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    char *text = slurp(path, NULL);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    r->n_prompt = ints(cJSON_GetObjectItem(root, "prompt"), r->prompt, 64);
    r->n_greedy = ints(cJSON_GetObjectItem(root, "greedy"), r->greedy, 64);
    r->n_decoder_input = ints(cJSON_GetObjectItem(root, "decoder_input"),
                              r->decoder_input, 64);
    const cJSON *l = cJSON_GetObjectItem(root, "logits");
    r->n_logits = cJSON_GetArraySize(l);
    r->logits = malloc((size_t)r->n_logits * sizeof *r->logits);
    assert_non_null(r->logits);
    int i = 0;
    for (const cJSON *e = l->child; e; e = e->next)
        r->logits[i++] = e->valuedouble;
    cJSON_Delete(root);
    free(text);
}

/* The positions the reference's logits are of: the prompt's, or
 * Marian's decoder input's. */
static int64_t logit_rows(const reference *r)
{
    return marian ? r->n_decoder_input : r->n_prompt;
}

/* The model's logits of the reference's input into logits [1, T, V]:
 * tfm_model_logits of the prompt, or Marian's tfm_model_seq2seq_logits
 * of the decoder input given the prompt. */
static tfm_status model_logits(const tfm_module *model, const reference *r,
                               tfm_tensor *logits)
{
    if (marian)
        return tfm_model_seq2seq_logits(model, r->prompt, r->n_prompt,
                                        r->decoder_input, r->n_decoder_input,
                                        1, logits);
    return tfm_model_logits(model, r->prompt, 1, r->n_prompt, logits);
}

static tfm_status model_backward(tfm_module *model, const reference *r,
                                 const tfm_tensor *dlogits)
{
    if (marian)
        return tfm_model_seq2seq_backward(model, r->prompt, r->n_prompt,
                                          r->decoder_input,
                                          r->n_decoder_input, 1, dlogits);
    return tfm_model_backward(model, r->prompt, 1, r->n_prompt, dlogits);
}

/* max |ours - ref| / max |ref| of the reference's logits. */
static double logits_error(const tfm_module *model, const reference *r)
{
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(model, &c), TFM_OK);
    assert_int_equal(r->n_logits, logit_rows(r) * c.vocab_size);
    tfm_tensor *logits = NULL;
    assert_int_equal(tfm_tensor_create(3, (const int64_t[]){ 1, logit_rows(r),
                                                             c.vocab_size },
                                       &logits),
                     TFM_OK);
    assert_int_equal(model_logits(model, r, logits), TFM_OK);
    const float *x = tfm_tensor_data_const(logits);
    double diff = 0, scale = 0;
    for (int i = 0; i < r->n_logits; i++) {
        double d = x[i] - r->logits[i];
        diff = d < 0 ? (-d > diff ? -d : diff) : (d > diff ? d : diff);
        double a = r->logits[i] < 0 ? -r->logits[i] : r->logits[i];
        scale = a > scale ? a : scale;
    }
    tfm_tensor_free(logits);
    return diff / scale;
}

static void test_logits_and_greedy(void **state)
{
    (void)state;
    reference r;
    load_reference(&r);
    tfm_module *model = NULL;
    assert_int_equal(tfm_model_load(dir, &model), TFM_OK);
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(model, &c), TFM_OK);
    assert_int_equal(c.architecture, bert     ? TFM_ARCH_ENCODER_ONLY
                                     : marian ? TFM_ARCH_ENCODER_DECODER
                                              : TFM_ARCH_DECODER_ONLY);
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    assert_int_equal(tfm_model_get_layer_options(model, &lo), TFM_OK);
    tfm_model_options o;
    tfm_model_options_init(&o);
    assert_int_equal(tfm_model_get_options(model, &o), TFM_OK);
    if (llama) {
        assert_int_equal(c.layer.activation, TFM_ACTIVATION_SILU);
        assert_false(c.tied_embeddings);
        assert_int_equal(c.positional, TFM_POSITIONAL_NONE);
        assert_true(lo.rms_norm && lo.gated && !lo.bias);
        assert_int_equal(o.attention.rope, TFM_ROPE_HALF);
        assert_int_equal(o.attention.n_kv_heads, 2);
        assert_true(o.attention.rope_base == 500000.0);
    } else if (bert) {
        assert_int_equal(c.layer.activation, TFM_ACTIVATION_GELU);
        assert_true(c.tied_embeddings);
        assert_false(c.layer.norm_first);
        assert_int_equal(lo.type_vocab_size, 2);
        assert_true(lo.embedding_norm && lo.head_transform && lo.bias);
        assert_false(lo.final_norm);
    } else if (marian) {
        assert_int_equal(c.layer.activation, TFM_ACTIVATION_SILU);
        assert_true(c.tied_embeddings && c.embedding_scale);
        assert_false(c.layer.norm_first);
        assert_int_equal(c.positional, TFM_POSITIONAL_LEARNED);
        assert_true(lo.head_bias && lo.bias && !lo.head_transform);
        assert_false(lo.final_norm);
    } else {
        assert_int_equal(c.layer.activation, TFM_ACTIVATION_GELU_TANH);
        assert_true(c.tied_embeddings);
        assert_true(!lo.rms_norm && !lo.gated && lo.bias);
    }
    double err = logits_error(model, &r);
    printf("hub %s logits: max error / max |ref| = %.3g\n", FAMILY, err);
    assert_true(err <= 1e-5);
    if (bert) { /* an encoder: no generation */
        tfm_module_free(model);
        free(r.logits);
        return;
    }
    int32_t ids[64];
    if (marian) {
        /* transformers' generate for Marian: greedy (num_beams 1) from
         * the decoder start (the pad id), the pad banned (bad_words_ids),
         * stopping at eos 0. */
        tfm_model_config mc;
        assert_int_equal(tfm_model_get_config(model, &mc), TFM_OK);
        const int32_t pad = (int32_t)(mc.vocab_size - 1);
        tfm_beam_search_options bo;
        tfm_beam_search_options_init(&bo);
        bo.num_beams = 1;
        bo.max_new_tokens = r.n_greedy;
        bo.eos_token_id = 0;
        bo.decoder_start_token_id = pad;
        bo.suppress_tokens = &pad;
        bo.n_suppress_tokens = 1;
        int64_t length = 0;
        assert_int_equal(tfm_model_beam_search(model, r.prompt, r.n_prompt,
                                               &bo, ids, &length, NULL),
                         TFM_OK);
        assert_int_equal(length, r.n_greedy);
        /* Without the ban the pad (its logits' bias raised by the
         * reference) is what greedy picks. */
        int32_t plain[64];
        bo.n_suppress_tokens = 0;
        assert_int_equal(tfm_model_beam_search(model, r.prompt, r.n_prompt,
                                               &bo, plain, &length, NULL),
                         TFM_OK);
        assert_int_equal(plain[0], pad);
        bo.n_suppress_tokens = 1;
        const int32_t outside = (int32_t)mc.vocab_size;
        bo.suppress_tokens = &outside;
        plain[0] = -7;
        assert_int_equal(tfm_model_beam_search(model, r.prompt, r.n_prompt,
                                               &bo, plain, &length, NULL),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(tfm_last_error(), "suppress_tokens[0]"));
        assert_int_equal(plain[0], -7);
    } else {
        assert_int_equal(tfm_model_generate(model, r.prompt, r.n_prompt,
                                            r.n_greedy, NULL, 0, ids),
                         TFM_OK);
    }
    assert_memory_equal(ids, r.greedy, (size_t)r.n_greedy * sizeof *ids);
    tfm_module_free(model);
    free(r.logits);
}

/* Every allocation of the load fails once: TFM_ERR_OUT_OF_MEMORY with a
 * message and *out as it was, until a load succeeds and gives the same
 * logits. */
static void test_out_of_memory(void **state)
{
    (void)state;
    reference r;
    load_reference(&r);
    long k = 1;
    for (;; k++) {
        tfm_module *model = SENTINEL;
        tfm_clear_error();
        tfm_testing_fail_allocation(k);
        tfm_status st = tfm_model_load(dir, &model);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK) {
            assert_true(logits_error(model, &r) <= 1e-5);
            tfm_module_free(model);
            break;
        }
        assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
        assert_ptr_equal(model, SENTINEL);
        assert_true(tfm_last_error()[0] != '\0');
        assert_true(k < 100000);
    }
    printf("hub %s load: %ld allocations failed in turn\n", FAMILY, k - 1);
    assert_true(k > 10);
    free(r.logits);
}

/* A training step's forward (tfm_model_logits in training mode, which
 * keeps what the backward needs) and backward with every allocation
 * failing in turn: TFM_ERR_OUT_OF_MEMORY with a message, the logits
 * tensor and every gradient as they were; then both succeed, with the
 * reference's logits. */
static void test_out_of_memory_training(void **state)
{
    (void)state;
    reference r;
    load_reference(&r);
    tfm_module *model = NULL;
    assert_int_equal(tfm_model_load(dir, &model), TFM_OK);
    assert_int_equal(tfm_module_train(model, 1), TFM_OK);
    tfm_model_config c;
    assert_int_equal(tfm_model_get_config(model, &c), TFM_OK);
    const int64_t T = logit_rows(&r), V = c.vocab_size;
    tfm_tensor *logits = NULL, *dlogits = NULL;
    assert_int_equal(tfm_tensor_create(3, (const int64_t[]){ 1, T, V },
                                       &logits), TFM_OK);
    assert_int_equal(tfm_tensor_create(3, (const int64_t[]){ 1, T, V },
                                       &dlogits), TFM_OK);
    float *x = tfm_tensor_data(logits), *g = tfm_tensor_data(dlogits);
    for (int64_t i = 0; i < T * V; i++) {
        x[i] = 7.0f;
        g[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    }
    const char *watched = bert     ? "head_transform.weight"
                          : marian ? "transformer.encoder.layers.0.linear1.weight"
                                   : "layers.0.linear1.weight";
    float *grad = NULL;
    assert_int_equal(tfm_module_grad(model, watched, &grad), TFM_OK);
    long fwd = 0, bwd = 0;
    for (long k = 1;; k++) {
        tfm_workspace_release(); /* so that scratch allocations fail too */
        tfm_testing_fail_allocation(k);
        tfm_status st = model_logits(model, &r, logits);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK)
            break;
        assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
        assert_true(tfm_last_error()[0] != '\0');
        for (int64_t i = 0; i < T * V; i++)
            assert_true(x[i] == 7.0f);
        fwd = k;
        assert_true(k < 100000);
    }
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < T * V; i++) {
        double d = fabs(x[i] - r.logits[i]), a = fabs(r.logits[i]);
        diff = d > diff ? d : diff;
        scale = a > scale ? a : scale;
    }
    assert_true(diff / scale <= 1e-5);
    for (long k = 1;; k++) {
        tfm_workspace_release();
        tfm_testing_fail_allocation(k);
        tfm_status st = model_backward(model, &r, dlogits);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK)
            break;
        assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
        for (int64_t i = 0; i < c.layer.d_model; i++)
            assert_true(grad[i] == 0.0f);
        bwd = k;
        assert_true(k < 100000);
    }
    int nonzero = 0;
    for (int64_t i = 0; i < c.layer.d_model; i++)
        nonzero += grad[i] != 0.0f;
    assert_true(nonzero > 0);
    assert_true(fwd > 0 && bwd > 0);
    printf("hub %s training step: %ld forward and %ld backward allocations "
           "failed in turn\n", FAMILY, fwd, bwd);
    tfm_tensor_free(logits);
    tfm_tensor_free(dlogits);
    tfm_module_free(model);
    free(r.logits);
}

/* A copy of the checkpoint's weights beside config text in a fresh
 * directory: tfm_model_load refuses it with status want and a message
 * holding `words`, *out unchanged. */
/* tfm_model_load of a copy of the reference's weights with config.json
 * holding `config` (NULL: no config.json). */
static tfm_status load_with_config(const char *config, tfm_module **model)
{
    char tmp[] = "/tmp/tfm_hub_XXXXXX", path[4096], weights[4096];
    assert_non_null(mkdtemp(tmp));
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    long size = 0;
    char *bytes = slurp(weights, &size);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    spit(path, bytes, (size_t)size);
    free(bytes);
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", tmp);
    if (config)
        spit(cfg, config, strlen(config));
    tfm_status st = tfm_model_load(tmp, model);
    unlink(path);
    if (config)
        unlink(cfg);
    rmdir(tmp);
    return st;
}

static void refused(const char *config, tfm_status want, const char *words)
{
    tfm_module *model = SENTINEL;
    tfm_status st = load_with_config(config, &model);
    if (st != want || !strstr(tfm_last_error(), words))
        fail_msg("%s: status %s, message \"%s\"; wanted %s and \"%s\"",
                 config ? config : "(no config.json)", tfm_status_string(st),
                 tfm_last_error(), tfm_status_string(want), words);
    assert_ptr_equal(model, SENTINEL);
}

/* The Llama reference's weights: 3 layers, width 48, 6 heads, 2 key/value
 * heads, vocabulary 263. */
static void test_bad_llama_directories(void)
{
    refused("{\"model_type\": \"llama\", \"hidden_size\": 48, "
            "\"intermediate_size\": 80, \"num_attention_heads\": 6, "
            "\"num_key_value_heads\": 2, \"num_hidden_layers\": 4, "
            "\"vocab_size\": 263}",
            TFM_ERR_FORMAT, "model.layers.3.input_layernorm.weight");
    /* num_key_value_heads absent = num_attention_heads: k_proj is too
     * small for 6 key/value heads. */
    refused("{\"model_type\": \"llama\", \"hidden_size\": 48, "
            "\"intermediate_size\": 80, \"num_attention_heads\": 6, "
            "\"num_hidden_layers\": 3, \"vocab_size\": 263}",
            TFM_ERR_FORMAT, "model.layers.0.self_attn.k_proj.weight");
    refused("{\"model_type\": \"llama\", \"hidden_size\": 48, "
            "\"num_attention_heads\": 6, \"num_key_value_heads\": 4}",
            TFM_ERR_FORMAT, "num_key_value_heads");
    refused("{\"model_type\": \"llama\", \"hidden_size\": 48, "
            "\"intermediate_size\": 80, \"num_attention_heads\": 6, "
            "\"num_key_value_heads\": 2, \"num_hidden_layers\": 3, "
            "\"vocab_size\": 263, \"rope_scaling\": {\"factor\": 8}}",
            TFM_ERR_UNSUPPORTED, "rope_scaling");
    refused("{\"model_type\": \"llama\", \"hidden_size\": 48, "
            "\"intermediate_size\": 80, \"num_attention_heads\": 6, "
            "\"num_key_value_heads\": 2, \"num_hidden_layers\": 3, "
            "\"vocab_size\": 263, \"rms_norm_eps\": -1}",
            TFM_ERR_FORMAT, "rms_norm_eps");
    refused("{\"model_type\": \"mistral\"}", TFM_ERR_UNSUPPORTED,
            "mistral");
    /* JSON that cJSON reads one way and Python's json (transformers)
     * another: a key twice (cJSON finds the first 3, transformers the last
     * 4), at any depth, and bytes after the object. */
    static const char llama3[] =
        "\"model_type\": \"llama\", \"hidden_size\": 48, "
        "\"intermediate_size\": 80, \"num_attention_heads\": 6, "
        "\"num_key_value_heads\": 2, \"vocab_size\": 263";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "{%s, \"num_hidden_layers\": 3, "
             "\"num_hidden_layers\": 4}", llama3);
    refused(cfg, TFM_ERR_FORMAT, "\"num_hidden_layers\" appears twice");
    snprintf(cfg, sizeof cfg, "{%s, \"num_hidden_layers\": 3, "
             "\"id2label\": {\"0\": \"a\", \"0\": \"b\"}}", llama3);
    refused(cfg, TFM_ERR_FORMAT, "\"0\" appears twice");
    snprintf(cfg, sizeof cfg, "{%s, \"num_hidden_layers\": 3} {}", llama3);
    refused(cfg, TFM_ERR_FORMAT, "bytes after the JSON value");
    snprintf(cfg, sizeof cfg, "{%s, \"num_hidden_layers\": 3}\n \t\r\n",
             llama3);   /* whitespace after the object is JSON: loads */
    tfm_module *model = NULL;
    assert_int_equal(load_with_config(cfg, &model), TFM_OK);
    tfm_module_free(model);
}

/* The BERT reference's weights: 2 layers, width 32, 4 heads, 40
 * positions, 2 token types, vocabulary 263. */
static void test_bad_bert_directories(void)
{
    refused("{\"model_type\": \"bert\", \"hidden_size\": 32, "
            "\"intermediate_size\": 56, \"num_attention_heads\": 4, "
            "\"num_hidden_layers\": 3, \"max_position_embeddings\": 40, "
            "\"vocab_size\": 263}",
            TFM_ERR_FORMAT, "bert.encoder.layer.2.attention.self.query");
    refused("{\"model_type\": \"bert\", \"hidden_size\": 32, "
            "\"intermediate_size\": 56, \"num_attention_heads\": 4, "
            "\"num_hidden_layers\": 2, \"max_position_embeddings\": 40, "
            "\"vocab_size\": 263, \"type_vocab_size\": 0}",
            TFM_ERR_FORMAT, "type_vocab_size");
    refused("{\"model_type\": \"bert\", \"hidden_size\": 32, "
            "\"intermediate_size\": 56, \"num_attention_heads\": 4, "
            "\"num_hidden_layers\": 2, \"vocab_size\": 263}",
            TFM_ERR_FORMAT, "bert.embeddings.position_embeddings.weight");
    refused("{\"model_type\": \"bert\", \"hidden_size\": 32, "
            "\"num_attention_heads\": 4, \"num_hidden_layers\": "
            "100000000}",
            TFM_ERR_FORMAT, "\"num_hidden_layers\" 100000000 needs");
    refused("{\"model_type\": \"bert\", \"hidden_size\": 32, "
            "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, "
            "\"position_embedding_type\": \"relative_key_query\"}",
            TFM_ERR_UNSUPPORTED, "position_embedding_type");
    refused("{\"model_type\": \"roberta\"}", TFM_ERR_UNSUPPORTED,
            "roberta");
}

/* The Marian reference's weights: 2 + 2 layers, width 32, 4 heads, 40
 * positions, vocabulary 263 (each config names its decoder heads: a JSON
 * key given twice is read once). */
static void test_bad_marian_directories(void)
{
    static const char base[] =
        "\"model_type\": \"marian\", \"d_model\": 32, "
        "\"encoder_ffn_dim\": 56, \"decoder_ffn_dim\": 56, "
        "\"encoder_attention_heads\": 4, "
        "\"max_position_embeddings\": 40, \"vocab_size\": 263, "
        "\"scale_embedding\": true, \"activation_function\": \"swish\"";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "{%s, \"encoder_layers\": 2, "
             "\"decoder_layers\": 3, \"decoder_attention_heads\": 4}", base);
    refused(cfg, TFM_ERR_FORMAT, "model.decoder.layers.2.self_attn.q_proj");
    snprintf(cfg, sizeof cfg, "{%s, \"encoder_layers\": 1, "
             "\"decoder_layers\": 2, \"decoder_attention_heads\": 4}", base);
    refused(cfg, TFM_ERR_FORMAT, "model.encoder.layers.1.");
    snprintf(cfg, sizeof cfg, "{%s, \"encoder_layers\": 2, "
             "\"decoder_layers\": 2, \"decoder_attention_heads\": 4, "
             "\"decoder_vocab_size\": 300}", base);
    refused(cfg, TFM_ERR_UNSUPPORTED, "decoder_vocab_size");
    snprintf(cfg, sizeof cfg, "{%s, \"encoder_layers\": 2, "
             "\"decoder_layers\": 2, \"decoder_attention_heads\": 8}", base);
    refused(cfg, TFM_ERR_UNSUPPORTED, "decoder_attention_heads");
    snprintf(cfg, sizeof cfg, "{%s, \"encoder_layers\": 2, "
             "\"decoder_layers\": 20000000, \"decoder_attention_heads\": 4}",
             base);
    refused(cfg, TFM_ERR_FORMAT, "\"decoder_layers\" 20000000 needs");
    snprintf(cfg, sizeof cfg, "{%s, \"encoder_layers\": 2, "
             "\"decoder_layers\": 200000000, \"decoder_attention_heads\": 4}",
             base);
    refused(cfg, TFM_ERR_FORMAT, "\"decoder_layers\" 200000000 is too large");
    refused("{\"model_type\": \"marian\", \"d_model\": 32, "
            "\"encoder_ffn_dim\": 56, \"decoder_ffn_dim\": 56, "
            "\"encoder_attention_heads\": 4, \"decoder_attention_heads\": 4, "
            "\"encoder_layers\": 2, \"decoder_layers\": 2, "
            "\"max_position_embeddings\": 41, \"vocab_size\": 263}",
            TFM_ERR_FORMAT, "model.encoder.embed_positions.weight");
}

static void test_bad_directories(void **state)
{
    (void)state;
    if (marian) {
        test_bad_marian_directories();
        return;
    }
    if (llama) {
        test_bad_llama_directories();
        return;
    }
    if (bert) {
        test_bad_bert_directories();
        return;
    }
    refused(NULL, TFM_ERR_IO, "config.json");
    refused("{\"model_type\": \"gpt2\", \"n_embd\": 32,", TFM_ERR_FORMAT,
            "config.json");
    refused("{\"model_type\": \"t5\"}", TFM_ERR_UNSUPPORTED, "t5");
    refused("{\"n_embd\": 32}", TFM_ERR_FORMAT, "model_type");
    /* The weights have 3 layers, width 32, 32 positions, vocabulary 263. */
    refused("{\"model_type\": \"gpt2\", \"n_embd\": 32, \"n_head\": 4, "
            "\"n_layer\": 4, \"n_positions\": 32, \"vocab_size\": 263}",
            TFM_ERR_FORMAT, "h.3.ln_1.weight");
    /* More layers than the file has tensors: refused before the plan of
     * 12 n_layer tensors is allocated. */
    refused("{\"model_type\": \"gpt2\", \"n_embd\": 32, \"n_head\": 4, "
            "\"n_layer\": 150000000, \"n_positions\": 32, "
            "\"vocab_size\": 263}",
            TFM_ERR_FORMAT, "\"n_layer\" 150000000 needs");
    refused("{\"model_type\": \"gpt2\", \"n_embd\": 32, \"n_head\": 4, "
            "\"n_layer\": 2, \"n_positions\": 32, \"vocab_size\": 263}",
            TFM_ERR_FORMAT, "h.2.");
    refused("{\"model_type\": \"gpt2\", \"n_embd\": 32, \"n_head\": 4, "
            "\"n_layer\": 3, \"n_positions\": 32, \"vocab_size\": 262}",
            TFM_ERR_FORMAT, "wte.weight");
    refused("{\"model_type\": \"gpt2\", \"n_embd\": 32, \"n_head\": 4, "
            "\"n_layer\": 3, \"n_positions\": 32, \"vocab_size\": 263, "
            "\"layer_norm_epsilon\": \"1e-5\"}",
            TFM_ERR_FORMAT, "layer_norm_epsilon");
    tfm_module *model = SENTINEL;
    assert_int_equal(tfm_model_load(NULL, &model), TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(model, SENTINEL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR (written by hub_gpt2_reference.py)\n",
                argv[0]);
        return 2;
    }
    dir = argv[1];
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        char text[8192];
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
        llama = strstr(text, "\"model_type\": \"llama\"") != NULL;
        bert = strstr(text, "\"model_type\": \"bert\"") != NULL;
        marian = strstr(text, "\"model_type\": \"marian\"") != NULL;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_and_greedy),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_out_of_memory_training),
        cmocka_unit_test(test_bad_directories),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
