/* The branch-free elementary functions of src/vmath.h (white-box), against
 * double-precision libm on dense grids: the accuracy their header comments
 * state, and their values at NaN and the infinities. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/vmath.h"

/* e^x for x <= 0: relative error below 2e-7 where e^x is a normal float;
 * exactly 0 below -87.3 and at -inf; NaN stays NaN. */
static void exp_nonpositive_accuracy(void **state)
{
    (void)state;
    double worst = 0;
    for (long i = 0; i <= 8730000; i++) {
        const float x = (float)(-i * 1e-5);
        const double ref = exp((double)x);
        const double got = tfm__exp_nonpositive(x);
        if (ref > 1.2e-38 && fabs(got - ref) / ref > worst)
            worst = fabs(got - ref) / ref;
    }
    assert_true(worst < 2e-7);
    assert_true(tfm__exp_nonpositive(-100.0f) == 0.0f);
    assert_true(tfm__exp_nonpositive(-INFINITY) == 0.0f);
    assert_true(isnan(tfm__exp_nonpositive(NAN)));
    assert_true(tfm__exp_nonpositive(0.0f) == 1.0f);
}

/* The eight-lane exponential equals the scalar one bit for bit (the
 * softmax's lanes and its tail use one each), on every float in
 * [-88, 0] in steps of about 1e-5, at the clamp (-87.3365447 and its
 * neighbours), at integer and half-integer multiples of ln 2 (where the
 * floor of the range reduction changes), -0, -inf and NaN. */
static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static void exp_v8_equals_scalar(void **state)
{
    (void)state;
    float xs[8];
    long bad = 0;
    for (long i = 0; i <= 8800000; i += 8) {
        for (int l = 0; l < 8; l++)
            xs[l] = (float)(-(i + l) * 1e-5);
        const tfm__v8 e = tfm__v8_exp_nonpositive(tfm__v8_load(xs));
        for (int l = 0; l < 8; l++)
            bad += !same_bits(e[l], tfm__exp_nonpositive(xs[l]));
    }
    const float lo = -87.3365447f;
    const float special[] = { lo, nextafterf(lo, 0.0f),
                              nextafterf(lo, -INFINITY), -0.0f, 0.0f,
                              -INFINITY, NAN, -0.5f * 0.69314718f,
                              -1.5f * 0.69314718f, -0.69314718f,
                              -10.5f * 0.69314718f, -1e-30f, -200.0f,
                              -3.4e38f, -1.0f, -2.0f };
    for (size_t k = 0; k < sizeof special / sizeof *special; k += 8) {
        const tfm__v8 e = tfm__v8_exp_nonpositive(tfm__v8_load(special + k));
        for (int l = 0; l < 8; l++) {
            const float want = tfm__exp_nonpositive(special[k + l]);
            bad += isnan(want) ? !isnan(e[l]) : !same_bits(e[l], want);
        }
    }
    assert_int_equal(bad, 0);
}

/* tanh: relative error at most 2.7e-7 and absolute at most 9e-8 on
 * [-20, 20]; +-inf give +-1. */
static void tanh_accuracy(void **state)
{
    (void)state;
    double worst_rel = 0, worst_abs = 0;
    for (long i = -2000000; i <= 2000000; i++) {
        const float x = (float)(i * 1e-5);
        const double ref = tanh((double)x), got = tfm__tanh(x);
        const double err = fabs(got - ref);
        if (err > worst_abs)
            worst_abs = err;
        if (ref != 0 && err / fabs(ref) > worst_rel)
            worst_rel = err / fabs(ref);
    }
    assert_true(worst_rel <= 2.7e-7);
    assert_true(worst_abs <= 9e-8);
    assert_true(tfm__tanh(INFINITY) == 1.0f);
    assert_true(tfm__tanh(-INFINITY) == -1.0f);
    assert_true(isnan(tfm__tanh(NAN)));
}

/* Phi(x) = erfc(-x / sqrt 2) / 2 against double erfc of the same float
 * argument: relative error at most 4.5e-7 (5e-7 asserted) wherever Phi is
 * above 1e-37, on [-14, 14] in steps of 1e-5; hand values Phi(0) = 1/2,
 * Phi(+inf) = 1, Phi(-inf) = 0, NaN. */
static void normal_cdf_accuracy(void **state)
{
    (void)state;
    double worst = 0;
    for (long i = -1400000; i <= 1400000; i++) {
        const float x = (float)(i * 1e-5);
        const float z = x * -0.70710678118654752f;
        const double ref = 0.5 * erfc((double)z);
        const double got = tfm__normal_cdf(x);
        if (ref > 1e-37 && fabs(got - ref) / ref > worst)
            worst = fabs(got - ref) / ref;
    }
    assert_true(worst < 5e-7);
    assert_true(fabsf(tfm__normal_cdf(0.0f) - 0.5f) < 1e-7f);
    assert_true(tfm__normal_cdf(INFINITY) == 1.0f);
    assert_true(tfm__normal_cdf(-INFINITY) == 0.0f);
    assert_true(tfm__normal_cdf(20.0f) == 1.0f);
    assert_true(isnan(tfm__normal_cdf(NAN)));
    /* Phi(-1) = erfc(1/sqrt 2)/2 = 0.15865525393145707 (tables). */
    assert_true(fabs(tfm__normal_cdf(-1.0f) - 0.15865525393145707) < 1e-7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exp_nonpositive_accuracy),
        cmocka_unit_test(exp_v8_equals_scalar),
        cmocka_unit_test(tanh_accuracy),
        cmocka_unit_test(normal_cdf_accuracy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
