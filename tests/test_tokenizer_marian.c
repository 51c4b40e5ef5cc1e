/* Tests of Marian's tokenizer (tokenizer.h; Hugging Face's MarianTokenizer)
 * on a directory written here: source.spm and target.spm tiny unigram
 * models (spm_test_model.h), vocab.json and tokenizer_config.json.  Each
 * expected value is worked out by hand from MarianTokenizer's steps
 * (language code, source.encode(out_type=str), the vocab.json lookup, eos
 * appended; decoding with target.decode_pieces), and was checked with
 * python3-sentencepiece 0.1.97 on the same files.  The whole KJV corpus is
 * compared in bindings/python/tests/test_tokenizer_marian.py. */
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
#include "spm_test_model.h"

/* vocab.json: the pieces of both models under Marian's ids ("c" only
 * target.spm has). */
static const char VOCAB[] =
    "{\"</s>\": 0, \"<unk>\": 1, \">>fr<<\": 2, \"" SP "a\": 3, \"b\": 4, "
    "\"" SP "\": 5, \"a\": 6, \"ab\": 7, \"" SP "ab\": 8, \"c\": 9, "
    "\"<pad>\": 10}";

/* source.spm: unigram_model (0 <unk>, 1 </s>, 2 ▁, 3 a, 4 b, 5 ab, 6 ▁a,
 * 7 ▁ab); target.spm: the same and 8 c. */
static int setup(void **state)
{
    (void)state;
    if (make_dir("tfm_marian_"))
        return -1;
    buf m;
    unigram_model(&m);
    write_model("source.spm", &m);
    put_piece(&m, "c", -2, NORMAL);
    write_model("target.spm", &m);
    write_file("vocab.json", VOCAB);
    write_file("tokenizer_config.json",
               "{\"source_lang\": \"en\", \"target_lang\": \"fr\", "
               "\"separate_vocabs\": false}");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    static const char *const FILES[] = { "source.spm", "target.spm",
                                         "vocab.json",
                                         "tokenizer_config.json",
                                         "tokenizer.json" };
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++)
        remove_file(FILES[i]);
    return rmdir(dir);
}

static void test_ids_are_vocab_json(void **state)
{
    (void)state;
    tfm_tokenizer *t = load();
    assert_int_equal(tfm_tokenizer_get_kind(t), TFM_TOKENIZER_MARIAN);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 11);
    /* "ab" -> "▁ab": source.spm's ▁a b (its 6 4), vocab.json's 3 4. */
    static const int64_t off[] = { 0, 1, 1, 2 };
    EXPECT(t, "ab", 0, off, 3, 4);
    /* build_inputs_with_special_tokens: </s> after, no bos. */
    EXPECT(t, "ab", TFM_ENCODE_ADD_SPECIAL, NULL, 3, 4, 0);
    /* "▁ab▁c": ▁a b ▁ and c, unknown to source.spm, whose piece "c"
     * vocab.json has (from target.spm); "cd" it has not: <unk>. */
    EXPECT(t, "ab c", 0, NULL, 3, 4, 5, 9);
    EXPECT(t, "ab  cd ", 0, NULL, 3, 4, 5, 1);
    /* A pair: A B </s>, the pair's tokens and the </s> type 1. */
    int32_t ids[8], types[8];
    int64_t n = 0;
    assert_int_equal(tfm_tokenizer_encode_v2(t, "a", 1, "b", 1,
                                             TFM_ENCODE_ADD_SPECIAL, ids,
                                             types, NULL, 8, &n), TFM_OK);
    assert_int_equal(n, 4);
    static const int32_t want[] = { 3, 5, 4, 0 }, want_types[] = { 0, 1, 1, 1 };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ids[i], want[i]);
        assert_int_equal(types[i], want_types[i]);
    }
    /* Special tokens written in the text, with SPLIT_SPECIAL. */
    EXPECT(t, "a</s><pad>", TFM_ENCODE_SPLIT_SPECIAL, NULL, 3, 0, 10);
    int32_t id;
    assert_int_equal(tfm_tokenizer_special_id(t, "eos", &id), TFM_OK);
    assert_int_equal(id, 0);
    assert_int_equal(tfm_tokenizer_special_id(t, "unk", &id), TFM_OK);
    assert_int_equal(id, 1);
    assert_int_equal(tfm_tokenizer_special_id(t, "pad", &id), TFM_OK);
    assert_int_equal(id, 10);
    assert_int_equal(tfm_tokenizer_special_id(t, "bos", &id),
                     TFM_ERR_NOT_FOUND);
    assert_true(tfm_tokenizer_is_special(t, 1));
    assert_false(tfm_tokenizer_is_special(t, 2));
    assert_int_equal(tfm_tokenizer_token_to_id(t, SP "ab", &id), TFM_OK);
    assert_int_equal(id, 8);
    char tok[16];
    size_t len;
    assert_int_equal(tfm_tokenizer_id_to_token(t, 2, tok, sizeof tok, &len),
                     TFM_OK);
    assert_string_equal(tok, ">>fr<<");
    tfm_tokenizer_free(t);
}

