/* Optimizers, clipping and schedules (training.h) against torch.optim of
 * PyTorch 1.13: tests/fixtures/training/reference.safetensors
 * (tools/make_training_fixtures.py, regenerated at test time when torch is
 * available) holds an nn.Linear(6, 4)'s parameters after every step of
 * SGD / Adam / AdamW under LambdaLR schedules and clip_grad_norm_.
 *
 * White-box: the test points each parameter's gradient (module_impl.h:
 * tfm__param.grad, which overrides the module's own gradient memory) at a
 * buffer of its own, so each case sets exactly the gradients it needs;
 * test_module_grad.c steps with the memory tfm_module_train allocates. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include <transformer/transformer.h>

#include "nn/module_impl.h"

#define SENTINEL_PTR_OPT ((tfm_optimizer *)(uintptr_t)0x5e47)

#include "training_reference.h"

/* A Linear(6, 4) whose parameters have gradient buffers g[0] (weight),
 * g[1] (bias), owned by the caller. */
typedef struct net {
    tfm_module *m;
    tfm__param *p[2];
    float gw[24], gb[4];
} net;

static void net_init(net *n)
{
    assert_int_equal(tfm_linear_create(6, 4, 1, &n->m), TFM_OK);
    for (int i = 0; i < n->m->n_params; i++) {
        tfm__param *p = &n->m->params[i];
        int w = strcmp(p->name, "weight") == 0;
        n->p[w ? 0 : 1] = p;
        p->grad = w ? n->gw : n->gb;
    }
    memset(n->gw, 0, sizeof n->gw);
    memset(n->gb, 0, sizeof n->gb);
}

static void net_free(net *n)
{
    tfm_module_free(n->m);
}

static void options_from(const float *m, tfm_optimizer_options *o)
{
    tfm_optimizer_options_init(o, (tfm_optimizer_kind)m[0]);
    o->lr = m[1];
    o->weight_decay = m[2];
    o->momentum = m[3];
    o->dampening = m[4];
    o->nesterov = m[5] != 0.0f;
    o->beta1 = m[6];
    o->beta2 = m[7];
    o->eps = m[8];
    o->amsgrad = m[9] != 0.0f;
    o->maximize = m[10] != 0.0f;
}

static double schedule(const float *m, int64_t s)
{
    double f = 1.0;
    if (m[11] == 1.0f)
        assert_int_equal(tfm_lr_inverse_sqrt_warmup(s, (int64_t)m[12],
                                                    (int64_t)m[13], &f),
                         TFM_OK);
    else if (m[11] == 2.0f)
        assert_int_equal(tfm_lr_warmup_cosine(s, (int64_t)m[12],
                                              (int64_t)m[13], m[14], &f),
                         TFM_OK);
    return f;
}

static void copy_ref(const char *p, const char *name, float *dst)
{
    tfm_tensor *t = ref(p, name);
    assert_non_null(t);
    memcpy(dst, tfm_tensor_data(t), (size_t)tfm_tensor_numel(t) * 4);
    tfm_tensor_free(t);
}

static double worst_param, worst_state;

static double compare(const char *p, const char *name, const float *got,
                      int64_t n)
{
    tfm_tensor *t = ref(p, name);
    if (!t)
        fail_msg("%s%s missing", p, name);
    assert_int_equal(tfm_tensor_numel(t), n);
    double e = rel_err(got, tfm_tensor_data(t), n);
    tfm_tensor_free(t);
    return e;
}

