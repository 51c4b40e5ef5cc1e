/* Tests of the random generator and token sampling (model.h, "Sampling").
 *
 * Reference values of SplitMix64 come from this Python snippet (the
 * algorithm of Vigna's splitmix64.c):
 *
 *   M = (1 << 64) - 1
 *   s = 0
 *   def nxt():
 *       global s
 *       s = (s + 0x9E3779B97F4A7C15) & M; z = s
 *       z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
 *       z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
 *       return z ^ (z >> 31)
 *   [hex(nxt()) for _ in range(3)]
 *   # ['0xe220a8397b1dcdaf', '0x6e789e6aa1b965f4', '0x6c45d188009454f']
 *   s = 42; [(nxt() >> 40) * 2**-24 for _ in range(3)]
 *   # [0.7415648698806763, 0.1599103808403015, 0.27860110998153687]
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transformer/model.h"

/* Internal test hook of the library (src/alloc.c): the k-th allocation
 * from now fails; 0 disarms it. */
void tfm_testing_fail_allocation(long k);

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ull
#define UNTOUCHED 12345

static tfm_sampling sampling(float temperature, int64_t top_k, float top_p)
{
    tfm_sampling s = { 0, temperature, top_k, top_p };
    return s;
}

/* logits = log(probs) */
static void log_probs(const double *probs, int n, float *logits)
{
    for (int i = 0; i < n; i++)
        logits[i] = (float)log(probs[i]);
}

static int32_t draw(const float *logits, int64_t n, tfm_sampling s,
                    tfm_rng *rng)
{
    int32_t id = -1;
    assert_int_equal(tfm_sample(logits, n, &s, rng, &id), TFM_OK);
    assert_true(id >= 0 && id < n);
    return id;
}

/* Counts of `draws` samples into counts[0 .. n-1]. */
static void histogram(const float *logits, int n, tfm_sampling s,
                      uint64_t seed, int draws, int *counts)
{
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    memset(counts, 0, sizeof(int) * (size_t)n);
    for (int i = 0; i < draws; i++)
        counts[draw(logits, n, s, &rng)]++;
}

/* ---- Generator -------------------------------------------------------- */

static void test_splitmix64_reference(void **state)
{
    (void)state;
    tfm_rng rng;
    tfm_rng_seed(&rng, 0);
    assert_true(rng.state == 0);
    /* The top 24 bits of 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4,
     * 0x06C45D188009454F. */
    assert_true(tfm_rng_uniform(&rng) == (float)0xE220A8 / 16777216.0f);
    assert_true(tfm_rng_uniform(&rng) == (float)0x6E789E / 16777216.0f);
    assert_true(tfm_rng_uniform(&rng) == (float)0x06C45D / 16777216.0f);
    /* The state is the Weyl sequence: seed + n * gamma. */
    assert_true(rng.state == 3 * GOLDEN_GAMMA);

    tfm_rng_seed(&rng, 42);
    assert_true(tfm_rng_uniform(&rng) == 0.7415648698806763f);
    assert_true(tfm_rng_uniform(&rng) == 0.1599103808403015f);
    assert_true(tfm_rng_uniform(&rng) == 0.27860110998153687f);
}

static void test_uniform_range_and_mean(void **state)
{
    (void)state;
    tfm_rng rng;
    tfm_rng_seed(&rng, 7);
    double sum = 0.0;
    enum { N = 100000 };
    for (int i = 0; i < N; i++) {
        float u = tfm_rng_uniform(&rng);
        assert_true(u >= 0.0f && u < 1.0f);
        /* A multiple of 2^-24. */
        float scaled = u * 16777216.0f;
        assert_true(scaled == floorf(scaled));
        sum += u;
    }
    assert_true(fabs(sum / N - 0.5) < 0.005);
}

