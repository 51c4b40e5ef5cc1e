/* Position-wise feed-forward network (layers.h; Vaswani et al. eq. (2)). */
#include <string.h>

#include "kernels/activation.h"
#include "base/error.h"
#include "nn/feed_forward.h"
#include "kernels/linear.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

tfm_status tfm__feed_forward_macs(const tfm__feed_forward *f, int64_t batch,
                                  int64_t L, int64_t *acc)
{
    if (!tfm__macs_add(acc, batch, L, f->d_model, f->d_first + f->d_ff))
        return tfm__fail(TFM_ERR_OVERFLOW, "MAC count overflows int64");
    return TFM_OK;
}

static tfm_status ff_macs(const tfm_module *m, int64_t batch, int64_t L,
                          int64_t S, int64_t *acc)
{
    (void)S;
    return tfm__feed_forward_macs((const tfm__feed_forward *)m, batch, L, acc);
}

static void ff_destroy(tfm_module *m)
{
    tfm__feed_forward *f = (tfm__feed_forward *)m;
    tfm_module_free(f->linear1 ? &f->linear1->base : NULL);
    tfm_module_free(f->linear2 ? &f->linear2->base : NULL);
    tfm_module_free(f->linear3 ? &f->linear3->base : NULL);
}

static const tfm__module_ops ff_ops = { ff_destroy, ff_macs };

tfm_status tfm__feed_forward_new(int64_t d_model, int64_t d_ff,
                                 tfm_activation activation, int bias,
                                 int gated, tfm__feed_forward **out)
{
    if (d_model < 1 || d_ff < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "d_model (%lld) and d_ff (%lld) must be at least 1",
                         (long long)d_model, (long long)d_ff);
    if (d_model > INT32_MAX || d_ff > INT32_MAX / 2)
        return tfm__fail(TFM_ERR_OVERFLOW, "layer widths must fit in 32 bits");
    if (!tfm__activation_valid(activation))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "unknown activation %d",
                         (int)activation);
    tfm__feed_forward *f = (tfm__feed_forward *)tfm__module_alloc(
        sizeof *f, TFM_MODULE_FEED_FORWARD, &ff_ops);
    if (!f)
        return TFM_ERR_OUT_OF_MEMORY;
    f->d_model = d_model;
    f->d_ff = d_ff;
    f->activation = activation;
    f->gated = gated != 0;
    f->d_first = gated ? 2 * d_ff : d_ff;
    const tfm__param_spec w1 = { "linear1.weight", 2, { d_ff, d_model },
                                 &f->w1, .init = TFM__INIT_LINEAR,
                                 .convertible = 1 };
    const tfm__param_spec b1 = { "linear1.bias", 1, { d_ff }, &f->b1,
                                 .init = TFM__INIT_LINEAR_BIAS,
                                 .init_fan_in = d_model };
    const tfm__param_spec w2 = { "linear2.weight", 2, { d_model, d_ff },
                                 &f->w2, .init = TFM__INIT_LINEAR,
                                 .convertible = 1 };
    const tfm__param_spec b2 = { "linear2.bias", 1, { d_model }, &f->b2,
                                 .init = TFM__INIT_LINEAR_BIAS,
                                 .init_fan_in = d_ff };
    const tfm__param_spec w3 = { "linear3.weight", 2, { d_ff, d_model },
                                 &f->w3, .init = TFM__INIT_LINEAR,
                                 .convertible = 1 };
    const tfm__param_spec b3 = { "linear3.bias", 1, { d_ff }, &f->b3,
                                 .init = TFM__INIT_LINEAR_BIAS,
                                 .init_fan_in = d_model };
    /* PyTorch's order: linear1.weight, linear1.bias, linear2.weight, ...
     * Gated, W3 follows W1 and b3 b1 in memory (the one first GEMM):
     * linear1.weight, linear3.weight, linear1.bias, linear3.bias, linear2.* */
    tfm__param_spec specs[6];
    int n = 0;
    if (!gated) {
        specs[n++] = w1;
        if (bias)
            specs[n++] = b1;
    } else {
        specs[n++] = w1;
        specs[n++] = w3;
        if (bias) {
            specs[n++] = b1;
            specs[n++] = b3;
        }
    }
    specs[n++] = w2;
    if (bias)
        specs[n++] = b2;
    tfm_status st;
    if ((st = tfm__module_own_params(&f->base, specs, n)) ||
        (st = tfm__linear_view_new(d_model, d_ff, f->w1, f->b1, &f->base,
                                   &f->linear1)) ||
        (st = tfm__module_add_child(&f->base, "linear1", &f->linear1->base)) ||
        (st = tfm__linear_view_new(d_ff, d_model, f->w2, f->b2, &f->base,
                                   &f->linear2)) ||
        (st = tfm__module_add_child(&f->base, "linear2", &f->linear2->base)) ||
        (gated &&
         ((st = tfm__linear_view_new(d_model, d_ff, f->w3, f->b3, &f->base,
                                     &f->linear3)) ||
          (st = tfm__module_add_child(&f->base, "linear3",
                                      &f->linear3->base))))) {
        tfm_module_free(&f->base);
        return st;
    }
    *out = f;
    return TFM_OK;
}

