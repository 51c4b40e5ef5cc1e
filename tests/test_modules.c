/*
 * Sub-modules (module.h: tfm_module_child) and the Linear module
 * (layers.h: tfm_linear_create), and ViT's patch embedding
 * (tfm_patch_embedding_create).
 *
 * Expected values: Linear's are worked out by hand in the comments.  The
 * sub-module cases check that a child is a view of its parent: a parameter
 * set through the child is the parent's (read back through the parent),
 * and a layer's forward pass equals the same computation written out with
 * its children's own forward functions (so a child computes with the
 * parent's weights, not a copy).  The layers' values themselves are checked
 * against PyTorch in test_layers.c and bindings/python/tests.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include <transformer/attention.h>
#include <transformer/layers.h>
#include <transformer/module.h>
#include <transformer/tensor.h>

#include "test_util.h"

/* ---- Linear ------------------------------------------------------------- */

/* W = [[1, 2], [3, 4], [5, 6]], b = [1, 0, -1]:
 *   x = [1, -1]     -> y = [1 - 2 + 1, 3 - 4 + 0, 5 - 6 - 1] = [0, -1, -2]
 *   x = [0.5, 2]    -> y = [0.5 + 4 + 1, 1.5 + 8, 2.5 + 12 - 1]
 *                        = [5.5, 9.5, 13.5]
 * Without bias: [-1, -1, -1] and [4.5, 9.5, 14.5]. */
static void test_linear_hand_worked(void **state)
{
    (void)state;
    tfm_module *lin = NULL;
    assert_int_equal(tfm_linear_create(2, 3, 1, &lin), TFM_OK);
    assert_int_equal(tfm_module_kind_of(lin), TFM_MODULE_LINEAR);
    assert_int_equal(tfm_module_parameter_count(lin), 2);
    assert_string_equal(tfm_module_parameter_name(lin, 0), "weight");
    assert_string_equal(tfm_module_parameter_name(lin, 1), "bias");
    assert_int_equal(tfm_module_num_parameters(lin), 9);
    assert_int_equal(tfm_module_child_count(lin), 0);
    tfm_tensor *w = make2(3, 2, (const float[]){ 1, 2, 3, 4, 5, 6 });
    tfm_tensor *b = make(1, (const int64_t[]){ 3 }, (const float[]){ 1, 0, -1 });
    assert_int_equal(tfm_module_set_parameter(lin, "weight", w), TFM_OK);
    assert_int_equal(tfm_module_set_parameter(lin, "bias", b), TFM_OK);
    /* rank 3: [1, 2, 2] -> [1, 2, 3] */
    tfm_tensor *x = make3(1, 2, 2, (const float[]){ 1, -1, 0.5f, 2 });
    tfm_tensor *y = make3(1, 2, 3, NULL);
    assert_int_equal(tfm_linear_forward(lin, x, y), TFM_OK);
    EXPECT_VALUES(y, 1e-7, 0, -1, -2, 5.5, 9.5, 13.5);
    /* rank 1 */
    tfm_tensor *x1 = make(1, (const int64_t[]){ 2 }, (const float[]){ 1, -1 });
    tfm_tensor *y1 = make(1, (const int64_t[]){ 3 }, NULL);
    assert_int_equal(tfm_linear_forward(lin, x1, y1), TFM_OK);
    EXPECT_VALUES(y1, 1e-7, 0, -1, -2);
    int64_t macs = 0;
    assert_int_equal(tfm_module_forward_macs(lin, 1, 2, 2, &macs), TFM_OK);
    assert_int_equal(macs, 2 * 2 * 3);   /* rows * in * out */

    tfm_module *nb = NULL;
    assert_int_equal(tfm_linear_create(2, 3, 0, &nb), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(nb), 1);
    assert_int_equal(tfm_module_set_parameter(nb, "weight", w), TFM_OK);
    assert_int_equal(tfm_module_set_parameter(nb, "bias", b), TFM_ERR_NOT_FOUND);
    assert_int_equal(tfm_linear_forward(nb, x, y), TFM_OK);
    EXPECT_VALUES(y, 1e-7, -1, -1, -1, 4.5, 9.5, 14.5);
    FREE_TENSORS(w, b, x, y, x1, y1);
    tfm_module_free(lin);
    tfm_module_free(nb);
}

