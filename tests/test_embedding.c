/*
 * Token embeddings, learned positions and sinusoidal positional encodings
 * (embedding.h).  Expected values are worked out by hand, or float64 numpy
 * with the snippet next to them:
 *   def pe(pos, d, base=10000.0):
 *       i = np.arange(d); a = pos / base ** ((i // 2 * 2) / d)
 *       return np.where(i % 2 == 0, np.sin(a), np.cos(a))
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <transformer/embedding.h>
#include <transformer/layers.h>
#include <transformer/module.h>
#include <transformer/tensor.h>

#include "test_util.h"

/* ---- helpers -------------------------------------------------------------- */

/* n_rows x d table with row r = [r, r + 0.5, -r, 10 r] (d = 4) */
static tfm_module *table4(int64_t n_rows, int scale)
{
    tfm_module *e = NULL;
    assert_int_equal(tfm_embedding_create(n_rows, 4, scale, &e), TFM_OK);
    tfm_tensor *w = make2(n_rows, 4, NULL);
    float *d = tfm_tensor_data(w);
    for (int64_t r = 0; r < n_rows; r++) {
        d[r * 4 + 0] = (float)r;
        d[r * 4 + 1] = (float)r + 0.5f;
        d[r * 4 + 2] = (float)-r;
        d[r * 4 + 3] = 10.0f * (float)r;
    }
    assert_int_equal(tfm_module_set_parameter(e, "weight", w), TFM_OK);
    tfm_tensor_free(w);
    return e;
}

/* ---- embedding lookup --------------------------------------------------------- */

static void test_lookup_without_scale(void **state)
{
    (void)state;
    tfm_module *e = table4(5, 0);
    assert_int_equal(tfm_module_kind_of(e), TFM_MODULE_EMBEDDING);
    const int32_t ids[6] = { 3, 0, 4, 1, 1, 2 }; /* [2, 3] */
    tfm_tensor *out = make3(2, 3, 4, NULL);
    fill(out, NAN);
    assert_int_equal(tfm_embedding_forward(e, ids, 2, 3, out), TFM_OK);
    EXPECT_VALUES(out, 0.0,
        3, 3.5, -3, 30,   0, 0.5, 0, 0,   4, 4.5, -4, 40,
        1, 1.5, -1, 10,   1, 1.5, -1, 10, 2, 2.5, -2, 20);
    tfm_tensor_free(out);
    tfm_module_free(e);
}

/* scale: rows times sqrt(d_model).  d = 4: sqrt 4 = 2 exactly. */
static void test_lookup_with_scale(void **state)
{
    (void)state;
    tfm_module *e = table4(5, 1);
    const int32_t ids[3] = { 4, 2, 0 };
    tfm_tensor *out = make3(1, 3, 4, NULL);
    assert_int_equal(tfm_embedding_forward(e, ids, 1, 3, out), TFM_OK);
    EXPECT_VALUES(out, 0.0, 8, 9, -8, 80, 4, 5, -4, 40, 0, 1, 0, 0);
    tfm_tensor_free(out);
    tfm_module_free(e);

    /* d = 3: sqrt(3) = 1.7320508075688772; row 1 = [1, -2, 0.25] ->
     * [1.7320508075688772, -3.4641016151377544, 0.4330127018922193];
     * any nonzero scale flag means "scale" */
    tfm_module *e3 = NULL;
    assert_int_equal(tfm_embedding_create(2, 3, -7, &e3), TFM_OK);
    tfm_tensor *w = make2(2, 3, (const float[]){ 9, 9, 9, 1, -2, 0.25f });
    assert_int_equal(tfm_module_set_parameter(e3, "weight", w), TFM_OK);
    tfm_tensor *o3 = make3(1, 1, 3, NULL);
    const int32_t one = 1;
    assert_int_equal(tfm_embedding_forward(e3, &one, 1, 1, o3), TFM_OK);
    EXPECT_VALUES(o3, 1e-6, 1.7320508075688772, -3.4641016151377544,
                  0.4330127018922193);
    tfm_tensor_free(w);
    tfm_tensor_free(o3);
    tfm_module_free(e3);

    /* d = 512: sqrt(512) = 22.627416997969522 */
    tfm_module *eb = NULL;
    assert_int_equal(tfm_embedding_create(1, 512, 1, &eb), TFM_OK);
    tfm_tensor *wb = make2(1, 512, NULL);
    fill(wb, 0.5f);
    assert_int_equal(tfm_module_set_parameter(eb, "weight", wb), TFM_OK);
    tfm_tensor *ob = make3(1, 1, 512, NULL);
    const int32_t zero = 0;
    assert_int_equal(tfm_embedding_forward(eb, &zero, 1, 1, ob), TFM_OK);
    for (int c = 0; c < 512; c++)
        if (!(fabs(tfm_tensor_data_const(ob)[c] - 11.313708498984761) <= 2e-6))
            fail_msg("[%d] = %.9g, expected 11.313708498984761", c,
                     (double)tfm_tensor_data_const(ob)[c]);
    tfm_tensor_free(wb);
    tfm_tensor_free(ob);
    tfm_module_free(eb);
}

