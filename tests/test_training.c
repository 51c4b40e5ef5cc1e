/* Losses and masked-LM inputs (training.h) against PyTorch 1.13: the
 * reference file (tools/make_training_fixtures.py; committed in
 * tests/fixtures/training/reference.safetensors, regenerated at test time when torch
 * is available) holds torch.nn.functional.cross_entropy in float64 and its
 * autograd gradient, and BERT's masking replayed with a Python SplitMix64.
 * Each case prints its largest relative error. */
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"
#include <transformer/transformer.h>

#include "training_reference.h"

static int32_t *to_ids(const tfm_tensor *t)
{
    int64_t n = tfm_tensor_numel(t);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    assert_non_null(ids);
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)tfm_tensor_data_const(t)[i];
    return ids;
}

static void test_cross_entropy_vs_torch(void **state)
{
    (void)state;
    int cases = 0;
    double worst_loss = 0.0, worst_grad = 0.0;
    for (int k = 0;; k++) {
        char p[16];
        snprintf(p, sizeof p, "ce%d.", k);
        tfm_tensor *logits = ref(p, "logits");
        if (!logits)
            break;
        tfm_tensor *tt = ref(p, "targets"), *meta = ref(p, "meta");
        tfm_tensor *want_loss = ref(p, "loss"), *want_d = ref(p, "dlogits");
        assert_non_null(tt);
        assert_non_null(meta);
        assert_non_null(want_loss);
        assert_non_null(want_d);
        const float *m = tfm_tensor_data(meta);
        int32_t *targets = to_ids(tt);
        tfm_tensor *d = NULL;
        int64_t shape[3];
        int rank = tfm_tensor_rank(logits);
        for (int a = 0; a < rank; a++)
            shape[a] = tfm_tensor_dim(logits, a);
        assert_int_equal(tfm_tensor_create(rank, shape, &d), TFM_OK);
        float loss = -1.0f, loss2 = -1.0f;
        tfm_status (*fn)(const tfm_tensor *, const int32_t *, int32_t, float,
                         tfm_reduction, float *, tfm_tensor *) =
            m[3] != 0.0f ? tfm_causal_lm_loss : tfm_cross_entropy;
        assert_int_equal(fn(logits, targets, (int32_t)m[0], m[1],
                            (tfm_reduction)m[2], &loss, d), TFM_OK);
        /* Without dlogits: the same loss. */
        assert_int_equal(fn(logits, targets, (int32_t)m[0], m[1],
                            (tfm_reduction)m[2], &loss2, NULL), TFM_OK);
        assert_true(loss == loss2);
        const float wl = tfm_tensor_data(want_loss)[0];
        const double el = fabs((double)loss - wl) / fabs((double)wl);
        const double eg = rel_err(tfm_tensor_data(d), tfm_tensor_data(want_d),
                                  tfm_tensor_numel(d));
        printf("  ce%d: loss %.9g (torch %.9g) rel %.2e, dlogits rel %.2e\n",
               k, (double)loss, (double)wl, el, eg);
        assert_true(el <= 1e-6);
        assert_true(eg <= 1e-6);
        if (el > worst_loss)
            worst_loss = el;
        if (eg > worst_grad)
            worst_grad = eg;
        cases++;
        free(targets);
        tfm_tensor_free(logits);
        tfm_tensor_free(tt);
        tfm_tensor_free(meta);
        tfm_tensor_free(want_loss);
        tfm_tensor_free(want_d);
        tfm_tensor_free(d);
    }
    printf("  %d cases: max loss rel %.2e, max dlogits rel %.2e\n", cases,
           worst_loss, worst_grad);
    assert_true(cases >= 10);
}

/* Hand-worked: logits [0, ln 3] (p = [1/4, 3/4]), target 1, smoothing
 * 0.2: l = 0.8 * ln(4/3) + 0.1 * (ln 4 + ln(4/3)); d = p - 0.8 e_1 - 0.1
 * = [0.15, -0.15].  A second, ignored row adds nothing to the mean. */
