/* Tests of byte-level BPE (tokenizer.h) on small hand-made vocabularies,
 * with the expected ids worked out by hand from OpenAI's encoder.py; the
 * real GPT-2 vocabulary is compared with gpt-3-encoder and kitoken by
 * tokenizer_reference (tests/CMakeLists.txt).
 *
 * Every vocabulary here numbers the 256 byte tokens by their byte (id of
 * byte b is b), written in GPT-2's bytes_to_unicode form, and adds merges
 * after them, so ids can be read off the text: "h" is 104, " " is 32 (the
 * token "\u0120"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "transformer/tokenizer.h"
#include "tokenizer_test_util.h"


/* GPT-2's bytes_to_unicode (encoder.py): printable bytes stand for
 * themselves, the rest for 256, 257, ... in byte order. */
static unsigned byte_char(int b)
{
    int n = 0;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) ||
                        c >= 0xAE;
        if (c == b)
            return printable ? (unsigned)c : 256u + (unsigned)n;
        n += !printable;
    }
    return 0;
}

/* The JSON string body of byte b's token ("\u0120" for the space). */
static void byte_json(int b, char *out)
{
    unsigned c = byte_char(b);
    if (c == '"' || c == '\\')
        sprintf(out, "\\%c", (char)c);
    else if (c < 0x80)
        sprintf(out, "%c", (char)c);
    else
        sprintf(out, "\\u%04x", c);
}


/* encoder.json: the 256 byte tokens, then extra (JSON-escaped strings,
 * NULL-terminated) numbered from first_extra; vocab.bpe: the lines. */
static void write_gpt2_ids(const char *const *extra, int first_extra,
                           const char *merges)
{
    static char json[1 << 16];
    size_t n = 0;
    n += (size_t)sprintf(json + n, "{");
    for (int b = 0; b < 256; b++) {
        char tok[16];
        byte_json(b, tok);
        n += (size_t)sprintf(json + n, "%s\"%s\": %d", b ? ", " : "", tok, b);
    }
    for (int i = 0; extra && extra[i]; i++)
        n += (size_t)sprintf(json + n, ", \"%s\": %d", extra[i],
                             first_extra + i);
    sprintf(json + n, "}\n");
    write_file("encoder.json", json);
    write_file("vocab.bpe", merges);
}

static void write_gpt2(const char *const *extra, const char *merges)
{
    write_gpt2_ids(extra, 256, merges);
}


static int setup(void **state)
{
    (void)state;
    return make_dir("tfm_bpe_");
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = { "encoder.json", "vocab.bpe", "tokenizer.json",
                            "vocab.json", "merges.txt" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    return rmdir(dir);
}

/* Encodes text (len bytes) with flags and checks ids and offsets
 * (offs: begin, end per token; NULL to skip). */
static void expect_ids(const tfm_tokenizer *t, const char *text, size_t len,
                       unsigned flags, const int32_t *want, int64_t n_want,
                       const int64_t *offs)
{
    expect(t, text, len, flags, want, n_want, offs);
    /* decode gives the text back, whatever it was */
    char back[256];
    size_t back_len = 0;
    assert_int_equal(tfm_tokenizer_decode(t, want, n_want, back,
                                          sizeof back, &back_len), TFM_OK);
    assert_int_equal(back_len, len);
    assert_memory_equal(back, text, len);
}

static const char *const HELLO[] = {
    "he", "ll", "hell", "hello", "\\u0120w", "<|endoftext|>", NULL,
};
static const char HELLO_MERGES[] =
    "#version: 0.2\nh e\nl l\nhe ll\nhell o\n\xC4\xA0 w\n";

/* "hello world": pieces "hello" and " world" (the pattern's " ?\p{L}+").
 * "hello": (h,e) rank 0 -> he l l o; (l,l) rank 1 -> he ll o; (he,ll)
 * rank 2 -> hell o; (hell,o) rank 3 -> hello = 259.  " world": (Ġ,w)
 * rank 4 -> Ġw o r l d = 260 111 114 108 100. */
static void test_hand_worked_merges(void **state)
{
    (void)state;
    write_gpt2(HELLO, HELLO_MERGES);
    tfm_tokenizer *t = load();
    assert_int_equal(tfm_tokenizer_get_kind(t), TFM_TOKENIZER_BYTE_BPE);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 262);
    const int32_t want[] = { 259, 260, 111, 114, 108, 100 };
    const int64_t offs[] = { 0, 5, 5, 7, 7, 8, 8, 9, 9, 10, 10, 11 };
    expect_ids(t, "hello world", 11, 0, want, 6, offs);
    /* "hell" alone: h e l l -> he ll -> hell = 258; "lll": (l,l) at the
     * first place, left to right: ll l = 257 108. */
    const int32_t hell[] = { 258 };
    expect_ids(t, "hell", 4, 0, hell, 1, NULL);
    const int32_t lll[] = { 257, 108 };
    expect_ids(t, "lll", 3, 0, lll, 2, NULL);
    /* The 1.0 functions work on every kind. */
    int32_t ids[8];
    int64_t n = 0;
    assert_int_equal(tfm_tokenizer_encode(t, "hello", 5, ids, 8, &n), TFM_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 259);
    tfm_tokenizer_free(t);
}

