/* Internal: the position-wise feed-forward network. */
#ifndef TFM_SRC_FEED_FORWARD_H
#define TFM_SRC_FEED_FORWARD_H

#include "nn/linear.h"
#include "kernels/dropout.h"
#include "nn/module_impl.h"
#include "transformer/layers.h"

typedef struct tfm__feed_forward {
    tfm_module base;
    int64_t d_model, d_ff;
    tfm_activation activation;
    /* Gated (GLU; Shazeer 2020): hidden = act(x W1^T + b1) * (x W3^T + b3).
     * w3 follows w1 in memory (and b3 b1), so W1 and W3 are one [2 d_ff,
     * d_model] matrix, "W13", and both products are one GEMM. */
    int gated;
    int64_t d_first;    /* rows of the first product: d_ff, 2 d_ff gated */
    float *w1, *b1;     /* [d_ff, d_model], [d_ff] (NULL without bias) */
    float *w2, *b2;     /* [d_model, d_ff], [d_model] (NULL without bias) */
    float *w3, *b3;     /* gated: [d_ff, d_model], [d_ff]; else NULL */
    /* Sub-modules "linear1", "linear2" (and "linear3"): views over w1, b1,
     * w2, b2 (w3, b3). */
    tfm__linear_module *linear1, *linear2, *linear3;
} tfm__feed_forward;

/* bias 0: no "linear1.bias" / "linear2.bias" (b1, b2 NULL); gated
 * nonzero: also "linear3.weight" (and "linear3.bias"). */
tfm_status tfm__feed_forward_new(int64_t d_model, int64_t d_ff,
                                 tfm_activation activation, int bias,
                                 int gated, tfm__feed_forward **out);

/* out [rows, d_model] = FF(x [rows, d_model]); out may be x.  drop: NULL,
 * or dropout on the hidden activations [rows, d_ff] (dropout.h; torch's
 * linear2(dropout(activation(linear1(x))))).  Fails only with
 * TFM_ERR_OUT_OF_MEMORY, before writing. */
tfm_status tfm__feed_forward_run(const tfm__feed_forward *f, const float *x,
                                 int64_t rows, const tfm__dropout *drop,
                                 float *out);

/* What the backward needs, kept from the forward (workspace memory of
 * the calling thread, above the caller's mark): the input (the caller's)
 * and the hidden layer before and after the activation. */
typedef struct tfm__ff_kept {
    const float *x;
    int64_t rows;
    float *pre;         /* [rows, d_first]: x W1^T + b1 (| x W3^T + b3);
                         * NULL for ReLU (not gated), which keeps on */
    float *act;         /* [rows, d_ff]: the hidden layer after dropout */
    unsigned char *on;  /* ReLU: act > 0 ([rows, d_ff]), the derivative
                         * (torch's threshold_backward: result > 0; 0
                         * where dropout dropped, whose gradient is 0
                         * anyway), a quarter of pre's memory */
    float *scratch;     /* [d_ff] */
    double *acc;
    tfm__dropout drop;  /* the hidden activations' (zeroed: none) */
} tfm__ff_kept;

/* out [rows, d_model] = FF(x) (NULL: not wanted; not x), keeping in
 * *kept h = x W1^T + b1 and act(h).  Fails only with
 * TFM_ERR_OUT_OF_MEMORY, before writing anything. */
tfm_status tfm__feed_forward_forward_keep(const tfm__feed_forward *f,
                                          const float *x, int64_t rows,
                                          const tfm__dropout *drop,
                                          float *out, tfm__ff_kept *kept);

/* The backward (torch.autograd's) from what was kept:
 *   grad W2 += g^T act(h),  grad b2 += sum g,  grad h = (g W2) * act'(h),
 *   grad W1 += grad_h^T x,  grad b1 += sum grad_h,  grad_x = grad_h W1
 * into f's gradient memory (which must exist), every product one
 * cblas_sgemm.  grad_x (NULL: not wanted) may be x.  Consumes kept's act.
 * Cannot fail. */
void tfm__feed_forward_backward_kept(const tfm__feed_forward *f,
                                     const tfm__ff_kept *kept,
                                     const float *grad_y, float *grad_x);

/* Both in one: fails only with TFM_ERR_OUT_OF_MEMORY, before writing
 * anything. */
tfm_status tfm__feed_forward_backward(const tfm__feed_forward *f,
                                      const float *x, int64_t rows,
                                      const tfm__dropout *drop,
                                      const float *grad_y, float *grad_x);

tfm_status tfm__feed_forward_macs(const tfm__feed_forward *f, int64_t batch,
                                  int64_t L, int64_t *acc);

#endif
