/* The backward pass of multi-head attention (attention.h:
 * tfm_mha_backward; torch.autograd's gradients of nn.MultiheadAttention /
 * F.multi_head_attention_forward).
 *
 * Nothing is kept from the forward call: the projections q = query W_q^T
 * + b_q, k, v and the attention's output and per-row log-sum-exp are
 * recomputed (the attention through the one door, tfm__attend, with the
 * training forward's lse), then, in reverse order,
 *   out_proj:  W_o.grad += dout^T ctx,  b_o.grad += sum dout,
 *              dctx = dout W_o;
 *   attention: dq, dk, dv = tfm__attend_backward (FlashAttention-2's tiled
 *              backward, memory linear in L and S);
 *   in_proj:   W_q.grad += dq^T query, b_q.grad += sum dq,
 *              grad_query = dq W_q; the same for keys and values.
 * Every product is a cblas_sgemm (tfm__linear_backward).  All scratch is
 * taken, and the attention's backward run into scratch, before the first
 * gradient is accumulated, so a failure changes nothing. */
#include "attention_job.h"
#include "error.h"
#include "gemm.h"
#include "mha.h"
#include "mha_extra_kv.h"
#include "parallel.h"
#include "tensor_impl.h"
#include "transformer/attention.h"
#include "workspace.h"

/* Rows [B, S, ld] seen as heads of width d_k (head h: columns h d_k ..). */
static tfm__heads heads(const tfm__mha *m, float *x, int64_t rows,
                        int64_t ld)
{
    return (tfm__heads){ x, rows * ld, m->d_k, ld };
}

tfm_status tfm__mha_backward(const tfm__mha *m, const float *query,
                             const float *key, const float *value, int64_t B,
                             int64_t L, int64_t S, const tfm__masks *masks,
                             const float *grad_out, float *grad_query,
                             float *grad_key, float *grad_value)
{
    if (tfm__mha_extra_rows(m) > 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_mha_backward: add_bias_kv and add_zero_attn "
                         "have no backward yet");
    const int64_t d = m->d_model, kv = m->kv_dim, H = m->n_heads;
    tfm__ws_mark mark = tfm__ws_save();
    float *q = tfm__ws_floats((size_t)(B * L * d));
    float *k = q ? tfm__ws_floats((size_t)(B * S * kv)) : NULL;
    float *v = k ? tfm__ws_floats((size_t)(B * S * kv)) : NULL;
    float *ctx = v ? tfm__ws_floats((size_t)(B * L * d)) : NULL;
    float *lse = ctx ? tfm__ws_floats((size_t)(B * H * L)) : NULL;
    float *dctx = lse ? tfm__ws_floats((size_t)(B * L * d)) : NULL;
    float *dq = dctx ? tfm__ws_floats((size_t)(B * L * d)) : NULL;
    float *dk = dq ? tfm__ws_floats((size_t)(B * S * kv)) : NULL;
    float *dv = dk ? tfm__ws_floats((size_t)(B * S * kv)) : NULL;
    const int64_t widest = d > kv ? d : kv;
    double *acc = dv ? tfm__ws_alloc((size_t)widest * sizeof *acc) : NULL;
    if (!acc) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "tfm_mha_backward: out of memory");
    }
    tfm__linear_parallel(query, d, B * L, d, m->w_q, m->b_q, d, q, d);
    tfm__linear_parallel(key, m->kdim, B * S, m->kdim, m->w_k, m->b_k, kv, k,
                         kv);
    tfm__linear_parallel(value, m->vdim, B * S, m->vdim, m->w_v, m->b_v, kv,
                         v, kv);
    const tfm__attention_args args = {
        .q = heads(m, q, L, d), .k = heads(m, k, S, kv),
        .v = heads(m, v, S, kv), .out = heads(m, ctx, L, d),
        .B = B, .L = L, .S = S, .masks = masks, .lse = lse,
    };
    tfm_status st = tfm__attend(&m->var, &args);
    /* dctx = dout W_o (no accumulation yet): the attention's backward
     * needs it, and may still fail. */
    if (st == TFM_OK) {
        tfm__linear_backward(ctx, d, B * L, d, m->w_o, d, grad_out, d, dctx,
                             NULL, NULL, NULL);
        const tfm__attention_grad_args g = {
            .dout = heads(m, dctx, L, d), .lse = lse,
            .dq = heads(m, dq, L, d), .dk = heads(m, dk, S, kv),
            .dv = heads(m, dv, S, kv),
        };
        st = tfm__attend_backward(&m->var, &args, &g);
    }
    if (st != TFM_OK) {
        tfm__ws_restore(mark);
        return st;
    }
    const tfm_module *home = &m->base;
