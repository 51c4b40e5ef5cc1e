/* The one door into the attention kernel (attention_job.h): from a call's
 * operands and its variant to a tfm__attention_job.
 *
 * Steps of tfm__attend, in order (nothing the caller sees is written
 * before the last allocation):
 *   1. the variant's learned parameters are checked;
 *   2. q_pos0, the position of query row 0, is computed;
 *   3. scratch: RoPE copies, ALiBi slopes, per-head scales, the score's
 *      transformed q (and k, v);
 *   4. RoPE rotates q and k (Su et al. 2021);
 *   5. the score's pre-transforms (Luong's general score, Bahdanau's
 *      additive projections) run as one GEMM per head;
 *   6. the relative term and the sparse pattern are resolved;
 *   7. the job goes to tfm__attention_run (attention_kernel.c). */
#include <math.h>
#include <string.h>

#include "attention/attention_job.h"
#include "base/error.h"
#include "base/gemm.h"
#include "kernels/rope.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

/* ==== Operand helpers =================================================== */

/* Row block (b, h) of operand x. */
static const float *head_at(const tfm__heads *x, int64_t b, int64_t h)
{
    return x->data + b * x->bstride + h * x->hstride;
}

/* dst [B, heads, rows, cols] (contiguous) = x; returns dst's view. */
static tfm__heads copy_heads(const tfm__heads *x, int64_t B, int64_t heads,
                             int64_t rows, int64_t cols, float *dst)
{
    const tfm__heads out = { dst, heads * rows * cols, rows * cols, cols };
    if (x->ld == cols && x->hstride == out.hstride &&
        x->bstride == out.bstride) {
        memcpy(dst, x->data, (size_t)(B * out.bstride) * sizeof(float));
        return out;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t r = 0; r < rows; r++)
                memcpy(dst + b * out.bstride + h * out.hstride + r * cols,
                       head_at(x, b, h) + r * x->ld,
                       (size_t)cols * sizeof(float));
    return out;
}

/* RoPE (rope.h) on rows r0 .. rows-1 of every head of x [B, heads, rows,
 * d_k], in place: row r at position pos0 + r (inverse: the transposed
 * rotation, for gradients).  When the batch elements follow each other as
 * further heads (bstride = heads * hstride), the B * heads heads are one
 * call. */
static void rotate(const tfm__variant *v, const tfm__heads *x, int64_t B,
                   int64_t heads, int64_t r0, int64_t rows, int64_t pos0,
                   int inverse)
{
    const tfm_rope layout = v->config.rope;
    if (layout == TFM_ROPE_NONE || r0 >= rows)
        return;
    if (x->bstride == heads * x->hstride) {
        tfm__rope_apply(x->data + r0 * x->ld, rows - r0, x->ld, B * heads,
                        x->hstride, pos0 + r0, layout, v->rope_dims,
                        v->rope_base, inverse);
        return;
    }
    for (int64_t b = 0; b < B; b++)
        tfm__rope_apply(x->data + b * x->bstride + r0 * x->ld, rows - r0,
                        x->ld, heads, x->hstride, pos0 + r0, layout,
                        v->rope_dims, v->rope_base, inverse);
}

/* dst [H, B, rows, n] (head-major) = for each query head h and batch
 * element b, the rows of x's head h / div (x[b, h/div] [rows, k]) times
 * W_h (w + h * n * k: [k, n], or [n, k] used transposed when trans_w).
 * When the batch elements' rows are evenly spaced (bstride == rows * ld,
 * as multi-head attention's [B, L, d] activations), a head's B * rows rows
 * are one product. */
