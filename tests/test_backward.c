/* Backward passes of Linear, LayerNorm and the feed-forward network
 * (layers.h: tfm_linear_backward, tfm_layer_norm_backward,
 * tfm_feed_forward_backward; attention.h: tfm_mha_backward): hand-worked
 * values, accumulation, finite differences (the layers, and multi-head
 * attention with the additive score, Shaw and T5), and the errors that
 * must leave every gradient and grad_input as they were.
 * The comparisons with torch.autograd are in
 * bindings/python/tests/test_backward_layers.py.
 *
 * White-box in one place: the busy flag of module_impl.h stands in for a
 * second thread inside a backward pass, so TFM_ERR_BUSY is tested without
 * timing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tiny_model.h"
#include "nn/module_impl.h"
#include <transformer/transformer.h>

static float *grad_of(tfm_module *m, const char *name)
{
    float *g = NULL;
    assert_int_equal(tfm_module_grad(m, name, &g), TFM_OK);
    return g;
}

/* W = [[1, 2], [3, 4]], b = (0, 0), x = [[1, 0], [0, 2]],
 * g = [[1, 1], [2, 0]]:
 *   grad_x = g W   = [[1 + 3, 2 + 4], [2, 4]]       = [[4, 6], [2, 4]]
 *   grad_W = g^T x = [[1*1 + 2*0, 1*0 + 2*2], [1, 0]] = [[1, 4], [1, 0]]
 *   grad_b = column sums of g                        = (3, 1). */
static void test_linear_by_hand(void **state)
{
    (void)state;
    tfm_module *lin = NULL;
    assert_int_equal(tfm_linear_create(2, 2, 1, &lin), TFM_OK);
    set_param(lin, "weight", 2, (int64_t[]){ 2, 2 },
              (float[]){ 1, 2, 3, 4 });
    set_param(lin, "bias", 1, (int64_t[]){ 2 }, (float[]){ 0, 0 });
    tfm_tensor *x = make2(2, 2, (float[]){ 1, 0, 0, 2 });
    tfm_tensor *g = make2(2, 2, (float[]){ 1, 1, 2, 0 });
    tfm_tensor *gx = make2(2, 2, NULL);
    fill(gx, 9.0f);

    /* No gradient memory yet: refused, grad_input untouched. */
    assert_int_equal(tfm_linear_backward(lin, x, g, gx),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "tfm_module_train"));
    assert_true(tfm_tensor_data(gx)[0] == 9.0f);

    assert_int_equal(tfm_module_train(lin, 1), TFM_OK);
    assert_int_equal(tfm_linear_backward(lin, x, g, gx), TFM_OK);
    const float want_x[4] = { 4, 6, 2, 4 }, want_w[4] = { 1, 4, 1, 0 };
    for (int i = 0; i < 4; i++) {
        assert_float_equal(tfm_tensor_data(gx)[i], want_x[i], 0);
        assert_float_equal(grad_of(lin, "weight")[i], want_w[i], 0);
    }
    assert_float_equal(grad_of(lin, "bias")[0], 3.0f, 0);
    assert_float_equal(grad_of(lin, "bias")[1], 1.0f, 0);

    /* Again, without grad_input: the parameter gradients double. */
    assert_int_equal(tfm_linear_backward(lin, x, g, NULL), TFM_OK);
    assert_float_equal(grad_of(lin, "weight")[1], 8.0f, 0);
    assert_float_equal(grad_of(lin, "bias")[0], 6.0f, 0);

    /* grad_input may be x itself (same result, x is read first). */
    assert_int_equal(tfm_module_zero_grad(lin), TFM_OK);
    assert_int_equal(tfm_linear_backward(lin, x, g, x), TFM_OK);
    for (int i = 0; i < 4; i++) {
        assert_float_equal(tfm_tensor_data(x)[i], want_x[i], 0);
        assert_float_equal(grad_of(lin, "weight")[i], want_w[i], 0);
    }

    /* Errors change nothing. */
    float before[4];
    memcpy(before, grad_of(lin, "weight"), sizeof before);
    fill(gx, 9.0f);
    tfm_tensor *bad = make2(2, 3, NULL);
    assert_int_equal(tfm_linear_backward(lin, x, bad, gx), TFM_ERR_SHAPE);
    assert_int_equal(tfm_linear_backward(lin, x, g, bad), TFM_ERR_SHAPE);
    assert_int_equal(tfm_linear_backward(lin, x, g, g),
                     TFM_ERR_INVALID_ARGUMENT);           /* overlap */
    tfm_tensor_data(g)[3] = NAN;
    assert_int_equal(tfm_linear_backward(lin, x, g, gx), TFM_ERR_NON_FINITE);
    tfm_tensor_data(g)[3] = INFINITY;
    assert_int_equal(tfm_linear_backward(lin, x, g, gx), TFM_ERR_NON_FINITE);
    assert_int_equal(tfm_linear_backward(NULL, x, g, gx),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_linear_backward(lin, NULL, g, gx),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_linear_backward(lin, x, NULL, gx),
                     TFM_ERR_NULL_ARGUMENT);
    assert_memory_equal(grad_of(lin, "weight"), before, sizeof before);
    assert_true(tfm_tensor_data(gx)[0] == 9.0f);

    tfm_module *norm = NULL;
    assert_int_equal(tfm_layer_norm_create(2, 1e-5f, &norm), TFM_OK);
    assert_int_equal(tfm_linear_backward(norm, x, x, NULL),
                     TFM_ERR_WRONG_KIND);
    tfm_module_free(norm);
    tfm_tensor_free(bad);
    tfm_tensor_free(x);
    tfm_tensor_free(g);
    tfm_tensor_free(gx);
    tfm_module_free(lin);
}

/* d = 3, eps = 0, weight 1, bias 0, x = (0, 1, 2): mean 1, var 2/3,
 * rstd = sqrt(3/2), xhat = (-r, 0, r) with r = sqrt(3/2).  g = (1, 0, 0):
 * mean(g) = 1/3, mean(g xhat) = -r/3, so
 *   grad_x_i = r (g_i - 1/3 + xhat_i r/3):
 *     (r (2/3 - 1/2), r (-1/3), r (-1/3 + 1/2)) = (r/6, -r/3, r/6),
 *   weight.grad = g xhat = (-r, 0, 0),  bias.grad = g = (1, 0, 0). */
static void test_layer_norm_by_hand(void **state)
{
    (void)state;
    tfm_module *norm = NULL;
    assert_int_equal(tfm_layer_norm_create(3, 0.0f, &norm), TFM_OK);
    assert_int_equal(tfm_module_train(norm, 1), TFM_OK);
    tfm_tensor *x = make2(1, 3, (float[]){ 0, 1, 2 });
    tfm_tensor *g = make2(1, 3, (float[]){ 1, 0, 0 });
    tfm_tensor *gx = make2(1, 3, NULL);
    assert_int_equal(tfm_layer_norm_backward(norm, x, g, gx), TFM_OK);
    const double r = sqrt(1.5);
    assert_float_equal(tfm_tensor_data(gx)[0], r / 6, 1e-6);
    assert_float_equal(tfm_tensor_data(gx)[1], -r / 3, 1e-6);
    assert_float_equal(tfm_tensor_data(gx)[2], r / 6, 1e-6);
    assert_float_equal(grad_of(norm, "weight")[0], -r, 1e-6);
    assert_float_equal(grad_of(norm, "weight")[2], 0.0, 0);
    assert_float_equal(grad_of(norm, "bias")[0], 1.0, 0);
    assert_float_equal(grad_of(norm, "bias")[1], 0.0, 0);
    tfm_tensor_free(x);
    tfm_tensor_free(g);
    tfm_tensor_free(gx);
    tfm_module_free(norm);
}

