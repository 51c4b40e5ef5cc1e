/* Out-of-memory injection: every allocation of every operation fails once.
 *
 * For each operation below and for k = 1, 2, ... the k-th heap allocation
 * the library makes from the start of the call is made to fail (the test
 * hook tfm_testing_fail_allocation of src/alloc.c), until a call succeeds
 * without the failure having been reached.  Every attempt must
 *   - return TFM_ERR_OUT_OF_MEMORY with a message, or succeed (a failure
 *     the library can absorb, such as a failed merge of workspace chunks,
 *     is allowed, and the result must then be exact);
 *   - on failure leave its outputs and handles as they were: *out
 *     pointers, output tensors, the KV cache's length, files on disk;
 *   - leave the handles it was given usable (the next call on them gives
 *     the reference result);
 *   - on success give bit for bit the result of a call without injection;
 *   - leak nothing: tools/reliability.sh runs this binary under valgrind
 *     (and the ASan build under LeakSanitizer).
 * The per-thread workspace keeps its memory between calls, so it is
 * released before every attempt: scratch allocations fail too.
 *
 * cJSON's allocations (parsing and printing safetensors headers) go
 * through cJSON's own hooks, not the library's wrappers; a second pass
 * (test_cjson_allocations) fails them one by one through cJSON_InitHooks.
 * cJSON does not tell a failed allocation from a syntax error, so a parse
 * may then fail with TFM_ERR_FORMAT ("header is not valid JSON").
 *
 * The summary printed at the end (allocations per operation, how many k
 * failed with TFM_ERR_OUT_OF_MEMORY and how many were absorbed) is what
 * docs/TESTING.md quotes. */
#include <dirent.h>
#include <math.h>
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
#include <cJSON.h>

#include <transformer/transformer.h>

/* Exported by the library for tests only (src/alloc.c); not in any public
 * header.  The k-th allocation from now fails; 0 disarms. */
void tfm_testing_fail_allocation(long k);

#ifndef TFM_MODELS_DIR
#error "TFM_MODELS_DIR must point at tests/models"
#endif
#ifndef TFM_TEST_DATA_DIR
#error "TFM_TEST_DATA_DIR must point at tests/data"
#endif

#define MAX_K 100000L
#define SENTINEL 1234.5f
#define BAD_HANDLE ((void *)(uintptr_t)0x5eed)

/* ---- the injection loop ------------------------------------------------ */

typedef struct oom_case {
    const char *name;
    void (*setup)(void *ctx);       /* before each attempt, not injected */
    tfm_status (*run)(void *ctx);   /* the operation, injected */
    void (*on_oom)(void *ctx);      /* checks after a failed attempt */
    void (*on_ok)(void *ctx);       /* checks after a successful one */
    void (*teardown)(void *ctx);    /* after each attempt, not injected */
    void *ctx;
} oom_case;

typedef struct oom_stats {
    char name[64];
    long allocations;   /* allocations of one successful call */
    long failed;        /* k values that gave TFM_ERR_OUT_OF_MEMORY */
    long absorbed;      /* k values that failed an allocation but succeeded */
} oom_stats;

static oom_stats stats[128];
static int n_stats;

/* After a call returned TFM_OK with the k-th allocation armed: whether the
 * failure never came (the call made fewer than k allocations), and then
 * how many it made.  tfm_safetensors_writer_create makes exactly one
 * allocation, so it probes the counter. */
static int still_armed(long k, long *used)
{
    for (long i = 0; i < k; i++) {
        tfm_safetensors_writer *w = NULL;
        if (tfm_safetensors_writer_create(&w) != TFM_OK) {
            *used = k - 1 - i;
            return 1;
        }
        tfm_safetensors_writer_free(w);
    }
    return 0;
}

static void run_case(const oom_case *c)
{
    oom_stats *s = &stats[n_stats < 127 ? n_stats++ : 127];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", c->name);
    for (long k = 1;; k++) {
        if (k > MAX_K)
            fail_msg("%s: still failing after %ld allocations", c->name, k);
        if (c->setup)
            c->setup(c->ctx);
        tfm_workspace_release();
        tfm_clear_error();
        tfm_testing_fail_allocation(k);
        tfm_status st = c->run(c->ctx);
        long used = -1;
        int armed = st == TFM_OK && still_armed(k, &used);
        tfm_testing_fail_allocation(0);
        if (st == TFM_ERR_OUT_OF_MEMORY) {
            if (tfm_last_error()[0] == '\0')
                fail_msg("%s, k = %ld: out of memory without a message",
                         c->name, k);
            s->failed++;
            if (c->on_oom)
                c->on_oom(c->ctx);
        } else if (st != TFM_OK) {
            fail_msg("%s, k = %ld: status %d (%s), expected out of memory: %s",
                     c->name, k, (int)st, tfm_status_string(st),
                     tfm_last_error());
        } else {
            if (!armed)
                s->absorbed++;
            if (c->on_ok)
                c->on_ok(c->ctx);
        }
        if (c->teardown)
            c->teardown(c->ctx);
        if (armed) {
            s->allocations = used;
            break;
        }
    }
    tfm_workspace_release();
}

static int print_summary(void **state)
{
    (void)state;
    printf("\nOut-of-memory injection (k = 1 .. allocations + 1 per "
           "operation):\n");
    printf("  %-44s %11s %8s %8s\n", "operation", "allocations", "failed",
           "absorbed");
    long total = 0;
    for (int i = 0; i < n_stats; i++) {
        printf("  %-44s %11ld %8ld %8ld\n", stats[i].name,
               stats[i].allocations, stats[i].failed, stats[i].absorbed);
        total += stats[i].allocations + 1;
    }
    printf("  %d operations, %ld injected calls in all\n", n_stats, total);
    return 0;
}

/* ---- helpers ----------------------------------------------------------- */

static uint32_t lcg_state;

static float next_value(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return ((float)(lcg_state >> 8) / 16777216.0f - 0.5f);
}

static tfm_tensor *tensor(int rank, int64_t a, int64_t b, int64_t c,
                          int64_t d)
{
    const int64_t shape[4] = { a, b, c, d };
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_create(rank, shape, &t), TFM_OK);
    return t;
}

static tfm_tensor *random_tensor(int rank, int64_t a, int64_t b, int64_t c,
                                 int64_t d)
{
    tfm_tensor *t = tensor(rank, a, b, c, d);
    float *x = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        x[i] = next_value();
    return t;
}

static tfm_tensor *clone(const tfm_tensor *t)
{
    int64_t shape[TFM_MAX_RANK];
    for (int i = 0; i < tfm_tensor_rank(t); i++)
        shape[i] = tfm_tensor_dim(t, i);
    tfm_tensor *c = NULL;
    assert_int_equal(tfm_tensor_create_copy(tfm_tensor_rank(t), shape,
                                            tfm_tensor_data_const(t), &c),
                     TFM_OK);
    return c;
}

static void fill(tfm_tensor *t, float v)
{
    float *x = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        x[i] = v;
}

