/* LayerNorm (layers.h; Ba et al. 2016). */
#include <math.h>

#include "base/error.h"
#include "nn/layer_norm.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

static tfm_status layer_norm_macs(const tfm_module *m, int64_t batch,
                                  int64_t L, int64_t S, int64_t *acc)
{
    (void)m, (void)batch, (void)L, (void)S, (void)acc;
    return TFM_OK; /* no matrix products */
}

static const tfm__module_ops layer_norm_ops = { NULL, layer_norm_macs };

tfm_status tfm__layer_norm_new(int64_t d, float eps, int bias, int rms,
                               tfm__layer_norm **out)
{
    const char *what = rms ? "RMSNorm" : "LayerNorm";
    if (d < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s width %lld must be at least 1", what,
                         (long long)d);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s eps %g must be finite and >= 0", what,
                         (double)eps);
    tfm__layer_norm *n = (tfm__layer_norm *)tfm__module_alloc(
        sizeof *n, TFM_MODULE_LAYER_NORM, &layer_norm_ops);
    if (!n)
        return TFM_ERR_OUT_OF_MEMORY;
    n->d = d;
    n->eps = eps;
    n->rms = rms != 0;
    if (rms)
        bias = 0;
    tfm__param_spec specs[2] = {
        { "weight", 1, { d }, &n->weight, .init = TFM__INIT_ONE },
        { "bias", 1, { d }, &n->bias, .init = TFM__INIT_ZERO },
    };
    tfm_status st = tfm__module_own_params(&n->base, specs, bias ? 2 : 1);
    if (st != TFM_OK) {
        tfm_module_free(&n->base);
        return st;
    }
    for (int64_t i = 0; i < d; i++)
        n->weight[i] = 1.0f;
    *out = n;
    return TFM_OK;
}

/* The mean and 1 / sqrt(var + eps) of x[0 .. d-1], in double, in two
 * passes: the mean first, then the centred squares, so a large common
 * offset does not cancel catastrophically.  RMSNorm (rms nonzero): the
 * mean is 0 and var is the mean square. */
static void row_stats(const float *x, int64_t d, float eps, int rms,
                      double *mean, double *rstd)
{
    double sum = 0.0;
    for (int64_t i = 0; !rms && i < d; i++)
        sum += x[i];
    const double m = sum / (double)d;
    double sq = 0.0;
    for (int64_t i = 0; i < d; i++) {
        double c = x[i] - m;
        sq += c * c;
    }
    *mean = m;
    *rstd = 1.0 / sqrt(sq / (double)d + (double)eps);
}

/* row_stats of STATS_ROWS rows at once (row stride d), each row's sums in
 * the same order as row_stats (the same bits): the rows' dependent chains
 * of double additions interleave instead of running one after another
 * (a row of 512 was two chains of 512 additions, latency-bound). */
#define STATS_ROWS 4

static void rows_stats(const float *x, int64_t d, float eps, int rms,
                       double *mean, double *rstd)
{
    double sum[STATS_ROWS] = { 0.0 }, sq[STATS_ROWS] = { 0.0 };
    for (int64_t i = 0; !rms && i < d; i++)
        for (int k = 0; k < STATS_ROWS; k++)
            sum[k] += x[k * d + i];
    for (int k = 0; k < STATS_ROWS; k++)
        mean[k] = sum[k] / (double)d;
    for (int64_t i = 0; i < d; i++)
        for (int k = 0; k < STATS_ROWS; k++) {
            double c = x[k * d + i] - mean[k];
            sq[k] += c * c;
        }
    for (int k = 0; k < STATS_ROWS; k++)
        rstd[k] = 1.0 / sqrt(sq[k] / (double)d + (double)eps);
}

void tfm__layer_norm_run(const tfm__layer_norm *n, const float *x,
                         int64_t rows, float *out)
{
    const int64_t d = n->d;
    double mean[STATS_ROWS], inv[STATS_ROWS];
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        float *yr = out + r * d;
        /* (x may be out: a group's statistics are read before any of its
         * rows is written) */
        const int k = (int)(r % STATS_ROWS);
        if (k == 0 && rows - r >= STATS_ROWS)
            rows_stats(xr, d, n->eps, n->rms, mean, inv);
        else if (rows - (r - k) < STATS_ROWS)
            row_stats(xr, d, n->eps, n->rms, &mean[k], &inv[k]);
        if (n->bias)
            for (int64_t i = 0; i < d; i++)
                yr[i] = (float)((xr[i] - mean[k]) * inv[k]) * n->weight[i] +
                        n->bias[i];
        else
            for (int64_t i = 0; i < d; i++)
                yr[i] = (float)((xr[i] - mean[k]) * inv[k]) * n->weight[i];
    }
}

