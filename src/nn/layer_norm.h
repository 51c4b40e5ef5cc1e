/* Internal: LayerNorm for the layers that contain it. */
#ifndef TFM_SRC_LAYER_NORM_H
#define TFM_SRC_LAYER_NORM_H

#include "nn/module_impl.h"
#include "transformer/layers.h"

typedef struct tfm__layer_norm {
    tfm_module base;
    int64_t d;
    float eps;
    int rms;                /* RMSNorm: no mean, no bias (Zhang & Sennrich) */
    float *weight;          /* [d] */
    float *bias;            /* [d], or NULL without bias */
} tfm__layer_norm;

/* A LayerNorm with "weight" and, when bias is nonzero, "bias"; rms
 * nonzero makes it an RMSNorm (layers.h: tfm_rms_norm_create), whose
 * "mean" is 0 and which has no bias (bias is ignored). */
tfm_status tfm__layer_norm_new(int64_t d, float eps, int bias, int rms,
                               tfm__layer_norm **out);

/* out [rows, d] = LayerNorm(x [rows, d]); out may be x. */
void tfm__layer_norm_run(const tfm__layer_norm *n, const float *x,
                         int64_t rows, float *out);

/* The backward of tfm__layer_norm_run (torch.autograd's for
 * nn.LayerNorm), per row with xhat = (x - mean) * rstd, gy = grad_y * weight:
 *   grad_x = rstd (gy - mean(gy) - xhat mean(gy xhat))
 *   (RMSNorm: mean 0 and no mean(gy) term: rstd (gy - xhat mean(gy xhat)))   (written, NULL:
 *                                                        skipped; may be x)
 *   grad_w += sum over rows of grad_y xhat,  grad_b += sum of grad_y
 * (accumulated, each NULL: skipped; summed in double in acc [2 d]).
 * The statistics are recomputed from x as the forward computes them. */
void tfm__layer_norm_backward(const tfm__layer_norm *n, const float *x,
                              int64_t rows, const float *grad_y,
                              float *grad_x, float *grad_w, float *grad_b,
                              double *acc);

#endif
