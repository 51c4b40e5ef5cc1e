/*
 * Multi-head attention's extra key/value rows (attention.h, since 1.2):
 * tfm_mha_create_v2 with PyTorch's add_bias_kv and add_zero_attn, and
 * tfm_mha_forward_v2 with F.multi_head_attention_forward's static_k /
 * static_v.  PyTorch 1.13 references for random shapes and masks are the
 * fixtures mha_bias_kv*, mha_zero_attn, mha_static_* (tools/
 * make_fixtures.py, run by test_fixtures); here: closed forms worked out
 * by hand, parameter tables, the initialisation of bias_k / bias_v, and
 * every refusal (status, message, outputs untouched).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include <transformer/attention.h>
#include <transformer/model.h>
#include <transformer/module.h>
#include <transformer/tensor.h>

#include "test_util.h"

/* d = 2, one head, identity projections, no biases, add_bias_kv and
 * add_zero_attn, bias_k = [0, 1], bias_v = [3, 5]. */
static tfm_module *identity_module(int bias_kv, int zero_attn)
{
    tfm_mha_options o;
    tfm_mha_options_init(&o);
    o.bias = 0;
    o.add_bias_kv = bias_kv;
    o.add_zero_attn = zero_attn;
    tfm_module *m = NULL;
    assert_int_equal(tfm_mha_create_v2(2, 1, &o, &m), TFM_OK);
    const float ip[12] = { 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1 };
    const float op[4] = { 1, 0, 0, 1 };
    set_param(m, "in_proj_weight", 2, (const int64_t[]){ 6, 2 }, ip);
    set_param(m, "out_proj.weight", 2, (const int64_t[]){ 2, 2 }, op);
    if (bias_kv) {
        set_param(m, "bias_k", 3, (const int64_t[]){ 1, 1, 2 },
                  (const float[]){ 0, 1 });
        set_param(m, "bias_v", 3, (const int64_t[]){ 1, 1, 2 },
                  (const float[]){ 3, 5 });
    }
    return m;
}

/* x = [[2, 0]] attends to itself (logit 2*2/sqrt(2) = 2 sqrt(2)), to
 * bias_k (q . [0, 1] = 0, logit 0) and to the zero row (logit 0):
 *   w = [e^{2 sqrt 2}, 1, 1] / (e^{2 sqrt 2} + 2),
 *   out = w0 [2, 0] + w1 [3, 5] + w2 [0, 0]. */
static void test_bias_kv_and_zero_attn_by_hand(void **state)
{
    (void)state;
    tfm_module *m = identity_module(1, 1);
    tfm_tensor *x = make3(1, 1, 2, (const float[]){ 2, 0 });
    tfm_tensor *out = make3(1, 1, 2, NULL);
    tfm_tensor *w = make4(1, 1, 1, 3, NULL);
    assert_int_equal(tfm_mha_forward(m, x, x, x, NULL, out, w), TFM_OK);
    const double e = exp(2.0 * sqrt(2.0)), z = e + 2.0;
    EXPECT_VALUES(w, 1e-6, e / z, 1.0 / z, 1.0 / z);
    EXPECT_VALUES(out, 1e-6, 2.0 * e / z + 3.0 / z, 5.0 / z);

    /* key 0 padded out: the two extra keys share the weight (PyTorch pads
     * key_padding_mask with False for them): out = [1.5, 2.5]. */
    tfm_tensor *pad = make2(1, 1, (const float[]){ 1 });
    tfm_attention_masks mk = { .key_padding_mask = pad };
    assert_int_equal(tfm_mha_forward(m, x, x, x, &mk, out, w), TFM_OK);
    EXPECT_VALUES(w, 1e-7, 0.0, 0.5, 0.5);
    EXPECT_VALUES(out, 1e-6, 1.5, 2.5);

    /* The same through an ALLOW mask (0 = may not attend): the extra keys
     * stay visible (padded with 1). */
    tfm_tensor *allow = make2(1, 1, (const float[]){ 0 });
    tfm_attention_masks mk2 = { .attn_mask = allow,
                                .attn_mask_kind = TFM_MASK_ALLOW };
    assert_int_equal(tfm_mha_forward(m, x, x, x, &mk2, out, w), TFM_OK);
    EXPECT_VALUES(w, 1e-7, 0.0, 0.5, 0.5);
    FREE_TENSORS(x, out, w, pad, allow);
    tfm_module_free(m);
}

