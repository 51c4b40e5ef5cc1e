/* Decoder layer: self-attention, cross-attention over the encoder memory,
 * and feed-forward sub-layers (layers.h). */
#include <stddef.h>
#include <string.h>

#include "base/error.h"
#include "blocks/layers_impl.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

static void decoder_layer_destroy(tfm_module *m)
{
    tfm__decoder_layer *l = (tfm__decoder_layer *)m;
    tfm_module_free(l->self_attn ? &l->self_attn->base : NULL);
    tfm_module_free(l->cross_attn ? &l->cross_attn->base : NULL);
    tfm_module_free(l->ff ? &l->ff->base : NULL);
    tfm_module_free(l->norm1 ? &l->norm1->base : NULL);
    tfm_module_free(l->norm2 ? &l->norm2->base : NULL);
    tfm_module_free(l->norm3 ? &l->norm3->base : NULL);
}

tfm_status tfm__decoder_layer_macs(const tfm__decoder_layer *l, int64_t B,
                                   int64_t L, int64_t S, int64_t *acc)
{
    tfm_status st = tfm__mha_macs(l->self_attn, B, L, L, acc);
    if (st == TFM_OK)
        st = tfm__mha_macs(l->cross_attn, B, L, S, acc);
    return st != TFM_OK ? st : tfm__feed_forward_macs(l->ff, B, L, acc);
}

static tfm_status decoder_layer_macs(const tfm_module *m, int64_t B,
                                     int64_t L, int64_t S, int64_t *acc)
{
    return tfm__decoder_layer_macs((const tfm__decoder_layer *)m, B, L, S, acc);
}

static const tfm__module_ops decoder_layer_ops = { decoder_layer_destroy,
                                                   decoder_layer_macs };

tfm_status tfm__decoder_layer_new(const tfm_layer_config *c, unsigned parts,
                                  tfm__decoder_layer **out)
{
    tfm_status st = tfm__layer_config_check(c);
    if (st != TFM_OK)
        return st;
    tfm__decoder_layer *l = (tfm__decoder_layer *)tfm__module_alloc(
        sizeof *l, TFM_MODULE_DECODER_LAYER, &decoder_layer_ops);
    if (!l)
        return TFM_ERR_OUT_OF_MEMORY;
    l->config = *c;
    const int64_t d = c->d_model, H = c->n_heads;
    tfm__layer_norm **const norms[] = { &l->norm1, &l->norm2, &l->norm3 };
    const int bias = (parts & TFM__PART_BIAS) != 0;
    if ((st = tfm__mha_new(d, H, 0, 0, bias, &l->self_attn)) ||
        (st = tfm__module_adopt(&l->base, "self_attn.", &l->self_attn->base)) ||
        (st = tfm__mha_new(d, H, 0, 0, bias, &l->cross_attn)) ||
        (st = tfm__module_adopt(&l->base, "multihead_attn.",
                                &l->cross_attn->base)) ||
        (st = tfm__layer_ff_norms_new(&l->base, c, parts, &l->ff, norms, 3))) {
        tfm_module_free(&l->base);
        return st;
    }
    *out = l;
    return TFM_OK;
}

/* The layer's one forward: x [rows, d] through the three residual blocks
 * around self_attention, cross_attention and the feed-forward network ff,
 * into y: in evaluation (k NULL) in place (y == x), else the training
 * forward keeping its blocks in k (tfm__residual_blocks). */
static tfm_status layer_forward(const tfm__decoder_layer *l, const float *x,
                                float *y, int64_t rows,
                                const tfm__sublayer *self_attention,
                                const tfm__sublayer *cross_attention,
                                const tfm__feed_forward_sublayer *ff,
                                uint64_t drop_key, float *scratch,
                                tfm__decoder_layer_kept *k)
{
    const float p = l->base.dropout;
    const tfm__residual_step steps[] = {
        { self_attention, l->norm1,
          tfm__dropout_at(p, drop_key, TFM__DROP_BLOCK1) },
        { cross_attention, l->norm2,
          tfm__dropout_at(p, drop_key, TFM__DROP_BLOCK2) },
        { &ff->base, l->norm3, tfm__dropout_at(p, drop_key, TFM__DROP_BLOCK3) },
    };
    return tfm__residual_blocks(steps, 3, l->config.norm_first, x, y, rows,
                                rows, scratch, k ? k->k : NULL,
                                "decoder layer");
}

static tfm_status run_with(const tfm__decoder_layer *l, float *x,
                           int64_t rows, const tfm__sublayer *self_attention,
                           const tfm__sublayer *cross_attention,
                           uint64_t drop_key)
{
    const tfm__feed_forward_sublayer ff = tfm__sublayer_feed_forward(
        l->ff, rows, tfm__layer_hidden_dropout(&l->base, drop_key));
    return layer_forward(l, x, x, rows, self_attention, cross_attention, &ff,
                         drop_key, NULL, NULL);
}

tfm_status tfm__decoder_layer_run_cached(const tfm__decoder_layer *l,
                                         float *x, int64_t n_seqs,
                                         const tfm__cached_seq *seqs,
                                         int64_t layer,
                                         const float *memory_kv, int64_t S)
{
    int64_t rows = 0;
    for (int64_t i = 0; i < n_seqs; i++)
        rows += seqs[i].n;
    tfm__cached_attention_sublayer sa =
        tfm__sublayer_cached_attention(l->self_attn, n_seqs, seqs, layer);
    tfm__memory_kv_sublayer ca =
        tfm__sublayer_memory_kv(l->cross_attn, rows, memory_kv, S);
    return run_with(l, x, rows, &sa.base, &ca.base, 0);
}

