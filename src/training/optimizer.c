/* Optimizers over a module's parameter table (training.h): SGD, Adam,
 * AdamW as torch.optim of PyTorch 1.13 defines them (torch/optim/sgd.py,
 * adam.py, adamw.py: _single_tensor_*), gradient clipping by global norm
 * (torch/nn/utils/clip_grad.py), state by name, saving and loading.
 *
 * The arithmetic follows torch's order of tensor operations in float32;
 * the scalars that Python computes (1 - beta1, lr / (1 - beta1^t),
 * sqrt(1 - beta2^t)) are computed in double and rounded to float where a
 * tensor operation takes them, as ATen casts a Python scalar to the
 * tensor's type.
 *
 * Every parameter's state lives in one block: for parameter i, n_slots
 * arrays of its numel floats from offset[i]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/number_parse.h"
#include "base/self_sized.h"
#include "nn/module_impl.h"
#include "nn/weight_bind.h"
#include "base/tensor_impl.h"
#include "transformer/names.h"
#include "transformer/safetensors.h"
#include "transformer/training.h"

#define MAX_SLOTS 3

struct tfm_optimizer {
    tfm_module *module;
    /* The module the caller owns that `module` is or is a part of,
     * retained (base/lifetime.h): freed before the optimizer, it stays
     * until tfm_optimizer_free, and step / zero_grad refuse. */
    tfm_module *root;
    tfm_optimizer_options o;
    int n;              /* distinct parameters (first name of each) */
    int *index;         /* [n] index into module->params */
    int64_t *steps;     /* [n] steps taken by each parameter */
    int64_t *offset;    /* [n] start of the parameter's state in `state` */
    float *state;       /* n_slots * sum of numel floats, zeroed */
    int64_t state_len;
    int n_slots;
    /* [n] each parameter's weight decay: o.weight_decay unless
     * tfm_optimizer_set_weight_decay gave it its own (torch's parameter
     * groups). */
    double *weight_decay;
};

static const char *const SGD_SLOTS[] = { "momentum_buffer" };
static const char *const ADAM_SLOTS[] = { "exp_avg", "exp_avg_sq",
                                          "max_exp_avg_sq" };

static const char *slot_name(const tfm_optimizer *opt, int s)
{
    return opt->o.kind == TFM_OPTIMIZER_SGD ? SGD_SLOTS[s] : ADAM_SLOTS[s];
}

static tfm__param *param_of(const tfm_optimizer *opt, int i)
{
    return &opt->module->params[opt->index[i]];
}

/* ---- Options ------------------------------------------------------------ */

void tfm_optimizer_options_init(tfm_optimizer_options *o,
                                tfm_optimizer_kind kind)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->kind = kind;
    o->lr = 1e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->weight_decay = kind == TFM_OPTIMIZER_ADAMW ? 1e-2 : 0.0;
}

static int nonneg(double x)
{
    return x >= 0.0 && isfinite(x);
}

/* Copies the caller's options over the defaults of their kind and checks
 * them as torch's constructors do. */
static tfm_status read_options(const tfm_optimizer_options *in,
                               tfm_optimizer_options *o)
{
    const size_t kind_end = offsetof(tfm_optimizer_options, kind) +
                            sizeof in->kind;
    if (in->struct_size < kind_end)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_create: struct_size %zu is too "
                         "small (sizeof(tfm_optimizer_options) is %zu)",
                         in->struct_size, sizeof *o);
    if ((unsigned)in->kind >= TFM_OPTIMIZER_KIND_COUNT)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_create: unknown optimizer kind %d",
                         (int)in->kind);
    tfm_optimizer_options_init(o, in->kind);
    tfm__self_sized_copy(o, sizeof *o, in, in->struct_size);
    o->struct_size = sizeof *o;
    if (!nonneg(o->lr))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_create: invalid learning rate %g",
                         o->lr);
    if (!nonneg(o->weight_decay))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_create: invalid weight_decay %g",
                         o->weight_decay);
    if (o->kind == TFM_OPTIMIZER_SGD) {
        if (!nonneg(o->momentum) || !isfinite(o->dampening))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "tfm_optimizer_create: invalid momentum %g or "
                             "dampening %g", o->momentum, o->dampening);
        if (o->nesterov && (o->momentum <= 0.0 || o->dampening != 0.0))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "tfm_optimizer_create: Nesterov momentum "
                             "requires a momentum and zero dampening");
    } else {
        if (!(o->beta1 >= 0.0 && o->beta1 < 1.0) ||
            !(o->beta2 >= 0.0 && o->beta2 < 1.0))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "tfm_optimizer_create: betas (%g, %g) not in "
                             "[0, 1)", o->beta1, o->beta2);
        if (!nonneg(o->eps))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "tfm_optimizer_create: invalid epsilon %g",
                             o->eps);
    }
    return TFM_OK;
}

