/*
 * Helpers shared by the CMocka suites: tensor constructors, deterministic
 * fills, tolerance and bit-for-bit checks, module parameter setters.
 * Header-only (static inline), so each suite stays one source file.
 */
#ifndef TFM_TEST_UTIL_H
#define TFM_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include <transformer/module.h>
#include <transformer/tensor.h>

#include "tiny_model.h"

/* Internal test hook of the library (src/alloc.c, exported for tests):
 * the k-th allocation from now fails; 0 disarms it. */
void tfm_testing_fail_allocation(long k);

/* Pointers no allocation returns: an *out argument keeps them on error. */
#define SENTINEL_TENSOR ((tfm_tensor *)(uintptr_t)0x5e47)
#define SENTINEL_MODULE ((tfm_module *)(uintptr_t)0x5e47)

/* ---- construction, fills, freeing ----------------------------------------- */

/* New tensor of the given shape: a copy of data, or zeros when data is NULL. */
static inline tfm_tensor *make(int rank, const int64_t *shape,
                               const float *data)
{
    tfm_tensor *t = NULL;
    if (data)
        assert_int_equal(tfm_tensor_create_copy(rank, shape, data, &t), TFM_OK);
    else
        assert_int_equal(tfm_tensor_create(rank, shape, &t), TFM_OK);
    return t;
}

/* make() for rank 2. */
static inline tfm_tensor *make2(int64_t a, int64_t b, const float *data)
{
    return make(2, (const int64_t[]){ a, b }, data);
}

/* make() for rank 3. */
static inline tfm_tensor *make3(int64_t a, int64_t b, int64_t c,
                                const float *data)
{
    return make(3, (const int64_t[]){ a, b, c }, data);
}

/* make() for rank 4. */
static inline tfm_tensor *make4(int64_t a, int64_t b, int64_t c, int64_t d,
                                const float *data)
{
    return make(4, (const int64_t[]){ a, b, c, d }, data);
}

/* Sets every element of t to value. */
static inline void fill(tfm_tensor *t, float value)
{
    float *d = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        d[i] = value;
}

/* Deterministic uniform numbers in [-1, 1) from the LCG state *s. */
static inline float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) * (1.0 / 8388608.0) - 1.0);
}

/* Fills t with rnd() numbers from the given seed. */
static inline void fill_random(tfm_tensor *t, uint32_t seed)
{
    float *d = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        d[i] = rnd(&seed);
}

/* A new tensor with the shape and values of t. */
static inline tfm_tensor *clone(const tfm_tensor *t)
{
    int64_t shape[TFM_MAX_RANK];
    for (int i = 0; i < tfm_tensor_rank(t); i++)
        shape[i] = tfm_tensor_dim(t, i);
    return make(tfm_tensor_rank(t), shape, tfm_tensor_data_const(t));
}

/* Frees every tensor of a compound-literal list (NULL entries are no-ops). */
static inline void free_tensors(tfm_tensor *const *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tfm_tensor_free(t[i]);
}
/* free_tensors() on its arguments: FREE_TENSORS(q, k, v). */
#define FREE_TENSORS(...)                                                  \
    free_tensors((tfm_tensor *const[]){ __VA_ARGS__ },                     \
                 sizeof((tfm_tensor *const[]){ __VA_ARGS__ }) /            \
                     sizeof(tfm_tensor *))

/* ---- the LCG stream of test_oom, test_numerics and test_threads -------- */

/* One stream per test program: lcg_seed() restarts it, lcg_next() takes
 * the next number in [-0.5, 0.5) (the same LCG as rnd(), at half its
 * scale, in float arithmetic).  Those suites compare runs with each other
 * and some of their inputs follow on from the parameters in one stream:
 * keep this sequence exactly as it is.  Not thread-safe. */
static inline uint32_t *lcg_state(void)
{
    static uint32_t state;
    return &state;
}

/* Restarts the stream at seed. */
static inline void lcg_seed(uint32_t seed)
{
    *lcg_state() = seed;
}

