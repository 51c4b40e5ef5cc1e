/* Shared by the model-file harnesses (fuzz_model_load.c,
 * fuzz_model_metadata.c): whether a file's metadata describes a model small
 * enough to build, and what a loaded model and tokenizer must then do.
 * Header-only: each harness is one program. */
#ifndef TFM_FUZZ_MODEL_H
#define TFM_FUZZ_MODEL_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

#include "fuzz_util.h"

#define MAX_DIM 4096          /* any one size in the metadata */
#define MAX_LAYERS 64         /* each of n_layers, n_encoder/decoder_layers */
#define MAX_PARAMS (1 << 20)  /* estimated parameters plus KV cache floats */

/* The metadata value of key read leniently (strtoll: a value the strict
 * loader refuses may still count as large here, which only skips it), or 0
 * when absent or not a number (the loader refuses those itself). */
static inline long long meta_number(const tfm_safetensors *f, const char *key)
{
    const char *v = tfm_safetensors_metadata(f, key);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (end == v || errno)
        return -1; /* refused by the loader: allowed through */
    return n;
}

/* Whether the model the metadata describes is small enough to build. */
static inline int small_enough(const uint8_t *data, size_t size)
{
    static const char *const keys[] = {
        "tfm.d_model", "tfm.n_heads", "tfm.d_ff", "tfm.vocab_size",
        "tfm.context_length", "tfm.n_layers", "tfm.n_encoder_layers",
        "tfm.n_decoder_layers",
    };
    long long v[8];
    tfm_safetensors *f = NULL;
    if (tfm_safetensors_open_memory(data, size, &f) != TFM_OK)
        return 1; /* the loader refuses it just as fast, or it is a GGUF
                   * file, whose model is no larger than its tensors
                   * (each checked in the file before allocating) */
    for (int i = 0; i < 8; i++) {
        v[i] = meta_number(f, keys[i]);
        if (v[i] > (i >= 5 ? MAX_LAYERS : MAX_DIM)) {
            tfm_safetensors_close(f);
            return 0;
        }
        if (v[i] < 0)
            v[i] = 0;
    }
    tfm_safetensors_close(f);
    const long long d = v[0], dff = v[2], vocab = v[3], ctx = v[4];
    const long long layers = v[5] + v[6] + 2 * v[7];
    const long long params = 2 * vocab * d + ctx * d +
                             layers * (4 * d * d + 2 * d * dff + 10 * d + dff) +
                             2 * v[5] * ctx * d; /* KV cache */
    return params <= MAX_PARAMS;
}

static inline void run_model(tfm_module *model)
{
    tfm_model_config c;
    CHECK(tfm_model_get_config(model, &c) == TFM_OK);
    const int64_t V = c.vocab_size;
    const int64_t shape[3] = { 1, 1, V };
    tfm_tensor *logits = NULL;
    CHECK(tfm_tensor_create(3, shape, &logits) == TFM_OK);
    const int32_t ids[2] = { 0, (int32_t)(V - 1) };
    tfm_status st;
    if (c.architecture == TFM_ARCH_ENCODER_DECODER)
        st = tfm_model_seq2seq_logits(model, ids, 1, ids + 1, 1, 1, logits);
    else
        st = tfm_model_logits(model, ids + 1, 1, 1, logits);
    CHECK(st == TFM_OK);

    if (c.architecture == TFM_ARCH_DECODER_ONLY) {
        tfm_kv_cache *cache = NULL;
        const int64_t cap = c.context_length < 2 ? c.context_length : 2;
        const int64_t shape2[2] = { 1, V };
        tfm_tensor *step = NULL;
        CHECK(tfm_kv_cache_create(model, cap, &cache) == TFM_OK);
        CHECK(tfm_tensor_create(2, shape2, &step) == TFM_OK);
        CHECK(tfm_kv_cache_decode(cache, ids + 1, 1, step) == TFM_OK);
        CHECK(tfm_kv_cache_length(cache) == 1);
        tfm_tensor_free(step);
        tfm_kv_cache_free(cache);

        /* Logits may overflow to NaN for wild (finite) weights; sampling
         * refuses NaN with TFM_ERR_NON_FINITE, which is not a bug. */
        int32_t out[3];
        st = tfm_model_generate(model, ids, 2, 3, NULL, 1, out);
        CHECK(st == TFM_OK || st == TFM_ERR_NON_FINITE);
        for (int i = 0; st == TFM_OK && i < 3; i++)
            CHECK(out[i] >= 0 && out[i] < V);
    }
    tfm_tensor_free(logits);
}

