/* Dropout (module.h, "Dropout"): black-box, every expectation from the
 * header's contract or worked by hand.  The masks themselves are checked
 * against torch.autograd in bindings/python/tests/test_dropout.py.
 *   - probability and stream setters: errors, recursion into children;
 *   - evaluation mode and p = 0 give the evaluation forward bit for bit;
 *   - p = 1 drops every hidden activation of a feed-forward network, so
 *     its output is linear2's bias in every row (by hand:
 *     linear2(0 * act(linear1 x)) = b2), and its backward gives zero input
 *     gradient and linear1 no gradient while linear2's bias gets the sum
 *     of grad_output;
 *   - a training-mode call draws one key (offset + 1) and the backward
 *     differentiates that forward: two calls from the same (seed, offset)
 *     are the same bits, the next call differs. */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include <transformer/transformer.h>

static void test_setters(void **state)
{
    (void)state;
    tfm_module *layer = NULL;
    tfm_layer_config c = tfm_layer_config_default(8, 2);
    c.d_ff = 16;
    assert_int_equal(tfm_encoder_layer_create(&c, &layer), TFM_OK);
    assert_true(tfm_module_get_dropout(layer) == 0.0f);
    assert_int_equal(tfm_module_set_dropout(NULL, 0.1f),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_set_dropout(layer, -0.5f),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_set_dropout(layer, NAN),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_set_dropout(layer, 1.01f),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_true(tfm_module_get_dropout(layer) == 0.0f);
    assert_int_equal(tfm_module_set_dropout(layer, 0.25f), TFM_OK);
    tfm_module *sa = NULL;
    assert_int_equal(tfm_module_child(layer, "self_attn", &sa), TFM_OK);
    assert_true(tfm_module_get_dropout(layer) == 0.25f);
    assert_true(tfm_module_get_dropout(sa) == 0.25f);
    assert_true(tfm_module_get_dropout(NULL) == 0.0f);

    uint64_t seed = 1, offset = 1;
    assert_int_equal(tfm_module_get_dropout_state(layer, &seed, &offset),
                     TFM_OK);
    assert_true(seed == 0 && offset == 0);
    assert_int_equal(tfm_module_set_dropout_state(layer, 42, 7), TFM_OK);
    assert_int_equal(tfm_module_get_dropout_state(sa, &seed, &offset),
                     TFM_OK);
    assert_true(seed == 42 && offset == 7);
    assert_int_equal(tfm_module_get_dropout_state(layer, NULL, &offset),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_set_dropout_state(NULL, 1, 1),
                     TFM_ERR_NULL_ARGUMENT);
    tfm_module_free(layer);
}

static void fill_sin(float *x, int64_t n, float a)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = sinf(a * (float)(i + 1));
}

/* The feed-forward network at p = 1, and p = 0 / evaluation mode. */
static void test_feed_forward_extremes(void **state)
{
    (void)state;
    enum { B = 2, L = 3, D = 4, F = 6 };
    tfm_module *ff = NULL;
    assert_int_equal(tfm_feed_forward_create(D, F, TFM_ACTIVATION_RELU, &ff),
                     TFM_OK);
    float b2[D] = { 0.5f, -1.25f, 2.0f, 0.0f };
    tfm_tensor *tb2 = NULL;
    assert_int_equal(tfm_tensor_wrap(1, (int64_t[]){ D }, b2, &tb2), TFM_OK);
    assert_int_equal(tfm_module_set_parameter(ff, "linear2.bias", tb2),
                     TFM_OK);
    float x[B * L * D], y_eval[B * L * D], y[B * L * D], g[B * L * D],
        gx[B * L * D];
    fill_sin(x, B * L * D, 0.7f);
    fill_sin(g, B * L * D, 1.3f);
    const int64_t shape[3] = { B, L, D };
    tfm_tensor *tx = NULL, *ty = NULL, *tg = NULL, *tgx = NULL;
    assert_int_equal(tfm_tensor_wrap(3, shape, x, &tx), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, y, &ty), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, g, &tg), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, gx, &tgx), TFM_OK);

    tfm_tensor *te = NULL;
    assert_int_equal(tfm_tensor_wrap(3, shape, y_eval, &te), TFM_OK);
    assert_int_equal(tfm_feed_forward_forward(ff, tx, te), TFM_OK);
    /* p = 1 in evaluation mode: nothing dropped. */
    assert_int_equal(tfm_module_set_dropout(ff, 1.0f), TFM_OK);
    assert_int_equal(tfm_feed_forward_forward(ff, tx, ty), TFM_OK);
    assert_memory_equal(y, y_eval, sizeof y);
    /* Training mode, p = 0: the same bits. */
    assert_int_equal(tfm_module_train(ff, 1), TFM_OK);
    assert_int_equal(tfm_module_set_dropout(ff, 0.0f), TFM_OK);
    assert_int_equal(tfm_feed_forward_forward(ff, tx, ty), TFM_OK);
    assert_memory_equal(y, y_eval, sizeof y);

    /* Training mode, p = 1: every row is b2. */
    assert_int_equal(tfm_module_set_dropout(ff, 1.0f), TFM_OK);
    assert_int_equal(tfm_feed_forward_forward(ff, tx, ty), TFM_OK);
    for (int64_t r = 0; r < B * L; r++)
        for (int c = 0; c < D; c++)
            assert_true(y[r * D + c] == b2[c]);
    assert_int_equal(tfm_feed_forward_backward(ff, tx, tg, tgx), TFM_OK);
    for (int i = 0; i < B * L * D; i++)
        assert_true(gx[i] == 0.0f);
    float *gw1 = NULL, *gb1 = NULL, *gw2 = NULL, *gb2 = NULL;
    assert_int_equal(tfm_module_grad(ff, "linear1.weight", &gw1), TFM_OK);
    assert_int_equal(tfm_module_grad(ff, "linear1.bias", &gb1), TFM_OK);
    assert_int_equal(tfm_module_grad(ff, "linear2.weight", &gw2), TFM_OK);
    assert_int_equal(tfm_module_grad(ff, "linear2.bias", &gb2), TFM_OK);
    for (int i = 0; i < F * D; i++)
        assert_true(gw1[i] == 0.0f && gw2[i] == 0.0f);
    for (int i = 0; i < F; i++)
        assert_true(gb1[i] == 0.0f);
    for (int c = 0; c < D; c++) {
        double s = 0.0;
        for (int64_t r = 0; r < B * L; r++)
            s += g[r * D + c];
        assert_float_equal(gb2[c], s, 1e-5);
    }
    tfm_tensor_free(tx), tfm_tensor_free(ty), tfm_tensor_free(tg);
    tfm_tensor_free(tgx), tfm_tensor_free(te), tfm_tensor_free(tb2);
    tfm_module_free(ff);
}

