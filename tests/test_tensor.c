/*
 * Tensors, status codes, the last-error message and the version (tensor.h,
 * status.h, version.h).  Every expected value is stated by the header or
 * worked out by hand next to the assertion.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <transformer/status.h>
#include <transformer/tensor.h>
#include <transformer/version.h>

#include "test_util.h"

/* Asserts that `call` fails with `status`, that *out still holds the
 * sentinel, and that the last-error message contains `needle`. */
#define EXPECT_CREATE_FAILS(status, needle, call)                            \
    do {                                                                     \
        tfm_tensor *out_ = SENTINEL_TENSOR;                                  \
        tfm_clear_error();                                                   \
        tfm_status st_ = (call);                                             \
        if (st_ != (status))                                                 \
            fail_msg("%s returned %d (%s), expected %d; message \"%s\"",    \
                     #call, (int)st_, tfm_status_string(st_), (int)(status), \
                     tfm_last_error());                                      \
        assert_ptr_equal(out_, SENTINEL_TENSOR);                             \
        if (strstr(tfm_last_error(), (needle)) == NULL)                      \
            fail_msg("message \"%s\" lacks \"%s\"", tfm_last_error(),       \
                     (needle));                                              \
    } while (0)

/* ---- creation ----------------------------------------------------------- */

static void test_create_is_zeroed_and_reports_shape(void **state)
{
    (void)state;
    const int64_t shape[3] = { 2, 3, 4 };
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_create(3, shape, &t), TFM_OK);
    assert_non_null(t);
    assert_int_equal(tfm_tensor_rank(t), 3);
    assert_int_equal(tfm_tensor_numel(t), 24); /* 2*3*4 */
    assert_int_equal(tfm_tensor_dim(t, 0), 2);
    assert_int_equal(tfm_tensor_dim(t, 1), 3);
    assert_int_equal(tfm_tensor_dim(t, 2), 4);
    /* negative axes count from the end: -1 -> 2, -2 -> 1, -3 -> 0 */
    assert_int_equal(tfm_tensor_dim(t, -1), 4);
    assert_int_equal(tfm_tensor_dim(t, -2), 3);
    assert_int_equal(tfm_tensor_dim(t, -3), 2);
    /* out of range on both sides -> 0 */
    assert_int_equal(tfm_tensor_dim(t, 3), 0);
    assert_int_equal(tfm_tensor_dim(t, -4), 0);
    assert_int_equal(tfm_tensor_dim(t, 1000), 0);
    assert_int_equal(tfm_tensor_dim(t, -1000), 0);
    const float *d = tfm_tensor_data_const(t);
    assert_non_null(d);
    assert_ptr_equal(d, tfm_tensor_data(t));
    for (int i = 0; i < 24; i++)
        if (d[i] != 0.0f || signbit(d[i]))
            fail_msg("element %d is %g, expected +0", i, (double)d[i]);
    tfm_tensor_free(t);
}

static void test_create_every_rank(void **state)
{
    (void)state;
    const int64_t shape[TFM_MAX_RANK] = { 2, 1, 3, 5 };
    int64_t expected_numel = 1;
    for (int r = 1; r <= TFM_MAX_RANK; r++) {
        expected_numel *= shape[r - 1]; /* 2, 2, 6, 30 */
        tfm_tensor *t = NULL;
        assert_int_equal(tfm_tensor_create(r, shape, &t), TFM_OK);
        assert_int_equal(tfm_tensor_rank(t), r);
        assert_int_equal(tfm_tensor_numel(t), expected_numel);
        assert_int_equal(tfm_tensor_dim(t, -1), shape[r - 1]);
        assert_int_equal(tfm_tensor_dim(t, -r), shape[0]);
        tfm_tensor_free(t);
    }
    assert_int_equal(TFM_MAX_RANK, 4);
}

static void test_create_copies_shape_array(void **state)
{
    (void)state;
    int64_t shape[2] = { 3, 2 };
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_create(2, shape, &t), TFM_OK);
    shape[0] = 99; /* the tensor must not keep a pointer to the caller's array */
    shape[1] = 77;
    assert_int_equal(tfm_tensor_dim(t, 0), 3);
    assert_int_equal(tfm_tensor_dim(t, 1), 2);
    assert_int_equal(tfm_tensor_numel(t), 6);
    tfm_tensor_free(t);
}

