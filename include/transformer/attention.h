/*
 * libtransformer: scaled dot-product attention and multi-head attention.
 *
 * Source: Vaswani et al., "Attention Is All You Need" (2017), eq. (1)
 *   Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
 * and section 3.2.2 (multi-head attention)
 *   MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
 *   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).
 *
 * Shapes use B = batch, H = heads, L = query positions, S = key positions.
 *
 * Masks (tfm_attention_masks) decide which keys each query may attend to.
 * A masked-out logit is -infinity before the softmax, whatever the scores,
 * keys or values at that position hold (NaN and infinity included): values
 * in masked positions never affect the output.  The softmax subtracts each
 * row's maximum, so large logits do not overflow.  A query row whose keys
 * are all masked gets all-zero weights and an all-zero output, never NaN.
 * NaN in a visible query, key or value propagates to the outputs it touches.
 */
#ifndef TRANSFORMER_ATTENTION_H
#define TRANSFORMER_ATTENTION_H

#include "module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Causal masking: query i may attend to key j only when j <= i + offset.
 * Append-only. */
typedef enum tfm_causal {
    TFM_CAUSAL_NONE = 0,
    /* offset 0: aligned at the top left, as PyTorch's is_causal=True.  For
     * L > S the last L - S queries see every key; for L < S the queries see
     * only the first keys. */
    TFM_CAUSAL_TOP_LEFT = 1,
    /* offset S - L: the L queries are the last L positions of the S keys, as
     * decoding with a KV cache needs (query i is position S - L + i). */
    TFM_CAUSAL_BOTTOM_RIGHT = 2,
    TFM_CAUSAL_COUNT             /* since 1.2.0; grows, never store it */
} tfm_causal;

/* How a mask tensor's values are read.  Append-only. */
typedef enum tfm_mask_kind {
    /* Boolean, nonzero = masked out (may NOT attend).  PyTorch's convention
     * for nn.MultiheadAttention's key_padding_mask and attn_mask. */
    TFM_MASK_BLOCK = 0,
    /* Boolean, nonzero = may attend.  PyTorch's convention for
     * F.scaled_dot_product_attention's boolean attn_mask. */
    TFM_MASK_ALLOW = 1,
    /* Float, added to the scaled logits (-inf masks a position out). */
    TFM_MASK_ADDITIVE = 2,
    TFM_MASK_KIND_COUNT          /* since 1.2.0; grows, never store it */
} tfm_mask_kind;

/* The masks of one attention call.  All of them combine: a key is visible
 * to a query only when every mask allows it, and additive values add up.
 * A zero-initialised struct means "no masks". */
typedef struct tfm_attention_masks {
    tfm_causal causal;
    /* [B, S] or NULL: per batch element, which keys are padding. */
    const tfm_tensor *key_padding_mask;
    tfm_mask_kind key_padding_kind;
    /* [L, S], [B, L, S] or [B, H, L, S] or NULL; [L, S] and [B, L, S] are
     * broadcast over the missing leading axes. */
    const tfm_tensor *attn_mask;
    tfm_mask_kind attn_mask_kind;
} tfm_attention_masks;

/* Scaled dot-product attention, eq. (1) above, per batch element and head:
 *   weights = softmax(scale * q k^T + masks) over the S keys,
 *   out     = weights v.
 * q [B, H, L, d_k], k [B, H, S, d_k], v [B, H, S, d_v], out [B, H, L, d_v]
 * (caller-allocated; written).  weights: NULL, or [B, H, L, S] to receive
 * the attention weights (each unmasked row sums to 1).  masks: NULL for
 * none.  scale: 0 means the default 1/sqrt(d_k); any other finite value is
 * used as given.
 * Errors: TFM_ERR_NULL_ARGUMENT (q, k, v or out NULL), TFM_ERR_SHAPE (ranks
 * or sizes disagree, or a mask has the wrong shape), TFM_ERR_INVALID_ARGUMENT
 * (unknown enum value, non-finite scale), TFM_ERR_OUT_OF_MEMORY.  On error
 * out and weights are unchanged. */
TFM_API tfm_status tfm_sdpa(const tfm_tensor *q, const tfm_tensor *k,
                            const tfm_tensor *v,
                            const tfm_attention_masks *masks, float scale,
                            tfm_tensor *out, tfm_tensor *weights);

/* Creates a multi-head attention layer (PyTorch nn.MultiheadAttention):
 * d_model = embed_dim, n_heads must divide d_model (d_k = d_model/n_heads),
 * kdim / vdim are the widths of the key and value inputs (0 means d_model),
 * bias nonzero adds biases to the input and output projections.
 * Parameters (PyTorch names):
 *   kdim == vdim == d_model: "in_proj_weight" [3*d_model, d_model]
 *                            (rows: W_q, then W_k, then W_v)
 *   otherwise: "q_proj_weight" [d_model, d_model],
 *              "k_proj_weight" [d_model, kdim],
 *              "v_proj_weight" [d_model, vdim]
 *   with bias: "in_proj_bias" [3*d_model]
 *   "out_proj.weight" [d_model, d_model], with bias "out_proj.bias" [d_model]
 * Errors: TFM_ERR_NULL_ARGUMENT (out NULL), TFM_ERR_INVALID_ARGUMENT (a size
 * < 1, n_heads not dividing d_model), TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY.  On success *out is freed with tfm_module_free. */
TFM_API tfm_status tfm_mha_create(int64_t d_model, int64_t n_heads,
                                  int64_t kdim, int64_t vdim, int bias,
                                  tfm_module **out);

/* Multi-head attention forward pass.
 * query [B, L, d_model], key [B, S, kdim], value [B, S, vdim];
 * out [B, L, d_model] (caller-allocated; written; it may be the query
 * tensor itself).  masks: NULL or as for tfm_sdpa, with key_padding_mask
 * [B, S] and attn_mask [L, S], [B, L, S] or [B, n_heads, L, S].
 * weights: NULL, or [B, n_heads, L, S] for the weights of each head, or
 * [B, L, S] for their average over the heads (PyTorch's
 * average_attn_weights=True).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND (not an MHA module),
 * TFM_ERR_SHAPE (e.g. "key has 5 columns, expected 8"),
 * TFM_ERR_INVALID_ARGUMENT (unknown enum value), TFM_ERR_OUT_OF_MEMORY.
 * On error out and weights are unchanged. */
TFM_API tfm_status tfm_mha_forward(const tfm_module *mha,
                                   const tfm_tensor *query,
                                   const tfm_tensor *key,
                                   const tfm_tensor *value,
                                   const tfm_attention_masks *masks,
                                   tfm_tensor *out, tfm_tensor *weights);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_ATTENTION_H */
