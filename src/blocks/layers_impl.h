/* Internal: encoder and decoder layers, for the stacks and models. */
#ifndef TFM_SRC_LAYERS_IMPL_H
#define TFM_SRC_LAYERS_IMPL_H

#include "blocks/layer_config.h"
#include "blocks/residual.h"

/* Vaswani et al.'s encoder layer: self-attention then feed-forward, each in
 * a residual connection with LayerNorm.  It is also the block of
 * decoder-only models (GPT's block: the same sub-layers, run under a causal
 * mask and, when decoding, over a KV cache) and of encoder-only models
 * (BERT's), so one kind serves the three. */
typedef struct tfm__encoder_layer {
    tfm_module base;
    tfm_layer_config config;
    tfm__mha *self_attn;
    tfm__feed_forward *ff;
    tfm__layer_norm *norm1, *norm2;
} tfm__encoder_layer;

/* Vaswani et al.'s decoder layer: self-attention, cross-attention over the
 * encoder's memory, feed-forward, each in a residual connection. */
typedef struct tfm__decoder_layer {
    tfm_module base;
    tfm_layer_config config;
    tfm__mha *self_attn, *cross_attn;
    tfm__feed_forward *ff;
    tfm__layer_norm *norm1, *norm2, *norm3;
} tfm__decoder_layer;

tfm_status tfm__encoder_layer_new(const tfm_layer_config *c,
                                  tfm__encoder_layer **out);
/* The same with a self-attention variant (attention.h; NULL = the
 * defaults) and the parts (layer_config.h: TFM__PART_*): without
 * TFM__PART_BIAS no biases (tfm_layer_options.bias: the attention's
 * projections, the feed-forward network and the norms), with
 * TFM__PART_RMS_NORM RMSNorms, with TFM__PART_GATED a gated feed-forward;
 * (c, NULL, TFM__PART_BIAS) is tfm__encoder_layer_new. */
tfm_status tfm__encoder_layer_new_ex(const tfm_layer_config *c,
                                     const tfm_attention_config *a,
                                     unsigned parts,
                                     tfm__encoder_layer **out);
/* parts as for tfm__encoder_layer_new_ex. */
tfm_status tfm__decoder_layer_new(const tfm_layer_config *c, unsigned parts,
                                  tfm__decoder_layer **out);

/* The same for the new positions x [rows, d] of n_seqs sequences, one
 * sequence after another, whose self-attention runs over each one's KV
 * cache (layer `layer`'s rows of seqs[i]: tfm__mha_run_cached_seqs, which
 * writes the new keys and values at rows past .. past+n-1).  The block of
 * a decoder-only model when it decodes; the norms, projections and
 * feed-forward run on all rows at once.  tail: the feed-forward block runs
 * on the last `tail` rows only (>= rows: all), whose outputs alone are
 * then right -- a prompt's last layer, where only the last position's
 * output is read (llama.cpp's skipping of unused rows); the keys and
 * values of every row are cached as ever.  Fails only with
 * out-of-memory. */
/* A layer's forward kept for its backward: its blocks and what each
 * block's backward needs (workspace memory of the calling thread, above
 * the caller's mark; the blocks point into the struct, which must not
 * move while it is in use). */
typedef struct tfm__encoder_layer_kept {
    tfm__self_attention_sublayer sa;
    tfm__feed_forward_sublayer ff;
    tfm__residual_kept k[2];    /* its two blocks */
} tfm__encoder_layer_kept;

typedef struct tfm__decoder_layer_kept {
    tfm__self_attention_sublayer sa;
    tfm__cross_attention_sublayer ca;
    tfm__feed_forward_sublayer ff;
    tfm__residual_kept k[3];    /* its three blocks */
} tfm__decoder_layer_kept;

/* The encoder layer's one forward: y [B, L, d] = the layer of x [B, L, d].
 * drop_key: the call's dropout key (dropout.h; 0: none): the layer's sites
 * are its self-attention module (key site TFM__DROP_SELF_ATTN, its
 * probability), the feed-forward's hidden activations (TFM__DROP_FF then
 * TFM__DROP_HIDDEN) and the residual branches (TFM__DROP_BLOCK1, 2, 3),
 * these with the layer's probability; a decoder layer's cross-attention is
 * TFM__DROP_CROSS_ATTN.  k NULL: evaluation, y may be x (in place), fails
 * only with out-of-memory.  Else the training forward (y distinct from x;
 * x must stay unchanged until the backward), keeping in *k what
 * tfm__encoder_layer_backward_kept needs; scratch: 2 B L d floats of
 * backward scratch, shareable between layers whose backward passes run one
 * after another, or NULL (taken from the workspace); fails (out-of-memory,
 * a variant without a backward) before writing anything the caller reads
 * but y. */
