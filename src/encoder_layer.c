/* Encoder layer: self-attention and feed-forward sub-layers (layers.h). */
#include <string.h>

#include "error.h"
#include "layers_impl.h"
#include "parallel.h"
#include "tensor_impl.h"
#include "workspace.h"

static void encoder_layer_destroy(tfm_module *m)
{
    tfm__encoder_layer *l = (tfm__encoder_layer *)m;
    tfm_module_free(l->self_attn ? &l->self_attn->base : NULL);
    tfm_module_free(l->ff ? &l->ff->base : NULL);
    tfm_module_free(l->norm1 ? &l->norm1->base : NULL);
    tfm_module_free(l->norm2 ? &l->norm2->base : NULL);
}

tfm_status tfm__encoder_layer_macs(const tfm__encoder_layer *l, int64_t B,
                                   int64_t L, int64_t *acc)
{
    tfm_status st = tfm__mha_macs(l->self_attn, B, L, L, acc);
    return st != TFM_OK ? st : tfm__feed_forward_macs(l->ff, B, L, acc);
}

static tfm_status encoder_layer_macs(const tfm_module *m, int64_t B,
                                     int64_t L, int64_t S, int64_t *acc)
{
    (void)S;
    return tfm__encoder_layer_macs((const tfm__encoder_layer *)m, B, L, acc);
}

static const tfm__module_ops encoder_layer_ops = { encoder_layer_destroy,
                                                   encoder_layer_macs };

tfm_status tfm__encoder_layer_new(const tfm_layer_config *c,
                                  tfm__encoder_layer **out)
{
    return tfm__encoder_layer_new_ex(c, NULL, out);
}

tfm_status tfm__encoder_layer_new_ex(const tfm_layer_config *c,
                                     const tfm_attention_config *a,
                                     tfm__encoder_layer **out)
{
    tfm_status st = tfm__config_check(c);
    if (st != TFM_OK)
        return st;
    tfm__encoder_layer *l = (tfm__encoder_layer *)tfm__module_alloc(
        sizeof *l, TFM_MODULE_ENCODER_LAYER, &encoder_layer_ops);
    if (!l)
        return TFM_ERR_OUT_OF_MEMORY;
    l->config = *c;
    if ((st = tfm__mha_new_ex(c->d_model, c->n_heads, 0, 0, 1, a,
                              &l->self_attn)) ||
        (st = tfm__feed_forward_new(c->d_model, c->d_ff, c->activation,
                                    &l->ff)) ||
        (st = tfm__layer_norm_new(c->d_model, c->layer_norm_eps, &l->norm1)) ||
        (st = tfm__layer_norm_new(c->d_model, c->layer_norm_eps, &l->norm2)) ||
        (st = tfm__module_adopt(&l->base, "self_attn.", &l->self_attn->base)) ||
        (st = tfm__module_adopt(&l->base, "", &l->ff->base)) ||
        (st = tfm__module_adopt(&l->base, "norm1.", &l->norm1->base)) ||
        (st = tfm__module_adopt(&l->base, "norm2.", &l->norm2->base))) {
        tfm_module_free(&l->base);
        return st;
    }
    *out = l;
    return TFM_OK;
}

tfm_status tfm__encoder_layer_run_with(const tfm__encoder_layer *l, float *x,
                                       int64_t rows,
                                       const tfm__sublayer *self_attention)
{
    tfm__ws_mark mark = tfm__ws_save();
    float *tmp = tfm__ws_floats((size_t)(rows * l->config.d_model));
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    if (tmp) {
        tfm__sublayer ff = tfm__feed_forward_sublayer(l->ff, rows);
        int pre = l->config.norm_first;
        st = tfm__residual(self_attention, l->norm1, pre, x, tmp, rows);
        if (st == TFM_OK)
            st = tfm__residual(&ff, l->norm2, pre, x, tmp, rows);
    }
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__encoder_layer_run(const tfm__encoder_layer *l, float *x,
                                  int64_t B, int64_t L, const tfm__masks *m)
{
    tfm__sublayer sa = tfm__self_attention_sublayer(l->self_attn, B, L, m);
    return tfm__encoder_layer_run_with(l, x, B * L, &sa);
}

tfm_status tfm_encoder_layer_create(const tfm_layer_config *config,
                                    tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__encoder_layer *l = NULL;
    tfm_status st = tfm__encoder_layer_new(config, &l);
    if (st == TFM_OK)
        *out = &l->base;
    return st;
}

tfm_status tfm_encoder_layer_create_ex(const tfm_layer_config *layer,
                                       const tfm_attention_config *config,
                                       tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__encoder_layer *l = NULL;
    tfm_status st = tfm__encoder_layer_new_ex(layer, config, &l);
    if (st == TFM_OK)
        *out = &l->base;
    return st;
}

typedef struct encoder_layer_call {
    const tfm__encoder_layer *layer;
    int64_t B, L;
    const tfm__masks *masks;
} encoder_layer_call;

static tfm_status encoder_layer_step(const void *ctx, float *x)
{
    const encoder_layer_call *c = ctx;
    return tfm__encoder_layer_run(c->layer, x, c->B, c->L, c->masks);
}

tfm_status tfm_encoder_layer_forward(const tfm_module *layer,
                                     const tfm_tensor *src,
                                     const tfm_attention_masks *masks,
                                     tfm_tensor *out)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__module_check(layer, TFM_MODULE_ENCODER_LAYER, "layer");
    if (st != TFM_OK)
        return st;
    const tfm__encoder_layer *l = (const tfm__encoder_layer *)layer;
    int64_t B, L;
    tfm__masks m;
    if ((st = tfm__check_activation(src, "src", l->config.d_model, &B, &L)) ||
        (st = tfm__check_shape(out, "out", 3, src ? src->shape : NULL)) ||
        (st = tfm__masks_resolve(masks, B, l->config.n_heads, L, L,
                                 "tfm_encoder_layer_forward", &m)))
        return st;
    encoder_layer_call call = { l, B, L, &m };
    return tfm__run_copy(src->data, out->data, src->numel, encoder_layer_step,
                         &call);
}
