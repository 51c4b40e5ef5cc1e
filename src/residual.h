/* Internal: sub-layers wrapped in a residual connection and LayerNorm
 * (Vaswani et al. section 3.1; pre-norm as Xiong et al. 2020), shared by the
 * encoder layer, the decoder layer and the cross-attention block. */
#ifndef TFM_SRC_RESIDUAL_H
#define TFM_SRC_RESIDUAL_H

#include "feed_forward.h"
#include "layer_norm.h"
#include "mha.h"

/* A sub-layer: out [rows, d] = f(in [rows, d]); out may alias in. */
typedef struct tfm__sublayer {
    tfm_status (*run)(const struct tfm__sublayer *s, const float *in,
                      float *out);
    const tfm__mha *mha;            /* attention sub-layers */
    const tfm__feed_forward *ff;    /* feed-forward sub-layer */
    const float *memory;            /* cross-attention: [B, S, d] */
    const tfm__masks *masks;
    int64_t batch, L, S;
    float *k_cache, *v_cache;       /* cached self-attention */
} tfm__sublayer;

tfm__sublayer tfm__self_attention_sublayer(const tfm__mha *m, int64_t batch,
                                           int64_t L, const tfm__masks *masks);
tfm__sublayer tfm__cross_attention_sublayer(const tfm__mha *m, int64_t batch,
                                            int64_t L, const float *memory,
                                            int64_t S,
                                            const tfm__masks *masks);
/* Self-attention of n new positions over a KV cache holding `past`
 * positions (tfm__mha_run_cached). */
tfm__sublayer tfm__cached_attention_sublayer(const tfm__mha *m, int64_t n,
                                             float *k_cache, float *v_cache,
                                             int64_t past);
tfm__sublayer tfm__feed_forward_sublayer(const tfm__feed_forward *f,
                                         int64_t rows);

/* x [rows, d] <- post-norm: norm(x + f(x)); pre-norm: x + f(norm(x)).
 * tmp: rows * d floats of scratch.  Fails only with out-of-memory. */
tfm_status tfm__residual(const tfm__sublayer *f, const tfm__layer_norm *norm,
                         int norm_first, float *x, float *tmp, int64_t rows);

/* Validates a layer configuration (message set). */
tfm_status tfm__config_check(const tfm_layer_config *config);

#endif
