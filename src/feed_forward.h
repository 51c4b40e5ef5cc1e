/* Internal: the position-wise feed-forward network. */
#ifndef TFM_SRC_FEED_FORWARD_H
#define TFM_SRC_FEED_FORWARD_H

#include "linear.h"
#include "module_impl.h"
#include "transformer/layers.h"

typedef struct tfm__feed_forward {
    tfm_module base;
    int64_t d_model, d_ff;
    tfm_activation activation;
    float *w1, *b1;     /* [d_ff, d_model], [d_ff] */
    float *w2, *b2;     /* [d_model, d_ff], [d_model] */
    /* Sub-modules "linear1", "linear2": views over w1, b1 and w2, b2. */
    tfm__linear_module *linear1, *linear2;
} tfm__feed_forward;

tfm_status tfm__feed_forward_new(int64_t d_model, int64_t d_ff,
                                 tfm_activation activation,
                                 tfm__feed_forward **out);

/* out [rows, d_model] = FF(x [rows, d_model]); out may be x.  Fails only
 * with TFM_ERR_OUT_OF_MEMORY, before writing. */
tfm_status tfm__feed_forward_run(const tfm__feed_forward *f, const float *x,
                                 int64_t rows, float *out);

tfm_status tfm__feed_forward_macs(const tfm__feed_forward *f, int64_t batch,
                                  int64_t L, int64_t *acc);

#endif
