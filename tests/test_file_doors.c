/*
 * Files that are not what a reader expects (issue 44, kinds 4, 6, 10):
 * every loader entry point -- a hub checkpoint directory (config.json,
 * model.safetensors.index.json, the shards), tokenizer files (vocab.txt,
 * tokenizer.json, encoder.json + vocab.bpe, SentencePiece .model),
 * safetensors and model files -- is given
 *  - a FIFO (which blocks an ordinary open() for reading until a writer
 *    comes: the test's alarm() would end the run), a symlink to /dev/zero
 *    (endless bytes), a directory: refused with TFM_ERR_IO naming what it
 *    is ("a FIFO", "a character device", "a directory");
 *  - a symlink to a regular file (as hub checkouts hold them): read;
 *  - a file over its kind's cap (src/base/file.h: 16 MiB for config JSON,
 *    256 MiB for tokenizer files; a sparse file, so nothing is written):
 *    refused by its size before it is read;
 *  - bytes that are not UTF-8 in a JSON string value or a text line:
 *    refused with TFM_ERR_FORMAT and the byte offset (counted by hand
 *    below);
 *  - shards that disagree with model.safetensors.index.json: a tensor in
 *    two shards, a tensor the index does not list;
 *  - an index of 150,000 distinct shard names: refused (the first is
 *    missing) without a quadratic scan (a hang, kind 4).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#include <cmocka.h>
#include <transformer/transformer.h>

static char g_dir[64];

static void path_of(char *buf, const char *name)
{
    snprintf(buf, 4096, "%s/%s", g_dir, name);
}

static void spit(const char *name, const void *bytes, size_t n)
{
    char p[4096];
    path_of(p, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void spits(const char *name, const char *text)
{
    spit(name, text, strlen(text));
}

/* Empties the scratch directory (one level, and one level below). */
static void clear_dir(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/* '%s'/.[!.]* 2>/dev/null",
             g_dir, g_dir);
    assert_true(system(cmd) >= 0);
}

/* name made into: 0 a FIFO, 1 a symlink to /dev/zero, 2 a directory. */
static const char *const KINDS[] = { "a FIFO", "a character device",
                                     "a directory" };

static void make_odd(const char *name, int kind)
{
    char p[4096];
    path_of(p, name);
    unlink(p);
    rmdir(p);
    if (kind == 0)
        assert_int_equal(mkfifo(p, 0600), 0);
    else if (kind == 1)
        assert_int_equal(symlink("/dev/zero", p), 0);
    else
        assert_int_equal(mkdir(p, 0700), 0);
}

/* A sparse file of n bytes. */
static void make_sized(const char *name, off_t n)
{
    char p[4096];
    path_of(p, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, n), 0);
    close(fd);
}

static void expect(tfm_status st, tfm_status want, const char *words)
{
    if (st != want || !strstr(tfm_last_error(), words))
        fail_msg("status %s, message \"%s\"; wanted %s and \"%s\"",
                 tfm_status_string(st), tfm_last_error(),
                 tfm_status_string(want), words);
}

#define SENTINEL ((void *)0x5e47)

static tfm_status load_model(const char *name)
{
    char p[4096];
    if (name)
        path_of(p, name);
    else
        snprintf(p, sizeof p, "%s", g_dir);
    tfm_module *m = SENTINEL;
    tfm_status st = tfm_model_load(p, &m);
    if (st == TFM_OK)
        tfm_module_free(m);
    else
        assert_ptr_equal(m, SENTINEL);
    return st;
}

static tfm_status load_tokenizer(const char *name)
{
    char p[4096];
    if (name)
        path_of(p, name);
    else
        snprintf(p, sizeof p, "%s", g_dir);
    tfm_tokenizer *t = SENTINEL;
    tfm_status st = tfm_tokenizer_load(p, &t);
    if (st == TFM_OK)
        tfm_tokenizer_free(t);
    else
        assert_ptr_equal(t, SENTINEL);
    return st;
}

/* A tiny GPT-2 config.json (2 tokens, 1 layer, width 2). */
static const char GPT2_CONFIG[] =
    "{\"model_type\": \"gpt2\", \"vocab_size\": 2, \"n_positions\": 2, "
    "\"n_embd\": 2, \"n_layer\": 1, \"n_head\": 1}";