tfm_status tfm_decoder_layer_create(const tfm_layer_config *config,
                                    tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__decoder_layer *l = NULL;
    tfm_status st = tfm__decoder_layer_new(config, 1, &l);
    if (st == TFM_OK)
        *out = &l->base;
    return st;
}

tfm_status tfm_decoder_layer_create_v2(const tfm_layer_config *config,
                                       const tfm_layer_options *options,
                                       tfm_module **out)
{
    tfm_layer_options o;
    tfm_status st =
        tfm__layer_options_for_block(options, "a decoder layer", out, &o);
    if (st != TFM_OK)
        return st;
    if (o.attention)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "decoder layers take only plain attention");
    tfm__decoder_layer *l = NULL;
    if ((st = tfm__decoder_layer_new(config, tfm__layer_parts(&o), &l)) == TFM_OK)
        *out = &l->base;
    return st;
}

/* The layer's forward for tfm__block_kind.  Kept: grad_memory is y, a
 * stand-in for the buffer the backward will set (the kept cross-attention
 * makes room for memory's gradient only when one is wanted; the public
 * backward always computes it); NULL scratch: the backward's, taken with
 * the rest. */
static tfm_status decoder_layer_block_forward(
    const void *layer, const float *x, float *y, int64_t B, int64_t L,
    const float *memory, int64_t S, const tfm__masks *tgt_masks,
    const tfm__masks *memory_masks, uint64_t drop_key, void *kept)
{
    return tfm__decoder_layer_forward(layer, x, y, B, L, memory, S, tgt_masks,
                                      memory_masks, drop_key,
                                      kept ? y : NULL, NULL, kept);
}

/* The kept forward's backward, its cross-attention pointed at memory's
 * gradient (y stood for it in the keep). */
static tfm_status decoder_layer_backward_kept(void *kept, float *g,
                                              float *grad_memory)
{
    tfm__decoder_layer_kept *k = kept;
    k->ca.grad_memory = grad_memory;
    return tfm__decoder_layer_backward_kept(k, g);
}

static const tfm__block_kind decoder_layer_kind = {
    TFM_MODULE_DECODER_LAYER, "layer", "tfm_decoder_layer_forward",
    offsetof(tfm__decoder_layer, config), decoder_layer_block_forward,
    sizeof(tfm__decoder_layer_kept),
    decoder_layer_backward_kept
};

tfm_status tfm_decoder_layer_forward(const tfm_module *layer,
                                     const tfm_tensor *tgt,
                                     const tfm_tensor *memory,
                                     const tfm_attention_masks *tgt_masks,
                                     const tfm_attention_masks *memory_masks,
                                     tfm_tensor *out)
{
    TFM__PLAN_PIN();
    return tfm__decoder_forward(&decoder_layer_kind, layer, tgt, memory, tgt_masks,
                                memory_masks, out);
}

tfm_status tfm__decoder_layer_forward(
    const tfm__decoder_layer *l, const float *x, float *y, int64_t B,
    int64_t L, const float *memory, int64_t S, const tfm__masks *tgt_masks,
    const tfm__masks *memory_masks, uint64_t drop_key, float *grad_memory,
    float *scratch, tfm__decoder_layer_kept *k)
{
    const int64_t rows = B * L;
    tfm__decoder_layer_kept local;   /* evaluation: the sub-layers only */
    tfm__decoder_layer_kept *c = k ? k : &local;
    c->sa = tfm__sublayer_self_attention(
        l->self_attn, B, L, tgt_masks,
        tfm__dropout_site(drop_key, TFM__DROP_SELF_ATTN));
    c->ca = tfm__sublayer_cross_attention(
        l->cross_attn, B, L, memory, S, memory_masks,
        tfm__dropout_site(drop_key, TFM__DROP_CROSS_ATTN));
    c->ff = tfm__sublayer_feed_forward(
        l->ff, rows, tfm__layer_hidden_dropout(&l->base, drop_key));
    c->ca.grad_memory = grad_memory;
    return layer_forward(l, x, y, rows, &c->sa.base, &c->ca.base, &c->ff,
                         drop_key, scratch, k);
}

tfm_status tfm__decoder_layer_backward_kept(const tfm__decoder_layer_kept *k,
                                            float *g)
{
    return tfm__residual_blocks_backward(k->k, 3, g);
}

tfm_status tfm_decoder_layer_backward(tfm_module *layer, const tfm_tensor *tgt,
                                      const tfm_tensor *memory,
                                      const tfm_attention_masks *tgt_masks,
                                      const tfm_attention_masks *memory_masks,
                                      const tfm_tensor *grad_output,
                                      tfm_tensor *grad_tgt,
                                      tfm_tensor *grad_memory)
{
    TFM__PLAN_PIN();
    return tfm__decoder_backward(&decoder_layer_kind, layer,
                                 "tfm_decoder_layer_backward", tgt, memory,
                                 tgt_masks, memory_masks, grad_output,
                                 grad_tgt, grad_memory);
}
