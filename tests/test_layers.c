/*
 * LayerNorm, feed-forward, encoder/decoder layers, cross-attention block,
 * stacks and the encoder-decoder Transformer (layers.h).
 *
 * Expected values: worked out by hand, or float64 numpy / PyTorch 1.13 with
 * the generating snippet in the comment.  The PyTorch cases set every
 * parameter deterministically (no pasted weights): parameter number p in
 * state_dict order, element i of its flattened data, holds
 *     float32((i*7 + p*5) % 19 - 9) / float32(10)
 * and the inputs are
 *     src[i] = float32((i*5 + 3) % 17 - 8) / float32(8)
 *     tgt[i] = float32((i*3 + 1) % 13 - 6) / float32(6)
 *     mem[i] = float32((i*11 + 2) % 23 - 11) / float32(10)
 * Snippet (torch.set_default_dtype(torch.float64), f32 = np.float32):
 *     def load(m):
 *         sd = m.state_dict()
 *         m.load_state_dict({k: torch.tensor([pval(p, i) for i in
 *             range(v.numel())]).reshape(v.shape)
 *             for p, (k, v) in enumerate(sd.items())}); m.eval()
 * d_model = 4, 2 heads, d_ff = 6, eps = 1e-5, dropout = 0.
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
#include <transformer/layers.h>
#include <transformer/module.h>
#include <transformer/tensor.h>

#include "test_util.h"

/* ---- helpers -------------------------------------------------------------- */

