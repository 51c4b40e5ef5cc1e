/* Tests of the SentencePiece tokenizers (tokenizer.h) on tiny .model files
 * written here as protocol buffers, each expected id worked out by hand
 * from sentencepiece 0.1.97's rules (bpe_model.cc: merge the adjacent pair
 * whose piece scores highest, the leftmost of equal scores; unigram's
 * Viterbi: the segmentation whose scores sum highest, an unknown character
 * min_score - 10; normalizer.cc; the processor's byte fallback and
 * decoding).  Models trained by sentencepiece itself are compared id for
 * id with it on the whole corpus (tokenizer_spm_*); every expected value
 * here was also checked with python3-sentencepiece 0.1.97 loading the same
 * files (python3 -c "import sentencepiece; ...").  */
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

/* Llama-like BPE: ids 0 <unk>, 1 <s>, 2 </s>, 3 .. 258 <0x00> .. <0xFF>,
 * 259 ▁ (-5), 260 a (-5), 261 b (-5), 262 ▁a (-1), 263 ab (-2),
 * 264 ▁ab (-0.5); byte fallback, dummy prefix, extra whitespace kept. */
static void bpe_model(buf *m, int byte_fallback, int n_bytes)
{
    m->n = 0;
    put_piece(m, "<unk>", 0, UNKNOWN);
    put_piece(m, "<s>", 0, CONTROL);
    put_piece(m, "</s>", 0, CONTROL);
    for (int b = 0; b < n_bytes; b++) {
        char p[8];
        snprintf(p, sizeof p, "<0x%02X>", b);
        put_piece(m, p, 0, BYTE);
    }
    put_piece(m, SP, -5, NORMAL);
    put_piece(m, "a", -5, NORMAL);
    put_piece(m, "b", -5, NORMAL);
    put_piece(m, SP "a", -1, NORMAL);
    put_piece(m, "ab", -2, NORMAL);
    put_piece(m, SP "ab", -0.5f, NORMAL);
    buf tr = { .n = 0 };
    put_int(&tr, 3, 2);  /* model_type BPE */
    put_int(&tr, 35, byte_fallback);
    put_bytes(m, 2, tr.b, tr.n);
    buf no = { .n = 0 };
    put_bytes(&no, 1, "identity", 8);
    put_int(&no, 3, 1);  /* add_dummy_prefix */
    put_int(&no, 4, 0);  /* remove_extra_whitespaces */
    put_bytes(m, 3, no.b, no.n);
}

static int setup(void **state)
{
    (void)state;
    return make_dir("tfm_spm_");
}

static int teardown(void **state)
{
    (void)state;
    remove_file("m.model");
    remove_file("bad.model");
    remove_file("tokenizer.model");
    return rmdir(dir);
}

/* "ab a" -> "▁ab▁a", symbols ▁ a b ▁ a.  Pairs: ▁a (-1) at 0 and at 3,
 * ab (-2) at 1.  Highest score, leftmost: ▁a at 0 -> [▁a b ▁ a], which
 * makes ▁ab (-0.5), merged next -> [▁ab ▁ a]; then ▁a at 3 -> [▁ab ▁a];
 * ab's pair is gone (its left symbol was merged away).  So 264 262, though
 * "ab" is in the vocabulary. */
