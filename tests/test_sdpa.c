/*
 * Scaled dot-product attention (attention.h: tfm_sdpa).
 *
 * Expected values are worked out by hand in the comments (softmax written
 * out with e = exp(1)), or computed with float64 numpy (snippet in the
 * comment).  Comparisons that the contract makes exact (masked weights are
 * zero, masked NaN never reaches the output, boolean polarity, broadcast
 * masks) are bit-exact.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <transformer/attention.h>
#include <transformer/tensor.h>

#include "test_util.h"

#define E1 2.718281828459045 /* exp(1) */

/* ---- helpers -------------------------------------------------------------- */

static void expect_no_nan(const tfm_tensor *t, const char *what)
{
    const float *d = tfm_tensor_data_const(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        if (!isfinite(d[i]))
            fail_msg("%s[%lld] = %g", what, (long long)i, (double)d[i]);
}

static float at4(const tfm_tensor *t, int64_t a, int64_t b, int64_t c,
                 int64_t d)
{
    const int64_t d1 = tfm_tensor_dim(t, 1), d2 = tfm_tensor_dim(t, 2),
                  d3 = tfm_tensor_dim(t, 3);
    return tfm_tensor_data_const(t)[((a * d1 + b) * d2 + c) * d3 + d];
}

static float *ptr4(tfm_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t d1 = tfm_tensor_dim(t, 1), d2 = tfm_tensor_dim(t, 2),
                  d3 = tfm_tensor_dim(t, 3);
    return tfm_tensor_data(t) + ((a * d1 + b) * d2 + c) * d3 + d;
}

/* ---- hand-worked values --------------------------------------------------- */

/*
 * q = [[1, 0], [0, 1]], k = [[1, 0], [0, 1], [1, 1]], v = [[1, 2], [3, 4],
 * [5, 6]], scale s.  Logits: row 0 = s*[1, 0, 1], row 1 = s*[0, 1, 1].
 * With a = exp(s):
 *   w0 = [a, 1, a] / (2a + 1),  w1 = [1, a, a] / (2a + 1)
 *   out0 = (a[1,2] + [3,4] + a[5,6]) / (2a+1) = [6a+3, 8a+4]/(2a+1) = [3, 4]
 *   out1 = ([1,2] + a[3,4] + a[5,6]) / (2a+1) = [1+8a, 2+10a] / (2a+1)
 */
static void check_small_case(float scale, double s)
{
    tfm_tensor *q = make4(1, 1, 2, 2, (const float[]){ 1, 0, 0, 1 });
    tfm_tensor *k = make4(1, 1, 3, 2, (const float[]){ 1, 0, 0, 1, 1, 1 });
    tfm_tensor *v = make4(1, 1, 3, 2, (const float[]){ 1, 2, 3, 4, 5, 6 });
    tfm_tensor *out = make4(1, 1, 2, 2, NULL);
    tfm_tensor *w = make4(1, 1, 2, 3, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, NULL, scale, out, w), TFM_OK);
    const double a = exp(s), den = 2 * a + 1;
    EXPECT_VALUES(w, 2e-6, a / den, 1 / den, a / den, 1 / den, a / den, a / den);
    EXPECT_VALUES(out, 2e-6, 3.0, 4.0, (1 + 8 * a) / den, (2 + 10 * a) / den);
    FREE_TENSORS(q, k, v, out, w);
}

static void test_hand_small_explicit_scale(void **state)
{
    (void)state;
    check_small_case(1.0f, 1.0);   /* a = e: out1 = [(1+8e)/(2e+1), ...] */
    check_small_case(2.0f, 2.0);   /* a = e^2 */
    check_small_case(-1.0f, -1.0); /* negative scales are used as given */
    check_small_case(0.25f, 0.25);
}

static void test_default_scale_is_inv_sqrt_dk(void **state)
{
    (void)state;
    /* scale 0 -> 1/sqrt(d_k) = 1/sqrt(2) for d_k = 2 */
    check_small_case(0.0f, 1.0 / sqrt(2.0));
    /* d_k = 4: q = [1,1,1,1], k = [[1,1,1,1], [0,0,0,0]]: dot products 4, 0;
     * default scale 1/2 -> logits [2, 0] -> w = [e^2, 1] / (e^2 + 1);
     * v = [[1], [0]] -> out = e^2/(e^2+1) = 0.8807970779778823. */
    tfm_tensor *q = make4(1, 1, 1, 4, (const float[]){ 1, 1, 1, 1 });
    tfm_tensor *k = make4(1, 1, 2, 4, (const float[]){ 1, 1, 1, 1, 0, 0, 0, 0 });
    tfm_tensor *v = make4(1, 1, 2, 1, (const float[]){ 1, 0 });
    tfm_tensor *out = make4(1, 1, 1, 1, NULL);
    tfm_tensor *out2 = make4(1, 1, 1, 1, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, NULL, 0.0f, out, NULL), TFM_OK);
    EXPECT_VALUES(out, 1e-6, 0.8807970779778823);
    /* explicit 0.5 must give the same bits as the default */
    assert_int_equal(tfm_sdpa(q, k, v, NULL, 0.5f, out2, NULL), TFM_OK);
    expect_bit_identical(out, out2, "default vs explicit 1/sqrt(4)");
    /* explicit 1 differs: logits [4, 0] -> e^4/(e^4+1) = 0.9820137900379085 */
    assert_int_equal(tfm_sdpa(q, k, v, NULL, 1.0f, out2, NULL), TFM_OK);
    EXPECT_VALUES(out2, 1e-6, 0.9820137900379085);
    FREE_TENSORS(q, k, v, out, out2);
}

/* A case computed with float64 numpy (bottom-right causal + padding, two
 * heads, default scale):
 *   rng = np.random.default_rng(7); B,H,L,S,dk,dv = 1,2,3,4,3,2
 *   q = np.round(rng.uniform(-2,2,(B,H,L,dk)),2).astype(np.float32)
 *   k = ... (B,H,S,dk) ...; v = ... (B,H,S,dv) ...   (same recipe, in order)
 *   logits = q64 @ k64.transpose(0,1,3,2) / np.sqrt(dk)
 *   visible = (j <= i + (S-L)) & (j != 2)   # key 2 padded
 *   logits = np.where(visible, logits, -np.inf)
 *   w = softmax(logits, -1); out = w @ v64
 * (full script: q, k, v printed with "%.2ff", w and out with "%.17g"). */
static void test_random_matches_numpy(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 2, 3, 3, (const float[]){
        0.50f, 1.59f, 1.10f, -1.10f, -0.80f, 1.49f, -1.98f, 1.28f, 1.19f,
        -0.13f, -0.79f, -0.89f, -0.98f, -0.22f, 0.02f, 0.21f, 1.98f, 1.17f });
    tfm_tensor *k = make4(1, 2, 4, 3, (const float[]){
        0.49f, 1.96f, -1.14f, -1.36f, 0.45f, -1.82f, -1.86f, 0.06f, -0.14f,
        1.67f, 0.52f, 0.06f, -0.01f, -1.01f, -1.95f, -1.23f, 0.77f, -1.20f,
        -0.52f, -1.99f, 1.32f, -1.38f, -0.93f, 1.52f });
    tfm_tensor *v = make4(1, 2, 4, 2, (const float[]){
        0.04f, 1.39f, 0.56f, 0.97f, -1.63f, 0.16f, 0.03f, 1.49f, -0.55f,
        0.39f, -1.76f, -0.45f, -0.71f, -1.40f, 1.27f, -0.48f });
    tfm_tensor *pad = make(2, (const int64_t[]){ 1, 4 },
                           (const float[]){ 0, 0, 1, 0 });
    tfm_attention_masks m = { .causal = TFM_CAUSAL_BOTTOM_RIGHT,
                              .key_padding_mask = pad,
                              .key_padding_kind = TFM_MASK_BLOCK };
    tfm_tensor *out = make4(1, 2, 3, 2, NULL);
    tfm_tensor *w = make4(1, 2, 3, 4, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, w), TFM_OK);
    EXPECT_VALUES(w, 2e-6,
        0.9130984149235698, 0.086901585076430171, 0, 0,
        0.21629734167279105, 0.78370265832720898, 0, 0,
        0.34410448651641551, 0.58562808232647279, 0, 0.070267431157111593,
        0.75132350789030389, 0.24867649210969622, 0, 0,
        0.38394193281286626, 0.61605806718713374, 0, 0,
        0.046242916524429724, 0.50645186142909093, 0, 0.44730522204647932);
    EXPECT_VALUES(out, 2e-6,
        0.085188823630559615, 1.353501323692196, 0.44752538400525654,
        1.0608449028303268, 0.3438239295396695, 1.1510629610412144,
        -0.8508985620376428, 0.18111173884454101, -1.2954302599981888,
        -0.12748877458554128, -0.3487112524576349, -0.42457509660594256);
    /* masked weights are exactly zero */
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 3; i++) {
            assert_true(at4(w, 0, h, i, 2) == 0.0f);
            if (i < 2)
                assert_true(at4(w, 0, h, i, 3) == 0.0f);
        }
    /* without weights: same output */
    tfm_tensor *out2 = make4(1, 2, 3, 2, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out2, NULL), TFM_OK);
    EXPECT_VALUES(out2, 2e-6,
        0.085188823630559615, 1.353501323692196, 0.44752538400525654,
        1.0608449028303268, 0.3438239295396695, 1.1510629610412144,
        -0.8508985620376428, 0.18111173884454101, -1.2954302599981888,
        -0.12748877458554128, -0.3487112524576349, -0.42457509660594256);
    FREE_TENSORS(q, k, v, pad, out, out2, w);
}