static void per_head_product(const tfm__heads *x, int64_t B, int64_t H,
                             int64_t div, int64_t rows, const float *w,
                             int64_t n, int64_t k, int trans_w, float *dst)
{
    const int one = x->bstride == rows * x->ld;
    for (int64_t h = 0; h < H; h++) {
        const float *wh = w + h * n * k;
        const int64_t ldw = trans_w ? k : n;
        float *dh = dst + h * B * rows * n;
        if (one) {
            tfm__sgemm(0, trans_w, B * rows, n, k, 1.0f, head_at(x, 0, h / div),
                       x->ld, wh, ldw, 0.0f, dh, n);
            continue;
        }
        for (int64_t b = 0; b < B; b++)
            tfm__sgemm(0, trans_w, rows, n, k, 1.0f, head_at(x, b, h / div),
                       x->ld, wh, ldw, 0.0f, dh + b * rows * n, n);
    }
}

/* The backward of per_head_product, given dy [H, B, rows, n] (its
 * head-major layout), the gradient of dst: dx[b, h / div] = dy[h, b]
 * W_h^T (W_h as per_head_product uses it; the div query heads of one x
 * head summed in order; dx->data NULL: not wanted) and dw_h += x[b, h /
 * div]^T dy[h, b] (or its transpose [n, k] when trans_w; dw NULL: not
 * wanted).  Batch rows evenly spaced: one product per head. */
static void per_head_product_backward(const tfm__heads *x,
                                      const tfm__heads *dx, int64_t B,
                                      int64_t H, int64_t div, int64_t rows,
                                      const float *w, int64_t n, int64_t k,
                                      int trans_w, const float *dy, float *dw)
{
    const int one = x->bstride == rows * x->ld &&
                    (!dx->data || dx->bstride == rows * dx->ld);
    const int64_t nb = one ? 1 : B, m = one ? B * rows : rows;
    for (int64_t h = 0; h < H; h++) {
        const float *wh = w + h * n * k;
        const float beta = h % div ? 1.0f : 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const float *dyh = dy + (h * B + b) * rows * n;
            const float *xh = head_at(x, b, h / div);
            if (dx->data)
                tfm__sgemm(0, !trans_w, m, k, n, 1.0f, dyh, n, wh,
                           trans_w ? k : n, beta,
                           dx->data + b * dx->bstride + h / div * dx->hstride,
                           dx->ld);
            if (dw && trans_w)
                tfm__sgemm(1, 0, n, k, m, 1.0f, dyh, n, xh, x->ld, 1.0f,
                           dw + h * n * k, k);
            else if (dw)
                tfm__sgemm(1, 0, k, n, m, 1.0f, xh, x->ld, dyh, n, 1.0f,
                           dw + h * n * k, n);
        }
    }
}

/* The operand [H, B, rows, cols] (head-major) at data. */
static tfm__heads head_major(float *data, int64_t B, int64_t rows,
                             int64_t cols)
{
    return (tfm__heads){ data, rows * cols, B * rows * cols, cols };
}

/* ==== The job ============================================================ */

/* The first query row's position (variants.h): q_pos0 + i for query row
 * i, j for key row j; also the causal offset (attention.h: j <= i +
 * offset). */
static int64_t first_position(const tfm__attention_args *a)
{
    return a->masks->causal == TFM_CAUSAL_BOTTOM_RIGHT ? a->S - a->L : 0;
}

/* The job of call a over operands q, k, val (after RoPE) before the
 * score's pre-transforms and positions: strides, sizes, masks, outputs,
 * groups and the scale (the call's, else the variant's, else 1/sqrt(d_k)
 * for the dot-product scores and 1 for the others). */
static void base_job(const tfm__variant *v, const tfm__attention_args *a,
                     const tfm__heads *q, const tfm__heads *k,
                     const tfm__heads *val, int64_t q_pos0,
                     tfm__attention_job *job)
{
    const tfm_attention_config *c = &v->config;
    *job = (tfm__attention_job){
        .q = q->data, .q_bstride = q->bstride, .q_hstride = q->hstride,
        .ldq = q->ld,
        .k = k->data, .k_bstride = k->bstride, .k_hstride = k->hstride,
        .ldk = k->ld,
        .v = val->data, .v_bstride = val->bstride, .v_hstride = val->hstride,
        .ldv = val->ld,
        .out = a->out.data, .o_bstride = a->out.bstride,
        .o_hstride = a->out.hstride, .ldo = a->out.ld,
        .B = a->B, .H = v->n_heads, .L = a->L, .S = a->S, .d_k = v->d_k,
        .d_v = v->d_v,
        .masks = a->masks, .weights = a->weights, .average = a->average,
        .group = v->n_heads / v->n_kv_heads, .q_pos0 = q_pos0,
        .dropout = a->dropout,
    };
    job->scale = a->scale != 0.0f ? a->scale
                 : c->scale != 0.0f ? c->scale
                 : c->score == TFM_SCORE_SCALED_DOT ||
                           c->score == TFM_SCORE_LEARNED_TEMPERATURE
                       ? (float)(1.0 / sqrt((double)v->d_k))
                       : 1.0f;
}