static void test_embedding_parameters(void **state)
{
    (void)state;
    tfm_module *e = NULL;
    assert_int_equal(tfm_embedding_create(7, 3, 0, &e), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(e), 1);
    assert_string_equal(tfm_module_parameter_name(e, 0), "weight");
    assert_null(tfm_module_parameter_name(e, 1));
    int rank;
    int64_t s[4];
    assert_int_equal(tfm_module_parameter_shape(e, "weight", &rank, s), TFM_OK);
    assert_true(rank == 2 && s[0] == 7 && s[1] == 3);
    assert_int_equal(tfm_module_num_parameters(e), 21);
    /* starts at zero */
    tfm_tensor *w = make2(7, 3, NULL);
    fill(w, 5.0f);
    assert_int_equal(tfm_module_get_parameter(e, "weight", w), TFM_OK);
    expect_all_equal(w, 0.0f, "weight");
    /* lookups cost no MACs */
    int64_t macs = -1;
    assert_int_equal(tfm_module_forward_macs(e, 4, 9, 9, &macs), TFM_OK);
    assert_int_equal(macs, 0);
    /* wrong shapes and NaN are refused */
    tfm_tensor *wt = make2(3, 7, NULL);
    assert_int_equal(tfm_module_set_parameter(e, "weight", wt), TFM_ERR_SHAPE);
    tfm_tensor_data(w)[20] = NAN;
    assert_int_equal(tfm_module_set_parameter(e, "weight", w),
                     TFM_ERR_NON_FINITE);
    fill(w, 5.0f);
    assert_int_equal(tfm_module_get_parameter(e, "weight", w), TFM_OK);
    expect_all_equal(w, 0.0f, "weight after refused sets");
    tfm_tensor_free(w);
    tfm_tensor_free(wt);
    tfm_module_free(e);
}

static void test_embedding_create_errors(void **state)
{
    (void)state;
    const int64_t bad[][2] = { { 0, 4 }, { 4, 0 }, { -1, 4 }, { 4, -1 },
                               { INT64_MIN, 4 } };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tfm_module *out = SENTINEL_MODULE;
        assert_int_equal(tfm_embedding_create(bad[i][0], bad[i][1], 0, &out),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_ptr_equal(out, SENTINEL_MODULE);
    }
    tfm_module *out = SENTINEL_MODULE;
    /* 2^40 x 2^40 floats: the element count overflows int64 */
    assert_int_equal(tfm_embedding_create(INT64_C(1) << 40, INT64_C(1) << 40, 0,
                                          &out),
                     TFM_ERR_OVERFLOW);
    assert_ptr_equal(out, SENTINEL_MODULE);
    assert_int_equal(tfm_embedding_create(4, 4, 0, NULL), TFM_ERR_NULL_ARGUMENT);
    /* each allocation failing in turn: OUT_OF_MEMORY, *out untouched */
    int succeeded = 0;
    for (long k = 1; k <= 20 && !succeeded; k++) {
        out = SENTINEL_MODULE;
        tfm_testing_fail_allocation(k);
        tfm_status st = tfm_embedding_create(10, 4, 1, &out);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK) {
            tfm_module_free(out);
            succeeded = 1;
        } else {
            assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
            assert_ptr_equal(out, SENTINEL_MODULE);
        }
    }
    assert_true(succeeded);
}

