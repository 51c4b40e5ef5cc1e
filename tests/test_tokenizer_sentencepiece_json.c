/* Tests of SentencePiece models read from a Hugging Face tokenizer.json
 * (tokenizer.h; src/sentencepiece_json.c) on tiny files written here, each
 * expected id worked out by hand from Hugging Face tokenizers' rules:
 * its BPE model merges the adjacent pair of lowest rank in "merges" (the
 * leftmost of equal ranks), only pairs listed there; the Prepend
 * normalizer puts "▁" before every non-empty text, Metaspace only before
 * one that does not start with "▁" (and with prepend_scheme "first" not
 * after a special token); Unigram takes the segmentation whose scores sum
 * highest, an unknown character min score - 10.  Files converted by
 * transformers' rules from models sentencepiece trained are compared id for
 * id with @huggingface/tokenizers and sentencepiece on the whole corpus
 * (tokenizer_spm_json_*). */
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

#define SP "\xe2\x96\x81"  /* U+2581 */

static char json[1 << 16];

/* A Llama-like tokenizer.json: ids 0 <unk>, 1 <s>, 2 </s>, 3 ▁, 4 a, 5 b,
 * 6 ▁a, 7 ab, 8 ▁ab, then with byte_fallback 9 .. 264 <0x00> .. <0xFF>;
 * merges (a, b) rank 0, (▁, a) rank 1, (▁a, b) rank 2.  pipeline is the
 * "normalizer", "pre_tokenizer" part; extra goes into the model. */
static void llama_json(int byte_fallback, const char *pipeline,
                       const char *extra)
{
    size_t n = 0;
    n += (size_t)snprintf(json + n, sizeof json - n,
        "{\"added_tokens\": ["
        "{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
        "{\"id\": 1, \"content\": \"<s>\", \"special\": true},"
        "{\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
        "%s,"
        "\"post_processor\": {\"type\": \"TemplateProcessing\","
        " \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
        "  {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],"
        " \"pair\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
        "  {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
        "  {\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 1}},"
        "  {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}]},"
        "\"decoder\": {\"type\": \"Sequence\", \"decoders\": ["
        " {\"type\": \"Replace\", \"pattern\": {\"String\": \"" SP "\"},"
        "  \"content\": \" \"}, %s"
        " {\"type\": \"Strip\", \"content\": \" \","
        "  \"start\": 1, \"stop\": 0}]},"
        "\"model\": {\"type\": \"BPE\", \"dropout\": null,"
        " \"unk_token\": \"<unk>\", \"byte_fallback\": %s, %s"
        " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"" SP "\": 3,"
        " \"a\": 4, \"b\": 5, \"" SP "a\": 6, \"ab\": 7, \"" SP "ab\": 8",
        pipeline,
        byte_fallback ? "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
                      : "",
        byte_fallback ? "true" : "false", extra);
    for (int b = 0; byte_fallback && b < 256; b++)
        n += (size_t)snprintf(json + n, sizeof json - n,
                              ", \"<0x%02X>\": %d", b, 9 + b);
    snprintf(json + n, sizeof json - n,
             "}, \"merges\": [\"a b\", [\"" SP "\", \"a\"], \"" SP "a b\"]}}");
}

static const char LEGACY[] =
    "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
    " {\"type\": \"Prepend\", \"prepend\": \"" SP "\"},"
    " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"},"
    "  \"content\": \"" SP "\"}]}, \"pre_tokenizer\": null";

static const char METASPACE_FIRST[] =
    "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\","
    " \"replacement\": \"" SP "\", \"prepend_scheme\": \"first\","
    " \"split\": false}";

/* Replaces the first `from` in json by `to`. */
static void edit(const char *from, const char *to)
{
    char *p = strstr(json, from);
    assert_non_null(p);
    size_t fl = strlen(from), tl = strlen(to), rest = strlen(p + fl);
    assert_true(strlen(json) - fl + tl < sizeof json);
    memmove(p + tl, p + fl, rest + 1);
    memcpy(p, to, tl);
}

static tfm_tokenizer *load_json(void)
{
    write_file("tokenizer.json", json);
    return load();
}

/* Legacy Llama (Prepend + Replace).  "ab" -> "▁ab", symbols ▁ a b: (a, b)
 * rank 0 goes before (▁, a) rank 1 -> [▁ ab]; (▁, ab) is no merge, so 3 7
 * although "▁ab" is in the vocabulary (sentencepiece's scores would make
 * it).  "b a" -> "▁b▁a": only (▁, a) -> 3 5 6.  " a" -> "▁▁a" -> 3 6. */
