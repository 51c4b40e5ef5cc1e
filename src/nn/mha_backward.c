/* The backward pass of multi-head attention (attention.h:
 * tfm_mha_backward; torch.autograd's gradients of nn.MultiheadAttention /
 * F.multi_head_attention_forward).
 *
 * The forward is mha.c's one forward told to keep (tfm__mha_forward_keep:
 * the projections q = query W_q^T + b_q, k, v, laid out as the evaluation
 * forward lays them, the attention's output and per-row log-sum-exp
 * through the one door, tfm__attend, and the backward's scratch); from
 * what it kept tfm__mha_backward_kept goes, in reverse order,
 *   out_proj:  W_o.grad += dout^T ctx,  b_o.grad += sum dout,
 *              dctx = dout W_o;
 *   attention: dq, dk, dv = tfm__attend_backward (FlashAttention-2's tiled
 *              backward, memory linear in L and S), which also adds the
 *              variant's parameter gradients (score_weight, temperature,
 *              the additive score's, Shaw's and T5's tables);
 *   in_proj:   W_q.grad += dq^T query, b_q.grad += sum dq,
 *              grad_query = dq W_q; the same for keys and values (for
 *              self-attention one product [dq dk dv]^T x and one
 *              [dq dk dv] [W_q; W_k; W_v], the summed input gradient).
 * Every product is a cblas_sgemm (tfm__linear_backward).  All scratch is
 * taken, and the attention's backward run into scratch, before the first
 * gradient is accumulated, so a failure changes nothing. */
#include "attention/attention_job.h"
#include "base/error.h"
#include "kernels/linear.h"
#include "nn/mha.h"
#include "nn/mha_extra_kv.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "transformer/attention.h"
#include "base/workspace.h"

/* Rows [B, S, ld] seen as heads of width d_k (head h: columns h d_k ..). */
static tfm__heads heads(const tfm__mha *m, float *x, int64_t rows,
                        int64_t ld)
{
    return (tfm__heads){ x, rows * ld, m->d_k, ld };
}

tfm_status tfm__mha_backward_kept(const tfm__mha *m,
                                  const tfm__mha_kept *c,
                                  const float *grad_out, float *grad_query,
                                  float *grad_key, float *grad_value)
{
    const int64_t d = m->d_model, kv = m->kv_dim;
    const int64_t B = c->B, L = c->L, S = c->S;
    const tfm__attention_args args = {
        .q = heads(m, c->q, L, c->ld), .k = heads(m, c->k, S, c->ldkv),
        .v = heads(m, c->v, S, c->ldkv), .out = heads(m, c->ctx, L, d),
        .B = B, .L = L, .S = S, .masks = c->masks, .lse = c->lse,
        .dropout = c->drop,
    };
    /* dctx = dout W_o (no accumulation yet): the attention's backward
     * needs it, and may still fail. */
    tfm__linear_backward(c->ctx, d, B * L, d, m->w_o, d, grad_out, d, c->dctx,
                         NULL, NULL, NULL);
    const tfm_module *home = &m->base;
#define GRAD(p) ((p) ? tfm__grad_of(home, (p)) : NULL)
    const tfm__attention_grad_args g = {
        .dout = heads(m, c->dctx, L, d), .lse = c->lse,
        .dq = heads(m, c->dq, L, c->ld), .dk = heads(m, c->dk, S, c->ldkv),
        .dv = heads(m, c->dv, S, c->ldkv),
        .dtemperature = GRAD(m->var.temperature),
        .dscore_weight = GRAD(m->var.score_weight),
        .dadditive_query = GRAD(m->var.additive_query),
        .dadditive_key = GRAD(m->var.additive_key),
        .dadditive_v = GRAD(m->var.additive_v),
        .drelative_key = GRAD(m->var.relative_key),
        .drelative_value = GRAD(m->var.relative_value),
        .dt5_bias = GRAD(m->var.t5_bias),
    };
    tfm_status st = tfm__attend_backward(&m->var, &args, &g);
    if (st != TFM_OK)
        return st;
    tfm__linear_backward(c->ctx, d, B * L, d, m->w_o, d, grad_out, d, NULL,
                         GRAD(m->w_o), GRAD(m->b_o), c->acc);
    if (c->fused) {
        /* [W_q; W_k; W_v] in one: the input's gradient is the sum of the
         * three, as autograd gives it for one tensor used three times. */
        tfm__linear_backward(c->query, d, B * L, d, m->w_q, d + 2 * kv,
                             c->dq, d + 2 * kv, grad_query, GRAD(m->w_q),
                             GRAD(m->b_q), c->acc);
    } else {
        tfm__linear_backward(c->query, d, B * L, d, m->w_q, d, c->dq, d,
                             grad_query, GRAD(m->w_q), GRAD(m->b_q), c->acc);
        /* (dk, dv: rows of c->ldkv, 2 kv when side by side) */
        tfm__linear_backward(c->key, m->kdim, B * S, m->kdim, m->w_k, kv,
                             c->dk, c->ldkv, grad_key, GRAD(m->w_k),
                             GRAD(m->b_k), c->acc);
        tfm__linear_backward(c->value, m->vdim, B * S, m->vdim, m->w_v, kv,
                             c->dv, c->ldkv, grad_value, GRAD(m->w_v),
                             GRAD(m->b_v), c->acc);
    }
#undef GRAD
    return TFM_OK;
}

tfm_status tfm__mha_backward(const tfm__mha *m, const float *query,
                             const float *key, const float *value, int64_t B,
                             int64_t L, int64_t S, const tfm__masks *masks,
                             const float *grad_out, float *grad_query,
                             float *grad_key, float *grad_value,
                             uint64_t drop_key)
{
    tfm__ws_mark mark = tfm__ws_save();
    tfm__mha_kept kept;
    tfm_status st = tfm__mha_forward_keep(m, query, key, value, B, L, S,
                                          masks, 0, drop_key, NULL, &kept);
    if (st == TFM_OK)
        st = tfm__mha_backward_kept(m, &kept, grad_out, grad_query, grad_key,
                                    grad_value);
    tfm__ws_restore(mark);
    return st;
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
                           grad_value ? grad_value->data : NULL,
                           tfm__dropout_backward_key(mha));
    tfm__module_leave_grads(mha);
    return st;
}
