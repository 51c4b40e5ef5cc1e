/* Internal: sub-layers wrapped in a residual connection and LayerNorm
 * (Vaswani et al. section 3.1; pre-norm as Xiong et al. 2020), shared by the
 * encoder layer, the decoder layer and the cross-attention block. */
#ifndef TFM_SRC_RESIDUAL_H
#define TFM_SRC_RESIDUAL_H

#include "feed_forward.h"
#include "layer_norm.h"
#include "mha.h"

/* A sub-layer: out [rows, d] = f(in [rows, d]); out may alias in.  Each kind
 * below embeds it as its first member and carries only its own data; run
 * receives that member and reads the kind around it. */
typedef struct tfm__sublayer tfm__sublayer;
struct tfm__sublayer {
    tfm_status (*run)(const tfm__sublayer *s, const float *in, float *out);
    /* The backward of run (NULL: the kind has none): given run's in and
     * grad_out [rows, d], writes grad_in [rows, d] (distinct from both)
     * and accumulates the parameter gradients (which must exist). */
    tfm_status (*backward)(const tfm__sublayer *s, const float *in,
                           const float *grad_out, float *grad_in);
};

/* Self-attention of in [batch, L, d] over itself. */
typedef struct tfm__self_attention_sublayer {
    tfm__sublayer base;
    const tfm__mha *mha;
    int64_t batch, L;
    const tfm__masks *masks;
} tfm__self_attention_sublayer;

/* Cross-attention of in [batch, L, d] over memory [batch, S, kdim]
 * (kdim = vdim).  Its backward adds the memory's gradient (key's plus
 * value's) into grad_memory [batch, S, kdim] when that is not NULL. */
typedef struct tfm__cross_attention_sublayer {
    tfm__sublayer base;
    const tfm__mha *mha;
    int64_t batch, L, S;
    const float *memory;
    const tfm__masks *masks;
    float *grad_memory;
} tfm__cross_attention_sublayer;

/* Self-attention of n new positions in [n, d] over a KV cache holding
 * `past` positions (tfm__mha_run_cached); k_cache / v_cache [capacity,
 * kv_dim] receive the new keys and values at rows past .. past+n-1. */
typedef struct tfm__cached_attention_sublayer {
    tfm__sublayer base;
    const tfm__mha *mha;
    int64_t n, past;
    float *k_cache, *v_cache;
} tfm__cached_attention_sublayer;

/* The position-wise feed-forward network on rows [rows, d]. */
typedef struct tfm__feed_forward_sublayer {
    tfm__sublayer base;
    const tfm__feed_forward *ff;
    int64_t rows;
} tfm__feed_forward_sublayer;

tfm__self_attention_sublayer tfm__sublayer_self_attention(
    const tfm__mha *m, int64_t batch, int64_t L, const tfm__masks *masks);
tfm__cross_attention_sublayer tfm__sublayer_cross_attention(
    const tfm__mha *m, int64_t batch, int64_t L, const float *memory,
    int64_t S, const tfm__masks *masks);
tfm__cached_attention_sublayer tfm__sublayer_cached_attention(
    const tfm__mha *m, int64_t n, float *k_cache, float *v_cache,
    int64_t past);
tfm__feed_forward_sublayer tfm__sublayer_feed_forward(
    const tfm__feed_forward *f, int64_t rows);

/* The feed-forward network and the LayerNorms of a layer with config c
 * (already checked), each made and then adopted by parent under PyTorch's
 * names: the network's "linear1." / "linear2." at the top level, then
 * "norm1.", "norm2.", ... in order.  *ff and *norms[i] are set as they
 * are made, so the parent's destroy frees a partial set on failure.
 * Fails with out-of-memory. */
tfm_status tfm__layer_ff_norms_new(tfm_module *parent,
                                   const tfm_layer_config *c, int bias,
                                   tfm__feed_forward **ff,
                                   tfm__layer_norm **const norms[],
                                   int n_norms);

/* x [rows, d] <- post-norm: norm(x + f(x)); pre-norm: x + f(norm(x)).
 * tmp: rows * d floats of scratch.  Fails only with out-of-memory. */
tfm_status tfm__residual(const tfm__sublayer *f, const tfm__layer_norm *norm,
                         int norm_first, float *x, float *tmp, int64_t rows);

/* The backward of tfm__residual (torch.autograd's), x its input [rows, d]
 * (not changed), grad_y [rows, d] the gradient of its output; writes
 * grad_x [rows, d] (may be grad_y, not x) and accumulates the parameter
 * gradients of f and norm.  With h = x + f(x), z = LN(x):
 *   post-norm: g = LN'(h)^T grad_y;  grad_x = g + f'(x)^T g
 *   pre-norm:  g = f'(z)^T grad_y;   grad_x = grad_y + LN'(x)^T g
 * Fails only with out-of-memory (or a sub-layer's unsupported option). */
tfm_status tfm__residual_backward(const tfm__sublayer *f,
                                  const tfm__layer_norm *norm, int norm_first,
                                  const float *x, const float *grad_y,
                                  float *grad_x, int64_t rows);

#endif
