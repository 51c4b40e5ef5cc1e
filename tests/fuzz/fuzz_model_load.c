/* libFuzzer harness: model files from untrusted bytes.
 *
 * The input is written to an anonymous in-memory file (memfd_create) and
 * loaded by path (/proc/self/fd/N) with tfm_model_load and
 * tfm_tokenizer_load, so the real mmap path is exercised.  When the model
 * loads, one token goes through tfm_model_logits (or
 * tfm_model_seq2seq_logits), and for decoder-only models through a KV
 * cache and tfm_model_generate; when the tokenizer loads, its vocabulary
 * is encoded and decoded back.  tfm_module_load_safetensors loads the
 * file into a tiny decoder-only model (the configuration of the corpus'
 * tiny_decoder files) and, by prefix, into an encoder layer: all or
 * nothing, so on failure every parameter must be as it was, and on success
 * equal to the file's tensor.
 *
 * tfm_model_load sizes the model from the metadata before it looks at the
 * tensors, so a tiny file may ask for gigabytes (a known limitation,
 * docs/TESTING.md: at worst the load fails with TFM_ERR_OUT_OF_MEMORY).
 * That would trip libFuzzer's malloc limit and make one input take
 * seconds; inputs whose
 * metadata asks for more than MAX_PARAMS parameters (or sizes over
 * MAX_DIM / MAX_LAYERS) skip tfm_model_load; everything else still runs on
 * them. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <transformer/transformer.h>

#include "../tiny_model.h"
#include "fuzz_util.h"

#define MAX_DIM 4096          /* any one size in the metadata */
#define MAX_LAYERS 64         /* each of n_layers, n_encoder/decoder_layers */
#define MAX_PARAMS (1 << 20)  /* estimated parameters plus KV cache floats */

/* The metadata value of key as the loader would read it (strtoll), or 0
 * when absent or not a number (the loader refuses those itself). */
static long long meta_number(const tfm_safetensors *f, const char *key)
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
static int small_enough(const uint8_t *data, size_t size)
{
    static const char *const keys[] = {
        "tfm.d_model", "tfm.n_heads", "tfm.d_ff", "tfm.vocab_size",
        "tfm.context_length", "tfm.n_layers", "tfm.n_encoder_layers",
        "tfm.n_decoder_layers",
    };
    long long v[8];
    tfm_safetensors *f = NULL;
    if (tfm_safetensors_open_memory(data, size, &f) != TFM_OK)
        return 1; /* the loader refuses it just as fast */
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

/* Writes the input to a memfd; returns its descriptor, path in path. */
static int to_memfd(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("fuzz_model_load", MFD_CLOEXEC);
    CHECK(fd >= 0);
    for (size_t done = 0; done < size;) {
        ssize_t k = write(fd, data + done, size - done);
        CHECK(k > 0);
        done += (size_t)k;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

static void run_model(tfm_module *model)
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

static void run_tokenizer(tfm_tokenizer *t, const char *path)
{
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

/* Every parameter of m, concatenated, into a new buffer. */
static float *snapshot(const tfm_module *m, int64_t *n)
{
    *n = tfm_module_num_parameters(m);
    float *all = malloc((size_t)(*n ? *n : 1) * sizeof *all);
    CHECK(all != NULL);
    int64_t at = 0;
    for (int i = 0; i < tfm_module_parameter_count(m); i++) {
        const char *name = tfm_module_parameter_name(m, i);
        int rank;
        int64_t shape[TFM_MAX_RANK];
        tfm_tensor *t = NULL;
        CHECK(tfm_module_parameter_shape(m, name, &rank, shape) == TFM_OK);
        CHECK(tfm_tensor_create(rank, shape, &t) == TFM_OK);
        CHECK(tfm_module_get_parameter(m, name, t) == TFM_OK);
        memcpy(all + at, tfm_tensor_data_const(t),
               (size_t)tfm_tensor_numel(t) * sizeof *all);
        at += tfm_tensor_numel(t);
        tfm_tensor_free(t);
    }
    return all;
}

/* tfm_module_load_safetensors(m, path, prefix, strict): all or nothing. */
static void load_checkpoint(tfm_module *m, const char *path,
                            const char *prefix, int strict)
{
    int64_t n;
    float *before = snapshot(m, &n);
    tfm_status st = tfm_module_load_safetensors(m, path, prefix, strict);
    int64_t n2;
    float *after = snapshot(m, &n2);
    CHECK(n == n2);
    if (st != TFM_OK) {
        CHECK(st == TFM_ERR_FORMAT || st == TFM_ERR_UNSUPPORTED ||
              st == TFM_ERR_NON_FINITE || st == TFM_ERR_OVERFLOW ||
              st == TFM_ERR_OUT_OF_MEMORY);
        CHECK(tfm_last_error()[0] != '\0');
        /* Unchanged: the same bits (NaN never occurs in parameters). */
        CHECK(memcmp(before, after, (size_t)n * sizeof *after) == 0);
    } else {
        /* Every parameter now holds the file's tensor prefix + name. */
        tfm_safetensors *f = NULL;
        CHECK(tfm_safetensors_open(path, &f) == TFM_OK);
        int64_t at = 0;
        for (int i = 0; i < tfm_module_parameter_count(m); i++) {
            char name[512];
            snprintf(name, sizeof name, "%s%s", prefix ? prefix : "",
                     tfm_module_parameter_name(m, i));
            tfm_tensor *t = NULL;
            CHECK(tfm_safetensors_read(f, name, &t) == TFM_OK);
            CHECK(memcmp(after + at, tfm_tensor_data_const(t),
                         (size_t)tfm_tensor_numel(t) * sizeof *after) == 0);
            at += tfm_tensor_numel(t);
            tfm_tensor_free(t);
        }
        tfm_safetensors_close(f);
    }
    free(before);
    free(after);
}

static void run_checkpoints(const char *path)
{
    tfm_layer_config lc = tfm_layer_config_default(4, 2);
    lc.d_ff = 8;
    const tfm_model_config c =
        tiny_model_config(TFM_ARCH_DECODER_ONLY, lc, 5, 1, 4);
    tfm_module *model = NULL, *layer = NULL;
    CHECK(tfm_model_create(&c, &model) == TFM_OK);
    CHECK(tfm_encoder_layer_create(&c.layer, &layer) == TFM_OK);
    load_checkpoint(model, path, NULL, 1);
    load_checkpoint(layer, path, "layers.0.", 0);
    tfm_module_free(model);
    tfm_module_free(layer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t empty[1];
    char path[64];
    int fd = to_memfd(data, size, path, sizeof path);

    /* Checkpoints into fixed tiny modules: whatever the metadata says. */
    run_checkpoints(path);

    tfm_tokenizer *t = NULL;
    tfm_status st = tfm_tokenizer_load(path, &t);
    if (st == TFM_OK) {
        run_tokenizer(t, path);
        tfm_tokenizer_free(t);
    } else {
        CHECK(t == NULL);
        CHECK(st != TFM_ERR_NULL_ARGUMENT && st != TFM_ERR_IO);
    }

    if (small_enough(size ? data : empty, size)) {
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
    close(fd);
    return 0;
}