/* A layer's "linear1" writes the gradients of the feed-forward network's
 * memory: while that network is in a backward pass on another thread
 * (its busy flag), the child's backward is refused and writes nothing;
 * afterwards it runs and the parent reads what it wrote. */
static void test_busy_shared_gradients(void **state)
{
    (void)state;
    tfm_module *ff = NULL, *lin1 = NULL;
    assert_int_equal(tfm_feed_forward_create(2, 3, TFM_ACTIVATION_RELU, &ff),
                     TFM_OK);
    assert_int_equal(tfm_module_train(ff, 1), TFM_OK);
    assert_int_equal(tfm_module_child(ff, "linear1", &lin1), TFM_OK);
    tfm_tensor *x = make2(1, 2, (float[]){ 1, 2 });
    tfm_tensor *g = make2(1, 3, (float[]){ 1, 1, 1 });
    ff->busy = 1;
    assert_int_equal(tfm_linear_backward(lin1, x, g, NULL), TFM_ERR_BUSY);
    tfm_tensor *x3 = make3(1, 1, 2, (float[]){ 1, 2 });
    assert_int_equal(tfm_feed_forward_backward(ff, x3, x3, NULL),
                     TFM_ERR_BUSY);
    tfm_tensor_free(x3);
    assert_float_equal(grad_of(ff, "linear1.weight")[1], 0.0, 0);
    ff->busy = 0;
    assert_int_equal(tfm_linear_backward(lin1, x, g, NULL), TFM_OK);
    /* grad W1 = g^T x: every row (1, 2). */
    assert_float_equal(grad_of(ff, "linear1.weight")[1], 2.0, 0);
    assert_float_equal(grad_of(ff, "linear1.weight")[5], 2.0, 0);
    assert_float_equal(grad_of(ff, "linear1.bias")[2], 1.0, 0);
    assert_int_equal(ff->busy, 0);
    tfm_tensor_free(x);
    tfm_tensor_free(g);
    tfm_module_free(ff);
}

/* Feed-forward by hand: d_model 1, d_ff 2, ReLU, W1 = (1, -1)^T, b1 = 0,
 * W2 = (2, 3), b2 = 0.  x = 1: h = (1, -1), act = (1, 0), y = 2.
 * g = 1: grad W2 = g act = (1, 0), grad b2 = 1; grad act = g W2 = (2, 3),
 * grad h = (2, 0) (ReLU' = (1, 0)); grad W1 = grad_h x = (2, 0)^T,
 * grad b1 = (2, 0), grad_x = grad_h . W1 = 2. */
static void test_feed_forward_by_hand(void **state)
{
    (void)state;
    tfm_module *ff = NULL;
    assert_int_equal(tfm_feed_forward_create(1, 2, TFM_ACTIVATION_RELU, &ff),
                     TFM_OK);
    set_param(ff, "linear1.weight", 2, (int64_t[]){ 2, 1 },
              (float[]){ 1, -1 });
    set_param(ff, "linear1.bias", 1, (int64_t[]){ 2 }, (float[]){ 0, 0 });
    set_param(ff, "linear2.weight", 2, (int64_t[]){ 1, 2 },
              (float[]){ 2, 3 });
    set_param(ff, "linear2.bias", 1, (int64_t[]){ 1 }, (float[]){ 0 });
    assert_int_equal(tfm_module_train(ff, 1), TFM_OK);
    tfm_tensor *x = make3(1, 1, 1, (float[]){ 1 });
    tfm_tensor *g = make3(1, 1, 1, (float[]){ 1 });
    tfm_tensor *gx = make3(1, 1, 1, NULL);
    assert_int_equal(tfm_feed_forward_backward(ff, x, g, gx), TFM_OK);
    assert_float_equal(tfm_tensor_data(gx)[0], 2.0, 0);
    assert_float_equal(grad_of(ff, "linear2.weight")[0], 1.0, 0);
    assert_float_equal(grad_of(ff, "linear2.weight")[1], 0.0, 0);
    assert_float_equal(grad_of(ff, "linear2.bias")[0], 1.0, 0);
    assert_float_equal(grad_of(ff, "linear1.weight")[0], 2.0, 0);
    assert_float_equal(grad_of(ff, "linear1.weight")[1], 0.0, 0);
    assert_float_equal(grad_of(ff, "linear1.bias")[0], 2.0, 0);
    tfm_tensor *x2 = make2(1, 1, (float[]){ 1 });
    assert_int_equal(tfm_feed_forward_backward(ff, x2, g, gx),
                     TFM_ERR_SHAPE);
    tfm_tensor_free(x2);
    tfm_tensor_free(x);
    tfm_tensor_free(g);
    tfm_tensor_free(gx);
    tfm_module_free(ff);
}

/* Multi-head attention by hand: d_model 1, one head, one query and one
 * key.  The softmax over a single key is 1 whatever the logit, so
 * out = w_o (w_v value + b_v) + b_o and nothing depends on query or key:
 * with in_proj_weight (w_q, w_k, w_v) = (2, 3, 5), biases 0, w_o = 7,
 * query = 1, key = 1, value = 2, g = 1:
 *   grad_value = w_o w_v g = 35, grad_query = grad_key = 0,
 *   in_proj_weight.grad = (0, 0, w_o g value) = (0, 0, 14),
 *   in_proj_bias.grad = (0, 0, w_o g) = (0, 0, 7),
 *   out_proj.weight.grad = g ctx = w_v value = 10, out_proj.bias.grad = 1. */
