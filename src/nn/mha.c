/* Multi-head attention (attention.h; Vaswani et al. 2017, section 3.2.2),
 * with the attention variants of variants.h (variant.c), grouped-query
 * key/value heads and rotary embeddings (rope.c). */
#include <math.h>
#include <string.h>

#include "attention/attention_job.h"
#include "base/error.h"
#include "base/self_sized.h"
#include "kernels/linear.h"
#include "nn/mha.h"
#include "nn/mha_extra_kv.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "kernels/vmath.h"
#include "base/workspace.h"

static tfm_status mha_macs(const tfm_module *m, int64_t batch, int64_t L,
                           int64_t S, int64_t *acc)
{
    return tfm__mha_macs((const tfm__mha *)m, batch, L, S, acc);
}

static void mha_destroy(tfm_module *m)
{
    tfm__mha *a = (tfm__mha *)m;
    tfm_module_free(a->out_proj ? &a->out_proj->base : NULL);
}

static const tfm__module_ops mha_ops = { mha_destroy, mha_macs };

tfm_status tfm__mha_macs(const tfm__mha *m, int64_t batch, int64_t L,
                         int64_t S, int64_t *acc)
{
    const int64_t d = m->d_model, kv = m->kv_dim;
    if (!tfm__macs_add(acc, batch, L, d, d) ||          /* Q projection */
        !tfm__macs_add(acc, batch, S, m->kdim, kv) ||   /* K projection */
        !tfm__macs_add(acc, batch, S, m->vdim, kv) ||   /* V projection */
        !tfm__macs_add(acc, batch, L, S, 2 * d) ||      /* QK^T and AV */
        !tfm__macs_add(acc, batch, L, d, d) ||          /* output */
        !tfm__variant_macs(&m->var, batch, L, S, acc))  /* score extras */
        return tfm__fail(TFM_ERR_OVERFLOW, "MAC count overflows int64");
    return TFM_OK;
}

tfm_status tfm__mha_new(int64_t d_model, int64_t n_heads, int64_t kdim,
                        int64_t vdim, int bias, tfm__mha **out)
{
    return tfm__mha_new_ex(d_model, n_heads, kdim, vdim, bias, NULL, out);
}

/* A variant that gives key rows positions (RoPE, a relative term, a
 * sparse pattern), where PyTorch's extra and static rows have none. */
static int positional(const tfm_attention_config *c)
{
    return c->rope != TFM_ROPE_NONE || c->relative != TFM_RELATIVE_NONE ||
           c->sparsity != TFM_SPARSE_NONE;
}