static void assert_filled(const tfm_tensor *t, float v, const char *what)
{
    const float *x = tfm_tensor_data_const(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        if (x[i] != v)
            fail_msg("%s was written by a failed call (element %lld)", what,
                     (long long)i);
}

static void assert_same(const tfm_tensor *a, const tfm_tensor *b,
                        const char *what)
{
    assert_int_equal(tfm_tensor_numel(a), tfm_tensor_numel(b));
    if (memcmp(tfm_tensor_data_const(a), tfm_tensor_data_const(b),
               (size_t)tfm_tensor_numel(a) * sizeof(float)) != 0)
        fail_msg("%s differs from the run without injection", what);
}

/* Gives every parameter deterministic values in [-0.5, 0.5). */
static void randomize(tfm_module *m, uint32_t seed)
{
    lcg_state = seed;
    for (int i = 0; i < tfm_module_parameter_count(m); i++) {
        const char *name = tfm_module_parameter_name(m, i);
        int rank;
        int64_t s[TFM_MAX_RANK] = { 1, 1, 1, 1 };
        assert_int_equal(tfm_module_parameter_shape(m, name, &rank, s),
                         TFM_OK);
        tfm_tensor *t = random_tensor(rank, s[0], s[1], s[2], s[3]);
        assert_int_equal(tfm_module_set_parameter(m, name, t), TFM_OK);
        tfm_tensor_free(t);
    }
}

/* Two modules have the same parameter names, shapes and values. */
static void assert_same_module(const tfm_module *a, const tfm_module *b)
{
    assert_int_equal(tfm_module_kind_of(a), tfm_module_kind_of(b));
    assert_int_equal(tfm_module_parameter_count(a),
                     tfm_module_parameter_count(b));
    for (int i = 0; i < tfm_module_parameter_count(a); i++) {
        const char *name = tfm_module_parameter_name(a, i);
        assert_string_equal(name, tfm_module_parameter_name(b, i));
        int rank;
        int64_t s[TFM_MAX_RANK] = { 1, 1, 1, 1 };
        assert_int_equal(tfm_module_parameter_shape(a, name, &rank, s),
                         TFM_OK);
        tfm_tensor *x = tensor(rank, s[0], s[1], s[2], s[3]);
        tfm_tensor *y = tensor(rank, s[0], s[1], s[2], s[3]);
        assert_int_equal(tfm_module_get_parameter(a, name, x), TFM_OK);
        assert_int_equal(tfm_module_get_parameter(b, name, y), TFM_OK);
        assert_same(x, y, name);
        tfm_tensor_free(x);
        tfm_tensor_free(y);
    }
}

static tfm_layer_config small_config(int norm_first)
{
    tfm_layer_config c = tfm_layer_config_default(8, 2);
    c.d_ff = 16;
    c.activation = norm_first ? TFM_ACTIVATION_GELU : TFM_ACTIVATION_RELU;
    c.norm_first = norm_first;
    return c;
}

static tfm_model_config model_config(tfm_architecture arch, int64_t vocab)
{
    tfm_model_config c;
    memset(&c, 0, sizeof c);
    c.architecture = arch;
    c.layer = small_config(arch == TFM_ARCH_ENCODER_ONLY);
    c.vocab_size = vocab;
    c.n_layers = 2;
    c.n_encoder_layers = 2;
    c.n_decoder_layers = 2;
    c.context_length = 6;
    c.positional = arch == TFM_ARCH_ENCODER_DECODER
                       ? TFM_POSITIONAL_SINUSOIDAL
                       : TFM_POSITIONAL_LEARNED;
    c.tied_embeddings = arch != TFM_ARCH_DECODER_ONLY;
    c.embedding_scale = arch == TFM_ARCH_ENCODER_DECODER;
    return c;
}

/* ---- creating layers and models ---------------------------------------- */

typedef struct create_ctx {
    tfm_status (*create)(const struct create_ctx *c, tfm_module **out);
    tfm_layer_config config;
    tfm_model_config model;
    tfm_module *out;
    tfm_module *reference;
} create_ctx;

static tfm_status create_mha(const create_ctx *c, tfm_module **out)
{
    (void)c;
    return tfm_mha_create(8, 2, 0, 0, 1, out);
}

static tfm_status create_mha_kv(const create_ctx *c, tfm_module **out)
{
    (void)c;
    return tfm_mha_create(8, 4, 5, 3, 0, out);
}

static tfm_status create_layer_norm(const create_ctx *c, tfm_module **out)
{
    (void)c;
    return tfm_layer_norm_create(8, 1e-5f, out);
}

static tfm_status create_feed_forward(const create_ctx *c, tfm_module **out)
{
    (void)c;
    return tfm_feed_forward_create(8, 16, TFM_ACTIVATION_GELU_TANH, out);
}

static tfm_status create_encoder_layer(const create_ctx *c, tfm_module **out)
{
    return tfm_encoder_layer_create(&c->config, out);
}

static tfm_status create_decoder_layer(const create_ctx *c, tfm_module **out)
{
    return tfm_decoder_layer_create(&c->config, out);
}

static tfm_status create_cross_attention(const create_ctx *c,
                                         tfm_module **out)
{
    return tfm_cross_attention_create(&c->config, out);
}

static tfm_status create_encoder(const create_ctx *c, tfm_module **out)
{
    return tfm_encoder_create(&c->config, 3, 1, out);
}

static tfm_status create_decoder(const create_ctx *c, tfm_module **out)
{
    return tfm_decoder_create(&c->config, 2, 0, out);
}

static tfm_status create_transformer(const create_ctx *c, tfm_module **out)
{
    return tfm_transformer_create(&c->config, 2, 2, out);
}

static tfm_status create_embedding(const create_ctx *c, tfm_module **out)
{
    (void)c;
    return tfm_embedding_create(13, 8, 1, out);
}

static tfm_status create_model(const create_ctx *c, tfm_module **out)
{
    return tfm_model_create(&c->model, out);
}

/* ---- attention variants (variants.h) */

/* T5 buckets with a BigBird pattern (global, window, random blocks). */
static tfm_attention_config t5_bigbird(void)
{
    tfm_attention_config a;
    tfm_attention_config_init(&a);
    a.relative = TFM_RELATIVE_T5;
    a.num_buckets = 8;
    a.max_distance = 6;
    a.sparsity = TFM_SPARSE_BIGBIRD;
    a.block_size = 2;
    a.n_global = 1;
    a.n_random_blocks = 2;
    a.seed = 3;
    return a;
}

/* Shaw on keys and values, with a learned temperature. */
static tfm_attention_config shaw_values(void)
{
    tfm_attention_config a;
    tfm_attention_config_init(&a);
    a.score = TFM_SCORE_LEARNED_TEMPERATURE;
    a.relative = TFM_RELATIVE_SHAW;
    a.max_distance = 2;
    a.relative_values = 1;
    return a;
}

/* Grouped-query attention (2 key/value heads of 4) with RoPE, ALiBi and a
 * sliding window. */
static tfm_attention_config gqa_rope(void)
{
    tfm_attention_config a;
    tfm_attention_config_init(&a);
    a.n_kv_heads = 2;
    a.rope = TFM_ROPE_HALF;
    a.relative = TFM_RELATIVE_ALIBI;
    a.sparsity = TFM_SPARSE_SLIDING_WINDOW;
    a.window = 2;
    return a;
}

static tfm_status create_attention_t5_bigbird(const create_ctx *c,
                                              tfm_module **out)
{
    (void)c;
    const tfm_attention_config a = t5_bigbird();
    return tfm_attention_create(4, 3, 2, &a, out);
}

static tfm_status create_attention_shaw(const create_ctx *c, tfm_module **out)
{
    (void)c;
    const tfm_attention_config a = shaw_values();
    return tfm_attention_create(4, 3, 2, &a, out);
}

static tfm_status create_mha_gqa(const create_ctx *c, tfm_module **out)
{
    (void)c;
    const tfm_attention_config a = gqa_rope();
    return tfm_mha_create_ex(8, 4, 0, 0, 1, &a, out);
}

static tfm_status create_model_variant(const create_ctx *c, tfm_module **out)
{
    tfm_model_options o;
    tfm_model_options_init(&o);
    o.attention = gqa_rope();
    return tfm_model_create_ex(&c->model, &o, out);
}

/* A decoder-only model (context 6, vocab 11) with the GQA/RoPE/ALiBi/
 * window variant and no position table. */
static tfm_module *variant_model(uint32_t seed)
{
    tfm_model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.architecture = TFM_ARCH_DECODER_ONLY;
    mc.layer = small_config(0);
    mc.layer.n_heads = 4;
    mc.vocab_size = 11;
    mc.n_layers = 2;
    mc.context_length = 6;
    mc.positional = TFM_POSITIONAL_NONE;
    mc.tied_embeddings = 1;
    tfm_module *m = NULL;
    const create_ctx c = { .model = mc };
    assert_int_equal(create_model_variant(&c, &m), TFM_OK);
    randomize(m, seed);
    return m;
}

static void create_setup(void *p)
{
    ((create_ctx *)p)->out = BAD_HANDLE;
}

static tfm_status create_run(void *p)
{
    create_ctx *c = p;
    return c->create(c, &c->out);
}

static void create_on_oom(void *p)
{
    create_ctx *c = p;
    assert_ptr_equal(c->out, BAD_HANDLE);
}

static void create_on_ok(void *p)
{
    create_ctx *c = p;
    assert_ptr_not_equal(c->out, BAD_HANDLE);
    assert_same_module(c->out, c->reference);
    tfm_module_free(c->out);
}

static void check_create(const char *name,
                         tfm_status (*create)(const create_ctx *,
                                              tfm_module **),
                         const tfm_model_config *model)
{
    create_ctx c = { .create = create, .config = small_config(1) };
    if (model)
        c.model = *model;
    assert_int_equal(create(&c, &c.reference), TFM_OK);
    oom_case oc = { name, create_setup, create_run, create_on_oom,
                    create_on_ok, NULL, &c };
    run_case(&oc);
    tfm_module_free(c.reference);
}

static void test_create_layers(void **state)
{
    (void)state;
    check_create("tfm_mha_create (packed, bias)", create_mha, NULL);
    check_create("tfm_mha_create (kdim, vdim, no bias)", create_mha_kv, NULL);
    check_create("tfm_layer_norm_create", create_layer_norm, NULL);
    check_create("tfm_feed_forward_create", create_feed_forward, NULL);
    check_create("tfm_encoder_layer_create", create_encoder_layer, NULL);
    check_create("tfm_decoder_layer_create", create_decoder_layer, NULL);
    check_create("tfm_cross_attention_create", create_cross_attention, NULL);
    check_create("tfm_encoder_create (3 layers, norm)", create_encoder, NULL);
    check_create("tfm_decoder_create (2 layers)", create_decoder, NULL);
    check_create("tfm_transformer_create (2+2 layers)", create_transformer,
                 NULL);
    check_create("tfm_embedding_create", create_embedding, NULL);
    check_create("tfm_attention_create (T5, BigBird)",
                 create_attention_t5_bigbird, NULL);
    check_create("tfm_attention_create (Shaw values, temp.)",
                 create_attention_shaw, NULL);
    check_create("tfm_mha_create_ex (GQA, RoPE, ALiBi, window)",
                 create_mha_gqa, NULL);
}

static void test_create_models(void **state)
{
    (void)state;
    tfm_model_config dec = model_config(TFM_ARCH_DECODER_ONLY, 11);
    tfm_model_config enc = model_config(TFM_ARCH_ENCODER_ONLY, 11);
    tfm_model_config s2s = model_config(TFM_ARCH_ENCODER_DECODER, 11);
    check_create("tfm_model_create (decoder-only, untied)", create_model,
                 &dec);
    check_create("tfm_model_create (encoder-only)", create_model, &enc);
    check_create("tfm_model_create (encoder-decoder)", create_model, &s2s);
    tfm_model_config var = dec;
    var.layer.n_heads = 4;
    var.positional = TFM_POSITIONAL_NONE;
    check_create("tfm_model_create_ex (GQA, RoPE, window)",
                 create_model_variant, &var);
}

/* ---- small objects: tensors, caches, tokenizers, writers ---------------- */

typedef struct small_ctx {
    int which;
    void *out;
    const tfm_module *model;
} small_ctx;

static void small_setup(void *p)
{
    ((small_ctx *)p)->out = BAD_HANDLE;
}

static tfm_status small_run(void *p)
{
    small_ctx *c = p;
    static const int64_t shape[3] = { 2, 3, 4 };
    static float data[24];
    switch (c->which) {
    case 0: return tfm_tensor_create(3, shape, (tfm_tensor **)&c->out);
    case 1: return tfm_tensor_create_copy(3, shape, data,
                                          (tfm_tensor **)&c->out);
    case 2: return tfm_tensor_wrap(3, shape, data, (tfm_tensor **)&c->out);
    case 3: return tfm_kv_cache_create(c->model, 5,
                                       (tfm_kv_cache **)&c->out);
    case 4: return tfm_tokenizer_create("abc\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e",
                                        (tfm_tokenizer **)&c->out);
    default: return tfm_safetensors_writer_create(
                 (tfm_safetensors_writer **)&c->out);
    }
}

static void small_on_oom(void *p)
{
    assert_ptr_equal(((small_ctx *)p)->out, BAD_HANDLE);
}

static void small_on_ok(void *p)
{
    small_ctx *c = p;
    assert_ptr_not_equal(c->out, BAD_HANDLE);
    switch (c->which) {
    case 0: case 1: case 2:
        assert_int_equal(tfm_tensor_numel(c->out), 24);
        tfm_tensor_free(c->out);
        break;
    case 3:
        assert_int_equal(tfm_kv_cache_capacity(c->out), 5);
        tfm_kv_cache_free(c->out);
        break;
    case 4:
        assert_int_equal(tfm_tokenizer_vocab_size(c->out), 6);
        tfm_tokenizer_free(c->out);
        break;
    default:
        tfm_safetensors_writer_free(c->out);
    }
}

static void test_create_small(void **state)
{
    (void)state;
    static const char *const names[] = {
        "tfm_tensor_create", "tfm_tensor_create_copy", "tfm_tensor_wrap",
        "tfm_kv_cache_create", "tfm_tokenizer_create",
        "tfm_safetensors_writer_create",
    };
    tfm_model_config mc = model_config(TFM_ARCH_DECODER_ONLY, 11);
    tfm_module *model = NULL;
    assert_int_equal(tfm_model_create(&mc, &model), TFM_OK);
    for (int i = 0; i < 6; i++) {
        small_ctx c = { i, NULL, model };
        oom_case oc = { names[i], small_setup, small_run, small_on_oom,
                        small_on_ok, NULL, &c };
        run_case(&oc);
    }
    tfm_module_free(model);
}

/* ---- loading and saving files ------------------------------------------ */

static char tmp_dir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "%s/tfm_oom_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

/* Removes every file in tmp_dir, then the folder. */
static int teardown_tmp(void **state)
{
    (void)state;
    DIR *d = opendir(tmp_dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            char path[512];
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(tmp_dir);
    return print_summary(state);
}

/* Number of entries in tmp_dir. */
static int tmp_files(void)
{
    int n = 0;
    DIR *d = opendir(tmp_dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

typedef struct load_ctx {
    char path[512];
    tfm_module *out;
    tfm_module *reference;
} load_ctx;

static void load_setup(void *p)
{
    ((load_ctx *)p)->out = BAD_HANDLE;
}

static tfm_status load_run(void *p)
{
    load_ctx *c = p;
    return tfm_model_load(c->path, &c->out);
}

static void load_on_oom(void *p)
{
    assert_ptr_equal(((load_ctx *)p)->out, BAD_HANDLE);
}

static void load_on_ok(void *p)
{
    load_ctx *c = p;
    assert_same_module(c->out, c->reference);
    tfm_module_free(c->out);
}

static void test_model_load(void **state)
{
    (void)state;
    static const char *const files[] = {
        "decoder_learned_prenorm_gelu",
        "decoder_sinusoidal_postnorm_relu_untied",
        "encoder_only_learned",
        "encoder_decoder_sinusoidal",
    };
    for (int i = 0; i < 4; i++) {
        load_ctx c;
        char name[96];
        snprintf(c.path, sizeof c.path, "%s/%s.safetensors", TFM_MODELS_DIR,
                 files[i]);
        assert_int_equal(tfm_model_load(c.path, &c.reference), TFM_OK);
        snprintf(name, sizeof name, "tfm_model_load %s", files[i]);
        oom_case oc = { name, load_setup, load_run, load_on_oom, load_on_ok,
                        NULL, &c };
        run_case(&oc);
        tfm_module_free(c.reference);
    }
}

/* tfm_module_load_safetensors: all or nothing, so a failed attempt leaves
 * every parameter as it was (the module is refilled with known values
 * before each attempt). */
typedef struct ckpt_ctx {
    char path[512];
    const char *prefix;
    int strict;
    tfm_module *module;     /* loaded into */
    tfm_module *before;     /* its parameters before each attempt */
    tfm_module *after;      /* and after a successful load */
} ckpt_ctx;

static void ckpt_setup(void *p)
{
    randomize(((ckpt_ctx *)p)->module, 77);
}

static tfm_status ckpt_run(void *p)
{
    ckpt_ctx *c = p;
    return tfm_module_load_safetensors(c->module, c->path, c->prefix,
                                       c->strict);
}

static void ckpt_on_oom(void *p)
{
    ckpt_ctx *c = p;
    assert_same_module(c->module, c->before);
}

static void ckpt_on_ok(void *p)
{
    ckpt_ctx *c = p;
    assert_same_module(c->module, c->after);
}

static void check_checkpoint(const char *name, ckpt_ctx *c,
                             tfm_module *(*make)(const tfm_model_config *))
{
    tfm_module *ref = NULL;
    tfm_model_config mc;
    assert_int_equal(tfm_model_load(c->path, &ref), TFM_OK);
    assert_int_equal(tfm_model_get_config(ref, &mc), TFM_OK);
    c->module = make(&mc);
    c->before = make(&mc);
    c->after = make(&mc);
    randomize(c->before, 77);
    randomize(c->after, 77);
    assert_int_equal(tfm_module_load_safetensors(c->after, c->path, c->prefix,
                                                 c->strict), TFM_OK);
    oom_case oc = { name, ckpt_setup, ckpt_run, ckpt_on_oom, ckpt_on_ok, NULL,
                    c };
    run_case(&oc);
    tfm_module_free(ref);
    tfm_module_free(c->module);
    tfm_module_free(c->before);
    tfm_module_free(c->after);
}

static tfm_module *make_model(const tfm_model_config *mc)
{
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create(mc, &m), TFM_OK);
    return m;
}

static tfm_module *make_encoder_layer(const tfm_model_config *mc)
{
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_layer_create(&mc->layer, &m), TFM_OK);
    return m;
}

static void test_module_load_safetensors(void **state)
{
    (void)state;
    ckpt_ctx c;
    memset(&c, 0, sizeof c);
    snprintf(c.path, sizeof c.path, "%s/decoder_learned_prenorm_gelu"
             ".safetensors", TFM_MODELS_DIR);
    c.strict = 1;
    check_checkpoint("tfm_module_load_safetensors (model, strict)", &c,
                     make_model);
    c.prefix = "layers.1.";
    c.strict = 0;
    check_checkpoint("tfm_module_load_safetensors (layer, prefix)", &c,
                     make_encoder_layer);
}

/* tfm_model_save of a model with tokenizer metadata, then
 * tfm_tokenizer_load of the file it wrote. */
typedef struct save_ctx {
    tfm_module *model;
    char path[512];
    unsigned char *reference;
    long reference_size;
    tfm_tokenizer *tokenizer;
} save_ctx;

static const char *const tok_keys[2] = { "tfm.tokenizer", "tfm.vocab" };
static const char *const tok_values[2] = { "char", "abcdefghij\xe2\x82\xac" };

static unsigned char *read_file(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*size);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)*size, f), (size_t)*size);
    fclose(f);
    return b;
}

