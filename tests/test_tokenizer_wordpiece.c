/* Tests of WordPiece as BERT's (tokenizer.h) on a small vocab.txt written
 * here, each expected id worked out by hand from BERT's tokenization.py
 * (basic tokenizer, then greedy longest-match-first with "##"); kitoken
 * checks a larger vocabulary on the whole corpus (tokenizer_bert_*). */
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
#include "tokenizer_test_util.h"

/* ids:  0 [PAD]  1 [UNK]  2 [CLS]  3 [SEP]  4 [MASK]  5 un  6 ##aff
 *       7 ##able  8 hello  9 !  10 ,  11 cafe  12 中  13 国  14 ##s
 *       15 run  16 ##ning  17 a  18 ##a  19 οδος (final sigma)  20 Hello */
static const char VOCAB[] =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nun\n##aff\n##able\nhello\n!\n,\n"
    "cafe\n\xE4\xB8\xAD\n\xE5\x9B\xBD\n##s\nrun\n##ning\na\n##a\n"
    "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82\nHello\n";

static int setup(void **state)
{
    (void)state;
    return make_dir("tfm_wp_");
}

static int teardown(void **state)
{
    (void)state;
    remove_file("vocab.txt");
    remove_file("tokenizer_config.json");
    remove_file("tokenizer.json");
    return rmdir(dir);
}

/* Uncased (BertTokenizer's default, no tokenizer_config.json). */
static void test_uncased(void **state)
{
    (void)state;
    write_file("vocab.txt", VOCAB);
    tfm_tokenizer *t = load();
    assert_int_equal(tfm_tokenizer_get_kind(t), TFM_TOKENIZER_WORDPIECE);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 21);
    /* BERT paper's example: un ##aff ##able. */
    const int64_t unaff[] = { 0, 2, 2, 5, 5, 9 };
    EXPECT(t, "unaffable", 0, unaff, 5, 6, 7);
    /* Lower-cased, punctuation split off; "world" has no pieces: [UNK]. */
    EXPECT(t, "Hello, WORLD!", 0, NULL, 8, 10, 1, 9);
    /* Accents stripped (NFD, Mn dropped); the offsets keep the 2-byte é. */
    const int64_t cafe[] = { 0, 5 };
    EXPECT(t, "Caf\xC3\xA9", 0, cafe, 11);
    /* Every CJK ideograph its own word. */
    const int64_t cjk[] = { 0, 3, 3, 6 };
    EXPECT(t, "\xE4\xB8\xAD\xE5\x9B\xBD", 0, cjk, 12, 13);
    EXPECT(t, "runnings", 0, NULL, 15, 16, 14);
    /* "aff" alone must match from the start, without "##": [UNK]. */
    EXPECT(t, "un\taff", 0, NULL, 5, 1);
    /* Control characters and bytes that are not UTF-8 are dropped. */
    const int64_t ctl[] = { 0, 6 };
    EXPECT(t, "hel\x01lo", 0, ctl, 8);
    EXPECT(t, "hel\xFFlo", 0, ctl, 8);
    /* Final sigma, as Python's str.lower(): ΟΔΟΣ -> οδος. */
    EXPECT(t, "\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3", 0, NULL, 19);
    /* A space-only or empty text has no tokens. */
    int32_t ids[4];
    int64_t n = -1;
    assert_int_equal(tfm_tokenizer_encode(t, " \t\n", 3, ids, 4, &n), TFM_OK);
    assert_int_equal(n, 0);
    tfm_tokenizer_free(t);
}