/* tfm__mha_new_ex with add_bias_kv / add_zero_attn (tfm_mha_options). */
static tfm_status mha_new(int64_t d_model, int64_t n_heads, int64_t kdim,
                          int64_t vdim, int bias,
                          const tfm_attention_config *config, int bias_kv,
                          int zero_attn, tfm__mha **out)
{
    if (kdim == 0)
        kdim = d_model;
    if (vdim == 0)
        vdim = d_model;
    if (d_model < 1 || n_heads < 1 || kdim < 1 || vdim < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "d_model (%lld), n_heads (%lld), kdim (%lld) and "
                         "vdim (%lld) must be at least 1",
                         (long long)d_model, (long long)n_heads,
                         (long long)kdim, (long long)vdim);
    if (d_model % n_heads != 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_heads (%lld) does not divide d_model (%lld)",
                         (long long)n_heads, (long long)d_model);
    if (d_model > INT32_MAX || kdim > INT32_MAX || vdim > INT32_MAX)
        return tfm__fail(TFM_ERR_OVERFLOW, "layer widths must fit in 32 bits");
    const int64_t dk = d_model / n_heads;
    tfm__variant var;
    tfm_status st = tfm__variant_init(&var, config, n_heads, dk, dk);
    if (st != TFM_OK)
        return st;
    if ((bias_kv || zero_attn) && positional(&var.config))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "add_bias_kv and add_zero_attn need a variant "
                         "without positions (RoPE, relative term, sparse "
                         "pattern): their extra key rows have none");
    tfm__mha *m = (tfm__mha *)tfm__module_alloc(sizeof *m, TFM_MODULE_MHA,
                                                &mha_ops);
    if (!m)
        return TFM_ERR_OUT_OF_MEMORY;
    m->d_model = d_model;
    m->n_heads = n_heads;
    m->d_k = dk;
    m->kdim = kdim;
    m->vdim = vdim;
    m->bias = bias != 0;
    m->var = var;
    m->base.variant = &m->var;

    /* Key/value rows: n_kv_heads * d_k (= d_model without GQA). */
    const int64_t d = d_model, kv = var.n_kv_heads * dk;
    m->kv_dim = kv;
    float *in_proj = NULL, *in_bias = NULL;
    tfm__param_spec specs[8 + TFM__VARIANT_MAX_SPECS];
    int n = 0;
    int packed = kdim == d && vdim == d;
    if (packed) {
        specs[n++] = (tfm__param_spec){ "in_proj_weight", 2, { d + 2 * kv, d },
                                        &in_proj,
                                        .init = TFM__INIT_XAVIER_UNIFORM,
                                        .convertible = 1 };
    } else {
        specs[n++] = (tfm__param_spec){ "q_proj_weight", 2, { d, d }, &m->w_q,
                                        .init = TFM__INIT_XAVIER_UNIFORM,
                                        .convertible = 1 };
        specs[n++] = (tfm__param_spec){ "k_proj_weight", 2, { kv, kdim },
                                        &m->w_k,
                                        .init = TFM__INIT_XAVIER_UNIFORM,
                                        .convertible = 1 };
        specs[n++] = (tfm__param_spec){ "v_proj_weight", 2, { kv, vdim },
                                        &m->w_v,
                                        .init = TFM__INIT_XAVIER_UNIFORM,
                                        .convertible = 1 };
    }
    if (m->bias)
        specs[n++] = (tfm__param_spec){ "in_proj_bias", 1, { d + 2 * kv },
                                        &in_bias, .init = TFM__INIT_ZERO };
    if (bias_kv) {
        /* nn.MultiheadAttention: xavier_normal_ on [1, 1, E] */
        specs[n++] = (tfm__param_spec){ "bias_k", 3, { 1, 1, kv }, &m->bias_k,
                                        .init = TFM__INIT_XAVIER_NORMAL };
        specs[n++] = (tfm__param_spec){ "bias_v", 3, { 1, 1, kv }, &m->bias_v,
                                        .init = TFM__INIT_XAVIER_NORMAL };
    }
    m->add_zero_attn = zero_attn != 0;
    specs[n++] = (tfm__param_spec){ "out_proj.weight", 2, { d, d }, &m->w_o,
                                    .init = TFM__INIT_LINEAR,
                                    .convertible = 1 };
    if (m->bias)
        specs[n++] = (tfm__param_spec){ "out_proj.bias", 1, { d }, &m->b_o,
                                        .init = TFM__INIT_ZERO };
    tfm__variant_param_specs(&m->var, specs, &n);
    if ((st = tfm__module_own_params(&m->base, specs, n)) ||
        (st = tfm__linear_view_new(d, d, m->w_o, m->b_o, &m->base,
                                   &m->out_proj)) ||
        (st = tfm__module_add_child(&m->base, "out_proj", &m->out_proj->base))) {
        tfm_module_free(&m->base);
        return st;
    }
    tfm__variant_init_params(&m->var);
    m->packed = packed;
    if (packed) {
        m->w_q = in_proj;
        m->w_k = in_proj + d * d;
        m->w_v = in_proj + d * d + kv * d;
    }
    if (in_bias) {
        m->b_q = in_bias;
        m->b_k = in_bias + d;
        m->b_v = in_bias + d + kv;
    }
    *out = m;
    return TFM_OK;
}

tfm_status tfm__mha_new_ex(int64_t d_model, int64_t n_heads, int64_t kdim,
                           int64_t vdim, int bias,
                           const tfm_attention_config *config,
                           tfm__mha **out)
{
    return mha_new(d_model, n_heads, kdim, vdim, bias, config, 0, 0, out);
}

void tfm_mha_options_init(tfm_mha_options *options)
{
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->bias = 1;
}