/* relative to |expected| itself (not max(1, |e|)) */
static void expect_rel(const tfm_tensor *t, const double *expected, double tol,
                       int line)
{
    const float *d = tfm_tensor_data_const(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        if (!(fabs(d[i] - expected[i]) <= tol * fabs(expected[i])))
            fail_msg("line %d: [%lld] = %.9g, expected %.12g (rel tol %g)",
                     line, (long long)i, (double)d[i], expected[i], tol);
}

/* set_each_param() filler for the PyTorch cases' parameters (see the top). */
static void pattern_param(tfm_tensor *t, int p, const void *ctx)
{
    (void)ctx;
    float *d = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        d[i] = (float)((i * 7 + p * 5) % 19 - 9) / 10.0f;
}

/* The deterministic parameters of the PyTorch cases (see the top). */
static void load_pattern(tfm_module *m)
{
    set_each_param(m, pattern_param, NULL);
}

/* Sets every parameter of m to deterministic random values. */
static void randomize(tfm_module *m, uint32_t seed)
{
    randomize_params(m, seed, 31u);
}

/* [b, l, d] input x[i] = float32((i*mul + add) % mod - off) / div. */
static tfm_tensor *pattern_input(int64_t b, int64_t l, int64_t d, int mul,
                                 int add, int mod, int off, float div)
{
    tfm_tensor *t = make3(b, l, d, NULL);
    float *x = tfm_tensor_data(t);
    for (int64_t i = 0; i < b * l * d; i++)
        x[i] = (float)((i * mul + add) % mod - off) / div;
    return t;
}

/* The inputs of the PyTorch cases (see the top). */
static tfm_tensor *src_input(int64_t b, int64_t l, int64_t d)
{
    return pattern_input(b, l, d, 5, 3, 17, 8, 8.0f);
}

static tfm_tensor *tgt_input(int64_t b, int64_t l, int64_t d)
{
    return pattern_input(b, l, d, 3, 1, 13, 6, 6.0f);
}

static tfm_tensor *mem_input(int64_t b, int64_t l, int64_t d)
{
    return pattern_input(b, l, d, 11, 2, 23, 11, 10.0f);
}

/* tfm_layer_config_default(d_model, n_heads) with the given d_ff. */
static tfm_layer_config config(int64_t d_model, int64_t n_heads, int64_t d_ff)
{
    tfm_layer_config c = tfm_layer_config_default(d_model, n_heads);
    c.d_ff = d_ff;
    return c;
}

static tfm_layer_config small_config(tfm_activation act, int norm_first)
{
    tfm_layer_config c = config(4, 2, 6);
    c.activation = act;
    c.norm_first = norm_first;
    return c;
}

/* ---- LayerNorm ------------------------------------------------------------- */

/* The float32 row [1000.0, 1000.1, 1000.2, 1000.3] is exactly
 * [1000, 1000.0999755859375, 1000.2000122070312, 1000.2999877929688].
 * numpy float64 on those values, eps = float32(1e-5):
 *   x = np.float32([1000.0, 1000.1, 1000.2, 1000.3]).astype(np.float64)
 *   m = x.mean(); var = ((x - m)**2).mean()
 *   (x - m) / np.sqrt(var + np.float64(np.float32(1e-5)))
 * A one-pass float32 variance (E[x^2] - E[x]^2 ~ 1e6 - 1e6) loses it all. */
static void test_layer_norm_large_mean(void **state)
{
    (void)state;
    tfm_module *n = NULL;
    assert_int_equal(tfm_layer_norm_create(4, 1e-5f, &n), TFM_OK);
    assert_int_equal(tfm_module_kind_of(n), TFM_MODULE_LAYER_NORM);
    tfm_tensor *x = make(2, (const int64_t[]){ 1, 4 },
                         (const float[]){ 1000.0f, 1000.1f, 1000.2f, 1000.3f });
    tfm_tensor *out = make(2, (const int64_t[]){ 1, 4 }, NULL);
    assert_int_equal(tfm_layer_norm_forward(n, x, out), TFM_OK);
    const double ln[4] = { -1.3410498723146285, -0.44719852303635321,
                           0.44719852303635321, 1.3410498723146285 };
    expect_rel(out, ln, 1e-5, __LINE__);

    /* with weight and bias: y = ln * w + b,
     *   w = [2, 0.5, -1, 1], b = [0.1, 0.2, 0.3, 0.4] (float32 values):
     *   -> -2.5820997431391408, -0.023599258537944368,
     *      -0.14719851111542426, 1.7410498782750929 */
    set_param(n, "weight", 1, (const int64_t[]){ 4 },
              (const float[]){ 2, 0.5f, -1, 1 });
    set_param(n, "bias", 1, (const int64_t[]){ 4 },
              (const float[]){ 0.1f, 0.2f, 0.3f, 0.4f });
    assert_int_equal(tfm_layer_norm_forward(n, x, out), TFM_OK);
    const double lnwb[4] = { -2.5820997431391408, -0.023599258537944368,
                             -0.14719851111542426, 1.7410498782750929 };
    expect_rel(out, lnwb, 2e-5, __LINE__);
    tfm_tensor_free(x);
    tfm_tensor_free(out);
    tfm_module_free(n);

    /* mean 1e6 (exact in float32): [1e6, 1e6+1, 1e6+2, 1e6+3] has mean
     * 1e6 + 1.5 and biased variance 1.25 -> [-1.5, -0.5, 0.5, 1.5] /
     * sqrt(1.25 + 1e-5) */
    assert_int_equal(tfm_layer_norm_create(4, 1e-5f, &n), TFM_OK);
    x = make(2, (const int64_t[]){ 1, 4 },
             (const float[]){ 1e6f, 1e6f + 1, 1e6f + 2, 1e6f + 3 });
    out = make(2, (const int64_t[]){ 1, 4 }, NULL);
    assert_int_equal(tfm_layer_norm_forward(n, x, out), TFM_OK);
    const double s = sqrt(1.25 + (double)1e-5f);
    const double big[4] = { -1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s };
    expect_rel(out, big, 1e-5, __LINE__);
    tfm_tensor_free(x);
    tfm_tensor_free(out);
    tfm_module_free(n);
}

/* Rows [1, 2, 3, 4] with eps = 0.5: mean 2.5, var 1.25 ->
 * (x - 2.5)/sqrt(1.75) = [-1.1338934190276817, -0.3779644730092272, ...].
 * Any rank, in place, and each row on its own. */
static void test_layer_norm_eps_ranks_in_place(void **state)
{
    (void)state;
    tfm_module *n = NULL;
    assert_int_equal(tfm_layer_norm_create(4, 0.5f, &n), TFM_OK);
    const double e[4] = { -1.1338934190276817, -0.3779644730092272,
                          0.3779644730092272, 1.1338934190276817 };
    /* rank 1 */
    tfm_tensor *x1 = make(1, (const int64_t[]){ 4 }, (const float[]){ 1, 2, 3, 4 });
    tfm_tensor *o1 = make(1, (const int64_t[]){ 4 }, NULL);
    assert_int_equal(tfm_layer_norm_forward(n, x1, o1), TFM_OK);
    expect_rel(o1, e, 1e-6, __LINE__);
    /* rank 4, rows shifted by constants (shift invariant), in place */
    tfm_tensor *x4 = make(4, (const int64_t[]){ 2, 1, 2, 4 }, NULL);
    float *d = tfm_tensor_data(x4);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            d[r * 4 + c] = (float)(c + 1) + 10.0f * (float)r - 7.0f;
    assert_int_equal(tfm_layer_norm_forward(n, x4, x4), TFM_OK);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            NEAR_AT(d[r * 4 + c], e[c], 1e-6, "rank-4 in place", r * 4 + c);
    /* weights on a new module start at 1 and biases at 0 */
    tfm_tensor *w = make(1, (const int64_t[]){ 4 }, NULL);
    assert_int_equal(tfm_module_get_parameter(n, "weight", w), TFM_OK);
    expect_all_equal(w, 1.0f, "weight");
    assert_int_equal(tfm_module_get_parameter(n, "bias", w), TFM_OK);
    expect_all_equal(w, 0.0f, "bias");
    assert_int_equal(tfm_module_parameter_count(n), 2);
    assert_string_equal(tfm_module_parameter_name(n, 0), "weight");
    assert_string_equal(tfm_module_parameter_name(n, 1), "bias");
    assert_int_equal(tfm_module_num_parameters(n), 8);
    int64_t macs = -1;
    assert_int_equal(tfm_module_forward_macs(n, 2, 3, 3, &macs), TFM_OK);
    assert_int_equal(macs, 0);
    FREE_TENSORS(x1, o1, x4, w);
    tfm_module_free(n);
}

static void test_layer_norm_errors(void **state)
{
    (void)state;
    const struct { int64_t d; float eps; } bad[] = {
        { 0, 1e-5f }, { -4, 1e-5f }, { 4, -1e-5f }, { 4, NAN }, { 4, INFINITY },
        { 4, -INFINITY },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tfm_module *out = SENTINEL_MODULE;
        assert_int_equal(tfm_layer_norm_create(bad[i].d, bad[i].eps, &out),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_ptr_equal(out, SENTINEL_MODULE);
    }
    assert_int_equal(tfm_layer_norm_create(4, 1e-5f, NULL), TFM_ERR_NULL_ARGUMENT);
    tfm_module *n = NULL;
    assert_int_equal(tfm_layer_norm_create(4, 0.0f, &n), TFM_OK); /* eps 0 ok */
    tfm_tensor *x = make3(2, 3, 4, NULL), *x5 = make3(2, 3, 5, NULL);
    tfm_tensor *o = make3(2, 3, 4, NULL), *o_bad = make3(3, 2, 4, NULL);
    fill_random(x, 1);
    fill(o, 42.0f);
    fill(o_bad, 42.0f);
    assert_int_equal(tfm_layer_norm_forward(n, x5, o), TFM_ERR_SHAPE);
    expect_all_equal(o, 42.0f, "out after x width error");
    assert_int_equal(tfm_layer_norm_forward(n, x, o_bad), TFM_ERR_SHAPE);
    expect_all_equal(o_bad, 42.0f, "out of the wrong shape");
    assert_int_equal(tfm_layer_norm_forward(n, NULL, o), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_layer_norm_forward(n, x, NULL), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_layer_norm_forward(NULL, x, o), TFM_ERR_NULL_ARGUMENT);
    expect_all_equal(o, 42.0f, "out after NULL errors");
    FREE_TENSORS(x, x5, o, o_bad);
    tfm_module_free(n);
}

/* ---- feed-forward ------------------------------------------------------------ */

/* W1 = W2 = I (3x3), zero biases: out = activation(x), elementwise.
 * x rows [1, -1, 2.5] and [0, -3, 10]; math.erf / math.tanh in float64:
 *   gelu(v)  = 0.5 v (1 + erf(v / sqrt 2))
 *   gelu_t(v)= 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
 *   v      gelu                   gelu_tanh
 *   1      0.84134474606854293    0.84119199060827676
 *   -1    -0.15865525393145707   -0.15880800939172324
 *   2.5    2.4844758366855597     2.4849157339100012
 *   0      0                      0
 *   -3    -0.0040496940948903104 -0.0036373920817729943
 *   10     10                     10 */
static void check_activation(tfm_activation act, const double *expected)
{
    tfm_module *f = NULL;
    assert_int_equal(tfm_feed_forward_create(3, 3, act, &f), TFM_OK);
    assert_int_equal(tfm_module_kind_of(f), TFM_MODULE_FEED_FORWARD);
    const float eye[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    set_param(f, "linear1.weight", 2, (const int64_t[]){ 3, 3 }, eye);
    set_param(f, "linear2.weight", 2, (const int64_t[]){ 3, 3 }, eye);
    tfm_tensor *x = make3(1, 2, 3, (const float[]){ 1, -1, 2.5f, 0, -3, 10 });
    tfm_tensor *out = make3(1, 2, 3, NULL);
    assert_int_equal(tfm_feed_forward_forward(f, x, out), TFM_OK);
    const float *d = tfm_tensor_data_const(out);
    for (int i = 0; i < 6; i++)
        /* float32 evaluation: 1e-6 relative, plus 1e-7 absolute for the
         * cancellation in 1 + erf(x/sqrt2) at negative x (as in PyTorch) */
        if (!(fabs(d[i] - expected[i]) <= 1e-6 * fabs(expected[i]) + 1e-7))
            fail_msg("activation %d, x[%d]: %.9g, expected %.12g", (int)act, i,
                     (double)d[i], expected[i]);
    tfm_tensor_free(x);
    tfm_tensor_free(out);
    tfm_module_free(f);
}

static void test_feed_forward_activations(void **state)
{
    (void)state;
    const double relu[6] = { 1, 0, 2.5, 0, 0, 10 };
    const double gelu[6] = { 0.84134474606854293, -0.15865525393145707,
                             2.4844758366855597, 0, -0.0040496940948903104, 10 };
    const double gelu_tanh[6] = { 0.84119199060827676, -0.15880800939172324,
                                  2.4849157339100012, 0,
                                  -0.0036373920817729943, 10 };
    check_activation(TFM_ACTIVATION_RELU, relu);
    check_activation(TFM_ACTIVATION_GELU, gelu);
    check_activation(TFM_ACTIVATION_GELU_TANH, gelu_tanh);
}

/* d_model = 2, d_ff = 3, ReLU:
 *   W1 = [[1, 0], [0, 1], [1, -1]], b1 = [0, 0, 0.5]
 *   W2 = [[1, 1, 1], [0, 2, -1]],   b2 = [0.25, 0]
 * x = [1, -1]: h = [1, -1, 1 + 1 + 0.5] = [1, -1, 2.5] -> relu [1, 0, 2.5]
 *   out = [1 + 0 + 2.5 + 0.25, 0 + 0 - 2.5] = [3.75, -2.5]
 * x = [2, 3]: h = [2, 3, -1 + 0.5] = [2, 3, -0.5] -> [2, 3, 0]
 *   out = [5.25, 6]
 * GELU instead: x = [1, -1] -> [g(1) + g(-1) + g(2.5) + 0.25,
 *   2 g(-1) - g(2.5)] with the table above. */
static void test_feed_forward_hand_weights(void **state)
{
    (void)state;
    for (int act = 0; act < 2; act++) {
        tfm_module *f = NULL;
        assert_int_equal(tfm_feed_forward_create(2, 3, (tfm_activation)act, &f),
                         TFM_OK);
        set_param(f, "linear1.weight", 2, (const int64_t[]){ 3, 2 },
                  (const float[]){ 1, 0, 0, 1, 1, -1 });
        set_param(f, "linear1.bias", 1, (const int64_t[]){ 3 },
                  (const float[]){ 0, 0, 0.5f });
        set_param(f, "linear2.weight", 2, (const int64_t[]){ 2, 3 },
                  (const float[]){ 1, 1, 1, 0, 2, -1 });
        set_param(f, "linear2.bias", 1, (const int64_t[]){ 2 },
                  (const float[]){ 0.25f, 0 });
        tfm_tensor *x = make3(2, 1, 2, (const float[]){ 1, -1, 2, 3 });
        tfm_tensor *out = make3(2, 1, 2, NULL);
        assert_int_equal(tfm_feed_forward_forward(f, x, out), TFM_OK);
        if (act == TFM_ACTIVATION_RELU) {
            EXPECT_VALUES(out, 1e-6, 3.75, -2.5, 5.25, 6.0);
        } else {
            const double g1 = 0.84134474606854293, gm1 = -0.15865525393145707,
                         g25 = 2.4844758366855597;
            /* x = [2, 3]: h = [2, 3, -0.5]:
             * g(2) = 1.9544997361036416, g(3) = 2.9959503059051097,
             * g(-0.5) = -0.15426876936299344 */
            const double g2 = 1.9544997361036416, g3 = 2.9959503059051097,
                         gmh = -0.15426876936299344;
            EXPECT_VALUES(out, 1e-6, g1 + gm1 + g25 + 0.25, 2 * gm1 - g25,
                          g2 + g3 + gmh + 0.25, 2 * g3 - gmh);
        }
        /* in place gives the same bits */
        tfm_tensor *y = make3(2, 1, 2, (const float[]){ 1, -1, 2, 3 });
        assert_int_equal(tfm_feed_forward_forward(f, y, y), TFM_OK);
        expect_bit_identical(y, out, "feed-forward in place");
        /* MACs: 2 L d d_ff per sequence = 2 * 1 * 2 * 3 = 12; B = 2 -> 24 */
        int64_t macs = 0;
        assert_int_equal(tfm_module_forward_macs(f, 2, 1, 1, &macs), TFM_OK);
        assert_int_equal(macs, 24);
        FREE_TENSORS(x, y, out);
        tfm_module_free(f);
    }
}

static void test_feed_forward_errors(void **state)
{
    (void)state;
    const struct { int64_t d, ff; int act; } bad[] = {
        { 0, 4, 0 }, { 4, 0, 0 }, { -1, 4, 0 }, { 4, -4, 0 }, { 4, 4, TFM_ACTIVATION_SILU + 1 },
        { 4, 4, -1 }, { 4, 4, 1000 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tfm_module *out = SENTINEL_MODULE;
        assert_int_equal(tfm_feed_forward_create(bad[i].d, bad[i].ff,
                                                 (tfm_activation)bad[i].act, &out),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_ptr_equal(out, SENTINEL_MODULE);
    }
    tfm_module *f = NULL;
    assert_int_equal(tfm_feed_forward_create(4, 8, TFM_ACTIVATION_GELU, &f), TFM_OK);
    const char *names[4] = { "linear1.weight", "linear1.bias", "linear2.weight",
                             "linear2.bias" };
    const int64_t shapes[4][2] = { { 8, 4 }, { 8, 0 }, { 4, 8 }, { 4, 0 } };
    assert_int_equal(tfm_module_parameter_count(f), 4);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(tfm_module_parameter_name(f, i), names[i]);
        int rank;
        int64_t s[4];
        assert_int_equal(tfm_module_parameter_shape(f, names[i], &rank, s), TFM_OK);
        assert_int_equal(rank, shapes[i][1] ? 2 : 1);
        assert_int_equal(s[0], shapes[i][0]);
        if (rank == 2)
            assert_int_equal(s[1], shapes[i][1]);
    }
    assert_int_equal(tfm_module_num_parameters(f), 32 + 8 + 32 + 4);
    tfm_tensor *x = make3(1, 2, 4, NULL), *o = make3(1, 2, 4, NULL);
    tfm_tensor *x5 = make3(1, 2, 5, NULL), *o3 = make3(1, 3, 4, NULL);
    tfm_tensor *x2 = make(2, (const int64_t[]){ 2, 4 }, NULL);
    fill(o, 42.0f);
    fill(o3, 42.0f);
    assert_int_equal(tfm_feed_forward_forward(f, x5, o), TFM_ERR_SHAPE);
    assert_int_equal(tfm_feed_forward_forward(f, x, o3), TFM_ERR_SHAPE);
    assert_int_equal(tfm_feed_forward_forward(f, x2, o), TFM_ERR_SHAPE);
    assert_int_equal(tfm_feed_forward_forward(f, NULL, o), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_feed_forward_forward(f, x, NULL), TFM_ERR_NULL_ARGUMENT);
    expect_all_equal(o, 42.0f, "out");
    expect_all_equal(o3, 42.0f, "wrong out");
    FREE_TENSORS(x, o, x5, o3, x2);
    tfm_module_free(f);
}

/* ---- configs ----------------------------------------------------------------- */

static void test_layer_config_default(void **state)
{
    (void)state;
    tfm_layer_config c = tfm_layer_config_default(512, 8);
    assert_int_equal(c.d_model, 512);
    assert_int_equal(c.n_heads, 8);
    assert_int_equal(c.d_ff, 2048);
    assert_int_equal(c.activation, TFM_ACTIVATION_RELU);
    assert_true(c.layer_norm_eps == 1e-5f);
    assert_int_equal(c.norm_first, 0);
    c = tfm_layer_config_default(4, 2);
    assert_int_equal(c.d_model, 4);
    assert_int_equal(c.n_heads, 2);
    assert_int_equal(c.d_ff, 2048);
}

typedef tfm_status (*create_fn)(const tfm_layer_config *, tfm_module **);

static tfm_status make_encoder2(const tfm_layer_config *c, tfm_module **out)
{
    return tfm_encoder_create(c, 2, 1, out);
}
static tfm_status make_decoder2(const tfm_layer_config *c, tfm_module **out)
{
    return tfm_decoder_create(c, 2, 0, out);
}
static tfm_status make_transformer(const tfm_layer_config *c, tfm_module **out)
{
    return tfm_transformer_create(c, 1, 1, out);
}

static void test_invalid_configs(void **state)
{
    (void)state;
    const create_fn fns[5] = { tfm_encoder_layer_create, tfm_decoder_layer_create,
                               make_encoder2, make_decoder2, make_transformer };
    const char *fn_names[5] = { "encoder layer", "decoder layer", "encoder",
                                "decoder", "transformer" };
    for (int f = 0; f < 5; f++) {
        tfm_layer_config base = tfm_layer_config_default(8, 2);
        base.d_ff = 16;
        tfm_layer_config bad[12];
        for (int i = 0; i < 12; i++)
            bad[i] = base;
        bad[0].n_heads = 3;               /* does not divide 8 */
        bad[1].d_ff = 0;
        bad[2].layer_norm_eps = -1e-5f;
        bad[3].layer_norm_eps = NAN;
        bad[4].activation = (tfm_activation)(TFM_ACTIVATION_SILU + 1);
        bad[5].d_model = 0;
        bad[6].n_heads = 0;
        bad[7].layer_norm_eps = INFINITY;
        bad[8].activation = (tfm_activation)-1;
        bad[9].d_ff = -16;
        bad[10].n_heads = -2;
        bad[11].d_model = -8;
        for (int i = 0; i < 12; i++) {
            tfm_module *out = SENTINEL_MODULE;
            tfm_status st = fns[f](&bad[i], &out);
            if (st != TFM_ERR_INVALID_ARGUMENT)
                fail_msg("%s, bad config %d: status %d (%s)", fn_names[f], i,
                         (int)st, tfm_last_error());
            assert_ptr_equal(out, SENTINEL_MODULE);
        }
        tfm_module *out = SENTINEL_MODULE;
        assert_int_equal(fns[f](NULL, &out), TFM_ERR_NULL_ARGUMENT);
        assert_ptr_equal(out, SENTINEL_MODULE);
        assert_int_equal(fns[f](&base, NULL), TFM_ERR_NULL_ARGUMENT);
        /* the base config itself is fine */
        assert_int_equal(fns[f](&base, &out), TFM_OK);
        tfm_module_free(out);
    }
    /* n_layers < 1 */
    tfm_layer_config c = config(8, 2, 16);
    const int64_t bad_n[3] = { 0, -1, INT64_MIN };
    for (int i = 0; i < 3; i++) {
        tfm_module *out = SENTINEL_MODULE;
        assert_int_equal(tfm_encoder_create(&c, bad_n[i], 1, &out),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_int_equal(tfm_decoder_create(&c, bad_n[i], 1, &out),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_int_equal(tfm_transformer_create(&c, bad_n[i], 1, &out),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_int_equal(tfm_transformer_create(&c, 1, bad_n[i], &out),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_ptr_equal(out, SENTINEL_MODULE);
    }
    /* the cross-attention block validates heads and eps */
    tfm_layer_config cb = c;
    cb.n_heads = 3;
    tfm_module *out = SENTINEL_MODULE;
    assert_int_equal(tfm_cross_attention_create(&cb, &out),
                     TFM_ERR_INVALID_ARGUMENT);
    cb = c;
    cb.layer_norm_eps = NAN;
    assert_int_equal(tfm_cross_attention_create(&cb, &out),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_cross_attention_create(NULL, &out), TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(out, SENTINEL_MODULE);
}

/* layers.h: for the cross-attention block "config->d_ff and activation are
 * ignored", so a config whose d_ff is 0 or whose activation is unknown
 * still makes a block (it has no feed-forward network). */
static void test_cross_attention_ignores_dff_and_activation(void **state)
{
    (void)state;
    tfm_layer_config c = config(8, 2, 0);
    tfm_module *m = NULL;
    tfm_status st = tfm_cross_attention_create(&c, &m);
    if (st != TFM_OK)
        fail_msg("d_ff = 0: %s (%s)", tfm_status_string(st), tfm_last_error());
    tfm_module_free(m);
    c = tfm_layer_config_default(8, 2);
    c.activation = (tfm_activation)42;
    m = NULL;
    st = tfm_cross_attention_create(&c, &m);
    if (st != TFM_OK)
        fail_msg("activation 42: %s (%s)", tfm_status_string(st),
                 tfm_last_error());
    tfm_module_free(m);
}

/* ---- parameter names and counts = PyTorch ---------------------------------- */

static void expect_names(const tfm_module *m, const char *const *names, int n,
                         int64_t total)
{
    int count = tfm_module_parameter_count(m);
    for (int i = 0; i < n && i < count; i++)
        if (strcmp(tfm_module_parameter_name(m, i), names[i]) != 0)
            fail_msg("parameter %d is \"%s\", PyTorch has \"%s\"", i,
                     tfm_module_parameter_name(m, i), names[i]);
    assert_int_equal(count, n);
    assert_null(tfm_module_parameter_name(m, n));
    assert_int_equal(tfm_module_num_parameters(m), total);
}

/* list(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
 *      .state_dict().keys()), sum(p.numel() for p in m.parameters()) = 600 */
static const char *const ENC_LAYER[12] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias",
    "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
    "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
    "norm1.bias", "norm2.weight", "norm2.bias" };
/* nn.TransformerDecoderLayer(8, 2, 16, batch_first=True): 904 */
static const char *const DEC_LAYER[18] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias",
    "self_attn.out_proj.weight", "self_attn.out_proj.bias",
    "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias",
    "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias",
    "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
    "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight",
    "norm3.bias" };

/* The names of a stack under `prefix`: n_layers copies of the n names of
 * `layer` under "layers.<l>.", then "norm.weight" and "norm.bias".  Fills
 * buf, points ptrs at it and returns the count. */
static int stack_names(char buf[][64], const char **ptrs, const char *prefix,
                       const char *const *layer, int n, int n_layers)
{
    int k = 0;
    for (int l = 0; l < n_layers; l++)
        for (int i = 0; i < n; i++)
            snprintf(buf[k++], 64, "%slayers.%d.%s", prefix, l, layer[i]);
    snprintf(buf[k++], 64, "%snorm.weight", prefix);
    snprintf(buf[k++], 64, "%snorm.bias", prefix);
    for (int i = 0; i < k; i++)
        ptrs[i] = buf[i];
    return k;
}

static void test_parameter_names_match_pytorch(void **state)
{
    (void)state;
    tfm_layer_config c = config(8, 2, 16);
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_layer_create(&c, &m), TFM_OK);
    assert_int_equal(tfm_module_kind_of(m), TFM_MODULE_ENCODER_LAYER);
    expect_names(m, ENC_LAYER, 12, 600);
    int rank;
    int64_t s[4];
    assert_int_equal(tfm_module_parameter_shape(m, "self_attn.in_proj_weight",
                                                &rank, s), TFM_OK);
    assert_true(rank == 2 && s[0] == 24 && s[1] == 8);
    assert_int_equal(tfm_module_parameter_shape(m, "linear1.weight", &rank, s),
                     TFM_OK);
    assert_true(rank == 2 && s[0] == 16 && s[1] == 8);
    assert_int_equal(tfm_module_parameter_shape(m, "norm2.bias", &rank, s), TFM_OK);
    assert_true(rank == 1 && s[0] == 8);
    tfm_module_free(m);

    assert_int_equal(tfm_decoder_layer_create(&c, &m), TFM_OK);
    assert_int_equal(tfm_module_kind_of(m), TFM_MODULE_DECODER_LAYER);
    expect_names(m, DEC_LAYER, 18, 904);
    tfm_module_free(m);

    /* cross-attention block (layers.h): multihead_attn.* then norm.*;
     * 4*64 + 4*8 + 2*8 = 304 */
    const char *const cross[6] = { "multihead_attn.in_proj_weight",
                                   "multihead_attn.in_proj_bias",
                                   "multihead_attn.out_proj.weight",
                                   "multihead_attn.out_proj.bias", "norm.weight",
                                   "norm.bias" };
    assert_int_equal(tfm_cross_attention_create(&c, &m), TFM_OK);
    assert_int_equal(tfm_module_kind_of(m), TFM_MODULE_CROSS_ATTENTION);
    expect_names(m, cross, 6, 304);
    tfm_module_free(m);

    /* nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8)): 26 names, 1216;
     * without the norm: 24 names, 1200 */
    char enc[26][64];
    const char *enc_p[26];
    stack_names(enc, enc_p, "", ENC_LAYER, 12, 2);
    assert_int_equal(tfm_encoder_create(&c, 2, 1, &m), TFM_OK);
    assert_int_equal(tfm_module_kind_of(m), TFM_MODULE_ENCODER);
    expect_names(m, enc_p, 26, 1216);
    tfm_module_free(m);
    assert_int_equal(tfm_encoder_create(&c, 2, 0, &m), TFM_OK);
    expect_names(m, enc_p, 24, 1200);
    tfm_module_free(m);

    /* nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(8)): 38 names, 1824 */
    char dec[38][64];
    const char *dec_p[38];
    stack_names(dec, dec_p, "", DEC_LAYER, 18, 2);
    assert_int_equal(tfm_decoder_create(&c, 2, 1, &m), TFM_OK);
    assert_int_equal(tfm_module_kind_of(m), TFM_MODULE_DECODER);
    expect_names(m, dec_p, 38, 1824);
    tfm_module_free(m);

    /* nn.Transformer(8, 2, 2, 1, 16, batch_first=True): 46 names, 2136 */
    char tr[46][64];
    const char *tr_p[46];
    int k = stack_names(tr, tr_p, "encoder.", ENC_LAYER, 12, 2);
    stack_names(tr + k, tr_p + k, "decoder.", DEC_LAYER, 18, 1);
    assert_int_equal(tfm_transformer_create(&c, 2, 1, &m), TFM_OK);
    assert_int_equal(tfm_module_kind_of(m), TFM_MODULE_TRANSFORMER);
    expect_names(m, tr_p, 46, 2136);
    /* a stack's parameters are the layers' own: setting one through the
     * model is seen by get_parameter */
    float v8[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    set_param(m, "decoder.layers.0.norm3.bias", 1, (const int64_t[]){ 8 }, v8);
    tfm_tensor *got = make(1, (const int64_t[]){ 8 }, NULL);
    assert_int_equal(tfm_module_get_parameter(m, "decoder.layers.0.norm3.bias",
                                              got), TFM_OK);
    assert_memory_equal(tfm_tensor_data_const(got), v8, sizeof v8);
    /* and not by a neighbour */
    assert_int_equal(tfm_module_get_parameter(m, "decoder.norm.bias", got), TFM_OK);
    expect_all_equal(got, 0.0f, "decoder.norm.bias");
    assert_int_equal(tfm_module_get_parameter(m, "decoder.layers.1.norm3.bias",
                                              got), TFM_ERR_NOT_FOUND);
    tfm_tensor_free(got);
    tfm_module_free(m);
}

/* ---- MAC counts ---------------------------------------------------------------
 * d = 8, d_ff = 16, B = 2, L = 3, S = 5 (per sequence):
 *   MHA(L, S) = L d^2 + S d^2 + S d^2 + 2 L S d + L d^2
 *             = 192 + 320 + 320 + 240 + 192 = 1264
 *   MHA(L, L) = 4 d^2 L + 2 L^2 d = 768 + 144 = 912
 *   MHA(S, S) = 1280 + 400 = 1680
 *   FF(L) = 2 L d d_ff = 768,  FF(S) = 1280
 *   encoder layer (L):      912 + 768            = 1680  -> x2 = 3360
 *   decoder layer (L, S):   912 + 1264 + 768     = 2944  -> x2 = 5888
 *   cross-attention (L, S): 1264                         -> x2 = 2528
 *   encoder, 2 layers (L):  2 * 1680 = 3360              -> x2 = 6720
 *   decoder, 2 layers:      2 * 2944 = 5888              -> x2 = 11776
 *   transformer, 2 enc + 1 dec: 2 * (1680 + 1280) + 2944 = 8864 -> x2 = 17728 */

/* The six modules above, in that order (d = 8, 2 heads, d_ff = 16). */
static void create_mac_modules(tfm_module *m[6])
{
    tfm_layer_config c = config(8, 2, 16);
    assert_int_equal(tfm_encoder_layer_create(&c, &m[0]), TFM_OK);
    assert_int_equal(tfm_decoder_layer_create(&c, &m[1]), TFM_OK);
    assert_int_equal(tfm_cross_attention_create(&c, &m[2]), TFM_OK);
    assert_int_equal(tfm_encoder_create(&c, 2, 1, &m[3]), TFM_OK);
    assert_int_equal(tfm_decoder_create(&c, 2, 1, &m[4]), TFM_OK);
    assert_int_equal(tfm_transformer_create(&c, 2, 1, &m[5]), TFM_OK);
}

static void test_forward_macs(void **state)
{
    (void)state;
    tfm_module *m[6] = { 0 };
    create_mac_modules(m);
    const int64_t want[6] = { 3360, 5888, 2528, 6720, 11776, 17728 };
    for (int i = 0; i < 6; i++) {
        int64_t macs = -1;
        assert_int_equal(tfm_module_forward_macs(m[i], 2, 3, 5, &macs), TFM_OK);
        if (macs != want[i])
            fail_msg("module %d: %lld MACs, expected %lld", i, (long long)macs,
                     (long long)want[i]);
    }
    /* the encoder layer ignores src_len */
    int64_t macs = -1;
    assert_int_equal(tfm_module_forward_macs(m[0], 2, 3, 999, &macs), TFM_OK);
    assert_int_equal(macs, 3360);
    /* overflow leaves *macs alone */
    macs = 7;
    assert_int_equal(tfm_module_forward_macs(m[5], INT64_C(1) << 50, 3, 5, &macs),
                     TFM_ERR_OVERFLOW);
    assert_int_equal(macs, 7);
    for (int i = 0; i < 6; i++)
        tfm_module_free(m[i]);
}

/* batch * tgt_len was multiplied before any overflow check (mha.c,
 * feed_forward.c, encoder_layer.c, decoder_layer.c). */
static void test_forward_macs_product_wraps(void **state)
{
    (void)state;
    tfm_module *m[6] = { 0 };
    create_mac_modules(m);
    int64_t macs;
    /* batch * tgt_len wraps to 0 (2^62 * 4 = 2^64): still an overflow for
     * every kind, never a small "valid" count */
    tfm_module *ff = NULL;
    assert_int_equal(tfm_feed_forward_create(8, 16, TFM_ACTIVATION_RELU, &ff),
                     TFM_OK);
    for (int i = 0; i < 7; i++) {
        const tfm_module *mod = i < 6 ? m[i] : ff;
        macs = 7;
        tfm_status st = tfm_module_forward_macs(mod, INT64_C(1) << 62, 4, 4, &macs);
        if (st != TFM_ERR_OVERFLOW)
            fail_msg("module %d, B = 2^62, L = S = 4: status %d, macs %lld; "
                     "expected OVERFLOW", i, (int)st, (long long)macs);
        assert_int_equal(macs, 7);
    }
    tfm_module_free(ff);
    for (int i = 0; i < 6; i++)
        tfm_module_free(m[i]);
}

/* ---- forward passes against PyTorch ---------------------------------------- */

/* A: nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, batch_first=True),
 * src = src(2, 3, 4), src_key_padding_mask = [[F, F, F], [F, F, T]] */
static void test_encoder_layer_matches_pytorch(void **state)
{
    (void)state;
    tfm_layer_config c = small_config(TFM_ACTIVATION_RELU, 0);
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_layer_create(&c, &m), TFM_OK);
    load_pattern(m);
    tfm_tensor *x = src_input(2, 3, 4), *out = make3(2, 3, 4, NULL);
    tfm_tensor *pad = make(2, (const int64_t[]){ 2, 3 },
                           (const float[]){ 0, 0, 0, 0, 0, 1 });
    tfm_attention_masks mk = { .key_padding_mask = pad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    assert_int_equal(tfm_encoder_layer_forward(m, x, &mk, out), TFM_OK);
    EXPECT_VALUES(out, 1e-5,
        1.0395590090756355, 0.5133889704164345, 0.49325730942790935,
        -0.30868338533065198, 1.0313540363678004, 0.5206449089349815,
        0.49056196672109914, -0.29771571096606819, 1.0854904517497903,
        -0.30921925043740578, 0.61841264535588103, -0.52935203083563764,
        1.2294119591236095, -0.38990786662867732, 0.57931768039542364,
        -0.91178562138786212, 1.2294147643565061, -0.38983418592242147,
        0.57931584523868906, -0.91175395094082301, 1.2254074753436892,
        -0.049894025183155971, 0.56466744825645876, -0.75284047823662081);
    /* in place */
    assert_int_equal(tfm_encoder_layer_forward(m, x, &mk, x), TFM_OK);
    expect_bit_identical(x, out, "encoder layer in place");
    FREE_TENSORS(x, out, pad);
    tfm_module_free(m);

    /* B: norm_first=True, activation="gelu", src(1, 3, 4),
     * src_mask = generate_square_subsequent_mask(3) */
    c = small_config(TFM_ACTIVATION_GELU, 1);
    assert_int_equal(tfm_encoder_layer_create(&c, &m), TFM_OK);
    load_pattern(m);
    x = src_input(1, 3, 4);
    out = make3(1, 3, 4, NULL);
    tfm_attention_masks mc = { .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_encoder_layer_forward(m, x, &mc, out), TFM_OK);
    EXPECT_VALUES(out, 1e-5,
        -1.3270899873495037, -0.92850454901712143, 0.23322688980921866,
        1.9446951847701512, -0.95208998734950367, -0.55350454901712143,
        0.60822688980921868, 2.3196951847701515, -0.50566044011779621,
        0.27555790667176416, 0.065368735378340675, 2.7408451900057758);
    tfm_tensor_free(x);
    tfm_tensor_free(out);
    tfm_module_free(m);
}

/* C: nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0,
 *    activation=functools.partial(F.gelu, approximate='tanh'),
 *    batch_first=True); tgt(2, 3, 4), mem(2, 4, 4),
 *    tgt_mask = generate_square_subsequent_mask(3),
 *    memory_key_padding_mask = [[F]*4, [F, T, F, T]]
 * C2: norm_first=True, ReLU, no masks. */
static void test_decoder_layer_matches_pytorch(void **state)
{
    (void)state;
    tfm_layer_config c = small_config(TFM_ACTIVATION_GELU_TANH, 0);
    tfm_module *m = NULL;
    assert_int_equal(tfm_decoder_layer_create(&c, &m), TFM_OK);
    load_pattern(m);
    tfm_tensor *t = tgt_input(2, 3, 4), *mem = mem_input(2, 4, 4);
    tfm_tensor *out = make3(2, 3, 4, NULL);
    tfm_tensor *mpad = make(2, (const int64_t[]){ 2, 4 },
                            (const float[]){ 0, 0, 0, 0, 0, 1, 0, 1 });
    tfm_attention_masks tm = { .causal = TFM_CAUSAL_TOP_LEFT };
    tfm_attention_masks mm = { .key_padding_mask = mpad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    assert_int_equal(tfm_decoder_layer_forward(m, t, mem, &tm, &mm, out), TFM_OK);
    EXPECT_VALUES(out, 1e-5,
        -0.68861484016205077, 0.62290152105939889, -0.17657487575695491,
        0.60532960198121843, -0.68833165377146799, 0.62349990107621733,
        -0.17728524805004409, 0.60582046940759093, -0.7004457282645955,
        0.61478459184297807, -0.19085319371442006, 0.5954933013634448,
        -0.62874801424253679, 0.45250014747186312, 0.090387913837331565,
        0.40279504069776884, -0.62779691594642328, 0.45190797446202974,
        0.09174084377977261, 0.40178709883796182, -0.60947440205629888,
        0.43993266693163019, 0.1128867402509115, 0.37987926094918895);
    tfm_module_free(m);

    c = small_config(TFM_ACTIVATION_RELU, 1);
    assert_int_equal(tfm_decoder_layer_create(&c, &m), TFM_OK);
    load_pattern(m);
    assert_int_equal(tfm_decoder_layer_forward(m, t, mem, NULL, NULL, out), TFM_OK);
    EXPECT_VALUES(out, 1e-5,
        0.65738662879043919, -0.42549432435160101, 1.0617098083862588,
        1.3251926110826473, 0.49071990684819722, -0.59216090588804571,
        0.89504303134934349, 1.1585259245555726, 3.1696723038680648,
        -1.3718018977559756, 1.6760237615800455, 0.86469479456782472,
        3.0337858784883567, -1.2959515847754657, 1.4508451012038752,
        0.44915079016840209, 2.8671192554962612, -1.4626182751515828,
        1.2841784477485665, 0.28248411498964454, 2.383469631372559,
        1.7074255906459865, 0.73506391869157883, -0.1545720725623897);
    /* in place (out = tgt) */
    assert_int_equal(tfm_decoder_layer_forward(m, t, mem, NULL, NULL, t), TFM_OK);
    expect_bit_identical(t, out, "decoder layer in place");
    FREE_TENSORS(t, mem, out, mpad);
    tfm_module_free(m);
}

/* D0 / D1: the block as a torch module
 *   class Cross(nn.Module): multihead_attn = nn.MultiheadAttention(4, 2,
 *       batch_first=True); norm = nn.LayerNorm(4)
 *   post: norm(x + attn(x, mem, mem, key_padding_mask=pad)[0])
 *   pre:  x + attn(norm(x), mem, mem, key_padding_mask=pad)[0]
 * with tgt(2, 3, 4), mem(2, 4, 4), pad = [[F]*4, [F, T, F, T]]. */
static void test_cross_attention_matches_pytorch(void **state)
{
    (void)state;
    static const double post[24] = {
        0.46174814351027071, 0.46308165784957089, -0.834629127208942,
        -1.0844301682747306, 0.44608155452527359, 0.45606503453465691,
        -0.90534876084479177, -1.1013001189449774, -1.6715577682126024,
        0.48036210870708734, -1.073548730846744, 0.17294699389545395,
        -0.84357777925842836, 0.45747435465157049, -1.5906554223993883,
        -0.82781817705150718, -0.84407599704365499, 0.45749507957834701,
        -1.5906462810792057, -0.82755972194687211, -0.33264286648925478,
        0.28861447558484543, -1.7598965617171785, -0.36710121090064929 };
    static const double pre[24] = {
        0.041876993706092325, 0.16478888770687306, 0.4725946496717961,
        0.53209530115046089, -0.12478968706964522, -0.001877766366676914,
        0.30592798272069854, 0.36542860851017078, 1.4364528046999381,
        -0.26918667692228659, -0.18832055260512354, 0.88522963820472833,
        0.73116914976087422, -0.34856145134693439, -0.94275559801579734,
        1.1245511379242279, 0.5645025228569448, -0.51522813790662081,
        -1.1094222546915229, 0.95788446632562729, 0.39354704456291223,
        1.4820456199266872, -1.2802923926412686, 0.79684519572011403 };
    for (int nf = 0; nf < 2; nf++) {
        tfm_layer_config c = small_config(TFM_ACTIVATION_RELU, nf);
        tfm_module *m = NULL;
        assert_int_equal(tfm_cross_attention_create(&c, &m), TFM_OK);
        load_pattern(m);
        tfm_tensor *t = tgt_input(2, 3, 4), *mem = mem_input(2, 4, 4);
        tfm_tensor *out = make3(2, 3, 4, NULL);
        tfm_tensor *mpad = make(2, (const int64_t[]){ 2, 4 },
                                (const float[]){ 0, 0, 0, 0, 0, 1, 0, 1 });
        tfm_attention_masks mm = { .key_padding_mask = mpad,
                                   .key_padding_kind = TFM_MASK_BLOCK };
        assert_int_equal(tfm_cross_attention_forward(m, t, mem, &mm, out), TFM_OK);
        EXPECT_ARRAY(out, nf ? pre : post, 1e-5, nf ? "pre-norm" : "post-norm");
        assert_int_equal(tfm_cross_attention_forward(m, t, mem, &mm, t), TFM_OK);
        expect_bit_identical(t, out, "cross-attention in place");
        FREE_TENSORS(t, mem, out, mpad);
        tfm_module_free(m);
    }
}

/* E: nn.Transformer(4, 2, 2, 1, 6, dropout=0.0, batch_first=True),
 * src(1, 4, 4), tgt(1, 3, 4), tgt_mask = generate_square_subsequent_mask(3) */
static void test_transformer_matches_pytorch(void **state)
{
    (void)state;
    tfm_layer_config c = small_config(TFM_ACTIVATION_RELU, 0);
    tfm_module *m = NULL;
    assert_int_equal(tfm_transformer_create(&c, 2, 1, &m), TFM_OK);
    load_pattern(m);
    tfm_tensor *s = src_input(1, 4, 4), *t = tgt_input(1, 3, 4);
    tfm_tensor *out = make3(1, 3, 4, NULL);
    tfm_attention_masks tm = { .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_transformer_forward(m, s, t, NULL, &tm, NULL, out), TFM_OK);
    EXPECT_VALUES(out, 1e-5,
        0.54873801035611047, 1.00385604314258, 0.43613769048202633,
        0.84899368250245921, 0.54859229823091316, 1.0033730603629247,
        0.43636707110339168, 0.84980560659581061, 0.54488015866971551,
        0.99419845844766797, 0.43891782866551393, 0.86470849673657646);
    /* the same model as encoder + decoder stacks sharing the parameters */
    tfm_module *enc = NULL, *dec = NULL;
    assert_int_equal(tfm_encoder_create(&c, 2, 1, &enc), TFM_OK);
    assert_int_equal(tfm_decoder_create(&c, 1, 1, &dec), TFM_OK);
    for (int p = 0; p < tfm_module_parameter_count(m); p++) {
        const char *name = tfm_module_parameter_name(m, p);
        int rank;
        int64_t shape[4];
        assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape), TFM_OK);
        tfm_tensor *v = make(rank, shape, NULL);
        assert_int_equal(tfm_module_get_parameter(m, name, v), TFM_OK);
        int is_enc = strncmp(name, "encoder.", 8) == 0;
        assert_int_equal(tfm_module_set_parameter(is_enc ? enc : dec,
                                                  name + 8, v), TFM_OK);
        tfm_tensor_free(v);
    }
    tfm_tensor *mem = make3(1, 4, 4, NULL), *out2 = make3(1, 3, 4, NULL);
    assert_int_equal(tfm_encoder_forward(enc, s, NULL, mem), TFM_OK);
    assert_int_equal(tfm_decoder_forward(dec, t, mem, &tm, NULL, out2), TFM_OK);
    expect_bit_identical(out2, out, "stacks vs transformer");
    FREE_TENSORS(s, t, out, mem, out2);
    tfm_module_free(enc);
    tfm_module_free(dec);
    tfm_module_free(m);
}

/* A fresh encoder layer (zero linear weights and biases, unit norms):
 * post-norm: SA(x) = 0 and FF = 0, so out = LN(LN(x)); pre-norm:
 * out = x + 0 + 0 = x exactly.  Row [1, 2, 3, 4], eps 1e-5:
 * LN(x) = [-1.5, -0.5, 0.5, 1.5] / sqrt(1.25 + eps) = y, and LN(y) =
 * y / sqrt(var(y) + eps), var(y) = 1.25 / (1.25 + eps). */
static void test_fresh_layers_are_identity_like(void **state)
{
    (void)state;
    tfm_layer_config c = config(4, 2, 8);
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_layer_create(&c, &m), TFM_OK);
    tfm_tensor *x = make3(1, 1, 4, (const float[]){ 1, 2, 3, 4 });
    tfm_tensor *out = make3(1, 1, 4, NULL);
    assert_int_equal(tfm_encoder_layer_forward(m, x, NULL, out), TFM_OK);
    const double eps = (double)1e-5f, s1 = sqrt(1.25 + eps),
                 s2 = sqrt(1.25 / (1.25 + eps) + eps);
    EXPECT_VALUES(out, 1e-6, -1.5 / s1 / s2, -0.5 / s1 / s2, 0.5 / s1 / s2,
                  1.5 / s1 / s2);
    tfm_module_free(m);
    c.norm_first = 1;
    assert_int_equal(tfm_encoder_layer_create(&c, &m), TFM_OK);
    assert_int_equal(tfm_encoder_layer_forward(m, x, NULL, out), TFM_OK);
    expect_bit_identical(out, x, "pre-norm fresh layer");
    /* biases only (pre-norm): SA(.) = out_proj.bias = b, FF(.) = linear2.bias
     * = c2, so out = x + b + c2 */
    set_param(m, "self_attn.out_proj.bias", 1, (const int64_t[]){ 4 },
              (const float[]){ 1, -1, 0.5f, 0 });
    set_param(m, "linear2.bias", 1, (const int64_t[]){ 4 },
              (const float[]){ 0.25f, 0.25f, 0, -2 });
    assert_int_equal(tfm_encoder_layer_forward(m, x, NULL, out), TFM_OK);
    EXPECT_VALUES(out, 0.0, 2.25, 1.25, 3.5, 2.0);
    tfm_tensor_free(x);
    tfm_tensor_free(out);
    tfm_module_free(m);
}

/* ---- causality ---------------------------------------------------------------- */

/* With a causal target mask, output position i depends only on target
 * positions 0..i: changing the last position leaves the others bit for
 * bit identical (decoder layer, decoder stack, transformer). */
/* Runs mods[which] on target t and memory mem (0: decoder layer, 1: decoder
 * stack, 2: transformer with mem as its source) with target masks tm. */
static tfm_status decode_with(int which, tfm_module *const mods[3],
                              const tfm_tensor *t, const tfm_tensor *mem,
                              const tfm_attention_masks *tm, tfm_tensor *out)
{
    if (which == 0)
        return tfm_decoder_layer_forward(mods[0], t, mem, tm, NULL, out);
    if (which == 1)
        return tfm_decoder_forward(mods[1], t, mem, tm, NULL, out);
    return tfm_transformer_forward(mods[2], mem, t, NULL, tm, NULL, out);
}

static void test_causal_decoder_prefix_is_stable(void **state)
{
    (void)state;
    enum { B = 2, L = 7, S = 5, D = 8 };
    tfm_layer_config c = config(D, 2, 16);
    tfm_module *layer = NULL, *stack = NULL, *model = NULL;
    assert_int_equal(tfm_decoder_layer_create(&c, &layer), TFM_OK);
    assert_int_equal(tfm_decoder_create(&c, 2, 1, &stack), TFM_OK);
    c.norm_first = 1;
    assert_int_equal(tfm_transformer_create(&c, 1, 2, &model), TFM_OK);
    randomize(layer, 1);
    randomize(stack, 2);
    randomize(model, 3);
    tfm_module *const mods[3] = { layer, stack, model };
    tfm_tensor *t = make3(B, L, D, NULL), *mem = make3(B, S, D, NULL);
    fill_random(t, 10);
    fill_random(mem, 11);
    tfm_tensor *a = make3(B, L, D, NULL), *b = make3(B, L, D, NULL);
    tfm_attention_masks tm = { .causal = TFM_CAUSAL_TOP_LEFT };
    for (int which = 0; which < 3; which++) {
        for (int changed = L - 1; changed >= 1; changed -= 3) {
            fill_random(t, 10);
            assert_int_equal(decode_with(which, mods, t, mem, &tm, a), TFM_OK);
            /* change positions changed .. L-1 of every batch element */
            float *td = tfm_tensor_data(t);
            for (int bb = 0; bb < B; bb++)
                for (int i = changed; i < L; i++)
                    for (int k = 0; k < D; k++)
                        td[(bb * L + i) * D + k] = 100.0f * (float)(k - i);
            assert_int_equal(decode_with(which, mods, t, mem, &tm, b), TFM_OK);
            const float *x = tfm_tensor_data_const(a), *y = tfm_tensor_data_const(b);
            int later_differs = 0;
            for (int bb = 0; bb < B; bb++)
                for (int i = 0; i < L; i++)
                    for (int k = 0; k < D; k++) {
                        int idx = (bb * L + i) * D + k;
                        if (i < changed && memcmp(&x[idx], &y[idx], sizeof(float)))
                            fail_msg("module %d, changed from %d: out[%d][%d][%d]"
                                     " %.9g vs %.9g", which, changed, bb, i, k,
                                     (double)x[idx], (double)y[idx]);
                        if (i >= changed && x[idx] != y[idx])
                            later_differs = 1;
                    }
            assert_true(later_differs);
        }
    }
    FREE_TENSORS(t, mem, a, b);
    tfm_module_free(layer);
    tfm_module_free(stack);
    tfm_module_free(model);
}

/* module.h: forward passes keep scratch in a per-thread workspace that
 * grows to the largest call and is reused.  Whatever the workspace held
 * before (a smaller or larger earlier call, or nothing after
 * tfm_workspace_release), the results are bit for bit the same.  The large
 * call needs several MiB of scratch, more than one workspace chunk. */
static void test_workspace_reuse_does_not_change_results(void **state)
{
    (void)state;
    tfm_layer_config c = config(64, 4, 128);
    tfm_module *m = NULL;
    assert_int_equal(tfm_transformer_create(&c, 1, 1, &m), TFM_OK);
    randomize(m, 42);
    const int64_t sizes[2][3] = { { 1, 5, 3 }, { 2, 400, 300 } }; /* B, S, L */
    tfm_tensor *src[2], *tgt[2], *ref[2], *out[2];
    tfm_attention_masks tm = { .causal = TFM_CAUSAL_TOP_LEFT };
    for (int k = 0; k < 2; k++) {
        src[k] = make3(sizes[k][0], sizes[k][1], 64, NULL);
        tgt[k] = make3(sizes[k][0], sizes[k][2], 64, NULL);
        ref[k] = make3(sizes[k][0], sizes[k][2], 64, NULL);
        out[k] = make3(sizes[k][0], sizes[k][2], 64, NULL);
        fill_random(src[k], 100 + (uint32_t)k);
        fill_random(tgt[k], 200 + (uint32_t)k);
        tfm_workspace_release(); /* fresh workspace for the reference */
        assert_int_equal(tfm_transformer_forward(m, src[k], tgt[k], NULL, &tm,
                                                 NULL, ref[k]), TFM_OK);
    }
    tfm_workspace_release();
    const int order[6] = { 0, 1, 0, 1, 1, 0 };
    for (int step = 0; step < 6; step++) {
        int k = order[step];
        fill(out[k], NAN);
        assert_int_equal(tfm_transformer_forward(m, src[k], tgt[k], NULL, &tm,
                                                 NULL, out[k]), TFM_OK);
        expect_bit_identical(out[k], ref[k], k ? "large call" : "small call");
        if (step == 3)
            tfm_workspace_release();
    }
    tfm_workspace_release();
    tfm_workspace_release(); /* twice is harmless */
    for (int k = 0; k < 2; k++) {
        tfm_tensor_free(src[k]);
        tfm_tensor_free(tgt[k]);
        tfm_tensor_free(ref[k]);
        tfm_tensor_free(out[k]);
    }
    tfm_module_free(m);
}

/* ---- shape and kind errors ----------------------------------------------------- */

static void test_memory_batch_mismatch(void **state)
{
    (void)state;
    tfm_layer_config c = config(8, 2, 16);
    tfm_module *dl = NULL, *ds = NULL, *ca = NULL, *tr = NULL;
    assert_int_equal(tfm_decoder_layer_create(&c, &dl), TFM_OK);
    assert_int_equal(tfm_decoder_create(&c, 2, 1, &ds), TFM_OK);
    assert_int_equal(tfm_cross_attention_create(&c, &ca), TFM_OK);
    assert_int_equal(tfm_transformer_create(&c, 1, 1, &tr), TFM_OK);
    randomize(dl, 1);
    tfm_tensor *t = make3(2, 3, 8, NULL), *mem3 = make3(3, 5, 8, NULL),
               *mem1 = make3(1, 5, 8, NULL), *mem_w = make3(2, 5, 7, NULL),
               *out = make3(2, 3, 8, NULL), *mem_ok = make3(2, 5, 8, NULL);
    fill_random(t, 1);
    fill_random(mem3, 2);
    fill_random(mem1, 3);
    tfm_tensor *mems[3] = { mem3, mem1, mem_w };
    for (int i = 0; i < 3; i++) {
        fill(out, 42.0f);
        assert_int_equal(tfm_decoder_layer_forward(dl, t, mems[i], NULL, NULL, out),
                         TFM_ERR_SHAPE);
        assert_non_null(strstr(tfm_last_error(), "memory"));
        assert_int_equal(tfm_decoder_forward(ds, t, mems[i], NULL, NULL, out),
                         TFM_ERR_SHAPE);
        assert_non_null(strstr(tfm_last_error(), "memory"));
        assert_int_equal(tfm_cross_attention_forward(ca, t, mems[i], NULL, out),
                         TFM_ERR_SHAPE);
        assert_non_null(strstr(tfm_last_error(), "memory"));
        /* transformer: src of another batch (or width) than tgt */
        assert_int_equal(tfm_transformer_forward(tr, mems[i], t, NULL, NULL, NULL,
                                                 out), TFM_ERR_SHAPE);
        expect_all_equal(out, 42.0f, "out after batch mismatch");
    }
    /* masks of the wrong size for the memory: [B, L] padding instead of
     * [B, S], and a [L, L] cross mask */
    tfm_tensor *pad_bl = make(2, (const int64_t[]){ 2, 3 }, NULL);
    tfm_tensor *am_ll = make(2, (const int64_t[]){ 3, 3 }, NULL);
    tfm_attention_masks bad1 = { .key_padding_mask = pad_bl };
    tfm_attention_masks bad2 = { .attn_mask = am_ll };
    fill(out, 42.0f);
    assert_int_equal(tfm_decoder_layer_forward(dl, t, mem_ok, NULL, &bad1, out),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_decoder_layer_forward(dl, t, mem_ok, NULL, &bad2, out),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_cross_attention_forward(ca, t, mem_ok, &bad1, out),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_transformer_forward(tr, mem_ok, t, NULL, NULL, &bad2, out),
                     TFM_ERR_SHAPE);
    /* a [B, S] padding mask is wrong for the target self-attention */
    tfm_tensor *pad_bs = make(2, (const int64_t[]){ 2, 5 }, NULL);
    tfm_attention_masks bad3 = { .key_padding_mask = pad_bs };
    assert_int_equal(tfm_decoder_layer_forward(dl, t, mem_ok, &bad3, NULL, out),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_decoder_forward(ds, t, mem_ok, &bad3, NULL, out),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_transformer_forward(tr, mem_ok, t, NULL, &bad3, NULL, out),
                     TFM_ERR_SHAPE);
    expect_all_equal(out, 42.0f, "out after mask errors");
    /* and the valid call works */
    assert_int_equal(tfm_decoder_layer_forward(dl, t, mem_ok, NULL, NULL, out),
                     TFM_OK);
    FREE_TENSORS(t, mem3, mem1, mem_w, out, mem_ok, pad_bl, am_ll, pad_bs);
    tfm_module_free(dl);
    tfm_module_free(ds);
    tfm_module_free(ca);
    tfm_module_free(tr);
}

static void test_wrong_kinds(void **state)
{
    (void)state;
    tfm_layer_config c = config(8, 2, 16);
    tfm_module *el = NULL, *dl = NULL, *es = NULL, *ds = NULL, *ca = NULL,
               *tr = NULL, *ln = NULL, *ff = NULL, *mh = NULL;
    assert_int_equal(tfm_encoder_layer_create(&c, &el), TFM_OK);
    assert_int_equal(tfm_decoder_layer_create(&c, &dl), TFM_OK);
    assert_int_equal(tfm_encoder_create(&c, 1, 1, &es), TFM_OK);
    assert_int_equal(tfm_decoder_create(&c, 1, 1, &ds), TFM_OK);
    assert_int_equal(tfm_cross_attention_create(&c, &ca), TFM_OK);
    assert_int_equal(tfm_transformer_create(&c, 1, 1, &tr), TFM_OK);
    assert_int_equal(tfm_layer_norm_create(8, 1e-5f, &ln), TFM_OK);
    assert_int_equal(tfm_feed_forward_create(8, 16, TFM_ACTIVATION_RELU, &ff), TFM_OK);
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &mh), TFM_OK);
    tfm_tensor *x = make3(1, 3, 8, NULL), *out = make3(1, 3, 8, NULL);
    fill_random(x, 5);
    fill(out, 42.0f);
    /* a one-layer encoder stack is not an encoder layer, and vice versa */
    assert_int_equal(tfm_encoder_layer_forward(es, x, NULL, out), TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_encoder_layer_forward(dl, x, NULL, out), TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_encoder_forward(el, x, NULL, out), TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_encoder_forward(ds, x, NULL, out), TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_decoder_layer_forward(el, x, x, NULL, NULL, out),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_decoder_layer_forward(ds, x, x, NULL, NULL, out),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_decoder_forward(dl, x, x, NULL, NULL, out),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_decoder_forward(es, x, x, NULL, NULL, out),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_cross_attention_forward(mh, x, x, NULL, out),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_cross_attention_forward(dl, x, x, NULL, out),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_transformer_forward(ds, x, x, NULL, NULL, NULL, out),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_layer_norm_forward(ff, x, out), TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_feed_forward_forward(ln, x, out), TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_feed_forward_forward(el, x, out), TFM_ERR_WRONG_KIND);
    expect_all_equal(out, 42.0f, "out after wrong kinds");
    /* NULL modules */
    assert_int_equal(tfm_encoder_layer_forward(NULL, x, NULL, out),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_transformer_forward(NULL, x, x, NULL, NULL, NULL, out),
                     TFM_ERR_NULL_ARGUMENT);
    /* NULL tensors */
    assert_int_equal(tfm_encoder_layer_forward(el, NULL, NULL, out),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_encoder_layer_forward(el, x, NULL, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_encoder_forward(es, x, NULL, NULL), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_decoder_layer_forward(dl, x, NULL, NULL, NULL, out),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_decoder_forward(ds, NULL, x, NULL, NULL, out),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_transformer_forward(tr, x, x, NULL, NULL, NULL, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_transformer_forward(tr, NULL, x, NULL, NULL, NULL, out),
                     TFM_ERR_NULL_ARGUMENT);
    /* widths */
    tfm_tensor *x7 = make3(1, 3, 7, NULL);
    assert_int_equal(tfm_encoder_layer_forward(el, x7, NULL, out), TFM_ERR_SHAPE);
    assert_int_equal(tfm_encoder_forward(es, x7, NULL, out), TFM_ERR_SHAPE);
    assert_int_equal(tfm_transformer_forward(tr, x, x7, NULL, NULL, NULL, out),
                     TFM_ERR_SHAPE);
    tfm_tensor *out4 = make3(1, 4, 8, NULL);
    fill(out4, 42.0f);
    assert_int_equal(tfm_encoder_layer_forward(el, x, NULL, out4), TFM_ERR_SHAPE);
    assert_int_equal(tfm_transformer_forward(tr, x, x, NULL, NULL, NULL, out4),
                     TFM_ERR_SHAPE);
    expect_all_equal(out4, 42.0f, "wrong-shaped out");
    expect_all_equal(out, 42.0f, "out after NULL/shape errors");
    FREE_TENSORS(x, out, x7, out4);
    tfm_module *mods[] = { el, dl, es, ds, ca, tr, ln, ff, mh };
    for (size_t i = 0; i < sizeof mods / sizeof *mods; i++)
        tfm_module_free(mods[i]);
}

/* ---- out of memory ------------------------------------------------------------
 * Each allocation of a create call fails in turn: TFM_ERR_OUT_OF_MEMORY
 * and *out untouched (leaks show under ASan), until the call succeeds. */
typedef tfm_status (*any_create)(const tfm_layer_config *, tfm_module **);

static tfm_status make_ln(const tfm_layer_config *c, tfm_module **out)
{
    return tfm_layer_norm_create(c->d_model, c->layer_norm_eps, out);
}
static tfm_status make_ff(const tfm_layer_config *c, tfm_module **out)
{
    return tfm_feed_forward_create(c->d_model, c->d_ff, c->activation, out);
}
static tfm_status make_tr21(const tfm_layer_config *c, tfm_module **out)
{
    return tfm_transformer_create(c, 2, 1, out);
}

static void test_create_out_of_memory(void **state)
{
    (void)state;
    tfm_layer_config c = config(8, 2, 16);
    const any_create fns[8] = { make_ln, make_ff, tfm_encoder_layer_create,
                                tfm_decoder_layer_create,
                                tfm_cross_attention_create, make_encoder2,
                                make_decoder2, make_tr21 };
    for (int f = 0; f < 8; f++) {
        int succeeded = 0;
        for (long k = 1; k <= 2000 && !succeeded; k++) {
            tfm_module *m = SENTINEL_MODULE;
            tfm_testing_fail_allocation(k);
            tfm_status st = fns[f](&c, &m);
            tfm_testing_fail_allocation(0);
            if (st == TFM_OK) {
                assert_ptr_not_equal(m, SENTINEL_MODULE);
                tfm_module_free(m);
                succeeded = 1;
            } else {
                if (st != TFM_ERR_OUT_OF_MEMORY)
                    fail_msg("creator %d, allocation %ld failing: status %d (%s)",
                             f, k, (int)st, tfm_last_error());
                assert_ptr_equal(m, SENTINEL_MODULE);
            }
        }
        assert_true(succeeded);
    }
}

/* The same for a forward pass on a cold workspace: every scratch
 * allocation failing in turn gives TFM_ERR_OUT_OF_MEMORY with out
 * untouched, and the call that finally succeeds gives the reference bits. */
static void test_forward_out_of_memory(void **state)
{
    (void)state;
    tfm_layer_config c = config(8, 2, 16);
    tfm_module *m = NULL;
    assert_int_equal(tfm_transformer_create(&c, 2, 2, &m), TFM_OK);
    randomize(m, 8);
    tfm_tensor *src = make3(2, 5, 8, NULL), *tgt = make3(2, 3, 8, NULL);
    fill_random(src, 1);
    fill_random(tgt, 2);
    tfm_tensor *ref = make3(2, 3, 8, NULL), *out = make3(2, 3, 8, NULL);
    tfm_attention_masks tm = { .causal = TFM_CAUSAL_TOP_LEFT };
    tfm_workspace_release();
    assert_int_equal(tfm_transformer_forward(m, src, tgt, NULL, &tm, NULL, ref),
                     TFM_OK);
    int succeeded = 0, failed = 0;
    for (long k = 1; k <= 200 && !succeeded; k++) {
        tfm_workspace_release();
        fill(out, 42.0f);
        tfm_testing_fail_allocation(k);
        tfm_status st = tfm_transformer_forward(m, src, tgt, NULL, &tm, NULL, out);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK) {
            expect_bit_identical(out, ref, "forward after injected failures");
            succeeded = 1;
        } else {
            assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
            expect_all_equal(out, 42.0f, "out after out of memory");
            failed++;
        }
    }
    assert_true(succeeded);
    assert_true(failed >= 1); /* a cold workspace must allocate something */
    /* the same for the decoder layer and the encoder stack, in place */
    tfm_module *dl = NULL;
    assert_int_equal(tfm_decoder_layer_create(&c, &dl), TFM_OK);
    randomize(dl, 9);
    tfm_tensor *x = make3(2, 3, 8, NULL), *x0 = make3(2, 3, 8, NULL);
    fill_random(x0, 3);
    tfm_workspace_release();
    assert_int_equal(tfm_decoder_layer_forward(dl, x0, src, &tm, NULL, ref), TFM_OK);
    succeeded = 0;
    for (long k = 1; k <= 200 && !succeeded; k++) {
        tfm_workspace_release();
        assert_int_equal(tfm_tensor_copy(x, x0), TFM_OK);
        tfm_testing_fail_allocation(k);
        tfm_status st = tfm_decoder_layer_forward(dl, x, src, &tm, NULL, x);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK) {
            expect_bit_identical(x, ref, "decoder layer in place after failures");
            succeeded = 1;
        } else {
            assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
            expect_bit_identical(x, x0, "in-place tgt after out of memory");
        }
    }
    assert_true(succeeded);
    FREE_TENSORS(src, tgt, ref, out, x, x0);
    tfm_module_free(m);
    tfm_module_free(dl);
}

/* SiLU through a feed-forward network with identity weights and zero
 * biases: out = x / (1 + exp(-x)), worked out by hand:
 *   silu(1) = 1 / (1 + e^-1) = 0.7310585786,
 *   silu(-2) = -2 / (1 + e^2) = -0.2384058440,
 *   silu(0) = 0, silu(20) = 20 / (1 + e^-20) = 19.99999996,
 *   silu(-100) = -100 / (1 + e^100) = -3.7e-42 (a float denormal or 0),
 *   silu(-1000): exp overflows to inf, -1000 / inf = -0 (+0 after
 *   linear2's zero bias), not NaN. */
static void test_feed_forward_silu(void **state)
{
    (void)state;
    tfm_module *ff = NULL;
    assert_int_equal(tfm_feed_forward_create(1, 1, TFM_ACTIVATION_SILU, &ff),
                     TFM_OK);
    const float one = 1.0f;
    tfm_tensor *w = make2(1, 1, &one);
    assert_int_equal(tfm_module_set_parameter(ff, "linear1.weight", w), TFM_OK);
    assert_int_equal(tfm_module_set_parameter(ff, "linear2.weight", w), TFM_OK);
    const float xs[6] = { 1.0f, -2.0f, 0.0f, 20.0f, -100.0f, -1000.0f };
    tfm_tensor *x = make3(1, 6, 1, xs), *out = make3(1, 6, 1, NULL);
    assert_int_equal(tfm_feed_forward_forward(ff, x, out), TFM_OK);
    EXPECT_VALUES(out, 1e-6, 0.7310585786, -0.2384058440, 0.0, 19.99999996,
                  0.0, 0.0);
    FREE_TENSORS(w, x, out);
    tfm_module_free(ff);
}

/* ---- bias = 0 (tfm_layer_options, PyTorch 2.x's bias=False) ------------
 * torch 1.13 has no bias argument on these layers.  PyTorch 2.x's
 * bias=False drops every bias (in_proj_bias, out_proj.bias, linear1/2.bias
 * and the LayerNorms' bias, nn.LayerNorm(bias=False)), and a missing bias
 * adds nothing, so its layer computes what a 1.13 layer whose biases are
 * all zero computes; 2.x's state_dict is 1.13's without the "*.bias" keys.
 * The references below are those 1.13 layers: parameter number p of the
 * bias-free state_dict (ours) holds the pattern of the top, every bias is
 * zero.  Snippet (after the one at the top):
 *     def load_nobias(m):
 *         sd = m.state_dict()
 *         keep = [k for k in sd if not k.endswith("bias")]
 *         new = {k: torch.zeros_like(v) for k, v in sd.items()}
 *         for p, k in enumerate(keep):
 *             new[k] = torch.tensor([pval(p, i) for i in range(
 *                 sd[k].numel())]).reshape(sd[k].shape)
 *         m.load_state_dict(new); m.eval()
 * F: nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, batch_first=True),
 *    src(2, 3, 4), src_key_padding_mask = [[F, F, F], [F, F, T]]
 * G: nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, activation="gelu",
 *    batch_first=True, norm_first=True), tgt(2, 3, 4), mem(2, 4, 4),
 *    tgt_mask = generate_square_subsequent_mask(3)
 * H: nn.Transformer(4, 2, 2, 1, 6, dropout=0.0, batch_first=True),
 *    src(1, 4, 4), tgt(1, 3, 4), tgt_mask as G */

static tfm_layer_options no_bias(void)
{
    tfm_layer_options o;
    tfm_layer_options_init(&o);
    o.bias = 0;
    return o;
}

static void test_layers_without_bias_match_pytorch(void **state)
{
    (void)state;
    const tfm_layer_options o = no_bias();
    tfm_layer_config c = small_config(TFM_ACTIVATION_RELU, 0);
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_layer_create_v2(&c, &o, &m), TFM_OK);
    /* 48 + 16 + 24 + 24 + 4 + 4 */
    const char *const enc[6] = { "self_attn.in_proj_weight",
                                 "self_attn.out_proj.weight", "linear1.weight",
                                 "linear2.weight", "norm1.weight",
                                 "norm2.weight" };
    expect_names(m, enc, 6, 120);
    load_pattern(m);
    tfm_tensor *x = src_input(2, 3, 4), *out = make3(2, 3, 4, NULL);
    tfm_tensor *pad = make(2, (const int64_t[]){ 2, 3 },
                           (const float[]){ 0, 0, 0, 0, 0, 1 });
    tfm_attention_masks mk = { .key_padding_mask = pad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    assert_int_equal(tfm_encoder_layer_forward(m, x, &mk, out), TFM_OK);
    EXPECT_VALUES(out, 1e-5,
        0.3098983811396515, -0.24870315745306357, -0.04816806512815283,
        -0.1594542390366609, 0.33011305710867955, -0.2307356291525101,
        -0.09129690903730685, -0.15630947662854194, 0.4468072158380085,
        0.055060106793555, -0.019381242504565414, -0.13274805290235117,
        -0.49554078527354156, -0.024686772088867145, 0.6696852397444405,
        0.07529790966527936, -0.4955451996606944, -0.02472631526878724,
        0.6699968919690389, 0.07525053880457225, -0.5011597531941875,
        -0.05897543019239296, 0.7033250171880576, 0.06439376221931155);
    FREE_TENSORS(x, out, pad);
    tfm_module_free(m);

    c = small_config(TFM_ACTIVATION_GELU, 1);
    assert_int_equal(tfm_decoder_layer_create_v2(&c, &o, &m), TFM_OK);
    const char *const dec[9] = {
        "self_attn.in_proj_weight", "self_attn.out_proj.weight",
        "multihead_attn.in_proj_weight", "multihead_attn.out_proj.weight",
        "linear1.weight", "linear2.weight", "norm1.weight", "norm2.weight",
        "norm3.weight" };
    expect_names(m, dec, 9, 188);
    load_pattern(m);
    tfm_tensor *t = tgt_input(2, 3, 4), *mem = mem_input(2, 4, 4);
    out = make3(2, 3, 4, NULL);
    tfm_attention_masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_decoder_layer_forward(m, t, mem, &causal, NULL, out),
                     TFM_OK);
    EXPECT_VALUES(out, 1e-5,
        -1.0973033334470585, -1.4573658388164321, -0.956338649049516,
        1.0640159489160308, -1.2639700096716817, -1.6240324908698138,
        -1.1230053349784344, 0.8973492532708672, -0.02403474744278189,
        -1.5651875686492347, 0.6681455224093598, 1.5106475803793207,
        0.25661141674160415, -0.9271428578712853, -0.78135871553127,
        0.25193320432965977, 0.089944821924973, -1.0938095865935737,
        -0.9480253694153666, 0.08526652013740393, -0.18099024755595852,
        2.1658634297110395, -0.8076672472271337, -0.21575301097122374);
    FREE_TENSORS(t, mem, out);
    tfm_module_free(m);

    c = small_config(TFM_ACTIVATION_RELU, 0);
    assert_int_equal(tfm_transformer_create_v2(&c, 2, 1, &o, &m), TFM_OK);
    /* 2 * 120 + 4 (encoder.norm.weight) + 188 + 4 (decoder.norm.weight) */
    assert_int_equal(tfm_module_parameter_count(m), 2 * 6 + 1 + 9 + 1);
    assert_int_equal(tfm_module_num_parameters(m), 436);
    assert_string_equal(tfm_module_parameter_name(m, 12), "encoder.norm.weight");
    assert_string_equal(tfm_module_parameter_name(m, 22), "decoder.norm.weight");
    load_pattern(m);
    tfm_tensor *s = src_input(1, 4, 4);
    t = tgt_input(1, 3, 4);
    out = make3(1, 3, 4, NULL);
    assert_int_equal(tfm_transformer_forward(m, s, t, NULL, &causal, NULL, out),
                     TFM_OK);
    EXPECT_VALUES(out, 1e-5,
        -0.7327691311891803, -0.6402793083340621, -0.0746646938537129,
        0.7206373115738479, -0.7324260897913307, -0.639491778700455,
        -0.07475140655623778, 0.7219236641603386, -0.13197638247192167,
        0.019439618445042117, 0.15258123180426114, -1.018761858225413);
    FREE_TENSORS(s, t, out);
    tfm_module_free(m);

    /* the stacks: every layer and the final norm without bias */
    assert_int_equal(tfm_encoder_create_v2(&c, 2, 1, &o, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 13);
    assert_string_equal(tfm_module_parameter_name(m, 12), "norm.weight");
    assert_int_equal(tfm_module_num_parameters(m), 244);
    tfm_module_free(m);
    assert_int_equal(tfm_decoder_create_v2(&c, 1, 0, &o, &m), TFM_OK);
    expect_names(m, (const char *const[]){
        "layers.0.self_attn.in_proj_weight",
        "layers.0.self_attn.out_proj.weight",
        "layers.0.multihead_attn.in_proj_weight",
        "layers.0.multihead_attn.out_proj.weight", "layers.0.linear1.weight",
        "layers.0.linear2.weight", "layers.0.norm1.weight",
        "layers.0.norm2.weight", "layers.0.norm3.weight" }, 9, 188);
    tfm_module_free(m);
}

/* LayerNorm(2, bias=False) by hand: x = [1, 3], mean 2, var 1, so
 * y = [-1, 1] / sqrt(1 + 1e-5) * weight; weight [2, -3] gives
 * [-2, -3] / sqrt(1.00001) = [-1.99999000007, -2.99998500011].
 * A feed-forward network without bias: linear1 = [[1, 0], [0, 1],
 * [1, 1]], ReLU, linear2 = [[1, 1, 1], [0, 0, 2]] on x = [2, -3]:
 * h = relu([2, -3, -1]) = [2, 0, 0], out = [2, 0]. */
static void test_norm_and_feed_forward_without_bias(void **state)
{
    (void)state;
    tfm_module *n = NULL;
    assert_int_equal(tfm_layer_norm_create_v2(2, 1e-5f, 0, &n), TFM_OK);
    expect_names(n, (const char *const[]){ "weight" }, 1, 2);
    set_param(n, "weight", 1, (const int64_t[]){ 2 },
              (const float[]){ 2, -3 });
    tfm_tensor *x = make2(1, 2, (const float[]){ 1, 3 });
    tfm_tensor *y = make2(1, 2, NULL);
    assert_int_equal(tfm_layer_norm_forward(n, x, y), TFM_OK);
    EXPECT_VALUES(y, 1e-6, -1.99999000007, -2.99998500011);
    tfm_module_free(n);
    assert_int_equal(tfm_layer_norm_create_v2(2, 1e-5f, 1, &n), TFM_OK);
    expect_names(n, (const char *const[]){ "weight", "bias" }, 2, 4);
    tfm_module_free(n);
    n = NULL;
    assert_int_equal(tfm_layer_norm_create_v2(0, 1e-5f, 0, &n),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_null(n);
    FREE_TENSORS(x, y);

    tfm_module *f = NULL;
    assert_int_equal(tfm_feed_forward_create_v2(2, 3, TFM_ACTIVATION_RELU, 0,
                                                &f), TFM_OK);
    expect_names(f, (const char *const[]){ "linear1.weight",
                                           "linear2.weight" }, 2, 12);
    set_param(f, "linear1.weight", 2, (const int64_t[]){ 3, 2 },
              (const float[]){ 1, 0, 0, 1, 1, 1 });
    set_param(f, "linear2.weight", 2, (const int64_t[]){ 2, 3 },
              (const float[]){ 1, 1, 1, 0, 0, 2 });
    /* its linear1 view has no bias either */
    tfm_module *lin = NULL;
    assert_int_equal(tfm_module_child(f, "linear1", &lin), TFM_OK);
    expect_names(lin, (const char *const[]){ "weight" }, 1, 6);
    x = make3(1, 1, 2, (const float[]){ 2, -3 });
    y = make3(1, 1, 2, NULL);
    assert_int_equal(tfm_feed_forward_forward(f, x, y), TFM_OK);
    EXPECT_VALUES(y, 0.0, 2.0, 0.0);
    FREE_TENSORS(x, y);
    tfm_module_free(f);
    f = NULL;
    assert_int_equal(tfm_feed_forward_create_v2(2, 3, TFM_ACTIVATION_COUNT, 0,
                                                &f), TFM_ERR_INVALID_ARGUMENT);
    assert_null(f);
}

/* RMSNorm(2, eps 1e-5) by hand (Zhang & Sennrich eq. (4)): x = [3, 4],
 * mean(x^2) = 12.5, so y = x / sqrt(12.50001) * weight; weight [2, -1]
 * gives [1.69705559603, -1.13137039735] (nothing subtracted: a LayerNorm
 * would give [-2, -1]).  The gated feed-forward by hand: linear1 (gate) =
 * I, linear3 (up) = [[1, 1], [0, 2]], linear2 = [[1, 0], [1, 1]], ReLU, on
 * x = [2, -3]: gate relu([2, -3]) = [2, 0], up [-1, -6], hidden [-2, 0],
 * out [-2, -2].  A layer with rms_norm and gated has only the norms'
 * weights and linear3 beside linear1 (W1 and W3 side by side). */
static void test_rms_norm_and_gated_feed_forward(void **state)
{
    (void)state;
    tfm_module *n = NULL;
    assert_int_equal(tfm_rms_norm_create(2, 1e-5f, &n), TFM_OK);
    assert_int_equal(tfm_layer_norm_is_rms(n), 1);
    expect_names(n, (const char *const[]){ "weight" }, 1, 2);
    set_param(n, "weight", 1, (const int64_t[]){ 2 },
              (const float[]){ 2, -1 });
    tfm_tensor *x = make2(1, 2, (const float[]){ 3, 4 });
    tfm_tensor *y = make2(1, 2, NULL);
    assert_int_equal(tfm_layer_norm_forward(n, x, y), TFM_OK);
    EXPECT_VALUES(y, 1e-6, 1.69705559603, -1.13137039735);
    tfm_module_free(n);
    FREE_TENSORS(x, y);
    n = (tfm_module *)&n;
    assert_int_equal(tfm_rms_norm_create(0, 1e-5f, &n),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_rms_norm_create(2, -1.0f, &n),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_rms_norm_create(2, NAN, &n),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(n, (tfm_module *)&n);
    assert_int_equal(tfm_rms_norm_create(2, 1e-5f, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_layer_norm_is_rms(NULL), -1);

    tfm_module *f = NULL;
    assert_int_equal(tfm_gated_feed_forward_create(2, 2, TFM_ACTIVATION_RELU,
                                                   0, &f), TFM_OK);
    assert_int_equal(tfm_feed_forward_is_gated(f), 1);
    assert_int_equal(tfm_layer_norm_is_rms(f), -1);
    expect_names(f, (const char *const[]){ "linear1.weight", "linear3.weight",
                                           "linear2.weight" }, 3, 12);
    set_param(f, "linear1.weight", 2, (const int64_t[]){ 2, 2 },
              (const float[]){ 1, 0, 0, 1 });
    set_param(f, "linear3.weight", 2, (const int64_t[]){ 2, 2 },
              (const float[]){ 1, 1, 0, 2 });
    set_param(f, "linear2.weight", 2, (const int64_t[]){ 2, 2 },
              (const float[]){ 1, 0, 1, 1 });
    x = make3(1, 1, 2, (const float[]){ 2, -3 });
    y = make3(1, 1, 2, NULL);
    assert_int_equal(tfm_feed_forward_forward(f, x, y), TFM_OK);
    EXPECT_VALUES(y, 0.0, -2.0, -2.0);
    tfm_module *lin = NULL;
    assert_int_equal(tfm_module_child(f, "linear3", &lin), TFM_OK);
    assert_int_equal(tfm_linear_forward(lin, x, y), TFM_OK);
    EXPECT_VALUES(y, 0.0, -1.0, -6.0);
    FREE_TENSORS(x, y);
    tfm_module_free(f);
    assert_int_equal(tfm_gated_feed_forward_create(2, 2, TFM_ACTIVATION_RELU,
                                                   1, &f), TFM_OK);
    expect_names(f, (const char *const[]){ "linear1.weight", "linear3.weight",
                                           "linear1.bias", "linear3.bias",
                                           "linear2.weight", "linear2.bias" },
                 6, 18);
    assert_int_equal(tfm_feed_forward_is_gated(f), 1);
    tfm_module_free(f);
    f = (tfm_module *)&f;
    assert_int_equal(tfm_gated_feed_forward_create(2, 0, TFM_ACTIVATION_RELU,
                                                   0, &f),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_gated_feed_forward_create(2, INT64_C(1) << 31,
                                                   TFM_ACTIVATION_RELU, 0, &f),
                     TFM_ERR_OVERFLOW);
    assert_ptr_equal(f, (tfm_module *)&f);
    assert_int_equal(tfm_feed_forward_is_gated(NULL), -1);

    tfm_layer_config c = config(8, 2, 16);
    tfm_layer_options o;
    tfm_layer_options_init(&o);
    assert_int_equal(o.rms_norm, 0);
    assert_int_equal(o.gated, 0);
    o.bias = 0;
    o.rms_norm = 1;
    o.gated = 1;
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_layer_create_v2(&c, &o, &m), TFM_OK);
    expect_names(m, (const char *const[]){
        "self_attn.in_proj_weight", "self_attn.out_proj.weight",
        "linear1.weight", "linear3.weight", "linear2.weight",
        "norm1.weight", "norm2.weight" }, 7,
        3 * 64 + 64 + 3 * 128 + 16);
    tfm_module *child = NULL;
    assert_int_equal(tfm_module_child(m, "norm1", &child), TFM_OK);
    assert_int_equal(tfm_layer_norm_is_rms(child), 1);
    tfm_module_free(m);
}

/* The options struct: NULL and the defaults are the 1.0 constructors,
 * an older caller's smaller struct_size keeps the defaults of the members
 * it lacks, a too small one is refused, decoders refuse a variant, and
 * the encoder layer keeps the variant with bias 0. */
static void test_layer_options(void **state)
{
    (void)state;
    tfm_layer_config c = config(8, 2, 16);
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_layer_create_v2(&c, NULL, &m), TFM_OK);
    expect_names(m, ENC_LAYER, 12, 600);
    tfm_module_free(m);
    tfm_layer_options o;
    tfm_layer_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    assert_int_equal(o.bias, 1);
    assert_null(o.attention);
    assert_int_equal(tfm_decoder_layer_create_v2(&c, &o, &m), TFM_OK);
    expect_names(m, DEC_LAYER, 18, 904);
    tfm_module_free(m);
    tfm_layer_options_init(NULL); /* no-op */

    /* a caller that knows only struct_size and bias: attention stays NULL
     * whatever lies behind */
    struct { tfm_layer_options o; } old;
    memset(&old, 0xff, sizeof old);
    old.o.struct_size = offsetof(tfm_layer_options, attention);
    old.o.bias = 0;
    assert_int_equal(tfm_decoder_layer_create_v2(&c, &old.o, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 9);
    tfm_module_free(m);

    /* refused, *out unchanged */
    tfm_module *sentinel = (tfm_module *)&o;
    m = sentinel;
    o.struct_size = sizeof(size_t) - 1;
    assert_int_equal(tfm_encoder_layer_create_v2(&c, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_transformer_create_v2(&c, 1, 1, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_encoder_create_v2(&c, 1, 1, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_attention_config a;
    tfm_attention_config_init(&a);
    a.n_kv_heads = 1;
    o = no_bias();
    o.attention = &a;
    assert_int_equal(tfm_decoder_layer_create_v2(&c, &o, &m),
                     TFM_ERR_UNSUPPORTED);
    assert_int_equal(tfm_decoder_create_v2(&c, 1, 1, &o, &m),
                     TFM_ERR_UNSUPPORTED);
    assert_int_equal(tfm_transformer_create_v2(&c, 1, 1, &o, &m),
                     TFM_ERR_UNSUPPORTED);
    assert_int_equal(tfm_encoder_layer_create_v2(NULL, &o, &m),
                     TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(m, sentinel);
    assert_int_equal(tfm_encoder_layer_create_v2(&c, &o, NULL),
                     TFM_ERR_NULL_ARGUMENT);

    /* multi-query self-attention without bias: in_proj_weight [8 + 2 * 4,
     * 8], no in_proj_bias; the layer reports the variant back */
    assert_int_equal(tfm_encoder_layer_create_v2(&c, &o, &m), TFM_OK);
    int rank;
    int64_t shape[4];
    assert_int_equal(tfm_module_parameter_shape(m, "self_attn.in_proj_weight",
                                                &rank, shape), TFM_OK);
    assert_true(rank == 2 && shape[0] == 16 && shape[1] == 8);
    assert_int_equal(tfm_module_parameter_shape(m, "self_attn.in_proj_bias",
                                                &rank, shape),
                     TFM_ERR_NOT_FOUND);
    tfm_attention_config back;
    tfm_attention_config_init(&back);
    assert_int_equal(tfm_attention_get_config(m, &back), TFM_OK);
    assert_int_equal(back.n_kv_heads, 1);
    assert_int_equal(tfm_module_parameter_count(m), 6);
    tfm_module_free(m);
    assert_int_equal(tfm_encoder_create_v2(&c, 2, 1, &o, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 13);
    tfm_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_norm_large_mean),
        cmocka_unit_test(test_layer_norm_eps_ranks_in_place),
        cmocka_unit_test(test_layer_norm_errors),
        cmocka_unit_test(test_feed_forward_activations),
        cmocka_unit_test(test_feed_forward_hand_weights),
        cmocka_unit_test(test_feed_forward_errors),
        cmocka_unit_test(test_layer_config_default),
        cmocka_unit_test(test_invalid_configs),
        cmocka_unit_test(test_cross_attention_ignores_dff_and_activation),
        cmocka_unit_test(test_parameter_names_match_pytorch),
        cmocka_unit_test(test_forward_macs),
        cmocka_unit_test(test_forward_macs_product_wraps),
        cmocka_unit_test(test_encoder_layer_matches_pytorch),
        cmocka_unit_test(test_decoder_layer_matches_pytorch),
        cmocka_unit_test(test_cross_attention_matches_pytorch),
        cmocka_unit_test(test_transformer_matches_pytorch),
        cmocka_unit_test(test_layers_without_bias_match_pytorch),
        cmocka_unit_test(test_norm_and_feed_forward_without_bias),
        cmocka_unit_test(test_layer_options),
        cmocka_unit_test(test_fresh_layers_are_identity_like),
        cmocka_unit_test(test_causal_decoder_prefix_is_stable),
        cmocka_unit_test(test_workspace_reuse_does_not_change_results),
        cmocka_unit_test(test_memory_batch_mismatch),
        cmocka_unit_test(test_feed_forward_silu),
        cmocka_unit_test(test_rms_norm_and_gated_feed_forward),
        cmocka_unit_test(test_wrong_kinds),
        cmocka_unit_test(test_create_out_of_memory),
        cmocka_unit_test(test_forward_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
