/* Threads: forward passes and generation on shared modules from 8 threads.
 *
 * One multi-head attention layer, one encoder layer, one encoder-decoder
 * Transformer and one decoder-only model are created and filled once, then
 * shared read-only by THREADS threads that start together (a barrier) and
 * each run every task ROUNDS times in a different order:
 *   - tfm_mha_forward with padding, causal and additive masks and weights,
 *     and a wider one (d_model 96) whose work the library splits over its
 *     own thread pool (which only one caller owns at a time; the others
 *     run the same chunks inline);
 *   - tfm_encoder_layer_forward with a padding mask;
 *   - tfm_transformer_forward with source padding and a causal target;
 *   - tfm_model_logits on a batch of two sequences;
 *   - tfm_model_generate, greedy and sampled (seeded), sliding window;
 *   - KV-cache decoding with a cache per thread: prefill, then one token
 *     at a time, every step's logits checked.
 * Every output must equal, bit for bit, the one computed by the main
 * thread alone before the threads start.  module.h promises that forward
 * passes only read the module and keep their scratch in per-thread
 * workspaces; tools/reliability.sh also runs this test under
 * ThreadSanitizer.  The threads do not use CMocka's assertions (they are
 * not thread-safe): each records its first mismatch for the main thread. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <transformer/transformer.h>

#include "test_util.h"

#define THREADS 8
#define ROUNDS 20 /* $TFM_THREADS_ROUNDS overrides (valgrind: fewer) */
#define BIG_D 96  /* large enough for the library's pool to split it */
#define D 16
#define HEADS 4
#define VOCAB 37
#define CTX 12
#define N_GEN 16
#define N_PROMPT 5

/* ---- shared state, written only before the threads start ---------------- */

typedef struct shared {
    tfm_module *mha, *encoder_layer, *transformer, *model, *big_mha;
    /* inputs */
    tfm_tensor *x;          /* [2, 7, D] */
    tfm_tensor *memory;     /* [2, 9, D] */
    tfm_tensor *padding7;   /* [2, 7] */
    tfm_tensor *padding9;   /* [2, 9] */
    tfm_tensor *additive;   /* [7, 7] */
    tfm_tensor *big_x;      /* [2, 48, BIG_D] */
    int32_t ids[2 * 10];
    int32_t prompt[N_PROMPT];
    /* references */
    tfm_tensor *mha_out, *mha_weights, *enc_out, *tr_out, *logits, *big_out;
    int32_t gen_greedy[N_GEN], gen_sampled[N_GEN];
    tfm_tensor *kv_prefill;             /* [1, VOCAB]: last prompt position */
    tfm_tensor *kv_steps[CTX];          /* [1, VOCAB] per decoded token */
    int32_t kv_tokens[CTX];
    int n_kv_steps;
} shared;

static shared S;

/* A new tensor, or NULL when it cannot be made: no CMocka assertion, so
 * that the worker threads may call it. */
static tfm_tensor *tensor(int rank, int64_t a, int64_t b, int64_t c,
                          int64_t d)
{
    const int64_t shape[4] = { a, b, c, d };
    tfm_tensor *t = NULL;
    if (tfm_tensor_create(rank, shape, &t) != TFM_OK)
        return NULL;
    return t;
}

static int same(const tfm_tensor *a, const tfm_tensor *b)
{
    return tfm_tensor_numel(a) == tfm_tensor_numel(b) &&
           memcmp(tfm_tensor_data_const(a), tfm_tensor_data_const(b),
                  (size_t)tfm_tensor_numel(a) * sizeof(float)) == 0;
}

/* ---- the tasks: each computes into fresh outputs and compares ------------ */

typedef struct worker {
    int index;
    pthread_t thread;
    long calls;
    char error[256];    /* first failure, empty when none */
} worker;

