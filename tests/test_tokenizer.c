/* Tests of the character-level tokenizer (tokenizer.h).
 *
 * Vocabularies mix one- to four-byte UTF-8 characters; model files for
 * tfm_tokenizer_load are written byte by byte (a metadata-only safetensors
 * file) into a temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "transformer/tokenizer.h"

/* Internal test hook of the library (src/alloc.c): the k-th allocation
 * from now fails; 0 disarms it. */
void tfm_testing_fail_allocation(long k);

#define SENTINEL ((tfm_tokenizer *)0x1)

/* 'a' 'b' ' ' 'é' (2 bytes) '中' (3 bytes) '😀' (4 bytes) '\n' 'Z' */
static const char VOCAB[] = "ab \xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\nZ";

static void assert_error_mentions(const char *keyword)
{
    if (!strstr(tfm_last_error(), keyword))
        fail_msg("error \"%s\" does not mention \"%s\"", tfm_last_error(),
                 keyword);
}

static tfm_tokenizer *make(const char *vocab)
{
    tfm_tokenizer *t = NULL;
    assert_int_equal(tfm_tokenizer_create(vocab, &t), TFM_OK);
    assert_non_null(t);
    return t;
}

/* Expects tfm_tokenizer_create(vocab) to fail with status and keyword. */
static void expect_create_fails(const char *vocab, tfm_status status,
                                const char *keyword)
{
    tfm_tokenizer *t = SENTINEL;
    assert_int_equal(tfm_tokenizer_create(vocab, &t), status);
    assert_ptr_equal(t, SENTINEL);
    assert_error_mentions(keyword);
}

/* Expects encoding text (len bytes) to fail with INVALID_ARGUMENT and a
 * message containing keyword, leaving ids and n untouched. */
static void expect_encode_fails(const tfm_tokenizer *t, const char *text,
                                size_t len, const char *keyword)
{
    int32_t ids[16];
    for (int i = 0; i < 16; i++)
        ids[i] = 77;
    int64_t n = -5;
    assert_int_equal(tfm_tokenizer_encode(t, text, len, ids, 16, &n),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(n, -5);
    for (int i = 0; i < 16; i++)
        assert_int_equal(ids[i], 77);
    assert_error_mentions(keyword);
}

/* ---- Create ----------------------------------------------------------- */

static void test_vocab_size(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 8);
    tfm_tokenizer_free(t);
    assert_int_equal(tfm_tokenizer_vocab_size(NULL), 0);
    tfm_tokenizer_free(NULL);

    t = make("x");
    assert_int_equal(tfm_tokenizer_vocab_size(t), 1);
    tfm_tokenizer_free(t);
}

