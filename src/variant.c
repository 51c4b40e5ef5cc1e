/* The attention variant of a module (variant.h; the variants and their
 * papers are in variants.h and docs/VARIANTS.md). */
#include <math.h>
#include <string.h>

#include "attention_config.h"
#include "error.h"
#include "gemm.h"
#include "variant.h"
#include "workspace.h"

tfm_status tfm__variant_init(tfm__variant *v, const tfm_attention_config *pub,
                             int64_t n_heads, int64_t d_k, int64_t d_v)
{
    tfm_attention_config c;
    tfm_status st = tfm__attention_config_read(pub, &c);
    if (st == TFM_OK)
        st = tfm__attention_config_check(&c, n_heads, d_k, d_v);
    if (st != TFM_OK)
        return st;
    memset(v, 0, sizeof *v);
    v->config = c;
    v->n_heads = n_heads;
    v->n_kv_heads = c.n_kv_heads ? c.n_kv_heads : n_heads;
    v->d_k = d_k;
    v->d_v = d_v;
    v->d_a = c.score == TFM_SCORE_ADDITIVE
                 ? (c.additive_dim ? c.additive_dim : d_k) : 0;
    if (c.rope != TFM_ROPE_NONE) {
        v->rope_dims = c.rope_dims ? c.rope_dims : d_k;
        v->rope_base = c.rope_base != 0.0 ? c.rope_base : 10000.0;
    }
    if (c.relative == TFM_RELATIVE_SHAW) {
        v->max_distance = c.max_distance;
    } else if (c.relative == TFM_RELATIVE_T5) {
        v->max_distance = c.max_distance ? c.max_distance : 128;
        v->num_buckets = c.num_buckets ? c.num_buckets : 32;
    }
    return TFM_OK;
}

void tfm__variant_param_specs(tfm__variant *v, tfm__param_spec *specs,
                              int *n)
{
    const int64_t H = v->n_heads, dk = v->d_k, da = v->d_a;
    switch (v->config.score) {
    case TFM_SCORE_GENERAL:
        specs[(*n)++] = (tfm__param_spec){ "score_weight", 3, { H, dk, dk },
                                           &v->score_weight,
                                           .init = TFM__INIT_LINEAR };
        break;
    case TFM_SCORE_ADDITIVE:
        specs[(*n)++] = (tfm__param_spec){ "additive_query", 3, { H, da, dk },
                                           &v->additive_query,
                                           .init = TFM__INIT_LINEAR };
        specs[(*n)++] = (tfm__param_spec){ "additive_key", 3, { H, da, dk },
                                           &v->additive_key,
                                           .init = TFM__INIT_LINEAR };
        specs[(*n)++] = (tfm__param_spec){ "additive_v", 2, { H, da },
                                           &v->additive_v,
                                           .init = TFM__INIT_LINEAR };
        break;
    case TFM_SCORE_LEARNED_TEMPERATURE:
        specs[(*n)++] = (tfm__param_spec){ "temperature", 1, { H },
                                           &v->temperature,
                                           .init = TFM__INIT_CONST,
                                           .init_value =
                                               (float)sqrt((double)dk) };
        break;
    default:
        break;
    }
    if (v->config.relative == TFM_RELATIVE_SHAW) {
        /* max_distance <= INT32_MAX / 2 (attention_config.c); T5's may be
         * anything up to INT64_MAX, so this is computed for Shaw only. */
        const int64_t n_rel = 2 * v->max_distance + 1;
        specs[(*n)++] = (tfm__param_spec){ "relative_key.weight", 2,
                                           { n_rel, dk }, &v->relative_key,
                                           .init = TFM__INIT_NORMAL };
        if (v->config.relative_values)
            specs[(*n)++] = (tfm__param_spec){ "relative_value.weight", 2,
                                               { n_rel, v->d_v },
                                               &v->relative_value,
                                               .init = TFM__INIT_NORMAL };
    } else if (v->config.relative == TFM_RELATIVE_T5) {
        specs[(*n)++] = (tfm__param_spec){ "relative_attention_bias.weight",
                                           2, { v->num_buckets, H },
                                           &v->t5_bias,
                                           .init = TFM__INIT_NORMAL };
    }
}

