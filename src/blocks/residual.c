/* Residual connections around sub-layers (residual.h; the sub-layer kinds
 * are sublayer.c's): one block's forward, evaluation and kept alike, and
 * its backward; a layer's chain of blocks; a layer's feed-forward network
 * and norms made in one place. */
#include "blocks/residual.h"
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "blocks/layer_config.h"
#include "nn/module_impl.h"
#include "base/workspace.h"

/* ---- The residual connection ----------------------------------------- */

/* The one forward of a residual block: y = post-norm: norm(x + f(x));
 * pre-norm: x + f(norm(x)), f's output through the branch's dropout.  h
 * [rows, d]: post-norm x + f(x), pre-norm norm(x) (kept for the backward
 * when fk is not NULL).  fk NULL: f runs (y may be x); else f's forward
 * keeps what its backward needs in *fk (y distinct from x). */
static tfm_status residual_forward(const tfm__sublayer *f,
                                   const tfm__layer_norm *norm,
                                   int norm_first, const tfm__dropout *branch,
                                   const float *x, float *y, float *h,
                                   int64_t rows, tfm__sublayer_kept *fk)
{
    const int64_t n = rows * norm->d;
    const int drop = tfm__dropout_on(branch);
    tfm_status st;
    if (norm_first) {
        /* y = x + f(z), z = LN(x) in h; f's output in place on h when
         * nothing is kept, else in y. */
        tfm__layer_norm_run(norm, x, rows, h);
        float *fo = fk ? y : h;
        if ((st = fk ? f->keep(f, h, fo, fk) : f->run(f, h, fo)) != TFM_OK)
            return st;
        if (drop)
            tfm__dropout_apply(branch, 0, fo, n);
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] + fo[i];
    } else {
        /* y = LN(h), h = x + f(x). */
        if ((st = fk ? f->keep(f, x, h, fk) : f->run(f, x, h)) != TFM_OK)
            return st;
        if (drop)
            tfm__dropout_apply(branch, 0, h, n);
        for (int64_t i = 0; i < n; i++)
            h[i] += x[i];
        tfm__layer_norm_run(norm, h, rows, y);
    }
    return TFM_OK;
}

tfm_status tfm__residual(const tfm__sublayer *f, const tfm__layer_norm *norm,
                         int norm_first, const tfm__dropout *branch, float *x,
                         float *tmp, int64_t rows)
{
    return residual_forward(f, norm, norm_first, branch, x, x, tmp, rows,
                            NULL);
}

tfm_status tfm__residual_forward_keep(const tfm__sublayer *f,
                                      const tfm__layer_norm *norm,
                                      int norm_first,
                                      const tfm__dropout *branch,
                                      const float *x, float *y, int64_t rows,
                                      float *scratch,
                                      tfm__residual_kept *kept)
{
    const int64_t d = norm->d, n = rows * d;
    tfm__residual_kept k = { .f = f, .norm = norm, .norm_first = norm_first,
                             .x = x, .rows = rows };
    if (tfm__dropout_on(branch)) {
        k.branch = *branch;
        if (!(k.gd = tfm__ws_floats((size_t)n)))
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "residual backward: out "
                             "of memory");
    }
    k.h = tfm__ws_floats((size_t)n);
    if (k.h && !scratch)
        scratch = tfm__ws_floats((size_t)(2 * n));
    k.g = k.h ? scratch : NULL;
    k.gf = k.g ? scratch + n : NULL;
    k.acc = k.gf ? tfm__ws_alloc((size_t)(2 * d) * sizeof *k.acc) : NULL;
    if (!k.acc)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "residual backward: out of "
                         "memory");
    tfm_status st = residual_forward(f, norm, norm_first, branch, x, y, k.h,
                                     rows, &k.fk);
    if (st == TFM_OK)
        *kept = k;
    return st;
}

tfm_status tfm__residual_blocks(const tfm__residual_step *steps, int n,
                                int norm_first, const float *x, float *y,
                                int64_t rows, int64_t tail, float *scratch,
                                tfm__residual_kept *kept, const char *what)
{
    const int64_t d = steps[0].norm->d, size = rows * d;
    tfm__ws_mark mark = tfm__ws_save();
    /* in[i]: block i's input; evaluation runs every block in place on y
     * (a copy of x) with tmp as each block's h. */
    const float *in[TFM__MAX_RESIDUAL_STEPS + 1] = { x };
    float *tmp = NULL;
    int ok = 1;
    if (kept) {
        for (int i = 1; ok && i < n; i++)
            ok = (in[i] = tfm__ws_floats((size_t)size)) != NULL;
        if (ok && !scratch)
            ok = (scratch = tfm__ws_floats((size_t)(2 * size))) != NULL;
    } else {
        ok = (tmp = tfm__ws_floats((size_t)size)) != NULL;
        for (int i = 1; i < n; i++)
            in[i] = y;
    }
    if (!ok) {
        tfm__ws_restore(mark);
        return kept ? tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                                "%s backward: out of memory", what)
                    : TFM_ERR_OUT_OF_MEMORY;
    }
    if (!kept && y != x)
        memcpy(y, x, (size_t)size * sizeof *y);
    tfm_status st = TFM_OK;
    for (int i = 0; st == TFM_OK && i < n; i++) {
        /* The last block on the last `tail` rows (evaluation only). */
        const int64_t r = i == n - 1 && !kept ? tail : rows;
        const int64_t off = (rows - r) * d;
        float *out = i == n - 1 ? y : (float *)in[i + 1];
        st = kept ? tfm__residual_forward_keep(steps[i].f, steps[i].norm,
                                               norm_first, &steps[i].branch,
                                               in[i], out, rows, scratch,
                                               &kept[i])
                  : residual_forward(steps[i].f, steps[i].norm, norm_first,
                                     &steps[i].branch, y + off, y + off, tmp,
                                     r, NULL);
    }
    if (!kept)
        tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__residual_blocks_backward(const tfm__residual_kept *kept,
                                         int n, float *g)
{
    tfm_status st = TFM_OK;
    for (int i = n - 1; st == TFM_OK && i >= 0; i--)
        st = tfm__residual_backward_kept(&kept[i], g, g);
    return st;
}