/* Luong's general score: q^T W_h k = (q W_h) . k, so the job runs on
 * q'[h, b] [L, d_k] = q[b, h] W_h, into qt [H, B, L, d_k]. */
static void general_pre(const tfm__variant *v, const tfm__heads *q,
                        int64_t B, int64_t L, float *qt,
                        tfm__attention_job *job)
{
    const int64_t H = v->n_heads, dk = v->d_k;
    per_head_product(q, B, H, 1, L, v->score_weight, dk, dk, 0, qt);
    const tfm__heads qth = head_major(qt, B, L, dk);
    job->q = qt;
    job->q_bstride = qth.bstride;
    job->q_hstride = qth.hstride;
    job->ldq = dk;
}

/* Bahdanau's additive score v_h . tanh(W_q,h q + W_k,h k): the job runs
 * on q' = q W_q,h^T [L, d_a] and k' = k W_k,h^T [S, d_a] per query head h
 * (qt [H, B, L, d_a], kt [H, B, S, d_a]); the kernel does the tanh and the
 * product with additive_v.  k' exists per query head, so under GQA the
 * values are repeated per query head too, into vt [B, H, S, d_v] (NULL
 * without GQA), and the job has group 1. */
static void additive_pre(const tfm__variant *v, const tfm__heads *q,
                         const tfm__heads *k, const tfm__heads *val,
                         int64_t B, int64_t L, int64_t S, float *qt,
                         float *kt, float *vt, tfm__attention_job *job)
{
    const int64_t H = v->n_heads, dk = v->d_k, dv = v->d_v, da = v->d_a;
    const int64_t group = H / v->n_kv_heads;
    per_head_product(q, B, H, 1, L, v->additive_query, da, dk, 1, qt);
    per_head_product(k, B, H, group, S, v->additive_key, da, dk, 1, kt);
    for (int64_t b = 0; vt && b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const float *src = head_at(val, b, h / group);
            float *dst = vt + (b * H + h) * S * dv;
            for (int64_t j = 0; j < S; j++)
                memcpy(dst + j * dv, src + j * val->ld,
                       (size_t)dv * sizeof(float));
        }
    const tfm__heads qth = head_major(qt, B, L, da);
    const tfm__heads kth = head_major(kt, B, S, da);
    job->q = qt;
    job->q_bstride = qth.bstride;
    job->q_hstride = qth.hstride;
    job->ldq = da;
    job->k = kt;
    job->k_bstride = kth.bstride;
    job->k_hstride = kth.hstride;
    job->ldk = da;
    job->d_k = da;
    job->additive_v = v->additive_v;
    if (vt) {
        job->v = vt;
        job->v_bstride = H * S * dv;
        job->v_hstride = S * dv;
        job->ldv = dv;
    }
    job->group = 1;
}

/* The job's relative term (into *rel; ALiBi's slopes [H] computed into
 * `slopes`) and sparse pattern (into *sparse), from the variant. */