tfm_status tfm_layer_norm_create(int64_t d, float eps, tfm_module **out)
{
    return tfm_layer_norm_create_v2(d, eps, 1, out);
}

tfm_status tfm_layer_norm_create_v2(int64_t d, float eps, int bias,
                                    tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__layer_norm *n = NULL;
    tfm_status st = tfm__layer_norm_new(d, eps, bias != 0, 0, &n);
    if (st == TFM_OK)
        *out = &n->base;
    return st;
}

tfm_status tfm_rms_norm_create(int64_t d, float eps, tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__layer_norm *n = NULL;
    tfm_status st = tfm__layer_norm_new(d, eps, 0, 1, &n);
    if (st == TFM_OK)
        *out = &n->base;
    return st;
}

int tfm_layer_norm_is_rms(const tfm_module *norm)
{
    if (!norm || norm->kind != TFM_MODULE_LAYER_NORM)
        return -1;
    return ((const tfm__layer_norm *)norm)->rms;
}

tfm_status tfm_layer_norm_forward(const tfm_module *norm, const tfm_tensor *x,
                                  tfm_tensor *out)
{
    tfm_status st = tfm__module_check(norm, TFM_MODULE_LAYER_NORM, "norm");
    if (st != TFM_OK)
        return st;
    const tfm__layer_norm *n = (const tfm__layer_norm *)norm;
    if ((st = tfm__check_rows(x, n->d, out, n->d)) != TFM_OK)
        return st;
    tfm__layer_norm_run(n, x->data, x->numel / n->d, out->data);
    return TFM_OK;
}

void tfm__layer_norm_backward(const tfm__layer_norm *n, const float *x,
                              int64_t rows, const float *grad_y,
                              float *grad_x, float *grad_w, float *grad_b,
                              double *acc)
{
    const int64_t d = n->d;
    double *aw = acc, *ab = acc + d;
    for (int64_t i = 0; i < 2 * d; i++)
        acc[i] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *gr = grad_y + r * d;
        double mean, rstd;
        row_stats(xr, d, n->eps, n->rms, &mean, &rstd);
        double s1 = 0.0, s2 = 0.0;
        for (int64_t i = 0; i < d; i++) {
            const double xhat = (xr[i] - mean) * rstd;
            const double gy = (double)gr[i] * n->weight[i];
            s1 += gy;
            s2 += gy * xhat;
            aw[i] += (double)gr[i] * xhat;
            ab[i] += gr[i];
        }
        if (grad_x) {
            s1 = n->rms ? 0.0 : s1 / (double)d; /* RMSNorm: no mean */
            s2 /= (double)d;
            float *dx = grad_x + r * d;
            for (int64_t i = 0; i < d; i++) {
                const double xhat = (xr[i] - mean) * rstd;
                const double gy = (double)gr[i] * n->weight[i];
                dx[i] = (float)(rstd * (gy - s1 - xhat * s2));
            }
        }
    }
    for (int64_t i = 0; i < d; i++) {
        if (grad_w)
            grad_w[i] += (float)aw[i];
        if (grad_b)
            grad_b[i] += (float)ab[i];
    }
}

tfm_status tfm_layer_norm_backward(tfm_module *norm, const tfm_tensor *x,
                                   const tfm_tensor *grad_output,
                                   tfm_tensor *grad_input)
{
    tfm_status st = tfm__module_check(norm, TFM_MODULE_LAYER_NORM, "norm");
    if (st != TFM_OK)
        return st;
    const tfm__layer_norm *n = (const tfm__layer_norm *)norm;
    if ((st = tfm__check_backward_rows("tfm_layer_norm_backward", x, n->d,
                                       grad_output, n->d, grad_input)))
        return st;
    tfm__ws_mark mark = tfm__ws_save();
    double *acc = tfm__ws_alloc((size_t)(2 * n->d) * sizeof *acc);
    if (!acc) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "tfm_layer_norm_backward: out of memory");
    }
    if ((st = tfm__module_enter_grads(norm, "tfm_layer_norm_backward"))) {
        tfm__ws_restore(mark);
        return st;
    }
    tfm__layer_norm_backward(n, x->data, x->numel / n->d, grad_output->data,
                             grad_input ? grad_input->data : NULL,
                             tfm__param_grad(&norm->params[0]),
                             n->bias ? tfm__param_grad(&norm->params[1])
                                     : NULL,
                             acc);
    tfm__module_leave_grads(norm);
    tfm__ws_restore(mark);
    return TFM_OK;
}