static void test_linear_errors(void **state)
{
    (void)state;
    tfm_module *lin = SENTINEL_MODULE;
    assert_int_equal(tfm_linear_create(0, 3, 1, &lin), TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_linear_create(2, -1, 1, &lin),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_linear_create((int64_t)1 << 40, 3, 1, &lin),
                     TFM_ERR_OVERFLOW);
    assert_ptr_equal(lin, SENTINEL_MODULE);
    assert_int_equal(tfm_linear_create(2, 3, 1, NULL), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_linear_create(2, 3, 1, &lin), TFM_OK);
    tfm_module *norm = NULL;
    assert_int_equal(tfm_layer_norm_create(2, 1e-5f, &norm), TFM_OK);
    tfm_tensor *x = make2(4, 2, NULL), *y = make2(4, 3, NULL);
    tfm_tensor *bad = make2(4, 4, NULL), *x3 = make2(4, 3, NULL);
    fill(y, 7.0f);
    assert_int_equal(tfm_linear_forward(norm, x, y), TFM_ERR_WRONG_KIND);
    assert_int_equal(tfm_linear_forward(NULL, x, y), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_linear_forward(lin, NULL, y), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_linear_forward(lin, x, NULL), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_linear_forward(lin, x3, y), TFM_ERR_SHAPE);
    assert_int_equal(tfm_linear_forward(lin, x, bad), TFM_ERR_SHAPE);
    /* out over x: a [4, 3] output written where the input is read */
    tfm_tensor *view = NULL;
    assert_int_equal(tfm_tensor_wrap(2, (const int64_t[]){ 2, 3 },
                                     tfm_tensor_data(x), &view), TFM_OK);
    tfm_tensor *x2 = NULL;
    assert_int_equal(tfm_tensor_wrap(2, (const int64_t[]){ 2, 2 },
                                     tfm_tensor_data(x), &x2), TFM_OK);
    assert_int_equal(tfm_linear_forward(lin, x2, view),
                     TFM_ERR_INVALID_ARGUMENT);
    /* failed calls leave out untouched */
    for (int i = 0; i < 12; i++)
        assert_true(tfm_tensor_data(y)[i] == 7.0f);
    FREE_TENSORS(x, y, bad, x3, view, x2);
    tfm_module_free(lin);
    tfm_module_free(norm);
}

/* ---- sub-modules ------------------------------------------------------ */

static tfm_layer_config small_config(void)
{
    tfm_layer_config c = tfm_layer_config_default(4, 2);
    c.d_ff = 6;
    return c;
}

static void expect_children(const tfm_module *m, const char *const *names,
                            int n)
{
    assert_int_equal(tfm_module_child_count(m), n);
    for (int i = 0; i < n; i++)
        assert_string_equal(tfm_module_child_name(m, i), names[i]);
    assert_null(tfm_module_child_name(m, n));
    assert_null(tfm_module_child_name(m, -1));
}

static tfm_module *child(tfm_module *m, const char *name,
                         tfm_module_kind kind)
{
    tfm_module *c = NULL;
    assert_int_equal(tfm_module_child(m, name, &c), TFM_OK);
    assert_non_null(c);
    assert_int_equal(tfm_module_kind_of(c), kind);
    return c;
}

