/* libFuzzer harness: the safetensors reader on untrusted bytes.
 *
 * Opens the input with tfm_safetensors_open_memory and, when it is
 * accepted, reads every tensor and every metadata entry, checks what the
 * header promises (names in range, shapes of what is read, metadata keys
 * found again by name), and copies the readable tensors into a writer.
 * Any crash, sanitizer report, leak or broken promise (abort) is a bug.
 *
 * Also built without libFuzzer by tests/CMakeLists.txt as a plain driver
 * (tests/fuzz/regress_main.c) that replays tests/regressions/ and the
 * seed corpus in the regular test suite. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

#include "fuzz_util.h"

/* Reads one tensor and checks it against tfm_safetensors_info. */
static void read_one(const tfm_safetensors *f, const char *name,
                     tfm_safetensors_writer *w)
{
    tfm_dtype dtype;
    int rank = -1;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    CHECK(tfm_safetensors_info(f, name, &dtype, &rank, shape) == TFM_OK);
    CHECK(rank >= 0 && rank <= TFM_SAFETENSORS_MAX_RANK);
    CHECK((int)dtype >= 0 && dtype < TFM_DTYPE_COUNT);
    tfm_tensor *t = NULL;
    const tfm_status st = tfm_safetensors_read(f, name, &t);
    if (st != TFM_OK) {
        CHECK(t == NULL);
        CHECK(st == TFM_ERR_UNSUPPORTED || st == TFM_ERR_OUT_OF_MEMORY);
        CHECK(tfm_last_error()[0] != '\0');
        return;
    }
    CHECK(tfm_tensor_rank(t) == (rank ? rank : 1));
    for (int i = 0; i < rank; i++)
        CHECK(tfm_tensor_dim(t, i) == shape[i]);
    /* Touch every element, so that a short read shows up under ASan. */
    const float *x = tfm_tensor_data_const(t);
    volatile float sink = 0.0f;
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        sink += x[i];
    (void)sink;
    /* Names are unique, valid UTF-8 and not "__metadata__". */
    CHECK(tfm_safetensors_writer_add(w, name, t) == TFM_OK);
    tfm_tensor_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfm_safetensors *f = NULL;
    tfm_clear_error();
    /* An empty input still needs a valid pointer. */
    static const uint8_t empty[1];
    tfm_status st = tfm_safetensors_open_memory(size ? data : empty, size, &f);
    if (st != TFM_OK) {
        CHECK(f == NULL);
        CHECK(st == TFM_ERR_FORMAT || st == TFM_ERR_UNSUPPORTED ||
              st == TFM_ERR_OVERFLOW || st == TFM_ERR_OUT_OF_MEMORY);
        CHECK(tfm_last_error()[0] != '\0');
        return 0;
    }
    tfm_safetensors_writer *w = NULL;
    CHECK(tfm_safetensors_writer_create(&w) == TFM_OK);

    const int64_t n = tfm_safetensors_count(f);
    CHECK(n >= 0);
    for (int64_t i = 0; i < n; i++) {
        const char *name = tfm_safetensors_name(f, i);
        CHECK(name != NULL);
        read_one(f, name, w);
    }
    CHECK(tfm_safetensors_name(f, n) == NULL);
    CHECK(tfm_safetensors_name(f, -1) == NULL);
    /* A name the file does not hold gives NOT_FOUND.  The fuzzer can write
     * this very name into a file (it found that, with the harness's own
     * string in its dictionary): then the promise does not apply. */
    const char *missing = "\x01no such tensor";
    int holds_missing = 0;
    for (int64_t i = 0; i < n; i++)
        holds_missing |= strcmp(tfm_safetensors_name(f, i), missing) == 0;
    if (!holds_missing)
        CHECK(tfm_safetensors_read(f, missing, &(tfm_tensor *){NULL})
              == TFM_ERR_NOT_FOUND);

    const int64_t m = tfm_safetensors_metadata_count(f);
    CHECK(m >= 0);
    for (int64_t i = 0; i < m; i++) {
        const char *key = tfm_safetensors_metadata_key(f, i);
        CHECK(key != NULL);
        const char *value = tfm_safetensors_metadata(f, key);
        CHECK(value != NULL);
        st = tfm_safetensors_writer_set_metadata(w, key, value);
        /* Keys and values came from a validated UTF-8 header. */
        CHECK(st == TFM_OK);
    }
    CHECK(tfm_safetensors_metadata_key(f, m) == NULL);

    tfm_safetensors_writer_free(w);
    tfm_safetensors_close(f);
    return 0;
}
