/* libFuzzer harness: tokenizer files from untrusted bytes (byte-level BPE's
 * encoder.json + vocab.bpe, tokenizer.json, BERT's vocab.txt, SentencePiece
 * .model), then text through them.
 *
 * Input: one mode byte, then parts separated by the two bytes 0xFF 0xFF.
 * Mode bit 0 set: tokenizer.json, text; else bit 4 set: a SentencePiece
 * tokenizer.model, text; else bit 3 set: BERT's vocab.txt,
 * tokenizer_config.json, text; else GPT-2's encoder.json, vocab.bpe, text.
 * Bits 1 and 2 are the encode flags TFM_ENCODE_ADD_SPECIAL and
 * TFM_ENCODE_SPLIT_SPECIAL.  The files go into one temporary directory,
 * loaded with tfm_tokenizer_load.  A failed load must leave the handle
 * untouched; a loaded tokenizer must encode every text (any bytes) into
 * in-range ids with offsets inside the text and in order; a byte-level BPE,
 * without special tokens matched, must decode the text back exactly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <transformer/transformer.h>

#include "fuzz_util.h"

static char dir[256];

static void put(const char *name, const uint8_t *data, size_t size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (size)
        CHECK(fwrite(data, 1, size, f) == size);
    fclose(f);
}

static void drop(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* The next part of data[*pos ..], up to 0xFF 0xFF or the end. */
static const uint8_t *part(const uint8_t *data, size_t size, size_t *pos,
                           size_t *len)
{
    const uint8_t *p = data + *pos;
    size_t i = *pos;
    while (i < size && !(i + 1 < size && data[i] == 0xFF && data[i + 1] == 0xFF))
        i++;
    *len = i - *pos;
    *pos = i < size ? i + 2 : size;
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/tfm_fuzz_tok_XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        CHECK(mkdtemp(dir) != NULL);
    }
    unsigned mode = data[0];
    size_t pos = 1, n_a, n_b = 0, n_text;
    const uint8_t *a = part(data, size, &pos, &n_a), *b = NULL;
    if (!(mode & 1) && !(mode & 16))
        b = part(data, size, &pos, &n_b);
    const uint8_t *text = part(data, size, &pos, &n_text);
    static const char *const NAMES[] = { "tokenizer.json", "encoder.json",
                                         "vocab.bpe", "vocab.txt",
                                         "tokenizer_config.json",
                                         "tokenizer.model" };
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        drop(NAMES[i]);
    if (mode & 1) {
        put("tokenizer.json", a, n_a);
    } else if (mode & 16) {
        put("tokenizer.model", a, n_a);
    } else if (mode & 8) {
        put("vocab.txt", a, n_a);
        if (n_b)
            put("tokenizer_config.json", b, n_b);
    } else {
        put("encoder.json", a, n_a);
        put("vocab.bpe", b, n_b);
    }
    tfm_tokenizer *t = (tfm_tokenizer *)0x1;
    tfm_status st = tfm_tokenizer_load(dir, &t);
    if (st != TFM_OK) {
        CHECK(t == (tfm_tokenizer *)0x1);
        CHECK(tfm_last_error()[0] != '\0');
        return 0;
    }
    unsigned flags = ((mode >> 1) & 1 ? TFM_ENCODE_ADD_SPECIAL : 0) |
                     ((mode >> 2) & 1 ? TFM_ENCODE_SPLIT_SPECIAL : 0);
    int64_t n = 0;
    st = tfm_tokenizer_encode_v2(t, (const char *)text, n_text, NULL, 0,
                                 flags, NULL, NULL, NULL, 0, &n);
    CHECK(st == TFM_OK || st == TFM_ERR_CAPACITY);
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    int64_t *off = malloc((size_t)(n ? n : 1) * 2 * sizeof *off);
    CHECK(ids && off);
    CHECK(tfm_tokenizer_encode_v2(t, (const char *)text, n_text, NULL, 0,
                                  flags, ids, NULL, off, n, &n) == TFM_OK);
    int64_t vocab = tfm_tokenizer_vocab_size(t);
    for (int64_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0 && ids[i] < vocab);
        CHECK(off[2 * i] <= off[2 * i + 1]);
        CHECK(off[2 * i + 1] <= (int64_t)n_text);
        /* In order; tokens cut from one character share its bytes (the
         * framing's tokens are [0, 0) wherever they stand). */
        CHECK(i == 0 || (flags & TFM_ENCODE_ADD_SPECIAL) ||
              (off[2 * i] >= off[2 * i - 2] &&
               off[2 * i + 1] >= off[2 * i - 1]));
    }
    size_t need = 0;
    st = tfm_tokenizer_decode(t, ids, n, NULL, 0, &need);
    CHECK(st == TFM_OK || st == TFM_ERR_CAPACITY);
    char *back = malloc(need + 1);
    CHECK(back != NULL);
    CHECK(tfm_tokenizer_decode(t, ids, n, back, need + 1, &need) == TFM_OK);
    if (!(flags & TFM_ENCODE_SPLIT_SPECIAL) &&
        tfm_tokenizer_get_kind(t) == TFM_TOKENIZER_BYTE_BPE) {
        CHECK(need == n_text);
        CHECK(n_text == 0 || memcmp(back, text, n_text) == 0);
    }
    free(back);
    free(ids);
    free(off);
    tfm_tokenizer_free(t);
    return 0;
}