/* The smallest struct_size a caller may pass: struct_size itself. */
#define MHA_OPTIONS_MIN_SIZE sizeof(size_t)

tfm_status tfm__mha_new_v2(int64_t d_model, int64_t n_heads,
                           const tfm_mha_options *options, tfm__mha **out)
{
    tfm_mha_options o;
    tfm_mha_options_init(&o);
    tfm_status st = tfm__self_sized_read(&o, sizeof o, options,
                                         MHA_OPTIONS_MIN_SIZE,
                                         "tfm_mha_options_init");
    if (st != TFM_OK)
        return st;
    return mha_new(d_model, n_heads, o.kdim, o.vdim, o.bias, o.attention,
                   o.add_bias_kv != 0, o.add_zero_attn != 0, out);
}

tfm_status tfm_mha_create_v2(int64_t d_model, int64_t n_heads,
                             const tfm_mha_options *options, tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__mha *m = NULL;
    tfm_status st = tfm__mha_new_v2(d_model, n_heads, options, &m);
    if (st == TFM_OK)
        *out = &m->base;
    return st;
}

tfm_status tfm_mha_create(int64_t d_model, int64_t n_heads, int64_t kdim,
                          int64_t vdim, int bias, tfm_module **out)
{
    return tfm_mha_create_ex(d_model, n_heads, kdim, vdim, bias, NULL, out);
}

tfm_status tfm_mha_create_ex(int64_t d_model, int64_t n_heads, int64_t kdim,
                             int64_t vdim, int bias,
                             const tfm_attention_config *config,
                             tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__mha *m = NULL;
    tfm_status st = tfm__mha_new_ex(d_model, n_heads, kdim, vdim, bias,
                                    config, &m);
    if (st == TFM_OK)
        *out = &m->base;
    return st;
}

tfm__dropout tfm__mha_dropout(const tfm__mha *m, uint64_t key)
{
    return tfm__dropout_make(m->base.dropout,
                             tfm__dropout_site(key, TFM__DROP_ATTENTION));
}

/* The attention part, with the variant, on projected q [B, L, d] (row
 * stride ldq) and the keys and values k, v (operands [B, H_kv, S, d_k]),
 * all scratch that RoPE may rotate in place (key rows below k_rotated
 * already are): ctx [B, L, d] receives the heads' outputs side by side.
 * The module's extra rows (add_bias_kv, add_zero_attn) are appended here,
 * so that weights has S + tfm__mha_extra_rows(m) columns.  lse [B, H, L]:
 * the training forward's log-sum-exp per row (NULL: not wanted).  Fails
 * like tfm__attend. */
static tfm_status mha_attend(const tfm__mha *m, float *q, int64_t ldq,
                             tfm__heads k, tfm__heads v, int64_t k_rotated,
                             int64_t rope_origin, int64_t B, int64_t L, int64_t S,
                             const tfm__masks *masks, float *ctx,
                             float *weights, int average, uint64_t key,
                             int values_finite, float *lse)
{
    tfm__masks padded;
    if (tfm__mha_extra_rows(m) > 0) {
        values_finite = 0; /* the extra rows are not the caller's */
        /* (scratch of the caller's workspace mark) */
        tfm_status st = tfm__mha_extra_kv(m, &k, &v, B, L, S, masks, &k, &v,
                                          &padded);
        if (st != TFM_OK)
            return st;
        masks = &padded;
        S += tfm__mha_extra_rows(m);
    }
    /* Heads side by side in each row: head h is columns h d_k .. */
    const int64_t d = m->d_model, dk = m->d_k;
    const tfm__attention_args args = {
        .q = { q, L * ldq, dk, ldq },
        .k = k,
        .v = v,
        .out = { ctx, L * d, dk, d },
        .B = B, .L = L, .S = S, .masks = masks,
        .weights = weights, .average = average, .lse = lse,
        /* A training forward (lse wanted) keeps q and k unrotated for its
         * backward: RoPE then rotates copies. */
        .rope_in_place = lse == NULL, .k_rotated = k_rotated,
        .rope_origin = rope_origin,
        .dropout = tfm__mha_dropout(m, key),
        .values_finite = values_finite,
    };
    return tfm__attend(&m->var, &args);
}

