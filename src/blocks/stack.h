/* Internal: encoder and decoder stacks, for the models that contain them. */
#ifndef TFM_SRC_STACK_H
#define TFM_SRC_STACK_H

#include "blocks/layers_impl.h"

/* N encoder or decoder layers and an optional final LayerNorm. */
typedef struct tfm__stack {
    tfm_module base;
    tfm_layer_config config;        /* every layer's */
    int64_t n_layers;
    int decoder;                    /* 0: encoder layers, 1: decoder */
    tfm_module **layers;            /* n_layers encoder or decoder layers */
    tfm__layer_norm *norm;          /* final LayerNorm or NULL */
} tfm__stack;

tfm_status tfm__stack_new(const tfm_layer_config *c, int64_t n_layers,
                          int final_norm, int decoder, tfm__stack **out);

/* The same with every layer's self-attention using the variant `attention`
 * (attention.h; NULL = plain attention) and the layers' parts
 * (layer_config.h: TFM__PART_*, which the final norm follows too);
 * (c, NULL, TFM__PART_BIAS, ...) is tfm__stack_new.  Encoder layers only take a variant: a decoder stack
 * with one fails with TFM_ERR_UNSUPPORTED. */
tfm_status tfm__stack_new_ex(const tfm_layer_config *c,
                             const tfm_attention_config *attention,
                             unsigned parts,
                             int64_t n_layers, int final_norm, int decoder,
                             tfm__stack **out);

/* In place on x [B, L, d]; memory and memory_masks only for decoders.
 * drop_key: the call's dropout key (dropout.h; 0: none); layer i's is its
 * site TFM__DROP_LAYER0 + i.  Fails only with out-of-memory. */
tfm_status tfm__stack_run(const tfm__stack *s, float *x, int64_t B, int64_t L,
                          const float *memory, int64_t S,
                          const tfm__masks *masks,
                          const tfm__masks *memory_masks, uint64_t drop_key);

/* The stack's forward kept for its backward (workspace memory of the
 * calling thread, above the caller's mark). */
typedef struct tfm__stack_kept {
    const tfm__stack *s;
    int64_t rows;
    float *acts;            /* [n_layers + 1, rows, d]: layer i's input at
                             * i rows d, the final norm's input last */
    void *layers;           /* n_layers tfm__encoder_layer_kept or
                             * tfm__decoder_layer_kept */
    float *tmp;             /* the final norm's input gradient, or NULL */
    double *acc;            /* [2 d]: its sums, or NULL */
} tfm__stack_kept;

/* out [B, L, d] = tfm__stack_run of x [B, L, d] (x not changed; out
 * distinct from it), keeping every layer's input and what each layer's
 * backward needs in *k (one forward pass; activations linear in the
 * layers, as torch.autograd keeps them); grad_memory [B, S, d] (decoders;
 * NULL: not wanted) is where the backward will add memory's gradient.
 * Fails with out-of-memory or a variant without a backward before
 * writing anything but out. */
tfm_status tfm__stack_forward_keep(const tfm__stack *s, const float *x,
                                   int64_t B, int64_t L, const float *memory,
                                   int64_t S, const tfm__masks *masks,
                                   const tfm__masks *memory_masks,
                                   uint64_t drop_key, float *grad_memory,
                                   float *out, tfm__stack_kept *k);

/* The backward of that forward: g [B, L, d] holds the output's gradient
 * and receives x's; every parameter gradient is accumulated (the caller
 * has entered them, tfm__module_enter_grads on the stack or its model).
 * The final norm and the layers go backward in reverse order.  Fails only
 * as attention's backward can, possibly after the layers above
 * accumulated. */
tfm_status tfm__stack_backward_kept(const tfm__stack_kept *k, float *g);

/* Both in one: x the input (not changed), g and grad_memory as above.
 * Fails with out-of-memory (before any gradient is written) or as the
 * backward above. */
tfm_status tfm__stack_backward(const tfm__stack *s, const float *x, int64_t B,
                               int64_t L, const float *memory, int64_t S,
                               const tfm__masks *masks,
                               const tfm__masks *memory_masks,
                               uint64_t drop_key, float *g,
                               float *grad_memory);

/* The blocks of a decoder-only model (a stack of encoder layers) on n new
 * positions h [n, d] of one sequence over its KV cache: layer i's keys and
 * values are keys / values + i * stride, [capacity, kv_dim] each, holding
 * `past` positions; the new ones are written at rows past .. past+n-1;
 * origin: the RoPE position of row 0 (tfm__mha_run_cached).
 * Then the final norm.  n_out: only the last n_out rows of h are read
 * afterwards (1: a prompt whose last logits alone are wanted; >= n: all):
 * the last layer's feed-forward block and the final norm skip the others
 * (tfm__encoder_layer_run_cached's tail), whose h is then not the
 * blocks' output.  v_nonfinite: NULL or the cache's per-layer counts of
 * non-finite value rows (mha.h: tfm__cached_seq).  Fails only with
 * out-of-memory. */
tfm_status tfm__stack_run_cached(const tfm__stack *s, float *h, int64_t n,
                                 float *keys, float *values, int64_t stride,
                                 int64_t past, int64_t origin, int64_t n_out,
                                 int64_t *v_nonfinite);

/* The same for n_seqs sequences at once (a batch decoding step): h
 * [rows, d] their new positions one sequence after another (rows = the
 * sum of seqs[i].n), seqs[i] sequence i's cache (its layer_stride the
 * stride above).  Every layer's norms, projections and feed-forward are
 * one pass over all rows; attention is per sequence over its own cache.
 * Fails only with out-of-memory. */
tfm_status tfm__stack_run_cached_seqs(const tfm__stack *s, float *h,
                                      int64_t n_seqs,
                                      const tfm__cached_seq *seqs);

/* An encoder-decoder model's decoder stack on the new positions h [rows,
 * d] of n_seqs target sequences over one source (beam search's beams):
 * layer i runs tfm__decoder_layer_run_cached with its self-attention cache
 * rows of seqs (layer_stride apart) and the source's keys and values
 * memory_kv + i * S * 2 kv_dim (tfm__stack_memory_kv); then the final
 * norm.  Fails only with out-of-memory. */
tfm_status tfm__stack_run_decoder_cached(const tfm__stack *s, float *h,
                                         int64_t n_seqs,
                                         const tfm__cached_seq *seqs,
                                         const float *memory_kv, int64_t S);

/* Every decoder layer's cross-attention keys and values of memory [S, d]
 * (the encoder's output): memory_kv [n_layers, S, 2 kv_dim], layer i's
 * rows from tfm__mha_memory_kv. */
void tfm__stack_memory_kv(const tfm__stack *s, const float *memory,
                          int64_t S, float *memory_kv);

tfm_status tfm__stack_macs(const tfm__stack *s, int64_t B, int64_t L,
                           int64_t S, int64_t *acc);

#endif
