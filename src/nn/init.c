/* Default initialisation of parameters (module.h:
 * tfm_module_reset_parameters): PyTorch's reset_parameters of the torch.nn
 * module each parameter belongs to, drawn from the library's SplitMix64
 * generator (random.h).
 *
 * torch.nn.init (PyTorch 1.13), with fan_in = size(1) * r and
 * fan_out = size(0) * r, r = the product of the axes after the second:
 *   kaiming_uniform_(a = sqrt(5)), nn.Linear's weight: gain sqrt(2/(1+a^2))
 *       = sqrt(1/3), bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in);
 *   xavier_uniform_: bound = sqrt(6 / (fan_in + fan_out));
 *   xavier_normal_:  std = sqrt(2 / (fan_in + fan_out));
 *   normal_: N(0, 1).
 * Uniform values are a + (b - a) u with u = k 2^-53 (53 random bits),
 * rounded to float; normal values come in pairs from the Box-Muller
 * transform of two such uniforms (Box and Muller 1958). */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "nn/module_impl.h"
#include "nn/weight_bind.h"
#include "base/random.h"

/* u in [0, 1): 53 random bits. */
static double uniform01(tfm_rng *rng)
{
    return (double)(tfm__rng_next(rng) >> 11) * 0x1.0p-53;
}

static void fill_uniform(tfm_rng *rng, float *x, int64_t n, double bound)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(-bound + 2.0 * bound * uniform01(rng));
}

static void fill_normal(tfm_rng *rng, float *x, int64_t n, double std)
{
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t i = 0; i < n; i += 2) {
        /* u1 in (0, 1], so the logarithm is finite */
        const double u1 = 1.0 - uniform01(rng), u2 = uniform01(rng);
        const double r = std * sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(two_pi * u2));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(two_pi * u2));
    }
}

static void fill_const(float *x, int64_t n, float value)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = value;
}

/* torch.nn.init._calculate_fan_in_and_fan_out for rank >= 2. */
static void fans(const tfm__param *p, double *fan_in, double *fan_out)
{
    double r = 1.0;
    for (int i = 2; i < p->rank; i++)
        r *= (double)p->shape[i];
    *fan_in = (double)p->shape[1] * r;
    *fan_out = (double)p->shape[0] * r;
}

static void reset(const tfm__param *p, tfm__init init, tfm_rng *rng)
{
    double fan_in = 0.0, fan_out = 0.0;
    if (p->rank >= 2)
        fans(p, &fan_in, &fan_out);
    switch (init) {
    case TFM__INIT_ZERO:
        fill_const(p->data, p->numel, 0.0f);
        break;
    case TFM__INIT_ONE:
        fill_const(p->data, p->numel, 1.0f);
        break;
    case TFM__INIT_CONST:
        fill_const(p->data, p->numel, p->init_value);
        break;
    case TFM__INIT_LINEAR:      /* fan_in: the last axis (per head) */
        fill_uniform(rng, p->data, p->numel,
                     1.0 / sqrt((double)p->shape[p->rank - 1]));
        break;
    case TFM__INIT_LINEAR_BIAS:
        fill_uniform(rng, p->data, p->numel,
                     1.0 / sqrt((double)p->init_fan_in));
        break;
    case TFM__INIT_XAVIER_UNIFORM:
        fill_uniform(rng, p->data, p->numel, sqrt(6.0 / (fan_in + fan_out)));
        break;
    case TFM__INIT_XAVIER_NORMAL:
        fill_normal(rng, p->data, p->numel, sqrt(2.0 / (fan_in + fan_out)));
        break;
    case TFM__INIT_NORMAL:
        fill_normal(rng, p->data, p->numel, 1.0);
        break;
    }
}

tfm_status tfm_module_reset_parameters(tfm_module *module, tfm_rng *rng)
{
    if (!module || !rng)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !module ? "module" : "rng");
    tfm_status fl = tfm__module_check_float(module,
                                            "tfm_module_reset_parameters");
    if (fl != TFM_OK)
        return fl;
    /* nn.Transformer._reset_parameters: xavier_uniform_ on every parameter
     * of more than one axis, after the submodules' own initialisation; in
     * an encoder-decoder model, on its nn.Transformer ("transformer.*"). */
    const char *xavier_prefix =
        module->kind == TFM_MODULE_TRANSFORMER ? ""
        : module->kind == TFM_MODULE_ENCODER_DECODER ? "transformer."
        : NULL;
    for (int i = 0; i < module->n_params; i++) {
        const tfm__param *p = &module->params[i];
        const int xavier =
            xavier_prefix && p->rank > 1 &&
            strncmp(p->name, xavier_prefix, strlen(xavier_prefix)) == 0;
        reset(p, xavier ? TFM__INIT_XAVIER_UNIFORM : p->init, rng);
    }
    return TFM_OK;
}