static void test_llama_legacy(void **state)
{
    (void)state;
    llama_json(1, LEGACY, "\"fuse_unk\": true,");
    tfm_tokenizer *t = load_json();
    assert_int_equal(tfm_tokenizer_get_kind(t), TFM_TOKENIZER_SENTENCEPIECE);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 265);
    static const int64_t off[] = { 0, 0, 0, 2 };  /* ▁ is the prefix */
    EXPECT(t, "ab", 0, off, 3, 7);
    EXPECT(t, "b a", 0, NULL, 3, 5, 6);
    EXPECT(t, " a", 0, NULL, 3, 6);
    /* Byte fallback: é (C3 A9) -> ▁ <0xC3> <0xA9>. */
    EXPECT(t, "\xc3\xa9", 0, NULL, 3, 9 + 0xC3, 9 + 0xA9);
    /* The template "<s> $A"; Prepend after a special token too. */
    EXPECT(t, "a", TFM_ENCODE_ADD_SPECIAL, NULL, 1, 6);
    EXPECT(t, "<s>a", TFM_ENCODE_SPLIT_SPECIAL, NULL, 1, 6);
    int32_t id;
    assert_int_equal(tfm_tokenizer_special_id(t, "bos", &id), TFM_OK);
    assert_int_equal(id, 1);
    assert_int_equal(tfm_tokenizer_special_id(t, "unk", &id), TFM_OK);
    assert_int_equal(id, 0);
    /* Decoding: the first ▁ dropped (Strip), bytes gathered, <unk> as
     * its text. */
    char text[64];
    size_t len = 0;
    const int32_t ids[] = { 3, 7, 6, 9 + 0xC3, 9 + 0xA9, 0 };
    assert_int_equal(tfm_tokenizer_decode(t, ids, 6, text, sizeof text, &len),
                     TFM_OK);
    assert_int_equal(len, strlen("ab a\xc3\xa9<unk>"));
    assert_memory_equal(text, "ab a\xc3\xa9<unk>", len);
    tfm_tokenizer_free(t);
}

/* Metaspace, prepend_scheme "first": " a" -> "▁a" (it starts with ▁: no
 * prefix) -> 6; "<s>a" split: "a" after a special token gets none -> 1 4. */
static void test_llama_metaspace(void **state)
{
    (void)state;
    llama_json(1, METASPACE_FIRST, "\"fuse_unk\": true,");
    tfm_tokenizer *t = load_json();
    EXPECT(t, " a", 0, NULL, 6);
    EXPECT(t, "a", 0, NULL, 6);
    EXPECT(t, SP "a", 0, NULL, 6);
    EXPECT(t, "<s>a", TFM_ENCODE_SPLIT_SPECIAL, NULL, 1, 4);
    EXPECT(t, "ab", 0, NULL, 3, 7);
    tfm_tokenizer_free(t);
}

/* Without byte fallback: "cd" -> ▁ c d, c and d unknown: one <unk> with
 * fuse_unk (3 0), one each without (3 0 0). */
static void test_llama_fuse_unk(void **state)
{
    (void)state;
    llama_json(0, LEGACY, "\"fuse_unk\": true,");
    tfm_tokenizer *t = load_json();
    EXPECT(t, "cd", 0, NULL, 3, 0);
    tfm_tokenizer_free(t);
    llama_json(0, LEGACY, "\"fuse_unk\": false,");
    t = load_json();
    EXPECT(t, "cd", 0, NULL, 3, 0, 0);
    tfm_tokenizer_free(t);
}

/* T5-like Unigram: 0 <pad>, 1 </s>, 2 <unk>, 3 ▁ (-2), 4 a (-3), 5 b (-3),
 * 6 ▁a (-2.5), 7 ▁ab (-6), 8 ab (-1). */
static const char T5_JSON[] =
    "{\"added_tokens\": ["
    "{\"id\": 0, \"content\": \"<pad>\", \"special\": true},"
    "{\"id\": 1, \"content\": \"</s>\", \"special\": true},"
    "{\"id\": 2, \"content\": \"<unk>\", \"special\": true}],"
    "\"normalizer\": null,"
    "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
    " {\"type\": \"WhitespaceSplit\"}, {\"type\": \"Metaspace\","
    " \"replacement\": \"" SP "\", \"add_prefix_space\": true}]},"
    "\"post_processor\": {\"type\": \"TemplateProcessing\","
    " \"single\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
    "  {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}],"
    " \"pair\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
    "  {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}},"
    "  {\"Sequence\": {\"id\": \"B\", \"type_id\": 0}},"
    "  {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}]},"
    "\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"" SP "\","
    " \"add_prefix_space\": true},"
    "\"model\": {\"type\": \"Unigram\", \"unk_id\": 2, \"vocab\": ["
    " [\"<pad>\", 0.0], [\"</s>\", 0.0], [\"<unk>\", 0.0], [\"" SP "\", -2],"
    " [\"a\", -3], [\"b\", -3], [\"" SP "a\", -2.5], [\"" SP "ab\", -6],"
    " [\"ab\", -1]]}}";