static void save_setup(void *p)
{
    unlink(((save_ctx *)p)->path);
}

static tfm_status save_run(void *p)
{
    save_ctx *c = p;
    return tfm_model_save(c->model, c->path, 2, tok_keys, tok_values);
}

static void save_on_oom(void *p)
{
    save_ctx *c = p;
    /* No file, and no temporary file left behind. */
    assert_int_equal(access(c->path, F_OK), -1);
    assert_int_equal(tmp_files(), 0);
}

static void save_on_ok(void *p)
{
    save_ctx *c = p;
    long size;
    unsigned char *b = read_file(c->path, &size);
    assert_int_equal(size, c->reference_size);
    assert_memory_equal(b, c->reference, (size_t)size);
    free(b);
    unlink(c->path);
}

static void tok_setup(void *p)
{
    ((save_ctx *)p)->tokenizer = BAD_HANDLE;
}

static tfm_status tok_run(void *p)
{
    save_ctx *c = p;
    return tfm_tokenizer_load(c->path, &c->tokenizer);
}

static void tok_on_oom(void *p)
{
    assert_ptr_equal(((save_ctx *)p)->tokenizer, BAD_HANDLE);
}

static void tok_on_ok(void *p)
{
    save_ctx *c = p;
    assert_int_equal(tfm_tokenizer_vocab_size(c->tokenizer), 11);
    tfm_tokenizer_free(c->tokenizer);
}