/* A causal mode masks only among the S keys: with L = 2 queries x0 =
 * [0, 0], x1 = [0, 0] (all logits 0) over S = 2 keys, top-left causal,
 * and add_zero_attn only, query 0 sees key 0 and the zero row (1/2 each),
 * query 1 sees keys 0, 1 and the zero row (1/3 each). */
static void test_causal_masks_only_the_real_keys(void **state)
{
    (void)state;
    tfm_module *m = identity_module(0, 1);
    tfm_tensor *x = make3(1, 2, 2, (const float[]){ 0, 0, 0, 0 });
    tfm_tensor *v = make3(1, 2, 2, (const float[]){ 6, 0, 0, 6 });
    tfm_tensor *out = make3(1, 2, 2, NULL);
    tfm_tensor *w = make3(1, 2, 3, NULL);
    tfm_attention_masks mk = { .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_mha_forward(m, x, x, v, &mk, out, w), TFM_OK);
    EXPECT_VALUES(w, 1e-7, 0.5, 0.0, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3);
    /* out0 = [6, 0] / 2, out1 = ([6, 0] + [0, 6]) / 3 */
    EXPECT_VALUES(out, 1e-6, 3.0, 0.0, 2.0, 2.0);
    FREE_TENSORS(x, v, out, w);
    tfm_module_free(m);
}

/* static_k / static_v replace the projections: with identity projections
 * and static rows equal to the projected ones the result is
 * tfm_mha_forward's, bit for bit (both asked for weights: the kernel
 * takes another path without them); key and value may then be NULL. */
static void test_static_equals_projection(void **state)
{
    (void)state;
    tfm_module *m = identity_module(0, 0);
    lcg_seed(7);
    tfm_tensor *q = lcg_fill(make3(2, 3, 2, NULL));
    tfm_tensor *kv = lcg_fill(make3(2, 4, 2, NULL));
    /* [B, S, d] rows with one head are [B, 1, S, d_k] */
    tfm_tensor *sk = make4(2, 1, 4, 2, tfm_tensor_data_const(kv));
    tfm_tensor *a = make3(2, 3, 2, NULL), *b = make3(2, 3, 2, NULL);
    tfm_tensor *wa = make4(2, 1, 3, 4, NULL), *wb = make4(2, 1, 3, 4, NULL);
    assert_int_equal(tfm_mha_forward(m, q, kv, kv, NULL, a, wa), TFM_OK);
    assert_int_equal(tfm_mha_forward_v2(m, q, NULL, NULL, sk, sk, NULL, b,
                                        wb), TFM_OK);
    expect_bit_identical(a, b, "static_k and static_v");
    expect_bit_identical(wa, wb, "their weights");
    fill(b, 0.0f);
    assert_int_equal(tfm_mha_forward_v2(m, q, kv, kv, NULL, NULL, NULL, b,
                                        wb), TFM_OK);
    expect_bit_identical(a, b, "forward_v2 without statics");
    FREE_TENSORS(q, kv, sk, a, b, wa, wb);
    tfm_module_free(m);
}

/* PyTorch's state_dict order: in_proj_weight, in_proj_bias, bias_k,
 * bias_v, out_proj.weight, out_proj.bias. */