static void test_mha_by_hand(void **state)
{
    (void)state;
    tfm_module *mha = NULL;
    assert_int_equal(tfm_mha_create(1, 1, 1, 1, 1, &mha), TFM_OK);
    set_param(mha, "in_proj_weight", 2, (int64_t[]){ 3, 1 },
              (float[]){ 2, 3, 5 });
    set_param(mha, "in_proj_bias", 1, (int64_t[]){ 3 }, (float[]){ 0, 0, 0 });
    set_param(mha, "out_proj.weight", 2, (int64_t[]){ 1, 1 }, (float[]){ 7 });
    set_param(mha, "out_proj.bias", 1, (int64_t[]){ 1 }, (float[]){ 0 });
    tfm_tensor *q = make3(1, 1, 1, (float[]){ 1 });
    tfm_tensor *k = make3(1, 1, 1, (float[]){ 1 });
    tfm_tensor *v = make3(1, 1, 1, (float[]){ 2 });
    tfm_tensor *g = make3(1, 1, 1, (float[]){ 1 });
    tfm_tensor *gq = make3(1, 1, 1, NULL), *gk = make3(1, 1, 1, NULL),
               *gv = make3(1, 1, 1, NULL);
    assert_int_equal(tfm_mha_backward(mha, q, k, v, NULL, g, gq, gk, gv),
                     TFM_ERR_INVALID_ARGUMENT);        /* not trained */
    assert_int_equal(tfm_module_train(mha, 1), TFM_OK);
    assert_int_equal(tfm_mha_backward(mha, q, k, v, NULL, g, gq, gk, gv),
                     TFM_OK);
    assert_float_equal(tfm_tensor_data(gv)[0], 35.0, 1e-5);
    assert_float_equal(tfm_tensor_data(gq)[0], 0.0, 1e-6);
    assert_float_equal(tfm_tensor_data(gk)[0], 0.0, 1e-6);
    const float *gw = grad_of(mha, "in_proj_weight");
    const float *gb = grad_of(mha, "in_proj_bias");
    assert_float_equal(gw[0], 0.0, 1e-6);
    assert_float_equal(gw[2], 14.0, 1e-5);
    assert_float_equal(gb[2], 7.0, 1e-5);
    assert_float_equal(grad_of(mha, "out_proj.weight")[0], 10.0, 1e-5);
    assert_float_equal(grad_of(mha, "out_proj.bias")[0], 1.0, 0);

    /* Errors write nothing. */
    assert_int_equal(tfm_mha_backward(mha, q, k, v, NULL, g, gq, gq, NULL),
                     TFM_ERR_INVALID_ARGUMENT);        /* overlapping */
    assert_int_equal(tfm_mha_backward(mha, q, k, v, NULL, g, q, NULL, NULL),
                     TFM_ERR_INVALID_ARGUMENT);        /* overlaps query */
    assert_int_equal(tfm_mha_backward(mha, q, k, v, NULL, NULL, gq, gk, gv),
                     TFM_ERR_NULL_ARGUMENT);
    tfm_tensor *wide = make3(1, 2, 1, NULL);
    assert_int_equal(tfm_mha_backward(mha, q, k, v, NULL, wide, gq, gk, gv),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_mha_backward(mha, q, k, v, NULL, g, wide, gk, gv),
                     TFM_ERR_SHAPE);
    assert_float_equal(grad_of(mha, "out_proj.bias")[0], 1.0, 0);
    tfm_tensor_free(wide);

    /* add_bias_kv has no backward yet: refused by name. */
    tfm_mha_options o;
    tfm_mha_options_init(&o);
    o.add_bias_kv = 1;
    tfm_module *extra = NULL;
    assert_int_equal(tfm_mha_create_v2(1, 1, &o, &extra), TFM_OK);
    assert_int_equal(tfm_module_train(extra, 1), TFM_OK);
    assert_int_equal(tfm_mha_backward(extra, q, k, v, NULL, g, gq, gk, gv),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "add_bias_kv"));
    tfm_module_free(extra);
    tfm_tensor *t[7] = { q, k, v, g, gq, gk, gv };
    for (int i = 0; i < 7; i++)
        tfm_tensor_free(t[i]);
    tfm_module_free(mha);
}

/* Encoder layer backward against central finite differences of the
 * layer's own forward (itself checked against torch in test_layers.c):
 * d_model 4, 2 heads, d_ff 6, GELU, post-norm and pre-norm, a causal mask;
 * loss = sum(g * y), so d loss / d src[i] = (loss(src + h e_i) -
 * loss(src - h e_i)) / 2h, accumulated in double.  Float32 forward with
 * h = 1e-2: agreement within 2e-2 absolute (the second-order error and
 * rounding are below 1e-3 at these sizes).  Then the refusals: BUSY and a
 * wrong grad_output shape leave grad_src and every gradient untouched. */
static double enc_loss(tfm_module *l, tfm_tensor *src,
                       const tfm_attention_masks *m, const float *g)
{
    tfm_tensor *y = make3(1, 3, 4, NULL);
    assert_int_equal(tfm_encoder_layer_forward(l, src, m, y), TFM_OK);
    double s = 0;
    for (int i = 0; i < 12; i++)
        s += (double)g[i] * tfm_tensor_data(y)[i];
    tfm_tensor_free(y);
    return s;
}

static void test_encoder_layer_finite_differences(void **state)
{
    (void)state;
    for (int pre = 0; pre < 2; pre++) {
        tfm_layer_config c = tfm_layer_config_default(4, 2);
        c.d_ff = 6;
        c.activation = TFM_ACTIVATION_GELU;
        c.norm_first = pre;
        tfm_module *l = NULL;
        assert_int_equal(tfm_encoder_layer_create(&c, &l), TFM_OK);
        assert_int_equal(tfm_module_train(l, 1), TFM_OK);
        float xs[12], gs[12];
        for (int i = 0; i < 12; i++) {
            xs[i] = (float)sin(1.7 * i + pre);
            gs[i] = (float)cos(0.9 * i);
        }
        tfm_tensor *src = make3(1, 3, 4, xs), *g = make3(1, 3, 4, gs);
        tfm_tensor *gx = make3(1, 3, 4, NULL);
        tfm_attention_masks m = { .causal = TFM_CAUSAL_TOP_LEFT };
        assert_int_equal(tfm_encoder_layer_backward(l, src, &m, g, gx),
                         TFM_OK);
        for (int i = 0; i < 12; i++) {
            float *d = (float *)tfm_tensor_data(src);
            const float keep = d[i], h = 1e-2f;
            d[i] = keep + h;
            double up = enc_loss(l, src, &m, gs);
            d[i] = keep - h;
            double down = enc_loss(l, src, &m, gs);
            d[i] = keep;
            assert_float_equal(tfm_tensor_data(gx)[i], (up - down) / (2 * h),
                               2e-2);
        }
        /* Refusals change nothing. */
        const float before_w = grad_of(l, "linear1.weight")[0];
        const float before_x = tfm_tensor_data(gx)[0];
        /* The module owning the gradient storage is the one marked. */
        tfm_module *home = (tfm_module *)l->params[0].home;
        assert_non_null(home);
        home->busy = 1;
        assert_int_equal(tfm_encoder_layer_backward(l, src, &m, g, gx),
                         TFM_ERR_BUSY);
        home->busy = 0;
        tfm_tensor *wide = make3(1, 4, 4, NULL);
        assert_int_equal(tfm_encoder_layer_backward(l, src, &m, wide, gx),
                         TFM_ERR_SHAPE);
        assert_float_equal(grad_of(l, "linear1.weight")[0], before_w, 0);
        assert_float_equal(tfm_tensor_data(gx)[0], before_x, 0);
        tfm_tensor_free(wide);
        tfm_tensor_free(src);
        tfm_tensor_free(g);
        tfm_tensor_free(gx);
        tfm_module_free(l);
    }
}

/* Decoder layer backward against central finite differences of its own
 * forward, as the encoder layer's above: tgt [1, 3, 4] (causal) attending
 * over memory [1, 2, 4], loss = sum(g * y); both inputs' gradients, h =
 * 1e-2, 2e-2 absolute.  Then the refusals (BUSY, a wrong grad_output
 * shape, grad_memory overlapping grad_output) leave every output and
 * gradient untouched. */
