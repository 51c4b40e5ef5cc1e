/* Training mode and gradient memory of modules (module.h: tfm_module_train,
 * tfm_module_is_training, tfm_module_zero_grad, tfm_module_grad,
 * tfm_module_get_grad, tfm_module_parameter_data).  Black-box: every
 * expectation follows from the header's contract (a sub-module's gradient
 * is its parent's memory, as its parameters are) or is worked by hand
 * (the SGD step at the end). */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include <transformer/transformer.h>

static tfm_layer_config small(void)
{
    tfm_layer_config c = tfm_layer_config_default(8, 2);
    c.d_ff = 16;
    return c;
}

static float *grad_of(tfm_module *m, const char *name)
{
    float *g = NULL;
    assert_int_equal(tfm_module_grad(m, name, &g), TFM_OK);
    assert_non_null(g);
    return g;
}

/* Before tfm_module_train there is no gradient; after it every gradient
 * is zero; zero_grad clears what was written; eval keeps the memory. */
static void test_linear_lifecycle(void **state)
{
    (void)state;
    tfm_module *lin = NULL;
    assert_int_equal(tfm_linear_create(3, 2, 1, &lin), TFM_OK);
    float *g = (float *)0x1;
    assert_int_equal(tfm_module_is_training(lin), 0);
    assert_int_equal(tfm_module_grad(lin, "weight", &g),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(g, (float *)0x1);
    assert_non_null(strstr(tfm_last_error(), "tfm_module_train"));

    assert_int_equal(tfm_module_train(lin, 1), TFM_OK);
    assert_int_equal(tfm_module_is_training(lin), 1);
    float w[6], b[2];
    tfm_tensor *tw = NULL, *tb = NULL;
    assert_int_equal(tfm_tensor_wrap(2, (int64_t[]){ 2, 3 }, w, &tw), TFM_OK);
    assert_int_equal(tfm_tensor_wrap(1, (int64_t[]){ 2 }, b, &tb), TFM_OK);
    memset(w, 0xff, sizeof w);
    assert_int_equal(tfm_module_get_grad(lin, "weight", tw), TFM_OK);
    for (int i = 0; i < 6; i++)
        assert_true(w[i] == 0.0f);
    float *gw = grad_of(lin, "weight");
    for (int i = 0; i < 6; i++)
        gw[i] = (float)(i + 1);
    assert_int_equal(tfm_module_get_grad(lin, "weight", tw), TFM_OK);
    assert_true(w[5] == 6.0f);
    /* Wrong shape: out unchanged. */
    assert_int_equal(tfm_module_get_grad(lin, "weight", tb), TFM_ERR_SHAPE);
    assert_int_equal(tfm_module_get_grad(lin, "nope", tb), TFM_ERR_NOT_FOUND);

    /* eval keeps the gradients; a second train allocates nothing new. */
    assert_int_equal(tfm_module_train(lin, 0), TFM_OK);
    assert_int_equal(tfm_module_is_training(lin), 0);
    assert_ptr_equal(grad_of(lin, "weight"), gw);
    assert_int_equal(tfm_module_train(lin, 1), TFM_OK);
    assert_ptr_equal(grad_of(lin, "weight"), gw);
    assert_true(gw[5] == 6.0f);
    assert_int_equal(tfm_module_zero_grad(lin), TFM_OK);
    for (int i = 0; i < 6; i++)
        assert_true(gw[i] == 0.0f);

    /* The parameter's own memory, zero copy. */
    float *pw = NULL;
    assert_int_equal(tfm_module_parameter_data(lin, "weight", &pw), TFM_OK);
    pw[4] = 2.5f;
    assert_int_equal(tfm_module_get_parameter(lin, "weight", tw), TFM_OK);
    assert_true(w[4] == 2.5f);

    assert_int_equal(tfm_module_train(NULL, 1), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_zero_grad(NULL), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_grad(lin, "weight", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_grad(NULL, "weight", &g),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_parameter_data(lin, "bias", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_is_training(NULL), 0);
    tfm_tensor_free(tw);
    tfm_tensor_free(tb);
    tfm_module_free(lin);
}

/* The layer's "linear1.weight" gradient is the child's "weight" gradient,
 * and "self_attn.out_proj.bias" that of the child two levels down; every
 * sub-module follows the layer's mode. */
static void test_children_share_gradients(void **state)
{
    (void)state;
    tfm_layer_config cfg = small();
    tfm_module *layer = NULL, *lin1 = NULL, *out_proj = NULL, *attn = NULL,
               *norm2 = NULL;
    assert_int_equal(tfm_encoder_layer_create(&cfg, &layer), TFM_OK);
    assert_int_equal(tfm_module_train(layer, 1), TFM_OK);
    assert_int_equal(tfm_module_child(layer, "linear1", &lin1), TFM_OK);
    assert_int_equal(tfm_module_child(layer, "self_attn", &attn), TFM_OK);
    assert_int_equal(tfm_module_child(layer, "self_attn.out_proj", &out_proj),
                     TFM_OK);
    assert_int_equal(tfm_module_child(layer, "norm2", &norm2), TFM_OK);
    assert_ptr_equal(grad_of(layer, "linear1.weight"), grad_of(lin1, "weight"));
    assert_ptr_equal(grad_of(layer, "linear1.bias"), grad_of(lin1, "bias"));
    assert_ptr_equal(grad_of(layer, "self_attn.out_proj.bias"),
                     grad_of(out_proj, "bias"));
    assert_ptr_equal(grad_of(attn, "out_proj.weight"),
                     grad_of(out_proj, "weight"));
    assert_ptr_equal(grad_of(layer, "norm2.weight"), grad_of(norm2, "weight"));
    /* Distinct parameters, distinct memory: in_proj_weight [24, 8] is 192
     * floats; its gradient is not another parameter's. */
    assert_ptr_not_equal(grad_of(layer, "self_attn.in_proj_weight"),
                         grad_of(layer, "self_attn.out_proj.weight"));
    assert_int_equal(tfm_module_is_training(lin1), 1);
    assert_int_equal(tfm_module_is_training(out_proj), 1);
    assert_int_equal(tfm_module_is_training(norm2), 1);
    /* Written through the child, read through the parent; zeroed through
     * the parent. */
    grad_of(out_proj, "bias")[3] = -7.0f;
    assert_true(grad_of(layer, "self_attn.out_proj.bias")[3] == -7.0f);
    assert_int_equal(tfm_module_zero_grad(layer), TFM_OK);
    assert_true(grad_of(out_proj, "bias")[3] == 0.0f);
    assert_int_equal(tfm_module_train(layer, 0), TFM_OK);
    assert_int_equal(tfm_module_is_training(lin1), 0);
    assert_int_equal(tfm_module_is_training(attn), 0);
    tfm_module_free(layer);
}

/* Training a child alone gives its parameters gradients that the parent
 * finds under the parent's names; the parent stays in evaluation mode and
 * its other parameters (the norms) have none until it is trained. */
static void test_child_first(void **state)
{
    (void)state;
    tfm_layer_config cfg = small();
    tfm_module *layer = NULL, *lin1 = NULL;
    assert_int_equal(tfm_encoder_layer_create(&cfg, &layer), TFM_OK);
    assert_int_equal(tfm_module_child(layer, "linear1", &lin1), TFM_OK);
    assert_int_equal(tfm_module_train(lin1, 1), TFM_OK);
    assert_int_equal(tfm_module_is_training(layer), 0);
    assert_ptr_equal(grad_of(layer, "linear1.weight"), grad_of(lin1, "weight"));
    float *g = NULL;
    assert_int_equal(tfm_module_grad(layer, "norm1.weight", &g),
                     TFM_ERR_INVALID_ARGUMENT);
    float *before = grad_of(lin1, "weight");
    assert_int_equal(tfm_module_train(layer, 1), TFM_OK);
    assert_ptr_equal(grad_of(lin1, "weight"), before);
    assert_int_equal(tfm_module_grad(layer, "norm1.weight", &g), TFM_OK);
    tfm_module_free(layer);
}

/* A model with tied embeddings: one gradient for the shared weight. */
static void test_model_gradients(void **state)
{
    (void)state;
    tfm_model_config mc = { 0 };
    mc.architecture = TFM_ARCH_DECODER_ONLY;
    mc.layer = small();
    mc.layer.norm_first = 1;
    mc.vocab_size = 11;
    mc.context_length = 6;
    mc.n_layers = 2;
    mc.positional = TFM_POSITIONAL_LEARNED;
    mc.tied_embeddings = 1;
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create(&mc, &m), TFM_OK);
    assert_int_equal(tfm_module_train(m, 1), TFM_OK);
    for (int i = 0; i < tfm_module_parameter_count(m); i++)
        (void)grad_of(m, tfm_module_parameter_name(m, i));
    tfm_module *emb = NULL;
    assert_int_equal(tfm_module_child(m, "token_embedding", &emb), TFM_OK);
    assert_ptr_equal(grad_of(m, "token_embedding.weight"),
                     grad_of(emb, "weight"));
    tfm_module_free(m);
}

/* An optimizer steps with the gradients the module holds.  SGD, lr 0.5,
 * no momentum: p - 0.5 g, by hand: weight (1, 2) - 0.5 (0.1, -0.2) =
 * (0.95, 2.1), bias 0.5 - 0.5 * 1 = 0. */
static void test_optimizer_reads_module_gradients(void **state)
{
    (void)state;
    tfm_module *lin = NULL;
    assert_int_equal(tfm_linear_create(2, 1, 1, &lin), TFM_OK);
    float *w = NULL, *b = NULL;
    assert_int_equal(tfm_module_parameter_data(lin, "weight", &w), TFM_OK);
    assert_int_equal(tfm_module_parameter_data(lin, "bias", &b), TFM_OK);
    w[0] = 1.0f, w[1] = 2.0f, b[0] = 0.5f;
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_SGD);
    o.lr = 0.5;
    tfm_optimizer *opt = NULL;
    assert_int_equal(tfm_optimizer_create(lin, &o, &opt), TFM_OK);
    /* Never trained: no gradients, the step refuses. */
    assert_int_equal(tfm_optimizer_step(opt), TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_train(lin, 1), TFM_OK);
    float *gw = grad_of(lin, "weight"), *gb = grad_of(lin, "bias");
    gw[0] = 0.1f, gw[1] = -0.2f, gb[0] = 1.0f;
    assert_int_equal(tfm_optimizer_step(opt), TFM_OK);
    assert_float_equal(w[0], 0.95f, 1e-7);
    assert_float_equal(w[1], 2.1f, 1e-7);
    assert_float_equal(b[0], 0.0f, 1e-7);
    tfm_optimizer_zero_grad(opt);
    assert_true(gw[0] == 0.0f && gb[0] == 0.0f);
    tfm_optimizer_free(opt);
    tfm_module_free(lin);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_lifecycle),
        cmocka_unit_test(test_children_share_gradients),
        cmocka_unit_test(test_child_first),
        cmocka_unit_test(test_model_gradients),
        cmocka_unit_test(test_optimizer_reads_module_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
