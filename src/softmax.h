/* Internal: numerically stable softmax of one row. */
#ifndef TFM_SRC_SOFTMAX_H
#define TFM_SRC_SOFTMAX_H

#include <stdint.h>

/* x[0..n-1] <- softmax(x): exp(x_i - max) / sum_j exp(x_j - max).
 * -inf entries get weight 0.  A row that is entirely -inf becomes all zeros
 * (not NaN).  NaN entries propagate (the row becomes NaN). */
void tfm__softmax_row(float *x, int64_t n);

#endif