static double dec_loss(tfm_module *l, tfm_tensor *tgt, tfm_tensor *mem,
                       const tfm_attention_masks *m, const float *g)
{
    tfm_tensor *y = make3(1, 3, 4, NULL);
    assert_int_equal(tfm_decoder_layer_forward(l, tgt, mem, m, NULL, y),
                     TFM_OK);
    double s = 0;
    for (int i = 0; i < 12; i++)
        s += (double)g[i] * tfm_tensor_data(y)[i];
    tfm_tensor_free(y);
    return s;
}

static void test_decoder_layer_finite_differences(void **state)
{
    (void)state;
    for (int pre = 0; pre < 2; pre++) {
        tfm_layer_config c = tfm_layer_config_default(4, 2);
        c.d_ff = 6;
        c.activation = TFM_ACTIVATION_GELU;
        c.norm_first = pre;
        tfm_module *l = NULL;
        assert_int_equal(tfm_decoder_layer_create(&c, &l), TFM_OK);
        /* PyTorch's initialisation: a new layer's attention weights are
         * zero, and memory would then get no gradient. */
        tfm_rng rng;
        tfm_rng_seed(&rng, 11 + (uint64_t)pre);
        assert_int_equal(tfm_module_reset_parameters(l, &rng), TFM_OK);
        assert_int_equal(tfm_module_train(l, 1), TFM_OK);
        float xs[12], ms[8], gs[12];
        for (int i = 0; i < 12; i++) {
            xs[i] = (float)sin(1.7 * i + pre);
            gs[i] = (float)cos(0.9 * i);
        }
        for (int i = 0; i < 8; i++)
            ms[i] = (float)cos(2.3 * i + 0.5);
        tfm_tensor *tgt = make3(1, 3, 4, xs), *mem = make3(1, 2, 4, ms);
        tfm_tensor *g = make3(1, 3, 4, gs);
        tfm_tensor *gx = make3(1, 3, 4, NULL), *gm = make3(1, 2, 4, NULL);
        tfm_attention_masks m = { .causal = TFM_CAUSAL_TOP_LEFT };
        assert_int_equal(tfm_decoder_layer_backward(l, tgt, mem, &m, NULL, g,
                                                    gx, gm), TFM_OK);
        tfm_tensor *inputs[2] = { tgt, mem }, *grads[2] = { gx, gm };
        for (int which = 0; which < 2; which++) {
            for (int i = 0; i < (which ? 8 : 12); i++) {
                float *d = (float *)tfm_tensor_data(inputs[which]);
                const float keep = d[i], h = 1e-2f;
                d[i] = keep + h;
                double up = dec_loss(l, tgt, mem, &m, gs);
                d[i] = keep - h;
                double down = dec_loss(l, tgt, mem, &m, gs);
                d[i] = keep;
                assert_float_equal(tfm_tensor_data(grads[which])[i],
                                   (up - down) / (2 * h), 2e-2);
            }
        }
        /* The memory's gradient is not zero: the cross-attention reaches
         * it. */
        double norm = 0;
        for (int i = 0; i < 8; i++)
            norm += fabs(tfm_tensor_data(gm)[i]);
        assert_true(norm > 1e-3);
        /* Refusals change nothing. */
        const float before_w = grad_of(l, "multihead_attn.in_proj_weight")[0];
        const float before_x = tfm_tensor_data(gx)[0];
        const float before_m = tfm_tensor_data(gm)[0];
        tfm_module *home = (tfm_module *)l->params[0].home;
        assert_non_null(home);
        home->busy = 1;
        assert_int_equal(tfm_decoder_layer_backward(l, tgt, mem, &m, NULL, g,
                                                    gx, gm), TFM_ERR_BUSY);
        home->busy = 0;
        tfm_tensor *wide = make3(1, 4, 4, NULL);
        assert_int_equal(tfm_decoder_layer_backward(l, tgt, mem, &m, NULL,
                                                    wide, gx, gm),
                         TFM_ERR_SHAPE);
        assert_int_equal(tfm_decoder_layer_backward(l, tgt, mem, &m, NULL, g,
                                                    gx, wide), TFM_ERR_SHAPE);
        assert_int_equal(tfm_decoder_layer_backward(l, tgt, mem, &m, NULL, g,
                                                    gx, g),
                         TFM_ERR_SHAPE);  /* g is [1, 3, 4], memory [1, 2, 4] */
        tfm_tensor *gm_over = NULL;
        assert_int_equal(tfm_tensor_wrap(3, (const int64_t[]){ 1, 2, 4 },
                                         (float *)tfm_tensor_data(g),
                                         &gm_over), TFM_OK);
        assert_int_equal(tfm_decoder_layer_backward(l, tgt, mem, &m, NULL, g,
                                                    gx, gm_over),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_float_equal(grad_of(l, "multihead_attn.in_proj_weight")[0],
                           before_w, 0);
        assert_float_equal(tfm_tensor_data(gx)[0], before_x, 0);
        assert_float_equal(tfm_tensor_data(gm)[0], before_m, 0);
        tfm_tensor_free(gm_over);
        tfm_tensor_free(wide);
        tfm_tensor *t[5] = { tgt, mem, g, gx, gm };
        for (int i = 0; i < 5; i++)
            tfm_tensor_free(t[i]);
        tfm_module_free(l);
    }
}

/* Cross-attention block backward against central finite differences of
 * its forward: x [2, 2, 4] over memory [2, 3, 4] with a key padding mask
 * (the second batch's last memory position masked), post- and pre-norm,
 * loss = sum(g * y); h = 1e-2, 2e-2 absolute.  The masked memory rows get
 * no gradient (exactly 0: no weight reaches them).  A NULL grad_x still
 * gives grad_memory; a wrong memory shape is refused with nothing
 * written. */
static double cross_loss(tfm_module *b, tfm_tensor *x, tfm_tensor *mem,
                         const tfm_attention_masks *m, const float *g)
{
    tfm_tensor *y = make3(2, 2, 4, NULL);
    assert_int_equal(tfm_cross_attention_forward(b, x, mem, m, y), TFM_OK);
    double s = 0;
    for (int i = 0; i < 16; i++)
        s += (double)g[i] * tfm_tensor_data(y)[i];
    tfm_tensor_free(y);
    return s;
}

static void test_cross_attention_finite_differences(void **state)
{
    (void)state;
    for (int pre = 0; pre < 2; pre++) {
        tfm_layer_config c = tfm_layer_config_default(4, 2);
        c.norm_first = pre;
        tfm_module *b = NULL;
        assert_int_equal(tfm_cross_attention_create(&c, &b), TFM_OK);
        tfm_rng rng;
        tfm_rng_seed(&rng, 21 + (uint64_t)pre);
        assert_int_equal(tfm_module_reset_parameters(b, &rng), TFM_OK);
        assert_int_equal(tfm_module_train(b, 1), TFM_OK);
        float xs[16], ms[24], gs[16];
        for (int i = 0; i < 16; i++) {
            xs[i] = (float)sin(1.3 * i + pre);
            gs[i] = (float)cos(0.7 * i);
        }
        for (int i = 0; i < 24; i++)
            ms[i] = (float)sin(0.8 * i + 1.0);
        tfm_tensor *x = make3(2, 2, 4, xs), *mem = make3(2, 3, 4, ms);
        tfm_tensor *g = make3(2, 2, 4, gs);
        tfm_tensor *gx = make3(2, 2, 4, NULL), *gm = make3(2, 3, 4, NULL);
        const float pads[6] = { 0, 0, 0, 0, 0, 1 };
        tfm_tensor *pad = NULL;
        assert_int_equal(tfm_tensor_create_copy(2, (const int64_t[]){ 2, 3 },
                                                pads, &pad), TFM_OK);
        tfm_attention_masks m = { .key_padding_mask = pad,
                                  .key_padding_kind = TFM_MASK_BLOCK };
        assert_int_equal(tfm_cross_attention_backward(b, x, mem, &m, g, gx,
                                                      gm), TFM_OK);
        tfm_tensor *inputs[2] = { x, mem }, *grads[2] = { gx, gm };
        for (int which = 0; which < 2; which++) {
            for (int i = 0; i < (which ? 24 : 16); i++) {
                float *d = (float *)tfm_tensor_data(inputs[which]);
                const float keep = d[i], h = 1e-2f;
                d[i] = keep + h;
                double up = cross_loss(b, x, mem, &m, gs);
                d[i] = keep - h;
                double down = cross_loss(b, x, mem, &m, gs);
                d[i] = keep;
                assert_float_equal(tfm_tensor_data(grads[which])[i],
                                   (up - down) / (2 * h), 2e-2);
            }
        }
        for (int k = 20; k < 24; k++)  /* batch 1, memory position 2 */
            assert_float_equal(tfm_tensor_data(gm)[k], 0.0f, 0);
        tfm_tensor *gm2 = make3(2, 3, 4, NULL);
        assert_int_equal(tfm_cross_attention_backward(b, x, mem, &m, g, NULL,
                                                      gm2), TFM_OK);
        for (int i = 0; i < 24; i++)
            assert_float_equal(tfm_tensor_data(gm2)[i],
                               tfm_tensor_data(gm)[i], 0);
        const float before = tfm_tensor_data(gx)[0];
        const float before_w = grad_of(b, "norm.weight")[0];
        tfm_tensor *short_mem = make3(2, 3, 3, NULL);
        assert_int_equal(tfm_cross_attention_backward(b, x, short_mem, &m, g,
                                                      gx, gm), TFM_ERR_SHAPE);
        assert_float_equal(tfm_tensor_data(gx)[0], before, 0);
        assert_float_equal(grad_of(b, "norm.weight")[0], before_w, 0);
        tfm_tensor *t[8] = { x, mem, g, gx, gm, gm2, short_mem, pad };
        for (int i = 0; i < 8; i++)
            tfm_tensor_free(t[i]);
        tfm_module_free(b);
    }
}

/* Multi-head attention with the learned variants (the additive score
 * under GQA, Shaw keys and values, T5's bias) against central finite
 * differences of its own forward, as the layers' above: cross-attention
 * (query [2, 3, 4] over key = value [2, 4, 4], L != S), 2 heads (d_k 2),
 * a causal mask (bottom-right for Shaw, top-left otherwise) and a padded
 * key; loss = sum(g * y) accumulated in double,
 * float32 forward, h = 1e-2.  The query's, the memory's (grad_key +
 * grad_value) and every parameter's gradient (the variant's included),
 * each within 1e-3 of its largest magnitude (at least 1; the last run
 * saw at most 3e-5). */
static double mha_loss(tfm_module *m, tfm_tensor *x, tfm_tensor *mem,
                       const tfm_attention_masks *mk, const float *g)
{
    tfm_tensor *y = make3(2, 3, 4, NULL);
    assert_int_equal(tfm_mha_forward(m, x, mem, mem, mk, y, NULL), TFM_OK);
    double s = 0;
    for (int i = 0; i < 24; i++)
        s += (double)g[i] * tfm_tensor_data(y)[i];
    tfm_tensor_free(y);
    return s;
}

/* The largest |got - central difference| over n entries of data, the
 * loss's gradient with respect to them being got[0 .. n-1]; *scale gets
 * max(1, the largest |difference|). */
static double fd_error(tfm_module *m, tfm_tensor *x, tfm_tensor *mem,
                       const tfm_attention_masks *mk, const float *g,
                       float *data, const float *got, int64_t n,
                       double *scale)
{
    double err = 0.0;
    *scale = 1.0;
    for (int64_t i = 0; i < n; i++) {
        const float keep = data[i], h = 1e-2f;
        data[i] = keep + h;
        const double up = mha_loss(m, x, mem, mk, g);
        data[i] = keep - h;
        const double down = mha_loss(m, x, mem, mk, g);
        data[i] = keep;
        const double fd = (up - down) / (2.0 * (double)h);
        err = fabs(got[i] - fd) > err ? fabs(got[i] - fd) : err;
        *scale = fabs(fd) > *scale ? fabs(fd) : *scale;
    }
    return err;
}

/* Parameter `name` of m: its data, and its element count in *n. */
static float *param_data(tfm_module *m, const char *name, int64_t *n)
{
    float *d = NULL;
    int rank = 0;
    int64_t shape[TFM_MAX_RANK];
    assert_int_equal(tfm_module_parameter_data(m, name, &d), TFM_OK);
    assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape),
                     TFM_OK);
    *n = 1;
    for (int a = 0; a < rank; a++)
        *n *= shape[a];
    return d;
}