/* ---- causal masks ------------------------------------------------------------
 * q = 0 makes every logit 0, so each query's weights are uniform over the
 * keys it sees and its output is the mean of their values.
 * v[j] = [2^j, -j]. */
static void run_causal(tfm_causal causal, int L, int S, tfm_tensor **out,
                       tfm_tensor **w)
{
    tfm_tensor *q = make4(1, 1, L, 1, NULL);
    tfm_tensor *k = make4(1, 1, S, 1, NULL);
    fill_random(k, 11); /* irrelevant: q = 0 */
    tfm_tensor *v = make4(1, 1, S, 2, NULL);
    for (int j = 0; j < S; j++) {
        *ptr4(v, 0, 0, j, 0) = (float)ldexp(1.0, j);
        *ptr4(v, 0, 0, j, 1) = (float)-j;
    }
    *out = make4(1, 1, L, 2, NULL);
    *w = make4(1, 1, L, S, NULL);
    fill(*out, NAN); /* must be overwritten, also for fully masked rows */
    fill(*w, NAN);
    tfm_attention_masks m = { .causal = causal };
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, *out, *w), TFM_OK);
    FREE_TENSORS(q, k, v);
}

/* Checks row i sees exactly keys 0..last (last < 0: none). */
static void check_causal_row(const tfm_tensor *out, const tfm_tensor *w, int i,
                             int last, int S)
{
    double sum0 = 0, sum1 = 0;
    for (int j = 0; j < S; j++) {
        float wij = at4(w, 0, 0, i, j);
        if (j <= last) {
            NEAR(wij, 1.0 / (last + 1), 1e-6);
            sum0 += ldexp(1.0, j);
            sum1 += -j;
        } else if (wij != 0.0f || signbit(wij)) {
            fail_msg("row %d key %d: weight %g, expected exactly 0", i, j,
                     (double)wij);
        }
    }
    double e0 = last >= 0 ? sum0 / (last + 1) : 0.0;
    double e1 = last >= 0 ? sum1 / (last + 1) : 0.0;
    NEAR(at4(out, 0, 0, i, 0), e0, 1e-6);
    NEAR(at4(out, 0, 0, i, 1), e1, 1e-6);
    if (last < 0) { /* all masked: exactly zero */
        assert_true(at4(out, 0, 0, i, 0) == 0.0f);
        assert_true(at4(out, 0, 0, i, 1) == 0.0f);
    }
}

/* run_causal(), then row i must see exactly keys 0..last[i]. */
static void check_causal(tfm_causal causal, int L, int S, const int *last)
{
    tfm_tensor *out, *w;
    run_causal(causal, L, S, &out, &w);
    for (int i = 0; i < L; i++)
        check_causal_row(out, w, i, last[i], S);
    FREE_TENSORS(out, w);
}

static void test_causal_top_left(void **state)
{
    (void)state;
    /* L = 2 < S = 4, offset 0: query i sees keys j <= i.
     * Outputs [1, 0] and [(1+2)/2, -1/2]. */
    check_causal(TFM_CAUSAL_TOP_LEFT, 2, 4, (const int[]){ 0, 1 });
    /* L = 4 > S = 2: rows 0, 1 see 0..i; the last L - S = 2 rows see all. */
    check_causal(TFM_CAUSAL_TOP_LEFT, 4, 2, (const int[]){ 0, 1, 1, 1 });
    /* L = S = 3: lower triangle */
    check_causal(TFM_CAUSAL_TOP_LEFT, 3, 3, (const int[]){ 0, 1, 2 });
}

static void test_causal_bottom_right(void **state)
{
    (void)state;
    /* L = 2 < S = 4, offset S - L = 2: query i sees j <= i + 2.
     * Outputs [(1+2+4)/3, -1] and [15/4, -1.5]. */
    check_causal(TFM_CAUSAL_BOTTOM_RIGHT, 2, 4, (const int[]){ 2, 3 });
    /* L = 4 > S = 2, offset -2: rows 0, 1 see nothing (zero weights, zero
     * output, no NaN), row 2 sees key 0, row 3 keys 0..1. */
    check_causal(TFM_CAUSAL_BOTTOM_RIGHT, 4, 2, (const int[]){ -2, -1, 0, 1 });
    /* L = 1, S = 5 (one decoding step with a cache): sees everything */
    check_causal(TFM_CAUSAL_BOTTOM_RIGHT, 1, 5, (const int[]){ 4 });
    /* L = S: same as top-left */
    check_causal(TFM_CAUSAL_BOTTOM_RIGHT, 3, 3, (const int[]){ 0, 1, 2 });
}

/* Long sequences cross the kernel's query blocks.  q = 0 again, v[j] = j:
 * a query seeing keys 0..last outputs last/2.  Both with and without the
 * weights. */
static void check_long_causal(tfm_causal causal, int L, int S, int with_w)
{
    tfm_tensor *q = make4(1, 1, L, 2, NULL);
    tfm_tensor *k = make4(1, 1, S, 2, NULL);
    fill_random(k, 5);
    tfm_tensor *v = make4(1, 1, S, 1, NULL);
    for (int j = 0; j < S; j++)
        *ptr4(v, 0, 0, j, 0) = (float)j;
    tfm_tensor *out = make4(1, 1, L, 1, NULL);
    tfm_tensor *w = with_w ? make4(1, 1, L, S, NULL) : NULL;
    fill(out, NAN);
    if (w)
        fill(w, NAN);
    tfm_attention_masks m = { .causal = causal };
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, w), TFM_OK);
    int offset = causal == TFM_CAUSAL_BOTTOM_RIGHT ? S - L : 0;
    for (int i = 0; i < L; i++) {
        int last = i + offset < S - 1 ? i + offset : S - 1;
        float o = at4(out, 0, 0, i, 0);
        if (last < 0) {
            if (o != 0.0f)
                fail_msg("L=%d S=%d row %d: %g, expected 0", L, S, i, (double)o);
        } else if (!(fabs(o - last / 2.0) <= 1e-5 * (1 + last))) {
            fail_msg("L=%d S=%d row %d: %g, expected %g", L, S, i, (double)o,
                     last / 2.0);
        }
        for (int j = 0; w && j < S; j++) {
            float x = at4(w, 0, 0, i, j);
            double e = j <= last ? 1.0 / (last + 1) : 0.0;
            if (j > last ? x != 0.0f : !(fabs(x - e) <= 1e-6))
                fail_msg("L=%d S=%d w[%d][%d] = %g, expected %g", L, S, i, j,
                         (double)x, e);
        }
    }
    FREE_TENSORS(q, k, v, out, w);
}

static void test_causal_long_sequences(void **state)
{
    (void)state;
    for (int with_w = 0; with_w < 2; with_w++) {
        check_long_causal(TFM_CAUSAL_BOTTOM_RIGHT, 130, 3, with_w);
        check_long_causal(TFM_CAUSAL_TOP_LEFT, 70, 100, with_w);
        check_long_causal(TFM_CAUSAL_TOP_LEFT, 150, 20, with_w);
        check_long_causal(TFM_CAUSAL_BOTTOM_RIGHT, 65, 200, with_w);
        check_long_causal(TFM_CAUSAL_BOTTOM_RIGHT, 129, 129, with_w);
        /* long key sequences (blocks sized by S as well as L) */
        check_long_causal(TFM_CAUSAL_TOP_LEFT, 300, 1000, with_w);
        check_long_causal(TFM_CAUSAL_BOTTOM_RIGHT, 300, 1000, with_w);
        check_long_causal(TFM_CAUSAL_TOP_LEFT, 100, 3000, with_w);
        /* many queries over few keys: whole blocks fully masked */
        check_long_causal(TFM_CAUSAL_BOTTOM_RIGHT, 3000, 50, with_w);
        check_long_causal(TFM_CAUSAL_TOP_LEFT, 3000, 50, with_w);
    }
}

/* ---- fully masked rows ------------------------------------------------------ */

/* tfm_sdpa (scale 0) into out and w (NULL: none) poisoned with NaN, where
 * masks hide every key: both must come out all +0 bit for bit. */
