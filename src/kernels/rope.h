/* Internal: rotary position embeddings (Su et al. 2021, "RoFormer",
 * eq. (34); variants.h: tfm_rope). */
#ifndef TFM_SRC_ROPE_H
#define TFM_SRC_ROPE_H

#include "transformer/attention.h"

/* Rotates, in place, `rows` rows of `heads` heads of d_k values:
 * element c of head h of row r is x[h * hstride + r * ld + c], and row r
 * is at position pos0 + r.  Rotation pair i (i = 0 .. rope_dims/2 - 1)
 * is (2i, 2i+1) for TFM_ROPE_ADJACENT and (i, i + rope_dims/2) for
 * TFM_ROPE_HALF; it turns by theta = p * base^(-2i/rope_dims), computed in
 * double:  (a, b) <- (a cos theta - b sin theta, a sin theta + b cos theta).
 * Dimensions rope_dims .. d_k-1 are left alone.  rope_dims must be even and
 * at most d_k; layout TFM_ROPE_NONE does nothing.  inverse: turn by
 * -theta instead, (a, b) <- (a cos theta + b sin theta, -a sin theta +
 * b cos theta): the rotation's transpose, which takes the gradient of the
 * rotated rows to the gradient of the rows before it.  Cannot fail.
 * Called only by the attention door (attention_job.c). */
void tfm__rope_apply(float *x, int64_t rows, int64_t ld, int64_t heads,
                     int64_t hstride, int64_t pos0, tfm_rope layout,
                     int64_t rope_dims, double base, int inverse);

#endif
