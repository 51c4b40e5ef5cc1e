/* libFuzzer harness: Hugging Face hub checkpoint directories from
 * untrusted bytes (tfm_model_load of a directory, src/formats/hub/).
 *
 * Input: parts separated by 0xFF 0xFF (fuzz_files.h), written as the
 * files of one private temporary directory, an empty part standing for an
 * absent file:
 *
 *   config.json, model.safetensors.index.json, model.safetensors,
 *   model-00001-of-00002.safetensors, model-00002-of-00002.safetensors
 *
 * (the corpus' sharded checkpoints name the last two in their index).  The
 * directory goes through tfm_model_load.  A refused directory must give a
 * status other than TFM_ERR_NULL_ARGUMENT, a message, and leave *out
 * untouched; a sharded checkpoint that loads has no tensor in both
 * shards; a loaded model must run one token (or, for an image model,
 * one image of its size) when it is small enough to run in a fuzzer's
 * time.  No size is bounded here before the load: a configuration that
 * makes the loader allocate far more than the files hold is a finding
 * (libFuzzer's -malloc_limit_mb / -rss_limit_mb report it). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <transformer/transformer.h>

#include "fuzz_files.h"
#include "fuzz_model.h"
#include "fuzz_util.h"

static const char *const NAMES[] = {
    "config.json",
    "model.safetensors.index.json",
    "model.safetensors",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
};

/* One image of the model's size through tfm_model_image_logits: finite
 * weights may still overflow to non-finite logits, so only the call's
 * status and the logits' shape are promised. */
static void run_image_model(tfm_module *model, const tfm_layer_options *lo)
{
    tfm_model_config c;
    CHECK(tfm_model_get_config(model, &c) == TFM_OK);
    const int64_t S = lo->image_size, C = lo->num_channels;
    if (S * S * C > (1 << 16))
        return;
    const int64_t px_shape[4] = { 1, C, S, S };
    const int64_t out_shape[2] = { 1, c.vocab_size };
    tfm_tensor *px = NULL, *logits = NULL;
    CHECK(tfm_tensor_create(4, px_shape, &px) == TFM_OK);
    CHECK(tfm_tensor_create(2, out_shape, &logits) == TFM_OK);
    float *p = tfm_tensor_data(px);
    for (int64_t i = 0; i < S * S * C; i++)
        p[i] = (float)((i % 7) - 3) / 3.0f;
    CHECK(tfm_model_image_logits(model, px, logits) == TFM_OK);
    tfm_tensor_free(px);
    tfm_tensor_free(logits);
}

/* Whether name is a tensor of the safetensors bytes data[0 .. size). */
static int holds(const uint8_t *data, size_t size, const char *name)
{
    tfm_safetensors *f = NULL;
    if (!size || tfm_safetensors_open_memory(data, size, &f) != TFM_OK)
        return 0;
    const int found = tfm_safetensors_info(f, name, NULL, NULL, NULL) == TFM_OK;
    tfm_safetensors_close(f);
    return found;
}

/* A sharded checkpoint that loaded (no model.safetensors) has no tensor
 * in both shards: the index decides where a tensor is, so a name stored
 * twice is refused, never read from whichever shard comes first (issue 44,
 * kind 6). */
static void check_no_tensor_twice(const uint8_t *const *part,
                                  const size_t *len)
{
    tfm_safetensors *f = NULL;
    if (len[2] || !len[1] || !len[3] || !len[4] ||
        tfm_safetensors_open_memory(part[3], len[3], &f) != TFM_OK)
        return;
    for (int64_t i = 0; i < tfm_safetensors_count(f); i++)
        CHECK(!holds(part[4], len[4], tfm_safetensors_name(f, i)));
    tfm_safetensors_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { N = sizeof NAMES / sizeof NAMES[0] };
    const uint8_t *part[N];
    size_t len[N], pos = 0;
    for (int i = 0; i < N; i++) {
        part[i] = files_part(data, size, &pos, &len[i]);
        files_put(NAMES[i], part[i], len[i]);
    }
    tfm_module *model = (tfm_module *)0x1;
    tfm_status st = tfm_model_load(files_dir(), &model);
    if (getenv("TFM_FUZZ_VERBOSE"))
        fprintf(stderr, "tfm_model_load: %s%s%s\n", tfm_status_string(st),
                st ? ": " : "", st ? tfm_last_error() : "");
    if (st != TFM_OK) {
        CHECK(model == (tfm_module *)0x1);
        CHECK(st != TFM_ERR_NULL_ARGUMENT);
        CHECK(tfm_last_error()[0] != '\0');
        return 0;
    }
    CHECK(model != NULL && model != (tfm_module *)0x1);
    check_no_tensor_twice(part, len);
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    CHECK(tfm_model_get_layer_options(model, &lo) == TFM_OK);
    /* Weights come from the input, so a model bigger than this came from
     * sizes the files do not hold (a computed position table): it loaded,
     * which is what is under test; running it would only be slow. */
    if (tfm_module_num_parameters(model) <= MAX_PARAMS) {
        if (lo.patch_size > 0)
            run_image_model(model, &lo);
        else
            run_model(model);
    }
    tfm_module_free(model);
    return 0;
}
