/* Validation of a layer call's tensors and the copy-in / copy-out helper
 * (layers_impl.h), shared by the encoder and decoder layers, the
 * cross-attention block, the stacks and nn.Transformer. */
#include <string.h>

#include "error.h"
#include "layers_impl.h"
#include "tensor_impl.h"
#include "workspace.h"

tfm_status tfm__check_activation(const tfm_tensor *t, const char *what,
                                 int64_t d, int64_t *B, int64_t *L)
{
    if (!t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", what);
    if (t->rank != 3)
        return tfm__fail(TFM_ERR_SHAPE,
                         "%s has rank %d, expected 3 [batch, seq, d_model]",
                         what, t->rank);
    if (t->shape[2] != d)
        return tfm__fail(TFM_ERR_SHAPE, "%s has %lld columns, expected %lld",
                         what, (long long)t->shape[2], (long long)d);
    *B = t->shape[0];
    *L = t->shape[1];
    return TFM_OK;
}

tfm_status tfm__run_copy(const float *src, float *dst, int64_t n,
                         tfm__inplace_fn fn, const void *ctx)
{
    tfm__ws_mark mark = tfm__ws_save();
    float *x = tfm__ws_floats((size_t)n);
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    if (x) {
        memcpy(x, src, (size_t)n * sizeof(float));
        st = fn(ctx, x);
        if (st == TFM_OK)
            memcpy(dst, x, (size_t)n * sizeof(float));
    }
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__check_decoder_inputs(const tfm_layer_config *c,
                                     const tfm_tensor *tgt, const char *name,
                                     const tfm_tensor *memory,
                                     const tfm_attention_masks *tgt_masks,
                                     const tfm_attention_masks *memory_masks,
                                     const tfm_tensor *out,
                                     tfm__decoder_inputs *in)
{
    const int64_t d = c->d_model, H = c->n_heads;
    int64_t Bm = 0;
    tfm_status st;
    if ((st = tfm__check_activation(tgt, name, d, &in->B, &in->L)) ||
        (st = tfm__check_activation(memory, "memory", d, &Bm, &in->S)))
        return st;
    if (Bm != in->B)
        return tfm__fail(TFM_ERR_SHAPE, "memory has batch %lld, expected %lld",
                         (long long)Bm, (long long)in->B);
    if ((st = tfm__check_shape(out, "out", 3, tgt->shape)) ||
        (st = tfm__masks_resolve(tgt_masks, in->B, H, in->L, in->L,
                                 "tgt_masks", &in->tgt_masks)))
        return st;
    return tfm__masks_resolve(memory_masks, in->B, H, in->L, in->S,
                              "memory_masks", &in->memory_masks);
}
