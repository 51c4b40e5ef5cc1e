/* Encoder and decoder stacks (layers.h; Vaswani et al. section 3.1): N
 * layers applied in turn to one activation x [B, L, d_model], then an
 * optional final LayerNorm (the pre-norm stacks' and the models' last
 * norm).  The blocks of decoder-only and encoder-only models are such a
 * stack of encoder layers (models/model_*.c, kv_cache.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/parallel.h"
#include "blocks/stack.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

static void stack_destroy(tfm_module *m)
{
    tfm__stack *s = (tfm__stack *)m;
    for (int64_t i = 0; s->layers && i < s->n_layers; i++)
        tfm_module_free(s->layers[i]);
    tfm__free(s->layers);
    tfm_module_free(s->norm ? &s->norm->base : NULL);
}

/* Multiply-accumulates of every layer for batch B, L queries and S memory
 * positions, added to *acc. */
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
    return tfm__stack_new_ex(c, NULL, 1, n_layers, final_norm, decoder,
                             out);
}

/* Creates n_layers layers named "layers.<i>." (PyTorch's
 * nn.TransformerEncoder / nn.TransformerDecoder names) and the final norm
 * "norm."; frees everything on failure. */
tfm_status tfm__stack_new_ex(const tfm_layer_config *c,
                             const tfm_attention_config *attention,
                             unsigned parts,
                             int64_t n_layers, int final_norm, int decoder,
                             tfm__stack **out)
{
    tfm_status st = tfm__layer_config_check(c);
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
            st = tfm__decoder_layer_new(c, parts, &l);
            s->layers[i] = l ? &l->base : NULL;
        } else {
            tfm__encoder_layer *l = NULL;
            st = tfm__encoder_layer_new_ex(c, attention, parts, &l);
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
        ((st = tfm__layer_norm_new(c->d_model, c->layer_norm_eps,
                                   (parts & TFM__PART_BIAS) != 0,
                                   (parts & TFM__PART_RMS_NORM) != 0,
                                   &s->norm)) ||
         (st = tfm__module_adopt(&s->base, "norm.", &s->norm->base)))) {
        tfm_module_free(&s->base);
        return st;
    }
    *out = s;
    return TFM_OK;
}

/* Layer i's one forward of x into y (evaluation: k NULL, y may be x; else
 * kept in k's slot i, scratch the layers' shared backward scratch). */
static tfm_status layer_forward(const tfm__stack *s, int64_t i,
                                const float *x, float *y, int64_t B,
                                int64_t L, const float *memory, int64_t S,
                                const tfm__masks *masks,
                                const tfm__masks *memory_masks,
                                uint64_t drop_key, float *grad_memory,
                                float *scratch, const tfm__stack_kept *k)
{
    const uint64_t key = tfm__dropout_site(drop_key, TFM__DROP_LAYER0 + i);
    return s->decoder
               ? tfm__decoder_layer_forward(
                     (const tfm__decoder_layer *)s->layers[i], x, y, B, L,
                     memory, S, masks, memory_masks, key, grad_memory,
                     scratch,
                     k ? (tfm__decoder_layer_kept *)k->layers + i : NULL)
               : tfm__encoder_layer_forward(
                     (const tfm__encoder_layer *)s->layers[i], x, y, B, L,
                     masks, key, scratch,
                     k ? (tfm__encoder_layer_kept *)k->layers + i : NULL);
}

/* The kept forward's memory: every layer's input and the final norm's
 * (acts), the layers' kept structs and shared backward scratch, the final
 * norm's backward buffers.  Fails with out-of-memory (message set). */
static tfm_status take_kept(const tfm__stack *s, int64_t rows, float **scratch,
                            tfm__stack_kept *kk)
{
    const int64_t d = s->config.d_model, n = rows * d, N = s->n_layers;
    const size_t one = s->decoder ? sizeof(tfm__decoder_layer_kept)
                                  : sizeof(tfm__encoder_layer_kept);
    if ((uint64_t)n > SIZE_MAX / sizeof(float) / (uint64_t)(N + 4) ||
        (uint64_t)N > SIZE_MAX / one)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "stack backward: %lld "
                         "layers' activations do not fit in memory",
                         (long long)N);
    /* acts [N + 1, rows, d]; scratch [2, rows, d]: the blocks' backward
     * scratch, shared (they go backward one at a time); tmp: the final
     * norm's input gradient. */
    *kk = (tfm__stack_kept){ .s = s, .rows = rows };
    kk->acts = tfm__ws_floats((size_t)((N + 1) * n));
    *scratch = kk->acts ? tfm__ws_floats((size_t)(2 * n)) : NULL;
    kk->layers = *scratch && N > 0 ? tfm__ws_alloc((size_t)N * one) : NULL;
    if (*scratch && s->norm) {
        kk->tmp = tfm__ws_floats((size_t)n);
        kk->acc = kk->tmp ? tfm__ws_alloc((size_t)(2 * d) * sizeof *kk->acc)
                          : NULL;
    }
    if (!*scratch || (N > 0 && !kk->layers) || (s->norm && !kk->acc))
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "stack backward: out of "
                         "memory");
    return TFM_OK;
}