/* A safetensors file name holding F32 tensors names[0..n-1], each [1]. */
static void shard(const char *name, int n, const char *const *names)
{
    tfm_safetensors_writer *w = NULL;
    assert_int_equal(tfm_safetensors_writer_create(&w), TFM_OK);
    const int64_t shape[1] = { 1 };
    float one = 1.0f;
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_wrap(1, shape, &one, &t), TFM_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(tfm_safetensors_writer_add(w, names[i], t), TFM_OK);
    char p[4096];
    path_of(p, name);
    assert_int_equal(tfm_safetensors_writer_save(w, p), TFM_OK);
    tfm_tensor_free(t);
    tfm_safetensors_writer_free(w);
}

/* ---- kind 4: not regular files --------------------------------------- */

static void test_hub_files_not_regular(void **state)
{
    (void)state;
    for (int kind = 0; kind < 3; kind++) {
        clear_dir();
        make_odd("config.json", kind);
        expect(load_model(NULL), TFM_ERR_IO, KINDS[kind]);
        expect(load_model(NULL), TFM_ERR_IO, "config.json");
        /* the index and a shard */
        clear_dir();
        spits("config.json", GPT2_CONFIG);
        make_odd("model.safetensors.index.json", kind);
        if (kind != 2) { /* a directory is not taken for the index */
            expect(load_model(NULL), TFM_ERR_IO, KINDS[kind]);
        }
        clear_dir();
        spits("config.json", GPT2_CONFIG);
        spits("model.safetensors.index.json",
              "{\"weight_map\": {\"wte.weight\": \"a.safetensors\"}}");
        make_odd("a.safetensors", kind);
        expect(load_model(NULL), TFM_ERR_IO, KINDS[kind]);
        /* a model file or safetensors file named directly */
        clear_dir();
        make_odd("m.safetensors", kind);
        tfm_safetensors *f = SENTINEL;
        char p[4096];
        path_of(p, "m.safetensors");
        expect(tfm_safetensors_open(p, &f), TFM_ERR_IO, KINDS[kind]);
        assert_ptr_equal(f, SENTINEL);
        if (kind != 2) /* a directory is a hub checkpoint directory */
            expect(load_model("m.safetensors"), TFM_ERR_IO, KINDS[kind]);
    }
}

static void test_tokenizer_files_not_regular(void **state)
{
    (void)state;
    static const char *const names[] = { "vocab.txt", "tokenizer.json",
                                         "spiece.model", "encoder.json",
                                         "vocab.bpe" };
    for (int kind = 0; kind < 3; kind++)
        for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
            clear_dir();
            if (strcmp(names[k], "encoder.json") == 0)
                spits("vocab.bpe", "#version: 0.2\n");
            if (strcmp(names[k], "vocab.bpe") == 0)
                spits("encoder.json", "{\"a\": 0}");
            make_odd(names[k], kind);
            if (kind == 2)
                continue; /* a directory path is a checkpoint directory,
                           * and one beside a file is no file there */
            const char *open = k >= 3 ? "encoder.json" : names[k];
            expect(load_tokenizer(open), TFM_ERR_IO, KINDS[kind]);
        }
}

static void test_symlink_to_regular_file_is_read(void **state)
{
    (void)state;
    clear_dir();
    spits("real-vocab", "[PAD]\n[UNK]\nhello\n");
    char p[4096];
    path_of(p, "vocab.txt");
    assert_int_equal(symlink("real-vocab", p), 0);
    tfm_tokenizer *t = NULL;
    assert_int_equal(tfm_tokenizer_load(p, &t), TFM_OK);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 3);
    tfm_tokenizer_free(t);
    static const char *const one[] = { "x" };
    shard("blob", 1, one);
    path_of(p, "link.safetensors");
    assert_int_equal(symlink("blob", p), 0);
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(p, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_count(f), 1);
    tfm_safetensors_close(f);
}