/* remove_language_code: ">>" at the start up to the first "<<" is one
 * token, vocab.json's or <unk>; elsewhere it is text. */
static void test_language_code(void **state)
{
    (void)state;
    tfm_tokenizer *t = load();
    static const int64_t off[] = { 0, 6, 6, 7, 7, 8, 0, 0 };
    EXPECT(t, ">>fr<<ab", TFM_ENCODE_ADD_SPECIAL, off, 2, 3, 4, 0);
    EXPECT(t, ">>fr<< ab", 0, NULL, 2, 3, 4);
    EXPECT(t, ">>de<< a", 0, NULL, 1, 3);
    EXPECT(t, ">>fr<<<<", 0, NULL, 2, 5, 1);   /* "<<" is text: ▁ <unk> */
    EXPECT(t, ">>a", 0, NULL, 5, 1, 6);        /* no "<<": ▁, <unk> >>, a */
    /* After a special token the text starts again. */
    EXPECT(t, "</s>>>fr<<b", TFM_ENCODE_SPLIT_SPECIAL, NULL, 0, 2, 5, 4);
    tfm_tokenizer_free(t);
}

/* Ids -> vocab.json's pieces -> target.spm's decode_pieces; a special
 * token not skipped is itself and a space; "▁" a space; ends stripped. */
static void test_decode(void **state)
{
    (void)state;
    tfm_tokenizer *t = load();
    DECODE(t, 0, "ab", 3, 4);
    DECODE(t, 0, "ab c", 3, 4, 5, 9);
    DECODE(t, 0, "ab</s>", 3, 4, 0);
    DECODE(t, TFM_DECODE_SKIP_SPECIAL, "ab", 3, 4, 0);
    DECODE(t, 0, "</s> a", 0, 3);
    DECODE(t, 0, "a<pad> b", 3, 10, 4);
    DECODE(t, TFM_DECODE_SKIP_SPECIAL, "ab", 3, 10, 1, 4);
    DECODE(t, 0, "<unk>", 1);
    /* ">>fr<<" is not a piece of target.spm: decode_pieces keeps it. */
    DECODE(t, 0, ">>fr<< a", 2, 3);
    /* remove_extra_whitespaces: every leading ▁ goes; strip the end. */
    DECODE(t, 0, "a", 5, 5, 3, 5);
    tfm_tokenizer_free(t);
}

/* The vocab.json path, with the models beside it, is Marian's too; a
 * tokenizer.json this library cannot run gives way to Marian's files. */