static void expect_all_masked(const tfm_tensor *q, const tfm_tensor *k,
                              const tfm_tensor *v,
                              const tfm_attention_masks *masks, tfm_tensor *out,
                              tfm_tensor *w, const char *label)
{
    char what[96];
    fill(out, NAN);
    if (w)
        fill(w, NAN);
    assert_int_equal(tfm_sdpa(q, k, v, masks, 0.0f, out, w), TFM_OK);
    snprintf(what, sizeof what, "out (%s)", label);
    expect_all_equal(out, 0.0f, what);
    if (w) {
        snprintf(what, sizeof what, "w (%s)", label);
        expect_all_equal(w, 0.0f, what);
    }
}

static void test_fully_masked_rows_are_zero(void **state)
{
    (void)state;
    const int B = 2, H = 2, L = 2, S = 3, D = 2;
    tfm_tensor *q = make4(B, H, L, D, NULL), *k = make4(B, H, S, D, NULL),
               *v = make4(B, H, S, D, NULL);
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    tfm_tensor *out = make4(B, H, L, D, NULL), *w = make4(B, H, L, S, NULL);

    /* (a) batch 1: every key padded (BLOCK, nonzero = padded) */
    tfm_tensor *pad = make(2, (const int64_t[]){ 2, 3 },
                           (const float[]){ 0, 0, 0, 1, 1, 1 });
    tfm_attention_masks m = { .key_padding_mask = pad,
                              .key_padding_kind = TFM_MASK_BLOCK };
    fill(out, NAN);
    fill(w, NAN);
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, w), TFM_OK);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < L; i++) {
            for (int c = 0; c < D; c++)
                assert_true(at4(out, 1, h, i, c) == 0.0f);
            for (int j = 0; j < S; j++)
                assert_true(at4(w, 1, h, i, j) == 0.0f);
        }
    /* batch 0 is normal: weights sum to 1 */
    for (int h = 0; h < H; h++)
        for (int i = 0; i < L; i++)
            NEAR(at4(w, 0, h, i, 0) + at4(w, 0, h, i, 1) + at4(w, 0, h, i, 2),
                 1.0, 1e-6);
    expect_no_nan(out, "out (padding)");

    /* (b) ALLOW mask of all zeros: nothing allowed anywhere */
    tfm_tensor *allow0 = make(2, (const int64_t[]){ L, S }, NULL);
    tfm_attention_masks m2 = { .attn_mask = allow0,
                               .attn_mask_kind = TFM_MASK_ALLOW };
    expect_all_masked(q, k, v, &m2, out, w, "ALLOW all zero");

    /* (c) additive mask of all -inf */
    tfm_tensor *ninf = make(2, (const int64_t[]){ L, S }, NULL);
    fill(ninf, -INFINITY);
    tfm_attention_masks m3 = { .attn_mask = ninf,
                               .attn_mask_kind = TFM_MASK_ADDITIVE };
    expect_all_masked(q, k, v, &m3, out, w, "additive -inf");
    /* without weights too */
    expect_all_masked(q, k, v, &m3, out, NULL, "additive -inf, no weights");

    /* (d) additive key padding of -inf + a huge finite attn mask value */
    tfm_tensor *pinf = make(2, (const int64_t[]){ B, S }, NULL);
    fill(pinf, -INFINITY);
    tfm_tensor *big = make(2, (const int64_t[]){ L, S }, NULL);
    fill(big, 1e30f);
    tfm_attention_masks m4 = { .key_padding_mask = pinf,
                               .key_padding_kind = TFM_MASK_ADDITIVE,
                               .attn_mask = big,
                               .attn_mask_kind = TFM_MASK_ADDITIVE };
    expect_all_masked(q, k, v, &m4, out, w, "-inf padding + 1e30");

    FREE_TENSORS(q, k, v, out, w, pad, allow0, ninf, pinf, big);
}

/* ---- large logits ---------------------------------------------------------- */

/* d_k = 1, scale 1, two keys: logits (x, x - 1) give
 * w = [e/(1+e), 1/(1+e)] = [0.7310585786300049, 0.2689414213699951]
 * whatever x is, once the row maximum is subtracted; v = [[1], [0]] so
 * out = w[0].  Without the subtraction, exp(150) overflows float32. */
static void check_two_logits(float qv, float k0, float k1, float scale)
{
    tfm_tensor *q = make4(1, 1, 1, 1, (const float[]){ qv });
    tfm_tensor *k = make4(1, 1, 2, 1, (const float[]){ k0, k1 });
    tfm_tensor *v = make4(1, 1, 2, 1, (const float[]){ 1, 0 });
    tfm_tensor *out = make4(1, 1, 1, 1, NULL), *w = make4(1, 1, 1, 2, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, NULL, scale, out, w), TFM_OK);
    EXPECT_VALUES(w, 1e-6, E1 / (1 + E1), 1 / (1 + E1));
    EXPECT_VALUES(out, 1e-6, E1 / (1 + E1));
    FREE_TENSORS(q, k, v, out, w);
}

static void test_large_logits_do_not_overflow(void **state)
{
    (void)state;
    check_two_logits(1.0f, 150.0f, 149.0f, 1.0f);     /* 150, 149 */
    check_two_logits(1.0f, 10000.0f, 9999.0f, 1.0f);  /* 1e4, 9999 */
    check_two_logits(2.0f, 5000.0f, 4999.5f, 1.0f);   /* 1e4, 9999 */
    check_two_logits(1.0f, 20000.0f, 19998.0f, 0.5f); /* 1e4, 9999 after scale */
    check_two_logits(-1.0f, -150.0f, -149.0f, 1.0f);  /* 150, 149 again */
    check_two_logits(-1.0f, 10000.0f, 10001.0f, 1.0f); /* -1e4, -10001 */
    check_two_logits(1.0f, 200.0f, 199.0f, 0.0f);     /* default scale 1 */
}

/* The softmax's exponential over the whole useful range: one query, 96
 * keys whose logits are 0, -1, ..., -95 (q = 1, k_j = -j, scale 1) plus
 * fractional offsets.  Weights are compared with the float64 softmax to
 * 2e-6 relative wherever the exact weight is a normal float32 (> 1.2e-38;
 * below that, a flush to zero is allowed), and the output v = j gives the
 * mean key index sum_j j w_j, also in float64. */
static void test_softmax_accuracy_wide_range(void **state)
{
    (void)state;
    enum { S = 96 };
    tfm_tensor *q = make4(1, 1, 1, 1, (const float[]){ 1 });
    tfm_tensor *k = make4(1, 1, S, 1, NULL), *v = make4(1, 1, S, 1, NULL);
    for (int frac = 0; frac < 4; frac++) {
        double logit[S], mx = -INFINITY;
        for (int j = 0; j < S; j++) {
            float kj = (float)-j + 0.3f * (float)frac * (float)(j % 3);
            *ptr4(k, 0, 0, j, 0) = kj;
            *ptr4(v, 0, 0, j, 0) = (float)j;
            logit[j] = kj;
            mx = logit[j] > mx ? logit[j] : mx;
        }
        double sum = 0, w64[S], mean = 0;
        for (int j = 0; j < S; j++)
            sum += (w64[j] = exp(logit[j] - mx));
        for (int j = 0; j < S; j++) {
            w64[j] /= sum;
            mean += j * w64[j];
        }
        tfm_tensor *out = make4(1, 1, 1, 1, NULL), *w = make4(1, 1, 1, S, NULL);
        assert_int_equal(tfm_sdpa(q, k, v, NULL, 1.0f, out, w), TFM_OK);
        for (int j = 0; j < S; j++) {
            double x = at4(w, 0, 0, 0, j);
            if (w64[j] > 1.2e-38 ? !(fabs(x - w64[j]) <= 2e-6 * w64[j])
                                 : !(x >= 0 && x <= 2 * w64[j] + 1e-45))
                fail_msg("frac %d, key %d: weight %.9g, expected %.12g", frac, j,
                         x, w64[j]);
        }
        NEAR(at4(out, 0, 0, 0, 0), mean, 2e-6);
        tfm_tensor_free(out);
        tfm_tensor_free(w);
    }
    FREE_TENSORS(q, k, v);
}

/* ---- NaN and infinity -------------------------------------------------------- */

/* Masks that hide, for every query of a (b, h): key 3 (causal top-left,
 * L = 3 < S = 4: the last query sees keys 0..2), key 1 of batch 1 (padding),
 * and key 2 of batch 0 head 1 (a [B, H, L, S] mask, whole column).  NaN and
 * infinities in those keys and values must not reach out or weights: the
 * result is bit-identical to the same call with zeros there. */