/* The stack's one forward: y [B, L, d] = norm(layer_{N-1}( ... layer_0(x))).
 * k NULL: evaluation, every layer in place on y (y may be x); else the
 * training forward, each layer's input kept in k->acts and its forward in
 * k->layers (workspace memory, not released). */
static tfm_status stack_forward(const tfm__stack *s, const float *x, float *y,
                                int64_t B, int64_t L, const float *memory,
                                int64_t S, const tfm__masks *masks,
                                const tfm__masks *memory_masks,
                                uint64_t drop_key, float *grad_memory,
                                tfm__stack_kept *k)
{
    const int64_t rows = B * L, n = rows * s->config.d_model;
    const int64_t N = s->n_layers;
    float *scratch = NULL;
    tfm__stack_kept kk;
    tfm_status st = k ? take_kept(s, rows, &scratch, &kk) : TFM_OK;
    if (st != TFM_OK)
        return st;
    /* in: the layers' inputs, each one's output the next one's input. */
    float *in = k ? kk.acts : y;
    if (in != x)
        memcpy(in, x, (size_t)n * sizeof *in);
    for (int64_t i = 0; st == TFM_OK && i < N; i++) {
        float *next = k ? in + n : in;
        st = layer_forward(s, i, in, next, B, L, memory, S, masks,
                           memory_masks, drop_key, grad_memory, scratch,
                           k ? &kk : NULL);
        in = next;
    }
    if (st != TFM_OK)
        return st;
    if (s->norm)
        tfm__layer_norm_run(s->norm, in, rows, y);
    else if (in != y)
        memcpy(y, in, (size_t)n * sizeof *y);
    if (k)
        *k = kk;
    return TFM_OK;
}

tfm_status tfm__stack_run(const tfm__stack *s, float *x, int64_t B, int64_t L,
                          const float *memory, int64_t S,
                          const tfm__masks *masks,
                          const tfm__masks *memory_masks, uint64_t drop_key)
{
    return stack_forward(s, x, x, B, L, memory, S, masks, memory_masks,
                         drop_key, NULL, NULL);
}

tfm_status tfm__stack_forward_keep(const tfm__stack *s, const float *x,
                                   int64_t B, int64_t L, const float *memory,
                                   int64_t S, const tfm__masks *masks,
                                   const tfm__masks *memory_masks,
                                   uint64_t drop_key, float *grad_memory,
                                   float *out, tfm__stack_kept *k)
{
    return stack_forward(s, x, out, B, L, memory, S, masks, memory_masks,
                         drop_key, grad_memory, k);
}

tfm_status tfm__stack_backward_kept(const tfm__stack_kept *k, float *g)
{
    const tfm__stack *s = k->s;
    const int64_t N = s->n_layers, n = k->rows * s->config.d_model;
    if (s->norm) {
        const tfm_module *home = &s->norm->base;
        float *gw = tfm__grad_of(home, s->norm->weight);
        float *gb = s->norm->bias ? tfm__grad_of(home, s->norm->bias) : NULL;
        tfm__layer_norm_backward(s->norm, k->acts + N * n, k->rows, g, k->tmp,
                                 gw, gb, k->acc);
        memcpy(g, k->tmp, (size_t)n * sizeof *g);
    }
    tfm_status st = TFM_OK;
    for (int64_t i = N - 1; st == TFM_OK && i >= 0; i--)
        st = s->decoder
                 ? tfm__decoder_layer_backward_kept(
                       (const tfm__decoder_layer_kept *)k->layers + i, g)
                 : tfm__encoder_layer_backward_kept(
                       (const tfm__encoder_layer_kept *)k->layers + i, g);
    return st;
}

