/* The sub-layers a residual block wraps (residual.h: tfm__sublayer): self-
 * and cross-attention, cached self-attention, cross-attention over
 * projected memory, the feed-forward network; each kind's run, keep (the
 * training forward) and backward read its own struct around the base. */
#include "base/error.h"
#include "base/workspace.h"
#include "blocks/residual.h"

static tfm_status run_self(const tfm__sublayer *base, const float *in,
                           float *out)
{
    const tfm__self_attention_sublayer *s =
        (const tfm__self_attention_sublayer *)base;
    return tfm__mha_run(s->mha, in, in, in, s->batch, s->L, s->L, s->masks,
                        out, NULL, 0, s->drop_key);
}

static tfm_status run_cross(const tfm__sublayer *base, const float *in,
                            float *out)
{
    const tfm__cross_attention_sublayer *s =
        (const tfm__cross_attention_sublayer *)base;
    return tfm__mha_run(s->mha, in, s->memory, s->memory, s->batch, s->L, s->S,
                        s->masks, out, NULL, 0, s->drop_key);
}

static tfm_status run_cached(const tfm__sublayer *base, const float *in,
                             float *out)
{
    const tfm__cached_attention_sublayer *s =
        (const tfm__cached_attention_sublayer *)base;
    return tfm__mha_run_cached_seqs(s->mha, in, s->n_seqs, s->seqs, s->layer,
                                    out);
}

static tfm_status run_memory_kv(const tfm__sublayer *base, const float *in,
                                float *out)
{
    const tfm__memory_kv_sublayer *s = (const tfm__memory_kv_sublayer *)base;
    return tfm__mha_run_memory_kv(s->mha, in, s->rows, s->kv, s->S, out);
}

static tfm_status run_ff(const tfm__sublayer *base, const float *in,
                         float *out)
{
    const tfm__feed_forward_sublayer *s =
        (const tfm__feed_forward_sublayer *)base;
    return tfm__feed_forward_run(s->ff, in, s->rows, &s->drop, out);
}

static tfm_status keep_self(const tfm__sublayer *base, const float *in,
                            float *out, tfm__sublayer_kept *kept)
{
    const tfm__self_attention_sublayer *s =
        (const tfm__self_attention_sublayer *)base;
    const int64_t n = s->batch * s->L * s->mha->d_model;
    tfm_status st = tfm__mha_forward_keep(s->mha, in, in, in, s->batch, s->L,
                                          s->L, s->masks, 1, s->drop_key, out,
                                          &kept->mha);
    kept->gk = kept->gv = NULL;
    if (st == TFM_OK && !kept->mha.fused &&
        (!(kept->gk = tfm__ws_floats((size_t)n)) ||
         !(kept->gv = tfm__ws_floats((size_t)n))))
        st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "self-attention backward: "
                       "out of memory");
    return st;
}

static tfm_status backward_self(const tfm__sublayer *base,
                                const tfm__sublayer_kept *kept,
                                const float *grad_out, float *grad_in)
{
    const tfm__self_attention_sublayer *s =
        (const tfm__self_attention_sublayer *)base;
    /* query = key = value = in: its gradient is the sum of the three (one
     * product when the projections were fused). */
    tfm_status st = tfm__mha_backward_kept(s->mha, &kept->mha, grad_out,
                                           grad_in, kept->gk, kept->gv);
    if (st == TFM_OK && kept->gk) {
        const int64_t n = s->batch * s->L * s->mha->d_model;
        for (int64_t i = 0; i < n; i++)
            grad_in[i] += kept->gk[i] + kept->gv[i];
    }
    return st;
}

static tfm_status keep_cross(const tfm__sublayer *base, const float *in,
                             float *out, tfm__sublayer_kept *kept)
{
    const tfm__cross_attention_sublayer *s =
        (const tfm__cross_attention_sublayer *)base;
    const int64_t n = s->batch * s->S * s->mha->kdim;
    tfm_status st = tfm__mha_forward_keep(s->mha, in, s->memory, s->memory,
                                          s->batch, s->L, s->S, s->masks, 0,
                                          s->drop_key, out, &kept->mha);
    kept->gk = kept->gv = NULL;
    if (st == TFM_OK && s->grad_memory &&
        (!(kept->gk = tfm__ws_floats((size_t)n)) ||
         !(kept->gv = tfm__ws_floats((size_t)n))))
        st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cross-attention backward: "
                       "out of memory");
    return st;
}

static tfm_status backward_cross(const tfm__sublayer *base,
                                 const tfm__sublayer_kept *kept,
                                 const float *grad_out, float *grad_in)
{
    const tfm__cross_attention_sublayer *s =
        (const tfm__cross_attention_sublayer *)base;
    tfm_status st = tfm__mha_backward_kept(s->mha, &kept->mha, grad_out,
                                           grad_in, kept->gk, kept->gv);
    if (st == TFM_OK && kept->gk) {
        /* key = value = memory: its gradient is the sum of the two. */
        const int64_t n = s->batch * s->S * s->mha->kdim;
        for (int64_t i = 0; i < n; i++)
            s->grad_memory[i] += kept->gk[i] + kept->gv[i];
    }
    return st;
}

static tfm_status keep_ff(const tfm__sublayer *base, const float *in,
                          float *out, tfm__sublayer_kept *kept)
{
    const tfm__feed_forward_sublayer *s =
        (const tfm__feed_forward_sublayer *)base;
    return tfm__feed_forward_forward_keep(s->ff, in, s->rows, &s->drop, out,
                                          &kept->ff);
}

static tfm_status backward_ff(const tfm__sublayer *base,
                              const tfm__sublayer_kept *kept,
                              const float *grad_out, float *grad_in)
{
    const tfm__feed_forward_sublayer *s =
        (const tfm__feed_forward_sublayer *)base;
    tfm__feed_forward_backward_kept(s->ff, &kept->ff, grad_out, grad_in);
    return TFM_OK;
}

tfm__self_attention_sublayer tfm__sublayer_self_attention(
    const tfm__mha *m, int64_t batch, int64_t L, const tfm__masks *masks,
    uint64_t drop_key)
{
    return (tfm__self_attention_sublayer){ { run_self, keep_self,
                                             backward_self },
                                           m, batch, L, masks, drop_key };
}

tfm__cross_attention_sublayer tfm__sublayer_cross_attention(
    const tfm__mha *m, int64_t batch, int64_t L, const float *memory,
    int64_t S, const tfm__masks *masks, uint64_t drop_key)
{
    return (tfm__cross_attention_sublayer){ { run_cross, keep_cross,
                                              backward_cross },
                                            m, batch, L, S, memory, masks,
                                            NULL, drop_key };
}

tfm__cached_attention_sublayer tfm__sublayer_cached_attention(
    const tfm__mha *m, int64_t n_seqs, const tfm__cached_seq *seqs,
    int64_t layer)
{
    return (tfm__cached_attention_sublayer){ { run_cached, NULL, NULL }, m,
                                             n_seqs, layer, seqs };
}

tfm__memory_kv_sublayer tfm__sublayer_memory_kv(const tfm__mha *m,
                                                int64_t rows,
                                                const float *kv, int64_t S)
{
    return (tfm__memory_kv_sublayer){ { run_memory_kv, NULL, NULL }, m, rows,
                                      S, kv };
}

tfm__feed_forward_sublayer tfm__sublayer_feed_forward(
    const tfm__feed_forward *f, int64_t rows, tfm__dropout drop)
{
    return (tfm__feed_forward_sublayer){ { run_ff, keep_ff, backward_ff }, f,
                                         rows, drop };
}

