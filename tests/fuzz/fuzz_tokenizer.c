/* libFuzzer harness: the character-level tokenizer from untrusted bytes.
 *
 * The input is a vocabulary, then (after the first 0xFF byte, which UTF-8
 * never holds) a text.  tfm_tokenizer_create takes the vocabulary as a C
 * string (up to its first NUL).  Promises checked:
 *   - create fails only with TFM_ERR_INVALID_ARGUMENT (empty, invalid
 *     UTF-8, a code point twice) and leaves *out alone; otherwise the
 *     vocabulary encodes to the ids 0 .. n-1 and decodes back to itself;
 *   - encoding the text succeeds or fails with TFM_ERR_INVALID_ARGUMENT
 *     (invalid UTF-8, a character not in the vocabulary) or, with one
 *     slot too few, TFM_ERR_CAPACITY, writing nothing; a success decodes
 *     back to the same bytes;
 *   - the text's bytes read as ids decode, or fail with
 *     TFM_ERR_INVALID_ARGUMENT exactly when one is out of range. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

#include "fuzz_util.h"

static void round_trip(const tfm_tokenizer *t, const char *text, size_t len)
{
    const int64_t cap = (int64_t)len + 1;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    CHECK(ids != NULL);
    int64_t n = -1;
    tfm_status st = tfm_tokenizer_encode(t, text, len, ids, cap, &n);
    if (st != TFM_OK) {
        CHECK(st == TFM_ERR_INVALID_ARGUMENT);
        CHECK(tfm_last_error()[0] != '\0');
        free(ids);
        return;
    }
    CHECK(n >= 0 && n <= (int64_t)len);
    for (int64_t i = 0; i < n; i++)
        CHECK(ids[i] >= 0 && ids[i] < tfm_tokenizer_vocab_size(t));
    if (n > 0) {
        /* One slot short: TFM_ERR_CAPACITY, nothing written, n needed. */
        int32_t *few = malloc((size_t)n * sizeof *few);
        CHECK(few != NULL);
        for (int64_t i = 0; i < n; i++)
            few[i] = -5;
        int64_t need = -1;
        CHECK(tfm_tokenizer_encode(t, text, len, few, n - 1, &need) ==
              TFM_ERR_CAPACITY);
        CHECK(need == n);
        for (int64_t i = 0; i < n; i++)
            CHECK(few[i] == -5);
        free(few);
    }
    char *back = malloc(len + 1);
    CHECK(back != NULL);
    size_t back_len = 0;
    CHECK(tfm_tokenizer_decode(t, ids, n, back, len + 1, &back_len) ==
          TFM_OK);
    CHECK(back_len == len && memcmp(back, text, len) == 0);
    free(back);
    free(ids);
}

static void decode_raw(const tfm_tokenizer *t, const uint8_t *b, size_t len)
{
    const int64_t n = (int64_t)(len / 4), V = tfm_tokenizer_vocab_size(t);
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    CHECK(ids != NULL);
    int in_range = 1;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                     (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
        ids[i] = (int32_t)(u % 2 ? u : u % (uint32_t)(V + 1)); /* mostly near */
        in_range &= ids[i] >= 0 && ids[i] < V;
    }
    const size_t cap = 4 * (size_t)n + 1;
    char *text = malloc(cap);
    CHECK(text != NULL);
    size_t text_len = 0;
    tfm_status st = tfm_tokenizer_decode(t, ids, n, text, cap, &text_len);
    CHECK(in_range ? st == TFM_OK : st == TFM_ERR_INVALID_ARGUMENT);
    if (st == TFM_OK)
        CHECK(text_len < cap && text[text_len] == '\0');
    free(text);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = memchr(data, 0xff, size);
    const size_t vlen = sep ? (size_t)(sep - data) : size;
    char *vocab = malloc(vlen + 1);
    CHECK(vocab != NULL);
    memcpy(vocab, data, vlen);
    vocab[vlen] = '\0';
    const uint8_t *text = sep ? sep + 1 : data + size;
    const size_t tlen = sep ? size - vlen - 1 : 0;

    tfm_tokenizer *t = (tfm_tokenizer *)(uintptr_t)0x5e47;
    tfm_status st = tfm_tokenizer_create(vocab, &t);
    if (st != TFM_OK) {
        CHECK(st == TFM_ERR_INVALID_ARGUMENT);
        CHECK(t == (tfm_tokenizer *)(uintptr_t)0x5e47);
        free(vocab);
        return 0;
    }
    round_trip(t, vocab, strlen(vocab));   /* the vocabulary itself */
    round_trip(t, (const char *)text, tlen);
    decode_raw(t, text, tlen);
    tfm_tokenizer_free(t);
    free(vocab);
    return 0;
}