static void resolve_positions(const tfm__variant *v, float *slopes,
                              tfm__relative *rel, tfm__sparse *sparse,
                              tfm__attention_job *job)
{
    const tfm_attention_config *c = &v->config;
    *rel = (tfm__relative){ .kind = c->relative };
    if (c->relative == TFM_RELATIVE_ALIBI) {
        tfm__alibi_slopes(v->n_heads, slopes);
        rel->alibi_slopes = slopes;
    } else if (c->relative == TFM_RELATIVE_T5) {
        rel->t5_bias = v->t5_bias;
        rel->num_buckets = v->num_buckets;
        rel->max_distance = v->max_distance;
        rel->bidirectional = c->bidirectional != 0;
    } else if (c->relative == TFM_RELATIVE_SHAW) {
        rel->max_distance = v->max_distance;
        rel->shaw_k = v->relative_key;
        rel->shaw_v = v->relative_value;
    }
    job->relative = c->relative != TFM_RELATIVE_NONE ? rel : NULL;
    *sparse = (tfm__sparse){
        .kind = c->sparsity, .window = c->window, .dilation = c->dilation,
        .n_global = c->n_global, .block_size = c->block_size,
        .n_random_blocks = c->n_random_blocks, .seed = c->seed,
    };
    job->sparse = c->sparsity != TFM_SPARSE_NONE ? sparse : NULL;
}

/* ==== The door ========================================================== */

tfm_status tfm__attend(const tfm__variant *v, const tfm__attention_args *a)
{
    const tfm_attention_config *c = &v->config;
    /* 1. parameters */
    tfm_status st = tfm__variant_check_params(v);
    if (st != TFM_OK)
        return st;
    const int64_t B = a->B, H = v->n_heads, Hkv = v->n_kv_heads, L = a->L,
                  S = a->S, dk = v->d_k, dv = v->d_v, da = v->d_a;
    const int64_t group = H / Hkv;
    const int additive = c->score == TFM_SCORE_ADDITIVE;
    /* 2. positions */
    const int64_t q_pos0 = first_position(a);

    /* 3. scratch, all of it before anything is written */
    tfm__ws_mark mark = tfm__ws_save();
    const int rope = c->rope != TFM_ROPE_NONE;
    const int copies = rope && !a->rope_in_place;
    float *qr = NULL, *kr = NULL;   /* RoPE copies [B, H(_kv), L(S), d_k] */
    float *slopes = NULL;           /* [H] */
    float *head_scale = NULL;       /* [H] */
    float *qt = NULL;               /* [H, B, L, d_k] or [H, B, L, d_a] */
    float *kt = NULL;               /* [H, B, S, d_a] */
    float *vt = NULL;               /* [B, H, S, d_v] */
    int ok = 1;
    if (copies)
        ok = (qr = tfm__ws_floats((size_t)(B * H * L * dk))) != NULL &&
             (kr = tfm__ws_floats((size_t)(B * Hkv * S * dk))) != NULL;
    if (ok && c->relative == TFM_RELATIVE_ALIBI)
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

    /* 4. RoPE */
    tfm__heads q = a->q, k = a->k, val = a->v;
    int64_t k_rotated = a->k_rotated;
    if (copies) {
        q = copy_heads(&a->q, B, H, L, dk, qr);
        k = copy_heads(&a->k, B, Hkv, S, dk, kr);
    }
    if (rope) {
        rotate(v, &q, B, H, 0, L, a->rope_origin + q_pos0, 0);
        rotate(v, &k, B, Hkv, k_rotated, S, a->rope_origin, 0);
    }

    tfm__attention_job job;
    base_job(v, a, &q, &k, &val, q_pos0, &job);
    job.lse = a->lse;
    job.values_finite = a->values_finite;

    /* 5. score: the pre-transforms */
    if (head_scale) {
        /* q . k / tau_h */
        for (int64_t h = 0; h < H; h++)
            head_scale[h] = 1.0f / v->temperature[h];
        job.head_scale = head_scale;
    }
    if (c->score == TFM_SCORE_GENERAL)
        general_pre(v, &q, B, L, qt, &job);
    if (additive)
        additive_pre(v, &q, &k, &val, B, L, S, qt, kt, vt, &job);

    /* 6. relative term and sparse pattern */
    tfm__relative rel;
    tfm__sparse sparse;
    resolve_positions(v, slopes, &rel, &sparse, &job);

    /* 7. the kernel */
    st = tfm__attention_run(&job);
    tfm__ws_restore(mark);
    return st;
}

