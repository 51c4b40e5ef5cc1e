/* Internal: encoder and decoder layers, for the stacks and models. */
#ifndef TFM_SRC_LAYERS_IMPL_H
#define TFM_SRC_LAYERS_IMPL_H

#include "residual.h"

typedef struct tfm__encoder_layer {
    tfm_module base;
    tfm_layer_config config;
    tfm__mha *self_attn;
    tfm__feed_forward *ff;
    tfm__layer_norm *norm1, *norm2;
} tfm__encoder_layer;

typedef struct tfm__decoder_layer {
    tfm_module base;
    tfm_layer_config config;
    tfm__mha *self_attn, *cross_attn;
    tfm__feed_forward *ff;
    tfm__layer_norm *norm1, *norm2, *norm3;
} tfm__decoder_layer;

tfm_status tfm__encoder_layer_new(const tfm_layer_config *c,
                                  tfm__encoder_layer **out);
/* The same with a self-attention variant (variants.h; NULL = the
 * defaults, identical to tfm__encoder_layer_new). */
tfm_status tfm__encoder_layer_new_ex(const tfm_layer_config *c,
                                     const tfm_attention_config *a,
                                     tfm__encoder_layer **out);
tfm_status tfm__decoder_layer_new(const tfm_layer_config *c,
                                  tfm__decoder_layer **out);

/* In place on x [B, L, d]; fail only with out-of-memory. */
tfm_status tfm__encoder_layer_run(const tfm__encoder_layer *l, float *x,
                                  int64_t B, int64_t L, const tfm__masks *m);
/* The same with a given self-attention sub-layer (e.g. over a KV cache). */
tfm_status tfm__encoder_layer_run_with(const tfm__encoder_layer *l, float *x,
                                       int64_t rows,
                                       const tfm__sublayer *self_attention);
tfm_status tfm__decoder_layer_run(const tfm__decoder_layer *l, float *x,
                                  int64_t B, int64_t L, const float *memory,
                                  int64_t S, const tfm__masks *tgt_masks,
                                  const tfm__masks *memory_masks);

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

/* Runs fn(x) on a scratch copy of src [n floats] and copies the result into
 * dst, so that dst is untouched when fn fails. */
typedef tfm_status (*tfm__inplace_fn)(const void *ctx, float *x);
tfm_status tfm__run_copy(const float *src, float *dst, int64_t n,
                         tfm__inplace_fn fn, const void *ctx);

#endif
