/* Thread count changed during forward passes (issue 13, fault 1).
 *
 * One thread flips tfm_set_num_threads between 1, 64 and counts between
 * while the main thread runs forward passes on a shared multi-head
 * attention layer (d_model 16, 4 heads, L 64, causal: the attention
 * kernel's per-thread scratch), a wider one (d_model 96: the products
 * split by src/gemm.c), a feed-forward network (both of
 * src/feed_forward.c's splits) and an encoder layer.  Every output must
 * equal, bit for bit, the output computed before the flipping starts with
 * one of the counts the flipper sets (for attention, every count gives the
 * same bits).  A call that read the count once to size its scratch and
 * again to split its work wrote into another piece's scratch (about 6 in
 * 20,000 outputs off by up to 0.28, and a data race under ThreadSanitizer,
 * which tools/reliability.sh runs this test with); one that chose between
 * splitting by rows or by columns with one count and split with another
 * gave an output of no count.
 *
 * $TFM_THREADS_ROUNDS sets the number of passes (valgrind: fewer). */
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

#define B 2
#define L 64
#define D 16
#define BIG_D 96
#define BIG_L 48
#define HEADS 4
#define D_FF 64
#define N_COUNTS 6
#define VOCAB 37
#define MODEL_L 24

typedef struct task {
    const char *name;
    tfm_module *m;
    tfm_tensor *x, *out;
    tfm_tensor *ref[N_COUNTS]; /* the output with counts[c] threads */
} task;

enum { MHA, BIG_MHA, FF, FF_FEW, ENCODER, MODEL, N_TASKS };

/* The counts the flipper sets. */
static const int counts[N_COUNTS] = { 1, 2, 3, 7, 16, 64 };

static task T[N_TASKS];
static int32_t ids[B * MODEL_L];
static int rounds = 400;
static int stop;            /* set by the main thread, read by the flipper */
static long flips;

static tfm_status run(task *t)
{
    tfm_attention_masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
    switch (t - T) {
    case MHA:
    case BIG_MHA:
        return tfm_mha_forward(t->m, t->x, t->x, t->x, &causal, t->out, NULL);
    case FF:
    case FF_FEW:
        return tfm_feed_forward_forward(t->m, t->x, t->out);
    case ENCODER:
        return tfm_encoder_layer_forward(t->m, t->x, &causal, t->out);
    default:
        return tfm_model_logits(t->m, ids, B, MODEL_L, t->out);
    }
}

static int same(const tfm_tensor *a, const tfm_tensor *b)
{
    return memcmp(tfm_tensor_data_const(a), tfm_tensor_data_const(b),
                  (size_t)tfm_tensor_numel(a) * sizeof(float)) == 0;
}

/* Whether t's output is, bit for bit, its output at one of the counts. */
static int matches_a_count(const task *t)
{
    for (int c = 0; c < N_COUNTS; c++)
        if (same(t->out, t->ref[c]))
            return 1;
    return 0;
}

