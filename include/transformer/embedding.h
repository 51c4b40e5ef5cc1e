/*
 * libtransformer: token embeddings and positional encodings.
 *
 * Source: Vaswani et al., "Attention Is All You Need" (2017), section 3.4
 * (embeddings multiplied by sqrt(d_model)) and section 3.5 (sinusoidal
 * positional encoding PE(pos, 2i) = sin(pos / base^(2i/d_model)),
 * PE(pos, 2i+1) = cos(pos / base^(2i/d_model)), base = 10000); learned
 * absolute position tables as in Gehring et al. (2017) and GPT.
 */
#ifndef TRANSFORMER_EMBEDDING_H
#define TRANSFORMER_EMBEDDING_H

#include "module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a lookup table of n_rows vectors of width d_model (PyTorch
 * nn.Embedding).  Used for token embeddings (n_rows = vocabulary size) and
 * for learned absolute positions (n_rows = context length).
 * scale nonzero multiplies looked-up rows by sqrt(d_model) (section 3.4).
 * Parameter: "weight" [n_rows, d_model] (starts at 0).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (a size < 1),
 * TFM_ERR_OVERFLOW, TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_embedding_create(int64_t n_rows, int64_t d_model,
                                        int scale, tfm_module **out);

/* Looks up ids [batch * seq] (row-major [batch, seq]) into out
 * [batch, seq, d_model].
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE (out is
 * not [batch, seq, d_model]), TFM_ERR_INVALID_ARGUMENT (an id outside
 * 0 .. n_rows-1; out unchanged). */
TFM_API tfm_status tfm_embedding_forward(const tfm_module *embedding,
                                         const int32_t *ids, int64_t batch,
                                         int64_t seq, tfm_tensor *out);

/* The backward of tfm_embedding_forward (torch.autograd's gradient of
 * nn.Embedding): weight.grad[ids[i]] += s * grad_output[i] for every
 * position i in order (a scatter-add; repeated ids accumulate), s =
 * sqrt(d_model) when the table scales, else 1.  A position whose id equals
 * padding_idx adds nothing (nn.Embedding's padding_idx: that row gets no
 * gradient); padding_idx -1 means none.  Learned positions
 * (tfm_embedding_add_positions) are the same table read at ids offset ..
 * offset+L-1: pass those ids, once per sequence (grad_output [B, L, d]).
 * The sinusoidal encodings have no parameters: nothing to differentiate.
 * Gradients are accumulated into the module's gradient memory
 * (tfm_module_train first, module.h); one thread adds positions in order,
 * so the result has the same bits at any thread count.  There is no
 * gradient with respect to ids.
 * ids [batch * seq] (row-major [batch, seq]); grad_output
 * [batch, seq, d_model].  Allocates nothing.
 * Errors: TFM_ERR_NULL_ARGUMENT (embedding, ids or grad_output),
 * TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE (grad_output is not [batch, seq,
 * d_model]), TFM_ERR_INVALID_ARGUMENT (batch or seq < 1, an id outside
 * 0 .. n_rows-1, padding_idx outside -1 .. n_rows-1, no gradient memory),
 * TFM_ERR_NON_FINITE (grad_output holds NaN or infinity), TFM_ERR_BUSY
 * (another thread is in a backward pass writing the same gradients).  On
 * error nothing is written.  Since 1.2. */
TFM_API tfm_status tfm_embedding_backward(tfm_module *embedding,
                                          const int32_t *ids, int64_t batch,
                                          int64_t seq, int64_t padding_idx,
                                          const tfm_tensor *grad_output);

/* Learned positions: adds rows offset .. offset+L-1 of the table to every
 * sequence of x [B, L, d_model] in place (x[b, i] += table[offset + i]).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE,
 * TFM_ERR_CAPACITY (offset + L exceeds the table's n_rows; x unchanged),
 * TFM_ERR_INVALID_ARGUMENT (offset < 0). */
TFM_API tfm_status tfm_embedding_add_positions(const tfm_module *positions,
                                               tfm_tensor *x, int64_t offset);

/* Layout of a sinusoidal positional encoding.  Append-only. */
typedef enum tfm_sinusoidal_layout {
    /* sin on even dimensions, cos on odd (Vaswani et al. 2017, 3.5). */
    TFM_SINUSOIDAL_INTERLEAVED = 0,
    /* sin in the first half, cos in the second (fairseq, tensor2tensor's
     * get_timing_signal_1d): PE(p, i) = sin(p * base^(-i/(h-1))) and
     * PE(p, h + i) = cos(same), h = d/2, i = 0 .. h-1; an odd d gets a
     * final 0 column. */
    TFM_SINUSOIDAL_CONCAT = 1,
    TFM_SINUSOIDAL_COUNT         /* since 1.2.0; grows, never store it */
} tfm_sinusoidal_layout;

/* Writes the sinusoidal encoding of positions offset .. offset+L-1 into
 * pe [L, d_model] (interleaved layout of section 3.5: sin on even
 * dimensions, cos on odd).  base: 0 means 10000.  Angles are computed in
 * double precision.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_SHAPE (pe not rank 2),
 * TFM_ERR_INVALID_ARGUMENT (offset < 0, base not finite or <= 1). */
TFM_API tfm_status tfm_sinusoidal_encoding(tfm_tensor *pe, int64_t offset,
                                           double base);

/* tfm_sinusoidal_encoding with a layout: pe [L, d_model] receives the
 * encoding of positions offset .. offset+L-1.  base 0 = 10000.
 * Angles are computed in double precision.  Source: Vaswani et al. 2017,
 * 3.5 (interleaved); fairseq's SinusoidalPositionalEmbedding (concat).
 * Errors: those of tfm_sinusoidal_encoding, TFM_ERR_INVALID_ARGUMENT (an
 * unknown layout; CONCAT needs d_model >= 4); on error pe is unchanged. */
TFM_API tfm_status tfm_sinusoidal_encoding_ex(tfm_tensor *pe, int64_t offset,
                                              double base,
                                              tfm_sinusoidal_layout layout);

/* Adds the sinusoidal encoding of positions offset .. offset+L-1 to every
 * sequence of x [B, L, d_model] in place.  Errors: as
 * tfm_sinusoidal_encoding (x must be rank 3). */
TFM_API tfm_status tfm_add_sinusoidal_encoding(tfm_tensor *x, int64_t offset,
                                               double base);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_EMBEDDING_H */
