/* Shared by the tokenizer suites (test_tokenizer_bpe.c,
 * test_tokenizer_wordpiece.c, test_tokenizer_sentencepiece.c,
 * test_tokenizer_marian.c): a temporary directory for the vocabulary files
 * each test writes, loading it, expected load failures, and checking an
 * encoding's ids and offsets and a decoding's text.  Include after
 * <cmocka.h>. */
#ifndef TFM_TESTS_TOKENIZER_TEST_UTIL_H
#define TFM_TESTS_TOKENIZER_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transformer/tokenizer.h"

#define SENTINEL ((tfm_tokenizer *)0x1)

static char dir[256];

/* Makes the directory $TMPDIR/<prefix>XXXXXX; 0 on success (a group
 * setup's return value). */
static inline int make_dir(const char *prefix)
{
    snprintf(dir, sizeof dir, "%s/%sXXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", prefix);
    return mkdtemp(dir) ? 0 : -1;
}

static inline void write_file(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static inline void remove_file(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* The tokenizer of the directory. */
static inline tfm_tokenizer *load(void)
{
    tfm_tokenizer *t = NULL;
    if (tfm_tokenizer_load(dir, &t) != TFM_OK)
        fail_msg("load: %s", tfm_last_error());
    return t;
}

/* Loading path fails with status, a message with keyword, and the output
 * untouched. */
static inline void expect_load_fails(const char *path, tfm_status status,
                              const char *keyword)
{
    tfm_tokenizer *t = SENTINEL;
    assert_int_equal(tfm_tokenizer_load(path, &t), status);
    assert_ptr_equal(t, SENTINEL);
    if (!strstr(tfm_last_error(), keyword))
        fail_msg("error \"%s\" does not mention \"%s\"", tfm_last_error(),
                 keyword);
}

/* Encodes text (len bytes) with flags and checks the ids against
 * want[0 .. n_want-1] and, unless offs is NULL, each token's byte range
 * [offs[2i], offs[2i+1]). */
static inline void expect(const tfm_tokenizer *t, const char *text,
                          size_t len, unsigned flags, const int32_t *want,
                          int64_t n_want, const int64_t *offs)
{
    int32_t ids[128];
    int64_t off[256], n = -1;
    if (tfm_tokenizer_encode_v2(t, text, len, NULL, 0, flags, ids, NULL, off,
                                128, &n) != TFM_OK)
        fail_msg("encode: %s", tfm_last_error());
    if (n != n_want)
        fail_msg("\"%s\": %lld tokens, expected %lld", text, (long long)n,
                 (long long)n_want);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] != want[i])
            fail_msg("\"%s\" token %lld: id %d, expected %d", text,
                     (long long)i, ids[i], want[i]);
        if (offs && (off[2 * i] != offs[2 * i] ||
                     off[2 * i + 1] != offs[2 * i + 1]))
            fail_msg("\"%s\" token %lld: [%lld, %lld), expected [%lld, %lld)",
                     text, (long long)i, (long long)off[2 * i],
                     (long long)off[2 * i + 1], (long long)offs[2 * i],
                     (long long)offs[2 * i + 1]);
    }
}

#define EXPECT(t, text, flags, offs, ...)                                  \
    do {                                                                   \
        const int32_t want_[] = { __VA_ARGS__ };                           \
        expect(t, text, sizeof text - 1, flags, want_,                     \
               (int64_t)(sizeof want_ / sizeof want_[0]), offs);           \
    } while (0)

/* Decodes ids[0 .. n-1] with flags and checks the text against want. */
static inline void expect_decode(const tfm_tokenizer *t, const int32_t *ids,
                                 int64_t n, unsigned flags,
                                 const char *want)
{
    char text[256];
    size_t len = 0;
    if (tfm_tokenizer_decode_v2(t, ids, n, flags, text, sizeof text, &len) !=
        TFM_OK)
        fail_msg("decode: %s", tfm_last_error());
    if (len != strlen(want) || memcmp(text, want, len) != 0)
        fail_msg("decoded \"%s\", expected \"%s\"", text, want);
}

#define DECODE(t, flags, want, ...)                                        \
    do {                                                                   \
        const int32_t ids_[] = { __VA_ARGS__ };                            \
        expect_decode(t, ids_, (int64_t)(sizeof ids_ / sizeof ids_[0]),    \
                      flags, want);                                        \
    } while (0)

#endif
