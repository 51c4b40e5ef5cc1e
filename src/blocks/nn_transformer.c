/* Encoder-decoder Transformer (layers.h; Vaswani et al. 2017, figure 1). */
#include <string.h>
#include "base/error.h"
#include "base/parallel.h"
#include "blocks/stack.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

typedef struct tfm__transformer {
    tfm_module base;
    tfm__stack *encoder, *decoder;
} tfm__transformer;

static void transformer_destroy(tfm_module *m)
{
    tfm__transformer *t = (tfm__transformer *)m;
    tfm_module_free(t->encoder ? &t->encoder->base : NULL);
    tfm_module_free(t->decoder ? &t->decoder->base : NULL);
}

static tfm_status transformer_macs(const tfm_module *m, int64_t B, int64_t L,
                                   int64_t S, int64_t *acc)
{
    const tfm__transformer *t = (const tfm__transformer *)m;
    tfm_status st = tfm__stack_macs(t->encoder, B, S, S, acc);
    return st != TFM_OK ? st : tfm__stack_macs(t->decoder, B, L, S, acc);
}

static const tfm__module_ops transformer_ops = { transformer_destroy,
                                                 transformer_macs };

tfm_status tfm_transformer_create(const tfm_layer_config *config,
                                  int64_t n_encoder_layers,
                                  int64_t n_decoder_layers, tfm_module **out)
{
    return tfm_transformer_create_v2(config, n_encoder_layers,
                                     n_decoder_layers, NULL, out);
}

tfm_status tfm_transformer_create_v2(const tfm_layer_config *config,
                                     int64_t n_encoder_layers,
                                     int64_t n_decoder_layers,
                                     const tfm_layer_options *options,
                                     tfm_module **out)
{
    tfm_layer_options o;
    tfm_status st =
        tfm__layer_options_for_block(options, "nn.Transformer", out, &o);
    if (st == TFM_OK)
        st = tfm__layer_config_check(config);
    if (st != TFM_OK)
        return st;
    if (o.attention)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "nn.Transformer takes only plain attention");
    const unsigned parts = tfm__layer_parts(&o);
    tfm__transformer *t = (tfm__transformer *)tfm__module_alloc(
        sizeof *t, TFM_MODULE_TRANSFORMER, &transformer_ops);
    if (!t)
        return TFM_ERR_OUT_OF_MEMORY;
    if ((st = tfm__stack_new_ex(config, NULL, parts, n_encoder_layers, 1, 0,
                                &t->encoder)) ||
        (st = tfm__stack_new_ex(config, NULL, parts, n_decoder_layers, 1, 1,
                                &t->decoder)) ||
        (st = tfm__module_adopt(&t->base, "encoder.", &t->encoder->base)) ||
        (st = tfm__module_adopt(&t->base, "decoder.", &t->decoder->base))) {
        tfm_module_free(&t->base);
        return st;
    }
    *out = &t->base;
    return TFM_OK;
}

/* The inputs of a forward or backward call: src [B, S, d], tgt [B, L, d],
 * out shaped as tgt, the three masks resolved. */
typedef struct transformer_inputs {
    int64_t B, S, L;
    tfm__masks src_masks, tgt_masks, memory_masks;
} transformer_inputs;

static tfm_status check_inputs(const tfm__transformer *t,
                               const tfm_tensor *src, const tfm_tensor *tgt,
                               const tfm_attention_masks *src_masks,
                               const tfm_attention_masks *tgt_masks,
                               const tfm_attention_masks *memory_masks,
                               const tfm_tensor *out, transformer_inputs *in)
{
    const int64_t d = t->encoder->config.d_model,
                  H = t->encoder->config.n_heads;
    int64_t Bt;
    tfm_status st;
    if ((st = tfm__check_activation(src, "src", d, &in->B, &in->S)) ||
        (st = tfm__check_activation(tgt, "tgt", d, &Bt, &in->L)))
        return st;
    if (Bt != in->B)
        return tfm__fail(TFM_ERR_SHAPE, "tgt has batch %lld, expected %lld",
                         (long long)Bt, (long long)in->B);
    if ((st = tfm__check_shape(out, "out", 3, tgt->shape)) ||
        (st = tfm__masks_resolve(src_masks, in->B, H, in->S, in->S,
                                 "src_masks", &in->src_masks)) ||
        (st = tfm__masks_resolve(tgt_masks, in->B, H, in->L, in->L,
                                 "tgt_masks", &in->tgt_masks)))
        return st;
    return tfm__masks_resolve(memory_masks, in->B, H, in->L, in->S,
                              "memory_masks", &in->memory_masks);
}