/* A tokenizer of another kind than a model file's (a GGUF file's
 * tokenizer.ggml.*): a text encodes to ids in range that decode. */
static inline void run_other_tokenizer(tfm_tokenizer *t)
{
    static const char text[] = "Hello, world <s> caf\xc3\xa9 123";
    int32_t ids[128];
    int64_t n = -1;
    CHECK(tfm_tokenizer_encode(t, text, sizeof text - 1, ids, 128, &n) ==
          TFM_OK);
    for (int64_t i = 0; i < n; i++)
        CHECK(ids[i] >= 0 && ids[i] < tfm_tokenizer_vocab_size(t));
    char back[4096];
    size_t len = 0;
    const tfm_status st = tfm_tokenizer_decode(t, ids, n, back, sizeof back,
                                               &len);
    CHECK(st == TFM_OK || st == TFM_ERR_CAPACITY);
}

static inline void run_tokenizer(tfm_tokenizer *t, const char *path)
{
    if (tfm_tokenizer_get_kind(t) != TFM_TOKENIZER_CHAR) {
        run_other_tokenizer(t);
        return;
    }
    tfm_safetensors *f = NULL;
    CHECK(tfm_safetensors_open(path, &f) == TFM_OK);
    const char *vocab = tfm_safetensors_metadata(f, "tfm.vocab");
    CHECK(vocab != NULL);
    const size_t len = strlen(vocab);
    const int64_t n = tfm_tokenizer_vocab_size(t);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    char *text = malloc(len + 1);
    CHECK(ids && text);
    int64_t n_ids = -1;
    CHECK(tfm_tokenizer_encode(t, vocab, len, ids, n, &n_ids) == TFM_OK);
    CHECK(n_ids == n);
    for (int64_t i = 0; i < n; i++)
        CHECK(ids[i] == i);
    size_t text_len = 0;
    CHECK(tfm_tokenizer_decode(t, ids, n_ids, text, len + 1, &text_len) ==
          TFM_OK);
    CHECK(text_len == len && memcmp(text, vocab, len) == 0);
    free(ids);
    free(text);
    tfm_safetensors_close(f);
}

/* The file at path (its bytes data[0..size-1]) through
 * tfm_tokenizer_load and, when small_enough, tfm_model_load: a load either
 * succeeds and the result runs, or fails with a status other than
 * NULL_ARGUMENT and IO, with a message, and *out untouched. */
static inline void load_file(const char *path, const uint8_t *data,
                             size_t size)
{
    tfm_tokenizer *t = NULL;
    tfm_status st = tfm_tokenizer_load(path, &t);
    if (st == TFM_OK) {
        run_tokenizer(t, path);
        tfm_tokenizer_free(t);
    } else {
        CHECK(t == NULL);
        CHECK(st != TFM_ERR_NULL_ARGUMENT && st != TFM_ERR_IO);
    }
    if (small_enough(data, size)) {
        tfm_module *model = NULL;
        st = tfm_model_load(path, &model);
        if (st == TFM_OK) {
            run_model(model);
            tfm_module_free(model);
        } else {
            CHECK(model == NULL);
            CHECK(st != TFM_ERR_NULL_ARGUMENT && st != TFM_ERR_IO);
            CHECK(tfm_last_error()[0] != '\0');
        }
    }
}

#endif /* TFM_FUZZ_MODEL_H */