#define GRAD(p) ((p) ? tfm__grad_of(home, (p)) : NULL)
    tfm__linear_backward(ctx, d, B * L, d, m->w_o, d, grad_out, d, NULL,
                         GRAD(m->w_o), GRAD(m->b_o), acc);
    tfm__linear_backward(query, d, B * L, d, m->w_q, d, dq, d, grad_query,
                         GRAD(m->w_q), GRAD(m->b_q), acc);
    tfm__linear_backward(key, m->kdim, B * S, m->kdim, m->w_k, kv, dk, kv,
                         grad_key, GRAD(m->w_k), GRAD(m->b_k), acc);
    tfm__linear_backward(value, m->vdim, B * S, m->vdim, m->w_v, kv, dv, kv,
                         grad_value, GRAD(m->w_v), GRAD(m->b_v), acc);
#undef GRAD
    tfm__ws_restore(mark);
    return TFM_OK;
}

/* Whether a and b share memory (either NULL: no). */
static int overlap(const tfm_tensor *a, const tfm_tensor *b)
{
    return a && b && a->data < b->data + b->numel &&
           b->data < a->data + a->numel;
}

tfm_status tfm_mha_backward(tfm_module *mha, const tfm_tensor *query,
                            const tfm_tensor *key, const tfm_tensor *value,
                            const tfm_attention_masks *masks,
                            const tfm_tensor *grad_output,
                            tfm_tensor *grad_query, tfm_tensor *grad_key,
                            tfm_tensor *grad_value)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_mha_backward";
    int64_t B = 0, L = 0, S = 0;
    tfm__masks mk;
    tfm_status st = tfm__mha_check_inputs(what, mha, query, key, value, NULL,
                                          NULL, masks, &B, &L, &S, &mk);
    if (st != TFM_OK)
        return st;
    const tfm__mha *m = (const tfm__mha *)mha;
    if (!grad_output)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: grad_output is NULL",
                         what);
    const int64_t o_shape[3] = { B, L, m->d_model };
    if ((st = tfm__check_shape(grad_output, "grad_output", 3, o_shape)) ||
        (grad_query &&
         (st = tfm__check_shape(grad_query, "grad_query", 3, query->shape))) ||
        (grad_key &&
         (st = tfm__check_shape(grad_key, "grad_key", 3, key->shape))) ||
        (grad_value &&
         (st = tfm__check_shape(grad_value, "grad_value", 3, value->shape))))
        return st;
    const tfm_tensor *ins[4] = { query, key, value, grad_output };
    const tfm_tensor *outs[3] = { grad_query, grad_key, grad_value };
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 4; j++)
            if (overlap(outs[i], ins[j]))
                return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                                 "%s: the gradients must not overlap query, "
                                 "key, value or grad_output", what);
        for (int j = i + 1; j < 3; j++)
            if (overlap(outs[i], outs[j]))
                return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                                 "%s: grad_query, grad_key and grad_value "
                                 "must not overlap", what);
    }
    if (!tfm__all_finite(grad_output->data, grad_output->numel))
        return tfm__fail(TFM_ERR_NON_FINITE,
                         "%s: grad_output holds NaN or infinity", what);
    if ((st = tfm__module_enter_grads(mha, what)))
        return st;
    st = tfm__mha_backward(m, query->data, key->data, value->data, B, L, S,
                           &mk, grad_output->data,
                           grad_query ? grad_query->data : NULL,
                           grad_key ? grad_key->data : NULL,
                           grad_value ? grad_value->data : NULL);
    tfm__module_leave_grads(mha);
    return st;
}