static void test_create_copy_is_independent(void **state)
{
    (void)state;
    const int64_t shape[2] = { 2, 3 };
    float src[6] = { 1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e30f };
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_create_copy(2, shape, src, &t), TFM_OK);
    float *d = tfm_tensor_data(t);
    assert_ptr_not_equal(d, src);
    assert_memory_equal(d, src, sizeof src); /* bit-identical, incl. -0 */
    /* Changing the source does not change the copy, and vice versa. */
    src[0] = 100.0f;
    assert_true(d[0] == 1.5f);
    d[1] = 7.0f;
    assert_true(src[1] == -2.0f);
    tfm_tensor_free(t);
}

static void test_wrap_writes_through_and_is_not_freed(void **state)
{
    (void)state;
    const int64_t shape[2] = { 2, 2 };
    float buf[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_wrap(2, shape, buf, &t), TFM_OK);
    assert_ptr_equal(tfm_tensor_data(t), buf);
    assert_ptr_equal(tfm_tensor_data_const(t), buf);
    /* Writes through the tensor land in the caller's memory. */
    tfm_tensor_data(t)[3] = -8.0f;
    assert_true(buf[3] == -8.0f);
    /* And the caller's writes are seen by the tensor. */
    buf[0] = 10.0f;
    assert_true(tfm_tensor_data_const(t)[0] == 10.0f);
    /* tfm_tensor_add writes into the wrapped buffer: x <- x + x. */
    const int64_t s1[2] = { 2, 2 };
    float ones[4] = { 1.0f, 1.0f, 1.0f, 1.0f };
    tfm_tensor *o = NULL;
    assert_int_equal(tfm_tensor_create_copy(2, s1, ones, &o), TFM_OK);
    assert_int_equal(tfm_tensor_add(t, o), TFM_OK);
    /* {10, 2, 3, -8} + 1 = {11, 3, 4, -7} */
    assert_true(buf[0] == 11.0f && buf[1] == 3.0f && buf[2] == 4.0f &&
                buf[3] == -7.0f);
    tfm_tensor_free(o);
    /* Freeing the wrapper must not free buf (a stack array: free() on it
     * would abort) and must leave its contents alone. */
    tfm_tensor_free(t);
    assert_true(buf[0] == 11.0f && buf[1] == 3.0f && buf[2] == 4.0f &&
                buf[3] == -7.0f);
    /* The buffer is still usable by a second wrapper. */
    assert_int_equal(tfm_tensor_wrap(1, (const int64_t[]){ 4 }, buf, &t),
                     TFM_OK);
    assert_true(tfm_tensor_data_const(t)[1] == 3.0f);
    tfm_tensor_free(t);
}

static void test_wrap_heap_buffer_survives_free(void **state)
{
    (void)state;
    /* A heap buffer: if tfm_tensor_free freed it, writing and freeing it
     * again below is a double free (caught by glibc / sanitizers). */
    float *buf = test_malloc(8 * sizeof *buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (float)i;
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_wrap(3, (const int64_t[]){ 2, 2, 2 }, buf, &t),
                     TFM_OK);
    assert_int_equal(tfm_tensor_numel(t), 8);
    tfm_tensor_free(t);
    for (int i = 0; i < 8; i++)
        assert_true(buf[i] == (float)i);
    buf[7] = 42.0f;
    test_free(buf); /* cmocka checks the block was not corrupted */
}

static void test_null_tensor_queries(void **state)
{
    (void)state;
    tfm_tensor_free(NULL); /* no-op, must not crash */
    assert_int_equal(tfm_tensor_rank(NULL), 0);
    assert_int_equal(tfm_tensor_dim(NULL, 0), 0);
    assert_int_equal(tfm_tensor_dim(NULL, -1), 0);
    assert_int_equal(tfm_tensor_numel(NULL), 0);
    assert_null(tfm_tensor_data(NULL));
    assert_null(tfm_tensor_data_const(NULL));
}

/* ---- creation errors ------------------------------------------------------ */

