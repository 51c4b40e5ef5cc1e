/* tfm_optimizer_load and tfm_optimizer_set_state refuse state that cannot
 * be right, and leave the optimizer untouched (issue 44, kinds 8 and 9):
 *   - a negative second moment ("exp_avg_sq", "max_exp_avg_sq"): Adam's
 *     next step divides by sqrt(exp_avg_sq) + eps, and sqrt of a negative
 *     float is NaN, so every parameter would become NaN (shown first);
 *   - a file with more tensors than the optimizer keeps (a parameter the
 *     model lacks), or fewer (a model deeper than the file), or a state of
 *     another dtype than float32;
 *   - an "lr" that is not in the library's one strict number syntax
 *     (src/base/number_parse.h): "0x1p-3" (strtod reads 0.125), " 0.25"
 *     and "+0.25" (strtod skips the blank, takes the '+'), "inf";
 *   - step counts past 2^24: float32 holds 16777216 but not 16777217
 *     (24-bit significand), so the exact count travels in the metadata
 *     "<param>.step" and comes back exactly; a metadata count that the
 *     float tensor does not round to is refused; files without it (before
 *     1.3) still load.
 * Files are made by saving a real optimizer and rewriting one entry with
 * the safetensors writer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include <transformer/transformer.h>

static char g_src[96], g_dst[96];

/* A Linear(3, 2) (with bias or not) in training mode, gradients 0.5, and
 * an AdamW (amsgrad) over it stepped twice. */
static void make_stepped(int bias, tfm_module **m, tfm_optimizer **opt)
{
    assert_int_equal(tfm_linear_create(3, 2, bias, m), TFM_OK);
    assert_int_equal(tfm_module_train(*m, 1), TFM_OK);
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAMW);
    o.amsgrad = 1;
    assert_int_equal(tfm_optimizer_create(*m, &o, opt), TFM_OK);
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < tfm_module_parameter_count(*m); i++) {
            const char *name = tfm_module_parameter_name(*m, i);
            int rank;
            int64_t shape[TFM_MAX_RANK];
            tfm_tensor *g = NULL;
            assert_int_equal(tfm_module_parameter_shape(*m, name, &rank,
                                                        shape), TFM_OK);
            assert_int_equal(tfm_tensor_create(rank, shape, &g), TFM_OK);
            for (int64_t k = 0; k < tfm_tensor_numel(g); k++)
                tfm_tensor_data(g)[k] = 0.5f;
            assert_int_equal(tfm_module_set_grad(*m, name, g), TFM_OK);
            tfm_tensor_free(g);
        }
        assert_int_equal(tfm_optimizer_step(*opt), TFM_OK);
    }
}

/* Rewrites g_src into g_dst: tensor `name` replaced by `value` (NULL:
 * kept; dtype: how it is stored), `extra` added when not NULL, metadata
 * key `mkey` set to `mvalue` when not NULL. */
static void rewrite(const char *name, const tfm_tensor *value,
                    tfm_dtype dtype, const char *extra, const char *mkey,
                    const char *mvalue)
{
    tfm_safetensors *f = NULL;
    tfm_safetensors_writer *w = NULL;
    assert_int_equal(tfm_safetensors_open(g_src, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_create(&w), TFM_OK);
    for (int64_t i = 0; i < tfm_safetensors_count(f); i++) {
        const char *n = tfm_safetensors_name(f, i);
        tfm_tensor *t = NULL;
        assert_int_equal(tfm_safetensors_read(f, n, &t), TFM_OK);
        const int replaced = name && strcmp(n, name) == 0;
        assert_int_equal(tfm_safetensors_writer_add_as(
                             w, n, replaced && value ? value : t,
                             replaced ? dtype : TFM_DTYPE_F32), TFM_OK);
        if (extra && i == 0)
            assert_int_equal(tfm_safetensors_writer_add(w, extra, t), TFM_OK);
        tfm_tensor_free(t);
    }
    for (int64_t i = 0; i < tfm_safetensors_metadata_count(f); i++) {
        const char *k = tfm_safetensors_metadata_key(f, i);
        if (mkey && strcmp(k, mkey) == 0)
            continue;
        assert_int_equal(tfm_safetensors_writer_set_metadata(
                             w, k, tfm_safetensors_metadata(f, k)), TFM_OK);
    }
    if (mkey && mvalue)
        assert_int_equal(tfm_safetensors_writer_set_metadata(w, mkey, mvalue),
                         TFM_OK);
    tfm_safetensors_close(f);
    assert_int_equal(tfm_safetensors_writer_save(w, g_dst), TFM_OK);
    tfm_safetensors_writer_free(w);
}

/* The optimizer's whole visible state: lr, and every state of "weight". */
typedef struct snap {
    double lr;
    float v[3][6], step;
} snap;

static void take(const tfm_optimizer *opt, snap *s)
{
    memset(s, 0, sizeof *s);
    s->lr = tfm_optimizer_get_lr(opt);
    static const char *const names[] = { "exp_avg", "exp_avg_sq",
                                         "max_exp_avg_sq" };
    tfm_tensor *t = NULL, *one = NULL;
    assert_int_equal(tfm_tensor_create(2, (int64_t[]){ 2, 3 }, &t), TFM_OK);
    assert_int_equal(tfm_tensor_create(1, (int64_t[]){ 1 }, &one), TFM_OK);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tfm_optimizer_get_state(opt, "weight", names[k], t),
                         TFM_OK);
        memcpy(s->v[k], tfm_tensor_data(t), sizeof s->v[k]);
    }
    assert_int_equal(tfm_optimizer_get_state(opt, "weight", "step", one),
                     TFM_OK);
    s->step = tfm_tensor_data(one)[0];
    tfm_tensor_free(t);
    tfm_tensor_free(one);
}