static void test_optimizers_vs_torch(void **state)
{
    (void)state;
    int cases = 0;
    static const char *const states[] = { "momentum_buffer", "exp_avg",
                                          "exp_avg_sq", "max_exp_avg_sq",
                                          "step" };
    for (int k = 0;; k++) {
        char p[16];
        snprintf(p, sizeof p, "opt%d.", k);
        tfm_tensor *meta = ref(p, "meta");
        if (!meta)
            break;
        const float *m = tfm_tensor_data(meta);
        net n;
        net_init(&n);
        copy_ref(p, "weight.init", n.p[0]->data);
        copy_ref(p, "bias.init", n.p[1]->data);
        tfm_optimizer_options o;
        options_from(m, &o);
        const double base_lr = o.lr;
        tfm_optimizer *opt = NULL;
        assert_int_equal(tfm_optimizer_create(n.m, &o, &opt), TFM_OK);
        tfm_tensor *lrs = ref(p, "lr"), *norms = ref(p, "norm");
        const int steps = (int)m[15];
        double e_param = 0.0, e_lr = 0.0, e_norm = 0.0;
        for (int s = 0; s < steps; s++) {
            char name[32];
            snprintf(name, sizeof name, "weight.grad%d", s);
            copy_ref(p, name, n.gw);
            snprintf(name, sizeof name, "bias.grad%d", s);
            copy_ref(p, name, n.gb);
            const double lr = base_lr * schedule(m, s);
            const double want_lr = tfm_tensor_data(lrs)[s];
            const double el = fabs(lr - want_lr) / fabs(want_lr > 0 ? want_lr
                                                                     : 1);
            e_lr = el > e_lr ? el : e_lr;
            assert_int_equal(tfm_optimizer_set_lr(opt, lr), TFM_OK);
            if (m[16] > 0.0f) {
                double norm = -1.0;
                assert_int_equal(tfm_optimizer_clip_grad_norm(
                                     opt, m[16], m[17], &norm), TFM_OK);
                const double want = tfm_tensor_data(norms)[s];
                const double en = fabs(norm - want) / want;
                e_norm = en > e_norm ? en : e_norm;
            }
            assert_int_equal(tfm_optimizer_step(opt), TFM_OK);
            snprintf(name, sizeof name, "weight.after%d", s);
            double e = compare(p, name, n.p[0]->data, 24);
            snprintf(name, sizeof name, "bias.after%d", s);
            double eb = compare(p, name, n.p[1]->data, 4);
            e = eb > e ? eb : e;
            e_param = e > e_param ? e : e_param;
        }
        /* The final state, by name, as torch's optimizer.state[p]. */
        double e_state = 0.0;
        int n_states = 0;
        for (int w = 0; w < 2; w++) {
            const char *pn = w ? "bias" : "weight";
            for (int si = 0; si < 5; si++) {
                char name[48];
                snprintf(name, sizeof name, "%s.%s", pn, states[si]);
                tfm_tensor *want = ref(p, name);
                const int is_step = si == 4;
                tfm_tensor *got = is_step ? make(1, (int64_t[]){ 1 }, NULL)
                                          : make(n.p[w]->rank, n.p[w]->shape,
                                                 NULL);
                tfm_status st = tfm_optimizer_get_state(opt, pn, states[si],
                                                        got);
                if (!want && !is_step) {
                    /* torch keeps no such state: neither do we */
                    assert_int_equal(st, TFM_ERR_NOT_FOUND);
                } else if (want) {
                    assert_int_equal(st, TFM_OK);
                    double e = rel_err(tfm_tensor_data(got),
                                       tfm_tensor_data(want),
                                       tfm_tensor_numel(got));
                    e_state = e > e_state ? e : e_state;
                    n_states++;
                }
                tfm_tensor_free(want);
                tfm_tensor_free(got);
            }
        }
        printf("  opt%d (%s, %d steps): params rel %.2e, state rel %.2e "
               "(%d tensors), lr rel %.2e, clip norm rel %.2e\n", k,
               m[0] == 0 ? "SGD" : m[0] == 1 ? "Adam" : "AdamW", steps,
               e_param, e_state, n_states, e_lr, e_norm);
        assert_true(e_param <= 1e-6);
        assert_true(e_state <= 1e-6);
        assert_true(e_lr <= 1e-6);
        assert_true(e_norm <= 1e-6);
        worst_param = e_param > worst_param ? e_param : worst_param;
        worst_state = e_state > worst_state ? e_state : worst_state;
        tfm_optimizer_free(opt);
        tfm_tensor_free(meta);
        tfm_tensor_free(lrs);
        tfm_tensor_free(norms);
        net_free(&n);
        cases++;
    }
    printf("  %d cases: max parameter rel %.2e, max state rel %.2e\n", cases,
           worst_param, worst_state);
    assert_true(cases >= 10);
}

/* Snapshot of parameters and every state, to check "untouched". */
typedef struct snap {
    float w[24], b[4], st[2][5][24];
} snap;

static void take(net *n, tfm_optimizer *opt, snap *s)
{
    static const char *const names[] = { "exp_avg", "exp_avg_sq",
                                         "max_exp_avg_sq", "momentum_buffer",
                                         "step" };
    memset(s, 0, sizeof *s);
    memcpy(s->w, n->p[0]->data, sizeof s->w);
    memcpy(s->b, n->p[1]->data, sizeof s->b);
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 5; i++) {
            tfm_tensor *t = i == 4 ? make(1, (int64_t[]){ 1 }, NULL)
                                   : make(n->p[w]->rank, n->p[w]->shape, NULL);
            if (tfm_optimizer_get_state(opt, w ? "bias" : "weight", names[i],
                                        t) == TFM_OK)
                memcpy(s->st[w][i], tfm_tensor_data(t),
                       (size_t)tfm_tensor_numel(t) * 4);
            tfm_tensor_free(t);
        }
}