static void run_masked_poison(float poison_k, float poison_v,
                              tfm_mask_kind attn_kind, int with_w,
                              tfm_tensor **out_clean, tfm_tensor **out_poison,
                              tfm_tensor **w_clean, tfm_tensor **w_poison)
{
    const int B = 2, H = 2, L = 3, S = 4, D = 3, DV = 2;
    tfm_tensor *q = make4(B, H, L, D, NULL), *k = make4(B, H, S, D, NULL),
               *v = make4(B, H, S, DV, NULL);
    fill_random(q, 21);
    fill_random(k, 22);
    fill_random(v, 23);
    tfm_tensor *pad = make(2, (const int64_t[]){ B, S },
                           (const float[]){ 0, 0, 0, 0, 0, 1, 0, 0 });
    tfm_tensor *am = make4(B, H, L, S, NULL);
    for (int i = 0; i < L; i++)
        *ptr4(am, 0, 1, i, 2) =
            attn_kind == TFM_MASK_ADDITIVE ? -INFINITY : 1.0f;
    if (attn_kind == TFM_MASK_ALLOW) { /* complement: 1 = allowed */
        float *d = tfm_tensor_data(am);
        for (int64_t i = 0; i < tfm_tensor_numel(am); i++)
            d[i] = d[i] != 0.0f ? 0.0f : 1.0f;
    }
    tfm_attention_masks m = { .causal = TFM_CAUSAL_TOP_LEFT,
                              .key_padding_mask = pad,
                              .key_padding_kind = TFM_MASK_BLOCK,
                              .attn_mask = am,
                              .attn_mask_kind = attn_kind };
    /* zero the hidden positions for the clean run */
    for (int pass = 0; pass < 2; pass++) {
        float pk = pass ? poison_k : 0.0f, pv = pass ? poison_v : 0.0f;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                for (int c = 0; c < D; c++) {
                    *ptr4(k, b, h, 3, c) = pk;
                    if (b == 1)
                        *ptr4(k, b, h, 1, c) = pk;
                    if (b == 0 && h == 1)
                        *ptr4(k, b, h, 2, c) = pk;
                }
                for (int c = 0; c < DV; c++) {
                    *ptr4(v, b, h, 3, c) = pv;
                    if (b == 1)
                        *ptr4(v, b, h, 1, c) = pv;
                    if (b == 0 && h == 1)
                        *ptr4(v, b, h, 2, c) = pv;
                }
            }
        tfm_tensor *out = make4(B, H, L, DV, NULL);
        tfm_tensor *w = with_w ? make4(B, H, L, S, NULL) : NULL;
        assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, w), TFM_OK);
        *(pass ? out_poison : out_clean) = out;
        *(pass ? w_poison : w_clean) = w;
    }
    FREE_TENSORS(q, k, v, pad, am);
}

static void test_masked_nan_inf_never_reach_output(void **state)
{
    (void)state;
    const float poisons[][2] = {
        { NAN, NAN }, { INFINITY, -INFINITY }, { -INFINITY, INFINITY },
        { NAN, INFINITY }, { 1e30f, NAN }, { 0.0f, NAN }, { NAN, 0.0f },
    };
    const tfm_mask_kind kinds[3] = { TFM_MASK_BLOCK, TFM_MASK_ALLOW,
                                     TFM_MASK_ADDITIVE };
    for (size_t p = 0; p < sizeof poisons / sizeof *poisons; p++)
        for (int kk = 0; kk < 3; kk++)
            for (int with_w = 0; with_w < 2; with_w++) {
                tfm_tensor *oc = NULL, *op = NULL, *wc = NULL, *wp = NULL;
                run_masked_poison(poisons[p][0], poisons[p][1], kinds[kk],
                                  with_w, &oc, &op, &wc, &wp);
                expect_no_nan(oc, "clean out");
                expect_bit_identical(oc, op, "out (poisoned masked keys)");
                if (with_w)
                    expect_bit_identical(wc, wp, "weights (poisoned)");
                FREE_TENSORS(oc, op, wc, wp);
            }
}

/* A query whose keys are all masked gives zeros even when the query itself
 * (and every key) is NaN.  Bottom-right, L = 3 > S = 2: row 0 sees none. */
static void test_nan_query_in_fully_masked_row(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 1, 3, 2, (const float[]){ NAN, INFINITY, 1, 2, 3, 4 });
    tfm_tensor *k = make4(1, 1, 2, 2, (const float[]){ 1, 0, 0, 1 });
    tfm_tensor *v = make4(1, 1, 2, 1, (const float[]){ 5, 7 });
    tfm_tensor *out = make4(1, 1, 3, 1, NULL), *w = make4(1, 1, 3, 2, NULL);
    fill(out, NAN);
    tfm_attention_masks m = { .causal = TFM_CAUSAL_BOTTOM_RIGHT };
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, out, w), TFM_OK);
    /* row 0: nothing -> 0; row 1 (position 1 - 1 = 0): key 0 -> 5;
     * row 2: logits [3, 4] -> w = [1, e]/(1+e), out = (5 + 7e)/(1+e) */
    EXPECT_VALUES(out, 1e-6, 0.0, 5.0, (5 + 7 * E1) / (1 + E1));
    EXPECT_VALUES(w, 1e-6, 0.0, 0.0, 1.0, 0.0, 1 / (1 + E1), E1 / (1 + E1));
    FREE_TENSORS(q, k, v, out, w);
}

/* NaN in a visible value reaches exactly the rows that see it.  Causal
 * top-left, L = S = 3; v[1][0] = NaN: rows 1 and 2 see key 1, row 0 does
 * not.  Column 1 of the output does not involve v[1][0] at all. */
static void test_visible_nan_value_propagates_causally(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 1, 3, 2, NULL), *k = make4(1, 1, 3, 2, NULL);
    fill_random(q, 31);
    fill_random(k, 32);
    tfm_tensor *v = make4(1, 1, 3, 2, (const float[]){ 1, 2, 0, 4, 5, 6 });
    tfm_tensor *clean = make4(1, 1, 3, 2, NULL), *out = make4(1, 1, 3, 2, NULL);
    tfm_attention_masks m = { .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, clean, NULL), TFM_OK);
    *ptr4(v, 0, 0, 1, 0) = NAN;
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, NULL), TFM_OK);
    const float *c = tfm_tensor_data_const(clean), *o = tfm_tensor_data_const(out);
    /* row 0 untouched, bit for bit */
    assert_memory_equal(&o[0], &c[0], 2 * sizeof(float));
    assert_true(isnan(o[2]));  /* row 1, column 0 */
    assert_true(isnan(o[4]));  /* row 2, column 0 */
    assert_true(isfinite(o[3]) && isfinite(o[5]));
    NEAR(o[3], c[3], 1e-6);
    NEAR(o[5], c[5], 1e-6);
    /* +inf instead: rows 1 and 2 get +inf in column 0 (weights > 0) */
    *ptr4(v, 0, 0, 1, 0) = INFINITY;
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, NULL), TFM_OK);
    assert_memory_equal(&o[0], &c[0], 2 * sizeof(float));
    assert_true(isinf(o[2]) && o[2] > 0);
    assert_true(isinf(o[4]) && o[4] > 0);
    FREE_TENSORS(q, k, v, clean, out);
}

/* NaN in a visible key: the logits of the rows that see it are NaN, so
 * their weights and outputs are NaN (as in PyTorch); row 0 does not see
 * key 1 under the causal mask and is unchanged. */
static void test_visible_nan_key_propagates_causally(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 1, 3, 2, NULL), *k = make4(1, 1, 3, 2, NULL),
               *v = make4(1, 1, 3, 2, NULL);
    fill_random(q, 41);
    fill_random(k, 42);
    fill_random(v, 43);
    tfm_tensor *clean = make4(1, 1, 3, 2, NULL), *out = make4(1, 1, 3, 2, NULL);
    tfm_tensor *w = make4(1, 1, 3, 3, NULL);
    tfm_attention_masks m = { .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, clean, NULL), TFM_OK);
    *ptr4(k, 0, 0, 1, 1) = NAN;
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, w), TFM_OK);
    const float *c = tfm_tensor_data_const(clean), *o = tfm_tensor_data_const(out);
    assert_memory_equal(&o[0], &c[0], 2 * sizeof(float));
    for (int i = 2; i < 6; i++)
        assert_true(isnan(o[i]));
    assert_true(at4(w, 0, 0, 0, 0) == 1.0f);
    assert_true(isnan(at4(w, 0, 0, 1, 1)));
    assert_true(isnan(at4(w, 0, 0, 2, 1)));
    FREE_TENSORS(q, k, v, clean, out, w);
}

/* attention.h: "NaN in a visible query, key or value propagates to the
 * outputs it touches."  Key 1 is visible (no mask) but its logit is 200
 * below key 0's, so its float32 weight exp(-200) underflows to 0.  The
 * value is still visible: out = 1 * v0 + 0 * NaN = NaN, as PyTorch gives
 * (torch.softmax([0., -200.]) @ [1., nan] -> nan). */
