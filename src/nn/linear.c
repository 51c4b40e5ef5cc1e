/* Linear module, as torch.nn.Linear (layers.h): y = x W^T + b. */
#include "base/error.h"
#include "kernels/linear.h"
#include "nn/linear.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "transformer/layers.h"
#include "base/workspace.h"

static tfm_status linear_macs(const tfm_module *m, int64_t batch, int64_t L,
                              int64_t S, int64_t *acc)
{
    const tfm__linear_module *l = (const tfm__linear_module *)m;
    (void)S;
    if (!tfm__macs_add(acc, batch, L, l->in_features, l->out_features))
        return tfm__fail(TFM_ERR_OVERFLOW, "MAC count overflows int64");
    return TFM_OK;
}

static const tfm__module_ops linear_ops = { NULL, linear_macs };

static tfm_status linear_alloc(int64_t in_features, int64_t out_features,
                               tfm__linear_module **out)
{
    if (in_features < 1 || out_features < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "in_features (%lld) and out_features (%lld) must be "
                         "at least 1",
                         (long long)in_features, (long long)out_features);
    if (in_features > INT32_MAX || out_features > INT32_MAX)
        return tfm__fail(TFM_ERR_OVERFLOW, "Linear widths must fit in 32 bits");
    tfm__linear_module *l = (tfm__linear_module *)tfm__module_alloc(
        sizeof *l, TFM_MODULE_LINEAR, &linear_ops);
    if (!l)
        return TFM_ERR_OUT_OF_MEMORY;
    l->in_features = in_features;
    l->out_features = out_features;
    *out = l;
    return TFM_OK;
}

/* nn.Linear's parameters and their reset_parameters: weight and bias
 * U(-1/sqrt(in), 1/sqrt(in)). */
static void linear_specs(tfm__linear_module *l, tfm__param_spec specs[2])
{
    const int64_t in = l->in_features, out = l->out_features;
    specs[0] = (tfm__param_spec){ "weight", 2, { out, in }, &l->weight,
                                  .init = TFM__INIT_LINEAR,
                                  .convertible = 1 };
    specs[1] = (tfm__param_spec){ "bias", 1, { out }, &l->bias,
                                  .init = TFM__INIT_LINEAR_BIAS,
                                  .init_fan_in = in };
}

tfm_status tfm__linear_module_new(int64_t in_features, int64_t out_features,
                                  int bias, tfm__linear_module **out)
{
    tfm__linear_module *l = NULL;
    tfm_status st = linear_alloc(in_features, out_features, &l);
    if (st != TFM_OK)
        return st;
    tfm__param_spec specs[2];
    linear_specs(l, specs);
    if ((st = tfm__module_own_params(&l->base, specs, bias ? 2 : 1))) {
        tfm_module_free(&l->base);
        return st;
    }
    *out = l;
    return TFM_OK;
}

tfm_status tfm__linear_view_new(int64_t in_features, int64_t out_features,
                                float *weight, float *bias, tfm_module *home,
                                tfm__linear_module **out)
{
    tfm__linear_module *l = NULL;
    tfm_status st = linear_alloc(in_features, out_features, &l);
    if (st != TFM_OK)
        return st;
    l->weight = weight;
    l->bias = bias;
    tfm__param_spec specs[2];
    linear_specs(l, specs);
    st = tfm__module_alias_param(&l->base, &specs[0], weight, home);
    if (st == TFM_OK && bias)
        st = tfm__module_alias_param(&l->base, &specs[1], bias, home);
    if (st != TFM_OK) {
        tfm_module_free(&l->base);
        return st;
    }
    *out = l;
    return TFM_OK;
}

tfm_status tfm_linear_create(int64_t in_features, int64_t out_features,
                             int bias, tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__linear_module *l = NULL;
    tfm_status st = tfm__linear_module_new(in_features, out_features, bias,
                                           &l);
    if (st == TFM_OK)
        *out = &l->base;
    return st;
}

tfm_status tfm_linear_forward(const tfm_module *linear, const tfm_tensor *x,
                              tfm_tensor *out)
{
    tfm_status st = tfm__module_check(linear, TFM_MODULE_LINEAR, "linear");
    if (st != TFM_OK)
        return st;
    const tfm__linear_module *l = (const tfm__linear_module *)linear;
    if ((st = tfm__check_rows(x, l->in_features, out, l->out_features)) !=
        TFM_OK)
        return st;
    if (out->data < x->data + x->numel && x->data < out->data + out->numel)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "out must not overlap x");
    int64_t rows = x->numel / l->in_features;
    if (rows > 0)
        tfm__linear_parallel(x->data, l->in_features, rows, l->in_features,
                             l->weight, l->bias, l->out_features, out->data,
                             l->out_features);
    return TFM_OK;
}

/* The layer's widths (tfm__module_x_check_fn: x is checked with them). */
static tfm_status linear_widths(const tfm_module *m, const tfm_tensor *x,
                                const char *what, int64_t *d_in,
                                int64_t *d_out)
{
    (void)x, (void)what;
    const tfm__linear_module *l = (const tfm__linear_module *)m;
    *d_in = l->in_features;
    *d_out = l->out_features;
    return TFM_OK;
}

tfm_status tfm_linear_backward(tfm_module *linear, const tfm_tensor *x,
                               const tfm_tensor *grad_output,
                               tfm_tensor *grad_input)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__module_backward_check(
        linear, TFM_MODULE_LINEAR, "linear", "tfm_linear_backward",
        linear_widths, x, grad_output, grad_input);
    if (st != TFM_OK)
        return st;
    const tfm__linear_module *l = (const tfm__linear_module *)linear;
    const int64_t rows = x->numel / l->in_features;
    tfm__ws_mark mark = tfm__ws_save();
    double *acc = NULL;
    if (l->bias &&
        !(acc = tfm__ws_alloc((size_t)l->out_features * sizeof *acc))) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "tfm_linear_backward: out of memory");
    }
    if ((st = tfm__module_enter_grads(linear, "tfm_linear_backward"))) {
        tfm__ws_restore(mark);
        return st;
    }
    float *gw = tfm__param_grad(&linear->params[0]);
    float *gb = l->bias ? tfm__param_grad(&linear->params[1]) : NULL;
    tfm__linear_backward(x->data, l->in_features, rows, l->in_features,
                         l->weight, l->out_features, grad_output->data,
                         l->out_features, grad_input ? grad_input->data : NULL,
                         gw, gb, acc);
    tfm__module_leave_grads(linear);
    tfm__ws_restore(mark);
    return TFM_OK;
}
