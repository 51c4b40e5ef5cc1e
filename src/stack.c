/* Encoder and decoder stacks (layers.h; Vaswani et al. section 3.1). */
#include <stdio.h>

#include "alloc.h"
#include "error.h"
#include "parallel.h"
#include "stack.h"
#include "tensor_impl.h"

static void stack_destroy(tfm_module *m)
{
    tfm__stack *s = (tfm__stack *)m;
    for (int64_t i = 0; s->layers && i < s->n_layers; i++)
        tfm_module_free(s->layers[i]);
    tfm__free(s->layers);
    tfm_module_free(s->norm ? &s->norm->base : NULL);
}

tfm_status tfm__stack_macs(const tfm__stack *s, int64_t B, int64_t L,
                           int64_t S, int64_t *acc)
{
    for (int64_t i = 0; i < s->n_layers; i++) {
        tfm_status st =
            s->decoder
                ? tfm__decoder_layer_macs(
                      (const tfm__decoder_layer *)s->layers[i], B, L, S, acc)
                : tfm__encoder_layer_macs(
                      (const tfm__encoder_layer *)s->layers[i], B, L, acc);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

static tfm_status stack_macs(const tfm_module *m, int64_t B, int64_t L,
                             int64_t S, int64_t *acc)
{
    return tfm__stack_macs((const tfm__stack *)m, B, L, S, acc);
}

static const tfm__module_ops stack_ops = { stack_destroy, stack_macs };

tfm_status tfm__stack_new(const tfm_layer_config *c, int64_t n_layers,
                          int final_norm, int decoder, tfm__stack **out)
{
    return tfm__stack_new_ex(c, NULL, n_layers, final_norm, decoder, out);
}

tfm_status tfm__stack_new_ex(const tfm_layer_config *c,
                             const tfm_attention_config *attention,
                             int64_t n_layers, int final_norm, int decoder,
                             tfm__stack **out)
{
    tfm_status st = tfm__config_check(c);
    if (st != TFM_OK)
        return st;
    if (decoder && attention)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "decoder stacks take only plain attention");
    if (n_layers < 1 || n_layers > 100000)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_layers (%lld) must be between 1 and 100000",
                         (long long)n_layers);
    tfm__stack *s = (tfm__stack *)tfm__module_alloc(
        sizeof *s, decoder ? TFM_MODULE_DECODER : TFM_MODULE_ENCODER,
        &stack_ops);
    if (!s)
        return TFM_ERR_OUT_OF_MEMORY;
    s->config = *c;
    s->decoder = decoder;
    s->layers = tfm__calloc((size_t)n_layers, sizeof *s->layers);
    if (!s->layers) {
        tfm_module_free(&s->base);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate %lld layers",
                         (long long)n_layers);
    }
    s->n_layers = n_layers;
    for (int64_t i = 0; i < n_layers; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%lld.", (long long)i);
        if (decoder) {
            tfm__decoder_layer *l = NULL;
            st = tfm__decoder_layer_new(c, &l);
            s->layers[i] = l ? &l->base : NULL;
        } else {
            tfm__encoder_layer *l = NULL;
            st = attention ? tfm__encoder_layer_new_ex(c, attention, &l)
                           : tfm__encoder_layer_new(c, &l);
            s->layers[i] = l ? &l->base : NULL;
        }
        if (st == TFM_OK)
            st = tfm__module_adopt(&s->base, prefix, s->layers[i]);
        if (st != TFM_OK) {
            tfm_module_free(&s->base);
            return st;
        }
    }
    if (final_norm &&
        ((st = tfm__layer_norm_new(c->d_model, c->layer_norm_eps, &s->norm)) ||
         (st = tfm__module_adopt(&s->base, "norm.", &s->norm->base)))) {
        tfm_module_free(&s->base);
        return st;
    }
    *out = s;
    return TFM_OK;
}

tfm_status tfm__stack_run(const tfm__stack *s, float *x, int64_t B, int64_t L,
                          const float *memory, int64_t S,
                          const tfm__masks *masks,
                          const tfm__masks *memory_masks)
{
    for (int64_t i = 0; i < s->n_layers; i++) {
        tfm_status st =
            s->decoder
                ? tfm__decoder_layer_run(
                      (const tfm__decoder_layer *)s->layers[i], x, B, L,
                      memory, S, masks, memory_masks)
                : tfm__encoder_layer_run(
                      (const tfm__encoder_layer *)s->layers[i], x, B, L,
                      masks);
        if (st != TFM_OK)
            return st;
    }
    if (s->norm)
        tfm__layer_norm_run(s->norm, x, B * L, x);
    return TFM_OK;
}

static tfm_status create(const tfm_layer_config *config, int64_t n_layers,
                         int final_norm, int decoder, tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__stack *s = NULL;
    tfm_status st = tfm__stack_new(config, n_layers, final_norm, decoder, &s);
    if (st == TFM_OK)
        *out = &s->base;
    return st;
}

tfm_status tfm_encoder_create(const tfm_layer_config *config, int64_t n_layers,
                              int final_norm, tfm_module **out)
{
    return create(config, n_layers, final_norm, 0, out);
}

tfm_status tfm_decoder_create(const tfm_layer_config *config, int64_t n_layers,
                              int final_norm, tfm_module **out)
{
    return create(config, n_layers, final_norm, 1, out);
}

typedef struct stack_call {
    const tfm__stack *stack;
    int64_t B, L, S;
    const float *memory;
    const tfm__masks *masks, *memory_masks;
} stack_call;

static tfm_status stack_step(const void *ctx, float *x)
{
    const stack_call *c = ctx;
    return tfm__stack_run(c->stack, x, c->B, c->L, c->memory, c->S, c->masks,
                          c->memory_masks);
}

tfm_status tfm_encoder_forward(const tfm_module *encoder, const tfm_tensor *src,
                               const tfm_attention_masks *masks,
                               tfm_tensor *out)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__module_check(encoder, TFM_MODULE_ENCODER, "encoder");
    if (st != TFM_OK)
        return st;
    const tfm__stack *s = (const tfm__stack *)encoder;
    int64_t B, L;
    tfm__masks m;
    if ((st = tfm__check_activation(src, "src", s->config.d_model, &B, &L)) ||
        (st = tfm__check_shape(out, "out", 3, src->shape)) ||
        (st = tfm__masks_resolve(masks, B, s->config.n_heads, L, L,
                                 "tfm_encoder_forward", &m)))
        return st;
    stack_call call = { s, B, L, 0, NULL, &m, NULL };
    return tfm__run_copy(src->data, out->data, src->numel, stack_step, &call);
}

tfm_status tfm_decoder_forward(const tfm_module *decoder, const tfm_tensor *tgt,
                               const tfm_tensor *memory,
                               const tfm_attention_masks *tgt_masks,
                               const tfm_attention_masks *memory_masks,
                               tfm_tensor *out)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__module_check(decoder, TFM_MODULE_DECODER, "decoder");
    if (st != TFM_OK)
        return st;
    const tfm__stack *s = (const tfm__stack *)decoder;
    tfm__decoder_inputs in;
    if ((st = tfm__check_decoder_inputs(&s->config, tgt, "tgt", memory,
                                        tgt_masks, memory_masks, out, &in)))
        return st;
    stack_call call = { s, in.B, in.L, in.S, memory->data, &in.tgt_masks,
                        &in.memory_masks };
    return tfm__run_copy(tgt->data, out->data, tgt->numel, stack_step, &call);
}