static void test_lookup_errors_leave_out_unchanged(void **state)
{
    (void)state;
    tfm_module *e = table4(5, 0);
    tfm_tensor *out = make3(2, 3, 4, NULL);
    /* the bad id is the last one, so a lookup that wrote as it went would
     * already have changed out */
    const int32_t bad_ids[][6] = {
        { 0, 1, 2, 3, 4, -1 },        /* -1 */
        { 0, 1, 2, 3, 4, 5 },         /* n_rows */
        { 4, 4, 4, 4, 4, INT32_MAX },
        { 0, 0, 0, 0, 0, INT32_MIN },
        { -1, 0, 0, 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
        fill(out, 42.0f);
        tfm_clear_error();
        assert_int_equal(tfm_embedding_forward(e, bad_ids[i], 2, 3, out),
                         TFM_ERR_INVALID_ARGUMENT);
        expect_all_equal(out, 42.0f, "out after a bad id");
        assert_true(strlen(tfm_last_error()) > 0);
    }
    /* the message names the id */
    assert_int_equal(tfm_embedding_forward(e, bad_ids[1], 2, 3, out),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "5"));
    /* wrong out shapes */
    const int32_t ids[6] = { 0, 1, 2, 3, 4, 0 };
    tfm_tensor *o_bad[3] = { make3(2, 3, 5, NULL), make3(3, 2, 4, NULL),
                             make2(6, 4, NULL) };
    for (int i = 0; i < 3; i++) {
        fill(o_bad[i], 42.0f);
        assert_int_equal(tfm_embedding_forward(e, ids, 2, 3, o_bad[i]),
                         TFM_ERR_SHAPE);
        expect_all_equal(o_bad[i], 42.0f, "wrong out");
        tfm_tensor_free(o_bad[i]);
    }
    fill(out, 42.0f);
    assert_int_equal(tfm_embedding_forward(e, NULL, 2, 3, out),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_embedding_forward(e, ids, 2, 3, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_embedding_forward(NULL, ids, 2, 3, out),
                     TFM_ERR_NULL_ARGUMENT);
    /* zero or negative batch / seq: an error, nothing written */
    assert_int_not_equal(tfm_embedding_forward(e, ids, 0, 3, out), TFM_OK);
    assert_int_not_equal(tfm_embedding_forward(e, ids, 2, -3, out), TFM_OK);
    /* another kind of module */
    tfm_module *ln = NULL;
    assert_int_equal(tfm_layer_norm_create(4, 1e-5f, &ln), TFM_OK);
    assert_int_equal(tfm_embedding_forward(ln, ids, 2, 3, out), TFM_ERR_WRONG_KIND);
    expect_all_equal(out, 42.0f, "out after other errors");
    tfm_module_free(ln);
    tfm_tensor_free(out);
    tfm_module_free(e);
}

/* ---- learned positions ------------------------------------------------------- */

/* x[2, 3, 4] set to `base`, then positions added from `offset`: each batch
 * element must equal the 12 values of `seq` exactly (failures name line). */
static void check_add_positions(const tfm_module *p, tfm_tensor *x, float base,
                                int64_t offset, const double *seq, int line)
{
    double both[24];
    memcpy(both, seq, 12 * sizeof *seq);
    memcpy(both + 12, seq, 12 * sizeof *seq);
    fill(x, base);
    assert_int_equal(tfm_embedding_add_positions(p, x, offset), TFM_OK);
    expect_values_at(x, both, 0.0, "x", __FILE__, line);
}
#define CHECK_ADD_POSITIONS(p, x, base, offset, ...)                         \
    check_add_positions((p), (x), (base), (offset),                         \
                        (const double[12]){ __VA_ARGS__ }, __LINE__)

/* table of 6 rows, row r = [r, r + 0.5, -r, 10 r]; x = 1 everywhere.
 * offset 2, L = 3: x[b, i] = 1 + table[2 + i]:
 *   [3, 3.5, -1, 21], [4, 4.5, -2, 31], [5, 5.5, -3, 41] for every b. */
static void test_add_positions(void **state)
{
    (void)state;
    tfm_module *p = table4(6, 0);
    tfm_tensor *x = make3(2, 3, 4, NULL);
    CHECK_ADD_POSITIONS(p, x, 1.0f, 2,
        3, 3.5, -1, 21, 4, 4.5, -2, 31, 5, 5.5, -3, 41);
    /* offset 0 */
    CHECK_ADD_POSITIONS(p, x, 0.0f, 0,
        0, 0.5, 0, 0, 1, 1.5, -1, 10, 2, 2.5, -2, 20);
    /* the last rows exactly: offset 3, L = 3 -> rows 3..5 = the end */
    CHECK_ADD_POSITIONS(p, x, 0.0f, 3,
        3, 3.5, -3, 30, 4, 4.5, -4, 40, 5, 5.5, -5, 50);
    /* embedding.h defines add_positions as x[b, i] += table[offset + i]:
     * the scale flag (sqrt(d_model)) belongs to tfm_embedding_forward and
     * does not apply here. */
    tfm_module_free(p);
    p = table4(6, 1);
    CHECK_ADD_POSITIONS(p, x, 0.0f, 3,
        3, 3.5, -3, 30, 4, 4.5, -4, 40, 5, 5.5, -5, 50);
    tfm_tensor_free(x);
    tfm_module_free(p);
}

static void test_add_positions_errors(void **state)
{
    (void)state;
    tfm_module *p = table4(6, 0);
    tfm_tensor *x = make3(2, 3, 4, NULL);
    /* capacity: offset + L > 6 */
    const int64_t over[] = { 4, 6, 100, INT64_MAX, INT64_MAX - 2 };
    for (size_t i = 0; i < sizeof over / sizeof *over; i++) {
        fill(x, 42.0f);
        tfm_clear_error();
        tfm_status st = tfm_embedding_add_positions(p, x, over[i]);
        if (st != TFM_ERR_CAPACITY)
            fail_msg("offset %lld: status %d, expected CAPACITY",
                     (long long)over[i], (int)st);
        expect_all_equal(x, 42.0f, "x after capacity error");
        assert_true(strlen(tfm_last_error()) > 0);
        /* the message names real positions: offset + L - 1 must not be
         * computed with a signed overflow into a negative number */
        if (strstr(tfm_last_error(), "..-") || strstr(tfm_last_error(), "-9223"))
            fail_msg("offset %lld: message \"%s\" shows a wrapped position",
                     (long long)over[i], tfm_last_error());
    }
    /* L longer than the whole table */
    tfm_tensor *x7 = make3(1, 7, 4, NULL);
    fill(x7, 42.0f);
    assert_int_equal(tfm_embedding_add_positions(p, x7, 0), TFM_ERR_CAPACITY);
    expect_all_equal(x7, 42.0f, "x7");
    /* negative offset */
    fill(x, 42.0f);
    assert_int_equal(tfm_embedding_add_positions(p, x, -1), TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_embedding_add_positions(p, x, INT64_MIN),
                     TFM_ERR_INVALID_ARGUMENT);
    /* shapes: width 5, rank 2 */
    tfm_tensor *x5 = make3(2, 3, 5, NULL), *x2 = make2(3, 4, NULL);
    fill(x5, 42.0f);
    fill(x2, 42.0f);
    assert_int_equal(tfm_embedding_add_positions(p, x5, 0), TFM_ERR_SHAPE);
    assert_int_equal(tfm_embedding_add_positions(p, x2, 0), TFM_ERR_SHAPE);
    expect_all_equal(x5, 42.0f, "x5");
    expect_all_equal(x2, 42.0f, "x2");
    assert_int_equal(tfm_embedding_add_positions(p, NULL, 0), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_embedding_add_positions(NULL, x, 0), TFM_ERR_NULL_ARGUMENT);
    tfm_module *ln = NULL;
    assert_int_equal(tfm_layer_norm_create(4, 1e-5f, &ln), TFM_OK);
    assert_int_equal(tfm_embedding_add_positions(ln, x, 0), TFM_ERR_WRONG_KIND);
    expect_all_equal(x, 42.0f, "x after errors");
    tfm_module_free(ln);
    FREE_TENSORS(x, x7, x5, x2);
    tfm_module_free(p);
}

/* ---- sinusoidal encoding ----------------------------------------------------- */

/* d = 6, base 10000: the angle of pair i at position pos is
 * pos / 10000^(2i/6), 10000^(1/3) = 21.544346900318832.
 *   PE(0) = [sin 0, cos 0, ...] = [0, 1, 0, 1, 0, 1]
 *   PE(1) = [sin 1, cos 1, sin(1/21.544..), cos(..), sin(1/464.15..), cos(..)]
 *         = pe(1, 6) in numpy
 *   PE(2) = pe(2, 6) */
static void test_sinusoidal_values(void **state)
{
    (void)state;
    tfm_tensor *pe = make2(3, 6, NULL);
    fill(pe, NAN);
    assert_int_equal(tfm_sinusoidal_encoding(pe, 0, 0.0), TFM_OK);
    EXPECT_VALUES(pe, 1e-7,
        0, 1, 0, 1, 0, 1,
        0.8414709848078965, 0.54030230586813977, 0.046399223464731285,
        0.99892297604063041, 0.0021544330233656045, 0.99999767920648086,
        0.90929742682568171, -0.41614683654714241, 0.092698500778727252,
        0.99569422412373987, 0.0043088560467428125, 0.99999071683669571);
    /* by hand, independent of numpy: PE(1, 0) = sin(1), PE(1, 1) = cos(1),
     * PE(1, 2) = sin(1 / 10000^(2/6)) */
    const float *d = tfm_tensor_data_const(pe);
    assert_true(fabs(d[6] - sin(1.0)) < 1e-7);
    assert_true(fabs(d[7] - cos(1.0)) < 1e-7);
    assert_true(fabs(d[8] - sin(1.0 / pow(10000.0, 2.0 / 6))) < 1e-7);
    /* base 10000 given explicitly: same bits as the default */
    tfm_tensor *pe2 = make2(3, 6, NULL);
    assert_int_equal(tfm_sinusoidal_encoding(pe2, 0, 10000.0), TFM_OK);
    expect_bit_identical(pe, pe2, "base 0 vs 10000");
    tfm_tensor_free(pe);
    tfm_tensor_free(pe2);

    /* odd width d = 5 at position 3 (offset 3, one row): the last
     * dimension 4 is a sin with exponent 4/5: pe(3, 5) */
    tfm_tensor *p5 = make2(1, 5, NULL);
    assert_int_equal(tfm_sinusoidal_encoding(p5, 3, 0.0), TFM_OK);
    EXPECT_VALUES(p5, 1e-7, 0.14112000805986721, -0.98999249660044542,
                  0.075285292998888947, 0.99716203530723702,
                  0.0018928709030918876);
    tfm_tensor_free(p5);

    /* base 100, d = 4, position 7: angles 7 and 7 / 100^(2/4) = 0.7:
     * [sin 7, cos 7, sin 0.7, cos 0.7] */
    tfm_tensor *p4 = make2(1, 4, NULL);
    assert_int_equal(tfm_sinusoidal_encoding(p4, 7, 100.0), TFM_OK);
    EXPECT_VALUES(p4, 1e-7, 0.65698659871878906, 0.7539022543433046,
                  0.64421768723769102, 0.7648421872844885);
    tfm_tensor_free(p4);
}

/* "Angles are computed in double precision": at position 100000 a float32
 * angle is off by ~0.004 rad (ulp of 1e5 is 0.0078), so sin would be off
 * by that much.  pe(100000, 8), pe(123457, 8) in numpy. */
static void test_sinusoidal_far_positions(void **state)
{
    (void)state;
    tfm_tensor *pe = make2(1, 8, NULL);
    assert_int_equal(tfm_sinusoidal_encoding(pe, 100000, 0.0), TFM_OK);
    EXPECT_VALUES(pe, 2e-7,
        0.035748797972016508, -0.99936080743821243, -0.30561438888825215,
        -0.95215536825901481, 0.82687954053200252, 0.56237907629070294,
        -0.50636564110975879, 0.86231887228768389);
    assert_int_equal(tfm_sinusoidal_encoding(pe, 123457, 0.0), TFM_OK);
    EXPECT_VALUES(pe, 2e-7,
        -0.9656934932798662, 0.25968457219659602, -0.68828956724993795,
        0.72543605618613494, 0.07583997049739058, -0.99712000224394004,
        -0.80453168047614065, -0.59390973650062096);
    tfm_tensor_free(pe);
}

/* offset k writes the rows k .. k+L-1 of the table from 0: bit-identical */
static void test_sinusoidal_offset(void **state)
{
    (void)state;
    tfm_tensor *full = make2(12, 10, NULL), *part = make2(4, 10, NULL);
    assert_int_equal(tfm_sinusoidal_encoding(full, 0, 0.0), TFM_OK);
    assert_int_equal(tfm_sinusoidal_encoding(part, 8, 0.0), TFM_OK);
    assert_memory_equal(tfm_tensor_data_const(part),
                        tfm_tensor_data_const(full) + 8 * 10,
                        4 * 10 * sizeof(float));
    /* and a different base gives different values past dimension 1 */
    assert_int_equal(tfm_sinusoidal_encoding(part, 8, 500.0), TFM_OK);
    assert_true(tfm_tensor_data_const(part)[0] == tfm_tensor_data_const(full)[80]);
    assert_true(tfm_tensor_data_const(part)[2] != tfm_tensor_data_const(full)[82]);
    tfm_tensor_free(full);
    tfm_tensor_free(part);
}

/* x [B, L, d] += PE(offset + i) for every b: the same as adding
 * tfm_sinusoidal_encoding's table to each batch element, bit for bit. */
static void test_add_sinusoidal_matches_table(void **state)
{
    (void)state;
    enum { B = 3, L = 5, D = 6 };
    const int64_t offsets[3] = { 0, 4, 1000 };
    const double bases[2] = { 0.0, 321.5 };
    for (int o = 0; o < 3; o++)
        for (int bi = 0; bi < 2; bi++) {
            tfm_tensor *x = make3(B, L, D, NULL), *ref = make3(B, L, D, NULL);
            fill_random(x, 7);
            fill_random(ref, 7);
            tfm_tensor *pe = make2(L, D, NULL);
            assert_int_equal(tfm_sinusoidal_encoding(pe, offsets[o], bases[bi]),
                             TFM_OK);
            float *r = tfm_tensor_data(ref);
            const float *p = tfm_tensor_data_const(pe);
            for (int b = 0; b < B; b++)
                for (int i = 0; i < L * D; i++)
                    r[b * L * D + i] += p[i];
            assert_int_equal(tfm_add_sinusoidal_encoding(x, offsets[o], bases[bi]),
                             TFM_OK);
            expect_bit_identical(x, ref, "add_sinusoidal vs table");
            FREE_TENSORS(x, ref, pe);
        }
    /* on zeros it is the table itself: PE(0) = [0, 1, 0, 1, 0, 1] */
    tfm_tensor *z = make3(2, 1, 6, NULL);
    assert_int_equal(tfm_add_sinusoidal_encoding(z, 0, 0.0), TFM_OK);
    EXPECT_VALUES(z, 0.0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1);
    tfm_tensor_free(z);
}

static void test_sinusoidal_errors(void **state)
{
    (void)state;
    tfm_tensor *pe = make2(3, 4, NULL), *x = make3(2, 3, 4, NULL);
    const double bad_base[] = { 1.0, 0.5, -10.0, NAN, INFINITY, -INFINITY,
                                0.999999 };
    for (size_t i = 0; i < sizeof bad_base / sizeof *bad_base; i++) {
        fill(pe, 42.0f);
        fill(x, 42.0f);
        assert_int_equal(tfm_sinusoidal_encoding(pe, 0, bad_base[i]),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_int_equal(tfm_add_sinusoidal_encoding(x, 0, bad_base[i]),
                         TFM_ERR_INVALID_ARGUMENT);
        expect_all_equal(pe, 42.0f, "pe after a bad base");
        expect_all_equal(x, 42.0f, "x after a bad base");
    }
    assert_int_equal(tfm_sinusoidal_encoding(pe, -1, 0.0), TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_add_sinusoidal_encoding(x, -5, 0.0),
                     TFM_ERR_INVALID_ARGUMENT);
    expect_all_equal(pe, 42.0f, "pe after a negative offset");
    expect_all_equal(x, 42.0f, "x after a negative offset");
    /* pe must be rank 2, x rank 3 */
    tfm_tensor *p1 = make(1, (const int64_t[]){ 4 }, NULL);
    fill(p1, 42.0f);
    assert_int_equal(tfm_sinusoidal_encoding(x, 0, 0.0), TFM_ERR_SHAPE);
    assert_int_equal(tfm_sinusoidal_encoding(p1, 0, 0.0), TFM_ERR_SHAPE);
    assert_int_equal(tfm_add_sinusoidal_encoding(pe, 0, 0.0), TFM_ERR_SHAPE);
    expect_all_equal(x, 42.0f, "x after rank errors");
    expect_all_equal(pe, 42.0f, "pe after rank errors");
    expect_all_equal(p1, 42.0f, "p1");
    assert_int_equal(tfm_sinusoidal_encoding(NULL, 0, 0.0), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_add_sinusoidal_encoding(NULL, 0, 0.0),
                     TFM_ERR_NULL_ARGUMENT);
    FREE_TENSORS(pe, x, p1);
}

/* ---- backward ----------------------------------------------------------------- */

/* weight.grad[ids[i]] += s * grad_output[i]: with ids { 2, 0, 2, 1 } and
 * grad_output row i = [i + 1, -(i + 1), 0.5, 0] (d = 4):
 *   row 0 gets position 1:     [2, -2, 0.5, 0]
 *   row 1 gets position 3:     [4, -4, 0.5, 0]
 *   row 2 gets positions 0, 2: [1 + 3, -1 - 3, 1, 0] = [4, -4, 1, 0]
 * and row 3 nothing; with padding_idx 2 row 2 stays 0; scale (sqrt 4 = 2)
 * doubles everything; a second call adds the same again. */
static void test_backward_scatter_add(void **state)
{
    (void)state;
    const int32_t ids[4] = { 2, 0, 2, 1 };       /* [2, 2] */
    tfm_tensor *g = make3(2, 2, 4, NULL);
    float *gd = tfm_tensor_data(g);
    for (int i = 0; i < 4; i++) {
        gd[i * 4 + 0] = (float)(i + 1);
        gd[i * 4 + 1] = (float)-(i + 1);
        gd[i * 4 + 2] = 0.5f;
        gd[i * 4 + 3] = 0.0f;
    }
    tfm_tensor *grad = make2(4, 4, NULL);
    for (int scale = 0; scale <= 1; scale++) {
        tfm_module *e = table4(4, scale);
        /* no gradient memory before tfm_module_train */
        assert_int_equal(tfm_embedding_backward(e, ids, 2, 2, -1, g),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_int_equal(tfm_module_train(e, 1), TFM_OK);
        assert_int_equal(tfm_embedding_backward(e, ids, 2, 2, -1, g), TFM_OK);
        assert_int_equal(tfm_module_get_grad(e, "weight", grad), TFM_OK);
        const double k = scale ? 2.0 : 1.0;
        EXPECT_VALUES(grad, 0.0,
            2 * k, -2 * k, 0.5 * k, 0,   4 * k, -4 * k, 0.5 * k, 0,
            4 * k, -4 * k, 1 * k, 0,     0, 0, 0, 0);
        assert_int_equal(tfm_embedding_backward(e, ids, 2, 2, -1, g), TFM_OK);
        assert_int_equal(tfm_module_get_grad(e, "weight", grad), TFM_OK);
        EXPECT_VALUES(grad, 0.0,
            4 * k, -4 * k, 1 * k, 0,     8 * k, -8 * k, 1 * k, 0,
            8 * k, -8 * k, 2 * k, 0,     0, 0, 0, 0);
        assert_int_equal(tfm_module_zero_grad(e), TFM_OK);
        assert_int_equal(tfm_embedding_backward(e, ids, 2, 2, 2, g), TFM_OK);
        assert_int_equal(tfm_module_get_grad(e, "weight", grad), TFM_OK);
        EXPECT_VALUES(grad, 0.0,
            2 * k, -2 * k, 0.5 * k, 0,   4 * k, -4 * k, 0.5 * k, 0,
            0, 0, 0, 0,                  0, 0, 0, 0);
        tfm_module_free(e);
    }
    tfm_tensor_free(grad);
    tfm_tensor_free(g);
}

/* Every refused call leaves the gradient as it was (all 7 here). */
static void test_backward_errors_write_nothing(void **state)
{
    (void)state;
    tfm_module *e = table4(3, 0);
    assert_int_equal(tfm_module_train(e, 1), TFM_OK);
    tfm_tensor *g = make3(1, 2, 4, NULL);
    fill(g, 1.0f);
    tfm_tensor *bad = make3(1, 3, 4, NULL);
    fill(bad, 1.0f);
    const int32_t ids[2] = { 0, 1 }, out_of_range[2] = { 0, 3 },
                  negative[2] = { -1, 0 };
    const struct {
        tfm_module *m;
        const int32_t *ids;
        int64_t padding_idx;
        const tfm_tensor *g;
        tfm_status want;
    } cases[] = {
        { NULL, ids, -1, g, TFM_ERR_NULL_ARGUMENT },
        { e, NULL, -1, g, TFM_ERR_NULL_ARGUMENT },
        { e, ids, -1, NULL, TFM_ERR_NULL_ARGUMENT },
        { e, ids, -1, bad, TFM_ERR_SHAPE },
        { e, out_of_range, -1, g, TFM_ERR_INVALID_ARGUMENT },
        { e, negative, -1, g, TFM_ERR_INVALID_ARGUMENT },
        { e, ids, 3, g, TFM_ERR_INVALID_ARGUMENT },
        { e, ids, -2, g, TFM_ERR_INVALID_ARGUMENT },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(tfm_embedding_backward(cases[i].m, cases[i].ids, 1,
                                                2, cases[i].padding_idx,
                                                cases[i].g),
                         cases[i].want);
    tfm_tensor_data(g)[5] = NAN;
    assert_int_equal(tfm_embedding_backward(e, ids, 1, 2, -1, g),
                     TFM_ERR_NON_FINITE);
    tfm_tensor *grad = make2(3, 4, NULL);
    assert_int_equal(tfm_module_get_grad(e, "weight", grad), TFM_OK);
    for (int i = 0; i < 12; i++)
        assert_true(tfm_tensor_data(grad)[i] == 0.0f);
    tfm_module *lin = NULL;
    assert_int_equal(tfm_linear_create(4, 4, 1, &lin), TFM_OK);
    fill(g, 1.0f);
    assert_int_equal(tfm_embedding_backward(lin, ids, 1, 2, -1, g),
                     TFM_ERR_WRONG_KIND);
    tfm_module_free(lin);
    tfm_tensor_free(grad);
    tfm_tensor_free(bad);
    tfm_tensor_free(g);
    tfm_module_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_without_scale),
        cmocka_unit_test(test_lookup_with_scale),
        cmocka_unit_test(test_embedding_parameters),
        cmocka_unit_test(test_embedding_create_errors),
        cmocka_unit_test(test_lookup_errors_leave_out_unchanged),
        cmocka_unit_test(test_add_positions),
        cmocka_unit_test(test_add_positions_errors),
        cmocka_unit_test(test_sinusoidal_values),
        cmocka_unit_test(test_sinusoidal_far_positions),
        cmocka_unit_test(test_sinusoidal_offset),
        cmocka_unit_test(test_add_sinusoidal_matches_table),
        cmocka_unit_test(test_sinusoidal_errors),
        cmocka_unit_test(test_backward_scatter_add),
        cmocka_unit_test(test_backward_errors_write_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