static void test_mha_variants_finite_differences(void **state)
{
    (void)state;
    static const char *const what[3] = { "additive (GQA)", "Shaw", "T5" };
    for (int v = 0; v < 3; v++) {
        tfm_attention_config ac;
        tfm_attention_config_init(&ac);
        if (v == 0) {
            ac.score = TFM_SCORE_ADDITIVE;
            ac.additive_dim = 3;
            ac.n_kv_heads = 1;
        } else if (v == 1) {
            ac.relative = TFM_RELATIVE_SHAW;
            ac.max_distance = 1;            /* distances up to 3: clipped */
            ac.relative_values = 1;
        } else {
            ac.relative = TFM_RELATIVE_T5;
            ac.num_buckets = 4;             /* shared by distances >= 1 */
            ac.max_distance = 3;
        }
        tfm_mha_options o;
        tfm_mha_options_init(&o);
        o.attention = &ac;
        tfm_module *m = NULL;
        assert_int_equal(tfm_mha_create_v2(4, 2, &o, &m), TFM_OK);
        const int np = tfm_module_parameter_count(m);
        for (int p = 0; p < np; p++) {
            int64_t n = 0;
            float *d = param_data(m, tfm_module_parameter_name(m, p), &n);
            for (int64_t i = 0; i < n; i++)
                d[i] = (float)(0.6 * sin(1.3 * (double)i + 0.7 * p + v));
        }
        assert_int_equal(tfm_module_train(m, 1), TFM_OK);
        float xs[24], ms[32], gs[24], pad[8] = { 0 };
        for (int i = 0; i < 24; i++) {
            xs[i] = (float)sin(1.7 * i + v);
            gs[i] = (float)cos(0.9 * i);
        }
        for (int i = 0; i < 32; i++)
            ms[i] = (float)cos(1.1 * i - v);
        pad[7] = 1.0f;                      /* batch 1, key 3 */
        tfm_tensor *x = make3(2, 3, 4, xs), *mem = make3(2, 4, 4, ms);
        tfm_tensor *g = make3(2, 3, 4, gs), *kpm = make2(2, 4, pad);
        tfm_tensor *gx = make3(2, 3, 4, NULL), *gk = make3(2, 4, 4, NULL),
                   *gv = make3(2, 4, 4, NULL);
        /* Shaw's distances from query positions S - L + i: bottom-right. */
        const tfm_attention_masks mk = { .causal = v == 1
                                                       ? TFM_CAUSAL_BOTTOM_RIGHT
                                                       : TFM_CAUSAL_TOP_LEFT,
                                         .key_padding_mask = kpm,
                                         .key_padding_kind = TFM_MASK_BLOCK };
        assert_int_equal(tfm_mha_backward(m, x, mem, mem, &mk, g, gx, gk, gv),
                         TFM_OK);
        double worst = 0.0, scale;
        double e = fd_error(m, x, mem, &mk, gs, (float *)tfm_tensor_data(x),
                            tfm_tensor_data(gx), 24, &scale);
        worst = e / scale > worst ? e / scale : worst;
        float gmem[32];
        for (int i = 0; i < 32; i++)
            gmem[i] = tfm_tensor_data(gk)[i] + tfm_tensor_data(gv)[i];
        e = fd_error(m, x, mem, &mk, gs, (float *)tfm_tensor_data(mem), gmem,
                     32, &scale);
        worst = e / scale > worst ? e / scale : worst;
        for (int p = 0; p < np; p++) {
            const char *name = tfm_module_parameter_name(m, p);
            int64_t n = 0;
            float *d = param_data(m, name, &n);
            e = fd_error(m, x, mem, &mk, gs, d, grad_of(m, name), n, &scale);
            if (e > 1e-3 * scale)
                fail_msg("%s: %s's gradient is %.2e from the finite "
                         "differences (scale %.2f)", what[v], name, e, scale);
            worst = e / scale > worst ? e / scale : worst;
        }
        printf("mha %s: largest scaled error vs finite differences %.2e\n",
               what[v], worst);
        assert_true(worst <= 1e-3);
        tfm_tensor *t[7] = { x, mem, g, kpm, gx, gk, gv };
        for (int i = 0; i < 7; i++)
            tfm_tensor_free(t[i]);
        tfm_module_free(m);
    }
}

