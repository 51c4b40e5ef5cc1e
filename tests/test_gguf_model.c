/* GGUF files as models and tokenizers (formats/gguf_model.c,
 * formats/gguf_tokenizer.c) through the public API, for the sanitizers:
 * a tiny Llama written here byte by byte (GGUF v3 layout, ggml's docs/
 * gguf.md) with hand-worked Q8_0 blocks, loaded in place (mmap) and
 * copied, its parameters read back widened and its logits finite; a
 * SentencePiece vocabulary with hand-worked ids; the refusals.  The
 * comparisons against llama.cpp's own writer (gguf-py) and the float64
 * references are bindings/python/tests_gguf. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

#include <transformer/model.h>
#include <transformer/tokenizer.h>
#include <transformer/weights.h>

/* ---- a GGUF writer ------------------------------------------------------- */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n > 0) /* src may be NULL for nothing (UBSan: memcpy's nonnull) */
        memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s)
{
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

typedef struct file {
    buf kv, info, data;
    int n_kv, n_t;
} file;

static void kv_u32(file *f, const char *k, uint32_t v)
{
    str(&f->kv, k), u32(&f->kv, 4), u32(&f->kv, v), f->n_kv++;
}
static void kv_f32(file *f, const char *k, float v)
{
    str(&f->kv, k), u32(&f->kv, 6), put(&f->kv, &v, 4), f->n_kv++;
}
static void kv_str(file *f, const char *k, const char *v)
{
    str(&f->kv, k), u32(&f->kv, 8), str(&f->kv, v), f->n_kv++;
}
static void kv_strs(file *f, const char *k, const char *const *v, int n)
{
    str(&f->kv, k), u32(&f->kv, 9), u32(&f->kv, 8), u64(&f->kv, n);
    for (int i = 0; i < n; i++)
        str(&f->kv, v[i]);
    f->n_kv++;
}
static void kv_f32s(file *f, const char *k, const float *v, int n)
{
    str(&f->kv, k), u32(&f->kv, 9), u32(&f->kv, 6), u64(&f->kv, n);
    put(&f->kv, v, 4 * (size_t)n), f->n_kv++;
}
static void kv_i32s(file *f, const char *k, const int32_t *v, int n)
{
    str(&f->kv, k), u32(&f->kv, 9), u32(&f->kv, 5), u64(&f->kv, n);
    put(&f->kv, v, 4 * (size_t)n), f->n_kv++;
}

/* A tensor [rows, cols] (rows 0: 1-D [cols]): F32 values 1 + 0.01 i, or
 * Q8_0 blocks of d = 0.5 (fp16 0x3800) and q_i = (i % 32) - 16, so value
 * i is 0.5 ((i % 32) - 16): exact in float32. */
static void tensor(file *f, const char *name, int64_t rows, int64_t cols,
                   int q8)
{
    while (f->data.n % 32)
        put(&f->data, "", 1);
    str(&f->info, name);
    u32(&f->info, rows ? 2 : 1);
    u64(&f->info, (uint64_t)cols);
    if (rows)
        u64(&f->info, (uint64_t)rows);
    u32(&f->info, q8 ? 8 : 0);
    u64(&f->info, f->data.n);
    const int64_t n = (rows ? rows : 1) * cols;
    for (int64_t i = 0; i < n; i++) {
        if (q8) {
            if (i % 32 == 0) {
                const uint16_t d = 0x3800;
                put(&f->data, &d, 2);
            }
            const int8_t q = (int8_t)(i % 32 - 16);
            put(&f->data, &q, 1);
        } else {
            const float v = 1.0f + 0.01f * (float)(i % 50);
            put(&f->data, &v, 4);
        }
    }
    f->n_t++;
}

static void save(file *f, const char *path)
{
    buf b = { 0 };
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, (uint64_t)f->n_t);
    u64(&b, (uint64_t)f->n_kv);
    put(&b, f->kv.p, f->kv.n);
    put(&b, f->info.p, f->info.n);
    while (b.n % 32)
        put(&b, "", 1);
    put(&b, f->data.p, f->data.n);
    FILE *o = fopen(path, "wb");
    assert_non_null(o);
    assert_int_equal(fwrite(b.p, 1, b.n, o), b.n);
    fclose(o);
    free(b.p);
    free(f->kv.p), free(f->info.p), free(f->data.p);
    memset(f, 0, sizeof *f);
}