/* Loading g_dst into a fresh optimizer (stepped once with other
 * gradients, so its state differs from the file's) fails with `want` and
 * changes nothing; the message holds `says`. */
static void refused(tfm_status want, const char *says)
{
    tfm_module *m;
    tfm_optimizer *opt;
    make_stepped(1, &m, &opt);
    assert_int_equal(tfm_optimizer_set_lr(opt, 0.0625), TFM_OK);
    snap before, after;
    take(opt, &before);
    assert_int_equal(tfm_optimizer_load(opt, g_dst), want);
    if (!strstr(tfm_last_error(), says))
        fail_msg("'%s' lacks '%s'", tfm_last_error(), says);
    take(opt, &after);
    assert_memory_equal(&before, &after, sizeof before);
    tfm_optimizer_free(opt);
    tfm_module_free(m);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_src, sizeof g_src, "/tmp/tfm_optstate_%ld.a.safetensors",
             (long)getpid());
    snprintf(g_dst, sizeof g_dst, "/tmp/tfm_optstate_%ld.b.safetensors",
             (long)getpid());
    tfm_module *m;
    tfm_optimizer *opt;
    make_stepped(1, &m, &opt);
    assert_int_equal(tfm_optimizer_save(opt, g_src), TFM_OK);
    tfm_optimizer_free(opt);
    tfm_module_free(m);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_src);
    unlink(g_dst);
    return 0;
}

static void test_negative_second_moment(void **state)
{
    (void)state;
    tfm_tensor *neg = NULL;
    assert_int_equal(tfm_tensor_create(2, (int64_t[]){ 2, 3 }, &neg), TFM_OK);
    for (int k = 0; k < 6; k++)
        tfm_tensor_data(neg)[k] = k == 4 ? -1.0f : 0.25f;
    /* Why it matters: sqrt(-1) is NaN, the step's denominator. */
    assert_true(isnan(sqrtf(tfm_tensor_data(neg)[4])));
    /* set_state refuses it, and exp_avg (a first moment) may be negative. */
    tfm_module *m;
    tfm_optimizer *opt;
    make_stepped(1, &m, &opt);
    snap before, after;
    take(opt, &before);
    assert_int_equal(tfm_optimizer_set_state(opt, "weight", "exp_avg_sq", neg),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "negative value (-1 at index 4)"));
    assert_int_equal(tfm_optimizer_set_state(opt, "weight", "max_exp_avg_sq",
                                             neg),
                     TFM_ERR_INVALID_ARGUMENT);
    take(opt, &after);
    assert_memory_equal(&before, &after, sizeof before);
    assert_int_equal(tfm_optimizer_set_state(opt, "weight", "exp_avg", neg),
                     TFM_OK);
    tfm_optimizer_free(opt);
    tfm_module_free(m);
    /* the file's: refused, for both second moments */
    rewrite("weight.exp_avg_sq", neg, TFM_DTYPE_F32, NULL, NULL, NULL);
    refused(TFM_ERR_FORMAT, "\"weight.exp_avg_sq\" holds a negative value");
    tfm_tensor *negb = NULL;
    assert_int_equal(tfm_tensor_create(1, (int64_t[]){ 2 }, &negb), TFM_OK);
    tfm_tensor_data(negb)[0] = 0.0f;
    tfm_tensor_data(negb)[1] = -1e-30f;
    rewrite("bias.max_exp_avg_sq", negb, TFM_DTYPE_F32, NULL, NULL, NULL);
    refused(TFM_ERR_FORMAT, "\"bias.max_exp_avg_sq\" holds a negative value");
    tfm_tensor_free(negb);
    tfm_tensor_free(neg);
}