static void report(worker *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void report(worker *w, const char *fmt, ...)
{
    if (w->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(w->error, sizeof w->error, "thread %d: ", w->index);
    vsnprintf(w->error + n, sizeof w->error - (size_t)n, fmt, ap);
    va_end(ap);
}

static tfm_status run_mha(tfm_tensor *out, tfm_tensor *weights)
{
    tfm_attention_masks m = {
        .causal = TFM_CAUSAL_TOP_LEFT,
        .key_padding_mask = S.padding7,
        .key_padding_kind = TFM_MASK_BLOCK,
        .attn_mask = S.additive,
        .attn_mask_kind = TFM_MASK_ADDITIVE,
    };
    return tfm_mha_forward(S.mha, S.x, S.x, S.x, &m, out, weights);
}

static tfm_status run_big_mha(tfm_tensor *out)
{
    tfm_attention_masks m = { .causal = TFM_CAUSAL_TOP_LEFT };
    return tfm_mha_forward(S.big_mha, S.big_x, S.big_x, S.big_x, &m, out,
                           NULL);
}

static tfm_status run_encoder_layer(tfm_tensor *out)
{
    tfm_attention_masks m = { .key_padding_mask = S.padding7 };
    return tfm_encoder_layer_forward(S.encoder_layer, S.x, &m, out);
}

static tfm_status run_transformer(tfm_tensor *out)
{
    tfm_attention_masks src = { .key_padding_mask = S.padding9 };
    tfm_attention_masks tgt = { .causal = TFM_CAUSAL_TOP_LEFT };
    return tfm_transformer_forward(S.transformer, S.memory, S.x, &src, &tgt,
                                   &src, out);
}

static tfm_status run_logits(tfm_tensor *out)
{
    return tfm_model_logits(S.model, S.ids, 2, 10, out);
}

static tfm_status run_generate(int sampled, int32_t *out)
{
    tfm_sampling s = tfm_sampling_default();
    if (sampled)
        s = (tfm_sampling){ 0, 0.8f, 10, 0.9f };
    return tfm_model_generate(S.model, S.prompt, N_PROMPT, N_GEN, &s, 1234,
                              out);
}

/* Prefills the prompt into a fresh cache, then decodes kv_tokens one at a
 * time.  check: compare with the references (else: record them). */
static tfm_status run_kv(worker *w, int check)
{
    tfm_kv_cache *cache = NULL;
    tfm_tensor *logits = tensor(2, 1, VOCAB, 1, 1);
    tfm_status st = logits ? tfm_kv_cache_create(S.model, CTX, &cache)
                           : TFM_ERR_OUT_OF_MEMORY;
    if (st == TFM_OK)
        st = tfm_kv_cache_decode(cache, S.prompt, N_PROMPT, logits);
    if (st == TFM_OK) {
        if (!check) {
            S.kv_prefill = tensor(2, 1, VOCAB, 1, 1);
            tfm_tensor_copy(S.kv_prefill, logits);
        } else if (!same(logits, S.kv_prefill)) {
            report(w, "KV-cache prefill logits differ");
        }
    }
    for (int i = 0; st == TFM_OK && N_PROMPT + i < CTX; i++) {
        st = tfm_kv_cache_decode(cache, &S.kv_tokens[i], 1, logits);
        if (st != TFM_OK)
            break;
        if (!check) {
            S.kv_steps[i] = tensor(2, 1, VOCAB, 1, 1);
            tfm_tensor_copy(S.kv_steps[i], logits);
            S.n_kv_steps = i + 1;
        } else if (!same(logits, S.kv_steps[i])) {
            report(w, "KV-cache step %d logits differ", i);
        }
    }
    if (st == TFM_OK && check && tfm_kv_cache_length(cache) != CTX)
        report(w, "KV cache holds %lld positions, expected %d",
               (long long)tfm_kv_cache_length(cache), CTX);
    tfm_kv_cache_free(cache);
    tfm_tensor_free(logits);
    return st;
}

#define N_TASKS 8

static void run_task(worker *w, int task)
{
    tfm_status st = TFM_OK;
    tfm_tensor *a = NULL, *b = NULL;
    int32_t ids[N_GEN];
    switch (task) {
    case 0:
        a = tensor(3, 2, 7, D, 1);
        b = tensor(3, 2, 7, 7, 1);
        st = run_mha(a, b);
        if (st == TFM_OK && (!same(a, S.mha_out) || !same(b, S.mha_weights)))
            report(w, "tfm_mha_forward output differs");
        break;
    case 1:
        a = tensor(3, 2, 7, D, 1);
        st = run_encoder_layer(a);
        if (st == TFM_OK && !same(a, S.enc_out))
            report(w, "tfm_encoder_layer_forward output differs");
        break;
    case 2:
        a = tensor(3, 2, 7, D, 1);
        st = run_transformer(a);
        if (st == TFM_OK && !same(a, S.tr_out))
            report(w, "tfm_transformer_forward output differs");
        break;
    case 3:
        a = tensor(3, 2, 10, VOCAB, 1);
        st = run_logits(a);
        if (st == TFM_OK && !same(a, S.logits))
            report(w, "tfm_model_logits output differs");
        break;
    case 4:
    case 5:
        st = run_generate(task == 5, ids);
        if (st == TFM_OK &&
            memcmp(ids, task == 5 ? S.gen_sampled : S.gen_greedy,
                   sizeof ids) != 0)
            report(w, "tfm_model_generate (%s) gave other tokens",
                   task == 5 ? "sampled" : "greedy");
        break;
    case 6:
        a = tensor(3, 2, 48, BIG_D, 1);
        st = run_big_mha(a);
        if (st == TFM_OK && !same(a, S.big_out))
            report(w, "tfm_mha_forward (d_model %d) output differs", BIG_D);
        break;
    default:
        st = run_kv(w, 1);
    }
    if (st != TFM_OK)
        report(w, "task %d failed: %s", task, tfm_last_error());
    tfm_tensor_free(a);
    tfm_tensor_free(b);
    w->calls++;
}

static pthread_barrier_t start;
static int rounds = ROUNDS;

static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&start);
    for (int r = 0; r < rounds; r++)
        for (int t = 0; t < N_TASKS; t++)
            run_task(w, (t + w->index + r) % N_TASKS);
    /* The thread's workspace is freed when it exits (pthread key
     * destructor); valgrind and LeakSanitizer check that. */
    return NULL;
}

