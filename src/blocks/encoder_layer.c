/* Encoder layer: self-attention and feed-forward sub-layers (layers.h). */
#include <stddef.h>
#include <string.h>

#include "base/error.h"
#include "blocks/layers_impl.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

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
    return tfm__encoder_layer_new_ex(c, NULL, 1, out);
}

tfm_status tfm__encoder_layer_new_ex(const tfm_layer_config *c,
                                     const tfm_attention_config *a,
                                     unsigned parts, tfm__encoder_layer **out)
{
    tfm_status st = tfm__layer_config_check(c);
    if (st != TFM_OK)
        return st;
    tfm__encoder_layer *l = (tfm__encoder_layer *)tfm__module_alloc(
        sizeof *l, TFM_MODULE_ENCODER_LAYER, &encoder_layer_ops);
    if (!l)
        return TFM_ERR_OUT_OF_MEMORY;
    l->config = *c;
    tfm__layer_norm **const norms[] = { &l->norm1, &l->norm2 };
    const int bias = (parts & TFM__PART_BIAS) != 0;
    if ((st = tfm__mha_new_ex(c->d_model, c->n_heads, 0, 0, bias, a,
                              &l->self_attn)) ||
        (st = tfm__module_adopt(&l->base, "self_attn.", &l->self_attn->base)) ||
        (st = tfm__layer_ff_norms_new(&l->base, c, parts, &l->ff, norms, 2))) {
        tfm_module_free(&l->base);
        return st;
    }
    l->base.variant = &l->self_attn->var;
    *out = l;
    return TFM_OK;
}

/* The layer's one forward: x [rows, d] through the self-attention block
 * (sub-layer self_attention), then the feed-forward block ff (built for
 * `tail` rows), into y: in evaluation (k NULL) in place (y == x), the
 * feed-forward block on the last `tail` rows only (rows: all; fewer where
 * only those rows' outputs are read, as a prompt's last position in a
 * decoder-only model's last layer: the other rows keep the attention
 * block's output; only without dropout: cached runs); else the training
 * forward keeping its blocks in k (tfm__residual_blocks). */
static tfm_status layer_forward(const tfm__encoder_layer *l, const float *x,
                                float *y, int64_t rows,
                                const tfm__sublayer *self_attention,
                                const tfm__feed_forward_sublayer *ff,
                                uint64_t drop_key, int64_t tail,
                                float *scratch, tfm__encoder_layer_kept *k)
{
    const float p = l->base.dropout;
    const tfm__residual_step steps[] = {
        { self_attention, l->norm1,
          tfm__dropout_at(p, drop_key, TFM__DROP_BLOCK1) },
        { &ff->base, l->norm2, tfm__dropout_at(p, drop_key, TFM__DROP_BLOCK2) },
    };
    return tfm__residual_blocks(steps, 2, l->config.norm_first, x, y, rows,
                                tail, scratch, k ? k->k : NULL,
                                "encoder layer");
}

static tfm_status run_with(const tfm__encoder_layer *l, float *x, int64_t rows,
                           const tfm__sublayer *self_attention,
                           uint64_t drop_key, int64_t tail)
{
    const tfm__feed_forward_sublayer ff = tfm__sublayer_feed_forward(
        l->ff, tail, tfm__layer_hidden_dropout(&l->base, drop_key));
    return layer_forward(l, x, x, rows, self_attention, &ff, drop_key, tail,
                         NULL, NULL);
}

tfm_status tfm__encoder_layer_run_cached(const tfm__encoder_layer *l, float *x,
                                         int64_t n_seqs,
                                         const tfm__cached_seq *seqs,
                                         int64_t layer, int64_t tail)
{
    int64_t rows = 0;
    for (int64_t i = 0; i < n_seqs; i++)
        rows += seqs[i].n;
    tfm__cached_attention_sublayer sa =
        tfm__sublayer_cached_attention(l->self_attn, n_seqs, seqs, layer);
    return run_with(l, x, rows, &sa.base, 0, tail < rows ? tail : rows);
}

/* The public constructors' tail: the layer as tfm__encoder_layer_new_ex,
 * *out its module (out checked by the caller). */