/* The keys or values of rows [B, S, ld] (head h: columns h d_k ..). */
static tfm__heads rows_heads(const tfm__mha *m, float *x, int64_t S,
                             int64_t ld)
{
    return (tfm__heads){ x, S * ld, m->d_k, ld };
}

/* A caller's static keys or values [B, H_kv, S, d_k] (only read: static
 * rows are refused with RoPE, the one variant that writes keys). */
static tfm__heads static_heads(const tfm__mha *m, const float *x, int64_t S)
{
    const int64_t dk = m->d_k, hkv = m->kv_dim / dk;
    return (tfm__heads){ (float *)x, hkv * S * dk, S * dk, dk };
}

tfm_status tfm__mha_run(const tfm__mha *m, const float *query,
                        const float *key, const float *value, int64_t B,
                        int64_t L, int64_t S, const tfm__masks *masks,
                        float *out, float *weights, int average,
                        uint64_t drop_key)
{
    return tfm__mha_run_static(m, query, key, value, NULL, NULL, B, L, S,
                               masks, out, weights, average, drop_key);
}

/* Where one call's q, k and v lie: self-attention with packed weights
 * (the same rows for query, key and value, fuse_inputs) is one product
 * x [W_q; W_k; W_v]^T, q, k and v side by side in rows of d + 2 kv_dim;
 * keys and values from one memory with packed weights (cross-attention)
 * one product memory [W_k; W_v]^T, k and v side by side in rows of 2 kv;
 * otherwise one product each (none for a caller's static keys or
 * values). */
typedef struct mha_layout {
    int fused, kv_joint, proj_k, proj_v;
    int64_t ld, ldkv;   /* row strides of q and of k, v */
} mha_layout;

static mha_layout layout_of(const tfm__mha *m, const float *query,
                            const float *key, const float *value,
                            const float *static_k, const float *static_v,
                            int64_t L, int64_t S, int fuse_inputs)
{
    const int64_t d = m->d_model, kv = m->kv_dim;
    mha_layout o = { .proj_k = !static_k, .proj_v = !static_v };
    const int proj = o.proj_k && o.proj_v && m->packed;
    o.fused = proj && fuse_inputs && query == key && key == value && L == S;
    o.kv_joint = proj && !o.fused && key == value;
    o.ld = o.fused ? d + 2 * kv : d;
    o.ldkv = o.fused ? d + 2 * kv : o.kv_joint ? 2 * kv : kv;
    return o;
}

/* q = query W_q^T + b_q, k and v likewise, into q, k, v as o lays them
 * out (k, v unused where static). */
static void project(const tfm__mha *m, const mha_layout *o,
                    const float *query, const float *key, const float *value,
                    int64_t B, int64_t L, int64_t S, float *q, float *k,
                    float *v)
{
    const int64_t d = m->d_model, kv = m->kv_dim;
    if (o->fused) {
        tfm__linear_parallel(query, d, B * L, d, m->w_q, m->b_q, o->ld, q,
                             o->ld);
        return;
    }
    tfm__linear_parallel(query, d, B * L, d, m->w_q, m->b_q, d, q, d);
    if (o->kv_joint) {
        tfm__linear_parallel(key, d, B * S, d, m->w_k, m->b_k, 2 * kv, k,
                             2 * kv);
        return;
    }
    if (o->proj_k)
        tfm__linear_parallel(key, m->kdim, B * S, m->kdim, m->w_k, m->b_k, kv,
                             k, kv);
    if (o->proj_v)
        tfm__linear_parallel(value, m->vdim, B * S, m->vdim, m->w_v, m->b_v,
                             kv, v, kv);
}

/* Workspace for q [B, L, ld] and k, v [B, S, kv_dim] as o lays them out
 * (fused: k and v point into q's rows; keys and values joint: v into k's;
 * static: NULL).  0 on out-of-memory. */