static void test_child_names_and_kinds(void **state)
{
    (void)state;
    tfm_layer_config c = small_config();
    tfm_module *enc = NULL, *dec = NULL, *stack = NULL, *model = NULL;
    tfm_module *mha = NULL, *ff = NULL;
    assert_int_equal(tfm_encoder_layer_create(&c, &enc), TFM_OK);
    assert_int_equal(tfm_decoder_layer_create(&c, &dec), TFM_OK);
    assert_int_equal(tfm_encoder_create(&c, 3, 1, &stack), TFM_OK);
    assert_int_equal(tfm_transformer_create(&c, 2, 1, &model), TFM_OK);
    assert_int_equal(tfm_mha_create(4, 2, 0, 0, 1, &mha), TFM_OK);
    assert_int_equal(tfm_feed_forward_create(4, 6, TFM_ACTIVATION_RELU, &ff),
                     TFM_OK);
    expect_children(enc, (const char *const[]){ "self_attn", "linear1",
                    "linear2", "norm1", "norm2" }, 5);
    expect_children(dec, (const char *const[]){ "self_attn",
                    "multihead_attn", "linear1", "linear2", "norm1", "norm2",
                    "norm3" }, 7);
    expect_children(stack, (const char *const[]){ "layers.0", "layers.1",
                    "layers.2", "norm" }, 4);
    expect_children(model, (const char *const[]){ "encoder", "decoder" }, 2);
    expect_children(mha, (const char *const[]){ "out_proj" }, 1);
    expect_children(ff, (const char *const[]){ "linear1", "linear2" }, 2);

    child(enc, "self_attn", TFM_MODULE_MHA);
    child(enc, "linear1", TFM_MODULE_LINEAR);
    child(enc, "norm2", TFM_MODULE_LAYER_NORM);
    child(enc, "self_attn.out_proj", TFM_MODULE_LINEAR);
    child(dec, "multihead_attn", TFM_MODULE_MHA);
    child(stack, "layers.2", TFM_MODULE_ENCODER_LAYER);
    child(stack, "layers.1.linear2", TFM_MODULE_LINEAR);
    child(model, "decoder", TFM_MODULE_DECODER);
    child(model, "encoder.norm", TFM_MODULE_LAYER_NORM);
    child(model, "decoder.layers.0.multihead_attn.out_proj",
          TFM_MODULE_LINEAR);
    /* the same name gives the same handle */
    tfm_module *a = child(stack, "layers.1", TFM_MODULE_ENCODER_LAYER);
    assert_ptr_equal(a, child(stack, "layers.1", TFM_MODULE_ENCODER_LAYER));

    /* a child's parameters are named as in PyTorch's sub-module */
    tfm_module *sa = child(enc, "self_attn", TFM_MODULE_MHA);
    assert_int_equal(tfm_module_parameter_count(sa), 4);
    assert_string_equal(tfm_module_parameter_name(sa, 0), "in_proj_weight");
    assert_string_equal(tfm_module_parameter_name(sa, 3), "out_proj.bias");
    tfm_module *l1 = child(enc, "linear1", TFM_MODULE_LINEAR);
    int rank;
    int64_t shape[TFM_MAX_RANK];
    assert_int_equal(tfm_module_parameter_shape(l1, "weight", &rank, shape),
                     TFM_OK);
    assert_int_equal(rank, 2);
    assert_int_equal(shape[0], 6);
    assert_int_equal(shape[1], 4);

    /* not found: *child unchanged */
    const char *missing[] = { "", "self_att", "self_attn.", "self_attn..",
                              ".self_attn", "linear3", "norm1.weight",
                              "self_attn.out_proj.x" };
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        tfm_module *out = SENTINEL_MODULE;
        assert_int_equal(tfm_module_child(enc, missing[i], &out),
                         TFM_ERR_NOT_FOUND);
        assert_ptr_equal(out, SENTINEL_MODULE);
    }
    const char *stack_missing[] = { "layers", "layers.3", "layers.1.",
                                    "layers.10", "layers.0.norm3" };
    for (size_t i = 0; i < sizeof stack_missing / sizeof *stack_missing;
         i++) {
        tfm_module *out = SENTINEL_MODULE;
        assert_int_equal(tfm_module_child(stack, stack_missing[i], &out),
                         TFM_ERR_NOT_FOUND);
        assert_ptr_equal(out, SENTINEL_MODULE);
    }
    tfm_module *out = NULL;
    assert_int_equal(tfm_module_child(NULL, "norm", &out),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_child(enc, NULL, &out), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_child(enc, "norm1", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_child_count(NULL), 0);
    assert_null(tfm_module_child_name(NULL, 0));

    /* freeing a child does nothing: the parent still works afterwards */
    tfm_module_free(sa);
    tfm_module_free(l1);
    tfm_module_free(child(model, "encoder", TFM_MODULE_ENCODER));
    tfm_tensor *x = make3(1, 3, 4, NULL), *y = make3(1, 3, 4, NULL);
    fill_random(x, 5);
    assert_int_equal(tfm_encoder_layer_forward(enc, x, NULL, y), TFM_OK);
    assert_int_equal(tfm_mha_forward(child(enc, "self_attn", TFM_MODULE_MHA),
                                     x, x, x, NULL, y, NULL), TFM_OK);
    FREE_TENSORS(x, y);

    tfm_module *leaves[] = { enc, dec, stack, model, mha, ff };
    for (size_t i = 0; i < sizeof leaves / sizeof *leaves; i++)
        tfm_module_free(leaves[i]);
}