static void test_bpe_merges_by_score(void **state)
{
    (void)state;
    buf m;
    bpe_model(&m, 1, 256);
    write_model("m.model", &m);
    tfm_tokenizer *t = load_model("m.model");
    assert_int_equal(tfm_tokenizer_get_kind(t), TFM_TOKENIZER_SENTENCEPIECE);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 265);
    /* "▁ab" covers "ab" (the dummy prefix maps to byte 0), "▁a" " a". */
    static const int64_t off[] = { 0, 2, 2, 4 };
    EXPECT(t, "ab a", 0, off, 264, 262);
    /* Extra whitespace kept: "a  b" -> ▁a ▁ ▁ b... ▁ and ▁ do not merge. */
    EXPECT(t, "a  b", 0, NULL, 262, 259, 259, 261);
    /* Byte fallback: é (C3 A9) is not a piece: <0xC3> <0xA9>, the first
     * covering nothing, the last the character. */
    static const int64_t off2[] = { 0, 1, 1, 1, 1, 3 };
    EXPECT(t, "a\xc3\xa9", 0, off2, 262, 3 + 0xC3, 3 + 0xA9);
    /* Invalid UTF-8: the byte becomes U+FFFD (EF BF BD), then its bytes. */
    EXPECT(t, "\xff", 0, NULL, 259, 3 + 0xEF, 3 + 0xBF, 3 + 0xBD);
    /* ADD_SPECIAL: <s> before the text (Llama); a pair gets its own. */
    EXPECT(t, "ab", TFM_ENCODE_ADD_SPECIAL, NULL, 1, 264);
    int32_t ids[8], types[8];
    int64_t n = 0;
    assert_int_equal(tfm_tokenizer_encode_v2(t, "a", 1, "b", 1,
                                             TFM_ENCODE_ADD_SPECIAL, ids,
                                             types, NULL, 8, &n), TFM_OK);
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 262);
    assert_int_equal(ids[2], 1);
    assert_int_equal(ids[3], 259);  /* "b" -> "▁b": ▁ b */
    assert_int_equal(ids[4], 261);
    assert_int_equal(types[1], 0);
    assert_int_equal(types[2], 1);
    /* "<s>" in the text is text unless SPLIT_SPECIAL. */
    EXPECT(t, "<s>", TFM_ENCODE_SPLIT_SPECIAL, NULL, 1);
    int32_t id;
    assert_int_equal(tfm_tokenizer_special_id(t, "bos", &id), TFM_OK);
    assert_int_equal(id, 1);
    assert_int_equal(tfm_tokenizer_special_id(t, "unk", &id), TFM_OK);
    assert_int_equal(id, 0);
    assert_int_equal(tfm_tokenizer_token_to_id(t, SP "ab", &id), TFM_OK);
    assert_int_equal(id, 264);
    tfm_tokenizer_free(t);
}

/* A piece with a ▁ inside ("a▁", 265, -0.1) can merge across a word's
 * start, so the text must not be cut into words there: "a a" -> "▁a▁a",
 * symbols ▁ a ▁ a; a▁ (-0.1) first -> [▁ a▁ a]; "▁a▁" and "a▁a" are not
 * pieces and the two ▁a pairs are stale: 259 265 260 (cut into "▁a" "▁a"
 * it would be 262 262). */
static void test_bpe_piece_across_words(void **state)
{
    (void)state;
    buf m;
    bpe_model(&m, 1, 256);
    put_piece(&m, "a" SP, -0.1f, NORMAL);
    write_model("m.model", &m);
    tfm_tokenizer *t = load_model("m.model");
    EXPECT(t, "a a", 0, NULL, 259, 265, 260);
    EXPECT(t, "b", 0, NULL, 259, 261);
    tfm_tokenizer_free(t);
}

static void test_bpe_decode(void **state)
{
    (void)state;
    buf m;
    bpe_model(&m, 1, 256);
    write_model("m.model", &m);
    tfm_tokenizer *t = load_model("m.model");
    /* The first leading ▁ goes (the dummy prefix), the others are spaces. */
    DECODE(t, 0, "ab a", 264, 262);
    DECODE(t, 0, "a  b", 262, 259, 259, 261);
    DECODE(t, 0, " ab", 259, 264);
    /* Control pieces are empty and keep the start a start. */
    DECODE(t, 0, "ab", 1, 264, 2);
    /* Byte pieces gather into UTF-8; a lone or bad byte is U+FFFD. */
    DECODE(t, 0, "a\xc3\xa9", 262, 3 + 0xC3, 3 + 0xA9);
    DECODE(t, 0, "\xef\xbf\xbd" "a", 3 + 0xC3, 260);
    DECODE(t, 0, "\xef\xbf\xbd\xef\xbf\xbd", 3 + 0xFF, 3 + 0xFE);
    /* <unk> is " ⁇ "; skipping special tokens drops it and <s>. */
    DECODE(t, 0, " \xe2\x81\x87 a", 0, 260);
    DECODE(t, TFM_DECODE_SKIP_SPECIAL, "a", 1, 0, 262);
    tfm_tokenizer_free(t);
}

