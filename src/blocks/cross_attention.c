/* Cross-attention block: the decoder's second sub-layer on its own
 * (layers.h). */
#include <string.h>

#include "base/error.h"
#include "blocks/layers_impl.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

typedef struct tfm__cross_attention {
    tfm_module base;
    tfm_layer_config config;
    tfm__mha *attn;
    tfm__layer_norm *norm;
} tfm__cross_attention;

static void cross_attention_destroy(tfm_module *m)
{
    tfm__cross_attention *c = (tfm__cross_attention *)m;
    tfm_module_free(c->attn ? &c->attn->base : NULL);
    tfm_module_free(c->norm ? &c->norm->base : NULL);
}

static tfm_status cross_attention_macs(const tfm_module *m, int64_t B,
                                       int64_t L, int64_t S, int64_t *acc)
{
    return tfm__mha_macs(((const tfm__cross_attention *)m)->attn, B, L, S, acc);
}

static const tfm__module_ops cross_attention_ops = { cross_attention_destroy,
                                                     cross_attention_macs };

tfm_status tfm_cross_attention_create(const tfm_layer_config *config,
                                      tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    if (!config)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "config is NULL");
    /* d_ff and the activation play no part here (layers.h). */
    tfm_layer_config checked = *config;
    checked.d_ff = 1;
    checked.activation = TFM_ACTIVATION_RELU;
    tfm_status st = tfm__layer_config_check(&checked);
    if (st != TFM_OK)
        return st;
    tfm__cross_attention *c = (tfm__cross_attention *)tfm__module_alloc(
        sizeof *c, TFM_MODULE_CROSS_ATTENTION, &cross_attention_ops);
    if (!c)
        return TFM_ERR_OUT_OF_MEMORY;
    c->config = checked;
    if ((st = tfm__mha_new(config->d_model, config->n_heads, 0, 0, 1,
                           &c->attn)) ||
        (st = tfm__layer_norm_new(config->d_model, config->layer_norm_eps, 1, 0,
                                  &c->norm)) ||
        (st = tfm__module_adopt(&c->base, "multihead_attn.", &c->attn->base)) ||
        (st = tfm__module_adopt(&c->base, "norm.", &c->norm->base))) {
        tfm_module_free(&c->base);
        return st;
    }
    *out = &c->base;
    return TFM_OK;
}

typedef struct cross_call {
    const tfm__cross_attention *block;
    int64_t B, L, S;
    const float *memory;
    const tfm__masks *masks;
    uint64_t drop_key;
} cross_call;

static tfm_status cross_step(const void *ctx, float *x)
{
    const cross_call *c = ctx;
    const int64_t rows = c->B * c->L;
    tfm__ws_mark mark = tfm__ws_save();
    float *tmp = tfm__ws_floats((size_t)(rows * c->block->config.d_model));
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    if (tmp) {
        tfm__cross_attention_sublayer ca = tfm__sublayer_cross_attention(
            c->block->attn, c->B, c->L, c->memory, c->S, c->masks,
            tfm__dropout_site(c->drop_key, TFM__DROP_CROSS_ATTN));
        const tfm__dropout branch = tfm__dropout_at(
            c->block->base.dropout, c->drop_key, TFM__DROP_BLOCK1);
        st = tfm__residual(&ca.base, c->block->norm,
                           c->block->config.norm_first, &branch, x, tmp, rows);
    }
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm_cross_attention_forward(const tfm_module *block,
                                       const tfm_tensor *x,
                                       const tfm_tensor *memory,
                                       const tfm_attention_masks *masks,
                                       tfm_tensor *out)
{
    TFM__PLAN_PIN();
    tfm_status st =
        tfm__module_check(block, TFM_MODULE_CROSS_ATTENTION, "block");
    if (st != TFM_OK)
        return st;
    const tfm__cross_attention *c = (const tfm__cross_attention *)block;
    tfm__decoder_inputs in;
    if ((st = tfm__check_decoder_inputs(&c->config, x, "x", memory, NULL,
                                        masks, out, &in)))
        return st;
    cross_call call = { c, in.B, in.L, in.S, memory->data, &in.memory_masks,
                        tfm__dropout_forward_key((tfm_module *)block) };
    return tfm__run_copy(x->data, out->data, x->numel, cross_step, &call);
}

tfm_status tfm_cross_attention_backward(tfm_module *block, const tfm_tensor *x,
                                        const tfm_tensor *memory,
                                        const tfm_attention_masks *masks,
                                        const tfm_tensor *grad_output,
                                        tfm_tensor *grad_x,
                                        tfm_tensor *grad_memory)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_cross_attention_backward";
    tfm_status st =
        tfm__module_check(block, TFM_MODULE_CROSS_ATTENTION, "block");
    if (st != TFM_OK)
        return st;
    const tfm__cross_attention *c = (const tfm__cross_attention *)block;
    tfm__decoder_inputs in;
    if ((st = tfm__check_decoder_backward(what, &c->config, x, "x", memory,
                                          NULL, masks, grad_output, grad_x,
                                          grad_memory, &in)))
        return st;
    const int64_t n = x->numel, n_mem = memory->numel;
    /* g: x's gradient; gmem: memory's (key's plus value's). */
    float *g, *gmem;
    float **const bufs[] = { &g, &gmem };
    const size_t sizes[] = { (size_t)n, (size_t)n_mem };
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(block, what, bufs, sizes, 2, &mark)))
        return st;
    const uint64_t key = tfm__dropout_backward_key(block);
    tfm__cross_attention_sublayer ca = tfm__sublayer_cross_attention(
        c->attn, in.B, in.L, memory->data, in.S, &in.memory_masks,
        tfm__dropout_site(key, TFM__DROP_CROSS_ATTN));
    ca.grad_memory = gmem;
    memset(gmem, 0, (size_t)n_mem * sizeof *gmem);
    const tfm__dropout branch =
        tfm__dropout_at(c->base.dropout, key, TFM__DROP_BLOCK1);
    st = tfm__residual_backward(&ca.base, c->norm, c->config.norm_first,
                                &branch, x->data, grad_output->data, g,
                                in.B * in.L);
    if (st == TFM_OK && grad_x)
        memcpy(grad_x->data, g, (size_t)n * sizeof *g);
    if (st == TFM_OK && grad_memory)
        memcpy(grad_memory->data, gmem, (size_t)n_mem * sizeof *gmem);
    tfm__backward_end(block, mark);
    return st;
}
