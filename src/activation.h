/* Internal: elementwise activations of the feed-forward network. */
#ifndef TFM_SRC_ACTIVATION_H
#define TFM_SRC_ACTIVATION_H

#include <stdint.h>
#include "transformer/layers.h"

/* x[0..n-1] <- activation(x), in place (layers.h gives the formulas). */
void tfm__activate(float *x, int64_t n, tfm_activation activation);

int tfm__activation_valid(tfm_activation activation);

#endif