/* ---- Create / free ------------------------------------------------------ */

void tfm_optimizer_free(tfm_optimizer *opt)
{
    if (!opt)
        return;
    tfm__free(opt->index);
    tfm__free(opt->steps);
    tfm__free(opt->offset);
    tfm__free(opt->state);
    tfm__free(opt->weight_decay);
    tfm__module_release(opt->root);
    tfm__free(opt);
}

/* TFM_OK, or the error of a call through an optimizer whose module was
 * freed (tfm_module_free before tfm_optimizer_free). */
static tfm_status check_module(const tfm_optimizer *opt, const char *what)
{
    if (tfm__module_freed(opt->root))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: the module this optimizer refers to has been "
                         "freed (tfm_module_free); nothing was changed",
                         what);
    /* Stored (16-, 8-, 4-bit or mapped) weights are not trained. */
    return tfm__module_check_float(opt->module, what);
}

tfm_status tfm_optimizer_create(tfm_module *module,
                                const tfm_optimizer_options *options,
                                tfm_optimizer **out)
{
    if (!module || !options || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_optimizer_create: module, options and out are "
                         "required");
    tfm_optimizer_options o;
    tfm_status st = read_options(options, &o);
    if (st == TFM_OK)
        st = tfm__module_check_float(module, "tfm_optimizer_create");
    if (st != TFM_OK)
        return st;
    tfm_optimizer *opt = tfm__calloc(1, sizeof *opt);
    const int np = module->n_params;
    if (opt) {
        opt->module = module;
        opt->o = o;
        opt->index = tfm__calloc(np > 0 ? (size_t)np : 1, sizeof(int));
        opt->steps = tfm__calloc(np > 0 ? (size_t)np : 1, sizeof(int64_t));
        opt->offset = tfm__calloc(np > 0 ? (size_t)np : 1, sizeof(int64_t));
        opt->weight_decay = tfm__calloc(np > 0 ? (size_t)np : 1,
                                        sizeof(double));
    }
    if (!opt || !opt->index || !opt->steps || !opt->offset ||
        !opt->weight_decay) {
        tfm_optimizer_free(opt);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "tfm_optimizer_create: out of memory");
    }
    if (o.kind == TFM_OPTIMIZER_SGD)
        opt->n_slots = o.momentum != 0.0 ? 1 : 0;
    else
        opt->n_slots = o.amsgrad ? 3 : 2;
    int64_t total = 0;
    for (int i = 0; i < np; i++) {
        int shared = 0;     /* a second name for memory already listed */
        for (int j = 0; j < opt->n && !shared; j++)
            shared = param_of(opt, j)->data == module->params[i].data;
        if (shared)
            continue;
        opt->index[opt->n] = i;
        opt->offset[opt->n] = total;
        opt->weight_decay[opt->n] = o.weight_decay;
        opt->n++;
        if (total > INT64_MAX / 4 - module->params[i].numel) {
            tfm_optimizer_free(opt);
            return tfm__fail(TFM_ERR_OVERFLOW,
                             "tfm_optimizer_create: state size overflows");
        }
        total += module->params[i].numel;
    }
    size_t bytes;
    if (!tfm__mul_size((size_t)total * (size_t)opt->n_slots, sizeof(float),
                       &bytes)) {
        tfm_optimizer_free(opt);
        return tfm__fail(TFM_ERR_OVERFLOW,
                         "tfm_optimizer_create: state size overflows");
    }
    for (int i = 0; i < opt->n; i++)
        opt->offset[i] *= opt->n_slots;
    opt->state_len = total * opt->n_slots;
    opt->state = tfm__calloc(bytes > 0 ? bytes : 1, 1);
    if (!opt->state) {
        tfm_optimizer_free(opt);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "tfm_optimizer_create: out of memory for %zu bytes "
                         "of state", bytes);
    }
    if (!(opt->root = tfm__module_retain(module, "tfm_optimizer_create"))) {
        tfm_optimizer_free(opt);
        return TFM_ERR_INVALID_ARGUMENT;
    }
    *out = opt;
    return TFM_OK;
}

