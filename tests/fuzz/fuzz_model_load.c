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
#include "fuzz_model.h"
#include "fuzz_util.h"

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

    load_file(path, size ? data : empty, size);
    close(fd);
    return 0;
}
