/* libFuzzer harness: a model file's metadata, on its own.
 *
 * Every input is a list of "key=value" lines (split at '\n' and at the
 * first '='; a line without '=' is a key with an empty value).  They are
 * written, over the metadata of a valid tiny decoder-only model with a
 * character tokenizer, by tfm_model_save (so the file is well formed and
 * its tensors fit the original configuration), and the file is loaded
 * with tfm_model_load and tfm_tokenizer_load.  The fuzzer thereby spends
 * its time in the metadata readers -- the strict number syntax
 * (src/number_parse.h), enums, booleans, the attention variant's keys,
 * the tokenizer's keys -- instead of in JSON and layout checks.  Promises:
 * a load either succeeds, and the model runs (fuzz_model.h), or fails with
 * a status other than NULL_ARGUMENT and IO and with a message; *out is
 * untouched on failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <transformer/transformer.h>

#include "../tiny_model.h"
#include "fuzz_model.h"
#include "fuzz_util.h"

#define MAX_PAIRS 32

static tfm_module *base;
static char dir[] = "/tmp/tfm_fuzz_metadata_XXXXXX";
static char path[64];

static void remove_dir(void)
{
    unlink(path);
    rmdir(dir);
}

static void init_base(void)
{
    tfm_layer_config lc = tfm_layer_config_default(4, 2);
    lc.d_ff = 8;
    const tfm_model_config c =
        tiny_model_config(TFM_ARCH_DECODER_ONLY, lc, 5, 1, 4);
    CHECK(tfm_model_create(&c, &base) == TFM_OK);
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    atexit(remove_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base)
        init_base();
    /* The tokenizer first, so the input may replace it. */
    const char *keys[MAX_PAIRS + 2] = { "tfm.tokenizer", "tfm.vocab" };
    const char *values[MAX_PAIRS + 2] = { "char", "abcde" };
    int n = 2;
    char *text = malloc(size + 1);
    CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';   /* a NUL in the input ends the last pair early */
    for (char *line = text; line && n < MAX_PAIRS + 2;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (eq)
            *eq++ = '\0';
        keys[n] = line;
        values[n] = eq ? eq : "";
        n++;
        line = next;
    }
    tfm_status st = tfm_model_save(base, path, n, keys, values);
    if (st != TFM_OK) {
        /* Keys or values that are not UTF-8. */
        CHECK(st == TFM_ERR_INVALID_ARGUMENT);
        free(text);
        return 0;
    }
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    uint8_t *bytes = malloc(1 << 20);
    CHECK(bytes != NULL);
    size_t got = fread(bytes, 1, 1 << 20, fp);
    fclose(fp);

    load_file(path, bytes, got);
    free(bytes);
    free(text);
    return 0;
}