/* ---- Checks --------------------------------------------------------------- */

/* TFM_ERR_NON_FINITE naming the first gradient with a NaN or infinity;
 * *any is set when some parameter has gradient storage. */
static tfm_status check_grads(const tfm_optimizer *opt, const char *what,
                              int *any)
{
    *any = 0;
    for (int i = 0; i < opt->n; i++) {
        const tfm__param *p = param_of(opt, i);
        float *grad = tfm__param_grad(p);
        if (!grad)
            continue;
        *any = 1;
        for (int64_t k = 0; k < p->numel; k++)
            if (!isfinite(grad[k]))
                return tfm__fail(TFM_ERR_NON_FINITE,
                                 "%s: the gradient of \"%s\" holds %s at "
                                 "element %lld; nothing was changed", what,
                                 p->name, isnan(grad[k]) ? "NaN"
                                                            : "an infinity",
                                 (long long)k);
    }
    return TFM_OK;
}

/* ---- Steps ------------------------------------------------------------------ */

static void sgd_step(const tfm_optimizer_options *o, float *p, const float *g,
                     float *buf, int64_t n, int64_t t)
{
    const float wd = (float)o->weight_decay, mom = (float)o->momentum;
    const float keep = (float)(1.0 - o->dampening), neg_lr = (float)-o->lr;
    for (int64_t k = 0; k < n; k++) {
        float d = o->maximize ? -g[k] : g[k];
        if (o->weight_decay != 0.0)
            d = d + wd * p[k];
        if (buf) {
            buf[k] = t == 1 ? d : buf[k] * mom + keep * d;
            d = o->nesterov ? d + mom * buf[k] : buf[k];
        }
        p[k] = p[k] + neg_lr * d;
    }
}

static void adam_step(const tfm_optimizer_options *o, float *p, const float *g,
                      float *m, float *v, float *vmax, int64_t n, int64_t t)
{
    const int decoupled = o->kind == TFM_OPTIMIZER_ADAMW;
    const float b1 = (float)o->beta1, b2 = (float)o->beta2;
    const float c1 = (float)(1.0 - o->beta1), c2 = (float)(1.0 - o->beta2);
    const float wd = (float)o->weight_decay;
    const float shrink = (float)(1.0 - o->lr * o->weight_decay);
    const double bc1 = 1.0 - pow(o->beta1, (double)t);
    const double bc2 = 1.0 - pow(o->beta2, (double)t);
    const float neg_step = (float)-(o->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2), eps = (float)o->eps;
    for (int64_t k = 0; k < n; k++) {
        float gk = o->maximize ? -g[k] : g[k];
        if (decoupled)
            p[k] = p[k] * shrink;
        else if (o->weight_decay != 0.0)
            gk = gk + wd * p[k];
        m[k] = m[k] * b1 + c1 * gk;
        v[k] = v[k] * b2 + c2 * gk * gk;
        float vk = v[k];
        if (vmax) {
            vmax[k] = vmax[k] > vk ? vmax[k] : vk;
            vk = vmax[k];
        }
        const float denom = sqrtf(vk) / bc2_sqrt + eps;
        p[k] = p[k] + neg_step * (m[k] / denom);
    }
}

