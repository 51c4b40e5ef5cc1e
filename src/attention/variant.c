/* The attention variant of a module (variant.h; the variants and their
 * papers are in variants.h and docs/VARIANTS.md). */
#include <math.h>
#include <string.h>

#include "attention/attention_config.h"
#include "base/error.h"
#include "attention/variant.h"
#include "base/alloc.h"

tfm_status tfm__variant_init(tfm__variant *v, const tfm_attention_config *pub,
                             int64_t n_heads, int64_t d_k, int64_t d_v)
{
    tfm_attention_config c;
    tfm_status st = tfm__attention_config_read(pub, &c);
    if (st == TFM_OK)
        st = tfm__attention_config_check(&c, n_heads, d_k, d_v);
    if (st != TFM_OK)
        return st;
    memset(v, 0, sizeof *v);
    v->config = c;
    v->n_heads = n_heads;
    v->n_kv_heads = c.n_kv_heads ? c.n_kv_heads : n_heads;
    v->d_k = d_k;
    v->d_v = d_v;
    v->d_a = c.score == TFM_SCORE_ADDITIVE
                 ? (c.additive_dim ? c.additive_dim : d_k) : 0;
    if (c.rope != TFM_ROPE_NONE) {
        v->rope_dims = c.rope_dims ? c.rope_dims : d_k;
        v->rope_base = c.rope_base != 0.0 ? c.rope_base : 10000.0;
    }
    if (c.relative == TFM_RELATIVE_SHAW) {
        v->max_distance = c.max_distance;
    } else if (c.relative == TFM_RELATIVE_T5) {
        v->max_distance = c.max_distance ? c.max_distance : 128;
        v->num_buckets = c.num_buckets ? c.num_buckets : 32;
    }
    return TFM_OK;
}

void tfm__variant_param_specs(tfm__variant *v, tfm__param_spec *specs,
                              int *n)
{
    const int64_t H = v->n_heads, dk = v->d_k, da = v->d_a;
    switch (v->config.score) {
    case TFM_SCORE_GENERAL:
        specs[(*n)++] = (tfm__param_spec){ "score_weight", 3, { H, dk, dk },
                                           &v->score_weight,
                                           .init = TFM__INIT_LINEAR };
        break;
    case TFM_SCORE_ADDITIVE:
        specs[(*n)++] = (tfm__param_spec){ "additive_query", 3, { H, da, dk },
                                           &v->additive_query,
                                           .init = TFM__INIT_LINEAR };
        specs[(*n)++] = (tfm__param_spec){ "additive_key", 3, { H, da, dk },
                                           &v->additive_key,
                                           .init = TFM__INIT_LINEAR };
        specs[(*n)++] = (tfm__param_spec){ "additive_v", 2, { H, da },
                                           &v->additive_v,
                                           .init = TFM__INIT_LINEAR };
        break;
    case TFM_SCORE_LEARNED_TEMPERATURE:
        specs[(*n)++] = (tfm__param_spec){ "temperature", 1, { H },
                                           &v->temperature,
                                           .init = TFM__INIT_CONST,
                                           .init_value =
                                               (float)sqrt((double)dk) };
        break;
    default:
        break;
    }
    if (v->config.relative == TFM_RELATIVE_SHAW) {
        /* max_distance <= INT32_MAX / 2 (attention_config.c); T5's may be
         * anything up to INT64_MAX, so this is computed for Shaw only. */
        const int64_t n_rel = 2 * v->max_distance + 1;
        specs[(*n)++] = (tfm__param_spec){ "relative_key.weight", 2,
                                           { n_rel, dk }, &v->relative_key,
                                           .init = TFM__INIT_NORMAL };
        if (v->config.relative_values)
            specs[(*n)++] = (tfm__param_spec){ "relative_value.weight", 2,
                                               { n_rel, v->d_v },
                                               &v->relative_value,
                                               .init = TFM__INIT_NORMAL };
    } else if (v->config.relative == TFM_RELATIVE_T5) {
        specs[(*n)++] = (tfm__param_spec){ "relative_attention_bias.weight",
                                           2, { v->num_buckets, H },
                                           &v->t5_bias,
                                           .init = TFM__INIT_NORMAL };
    }
}

void tfm__variant_init_params(tfm__variant *v)
{
    /* Learned temperature starts at sqrt(d_k): the default scaling. */
    for (int64_t h = 0; v->temperature && h < v->n_heads; h++)
        v->temperature[h] = (float)sqrt((double)v->d_k);
}

tfm_status tfm__variant_check_params(const tfm__variant *v)
{
    for (int64_t h = 0; v->temperature && h < v->n_heads; h++) {
        const float t = v->temperature[h];
        if (!(isfinite(t) && t > 0.0f && isfinite(1.0f / t)))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "temperature[%lld] = %g: a learned temperature "
                             "must be finite and > 0", (long long)h,
                             (double)t);
    }
    return TFM_OK;
}

int tfm__variant_macs(const tfm__variant *v, int64_t B, int64_t L, int64_t S,
                      int64_t *acc)
{
    const int64_t H = v->n_heads, dk = v->d_k, da = v->d_a;
    switch (v->config.score) {
    case TFM_SCORE_GENERAL:                     /* q W_h */
        return tfm__macs_add(acc, B * H, L, dk, dk);
    case TFM_SCORE_ADDITIVE:                    /* W_q q, W_k k, v . tanh */
        return tfm__macs_add(acc, B * H, L, da, dk) &&
               tfm__macs_add(acc, B * H, S, da, dk) &&
               tfm__macs_add(acc, B * H, L, S, da);
    default:
        return 1;
    }
}