tfm_status tfm__encoder_layer_forward(const tfm__encoder_layer *l,
                                      const float *x, float *y, int64_t B,
                                      int64_t L, const tfm__masks *masks,
                                      uint64_t drop_key, float *scratch,
                                      tfm__encoder_layer_kept *k);
/* The backward of that forward: g [B, L, d] holds the output's gradient
 * and receives x's; the parameter gradients are accumulated (the caller
 * has entered them, tfm__module_enter_grads).  Fails only as attention's
 * backward can, possibly after the feed-forward block accumulated its
 * gradients. */
tfm_status tfm__encoder_layer_backward_kept(const tfm__encoder_layer_kept *k,
                                            float *g);

/* The same for a decoder layer over memory [B, S, d]; when keeping,
 * memory's gradient is added into grad_memory [B, S, d] (NULL: not
 * wanted) by the backward. */
tfm_status tfm__decoder_layer_forward(
    const tfm__decoder_layer *l, const float *x, float *y, int64_t B,
    int64_t L, const float *memory, int64_t S, const tfm__masks *tgt_masks,
    const tfm__masks *memory_masks, uint64_t drop_key, float *grad_memory,
    float *scratch, tfm__decoder_layer_kept *k);
tfm_status tfm__decoder_layer_backward_kept(const tfm__decoder_layer_kept *k,
                                            float *g);

tfm_status tfm__encoder_layer_run_cached(const tfm__encoder_layer *l, float *x,
                                         int64_t n_seqs,
                                         const tfm__cached_seq *seqs,
                                         int64_t layer, int64_t tail);
/* A decoder layer on the new positions x [rows, d] of n_seqs target
 * sequences (one after another) that share one source: self-attention over
 * each one's KV cache (as tfm__encoder_layer_run_cached), cross-attention
 * over memory_kv [S, 2 kv_dim], the source's keys and values projected
 * once (tfm__mha_memory_kv with this layer's multihead_attn).  Evaluation
 * mode (no dropout).  Fails only with out-of-memory. */
tfm_status tfm__decoder_layer_run_cached(const tfm__decoder_layer *l,
                                         float *x, int64_t n_seqs,
                                         const tfm__cached_seq *seqs,
                                         int64_t layer,
                                         const float *memory_kv, int64_t S);

tfm_status tfm__encoder_layer_macs(const tfm__encoder_layer *l, int64_t B,
                                   int64_t L, int64_t *acc);
tfm_status tfm__decoder_layer_macs(const tfm__decoder_layer *l, int64_t B,
                                   int64_t L, int64_t S, int64_t *acc);

/* Checks a [B, L, d] activation tensor; sets *B and *L. */
tfm_status tfm__check_activation(const tfm_tensor *t, const char *what,
                                 int64_t d, int64_t *B, int64_t *L);

/* Validated inputs of a decoder-style call: tgt [B, L, d] attending over
 * memory [B, S, d], out shaped as tgt. */
typedef struct tfm__decoder_inputs {
    int64_t B, L, S;
    tfm__masks tgt_masks, memory_masks;
} tfm__decoder_inputs;

tfm_status tfm__check_decoder_inputs(const tfm_layer_config *c,
                                     const tfm_tensor *tgt, const char *name,
                                     const tfm_tensor *memory,
                                     const tfm_attention_masks *tgt_masks,
                                     const tfm_attention_masks *memory_masks,
                                     const tfm_tensor *out,
                                     tfm__decoder_inputs *in);

/* The arguments of a decoder-style backward (the decoder layer's, the
 * cross-attention block's): as tfm__check_decoder_inputs for the forward's
 * x (named `name`), memory and masks, then grad_output shaped as x and
 * finite, grad_x NULL or x's shape, grad_memory NULL or memory's shape,
 * neither overlapping grad_output nor each other.  Messages name `what`. */
tfm_status tfm__check_decoder_backward(const char *what,
                                       const tfm_layer_config *c,
                                       const tfm_tensor *x, const char *name,
                                       const tfm_tensor *memory,
                                       const tfm_attention_masks *tgt_masks,
                                       const tfm_attention_masks *memory_masks,
                                       const tfm_tensor *grad_output,
                                       const tfm_tensor *grad_x,
                                       const tfm_tensor *grad_memory,
                                       tfm__decoder_inputs *in);

/* A layer's or stack's one forward: y [B, L, d] = the block of x [B, L, d];
 * decoder-style blocks attend over memory [B, S, d] too (encoder-style
 * ones get NULL, 0 and NULL); drop_key: the call's dropout key (0: none).
 * kept NULL: evaluation, y may be x (in place); else the training forward
 * (y distinct from x, x and memory left where they are until the
 * backward), filling *kept (the kind's kept struct, kept_size bytes) with
 * what the kind's backward needs, what it points to from the workspace in
 * use.  Fails with out-of-memory, or when keeping with a variant without a
 * backward. */