static int take_qkv(const tfm__mha *m, const mha_layout *o, int64_t B,
                    int64_t L, int64_t S, float **q, float **k, float **v)
{
    const int64_t d = m->d_model, kv = m->kv_dim;
    const size_t nkv = (size_t)(B * S * kv);
    *k = *v = NULL;
    if (!(*q = tfm__ws_floats((size_t)(B * L * o->ld))))
        return 0;
    if (o->fused) {
        *k = *q + d;
        *v = *q + d + kv;
        return 1;
    }
    if (o->kv_joint) {
        *k = tfm__ws_floats(2 * nkv);
        *v = *k ? *k + kv : NULL;
        return *k != NULL;
    }
    return (!o->proj_k || (*k = tfm__ws_floats(nkv))) &&
           (!o->proj_v || (*v = tfm__ws_floats(nkv)));
}

/* The call's buffers in the workspace: q, k, v and ctx [B, L, d]; with
 * backward != 0 also the training forward's lse [B, H, L] and the
 * backward's dctx, dq, dk, dv (laid out as q, k, v) and acc.  0 on
 * out-of-memory. */
static int take_buffers(const tfm__mha *m, const mha_layout *o, int64_t B,
                        int64_t L, int64_t S, int backward, tfm__mha_kept *c)
{
    const int64_t d = m->d_model, kv = m->kv_dim, H = m->n_heads;
    if (!take_qkv(m, o, B, L, S, &c->q, &c->k, &c->v) ||
        !(c->ctx = tfm__ws_floats((size_t)(B * L * d))))
        return 0;
    if (!backward)
        return 1;
    const int64_t widest = o->fused ? o->ld : d > kv ? d : kv;
    return (c->lse = tfm__ws_floats((size_t)(B * H * L))) &&
           (c->dctx = tfm__ws_floats((size_t)(B * L * d))) &&
           take_qkv(m, o, B, L, S, &c->dq, &c->dk, &c->dv) &&
           (c->acc = tfm__ws_alloc((size_t)widest * sizeof *c->acc));
}

/* The one forward of multi-head attention: projections, attention through
 * the door, output projection (out NULL: not wanted).  kept NULL: scratch
 * released on return; else the training forward, refusing what has no
 * backward, with the attention's log-sum-exp and the backward's scratch
 * taken in the caller's workspace and described in *kept. */
static tfm_status mha_one_forward(const tfm__mha *m, const float *query,
                              const float *key, const float *value,
                              const float *static_k, const float *static_v,
                              int64_t B, int64_t L, int64_t S,
                              const tfm__masks *masks, int fuse_inputs,
                              float *out, float *weights, int average,
                              uint64_t drop_key, tfm__mha_kept *kept)
{
    if (kept && tfm__mha_extra_rows(m) > 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_mha_backward: add_bias_kv and add_zero_attn "
                         "have no backward yet");
    const int64_t d = m->d_model;
    const mha_layout o = layout_of(m, query, key, value, static_k, static_v,
                                   L, S, fuse_inputs);
    tfm__mha_kept c = { .query = query, .key = key, .value = value,
                        .B = B, .L = L, .S = S, .masks = masks,
                        .fused = o.fused, .ld = o.ld, .ldkv = o.ldkv,
                        .drop = tfm__mha_dropout(m, drop_key) };
    tfm__ws_mark mark = tfm__ws_save();
    if (!take_buffers(m, &o, B, L, S, kept != NULL, &c)) {
        tfm__ws_restore(mark);
        return kept ? tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                                "tfm_mha_backward: out of memory")
                    : TFM_ERR_OUT_OF_MEMORY;
    }
    project(m, &o, query, key, value, B, L, S, c.q, c.k, c.v);
    const tfm__heads kh = o.proj_k ? rows_heads(m, c.k, S, o.ldkv)
                                   : static_heads(m, static_k, S);
    const tfm__heads vh = o.proj_v ? rows_heads(m, c.v, S, o.ldkv)
                                   : static_heads(m, static_v, S);
    tfm_status st = mha_attend(m, c.q, o.ld, kh, vh, 0, 0, B, L, S, masks,
                               c.ctx, weights, average, drop_key, 0, c.lse);
    if (st == TFM_OK && out)
        tfm__linear_parallel(c.ctx, d, B * L, d, m->w_o, m->b_o, d, out, d);
    if (st == TFM_OK && kept)
        *kept = c;  /* its scratch stays in the caller's workspace */
    else
        tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__mha_run_static(const tfm__mha *m, const float *query,
                               const float *key, const float *value,
                               const float *static_k, const float *static_v,
                               int64_t B, int64_t L, int64_t S,
                               const tfm__masks *masks, float *out,
                               float *weights, int average, uint64_t drop_key)
{
    return mha_one_forward(m, query, key, value, static_k, static_v, B, L, S,
                       masks, 1, out, weights, average, drop_key, NULL);
}