/* The hidden layer from the first product: pre [n, d_first] (x W1^T + b1
 * | x W3^T + b3) -> act [n, d_ff] (row stride ld) = act(h1), gated
 * act(h1) * h3.  act may be pre itself (ld d_first: the first d_ff
 * columns of each row are overwritten). */
static void ff_hidden(const tfm__feed_forward *f, const float *pre,
                      int64_t n, float *act, int64_t ld)
{
    const int64_t h = f->d_ff, h1 = f->d_first;
    if (!f->gated && act == pre) {
        tfm__activate(act, n * h, f->activation);
        return;
    }
    for (int64_t r = 0; r < n; r++) {
        const float *p = pre + r * h1;
        float *a = act + r * ld;
        if (a != p)
            memcpy(a, p, (size_t)h * sizeof *a);
        tfm__activate(a, h, f->activation);
        if (f->gated)
            for (int64_t j = 0; j < h; j++)
                a[j] *= p[h + j];
    }
}

/* One call's hidden layer: first [rows, d_first] receives the first
 * product, act [rows, d_ff] (row stride ld) the activation (may be first:
 * ld d_first), on (NULL: not kept) ReLU's act > 0 [rows, d_ff]. */
typedef struct ff_job {
    const tfm__feed_forward *f;
    const float *x;
    float *first, *act, *out;   /* out NULL: the second product not wanted */
    int64_t ld;
    unsigned char *on;
    const tfm__dropout *drop;   /* NULL or on */
} ff_job;

/* The hidden layer of rows begin .. end-1 from their first product:
 * activation, dropout, ReLU's signs. */
static void ff_hidden_rows(const ff_job *j, int64_t begin, int64_t n)
{
    const tfm__feed_forward *f = j->f;
    const int64_t h = f->d_ff;
    float *act = j->act + begin * j->ld;
    ff_hidden(f, j->first + begin * f->d_first, n, act, j->ld);
    if (j->drop)
        tfm__dropout_apply_rows(j->drop, (uint64_t)(begin * h), (uint64_t)h,
                                act, n, h, j->ld);
    if (j->on)
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < h; c++)
                j->on[(begin + r) * h + c] = act[r * j->ld + c] > 0.0f;
}

/* Rows begin .. end-1 through both layers, on one thread. */
static void ff_rows(void *ctx, int64_t begin, int64_t end, int slot)
{
    const ff_job *j = ctx;
    const tfm__feed_forward *f = j->f;
    const int64_t d = f->d_model, h = f->d_ff, n = end - begin;
    const int64_t h1 = f->d_first;
    (void)slot;
    tfm__linear(j->x + begin * d, d, n, d, f->w1, f->b1, h1,
                j->first + begin * h1, h1);
    ff_hidden_rows(j, begin, n);
    if (j->out)
        tfm__linear(j->act + begin * j->ld, j->ld, n, h, f->w2, f->b2, d,
                    j->out + begin * d, d);
}

/* The one forward: out [rows, d_model] = FF(x) (out NULL: not wanted).
 * kept NULL: evaluation, the hidden layer in scratch released on return;
 * else the training forward, the hidden layer and the backward's scratch
 * kept in the caller's workspace and described in *kept.  Many rows: each
 * thread takes whole rows through both layers; few (decoding): each
 * product split by output columns.  Fails only with out-of-memory, before
 * writing out. */