tfm_status tfm_transformer_forward(const tfm_module *model,
                                   const tfm_tensor *src, const tfm_tensor *tgt,
                                   const tfm_attention_masks *src_masks,
                                   const tfm_attention_masks *tgt_masks,
                                   const tfm_attention_masks *memory_masks,
                                   tfm_tensor *out)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__module_check(model, TFM_MODULE_TRANSFORMER, "model");
    if (st != TFM_OK)
        return st;
    const tfm__transformer *t = (const tfm__transformer *)model;
    transformer_inputs in;
    if ((st = check_inputs(t, src, tgt, src_masks, tgt_masks, memory_masks,
                           out, &in)))
        return st;
    const int64_t B = in.B, S = in.S, L = in.L;
    tfm__ws_mark mark = tfm__ws_save();
    float *memory = tfm__ws_floats((size_t)src->numel);
    float *x = memory ? tfm__ws_floats((size_t)tgt->numel) : NULL;
    st = TFM_ERR_OUT_OF_MEMORY;
    if (x) {
        const uint64_t key = tfm__dropout_forward_key((tfm_module *)model);
        memcpy(memory, src->data, (size_t)src->numel * sizeof(float));
        memcpy(x, tgt->data, (size_t)tgt->numel * sizeof(float));
        st = tfm__stack_run(t->encoder, memory, B, S, NULL, 0, &in.src_masks,
                            NULL, tfm__dropout_site(key, TFM__DROP_ENCODER));
        if (st == TFM_OK)
            st = tfm__stack_run(t->decoder, x, B, L, memory, S, &in.tgt_masks,
                                &in.memory_masks,
                                tfm__dropout_site(key, TFM__DROP_DECODER));
        if (st == TFM_OK)
            memcpy(out->data, x, (size_t)tgt->numel * sizeof(float));
    }
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm_transformer_backward(tfm_module *model, const tfm_tensor *src,
                                    const tfm_tensor *tgt,
                                    const tfm_attention_masks *src_masks,
                                    const tfm_attention_masks *tgt_masks,
                                    const tfm_attention_masks *memory_masks,
                                    const tfm_tensor *grad_output,
                                    tfm_tensor *grad_src, tfm_tensor *grad_tgt)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_transformer_backward";
    tfm_status st = tfm__module_check(model, TFM_MODULE_TRANSFORMER, "model");
    if (st != TFM_OK)
        return st;
    const tfm__transformer *t = (const tfm__transformer *)model;
    const int64_t d = t->encoder->config.d_model;
    transformer_inputs in;
    if ((st = check_inputs(t, src, tgt, src_masks, tgt_masks, memory_masks,
                           tgt, &in)) ||
        (st = tfm__check_backward_rows(what, tgt, d, grad_output, d,
                                       grad_tgt)) ||
        (grad_src && (st = tfm__check_shape(grad_src, "grad_src", 3,
                                            src->shape))))
        return st;
    if (grad_src &&
        ((grad_src->data < grad_output->data + grad_output->numel &&
          grad_output->data < grad_src->data + grad_src->numel) ||
         (grad_tgt && grad_src->data < grad_tgt->data + grad_tgt->numel &&
          grad_tgt->data < grad_src->data + grad_src->numel)))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "%s: grad_src must not "
                         "overlap grad_output or grad_tgt", what);
    const int64_t n_src = src->numel, n_tgt = tgt->numel;
    /* memory: the encoder's output; g: the decoder's running gradient;
     * gmem: memory's gradient, then src's. */
    float *memory, *g, *gmem;
    float **const bufs[] = { &memory, &g, &gmem };
    const size_t sizes[] = { (size_t)n_src, (size_t)n_tgt, (size_t)n_src };
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(model, what, bufs, sizes, 3, &mark)))
        return st;
    memcpy(g, grad_output->data, (size_t)n_tgt * sizeof *g);
    memset(gmem, 0, (size_t)n_src * sizeof *gmem);
    tfm__stack_kept enc;
    const uint64_t key = tfm__dropout_backward_key(model);
    st = tfm__stack_forward_keep(t->encoder, src->data, in.B, in.S, NULL, 0,
                                 &in.src_masks, NULL,
                                 tfm__dropout_site(key, TFM__DROP_ENCODER),
                                 NULL, memory, &enc);
    if (st == TFM_OK)
        st = tfm__stack_backward(t->decoder, tgt->data, in.B, in.L, memory,
                                 in.S, &in.tgt_masks, &in.memory_masks,
                                 tfm__dropout_site(key, TFM__DROP_DECODER), g,
                                 gmem);
    if (st == TFM_OK)
        st = tfm__stack_backward_kept(&enc, gmem);
    if (st == TFM_OK && grad_tgt)
        memcpy(grad_tgt->data, g, (size_t)n_tgt * sizeof *g);
    if (st == TFM_OK && grad_src)
        memcpy(grad_src->data, gmem, (size_t)n_src * sizeof *gmem);
    tfm__backward_end(model, mark);
    return st;
}