/* Setting a parameter through a child sets the parent's, and the reverse;
 * the MHA's "out_proj" child has only a weight without bias. */
static void test_child_shares_parameters(void **state)
{
    (void)state;
    tfm_layer_config c = small_config();
    tfm_module *stack = NULL;
    assert_int_equal(tfm_encoder_create(&c, 2, 0, &stack), TFM_OK);
    tfm_module *l1 = child(stack, "layers.1.linear1", TFM_MODULE_LINEAR);
    tfm_tensor *w = make2(6, 4, NULL), *got = make2(6, 4, NULL);
    fill_random(w, 11);
    assert_int_equal(tfm_module_set_parameter(l1, "weight", w), TFM_OK);
    assert_int_equal(tfm_module_get_parameter(stack, "layers.1.linear1.weight",
                                              got), TFM_OK);
    assert_memory_equal(tfm_tensor_data(got), tfm_tensor_data(w),
                        24 * sizeof(float));
    /* the other layer is untouched (zero) */
    assert_int_equal(tfm_module_get_parameter(stack, "layers.0.linear1.weight",
                                              got), TFM_OK);
    for (int i = 0; i < 24; i++)
        assert_true(tfm_tensor_data(got)[i] == 0.0f);
    /* parent -> child */
    tfm_tensor *ob = make(1, (const int64_t[]){ 4 }, NULL), *ob2 = NULL;
    fill_random(ob, 12);
    ob2 = clone(ob);
    fill(ob2, 0.0f);
    assert_int_equal(tfm_module_set_parameter(
                         stack, "layers.0.self_attn.out_proj.bias", ob),
                     TFM_OK);
    tfm_module *op = child(stack, "layers.0.self_attn.out_proj",
                           TFM_MODULE_LINEAR);
    assert_int_equal(tfm_module_get_parameter(op, "bias", ob2), TFM_OK);
    assert_memory_equal(tfm_tensor_data(ob2), tfm_tensor_data(ob),
                        4 * sizeof(float));
    FREE_TENSORS(w, got, ob, ob2);
    tfm_module_free(stack);

    tfm_module *mha = NULL;
    assert_int_equal(tfm_mha_create(4, 2, 0, 0, 0, &mha), TFM_OK);
    op = child(mha, "out_proj", TFM_MODULE_LINEAR);
    assert_int_equal(tfm_module_parameter_count(op), 1);
    assert_string_equal(tfm_module_parameter_name(op, 0), "weight");
    tfm_module_free(mha);
}

static void relu(tfm_tensor *t)
{
    float *d = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        d[i] = d[i] > 0 ? d[i] : 0;
}

/* A post-norm encoder layer is norm2(h + linear2(relu(linear1(h)))) with
 * h = norm1(x + self_attn(x, x, x)): computed with the children's forward
 * functions after the weights were set through the parent, it gives the
 * layer's output (the children compute with the parent's weights). */