void tfm__variant_init_params(tfm__variant *v)
{
    /* Learned temperature starts at sqrt(d_k): the default scaling. */
    for (int64_t h = 0; v->temperature && h < v->n_heads; h++)
        v->temperature[h] = (float)sqrt((double)v->d_k);
}

tfm_status tfm__variant_check_params(const tfm__variant *v)
{
    for (int64_t h = 0; v->temperature && h < v->n_heads; h++) {
        const float t = v->temperature[h];
        if (!(isfinite(t) && t > 0.0f && isfinite(1.0f / t)))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "temperature[%lld] = %g: a learned temperature "
                             "must be finite and > 0", (long long)h,
                             (double)t);
    }
    return TFM_OK;
}

int tfm__variant_macs(const tfm__variant *v, int64_t B, int64_t L, int64_t S,
                      int64_t *acc)
{
    const int64_t H = v->n_heads, dk = v->d_k, da = v->d_a;
    switch (v->config.score) {
    case TFM_SCORE_GENERAL:                     /* q W_h */
        return tfm__macs_add(acc, B * H, L, dk, dk);
    case TFM_SCORE_ADDITIVE:                    /* W_q q, W_k k, v . tanh */
        return tfm__macs_add(acc, B * H, L, da, dk) &&
               tfm__macs_add(acc, B * H, S, da, dk) &&
               tfm__macs_add(acc, B * H, L, S, da);
    default:
        return 1;
    }
}

/* ---- the attention call ------------------------------------------------ */

/* Row block (b, h) of a job's tensor x with strides bs, hs. */
#define AT(x, b, bs, h, hs) ((x) + (b) * (bs) + (h) * (hs))

/* dst [H, B, rows, n] (head-major) = for each query head h and batch
 * element b, the rows of x's head h / div (x[b, h/div] [rows, k], strides
 * bstride, hstride, ld) times W_h (w + h * n * k: [k, n], or [n, k] used
 * transposed when trans_w).  When the batch elements' rows are evenly
 * spaced (bstride == rows * ld, as multi-head attention's [B, L, d]
 * activations), a head's B * rows rows are one product. */
static void per_head_product(const float *x, int64_t bstride, int64_t hstride,
                             int64_t ld, int64_t B, int64_t H, int64_t div,
                             int64_t rows, const float *w, int64_t n,
                             int64_t k, int trans_w, float *dst)
{
    const int one = bstride == rows * ld;
    for (int64_t h = 0; h < H; h++) {
        const float *wh = w + h * n * k;
        const int64_t ldw = trans_w ? k : n;
        float *dh = dst + h * B * rows * n;
        if (one) {
            tfm__sgemm(0, trans_w, B * rows, n, k, 1.0f,
                       x + (h / div) * hstride, ld, wh, ldw, 0.0f, dh, n);
            continue;
        }
        for (int64_t b = 0; b < B; b++)
            tfm__sgemm(0, trans_w, rows, n, k, 1.0f,
                       AT(x, b, bstride, h / div, hstride), ld, wh, ldw,
                       0.0f, dh + b * rows * n, n);
    }
}