/* ---- setup and the test ---------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    memset(&S, 0, sizeof S);
    tfm_layer_config cfg = tfm_layer_config_default(D, HEADS);
    cfg.d_ff = 32;
    cfg.activation = TFM_ACTIVATION_GELU;
    assert_int_equal(tfm_mha_create(D, HEADS, 0, 0, 1, &S.mha), TFM_OK);
    assert_int_equal(tfm_encoder_layer_create(&cfg, &S.encoder_layer), TFM_OK);
    cfg.norm_first = 1;
    assert_int_equal(tfm_transformer_create(&cfg, 2, 2, &S.transformer),
                     TFM_OK);
    const tfm_model_config mc =
        tiny_model_config(TFM_ARCH_DECODER_ONLY, cfg, VOCAB, 2, CTX);
    assert_int_equal(tfm_model_create(&mc, &S.model), TFM_OK);
    assert_int_equal(tfm_mha_create(BIG_D, 6, 0, 0, 1, &S.big_mha), TFM_OK);
    lcg_randomize(S.big_mha, 6);
    lcg_randomize(S.mha, 1);
    lcg_randomize(S.encoder_layer, 2);
    lcg_randomize(S.transformer, 3);
    lcg_randomize(S.model, 4);
    lcg_seed(5);
    S.x = lcg_fill(make3(2, 7, D, NULL));
    S.memory = lcg_fill(make3(2, 9, D, NULL));
    S.padding7 = make2(2, 7, NULL);
    S.padding9 = make2(2, 9, NULL);
    tfm_tensor_data(S.padding7)[13] = 1.0f;  /* last key of sequence 2 */
    tfm_tensor_data(S.padding9)[16] = 1.0f;
    tfm_tensor_data(S.padding9)[17] = 1.0f;
    S.additive = lcg_fill(make2(7, 7, NULL));
    S.big_x = lcg_fill(make3(2, 48, BIG_D, NULL));
    for (int i = 0; i < 20; i++)
        S.ids[i] = (i * 11 + 3) % VOCAB;
    for (int i = 0; i < N_PROMPT; i++)
        S.prompt[i] = (i * 7 + 1) % VOCAB;
    for (int i = 0; i < CTX; i++)
        S.kv_tokens[i] = (i * 5 + 2) % VOCAB;

    /* References, on this thread alone. */
    S.mha_out = make3(2, 7, D, NULL);
    S.mha_weights = make3(2, 7, 7, NULL);
    S.enc_out = make3(2, 7, D, NULL);
    S.tr_out = make3(2, 7, D, NULL);
    S.logits = make3(2, 10, VOCAB, NULL);
    assert_int_equal(run_mha(S.mha_out, S.mha_weights), TFM_OK);
    assert_int_equal(run_encoder_layer(S.enc_out), TFM_OK);
    assert_int_equal(run_transformer(S.tr_out), TFM_OK);
    assert_int_equal(run_logits(S.logits), TFM_OK);
    S.big_out = make3(2, 48, BIG_D, NULL);
    assert_int_equal(run_big_mha(S.big_out), TFM_OK);
    assert_int_equal(run_generate(0, S.gen_greedy), TFM_OK);
    assert_int_equal(run_generate(1, S.gen_sampled), TFM_OK);
    worker w = { 0 };
    assert_int_equal(run_kv(&w, 0), TFM_OK);
    assert_int_equal(S.n_kv_steps, CTX - N_PROMPT);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tfm_module_free(S.mha);
    tfm_module_free(S.encoder_layer);
    tfm_module_free(S.transformer);
    tfm_module_free(S.model);
    tfm_module_free(S.big_mha);
    tfm_tensor *all[] = { S.big_x, S.big_out, S.x, S.memory, S.padding7, S.padding9, S.additive,
                          S.mha_out, S.mha_weights, S.enc_out, S.tr_out,
                          S.logits, S.kv_prefill };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tfm_tensor_free(all[i]);
    for (int i = 0; i < S.n_kv_steps; i++)
        tfm_tensor_free(S.kv_steps[i]);
    tfm_workspace_release();
    return 0;
}