static void test_visible_nan_value_with_underflowed_weight(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 1, 1, 1, (const float[]){ 1 });
    tfm_tensor *k = make4(1, 1, 2, 1, (const float[]){ 0, -200 });
    tfm_tensor *v = make4(1, 1, 2, 1, (const float[]){ 1, NAN });
    tfm_tensor *out = make4(1, 1, 1, 1, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, NULL, 1.0f, out, NULL), TFM_OK);
    float o = tfm_tensor_data_const(out)[0];
    if (!isnan(o))
        fail_msg("out = %g, expected NaN (visible NaN value, weight 0)",
                 (double)o);
    FREE_TENSORS(q, k, v, out);
}

/* ---- mask kinds ----------------------------------------------------------- */

/* BLOCK with mask M and ALLOW with its complement are the same call.
 * "0.0 is false, any other value true": -0.0 is false, NaN and -3 true. */
static void test_block_allow_polarity(void **state)
{
    (void)state;
    const int B = 2, H = 2, L = 3, S = 4;
    tfm_tensor *q = make4(B, H, L, 2, NULL), *k = make4(B, H, S, 2, NULL),
               *v = make4(B, H, S, 3, NULL);
    fill_random(q, 51);
    fill_random(k, 52);
    fill_random(v, 53);
    /* attn [L, S] pattern; every row keeps at least one key */
    const float block_attn[12] = { 0, 1, 0, -3, -0.0f, 0, NAN, 1, 2, 0, 0, 0 };
    const float allow_attn[12] = { 1, 0, NAN, 0, 7, -1, 0, 0, 0, 1, 1, 0.5f };
    const float block_pad[8] = { 0, 0, 0, 1, 1, 0, 0, 0 };
    const float allow_pad[8] = { 1, 1, 1, -0.0f, 0, 5, NAN, 1 };
    tfm_tensor *ba = make(2, (const int64_t[]){ L, S }, block_attn);
    tfm_tensor *aa = make(2, (const int64_t[]){ L, S }, allow_attn);
    tfm_tensor *bp = make(2, (const int64_t[]){ B, S }, block_pad);
    tfm_tensor *ap = make(2, (const int64_t[]){ B, S }, allow_pad);
    tfm_attention_masks mb = { .key_padding_mask = bp,
                               .key_padding_kind = TFM_MASK_BLOCK,
                               .attn_mask = ba,
                               .attn_mask_kind = TFM_MASK_BLOCK };
    tfm_attention_masks ma = { .key_padding_mask = ap,
                               .key_padding_kind = TFM_MASK_ALLOW,
                               .attn_mask = aa,
                               .attn_mask_kind = TFM_MASK_ALLOW };
    tfm_attention_masks mx = mb; /* mixed: BLOCK padding, ALLOW attn */
    mx.attn_mask = aa;
    mx.attn_mask_kind = TFM_MASK_ALLOW;
    tfm_tensor *o1 = make4(B, H, L, 3, NULL), *o2 = make4(B, H, L, 3, NULL),
               *o3 = make4(B, H, L, 3, NULL);
    tfm_tensor *w1 = make4(B, H, L, S, NULL), *w2 = make4(B, H, L, S, NULL),
               *w3 = make4(B, H, L, S, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, &mb, 0.0f, o1, w1), TFM_OK);
    assert_int_equal(tfm_sdpa(q, k, v, &ma, 0.0f, o2, w2), TFM_OK);
    assert_int_equal(tfm_sdpa(q, k, v, &mx, 0.0f, o3, w3), TFM_OK);
    expect_bit_identical(o1, o2, "out BLOCK vs ALLOW");
    expect_bit_identical(w1, w2, "weights BLOCK vs ALLOW");
    expect_bit_identical(o1, o3, "out BLOCK vs mixed");
    expect_bit_identical(w1, w3, "weights BLOCK vs mixed");
    /* the pattern really masks: batch 0 row 0 sees keys {0, 2} minus the
     * padded key 3 -> weights at 1 and 3 are exactly 0, 0 and 2 positive */
    for (int h = 0; h < H; h++) {
        assert_true(at4(w1, 0, h, 0, 1) == 0.0f);
        assert_true(at4(w1, 0, h, 0, 3) == 0.0f);
        assert_true(at4(w1, 0, h, 0, 0) > 0.0f && at4(w1, 0, h, 0, 2) > 0.0f);
        /* batch 1 pads key 0; row 1 then sees keys 1 only (0 padded, 2 and
         * 3 blocked) -> weight 1 exactly, out = v[1] */
        assert_true(at4(w1, 1, h, 1, 1) == 1.0f);
        for (int c = 0; c < 3; c++)
            assert_true(at4(o1, 1, h, 1, c) == at4(v, 1, h, 1, c));
        /* row 1 key 2 is blocked by NaN (nonzero = true) */
        assert_true(at4(w1, 0, h, 1, 2) == 0.0f);
        /* row 1 key 0 was -0.0 in the BLOCK mask = false = visible in
         * batch 0 */
        assert_true(at4(w1, 0, h, 1, 0) > 0.0f);
    }
    FREE_TENSORS(q, k, v, ba, aa, bp, ap, o1, o2, o3, w1, w2, w3);
}

static void test_additive_mask_hand_values(void **state)
{
    (void)state;
    /* q = [1], k = [[1], [2], [3]], scale 1 -> logits [1, 2, 3];
     * additive mask [2, 0, -1] -> [3, 2, 2] -> w = [e, 1, 1] / (e + 2);
     * v = [[1], [2], [4]] -> out = (e + 2 + 4) / (e + 2). */
    tfm_tensor *q = make4(1, 1, 1, 1, (const float[]){ 1 });
    tfm_tensor *k = make4(1, 1, 3, 1, (const float[]){ 1, 2, 3 });
    tfm_tensor *v = make4(1, 1, 3, 1, (const float[]){ 1, 2, 4 });
    tfm_tensor *am = make(2, (const int64_t[]){ 1, 3 }, (const float[]){ 2, 0, -1 });
    tfm_attention_masks m = { .attn_mask = am,
                              .attn_mask_kind = TFM_MASK_ADDITIVE };
    tfm_tensor *out = make4(1, 1, 1, 1, NULL), *w = make4(1, 1, 1, 3, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, out, w), TFM_OK);
    EXPECT_VALUES(w, 1e-6, E1 / (E1 + 2), 1 / (E1 + 2), 1 / (E1 + 2));
    EXPECT_VALUES(out, 1e-6, (E1 + 6) / (E1 + 2));

    /* the additive mask is added AFTER scaling: scale 2 -> logits [2,4,6]
     * + [2, 0, -1] = [4, 4, 5] -> w = [1, 1, e]/(2 + e),
     * out = (1 + 2 + 4e)/(2 + e) */
    assert_int_equal(tfm_sdpa(q, k, v, &m, 2.0f, out, w), TFM_OK);
    EXPECT_VALUES(w, 1e-6, 1 / (E1 + 2), 1 / (E1 + 2), E1 / (E1 + 2));
    EXPECT_VALUES(out, 1e-6, (3 + 4 * E1) / (E1 + 2));

    /* additive key padding and additive attn mask add up:
     * q = 0 -> logits 0; padding [1, 0, 0] + attn [1, 0, -inf] = [2, 0, -inf]
     * -> w = [e^2, 1, 0] / (e^2 + 1); v[2] = NaN is masked:
     * out = (e^2 + 2) / (e^2 + 1) */
    tfm_tensor *q0 = make4(1, 1, 1, 1, (const float[]){ 0 });
    tfm_tensor *vn = make4(1, 1, 3, 1, (const float[]){ 1, 2, NAN });
    tfm_tensor *pad = make(2, (const int64_t[]){ 1, 3 }, (const float[]){ 1, 0, 0 });
    tfm_tensor *am2 = make(2, (const int64_t[]){ 1, 3 },
                           (const float[]){ 1, 0, -INFINITY });
    tfm_attention_masks m2 = { .key_padding_mask = pad,
                               .key_padding_kind = TFM_MASK_ADDITIVE,
                               .attn_mask = am2,
                               .attn_mask_kind = TFM_MASK_ADDITIVE };
    assert_int_equal(tfm_sdpa(q0, k, vn, &m2, 1.0f, out, w), TFM_OK);
    const double e2 = E1 * E1;
    EXPECT_VALUES(w, 1e-6, e2 / (e2 + 1), 1 / (e2 + 1), 0.0);
    EXPECT_VALUES(out, 1e-6, (e2 + 2) / (e2 + 1));
    assert_true(tfm_tensor_data_const(w)[2] == 0.0f);
    FREE_TENSORS(q, k, v, am, out, w, q0, vn, pad, am2);
}