tfm_status tfm__variant_attend(const tfm__variant *v,
                               const tfm__attention_job *base)
{
    const tfm_attention_config *c = &v->config;
    tfm_status st = tfm__variant_check_params(v);
    if (st != TFM_OK)
        return st;
    tfm__attention_job job = *base;
    const int64_t B = job.B, H = job.H, L = job.L, S = job.S, dk = job.d_k,
                  dv = job.d_v, da = v->d_a;
    const int64_t group = v->n_heads / v->n_kv_heads;
    const int additive = c->score == TFM_SCORE_ADDITIVE;

    /* ---- scratch, all of it before anything is written */
    tfm__ws_mark mark = tfm__ws_save();
    float *slopes = NULL, *head_scale = NULL, *qt = NULL, *kt = NULL,
          *vt = NULL;
    int ok = 1;
    if (c->relative == TFM_RELATIVE_ALIBI)
        ok = (slopes = tfm__ws_floats((size_t)H)) != NULL;
    if (ok && c->score == TFM_SCORE_LEARNED_TEMPERATURE)
        ok = (head_scale = tfm__ws_floats((size_t)H)) != NULL;
    if (ok && c->score == TFM_SCORE_GENERAL)
        ok = (qt = tfm__ws_floats((size_t)(B * H * L * dk))) != NULL;
    if (ok && additive)
        ok = (qt = tfm__ws_floats((size_t)(B * H * L * da))) != NULL &&
             (kt = tfm__ws_floats((size_t)(B * H * S * da))) != NULL &&
             (group == 1 ||
              (vt = tfm__ws_floats((size_t)(B * H * S * dv))) != NULL);
    if (!ok) {
        tfm__ws_restore(mark);
        return TFM_ERR_OUT_OF_MEMORY;
    }

    /* ---- score */
    job.group = group;
    job.scale = c->scale != 0.0f ? c->scale
                : c->score == TFM_SCORE_SCALED_DOT ||
                          c->score == TFM_SCORE_LEARNED_TEMPERATURE
                      ? (float)(1.0 / sqrt((double)dk))
                      : 1.0f;
    if (head_scale) {
        /* q . k / tau_h */
        for (int64_t h = 0; h < H; h++)
            head_scale[h] = 1.0f / v->temperature[h];
        job.head_scale = head_scale;
    }
    if (c->score == TFM_SCORE_GENERAL) {
        /* q^T W_h k = (q W_h) . k:  q'[h, b] [L, d_k] = q[b, h] W_h */
        per_head_product(base->q, base->q_bstride, base->q_hstride,
                         base->ldq, B, H, 1, L, v->score_weight, dk, dk, 0,
                         qt);
        job.q = qt;
        job.q_bstride = L * dk;
        job.q_hstride = B * L * dk;
        job.ldq = dk;
    }
    if (additive) {
        /* v_h . tanh(W_q,h q + W_k,h k):  q' = q W_q,h^T [L, d_a] and
         * k' = k W_k,h^T [S, d_a] per query head h; the kernel does the
         * tanh and the product with additive_v.  k' exists per query
         * head, so under GQA the values are repeated per query head too. */
        per_head_product(base->q, base->q_bstride, base->q_hstride,
                         base->ldq, B, H, 1, L, v->additive_query, da, dk, 1,
                         qt);
        per_head_product(base->k, base->k_bstride, base->k_hstride,
                         base->ldk, B, H, group, S, v->additive_key, da, dk,
                         1, kt);
        for (int64_t b = 0; vt && b < B; b++)
            for (int64_t h = 0; h < H; h++) {
                const float *src = AT(base->v, b, base->v_bstride, h / group,
                                      base->v_hstride);
                float *dst = vt + (b * H + h) * S * dv;
                for (int64_t j = 0; j < S; j++)
                    memcpy(dst + j * dv, src + j * base->ldv,
                           (size_t)dv * sizeof(float));
            }
        job.q = qt;
        job.q_bstride = L * da;
        job.q_hstride = B * L * da;
        job.ldq = da;
        job.k = kt;
        job.k_bstride = S * da;
        job.k_hstride = B * S * da;
        job.ldk = da;
        job.d_k = da;
        job.additive_v = v->additive_v;
        if (vt) {
            job.v = vt;
            job.v_bstride = H * S * dv;
            job.v_hstride = S * dv;
            job.ldv = dv;
        }
        job.group = 1;
    }

    /* ---- relative term and sparse pattern */
    tfm__relative rel = { .kind = c->relative };
    if (c->relative == TFM_RELATIVE_ALIBI) {
        tfm__alibi_slopes(H, slopes);
        rel.alibi_slopes = slopes;
    } else if (c->relative == TFM_RELATIVE_T5) {
        rel.t5_bias = v->t5_bias;
        rel.num_buckets = v->num_buckets;
        rel.max_distance = v->max_distance;
        rel.bidirectional = c->bidirectional != 0;
    } else if (c->relative == TFM_RELATIVE_SHAW) {
        rel.max_distance = v->max_distance;
        rel.shaw_k = v->relative_key;
        rel.shaw_v = v->relative_value;
    }
    job.relative = c->relative != TFM_RELATIVE_NONE ? &rel : NULL;
    const tfm__sparse sparse = {
        .kind = c->sparsity, .window = c->window, .dilation = c->dilation,
        .n_global = c->n_global, .block_size = c->block_size,
        .n_random_blocks = c->n_random_blocks, .seed = c->seed,
    };
    job.sparse = c->sparsity != TFM_SPARSE_NONE ? &sparse : NULL;

    st = tfm__attention_run(&job);
    tfm__ws_restore(mark);
    return st;
}