/* The backward's scratch (tfm__attend_backward), all taken before
 * anything is written. */
typedef struct bwd_scratch {
    float *slopes, *head_scale;     /* [H]: ALiBi, learned temperature */
    float *qr, *kr;                 /* RoPE: rotated copies of q and k */
    float *qt, *dqt;                /* GENERAL, ADDITIVE: q' and dq',
                                     * [H, B, L, d_k or d_a] */
    float *kt, *dkt;                /* ADDITIVE: k' and dk' [H, B, S, d_a] */
    float *vt, *dvt;                /* ADDITIVE under GQA: [B, H, S, d_v] */
} bwd_scratch;

/* Takes x's scratch; 0 when out of memory. */
static int bwd_scratch_take(const tfm__variant *v, const tfm__attention_args *a,
                            const tfm__attention_grad_args *g, bwd_scratch *x)
{
    const tfm_attention_config *c = &v->config;
    const int64_t B = a->B, H = v->n_heads, Hkv = v->n_kv_heads, L = a->L,
                  S = a->S, dk = v->d_k, dv = v->d_v;
    const int additive = c->score == TFM_SCORE_ADDITIVE;
    const int64_t dq_cols = additive ? v->d_a : dk;
    *x = (bwd_scratch){ 0 };
#define TAKE(p, n) ((p = tfm__ws_floats((size_t)(n))) != NULL)
    return (c->relative != TFM_RELATIVE_ALIBI || TAKE(x->slopes, H)) &&
           (c->score != TFM_SCORE_LEARNED_TEMPERATURE ||
            TAKE(x->head_scale, H)) &&
           ((c->score != TFM_SCORE_GENERAL && !additive) ||
            (TAKE(x->qt, B * H * L * dq_cols) &&
             TAKE(x->dqt, B * H * L * dq_cols))) &&
           (!additive || (TAKE(x->kt, B * H * S * v->d_a) &&
                          TAKE(x->dkt, B * H * S * v->d_a))) &&
           (!additive || H == Hkv ||
            (TAKE(x->vt, B * H * S * dv) &&
             (!g->dv.data || TAKE(x->dvt, B * H * S * dv)))) &&
           (c->rope == TFM_ROPE_NONE ||
            (TAKE(x->qr, B * H * L * dk) && TAKE(x->kr, B * Hkv * S * dk)));
#undef TAKE
}

/* The kernel's gradient operands of a backward job: the caller's dq, dk,
 * dv, or the pre-transformed operands' (dq' of GENERAL and ADDITIVE, dk'
 * and the repeated values' dv of ADDITIVE), and the parameter gradients
 * the kernel computes itself (additive_v, T5, Shaw). */
static tfm__attention_grads kernel_grads(const tfm__variant *v,
                                         const tfm__attention_args *a,
                                         const tfm__attention_grad_args *g,
                                         const bwd_scratch *x)
{
    const tfm_attention_config *c = &v->config;
    const int64_t B = a->B, H = v->n_heads, L = a->L, S = a->S,
                  dv = v->d_v;
    const int64_t dq_cols = c->score == TFM_SCORE_ADDITIVE ? v->d_a : v->d_k;
    const tfm__heads dq = x->dqt ? head_major(x->dqt, B, L, dq_cols) : g->dq;
    const tfm__heads dk = x->dkt ? head_major(x->dkt, B, S, v->d_a) : g->dk;
    const tfm__heads dvh = x->dvt ? (tfm__heads){ x->dvt, H * S * dv, S * dv,
                                                  dv }
                                  : x->vt ? (tfm__heads){ 0 } : g->dv;
    const int shaw = c->relative == TFM_RELATIVE_SHAW;
    return (tfm__attention_grads){
        .dout = g->dout.data, .do_bstride = g->dout.bstride,
        .do_hstride = g->dout.hstride, .lddo = g->dout.ld,
        .lse = g->lse,
        .dq = dq.data, .dq_bstride = dq.bstride, .dq_hstride = dq.hstride,
        .lddq = dq.ld,
        .dk = dk.data, .dk_bstride = dk.bstride, .dk_hstride = dk.hstride,
        .lddk = dk.ld,
        .dv = dvh.data, .dv_bstride = dvh.bstride, .dv_hstride = dvh.hstride,
        .lddv = dvh.ld,
        .dadditive_v = c->score == TFM_SCORE_ADDITIVE ? g->dadditive_v : NULL,
        .dt5_bias = c->relative == TFM_RELATIVE_T5 ? g->dt5_bias : NULL,
        .dshaw_k = shaw ? g->drelative_key : NULL,
        .dshaw_v = shaw && v->relative_value ? g->drelative_value : NULL,
    };
}