static void fill_grads(net *n, float v)
{
    for (int i = 0; i < 24; i++)
        n->gw[i] = v * (float)(i - 11);
    for (int i = 0; i < 4; i++)
        n->gb[i] = v * (float)(i + 1);
}

static void test_non_finite_leaves_all(void **state)
{
    (void)state;
    for (int kind = 0; kind < 3; kind++) {
        net n;
        net_init(&n);
        for (int i = 0; i < 24; i++)
            n.p[0]->data[i] = 0.1f * (float)i;
        tfm_optimizer_options o;
        tfm_optimizer_options_init(&o, (tfm_optimizer_kind)kind);
        o.momentum = kind == 0 ? 0.9 : 0.0;
        o.amsgrad = kind == 2;
        tfm_optimizer *opt;
        assert_int_equal(tfm_optimizer_create(n.m, &o, &opt), TFM_OK);
        fill_grads(&n, 0.01f);
        assert_int_equal(tfm_optimizer_step(opt), TFM_OK);
        snap before, after;
        take(&n, opt, &before);
        n.gb[3] = NAN;
        assert_int_equal(tfm_optimizer_step(opt), TFM_ERR_NON_FINITE);
        assert_non_null(strstr(tfm_last_error(), "\"bias\""));
        n.gb[3] = INFINITY;
        assert_int_equal(tfm_optimizer_step(opt), TFM_ERR_NON_FINITE);
        double norm = -1;
        assert_int_equal(tfm_optimizer_clip_grad_norm(opt, 1.0, 2.0, &norm),
                         TFM_ERR_NON_FINITE);
        assert_true(norm == -1 && n.gw[0] == 0.01f * -11.0f);
        take(&n, opt, &after);
        assert_memory_equal(&before, &after, sizeof before);
        tfm_optimizer_free(opt);
        net_free(&n);
    }
}

/* Clipping by hand: gradients (3, 4) have norm 5; max_norm 1 scales by
 * 1 / (5 + 1e-6); max_norm 10 leaves them; inf-norm is 4. */
static void test_clip_hand_worked(void **state)
{
    (void)state;
    net n;
    net_init(&n);
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_SGD);
    tfm_optimizer *opt;
    assert_int_equal(tfm_optimizer_create(n.m, &o, &opt), TFM_OK);
    n.gw[5] = 3.0f;
    n.gb[2] = -4.0f;
    double norm;
    assert_int_equal(tfm_optimizer_clip_grad_norm(opt, 10.0, 2.0, &norm),
                     TFM_OK);
    assert_true(norm == 5.0 && n.gw[5] == 3.0f && n.gb[2] == -4.0f);
    assert_int_equal(tfm_optimizer_clip_grad_norm(opt, 1.0, INFINITY, &norm),
                     TFM_OK);
    assert_true(norm == 4.0);
    assert_true(fabs(n.gb[2] + 1.0) < 1e-6);
    assert_int_equal(tfm_optimizer_clip_grad_norm(opt, 1.0, 0.0, &norm),
                     TFM_ERR_INVALID_ARGUMENT);
    /* zero_grad clears; a step on zero gradients with plain SGD keeps the
     * parameters. */
    tfm_optimizer_zero_grad(opt);
    assert_true(n.gw[5] == 0.0f && n.gb[2] == 0.0f);
    tfm_optimizer_free(opt);
    net_free(&n);
}