/* The stream: each training-mode forward draws one key; the same state
 * repeats the same bits; the backward uses the latest forward's key. */
static void test_stream_repeats(void **state)
{
    (void)state;
    enum { B = 2, L = 9, D = 8 };
    tfm_layer_config c = tfm_layer_config_default(D, 2);
    c.d_ff = 16;
    tfm_module *layer = NULL;
    assert_int_equal(tfm_encoder_layer_create(&c, &layer), TFM_OK);
    tfm_rng rng;
    tfm_rng_seed(&rng, 3);
    assert_int_equal(tfm_module_reset_parameters(layer, &rng), TFM_OK);
    assert_int_equal(tfm_module_set_dropout(layer, 0.5f), TFM_OK);
    assert_int_equal(tfm_module_train(layer, 1), TFM_OK);
    float x[B * L * D], a[B * L * D], b[B * L * D], e[B * L * D],
        g[B * L * D], ga[B * L * D], gb[B * L * D];
    fill_sin(x, B * L * D, 0.3f);
    fill_sin(g, B * L * D, 0.9f);
    const int64_t shape[3] = { B, L, D };
    tfm_tensor *tx, *ta, *tb, *te, *tg, *tga, *tgb;
    assert_int_equal(tfm_tensor_wrap(3, shape, x, &tx), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, a, &ta), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, b, &tb), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, e, &te), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, g, &tg), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, ga, &tga), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(3, shape, gb, &tgb), TFM_OK);

    assert_int_equal(tfm_module_set_dropout_state(layer, 5, 0), TFM_OK);
    assert_int_equal(tfm_encoder_layer_forward(layer, tx, NULL, ta), TFM_OK);
    assert_int_equal(tfm_encoder_layer_backward(layer, tx, NULL, tg, tga),
                     TFM_OK);
    uint64_t seed = 0, offset = 0;
    assert_int_equal(tfm_module_get_dropout_state(layer, &seed, &offset),
                     TFM_OK);
    assert_true(seed == 5 && offset == 1);  /* the backward drew nothing */
    assert_int_equal(tfm_encoder_layer_forward(layer, tx, NULL, tb), TFM_OK);
    assert_true(memcmp(a, b, sizeof a) != 0);
    /* From the same state: the same forward and the same backward. */
    assert_int_equal(tfm_module_set_dropout_state(layer, 5, 0), TFM_OK);
    assert_int_equal(tfm_encoder_layer_forward(layer, tx, NULL, tb), TFM_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(tfm_encoder_layer_backward(layer, tx, NULL, tg, tgb),
                     TFM_OK);
    assert_memory_equal(ga, gb, sizeof ga);
    /* Evaluation mode: the plain forward, which differs. */
    assert_int_equal(tfm_module_train(layer, 0), TFM_OK);
    assert_int_equal(tfm_encoder_layer_forward(layer, tx, NULL, te), TFM_OK);
    assert_true(memcmp(a, e, sizeof a) != 0);
    assert_int_equal(tfm_module_set_dropout(layer, 0.0f), TFM_OK);
    assert_int_equal(tfm_module_train(layer, 1), TFM_OK);
    assert_int_equal(tfm_encoder_layer_forward(layer, tx, NULL, tb), TFM_OK);
    assert_memory_equal(b, e, sizeof b);
    tfm_tensor_free(tx), tfm_tensor_free(ta), tfm_tensor_free(tb);
    tfm_tensor_free(te), tfm_tensor_free(tg), tfm_tensor_free(tga);
    tfm_tensor_free(tgb);
    tfm_module_free(layer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setters),
        cmocka_unit_test(test_feed_forward_extremes),
        cmocka_unit_test(test_stream_repeats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