static void test_threads_share_modules(void **state)
{
    (void)state;
    worker w[THREADS];
    memset(w, 0, sizeof w);
    assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
    for (int i = 0; i < THREADS; i++) {
        w[i].index = i;
        assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main,
                                        &w[i]), 0);
    }
    long calls = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(w[i].thread, NULL), 0);
        calls += w[i].calls;
    }
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; i++)
        if (w[i].error[0])
            fail_msg("%s", w[i].error);
    assert_int_equal(calls, (long)THREADS * rounds * N_TASKS);
    printf("%d threads, %ld calls, every output identical to the "
           "single-threaded one\n", THREADS, calls);
}

/* ---- the library's pool size: 1, 2 and 8 threads ---------------------- */

/* One attention variant over enough rows and heads for the pool to split
 * the kernel's items (batch element, head, block of 128 query rows). */
static void variant_outputs(const tfm_attention_config *a, int64_t H,
                            int64_t Hkv, int64_t L, int64_t S, int with_w,
                            tfm_tensor **out, tfm_tensor **w)
{
    const int64_t dk = 8;
    tfm_module *m = NULL;
    assert_int_equal(tfm_attention_create(dk, dk, H, a, &m), TFM_OK);
    lcg_randomize(m, 60);
    lcg_seed(61);
    tfm_tensor *q = lcg_fill(make4(2, H, L, dk, NULL));
    tfm_tensor *k = make4(2, Hkv, S, dk, NULL);
    tfm_tensor *v = make4(2, Hkv, S, dk, NULL);
    for (int64_t i = 0; i < tfm_tensor_numel(k); i++) { /* interleaved */
        tfm_tensor_data(k)[i] = lcg_next();
        tfm_tensor_data(v)[i] = lcg_next();
    }
    tfm_tensor *pad = make2(2, S, NULL);
    tfm_tensor_data(pad)[2 * S - 1] = 1.0f;     /* last key of batch 1 */
    tfm_tensor_data(pad)[S + 3] = 1.0f;
    const tfm_attention_masks masks = { .causal = TFM_CAUSAL_BOTTOM_RIGHT,
                                        .key_padding_mask = pad };
    const int64_t os[4] = { 2, H, L, dk }, ws[4] = { 2, H, L, S };
    assert_int_equal(tfm_tensor_create(4, os, out), TFM_OK);
    *w = NULL;
    if (with_w)
        assert_int_equal(tfm_tensor_create(4, ws, w), TFM_OK);
    assert_int_equal(tfm_attention_forward(m, q, k, v, &masks, *out, *w),
                     TFM_OK);
    tfm_tensor *all[] = { q, k, v, pad };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tfm_tensor_free(all[i]);
    tfm_module_free(m);
}