/* "ab" -> "▁ab": ▁ab -6, ▁a b -5.5, ▁ ab -3, ▁ a b -8: 3 8.
 * "  a  b " -> words "a" "b" -> "▁a▁b": ▁a ▁ b -7.5 beats ▁ a ▁ b -10:
 * 6 3 5.  "c" -> "▁c": ▁ then c unknown (min -6 - 10): 3 2. */
static void test_t5_unigram(void **state)
{
    (void)state;
    snprintf(json, sizeof json, "%s", T5_JSON);
    tfm_tokenizer *t = load_json();
    EXPECT(t, "ab", 0, NULL, 3, 8);
    EXPECT(t, "  a  b ", 0, NULL, 6, 3, 5);
    EXPECT(t, "c", 0, NULL, 3, 2);
    EXPECT(t, "ab", TFM_ENCODE_ADD_SPECIAL, NULL, 3, 8, 1);
    int32_t id;
    assert_int_equal(tfm_tokenizer_special_id(t, "eos", &id), TFM_OK);
    assert_int_equal(id, 1);
    assert_int_equal(tfm_tokenizer_special_id(t, "pad", &id), TFM_OK);
    assert_int_equal(id, 0);
    tfm_tokenizer_free(t);
}

/* Hugging Face's rules where sentencepiece's differ (each worked out from
 * tokenizers' Rust source): a "$A <s>" template makes <s> the eos token
 * alone; WhitespaceSplit splits at any Unicode whitespace and runs the
 * model on each word (a piece spanning two words is never used); the
 * decoders: Strip removes one leading space after the byte pieces are
 * fused, and Metaspace drops the "▁" of the first token only. */
