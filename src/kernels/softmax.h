/* Internal: numerically stable softmax of one row. */
#ifndef TFM_SRC_SOFTMAX_H
#define TFM_SRC_SOFTMAX_H

#include <stdint.h>

/* x[0..n-1] <- softmax(x): exp(x_i - max) / sum_j exp(x_j - max).
 * -inf entries get weight 0.  A row that is entirely -inf becomes all zeros
 * (not NaN).  NaN entries propagate (the row becomes NaN). */
void tfm__softmax_row(float *x, int64_t n);

/* One step of the online softmax (Milakov & Gimelshein 2018, as in
 * FlashAttention): x[0..n-1] holds the next tile of a row's logits, *m the
 * row's running maximum (-inf at the start) and *l its running sum of
 * exp(logit - *m) (0 at the start).  On return x holds exp(x - m_new), *m
 * and *l are updated, and the function returns the factor exp(m_old - m_new)
 * by which the caller rescales what it accumulated so far (1 when nothing
 * changes).  Masked (-inf) entries give 0; a NaN logit makes the tile and
 * *l NaN, so the row's result is NaN. */
float tfm__softmax_online_step(float *x, int64_t n, float *m, float *l);

/* log(sum_j exp(x_j)) of x[0..n-1] (n >= 1), as max + log sum exp(x_j -
 * max), the sum in double with libm's exp (the cross-entropy of loss.c
 * and the log-probabilities below). */
double tfm__log_sum_exp(const float *x, int64_t n);

/* out[0..n-1] <- log_softmax(x) = x_j - tfm__log_sum_exp(x) (the
 * log-probabilities a beam search adds up).  -inf entries stay -inf; a
 * row with a NaN or +inf entry, or entirely -inf, gives NaN.  out may be
 * x. */
void tfm__log_softmax_row(const float *x, int64_t n, float *out);

#endif
