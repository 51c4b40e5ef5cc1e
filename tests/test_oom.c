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

#include "test_util.h"

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
    void **handle;  /* the operation's *out, if any: set to BAD_HANDLE before
                       each attempt, and it must stay so on failure */
    int parses;     /* cJSON injection: a failed parse (TFM_ERR_FORMAT, "not
                       valid JSON") counts as the injected failure */
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

/* Where run_injected() makes the k-th allocation fail: the library's
 * allocations (run_case) or cJSON's (run_cjson_case). */
typedef struct injector {
    const char *label;  /* before the operation's name in the summary */
    void (*arm)(long k);
    /* After the call: the allocations it made when the failure never came
     * (it made fewer than k), else -1. */
    long (*disarm)(long k, tfm_status st);
    /* Whether st is the failure the injection may cause. */
    int (*failed)(const oom_case *c, long k, tfm_status st);
} injector;

static void run_injected(const oom_case *c, const injector *inj)
{
    oom_stats *s = &stats[n_stats < 127 ? n_stats++ : 127];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s%s", inj->label, c->name);
    for (long k = 1;; k++) {
        if (k > MAX_K)
            fail_msg("%s: still failing after %ld allocations", c->name, k);
        if (c->setup)
            c->setup(c->ctx);
        if (c->handle)
            *c->handle = BAD_HANDLE;
        inj->arm(k);
        tfm_status st = c->run(c->ctx);
        long used = inj->disarm(k, st);
        if (inj->failed(c, k, st)) {
            s->failed++;
            if (c->handle)
                assert_ptr_equal(*c->handle, BAD_HANDLE);
            if (c->on_oom)
                c->on_oom(c->ctx);
        } else if (st != TFM_OK) {
            fail_msg("%s%s, allocation %ld: status %d (%s), expected out of "
                     "memory: %s", inj->label, c->name, k, (int)st,
                     tfm_status_string(st), tfm_last_error());
        } else {
            if (used < 0)
                s->absorbed++;
            if (c->handle)
                assert_ptr_not_equal(*c->handle, BAD_HANDLE);
            if (c->on_ok)
                c->on_ok(c->ctx);
        }
        if (c->teardown)
            c->teardown(c->ctx);
        if (used >= 0) {
            s->allocations = used;
            break;
        }
    }
    tfm_workspace_release();
}

/* The library's allocations (tfm_testing_fail_allocation).  The per-thread
 * workspace is released first, so that scratch allocations fail too. */
static void library_arm(long k)
{
    tfm_workspace_release();
    tfm_clear_error();
    tfm_testing_fail_allocation(k);
}

static long library_disarm(long k, tfm_status st)
{
    long used = -1;
    if (st == TFM_OK)
        still_armed(k, &used);
    tfm_testing_fail_allocation(0);
    return used;
}

static int library_failed(const oom_case *c, long k, tfm_status st)
{
    if (st != TFM_ERR_OUT_OF_MEMORY)
        return 0;
    if (tfm_last_error()[0] == '\0')
        fail_msg("%s, k = %ld: out of memory without a message", c->name, k);
    return 1;
}