/* After the kernel: the pre-transforms' backward (GENERAL: dq = dq' W_h^T,
 * dW_h += q^T dq'; ADDITIVE: dq = dq' W_q,h, dW_q,h += dq'^T q, dk = the
 * group's sum of dk' W_k,h, dW_k,h += dk'^T k, dv = the group's sum of the
 * repeated values' dv) on the rotated q and k. */
static void pre_backward(const tfm__variant *v, const tfm__attention_args *a,
                         const tfm__attention_grad_args *g,
                         const bwd_scratch *x, const tfm__heads *q,
                         const tfm__heads *k)
{
    const int64_t B = a->B, H = v->n_heads, L = a->L, S = a->S,
                  dk = v->d_k, dv = v->d_v, da = v->d_a;
    const int64_t group = H / v->n_kv_heads;
    if (v->config.score == TFM_SCORE_GENERAL) {
        per_head_product_backward(q, &g->dq, B, H, 1, L, v->score_weight, dk,
                                  dk, 0, x->dqt, g->dscore_weight);
        return;
    }
    if (v->config.score != TFM_SCORE_ADDITIVE)
        return;
    per_head_product_backward(q, &g->dq, B, H, 1, L, v->additive_query, da,
                              dk, 1, x->dqt, g->dadditive_query);
    per_head_product_backward(k, &g->dk, B, H, group, S, v->additive_key, da,
                              dk, 1, x->dkt, g->dadditive_key);
    for (int64_t b = 0; x->dvt && b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const float *src = x->dvt + (b * H + h) * S * dv;
            float *dst = g->dv.data + b * g->dv.bstride +
                         h / group * g->dv.hstride;
            for (int64_t j = 0; j < S; j++)
                for (int64_t e = 0; e < dv; e++)
                    dst[j * g->dv.ld + e] = h % group
                                                ? dst[j * g->dv.ld + e] +
                                                      src[j * dv + e]
                                                : src[j * dv + e];
        }
}