static tfm_status ff_forward(const tfm__feed_forward *f, const float *x,
                             int64_t rows, const tfm__dropout *drop,
                             float *out, tfm__ff_kept *kept)
{
    const int64_t d = f->d_model, h = f->d_ff, h1 = f->d_first;
    tfm__ff_kept c = { .x = x, .rows = rows };
    if (tfm__dropout_on(drop))
        c.drop = *drop;
    ff_job j = { f, x, NULL, NULL, out, h1, NULL,
                 tfm__dropout_on(drop) ? drop : NULL };
    tfm__ws_mark mark = tfm__ws_save();
    if (!kept) {
        j.first = j.act = tfm__ws_floats((size_t)(rows * h1));
        if (!j.first) {
            tfm__ws_restore(mark);
            return TFM_ERR_OUT_OF_MEMORY;
        }
    } else {
        /* ReLU keeps where the hidden layer is positive instead of the
         * first product. */
        const int relu = !f->gated && f->activation == TFM_ACTIVATION_RELU;
        const size_t n = (size_t)(rows * h);
        c.act = tfm__ws_floats(n);
        int ok = c.act != NULL;
        if (ok && relu)
            ok = (c.on = tfm__ws_alloc(n)) != NULL;
        else if (ok)
            ok = (c.pre = tfm__ws_floats((size_t)(rows * h1))) != NULL;
        c.scratch = ok ? tfm__ws_floats((size_t)h) : NULL;
        c.acc = c.scratch ? tfm__ws_alloc((size_t)(d > h1 ? d : h1) *
                                          sizeof *c.acc)
                          : NULL;
        if (!c.acc) {
            tfm__ws_restore(mark);
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "feed-forward backward: out of memory");
        }
        j.first = relu ? c.act : c.pre;
        j.act = c.act;
        j.ld = h;
        j.on = c.on;
    }
    const tfm__plan plan = tfm__plan_now();
    if (rows >= 16 * (int64_t)plan.slots) {
        tfm__parallel_for_products(plan, rows, 8, ff_rows, &j);
    } else {
        tfm__linear_parallel(x, d, rows, d, f->w1, f->b1, h1, j.first, h1);
        ff_hidden_rows(&j, 0, rows);
        if (out)
            tfm__linear_parallel(j.act, j.ld, rows, h, f->w2, f->b2, d, out,
                                 d);
    }
    if (kept)
        *kept = c;  /* its memory stays in the caller's workspace */
    else
        tfm__ws_restore(mark);
    return TFM_OK;
}

tfm_status tfm__feed_forward_run(const tfm__feed_forward *f, const float *x,
                                 int64_t rows, const tfm__dropout *drop,
                                 float *out)
{
    return ff_forward(f, x, rows, drop, out, NULL);
}

tfm_status tfm_feed_forward_create(int64_t d_model, int64_t d_ff,
                                   tfm_activation activation, tfm_module **out)
{
    return tfm_feed_forward_create_v2(d_model, d_ff, activation, 1, out);
}

/* The public constructors' one door: *out set only on success. */
static tfm_status ff_create(int64_t d_model, int64_t d_ff,
                            tfm_activation activation, int bias, int gated,
                            tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__feed_forward *f = NULL;
    tfm_status st = tfm__feed_forward_new(d_model, d_ff, activation,
                                          bias != 0, gated, &f);
    if (st == TFM_OK)
        *out = &f->base;
    return st;
}

tfm_status tfm_feed_forward_create_v2(int64_t d_model, int64_t d_ff,
                                      tfm_activation activation, int bias,
                                      tfm_module **out)
{
    return ff_create(d_model, d_ff, activation, bias, 0, out);
}

tfm_status tfm_gated_feed_forward_create(int64_t d_model, int64_t d_ff,
                                         tfm_activation activation, int bias,
                                         tfm_module **out)
{
    return ff_create(d_model, d_ff, activation, bias, 1, out);
}

int tfm_feed_forward_is_gated(const tfm_module *ff)
{
    if (!ff || ff->kind != TFM_MODULE_FEED_FORWARD)
        return -1;
    return ((const tfm__feed_forward *)ff)->gated;
}

/* x [B, L, d_model], non-NULL. */
static tfm_status check_x(const tfm__feed_forward *f, const tfm_tensor *x,
                          const char *what)
{
    if (!x)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: x is NULL", what);
    if (x->rank != 3 || x->shape[2] != f->d_model) {
        const int64_t want[3] = { -1, -1, f->d_model };
        return tfm__check_shape(x, "x", 3, want);
    }
    return TFM_OK;
}

tfm_status tfm_feed_forward_forward(const tfm_module *ff, const tfm_tensor *x,
                                    tfm_tensor *out)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__module_check(ff, TFM_MODULE_FEED_FORWARD, "ff");
    if (st != TFM_OK)
        return st;
    const tfm__feed_forward *f = (const tfm__feed_forward *)ff;
    if ((st = check_x(f, x, "tfm_feed_forward_forward")) ||
        (st = tfm__check_shape(out, "out", 3, x->shape)) != TFM_OK)
        return st;
    const tfm__dropout drop =
        tfm__dropout_at(ff->dropout, tfm__dropout_forward_key((tfm_module *)ff),
                        TFM__DROP_HIDDEN);
    return tfm__feed_forward_run(f, x->data, x->shape[0] * x->shape[1],
                                 &drop, out->data);
}