static void test_model_save_and_tokenizer_load(void **state)
{
    (void)state;
    save_ctx c;
    memset(&c, 0, sizeof c);
    tfm_model_config mc = model_config(TFM_ARCH_DECODER_ONLY, 11);
    assert_int_equal(tfm_model_create(&mc, &c.model), TFM_OK);
    randomize(c.model, 7);
    snprintf(c.path, sizeof c.path, "%s/model.safetensors", tmp_dir);
    assert_int_equal(save_run(&c), TFM_OK);
    c.reference = read_file(c.path, &c.reference_size);
    unlink(c.path);

    oom_case save = { "tfm_model_save", save_setup, save_run, save_on_oom,
                      save_on_ok, NULL, &c };
    run_case(&save);

    assert_int_equal(save_run(&c), TFM_OK);
    oom_case tok = { "tfm_tokenizer_load", tok_setup, tok_run, tok_on_oom,
                     tok_on_ok, NULL, &c };
    run_case(&tok);
    unlink(c.path);
    free(c.reference);
    tfm_module_free(c.model);
}

/* ---- safetensors ------------------------------------------------------- */

typedef struct st_ctx {
    char path[512];
    unsigned char *bytes;
    long size;
    int memory;
    tfm_safetensors *out;
    tfm_safetensors *open;        /* for reading */
    tfm_tensor *read[8];
    int n_read;
} st_ctx;

static void st_open_setup(void *p)
{
    ((st_ctx *)p)->out = BAD_HANDLE;
}

static tfm_status st_open_run(void *p)
{
    st_ctx *c = p;
    return c->memory
               ? tfm_safetensors_open_memory(c->bytes, (size_t)c->size,
                                             &c->out)
               : tfm_safetensors_open(c->path, &c->out);
}

static void st_open_on_oom(void *p)
{
    assert_ptr_equal(((st_ctx *)p)->out, BAD_HANDLE);
}

static void st_open_on_ok(void *p)
{
    st_ctx *c = p;
    assert_int_equal(tfm_safetensors_count(c->out),
                     tfm_safetensors_count(c->open));
    assert_int_equal(tfm_safetensors_metadata_count(c->out),
                     tfm_safetensors_metadata_count(c->open));
    for (int64_t i = 0; i < tfm_safetensors_count(c->out); i++)
        assert_string_equal(tfm_safetensors_name(c->out, i),
                            tfm_safetensors_name(c->open, i));
    tfm_safetensors_close(c->out);
}

/* Reads every float tensor; on failure frees what it read and leaves the
 * failed read's *out alone. */
static tfm_status st_read_run(void *p)
{
    st_ctx *c = p;
    c->n_read = 0;
    for (int64_t i = 0; i < tfm_safetensors_count(c->open); i++) {
        const char *name = tfm_safetensors_name(c->open, i);
        tfm_dtype dt;
        assert_int_equal(tfm_safetensors_info(c->open, name, &dt, NULL, NULL),
                         TFM_OK);
        if (dt != TFM_DTYPE_F32 && dt != TFM_DTYPE_F16 &&
            dt != TFM_DTYPE_BF16 && dt != TFM_DTYPE_F64)
            continue;
        tfm_tensor *t = BAD_HANDLE;
        tfm_status st = tfm_safetensors_read(c->open, name, &t);
        if (st != TFM_OK) {
            assert_ptr_equal(t, BAD_HANDLE);
            return st;
        }
        c->read[c->n_read++] = t;
    }
    return TFM_OK;
}

static void st_read_teardown(void *p)
{
    st_ctx *c = p;
    for (int i = 0; i < c->n_read; i++)
        tfm_tensor_free(c->read[i]);
    c->n_read = 0;
}

static void st_read_on_ok(void *p)
{
    st_ctx *c = p;
    assert_int_equal(c->n_read, 5);
}

/* A writer session: create, add tensors, set and replace metadata, save. */
static tfm_status st_write_run(void *p)
{
    st_ctx *c = p;
    tfm_safetensors_writer *w = NULL;
    tfm_status st = tfm_safetensors_writer_create(&w);
    for (int i = 0; !st && i < c->n_read; i++) {
        char name[32];
        snprintf(name, sizeof name, "tensor.%d", (i * 7) % 5);
        st = tfm_safetensors_writer_add(w, name, c->read[i]);
    }
    if (!st)
        st = tfm_safetensors_writer_set_metadata(w, "b", "first");
    if (!st)
        st = tfm_safetensors_writer_set_metadata(w, "a", "caf\xc3\xa9");
    if (!st)
        st = tfm_safetensors_writer_set_metadata(w, "b", "second");
    if (!st)
        st = tfm_safetensors_writer_save(w, c->path);
    tfm_safetensors_writer_free(w);
    return st;
}