tfm_status tfm__stack_backward(const tfm__stack *s, const float *x, int64_t B,
                               int64_t L, const float *memory, int64_t S,
                               const tfm__masks *masks,
                               const tfm__masks *memory_masks,
                               uint64_t drop_key, float *g,
                               float *grad_memory)
{
    tfm__ws_mark mark = tfm__ws_save();
    float *out = tfm__ws_floats((size_t)(B * L * s->config.d_model));
    tfm__stack_kept k;
    tfm_status st = out ? tfm__stack_forward_keep(s, x, B, L, memory, S,
                                                  masks, memory_masks,
                                                  drop_key, grad_memory, out,
                                                  &k)
                        : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "stack backward: "
                                    "out of memory");
    if (st == TFM_OK)
        st = tfm__stack_backward_kept(&k, g);
    tfm__ws_restore(mark);
    return st;
}

/* The blocks over the caches, the last layer's feed-forward and the final
 * norm on the last n_out rows only (rows: all). */
static tfm_status run_cached(const tfm__stack *s, float *h, int64_t n_seqs,
                             const tfm__cached_seq *seqs, int64_t n_out)
{
    int64_t rows = 0;
    for (int64_t i = 0; i < n_seqs; i++)
        rows += seqs[i].n;
    for (int64_t i = 0; i < s->n_layers; i++) {
        const tfm__encoder_layer *l = (const tfm__encoder_layer *)s->layers[i];
        tfm_status st = tfm__encoder_layer_run_cached(
            l, h, n_seqs, seqs, i, i == s->n_layers - 1 ? n_out : rows);
        if (st != TFM_OK)
            return st;
    }
    if (s->norm)
        tfm__layer_norm_run(s->norm, h + (rows - n_out) * s->config.d_model,
                            n_out, h + (rows - n_out) * s->config.d_model);
    return TFM_OK;
}

tfm_status tfm__stack_run_cached_seqs(const tfm__stack *s, float *h,
                                      int64_t n_seqs,
                                      const tfm__cached_seq *seqs)
{
    int64_t rows = 0;
    for (int64_t i = 0; i < n_seqs; i++)
        rows += seqs[i].n;
    return run_cached(s, h, n_seqs, seqs, rows);
}

tfm_status tfm__stack_run_decoder_cached(const tfm__stack *s, float *h,
                                         int64_t n_seqs,
                                         const tfm__cached_seq *seqs,
                                         const float *memory_kv, int64_t S)
{
    int64_t rows = 0;
    for (int64_t i = 0; i < n_seqs; i++)
        rows += seqs[i].n;
    for (int64_t i = 0; i < s->n_layers; i++) {
        const tfm__decoder_layer *l = (const tfm__decoder_layer *)s->layers[i];
        const float *kv = memory_kv + i * S * 2 * l->cross_attn->kv_dim;
        tfm_status st =
            tfm__decoder_layer_run_cached(l, h, n_seqs, seqs, i, kv, S);
        if (st != TFM_OK)
            return st;
    }
    if (s->norm)
        tfm__layer_norm_run(s->norm, h, rows, h);
    return TFM_OK;
}

void tfm__stack_memory_kv(const tfm__stack *s, const float *memory,
                          int64_t S, float *memory_kv)
{
    for (int64_t i = 0; i < s->n_layers; i++) {
        const tfm__decoder_layer *l = (const tfm__decoder_layer *)s->layers[i];
        const int64_t w = 2 * l->cross_attn->kv_dim;
        tfm__mha_memory_kv(l->cross_attn, memory, S, memory_kv + i * S * w);
    }
}

tfm_status tfm__stack_run_cached(const tfm__stack *s, float *h, int64_t n,
                                 float *keys, float *values, int64_t stride,
                                 int64_t past, int64_t origin, int64_t n_out,
                                 int64_t *v_nonfinite)
{
    /* Layer i's cache: rows [capacity, kv_dim] at i * stride. */
    const tfm__cached_seq one = { n, past, origin, keys, values, stride,
                                  v_nonfinite };
    return run_cached(s, h, 1, &one, n_out < n ? n_out : n);
}

/* The public constructors: a stack with the caller's options (NULL: the
 * defaults), owned by the caller. */
static tfm_status create(const tfm_layer_config *config, int64_t n_layers,
                         int final_norm, int decoder,
                         const tfm_layer_options *options, tfm_module **out)
{
    tfm_layer_options o;
    tfm_status st = tfm__layer_options_for_block(options, "a stack", out, &o);
    tfm__stack *s = NULL;
    if (st == TFM_OK)
        st = tfm__stack_new_ex(config, o.attention, tfm__layer_parts(&o), n_layers,
                               final_norm, decoder, &s);
    if (st == TFM_OK)
        *out = &s->base;
    return st;
}