/* Equal ranks are merged everywhere before any pair they create, as
 * encoder.py's loop does.  Merges: "ab a" (rank 0, makes "aba"), "a b"
 * (rank 1).  "abab": the only pair with a rank is (a,b), at 0 and 2;
 * both merge -> ab ab, and (ab,ab) is no merge: 256 256.  Merging the
 * first (a,b) alone would have let (ab,a) rank 0 in first: aba b. */
static void test_equal_ranks_together(void **state)
{
    (void)state;
    const char *const extra[] = { "ab", "aba", NULL };
    write_gpt2(extra, "#version: 0.2\nab a\na b\n");
    tfm_tokenizer *t = load();
    const int32_t want[] = { 256, 256 };
    expect_ids(t, "abab", 4, 0, want, 2, NULL);
    /* "aba": (a,b) -> ab a; then (ab,a) rank 0 -> aba = 257. */
    const int32_t aba[] = { 257 };
    expect_ids(t, "aba", 3, 0, aba, 1, NULL);
    tfm_tokenizer_free(t);
}

/* The pieces of GPT-2's pattern: contractions, letters, numbers, other,
 * whitespace runs (the last space of a run goes with the next word). */
static void test_pattern_pieces(void **state)
{
    (void)state;
    const char *const extra[] = { "'s", "\\u0120\\u0120", NULL };
    write_gpt2(extra, "#version: 0.2\n' s\n\xC4\xA0 \xC4\xA0\n");
    tfm_tokenizer *t = load();
    /* "it's": pieces "it" (i t, no merge: 105 116) and "'s" (256). */
    const int32_t its[] = { 105, 116, 256 };
    expect_ids(t, "it's", 4, 0, its, 3, NULL);
    /* "a   b": "a", "  " (\s+(?!\S) leaves the last space), " b": the two
     * spaces merge (rank 1) = 257, then Ġ b = 32 98. */
    const int32_t spaces[] = { 97, 257, 32, 98 };
    const int64_t offs[] = { 0, 1, 1, 3, 3, 4, 4, 5 };
    expect_ids(t, "a   b", 5, 0, spaces, 4, offs);
    tfm_tokenizer_free(t);
}

/* Invalid UTF-8: the pattern runs on the valid stretches; each run of
 * invalid bytes is one piece.  "a\xff b": "a", "\xff", " b". */
static void test_invalid_utf8(void **state)
{
    (void)state;
    /* 0xE4 is "\u00e4", 0xBD is "\u00bd": a merge of the two bytes of a
     * cut 3-byte character shows they are one piece. */
    const char *const extra[] = { "\\u00e4\\u00bd", NULL };
    write_gpt2(extra, "#version: 0.2\n\xC3\xA4 \xC2\xBD\n");
    tfm_tokenizer *t = load();
    const int32_t a[] = { 97, 255, 32, 98 };
    const int64_t a_offs[] = { 0, 1, 1, 2, 2, 3, 3, 4 };
    expect_ids(t, "a\xff b", 4, 0, a, 4, a_offs);
    const int32_t cut[] = { 120, 256, 121 };
    expect_ids(t, "x\xe4\xbdy", 4, 0, cut, 3, NULL);
    /* Spaces before an invalid byte end their stretch: all of them are
     * one piece ("\s+(?!\S)" at the stretch's end). */
    const int32_t sp[] = { 97, 32, 32, 0xC0 };
    const int64_t sp_offs[] = { 0, 1, 1, 2, 2, 3, 3, 4 };
    expect_ids(t, "a  \xc0", 4, 0, sp, 4, sp_offs);
    /* Surrogates and overlong forms are invalid too; every byte string
     * comes back from decode. */
    const int32_t sur[] = { 0xED, 0xA0, 0x80 };
    expect_ids(t, "\xed\xa0\x80", 3, 0, sur, 3, NULL);
    unsigned x = 12345;
    for (int round = 0; round < 200; round++) {
        char s[40];
        size_t len = (size_t)(round % 40);
        for (size_t i = 0; i < len; i++) {
            x = x * 1103515245u + 12345u;
            s[i] = (char)(x >> 16);
        }
        int32_t ids[64];
        int64_t n = 0;
        assert_int_equal(tfm_tokenizer_encode(t, s, len, ids, 64, &n), TFM_OK);
        char back[64];
        size_t back_len = 0;
        assert_int_equal(tfm_tokenizer_decode(t, ids, n, back, sizeof back,
                                              &back_len), TFM_OK);
        assert_int_equal(back_len, len);
        assert_memory_equal(back, s, len);
    }
    tfm_tokenizer_free(t);
}