static void test_same_seed_same_stream(void **state)
{
    (void)state;
    tfm_rng a, b, c;
    tfm_rng_seed(&a, 2024);
    tfm_rng_seed(&b, 2024);
    tfm_rng_seed(&c, 2025);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        float x = tfm_rng_uniform(&a), y = tfm_rng_uniform(&b);
        assert_true(x == y);
        differ += x != tfm_rng_uniform(&c);
    }
    assert_true(differ > 90);
}

static void test_sampling_default(void **state)
{
    (void)state;
    tfm_sampling s = tfm_sampling_default();
    assert_int_equal(s.greedy, 1);
    assert_true(s.temperature == 1.0f);
    assert_int_equal(s.top_k, 0);
    assert_true(s.top_p == 1.0f);
}

/* ---- Greedy ----------------------------------------------------------- */

static void test_greedy(void **state)
{
    (void)state;
    tfm_sampling g = tfm_sampling_default();
    const float logits[5] = { 1.0f, 3.0f, -2.0f, 3.0f, 2.5f };
    int32_t id = -1;
    /* Ties go to the lowest id; no generator needed. */
    assert_int_equal(tfm_sample(logits, 5, &g, NULL, &id), TFM_OK);
    assert_int_equal(id, 1);
    const float one[1] = { -7.0f };
    assert_int_equal(tfm_sample(one, 1, &g, NULL, &id), TFM_OK);
    assert_int_equal(id, 0);
    /* Infinities. */
    const float ninf[3] = { -INFINITY, -INFINITY, -INFINITY };
    assert_int_equal(tfm_sample(ninf, 3, &g, NULL, &id), TFM_OK);
    assert_int_equal(id, 0);
    const float pinf[3] = { 1e30f, INFINITY, -INFINITY };
    assert_int_equal(tfm_sample(pinf, 3, &g, NULL, &id), TFM_OK);
    assert_int_equal(id, 1);
    /* The other fields are ignored, even invalid ones; the generator is
     * not advanced. */
    tfm_sampling odd = { 1, 0.0f, -3, 7.0f };
    tfm_rng rng;
    tfm_rng_seed(&rng, 5);
    assert_int_equal(tfm_sample(logits, 5, &odd, &rng, &id), TFM_OK);
    assert_int_equal(id, 1);
    assert_true(rng.state == 5);
}

/* Random logits in [-4, 4) from a separate stream. */
static void random_logits(tfm_rng *rng, float *logits, int n)
{
    for (int i = 0; i < n; i++)
        logits[i] = 8.0f * tfm_rng_uniform(rng) - 4.0f;
}

static void test_top_k_one_is_greedy(void **state)
{
    (void)state;
    tfm_rng data;
    tfm_rng_seed(&data, 99);
    float logits[37];
    for (uint64_t seed = 0; seed < 200; seed++) {
        random_logits(&data, logits, 37);
        logits[seed % 37] = logits[(seed * 7) % 37]; /* some ties */
        int32_t want = draw(logits, 37, tfm_sampling_default(), NULL);
        tfm_rng rng;
        tfm_rng_seed(&rng, seed);
        assert_int_equal(draw(logits, 37, sampling(1.0f, 1, 1.0f), &rng),
                         want);
        assert_int_equal(draw(logits, 37, sampling(3.0f, 1, 0.9f), &rng),
                         want);
    }
}

static void test_tiny_top_p_is_greedy(void **state)
{
    (void)state;
    tfm_rng data;
    tfm_rng_seed(&data, 3);
    float logits[50];
    for (uint64_t seed = 0; seed < 200; seed++) {
        random_logits(&data, logits, 50);
        int32_t want = draw(logits, 50, tfm_sampling_default(), NULL);
        tfm_rng rng;
        tfm_rng_seed(&rng, seed);
        assert_int_equal(draw(logits, 50, sampling(1.0f, 0, 1e-6f), &rng),
                         want);
        assert_int_equal(draw(logits, 50, sampling(0.5f, 10, 1e-3f), &rng),
                         want);
    }
}