static void test_over_cap_files(void **state)
{
    (void)state;
    clear_dir();
    make_sized("config.json", ((off_t)16 << 20) + 1);
    expect(load_model(NULL), TFM_ERR_IO, "larger than 16777216 bytes");
    clear_dir();
    make_sized("tokenizer.json", ((off_t)256 << 20) + 1);
    expect(load_tokenizer("tokenizer.json"), TFM_ERR_IO,
           "larger than 268435456 bytes");
    make_sized("vocab.txt", ((off_t)256 << 20) + 1);
    expect(load_tokenizer("vocab.txt"), TFM_ERR_IO, "larger than");
    /* at the cap: read (and refused for what it holds, zeros) */
    clear_dir();
    make_sized("config.json", (off_t)16 << 20);
    expect(load_model(NULL), TFM_ERR_FORMAT, "config.json");
}

/* ---- kind 10: invalid UTF-8 ------------------------------------------ */

static void test_invalid_utf8(void **state)
{
    (void)state;
    clear_dir();
    /* byte 29 is 0xFF: {"model_type": "gpt2", "x": " is 29 bytes
     * (1 + 12 + 2 + 6 + 2 + 3 + 2 + 1) */
    spits("config.json", "{\"model_type\": \"gpt2\", \"x\": \"\xff\"}");
    expect(load_model(NULL), TFM_ERR_FORMAT,
           "not valid UTF-8 at byte 29");
    clear_dir();
    /* "[UNK]\n" is 6 bytes, "ab" 2 more: the lone lead byte 0xC3 at 8 */
    spits("vocab.txt", "[UNK]\nab\xc3\nc\n");
    expect(load_tokenizer("vocab.txt"), TFM_ERR_FORMAT,
           "not valid UTF-8 at byte 8");
    clear_dir();
    /* an overlong '/' (0xC0 0xAF) at byte 2 of a tokenizer.json */
    spits("tokenizer.json", "{\"\xc0\xaf\": 1}");
    expect(load_tokenizer("tokenizer.json"), TFM_ERR_FORMAT,
           "not valid UTF-8 at byte 2");
    clear_dir();
    /* encoder.json's surrogate U+D800 (ED A0 80) at byte 2; vocab.bpe's
     * 0xFE at byte 17 ("#version: 0.2\n" is 14 bytes, "a " 2) */
    spits("encoder.json", "{\"\xed\xa0\x80\": 0}");
    spits("vocab.bpe", "#version: 0.2\n");
    expect(load_tokenizer("encoder.json"), TFM_ERR_FORMAT,
           "not valid UTF-8 at byte 2");
    spits("encoder.json", "{\"a\": 0, \"b\": 1}");
    spits("vocab.bpe", "#version: 0.2\na b\xfe\n");
    expect(load_tokenizer("encoder.json"), TFM_ERR_FORMAT,
           "not valid UTF-8 at byte 17");
    clear_dir();
    /* A SentencePiece model: ModelProto field 1 (pieces, wire type 2,
     * 3 bytes), a SentencePiece whose field 1 (piece, 1 byte) is 0xFF,
     * at byte 4 of the file. */
    spit("spiece.model", "\x0a\x03\x0a\x01\xff", 5);
    expect(load_tokenizer("spiece.model"), TFM_ERR_FORMAT,
           "not valid UTF-8 at byte 4");
}

/* Numbers past the double range: JSON has no infinity, but cJSON reads
 * 1e400 (> DBL_MAX, about 1.8e308) as one; every JSON door refuses it,
 * at any depth, naming the member. */
static void test_json_numbers_out_of_range(void **state)
{
    (void)state;
    clear_dir();
    spits("config.json", "{\"model_type\": \"gpt2\", \"n_embd\": 1e400}");
    expect(load_model(NULL), TFM_ERR_FORMAT,
           "the number of \"n_embd\" is out of the range of a double");
    clear_dir();
    spits("config.json", "{\"model_type\": \"gpt2\", "
                         "\"task_specific_params\": {\"x\": [1, -1e999]}}");
    expect(load_model(NULL), TFM_ERR_FORMAT, "out of the range of a double");
    clear_dir();
    spits("tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", "
                            "\"vocab\": {\"a\": 1e400}}}");
    expect(load_tokenizer("tokenizer.json"), TFM_ERR_FORMAT,
           "the number of \"a\" is out of the range of a double");
}