static void test_schedules_hand_worked(void **state)
{
    (void)state;
    double f;
    /* Vaswani et al.: d_model 512, warm-up 4000; the peak at s = 4000 is
     * 512^-0.5 * 4000^-0.5 = 7.0e-4. */
    assert_int_equal(tfm_lr_inverse_sqrt_warmup(4000, 512, 4000, &f), TFM_OK);
    assert_true(fabs(f - 1.0 / sqrt(512.0 * 4000.0)) < 1e-15);
    assert_int_equal(tfm_lr_inverse_sqrt_warmup(0, 512, 4000, &f), TFM_OK);
    assert_true(fabs(f - pow(512.0, -0.5) * pow(4000.0, -1.5)) < 1e-18);
    assert_int_equal(tfm_lr_inverse_sqrt_warmup(16000, 512, 4000, &f),
                     TFM_OK);
    assert_true(fabs(f - 1.0 / sqrt(512.0 * 16000.0)) < 1e-15);
    assert_int_equal(tfm_lr_inverse_sqrt_warmup(-1, 512, 4000, &f),
                     TFM_ERR_INVALID_ARGUMENT);
    /* Warm-up 10, total 110: 0.5 at 5, 1 at 10, (1 + min) / 2 at 60. */
    assert_int_equal(tfm_lr_warmup_cosine(5, 10, 110, 0.1, &f), TFM_OK);
    assert_true(f == 0.5);
    assert_int_equal(tfm_lr_warmup_cosine(10, 10, 110, 0.1, &f), TFM_OK);
    assert_true(f == 1.0);
    assert_int_equal(tfm_lr_warmup_cosine(60, 10, 110, 0.1, &f), TFM_OK);
    assert_true(fabs(f - 0.55) < 1e-15);
    assert_int_equal(tfm_lr_warmup_cosine(500, 10, 110, 0.1, &f), TFM_OK);
    assert_true(fabs(f - 0.1) < 1e-15);
    assert_int_equal(tfm_lr_warmup_cosine(5, 10, 5, 0.0, &f),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_lr_warmup_cosine(5, 1, 5, 0.0, NULL),
                     TFM_ERR_NULL_ARGUMENT);
}

static void test_option_and_state_errors(void **state)
{
    (void)state;
    net n;
    net_init(&n);
    tfm_optimizer_options o;
    tfm_optimizer *opt = SENTINEL_PTR_OPT;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAMW);
    assert_true(o.lr == 1e-3 && o.weight_decay == 1e-2 && o.beta1 == 0.9 &&
                o.beta2 == 0.999 && o.eps == 1e-8 && !o.amsgrad);
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAM);
    assert_true(o.weight_decay == 0.0);
    o.beta2 = 1.0;
    assert_int_equal(tfm_optimizer_create(n.m, &o, &opt),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_SGD);
    o.nesterov = 1;
    assert_int_equal(tfm_optimizer_create(n.m, &o, &opt),
                     TFM_ERR_INVALID_ARGUMENT);
    o.momentum = 0.9;
    o.dampening = 0.1;
    assert_int_equal(tfm_optimizer_create(n.m, &o, &opt),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_SGD);
    o.lr = -1;
    assert_int_equal(tfm_optimizer_create(n.m, &o, &opt),
                     TFM_ERR_INVALID_ARGUMENT);
    o.lr = 0.1;
    o.kind = (tfm_optimizer_kind)9;
    assert_int_equal(tfm_optimizer_create(n.m, &o, &opt),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_optimizer_create(NULL, &o, &opt),
                     TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(opt, SENTINEL_PTR_OPT);
    /* A struct_size of the first fields only: the rest are defaults. */
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAM);
    o.amsgrad = 1;
    o.struct_size = offsetof(tfm_optimizer_options, lr) + sizeof(double);
    assert_int_equal(tfm_optimizer_create(n.m, &o, &opt), TFM_OK);
    tfm_tensor *w = make2(4, 6, NULL), *one = make(1, (int64_t[]){ 1 }, NULL);
    assert_int_equal(tfm_optimizer_get_state(opt, "weight", "max_exp_avg_sq",
                                             w), TFM_ERR_NOT_FOUND);
    assert_int_equal(tfm_optimizer_get_state(opt, "nope", "exp_avg", w),
                     TFM_ERR_NOT_FOUND);
    assert_int_equal(tfm_optimizer_get_state(opt, "bias", "exp_avg", w),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_optimizer_get_state(opt, "weight", "step", one),
                     TFM_OK);
    assert_true(tfm_tensor_data(one)[0] == 0.0f);
    tfm_tensor_data(one)[0] = 2.5f;
    assert_int_equal(tfm_optimizer_set_state(opt, "weight", "step", one),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_tensor_data(w)[3] = NAN;
    assert_int_equal(tfm_optimizer_set_state(opt, "weight", "exp_avg", w),
                     TFM_ERR_NON_FINITE);
    assert_int_equal(tfm_optimizer_set_lr(opt, NAN),
                     TFM_ERR_INVALID_ARGUMENT);
    /* No gradient storage at all: a clear refusal. */
    n.p[0]->grad = NULL;
    n.p[1]->grad = NULL;
    assert_int_equal(tfm_optimizer_step(opt), TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "tfm_module_train"));
    tfm_tensor_free(w);
    tfm_tensor_free(one);
    tfm_optimizer_free(opt);
    tfm_optimizer_free(NULL);
    net_free(&n);
}

