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

#include "attention_job.h"
#include "error.h"
#include "gemm.h"
#include "rope.h"
#include "tensor_impl.h"
#include "workspace.h"

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
    };
    job->scale = a->scale != 0.0f ? a->scale
                 : c->scale != 0.0f ? c->scale
                 : c->score == TFM_SCORE_SCALED_DOT ||
                           c->score == TFM_SCORE_LEARNED_TEMPERATURE
                       ? (float)(1.0 / sqrt((double)v->d_k))
                       : 1.0f;
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
        rotate(v, &q, B, H, 0, L, q_pos0, 0);
        rotate(v, &k, B, Hkv, k_rotated, S, 0, 0);
    }

    tfm__attention_job job;
    base_job(v, a, &q, &k, &val, q_pos0, &job);
    job.lse = a->lse;

    /* 5. score: the pre-transforms */
    if (head_scale) {
        /* q . k / tau_h */
        for (int64_t h = 0; h < H; h++)
            head_scale[h] = 1.0f / v->temperature[h];
        job.head_scale = head_scale;
    }
    if (c->score == TFM_SCORE_GENERAL) {
        /* q^T W_h k = (q W_h) . k:  q'[h, b] [L, d_k] = q[b, h] W_h */
        per_head_product(&q, B, H, 1, L, v->score_weight, dk, dk, 0, qt);
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
        per_head_product(&q, B, H, 1, L, v->additive_query, da, dk, 1, qt);
        per_head_product(&k, B, H, group, S, v->additive_key, da, dk, 1, kt);
        for (int64_t b = 0; vt && b < B; b++)
            for (int64_t h = 0; h < H; h++) {
                const float *src = head_at(&val, b, h / group);
                float *dst = vt + (b * H + h) * S * dv;
                for (int64_t j = 0; j < S; j++)
                    memcpy(dst + j * dv, src + j * val.ld,
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

    /* 6. relative term and sparse pattern */
    tfm__relative rel;
    tfm__sparse sparse;
    resolve_positions(v, slopes, &rel, &sparse, &job);

    /* 7. the kernel */
    st = tfm__attention_run(&job);
    tfm__ws_restore(mark);
    return st;
}

/* What the backward does not cover yet, or NULL. */
static const char *backward_missing(const tfm__variant *v)
{
    const tfm_attention_config *c = &v->config;
    if (c->score == TFM_SCORE_ADDITIVE)
        return "the additive score";
    if (c->relative != TFM_RELATIVE_NONE && c->relative != TFM_RELATIVE_ALIBI)
        return "a learned relative-position term (Shaw, T5)";
    return NULL;
}

tfm_status tfm__attend_backward(const tfm__variant *v,
                                const tfm__attention_args *a,
                                const tfm__attention_grad_args *g)
{
    const char *missing = backward_missing(v);
    if (missing)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "attention backward: %s has no backward yet",
                         missing);
    const int64_t B = a->B, H = v->n_heads, Hkv = v->n_kv_heads, L = a->L,
                  S = a->S, dk = v->d_k;
    const int rope = v->config.rope != TFM_ROPE_NONE;
    if (rope && a->k_rotated)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "attention backward: "
                         "keys rotated beforehand (a KV cache) have no "
                         "backward");
    const int temperature = v->config.score == TFM_SCORE_LEARNED_TEMPERATURE;
    const int general = v->config.score == TFM_SCORE_GENERAL;
    tfm__ws_mark mark = tfm__ws_save();
    float *slopes = NULL, *head_scale = NULL;
    float *qr = NULL, *kr = NULL;   /* RoPE: rotated copies of q and k */
    float *qt = NULL, *dqt = NULL;  /* GENERAL: q W_h and its gradient,
                                     * [H, B, L, d_k] */
    if ((v->config.relative == TFM_RELATIVE_ALIBI &&
         !(slopes = tfm__ws_floats((size_t)H))) ||
        (temperature && !(head_scale = tfm__ws_floats((size_t)H))) ||
        (general && (!(qt = tfm__ws_floats((size_t)(B * H * L * dk))) ||
                     !(dqt = tfm__ws_floats((size_t)(B * H * L * dk))))) ||
        (rope && (!(qr = tfm__ws_floats((size_t)(B * H * L * dk))) ||
                  !(kr = tfm__ws_floats((size_t)(B * Hkv * S * dk)))))) {
        tfm__ws_restore(mark);
        return TFM_ERR_OUT_OF_MEMORY;
    }
    /* RoPE: the scores are those of the rotated q and k, so the kernel
     * works on rotated copies and gives the gradients of the rotated
     * rows; the transposed rotation takes them back to q's and k's. */
    const int64_t q_pos0 = first_position(a);
    tfm__heads q = a->q, k = a->k;
    if (rope) {
        q = copy_heads(&a->q, B, H, L, dk, qr);
        k = copy_heads(&a->k, B, Hkv, S, dk, kr);
        rotate(v, &q, B, H, 0, L, q_pos0, 0);
        rotate(v, &k, B, Hkv, 0, S, 0, 0);
    }
    tfm_status st = TFM_OK;
    if (temperature) {
        /* logits q . k / tau_h, as the forward (tfm__attend, step 5). */
        if ((st = tfm__variant_check_params(v)) != TFM_OK) {
            tfm__ws_restore(mark);
            return st;
        }
        for (int64_t h = 0; h < H; h++)
            head_scale[h] = 1.0f / v->temperature[h];
    }
    tfm__attention_job job;
    base_job(v, a, &q, &k, &a->v, q_pos0, &job);
    job.head_scale = head_scale;
    job.weights = NULL;
    /* GENERAL: the kernel runs on q' = q W_h (as the forward, step 5) and
     * gives dq' into dqt; below dq = dq' W_h^T and dW_h += q^T dq'. */
    const tfm__heads qth = { qt, L * dk, B * L * dk, dk };
    const tfm__heads dqth = { dqt, L * dk, B * L * dk, dk };
    if (general) {
        per_head_product(&q, B, H, 1, L, v->score_weight, dk, dk, 0, qt);
        job.q = qt;
        job.q_bstride = qth.bstride;
        job.q_hstride = qth.hstride;
        job.ldq = dk;
    }
    tfm__relative rel;
    tfm__sparse sparse;
    resolve_positions(v, slopes, &rel, &sparse, &job);
    const tfm__heads dq_out = general ? dqth : g->dq;
    const tfm__attention_grads grads = {
        .dout = g->dout.data, .do_bstride = g->dout.bstride,
        .do_hstride = g->dout.hstride, .lddo = g->dout.ld,
        .lse = g->lse,
        .dq = dq_out.data, .dq_bstride = dq_out.bstride,
        .dq_hstride = dq_out.hstride, .lddq = dq_out.ld,
        .dk = g->dk.data, .dk_bstride = g->dk.bstride,
        .dk_hstride = g->dk.hstride, .lddk = g->dk.ld,
        .dv = g->dv.data, .dv_bstride = g->dv.bstride,
        .dv_hstride = g->dv.hstride, .lddv = g->dv.ld,
    };
    st = tfm__attention_backward_run(&job, &grads);
    if (st == TFM_OK && general) {
        for (int64_t h = 0; h < H; h++) {
            const float *w = v->score_weight + h * dk * dk;
            for (int64_t b = 0; b < B; b++) {
                const float *dqp = dqt + h * dqth.hstride + b * dqth.bstride;
                const float *qh = head_at(&q, b, h);
                /* dq = dq' W_h^T [L, d_k]; dW_h += q^T dq' [d_k, d_k] */
                if (g->dq.data)
                    tfm__sgemm(0, 1, L, dk, dk, 1.0f, dqp, dk, w, dk, 0.0f,
                               g->dq.data + b * g->dq.bstride +
                                   h * g->dq.hstride,
                               g->dq.ld);
                if (g->dscore_weight)
                    tfm__sgemm(1, 0, dk, dk, L, 1.0f, qh, q.ld, dqp, dk, 1.0f,
                               g->dscore_weight + h * dk * dk, dk);
            }
        }
    }
    if (st == TFM_OK && temperature && g->dtemperature && g->dq.data) {
        /* a = s / tau: d tau_h = -sum dA s / tau_h^2, and dq = dA k / tau_h
         * gives sum dA s = tau_h sum_i q_i . dq_i, so d tau_h =
         * -(1 / tau_h) sum over batch and rows of q . dq (before the
         * inverse rotation: the rotation keeps dot products). */
        for (int64_t h = 0; h < H; h++) {
            double acc = 0.0;
            for (int64_t b = 0; b < B; b++) {
                const float *qh = q.data + b * q.bstride + h * q.hstride;
                const float *dqh = g->dq.data + b * g->dq.bstride +
                                   h * g->dq.hstride;
                for (int64_t i = 0; i < L; i++)
                    for (int64_t c = 0; c < dk; c++)
                        acc += (double)qh[i * q.ld + c] *
                               (double)dqh[i * g->dq.ld + c];
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