tfm_status tfm__residual_backward_kept(const tfm__residual_kept *k,
                                       const float *grad_y, float *grad_x)
{
    const tfm__layer_norm *norm = k->norm;
    const int64_t n = k->rows * norm->d;
    const tfm_module *home = &norm->base;
    float *gw = tfm__grad_of(home, norm->weight);
    float *gb = norm->bias ? tfm__grad_of(home, norm->bias) : NULL;
    tfm_status st;
    /* Under the branch's dropout f's output gradient is masked first
     * (into gd). */
    const int drop = tfm__dropout_on(&k->branch);
    if (k->norm_first) {
        /* g = f'(z)^T grad_y; grad_x = grad_y + LN'(x)^T g (into gf). */
        const float *gy = grad_y;
        if (drop) {
            tfm__dropout_copy_rows(&k->branch, 0, 0, grad_y, k->gd, 1, n, n);
            gy = k->gd;
        }
        if ((st = k->f->backward(k->f, &k->fk, gy, k->g)) != TFM_OK)
            return st;
        tfm__layer_norm_backward(norm, k->x, k->rows, k->g, k->gf, gw, gb,
                                 k->acc);
        for (int64_t i = 0; i < n; i++)
            grad_x[i] = grad_y[i] + k->gf[i];
    } else {
        /* g = LN'(h)^T grad_y (the norm's parameter gradients once f's
         * backward has succeeded); gf = f'(x)^T g; grad_x = g + gf. */
        tfm__layer_norm_backward(norm, k->h, k->rows, grad_y, k->g, NULL,
                                 NULL, k->acc);
        const float *gh = k->g;
        if (drop) {
            tfm__dropout_copy_rows(&k->branch, 0, 0, k->g, k->gd, 1, n, n);
            gh = k->gd;
        }
        if ((st = k->f->backward(k->f, &k->fk, gh, k->gf)) != TFM_OK)
            return st;
        tfm__layer_norm_backward(norm, k->h, k->rows, grad_y, NULL, gw, gb,
                                 k->acc);
        for (int64_t i = 0; i < n; i++)
            grad_x[i] = k->g[i] + k->gf[i];
    }
    return TFM_OK;
}

tfm_status tfm__residual_backward(const tfm__sublayer *f,
                                  const tfm__layer_norm *norm, int norm_first,
                                  const tfm__dropout *branch, const float *x,
                                  const float *grad_y, float *grad_x,
                                  int64_t rows)
{
    tfm__ws_mark mark = tfm__ws_save();
    float *y = tfm__ws_floats((size_t)(rows * norm->d));
    tfm__residual_kept kept;
    tfm_status st = y ? tfm__residual_forward_keep(f, norm, norm_first,
                                                   branch, x, y, rows, NULL,
                                                   &kept)
                      : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "residual "
                                  "backward: out of memory");
    if (st == TFM_OK)
        st = tfm__residual_backward_kept(&kept, grad_y, grad_x);
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__layer_ff_norms_new(tfm_module *parent,
                                   const tfm_layer_config *c, unsigned parts,
                                   tfm__feed_forward **ff,
                                   tfm__layer_norm **const norms[],
                                   int n_norms)
{
    const int bias = (parts & TFM__PART_BIAS) != 0;
    tfm_status st = tfm__feed_forward_new(c->d_model, c->d_ff, c->activation,
                                          bias, (parts & TFM__PART_GATED) != 0,
                                          ff);
    if (st == TFM_OK)
        st = tfm__module_adopt(parent, "", &(*ff)->base);
    for (int i = 0; st == TFM_OK && i < n_norms; i++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "norm%d.", i + 1);
        st = tfm__layer_norm_new(c->d_model, c->layer_norm_eps, bias,
                                 (parts & TFM__PART_RMS_NORM) != 0, norms[i]);
        if (st == TFM_OK)
            st = tfm__module_adopt(parent, prefix, &(*norms[i])->base);
    }
    return st;
}