/* ---- kind 6: the index decides ---------------------------------------- */

static void test_shards_disagree_with_index(void **state)
{
    (void)state;
    static const char *const wte[] = { "wte.weight" };
    static const char *const wte_extra[] = { "wte.weight", "wpe.weight" };
    /* wte.weight in both shards; the index names b */
    clear_dir();
    spits("config.json", GPT2_CONFIG);
    shard("a.safetensors", 1, wte);
    shard("b.safetensors", 1, wte);
    spits("model.safetensors.index.json",
          "{\"weight_map\": {\"wte.weight\": \"b.safetensors\", "
          "\"x\": \"a.safetensors\"}}");
    expect(load_model(NULL), TFM_ERR_FORMAT, "stored in two shards");
    expect(load_model(NULL), TFM_ERR_FORMAT, "\"a.safetensors\"");
    expect(load_model(NULL), TFM_ERR_FORMAT, "\"b.safetensors\"");
    /* a tensor of a shard the index does not list */
    clear_dir();
    spits("config.json", GPT2_CONFIG);
    shard("a.safetensors", 2, wte_extra);
    spits("model.safetensors.index.json",
          "{\"weight_map\": {\"wte.weight\": \"a.safetensors\"}}");
    expect(load_model(NULL), TFM_ERR_FORMAT,
           "holds tensor \"wpe.weight\", which "
           "model.safetensors.index.json does not list");
    /* the index puts a tensor in a shard that lacks it */
    clear_dir();
    spits("config.json", GPT2_CONFIG);
    shard("a.safetensors", 1, wte);
    shard("b.safetensors", 1, (const char *const[]){ "wpe.weight" });
    spits("model.safetensors.index.json",
          "{\"weight_map\": {\"wte.weight\": \"b.safetensors\", "
          "\"wpe.weight\": \"a.safetensors\"}}");
    expect(load_model(NULL), TFM_ERR_FORMAT, "which lacks it");
}

/* A weight_map of many distinct shard names (none of them present) is
 * refused in about the time it takes to read: the shard list used to be
 * built by a scan per entry (quadratic: 150,000 names took about a
 * minute, a 16 MiB index hours).  CPU time bounded at 8 s (x 20 under
 * ASan or TSan, x 30 under valgrind); a few hundred milliseconds
 * natively. */
static void test_huge_index_is_not_quadratic(void **state)
{
    (void)state;
    enum { N = 150000 };
    clear_dir();
    spits("config.json", GPT2_CONFIG);
    char p[4096];
    path_of(p, "model.safetensors.index.json");
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs("{\"weight_map\": {", f);
    for (int i = 0; i < N; i++)
        fprintf(f, "%s\"t%d\": \"s%d.safetensors\"", i ? ", " : "", i, i);
    fputs("}}", f);
    assert_int_equal(fclose(f), 0);
    const clock_t t0 = clock();
    expect(load_model(NULL), TFM_ERR_IO, "s0.safetensors");
    const double seconds = (double)(clock() - t0) / CLOCKS_PER_SEC;
    double bound = 8.0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    bound *= 20;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    bound *= 20;
#endif
#endif
#ifdef RUNNING_ON_VALGRIND
    if (RUNNING_ON_VALGRIND)
        bound *= 30;
#endif
    if (seconds > bound)
        fail_msg("an index of %d shard names took %.1f s of CPU", N, seconds);
}

/* ---- kind 5: sizes from config.json bounded by the weights ------------ */

/* Appends a tensor name of rank 1 or 2 (b 0: [a]) filled with 0.01. */
static void add(tfm_safetensors_writer *w, const char *name, int64_t a,
                int64_t b)
{
    const int64_t shape[2] = { a, b };
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = 0.01f;
    tfm_tensor *t = NULL;
    assert_true(a * (b ? b : 1) <= 64);
    assert_int_equal(tfm_tensor_wrap(b ? 2 : 1, shape, v, &t), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add(w, name, t), TFM_OK);
    tfm_tensor_free(t);
}