tfm_status tfm_optimizer_step(tfm_optimizer *opt)
{
    if (!opt)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_optimizer_step: optimizer is NULL");
    int any = 0;
    tfm_status st = check_module(opt, "tfm_optimizer_step");
    if (st == TFM_OK)
        st = check_grads(opt, "tfm_optimizer_step", &any);
    if (st != TFM_OK)
        return st;
    if (!any && opt->n > 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_step: no parameter has gradients "
                         "(put the module in training mode with "
                         "tfm_module_train and run a backward pass)");
    for (int i = 0; i < opt->n; i++) {
        tfm__param *p = param_of(opt, i);
        float *grad = tfm__param_grad(p);
        if (!grad)
            continue;
        const int64_t t = ++opt->steps[i];
        float *s = opt->state + opt->offset[i];
        const int64_t n = p->numel;
        tfm_optimizer_options o = opt->o;
        o.weight_decay = opt->weight_decay[i];
        if (o.kind == TFM_OPTIMIZER_SGD)
            sgd_step(&o, p->data, grad, opt->n_slots ? s : NULL, n, t);
        else
            adam_step(&o, p->data, grad, s, s + n,
                      o.amsgrad ? s + 2 * n : NULL, n, t);
    }
    return TFM_OK;
}

void tfm_optimizer_zero_grad(tfm_optimizer *opt)
{
    if (!opt || check_module(opt, "tfm_optimizer_zero_grad") != TFM_OK)
        return;
    for (int i = 0; i < opt->n; i++) {
        tfm__param *p = param_of(opt, i);
        float *grad = tfm__param_grad(p);
        if (grad)
            memset(grad, 0, (size_t)p->numel * sizeof(float));
    }
}

tfm_status tfm_optimizer_set_lr(tfm_optimizer *opt, double lr)
{
    if (!opt)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_optimizer_set_lr: optimizer is NULL");
    if (!nonneg(lr))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_set_lr: invalid learning rate %g",
                         lr);
    opt->o.lr = lr;
    return TFM_OK;
}

double tfm_optimizer_get_lr(const tfm_optimizer *opt)
{
    return opt ? opt->o.lr : 0.0;
}

/* ---- Clipping ---------------------------------------------------------------- */

tfm_status tfm_optimizer_clip_grad_norm(tfm_optimizer *opt, double max_norm,
                                        double norm_type, double *total_norm)
{
    if (!opt)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_optimizer_clip_grad_norm: optimizer is NULL");
    if (check_module(opt, "tfm_optimizer_clip_grad_norm") != TFM_OK)
        return TFM_ERR_INVALID_ARGUMENT;
    if (!(max_norm >= 0.0) || !(norm_type > 0.0))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_clip_grad_norm: max_norm %g must be "
                         ">= 0 and norm_type %g > 0", max_norm, norm_type);
    int any;
    tfm_status st = check_grads(opt, "tfm_optimizer_clip_grad_norm", &any);
    if (st != TFM_OK)
        return st;
    const int inf = isinf(norm_type);
    double total = 0.0;
    for (int i = 0; i < opt->n; i++) {
        const tfm__param *p = param_of(opt, i);
        float *grad = tfm__param_grad(p);
        if (!grad)
            continue;
        for (int64_t k = 0; k < p->numel; k++) {
            const double a = fabs((double)grad[k]);
            if (inf)
                total = a > total ? a : total;
            else if (norm_type == 2.0)
                total += a * a;
            else
                total += pow(a, norm_type);
        }
    }
    if (!inf)
        total = norm_type == 2.0 ? sqrt(total) : pow(total, 1.0 / norm_type);
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) {
        const float c = (float)coef;
        for (int i = 0; i < opt->n; i++) {
            tfm__param *p = param_of(opt, i);
            float *grad = tfm__param_grad(p);
            if (grad)
                for (int64_t k = 0; k < p->numel; k++)
                    grad[k] *= c;
        }
    }
    if (total_norm)
        *total_norm = total;
    return TFM_OK;
}