static void test_cold_temperature_is_greedy(void **state)
{
    (void)state;
    /* Logits 0.1 apart: at T = 1e-3 the others weigh e^-100 or less. */
    const float logits[4] = { 1.0f, 1.5f, 1.4f, 1.3f };
    const float temperatures[3] = { 1e-3f, 1e-6f, 1e-30f };
    for (int t = 0; t < 3; t++) {
        tfm_rng rng;
        tfm_rng_seed(&rng, (uint64_t)t);
        for (int i = 0; i < 1000; i++)
            assert_int_equal(
                draw(logits, 4, sampling(temperatures[t], 0, 1.0f), &rng), 1);
    }
}

/* ---- Distributions ---------------------------------------------------- */

static const double PROBS[3] = { 0.5, 0.3, 0.2 };

static void test_frequencies(void **state)
{
    (void)state;
    float logits[3];
    log_probs(PROBS, 3, logits);
    int counts[3];
    enum { N = 20000 };
    histogram(logits, 3, sampling(1.0f, 0, 1.0f), 42, N, counts);
    for (int i = 0; i < 3; i++)
        assert_true(fabs((double)counts[i] / N - PROBS[i]) < 0.02);

    /* The same with the logits shifted: only differences matter. */
    for (int i = 0; i < 3; i++)
        logits[i] += 100.0f;
    histogram(logits, 3, sampling(1.0f, 0, 1.0f), 43, N, counts);
    for (int i = 0; i < 3; i++)
        assert_true(fabs((double)counts[i] / N - PROBS[i]) < 0.02);
}

static void test_temperature_frequencies(void **state)
{
    (void)state;
    /* T = 2 takes the square root of the probabilities. */
    float logits[3];
    log_probs(PROBS, 3, logits);
    double want[3], total = 0.0;
    for (int i = 0; i < 3; i++)
        total += want[i] = sqrt(PROBS[i]);
    int counts[3];
    enum { N = 20000 };
    histogram(logits, 3, sampling(2.0f, 0, 1.0f), 1, N, counts);
    for (int i = 0; i < 3; i++)
        assert_true(fabs((double)counts[i] / N - want[i] / total) < 0.02);
}

static void test_top_k_two(void **state)
{
    (void)state;
    float logits[3];
    log_probs(PROBS, 3, logits);
    int counts[3];
    enum { N = 20000 };
    histogram(logits, 3, sampling(1.0f, 2, 1.0f), 8, N, counts);
    assert_int_equal(counts[2], 0);
    assert_true(fabs((double)counts[0] / N - 0.625) < 0.02);
    assert_true(fabs((double)counts[1] / N - 0.375) < 0.02);

    /* top_k at or above the vocabulary size is no limit. */
    histogram(logits, 3, sampling(1.0f, 3, 1.0f), 9, N, counts);
    assert_true(fabs((double)counts[2] / N - 0.2) < 0.02);
    histogram(logits, 3, sampling(1.0f, 1000, 1.0f), 9, N, counts);
    assert_true(fabs((double)counts[2] / N - 0.2) < 0.02);
}

static void test_top_p(void **state)
{
    (void)state;
    float logits[3];
    log_probs(PROBS, 3, logits);
    int counts[3];
    enum { N = 20000 };
    /* 0.5 < 0.7 <= 0.5 + 0.3: exactly {0, 1} are kept, renormalised. */
    histogram(logits, 3, sampling(1.0f, 0, 0.7f), 11, N, counts);
    assert_int_equal(counts[2], 0);
    assert_true(fabs((double)counts[0] / N - 0.625) < 0.02);
    assert_true(fabs((double)counts[1] / N - 0.375) < 0.02);
    /* 0.4: only the most likely. */
    histogram(logits, 3, sampling(1.0f, 0, 0.4f), 12, N, counts);
    assert_int_equal(counts[0], N);
    /* 0.9: all three. */
    histogram(logits, 3, sampling(1.0f, 0, 0.9f), 13, N, counts);
    assert_true(fabs((double)counts[2] / N - 0.2) < 0.02);

    /* Order does not matter: the same probabilities by other ids. */
    const double shuffled[3] = { 0.2, 0.5, 0.3 };
    log_probs(shuffled, 3, logits);
    histogram(logits, 3, sampling(1.0f, 0, 0.7f), 14, N, counts);
    assert_int_equal(counts[0], 0);
    assert_true(fabs((double)counts[1] / N - 0.625) < 0.02);

    /* top-p applies to the renormalised top-k: top_k 2 leaves
     * {0.625, 0.375}, and 0.6 of that is the first alone. */
    log_probs(PROBS, 3, logits);
    histogram(logits, 3, sampling(1.0f, 2, 0.6f), 15, N, counts);
    assert_int_equal(counts[0], N);
}