typedef tfm_status (*tfm__block_forward_fn)(
    const void *block, const float *x, float *y, int64_t B, int64_t L,
    const float *memory, int64_t S, const tfm__masks *masks,
    const tfm__masks *memory_masks, uint64_t drop_key, void *kept);

/* What the public forward and backward of a layer or stack need to know
 * about it: its module kind and argument name (for the kind check), the
 * public forward's name (for mask messages of encoder-style blocks), where
 * its tfm_layer_config lies in its struct, its one forward, and the
 * backward of a kept forward. */
typedef struct tfm__block_kind {
    tfm_module_kind kind;
    const char *what;
    const char *function;
    size_t config_offset;
    tfm__block_forward_fn forward;
    size_t kept_size;
    /* The backward of a kept forward: g [B, L, d] the output's gradient,
     * replaced by x's; memory's gradient added into grad_memory [B, S, d]
     * (decoder-style kinds).  Fails as the kind's backward can. */
    tfm_status (*backward_kept)(void *kept, float *g, float *grad_memory);
} tfm__block_kind;

/* The public forward of an encoder-style block: checks block's kind, src
 * [B, L, d], out shaped as src and the masks, then runs it on a copy of src
 * written to out only on success (in training mode with the block's next
 * dropout key, tfm__dropout_forward_key, and kept in the block's tape for
 * its backward: tape.h). */
tfm_status tfm__encoder_forward(const tfm__block_kind *k,
                                const tfm_module *block, const tfm_tensor *src,
                                const tfm_attention_masks *masks,
                                tfm_tensor *out);

/* The same for a decoder-style block, with the inputs checked by
 * tfm__check_decoder_inputs (the name "tgt"). */
tfm_status tfm__decoder_forward(const tfm__block_kind *k,
                                const tfm_module *block, const tfm_tensor *tgt,
                                const tfm_tensor *memory,
                                const tfm_attention_masks *tgt_masks,
                                const tfm_attention_masks *memory_masks,
                                tfm_tensor *out);

/* The public backward's work (after its checks and tfm__backward_begin): the kept forward of block's latest training
 * forward when it had exactly these inputs (tape.h), else the forward
 * again, kept in the workspace; then k->backward_kept.  x [B, L, d],
 * memory [B, S, d] or NULL (S 0), masks as resolved for the forward; g and
 * grad_memory as backward_kept's.  Fails with out-of-memory or as the
 * kind's backward. */
tfm_status tfm__block_backward(const tfm__block_kind *k, tfm_module *block,
                               int64_t B, int64_t L, int64_t S, int64_t heads,
                               const tfm_tensor *x, const tfm_tensor *memory,
                               const tfm__masks *masks,
                               const tfm__masks *memory_masks, float *g,
                               float *grad_memory);

/* The one public backward of an encoder-style block with a keep (its
 * checks as tfm__encoder_forward's, `what` the public function's name in
 * messages, then grad_output [B, L, d] finite, grad_src NULL or src's
 * shape): tfm__backward_begin, tfm__block_backward, grad_src written only
 * on success.  Errors: the checks', TFM_ERR_BUSY, out-of-memory, or the
 * kind's backward's, with nothing written. */
tfm_status tfm__encoder_backward(const tfm__block_kind *k, tfm_module *block,
                                 const char *what, const tfm_tensor *src,
                                 const tfm_attention_masks *masks,
                                 const tfm_tensor *grad_output,
                                 tfm_tensor *grad_src);

/* The same for a decoder-style block (tfm__check_decoder_backward's
 * checks): grad_tgt [B, L, d] and grad_memory [B, S, d], each NULL or
 * written only on success. */
tfm_status tfm__decoder_backward(const tfm__block_kind *k, tfm_module *block,
                                 const char *what, const tfm_tensor *tgt,
                                 const tfm_tensor *memory,
                                 const tfm_attention_masks *tgt_masks,
                                 const tfm_attention_masks *memory_masks,
                                 const tfm_tensor *grad_output,
                                 tfm_tensor *grad_tgt, tfm_tensor *grad_memory);

/* Runs fn(x) on a scratch copy of src [n floats] and copies the result into
 * dst, so that dst is untouched when fn fails. */
typedef tfm_status (*tfm__inplace_fn)(const void *ctx, float *x);
tfm_status tfm__run_copy(const float *src, float *dst, int64_t n,
                         tfm__inplace_fn fn, const void *ctx);

/* The dropout of the hidden activations of the feed-forward network of a
 * layer (module layer, call key drop_key): the layer's probability, site
 * TFM__DROP_FF's TFM__DROP_HIDDEN. */
tfm__dropout tfm__layer_hidden_dropout(const tfm_module *layer,
                                       uint64_t drop_key);

#endif