/* The next number of the stream, in [-0.5, 0.5). */
static inline float lcg_next(void)
{
    uint32_t *s = lcg_state();
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

/* Fills t from the stream, element 0 first; returns t. */
static inline tfm_tensor *lcg_fill(tfm_tensor *t)
{
    float *d = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        d[i] = lcg_next();
    return t;
}

/* ---- value checks -------------------------------------------------------- */

/* max |a - b| / max |b| over n values (NaN counts as infinitely wrong). */
static inline double rel_err(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        num = e > num || e != e ? e : num;
        den = fabs(b[i]) > den ? fabs(b[i]) : den;
    }
    return num / (den > 0 ? den : 1);
}

/* Fails unless |actual - expected| <= tol * max(1, |expected|). */
static inline void near_impl(double actual, double expected, double tol,
                             const char *what, int index, const char *file,
                             int line)
{
    double scale = fabs(expected) > 1.0 ? fabs(expected) : 1.0;
    if (!(fabs(actual - expected) <= tol * scale))
        fail_msg("%s:%d: %s[%d] = %.9g, expected %.12g (tol %g)", file, line,
                 what, index, actual, expected, tol);
}
/* near_impl() for one value, named by its expression. */
#define NEAR(actual, expected, tol) \
    near_impl((actual), (expected), (tol), #actual, -1, __FILE__, __LINE__)
/* near_impl() for element `index` of something called `what`. */
#define NEAR_AT(actual, expected, tol, what, index)                       \
    near_impl((actual), (expected), (tol), (what), (int)(index), __FILE__, \
              __LINE__)

/* near_impl() on every element of t against expected[0 .. numel). */
static inline void expect_values_at(const tfm_tensor *t, const double *expected,
                                    double tol, const char *what,
                                    const char *file, int line)
{
    const float *d = tfm_tensor_data_const(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        near_impl(d[i], expected[i], tol, what, (int)i, file, line);
}
/* expect_values_at() against an array, reported at the caller's line. */
#define EXPECT_ARRAY(t, expected, tol, what) \
    expect_values_at((t), (expected), (tol), (what), __FILE__, __LINE__)
/* expect_values_at() against the listed values, named by the tensor. */
#define EXPECT_VALUES(t, tol, ...)                                        \
    expect_values_at((t), (const double[]){ __VA_ARGS__ }, (tol), #t,     \
                     __FILE__, __LINE__)

/* near_impl() on every element of actual against the same one of expected. */
static inline void expect_close_at(const tfm_tensor *actual,
                                   const tfm_tensor *expected, double tol,
                                   const char *what, const char *file, int line)
{
    const float *a = tfm_tensor_data_const(actual);
    const float *e = tfm_tensor_data_const(expected);
    for (int64_t i = 0; i < tfm_tensor_numel(expected); i++)
        near_impl(a[i], e[i], tol, what, (int)i, file, line);
}
/* expect_close_at() reported at the caller's line. */
#define EXPECT_CLOSE(actual, expected, tol, what) \
    expect_close_at((actual), (expected), (tol), (what), __FILE__, __LINE__)

/* Fails unless every element of t has the bits of value. */
static inline void expect_all_equal(const tfm_tensor *t, float value,
                                    const char *what)
{
    const float *d = tfm_tensor_data_const(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        if (memcmp(&d[i], &value, sizeof value) != 0)
            fail_msg("%s[%lld] = %g, expected %g bit for bit", what,
                     (long long)i, (double)d[i], (double)value);
}

/* Fails unless a and b have the same element count and identical bits. */
static inline void expect_bit_identical(const tfm_tensor *a,
                                        const tfm_tensor *b, const char *what)
{
    assert_int_equal(tfm_tensor_numel(a), tfm_tensor_numel(b));
    const float *x = tfm_tensor_data_const(a), *y = tfm_tensor_data_const(b);
    for (int64_t i = 0; i < tfm_tensor_numel(a); i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0)
            fail_msg("%s[%lld]: %.9g vs %.9g (not bit-identical)", what,
                     (long long)i, (double)x[i], (double)y[i]);
}

/* ---- calls that must fail ------------------------------------------------ */

/* Before such a call: fills the given outputs (NULL: skipped) with 42 and
 * clears the last error. */
static inline void arm_failing_call(tfm_tensor *out, tfm_tensor *w)
{
    if (out)
        fill(out, 42.0f);
    if (w)
        fill(w, 42.0f);
    tfm_clear_error();
}

/* After it: status st is want, the outputs still hold 42 and the last-error
 * message contains needle (NULL: not checked); failures name `line`. */
static inline void expect_failed_call(tfm_status st, tfm_status want,
                                      const tfm_tensor *out,
                                      const tfm_tensor *w, const char *needle,
                                      int line)
{
    if (st != want)
        fail_msg("line %d: status %d (%s), expected %d; message \"%s\"", line,
                 (int)st, tfm_status_string(st), (int)want, tfm_last_error());
    if (out)
        expect_all_equal(out, 42.0f, "out after error");
    if (w)
        expect_all_equal(w, 42.0f, "weights after error");
    if (needle && !strstr(tfm_last_error(), needle))
        fail_msg("line %d: message \"%s\" lacks \"%s\"", line,
                 tfm_last_error(), needle);
}

/* ---- module parameters --------------------------------------------------- */

/* Sets parameter `name` of m from a copy of data, failing with the reason. */
static inline void set_param(tfm_module *m, const char *name, int rank,
                             const int64_t *shape, const float *data)
{
    tfm_tensor *t = make(rank, shape, data);
    tfm_status st = tfm_module_set_parameter(m, name, t);
    if (st != TFM_OK)
        fail_msg("set %s: %s (%s)", name, tfm_status_string(st),
                 tfm_last_error());
    tfm_tensor_free(t);
}

/* Sets every parameter of m, number p in turn, to a tensor of its shape
 * that fill_p(t, p, ctx) fills. */
static inline void set_each_param(tfm_module *m,
                                  void (*fill_p)(tfm_tensor *t, int p,
                                                 const void *ctx),
                                  const void *ctx)
{
    for (int p = 0; p < tfm_module_parameter_count(m); p++) {
        const char *name = tfm_module_parameter_name(m, p);
        int rank;
        int64_t shape[TFM_MAX_RANK];
        assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape),
                         TFM_OK);
        tfm_tensor *t = make(rank, shape, NULL);
        fill_p(t, p, ctx);
        assert_int_equal(tfm_module_set_parameter(m, name, t), TFM_OK);
        tfm_tensor_free(t);
    }
}

/* The seeds of randomize_params(): parameter p gets seed + stride * p. */
typedef struct param_seeds {
    uint32_t seed, stride;
} param_seeds;

/* set_each_param() filler: fill_random() with the seed of parameter p. */
static inline void fill_random_param(tfm_tensor *t, int p, const void *ctx)
{
    const param_seeds *s = ctx;
    fill_random(t, s->seed + s->stride * (uint32_t)p);
}

/* Sets every parameter of m to deterministic random values. */
static inline void randomize_params(tfm_module *m, uint32_t seed,
                                    uint32_t stride)
{
    const param_seeds s = { seed, stride };
    set_each_param(m, fill_random_param, &s);
}

/* set_each_param() filler: lcg_fill(). */
static inline void lcg_fill_param(tfm_tensor *t, int p, const void *ctx)
{
    (void)p, (void)ctx;
    lcg_fill(t);
}

/* Restarts the stream at seed and fills every parameter of m from it, in
 * parameter order; the stream goes on from there. */
static inline void lcg_randomize(tfm_module *m, uint32_t seed)
{
    lcg_seed(seed);
    set_each_param(m, lcg_fill_param, NULL);
}

#endif /* TFM_TEST_UTIL_H */