/* Sparse patterns with relative terms give the same bits whatever the
 * size of the library's pool: each item of the kernel is computed by one
 * thread in a fixed order, so the split must not show in the results. */
static void test_pool_sizes_variants(void **state)
{
    (void)state;
    const int saved = tfm_get_num_threads();
    tfm_attention_config a[4];
    for (int i = 0; i < 4; i++)
        tfm_attention_config_init(&a[i]);
    /* BigBird (global, window, random blocks) with T5 buckets. */
    a[0].sparsity = TFM_SPARSE_BIGBIRD;
    a[0].block_size = 16;
    a[0].window = 1;
    a[0].n_global = 1;
    a[0].n_random_blocks = 3;
    a[0].seed = 99;
    a[0].relative = TFM_RELATIVE_T5;
    /* A sliding window with global tokens and Shaw on keys and values. */
    a[1].sparsity = TFM_SPARSE_SLIDING_WINDOW;
    a[1].window = 40;
    a[1].n_global = 2;
    a[1].relative = TFM_RELATIVE_SHAW;
    a[1].max_distance = 8;
    a[1].relative_values = 1;
    /* GQA with RoPE, ALiBi and a dilated window. */
    a[2].n_kv_heads = 2;
    a[2].rope = TFM_ROPE_ADJACENT;
    a[2].relative = TFM_RELATIVE_ALIBI;
    a[2].sparsity = TFM_SPARSE_DILATED;
    a[2].window = 20;
    a[2].dilation = 3;
    /* GQA with RoPE and a dilated window alone: the kernel's split into
     * position classes (without weights; with them, the general path). */
    a[3].n_kv_heads = 2;
    a[3].rope = TFM_ROPE_HALF;
    a[3].sparsity = TFM_SPARSE_DILATED;
    a[3].window = 20;
    a[3].dilation = 3;
    static const int counts[] = { 1, 2, 8 };
    for (int v = 0; v < 4; v++)
        for (int with_w = 0; with_w < 2; with_w++) {
            tfm_tensor *ref_out = NULL, *ref_w = NULL;
            for (int c = 0; c < 3; c++) {
                tfm_set_num_threads(counts[c]);
                tfm_tensor *out = NULL, *w = NULL;
                variant_outputs(&a[v], 4, v >= 2 ? 2 : 4, 300, 340, with_w,
                                &out, &w);
                if (!ref_out) {
                    ref_out = out;
                    ref_w = w;
                    continue;
                }
                if (!same(out, ref_out) || (w && !same(w, ref_w)))
                    fail_msg("variant %d (weights %s): %d threads differ "
                             "from 1", v, with_w ? "on" : "off", counts[c]);
                tfm_tensor_free(out);
                tfm_tensor_free(w);
            }
            tfm_tensor_free(ref_out);
            tfm_tensor_free(ref_w);
        }
    tfm_set_num_threads(saved);
}

int main(void)
{
    const char *r = getenv("TFM_THREADS_ROUNDS");
    if (r && atoi(r) > 0)
        rounds = atoi(r);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_modules),
        cmocka_unit_test(test_pool_sizes_variants),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