static void st_write_setup(void *p)
{
    unlink(((st_ctx *)p)->path);
}

static void st_write_on_oom(void *p)
{
    assert_int_equal(access(((st_ctx *)p)->path, F_OK), -1);
    assert_int_equal(tmp_files(), 0);
}

static void st_write_on_ok(void *p)
{
    st_ctx *c = p;
    long size;
    unsigned char *b = read_file(c->path, &size);
    assert_int_equal(size, c->size);
    assert_memory_equal(b, c->bytes, (size_t)size);
    free(b);
    unlink(c->path);
}

static void test_safetensors(void **state)
{
    (void)state;
    st_ctx c;
    memset(&c, 0, sizeof c);
    snprintf(c.path, sizeof c.path, "%s/numpy_reference.safetensors",
             TFM_TEST_DATA_DIR);
    c.bytes = read_file(c.path, &c.size);
    assert_int_equal(tfm_safetensors_open(c.path, &c.open), TFM_OK);

    oom_case open_file = { "tfm_safetensors_open", st_open_setup,
                           st_open_run, st_open_on_oom, st_open_on_ok, NULL,
                           &c };
    run_case(&open_file);
    c.memory = 1;
    oom_case open_mem = { "tfm_safetensors_open_memory", st_open_setup,
                          st_open_run, st_open_on_oom, st_open_on_ok, NULL,
                          &c };
    run_case(&open_mem);
    free(c.bytes);

    oom_case read = { "tfm_safetensors_read (every float tensor)", NULL,
                      st_read_run, NULL, st_read_on_ok, st_read_teardown,
                      &c };
    run_case(&read);

    /* The writer's reference: the same session without injection. */
    assert_int_equal(st_read_run(&c), TFM_OK);
    snprintf(c.path, sizeof c.path, "%s/written.safetensors", tmp_dir);
    assert_int_equal(st_write_run(&c), TFM_OK);
    c.bytes = read_file(c.path, &c.size);
    unlink(c.path);
    oom_case write = { "tfm_safetensors_writer_* and _save", st_write_setup,
                       st_write_run, st_write_on_oom, st_write_on_ok, NULL,
                       &c };
    run_case(&write);
    st_read_teardown(&c);
    free(c.bytes);
    tfm_safetensors_close(c.open);
}

/* ---- tokenizer and sampling -------------------------------------------- */

typedef struct text_ctx {
    tfm_tokenizer *tok;
    int32_t ids[16];
    int64_t n_ids;
    char text[64];
    size_t text_len;
    int decode;
} text_ctx;

static const char sample_text[] = "caf\xc3\xa9 abc";

static void text_setup(void *p)
{
    text_ctx *c = p;
    memset(c->ids, 0x7f, sizeof c->ids);
    c->n_ids = -1;
}

static tfm_status text_run(void *p)
{
    text_ctx *c = p;
    if (c->decode)
        return tfm_tokenizer_decode(c->tok, c->ids, c->n_ids, c->text,
                                    sizeof c->text, &c->text_len);
    return tfm_tokenizer_encode(c->tok, sample_text, strlen(sample_text),
                                c->ids, 16, &c->n_ids);
}

static void text_on_ok(void *p)
{
    text_ctx *c = p;
    if (c->decode)
        assert_string_equal(c->text, sample_text);
    else
        assert_int_equal(c->n_ids, 8);
}

static void test_tokenizer_encode_decode(void **state)
{
    (void)state;
    text_ctx c;
    memset(&c, 0, sizeof c);
    assert_int_equal(tfm_tokenizer_create("abcef \xc3\xa9", &c.tok), TFM_OK);
    oom_case enc = { "tfm_tokenizer_encode", text_setup, text_run, NULL,
                     text_on_ok, NULL, &c };
    run_case(&enc);
    assert_int_equal(text_run(&c), TFM_OK);
    c.decode = 1;
    oom_case dec = { "tfm_tokenizer_decode", NULL, text_run, NULL,
                     text_on_ok, NULL, &c };
    run_case(&dec);
    tfm_tokenizer_free(c.tok);
}

typedef struct sample_ctx {
    float *logits;
    int64_t vocab;
    tfm_sampling sampling;
    int32_t id, reference;
} sample_ctx;

static void sample_setup(void *p)
{
    ((sample_ctx *)p)->id = -7;
}

static tfm_status sample_run(void *p)
{
    sample_ctx *c = p;
    tfm_rng rng;
    tfm_rng_seed(&rng, 42);
    return tfm_sample(c->logits, c->vocab, &c->sampling, &rng, &c->id);
}

static void sample_on_oom(void *p)
{
    assert_int_equal(((sample_ctx *)p)->id, -7);
}

static void sample_on_ok(void *p)
{
    sample_ctx *c = p;
    assert_int_equal(c->id, c->reference);
}

static void test_sampling(void **state)
{
    (void)state;
    sample_ctx c;
    c.vocab = 1000; /* above the stack buffer: the candidates are malloc'd */
    c.logits = malloc((size_t)c.vocab * sizeof *c.logits);
    lcg_state = 3;
    for (int64_t i = 0; i < c.vocab; i++)
        c.logits[i] = 4.0f * next_value();
    c.sampling = (tfm_sampling){ 0, 0.8f, 50, 0.9f };
    assert_int_equal(sample_run(&c), TFM_OK);
    c.reference = c.id;
    oom_case oc = { "tfm_sample (top-k, top-p, 1000 logits)", sample_setup,
                    sample_run, sample_on_oom, sample_on_ok, NULL, &c };
    run_case(&oc);
    free(c.logits);
}

/* ---- forward passes ---------------------------------------------------- */

/* One forward call: inputs in[], outputs out[] (filled with SENTINEL
 * before each attempt), ref[] their values without injection. */
typedef struct fwd_ctx {
    tfm_status (*call)(struct fwd_ctx *c);
    tfm_module *module;
    tfm_tensor *in[4];
    tfm_tensor *out[2];
    tfm_tensor *ref[2];
    int n_out;
    tfm_attention_masks masks, masks2;
    int32_t ids[128], ids2[16];
    int64_t seq;    /* tfm_model_logits: [2, seq] ids (0: 5) */
} fwd_ctx;

static void fwd_setup(void *p)
{
    fwd_ctx *c = p;
    for (int i = 0; i < c->n_out; i++)
        fill(c->out[i], SENTINEL);
}

static tfm_status fwd_run(void *p)
{
    fwd_ctx *c = p;
    return c->call(c);
}

static void fwd_on_oom(void *p)
{
    fwd_ctx *c = p;
    for (int i = 0; i < c->n_out; i++)
        assert_filled(c->out[i], SENTINEL, "an output tensor");
}

static void fwd_on_ok(void *p)
{
    fwd_ctx *c = p;
    for (int i = 0; i < c->n_out; i++)
        assert_same(c->out[i], c->ref[i], "an output tensor");
}

static void fwd_check(const char *name, fwd_ctx *c)
{
    assert_int_equal(c->call(c), TFM_OK);
    for (int i = 0; i < c->n_out; i++)
        c->ref[i] = clone(c->out[i]);
    oom_case oc = { name, fwd_setup, fwd_run, fwd_on_oom, fwd_on_ok, NULL,
                    c };
    run_case(&oc);
    for (int i = 0; i < 4; i++)
        tfm_tensor_free(c->in[i]);
    for (int i = 0; i < c->n_out; i++) {
        tfm_tensor_free(c->out[i]);
        tfm_tensor_free(c->ref[i]);
    }
    tfm_module_free(c->module);
    memset(c, 0, sizeof *c);
}

/* in[0] as query, key and value alike. */
static tfm_status call_mha_aliased(fwd_ctx *c)
{
    return tfm_mha_forward(c->module, c->in[0], c->in[0], c->in[0],
                           &c->masks, c->out[0], NULL);
}

static tfm_status call_mha(fwd_ctx *c)
{
    return tfm_mha_forward(c->module, c->in[0], c->in[1], c->in[2], &c->masks,
                           c->out[0], c->out[1]);
}

static tfm_status call_attention(fwd_ctx *c)
{
    return tfm_attention_forward(c->module, c->in[0], c->in[1], c->in[2],
                                 &c->masks, c->out[0], c->out[1]);
}

static tfm_status call_sdpa(fwd_ctx *c)
{
    return tfm_sdpa(c->in[0], c->in[1], c->in[2], &c->masks, 0.0f, c->out[0],
                    c->out[1]);
}

