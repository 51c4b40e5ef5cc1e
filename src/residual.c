/* Residual connections around sub-layers (residual.h). */
#include "residual.h"
#include <stdio.h>

#include "error.h"
#include "module_impl.h"
#include "workspace.h"

/* ---- The sub-layer kinds: each run reads its own struct around s ------ */

static tfm_status run_self(const tfm__sublayer *base, const float *in,
                           float *out)
{
    const tfm__self_attention_sublayer *s =
        (const tfm__self_attention_sublayer *)base;
    return tfm__mha_run(s->mha, in, in, in, s->batch, s->L, s->L, s->masks,
                        out, NULL, 0);
}

static tfm_status run_cross(const tfm__sublayer *base, const float *in,
                            float *out)
{
    const tfm__cross_attention_sublayer *s =
        (const tfm__cross_attention_sublayer *)base;
    return tfm__mha_run(s->mha, in, s->memory, s->memory, s->batch, s->L, s->S,
                        s->masks, out, NULL, 0);
}

static tfm_status run_cached(const tfm__sublayer *base, const float *in,
                             float *out)
{
    const tfm__cached_attention_sublayer *s =
        (const tfm__cached_attention_sublayer *)base;
    return tfm__mha_run_cached(s->mha, in, s->n, s->k_cache, s->v_cache,
                               s->past, out);
}

static tfm_status run_ff(const tfm__sublayer *base, const float *in,
                         float *out)
{
    const tfm__feed_forward_sublayer *s =
        (const tfm__feed_forward_sublayer *)base;
    return tfm__feed_forward_run(s->ff, in, s->rows, out);
}

static tfm_status backward_self(const tfm__sublayer *base, const float *in,
                                const float *grad_out, float *grad_in)
{
    const tfm__self_attention_sublayer *s =
        (const tfm__self_attention_sublayer *)base;
    const int64_t n = s->batch * s->L * s->mha->d_model;
    tfm__ws_mark mark = tfm__ws_save();
    float *gk = tfm__ws_floats((size_t)n);
    float *gv = gk ? tfm__ws_floats((size_t)n) : NULL;
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    if (gv) {
        /* query = key = value = in: its gradient is the sum of the three. */
        st = tfm__mha_backward(s->mha, in, in, in, s->batch, s->L, s->L,
                               s->masks, grad_out, grad_in, gk, gv);
        if (st == TFM_OK)
            for (int64_t i = 0; i < n; i++)
                grad_in[i] += gk[i] + gv[i];
    }
    tfm__ws_restore(mark);
    return st;
}

static tfm_status backward_cross(const tfm__sublayer *base, const float *in,
                                 const float *grad_out, float *grad_in)
{
    const tfm__cross_attention_sublayer *s =
        (const tfm__cross_attention_sublayer *)base;
    if (!s->grad_memory)
        return tfm__mha_backward(s->mha, in, s->memory, s->memory, s->batch,
                                 s->L, s->S, s->masks, grad_out, grad_in,
                                 NULL, NULL);
    const int64_t n = s->batch * s->S * s->mha->kdim;
    tfm__ws_mark mark = tfm__ws_save();
    float *gk = tfm__ws_floats((size_t)n);
    float *gv = gk ? tfm__ws_floats((size_t)n) : NULL;
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    if (gv) {
        /* key = value = memory: its gradient is the sum of the two. */
        st = tfm__mha_backward(s->mha, in, s->memory, s->memory, s->batch,
                               s->L, s->S, s->masks, grad_out, grad_in, gk,
                               gv);
        if (st == TFM_OK)
            for (int64_t i = 0; i < n; i++)
                s->grad_memory[i] += gk[i] + gv[i];
    }
    tfm__ws_restore(mark);
    return st;
}

static tfm_status backward_ff(const tfm__sublayer *base, const float *in,
                              const float *grad_out, float *grad_in)
{
    const tfm__feed_forward_sublayer *s =
        (const tfm__feed_forward_sublayer *)base;
    return tfm__feed_forward_backward(s->ff, in, s->rows, grad_out, grad_in);
}

tfm__self_attention_sublayer tfm__sublayer_self_attention(
    const tfm__mha *m, int64_t batch, int64_t L, const tfm__masks *masks)
{
    return (tfm__self_attention_sublayer){ { run_self, backward_self }, m, batch, L, masks };
}

tfm__cross_attention_sublayer tfm__sublayer_cross_attention(
    const tfm__mha *m, int64_t batch, int64_t L, const float *memory,
    int64_t S, const tfm__masks *masks)
{
    return (tfm__cross_attention_sublayer){ { run_cross, backward_cross }, m,
                                            batch, L, S, memory, masks,
                                            NULL };
}