/* ---- a tiny Llama ------------------------------------------------------- */

enum { D = 32, H = 2, KV = 16, FF = 64, V = 8, CTX = 16 };

/* What `skip` names is left out; `arch` the architecture. */
static void llama(const char *path, const char *arch, const char *skip,
                  int extra)
{
    file f = { 0 };
    kv_str(&f, "general.architecture", arch);
    kv_u32(&f, "llama.block_count", 1);
    kv_u32(&f, "llama.context_length", CTX);
    kv_u32(&f, "llama.embedding_length", D);
    kv_u32(&f, "llama.feed_forward_length", FF);
    kv_u32(&f, "llama.attention.head_count", H);
    kv_u32(&f, "llama.attention.head_count_kv", 1);
    kv_f32(&f, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_u32(&f, "llama.vocab_size", V);
    static const struct { const char *name; int64_t rows, cols; int q8; } T[] = {
        { "token_embd.weight", V, D, 1 },
        { "blk.0.attn_norm.weight", 0, D, 0 },
        { "blk.0.attn_q.weight", D, D, 1 },
        { "blk.0.attn_k.weight", KV, D, 1 },
        { "blk.0.attn_v.weight", KV, D, 1 },
        { "blk.0.attn_output.weight", D, D, 1 },
        { "blk.0.ffn_norm.weight", 0, D, 0 },
        { "blk.0.ffn_gate.weight", FF, D, 1 },
        { "blk.0.ffn_up.weight", FF, D, 1 },
        { "blk.0.ffn_down.weight", D, FF, 1 },
        { "output_norm.weight", 0, D, 0 },
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!skip || strcmp(skip, T[i].name) != 0)
            tensor(&f, T[i].name, T[i].rows, T[i].cols, T[i].q8);
    if (extra)
        tensor(&f, "rope_freqs.weight", 0, 8, 0);
    save(&f, path);
}

static char dir[64];
static char path[128];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/tfm_gguf_model_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

static void check_loaded(tfm_module *m)
{
    tfm_dtype dt = TFM_DTYPE_F64;
    assert_int_equal(tfm_module_parameter_dtype(
                         m, "layers.0.self_attn.in_proj_weight", &dt),
                     TFM_OK);
    assert_int_equal(dt, TFM_DTYPE_Q8_0);
    /* q | k | v rows, each its own tensor's values 0.5 ((i % 32) - 16). */
    int64_t shape[2] = { D + 2 * KV, D };
    tfm_tensor *w = NULL;
    assert_int_equal(tfm_tensor_create(2, shape, &w), TFM_OK);
    assert_int_equal(tfm_module_get_parameter(
                         m, "layers.0.self_attn.in_proj_weight", w),
                     TFM_OK);
    const float *x = tfm_tensor_data(w);
    for (int64_t i = 0; i < (D + 2 * KV) * D; i++)
        assert_true(x[i] == 0.5f * (float)(i % 32 - 16));
    tfm_tensor_free(w);
    int64_t ls[3] = { 1, 4, V };
    tfm_tensor *logits = NULL;
    const int32_t ids[4] = { 1, 2, 3, 7 };
    assert_int_equal(tfm_tensor_create(3, ls, &logits), TFM_OK);
    assert_int_equal(tfm_model_logits(m, ids, 1, 4, logits), TFM_OK);
    for (int i = 0; i < 4 * V; i++)
        assert_true(isfinite(tfm_tensor_data(logits)[i]));
    tfm_tensor_free(logits);
}

static void test_llama_loads(void **state)
{
    (void)state;
    llama(path, "llama", NULL, 0);
    for (int mmap = 0; mmap <= 1; mmap++) {
        tfm_load_options o;
        tfm_load_options_init(&o);
        o.dtype = TFM_LOAD_DTYPE_AUTO;
        o.mmap = mmap;
        tfm_module *m = NULL;
        assert_int_equal(tfm_model_load_v2(path, &o, &m), TFM_OK);
        check_loaded(m);
        tfm_module_free(m);
    }
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_load(path, &m), TFM_OK);
    check_loaded(m);
    tfm_module_free(m);
}