static void test_not_the_models_parameters(void **state)
{
    (void)state;
    /* one tensor more than the optimizer keeps */
    rewrite(NULL, NULL, TFM_DTYPE_F32, "ghost.weight.step", NULL, NULL);
    refused(TFM_ERR_FORMAT, "holds 9 tensors; this optimizer over 2 "
                            "parameters keeps 8");
    /* a model without bias: the file's bias states are extra */
    tfm_module *m;
    tfm_optimizer *opt;
    make_stepped(0, &m, &opt);
    assert_int_equal(tfm_optimizer_load(opt, g_src), TFM_ERR_FORMAT);
    assert_non_null(strstr(tfm_last_error(), "holds 8 tensors"));
    tfm_optimizer_free(opt);
    tfm_module_free(m);
    /* a state stored as float16 (read back widened): not what save wrote */
    rewrite("weight.exp_avg", NULL, TFM_DTYPE_F16, NULL, NULL, NULL);
    refused(TFM_ERR_FORMAT, "\"weight.exp_avg\" is not float32 (F16)");
}

static void test_lr_strict(void **state)
{
    (void)state;
    static const char *const bad[] = { "0x1p-3", " 0.25", "0.25 ", "+0.25",
                                       "inf", "nan", "-0.5", "", "1e400" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rewrite(NULL, NULL, TFM_DTYPE_F32, NULL, "lr", bad[i]);
        refused(TFM_ERR_FORMAT, "has no valid \"lr\"");
    }
    rewrite(NULL, NULL, TFM_DTYPE_F32, NULL, "lr", NULL);   /* none */
    refused(TFM_ERR_FORMAT, "has no valid \"lr\"");
    static const struct { const char *text; double value; } good[] = {
        { "0.125", 0.125 }, { "1.25e-1", 0.125 }, { ".5", 0.5 }, { "0", 0.0 },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        rewrite(NULL, NULL, TFM_DTYPE_F32, NULL, "lr", good[i].text);
        tfm_module *m;
        tfm_optimizer *opt;
        make_stepped(1, &m, &opt);
        assert_int_equal(tfm_optimizer_load(opt, g_dst), TFM_OK);
        assert_true(tfm_optimizer_get_lr(opt) == good[i].value);
        tfm_optimizer_free(opt);
        tfm_module_free(m);
    }
}

static void test_exact_steps(void **state)
{
    (void)state;
    /* 2^24 + 1 = 16777217 rounds to 16777216 in float32 (ties to even). */
    assert_true((float)16777217 == 16777216.0f);
    tfm_tensor *step = NULL;
    assert_int_equal(tfm_tensor_create(1, (int64_t[]){ 1 }, &step), TFM_OK);
    tfm_tensor_data(step)[0] = 16777216.0f;
    rewrite("weight.step", step, TFM_DTYPE_F32, NULL, "weight.step",
            "16777217");
    tfm_module *m;
    tfm_optimizer *opt;
    make_stepped(1, &m, &opt);
    assert_int_equal(tfm_optimizer_load(opt, g_dst), TFM_OK);
    /* saved again, the exact count is in the new file's metadata */
    assert_int_equal(tfm_optimizer_save(opt, g_src), TFM_OK);
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(g_src, &f), TFM_OK);
    assert_non_null(tfm_safetensors_metadata(f, "weight.step"));
    assert_string_equal(tfm_safetensors_metadata(f, "weight.step"),
                        "16777217");
    assert_string_equal(tfm_safetensors_metadata(f, "bias.step"), "2");
    tfm_safetensors_close(f);
    tfm_optimizer_free(opt);
    tfm_module_free(m);
    /* metadata that the tensor does not round to, or not a count */
    static const char *const bad[] = { "16777219", "-1", "2.0", " 2", "0x2",
                                       "99999999999999999999" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rewrite("weight.step", step, TFM_DTYPE_F32, NULL, "weight.step",
                bad[i]);
        refused(TFM_ERR_FORMAT, "metadata \"weight.step\"");
    }
    /* a file before 1.3 (no metadata count): the float's */
    tfm_tensor_data(step)[0] = 7.0f;
    rewrite("weight.step", step, TFM_DTYPE_F32, NULL, "weight.step", NULL);
    make_stepped(1, &m, &opt);
    assert_int_equal(tfm_optimizer_load(opt, g_dst), TFM_OK);
    snap s;
    take(opt, &s);
    assert_true(s.step == 7.0f);
    tfm_optimizer_free(opt);
    tfm_module_free(m);
    tfm_tensor_free(step);
    /* restore g_src for the other cases */
    setup(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_negative_second_moment),
        cmocka_unit_test(test_not_the_models_parameters),
        cmocka_unit_test(test_lr_strict),
        cmocka_unit_test(test_exact_steps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