static void test_children_compose_the_layer(void **state)
{
    (void)state;
    tfm_layer_config c = small_config();
    tfm_module *enc = NULL;
    assert_int_equal(tfm_encoder_layer_create(&c, &enc), TFM_OK);
    randomize_params(enc, 3, 17);
    tfm_tensor *x = make3(2, 3, 4, NULL), *want = make3(2, 3, 4, NULL);
    fill_random(x, 9);
    assert_int_equal(tfm_encoder_layer_forward(enc, x, NULL, want), TFM_OK);

    tfm_tensor *a = make3(2, 3, 4, NULL), *h = make3(2, 3, 4, NULL);
    tfm_tensor *hid = make3(2, 3, 6, NULL), *f = make3(2, 3, 4, NULL);
    tfm_tensor *out = make3(2, 3, 4, NULL);
    assert_int_equal(tfm_mha_forward(child(enc, "self_attn", TFM_MODULE_MHA),
                                     x, x, x, NULL, a, NULL), TFM_OK);
    assert_int_equal(tfm_tensor_add(a, x), TFM_OK);
    assert_int_equal(tfm_layer_norm_forward(
                         child(enc, "norm1", TFM_MODULE_LAYER_NORM), a, h),
                     TFM_OK);
    assert_int_equal(tfm_linear_forward(
                         child(enc, "linear1", TFM_MODULE_LINEAR), h, hid),
                     TFM_OK);
    relu(hid);
    assert_int_equal(tfm_linear_forward(
                         child(enc, "linear2", TFM_MODULE_LINEAR), hid, f),
                     TFM_OK);
    assert_int_equal(tfm_tensor_add(f, h), TFM_OK);
    assert_int_equal(tfm_layer_norm_forward(
                         child(enc, "norm2", TFM_MODULE_LAYER_NORM), f, out),
                     TFM_OK);
    assert_true(rel_err(tfm_tensor_data(out), tfm_tensor_data(want), 24) <
                1e-5);

    /* Editing a child changes the parent's forward pass: doubling
     * linear2's bias through the child moves the output. */
    tfm_module *l2 = child(enc, "linear2", TFM_MODULE_LINEAR);
    tfm_tensor *b = make(1, (const int64_t[]){ 4 }, NULL);
    fill(b, 5.0f);
    assert_int_equal(tfm_module_set_parameter(l2, "bias", b), TFM_OK);
    tfm_tensor *after = make3(2, 3, 4, NULL);
    assert_int_equal(tfm_encoder_layer_forward(enc, x, NULL, after), TFM_OK);
    assert_true(rel_err(tfm_tensor_data(after), tfm_tensor_data(want), 24) >
                1e-3);
    FREE_TENSORS(x, want, a, h, hid, f, out, b, after);
    tfm_module_free(enc);
}

/* ---- Patch embedding (ViT) ---------------------------------------------- */

/* d 2, one channel, P 2, an image of 4 x 2 pixels
 *   x = [[1, 2], [3, 4], [5, 6], [7, 8]]
 * holds N = 2 patches (rows 0-1 and rows 2-3), unfolded as (u, v) =
 * (0,0), (0,1), (1,0), (1,1): [1, 2, 3, 4] and [5, 6, 7, 8].
 * weight[0] = [[1, 0], [0, 1]], weight[1] = [[0, 1], [-1, 0]], bias [1, -2]:
 *   patch 0: [1 + 4 + 1, 2 - 3 - 2] = [6, -3]
 *   patch 1: [5 + 8 + 1, 6 - 7 - 2] = [14, -3].
 * Backward with grad_output of ones: weight.grad[o] = [1+5, 2+6, 3+7, 4+8]
 * = [6, 8, 10, 12] for both o, bias.grad = [2, 2], and every patch's pixels
 * get weight[0] + weight[1] = [[1, 1], [-1, 1]]. */