static void test_refusals(void **state)
{
    (void)state;
    tfm_module *m = (tfm_module *)&m; /* stays as it is on error */
    tfm_module *const before = m;
    llama(path, "llama", "blk.0.attn_v.weight", 0);
    assert_int_equal(tfm_model_load(path, &m), TFM_ERR_FORMAT);
    assert_non_null(strstr(tfm_last_error(), "blk.0.attn_v.weight"));
    llama(path, "llama", NULL, 1);
    assert_int_equal(tfm_model_load(path, &m), TFM_ERR_UNSUPPORTED);
    assert_non_null(strstr(tfm_last_error(), "rope_freqs.weight"));
    llama(path, "falcon", NULL, 0);
    assert_int_equal(tfm_model_load(path, &m), TFM_ERR_UNSUPPORTED);
    assert_non_null(strstr(tfm_last_error(), "falcon"));
    /* Truncated: the last tensor's bytes are missing. */
    llama(path, "llama", NULL, 0);
    FILE *f = fopen(path, "rb+");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(path, size - 40), 0);
    assert_int_not_equal(tfm_model_load(path, &m), TFM_OK);
    assert_ptr_equal(m, before);
}

/* A SentencePiece BPE vocabulary ("llama"): pieces <unk> <s> </s> ▁ a b
 * ▁a ab with scores 0 0 0 -3 -4 -5 -1 -2.  "a ab" is "▁a▁ab" after the
 * dummy prefix and the space's escape; BPE merges the best-scoring
 * adjacent pair first, leftmost on ties: ▁a (-1) twice, giving ▁a ▁a b;
 * ▁ab is no piece, so that is final: ids 6 6 5, after <s> (1) since
 * add_bos_token defaults to true. */
static void test_sentencepiece_tokenizer(void **state)
{
    (void)state;
    static const char *const tokens[] = {
        "<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b",
        "\xe2\x96\x81" "a", "ab",
    };
    static const float scores[] = { 0, 0, 0, -3, -4, -5, -1, -2 };
    static const int32_t types[] = { 2, 3, 3, 1, 1, 1, 1, 1 };
    file f = { 0 };
    kv_str(&f, "general.architecture", "llama");
    kv_str(&f, "tokenizer.ggml.model", "llama");
    kv_strs(&f, "tokenizer.ggml.tokens", tokens, 8);
    kv_f32s(&f, "tokenizer.ggml.scores", scores, 8);
    kv_i32s(&f, "tokenizer.ggml.token_type", types, 8);
    kv_u32(&f, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(&f, "tokenizer.ggml.eos_token_id", 2);
    kv_u32(&f, "tokenizer.ggml.unknown_token_id", 0);
    save(&f, path);
    tfm_tokenizer *t = NULL;
    assert_int_equal(tfm_tokenizer_load(path, &t), TFM_OK);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 8);
    int32_t ids[8];
    int64_t n = 0;
    assert_int_equal(tfm_tokenizer_encode_v2(t, "a ab", 4, NULL, 0,
                                             TFM_ENCODE_ADD_SPECIAL, ids,
                                             NULL, NULL, 8, &n),
                     TFM_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 6);
    assert_int_equal(ids[2], 6);
    assert_int_equal(ids[3], 5);
    tfm_tokenizer_free(t);
    /* Another tokenizer model is refused by name. */
    kv_str(&f, "tokenizer.ggml.model", "rwkv");
    save(&f, path);
    t = NULL;
    assert_int_equal(tfm_tokenizer_load(path, &t), TFM_ERR_UNSUPPORTED);
    assert_non_null(strstr(tfm_last_error(), "rwkv"));
    assert_null(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_loads),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_sentencepiece_tokenizer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