static void *flipper(void *arg)
{
    static const int order[] = { 5, 0, 1, 5, 2, 0, 3, 5, 0, 4 };
    (void)arg;
    for (long i = 0; !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); i++) {
        tfm_set_num_threads(counts[order[i % 10]]);
        __atomic_store_n(&flips, i + 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    tfm_layer_config cfg = tfm_layer_config_default(D, HEADS);
    cfg.d_ff = D_FF;
    if (tfm_mha_create(D, HEADS, 0, 0, 1, &T[MHA].m) != TFM_OK ||
        tfm_mha_create(BIG_D, HEADS, 0, 0, 1, &T[BIG_MHA].m) != TFM_OK ||
        tfm_feed_forward_create(D, D_FF, TFM_ACTIVATION_GELU, &T[FF].m) !=
            TFM_OK ||
        tfm_feed_forward_create(BIG_D, 4 * BIG_D, TFM_ACTIVATION_RELU,
                                &T[FF_FEW].m) != TFM_OK ||
        tfm_encoder_layer_create(&cfg, &T[ENCODER].m) != TFM_OK)
        return -1;
    /* A decoder-only model wide enough for its products to split. */
    tfm_layer_config wide = tfm_layer_config_default(BIG_D, HEADS);
    wide.d_ff = 2 * BIG_D;
    const tfm_model_config mc =
        tiny_model_config(TFM_ARCH_DECODER_ONLY, wide, VOCAB, 2, MODEL_L);
    if (tfm_model_create(&mc, &T[MODEL].m) != TFM_OK)
        return -1;
    for (int i = 0; i < B * MODEL_L; i++)
        ids[i] = (int32_t)((i * 7 + 3) % VOCAB);
    T[MHA].name = "mha (L 64, causal)";
    T[MHA].x = make3(B, L, D, NULL);
    T[BIG_MHA].name = "mha (d_model 96)";
    T[BIG_MHA].x = make3(B, BIG_L, BIG_D, NULL);
    T[FF].name = "feed-forward (many rows)";
    T[FF].x = make3(B, L, D, NULL);
    T[FF_FEW].name = "feed-forward (few rows)";
    T[FF_FEW].x = make3(1, 3, BIG_D, NULL);
    T[ENCODER].name = "encoder layer";
    T[ENCODER].x = make3(B, L, D, NULL);
    T[MODEL].name = "decoder-only model logits (d_model 96)";
    T[MODEL].x = make3(B, MODEL_L, VOCAB, NULL); /* the logits' shape */
    const int saved = tfm_get_num_threads();
    for (int i = 0; i < N_TASKS; i++) {
        lcg_randomize(T[i].m, 100u + (uint32_t)i);
        lcg_fill(T[i].x);
        T[i].out = clone(T[i].x);
        for (int c = 0; c < N_COUNTS; c++) {
            tfm_set_num_threads(counts[c]);
            if (run(&T[i]) != TFM_OK)
                return -1;
            T[i].ref[c] = clone(T[i].out);
        }
    }
    tfm_set_num_threads(saved);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N_TASKS; i++) {
        tfm_module_free(T[i].m);
        FREE_TENSORS(T[i].x, T[i].out);
        free_tensors(T[i].ref, N_COUNTS);
    }
    return 0;
}

/* The attention kernel's split (heads and query blocks) gives the same bits
 * on every count.  (The products split by rows or by output columns
 * (src/gemm.c) round differently for different splits: OpenBLAS's kernels
 * depend on the block's size; those outputs are compared per count.) */
static void test_attention_same_bits_on_every_count(void **state)
{
    (void)state;
    for (int c = 1; c < N_COUNTS; c++)
        if (!same(T[MHA].ref[c], T[MHA].ref[0]))
            fail_msg("%s: %d threads differ from 1", T[MHA].name, counts[c]);
}

/* Each call takes one snapshot of the count: its output is, bit for bit,
 * the output at one count, however often the count changes during it. */
static void test_flipping_during_forward(void **state)
{
    (void)state;
    const int saved = tfm_get_num_threads();
    pthread_t t;
    __atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
    assert_int_equal(pthread_create(&t, NULL, flipper, NULL), 0);
    long bad = 0, per_task[N_TASKS] = { 0 };
    char first[160] = "";
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < N_TASKS; i++) {
            tfm_status st = run(&T[i]);
            if (st == TFM_OK && matches_a_count(&T[i]))
                continue;
            per_task[i]++;
            if (!bad++)
                snprintf(first, sizeof first, "%s, pass %d: %s", T[i].name,
                         r, st == TFM_OK ? "output differs" : tfm_last_error());
        }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    tfm_set_num_threads(saved);
    print_message("%d passes of %d tasks, %ld thread-count changes\n",
                  rounds, N_TASKS, __atomic_load_n(&flips, __ATOMIC_RELAXED));
    for (int i = 0; i < N_TASKS; i++)
        if (per_task[i])
            print_error("%s: %ld of %d passes differ\n", T[i].name,
                        per_task[i], rounds);
    if (bad)
        fail_msg("%ld of %d outputs match no thread count's; first: %s",
                 bad, rounds * N_TASKS, first);
}

int main(void)
{
    const char *r = getenv("TFM_THREADS_ROUNDS");
    if (r && atoi(r) > 0)
        rounds = atoi(r);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_same_bits_on_every_count),
        cmocka_unit_test(test_flipping_during_forward),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