tfm_status tfm_encoder_create(const tfm_layer_config *config, int64_t n_layers,
                              int final_norm, tfm_module **out)
{
    return create(config, n_layers, final_norm, 0, NULL, out);
}

tfm_status tfm_decoder_create(const tfm_layer_config *config, int64_t n_layers,
                              int final_norm, tfm_module **out)
{
    return create(config, n_layers, final_norm, 1, NULL, out);
}

tfm_status tfm_encoder_create_v2(const tfm_layer_config *config,
                                 int64_t n_layers, int final_norm,
                                 const tfm_layer_options *options,
                                 tfm_module **out)
{
    return create(config, n_layers, final_norm, 0, options, out);
}

tfm_status tfm_decoder_create_v2(const tfm_layer_config *config,
                                 int64_t n_layers, int final_norm,
                                 const tfm_layer_options *options,
                                 tfm_module **out)
{
    return create(config, n_layers, final_norm, 1, options, out);
}

/* The stacks' forward for tfm__block_kind.  Kept: a decoder's
 * grad_memory is y, a stand-in for the buffer the backward sets
 * (stack_backward_kept). */
static tfm_status stack_block_forward(const void *stack, const float *x,
                                      float *y, int64_t B, int64_t L,
                                      const float *memory, int64_t S,
                                      const tfm__masks *masks,
                                      const tfm__masks *memory_masks,
                                      uint64_t drop_key, void *kept)
{
    const tfm__stack *s = stack;
    return stack_forward(s, x, y, B, L, memory, S, masks, memory_masks,
                         drop_key, s->decoder && kept ? y : NULL, kept);
}

/* The kept forward's backward; a decoder's cross-attention pointed at
 * memory's gradient first (y stood for it in the keep). */
static tfm_status stack_backward_kept(void *kept, float *g,
                                      float *grad_memory)
{
    tfm__stack_kept *k = kept;
    tfm__decoder_layer_kept *layers = k->layers;
    for (int64_t i = 0; k->s->decoder && i < k->s->n_layers; i++)
        layers[i].ca.grad_memory = grad_memory;
    return tfm__stack_backward_kept(k, g);
}

static const tfm__block_kind encoder_kind = {
    TFM_MODULE_ENCODER, "encoder", "tfm_encoder_forward",
    offsetof(tfm__stack, config), stack_block_forward,
    sizeof(tfm__stack_kept), stack_backward_kept
};

tfm_status tfm_encoder_forward(const tfm_module *encoder, const tfm_tensor *src,
                               const tfm_attention_masks *masks,
                               tfm_tensor *out)
{
    TFM__PLAN_PIN();
    return tfm__encoder_forward(&encoder_kind, encoder, src, masks, out);
}

static const tfm__block_kind decoder_kind = {
    TFM_MODULE_DECODER, "decoder", "tfm_decoder_forward",
    offsetof(tfm__stack, config), stack_block_forward,
    sizeof(tfm__stack_kept), stack_backward_kept
};

tfm_status tfm_decoder_forward(const tfm_module *decoder, const tfm_tensor *tgt,
                               const tfm_tensor *memory,
                               const tfm_attention_masks *tgt_masks,
                               const tfm_attention_masks *memory_masks,
                               tfm_tensor *out)
{
    TFM__PLAN_PIN();
    return tfm__decoder_forward(&decoder_kind, decoder, tgt, memory, tgt_masks,
                                memory_masks, out);
}

tfm_status tfm_encoder_backward(tfm_module *encoder, const tfm_tensor *src,
                                const tfm_attention_masks *masks,
                                const tfm_tensor *grad_output,
                                tfm_tensor *grad_src)
{
    TFM__PLAN_PIN();
    return tfm__encoder_backward(&encoder_kind, encoder,
                                 "tfm_encoder_backward", src, masks,
                                 grad_output, grad_src);
}

tfm_status tfm_decoder_backward(tfm_module *decoder, const tfm_tensor *tgt,
                                const tfm_tensor *memory,
                                const tfm_attention_masks *tgt_masks,
                                const tfm_attention_masks *memory_masks,
                                const tfm_tensor *grad_output,
                                tfm_tensor *grad_tgt, tfm_tensor *grad_memory)
{
    TFM__PLAN_PIN();
    return tfm__decoder_backward(&decoder_kind, decoder,
                                 "tfm_decoder_backward", tgt, memory,
                                 tgt_masks, memory_masks, grad_output,
                                 grad_tgt, grad_memory);
}
