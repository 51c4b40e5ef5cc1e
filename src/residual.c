/* Residual connections around sub-layers (residual.h). */
#include "residual.h"

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