/* ---- State by name ------------------------------------------------------------ */

/* The optimizer's parameter of that name (any of its names), or -1. */
static int find(const tfm_optimizer *opt, const char *name)
{
    const tfm_module *m = opt->module;
    for (int j = 0; j < m->n_params; j++) {
        if (strcmp(m->params[j].name, name) != 0)
            continue;
        for (int i = 0; i < opt->n; i++)
            if (param_of(opt, i)->data == m->params[j].data)
                return i;
    }
    return -1;
}

tfm_status tfm_optimizer_set_weight_decay(tfm_optimizer *opt,
                                          const char *param,
                                          double weight_decay)
{
    if (!opt || !param)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_optimizer_set_weight_decay: optimizer and "
                         "param are required");
    if (check_module(opt, "tfm_optimizer_set_weight_decay") != TFM_OK)
        return TFM_ERR_INVALID_ARGUMENT;
    if (!nonneg(weight_decay))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_set_weight_decay: invalid "
                         "weight_decay %g", weight_decay);
    const int i = find(opt, param);
    if (i < 0)
        return tfm__fail(TFM_ERR_NOT_FOUND,
                         "tfm_optimizer_set_weight_decay: no parameter "
                         "\"%s\"", param);
    opt->weight_decay[i] = weight_decay;
    return TFM_OK;
}

/* Slot index of `state` (0 .. n_slots-1), MAX_SLOTS for "step", or -1. */
static int find_slot(const tfm_optimizer *opt, const char *state)
{
    if (strcmp(state, "step") == 0)
        return MAX_SLOTS;
    for (int s = 0; s < opt->n_slots; s++)
        if (strcmp(slot_name(opt, s), state) == 0)
            return s;
    return -1;
}

static tfm_status locate(const tfm_optimizer *opt, const char *param,
                         const char *state, const tfm_tensor *t,
                         const char *what, int *pi, int *ps)
{
    if (!opt || !param || !state || !t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "%s: optimizer, param, state and the tensor are "
                         "required", what);
    tfm_status st = check_module(opt, what);
    if (st != TFM_OK)
        return st;
    const int i = find(opt, param);
    if (i < 0)
        return tfm__fail(TFM_ERR_NOT_FOUND, "%s: no parameter \"%s\"", what,
                         param);
    const int s = find_slot(opt, state);
    if (s < 0)
        return tfm__fail(TFM_ERR_NOT_FOUND,
                         "%s: this %s optimizer keeps no state \"%s\"", what,
                         tfm_enum_name(TFM_ENUM_OPTIMIZER, opt->o.kind), state);
    const tfm__param *p = param_of(opt, i);
    st = s == MAX_SLOTS
             ? tfm__check_shape(t, state, 1, (int64_t[]){ 1 })
             : tfm__check_shape(t, state, p->rank, p->shape);
    if (st != TFM_OK)
        return st;
    *pi = i;
    *ps = s;
    return TFM_OK;
}

tfm_status tfm_optimizer_get_state(const tfm_optimizer *opt,
                                   const char *param, const char *state,
                                   tfm_tensor *out)
{
    int i = 0, s = 0;
    tfm_status st = locate(opt, param, state, out, "tfm_optimizer_get_state",
                           &i, &s);
    if (st != TFM_OK)
        return st;
    if (s == MAX_SLOTS) {
        out->data[0] = (float)opt->steps[i];
        return TFM_OK;
    }
    const int64_t n = param_of(opt, i)->numel;
    memcpy(out->data, opt->state + opt->offset[i] + s * n,
           (size_t)n * sizeof(float));
    return TFM_OK;
}

/* Whether slot s holds second moments (Adam's exp_avg_sq and
 * max_exp_avg_sq: running means of squared gradients), which cannot be
 * negative: a negative one makes sqrt() NaN at the next step. */
static int second_moment(const tfm_optimizer *opt, int s)
{
    return opt->o.kind != TFM_OPTIMIZER_SGD && s >= 1 && s < MAX_SLOTS;
}