/* The stacks' and nn.Transformer's backward: a one-layer stack without a
 * final norm gives bit for bit its layer's gradients (the same layer
 * backward runs); refusals: the wrong kind, no training mode, a NULL or
 * misshapen argument, grad_src overlapping grad_tgt; each writes nothing.
 * The values against torch.autograd are in test_backward_stacks.py. */
static void test_stack_backward_refusals(void **state)
{
    (void)state;
    tfm_layer_config c = tfm_layer_config_default(4, 2);
    c.d_ff = 6;
    tfm_module *enc = NULL, *layer = NULL, *model = NULL;
    assert_int_equal(tfm_encoder_create(&c, 1, 0, &enc), TFM_OK);
    assert_int_equal(tfm_encoder_layer_create(&c, &layer), TFM_OK);
    tfm_rng rng;
    tfm_rng_seed(&rng, 5);
    assert_int_equal(tfm_module_reset_parameters(layer, &rng), TFM_OK);
    /* the same weights in the stack's one layer */
    for (int i = 0; i < tfm_module_parameter_count(layer); i++) {
        const char *name = tfm_module_parameter_name(layer, i);
        char full[128];
        snprintf(full, sizeof full, "layers.0.%s", name);
        float *src = NULL, *dst = NULL;
        int rank = 0;
        int64_t shape[TFM_MAX_RANK], numel = 1;
        assert_int_equal(tfm_module_parameter_data(layer, name, &src), TFM_OK);
        assert_int_equal(tfm_module_parameter_data(enc, full, &dst), TFM_OK);
        assert_int_equal(tfm_module_parameter_shape(layer, name, &rank,
                                                    shape), TFM_OK);
        for (int a = 0; a < rank; a++)
            numel *= shape[a];
        memcpy(dst, src, (size_t)numel * sizeof *dst);
    }
    float xs[24], gs[24];
    for (int i = 0; i < 24; i++) {
        xs[i] = (float)sin(0.6 * i);
        gs[i] = (float)cos(1.1 * i);
    }
    tfm_tensor *x = make3(2, 3, 4, xs), *g = make3(2, 3, 4, gs);
    tfm_tensor *g1 = make3(2, 3, 4, NULL), *g2 = make3(2, 3, 4, NULL);
    /* Not in training mode yet: refused, nothing written. */
    assert_int_equal(tfm_encoder_backward(enc, x, NULL, g, g1),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "tfm_module_train"));
    assert_int_equal(tfm_module_train(enc, 1), TFM_OK);
    assert_int_equal(tfm_module_train(layer, 1), TFM_OK);
    assert_int_equal(tfm_encoder_backward(enc, x, NULL, g, g1), TFM_OK);
    assert_int_equal(tfm_encoder_layer_backward(layer, x, NULL, g, g2),
                     TFM_OK);
    assert_memory_equal(tfm_tensor_data(g1), tfm_tensor_data(g2),
                        24 * sizeof(float));
    assert_memory_equal(grad_of(enc, "layers.0.linear1.weight"),
                        grad_of(layer, "linear1.weight"), 24 * sizeof(float));
    /* The wrong kind; NULL grad_output; a wrong shape. */
    assert_int_equal(tfm_encoder_backward(layer, x, NULL, g, g1),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_encoder_backward(enc, x, NULL, NULL, g1),
                     TFM_ERR_NULL_ARGUMENT);
    tfm_tensor *wide = make3(2, 4, 4, NULL);
    const float keep = tfm_tensor_data(g1)[0];
    assert_int_equal(tfm_encoder_backward(enc, x, NULL, wide, g1),
                     TFM_ERR_SHAPE);
    assert_float_equal(tfm_tensor_data(g1)[0], keep, 0);
    /* nn.Transformer: grad_src overlapping grad_tgt is refused (src and
     * tgt of one shape here). */
    assert_int_equal(tfm_transformer_create(&c, 1, 1, &model), TFM_OK);
    assert_int_equal(tfm_module_train(model, 1), TFM_OK);
    assert_int_equal(tfm_transformer_backward(model, x, x, NULL, NULL, NULL,
                                              g, g1, g1),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_transformer_backward(model, x, x, NULL, NULL, NULL,
                                              g, g1, g2), TFM_OK);
    assert_int_equal(tfm_decoder_backward(enc, x, x, NULL, NULL, g, g1, g2),
                     TFM_ERR_WRONG_KIND);  /* an encoder */
    tfm_tensor *t[5] = { x, g, g1, g2, wide };
    for (int i = 0; i < 5; i++)
        tfm_tensor_free(t[i]);
    tfm_module_free(model);
    tfm_module_free(layer);
    tfm_module_free(enc);
}