static void add_linear(tfm_safetensors_writer *w, const char *prefix,
                       int64_t out, int64_t in)
{
    char n[320];
    snprintf(n, sizeof n, "%s.weight", prefix);
    add(w, n, out, in);
    snprintf(n, sizeof n, "%s.bias", prefix);
    add(w, n, out, 0);
}

/* A Marian checkpoint of width 2, one encoder and one decoder layer, 2
 * tokens, without its position tables (which the loader then computes,
 * [max_position_embeddings, 2]): 5 KB or so. */
static void tiny_marian(const char *positions)
{
    clear_dir();
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"marian\", \"d_model\": 2, "
             "\"encoder_ffn_dim\": 2, \"decoder_ffn_dim\": 2, "
             "\"encoder_attention_heads\": 1, "
             "\"decoder_attention_heads\": 1, \"encoder_layers\": 1, "
             "\"decoder_layers\": 1, \"max_position_embeddings\": %s, "
             "\"vocab_size\": 2, \"pad_token_id\": 1, "
             "\"decoder_start_token_id\": 1, \"eos_token_id\": 0}",
             positions);
    spits("config.json", cfg);
    tfm_safetensors_writer *w = NULL;
    assert_int_equal(tfm_safetensors_writer_create(&w), TFM_OK);
    add(w, "model.shared.weight", 2, 2);
    add(w, "final_logits_bias", 1, 2);
    static const char *const parts[] = { "encoder", "decoder" };
    for (int k = 0; k < 2; k++) {
        char p[256];
        static const char *const attn[] = { "self_attn", "encoder_attn" };
        for (int a = 0; a < 1 + k; a++) {
            static const char *const proj[] = { "q_proj", "k_proj", "v_proj",
                                                "out_proj" };
            for (int j = 0; j < 4; j++) {
                snprintf(p, sizeof p, "model.%s.layers.0.%s.%s", parts[k],
                         attn[a], proj[j]);
                add_linear(w, p, 2, 2);
            }
            snprintf(p, sizeof p, "model.%s.layers.0.%s_layer_norm",
                     parts[k], attn[a]);
            add_linear(w, p, 2, 0);
        }
        snprintf(p, sizeof p, "model.%s.layers.0.fc1", parts[k]);
        add_linear(w, p, 2, 2);
        snprintf(p, sizeof p, "model.%s.layers.0.fc2", parts[k]);
        add_linear(w, p, 2, 2);
        snprintf(p, sizeof p, "model.%s.layers.0.final_layer_norm",
                 parts[k]);
        add_linear(w, p, 2, 0);
    }
    char path[4096];
    path_of(path, "model.safetensors");
    assert_int_equal(tfm_safetensors_writer_save(w, path), TFM_OK);
    tfm_safetensors_writer_free(w);
}

static void test_config_sizes_bounded_by_weights(void **state)
{
    (void)state;
    /* 8 positions: a table of 16 values; the weights hold 122 (shared 4,
     * final_logits_bias 2, the encoder layer 4 x 6 + 4 + 6 + 6 + 4 = 44,
     * the decoder layer 8 x 6 + 2 x 4 + 6 + 6 + 4 = 72) */
    tiny_marian("8");
    assert_int_equal(load_model(NULL), TFM_OK);
    /* 400 million positions from a directory of a few KB: refused
     * before the table (3.2 GB) is allocated */
    tiny_marian("400000000");
    expect(load_model(NULL), TFM_ERR_FORMAT,
           "of 800000000 values, more than the 122 values");
}

int main(void)
{
    /* A reader that blocks on a FIFO ends the run here (ctest's TIMEOUT
     * is the second guard). */
    alarm(60);
    snprintf(g_dir, sizeof g_dir, "/tmp/tfm_doors_XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hub_files_not_regular),
        cmocka_unit_test(test_tokenizer_files_not_regular),
        cmocka_unit_test(test_symlink_to_regular_file_is_read),
        cmocka_unit_test(test_over_cap_files),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_json_numbers_out_of_range),
        cmocka_unit_test(test_shards_disagree_with_index),
        cmocka_unit_test(test_huge_index_is_not_quadratic),
        cmocka_unit_test(test_config_sizes_bounded_by_weights),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    clear_dir();
    rmdir(g_dir);
    return rc;
}