static void test_files(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    tfm_tokenizer *t = NULL;
    assert_int_equal(tfm_tokenizer_load(path, &t), TFM_OK);
    assert_int_equal(tfm_tokenizer_get_kind(t), TFM_TOKENIZER_MARIAN);
    tfm_tokenizer_free(t);
    write_file("tokenizer.json", "{\"model\": {\"type\": \"WordLevel\"}}");
    t = load();
    assert_int_equal(tfm_tokenizer_get_kind(t), TFM_TOKENIZER_MARIAN);
    tfm_tokenizer_free(t);
    remove_file("tokenizer.json");
    /* Config tokens as AddedToken objects; no pad; clean-up. */
    write_file("tokenizer_config.json",
               "{\"unk_token\": {\"content\": \"<unk>\"}, \"pad_token\": "
               "null, \"clean_up_tokenization_spaces\": true}");
    t = load();
    int32_t id;
    assert_int_equal(tfm_tokenizer_special_id(t, "pad", &id),
                     TFM_ERR_NOT_FOUND);
    assert_false(tfm_tokenizer_is_special(t, 10));
    DECODE(t, 0, "<pad> ab", 10, 3, 4);  /* a piece target.spm lacks */
    tfm_tokenizer_free(t);
    remove_file("tokenizer_config.json");
    t = load();  /* no tokenizer_config.json: the defaults */
    assert_int_equal(tfm_tokenizer_special_id(t, "pad", &id), TFM_OK);
    assert_int_equal(id, 10);
    tfm_tokenizer_free(t);
    write_file("tokenizer_config.json", "{\"separate_vocabs\": false}");
}

static void expect_bad_vocab(const char *vocab, tfm_status status,
                             const char *keyword)
{
    write_file("vocab.json", vocab);
    expect_load_fails(dir, status, keyword);
    expect_load_fails(dir, status, "vocab.json");
}

static void test_bad_files(void **state)
{
    (void)state;
    expect_bad_vocab("[\"</s>\"]", TFM_ERR_FORMAT, "not a JSON object");
    expect_bad_vocab("{\"</s>\": 0", TFM_ERR_FORMAT, "not valid JSON");
    expect_bad_vocab("{\"</s>\": 0, \"<unk>\": \"1\"}", TFM_ERR_FORMAT,
                     "\"<unk>\" is not a non-negative integer");
    expect_bad_vocab("{\"</s>\": 0, \"<unk>\": 1.5}", TFM_ERR_FORMAT,
                     "\"<unk>\" is not a non-negative integer");
    expect_bad_vocab("{\"</s>\": 0, \"<unk>\": 0}", TFM_ERR_FORMAT,
                     "given twice (\"</s>\" and \"<unk>\")");
    expect_bad_vocab("{\"</s>\": 0, \"<unk>\": 2}", TFM_ERR_FORMAT,
                     "the id 2 of \"<unk>\" is outside [0, 2)");
    expect_bad_vocab("{\"</s>\": 0, \"x\": 1}", TFM_ERR_FORMAT,
                     "no \"<unk>\" (the unk_token)");
    expect_bad_vocab("{\"x\": 0, \"<unk>\": 1}", TFM_ERR_FORMAT,
                     "no \"</s>\" (the eos_token)");
    expect_bad_vocab("{\"</s>\": 0, \"<u\\u0000nk>\": 1}", TFM_ERR_FORMAT,
                     "NUL");
    write_file("vocab.json", VOCAB);
    write_file("tokenizer_config.json", "{\"separate_vocabs\": true}");
    expect_load_fails(dir, TFM_ERR_UNSUPPORTED, "target_vocab.json");
    write_file("tokenizer_config.json", "{\"eos_token\": 3}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "\"eos_token\" is not a token");
    write_file("tokenizer_config.json", "{\"unk_token\": \"<oov>\"}");
    expect_load_fails(dir, TFM_ERR_FORMAT, "no \"<oov>\" (the unk_token)");
    write_file("tokenizer_config.json", "[]");
    expect_load_fails(dir, TFM_ERR_FORMAT, "tokenizer_config.json");
    write_file("tokenizer_config.json", "{}");
    write_file("target.spm", "not a model");
    expect_load_fails(dir, TFM_ERR_FORMAT, "target.spm");
    buf m;
    unigram_model(&m);
    put_piece(&m, "c", -2, NORMAL);
    write_model("target.spm", &m);
    tfm_tokenizer_free(load());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_are_vocab_json),
        cmocka_unit_test(test_language_code),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