static tfm_status call_ff(fwd_ctx *c)
{
    return tfm_feed_forward_forward(c->module, c->in[0], c->out[0]);
}

static tfm_status call_encoder_layer(fwd_ctx *c)
{
    return tfm_encoder_layer_forward(c->module, c->in[0], &c->masks,
                                     c->out[0]);
}

static tfm_status call_decoder_layer(fwd_ctx *c)
{
    return tfm_decoder_layer_forward(c->module, c->in[0], c->in[1], &c->masks,
                                     &c->masks2, c->out[0]);
}

static tfm_status call_cross_attention(fwd_ctx *c)
{
    return tfm_cross_attention_forward(c->module, c->in[0], c->in[1],
                                       &c->masks2, c->out[0]);
}

static tfm_status call_encoder(fwd_ctx *c)
{
    return tfm_encoder_forward(c->module, c->in[0], &c->masks, c->out[0]);
}

static tfm_status call_decoder(fwd_ctx *c)
{
    return tfm_decoder_forward(c->module, c->in[0], c->in[1], &c->masks,
                               &c->masks2, c->out[0]);
}

static tfm_status call_transformer(fwd_ctx *c)
{
    return tfm_transformer_forward(c->module, c->in[1], c->in[0], &c->masks2,
                                   &c->masks, &c->masks2, c->out[0]);
}

static tfm_status call_logits(fwd_ctx *c)
{
    return tfm_model_logits(c->module, c->ids, 2, c->seq ? c->seq : 5,
                            c->out[0]);
}

static tfm_status call_seq2seq(fwd_ctx *c)
{
    return tfm_model_seq2seq_logits(c->module, c->ids2, 6, c->ids, 5, 2,
                                    c->out[0]);
}

/* Padding mask [2, S] hiding the last key of the second sequence. */
static tfm_tensor *padding(int64_t S)
{
    tfm_tensor *t = tensor(2, 2, S, 1, 1);
    tfm_tensor_data(t)[2 * S - 1] = 1.0f;
    return t;
}

static void test_forward_attention(void **state)
{
    (void)state;
    fwd_ctx c;
    memset(&c, 0, sizeof c);

    /* Self-attention, packed weights, padding + causal, averaged weights. */
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &c.module), TFM_OK);
    randomize(c.module, 1);
    lcg_state = 11;
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.in[3] = padding(5);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT,
                                     .key_padding_mask = c.in[3] };
    c.in[1] = clone(c.in[0]);
    c.in[2] = clone(c.in[0]);
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.out[1] = tensor(3, 2, 5, 5, 1);
    c.n_out = 2;
    c.call = call_mha;
    fwd_check("tfm_mha_forward (self, masks, weights)", &c);

    /* One tensor as query, key and value (the fused q/k/v product). */
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &c.module), TFM_OK);
    randomize(c.module, 2);
    lcg_state = 12;
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT };
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.n_out = 1;
    c.call = call_mha_aliased;
    fwd_check("tfm_mha_forward (q = k = v)", &c);

    /* Cross-attention, kdim and vdim, per-head weights. */
    assert_int_equal(tfm_mha_create(8, 2, 5, 3, 1, &c.module), TFM_OK);
    randomize(c.module, 3);
    lcg_state = 13;
    c.in[0] = random_tensor(3, 2, 3, 8, 1);
    c.in[1] = random_tensor(3, 2, 4, 5, 1);
    c.in[2] = random_tensor(3, 2, 4, 3, 1);
    c.in[3] = padding(4);
    c.masks = (tfm_attention_masks){ .key_padding_mask = c.in[3] };
    c.out[0] = tensor(3, 2, 3, 8, 1);
    c.out[1] = tensor(4, 2, 2, 3, 4);
    c.n_out = 2;
    c.call = call_mha;
    fwd_check("tfm_mha_forward (cross, kdim, vdim)", &c);

    /* Scaled dot-product attention. */
    lcg_state = 14;
    c.in[0] = random_tensor(4, 2, 2, 3, 4);
    c.in[1] = random_tensor(4, 2, 2, 5, 4);
    c.in[2] = random_tensor(4, 2, 2, 5, 3);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_BOTTOM_RIGHT };
    c.out[0] = tensor(4, 2, 2, 3, 3);
    c.out[1] = tensor(4, 2, 2, 3, 5);
    c.n_out = 2;
    c.call = call_sdpa;
    fwd_check("tfm_sdpa", &c);

    /* Attention variants, functional form: T5 + BigBird, and Shaw values
     * with a learned temperature, each with and without the weights (the
     * kernel's two paths), with padding and the causal mask; then GQA with
     * RoPE, ALiBi and a window through multi-head attention. */
    for (int v = 0; v < 4; v++) {
        const tfm_attention_config a = v < 2 ? t5_bigbird() : shaw_values();
        assert_int_equal(tfm_attention_create(4, 3, 2, &a, &c.module),
                         TFM_OK);
        randomize(c.module, 15 + v);
        if (v >= 2) {   /* temperatures > 0 */
            tfm_tensor *t = tensor(1, 2, 1, 1, 1);
            tfm_tensor_data(t)[0] = 1.5f, tfm_tensor_data(t)[1] = 0.75f;
            assert_int_equal(tfm_module_set_parameter(c.module,
                                                      "temperature", t),
                             TFM_OK);
            tfm_tensor_free(t);
        }
        lcg_state = 16 + v;
        c.in[0] = random_tensor(4, 2, 2, 5, 4);
        c.in[1] = random_tensor(4, 2, 2, 7, 4);
        c.in[2] = random_tensor(4, 2, 2, 7, 3);
        c.in[3] = padding(7);
        c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_BOTTOM_RIGHT,
                                         .key_padding_mask = c.in[3] };
        c.out[0] = tensor(4, 2, 2, 5, 3);
        c.out[1] = v % 2 ? tensor(4, 2, 2, 5, 7) : NULL;
        c.n_out = v % 2 ? 2 : 1;
        c.call = call_attention;
        static const char *const names[] = {
            "tfm_attention_forward (T5, BigBird)",
            "tfm_attention_forward (T5, BigBird, weights)",
            "tfm_attention_forward (Shaw, temperature)",
            "tfm_attention_forward (Shaw, temp., weights)",
        };
        fwd_check(names[v], &c);
    }

    const tfm_attention_config g = gqa_rope();
    assert_int_equal(tfm_mha_create_ex(8, 4, 0, 0, 1, &g, &c.module), TFM_OK);
    randomize(c.module, 19);
    lcg_state = 20;
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.in[1] = clone(c.in[0]);
    c.in[2] = clone(c.in[0]);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT };
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.out[1] = tensor(4, 2, 4, 5, 5);
    c.n_out = 2;
    c.call = call_mha;
    fwd_check("tfm_mha_forward (GQA, RoPE, ALiBi, window)", &c);
}