static void test_exact_draws(void **state)
{
    (void)state;
    /* Seed 42 gives u = 0.7416, 0.1599, 0.2786.  Candidates are walked
     * from the most likely: cumulative 0.5, 0.8, 1.0. */
    float logits[3];
    log_probs(PROBS, 3, logits);
    tfm_rng rng;
    tfm_rng_seed(&rng, 42);
    assert_int_equal(draw(logits, 3, sampling(1.0f, 0, 1.0f), &rng), 1);
    assert_int_equal(draw(logits, 3, sampling(1.0f, 0, 1.0f), &rng), 0);
    assert_int_equal(draw(logits, 3, sampling(1.0f, 0, 1.0f), &rng), 0);
    /* Exactly one uniform per draw. */
    assert_true(rng.state == 42 + 3 * GOLDEN_GAMMA);

    const double shuffled[3] = { 0.2, 0.5, 0.3 };  /* order: 1, 2, 0 */
    log_probs(shuffled, 3, logits);
    tfm_rng_seed(&rng, 42);
    assert_int_equal(draw(logits, 3, sampling(1.0f, 0, 1.0f), &rng), 2);
    assert_int_equal(draw(logits, 3, sampling(1.0f, 0, 1.0f), &rng), 1);
}

static void test_same_seed_same_samples(void **state)
{
    (void)state;
    tfm_rng data;
    tfm_rng_seed(&data, 1);
    float logits[20];
    random_logits(&data, logits, 20);
    tfm_rng a, b, c;
    tfm_rng_seed(&a, 77);
    tfm_rng_seed(&b, 77);
    tfm_rng_seed(&c, 78);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        tfm_sampling s = sampling(1.3f, 10, 0.95f);
        int32_t x = draw(logits, 20, s, &a);
        assert_int_equal(x, draw(logits, 20, s, &b));
        differ += x != draw(logits, 20, s, &c);
    }
    assert_true(differ > 50);
}

static void test_infinite_logits(void **state)
{
    (void)state;
    tfm_rng rng;
    tfm_rng_seed(&rng, 4);
    /* -inf is never drawn. */
    const float masked[3] = { 0.0f, -INFINITY, 0.0f };
    int seen[3] = { 0, 0, 0 };
    for (int i = 0; i < 2000; i++)
        seen[draw(masked, 3, sampling(1.0f, 0, 1.0f), &rng)]++;
    assert_int_equal(seen[1], 0);
    assert_true(seen[0] > 800 && seen[2] > 800);
    /* +inf takes everything. */
    const float forced[3] = { 1e30f, -1.0f, INFINITY };
    for (int i = 0; i < 100; i++)
        assert_int_equal(draw(forced, 3, sampling(0.5f, 0, 1.0f), &rng), 2);
    /* All -inf: evenly spread. */
    const float none[2] = { -INFINITY, -INFINITY };
    seen[0] = seen[1] = 0;
    for (int i = 0; i < 2000; i++)
        seen[draw(none, 2, sampling(1.0f, 0, 1.0f), &rng)]++;
    assert_true(seen[0] > 800 && seen[1] > 800);
}