tfm__cached_attention_sublayer tfm__sublayer_cached_attention(
    const tfm__mha *m, int64_t n, float *k_cache, float *v_cache,
    int64_t past)
{
    return (tfm__cached_attention_sublayer){ { run_cached, NULL }, m, n, past,
                                             k_cache, v_cache };
}

tfm__feed_forward_sublayer tfm__sublayer_feed_forward(
    const tfm__feed_forward *f, int64_t rows)
{
    return (tfm__feed_forward_sublayer){ { run_ff, backward_ff }, f, rows };
}

/* ---- The residual connection ----------------------------------------- */

tfm_status tfm__residual(const tfm__sublayer *f, const tfm__layer_norm *norm,
                         int norm_first, float *x, float *tmp, int64_t rows)
{
    const int64_t n = rows * norm->d;
    tfm_status st;
    if (norm_first) {
        /* x + f(LN(x)): tmp = LN(x), then f in place on tmp. */
        tfm__layer_norm_run(norm, x, rows, tmp);
        if ((st = f->run(f, tmp, tmp)) != TFM_OK)
            return st;
        for (int64_t i = 0; i < n; i++)
            x[i] += tmp[i];
    } else {
        /* LN(x + f(x)): tmp = f(x), then the sum normalised in place. */
        if ((st = f->run(f, x, tmp)) != TFM_OK)
            return st;
        for (int64_t i = 0; i < n; i++)
            x[i] += tmp[i];
        tfm__layer_norm_run(norm, x, rows, x);
    }
    return TFM_OK;
}

tfm_status tfm__residual_backward(const tfm__sublayer *f,
                                  const tfm__layer_norm *norm, int norm_first,
                                  const float *x, const float *grad_y,
                                  float *grad_x, int64_t rows)
{
    const int64_t d = norm->d, n = rows * d;
    const tfm_module *home = &norm->base;
    float *gw = tfm__grad_of(home, norm->weight);
    float *gb = norm->bias ? tfm__grad_of(home, norm->bias) : NULL;
    tfm__ws_mark mark = tfm__ws_save();
    float *tmp = tfm__ws_floats((size_t)n);
    float *g = tmp ? tfm__ws_floats((size_t)n) : NULL;
    float *gf = g && !norm_first ? tfm__ws_floats((size_t)n) : g;
    double *acc = gf ? tfm__ws_alloc((size_t)(2 * d) * sizeof *acc) : NULL;
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    if (!acc) {
        tfm__ws_restore(mark);
        return tfm__fail(st, "residual backward: out of memory");
    }
    if (norm_first) {
        /* z = LN(x) in tmp; g = f'(z)^T grad_y; tmp = LN'(x)^T g. */
        tfm__layer_norm_run(norm, x, rows, tmp);
        if ((st = f->backward(f, tmp, grad_y, g)) == TFM_OK) {
            tfm__layer_norm_backward(norm, x, rows, g, tmp, gw, gb, acc);
            for (int64_t i = 0; i < n; i++)
                grad_x[i] = grad_y[i] + tmp[i];
        }
    } else {
        /* h = x + f(x) in tmp; g = LN'(h)^T grad_y (the norm's parameter
         * gradients once f's backward has succeeded); gf = f'(x)^T g. */
        if ((st = f->run(f, x, tmp)) == TFM_OK) {
            for (int64_t i = 0; i < n; i++)
                tmp[i] += x[i];
            tfm__layer_norm_backward(norm, tmp, rows, grad_y, g, NULL, NULL,
                                     acc);
            if ((st = f->backward(f, x, g, gf)) == TFM_OK) {
                tfm__layer_norm_backward(norm, tmp, rows, grad_y, NULL, gw,
                                         gb, acc);
                for (int64_t i = 0; i < n; i++)
                    grad_x[i] = g[i] + gf[i];
            }
        }
    }
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__layer_ff_norms_new(tfm_module *parent,
                                   const tfm_layer_config *c, int bias,
                                   tfm__feed_forward **ff,
                                   tfm__layer_norm **const norms[],
                                   int n_norms)
{
    tfm_status st = tfm__feed_forward_new(c->d_model, c->d_ff, c->activation,
                                          bias, ff);
    if (st == TFM_OK)
        st = tfm__module_adopt(parent, "", &(*ff)->base);
    for (int i = 0; st == TFM_OK && i < n_norms; i++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "norm%d.", i + 1);
        st = tfm__layer_norm_new(c->d_model, c->layer_norm_eps, bias,
                                 norms[i]);
        if (st == TFM_OK)
            st = tfm__module_adopt(parent, prefix, &(*norms[i])->base);
    }
    return st;
}
