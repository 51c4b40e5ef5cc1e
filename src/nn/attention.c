/* The functional form of the attention variants (variants.h:
 * tfm_attention_create / tfm_attention_forward) and
 * tfm_attention_get_config. */
#include <math.h>
#include <string.h>

#include "attention/attention_config.h"
#include "attention/attention_job.h"
#include "base/error.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "nn/module_impl.h"

typedef struct tfm__attention {
    tfm_module base;
    tfm__variant var;
} tfm__attention;

static tfm_status attention_macs(const tfm_module *m, int64_t B, int64_t L,
                                 int64_t S, int64_t *acc)
{
    const tfm__variant *v = &((const tfm__attention *)m)->var;
    if (!tfm__macs_add(acc, B * v->n_heads, L, S, v->d_k + v->d_v) ||
        !tfm__variant_macs(v, B, L, S, acc))
        return tfm__fail(TFM_ERR_OVERFLOW, "MAC count overflows int64");
    return TFM_OK;
}

static const tfm__module_ops attention_ops = { NULL, attention_macs };

tfm_status tfm_attention_create(int64_t d_k, int64_t d_v, int64_t n_heads,
                                const tfm_attention_config *config,
                                tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    if (d_k < 1 || d_v < 1 || n_heads < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "d_k (%lld), d_v (%lld) and n_heads (%lld) must be "
                         "at least 1", (long long)d_k, (long long)d_v,
                         (long long)n_heads);
    if (d_k > INT32_MAX || d_v > INT32_MAX || n_heads > INT32_MAX)
        return tfm__fail(TFM_ERR_OVERFLOW,
                         "d_k, d_v and n_heads must fit in 32 bits");
    tfm__variant var;
    tfm_status st = tfm__variant_init(&var, config, n_heads, d_k, d_v);
    if (st != TFM_OK)
        return st;
    tfm__attention *a = (tfm__attention *)tfm__module_alloc(
        sizeof *a, TFM_MODULE_ATTENTION, &attention_ops);
    if (!a)
        return TFM_ERR_OUT_OF_MEMORY;
    a->var = var;
    a->base.variant = &a->var;
    tfm__param_spec specs[TFM__VARIANT_MAX_SPECS];
    int n = 0;
    tfm__variant_param_specs(&a->var, specs, &n);
    if (n > 0 && (st = tfm__module_own_params(&a->base, specs, n)) != TFM_OK) {
        tfm_module_free(&a->base);
        return st;
    }
    tfm__variant_init_params(&a->var);
    *out = &a->base;
    return TFM_OK;
}

/* Checks a rank-4 tensor [B, heads, rows, cols] of the given shape. */
static tfm_status check4(const tfm_tensor *t, const char *name,
                         const char *layout, int64_t b, int64_t heads,
                         int64_t rows, int64_t cols)
{
    if (t->rank != 4)
        return tfm__fail(TFM_ERR_SHAPE, "%s has rank %d, expected 4 %s", name,
                         t->rank, layout);
    const int64_t shape[4] = { b, heads, rows, cols };
    return tfm__check_shape(t, name, 4, shape);
}

tfm_status tfm_attention_forward(const tfm_module *attention,
                                 const tfm_tensor *q, const tfm_tensor *k,
                                 const tfm_tensor *v,
                                 const tfm_attention_masks *masks,
                                 tfm_tensor *out, tfm_tensor *weights)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__module_check(attention, TFM_MODULE_ATTENTION,
                                      "attention");
    if (st != TFM_OK)
        return st;
    const tfm__variant *var = &((const tfm__attention *)attention)->var;
    if (!q || !k || !v || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_attention_forward: %s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : "out");
    const int64_t H = var->n_heads, Hkv = var->n_kv_heads, dk = var->d_k,
                  dv = var->d_v;
    if (q->rank != 4)
        return tfm__fail(TFM_ERR_SHAPE,
                         "q has rank %d, expected 4 [B, H, L, d_k]", q->rank);
    const int64_t B = q->shape[0], L = q->shape[2];
    if (k->rank != 4)
        return tfm__fail(TFM_ERR_SHAPE,
                         "k has rank %d, expected 4 [B, H_kv, S, d_k]",
                         k->rank);
    const int64_t S = k->shape[2];
    if ((st = check4(q, "q", "[B, H, L, d_k]", B, H, L, dk)) != TFM_OK ||
        (st = check4(k, "k", "[B, H_kv, S, d_k]", B, Hkv, S, dk)) != TFM_OK ||
        (st = check4(v, "v", "[B, H_kv, S, d_v]", B, Hkv, S, dv)) != TFM_OK ||
        (st = check4(out, "out", "[B, H, L, d_v]", B, H, L, dv)) != TFM_OK ||
        (weights && (st = check4(weights, "weights", "[B, H, L, S]", B, H, L,
                                 S)) != TFM_OK))
        return st;
    tfm__masks m;
    if ((st = tfm__masks_resolve(masks, B, H, L, S, "tfm_attention_forward",
                                 &m)) != TFM_OK)
        return st;
    return tfm__attend_tensors(var, q, k, v, &m, 0.0f, out, weights);
}

tfm_status tfm_attention_get_config(const tfm_module *module,
                                    tfm_attention_config *config)
{
    if (!module || !config)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_attention_get_config: %s is NULL",
                         !module ? "module" : "config");
    const tfm__variant *v = module->variant;
    if (!v) {
        const tfm_module_kind k = module->kind;
        const int model = k == TFM_MODULE_DECODER_ONLY ||
                          k == TFM_MODULE_ENCODER_ONLY ||
                          k == TFM_MODULE_ENCODER_DECODER;
        return tfm__fail(TFM_ERR_WRONG_KIND,
                         "tfm_attention_get_config: module is of kind %d%s, "
                         "not an attention (%d), multi-head attention (%d) "
                         "or encoder layer (%d) module%s", (int)k,
                         model ? " (a model)" : "", (int)TFM_MODULE_ATTENTION,
                         (int)TFM_MODULE_MHA, (int)TFM_MODULE_ENCODER_LAYER,
                         model ? "; a model's variant is in "
                                 "tfm_model_get_options" : "");
    }
    return tfm__attention_config_write(&v->config, config);
}