static void test_forward_layers(void **state)
{
    (void)state;
    fwd_ctx c;
    memset(&c, 0, sizeof c);
    for (int pre = 0; pre <= 1; pre++) {
        tfm_layer_config cfg = small_config(pre);
        assert_int_equal(tfm_encoder_layer_create(&cfg, &c.module), TFM_OK);
        randomize(c.module, 20 + pre);
        lcg_state = 21;
        c.in[0] = random_tensor(3, 2, 5, 8, 1);
        c.in[3] = padding(5);
        c.masks = (tfm_attention_masks){ .key_padding_mask = c.in[3] };
        c.out[0] = tensor(3, 2, 5, 8, 1);
        c.n_out = 1;
        c.call = call_encoder_layer;
        fwd_check(pre ? "tfm_encoder_layer_forward (pre-norm)"
                      : "tfm_encoder_layer_forward (post-norm)", &c);
    }

    tfm_layer_config cfg = small_config(0);
    assert_int_equal(tfm_feed_forward_create(8, 16, TFM_ACTIVATION_GELU,
                                             &c.module), TFM_OK);
    randomize(c.module, 22);
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.n_out = 1;
    c.call = call_ff;
    fwd_check("tfm_feed_forward_forward", &c);

    assert_int_equal(tfm_decoder_layer_create(&cfg, &c.module), TFM_OK);
    randomize(c.module, 23);
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.in[1] = random_tensor(3, 2, 4, 8, 1);
    c.in[3] = padding(4);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT };
    c.masks2 = (tfm_attention_masks){ .key_padding_mask = c.in[3] };
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.n_out = 1;
    c.call = call_decoder_layer;
    fwd_check("tfm_decoder_layer_forward", &c);

    assert_int_equal(tfm_cross_attention_create(&cfg, &c.module), TFM_OK);
    randomize(c.module, 24);
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.in[1] = random_tensor(3, 2, 4, 8, 1);
    c.in[3] = padding(4);
    c.masks2 = (tfm_attention_masks){ .key_padding_mask = c.in[3] };
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.n_out = 1;
    c.call = call_cross_attention;
    fwd_check("tfm_cross_attention_forward", &c);

    assert_int_equal(tfm_encoder_create(&cfg, 2, 1, &c.module), TFM_OK);
    randomize(c.module, 25);
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT };
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.n_out = 1;
    c.call = call_encoder;
    fwd_check("tfm_encoder_forward (2 layers)", &c);

    assert_int_equal(tfm_decoder_create(&cfg, 2, 1, &c.module), TFM_OK);
    randomize(c.module, 26);
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.in[1] = random_tensor(3, 2, 4, 8, 1);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT };
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.n_out = 1;
    c.call = call_decoder;
    fwd_check("tfm_decoder_forward (2 layers)", &c);

    assert_int_equal(tfm_transformer_create(&cfg, 2, 2, &c.module), TFM_OK);
    randomize(c.module, 27);
    c.in[0] = random_tensor(3, 2, 5, 8, 1);
    c.in[1] = random_tensor(3, 2, 4, 8, 1);
    c.in[3] = padding(4);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT };
    c.masks2 = (tfm_attention_masks){ .key_padding_mask = c.in[3] };
    c.out[0] = tensor(3, 2, 5, 8, 1);
    c.n_out = 1;
    c.call = call_transformer;
    fwd_check("tfm_transformer_forward (2+2 layers)", &c);
}

static void test_forward_models(void **state)
{
    (void)state;
    fwd_ctx c;
    memset(&c, 0, sizeof c);
    for (int a = 0; a < 3; a++) {
        tfm_architecture arch = a == 0   ? TFM_ARCH_DECODER_ONLY
                                : a == 1 ? TFM_ARCH_ENCODER_ONLY
                                         : TFM_ARCH_ENCODER_DECODER;
        tfm_model_config mc = model_config(arch, 11);
        assert_int_equal(tfm_model_create(&mc, &c.module), TFM_OK);
        randomize(c.module, 30 + a);
        for (int i = 0; i < 16; i++) {
            c.ids[i] = (i * 5 + 3) % 11;
            c.ids2[i] = (i * 7 + 1) % 11;
        }
        c.out[0] = tensor(3, 2, 5, 11, 1);
        c.n_out = 1;
        c.call = a == 2 ? call_seq2seq : call_logits;
        fwd_check(a == 0   ? "tfm_model_logits (decoder-only)"
                  : a == 1 ? "tfm_model_logits (encoder-only)"
                           : "tfm_model_seq2seq_logits",
                  &c);
    }
}

/* Scratch larger than the workspace's first chunk (1 MiB): the arena grows
 * chunk by chunk, and merges them into one block when the call returns;
 * each of those allocations fails in turn.  A failed merge is absorbed (the
 * chunks are kept). */
static void test_forward_large_scratch(void **state)
{
    (void)state;
    fwd_ctx c;
    memset(&c, 0, sizeof c);
    tfm_layer_config cfg = tfm_layer_config_default(32, 4);
    cfg.d_ff = 128;
    assert_int_equal(tfm_encoder_create(&cfg, 2, 1, &c.module), TFM_OK);
    randomize(c.module, 60);
    lcg_state = 61;
    c.in[0] = random_tensor(3, 2, 400, 32, 1);
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT };
    c.out[0] = tensor(3, 2, 400, 32, 1);
    c.n_out = 1;
    c.call = call_encoder;
    fwd_check("tfm_encoder_forward (2 x 400 x 32, chunks)", &c);

    tfm_model_config mc = model_config(TFM_ARCH_DECODER_ONLY, 3000);
    mc.context_length = 64;
    assert_int_equal(tfm_model_create(&mc, &c.module), TFM_OK);
    randomize(c.module, 62);
    for (int i = 0; i < 128; i++)
        c.ids[i] = (i * 577 + 3) % 3000;
    c.seq = 64;
    c.out[0] = tensor(3, 2, 64, 3000, 1);
    c.n_out = 1;
    c.call = call_logits;
    fwd_check("tfm_model_logits (vocab 3000, chunks)", &c);
}

/* ---- cJSON's allocations ------------------------------------------------- */

static long cjson_fail_at;   /* 0: never */
static long cjson_count;

static void *cjson_malloc(size_t n)
{
    if (cjson_fail_at > 0 && ++cjson_count == cjson_fail_at)
        return NULL;
    return malloc(n);
}

static void cjson_free(void *p)
{
    free(p);
}

typedef struct cjson_case {
    const char *name;
    void (*setup)(void *ctx);
    tfm_status (*run)(void *ctx);
    void (*on_fail)(void *ctx);
    void (*on_ok)(void *ctx);
    void (*teardown)(void *ctx);
    void *ctx;
    int parses;  /* TFM_ERR_FORMAT allowed (a failed parse) */
} cjson_case;

/* As run_case, failing cJSON's k-th allocation instead of the library's. */
static void run_cjson_case(const cjson_case *c)
{
    oom_stats *s = &stats[n_stats < 127 ? n_stats++ : 127];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "cJSON: %s", c->name);
    cJSON_Hooks hooks = { cjson_malloc, cjson_free };
    for (long k = 1;; k++) {
        if (k > MAX_K)
            fail_msg("%s: still failing after %ld allocations", c->name, k);
        if (c->setup)
            c->setup(c->ctx);
        cJSON_InitHooks(&hooks);
        cjson_count = 0;
        cjson_fail_at = k;
        tfm_clear_error();
        tfm_status st = c->run(c->ctx);
        cjson_fail_at = 0;
        cJSON_InitHooks(NULL);
        int armed = cjson_count < k;
        if (st == TFM_ERR_OUT_OF_MEMORY ||
            (c->parses && st == TFM_ERR_FORMAT &&
             strstr(tfm_last_error(), "not valid JSON"))) {
            s->failed++;
            if (c->on_fail)
                c->on_fail(c->ctx);
        } else if (st != TFM_OK) {
            fail_msg("%s, cJSON allocation %ld: status %d (%s): %s", c->name,
                     k, (int)st, tfm_status_string(st), tfm_last_error());
        } else {
            if (!armed)
                s->absorbed++;
            if (c->on_ok)
                c->on_ok(c->ctx);
        }
        if (c->teardown)
            c->teardown(c->ctx);
        if (armed) {
            s->allocations = cjson_count;
            break;
        }
    }
}

static void test_cjson_allocations(void **state)
{
    (void)state;
    /* Parsing: opening a file and a model, loading a tokenizer. */
    st_ctx st;
    memset(&st, 0, sizeof st);
    snprintf(st.path, sizeof st.path, "%s/numpy_reference.safetensors",
             TFM_TEST_DATA_DIR);
    assert_int_equal(tfm_safetensors_open(st.path, &st.open), TFM_OK);
    cjson_case open_file = { "tfm_safetensors_open", st_open_setup,
                             st_open_run, st_open_on_oom, st_open_on_ok, NULL,
                             &st, 1 };
    run_cjson_case(&open_file);

    load_ctx lc;
    snprintf(lc.path, sizeof lc.path, "%s/encoder_only_learned.safetensors",
             TFM_MODELS_DIR);
    assert_int_equal(tfm_model_load(lc.path, &lc.reference), TFM_OK);
    cjson_case load = { "tfm_model_load encoder_only_learned",
                        load_setup, load_run, load_on_oom, load_on_ok, NULL,
                        &lc, 1 };
    run_cjson_case(&load);
    tfm_module_free(lc.reference);

    /* Printing: tfm_model_save (with tokenizer metadata), then parsing
     * what it wrote with tfm_tokenizer_load. */
    save_ctx sc;
    memset(&sc, 0, sizeof sc);
    tfm_model_config mc = model_config(TFM_ARCH_DECODER_ONLY, 11);
    assert_int_equal(tfm_model_create(&mc, &sc.model), TFM_OK);
    randomize(sc.model, 7);
    snprintf(sc.path, sizeof sc.path, "%s/model.safetensors", tmp_dir);
    assert_int_equal(save_run(&sc), TFM_OK);
    sc.reference = read_file(sc.path, &sc.reference_size);
    unlink(sc.path);
    cjson_case save = { "tfm_model_save", save_setup, save_run, save_on_oom,
                        save_on_ok, NULL, &sc, 0 };
    run_cjson_case(&save);
    assert_int_equal(save_run(&sc), TFM_OK);
    cjson_case tok = { "tfm_tokenizer_load", tok_setup, tok_run, tok_on_oom,
                       tok_on_ok, NULL, &sc, 1 };
    run_cjson_case(&tok);
    unlink(sc.path);
    free(sc.reference);
    tfm_module_free(sc.model);
    tfm_safetensors_close(st.open);
}