tfm_status tfm__feed_forward_forward_keep(const tfm__feed_forward *f,
                                          const float *x, int64_t rows,
                                          const tfm__dropout *drop,
                                          float *out, tfm__ff_kept *kept)
{
    return ff_forward(f, x, rows, drop, out, kept);
}

/* Gated: g = grad of the hidden layer [rows, d_ff] (in c->act) ->
 * c->pre [rows, 2 d_ff] = (g * h3 * act'(h1) | g * act(h1)), the gradients
 * of the two halves of the first product. */
static void gated_backward(const tfm__feed_forward *f, const tfm__ff_kept *c)
{
    const int64_t h = f->d_ff;
    float *s = c->scratch;
    for (int64_t r = 0; r < c->rows; r++) {
        float *p = c->pre + r * 2 * h, *g = c->act + r * h;
        for (int64_t j = 0; j < h; j++)
            s[j] = p[j];
        tfm__activate(s, h, f->activation);
        for (int64_t j = 0; j < h; j++) {
            const float u = p[h + j];
            p[h + j] = g[j] * s[j];
            g[j] *= u;
        }
        tfm__activation_backward(p, g, h, f->activation);
        for (int64_t j = 0; j < h; j++)
            p[j] = g[j];
    }
}

void tfm__feed_forward_backward_kept(const tfm__feed_forward *f,
                                     const tfm__ff_kept *c,
                                     const float *grad_y, float *grad_x)
{
    const int64_t d = f->d_model, h = f->d_ff, h1 = f->d_first;
    const int64_t rows = c->rows;
    const tfm_module *home = &f->base;
    /* linear2: its input gradient replaces act once W2's gradient used it. */
    tfm__linear_backward(c->act, h, rows, h, f->w2, d, grad_y, d, c->act,
                         tfm__grad_of(home, f->w2),
                         f->b2 ? tfm__grad_of(home, f->b2) : NULL, c->acc);
    /* Through the dropout: the same mask and scale. */
    if (tfm__dropout_on(&c->drop))
        tfm__dropout_apply(&c->drop, 0, c->act, rows * h);
    const float *grad_first = c->act;
    if (f->gated) {
        gated_backward(f, c);
        grad_first = c->pre;
    } else if (c->on) {
        const size_t n = (size_t)(rows * h);
        for (size_t i = 0; i < n; i++)
            c->act[i] = c->on[i] ? c->act[i] : 0.0f;
    } else {
        tfm__activation_backward(c->pre, c->act, rows * h, f->activation);
    }
    /* The first product (W13 when gated): one backward. */
    tfm__linear_backward(c->x, d, rows, d, f->w1, h1, grad_first, h1, grad_x,
                         tfm__grad_of(home, f->w1),
                         f->b1 ? tfm__grad_of(home, f->b1) : NULL, c->acc);
}

tfm_status tfm__feed_forward_backward(const tfm__feed_forward *f,
                                      const float *x, int64_t rows,
                                      const tfm__dropout *drop,
                                      const float *grad_y, float *grad_x)
{
    tfm__ws_mark mark = tfm__ws_save();
    tfm__ff_kept kept;
    tfm_status st =
        tfm__feed_forward_forward_keep(f, x, rows, drop, NULL, &kept);
    if (st == TFM_OK)
        tfm__feed_forward_backward_kept(f, &kept, grad_y, grad_x);
    tfm__ws_restore(mark);
    return st;
}

/* check_x, with the network's widths (tfm__module_x_check_fn). */
static tfm_status check_x_widths(const tfm_module *m, const tfm_tensor *x,
                                 const char *what, int64_t *d_in,
                                 int64_t *d_out)
{
    const tfm__feed_forward *f = (const tfm__feed_forward *)m;
    *d_in = *d_out = f->d_model;
    return check_x(f, x, what);
}

tfm_status tfm_feed_forward_backward(tfm_module *ff, const tfm_tensor *x,
                                     const tfm_tensor *grad_output,
                                     tfm_tensor *grad_input)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__module_backward_check(
        ff, TFM_MODULE_FEED_FORWARD, "ff", "tfm_feed_forward_backward",
        check_x_widths, x, grad_output, grad_input);
    if (st != TFM_OK)
        return st;
    const tfm__feed_forward *f = (const tfm__feed_forward *)ff;
    if ((st = tfm__module_enter_grads(ff, "tfm_feed_forward_backward")))
        return st;
    const tfm__dropout drop = tfm__dropout_at(
        ff->dropout, tfm__dropout_backward_key(ff), TFM__DROP_HIDDEN);
    st = tfm__feed_forward_backward(f, x->data, x->shape[0] * x->shape[1],
                                    &drop, grad_output->data,
                                    grad_input ? grad_input->data : NULL);
    tfm__module_leave_grads(ff);
    return st;
}