tfm_status tfm__mha_forward_keep(const tfm__mha *m, const float *query,
                                 const float *key, const float *value,
                                 int64_t B, int64_t L, int64_t S,
                                 const tfm__masks *masks, int fuse_inputs,
                                 uint64_t drop_key, float *out,
                                 tfm__mha_kept *kept)
{
    return mha_one_forward(m, query, key, value, NULL, NULL, B, L, S, masks,
                       fuse_inputs, out, NULL, 0, drop_key, kept);
}

tfm_status tfm__mha_run_cached_seqs(const tfm__mha *m, const float *x,
                                    int64_t n_seqs,
                                    const tfm__cached_seq *seqs,
                                    int64_t layer, float *out)
{
    const int64_t d = m->d_model, kv = m->kv_dim;
    const int64_t w = d + 2 * kv;   /* one row of q, k and v */
    int64_t rows = 0;
    for (int64_t s = 0; s < n_seqs; s++)
        rows += seqs[s].n;
    tfm__ws_mark mark = tfm__ws_save();
    float *qkv = tfm__ws_floats((size_t)(rows * w)); /* [rows, d + 2 kv] */
    float *ctx = qkv ? tfm__ws_floats((size_t)(rows * d)) : NULL; /* [rows, d] */
    if (!ctx) {
        tfm__ws_restore(mark);
        return TFM_ERR_OUT_OF_MEMORY;
    }
    /* One product for q, k and v of all new rows (the cached model's
     * attention is always packed self-attention); each sequence's keys and
     * values go to its cache rows past .. past+n-1 (the caller advances
     * the length only on success), where the door rotates the keys under
     * RoPE for positions past .. past+n-1 (rows below past already are). */
    tfm__linear_parallel(x, d, rows, d, m->w_q, m->b_q, w, qkv, w);
    const tfm__masks causal = { .causal = TFM_CAUSAL_BOTTOM_RIGHT };
    tfm_status st = TFM_OK;
    int64_t row = 0;
    for (int64_t s = 0; s < n_seqs && st == TFM_OK; s++) {
        const tfm__cached_seq *q = &seqs[s];
        float *k_cache = q->keys + layer * q->layer_stride;
        float *v_cache = q->values + layer * q->layer_stride;
        float *mine = qkv + row * w;
        for (int64_t i = 0; i < q->n; i++) {
            memcpy(k_cache + (q->past + i) * kv, mine + i * w + d,
                   (size_t)kv * sizeof(float));
            memcpy(v_cache + (q->past + i) * kv, mine + i * w + d + kv,
                   (size_t)kv * sizeof(float));
        }
        int finite = 0;
        if (q->v_nonfinite) {
            for (int64_t i = 0; i < q->n; i++)
                q->v_nonfinite[layer] +=
                    tfm__has_nonfinite(v_cache + (q->past + i) * kv, kv);
            finite = q->v_nonfinite[layer] == 0;
        }
        const int64_t S = q->past + q->n;
        st = mha_attend(m, mine, w, rows_heads(m, k_cache, S, kv),
                        rows_heads(m, v_cache, S, kv), q->past, q->origin, 1,
                        q->n, S, &causal, ctx + row * d, NULL, 0, 0, finite, NULL);
        row += q->n;
    }
    if (st == TFM_OK)
        tfm__linear_parallel(ctx, d, rows, d, m->w_o, m->b_o, d, out, d);
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__mha_run_cached(const tfm__mha *m, const float *x, int64_t n,
                               float *k_cache, float *v_cache, int64_t past,
                               int64_t origin, float *out)
{
    const tfm__cached_seq one = { n, past, origin, k_cache, v_cache, 0,
                                  NULL };
    return tfm__mha_run_cached_seqs(m, x, 1, &one, 0, out);
}

void tfm__mha_memory_kv(const tfm__mha *m, const float *memory, int64_t S,
                        float *kv)
{
    /* packed: W_v follows W_k (and b_v b_k) in in_proj_weight */
    tfm__linear_parallel(memory, m->d_model, S, m->d_model, m->w_k, m->b_k,
                         2 * m->kv_dim, kv, 2 * m->kv_dim);
}

tfm_status tfm__mha_run_memory_kv(const tfm__mha *m, const float *x,
                                  int64_t rows, const float *kv, int64_t S,
                                  float *out)
{
    const int64_t d = m->d_model, w = 2 * m->kv_dim;
    tfm__ws_mark mark = tfm__ws_save();
    float *q = tfm__ws_floats((size_t)(rows * d));   /* [rows, d] */
    float *ctx = q ? tfm__ws_floats((size_t)(rows * d)) : NULL;
    if (!ctx) {
        tfm__ws_restore(mark);
        return TFM_ERR_OUT_OF_MEMORY;
    }
    tfm__linear_parallel(x, d, rows, d, m->w_q, m->b_q, d, q, d);
    /* The rows as one batch element's queries: one product per head for
     * all of them (no positions, so their order is free). */
    const tfm__masks none = { 0 };
    float *k = (float *)kv;
    tfm_status st = mha_attend(m, q, d, rows_heads(m, k, S, w),
                               rows_heads(m, k + m->kv_dim, S, w), S, 0, 1,
                               rows, S, &none, ctx, NULL, 0, 0, 0, NULL);
    if (st == TFM_OK)
        tfm__linear_parallel(ctx, d, rows, d, m->w_o, m->b_o, d, out, d);
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__mha_check_inputs(const char *what, const tfm_module *mha,
                                 const tfm_tensor *query,
                                 const tfm_tensor *key,
                                 const tfm_tensor *value,
                                 const tfm_tensor *static_k,
                                 const tfm_tensor *static_v,
                                 const tfm_attention_masks *masks,
                                 int64_t *B_out, int64_t *L_out,
                                 int64_t *S_out, tfm__masks *mk)
{
    tfm_status st = tfm__module_check(mha, TFM_MODULE_MHA, "mha");
    if (st != TFM_OK)
        return st;
    const tfm__mha *m = (const tfm__mha *)mha;
    if (!query || (!key && !static_k) || (!value && !static_v))
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: %s is NULL", what,
                         !query ? "query" : !key && !static_k ? "key"
                         : "value");
    if (query->rank != 3)
        return tfm__fail(TFM_ERR_SHAPE,
                         "query has rank %d, expected 3 [B, L, d_model]",
                         query->rank);
    const int64_t B = query->shape[0], L = query->shape[1];
    if (query->shape[2] != m->d_model)
        return tfm__fail(TFM_ERR_SHAPE, "query has %lld columns, expected %lld",
                         (long long)query->shape[2], (long long)m->d_model);
    if ((static_k || static_v) &&
        (m->bias_k || positional(&m->var.config)))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: static_k / static_v cannot be used with "
                         "add_bias_kv (as PyTorch) or with a variant with "
                         "positions (RoPE, relative term, sparse pattern)",
                         what);
    /* S: the keys' rows (the static ones' when given) */
    const tfm_tensor *first = static_k ? static_k : static_v ? static_v : key;
    const int64_t hkv = m->kv_dim / m->d_k;
    /* (a wrong rank is reported by the shape checks below) */
    const int64_t S = first == key ? (key->rank == 3 ? key->shape[1] : 0)
                                   : (first->rank == 4 ? first->shape[2] : 0);
    if (static_k) {
        const int64_t shape[4] = { B, hkv, S, m->d_k };
        if ((st = tfm__check_shape(static_k, "static_k", 4, shape)) != TFM_OK)
            return st;
    } else {
        if (key->rank != 3)
            return tfm__fail(TFM_ERR_SHAPE,
                             "key has rank %d, expected 3 [B, S, kdim]",
                             key->rank);
        if (key->shape[0] != B)
            return tfm__fail(TFM_ERR_SHAPE, "key has batch %lld, expected %lld",
                             (long long)key->shape[0], (long long)B);
        if (key->shape[1] != S)
            return tfm__fail(TFM_ERR_SHAPE, "key has %lld rows, expected %lld",
                             (long long)key->shape[1], (long long)S);
        if (key->shape[2] != m->kdim)
            return tfm__fail(TFM_ERR_SHAPE,
                             "key has %lld columns, expected %lld",
                             (long long)key->shape[2], (long long)m->kdim);
    }
    if (static_v) {
        const int64_t shape[4] = { B, hkv, S, m->d_k };
        if ((st = tfm__check_shape(static_v, "static_v", 4, shape)) != TFM_OK)
            return st;
    } else {
        const int64_t v_shape[3] = { B, S, m->vdim };
        if ((st = tfm__check_shape(value, "value", 3, v_shape)) != TFM_OK)
            return st;
    }
    if ((st = tfm__masks_resolve(masks, B, m->n_heads, L, S, what, mk)))
        return st;
    *B_out = B, *L_out = L, *S_out = S;
    return TFM_OK;
}