static void test_hand_worked(void **state)
{
    (void)state;
    const float x[4] = { 0.0f, (float)log(3.0), 5.0f, -2.0f };
    tfm_tensor *logits = make2(2, 2, x), *d = make2(2, 2, NULL);
    const int32_t t[2] = { 1, -100 };
    float loss;
    assert_int_equal(tfm_cross_entropy(logits, t, -100, 0.2f,
                                       TFM_REDUCTION_MEAN, &loss, d), TFM_OK);
    const double want = 0.8 * log(4.0 / 3.0) +
                        0.1 * (log(4.0) + log(4.0 / 3.0));
    assert_true(fabs(loss - want) <= 1e-6 * want);
    const float *g = tfm_tensor_data(d);
    assert_true(fabs(g[0] - 0.15) <= 1e-6 && fabs(g[1] + 0.15) <= 1e-6);
    assert_true(g[2] == 0.0f && g[3] == 0.0f);
    /* Every row ignored: a mean of 0 (torch: NaN) and a zero gradient. */
    const int32_t none[2] = { -100, -100 };
    assert_int_equal(tfm_cross_entropy(logits, none, -100, 0.1f,
                                       TFM_REDUCTION_MEAN, &loss, d), TFM_OK);
    assert_true(loss == 0.0f);
    for (int i = 0; i < 4; i++)
        assert_true(g[i] == 0.0f);
    tfm_tensor_free(logits);
    tfm_tensor_free(d);
}

static void test_errors(void **state)
{
    (void)state;
    float x[6] = { 1, 2, 3, 4, 5, 6 };
    tfm_tensor *logits = make2(2, 3, x), *d = make2(2, 3, NULL);
    tfm_tensor *bad = make2(3, 2, NULL), *l1 = make(1, (int64_t[]){ 6 }, x);
    float *g = tfm_tensor_data(d);
    for (int i = 0; i < 6; i++)
        g[i] = 7.0f;
    const int32_t t[2] = { 0, 2 };
    float loss = 42.0f;
    assert_int_equal(tfm_cross_entropy(NULL, t, -100, 0, 0, &loss, d),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_cross_entropy(logits, NULL, -100, 0, 0, &loss, d),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_cross_entropy(logits, t, -100, 0, 0, NULL, d),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_cross_entropy(logits, t, -100, 0, 0, &loss, bad),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_cross_entropy(l1, t, -100, 0, 0, &loss, NULL),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_causal_lm_loss(logits, t, -100, 0, 0, &loss, NULL),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_cross_entropy(logits, t, -100, 1.5f, 0, &loss, d),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_cross_entropy(logits, t, -100, NAN, 0, &loss, d),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_cross_entropy(logits, t, -100, 0,
                                       (tfm_reduction)7, &loss, d),
                     TFM_ERR_INVALID_ARGUMENT);
    const int32_t out_of_range[2] = { 0, 3 };
    assert_int_equal(tfm_cross_entropy(logits, out_of_range, -100, 0, 0,
                                       &loss, d), TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "row 1"));
    /* NaN and infinity, also in an ignored row. */
    const int32_t ignore_second[2] = { 0, -100 };
    float *xd = tfm_tensor_data(logits);
    xd[4] = NAN;
    assert_int_equal(tfm_cross_entropy(logits, ignore_second, -100, 0.1f, 0,
                                       &loss, d), TFM_ERR_NON_FINITE);
    assert_non_null(strstr(tfm_last_error(), "row 1"));
    xd[4] = 5.0f;
    xd[0] = -INFINITY;
    assert_int_equal(tfm_cross_entropy(logits, t, -100, 0, 0, &loss, d),
                     TFM_ERR_NON_FINITE);
    /* Nothing written on any error. */
    assert_true(loss == 42.0f);
    for (int i = 0; i < 6; i++)
        assert_true(g[i] == 7.0f);
    tfm_tensor_free(logits);
    tfm_tensor_free(d);
    tfm_tensor_free(bad);
    tfm_tensor_free(l1);
}