/* tfm_model_backward's refusals write nothing: a wrong grad_logits shape,
 * an id outside the vocabulary, NaN in grad_logits, an encoder-decoder
 * model (tfm_model_seq2seq_backward's), and a model not in training mode.
 * The values against torch.autograd are in test_backward_models.py. */
static void test_model_backward_refusals(void **state)
{
    (void)state;
    tfm_model_config mc = tiny_model_config(
        TFM_ARCH_DECODER_ONLY, tfm_layer_config_default(4, 2), 7, 1, 5);
    tfm_module *m = NULL, *seq2seq = NULL;
    assert_int_equal(tfm_model_create(&mc, &m), TFM_OK);
    tfm_rng rng;
    tfm_rng_seed(&rng, 3);
    assert_int_equal(tfm_module_reset_parameters(m, &rng), TFM_OK);
    const int32_t ids[3] = { 1, 2, 6 }, bad_ids[3] = { 1, 7, 0 };
    tfm_tensor *g = make3(1, 3, 7, NULL), *wide = make3(1, 3, 8, NULL);
    for (int i = 0; i < 21; i++)
        ((float *)tfm_tensor_data(g))[i] = (float)sin(i);
    assert_int_equal(tfm_model_backward(m, ids, 1, 3, g),
                     TFM_ERR_INVALID_ARGUMENT);  /* not training */
    assert_int_equal(tfm_module_train(m, 1), TFM_OK);
    assert_int_equal(tfm_model_backward(m, ids, 1, 3, wide), TFM_ERR_SHAPE);
    assert_int_equal(tfm_model_backward(m, bad_ids, 1, 3, g),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_model_backward(m, ids, 1, 3, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    ((float *)tfm_tensor_data(wide))[0] = NAN;
    tfm_tensor *nan_g = NULL;
    assert_int_equal(tfm_tensor_create_copy(3, (const int64_t[]){ 1, 3, 7 },
                                            tfm_tensor_data(wide), &nan_g),
                     TFM_OK);
    assert_int_equal(tfm_model_backward(m, ids, 1, 3, nan_g),
                     TFM_ERR_NON_FINITE);
    assert_float_equal(grad_of(m, "token_embedding.weight")[0], 0.0f, 0);
    assert_float_equal(grad_of(m, "norm.weight")[0], 0.0f, 0);
    assert_int_equal(tfm_model_backward(m, ids, 1, 3, g), TFM_OK);
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += fabs(grad_of(m, "norm.weight")[i]);
    assert_true(s > 0);
    tfm_model_config ec = tiny_model_config(
        TFM_ARCH_ENCODER_DECODER, tfm_layer_config_default(4, 2), 7, 1, 5);
    ec.n_encoder_layers = ec.n_decoder_layers = 1;
    assert_int_equal(tfm_model_create(&ec, &seq2seq), TFM_OK);
    assert_int_equal(tfm_module_train(seq2seq, 1), TFM_OK);
    assert_int_equal(tfm_model_backward(seq2seq, ids, 1, 3, g),
                     TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_model_seq2seq_backward(seq2seq, ids, 3, ids, 3, 1,
                                                g), TFM_OK);
    tfm_tensor_free(nan_g);
    tfm_tensor_free(g);
    tfm_tensor_free(wide);
    tfm_module_free(seq2seq);
    tfm_module_free(m);
}

/* tfm_model_loss_backward: one forward for the cross-entropy and the
 * backward.  Its loss and gradients equal the two-call path
 * (tfm_model_logits, tfm_cross_entropy's dlogits times grad_scale,
 * tfm_model_backward: the values test_backward_models.py checks against
 * torch.autograd) within rounding, and central finite differences of the
 * loss (tfm_model_logits + tfm_cross_entropy, eps 1e-2) give its
 * gradient; with ignored rows and label smoothing, decoder- and
 * encoder-only.  Refusals write nothing: no gradient, no loss. */
enum { LB_V = 7, LB_B = 2, LB_L = 5 };

static double loss_of(tfm_module *m, const int32_t *ids,
                      const int32_t *targets, float smoothing)
{
    tfm_tensor *lg = make3(LB_B, LB_L, LB_V, NULL);
    float l = 0;
    assert_int_equal(tfm_model_logits(m, ids, LB_B, LB_L, lg), TFM_OK);
    assert_int_equal(tfm_cross_entropy(lg, targets, TFM_IGNORE_INDEX,
                                       smoothing, TFM_REDUCTION_MEAN, &l,
                                       NULL), TFM_OK);
    tfm_tensor_free(lg);
    return l;
}

static void check_loss_backward(tfm_architecture arch)
{
    tfm_model_config mc = tiny_model_config(
        arch, tfm_layer_config_default(4, 2), LB_V, 2, LB_L);
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create(&mc, &m), TFM_OK);
    tfm_rng rng;
    tfm_rng_seed(&rng, 11);
    assert_int_equal(tfm_module_reset_parameters(m, &rng), TFM_OK);
    const int32_t ids[LB_B * LB_L] = { 1, 2, 6, 0, 3, 5, 5, 4, 1, 2 };
    const int32_t targets[LB_B * LB_L] = { 2, 6, 0, 3, TFM_IGNORE_INDEX,
                                           5, 4, 1, 2, TFM_IGNORE_INDEX };
    float untouched = 42.0f;   /* no gradient memory before training mode */
    assert_int_equal(tfm_model_loss_backward(m, ids, LB_B, LB_L, targets,
                                             TFM_IGNORE_INDEX, 0.0f,
                                             TFM_REDUCTION_MEAN, 1.0f,
                                             &untouched),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_float_equal(untouched, 42.0f, 0);
    assert_int_equal(tfm_module_train(m, 1), TFM_OK);
    const float smoothing = 0.1f, scale = 0.5f;

    /* The two-call path's gradients. */
    tfm_tensor *lg = make3(LB_B, LB_L, LB_V, NULL);
    tfm_tensor *dl = make3(LB_B, LB_L, LB_V, NULL);
    float want_loss = 0;
    assert_int_equal(tfm_model_logits(m, ids, LB_B, LB_L, lg), TFM_OK);
    assert_int_equal(tfm_cross_entropy(lg, targets, TFM_IGNORE_INDEX,
                                       smoothing, TFM_REDUCTION_MEAN,
                                       &want_loss, dl), TFM_OK);
    float *d = tfm_tensor_data(dl);
    for (int i = 0; i < LB_B * LB_L * LB_V; i++)
        d[i] *= scale;
    assert_int_equal(tfm_model_backward(m, ids, LB_B, LB_L, dl), TFM_OK);
    const int np = tfm_module_parameter_count(m);
    float *want[32];
    int64_t count[32];
    assert_true(np <= 32);
    for (int p = 0; p < np; p++) {
        const char *name = tfm_module_parameter_name(m, p);
        float *g = grad_of(m, name);
        int rank = 0;
        int64_t shape[TFM_MAX_RANK];
        assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape),
                         TFM_OK);
        count[p] = 1;
        for (int r = 0; r < rank; r++)
            count[p] *= shape[r];
        want[p] = malloc((size_t)count[p] * sizeof(float));
        memcpy(want[p], g, (size_t)count[p] * sizeof(float));
    }
    assert_int_equal(tfm_module_zero_grad(m), TFM_OK);

    float loss = -1;
    assert_int_equal(tfm_model_loss_backward(m, ids, LB_B, LB_L, targets,
                                             TFM_IGNORE_INDEX, smoothing,
                                             TFM_REDUCTION_MEAN, scale,
                                             &loss), TFM_OK);
    assert_float_equal(loss, want_loss, 1e-6 * fabs(want_loss));
    for (int p = 0; p < np; p++) {
        const float *g = grad_of(m, tfm_module_parameter_name(m, p));
        double top = 0;
        for (int64_t i = 0; i < count[p]; i++)
            top = fmax(top, fabs(want[p][i]));
        for (int64_t i = 0; i < count[p]; i++)
            if (fabs(g[i] - want[p][i]) > 1e-5 * top + 1e-9)
                fail_msg("%s[%lld]: %g, the two-call path %g",
                         tfm_module_parameter_name(m, p), (long long)i,
                         (double)g[i], (double)want[p][i]);
    }
    /* Finite differences of the loss for a few entries of each of three
     * parameters: grad = scale * d loss / d w. */
    const char *probe[3] = { "token_embedding.weight",
                             "layers.0.linear1.weight", "norm.weight" };
    for (int k = 0; k < 3; k++) {
        float *w = NULL;
        assert_int_equal(tfm_module_parameter_data(m, probe[k], &w), TFM_OK);
        const float *g = grad_of(m, probe[k]);
        int rank = 0;
        int64_t shape[TFM_MAX_RANK], n = 1;
        assert_int_equal(tfm_module_parameter_shape(m, probe[k], &rank,
                                                    shape), TFM_OK);
        for (int r = 0; r < rank; r++)
            n *= shape[r];
        for (int64_t i = 0; i < n; i += 5) {
            const float w0 = w[i], eps = 1e-2f;
            w[i] = w0 + eps;
            const double up = loss_of(m, ids, targets, smoothing);
            w[i] = w0 - eps;
            const double down = loss_of(m, ids, targets, smoothing);
            w[i] = w0;
            const double fd = scale * (up - down) / (2 * eps);
            if (fabs(fd - g[i]) > 2e-3 * fmax(1.0, fabs(fd)))
                fail_msg("%s[%lld]: gradient %g, finite differences %g",
                         probe[k], (long long)i, (double)g[i], fd);
        }
    }

    /* Refusals: nothing written. */
    assert_int_equal(tfm_module_zero_grad(m), TFM_OK);
    loss = 42.0f;
    const int32_t bad[LB_B * LB_L] = { 2, 6, 0, 3, 7, 5, 4, 1, 2, 0 };
    assert_int_equal(tfm_model_loss_backward(m, ids, LB_B, LB_L, bad,
                                             TFM_IGNORE_INDEX, 0.0f,
                                             TFM_REDUCTION_MEAN, 1.0f, &loss),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_model_loss_backward(m, ids, LB_B, LB_L, NULL,
                                             TFM_IGNORE_INDEX, 0.0f,
                                             TFM_REDUCTION_MEAN, 1.0f, &loss),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_model_loss_backward(m, ids, LB_B, LB_L, targets,
                                             TFM_IGNORE_INDEX, 0.0f,
                                             TFM_REDUCTION_MEAN, NAN, &loss),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_model_loss_backward(m, ids, LB_B, LB_L, targets,
                                             TFM_IGNORE_INDEX, 1.5f,
                                             TFM_REDUCTION_MEAN, 1.0f, &loss),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_model_loss_backward(m, ids, LB_B, LB_L + 1, targets,
                                             TFM_IGNORE_INDEX, 0.0f,
                                             TFM_REDUCTION_MEAN, 1.0f, &loss),
                     TFM_ERR_CAPACITY);
    /* A NaN parameter: non-finite logits, refused before any gradient. */
    float *nw = NULL;
    assert_int_equal(tfm_module_parameter_data(m, "norm.bias", &nw), TFM_OK);
    nw[0] = NAN;
    assert_int_equal(tfm_model_loss_backward(m, ids, LB_B, LB_L, targets,
                                             TFM_IGNORE_INDEX, 0.0f,
                                             TFM_REDUCTION_MEAN, 1.0f, &loss),
                     TFM_ERR_NON_FINITE);
    nw[0] = 0.0f;
    assert_float_equal(loss, 42.0f, 0);
    for (int p = 0; p < np; p++) {
        const float *g = grad_of(m, tfm_module_parameter_name(m, p));
        for (int64_t i = 0; i < count[p]; i++)
            assert_float_equal(g[i], 0.0f, 0);
        free(want[p]);
    }
    tfm_tensor_free(lg);
    tfm_tensor_free(dl);
    tfm_module_free(m);
}