/* Causal + key padding + attn mask together.  q = 0 (uniform over visible
 * keys), v = [1, 2, 4, 8], L = S = 4, top-left causal, key 1 padded,
 * attn mask blocks (row 3, key 0):
 *   row 0: {0}        -> 1
 *   row 1: {0}        -> 1      (key 1 padded)
 *   row 2: {0, 2}     -> 2.5
 *   row 3: {2, 3}     -> 6      (key 0 blocked, key 1 padded)
 * Then the additive form of the attn mask with log(3) at (2, 2):
 *   row 2: w = [1, 3]/4 on {0, 2} -> (1 + 12)/4 = 3.25. */
static void test_masks_combine(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 1, 4, 1, NULL);
    tfm_tensor *k = make4(1, 1, 4, 1, (const float[]){ 3, -1, 2, 5 });
    tfm_tensor *v = make4(1, 1, 4, 1, (const float[]){ 1, 2, 4, 8 });
    tfm_tensor *pad = make(2, (const int64_t[]){ 1, 4 }, (const float[]){ 0, 1, 0, 0 });
    float blk[16] = { 0 };
    blk[3 * 4 + 0] = 1;
    tfm_tensor *am = make(2, (const int64_t[]){ 4, 4 }, blk);
    tfm_attention_masks m = { .causal = TFM_CAUSAL_TOP_LEFT,
                              .key_padding_mask = pad,
                              .key_padding_kind = TFM_MASK_BLOCK,
                              .attn_mask = am,
                              .attn_mask_kind = TFM_MASK_BLOCK };
    tfm_tensor *out = make4(1, 1, 4, 1, NULL), *w = make4(1, 1, 4, 4, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, out, w), TFM_OK);
    EXPECT_VALUES(out, 1e-6, 1.0, 1.0, 2.5, 6.0);
    EXPECT_VALUES(w, 1e-6, 1, 0, 0, 0, 1, 0, 0, 0, 0.5, 0, 0.5, 0, 0, 0, 0.5, 0.5);

    float add[16] = { 0 };
    add[3 * 4 + 0] = -INFINITY;
    add[2 * 4 + 2] = (float)log(3.0);
    /* additive values on causally masked entries must not unmask them */
    add[0 * 4 + 3] = 100.0f;
    add[1 * 4 + 2] = 1e30f;
    tfm_tensor *am2 = make(2, (const int64_t[]){ 4, 4 }, add);
    m.attn_mask = am2;
    m.attn_mask_kind = TFM_MASK_ADDITIVE;
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, out, w), TFM_OK);
    EXPECT_VALUES(out, 1e-6, 1.0, 1.0, 3.25, 6.0);
    EXPECT_VALUES(w, 1e-6, 1, 0, 0, 0, 1, 0, 0, 0, 0.25, 0, 0.75, 0, 0, 0, 0.5, 0.5);
    FREE_TENSORS(q, k, v, pad, am, am2, out, w);
}

/* [L, S], [B, L, S] and [B, H, L, S] masks.  q = 0, d_k = 1, and
 * v[b][h][j] = 100 b + 10 h + (j + 1), so a query seeing keys J outputs
 * 100 b + 10 h + mean(J) + 1. */
static void test_mask_broadcasting(void **state)
{
    (void)state;
    enum { B = 2, H = 2, L = 2, S = 3 };
    tfm_tensor *q = make4(B, H, L, 1, NULL), *k = make4(B, H, S, 1, NULL),
               *v = make4(B, H, S, 1, NULL);
    fill_random(k, 61);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < S; j++)
                *ptr4(v, b, h, j, 0) = (float)(100 * b + 10 * h + j + 1);
    /* [L, S] BLOCK: row 0 sees {0, 2}, row 1 sees {1, 2} */
    const float m2[L * S] = { 0, 1, 0, 1, 0, 0 };
    tfm_tensor *a2 = make(2, (const int64_t[]){ L, S }, m2);
    float m3[B * L * S], m4[B * H * L * S];
    for (int b = 0; b < B; b++)
        memcpy(m3 + b * L * S, m2, sizeof m2);
    for (int bh = 0; bh < B * H; bh++)
        memcpy(m4 + bh * L * S, m2, sizeof m2);
    tfm_tensor *a3 = make(3, (const int64_t[]){ B, L, S }, m3);
    tfm_tensor *a4 = make4(B, H, L, S, m4);
    tfm_tensor *o2 = make4(B, H, L, 1, NULL), *o3 = make4(B, H, L, 1, NULL),
               *o4 = make4(B, H, L, 1, NULL);
    tfm_attention_masks m = { .attn_mask = a2, .attn_mask_kind = TFM_MASK_BLOCK };
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, o2, NULL), TFM_OK);
    m.attn_mask = a3;
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, o3, NULL), TFM_OK);
    m.attn_mask = a4;
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, o4, NULL), TFM_OK);
    expect_bit_identical(o2, o3, "[L,S] vs [B,L,S]");
    expect_bit_identical(o2, o4, "[L,S] vs [B,H,L,S]");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            double base = 100 * b + 10 * h;
            NEAR(at4(o2, b, h, 0, 0), base + 2.0, 1e-6); /* (1 + 3)/2 */
            NEAR(at4(o2, b, h, 1, 0), base + 2.5, 1e-6); /* (2 + 3)/2 */
        }

    /* [B, L, S] differing per batch: batch 1 rows see {0, 1} and {0} */
    const float b1[L * S] = { 0, 0, 1, 0, 1, 1 };
    memcpy(tfm_tensor_data(a3) + L * S, b1, sizeof b1);
    m.attn_mask = a3;
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, o3, NULL), TFM_OK);
    for (int h = 0; h < H; h++) {
        NEAR(at4(o3, 0, h, 0, 0), 10 * h + 2.0, 1e-6);
        NEAR(at4(o3, 0, h, 1, 0), 10 * h + 2.5, 1e-6);
        NEAR(at4(o3, 1, h, 0, 0), 100 + 10 * h + 1.5, 1e-6); /* (1+2)/2 */
        NEAR(at4(o3, 1, h, 1, 0), 100 + 10 * h + 1.0, 1e-6);
    }

    /* [B, H, L, S] differing per head: (b, h) row i sees only key
     * (b + h + i) % 3 */
    float *d4 = tfm_tensor_data(a4);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < L; i++)
                for (int j = 0; j < S; j++)
                    d4[((b * H + h) * L + i) * S + j] =
                        j == (b + h + i) % 3 ? 0.0f : 1.0f;
    m.attn_mask = a4;
    assert_int_equal(tfm_sdpa(q, k, v, &m, 1.0f, o4, NULL), TFM_OK);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < L; i++)
                assert_true(at4(o4, b, h, i, 0) ==
                            (float)(100 * b + 10 * h + (b + h + i) % 3 + 1));
    FREE_TENSORS(q, k, v, a2, a3, a4, o2, o3, o4);
}

static void test_weight_rows_sum_to_one(void **state)
{
    (void)state;
    enum { B = 2, H = 3, L = 5, S = 7, D = 4 };
    tfm_tensor *q = make4(B, H, L, D, NULL), *k = make4(B, H, S, D, NULL),
               *v = make4(B, H, S, 3, NULL);
    fill_random(q, 71);
    fill_random(k, 72);
    fill_random(v, 73);
    float *qd = tfm_tensor_data(q);
    for (int64_t i = 0; i < tfm_tensor_numel(q); i++)
        qd[i] *= 4.0f; /* sharper softmax */
    float pad_d[B * S] = { 0 };
    pad_d[0 * S + 6] = 1;
    pad_d[1 * S + 0] = 1;
    pad_d[1 * S + 3] = 1;
    tfm_tensor *pad = make(2, (const int64_t[]){ B, S }, pad_d);
    tfm_attention_masks cases[3] = {
        { 0 },
        { .key_padding_mask = pad, .key_padding_kind = TFM_MASK_BLOCK },
        { .causal = TFM_CAUSAL_BOTTOM_RIGHT, .key_padding_mask = pad,
          .key_padding_kind = TFM_MASK_BLOCK },
    };
    tfm_tensor *out = make4(B, H, L, 3, NULL), *w = make4(B, H, L, S, NULL);
    for (int c = 0; c < 3; c++) {
        assert_int_equal(tfm_sdpa(q, k, v, &cases[c], 0.0f, out, w), TFM_OK);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < L; i++) {
                    double sum = 0;
                    for (int j = 0; j < S; j++) {
                        float x = at4(w, b, h, i, j);
                        assert_true(x >= 0.0f && x <= 1.0f);
                        if (c > 0 && pad_d[b * S + j] != 0)
                            assert_true(x == 0.0f);
                        sum += x;
                    }
                    NEAR(sum, 1.0, 1e-6);
                    /* out = w v, checked in double */
                    for (int cc = 0; cc < 3; cc++) {
                        double e = 0;
                        for (int j = 0; j < S; j++)
                            e += (double)at4(w, b, h, i, j) * at4(v, b, h, j, cc);
                        NEAR(at4(out, b, h, i, cc), e, 1e-6);
                    }
                }
    }
    FREE_TENSORS(q, k, v, pad, out, w);
}