static void test_large_vocabulary(void **state)
{
    (void)state;
    /* Above the stack buffer: sorted in heap memory. */
    enum { V = 5000 };
    float *logits = malloc(sizeof(float) * V);
    assert_non_null(logits);
    for (int i = 0; i < V; i++)
        logits[i] = -10.0f;
    logits[4321] = 10.0f;
    logits[17] = 9.0f;
    tfm_rng rng;
    tfm_rng_seed(&rng, 6);
    int seen_17 = 0;
    for (int i = 0; i < 500; i++) {
        int32_t id = draw(logits, V, sampling(1.0f, 2, 1.0f), &rng);
        assert_true(id == 4321 || id == 17);
        seen_17 += id == 17;
    }
    assert_true(seen_17 > 50 && seen_17 < 250); /* 1/(1+e) = 0.27 */

    /* Out of memory: status, id and generator unchanged. */
    int32_t id = UNTOUCHED;
    tfm_sampling s = sampling(1.0f, 0, 1.0f);
    tfm_rng_seed(&rng, 6);
    tfm_testing_fail_allocation(1);
    assert_int_equal(tfm_sample(logits, V, &s, &rng, &id),
                     TFM_ERR_OUT_OF_MEMORY);
    tfm_testing_fail_allocation(0);
    assert_int_equal(id, UNTOUCHED);
    assert_true(rng.state == 6);
    free(logits);
}

/* ---- Errors ----------------------------------------------------------- */

/* Expects tfm_sample to fail with status, leaving id and rng alone. */
static void expect_fails(const float *logits, int64_t n, tfm_sampling s,
                         tfm_status status)
{
    tfm_rng rng;
    tfm_rng_seed(&rng, 9);
    int32_t id = UNTOUCHED;
    assert_int_equal(tfm_sample(logits, n, &s, &rng, &id), status);
    assert_int_equal(id, UNTOUCHED);
    assert_true(rng.state == 9);
    assert_true(tfm_last_error()[0] != '\0');
}

static void test_bad_arguments(void **state)
{
    (void)state;
    const float logits[3] = { 0.1f, 0.2f, 0.3f };
    tfm_clear_error();
    expect_fails(logits, 3, sampling(0.0f, 0, 1.0f), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 3, sampling(-1.0f, 0, 1.0f), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 3, sampling(NAN, 0, 1.0f), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 3, sampling(INFINITY, 0, 1.0f),
                 TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 3, sampling(1.0f, 0, 0.0f), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 3, sampling(1.0f, 0, -0.5f), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 3, sampling(1.0f, 0, 1.5f), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 3, sampling(1.0f, 0, NAN), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 3, sampling(1.0f, -1, 1.0f), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, 0, sampling(1.0f, 0, 1.0f), TFM_ERR_INVALID_ARGUMENT);
    expect_fails(logits, -2, tfm_sampling_default(), TFM_ERR_INVALID_ARGUMENT);

    const float nan_logit[3] = { 0.1f, NAN, 0.3f };
    expect_fails(nan_logit, 3, sampling(1.0f, 0, 1.0f), TFM_ERR_NON_FINITE);
    expect_fails(nan_logit, 3, tfm_sampling_default(), TFM_ERR_NON_FINITE);

    tfm_sampling s = sampling(1.0f, 0, 1.0f);
    tfm_rng rng;
    tfm_rng_seed(&rng, 9);
    int32_t id = UNTOUCHED;
    assert_int_equal(tfm_sample(NULL, 3, &s, &rng, &id), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_sample(logits, 3, NULL, &rng, &id),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_sample(logits, 3, &s, NULL, &id),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_sample(logits, 3, &s, &rng, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(id, UNTOUCHED);
    assert_true(rng.state == 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splitmix64_reference),
        cmocka_unit_test(test_uniform_range_and_mean),
        cmocka_unit_test(test_same_seed_same_stream),
        cmocka_unit_test(test_sampling_default),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_tiny_top_p_is_greedy),
        cmocka_unit_test(test_cold_temperature_is_greedy),
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_temperature_frequencies),
        cmocka_unit_test(test_top_k_two),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_exact_draws),
        cmocka_unit_test(test_same_seed_same_samples),
        cmocka_unit_test(test_infinite_logits),
        cmocka_unit_test(test_large_vocabulary),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