/* The index of the first negative value of data[n], or -1. */
static int64_t first_negative(const float *data, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        if (data[k] < 0.0f)
            return k;
    return -1;
}

/* A step count stored as a float: a non-negative integer below 2^53. */
static int step_value(float f, int64_t *out)
{
    if (!(f >= 0.0f && f < 9007199254740992.0f) || f != floorf(f))
        return 0;
    *out = (int64_t)f;
    return 1;
}

tfm_status tfm_optimizer_set_state(tfm_optimizer *opt, const char *param,
                                   const char *state, const tfm_tensor *value)
{
    int i = 0, s = 0;
    tfm_status st = locate(opt, param, state, value,
                           "tfm_optimizer_set_state", &i, &s);
    if (st != TFM_OK)
        return st;
    for (int64_t k = 0; k < value->numel; k++)
        if (!isfinite(value->data[k]))
            return tfm__fail(TFM_ERR_NON_FINITE,
                             "tfm_optimizer_set_state: \"%s\" of \"%s\" "
                             "holds a non-finite value", state, param);
    const int64_t neg = second_moment(opt, s)
                            ? first_negative(value->data, value->numel)
                            : -1;
    if (neg >= 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_optimizer_set_state: \"%s\" of \"%s\" holds "
                         "a negative value (%g at index %lld); second "
                         "moments are never negative", state, param,
                         (double)value->data[neg], (long long)neg);
    if (s == MAX_SLOTS) {
        int64_t t;
        if (!step_value(value->data[0], &t))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "tfm_optimizer_set_state: step %g is not a "
                             "non-negative integer", (double)value->data[0]);
        opt->steps[i] = t;
        return TFM_OK;
    }
    const int64_t n = param_of(opt, i)->numel;
    memcpy(opt->state + opt->offset[i] + s * n, value->data,
           (size_t)n * sizeof(float));
    return TFM_OK;
}

/* ---- Saving and loading --------------------------------------------------------- */

/* "<param>.<state>" into a new string (NULL when out of memory). */
static char *state_key(const char *param, const char *state)
{
    size_t n = strlen(param) + strlen(state) + 2;
    char *key = tfm__malloc(n);
    if (key)
        snprintf(key, n, "%s.%s", param, state);
    return key;
}

static tfm_status add_state(tfm_safetensors_writer *w, const char *param,
                            const char *state, int rank, const int64_t *shape,
                            float *data)
{
    char *key = state_key(param, state);
    tfm_tensor *t = NULL;
    tfm_status st = key ? tfm_tensor_wrap(rank, shape, data, &t)
                        : tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                                    "tfm_optimizer_save: out of memory");
    if (st == TFM_OK)
        st = tfm_safetensors_writer_add(w, key, t);
    tfm_tensor_free(t);
    tfm__free(key);
    return st;
}

tfm_status tfm_optimizer_save(const tfm_optimizer *opt, const char *path)
{
    if (!opt || !path)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_optimizer_save: optimizer and path are "
                         "required");
    if (check_module(opt, "tfm_optimizer_save") != TFM_OK)
        return TFM_ERR_INVALID_ARGUMENT;
    tfm_safetensors_writer *w = NULL;
    tfm_status st = tfm_safetensors_writer_create(&w);
    char lr[40];
    snprintf(lr, sizeof lr, "%.17g", opt->o.lr);
    if (st == TFM_OK)
        st = tfm_safetensors_writer_set_metadata(w, "optimizer",
                                                 tfm_enum_name(TFM_ENUM_OPTIMIZER, opt->o.kind));
    if (st == TFM_OK)
        st = tfm_safetensors_writer_set_metadata(w, "lr", lr);
    for (int i = 0; i < opt->n && st == TFM_OK; i++) {
        const tfm__param *p = param_of(opt, i);
        /* the exact count in the metadata ("<param>.step", decimal); the
         * float tensor too, rounded past 2^24, for readers before 1.3 */
        float step = (float)opt->steps[i];
        char *key = state_key(p->name, "step"), count[24];
        snprintf(count, sizeof count, "%lld", (long long)opt->steps[i]);
        st = key ? tfm_safetensors_writer_set_metadata(w, key, count)
                 : tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "tfm_optimizer_save: out of memory");
        tfm__free(key);
        if (st == TFM_OK)
            st = add_state(w, p->name, "step", 1, (int64_t[]){ 1 }, &step);
        for (int s = 0; s < opt->n_slots && st == TFM_OK; s++)
            st = add_state(w, p->name, slot_name(opt, s), p->rank, p->shape,
                           opt->state + opt->offset[i] + s * p->numel);
    }
    if (st == TFM_OK)
        st = tfm_safetensors_writer_save(w, path);
    tfm_safetensors_writer_free(w);
    return st;
}