/* "ab" -> "▁ab": ▁|a|b -7, ▁|ab -6, ▁a|b -4.5, ▁ab -6: ▁a b (6 4). */
static void test_unigram_viterbi(void **state)
{
    (void)state;
    buf m;
    unigram_model(&m);
    write_model("m.model", &m);
    tfm_tokenizer *t = load_model("m.model");
    EXPECT(t, "ab", 0, NULL, 6, 4);
    /* "  ab  cd ": leading, doubled and trailing spaces removed ->
     * "▁ab▁cd"; c and d are not pieces: one <unk> (min_score - 10 each)
     * for the run, covering both. */
    static const int64_t off[] = { 2, 3, 3, 4, 4, 6, 6, 8 };
    EXPECT(t, "  ab  cd ", 0, off, 6, 4, 2, 0);
    /* ADD_SPECIAL appends </s> (T5, Marian); there is no bos. */
    EXPECT(t, "a", TFM_ENCODE_ADD_SPECIAL, NULL, 6, 1);
    int32_t id;
    assert_int_equal(tfm_tokenizer_special_id(t, "bos", &id),
                     TFM_ERR_NOT_FOUND);
    assert_int_equal(tfm_tokenizer_special_id(t, "eos", &id), TFM_OK);
    assert_int_equal(id, 1);
    /* Only whitespace: nothing. */
    int32_t ids[4];
    int64_t n = -1;
    assert_int_equal(tfm_tokenizer_encode(t, "   ", 3, ids, 4, &n), TFM_OK);
    assert_int_equal(n, 0);
    /* Decode: with remove_extra_whitespaces every leading ▁ goes. */
    DECODE(t, 0, "ab  \xe2\x81\x87 ", 6, 4, 2, 0);
    DECODE(t, 0, "a", 2, 6);
    tfm_tokenizer_free(t);
}

/* A directory with a SentencePiece model under any of the names
 * checkpoints give it (Llama's tokenizer.model, T5's spiece.model,
 * XLM-R's sentencepiece.bpe.model) loads it, and a .spm file loads by
 * itself; each gives the model's ids ("ab" -> ▁ab as test_unigram_viterbi
 * works out: 6 4).  Marian's source.spm alone is refused, naming what is
 * missing: a Marian tokenizer's ids are its vocab.json's
 * (test_tokenizer_marian.c). */
static void test_directory(void **state)
{
    (void)state;
    static const char *const names[] = { "tokenizer.model", "spiece.model",
                                         "sentencepiece.bpe.model" };
    buf m;
    unigram_model(&m);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        write_model(names[i], &m);
        tfm_tokenizer *t = load();
        assert_int_equal(tfm_tokenizer_get_kind(t),
                         TFM_TOKENIZER_SENTENCEPIECE);
        EXPECT(t, "ab", 0, NULL, 6, 4);
        tfm_tokenizer_free(t);
        remove_file(names[i]);
    }
    write_model("source.spm", &m);
    expect_load_fails(dir, TFM_ERR_FORMAT, "no vocab.json");
    remove_file("source.spm");
    write_model("m.spm", &m);
    tfm_tokenizer *t = load_model("m.spm");
    EXPECT(t, "ab", 0, NULL, 6, 4);
    tfm_tokenizer_free(t);
    remove_file("m.spm");
}

static void expect_bad(const buf *m, tfm_status status, const char *keyword)
{
    char path[512];
    write_model("bad.model", m);
    snprintf(path, sizeof path, "%s/bad.model", dir);
    expect_load_fails(path, status, keyword);
}