static void test_null_arguments(void **state)
{
    (void)state;
    const int64_t shape[1] = { 3 };
    float data[3] = { 1, 2, 3 };
    EXPECT_CREATE_FAILS(TFM_ERR_NULL_ARGUMENT, "shape",
                        tfm_tensor_create(1, NULL, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_NULL_ARGUMENT, "shape",
                        tfm_tensor_create_copy(1, NULL, data, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_NULL_ARGUMENT, "data",
                        tfm_tensor_create_copy(1, shape, NULL, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_NULL_ARGUMENT, "shape",
                        tfm_tensor_wrap(1, NULL, data, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_NULL_ARGUMENT, "data",
                        tfm_tensor_wrap(1, shape, NULL, &out_));
    /* out itself NULL: nothing to leave untouched, just the status. */
    tfm_clear_error();
    assert_int_equal(tfm_tensor_create(1, shape, NULL), TFM_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "out"));
    assert_int_equal(tfm_tensor_wrap(1, shape, data, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tensor_create(1, NULL, NULL), TFM_ERR_NULL_ARGUMENT);
}

/* tensor.h: create_copy has "those of tfm_tensor_create" as errors, and
 * tfm_tensor_create gives TFM_ERR_NULL_ARGUMENT for out == NULL. */
static void test_create_copy_null_out(void **state)
{
    (void)state;
    const int64_t shape[1] = { 3 };
    const float data[3] = { 1, 2, 3 };
    tfm_clear_error();
    assert_int_equal(tfm_tensor_create_copy(1, shape, data, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "out"));
}

static void test_bad_rank(void **state)
{
    (void)state;
    const int64_t shape[5] = { 1, 1, 1, 1, 1 };
    float data[1] = { 0 };
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "rank 0",
                        tfm_tensor_create(0, shape, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "rank 5",
                        tfm_tensor_create(5, shape, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "rank -1",
                        tfm_tensor_create(-1, shape, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "rank 5",
                        tfm_tensor_create_copy(5, shape, data, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "rank 0",
                        tfm_tensor_wrap(0, shape, data, &out_));
}

static void test_bad_dimension(void **state)
{
    (void)state;
    float data[4] = { 0 };
    /* the message names the offending value */
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "0",
                        tfm_tensor_create(2, (const int64_t[]){ 3, 0 }, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "-2",
                        tfm_tensor_create(3, (const int64_t[]){ 1, -2, 2 },
                                          &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "dimension",
                        tfm_tensor_create(1, (const int64_t[]){ INT64_MIN },
                                          &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "dimension",
                        tfm_tensor_create_copy(
                            4, (const int64_t[]){ 1, 1, 1, 0 }, data, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "dimension",
                        tfm_tensor_wrap(2, (const int64_t[]){ -1, 4 }, data,
                                        &out_));
    /* a negative dimension times a negative one is positive: still invalid */
    EXPECT_CREATE_FAILS(TFM_ERR_INVALID_ARGUMENT, "dimension",
                        tfm_tensor_create(2, (const int64_t[]){ -2, -2 },
                                          &out_));
}

static void test_overflowing_sizes(void **state)
{
    (void)state;
    float data[1] = { 0 };
    /* (INT64_MAX/2) * 4 > INT64_MAX: the element count overflows int64 */
    EXPECT_CREATE_FAILS(TFM_ERR_OVERFLOW, "overflow",
                        tfm_tensor_create(2, (const int64_t[]){ INT64_MAX / 2, 4 },
                                          &out_));
    /* 2^40 * 2^40 = 2^80 elements */
    EXPECT_CREATE_FAILS(TFM_ERR_OVERFLOW, "overflow",
                        tfm_tensor_create(2,
                                          (const int64_t[]){ (int64_t)1 << 40,
                                                             (int64_t)1 << 40 },
                                          &out_));
    /* 2^62 elements fit in int64 but 2^64 bytes do not fit in size_t */
    EXPECT_CREATE_FAILS(TFM_ERR_OVERFLOW, "overflow",
                        tfm_tensor_create(1, (const int64_t[]){ (int64_t)1 << 62 },
                                          &out_));
    /* 2^20 * 2^20 * 2^20 * 2^20 = 2^80, overflowing only at the last axis */
    EXPECT_CREATE_FAILS(TFM_ERR_OVERFLOW, "overflow",
                        tfm_tensor_create(4,
                                          (const int64_t[]){ 1 << 20, 1 << 20,
                                                             1 << 20, 1 << 20 },
                                          &out_));
    /* INT64_MAX elements, single axis */
    EXPECT_CREATE_FAILS(TFM_ERR_OVERFLOW, "overflow",
                        tfm_tensor_create_copy(1, (const int64_t[]){ INT64_MAX },
                                               data, &out_));
    EXPECT_CREATE_FAILS(TFM_ERR_OVERFLOW, "overflow",
                        tfm_tensor_wrap(2, (const int64_t[]){ INT64_MAX, 2 },
                                        data, &out_));
}

/* tensor.h: TFM_ERR_OVERFLOW when "the byte size does not fit in size_t /
 * int64".  2^61 floats are 2^63 bytes: that fits in a 64-bit size_t but is
 * INT64_MAX + 1, so it does not fit in int64 -> OVERFLOW, not an attempt to
 * allocate (which would give OUT_OF_MEMORY). */
static void test_byte_size_past_int64_is_overflow(void **state)
{
    (void)state;
    EXPECT_CREATE_FAILS(TFM_ERR_OVERFLOW, "overflow",
                        tfm_tensor_create(1, (const int64_t[]){ (int64_t)1 << 61 },
                                          &out_));
    /* 2^31 * 2^30 floats = 2^61 floats, same byte size on two axes */
    EXPECT_CREATE_FAILS(TFM_ERR_OVERFLOW, "overflow",
                        tfm_tensor_create(2,
                                          (const int64_t[]){ (int64_t)1 << 31,
                                                             (int64_t)1 << 30 },
                                          &out_));
}

/* ---- last error and status strings --------------------------------------- */

static void test_last_error_lifecycle(void **state)
{
    (void)state;
    tfm_clear_error();
    assert_string_equal(tfm_last_error(), "");
    tfm_tensor *t = SENTINEL_TENSOR;
    assert_int_equal(tfm_tensor_create(7, (const int64_t[]){ 1, 1, 1, 1, 1, 1, 1 },
                                       &t),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(t, SENTINEL_TENSOR);
    assert_non_null(strstr(tfm_last_error(), "rank 7"));
    /* A successful call does not clear it. */
    t = NULL;
    assert_int_equal(tfm_tensor_create(1, (const int64_t[]){ 2 }, &t), TFM_OK);
    assert_non_null(strstr(tfm_last_error(), "rank 7"));
    tfm_tensor_free(t);
    /* A later failure replaces it. */
    t = SENTINEL_TENSOR;
    assert_int_equal(tfm_tensor_create(1, (const int64_t[]){ -5 }, &t),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_null(strstr(tfm_last_error(), "rank 7"));
    assert_non_null(strstr(tfm_last_error(), "-5"));
    tfm_clear_error();
    assert_string_equal(tfm_last_error(), "");
}

static void test_status_strings(void **state)
{
    (void)state;
    /* Every known code has its own non-empty text, different from the
     * others and from the unknown one. */
    const char *seen[TFM_STATUS_COUNT];
    const char *unknown = tfm_status_string((tfm_status)TFM_STATUS_COUNT);
    assert_non_null(unknown);
    assert_string_equal(unknown, "unknown status");
    assert_string_equal(tfm_status_string((tfm_status)-1), "unknown status");
    assert_string_equal(tfm_status_string((tfm_status)1000), "unknown status");
    assert_string_equal(tfm_status_string((tfm_status)INT32_MIN),
                        "unknown status");
    for (int s = 0; s < TFM_STATUS_COUNT; s++) {
        const char *text = tfm_status_string((tfm_status)s);
        assert_non_null(text);
        assert_true(strlen(text) > 0);
        if (strcmp(text, unknown) == 0)
            fail_msg("status %d has the unknown text", s);
        for (int o = 0; o < s; o++)
            if (strcmp(text, seen[o]) == 0)
                fail_msg("statuses %d and %d share \"%s\"", o, s, text);
        seen[s] = text;
    }
    /* The header's example, and plain codes pinned by status.h's values. */
    assert_string_equal(tfm_status_string(TFM_ERR_SHAPE), "shape mismatch");
    assert_int_equal(TFM_OK, 0);
    assert_int_equal(TFM_ERR_NULL_ARGUMENT, 1);
    assert_int_equal(TFM_ERR_INVALID_ARGUMENT, 2);
    assert_int_equal(TFM_ERR_SHAPE, 3);
    assert_int_equal(TFM_ERR_OVERFLOW, 4);
    assert_int_equal(TFM_ERR_OUT_OF_MEMORY, 5);
    assert_int_equal(TFM_ERR_NOT_FOUND, 6);
    assert_int_equal(TFM_ERR_WRONG_KIND, 7);
    assert_int_equal(TFM_ERR_IO, 8);
    assert_int_equal(TFM_ERR_FORMAT, 9);
    assert_int_equal(TFM_ERR_UNSUPPORTED, 10);
    assert_int_equal(TFM_ERR_CAPACITY, 11);
    assert_int_equal(TFM_ERR_NON_FINITE, 12);
    assert_true(TFM_STATUS_COUNT >= 13);
    /* Static storage: the same pointer each time. */
    assert_ptr_equal(tfm_status_string(TFM_ERR_IO),
                     tfm_status_string(TFM_ERR_IO));
}

/* ---- copy and add ----------------------------------------------------------- */

static void test_copy_and_add_values(void **state)
{
    (void)state;
    const int64_t shape[2] = { 2, 2 };
    tfm_tensor *a = make(2, shape, (const float[]){ 1.0f, 2.0f, 3.0f, 4.0f });
    tfm_tensor *b = make(2, shape, (const float[]){ 0.5f, -2.0f, 1e-8f, -4.0f });
    assert_int_equal(tfm_tensor_add(a, b), TFM_OK);
    /* 1+0.5, 2-2, 3+1e-8 (rounds to 3 in float32), 4-4 */
    const float *d = tfm_tensor_data_const(a);
    assert_true(d[0] == 1.5f && d[1] == 0.0f && d[2] == 3.0f && d[3] == 0.0f);
    /* b unchanged */
    const float *e = tfm_tensor_data_const(b);
    assert_true(e[0] == 0.5f && e[1] == -2.0f && e[2] == 1e-8f && e[3] == -4.0f);
    assert_int_equal(tfm_tensor_copy(a, b), TFM_OK);
    assert_memory_equal(tfm_tensor_data_const(a), e, 4 * sizeof(float));
    /* x + x (same tensor twice) doubles. */
    assert_int_equal(tfm_tensor_add(b, b), TFM_OK);
    assert_true(e[0] == 1.0f && e[1] == -4.0f && e[2] == 2e-8f && e[3] == -8.0f);
    /* copy onto itself is a no-op */
    assert_int_equal(tfm_tensor_copy(b, b), TFM_OK);
    assert_true(e[0] == 1.0f && e[3] == -8.0f);
    tfm_tensor_free(a);
    tfm_tensor_free(b);
}

static void test_copy_add_shape_mismatch_leaves_destination(void **state)
{
    (void)state;
    const float six[6] = { 1, 2, 3, 4, 5, 6 };
    const float ten[6] = { 10, 20, 30, 40, 50, 60 };
    tfm_tensor *a = make(2, (const int64_t[]){ 2, 3 }, six);
    /* same numel, different shape: [3, 2] */
    tfm_tensor *b = make(2, (const int64_t[]){ 3, 2 }, ten);
    /* same numel, different rank: [6] and [1, 2, 3] */
    tfm_tensor *c = make(1, (const int64_t[]){ 6 }, ten);
    tfm_tensor *e = make(3, (const int64_t[]){ 1, 2, 3 }, ten);
    tfm_tensor *others[3] = { b, c, e };
    for (int i = 0; i < 3; i++) {
        tfm_clear_error();
        assert_int_equal(tfm_tensor_copy(a, others[i]), TFM_ERR_SHAPE);
        assert_memory_equal(tfm_tensor_data_const(a), six, sizeof six);
        assert_true(strlen(tfm_last_error()) > 0);
        tfm_clear_error();
        assert_int_equal(tfm_tensor_add(a, others[i]), TFM_ERR_SHAPE);
        assert_memory_equal(tfm_tensor_data_const(a), six, sizeof six);
        assert_true(strlen(tfm_last_error()) > 0);
        assert_memory_equal(tfm_tensor_data_const(others[i]), ten, sizeof ten);
    }
    /* the message shows both shapes */
    assert_int_equal(tfm_tensor_add(a, b), TFM_ERR_SHAPE);
    assert_non_null(strstr(tfm_last_error(), "[2, 3]"));
    assert_non_null(strstr(tfm_last_error(), "[3, 2]"));
    /* NULL arguments */
    assert_int_equal(tfm_tensor_copy(NULL, a), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tensor_copy(a, NULL), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tensor_add(NULL, a), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_tensor_add(a, NULL), TFM_ERR_NULL_ARGUMENT);
    assert_memory_equal(tfm_tensor_data_const(a), six, sizeof six);
    FREE_TENSORS(a, b, c, e);
}

static void test_add_nonfinite_follows_ieee(void **state)
{
    (void)state;
    /* The residual add is plain IEEE addition: inf + -inf = NaN,
     * 3e38 + 3e38 = inf (float32 max is about 3.4e38), NaN + 1 = NaN. */
    const int64_t shape[1] = { 4 };
    tfm_tensor *x = make(1, shape, (const float[]){ INFINITY, 3e38f, NAN, 1.0f });
    tfm_tensor *y = make(1, shape, (const float[]){ -INFINITY, 3e38f, 1.0f, 2.0f });
    assert_int_equal(tfm_tensor_add(x, y), TFM_OK);
    const float *d = tfm_tensor_data_const(x);
    assert_true(isnan(d[0]));
    assert_true(isinf(d[1]) && d[1] > 0);
    assert_true(isnan(d[2]));
    assert_true(d[3] == 3.0f);
    tfm_tensor_free(x);
    tfm_tensor_free(y);
}

/* ---- version ---------------------------------------------------------------- */

static void test_version_macros_match_library(void **state)
{
    (void)state;
    assert_int_equal(tfm_version_number(), TFM_VERSION_NUMBER);
    assert_string_equal(tfm_version_string(), TFM_VERSION_STRING);
    assert_int_equal(TFM_VERSION_NUMBER, TFM_VERSION_MAJOR * 10000 +
                                             TFM_VERSION_MINOR * 100 +
                                             TFM_VERSION_PATCH);
    char buf[64];
    snprintf(buf, sizeof buf, "%d.%d.%d", TFM_VERSION_MAJOR, TFM_VERSION_MINOR,
             TFM_VERSION_PATCH);
    assert_string_equal(TFM_VERSION_STRING, buf);
    assert_true(TFM_AT_LEAST_VERSION(TFM_VERSION_MAJOR, TFM_VERSION_MINOR,
                                     TFM_VERSION_PATCH));
    assert_false(TFM_AT_LEAST_VERSION(TFM_VERSION_MAJOR + 1, 0, 0));
    assert_true(TFM_AT_LEAST_VERSION(0, 0, 0));
}

/* Out of memory at each allocation of a create call: TFM_ERR_OUT_OF_MEMORY,
 * *out untouched, nothing leaked (run under ASan/valgrind to see leaks),
 * and a later call succeeds. */
static void test_out_of_memory(void **state)
{
    (void)state;
    const int64_t shape[2] = { 3, 5 };
    float data[15] = { 0 };
    for (int which = 0; which < 3; which++) {
        int succeeded = 0;
        for (long k = 1; k <= 10 && !succeeded; k++) {
            tfm_tensor *t = SENTINEL_TENSOR;
            tfm_testing_fail_allocation(k);
            tfm_status st = which == 0 ? tfm_tensor_create(2, shape, &t)
                          : which == 1 ? tfm_tensor_create_copy(2, shape, data, &t)
                                       : tfm_tensor_wrap(2, shape, data, &t);
            tfm_testing_fail_allocation(0);
            if (st == TFM_OK) {
                assert_ptr_not_equal(t, SENTINEL_TENSOR);
                assert_int_equal(tfm_tensor_numel(t), 15);
                tfm_tensor_free(t);
                succeeded = 1;
                continue;
            }
            if (st != TFM_ERR_OUT_OF_MEMORY)
                fail_msg("creator %d, allocation %ld failing: status %d", which,
                         k, (int)st);
            assert_ptr_equal(t, SENTINEL_TENSOR);
            assert_true(strlen(tfm_last_error()) > 0);
        }
        assert_true(succeeded);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_is_zeroed_and_reports_shape),
        cmocka_unit_test(test_create_every_rank),
        cmocka_unit_test(test_create_copies_shape_array),
        cmocka_unit_test(test_create_copy_is_independent),
        cmocka_unit_test(test_wrap_writes_through_and_is_not_freed),
        cmocka_unit_test(test_wrap_heap_buffer_survives_free),
        cmocka_unit_test(test_null_tensor_queries),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_create_copy_null_out),
        cmocka_unit_test(test_bad_rank),
        cmocka_unit_test(test_bad_dimension),
        cmocka_unit_test(test_overflowing_sizes),
        cmocka_unit_test(test_byte_size_past_int64_is_overflow),
        cmocka_unit_test(test_last_error_lifecycle),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_copy_and_add_values),
        cmocka_unit_test(test_copy_add_shape_mismatch_leaves_destination),
        cmocka_unit_test(test_add_nonfinite_follows_ieee),
        cmocka_unit_test(test_version_macros_match_library),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