/* ---- errors: status, and out / weights left exactly as they were ----------- */

enum { EB = 2, EH = 3, EL = 4, ES = 5, ED = 6, EDV = 7 };

/* Valid tensors for the error tests: q, k, v zero, or random (seeds 1, 2,
 * 3) when `random`. */
static void make_error_io(tfm_tensor **q, tfm_tensor **k, tfm_tensor **v,
                          tfm_tensor **out, tfm_tensor **w, int random)
{
    *q = make4(EB, EH, EL, ED, NULL);
    *k = make4(EB, EH, ES, ED, NULL);
    *v = make4(EB, EH, ES, EDV, NULL);
    *out = make4(EB, EH, EL, EDV, NULL);
    *w = make4(EB, EH, EL, ES, NULL);
    if (random) {
        fill_random(*q, 1);
        fill_random(*k, 2);
        fill_random(*v, 3);
    }
}

static void expect_sdpa_error(const tfm_tensor *q, const tfm_tensor *k,
                              const tfm_tensor *v,
                              const tfm_attention_masks *masks, float scale,
                              tfm_tensor *out, tfm_tensor *w, tfm_status want,
                              const char *needle, int line)
{
    arm_failing_call(out, w);
    tfm_status st = tfm_sdpa(q, k, v, masks, scale, out, w);
    expect_failed_call(st, want, out, w, needle, line);
}
#define SDPA_ERR(q, k, v, m, s, o, w, st, needle) \
    expect_sdpa_error((q), (k), (v), (m), (s), (o), (w), (st), (needle), __LINE__)

static void test_errors_null_and_rank(void **state)
{
    (void)state;
    tfm_tensor *q, *k, *v, *out, *w;
    make_error_io(&q, &k, &v, &out, &w, 1);
    /* sanity: the valid call succeeds */
    assert_int_equal(tfm_sdpa(q, k, v, NULL, 0.0f, out, w), TFM_OK);
    SDPA_ERR(NULL, k, v, NULL, 0.0f, out, w, TFM_ERR_NULL_ARGUMENT, "q");
    SDPA_ERR(q, NULL, v, NULL, 0.0f, out, w, TFM_ERR_NULL_ARGUMENT, "k");
    SDPA_ERR(q, k, NULL, NULL, 0.0f, out, w, TFM_ERR_NULL_ARGUMENT, "v");
    SDPA_ERR(q, k, v, NULL, 0.0f, NULL, w, TFM_ERR_NULL_ARGUMENT, "out");
    /* rank 3 inputs (the same numbers without the head axis) */
    tfm_tensor *q3 = make(3, (const int64_t[]){ EB * EH, EL, ED }, NULL);
    tfm_tensor *k3 = make(3, (const int64_t[]){ EB * EH, ES, ED }, NULL);
    tfm_tensor *v3 = make(3, (const int64_t[]){ EB * EH, ES, EDV }, NULL);
    tfm_tensor *o3 = make(3, (const int64_t[]){ EB * EH, EL, EDV }, NULL);
    tfm_tensor *w3 = make(3, (const int64_t[]){ EB * EH, EL, ES }, NULL);
    SDPA_ERR(q3, k, v, NULL, 0.0f, out, w, TFM_ERR_SHAPE, "q");
    SDPA_ERR(q, k3, v, NULL, 0.0f, out, w, TFM_ERR_SHAPE, "k");
    SDPA_ERR(q, k, v3, NULL, 0.0f, out, w, TFM_ERR_SHAPE, "v");
    SDPA_ERR(q, k, v, NULL, 0.0f, o3, w, TFM_ERR_SHAPE, "out");
    SDPA_ERR(q, k, v, NULL, 0.0f, out, w3, TFM_ERR_SHAPE, "weights");
    FREE_TENSORS(q, k, v, out, w, q3, k3, v3, o3, w3);
}

static void test_errors_sizes_disagree(void **state)
{
    (void)state;
    tfm_tensor *q, *k, *v, *out, *w;
    make_error_io(&q, &k, &v, &out, &w, 0);
    struct { int64_t s[4]; int which; const char *needle; } bad[] = {
        /* which: 1 = k, 2 = v, 3 = out, 4 = weights */
        { { EB, EH, ES, ED + 1 }, 1, "k" },      /* d_k mismatch */
        { { EB + 1, EH, ES, ED }, 1, "k" },      /* batch mismatch */
        { { EB, EH - 1, ES, ED }, 1, "k" },      /* head mismatch */
        { { 1, EH, ES, ED }, 1, "k" },           /* batch 1 is not broadcast */
        { { EB, EH, ES + 1, EDV }, 2, "v" },     /* v has another S */
        { { EB, EH + 1, ES, EDV }, 2, "v" },
        { { EB - 1, EH, ES, EDV }, 2, "v" },
        { { EB, EH, EL + 1, EDV }, 3, "out" },   /* out rows */
        { { EB, EH, EL, EDV - 1 }, 3, "out" },   /* out width != d_v */
        { { EB, EH, EL, ED }, 3, "out" },        /* out width d_k, not d_v */
        { { EB, 1, EL, EDV }, 3, "out" },
        { { EB, EH, EL, ES + 1 }, 4, "weights" },
        { { EB, EH, ES, EL }, 4, "weights" },    /* transposed */
        { { EB, 1, EL, ES }, 4, "weights" },     /* not an average */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tfm_tensor *t = make4(bad[i].s[0], bad[i].s[1], bad[i].s[2], bad[i].s[3],
                              NULL);
        fill_random(t, 9);
        switch (bad[i].which) {
        case 1: SDPA_ERR(q, t, v, NULL, 0.0f, out, w, TFM_ERR_SHAPE, bad[i].needle); break;
        case 2: SDPA_ERR(q, k, t, NULL, 0.0f, out, w, TFM_ERR_SHAPE, bad[i].needle); break;
        case 3: SDPA_ERR(q, k, v, NULL, 0.0f, t, w, TFM_ERR_SHAPE, bad[i].needle);
                expect_all_equal(t, 42.0f, "bad out"); break;
        default: SDPA_ERR(q, k, v, NULL, 0.0f, out, t, TFM_ERR_SHAPE, bad[i].needle);
                 expect_all_equal(t, 42.0f, "bad weights"); break;
        }
        tfm_tensor_free(t);
    }
    FREE_TENSORS(q, k, v, out, w);
}

