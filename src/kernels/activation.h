/* Internal: elementwise activations of the feed-forward network. */
#ifndef TFM_SRC_ACTIVATION_H
#define TFM_SRC_ACTIVATION_H

#include <stdint.h>
#include "transformer/layers.h"

/* x[0..n-1] <- activation(x), in place (layers.h gives the formulas). */
void tfm__activate(float *x, int64_t n, tfm_activation activation);

int tfm__activation_valid(tfm_activation activation);

/* The backward of tfm__activate: grad[i] <- grad[i] * f'(pre[i]), pre the
 * activation's input (the derivatives are in activation.c).  ReLU's
 * derivative at 0 is 0, as torch's. */
void tfm__activation_backward(const float *pre, float *grad, int64_t n,
                              tfm_activation activation);

#endif