static void test_masked_lm_vs_python(void **state)
{
    (void)state;
    int cases = 0;
    for (int k = 0;; k++) {
        char p[16];
        snprintf(p, sizeof p, "mlm%d.", k);
        tfm_tensor *ti = ref(p, "ids");
        if (!ti)
            break;
        tfm_tensor *tin = ref(p, "inputs"), *tt = ref(p, "targets");
        tfm_tensor *meta = ref(p, "meta");
        const float *m = tfm_tensor_data(meta);
        const int n_never = (int)tfm_tensor_numel(meta) - 5;
        int32_t never[8];
        for (int j = 0; j < n_never; j++)
            never[j] = (int32_t)m[5 + j];
        int32_t *ids = to_ids(ti), *want_in = to_ids(tin), *want_t = to_ids(tt);
        const int64_t n = tfm_tensor_numel(ti);
        int32_t *in = malloc((size_t)n * 4), *tg = malloc((size_t)n * 4);
        tfm_rng rng;
        tfm_rng_seed(&rng, (uint64_t)m[0]);
        assert_int_equal(tfm_masked_lm_inputs(ids, n, (int32_t)m[1],
                                              (int32_t)m[2], m[3], never,
                                              n_never, (int32_t)m[4], &rng,
                                              in, tg), TFM_OK);
        int64_t chosen = 0;
        for (int64_t i = 0; i < n; i++) {
            assert_int_equal(in[i], want_in[i]);
            assert_int_equal(tg[i], want_t[i]);
            chosen += tg[i] != (int32_t)m[4];
        }
        printf("  mlm%d: %lld positions, %lld chosen, equal\n", k,
               (long long)n, (long long)chosen);
        /* In place (inputs = ids) gives the same. */
        tfm_rng_seed(&rng, (uint64_t)m[0]);
        assert_int_equal(tfm_masked_lm_inputs(ids, n, (int32_t)m[1],
                                              (int32_t)m[2], m[3], never,
                                              n_never, (int32_t)m[4], &rng,
                                              ids, tg), TFM_OK);
        assert_memory_equal(ids, want_in, (size_t)n * 4);
        free(ids);
        free(want_in);
        free(want_t);
        free(in);
        free(tg);
        tfm_tensor_free(ti);
        tfm_tensor_free(tin);
        tfm_tensor_free(tt);
        tfm_tensor_free(meta);
        cases++;
    }
    assert_true(cases >= 3);
}

/* The shares over many positions: 15 % chosen, of those 80 / 10 / 10
 * (mask / random / kept; a random draw may also give the same id or
 * mask_id, with probability 2 / vocab each).  Bounds are 5 standard
 * deviations of the binomial counts. */
static void test_masked_lm_shares(void **state)
{
    (void)state;
    enum { N = 200000, V = 1000, MASK = 3 };
    int32_t *ids = malloc(N * 4), *in = malloc(N * 4), *tg = malloc(N * 4);
    for (int i = 0; i < N; i++)
        ids[i] = 10 + (i * 7919) % (V - 10);
    ids[5] = 1;                             /* never masked */
    tfm_rng rng;
    tfm_rng_seed(&rng, 5);
    const int32_t never[1] = { 1 };
    assert_int_equal(tfm_masked_lm_inputs(ids, N, V, MASK, 0.15f, never, 1,
                                          -100, &rng, in, tg), TFM_OK);
    assert_int_equal(tg[5], -100);
    assert_int_equal(in[5], 1);
    long chosen = 0, masked = 0, kept = 0;
    for (int i = 0; i < N; i++) {
        if (tg[i] == -100) {
            assert_int_equal(in[i], ids[i]);
            continue;
        }
        assert_int_equal(tg[i], ids[i]);
        chosen++;
        masked += in[i] == MASK;
        kept += in[i] == ids[i];
    }
    const double n = N - 1;
    assert_true(fabs(chosen - 0.15 * n) < 5 * sqrt(n * 0.15 * 0.85));
    assert_true(fabs(masked - 0.8 * chosen) < 5 * sqrt(chosen * 0.16) + 1);
    assert_true(fabs(kept - 0.1 * chosen) < 5 * sqrt(chosen * 0.09) + 1);
    /* Errors leave the outputs and the generator as they were. */
    tfm_rng before = rng;
    in[0] = -7;
    assert_int_equal(tfm_masked_lm_inputs(ids, N, V, V, 0.15f, NULL, 0,
                                          -100, &rng, in, tg),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_masked_lm_inputs(ids, N, V, MASK, 1.5f, NULL, 0,
                                          -100, &rng, in, tg),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_masked_lm_inputs(ids, N, V, MASK, 0.1f, NULL, 2,
                                          -100, &rng, in, tg),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_masked_lm_inputs(ids, N, V, MASK, 0.1f, NULL, 0,
                                          -100, NULL, in, tg),
                     TFM_ERR_NULL_ARGUMENT);
    assert_true(in[0] == -7 && rng.state == before.state);
    free(ids);
    free(in);
    free(tg);
}

int main(int argc, char **argv)
{
    g_path = argc > 1 ? argv[1] : TFM_TRAINING_FIXTURE;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_entropy_vs_torch),
        cmocka_unit_test(test_hand_worked),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_masked_lm_vs_python),
        cmocka_unit_test(test_masked_lm_shares),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