static void test_errors_masks_and_enums(void **state)
{
    (void)state;
    tfm_tensor *q, *k, *v, *out, *w;
    make_error_io(&q, &k, &v, &out, &w, 1);
    /* key padding: must be [B, S] */
    const int64_t bad_pad[][3] = {
        { 1, EB, ES + 1 }, { 1, EB + 1, ES }, { 1, ES, EB }, { 1, 1, ES },
    };
    for (size_t i = 0; i < sizeof bad_pad / sizeof *bad_pad; i++) {
        tfm_tensor *p = make(2, &bad_pad[i][1], NULL);
        tfm_attention_masks m = { .key_padding_mask = p };
        SDPA_ERR(q, k, v, &m, 0.0f, out, w, TFM_ERR_SHAPE, "key_padding_mask");
        tfm_tensor_free(p);
    }
    {
        tfm_tensor *p1 = make(1, (const int64_t[]){ ES }, NULL);
        tfm_tensor *p3 = make(3, (const int64_t[]){ EB, 1, ES }, NULL);
        tfm_attention_masks m = { .key_padding_mask = p1 };
        SDPA_ERR(q, k, v, &m, 0.0f, out, w, TFM_ERR_SHAPE, "key_padding_mask");
        m.key_padding_mask = p3;
        SDPA_ERR(q, k, v, &m, 0.0f, out, w, TFM_ERR_SHAPE, "key_padding_mask");
        tfm_tensor_free(p1);
        tfm_tensor_free(p3);
    }
    /* attn mask: [L, S], [B, L, S] or [B, H, L, S] */
    struct { int rank; int64_t s[4]; } bad_attn[] = {
        { 2, { EL, ES + 1 } }, { 2, { EL + 1, ES } }, { 2, { ES, EL } },
        { 3, { EB + 1, EL, ES } }, { 3, { 1, EL, ES } }, { 3, { EH, EL, ES } },
        { 3, { EB, EL, ES + 1 } },
        { 4, { EB, EH + 1, EL, ES } }, { 4, { EB, 1, EL, ES } },
        { 4, { 1, EH, EL, ES } }, { 4, { EB, EH, EL, 1 } },
        { 1, { ES } }, { 1, { EL * ES } },
    };
    for (size_t i = 0; i < sizeof bad_attn / sizeof *bad_attn; i++) {
        tfm_tensor *a = make(bad_attn[i].rank, bad_attn[i].s, NULL);
        tfm_attention_masks m = { .attn_mask = a,
                                  .attn_mask_kind = TFM_MASK_ADDITIVE };
        SDPA_ERR(q, k, v, &m, 0.0f, out, w, TFM_ERR_SHAPE, "attn_mask");
        tfm_tensor_free(a);
    }
    /* unknown enum values */
    tfm_tensor *pad = make(2, (const int64_t[]){ EB, ES }, NULL);
    tfm_tensor *am = make(2, (const int64_t[]){ EL, ES }, NULL);
    tfm_attention_masks m = { .causal = (tfm_causal)7 };
    SDPA_ERR(q, k, v, &m, 0.0f, out, w, TFM_ERR_INVALID_ARGUMENT, "7");
    m.causal = (tfm_causal)3;
    SDPA_ERR(q, k, v, &m, 0.0f, out, w, TFM_ERR_INVALID_ARGUMENT, "causal");
    m.causal = (tfm_causal)-1;
    SDPA_ERR(q, k, v, &m, 0.0f, out, w, TFM_ERR_INVALID_ARGUMENT, "causal");
    tfm_attention_masks m2 = { .key_padding_mask = pad,
                               .key_padding_kind = (tfm_mask_kind)3 };
    SDPA_ERR(q, k, v, &m2, 0.0f, out, w, TFM_ERR_INVALID_ARGUMENT,
             "key_padding_kind");
    m2.key_padding_kind = (tfm_mask_kind)-2;
    SDPA_ERR(q, k, v, &m2, 0.0f, out, w, TFM_ERR_INVALID_ARGUMENT,
             "key_padding_kind");
    tfm_attention_masks m3 = { .attn_mask = am,
                               .attn_mask_kind = (tfm_mask_kind)99 };
    SDPA_ERR(q, k, v, &m3, 0.0f, out, w, TFM_ERR_INVALID_ARGUMENT,
             "attn_mask_kind");
    /* an error in the last mask still leaves out alone even when the other
     * masks are fine */
    tfm_attention_masks m4 = { .causal = TFM_CAUSAL_TOP_LEFT,
                               .key_padding_mask = pad,
                               .attn_mask = am,
                               .attn_mask_kind = (tfm_mask_kind)5 };
    SDPA_ERR(q, k, v, &m4, 0.0f, out, w, TFM_ERR_INVALID_ARGUMENT, NULL);
    /* non-finite scale */
    SDPA_ERR(q, k, v, NULL, NAN, out, w, TFM_ERR_INVALID_ARGUMENT, "scale");
    SDPA_ERR(q, k, v, NULL, INFINITY, out, w, TFM_ERR_INVALID_ARGUMENT, "scale");
    SDPA_ERR(q, k, v, NULL, -INFINITY, out, w, TFM_ERR_INVALID_ARGUMENT, "scale");
    /* NULL weights with an error: out still unchanged */
    SDPA_ERR(q, k, v, NULL, NAN, out, NULL, TFM_ERR_INVALID_ARGUMENT, "scale");
    FREE_TENSORS(q, k, v, out, w, pad, am);
}

/* ---- the tiled path against the whole-row path ------------------------------
 * Without weights the library tiles the keys (online softmax); with weights
 * it materialises whole rows.  Both must agree to 1e-5 (relative to the
 * largest output) for every mask kind, with L and S spanning several query
 * blocks and key tiles (128 rows, 512 keys). */
static double max_rel_diff(const tfm_tensor *a, const tfm_tensor *b)
{
    const float *x = tfm_tensor_data_const(a), *y = tfm_tensor_data_const(b);
    double num = 0, den = 0;
    for (int64_t i = 0; i < tfm_tensor_numel(a); i++) {
        double e = fabs((double)x[i] - y[i]);
        num = e > num || e != e ? e : num;
        den = fabs(y[i]) > den ? fabs(y[i]) : den;
    }
    return num / (den > 0 ? den : 1);
}

static void test_tiled_path_matches_whole_rows(void **state)
{
    (void)state;
    enum { B = 2, H = 2, L = 150, S = 1100, D = 16 };
    tfm_tensor *q = make4(B, H, L, D, NULL), *k = make4(B, H, S, D, NULL),
               *v = make4(B, H, S, D, NULL);
    fill_random(q, 11);
    fill_random(k, 12);
    fill_random(v, 13);
    /* Scale the logits up so the softmax is far from uniform. */
    float *qd = tfm_tensor_data(q);
    for (int64_t i = 0; i < tfm_tensor_numel(q); i++)
        qd[i] *= 6.0f;
    tfm_tensor *pad = make2(B, S, NULL), *pad_add = make2(B, S, NULL);
    tfm_tensor *m2 = make2(L, S, NULL), *m3 = make3(B, L, S, NULL),
               *m4 = make4(B, H, L, S, NULL);
    uint32_t seed = 99;
    for (int64_t i = 0; i < B * S; i++) {
        tfm_tensor_data(pad)[i] = rnd(&seed) > 0.6f ? 1.0f : 0.0f;
        tfm_tensor_data(pad_add)[i] = rnd(&seed) > 0.6f ? -INFINITY : rnd(&seed);
    }
    for (int64_t i = 0; i < L * S; i++)
        tfm_tensor_data(m2)[i] = rnd(&seed) > 0.7f ? 1.0f : 0.0f;
    for (int64_t i = 0; i < B * L * S; i++)
        tfm_tensor_data(m3)[i] = rnd(&seed) * 3.0f;
    for (int64_t i = 0; i < B * H * L * S; i++)
        tfm_tensor_data(m4)[i] = rnd(&seed) > 0.8f ? -INFINITY : rnd(&seed);
    const tfm_attention_masks cases[] = {
        { 0 },
        { .causal = TFM_CAUSAL_TOP_LEFT },
        { .causal = TFM_CAUSAL_BOTTOM_RIGHT },
        { .key_padding_mask = pad, .key_padding_kind = TFM_MASK_BLOCK },
        { .key_padding_mask = pad, .key_padding_kind = TFM_MASK_ALLOW },
        { .key_padding_mask = pad_add, .key_padding_kind = TFM_MASK_ADDITIVE },
        { .attn_mask = m2, .attn_mask_kind = TFM_MASK_BLOCK },
        { .attn_mask = m3, .attn_mask_kind = TFM_MASK_ADDITIVE },
        { .attn_mask = m4, .attn_mask_kind = TFM_MASK_ADDITIVE },
        { .causal = TFM_CAUSAL_BOTTOM_RIGHT, .key_padding_mask = pad,
          .key_padding_kind = TFM_MASK_BLOCK, .attn_mask = m4,
          .attn_mask_kind = TFM_MASK_ADDITIVE },
    };
    tfm_tensor *tiled = make4(B, H, L, D, NULL), *rows = make4(B, H, L, D, NULL);
    tfm_tensor *w = make4(B, H, L, S, NULL);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        assert_int_equal(tfm_sdpa(q, k, v, &cases[c], 0.0f, tiled, NULL),
                         TFM_OK);
        assert_int_equal(tfm_sdpa(q, k, v, &cases[c], 0.0f, rows, w), TFM_OK);
        double e = max_rel_diff(tiled, rows);
        if (!(e <= 1e-5))
            fail_msg("mask case %zu: tiled and whole-row outputs differ by "
                     "%.3g (relative)", c, e);
    }
    FREE_TENSORS(q, k, v, pad, pad_add, m2, m3, m4, tiled, rows, w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiled_path_matches_whole_rows),
        cmocka_unit_test(test_hand_small_explicit_scale),
        cmocka_unit_test(test_default_scale_is_inv_sqrt_dk),
        cmocka_unit_test(test_random_matches_numpy),
        cmocka_unit_test(test_causal_top_left),
        cmocka_unit_test(test_causal_bottom_right),
        cmocka_unit_test(test_causal_long_sequences),
        cmocka_unit_test(test_fully_masked_rows_are_zero),
        cmocka_unit_test(test_large_logits_do_not_overflow),
        cmocka_unit_test(test_softmax_accuracy_wide_range),
        cmocka_unit_test(test_masked_nan_inf_never_reach_output),
        cmocka_unit_test(test_nan_query_in_fully_masked_row),
        cmocka_unit_test(test_visible_nan_value_propagates_causally),
        cmocka_unit_test(test_visible_nan_key_propagates_causally),
        cmocka_unit_test(test_visible_nan_value_with_underflowed_weight),
        cmocka_unit_test(test_block_allow_polarity),
        cmocka_unit_test(test_additive_mask_hand_values),
        cmocka_unit_test(test_masks_combine),
        cmocka_unit_test(test_mask_broadcasting),
        cmocka_unit_test(test_weight_rows_sum_to_one),
        cmocka_unit_test(test_errors_null_and_rank),
        cmocka_unit_test(test_errors_sizes_disagree),
        cmocka_unit_test(test_errors_masks_and_enums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