static void test_bad_files(void **state)
{
    (void)state;
    buf m, b;
    /* Truncated anywhere: a clear error, never a crash. */
    bpe_model(&m, 1, 256);
    for (size_t cut = 1; cut < m.n; cut += 7) {
        b = m;
        b.n = cut;
        tfm_tokenizer *t = SENTINEL;
        char path[512];
        write_model("bad.model", &b);
        snprintf(path, sizeof path, "%s/bad.model", dir);
        tfm_status st = tfm_tokenizer_load(path, &t);
        if (st == TFM_OK)
            tfm_tokenizer_free(t);  /* a cut between whole fields */
        else
            assert_ptr_equal(t, SENTINEL);
    }
    b = m;
    b.n = m.n - 1;
    expect_bad(&b, TFM_ERR_FORMAT, "truncated");
    /* Empty file; not a protobuf. */
    b.n = 0;
    expect_bad(&b, TFM_ERR_FORMAT, "no pieces");
    memcpy(b.b, "hello world\n", 12);
    b.n = 12;
    expect_bad(&b, TFM_ERR_FORMAT, "wire type");
    /* Byte fallback without the 256 byte pieces. */
    bpe_model(&b, 1, 200);
    expect_bad(&b, TFM_ERR_FORMAT, "<0xC8>");
    /* Byte pieces without byte fallback. */
    bpe_model(&b, 0, 256);
    expect_bad(&b, TFM_ERR_FORMAT, "byte_fallback is false");
    /* No unknown piece; two. */
    b.n = 0;
    put_piece(&b, "a", -1, NORMAL);
    expect_bad(&b, TFM_ERR_FORMAT, "no unknown piece");
    put_piece(&b, "<unk>", 0, UNKNOWN);
    put_piece(&b, "<unk2>", 0, UNKNOWN);
    expect_bad(&b, TFM_ERR_FORMAT, "two unknown pieces");
    /* A piece twice, an empty piece, an unknown type. */
    b.n = 0;
    put_piece(&b, "<unk>", 0, UNKNOWN);
    put_piece(&b, "a", -1, NORMAL);
    put_piece(&b, "a", -2, NORMAL);
    expect_bad(&b, TFM_ERR_FORMAT, "given twice");
    b.n = 0;
    put_piece(&b, "<unk>", 0, UNKNOWN);
    put_piece(&b, "", -1, NORMAL);
    expect_bad(&b, TFM_ERR_FORMAT, "empty");
    b.n = 0;
    put_piece(&b, "<unk>", 0, UNKNOWN);
    put_piece(&b, "a", -1, 9);
    expect_bad(&b, TFM_ERR_FORMAT, "type 9");
    /* A WORD model; a broken charsmap. */
    b.n = 0;
    put_piece(&b, "<unk>", 0, UNKNOWN);
    buf tr = { .n = 0 };
    put_int(&tr, 3, 3);
    put_bytes(&b, 2, tr.b, tr.n);
    expect_bad(&b, TFM_ERR_UNSUPPORTED, "WORD");
    b.n = 0;
    put_piece(&b, "<unk>", 0, UNKNOWN);
    buf no = { .n = 0 };
    put_bytes(&no, 2, "\x10\x00\x00\x00xx", 6);
    put_bytes(&b, 3, no.b, no.n);
    expect_bad(&b, TFM_ERR_FORMAT, "precompiled_charsmap");
    /* A score with the wrong wire type. */
    b.n = 0;
    buf p = { .n = 0 };
    put_bytes(&p, 1, "a", 1);
    put_int(&p, 2, 7);
    put_bytes(&b, 1, p.b, p.n);
    expect_bad(&b, TFM_ERR_FORMAT, "score");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_merges_by_score),
        cmocka_unit_test(test_bpe_piece_across_words),
        cmocka_unit_test(test_bpe_decode),
        cmocka_unit_test(test_unigram_viterbi),
        cmocka_unit_test(test_directory),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