static void run_case(const oom_case *c)
{
    static const injector library = { "", library_arm, library_disarm,
                                      library_failed };
    run_injected(c, &library);
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
        int64_t s[TFM_MAX_RANK];
        assert_int_equal(tfm_module_parameter_shape(a, name, &rank, s),
                         TFM_OK);
        tfm_tensor *x = make(rank, s, NULL), *y = make(rank, s, NULL);
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
    tfm_model_config c = tiny_model_config(
        arch, small_config(arch == TFM_ARCH_ENCODER_ONLY), vocab, 2, 6);
    c.n_encoder_layers = 2;
    c.n_decoder_layers = 2;
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

static tfm_status create_linear(const create_ctx *c, tfm_module **out)
{
    (void)c;
    return tfm_linear_create(8, 16, 1, out);
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

/* A dilated window alone: the kernel runs it as one sliding window per
 * position class, into scratch copied out at the end. */
static tfm_status create_attention_dilated(const create_ctx *c,
                                           tfm_module **out)
{
    (void)c;
    tfm_attention_config a;
    tfm_attention_config_init(&a);
    a.sparsity = TFM_SPARSE_DILATED;
    a.window = 1;
    a.dilation = 2;
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
    tfm_layer_config layer = small_config(0);
    layer.n_heads = 4;
    tfm_model_config mc =
        tiny_model_config(TFM_ARCH_DECODER_ONLY, layer, 11, 2, 6);
    mc.positional = TFM_POSITIONAL_NONE;
    tfm_module *m = NULL;
    const create_ctx c = { .model = mc };
    assert_int_equal(create_model_variant(&c, &m), TFM_OK);
    lcg_randomize(m, seed);
    return m;
}

static tfm_status create_run(void *p)
{
    create_ctx *c = p;
    return c->create(c, &c->out);
}

static void create_on_ok(void *p)
{
    create_ctx *c = p;
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
    oom_case oc = { .name = name, .run = create_run, .on_ok = create_on_ok,
                    .ctx = &c, .handle = (void **)&c.out };
    run_case(&oc);
    tfm_module_free(c.reference);
}

static void test_create_layers(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        tfm_status (*create)(const create_ctx *c, tfm_module **out);
    } layers[] = {
        { "tfm_mha_create (packed, bias)", create_mha },
        { "tfm_mha_create (kdim, vdim, no bias)", create_mha_kv },
        { "tfm_layer_norm_create", create_layer_norm },
        { "tfm_feed_forward_create", create_feed_forward },
        { "tfm_linear_create", create_linear },
        { "tfm_encoder_layer_create", create_encoder_layer },
        { "tfm_decoder_layer_create", create_decoder_layer },
        { "tfm_cross_attention_create", create_cross_attention },
        { "tfm_encoder_create (3 layers, norm)", create_encoder },
        { "tfm_decoder_create (2 layers)", create_decoder },
        { "tfm_transformer_create (2+2 layers)", create_transformer },
        { "tfm_embedding_create", create_embedding },
        { "tfm_attention_create (T5, BigBird)", create_attention_t5_bigbird },
        { "tfm_attention_create (Shaw values, temp.)", create_attention_shaw },
        { "tfm_mha_create_ex (GQA, RoPE, ALiBi, window)", create_mha_gqa },
    };
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        check_create(layers[i].name, layers[i].create, NULL);
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

static void small_on_ok(void *p)
{
    small_ctx *c = p;
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
        oom_case oc = { .name = names[i], .run = small_run,
                        .on_ok = small_on_ok, .ctx = &c, .handle = &c.out };
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

static tfm_status load_run(void *p)
{
    load_ctx *c = p;
    return tfm_model_load(c->path, &c->out);
}

static void load_on_ok(void *p)
{
    load_ctx *c = p;
    assert_same_module(c->out, c->reference);
    tfm_module_free(c->out);
}

/* tfm_model_load of tests/models/<file>.safetensors through run
 * (run_case or run_cjson_case). */
static void check_model_load(const char *file,
                             void (*run)(const oom_case *c))
{
    load_ctx c;
    char name[96];
    snprintf(c.path, sizeof c.path, "%s/%s.safetensors", TFM_MODELS_DIR,
             file);
    assert_int_equal(tfm_model_load(c.path, &c.reference), TFM_OK);
    snprintf(name, sizeof name, "tfm_model_load %s", file);
    oom_case oc = { .name = name, .run = load_run, .on_ok = load_on_ok,
                    .ctx = &c, .handle = (void **)&c.out, .parses = 1 };
    run(&oc);
    tfm_module_free(c.reference);
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
    for (int i = 0; i < 4; i++)
        check_model_load(files[i], run_case);
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
    lcg_randomize(((ckpt_ctx *)p)->module, 77);
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
                             tfm_module *(*build)(const tfm_model_config *))
{
    tfm_module *ref = NULL;
    tfm_model_config mc;
    assert_int_equal(tfm_model_load(c->path, &ref), TFM_OK);
    assert_int_equal(tfm_model_get_config(ref, &mc), TFM_OK);
    c->module = build(&mc);
    c->before = build(&mc);
    c->after = build(&mc);
    lcg_randomize(c->before, 77);
    lcg_randomize(c->after, 77);
    assert_int_equal(tfm_module_load_safetensors(c->after, c->path, c->prefix,
                                                 c->strict), TFM_OK);
    oom_case oc = { .name = name, .setup = ckpt_setup, .run = ckpt_run,
                    .on_oom = ckpt_on_oom, .on_ok = ckpt_on_ok, .ctx = c };
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

/* After a failed write: no file at path, and no temporary file left
 * behind. */
static void expect_no_file(const char *path)
{
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(tmp_files(), 0);
}

/* After a successful write: the file at path holds the n bytes of
 * reference.  Removes it. */
static void expect_file(const char *path, const unsigned char *reference,
                        long n)
{
    long size;
    unsigned char *b = read_file(path, &size);
    assert_int_equal(size, n);
    assert_memory_equal(b, reference, (size_t)size);
    free(b);
    unlink(path);
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
    expect_no_file(((save_ctx *)p)->path);
}

static void save_on_ok(void *p)
{
    save_ctx *c = p;
    expect_file(c->path, c->reference, c->reference_size);
}

static tfm_status tok_run(void *p)
{
    save_ctx *c = p;
    return tfm_tokenizer_load(c->path, &c->tokenizer);
}

static void tok_on_ok(void *p)
{
    save_ctx *c = p;
    assert_int_equal(tfm_tokenizer_vocab_size(c->tokenizer), 11);
    tfm_tokenizer_free(c->tokenizer);
}

/* tfm_model_save of a small model (its reference: the bytes saved without
 * injection), then tfm_tokenizer_load of the file, through run (run_case
 * or run_cjson_case). */
static void check_save_and_tokenizer_load(void (*run)(const oom_case *c))
{
    save_ctx c;
    memset(&c, 0, sizeof c);
    tfm_model_config mc = model_config(TFM_ARCH_DECODER_ONLY, 11);
    assert_int_equal(tfm_model_create(&mc, &c.model), TFM_OK);
    lcg_randomize(c.model, 7);
    snprintf(c.path, sizeof c.path, "%s/model.safetensors", tmp_dir);
    assert_int_equal(save_run(&c), TFM_OK);
    c.reference = read_file(c.path, &c.reference_size);
    unlink(c.path);

    oom_case save = { .name = "tfm_model_save", .setup = save_setup,
                      .run = save_run, .on_oom = save_on_oom,
                      .on_ok = save_on_ok, .ctx = &c };
    run(&save);

    assert_int_equal(save_run(&c), TFM_OK);
    oom_case tok = { .name = "tfm_tokenizer_load", .run = tok_run,
                     .on_ok = tok_on_ok, .ctx = &c,
                     .handle = (void **)&c.tokenizer, .parses = 1 };
    run(&tok);
    unlink(c.path);
    free(c.reference);
    tfm_module_free(c.model);
}

static void test_model_save_and_tokenizer_load(void **state)
{
    (void)state;
    check_save_and_tokenizer_load(run_case);
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

static tfm_status st_open_run(void *p)
{
    st_ctx *c = p;
    return c->memory
               ? tfm_safetensors_open_memory(c->bytes, (size_t)c->size,
                                             &c->out)
               : tfm_safetensors_open(c->path, &c->out);
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
    expect_no_file(((st_ctx *)p)->path);
}

static void st_write_on_ok(void *p)
{
    st_ctx *c = p;
    expect_file(c->path, c->bytes, c->size);
}

/* tests/data/numpy_reference.safetensors, opened into c->open. */
static void st_ctx_init(st_ctx *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s/numpy_reference.safetensors",
             TFM_TEST_DATA_DIR);
    assert_int_equal(tfm_safetensors_open(c->path, &c->open), TFM_OK);
}

/* tfm_safetensors_open (c->memory: _open_memory) through run (run_case or
 * run_cjson_case). */
static void check_st_open(const char *name, st_ctx *c,
                          void (*run)(const oom_case *c))
{
    oom_case oc = { .name = name, .run = st_open_run,
                    .on_ok = st_open_on_ok, .ctx = c,
                    .handle = (void **)&c->out, .parses = 1 };
    run(&oc);
}

static void test_safetensors(void **state)
{
    (void)state;
    st_ctx c;
    st_ctx_init(&c);
    c.bytes = read_file(c.path, &c.size);
    check_st_open("tfm_safetensors_open", &c, run_case);
    c.memory = 1;
    check_st_open("tfm_safetensors_open_memory", &c, run_case);
    free(c.bytes);

    oom_case read = { .name = "tfm_safetensors_read (every float tensor)",
                      .run = st_read_run, .on_ok = st_read_on_ok,
                      .teardown = st_read_teardown, .ctx = &c };
    run_case(&read);

    /* The writer's reference: the same session without injection. */
    assert_int_equal(st_read_run(&c), TFM_OK);
    snprintf(c.path, sizeof c.path, "%s/written.safetensors", tmp_dir);
    assert_int_equal(st_write_run(&c), TFM_OK);
    c.bytes = read_file(c.path, &c.size);
    unlink(c.path);
    oom_case write = { .name = "tfm_safetensors_writer_* and _save",
                       .setup = st_write_setup, .run = st_write_run,
                       .on_oom = st_write_on_oom, .on_ok = st_write_on_ok,
                       .ctx = &c };
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
    oom_case enc = { .name = "tfm_tokenizer_encode", .setup = text_setup,
                     .run = text_run, .on_ok = text_on_ok, .ctx = &c };
    run_case(&enc);
    assert_int_equal(text_run(&c), TFM_OK);
    c.decode = 1;
    oom_case dec = { .name = "tfm_tokenizer_decode", .run = text_run,
                     .on_ok = text_on_ok, .ctx = &c };
    run_case(&dec);
    tfm_tokenizer_free(c.tok);
}

/* tfm_tokenizer_load of SentencePiece models as tokenizer.json (Llama's
 * BPE with ranked merges and a template, T5's Unigram), then one encoding,
 * which must equal the encoding of the file loaded without injection. */
#define SPM_SP "\xe2\x96\x81"
static const char *const spm_json_files[2] = {
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
    " {\"id\": 1, \"content\": \"<s>\", \"special\": true}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
    "  {\"type\": \"Prepend\", \"prepend\": \"" SPM_SP "\"},"
    "  {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"},"
    "   \"content\": \"" SPM_SP "\"}]}, \"pre_tokenizer\": null,"
    " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
    "  {\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
    "  {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}]},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\","
    "  \"pattern\": {\"String\": \"" SPM_SP "\"}, \"content\": \" \"},"
    "  {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
    " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\","
    "  \"fuse_unk\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"" SPM_SP "\": 2,"
    "  \"a\": 3, \"b\": 4, \"ab\": 5, \"" SPM_SP "ab\": 6},"
    "  \"merges\": [\"a b\", \"" SPM_SP " ab\"]}}",
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"</s>\", \"special\": true},"
    " {\"id\": 1, \"content\": \"<unk>\", \"special\": true}],"
    " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\","
    "  \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, {\"type\":"
    "  \"Metaspace\", \"replacement\": \"" SPM_SP "\", \"add_prefix_space\": true}]},"
    " \"post_processor\": null, \"decoder\": {\"type\": \"Metaspace\","
    "  \"replacement\": \"" SPM_SP "\", \"add_prefix_space\": true},"
    " \"model\": {\"type\": \"Unigram\", \"unk_id\": 1, \"vocab\": ["
    "  [\"</s>\", 0.0], [\"<unk>\", 0.0], [\"" SPM_SP "\", -2], [\"a\", -3],"
    "  [\"b\", -3], [\"ab\", -1], [\"" SPM_SP "ab\", -2.5]]}}",
};

typedef struct spm_json_ctx {
    char path[512];
    tfm_tokenizer *tok;
    int32_t reference[16];
    int64_t n_reference;
} spm_json_ctx;

static tfm_status spm_json_run(void *p)
{
    spm_json_ctx *c = p;
    return tfm_tokenizer_load(c->path, &c->tok);
}

static void spm_json_on_ok(void *p)
{
    spm_json_ctx *c = p;
    int32_t ids[16];
    int64_t n = -1;
    assert_int_equal(tfm_tokenizer_encode_v2(c->tok, "ab ba c", 7, NULL, 0,
                                             TFM_ENCODE_ADD_SPECIAL, ids,
                                             NULL, NULL, 16, &n), TFM_OK);
    assert_int_equal(n, c->n_reference);
    assert_memory_equal(ids, c->reference, (size_t)n * sizeof *ids);
    tfm_tokenizer_free(c->tok);
}

static void run_cjson_case(const oom_case *c);

static void check_spm_json_load(void (*run)(const oom_case *c))
{
    for (int k = 0; k < 2; k++) {
        spm_json_ctx c;
        memset(&c, 0, sizeof c);
        snprintf(c.path, sizeof c.path, "%s/tokenizer.json", tmp_dir);
        FILE *f = fopen(c.path, "wb");
        assert_non_null(f);
        fputs(spm_json_files[k], f);
        fclose(f);
        assert_int_equal(spm_json_run(&c), TFM_OK);
        assert_int_equal(tfm_tokenizer_encode_v2(c.tok, "ab ba c", 7, NULL,
                                                 0, TFM_ENCODE_ADD_SPECIAL,
                                                 c.reference, NULL, NULL, 16,
                                                 &c.n_reference), TFM_OK);
        /* Llama: <s> ▁ab ▁ b a ▁ c(unk) -> 1 6 2 4 3 2 0; T5: ▁ab ▁ b a
         * ▁ c(unk) -> 6 2 4 3 2 1 (no template). */
        assert_int_equal(c.n_reference, k == 0 ? 7 : 6);
        tfm_tokenizer_free(c.tok);
        oom_case tok = { .name = k == 0 ? "tfm_tokenizer_load (Llama json)"
                                        : "tfm_tokenizer_load (T5 json)",
                         .run = spm_json_run, .on_ok = spm_json_on_ok,
                         .ctx = &c, .handle = (void **)&c.tok, .parses = 1 };
        run(&tok);
        unlink(c.path);
    }
}

static void test_spm_json_load(void **state)
{
    (void)state;
    check_spm_json_load(run_case);
    check_spm_json_load(run_cjson_case);
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
    lcg_seed(3);
    for (int64_t i = 0; i < c.vocab; i++)
        c.logits[i] = 4.0f * lcg_next();
    c.sampling = (tfm_sampling){ 0, 0.8f, 50, 0.9f };
    assert_int_equal(sample_run(&c), TFM_OK);
    c.reference = c.id;
    oom_case oc = { .name = "tfm_sample (top-k, top-p, 1000 logits)",
                    .setup = sample_setup, .run = sample_run,
                    .on_oom = sample_on_oom, .on_ok = sample_on_ok,
                    .ctx = &c };
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
    oom_case oc = { .name = name, .setup = fwd_setup, .run = fwd_run,
                    .on_oom = fwd_on_oom, .on_ok = fwd_on_ok, .ctx = c };
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

/* tfm_model_logits_v2 with a padding mask (its own scratch) and, when
 * the model has a token-type table, token types. */
static tfm_status call_logits_v2(fwd_ctx *c)
{
    static const int32_t mask[10] = { 1, 1, 1, 1, 0, 1, 1, 1, 0, 0 };
    tfm_model_inputs in;
    tfm_model_inputs_init(&in);
    in.attention_mask = mask;
    return tfm_model_logits_v2(c->module, c->ids, 2, 5, &in, c->out[0]);
}

static tfm_status call_seq2seq(fwd_ctx *c)
{
    return tfm_model_seq2seq_logits(c->module, c->ids2, 6, c->ids, 5, 2,
                                    c->out[0]);
}

/* Padding mask [2, S] hiding the last key of the second sequence. */
static tfm_tensor *padding(int64_t S)
{
    tfm_tensor *t = make2(2, S, NULL);
    tfm_tensor_data(t)[2 * S - 1] = 1.0f;
    return t;
}

/* The modules of the forward tables that test_create_layers does not
 * create. */
static tfm_status create_mha_cross(const create_ctx *c, tfm_module **out)
{
    (void)c;
    return tfm_mha_create(8, 2, 5, 3, 1, out);
}

static tfm_status create_feed_forward_gelu(const create_ctx *c,
                                           tfm_module **out)
{
    (void)c;
    return tfm_feed_forward_create(8, 16, TFM_ACTIVATION_GELU, out);
}

static tfm_status create_encoder_2(const create_ctx *c, tfm_module **out)
{
    return tfm_encoder_create(&c->config, 2, 1, out);
}

static tfm_status create_decoder_2(const create_ctx *c, tfm_module **out)
{
    return tfm_decoder_create(&c->config, 2, 1, out);
}

/* A tensor shape of a forward table: rank 0 is none, CLONE a copy of
 * in[0]. */
typedef struct shape {
    int rank;
    int64_t dim[4];
} shape;

#define SHAPE3(a, b, c) { 3, { a, b, c } }
#define SHAPE4(a, b, c, d) { 4, { a, b, c, d } }
#define CLONE { -1, { 0 } }

/* The masks of a forward call, in bits: CAUSAL (top left), CAUSAL_BR
 * (bottom right), PADDED (in[3] as the key padding mask). */
enum { CAUSAL = 1, CAUSAL_BR = 2, PADDED = 4 };

/* One forward call: the module create() makes with small_config(norm_first)
 * (none when NULL), its parameters from lcg_randomize(seed); the inputs in[]
 * from the LCG stream restarted at input_seed (0: going on from the
 * parameters) and in[3] = padding(pad) when pad > 0; masks and masks2 from
 * their bits; the outputs out[]. */
typedef struct fwd_op {
    const char *name;
    tfm_status (*call)(fwd_ctx *c);
    tfm_status (*create)(const create_ctx *c, tfm_module **out);
    int norm_first;
    uint32_t seed, input_seed;
    shape in[3];
    int64_t pad;
    int masks, masks2;
    shape out[2];
    int temperatures;   /* learned temperatures 1.5 and 0.75 (> 0) */
} fwd_op;

static tfm_attention_masks masks_of(int bits, tfm_tensor *pad)
{
    return (tfm_attention_masks){
        .causal = bits & CAUSAL      ? TFM_CAUSAL_TOP_LEFT
                  : bits & CAUSAL_BR ? TFM_CAUSAL_BOTTOM_RIGHT
                                     : TFM_CAUSAL_NONE,
        .key_padding_mask = bits & PADDED ? pad : NULL,
    };
}

static tfm_tensor *make_shape(const shape *s)
{
    return s->rank > 0 ? make(s->rank, s->dim, NULL) : NULL;
}

static void check_forward(const fwd_op *op)
{
    fwd_ctx c;
    memset(&c, 0, sizeof c);
    if (op->create) {
        const create_ctx cc = { .config = small_config(op->norm_first) };
        assert_int_equal(op->create(&cc, &c.module), TFM_OK);
        lcg_randomize(c.module, op->seed);
    }
    if (op->temperatures)
        set_param(c.module, "temperature", 1, (const int64_t[]){ 2 },
                  (const float[]){ 1.5f, 0.75f });
    if (op->input_seed)
        lcg_seed(op->input_seed);
    for (int i = 0; i < 3; i++)
        c.in[i] = op->in[i].rank < 0 ? clone(c.in[0])
                  : op->in[i].rank   ? lcg_fill(make_shape(&op->in[i]))
                                     : NULL;
    c.in[3] = op->pad > 0 ? padding(op->pad) : NULL;
    c.masks = masks_of(op->masks, c.in[3]);
    c.masks2 = masks_of(op->masks2, c.in[3]);
    c.out[0] = make_shape(&op->out[0]);
    c.out[1] = make_shape(&op->out[1]);
    c.n_out = c.out[1] ? 2 : 1;
    c.call = op->call;
    fwd_check(op->name, &c);
}

/* Attention variants, functional form (T5 + BigBird, and Shaw values with
 * a learned temperature), with and without the weights (the kernel's two
 * paths), with padding and the causal mask. */
#define VARIANT_OP(name, create, seed, weights, temperatures)               \
    { name, call_attention, create, 0, seed, seed + 1,                      \
      { SHAPE4(2, 2, 5, 4), SHAPE4(2, 2, 7, 4), SHAPE4(2, 2, 7, 3) }, 7,    \
      CAUSAL_BR | PADDED, 0, { SHAPE4(2, 2, 5, 3), weights }, temperatures }
#define NO_WEIGHTS { 0, { 0 } }

static void test_forward_attention(void **state)
{
    (void)state;
    static const fwd_op ops[] = {
        /* Self-attention, packed weights, padding + causal, averaged
         * weights. */
        { "tfm_mha_forward (self, masks, weights)", call_mha, create_mha, 0,
          1, 11, { SHAPE3(2, 5, 8), CLONE, CLONE }, 5, CAUSAL | PADDED, 0,
          { SHAPE3(2, 5, 8), SHAPE3(2, 5, 5) }, 0 },
        /* One tensor as query, key and value (the fused q/k/v product). */
        { "tfm_mha_forward (q = k = v)", call_mha_aliased, create_mha, 0, 2,
          12, { SHAPE3(2, 5, 8) }, 0, CAUSAL, 0, { SHAPE3(2, 5, 8) }, 0 },
        /* Cross-attention, kdim and vdim, per-head weights. */
        { "tfm_mha_forward (cross, kdim, vdim)", call_mha, create_mha_cross,
          0, 3, 13, { SHAPE3(2, 3, 8), SHAPE3(2, 4, 5), SHAPE3(2, 4, 3) }, 4,
          PADDED, 0, { SHAPE3(2, 3, 8), SHAPE4(2, 2, 3, 4) }, 0 },
        /* Scaled dot-product attention. */
        { "tfm_sdpa", call_sdpa, NULL, 0, 0, 14,
          { SHAPE4(2, 2, 3, 4), SHAPE4(2, 2, 5, 4), SHAPE4(2, 2, 5, 3) }, 0,
          CAUSAL_BR, 0, { SHAPE4(2, 2, 3, 3), SHAPE4(2, 2, 3, 5) }, 0 },
        VARIANT_OP("tfm_attention_forward (T5, BigBird)",
                   create_attention_t5_bigbird, 15, NO_WEIGHTS, 0),
        VARIANT_OP("tfm_attention_forward (T5, BigBird, weights)",
                   create_attention_t5_bigbird, 16, SHAPE4(2, 2, 5, 7), 0),
        VARIANT_OP("tfm_attention_forward (Shaw, temperature)",
                   create_attention_shaw, 17, NO_WEIGHTS, 1),
        VARIANT_OP("tfm_attention_forward (Shaw, temp., weights)",
                   create_attention_shaw, 18, SHAPE4(2, 2, 5, 7), 1),
        /* A dilated window split into position classes (no padding, no
         * weights: the split's conditions). */
        { "tfm_attention_forward (dilated, split by class)", call_attention,
          create_attention_dilated, 0, 21, 22,
          { SHAPE4(2, 2, 5, 4), SHAPE4(2, 2, 7, 4), SHAPE4(2, 2, 7, 3) }, 0,
          CAUSAL_BR, 0, { SHAPE4(2, 2, 5, 3), NO_WEIGHTS }, 0 },
        /* GQA with RoPE, ALiBi and a window through multi-head
         * attention. */
        { "tfm_mha_forward (GQA, RoPE, ALiBi, window)", call_mha,
          create_mha_gqa, 0, 19, 20, { SHAPE3(2, 5, 8), CLONE, CLONE }, 0,
          CAUSAL, 0, { SHAPE3(2, 5, 8), SHAPE4(2, 4, 5, 5) }, 0 },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        check_forward(&ops[i]);
}

/* Layers and stacks: x [2, 5, 8], memory [2, 4, 8]. */
#define X SHAPE3(2, 5, 8)
#define MEMORY SHAPE3(2, 4, 8)

static void test_forward_layers(void **state)
{
    (void)state;
    static const fwd_op ops[] = {
        { "tfm_encoder_layer_forward (post-norm)", call_encoder_layer,
          create_encoder_layer, 0, 20, 21, { X }, 5, PADDED, 0, { X }, 0 },
        { "tfm_encoder_layer_forward (pre-norm)", call_encoder_layer,
          create_encoder_layer, 1, 21, 21, { X }, 5, PADDED, 0, { X }, 0 },
        { "tfm_feed_forward_forward", call_ff, create_feed_forward_gelu, 0,
          22, 0, { X }, 0, 0, 0, { X }, 0 },
        { "tfm_decoder_layer_forward", call_decoder_layer,
          create_decoder_layer, 0, 23, 0, { X, MEMORY }, 4, CAUSAL, PADDED,
          { X }, 0 },
        { "tfm_cross_attention_forward", call_cross_attention,
          create_cross_attention, 0, 24, 0, { X, MEMORY }, 4, 0, PADDED,
          { X }, 0 },
        { "tfm_encoder_forward (2 layers)", call_encoder, create_encoder_2, 0,
          25, 0, { X }, 0, CAUSAL, 0, { X }, 0 },
        { "tfm_decoder_forward (2 layers)", call_decoder, create_decoder_2, 0,
          26, 0, { X, MEMORY }, 0, CAUSAL, 0, { X }, 0 },
        { "tfm_transformer_forward (2+2 layers)", call_transformer,
          create_transformer, 0, 27, 0, { X, MEMORY }, 4, CAUSAL, PADDED,
          { X }, 0 },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        check_forward(&ops[i]);
}
#undef X
#undef MEMORY

static void test_forward_models(void **state)
{
    (void)state;
    fwd_ctx c;
    memset(&c, 0, sizeof c);
    /* the three architectures' logits, then tfm_model_logits_v2 with a
     * padding mask on the decoder-only and the encoder-only model */
    for (int k = 0; k < 5; k++) {
        const int a = k < 3 ? k : k - 3;
        tfm_architecture arch = a == 0   ? TFM_ARCH_DECODER_ONLY
                                : a == 1 ? TFM_ARCH_ENCODER_ONLY
                                         : TFM_ARCH_ENCODER_DECODER;
        tfm_model_config mc = model_config(arch, 11);
        assert_int_equal(tfm_model_create(&mc, &c.module), TFM_OK);
        lcg_randomize(c.module, 30 + a);
        for (int i = 0; i < 16; i++) {
            c.ids[i] = (i * 5 + 3) % 11;
            c.ids2[i] = (i * 7 + 1) % 11;
        }
        c.out[0] = make3(2, 5, 11, NULL);
        c.n_out = 1;
        c.call = k >= 3 ? call_logits_v2 : a == 2 ? call_seq2seq
                                                  : call_logits;
        static const char *const names[5] = {
            "tfm_model_logits (decoder-only)",
            "tfm_model_logits (encoder-only)", "tfm_model_seq2seq_logits",
            "tfm_model_logits_v2 (decoder-only, mask)",
            "tfm_model_logits_v2 (encoder-only, mask)" };
        fwd_check(names[k], &c);
    }
}

static tfm_status call_patch_embedding(fwd_ctx *c)
{
    return tfm_patch_embedding_forward(c->module, c->in[0], c->out[0]);
}

static tfm_status call_image_logits(fwd_ctx *c)
{
    return tfm_model_image_logits(c->module, c->in[0], c->out[0]);
}

/* Pixels [B, C, H, W] with distinct values. */
static tfm_tensor *pixels(int64_t B, int64_t C, int64_t H, int64_t W)
{
    tfm_tensor *t = make4(B, C, H, W, NULL);
    float *x = tfm_tensor_data(t);
    for (int64_t i = 0; i < B * C * H * W; i++)
        x[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
    return t;
}

/* ViT's patch embedding (its unfolded patches in scratch) and an image
 * model's class logits. */
static void test_forward_images(void **state)
{
    (void)state;
    fwd_ctx c;
    memset(&c, 0, sizeof c);
    assert_int_equal(tfm_patch_embedding_create(4, 2, 2, 0, 1, &c.module),
                     TFM_OK);
    lcg_randomize(c.module, 41);
    c.in[0] = pixels(2, 2, 4, 6);
    c.out[0] = make3(2, 6, 4, NULL);
    c.n_out = 1;
    c.call = call_patch_embedding;
    fwd_check("tfm_patch_embedding_forward", &c);

    tfm_model_config mc = model_config(TFM_ARCH_ENCODER_ONLY, 3);
    mc.context_length = 5; /* the class token and 2 x 2 patches */
    mc.tied_embeddings = 0;
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    lo.head_bias = 1;
    lo.patch_size = 2;
    lo.image_size = 4;
    lo.num_channels = 2;
    assert_int_equal(tfm_model_create_v2(&mc, NULL, &lo, &c.module), TFM_OK);
    lcg_randomize(c.module, 42);
    c.in[0] = pixels(2, 2, 4, 4);
    c.out[0] = make2(2, 3, NULL);
    c.n_out = 1;
    c.call = call_image_logits;
    fwd_check("tfm_model_image_logits", &c);
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
    lcg_randomize(c.module, 60);
    lcg_seed(61);
    c.in[0] = lcg_fill(make3(2, 400, 32, NULL));
    c.masks = (tfm_attention_masks){ .causal = TFM_CAUSAL_TOP_LEFT };
    c.out[0] = make3(2, 400, 32, NULL);
    c.n_out = 1;
    c.call = call_encoder;
    fwd_check("tfm_encoder_forward (2 x 400 x 32, chunks)", &c);

    tfm_model_config mc = model_config(TFM_ARCH_DECODER_ONLY, 3000);
    mc.context_length = 64;
    assert_int_equal(tfm_model_create(&mc, &c.module), TFM_OK);
    lcg_randomize(c.module, 62);
    for (int i = 0; i < 128; i++)
        c.ids[i] = (i * 577 + 3) % 3000;
    c.seq = 64;
    c.out[0] = make3(2, 64, 3000, NULL);
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

static void cjson_arm(long k)
{
    cJSON_Hooks hooks = { cjson_malloc, cjson_free };
    cJSON_InitHooks(&hooks);
    cjson_count = 0;
    cjson_fail_at = k;
    tfm_clear_error();
}

static long cjson_disarm(long k, tfm_status st)
{
    (void)st;
    cjson_fail_at = 0;
    cJSON_InitHooks(NULL);
    return cjson_count < k ? cjson_count : -1;
}

/* cJSON does not tell a failed allocation from a syntax error: a parse
 * may fail with TFM_ERR_FORMAT. */
static int cjson_failed(const oom_case *c, long k, tfm_status st)
{
    (void)k;
    return st == TFM_ERR_OUT_OF_MEMORY ||
           (c->parses && st == TFM_ERR_FORMAT &&
            strstr(tfm_last_error(), "not valid JSON"));
}

/* As run_case, failing cJSON's k-th allocation instead of the library's. */
static void run_cjson_case(const oom_case *c)
{
    static const injector cjson = { "cJSON: ", cjson_arm, cjson_disarm,
                                    cjson_failed };
    run_injected(c, &cjson);
}

static void test_cjson_allocations(void **state)
{
    (void)state;
    /* Parsing: opening a file and a model. */
    st_ctx st;
    st_ctx_init(&st);
    check_st_open("tfm_safetensors_open", &st, run_cjson_case);
    tfm_safetensors_close(st.open);
    check_model_load("encoder_only_learned", run_cjson_case);
    /* Printing: tfm_model_save (with tokenizer metadata), then parsing
     * what it wrote with tfm_tokenizer_load. */
    check_save_and_tokenizer_load(run_cjson_case);
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
    oom_case oc = { .name = name, .setup = kv_setup, .run = kv_run,
                    .on_oom = kv_on_oom, .on_ok = kv_on_ok,
                    .teardown = kv_teardown, .ctx = c };
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
    lcg_randomize(c.model, 40);
    for (int i = 0; i < 8; i++)
        c.prompt[i] = (i * 3 + 2) % 11;
    c.next_id = 9;
    /* A prefill of 3, then one step after 3; the plain model, then the
     * GQA / RoPE / ALiBi / window variant. */
    static const char *const names[2][2] = {
        { "tfm_kv_cache_decode (prefill 3)",
          "tfm_kv_cache_decode (one step)" },
        { "tfm_kv_cache_decode (variant, prefill 3)",
          "tfm_kv_cache_decode (variant, one step)" },
    };
    for (int variant = 0; variant < 2; variant++) {
        if (variant)
            c.model = variant_model(41);
        for (int step = 0; step < 2; step++) {
            c.n_prefill = step ? 3 : 0;
            c.n_step = step ? 1 : 3;
            kv_check(names[variant][step], &c);
        }
        tfm_module_free(c.model);
    }
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
    lcg_randomize(c.model, 50);
    c.prompt[0] = 5, c.prompt[1] = 77, c.prompt[2] = 599, c.prompt[3] = 0;
    c.n_prompt = 4;
    c.max_new = 5; /* 9 positions with context 6: the window slides */
    for (int s = 0; s < 2; s++) {
        c.sampling = s ? (tfm_sampling){ 0, 0.9f, 40, 0.95f }
                       : tfm_sampling_default();
        gen_setup(&c);
        assert_int_equal(gen_run(&c), TFM_OK);
        memcpy(c.ref, c.out, sizeof c.ref);
        oom_case oc = {
            .name = s ? "tfm_model_generate (sampling, sliding window)"
                      : "tfm_model_generate (greedy, sliding window)",
            .setup = gen_setup, .run = gen_run, .on_oom = gen_on_oom,
            .on_ok = gen_on_ok, .ctx = &c };
        run_case(&oc);
    }
    tfm_module_free(c.model);
}

/* ---- beam search (model.h: tfm_model_beam_search) ----------------------- */

/* 3 beams, 3 new tokens, 2 sequences returned, an EOS: every buffer, the
 * KV caches (decoder-only) and the replicated source (encoder-decoder). */
typedef struct beam_ctx {
    tfm_module *model;
    int32_t prompt[3];
    tfm_beam_search_options o;
    int32_t ids[6], ref_ids[6];
    int64_t lengths[2], ref_lengths[2];
    float scores[2], ref_scores[2];
} beam_ctx;

static void beam_setup(void *p)
{
    beam_ctx *c = p;
    memset(c->ids, 0x55, sizeof c->ids);
    memset(c->lengths, 0x55, sizeof c->lengths);
    memset(c->scores, 0x55, sizeof c->scores);
}

static tfm_status beam_run(void *p)
{
    beam_ctx *c = p;
    return tfm_model_beam_search(c->model, c->prompt, 3, &c->o, c->ids,
                                 c->lengths, c->scores);
}

static void beam_on_oom(void *p)
{
    beam_ctx *c = p;
    for (int i = 0; i < 6; i++)
        assert_int_equal(c->ids[i], 0x55555555);
    for (int i = 0; i < 2; i++)
        assert_int_equal(c->lengths[i], 0x5555555555555555LL);
    unsigned char raw[sizeof c->scores];
    memset(raw, 0x55, sizeof raw);
    assert_memory_equal(c->scores, raw, sizeof raw);
}

static void beam_on_ok(void *p)
{
    beam_ctx *c = p;
    assert_memory_equal(c->ids, c->ref_ids, sizeof c->ids);
    assert_memory_equal(c->lengths, c->ref_lengths, sizeof c->lengths);
    assert_memory_equal(c->scores, c->ref_scores, sizeof c->scores);
}

static void test_beam_search(void **state)
{
    (void)state;
    static const tfm_architecture archs[2] = { TFM_ARCH_DECODER_ONLY,
                                               TFM_ARCH_ENCODER_DECODER };
    static const char *const names[2] = {
        "tfm_model_beam_search (decoder-only)",
        "tfm_model_beam_search (encoder-decoder)" };
    for (int a = 0; a < 2; a++) {
        beam_ctx c;
        memset(&c, 0, sizeof c);
        tfm_model_config mc = model_config(archs[a], 11);
        assert_int_equal(tfm_model_create(&mc, &c.model), TFM_OK);
        lcg_randomize(c.model, 60 + a);
        c.prompt[0] = 4, c.prompt[1] = 9, c.prompt[2] = 1;
        tfm_beam_search_options_init(&c.o);
        c.o.num_beams = 3;
        c.o.max_new_tokens = 3;
        c.o.num_return_sequences = 2;
        c.o.eos_token_id = 2;
        c.o.decoder_start_token_id = 0;
        beam_setup(&c);
        assert_int_equal(beam_run(&c), TFM_OK);
        memcpy(c.ref_ids, c.ids, sizeof c.ids);
        memcpy(c.ref_lengths, c.lengths, sizeof c.lengths);
        memcpy(c.ref_scores, c.scores, sizeof c.scores);
        oom_case oc = { .name = names[a], .setup = beam_setup,
                        .run = beam_run, .on_oom = beam_on_oom,
                        .on_ok = beam_on_ok, .ctx = &c };
        run_case(&oc);
        tfm_module_free(c.model);
    }
}

/* ---- optimizers (training.h) ------------------------------------------- */

/* An encoder layer's optimizer: create, save and load under injection.
 * A failed load leaves the state and the lr as they were. */
typedef struct optim_ctx {
    tfm_module *m;
    tfm_optimizer_options o;
    tfm_optimizer *out, *opt;
    char path[64];
} optim_ctx;

static tfm_status optim_create_run(void *p)
{
    optim_ctx *c = p;
    return tfm_optimizer_create(c->m, &c->o, &c->out);
}

static void optim_create_on_ok(void *p)
{
    optim_ctx *c = p;
    tfm_optimizer_free(c->out);
}

static tfm_status optim_save_run(void *p)
{
    optim_ctx *c = p;
    return tfm_optimizer_save(c->opt, c->path);
}

static void optim_load_setup(void *p)
{
    optim_ctx *c = p;
    assert_int_equal(tfm_optimizer_set_lr(c->opt, 0.5), TFM_OK);
}

static tfm_status optim_load_run(void *p)
{
    optim_ctx *c = p;
    return tfm_optimizer_load(c->opt, c->path);
}

static void optim_load_on_oom(void *p)
{
    optim_ctx *c = p;
    assert_true(tfm_optimizer_get_lr(c->opt) == 0.5);
}

static void optim_load_on_ok(void *p)
{
    optim_ctx *c = p;
    assert_true(tfm_optimizer_get_lr(c->opt) == 1e-3);
}

static void test_optimizers(void **state)
{
    (void)state;
    optim_ctx c = { 0 };
    tfm_layer_config cfg = small_config(1);
    assert_int_equal(tfm_encoder_layer_create(&cfg, &c.m), TFM_OK);
    tfm_optimizer_options_init(&c.o, TFM_OPTIMIZER_ADAMW);
    c.o.amsgrad = 1;
    oom_case create = { .name = "tfm_optimizer_create (AdamW, amsgrad)",
                        .run = optim_create_run,
                        .on_ok = optim_create_on_ok, .ctx = &c,
                        .handle = (void **)&c.out };
    run_case(&create);
    assert_int_equal(tfm_optimizer_create(c.m, &c.o, &c.opt), TFM_OK);
    snprintf(c.path, sizeof c.path, "/tmp/tfm_oom_optim_%ld.safetensors",
             (long)getpid());
    oom_case save = { .name = "tfm_optimizer_save", .run = optim_save_run,
                      .ctx = &c };
    run_case(&save);
    oom_case load = { .name = "tfm_optimizer_load", .setup = optim_load_setup,
                      .run = optim_load_run, .on_oom = optim_load_on_oom,
                      .on_ok = optim_load_on_ok, .ctx = &c };
    run_case(&load);
    unlink(c.path);
    tfm_optimizer_free(c.opt);
    tfm_module_free(c.m);
}

/* ---- gradient memory (module.h: tfm_module_train) ---------------------- */

/* A fresh encoder layer per attempt: a failed tfm_module_train allocates
 * no gradient and leaves the layer in evaluation mode. */
static tfm_module *train_layer;

static void train_setup(void *p)
{
    (void)p;
    tfm_layer_config cfg = small_config(1);
    assert_int_equal(tfm_encoder_layer_create(&cfg, &train_layer), TFM_OK);
}

static tfm_status train_run(void *p)
{
    (void)p;
    return tfm_module_train(train_layer, 1);
}

static void train_on_oom(void *p)
{
    (void)p;
    float *g = NULL;
    assert_int_equal(tfm_module_is_training(train_layer), 0);
    assert_int_equal(tfm_module_grad(train_layer, "linear1.weight", &g),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_grad(train_layer, "self_attn.in_proj_weight",
                                     &g), TFM_ERR_INVALID_ARGUMENT);
}

static void train_on_ok(void *p)
{
    (void)p;
    float *g = NULL;
    assert_int_equal(tfm_module_is_training(train_layer), 1);
    for (int i = 0; i < tfm_module_parameter_count(train_layer); i++)
        assert_int_equal(tfm_module_grad(train_layer,
                                         tfm_module_parameter_name(
                                             train_layer, i), &g), TFM_OK);
}

static void train_teardown(void *p)
{
    (void)p;
    tfm_module_free(train_layer);
    train_layer = NULL;
}

static void test_module_train(void **state)
{
    (void)state;
    oom_case c = { .name = "tfm_module_train (encoder layer)",
                   .setup = train_setup, .run = train_run,
                   .on_oom = train_on_oom, .on_ok = train_on_ok,
                   .teardown = train_teardown };
    run_case(&c);
}

/* ---- backward passes (layers.h: tfm_feed_forward_backward) ------------ */

/* Scratch of 2 x 800 x 1024 floats (6.5 MB, beyond what the earlier cases
 * left in the workspace): each of its allocations fails in turn, and a
 * failed backward leaves every gradient zero and grad_input as it was. */
typedef struct bwd_ctx {
    tfm_module *ff;     /* the module: a feed-forward network, or with
                           memory set a cross-attention block */
    tfm_tensor *x, *g, *gx;
    tfm_tensor *memory, *gm;
    const char *probe;  /* a parameter whose gradient must be nonzero */
} bwd_ctx;

static tfm_status bwd_run(void *p)
{
    bwd_ctx *c = p;
    if (c->memory)
        return tfm_cross_attention_backward(c->ff, c->x, c->memory, NULL,
                                            c->g, c->gx, c->gm);
    if (tfm_module_kind_of(c->ff) == TFM_MODULE_MHA)
        return tfm_mha_backward(c->ff, c->x, c->x, c->x, NULL, c->g, c->gx,
                                NULL, NULL);
    return tfm_feed_forward_backward(c->ff, c->x, c->g, c->gx);
}

static void bwd_setup(void *p)
{
    bwd_ctx *c = p;
    assert_int_equal(tfm_module_zero_grad(c->ff), TFM_OK);
    fill(c->gx, 7.0f);
    if (c->gm)
        fill(c->gm, 7.0f);
}

static void bwd_on_oom(void *p)
{
    bwd_ctx *c = p;
    for (int i = 0; i < tfm_module_parameter_count(c->ff); i++) {
        const char *name = tfm_module_parameter_name(c->ff, i);
        float *g = NULL;
        assert_int_equal(tfm_module_grad(c->ff, name, &g), TFM_OK);
        int rank = 0;
        int64_t shape[TFM_MAX_RANK], n = 1;
        assert_int_equal(tfm_module_parameter_shape(c->ff, name, &rank,
                                                    shape), TFM_OK);
        for (int a = 0; a < rank; a++)
            n *= shape[a];
        for (int64_t k = 0; k < n; k++)
            assert_true(g[k] == 0.0f);
    }
    const float *gx = tfm_tensor_data(c->gx);
    for (int64_t k = 0; k < tfm_tensor_numel(c->gx); k++)
        assert_true(gx[k] == 7.0f);
    if (c->gm) {
        const float *gm = tfm_tensor_data(c->gm);
        for (int64_t k = 0; k < tfm_tensor_numel(c->gm); k++)
            assert_true(gm[k] == 7.0f);
    }
}

static void bwd_on_ok(void *p)
{
    bwd_ctx *c = p;
    float *g = NULL;
    assert_int_equal(tfm_module_grad(c->ff, c->probe, &g), TFM_OK);
    double s = 0.0;
    for (int k = 0; k < 16 * 16; k++)
        s += fabs(g[k]);
    assert_true(s > 0.0);
    assert_true(tfm_tensor_data(c->gx)[0] != 7.0f);
    if (c->gm)
        assert_true(tfm_tensor_data(c->gm)[0] != 7.0f);
}

/* tfm_model_backward / tfm_model_seq2seq_backward (every allocation of
 * the blocks' keep phases, the stack's activations and the attention
 * backward's scratch fails in turn): a failure returns out-of-memory and
 * leaks nothing (valgrind, LeakSanitizer); the parameter gradients may
 * hold the head's and the later blocks' parts then (model.h), so each
 * attempt starts from zeroed gradients and a successful one must give the
 * uninjected gradients bit for bit. */
typedef struct model_bwd_ctx {
    tfm_module *model;
    int32_t ids[12];
    int64_t B, L;
    tfm_tensor *g;
    tfm_tensor *pixels;   /* an image model's input, or NULL */
    const char *probe;    /* the parameter whose gradient is compared */
    float *reference;     /* its gradient without injection */
    int64_t n_ref;
} model_bwd_ctx;

static tfm_status model_bwd_run(void *p)
{
    model_bwd_ctx *c = p;
    if (c->pixels)
        return tfm_model_image_backward(c->model, c->pixels, c->g);
    if (tfm_module_kind_of(c->model) == TFM_MODULE_ENCODER_DECODER)
        return tfm_model_seq2seq_backward(c->model, c->ids, c->L, c->ids,
                                          c->L, c->B, c->g);
    return tfm_model_backward(c->model, c->ids, c->B, c->L, c->g);
}

static void model_bwd_setup(void *p)
{
    assert_int_equal(tfm_module_zero_grad(((model_bwd_ctx *)p)->model),
                     TFM_OK);
}

static void model_bwd_on_ok(void *p)
{
    model_bwd_ctx *c = p;
    float *g = NULL;
    assert_int_equal(tfm_module_grad(c->model, c->probe, &g), TFM_OK);
    assert_memory_equal(g, c->reference, (size_t)c->n_ref * sizeof *g);
}

static void test_model_backward(void **state)
{
    (void)state;
    const tfm_architecture archs[3] = { TFM_ARCH_DECODER_ONLY,
                                        TFM_ARCH_ENCODER_DECODER,
                                        TFM_ARCH_ENCODER_ONLY };
    for (int a = 0; a < 3; a++) {
        model_bwd_ctx c;
        memset(&c, 0, sizeof c);
        tfm_model_config mc = model_config(archs[a], 11);
        c.probe = "token_embedding.weight";
        c.n_ref = 11 * mc.layer.d_model;
        if (a == 2) { /* an image model (ViT): 2 x 2 patches of 2 x 2 */
            tfm_layer_options lo;
            tfm_layer_options_init(&lo);
            lo.head_bias = 1;
            lo.patch_size = 2;
            lo.image_size = 4;
            lo.num_channels = 2;
            mc.context_length = 5;
            mc.tied_embeddings = 0;
            assert_int_equal(tfm_model_create_v2(&mc, NULL, &lo, &c.model),
                             TFM_OK);
            c.pixels = pixels(2, 2, 4, 4);
            c.probe = "patch_embedding.weight";
            c.n_ref = mc.layer.d_model * 2 * 2 * 2;
        } else {
            assert_int_equal(tfm_model_create(&mc, &c.model), TFM_OK);
        }
        lcg_randomize(c.model, 95 + a);
        assert_int_equal(tfm_module_train(c.model, 1), TFM_OK);
        c.B = 2;
        c.L = 5;
        for (int i = 0; i < 10; i++)
            c.ids[i] = (int32_t)((3 * i + 1) % 11);
        c.g = a == 2 ? lcg_fill(make2(2, 11, NULL))
                     : lcg_fill(make3(2, 5, 11, NULL));
        c.reference = malloc((size_t)c.n_ref * sizeof *c.reference);
        assert_non_null(c.reference);
        model_bwd_setup(&c);
        assert_int_equal(model_bwd_run(&c), TFM_OK);
        float *g = NULL;
        assert_int_equal(tfm_module_grad(c.model, c.probe, &g), TFM_OK);
        memcpy(c.reference, g, (size_t)c.n_ref * sizeof *g);
        oom_case oc = { .name = a == 0   ? "tfm_model_backward (decoder-only)"
                                : a == 1 ? "tfm_model_seq2seq_backward"
                                         : "tfm_model_image_backward",
                        .setup = model_bwd_setup, .run = model_bwd_run,
                        .on_ok = model_bwd_on_ok, .ctx = &c };
        run_case(&oc);
        free(c.reference);
        tfm_tensor_free(c.g);
        tfm_tensor_free(c.pixels);
        tfm_module_free(c.model);
    }
}

/* A layer's training forward kept for its backward (src/tape.h): the
 * training-mode forward then the backward of an encoder layer (x [2, 200,
 * 16], d_ff 1024: a kept forward of several workspace chunks; a key
 * padding mask, dropout 0.1), every allocation of the two calls
 * failing in turn, the layer's kept forward dropped before each attempt
 * (evaluation mode and back) so that its arena is made anew.  A failed
 * attempt leaves grad_src as it was; a successful one gives the uninjected
 * call's grad_src and gradients bit for bit, whether the backward took the
 * kept forward or (its keeping having failed) recomputed it. */
typedef struct kept_ctx {
    tfm_module *layer;
    tfm_tensor *x, *y, *g, *gx, *pad;
    tfm_attention_masks masks;
    float *ref_gx, *ref_grad;
    size_t n_grad;
} kept_ctx;

static void kept_setup(void *p)
{
    kept_ctx *c = p;
    assert_int_equal(tfm_module_train(c->layer, 0), TFM_OK);
    assert_int_equal(tfm_module_train(c->layer, 1), TFM_OK);
    assert_int_equal(tfm_module_zero_grad(c->layer), TFM_OK);
    assert_int_equal(tfm_module_set_dropout_state(c->layer, 3, 0), TFM_OK);
    fill(c->gx, 7.0f);
}

static tfm_status kept_run(void *p)
{
    kept_ctx *c = p;
    tfm_status st = tfm_encoder_layer_forward(c->layer, c->x, &c->masks,
                                              c->y);
    return st != TFM_OK ? st : tfm_encoder_layer_backward(c->layer, c->x,
                                                          &c->masks, c->g,
                                                          c->gx);
}

static void kept_on_oom(void *p)
{
    kept_ctx *c = p;
    const float *gx = tfm_tensor_data(c->gx);
    for (int64_t k = 0; k < tfm_tensor_numel(c->gx); k++)
        assert_true(gx[k] == 7.0f);
}

static void kept_on_ok(void *p)
{
    kept_ctx *c = p;
    float *g = NULL;
    assert_memory_equal(tfm_tensor_data(c->gx), c->ref_gx,
                        (size_t)tfm_tensor_numel(c->gx) * sizeof(float));
    assert_int_equal(tfm_module_grad(c->layer, "linear1.weight", &g), TFM_OK);
    assert_memory_equal(g, c->ref_grad, c->n_grad * sizeof *g);
}

static void test_kept_forward(void **state)
{
    (void)state;
    kept_ctx c;
    memset(&c, 0, sizeof c);
    tfm_layer_config lc = tfm_layer_config_default(16, 2);
    lc.d_ff = 1024;
    assert_int_equal(tfm_encoder_layer_create(&lc, &c.layer), TFM_OK);
    lcg_randomize(c.layer, 93);
    assert_int_equal(tfm_module_train(c.layer, 1), TFM_OK);
    assert_int_equal(tfm_module_set_dropout(c.layer, 0.1f), TFM_OK);
    c.x = lcg_fill(make3(2, 200, 16, NULL));
    c.g = lcg_fill(make3(2, 200, 16, NULL));
    c.y = make3(2, 200, 16, NULL);
    c.gx = make3(2, 200, 16, NULL);
    c.pad = make2(2, 200, NULL);
    tfm_tensor_data(c.pad)[199] = 1.0f;
    c.masks.key_padding_mask = c.pad;
    c.masks.key_padding_kind = TFM_MASK_BLOCK;
    c.n_grad = 1024 * 16;
    c.ref_gx = malloc((size_t)tfm_tensor_numel(c.gx) * sizeof(float));
    c.ref_grad = malloc(c.n_grad * sizeof(float));
    assert_true(c.ref_gx && c.ref_grad);
    kept_setup(&c);
    assert_int_equal(kept_run(&c), TFM_OK);
    float *g = NULL;
    assert_int_equal(tfm_module_grad(c.layer, "linear1.weight", &g), TFM_OK);
    memcpy(c.ref_grad, g, c.n_grad * sizeof *g);
    memcpy(c.ref_gx, tfm_tensor_data(c.gx),
           (size_t)tfm_tensor_numel(c.gx) * sizeof(float));
    oom_case oc = { .name = "encoder layer: kept forward, then backward",
                    .setup = kept_setup, .run = kept_run,
                    .on_oom = kept_on_oom, .on_ok = kept_on_ok, .ctx = &c };
    run_case(&oc);
    free(c.ref_gx);
    free(c.ref_grad);
    tfm_tensor *t[] = { c.x, c.y, c.g, c.gx, c.pad };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        tfm_tensor_free(t[i]);
    tfm_module_free(c.layer);
}

static void test_backward(void **state)
{
    (void)state;
    bwd_ctx b = { 0 };
    assert_int_equal(tfm_feed_forward_create(16, 1024, TFM_ACTIVATION_GELU,
                                             &b.ff), TFM_OK);
    lcg_randomize(b.ff, 90);
    assert_int_equal(tfm_module_train(b.ff, 1), TFM_OK);
    b.x = lcg_fill(make3(2, 400, 16, NULL));
    b.g = lcg_fill(make3(2, 400, 16, NULL));
    b.gx = make3(2, 400, 16, NULL);
    b.probe = "linear1.weight";
    oom_case c = { .name = "tfm_feed_forward_backward (800 x 1024 scratch)",
                   .setup = bwd_setup, .run = bwd_run, .on_oom = bwd_on_oom,
                   .on_ok = bwd_on_ok, .ctx = &b };
    run_case(&c);
    /* The cross-attention block: x [2, 40, 16] over memory [2, 30, 16]. */
    bwd_ctx a = { 0 };
    tfm_layer_config lc = tfm_layer_config_default(16, 2);
    assert_int_equal(tfm_cross_attention_create(&lc, &a.ff), TFM_OK);
    lcg_randomize(a.ff, 91);
    assert_int_equal(tfm_module_train(a.ff, 1), TFM_OK);
    a.x = lcg_fill(make3(2, 40, 16, NULL));
    a.g = lcg_fill(make3(2, 40, 16, NULL));
    a.gx = make3(2, 40, 16, NULL);
    a.memory = lcg_fill(make3(2, 30, 16, NULL));
    a.gm = make3(2, 30, 16, NULL);
    a.probe = "multihead_attn.in_proj_weight";
    oom_case ca = { .name = "tfm_cross_attention_backward",
                    .setup = bwd_setup, .run = bwd_run, .on_oom = bwd_on_oom,
                    .on_ok = bwd_on_ok, .ctx = &a };
    run_case(&ca);
    /* Multi-head attention with the learned variants whose backward
     * takes the most scratch: the additive score under GQA, Shaw with
     * relative values, T5 (x [2, 40, 16], 2 heads). */
    static const char *const names[3] = {
        "tfm_mha_backward (additive score, GQA)",
        "tfm_mha_backward (Shaw keys and values)",
        "tfm_mha_backward (T5 bias)" };
    for (int v = 0; v < 3; v++) {
        tfm_attention_config ac;
        tfm_attention_config_init(&ac);
        if (v == 0) {
            ac.score = TFM_SCORE_ADDITIVE;
            ac.n_kv_heads = 1;
        } else if (v == 1) {
            ac.relative = TFM_RELATIVE_SHAW;
            ac.max_distance = 3;
            ac.relative_values = 1;
        } else {
            ac.relative = TFM_RELATIVE_T5;
        }
        tfm_mha_options mo;
        tfm_mha_options_init(&mo);
        mo.attention = &ac;
        bwd_ctx m = { .x = a.x, .g = a.g, .gx = a.gx,
                      .probe = "in_proj_weight" };
        assert_int_equal(tfm_mha_create_v2(16, 2, &mo, &m.ff), TFM_OK);
        lcg_randomize(m.ff, 92 + v);
        assert_int_equal(tfm_module_train(m.ff, 1), TFM_OK);
        oom_case cm = { .name = names[v], .setup = bwd_setup,
                        .run = bwd_run, .on_oom = bwd_on_oom,
                        .on_ok = bwd_on_ok, .ctx = &m };
        run_case(&cm);
        tfm_module_free(m.ff);
    }
    tfm_tensor *t[5] = { a.x, a.g, a.gx, a.memory, a.gm };
    for (int i = 0; i < 5; i++)
        tfm_tensor_free(t[i]);
    tfm_module_free(a.ff);
    tfm_tensor_free(b.x);
    tfm_tensor_free(b.g);
    tfm_tensor_free(b.gx);
    tfm_module_free(b.ff);
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
        cmocka_unit_test(test_spm_json_load),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_forward_attention),
        cmocka_unit_test(test_forward_layers),
        cmocka_unit_test(test_forward_models),
        cmocka_unit_test(test_forward_images),
        cmocka_unit_test(test_forward_large_scratch),
        cmocka_unit_test(test_kv_cache),
        cmocka_unit_test(test_generate),
        cmocka_unit_test(test_beam_search),
        cmocka_unit_test(test_cjson_allocations),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_module_train),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_model_backward),
        cmocka_unit_test(test_kept_forward),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