static void test_model_loss_backward(void **state)
{
    (void)state;
    check_loss_backward(TFM_ARCH_DECODER_ONLY);
    check_loss_backward(TFM_ARCH_ENCODER_ONLY);
    tfm_model_config ec = tiny_model_config(
        TFM_ARCH_ENCODER_DECODER, tfm_layer_config_default(4, 2), 7, 1, 5);
    ec.n_encoder_layers = ec.n_decoder_layers = 1;
    tfm_module *s2s = NULL;
    assert_int_equal(tfm_model_create(&ec, &s2s), TFM_OK);
    assert_int_equal(tfm_module_train(s2s, 1), TFM_OK);
    const int32_t ids[3] = { 1, 2, 3 };
    float loss;
    assert_int_equal(tfm_model_loss_backward(s2s, ids, 1, 3, ids,
                                             TFM_IGNORE_INDEX, 0.0f,
                                             TFM_REDUCTION_MEAN, 1.0f, &loss),
                     TFM_ERR_WRONG_KIND);
    tfm_module_free(s2s);
    assert_int_equal(tfm_model_loss_backward(NULL, ids, 1, 3, ids,
                                             TFM_IGNORE_INDEX, 0.0f,
                                             TFM_REDUCTION_MEAN, 1.0f, &loss),
                     TFM_ERR_NULL_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_by_hand),
        cmocka_unit_test(test_layer_norm_by_hand),
        cmocka_unit_test(test_busy_shared_gradients),
        cmocka_unit_test(test_feed_forward_by_hand),
        cmocka_unit_test(test_mha_by_hand),
        cmocka_unit_test(test_encoder_layer_finite_differences),
        cmocka_unit_test(test_decoder_layer_finite_differences),
        cmocka_unit_test(test_cross_attention_finite_differences),
        cmocka_unit_test(test_mha_variants_finite_differences),
        cmocka_unit_test(test_stack_backward_refusals),
        cmocka_unit_test(test_model_backward_refusals),
        cmocka_unit_test(test_model_loss_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