/* The checks and the run of tfm_mha_forward (static_k, static_v NULL) and
 * tfm_mha_forward_v2; `what` names the function in messages. */
static tfm_status mha_forward(const char *what, const tfm_module *mha,
                              const tfm_tensor *query, const tfm_tensor *key,
                              const tfm_tensor *value,
                              const tfm_tensor *static_k,
                              const tfm_tensor *static_v,
                              const tfm_attention_masks *masks,
                              tfm_tensor *out, tfm_tensor *weights)
{
    TFM__PLAN_PIN();
    int64_t B = 0, L = 0, S = 0;
    tfm__masks mk;
    tfm_status st = tfm__mha_check_inputs(what, mha, query, key, value,
                                          static_k, static_v, masks, &B, &L,
                                          &S, &mk);
    if (st != TFM_OK)
        return st;
    const tfm__mha *m = (const tfm__mha *)mha;
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: out is NULL", what);
    const int64_t o_shape[3] = { B, L, m->d_model };
    if ((st = tfm__check_shape(out, "out", 3, o_shape)) != TFM_OK)
        return st;
    int average = 0;
    if (weights) {
        /* the keys attended: S, then the extra rows */
        const int64_t S2 = S + tfm__mha_extra_rows(m);
        const int64_t w4[4] = { B, m->n_heads, L, S2 };
        const int64_t w3[3] = { B, L, S2 };
        if (weights->rank == 3) {
            average = 1;
            st = tfm__check_shape(weights, "weights", 3, w3);
        } else if (weights->rank == 4) {
            st = tfm__check_shape(weights, "weights", 4, w4);
        } else {
            st = tfm__fail(TFM_ERR_SHAPE,
                           "weights has rank %d, expected 4 [B, H, L, S] or "
                           "3 [B, L, S]", weights->rank);
        }
        if (st != TFM_OK)
            return st;
    }
    return tfm__mha_run_static(
        m, query->data, static_k ? NULL : key->data,
        static_v ? NULL : value->data, static_k ? static_k->data : NULL,
        static_v ? static_v->data : NULL, B, L, S, &mk, out->data,
        weights ? weights->data : NULL, average,
        tfm__dropout_forward_key((tfm_module *)mha));
}

tfm_status tfm_mha_forward(const tfm_module *mha, const tfm_tensor *query,
                           const tfm_tensor *key, const tfm_tensor *value,
                           const tfm_attention_masks *masks, tfm_tensor *out,
                           tfm_tensor *weights)
{
    return mha_forward("tfm_mha_forward", mha, query, key, value, NULL, NULL,
                       masks, out, weights);
}

tfm_status tfm_mha_forward_v2(const tfm_module *mha, const tfm_tensor *query,
                              const tfm_tensor *key, const tfm_tensor *value,
                              const tfm_tensor *static_k,
                              const tfm_tensor *static_v,
                              const tfm_attention_masks *masks,
                              tfm_tensor *out, tfm_tensor *weights)
{
    return mha_forward("tfm_mha_forward_v2", mha, query, key, value,
                       static_k, static_v, masks, out, weights);
}