static void test_create_errors(void **state)
{
    (void)state;
    tfm_tokenizer *t = SENTINEL;
    assert_int_equal(tfm_tokenizer_create(NULL, &t), TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(t, SENTINEL);
    assert_int_equal(tfm_tokenizer_create("ab", NULL), TFM_ERR_NULL_ARGUMENT);
    expect_create_fails("", TFM_ERR_INVALID_ARGUMENT, "empty");
}

static void test_create_duplicates(void **state)
{
    (void)state;
    expect_create_fails("abca", TFM_ERR_INVALID_ARGUMENT, "twice");
    assert_error_mentions("ids 0 and 3");
    /* A non-ASCII character twice: found after sorting, ids in order. */
    expect_create_fails("\xE4\xB8\xAD" "a\xC3\xA9\xE4\xB8\xAD",
                        TFM_ERR_INVALID_ARGUMENT, "U+4E2D");
    assert_error_mentions("ids 0 and 3");
    expect_create_fails("\n\n", TFM_ERR_INVALID_ARGUMENT, "U+000A");
}

static void test_create_invalid_utf8(void **state)
{
    (void)state;
    /* Each at byte offset 1, after a valid 'a'. */
    static const struct {
        const char *vocab;
        const char *reason;
    } cases[] = {
        { "a\x80", "unexpected continuation" },
        { "a\xC0\xAF", "overlong" },             /* '/' in two bytes */
        { "a\xC1\xBF", "overlong" },
        { "a\xE0\x80\xAF", "overlong" },         /* three bytes */
        { "a\xF0\x80\x80\xAF", "overlong" },     /* four bytes */
        { "a\xED\xA0\x80", "surrogate" },        /* U+D800 */
        { "a\xED\xBF\xBF", "surrogate" },        /* U+DFFF */
        { "a\xF4\x90\x80\x80", "above U+10FFFF" },
        { "a\xF5\x80\x80\x80", "above U+10FFFF" },
        { "a\xF8\x88\x80\x80\x80", "never occurs" },
        { "a\xFF", "never occurs" },
        { "a\xC3", "truncated" },
        { "a\xE4\xB8", "truncated" },
        { "a\xF0\x9F\x98", "truncated" },
        { "a\xC3z", "missing continuation" },
        { "a\xE4\xB8z", "missing continuation" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfm_tokenizer *t = SENTINEL;
        assert_int_equal(tfm_tokenizer_create(cases[i].vocab, &t),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_ptr_equal(t, SENTINEL);
        assert_error_mentions(cases[i].reason);
        assert_error_mentions("offset 1");
    }
    /* The extremes of the valid ranges are accepted. */
    tfm_tokenizer *t = make("\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF"
                            "\xEE\x80\x80\xEF\xBF\xBF\xF0\x90\x80\x80"
                            "\xF4\x8F\xBF\xBF");
    assert_int_equal(tfm_tokenizer_vocab_size(t), 9);
    tfm_tokenizer_free(t);
}

static void test_create_out_of_memory(void **state)
{
    (void)state;
    /* Every allocation of create, in turn, fails cleanly. */
    for (long k = 1; k <= 3; k++) {
        tfm_tokenizer *t = SENTINEL;
        tfm_testing_fail_allocation(k);
        assert_int_equal(tfm_tokenizer_create(VOCAB, &t),
                         TFM_ERR_OUT_OF_MEMORY);
        tfm_testing_fail_allocation(0);
        assert_ptr_equal(t, SENTINEL);
        assert_error_mentions("out of memory");
    }
    tfm_testing_fail_allocation(4);
    tfm_tokenizer *t = NULL;
    assert_int_equal(tfm_tokenizer_create(VOCAB, &t), TFM_OK);
    tfm_testing_fail_allocation(0);
    tfm_tokenizer_free(t);
}

/* ---- Encode and decode ------------------------------------------------ */

static void test_encode_ascii(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    int32_t ids[8];
    int64_t n = -1;
    assert_int_equal(tfm_tokenizer_encode(t, "ab Zba\n", 7, ids, 8, &n),
                     TFM_OK);
    assert_int_equal(n, 7);
    const int32_t want[7] = { 0, 1, 2, 7, 1, 0, 6 };
    assert_memory_equal(ids, want, sizeof want);

    char text[16];
    size_t len = 0;
    assert_int_equal(tfm_tokenizer_decode(t, ids, n, text, sizeof text, &len),
                     TFM_OK);
    assert_int_equal(len, 7);
    assert_string_equal(text, "ab Zba\n");
    tfm_tokenizer_free(t);
}

static void test_encode_multibyte_round_trip(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    /* "é中 😀a中Z": 2 + 3 + 1 + 4 + 1 + 3 + 1 = 15 bytes, 7 characters */
    const char *text = "\xC3\xA9\xE4\xB8\xAD \xF0\x9F\x98\x80"
                       "a\xE4\xB8\xAD" "Z";
    assert_int_equal(strlen(text), 15);
    int32_t ids[7];
    int64_t n = 0;
    assert_int_equal(tfm_tokenizer_encode(t, text, strlen(text), ids, 7, &n),
                     TFM_OK);
    assert_int_equal(n, 7);
    const int32_t want[7] = { 3, 4, 2, 5, 0, 4, 7 };
    assert_memory_equal(ids, want, sizeof want);

    char out[16];
    size_t len = 0;
    assert_int_equal(tfm_tokenizer_decode(t, ids, n, out, sizeof out, &len),
                     TFM_OK);
    assert_int_equal(len, 15);
    assert_string_equal(out, text);

    /* Every id decodes to its own character and encodes back to itself. */
    for (int32_t id = 0; id < 8; id++) {
        char one[5];
        assert_int_equal(tfm_tokenizer_decode(t, &id, 1, one, sizeof one, &len),
                         TFM_OK);
        int32_t back = -1;
        assert_int_equal(tfm_tokenizer_encode(t, one, len, &back, 1, &n),
                         TFM_OK);
        assert_int_equal(n, 1);
        assert_int_equal(back, id);
    }
    tfm_tokenizer_free(t);
}

static void test_encode_length_not_nul(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    int32_t ids[4];
    int64_t n = -1;
    /* Only text_len bytes count: "abZ" of "abZba". */
    assert_int_equal(tfm_tokenizer_encode(t, "abZba", 3, ids, 4, &n), TFM_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[2], 7);
    /* The empty text is zero ids, even without an array. */
    n = -1;
    assert_int_equal(tfm_tokenizer_encode(t, "", 0, NULL, 0, &n), TFM_OK);
    assert_int_equal(n, 0);
    /* A sequence cut by text_len is truncated. */
    expect_encode_fails(t, "a\xE4\xB8\xAD", 3, "truncated");
    tfm_tokenizer_free(t);
}

static void test_encode_unknown_character(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    /* 'q' at byte offset 6, after "é中 " (2 + 3 + 1 bytes). */
    expect_encode_fails(t, "\xC3\xA9\xE4\xB8\xAD qa", 8, "offset 6");
    assert_error_mentions("'q'");
    assert_error_mentions("not in the vocabulary");
    /* A multi-byte one, named by its code point. */
    expect_encode_fails(t, "ab\xE2\x82\xAC", 5, "U+20AC");
    assert_error_mentions("offset 2");
    /* A control character is named by code point only. */
    expect_encode_fails(t, "a\tb", 3, "U+0009");
    /* NUL inside text_len is a character like any other. */
    expect_encode_fails(t, "a\0b", 3, "U+0000");
    tfm_tokenizer_free(t);
}

static void test_encode_invalid_utf8(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    expect_encode_fails(t, "ab\xC3(", 4, "offset 2");
    expect_encode_fails(t, "ab\xC0\xA0", 4, "overlong");
    expect_encode_fails(t, "\xED\xB2\x80", 3, "surrogate");
    expect_encode_fails(t, "\xF4\x90\x80\x80", 4, "U+10FFFF");
    expect_encode_fails(t, "a\x9F", 2, "continuation");
    tfm_tokenizer_free(t);
}

static void test_encode_capacity(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    const char *text = "a\xE4\xB8\xAD" "b";   /* 3 characters */
    int64_t n = -1;
    assert_int_equal(tfm_tokenizer_encode(t, text, 5, NULL, 0, &n),
                     TFM_ERR_CAPACITY);
    assert_int_equal(n, 3);
    n = -1;
    assert_int_equal(tfm_tokenizer_encode(t, text, 5, NULL, 100, &n),
                     TFM_ERR_CAPACITY);
    assert_int_equal(n, 3);

    int32_t ids[3] = { 9, 9, 9 };
    n = -1;
    assert_int_equal(tfm_tokenizer_encode(t, text, 5, ids, 2, &n),
                     TFM_ERR_CAPACITY);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 9);
    assert_int_equal(ids[1], 9);
    assert_int_equal(ids[2], 9);

    assert_int_equal(tfm_tokenizer_encode(t, text, 5, ids, 3, &n), TFM_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 4);
    assert_int_equal(ids[2], 1);

    /* Errors come before capacity: an unknown character is reported even
     * when asking for the size. */
    n = -1;
    assert_int_equal(tfm_tokenizer_encode(t, "aqb", 3, NULL, 0, &n),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(n, -1);
    tfm_tokenizer_free(t);
}

static void test_encode_argument_errors(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    int32_t ids[2];
    int64_t n = -1;
    assert_int_equal(tfm_tokenizer_encode(NULL, "a", 1, ids, 2, &n),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_encode(t, NULL, 1, ids, 2, &n),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_encode(t, "a", 1, ids, 2, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_encode(t, "a", 1, ids, -1, &n),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(n, -1);
    tfm_tokenizer_free(t);
}

static void test_decode_errors(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    char text[8] = "xxxxxxx";
    size_t len = 99;
    const int32_t bad_high[3] = { 0, 8, 1 };
    assert_int_equal(tfm_tokenizer_decode(t, bad_high, 3, text, 8, &len),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("id 8 at position 1");
    assert_int_equal(len, 99);
    assert_string_equal(text, "xxxxxxx");
    const int32_t bad_low[2] = { -1, 0 };
    assert_int_equal(tfm_tokenizer_decode(t, bad_low, 2, text, 8, &len),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("out of range");

    const int32_t ok[2] = { 0, 1 };
    assert_int_equal(tfm_tokenizer_decode(NULL, ok, 2, text, 8, &len),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_decode(t, NULL, 2, text, 8, &len),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_decode(t, ok, 2, NULL, 8, &len),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_decode(t, ok, 2, text, 8, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_decode(t, ok, -1, text, 8, &len),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(len, 99);
    assert_string_equal(text, "xxxxxxx");
    tfm_tokenizer_free(t);
}

static void test_decode_capacity(void **state)
{
    (void)state;
    tfm_tokenizer *t = make(VOCAB);
    const int32_t ids[3] = { 5, 4, 0 };   /* 4 + 3 + 1 = 8 bytes */
    char text[9];
    memset(text, 'x', sizeof text);
    size_t len = 0;
    /* 8 bytes do not hold the NUL too. */
    assert_int_equal(tfm_tokenizer_decode(t, ids, 3, text, 8, &len),
                     TFM_ERR_CAPACITY);
    assert_int_equal(len, 8);
    for (int i = 0; i < 9; i++)
        assert_int_equal(text[i], 'x');
    /* Asking for the size with no buffer. */
    len = 0;
    assert_int_equal(tfm_tokenizer_decode(t, ids, 3, NULL, 0, &len),
                     TFM_ERR_CAPACITY);
    assert_int_equal(len, 8);

    assert_int_equal(tfm_tokenizer_decode(t, ids, 3, text, 9, &len), TFM_OK);
    assert_int_equal(len, 8);
    assert_string_equal(text, "\xF0\x9F\x98\x80\xE4\xB8\xAD" "a");

    /* No ids: the empty string. */
    assert_int_equal(tfm_tokenizer_decode(t, NULL, 0, text, 1, &len), TFM_OK);
    assert_int_equal(len, 0);
    assert_string_equal(text, "");
    tfm_tokenizer_free(t);
}

static void test_large_vocabulary_lookup(void **state)
{
    (void)state;
    /* 2000 CJK characters U+4E00.. in reverse order plus ASCII 'A'..'Z':
     * every one encodes to its id (bisection over the sorted table). */
    enum { N = 2000 };
    char *vocab = malloc(N * 3 + 27);
    assert_non_null(vocab);
    char *p = vocab;
    for (int i = 0; i < 26; i++)
        *p++ = (char)('A' + i);
    for (int i = N - 1; i >= 0; i--) {
        unsigned c = 0x4E00u + (unsigned)i;
        *p++ = (char)(0xE0 | (c >> 12));
        *p++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *p++ = (char)(0x80 | (c & 0x3F));
    }
    *p = '\0';
    tfm_tokenizer *t = make(vocab);
    assert_int_equal(tfm_tokenizer_vocab_size(t), N + 26);
    int32_t *ids = malloc(sizeof(int32_t) * (N + 26));
    assert_non_null(ids);
    int64_t n = 0;
    assert_int_equal(tfm_tokenizer_encode(t, vocab, strlen(vocab), ids,
                                          N + 26, &n),
                     TFM_OK);
    assert_int_equal(n, N + 26);
    for (int i = 0; i < N + 26; i++)
        assert_int_equal(ids[i], i);
    /* U+4E00 - 1 and U+4E00 + N are absent. */
    expect_encode_fails(t, "\xE4\xB7\xBF", 3, "U+4DFF");
    expect_encode_fails(t, "\xE5\x97\x90", 3, "U+55D0");
    free(ids);
    free(vocab);
    tfm_tokenizer_free(t);
}

/* ---- Load ------------------------------------------------------------- */

static char tmp_dir[] = "/tmp/tfm_tokenizer_XXXXXX";

/* Writes a metadata-only safetensors file with the given JSON metadata
 * object body; returns its path (static buffer). */
static const char *write_model(const char *name, const char *metadata)
{
    static char path[256];
    char header[1024];
    int len = snprintf(header, sizeof header, "{\"__metadata__\":{%s}}",
                       metadata);
    assert_true(len > 0 && (size_t)len < sizeof header);
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char n[8];
    for (int i = 0; i < 8; i++)
        n[i] = (unsigned char)((uint64_t)len >> (8 * i));
    assert_int_equal(fwrite(n, 1, 8, f), 8);
    assert_int_equal(fwrite(header, 1, (size_t)len, f), (size_t)len);
    assert_int_equal(fclose(f), 0);
    return path;
}

static int setup_dir(void **state)
{
    (void)state;
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    static const char *names[] = { "ok", "ok_escaped", "no_kind", "bpe",
                                   "no_vocab", "bad_utf8", "dup", "size",
                                   "nul" };
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp_dir, names[i]);
        unlink(path);
    }
    return rmdir(tmp_dir);
}

static void test_load(void **state)
{
    (void)state;
    const char *path = write_model(
        "ok", "\"format\":\"libtransformer\",\"tfm.tokenizer\":\"char\","
              "\"tfm.vocab_size\":\"4\",\"tfm.vocab\":\"ab\xC3\xA9\xE4\xB8\xAD\"");
    tfm_tokenizer *t = NULL;
    assert_int_equal(tfm_tokenizer_load(path, &t), TFM_OK);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 4);
    int32_t ids[4];
    int64_t n;
    assert_int_equal(tfm_tokenizer_encode(t, "\xE4\xB8\xAD" "b\xC3\xA9", 6,
                                          ids, 4, &n),
                     TFM_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 1);
    assert_int_equal(ids[2], 2);
    tfm_tokenizer_free(t);

    /* JSON escapes in the vocabulary (as Python's json.dumps writes it):
     * "\n" and "\u00e9". */
    path = write_model("ok_escaped",
                       "\"tfm.tokenizer\":\"char\","
                       "\"tfm.vocab\":\"\\na\\u00e9\"");
    t = NULL;
    assert_int_equal(tfm_tokenizer_load(path, &t), TFM_OK);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 3);
    assert_int_equal(tfm_tokenizer_encode(t, "\xC3\xA9\n", 3, ids, 4, &n),
                     TFM_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 0);
    tfm_tokenizer_free(t);
}

static void expect_load_fails(const char *path, tfm_status status,
                              const char *keyword)
{
    tfm_tokenizer *t = SENTINEL;
    assert_int_equal(tfm_tokenizer_load(path, &t), status);
    assert_ptr_equal(t, SENTINEL);
    if (keyword)
        assert_error_mentions(keyword);
}

static void test_load_errors(void **state)
{
    (void)state;
    tfm_tokenizer *t = SENTINEL;
    assert_int_equal(tfm_tokenizer_load(NULL, &t), TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(t, SENTINEL);
    assert_int_equal(tfm_tokenizer_load("x", NULL), TFM_ERR_NULL_ARGUMENT);

    expect_load_fails("/nonexistent/dir/model.safetensors", TFM_ERR_IO, NULL);
    expect_load_fails(write_model("no_kind", "\"tfm.vocab\":\"ab\""),
                      TFM_ERR_FORMAT, "tfm.tokenizer");
    expect_load_fails(write_model("bpe", "\"tfm.tokenizer\":\"bpe\","
                                         "\"tfm.vocab\":\"ab\""),
                      TFM_ERR_FORMAT, "bpe");
    expect_load_fails(write_model("no_vocab", "\"tfm.tokenizer\":\"char\""),
                      TFM_ERR_FORMAT, "tfm.vocab");
    /* A surrogate escape: cJSON writes it as (invalid) CESU bytes or
     * refuses it; either way the file is refused. */
    t = SENTINEL;
    tfm_status st = tfm_tokenizer_load(
        write_model("bad_utf8", "\"tfm.tokenizer\":\"char\","
                                "\"tfm.vocab\":\"a\\ud800\""),
        &t);
    assert_true(st == TFM_ERR_FORMAT || st == TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(t, SENTINEL);
    expect_load_fails(write_model("dup", "\"tfm.tokenizer\":\"char\","
                                         "\"tfm.vocab\":\"aba\""),
                      TFM_ERR_INVALID_ARGUMENT, "twice");
    expect_load_fails(write_model("size", "\"tfm.tokenizer\":\"char\","
                                          "\"tfm.vocab_size\":\"3\","
                                          "\"tfm.vocab\":\"ab\""),
                      TFM_ERR_FORMAT, "tfm.vocab_size");
}

/* Issue 13: an escaped NUL in the vocabulary cut it there ("ab\u0000c"
 * loaded as "ab"), and tfm.vocab_size went through strtoll (" 2", "\n2"
 * and "+2" were 2).  Both are refused, naming the key. */
static void test_load_strict(void **state)
{
    (void)state;
    expect_load_fails(write_model("nul", "\"tfm.tokenizer\":\"char\","
                                         "\"tfm.vocab\":\"ab\\u0000c\""),
                      TFM_ERR_FORMAT, "\"tfm.vocab\" holds an escaped NUL");
    static const char *const sizes[] = { " 2", "\\n2", "+2", "2 ", "0x2",
                                         "2.0", "", "-2" };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char meta[128];
        snprintf(meta, sizeof meta,
                 "\"tfm.tokenizer\":\"char\",\"tfm.vocab_size\":\"%s\","
                 "\"tfm.vocab\":\"ab\"", sizes[i]);
        expect_load_fails(write_model("size", meta), TFM_ERR_FORMAT,
                          "tfm.vocab_size");
    }
    /* Leading zeros are digits. */
    tfm_tokenizer *t = NULL;
    assert_int_equal(
        tfm_tokenizer_load(write_model("size", "\"tfm.tokenizer\":\"char\","
                                               "\"tfm.vocab_size\":\"02\","
                                               "\"tfm.vocab\":\"ab\""),
                           &t),
        TFM_OK);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 2);
    tfm_tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_size),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_create_duplicates),
        cmocka_unit_test(test_create_invalid_utf8),
        cmocka_unit_test(test_create_out_of_memory),
        cmocka_unit_test(test_encode_ascii),
        cmocka_unit_test(test_encode_multibyte_round_trip),
        cmocka_unit_test(test_encode_length_not_nul),
        cmocka_unit_test(test_encode_unknown_character),
        cmocka_unit_test(test_encode_invalid_utf8),
        cmocka_unit_test(test_encode_capacity),
        cmocka_unit_test(test_encode_argument_errors),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_decode_capacity),
        cmocka_unit_test(test_large_vocabulary_lookup),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_load_strict),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
