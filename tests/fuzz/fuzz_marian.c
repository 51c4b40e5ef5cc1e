/* libFuzzer harness: Marian's tokenizer files from untrusted bytes
 * (vocab.json with its SentencePiece pair source.spm / target.spm, and
 * tokenizer_config.json; src/tokenizers/tokenizer_marian.c), then text
 * through the tokenizer.
 *
 * Input: one mode byte (bits 0 and 1: the encode flags
 * TFM_ENCODE_ADD_SPECIAL and TFM_ENCODE_SPLIT_SPECIAL; bit 2: decode
 * skipping special tokens), then parts separated by 0xFF 0xFF
 * (fuzz_files.h): vocab.json, source.spm, target.spm,
 * tokenizer_config.json, the text.  An empty part is an absent file.  The
 * directory goes through tfm_tokenizer_load.  A refused directory must
 * give a message and leave the handle untouched; a loaded tokenizer must
 * encode every text (any bytes) into ids below its vocabulary size with
 * offsets inside the text, and decode those ids (and every id of the
 * vocabulary) into as many bytes as it says. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

#include "fuzz_files.h"
#include "fuzz_util.h"

static const char *const NAMES[] = { "vocab.json", "source.spm", "target.spm",
                                     "tokenizer_config.json" };

/* ids through tfm_tokenizer_decode: the size asked first, then the text. */
static void decode(const tfm_tokenizer *t, const int32_t *ids, int64_t n,
                   unsigned flags)
{
    size_t need = 0;
    tfm_status st = tfm_tokenizer_decode_v2(t, ids, n, flags, NULL, 0, &need);
    CHECK(st == TFM_OK || st == TFM_ERR_CAPACITY);
    char *back = malloc(need + 1);
    CHECK(back != NULL);
    size_t got = 0;
    CHECK(tfm_tokenizer_decode_v2(t, ids, n, flags, back, need + 1, &got) ==
          TFM_OK);
    CHECK(got == need);
    CHECK(back[got] == '\0');
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const unsigned mode = data[0];
    size_t pos = 1, n_text = 0;
    files_put_parts(data, size, &pos, NAMES,
                    (int)(sizeof NAMES / sizeof NAMES[0]));
    const uint8_t *text = files_part(data, size, &pos, &n_text);

    tfm_tokenizer *t = (tfm_tokenizer *)0x1;
    tfm_status st = tfm_tokenizer_load(files_dir(), &t);
    if (st != TFM_OK) {
        CHECK(t == (tfm_tokenizer *)0x1);
        CHECK(st != TFM_ERR_NULL_ARGUMENT);
        CHECK(tfm_last_error()[0] != '\0');
        return 0;
    }
    const unsigned flags = (mode & 1 ? TFM_ENCODE_ADD_SPECIAL : 0) |
                           (mode & 2 ? TFM_ENCODE_SPLIT_SPECIAL : 0);
    const unsigned dflags = mode & 4 ? TFM_DECODE_SKIP_SPECIAL : 0;
    int64_t n = 0;
    st = tfm_tokenizer_encode_v2(t, (const char *)text, n_text, NULL, 0,
                                 flags, NULL, NULL, NULL, 0, &n);
    CHECK(st == TFM_OK || st == TFM_ERR_CAPACITY);
    CHECK(n >= 0);
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    int64_t *off = malloc((size_t)(n ? n : 1) * 2 * sizeof *off);
    CHECK(ids && off);
    int64_t again = -1;
    CHECK(tfm_tokenizer_encode_v2(t, (const char *)text, n_text, NULL, 0,
                                  flags, ids, NULL, off, n, &again) == TFM_OK);
    CHECK(again == n);
    const int64_t vocab = tfm_tokenizer_vocab_size(t);
    for (int64_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0 && ids[i] < vocab);
        CHECK(off[2 * i] >= 0 && off[2 * i] <= off[2 * i + 1]);
        CHECK(off[2 * i + 1] <= (int64_t)n_text);
    }
    decode(t, ids, n, dflags);
    /* Every id of the vocabulary alone (up to a bound: a vocab.json of a
     * few bytes holds few ids; a bigger one is covered by its text). */
    for (int32_t id = 0; id < vocab && id < 512; id++)
        decode(t, &id, 1, dflags);
    free(ids);
    free(off);
    tfm_tokenizer_free(t);
    return 0;
}
