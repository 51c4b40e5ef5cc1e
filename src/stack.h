/* Internal: encoder and decoder stacks, for the models that contain them. */
#ifndef TFM_SRC_STACK_H
#define TFM_SRC_STACK_H

#include "layers_impl.h"

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
 * (attention.h; NULL = plain attention) and, with bias 0, no biases in the
 * layers and the final norm (tfm_layer_options.bias); (c, NULL, 1, ...) is
 * tfm__stack_new.  Encoder layers only take a variant: a decoder stack
 * with one fails with TFM_ERR_UNSUPPORTED. */
tfm_status tfm__stack_new_ex(const tfm_layer_config *c,
                             const tfm_attention_config *attention, int bias,
                             int64_t n_layers, int final_norm, int decoder,
                             tfm__stack **out);

/* In place on x [B, L, d]; memory and memory_masks only for decoders.
 * Fails only with out-of-memory. */
tfm_status tfm__stack_run(const tfm__stack *s, float *x, int64_t B, int64_t L,
                          const float *memory, int64_t S,
                          const tfm__masks *masks,
                          const tfm__masks *memory_masks);

/* The backward of tfm__stack_run: x [B, L, d] its input (not changed);
 * g [B, L, d] holds the output's gradient and receives x's; grad_memory
 * [B, S, d] (decoders; NULL: not wanted) has memory's gradient added.
 * Every parameter gradient is accumulated; the caller has entered them
 * (tfm__module_enter_grads on the stack or its model).  One forward keeps
 * each layer's input (n_layers + 1 activations from the workspace), then
 * the final norm and the layers go backward in reverse order, each
 * recomputing its inner activations.  Fails with out-of-memory (the
 * activations: before any write; inside a layer: after the layers above
 * it accumulated) or a variant without a backward. */
tfm_status tfm__stack_backward(const tfm__stack *s, const float *x, int64_t B,
                               int64_t L, const float *memory, int64_t S,
                               const tfm__masks *masks,
                               const tfm__masks *memory_masks, float *g,
                               float *grad_memory);

/* The blocks of a decoder-only model (a stack of encoder layers) on n new
 * positions h [n, d] of one sequence over its KV cache: layer i's keys and
 * values are keys / values + i * stride, [capacity, kv_dim] each, holding
 * `past` positions; the new ones are written at rows past .. past+n-1;
 * origin: the RoPE position of row 0 (tfm__mha_run_cached).
 * Then the final norm.  Fails only with out-of-memory. */
tfm_status tfm__stack_run_cached(const tfm__stack *s, float *h, int64_t n,
                                 float *keys, float *values, int64_t stride,
                                 int64_t past, int64_t origin);

tfm_status tfm__stack_macs(const tfm__stack *s, int64_t B, int64_t L,
                           int64_t S, int64_t *acc);

#endif