/* Save, load into a new optimizer: the same states, the same next step. */
static void test_save_load(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/tfm_optim_%ld.safetensors",
             (long)getpid());
    net a, b;
    net_init(&a);
    net_init(&b);
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAMW);
    o.amsgrad = 1;
    tfm_optimizer *oa, *ob, *sgd;
    assert_int_equal(tfm_optimizer_create(a.m, &o, &oa), TFM_OK);
    assert_int_equal(tfm_optimizer_create(b.m, &o, &ob), TFM_OK);
    for (int s = 0; s < 3; s++) {
        fill_grads(&a, 0.1f * (float)(s + 1));
        assert_int_equal(tfm_optimizer_step(oa), TFM_OK);
    }
    assert_int_equal(tfm_optimizer_set_lr(oa, 0.25), TFM_OK);
    assert_int_equal(tfm_optimizer_save(oa, path), TFM_OK);
    /* Another kind's file is refused and changes nothing. */
    tfm_optimizer_options os;
    tfm_optimizer_options_init(&os, TFM_OPTIMIZER_SGD);
    os.momentum = 0.5;
    assert_int_equal(tfm_optimizer_create(b.m, &os, &sgd), TFM_OK);
    assert_int_equal(tfm_optimizer_load(sgd, path), TFM_ERR_FORMAT);
    assert_true(tfm_optimizer_get_lr(sgd) == 1e-3);
    assert_int_equal(tfm_optimizer_load(ob, path), TFM_OK);
    assert_true(tfm_optimizer_get_lr(ob) == 0.25);
    memcpy(b.p[0]->data, a.p[0]->data, 24 * 4);
    memcpy(b.p[1]->data, a.p[1]->data, 4 * 4);
    snap sa, sb;
    take(&a, oa, &sa);
    take(&b, ob, &sb);
    assert_memory_equal(&sa, &sb, sizeof sa);
    fill_grads(&a, -0.3f);
    fill_grads(&b, -0.3f);
    assert_int_equal(tfm_optimizer_step(oa), TFM_OK);
    assert_int_equal(tfm_optimizer_step(ob), TFM_OK);
    take(&a, oa, &sa);
    take(&b, ob, &sb);
    assert_memory_equal(&sa, &sb, sizeof sa);
    unlink(path);
    assert_int_equal(tfm_optimizer_load(ob, path), TFM_ERR_IO);
    tfm_optimizer_free(oa);
    tfm_optimizer_free(ob);
    tfm_optimizer_free(sgd);
    net_free(&a);
    net_free(&b);
}

/* Threads saving to one path at once: each call writes its own temporary
 * file, so every save succeeds and the file left is a whole one. */
typedef struct saver {
    tfm_optimizer *opt;
    const char *path;
    tfm_status st;
} saver;

static void *save_many(void *p)
{
    saver *s = p;
    s->st = TFM_OK;
    for (int i = 0; i < 20 && s->st == TFM_OK; i++)
        s->st = tfm_optimizer_save(s->opt, s->path);
    return NULL;
}

static void test_concurrent_save(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/tfm_optim_c%ld.safetensors",
             (long)getpid());
    net n;
    net_init(&n);
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAM);
    tfm_optimizer *opt;
    assert_int_equal(tfm_optimizer_create(n.m, &o, &opt), TFM_OK);
    fill_grads(&n, 0.5f);
    assert_int_equal(tfm_optimizer_step(opt), TFM_OK);
    pthread_t th[4];
    saver s[4];
    for (int i = 0; i < 4; i++) {
        s[i] = (saver){ opt, path, TFM_OK };
        assert_int_equal(pthread_create(&th[i], NULL, save_many, &s[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(s[i].st, TFM_OK);
    }
    assert_int_equal(tfm_optimizer_load(opt, path), TFM_OK);
    unlink(path);
    tfm_optimizer_free(opt);
    net_free(&n);
}

int main(int argc, char **argv)
{
    g_path = argc > 1 ? argv[1] : TFM_TRAINING_FIXTURE;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optimizers_vs_torch),
        cmocka_unit_test(test_non_finite_leaves_all),
        cmocka_unit_test(test_clip_hand_worked),
        cmocka_unit_test(test_schedules_hand_worked),
        cmocka_unit_test(test_option_and_state_errors),
        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_concurrent_save),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
