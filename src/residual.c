/* Residual connections around sub-layers (residual.h). */
#include <math.h>

#include "activation.h"
#include "error.h"
#include "layers_impl.h"
#include "residual.h"
#include "tensor_impl.h"
#include "workspace.h"
#include <string.h>

static tfm_status run_self(const tfm__sublayer *s, const float *in,
                           float *out)
{
    return tfm__mha_run(s->mha, in, in, in, s->batch, s->L, s->L, s->masks,
                        out, NULL, 0);
}

static tfm_status run_cross(const tfm__sublayer *s, const float *in,
                            float *out)
{
    return tfm__mha_run(s->mha, in, s->memory, s->memory, s->batch, s->L, s->S,
                        s->masks, out, NULL, 0);
}

static tfm_status run_cached(const tfm__sublayer *s, const float *in,
                             float *out)
{
    return tfm__mha_run_cached(s->mha, in, s->L, s->k_cache, s->v_cache,
                               s->S - s->L, out);
}

static tfm_status run_ff(const tfm__sublayer *s, const float *in, float *out)
{
    return tfm__feed_forward_run(s->ff, in, s->batch * s->L, out);
}

tfm__sublayer tfm__self_attention_sublayer(const tfm__mha *m, int64_t batch,
                                           int64_t L, const tfm__masks *masks)
{
    return (tfm__sublayer){ .run = run_self, .mha = m, .masks = masks,
                            .batch = batch, .L = L, .S = L };
}

tfm__sublayer tfm__cross_attention_sublayer(const tfm__mha *m, int64_t batch,
                                            int64_t L, const float *memory,
                                            int64_t S,
                                            const tfm__masks *masks)
{
    return (tfm__sublayer){ .run = run_cross, .mha = m, .memory = memory,
                            .masks = masks, .batch = batch, .L = L, .S = S };
}

tfm__sublayer tfm__cached_attention_sublayer(const tfm__mha *m, int64_t n,
                                             float *k_cache, float *v_cache,
                                             int64_t past)
{
    return (tfm__sublayer){ .run = run_cached, .mha = m, .batch = 1, .L = n,
                            .S = past + n, .k_cache = k_cache,
                            .v_cache = v_cache };
}

tfm__sublayer tfm__feed_forward_sublayer(const tfm__feed_forward *f,
                                         int64_t rows)
{
    return (tfm__sublayer){ .run = run_ff, .ff = f, .batch = 1, .L = rows };
}

tfm_status tfm__residual(const tfm__sublayer *f, const tfm__layer_norm *norm,
                         int norm_first, float *x, float *tmp, int64_t rows)
{
    const int64_t n = rows * norm->d;
    tfm_status st;
    if (norm_first) {
        tfm__layer_norm_run(norm, x, rows, tmp);
        if ((st = f->run(f, tmp, tmp)) != TFM_OK)
            return st;
        for (int64_t i = 0; i < n; i++)
            x[i] += tmp[i];
    } else {
        if ((st = f->run(f, x, tmp)) != TFM_OK)
            return st;
        for (int64_t i = 0; i < n; i++)
            x[i] += tmp[i];
        tfm__layer_norm_run(norm, x, rows, x);
    }
    return TFM_OK;
}

tfm_status tfm__config_check(const tfm_layer_config *c)
{
    if (!c)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "config is NULL");
    if (c->d_model < 1 || c->n_heads < 1 || c->d_ff < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "d_model (%lld), n_heads (%lld) and d_ff (%lld) must "
                         "be at least 1", (long long)c->d_model,
                         (long long)c->n_heads, (long long)c->d_ff);
    if (c->d_model % c->n_heads != 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_heads (%lld) does not divide d_model (%lld)",
                         (long long)c->n_heads, (long long)c->d_model);
    if (!tfm__activation_valid(c->activation))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "unknown activation %d",
                         (int)c->activation);
    if (!(c->layer_norm_eps >= 0.0f) || !isfinite(c->layer_norm_eps))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "layer_norm_eps %g must be finite and >= 0",
                         (double)c->layer_norm_eps);
    return TFM_OK;
}

tfm_layer_config tfm_layer_config_default(int64_t d_model, int64_t n_heads)
{
    return (tfm_layer_config){ .d_model = d_model, .n_heads = n_heads,
                               .d_ff = 2048,
                               .activation = TFM_ACTIVATION_RELU,
                               .layer_norm_eps = 1e-5f, .norm_first = 0 };
}

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