static tfm_status create_module(const tfm_layer_config *c,
                                const tfm_attention_config *a, unsigned parts,
                                tfm_module **out)
{
    tfm__encoder_layer *l = NULL;
    tfm_status st = tfm__encoder_layer_new_ex(c, a, parts, &l);
    if (st == TFM_OK)
        *out = &l->base;
    return st;
}

tfm_status tfm_encoder_layer_create(const tfm_layer_config *config,
                                    tfm_module **out)
{
    return tfm_encoder_layer_create_ex(config, NULL, out);
}

tfm_status tfm_encoder_layer_create_ex(const tfm_layer_config *layer,
                                       const tfm_attention_config *config,
                                       tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    return create_module(layer, config, TFM__PART_BIAS, out);
}

tfm_status tfm_encoder_layer_create_v2(const tfm_layer_config *config,
                                       const tfm_layer_options *options,
                                       tfm_module **out)
{
    tfm_layer_options o;
    tfm_status st =
        tfm__layer_options_for_block(options, "an encoder layer", out, &o);
    if (st != TFM_OK)
        return st;
    return create_module(config, o.attention, tfm__layer_parts(&o), out);
}

/* The layer's forward for tfm__block_kind (no memory; NULL scratch in a
 * kept forward: the backward's, taken with the rest). */
static tfm_status encoder_layer_block_forward(
    const void *layer, const float *x, float *y, int64_t B, int64_t L,
    const float *memory, int64_t S, const tfm__masks *masks,
    const tfm__masks *memory_masks, uint64_t drop_key, void *kept)
{
    (void)memory, (void)S, (void)memory_masks;
    return tfm__encoder_layer_forward(layer, x, y, B, L, masks, drop_key,
                                      NULL, kept);
}

static tfm_status encoder_layer_backward_kept(void *kept, float *g,
                                              float *grad_memory)
{
    (void)grad_memory;
    return tfm__encoder_layer_backward_kept(kept, g);
}

static const tfm__block_kind encoder_layer_kind = {
    TFM_MODULE_ENCODER_LAYER, "layer", "tfm_encoder_layer_forward",
    offsetof(tfm__encoder_layer, config), encoder_layer_block_forward,
    sizeof(tfm__encoder_layer_kept),
    encoder_layer_backward_kept
};

tfm_status tfm_encoder_layer_forward(const tfm_module *layer,
                                     const tfm_tensor *src,
                                     const tfm_attention_masks *masks,
                                     tfm_tensor *out)
{
    TFM__PLAN_PIN();
    return tfm__encoder_forward(&encoder_layer_kind, layer, src, masks, out);
}

tfm_status tfm__encoder_layer_forward(const tfm__encoder_layer *l,
                                      const float *x, float *y, int64_t B,
                                      int64_t L, const tfm__masks *masks,
                                      uint64_t drop_key, float *scratch,
                                      tfm__encoder_layer_kept *k)
{
    const int64_t rows = B * L;
    tfm__encoder_layer_kept local;   /* evaluation: the sub-layers only */
    tfm__encoder_layer_kept *c = k ? k : &local;
    c->sa = tfm__sublayer_self_attention(
        l->self_attn, B, L, masks,
        tfm__dropout_site(drop_key, TFM__DROP_SELF_ATTN));
    c->ff = tfm__sublayer_feed_forward(
        l->ff, rows, tfm__layer_hidden_dropout(&l->base, drop_key));
    return layer_forward(l, x, y, rows, &c->sa.base, &c->ff, drop_key, rows,
                         scratch, k);
}

tfm_status tfm__encoder_layer_backward_kept(const tfm__encoder_layer_kept *k,
                                            float *g)
{
    return tfm__residual_blocks_backward(k->k, 2, g);
}

tfm_status tfm_encoder_layer_backward(tfm_module *layer, const tfm_tensor *src,
                                      const tfm_attention_masks *masks,
                                      const tfm_tensor *grad_output,
                                      tfm_tensor *grad_src)
{
    TFM__PLAN_PIN();
    return tfm__encoder_backward(&encoder_layer_kind, layer,
                                 "tfm_encoder_layer_backward", src, masks,
                                 grad_output, grad_src);
}