/* Reads tensor `key` of parameter p's shape (or [1]) into dst: float32
 * (what tfm_optimizer_save writes), finite, and not negative when it is a
 * second moment. */
static tfm_status load_one(const tfm_safetensors *f, const char *param,
                           const char *state, int rank, const int64_t *shape,
                           int second, float *dst)
{
    char *key = state_key(param, state);
    if (!key)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "tfm_optimizer_load: out of memory");
    tfm_tensor *t = NULL;
    tfm_dtype dtype = TFM_DTYPE_F32;
    tfm_status st = tfm_safetensors_info(f, key, &dtype, NULL, NULL);
    if (st == TFM_OK && dtype != TFM_DTYPE_F32)
        st = tfm__fail(TFM_ERR_FORMAT,
                       "tfm_optimizer_load: \"%s\" is not float32 (%s)", key,
                       tfm_enum_name(TFM_ENUM_DTYPE, dtype)
                           ? tfm_enum_name(TFM_ENUM_DTYPE, dtype)
                           : "another dtype");
    if (st == TFM_OK)
        st = tfm_safetensors_read(f, key, &t);
    if (st == TFM_ERR_NOT_FOUND)
        st = tfm__fail(TFM_ERR_FORMAT,
                       "tfm_optimizer_load: the file has no \"%s\"", key);
    if (st == TFM_OK &&
        tfm__check_shape(t, key, rank, shape) != TFM_OK)
        st = tfm__fail(TFM_ERR_FORMAT,
                       "tfm_optimizer_load: \"%s\" has another shape than "
                       "the parameter", key);
    for (int64_t k = 0; st == TFM_OK && k < t->numel; k++)
        if (!isfinite(t->data[k]))
            st = tfm__fail(TFM_ERR_NON_FINITE,
                           "tfm_optimizer_load: \"%s\" holds a non-finite "
                           "value", key);
    const int64_t neg = st == TFM_OK && second
                            ? first_negative(t->data, t->numel)
                            : -1;
    if (neg >= 0)
        st = tfm__fail(TFM_ERR_FORMAT,
                       "tfm_optimizer_load: \"%s\" holds a negative value "
                       "(%g at index %lld); second moments are never "
                       "negative", key, (double)t->data[neg], (long long)neg);
    if (st == TFM_OK)
        memcpy(dst, t->data, (size_t)t->numel * sizeof(float));
    tfm_tensor_free(t);
    tfm__free(key);
    return st;
}

/* The exact step count of param from the metadata "<param>.step" (files
 * of 1.3 on), which must round to the float tensor's; files before keep
 * the float's (*step as read). */
static tfm_status exact_step(const tfm_safetensors *f, const char *param,
                             float rounded, int64_t *step)
{
    char *key = state_key(param, "step");
    if (!key)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "tfm_optimizer_load: out of memory");
    const char *text = tfm_safetensors_metadata(f, key);
    int64_t v = 0;
    tfm_status st = TFM_OK;
    if (text && (tfm__parse_int64(text, &v) != TFM__NUMBER_OK || v < 0 ||
                 (float)v != rounded))
        st = tfm__fail(TFM_ERR_FORMAT,
                       "tfm_optimizer_load: metadata \"%s\" is \"%s\", not "
                       "a whole number >= 0 equal to the tensor's step %g",
                       key, text, (double)rounded);
    else if (text)
        *step = v;
    tfm__free(key);
    return st;
}