/* Words over 100 characters are [UNK]; 100 are still split. */
static void test_long_words(void **state)
{
    (void)state;
    write_file("vocab.txt", VOCAB);
    tfm_tokenizer *t = load();
    char word[102];
    memset(word, 'a', 101);
    word[101] = '\0';
    int32_t ids[128];
    int64_t off[256], n = 0;
    assert_int_equal(tfm_tokenizer_encode_v2(t, word, 101, NULL, 0, 0, ids,
                                             NULL, off, 128, &n), TFM_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    assert_int_equal(off[1], 101);
    assert_int_equal(tfm_tokenizer_encode_v2(t, word, 100, NULL, 0, 0, ids,
                                             NULL, off, 128, &n), TFM_OK);
    assert_int_equal(n, 100);
    assert_int_equal(ids[0], 17);
    for (int i = 1; i < 100; i++)
        assert_int_equal(ids[i], 18);
    tfm_tokenizer_free(t);
}

/* [CLS] A [SEP] B [SEP] with type ids; special tokens in the text. */
static void test_framing_and_specials(void **state)
{
    (void)state;
    write_file("vocab.txt", VOCAB);
    tfm_tokenizer *t = load();
    EXPECT(t, "hello", TFM_ENCODE_ADD_SPECIAL, NULL, 2, 8, 3);
    int32_t ids[8], types[8];
    int64_t off[16], n = 0;
    assert_int_equal(tfm_tokenizer_encode_v2(t, "hello", 5, "cafe", 4,
                                             TFM_ENCODE_ADD_SPECIAL, ids,
                                             types, off, 8, &n), TFM_OK);
    const int32_t want[] = { 2, 8, 3, 11, 3 };
    const int32_t want_types[] = { 0, 0, 0, 1, 1 };
    const int64_t want_off[] = { 0, 0, 0, 5, 0, 0, 0, 4, 0, 0 };
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    assert_memory_equal(types, want_types, sizeof want_types);
    assert_memory_equal(off, want_off, sizeof want_off);
    EXPECT(t, "[CLS] hello[MASK]", TFM_ENCODE_SPLIT_SPECIAL, NULL, 2, 8, 4);
    /* As text: "[", "cls" ([UNK]), "]", ... */
    EXPECT(t, "[CLS]", 0, NULL, 1, 1, 1);
    static const char *const roles[] = { "cls", "sep", "pad", "mask", "unk" };
    static const int32_t role_ids[] = { 2, 3, 0, 4, 1 };
    for (int i = 0; i < 5; i++) {
        int32_t id = -1;
        assert_int_equal(tfm_tokenizer_special_id(t, roles[i], &id), TFM_OK);
        assert_int_equal(id, role_ids[i]);
    }
    int32_t id = -1;
    assert_int_equal(tfm_tokenizer_special_id(t, "eos", &id),
                     TFM_ERR_NOT_FOUND);
    tfm_tokenizer_free(t);
}

/* Hugging Face's WordPiece decoder: "##" glued, cleanup of the spaces
 * before punctuation. */
static void test_decode(void **state)
{
    (void)state;
    write_file("vocab.txt", VOCAB);
    tfm_tokenizer *t = load();
    char text[128];
    size_t len = 0;
    const int32_t ids[] = { 2, 8, 10, 5, 6, 7, 9, 3 };
    assert_int_equal(tfm_tokenizer_decode_v2(t, ids, 8, 0, text, sizeof text,
                                             &len), TFM_OK);
    assert_string_equal(text, "[CLS] hello, unaffable! [SEP]");
    assert_int_equal(tfm_tokenizer_decode_v2(t, ids, 8,
                                             TFM_DECODE_SKIP_SPECIAL, text,
                                             sizeof text, &len), TFM_OK);
    assert_string_equal(text, "hello, unaffable!");
    char tok[16];
    assert_int_equal(tfm_tokenizer_id_to_token(t, 6, tok, sizeof tok, &len),
                     TFM_OK);
    assert_string_equal(tok, "##aff");
    int32_t id = -1;
    assert_int_equal(tfm_tokenizer_token_to_id(t, "##able", &id), TFM_OK);
    assert_int_equal(id, 7);
    tfm_tokenizer_free(t);
}

/* tokenizer_config.json: do_lower_case false keeps case and accents. */
static void test_cased(void **state)
{
    (void)state;
    write_file("vocab.txt", VOCAB);
    write_file("tokenizer_config.json", "{\"do_lower_case\": false}");
    tfm_tokenizer *t = load();
    EXPECT(t, "Hello hello HELLO", 0, NULL, 20, 8, 1);
    EXPECT(t, "caf\xC3\xA9 cafe", 0, NULL, 1, 11);
    tfm_tokenizer_free(t);
    /* strip_accents alone. */
    write_file("tokenizer_config.json",
               "{\"do_lower_case\": false, \"strip_accents\": true}");
    t = load();
    EXPECT(t, "caf\xC3\xA9", 0, NULL, 11);
    tfm_tokenizer_free(t);
    remove_file("tokenizer_config.json");
}

static void test_bad_files(void **state)
{
    (void)state;
    write_file("vocab.txt", "[PAD]\nhello\n");
    expect_load_fails(dir, TFM_ERR_FORMAT, "[UNK]");
    write_file("vocab.txt", "[UNK]\nhello\nhello\n");
    expect_load_fails(dir, TFM_ERR_FORMAT, "given twice");
    write_file("vocab.txt", "[UNK]\n\nhello\n");
    expect_load_fails(dir, TFM_ERR_FORMAT, "line 2 is empty");
    write_file("vocab.txt", "");
    expect_load_fails(dir, TFM_ERR_FORMAT, "empty");
    write_file("vocab.txt", VOCAB);
    write_file("tokenizer_config.json", "{\"do_lower_case\": ");
    expect_load_fails(dir, TFM_ERR_FORMAT, "tokenizer_config.json");
    /* Read otherwise by Python's json (transformers): a key twice (the
     * last counts there, the first in cJSON), bytes after the object, a
     * NUL in a string. */
    write_file("tokenizer_config.json",
               "{\"do_lower_case\": true, \"do_lower_case\": false}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "\"do_lower_case\" appears twice");
    write_file("tokenizer_config.json", "{\"do_lower_case\": false}}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "bytes after the JSON value");
    write_file("tokenizer_config.json",
               "{\"do_lower_case\": false, \"unk_token\": \"[U\\u0000\"}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "escaped NUL");
    remove_file("tokenizer_config.json");
    write_file("tokenizer.json",
               "{\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, "
               "\"model\": {\"type\": \"WordPiece\", \"vocab\": "
               "{\"[UNK]\": 0, \"a\": 1, \"a\": 2}}}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "\"a\" appears twice");
    remove_file("tokenizer.json");
    write_file("tokenizer.json",
               "{\"normalizer\": {\"type\": \"BertNormalizer\"}, "
               "\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": "
               "{\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0}}}");
    expect_load_fails(dir, TFM_ERR_UNSUPPORTED, "Whitespace");
    write_file("tokenizer.json",
               "{\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, "
               "\"model\": {\"type\": \"WordPiece\", \"unk_token\": "
               "\"<unk>\", \"vocab\": {\"[UNK]\": 0}}}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "<unk>");
    write_file("tokenizer.json",
               "{\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, "
               "\"model\": {\"type\": \"WordPiece\", \"vocab\": "
               "{\"[UNK]\": 0, \"a\": 2}}}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "id 2");
    remove_file("tokenizer.json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uncased),
        cmocka_unit_test(test_long_words),
        cmocka_unit_test(test_framing_and_specials),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_cased),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