tfm_status tfm__attend_backward(const tfm__variant *v,
                                const tfm__attention_args *a,
                                const tfm__attention_grad_args *g)
{
    const int64_t B = a->B, H = v->n_heads, Hkv = v->n_kv_heads, L = a->L,
                  S = a->S, dk = v->d_k;
    const tfm_attention_config *c = &v->config;
    const int rope = c->rope != TFM_ROPE_NONE;
    if (rope && a->k_rotated)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "attention backward: "
                         "keys rotated beforehand (a KV cache) have no "
                         "backward");
    const int temperature = c->score == TFM_SCORE_LEARNED_TEMPERATURE;
    tfm_status st = tfm__variant_check_params(v);
    if (st != TFM_OK)
        return st;
    tfm__ws_mark mark = tfm__ws_save();
    bwd_scratch x;
    if (!bwd_scratch_take(v, a, g, &x)) {
        tfm__ws_restore(mark);
        return TFM_ERR_OUT_OF_MEMORY;
    }
    /* RoPE: the scores are those of the rotated q and k, so the kernel
     * works on rotated copies and gives the gradients of the rotated
     * rows; the transposed rotation takes them back to q's and k's. */
    const int64_t q_pos0 = first_position(a);
    tfm__heads q = a->q, k = a->k;
    if (rope) {
        q = copy_heads(&a->q, B, H, L, dk, x.qr);
        k = copy_heads(&a->k, B, Hkv, S, dk, x.kr);
        rotate(v, &q, B, H, 0, L, q_pos0, 0);
        rotate(v, &k, B, Hkv, 0, S, 0, 0);
    }
    /* logits q . k / tau_h, as the forward (tfm__attend, step 5). */
    for (int64_t h = 0; temperature && h < H; h++)
        x.head_scale[h] = 1.0f / v->temperature[h];
    tfm__attention_job job;
    base_job(v, a, &q, &k, &a->v, q_pos0, &job);
    job.head_scale = x.head_scale;
    job.weights = NULL;
    /* GENERAL and ADDITIVE: the kernel runs on the transformed operands
     * (as the forward, step 5) and gives their gradients (dq' and, for
     * ADDITIVE, dk' and the repeated values' dv) into scratch;
     * pre_backward takes them back to q, k and v. */
    if (c->score == TFM_SCORE_GENERAL)
        general_pre(v, &q, B, L, x.qt, &job);
    if (c->score == TFM_SCORE_ADDITIVE)
        additive_pre(v, &q, &k, &a->v, B, L, S, x.qt, x.kt, x.vt, &job);
    tfm__relative rel;
    tfm__sparse sparse;
    resolve_positions(v, x.slopes, &rel, &sparse, &job);
    const tfm__attention_grads grads = kernel_grads(v, a, g, &x);
    st = tfm__attention_backward_run(&job, &grads);
    if (st == TFM_OK)
        pre_backward(v, a, g, &x, &q, &k);
    if (st == TFM_OK && temperature && g->dtemperature && g->dq.data) {
        /* a = s / tau: d tau_h = -sum dA s / tau_h^2, and dq = dA k / tau_h
         * gives sum dA s = tau_h sum_i q_i . dq_i, so d tau_h =
         * -(1 / tau_h) sum over batch and rows of q . dq (before the
         * inverse rotation: the rotation keeps dot products).  Shaw's key
         * term q . r^K / tau_h is in both; T5's bias in neither. */
        for (int64_t h = 0; h < H; h++) {
            double acc = 0.0;
            for (int64_t b = 0; b < B; b++) {
                const float *qh = q.data + b * q.bstride + h * q.hstride;
                const float *dqh = g->dq.data + b * g->dq.bstride +
                                   h * g->dq.hstride;
                for (int64_t i = 0; i < L; i++)
                    for (int64_t e = 0; e < dk; e++)
                        acc += (double)qh[i * q.ld + e] *
                               (double)dqh[i * g->dq.ld + e];
            }
            g->dtemperature[h] += (float)(-acc / (double)v->temperature[h]);
        }
    }
    if (st == TFM_OK && rope) {
        if (g->dq.data)
            rotate(v, &g->dq, B, H, 0, L, q_pos0, 1);
        if (g->dk.data)
            rotate(v, &g->dk, B, Hkv, 0, S, 0, 1);
    }
    tfm__ws_restore(mark);
    return st;
}

tfm__heads tfm__heads_of(const tfm_tensor *t)
{
    const int64_t heads = t->shape[1], rows = t->shape[2], cols = t->shape[3];
    return (tfm__heads){ t->data, heads * rows * cols, rows * cols, cols };
}

tfm_status tfm__attend_tensors(const tfm__variant *var, const tfm_tensor *q,
                               const tfm_tensor *k, const tfm_tensor *v,
                               const tfm__masks *masks, float scale,
                               tfm_tensor *out, tfm_tensor *weights)
{
    const tfm__attention_args args = {
        .q = tfm__heads_of(q), .k = tfm__heads_of(k), .v = tfm__heads_of(v),
        .out = tfm__heads_of(out),
        .B = q->shape[0], .L = q->shape[2], .S = k->shape[2],
        .masks = masks, .weights = weights ? weights->data : NULL,
        .scale = scale,
    };
    return tfm__attend(var, &args);
}