static void test_parameters(void **state)
{
    (void)state;
    tfm_mha_options o;
    tfm_mha_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    assert_int_equal(o.bias, 1);
    assert_int_equal(o.add_bias_kv, 0);
    assert_int_equal(o.add_zero_attn, 0);
    assert_null(o.attention);
    o.add_bias_kv = 1;
    tfm_module *m = NULL;
    assert_int_equal(tfm_mha_create_v2(8, 2, &o, &m), TFM_OK);
    static const char *names[] = { "in_proj_weight", "in_proj_bias",
                                   "bias_k", "bias_v", "out_proj.weight",
                                   "out_proj.bias" };
    assert_int_equal(tfm_module_parameter_count(m), 6);
    for (int i = 0; i < 6; i++)
        assert_string_equal(tfm_module_parameter_name(m, i), names[i]);
    int rank = 0;
    int64_t shape[TFM_MAX_RANK];
    assert_int_equal(tfm_module_parameter_shape(m, "bias_k", &rank, shape),
                     TFM_OK);
    assert_int_equal(rank, 3);
    assert_int_equal(shape[0], 1);
    assert_int_equal(shape[1], 1);
    assert_int_equal(shape[2], 8);
    tfm_module_free(m);

    /* NULL options: tfm_mha_create(d, h, 0, 0, 1) */
    assert_int_equal(tfm_mha_create_v2(8, 2, NULL, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 4);
    assert_string_equal(tfm_module_parameter_name(m, 2), "out_proj.weight");
    tfm_module_free(m);

    /* add_zero_attn has no parameter */
    tfm_mha_options_init(&o);
    o.add_zero_attn = 1;
    o.bias = 0;
    assert_int_equal(tfm_mha_create_v2(8, 2, &o, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 2);
    tfm_module_free(m);
}

/* reset_parameters draws bias_k and bias_v as torch's xavier_normal_ on
 * [1, 1, E]: fan_in = fan_out = E, std = sqrt(2 / 2E) = 1 / sqrt(E).
 * E = 1024: the mean square of 1024 draws is 1/E within 6 standard
 * errors (sqrt(2/1024) relative), the mean 0 within 6 / sqrt(E) std. */
static void test_bias_kv_initialisation(void **state)
{
    (void)state;
    enum { E = 1024 };
    tfm_mha_options o;
    tfm_mha_options_init(&o);
    o.add_bias_kv = 1;
    tfm_module *m = NULL;
    assert_int_equal(tfm_mha_create_v2(E, 4, &o, &m), TFM_OK);
    tfm_rng rng;
    tfm_rng_seed(&rng, 3);
    assert_int_equal(tfm_module_reset_parameters(m, &rng), TFM_OK);
    tfm_tensor *t = make3(1, 1, E, NULL);
    const char *names[2] = { "bias_k", "bias_v" };
    for (int p = 0; p < 2; p++) {
        assert_int_equal(tfm_module_get_parameter(m, names[p], t), TFM_OK);
        const float *x = tfm_tensor_data_const(t);
        double sum = 0.0, sq = 0.0;
        for (int i = 0; i < E; i++)
            sum += x[i], sq += (double)x[i] * x[i];
        const double var = 1.0 / E;
        NEAR(sq / E, var, 6.0 * sqrt(2.0 / E) * var);
        NEAR(sum / E, 0.0, 6.0 * sqrt(var / E));
    }
    FREE_TENSORS(t);
    tfm_module_free(m);
}

static void test_create_refusals(void **state)
{
    (void)state;
    tfm_mha_options o;
    tfm_mha_options_init(&o);
    tfm_module *m = SENTINEL_MODULE;
    o.struct_size = 4;
    assert_int_equal(tfm_mha_create_v2(8, 2, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "struct_size"));
    assert_ptr_equal(m, SENTINEL_MODULE);

    /* extra rows have no position: refused with RoPE, ALiBi, windows */
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.rope = TFM_ROPE_HALF;
    tfm_mha_options_init(&o);
    o.attention = &c;
    o.add_zero_attn = 1;
    assert_int_equal(tfm_mha_create_v2(8, 2, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "add_zero_attn"));
    assert_ptr_equal(m, SENTINEL_MODULE);
    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_ALIBI;
    o.add_zero_attn = 0;
    o.add_bias_kv = 1;
    assert_int_equal(tfm_mha_create_v2(8, 2, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(m, SENTINEL_MODULE);

    /* a variant without positions is fine (grouped-query heads: bias_k
     * has n_kv_heads * d_k = 4 columns) */
    tfm_attention_config_init(&c);
    c.n_kv_heads = 1;
    assert_int_equal(tfm_mha_create_v2(8, 2, &o, &m), TFM_OK);
    int rank = 0;
    int64_t shape[TFM_MAX_RANK];
    assert_int_equal(tfm_module_parameter_shape(m, "bias_v", &rank, shape),
                     TFM_OK);
    assert_int_equal(shape[2], 4);
    tfm_module_free(m);

    /* the usual argument checks still apply */
    tfm_mha_options_init(&o);
    m = SENTINEL_MODULE;
    assert_int_equal(tfm_mha_create_v2(8, 3, &o, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_mha_create_v2(8, 2, &o, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(m, SENTINEL_MODULE);
}

static void test_forward_refusals(void **state)
{
    (void)state;
    tfm_module *bkv = identity_module(1, 0), *plain = identity_module(0, 0);
    tfm_tensor *x = make3(1, 3, 2, NULL);
    tfm_tensor *sk = make4(1, 1, 3, 2, NULL);
    tfm_tensor *out = make3(1, 3, 2, NULL);
    tfm_tensor *w_s = make4(1, 1, 3, 3, NULL);   /* S columns, not S + 1 */
    tfm_tensor *w_ok = make3(1, 3, 4, NULL);
    lcg_seed(3);
    lcg_fill(x);
    tfm_status st;

    /* static rows with add_bias_kv (PyTorch: "bias cannot be added to
     * static key") */
    arm_failing_call(out, NULL);
    st = tfm_mha_forward_v2(bkv, x, x, x, sk, NULL, NULL, out, NULL);
    expect_failed_call(st, TFM_ERR_INVALID_ARGUMENT, out, NULL, "add_bias_kv",
                       __LINE__);
    /* weights must have the extra column */
    arm_failing_call(out, w_s);
    st = tfm_mha_forward(bkv, x, x, x, NULL, out, w_s);
    expect_failed_call(st, TFM_ERR_SHAPE, out, w_s, "weights", __LINE__);
    assert_int_equal(tfm_mha_forward(bkv, x, x, x, NULL, out, w_ok), TFM_OK);

    /* static_k of the wrong shape, a NULL key without static_k */
    tfm_tensor *bad = make4(1, 2, 3, 1, NULL);
    arm_failing_call(out, NULL);
    st = tfm_mha_forward_v2(plain, x, NULL, x, bad, NULL, NULL, out, NULL);
    expect_failed_call(st, TFM_ERR_SHAPE, out, NULL, "static_k", __LINE__);
    arm_failing_call(out, NULL);
    st = tfm_mha_forward_v2(plain, x, NULL, x, NULL, sk, NULL, out, NULL);
    expect_failed_call(st, TFM_ERR_NULL_ARGUMENT, out, NULL, "key", __LINE__);
    /* a projected value must have static_k's rows */
    tfm_tensor *v4 = make3(1, 4, 2, NULL);
    arm_failing_call(out, NULL);
    st = tfm_mha_forward_v2(plain, x, NULL, v4, sk, NULL, NULL, out, NULL);
    expect_failed_call(st, TFM_ERR_SHAPE, out, NULL, "value", __LINE__);
    /* a key padding mask is over the static rows */
    tfm_tensor *kp4 = make2(1, 4, NULL);
    tfm_attention_masks mk = { .key_padding_mask = kp4 };
    arm_failing_call(out, NULL);
    st = tfm_mha_forward_v2(plain, x, NULL, NULL, sk, sk, &mk, out, NULL);
    expect_failed_call(st, TFM_ERR_SHAPE, out, NULL, "key_padding_mask",
                       __LINE__);

    /* static rows with a positional variant */
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.rope = TFM_ROPE_ADJACENT;
    tfm_module *rope = NULL;
    assert_int_equal(tfm_mha_create_ex(2, 1, 0, 0, 1, &c, &rope), TFM_OK);
    arm_failing_call(out, NULL);
    st = tfm_mha_forward_v2(rope, x, x, NULL, NULL, sk, NULL, out, NULL);
    expect_failed_call(st, TFM_ERR_INVALID_ARGUMENT, out, NULL, "static_k",
                       __LINE__);
    FREE_TENSORS(x, sk, out, w_s, w_ok, bad, v4, kp4);
    tfm_module_free(bkv);
    tfm_module_free(plain);
    tfm_module_free(rope);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bias_kv_and_zero_attn_by_hand),
        cmocka_unit_test(test_causal_masks_only_the_real_keys),
        cmocka_unit_test(test_static_equals_projection),
        cmocka_unit_test(test_parameters),
        cmocka_unit_test(test_bias_kv_initialisation),
        cmocka_unit_test(test_create_refusals),
        cmocka_unit_test(test_forward_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