/* <|endoftext|>: matched only with TFM_ENCODE_SPLIT_SPECIAL, bos, eos and
 * unk as in GPT2Tokenizer, left out by TFM_DECODE_SKIP_SPECIAL. */
static void test_special_tokens(void **state)
{
    (void)state;
    write_gpt2(HELLO, HELLO_MERGES);
    tfm_tokenizer *t = load();
    const char text[] = "hello<|endoftext|>hell";
    const int32_t split[] = { 259, 261, 258 };
    const int64_t offs[] = { 0, 5, 5, 18, 18, 22 };
    expect_ids(t, text, 22, TFM_ENCODE_SPLIT_SPECIAL, split, 3, offs);
    /* As text: "hello" "<|" "endoftext" "|>" "hell", bytes unmerged. */
    int32_t ids[64];
    int64_t n = 0;
    assert_int_equal(tfm_tokenizer_encode(t, text, 22, ids, 64, &n), TFM_OK);
    assert_int_equal(n, 1 + 2 + 9 + 2 + 1);
    assert_int_equal(ids[1], '<');
    /* GPT-2 frames nothing. */
    expect_ids(t, "hello", 5, TFM_ENCODE_ADD_SPECIAL, split, 1, NULL);
    int32_t id = -1;
    for (const char *const *r = (const char *const[]){ "bos", "eos", "unk",
                                                       NULL };
         *r; r++) {
        assert_int_equal(tfm_tokenizer_special_id(t, *r, &id), TFM_OK);
        assert_int_equal(id, 261);
    }
    id = -1;
    assert_int_equal(tfm_tokenizer_special_id(t, "cls", &id),
                     TFM_ERR_NOT_FOUND);
    assert_int_equal(tfm_tokenizer_special_id(t, "boss", &id),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(id, -1);
    assert_int_equal(tfm_tokenizer_is_special(t, 261), 1);
    assert_int_equal(tfm_tokenizer_is_special(t, 259), 0);
    assert_int_equal(tfm_tokenizer_is_special(t, 9999), 0);
    char back[64];
    size_t len = 0;
    assert_int_equal(tfm_tokenizer_decode_v2(t, split, 3,
                                             TFM_DECODE_SKIP_SPECIAL, back,
                                             sizeof back, &len), TFM_OK);
    assert_string_equal(back, "hellohell");
    assert_int_equal(tfm_tokenizer_decode_v2(t, split, 3, 0, back,
                                             sizeof back, &len), TFM_OK);
    assert_string_equal(back, text);
    assert_int_equal(tfm_tokenizer_decode_v2(t, split, 3, 0x8, back,
                                             sizeof back, &len),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_tokenizer_free(t);
}

/* A pair: the second text's tokens have type id 1 and offsets into it. */
static void test_pair(void **state)
{
    (void)state;
    write_gpt2(HELLO, HELLO_MERGES);
    tfm_tokenizer *t = load();
    int32_t ids[8], types[8];
    int64_t off[16], n = 0;
    assert_int_equal(tfm_tokenizer_encode_v2(t, "hello", 5, "hell o", 6, 0,
                                             ids, types, off, 8, &n), TFM_OK);
    const int32_t want[] = { 259, 258, 32, 111 };
    const int32_t want_types[] = { 0, 1, 1, 1 };
    const int64_t want_off[] = { 0, 5, 0, 4, 4, 5, 5, 6 };
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    assert_memory_equal(types, want_types, sizeof want_types);
    assert_memory_equal(off, want_off, sizeof want_off);
    /* Too small: nothing written, the count said. */
    int32_t few[2] = { -7, -7 };
    n = 0;
    assert_int_equal(tfm_tokenizer_encode_v2(t, "hello", 5, "hell o", 6, 0,
                                             few, NULL, NULL, 2, &n),
                     TFM_ERR_CAPACITY);
    assert_int_equal(n, 4);
    assert_int_equal(few[0], -7);
    assert_int_equal(tfm_tokenizer_encode_v2(t, "hello", 5, NULL, 0, 0x10,
                                             few, NULL, NULL, 2, &n),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_tokenizer_free(t);
}

static void test_token_strings(void **state)
{
    (void)state;
    write_gpt2(HELLO, HELLO_MERGES);
    tfm_tokenizer *t = load();
    int32_t id = -1;
    assert_int_equal(tfm_tokenizer_token_to_id(t, "\xC4\xA0w", &id), TFM_OK);
    assert_int_equal(id, 260);
    assert_int_equal(tfm_tokenizer_token_to_id(t, "nope", &id),
                     TFM_ERR_NOT_FOUND);
    assert_int_equal(id, 260);
    char tok[8];
    size_t len = 0;
    assert_int_equal(tfm_tokenizer_id_to_token(t, 260, tok, sizeof tok, &len),
                     TFM_OK);
    assert_string_equal(tok, "\xC4\xA0w");
    assert_int_equal(len, 3);
    assert_int_equal(tfm_tokenizer_id_to_token(t, 261, tok, sizeof tok, &len),
                     TFM_ERR_CAPACITY);
    assert_int_equal(len, 13);
    assert_int_equal(tfm_tokenizer_id_to_token(t, 262, tok, sizeof tok, &len),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_tokenizer_id_to_token(t, -1, tok, sizeof tok, &len),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_tokenizer_free(t);
}

/* The same model from a tokenizer.json and from vocab.json + merges.txt. */
static void test_other_files(void **state)
{
    (void)state;
    write_gpt2(HELLO, HELLO_MERGES);
    char path[512], json[1 << 16];
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[n] = '\0';
    json[strcspn(json, "\n")] = '\0';
    static char doc[1 << 17];
    snprintf(doc, sizeof doc,
             "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 261, "
             "\"content\": \"<|endoftext|>\", \"special\": true}], "
             "\"normalizer\": null, \"pre_tokenizer\": {\"type\": "
             "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": "
             "true}, \"post_processor\": null, \"decoder\": {\"type\": "
             "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": %s, "
             "\"merges\": [\"h e\", [\"l\", \"l\"], \"he ll\", \"hell o\", "
             "\"\xC4\xA0 w\"]}}",
             json);
    write_file("tokenizer.json", doc);
    tfm_tokenizer *t = load(); /* the directory: tokenizer.json first */
    const int32_t want[] = { 259, 260, 111, 114, 108, 100 };
    expect_ids(t, "hello world", 11, 0, want, 6, NULL);
    int32_t id = -1;
    assert_int_equal(tfm_tokenizer_special_id(t, "eos", &id), TFM_OK);
    assert_int_equal(id, 261);
    tfm_tokenizer_free(t);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    char from[512], to[512];
    snprintf(from, sizeof from, "%s/encoder.json", dir);
    snprintf(to, sizeof to, "%s/vocab.json", dir);
    assert_int_equal(rename(from, to), 0);
    snprintf(from, sizeof from, "%s/vocab.bpe", dir);
    snprintf(to, sizeof to, "%s/merges.txt", dir);
    assert_int_equal(rename(from, to), 0);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    t = NULL;
    assert_int_equal(tfm_tokenizer_load(path, &t), TFM_OK);
    expect_ids(t, "hello world", 11, 0, want, 6, NULL);
    tfm_tokenizer_free(t);
    unlink(path);
    unlink(to);
}


static void test_bad_files(void **state)
{
    (void)state;
    const char *const unknown[] = { "he", NULL };
    write_gpt2(unknown, "#version: 0.2\nh e\nhe zz\n");
    expect_load_fails(dir, TFM_ERR_FORMAT, "line 3");
    write_gpt2(unknown, "#version: 0.2\nh e\nl l\n");
    expect_load_fails(dir, TFM_ERR_FORMAT, "makes \"ll\"");
    write_gpt2(unknown, "#version: 0.2\nh e f\n");
    expect_load_fails(dir, TFM_ERR_FORMAT, "line 2");
    const char *const dup[] = { "he", "he", NULL };
    write_gpt2(dup, ""); /* a JSON key twice: readers disagree */
    expect_load_fails(dir, TFM_ERR_FORMAT, "\"he\" appears twice");
    write_gpt2(unknown, "");
    write_file("encoder.json", "{\"a\": 0, \"b\": 1} x");
    expect_load_fails(dir, TFM_ERR_FORMAT, "bytes after the JSON value");
    write_file("encoder.json", "[0, 1]");
    expect_load_fails(dir, TFM_ERR_FORMAT, "not a JSON object");
    write_gpt2_ids(unknown, 300, ""); /* ids 256 .. 299 missing */
    expect_load_fails(dir, TFM_ERR_FORMAT, "id 300");
    write_gpt2(unknown, "");
    write_file("encoder.json", "{\"a\": 0, \"b\": 1, \"c\": ");
    expect_load_fails(dir, TFM_ERR_FORMAT, "not valid JSON");
    write_file("encoder.json", "{\"a\": 0, \"b\": 1}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "byte 0x00");
    write_file("encoder.json", "{\"a\": 0, \"b\": 1.5}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "not a non-negative integer");
    /* Found by fuzz_tokenizer_files: an id too large for any integer was
     * cast to int64 (undefined behaviour) before it was refused. */
    write_file("encoder.json", "{\"a\": 0, \"b\": 1.79e97}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "not a non-negative integer");
    write_file("encoder.json", "{\"a\": 0, \"b\": 0}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "twice");
    write_file("encoder.json", "[1, 2]");
    expect_load_fails(dir, TFM_ERR_FORMAT, "not a JSON object");
    /* Issue 13: an escaped NUL in a token (cJSON would cut it there, and
     * "a\u0000" would be the token "a") or any other string. */
    write_file("encoder.json", "{\"a\": 0, \"a\\u0000\": 1}");
    expect_load_fails(dir, TFM_ERR_FORMAT,
                      "the name or key \"a\" holds an escaped NUL");
    write_file("tokenizer.json", "{\"model\": {\"type\": \"BPE\\u0000x\"}}");
    expect_load_fails(dir, TFM_ERR_FORMAT,
                      "the value of \"type\" holds an escaped NUL");
    char tj[512];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    unlink(tj);
    write_file("tokenizer.json", "{\"model\": {\"type\": \"WordLevel\"}}");
    expect_load_fails(dir, TFM_ERR_UNSUPPORTED, "WordLevel");
    /* A Unigram model is read as SentencePiece's (sentencepiece_json.c):
     * without its vocabulary, a malformed file. */
    write_file("tokenizer.json", "{\"model\": {\"type\": \"Unigram\"}}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "Unigram");
    write_file("tokenizer.json", "{\"normalizer\": {\"type\": \"NFC\"}, "
               "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": "
               "{\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}");
    expect_load_fails(dir, TFM_ERR_UNSUPPORTED, "NFC");
    write_file("tokenizer.json", "{\"model\": 3}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "model");
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    unlink(path);
    expect_load_fails(dir, TFM_ERR_IO, "no tokenizer.json");
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    expect_load_fails(path, TFM_ERR_IO, "vocab.bpe");
}

static void test_null_arguments(void **state)
{
    (void)state;
    int32_t id;
    int64_t n;
    size_t len;
    assert_int_equal(tfm_tokenizer_get_kind(NULL), TFM_TOKENIZER_CHAR);
    assert_int_equal(tfm_tokenizer_encode_v2(NULL, "a", 1, NULL, 0, 0, &id,
                                             NULL, NULL, 1, &n),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_decode_v2(NULL, &id, 1, 0, NULL, 0, &len),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_token_to_id(NULL, "a", &id),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_id_to_token(NULL, 0, NULL, 0, &len),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_special_id(NULL, "eos", &id),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tokenizer_is_special(NULL, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_worked_merges),
        cmocka_unit_test(test_equal_ranks_together),
        cmocka_unit_test(test_pattern_pieces),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_pair),
        cmocka_unit_test(test_token_strings),
        cmocka_unit_test(test_other_files),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