tfm_status tfm_optimizer_load(tfm_optimizer *opt, const char *path)
{
    if (!opt || !path)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_optimizer_load: optimizer and path are "
                         "required");
    if (check_module(opt, "tfm_optimizer_load") != TFM_OK)
        return TFM_ERR_INVALID_ARGUMENT;
    tfm_safetensors *f = NULL;
    tfm_status st = tfm_safetensors_open(path, &f);
    if (st != TFM_OK)
        return st;
    const char *kind = tfm_safetensors_metadata(f, "optimizer");
    const char *lr_text = tfm_safetensors_metadata(f, "lr");
    double lr = -1.0;
    if (lr_text && tfm__parse_double(lr_text, &lr) != TFM__NUMBER_OK)
        lr = -1.0;
    if (!kind || strcmp(kind, tfm_enum_name(TFM_ENUM_OPTIMIZER, opt->o.kind)) != 0)
        st = tfm__fail(TFM_ERR_FORMAT,
                       "tfm_optimizer_load: \"%s\" holds the state of %s%s%s"
                       ", not of %s", path, kind ? "\"" : "",
                       kind ? kind : "no optimizer", kind ? "\"" : "",
                       tfm_enum_name(TFM_ENUM_OPTIMIZER, opt->o.kind));
    else if (!lr_text || !nonneg(lr))
        st = tfm__fail(TFM_ERR_FORMAT,
                       "tfm_optimizer_load: \"%s\" has no valid \"lr\" (a "
                       "decimal number >= 0, src/base/number_parse.h)", path);
    /* exactly the model's parameters: every one's states (below) and
     * nothing else */
    const int64_t expected = (int64_t)opt->n * (1 + opt->n_slots);
    if (st == TFM_OK && tfm_safetensors_count(f) != expected)
        st = tfm__fail(TFM_ERR_FORMAT,
                       "tfm_optimizer_load: \"%s\" holds %lld tensors; this "
                       "optimizer over %d parameters keeps %lld (a state "
                       "of a parameter the model lacks, or of another "
                       "optimizer setting)", path,
                       (long long)tfm_safetensors_count(f), opt->n,
                       (long long)expected);
    float *state = NULL;
    int64_t *steps = NULL;
    if (st == TFM_OK) {
        state = tfm__malloc((size_t)(opt->state_len > 0 ? opt->state_len : 1) *
                            sizeof(float));
        steps = tfm__malloc((size_t)(opt->n > 0 ? opt->n : 1) *
                            sizeof(int64_t));
        if (!state || !steps)
            st = tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                           "tfm_optimizer_load: out of memory");
    }
    for (int i = 0; i < opt->n && st == TFM_OK; i++) {
        const tfm__param *p = param_of(opt, i);
        float step;
        st = load_one(f, p->name, "step", 1, (int64_t[]){ 1 }, 0, &step);
        if (st == TFM_OK && !step_value(step, &steps[i]))
            st = tfm__fail(TFM_ERR_FORMAT,
                           "tfm_optimizer_load: step %g of \"%s\" is not a "
                           "non-negative integer", (double)step, p->name);
        if (st == TFM_OK)
            st = exact_step(f, p->name, step, &steps[i]);
        for (int s = 0; s < opt->n_slots && st == TFM_OK; s++)
            st = load_one(f, p->name, slot_name(opt, s), p->rank, p->shape,
                          second_moment(opt, s),
                          state + opt->offset[i] + s * p->numel);
    }
    tfm_safetensors_close(f);
    if (st != TFM_OK) {
        tfm__free(state);
        tfm__free(steps);
        return st;
    }
    tfm__free(opt->state);
    tfm__free(opt->steps);
    opt->state = state;
    opt->steps = steps;
    opt->o.lr = lr;
    return TFM_OK;
}