static void test_hugging_face_rules(void **state)
{
    (void)state;
    llama_json(1, LEGACY, "");
    edit("\"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
         "  {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],",
         "\"single\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
         "  {\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}],");
    edit("\"pair\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
         "  {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
         "  {\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 1}},"
         "  {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}]", "\"pair\": null");
    tfm_tokenizer *t = load_json();
    EXPECT(t, "ab", TFM_ENCODE_ADD_SPECIAL, NULL, 3, 7, 1);
    int32_t id;
    assert_int_equal(tfm_tokenizer_special_id(t, "eos", &id), TFM_OK);
    assert_int_equal(id, 1);
    assert_int_equal(tfm_tokenizer_special_id(t, "bos", &id),
                     TFM_ERR_NOT_FOUND);
    /* <0x20> then ▁a: "  a" fused, one space stripped. */
    char text[64];
    size_t len = 0;
    const int32_t ids[] = { 9 + 0x20, 6 };
    assert_int_equal(tfm_tokenizer_decode(t, ids, 2, text, sizeof text, &len),
                     TFM_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(text, " a", 2);
    tfm_tokenizer_free(t);

    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("[\"ab\", -1]]", "[\"ab\", -1], [\"a" SP "b\", 5]]");
    t = load_json();
    /* "a b" -> words ▁a ▁b: 6, then ▁ b (3 5); the whole text would take
     * ▁ + a▁b (-2 + 5). */
    EXPECT(t, "a b", 0, NULL, 6, 3, 5);
    /* A tab (no charsmap here) is whitespace too. */
    EXPECT(t, "a\tb", 0, NULL, 6, 3, 5);
    /* Metaspace decoder: the first token loses its ▁ (here all of it). */
    const int32_t t5ids[] = { 3, 6 };
    assert_int_equal(tfm_tokenizer_decode(t, t5ids, 2, text, sizeof text,
                                          &len), TFM_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(text, " a", 2);
    tfm_tokenizer_free(t);
}

static void expect_bad_json(tfm_status status, const char *keyword)
{
    char path[512];
    write_file("tokenizer.json", json);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    expect_load_fails(path, status, keyword);
}


static void test_bad_files(void **state)
{
    (void)state;
    /* Pipeline steps this reader does not run. */
    llama_json(1, "\"normalizer\": {\"type\": \"NFKC\"}, \"pre_tokenizer\": null",
               "");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "NFKC");
    llama_json(1, "\"normalizer\": null, \"pre_tokenizer\": {\"type\": "
               "\"Metaspace\", \"replacement\": \"" SP "\"}", "");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "split true");
    llama_json(1, LEGACY, "\"ignore_merges\": true,");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "ignore_merges");
    llama_json(1, LEGACY, "");
    edit("\"type\": \"Fuse\"", "\"type\": \"WordPiece\"");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "WordPiece");
    llama_json(1, LEGACY, "");
    edit("{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}]",
         "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
         " {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}]");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "TemplateProcessing");
    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("{\"type\": \"WhitespaceSplit\"}, ", "");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "Metaspace");
    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("\"add_prefix_space\": true}]}", "\"prepend_scheme\": \"first\"}]}");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "always");
    llama_json(1, "\"normalizer\": null, \"pre_tokenizer\": {\"type\": "
               "\"Sequence\", \"pretokenizers\": [{\"type\": "
               "\"WhitespaceSplit\"}, {\"type\": \"Metaspace\", "
               "\"replacement\": \"" SP "\", \"add_prefix_space\": true}]}",
               "");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "BPE");
    llama_json(1, LEGACY, "");
    edit("{\"id\": 2, \"content\": \"</s>\", \"special\": true}",
         "{\"id\": 2, \"content\": \"</s>\", \"special\": false}");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "not special");
    llama_json(1, LEGACY, "");
    edit("\"merges\": [", "\"merges\": [[\"<0x41>\", \"a\"], ");
    edit("\"" SP "ab\": 8", "\"" SP "ab\": 8, \"<0x41>a\": 265");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "merge");
    llama_json(1, LEGACY, "");
    edit("\"decoder\": {\"type\": \"Sequence\"", "\"decoder\": null, \"x\": {\"type\": \"Sequence\"");
    expect_bad_json(TFM_ERR_UNSUPPORTED, "decoder");
    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("\"normalizer\": null", "\"normalizer\": {\"type\": \"Precompiled\","
         " \"precompiled_charsmap\": \"====\"}");
    expect_bad_json(TFM_ERR_FORMAT, "base64");
    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("\"normalizer\": null", "\"normalizer\": {\"type\": \"Precompiled\"}");
    expect_bad_json(TFM_ERR_FORMAT, "precompiled_charsmap");
    /* Malformed files. */
    llama_json(1, LEGACY, "");
    edit("\"unk_token\": \"<unk>\"", "\"unk_token\": \"<nope>\"");
    expect_bad_json(TFM_ERR_FORMAT, "unk_token");
    llama_json(1, LEGACY, "");
    edit("\"a b\"", "\"a z\"");
    expect_bad_json(TFM_ERR_FORMAT, "not in the vocabulary");
    llama_json(1, LEGACY, "");
    edit("{\"id\": 1, \"content\": \"<s>\"", "{\"id\": 5, \"content\": \"<s>\"");
    expect_bad_json(TFM_ERR_FORMAT, "added token");
    llama_json(1, LEGACY, "");
    edit("\"<0x41>\": 74, ", "");
    expect_bad_json(TFM_ERR_FORMAT, "without gaps");
    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("\"normalizer\": null", "\"normalizer\": {\"type\": \"Precompiled\","
         " \"precompiled_charsmap\": \"not base64!\"}");
    expect_bad_json(TFM_ERR_FORMAT, "base64");
    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("\"normalizer\": null", "\"normalizer\": {\"type\": \"Precompiled\","
         " \"precompiled_charsmap\": \"AAAA\"}");
    expect_bad_json(TFM_ERR_FORMAT, "precompiled_charsmap");
    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("\"unk_id\": 2", "\"unk_id\": 9");
    expect_bad_json(TFM_ERR_FORMAT, "unk_id");
    snprintf(json, sizeof json, "%s", T5_JSON);
    edit("[\"a\", -3]", "[\"a\", \"x\"]");
    expect_bad_json(TFM_ERR_FORMAT, "[piece, score]");
    /* Cut anywhere: an error, never a crash, the output untouched. */
    llama_json(1, LEGACY, "\"fuse_unk\": true,");
    size_t full = strlen(json);
    for (size_t cut = 1; cut < full; cut += 97) {
        char saved = json[cut];
        json[cut] = '\0';
        char path[512];
        write_file("tokenizer.json", json);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        tfm_tokenizer *t = SENTINEL;
        assert_int_not_equal(tfm_tokenizer_load(path, &t), TFM_OK);
        assert_ptr_equal(t, SENTINEL);
        json[cut] = saved;
    }
}

static int setup(void **state)
{
    (void)state;
    return make_dir("tfm_spm_json_");
}

static int teardown(void **state)
{
    (void)state;
    remove_file("tokenizer.json");
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_legacy),
        cmocka_unit_test(test_llama_metaspace),
        cmocka_unit_test(test_llama_fuse_unk),
        cmocka_unit_test(test_t5_unigram),
        cmocka_unit_test(test_hugging_face_rules),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