static void test_patch_embedding_hand_worked(void **state)
{
    (void)state;
    tfm_module *pe = NULL;
    assert_int_equal(tfm_patch_embedding_create(2, 1, 2, 0, 1, &pe), TFM_OK);
    assert_int_equal(tfm_module_kind_of(pe), TFM_MODULE_PATCH_EMBEDDING);
    assert_string_equal(tfm_module_parameter_name(pe, 0), "weight");
    assert_string_equal(tfm_module_parameter_name(pe, 1), "bias");
    assert_int_equal(tfm_module_num_parameters(pe), 10);
    tfm_tensor *w = make4(2, 1, 2, 2, (const float[]){ 1, 0, 0, 1,
                                                        0, 1, -1, 0 });
    tfm_tensor *b = make(1, (const int64_t[]){ 2 }, (const float[]){ 1, -2 });
    assert_int_equal(tfm_module_set_parameter(pe, "weight", w), TFM_OK);
    assert_int_equal(tfm_module_set_parameter(pe, "bias", b), TFM_OK);
    tfm_tensor *x = make4(1, 1, 4, 2, (const float[]){ 1, 2, 3, 4,
                                                        5, 6, 7, 8 });
    tfm_tensor *y = make3(1, 2, 2, NULL);
    assert_int_equal(tfm_patch_embedding_forward(pe, x, y), TFM_OK);
    EXPECT_VALUES(y, 1e-7, 6, -3, 14, -3);

    assert_int_equal(tfm_module_train(pe, 1), TFM_OK);
    tfm_tensor *g = make3(1, 2, 2, (const float[]){ 1, 1, 1, 1 });
    tfm_tensor *gx = make4(1, 1, 4, 2, NULL);
    assert_int_equal(tfm_patch_embedding_backward(pe, x, g, gx), TFM_OK);
    EXPECT_VALUES(gx, 1e-7, 1, 1, -1, 1, 1, 1, -1, 1);
    tfm_tensor *gw = make4(2, 1, 2, 2, NULL);
    tfm_tensor *gb = make(1, (const int64_t[]){ 2 }, NULL);
    assert_int_equal(tfm_module_get_grad(pe, "weight", gw), TFM_OK);
    assert_int_equal(tfm_module_get_grad(pe, "bias", gb), TFM_OK);
    EXPECT_VALUES(gw, 1e-7, 6, 8, 10, 12, 6, 8, 10, 12);
    EXPECT_VALUES(gb, 1e-7, 2, 2);
    /* A second backward accumulates (+=). */
    assert_int_equal(tfm_patch_embedding_backward(pe, x, g, NULL), TFM_OK);
    assert_int_equal(tfm_module_get_grad(pe, "bias", gb), TFM_OK);
    EXPECT_VALUES(gb, 1e-7, 4, 4);

    /* Errors leave out untouched. */
    tfm_tensor *odd = make4(1, 1, 3, 2, NULL);
    tfm_tensor *y2 = make3(1, 1, 2, (const float[]){ 7, 7 });
    assert_int_equal(tfm_patch_embedding_forward(pe, odd, y2), TFM_ERR_SHAPE);
    EXPECT_VALUES(y2, 0, 7, 7);
    tfm_tensor *two = make4(1, 2, 4, 2, NULL);
    assert_int_equal(tfm_patch_embedding_forward(pe, two, y), TFM_ERR_SHAPE);
    assert_int_equal(tfm_patch_embedding_forward(pe, x, y2), TFM_ERR_SHAPE);
    assert_int_equal(tfm_patch_embedding_forward(NULL, x, y),
                     TFM_ERR_NULL_ARGUMENT);
    tfm_module *fixed = NULL;
    assert_int_equal(tfm_patch_embedding_create(2, 1, 2, 4, 1, &fixed),
                     TFM_OK);
    assert_int_equal(tfm_patch_embedding_forward(fixed, x, y),
                     TFM_ERR_SHAPE); /* 4 x 2, not 4 x 4 */
    tfm_module *bad = NULL;
    assert_int_equal(tfm_patch_embedding_create(2, 1, 2, 5, 1, &bad),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_patch_embedding_create(0, 1, 2, 0, 1, &bad),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_null(bad);
    tfm_module *nb = NULL;
    assert_int_equal(tfm_patch_embedding_create(2, 3, 4, 0, 0, &nb), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(nb), 1);
    assert_int_equal(tfm_module_num_parameters(nb), 2 * 3 * 4 * 4);
    tfm_module_free(nb);
    tfm_module_free(fixed);
    tfm_module_free(pe);
    tfm_tensor *all[] = { w, b, x, y, g, gx, gw, gb, odd, y2, two };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tfm_tensor_free(all[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_hand_worked),
        cmocka_unit_test(test_patch_embedding_hand_worked),
        cmocka_unit_test(test_linear_errors),
        cmocka_unit_test(test_child_names_and_kinds),
        cmocka_unit_test(test_child_shares_parameters),
        cmocka_unit_test(test_children_compose_the_layer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