/* ---- KV cache and generation ------------------------------------------- */

typedef struct kv_ctx {
    tfm_module *model;
    tfm_kv_cache *cache;
    int32_t prompt[8];
    int64_t n_prefill;          /* positions decoded before the attempt */
    int64_t n_step;             /* positions decoded by the attempt */
    tfm_tensor *logits, *ref, *next_ref;
    int32_t next_id;
} kv_ctx;

static void kv_setup(void *p)
{
    kv_ctx *c = p;
    assert_int_equal(tfm_kv_cache_create(c->model, 6, &c->cache), TFM_OK);
    if (c->n_prefill > 0) {
        const int64_t shape[2] = { c->n_prefill, 11 };
        tfm_tensor *t = NULL;
        assert_int_equal(tfm_tensor_create(2, shape, &t), TFM_OK);
        assert_int_equal(tfm_kv_cache_decode(c->cache, c->prompt,
                                             c->n_prefill, t), TFM_OK);
        tfm_tensor_free(t);
    }
    fill(c->logits, SENTINEL);
}

static tfm_status kv_run(void *p)
{
    kv_ctx *c = p;
    return tfm_kv_cache_decode(c->cache, c->prompt + c->n_prefill, c->n_step,
                               c->logits);
}

/* After one more decode step of next_id, the logits equal next_ref. */
static void kv_check_next(kv_ctx *c)
{
    const int64_t shape[2] = { 1, 11 };
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_create(2, shape, &t), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(c->cache, &c->next_id, 1, t), TFM_OK);
    assert_same(t, c->next_ref, "the next step's logits");
    tfm_tensor_free(t);
}

static void kv_on_oom(void *p)
{
    kv_ctx *c = p;
    assert_int_equal(tfm_kv_cache_length(c->cache), c->n_prefill);
    assert_filled(c->logits, SENTINEL, "logits");
    /* The cache is still usable: the step again, then the next one. */
    assert_int_equal(kv_run(c), TFM_OK);
    assert_same(c->logits, c->ref, "logits after a failed step");
    kv_check_next(c);
}

static void kv_on_ok(void *p)
{
    kv_ctx *c = p;
    assert_int_equal(tfm_kv_cache_length(c->cache), c->n_prefill + c->n_step);
    assert_same(c->logits, c->ref, "logits");
    kv_check_next(c);
}

static void kv_teardown(void *p)
{
    kv_ctx *c = p;
    tfm_kv_cache_free(c->cache);
    c->cache = NULL;
}

static void kv_check(const char *name, kv_ctx *c)
{
    const int64_t shape[2] = { c->n_step, 11 };
    assert_int_equal(tfm_tensor_create(2, shape, &c->logits), TFM_OK);
    kv_setup(c);
    assert_int_equal(kv_run(c), TFM_OK);
    c->ref = clone(c->logits);
    const int64_t one[2] = { 1, 11 };
    assert_int_equal(tfm_tensor_create(2, one, &c->next_ref), TFM_OK);
    assert_int_equal(tfm_kv_cache_decode(c->cache, &c->next_id, 1,
                                         c->next_ref), TFM_OK);
    kv_teardown(c);
    oom_case oc = { name, kv_setup, kv_run, kv_on_oom, kv_on_ok, kv_teardown,
                    c };
    run_case(&oc);
    tfm_tensor_free(c->logits);
    tfm_tensor_free(c->ref);
    tfm_tensor_free(c->next_ref);
}

static void test_kv_cache(void **state)
{
    (void)state;
    kv_ctx c;
    memset(&c, 0, sizeof c);
    tfm_model_config mc = model_config(TFM_ARCH_DECODER_ONLY, 11);
    assert_int_equal(tfm_model_create(&mc, &c.model), TFM_OK);
    randomize(c.model, 40);
    for (int i = 0; i < 8; i++)
        c.prompt[i] = (i * 3 + 2) % 11;
    c.next_id = 9;

    c.n_prefill = 0;
    c.n_step = 3;
    kv_check("tfm_kv_cache_decode (prefill 3)", &c);
    c.n_prefill = 3;
    c.n_step = 1;
    kv_check("tfm_kv_cache_decode (one step)", &c);
    tfm_module_free(c.model);

    /* The same with the GQA / RoPE / ALiBi / window variant. */
    c.model = variant_model(41);
    c.n_prefill = 0;
    c.n_step = 3;
    kv_check("tfm_kv_cache_decode (variant, prefill 3)", &c);
    c.n_prefill = 3;
    c.n_step = 1;
    kv_check("tfm_kv_cache_decode (variant, one step)", &c);
    tfm_module_free(c.model);
}

typedef struct gen_ctx {
    tfm_module *model;
    int32_t prompt[4];
    int64_t n_prompt, max_new;
    tfm_sampling sampling;
    int32_t out[16], ref[16];
} gen_ctx;

static void gen_setup(void *p)
{
    memset(((gen_ctx *)p)->out, 0x55, sizeof ((gen_ctx *)p)->out);
}

static tfm_status gen_run(void *p)
{
    gen_ctx *c = p;
    return tfm_model_generate(c->model, c->prompt, c->n_prompt, c->max_new,
                              &c->sampling, 99, c->out);
}

static void gen_on_oom(void *p)
{
    gen_ctx *c = p;
    for (int i = 0; i < 16; i++)
        assert_int_equal(c->out[i], 0x55555555);
}

static void gen_on_ok(void *p)
{
    gen_ctx *c = p;
    assert_memory_equal(c->out, c->ref, (size_t)c->max_new * sizeof *c->out);
}

static void test_generate(void **state)
{
    (void)state;
    gen_ctx c;
    memset(&c, 0, sizeof c);
    /* vocab 600: tfm_sample's candidate list is heap-allocated. */
    tfm_model_config mc = model_config(TFM_ARCH_DECODER_ONLY, 600);
    assert_int_equal(tfm_model_create(&mc, &c.model), TFM_OK);
    randomize(c.model, 50);
    c.prompt[0] = 5, c.prompt[1] = 77, c.prompt[2] = 599, c.prompt[3] = 0;
    c.n_prompt = 4;
    c.max_new = 5; /* 9 positions with context 6: the window slides */
    for (int s = 0; s < 2; s++) {
        c.sampling = s ? (tfm_sampling){ 0, 0.9f, 40, 0.95f }
                       : tfm_sampling_default();
        gen_setup(&c);
        assert_int_equal(gen_run(&c), TFM_OK);
        memcpy(c.ref, c.out, sizeof c.ref);
        oom_case oc = { s ? "tfm_model_generate (sampling, sliding window)"
                          : "tfm_model_generate (greedy, sliding window)",
                        gen_setup, gen_run, gen_on_oom, gen_on_ok, NULL,
                        &c };
        run_case(&oc);
    }
    tfm_module_free(c.model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_layers),
        cmocka_unit_test(test_create_models),
        cmocka_unit_test(test_create_small),
        cmocka_unit_test(test_model_load),
        cmocka_unit_test(test_module_load_safetensors),
        cmocka_unit_test(test_model_save_and_tokenizer_load),
        cmocka_unit_test(test_safetensors),
        cmocka_unit_test(test_tokenizer_encode_decode),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_forward_attention),
        cmocka_unit_test(test_forward_layers),
        cmocka_unit_test(test_forward_models),
        cmocka_unit_test(test_forward_large_scratch),
        cmocka_unit_test(test_kv_cache),
        cmocka_unit_test(test_generate),
        cmocka_unit_test(test_cjson_allocations),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
