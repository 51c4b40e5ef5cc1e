/* Internal: LayerNorm for the layers that contain it. */
#ifndef TFM_SRC_LAYER_NORM_H
#define TFM_SRC_LAYER_NORM_H

#include "module_impl.h"
#include "transformer/layers.h"

typedef struct tfm__layer_norm {
    tfm_module base;
    int64_t d;
    float eps;
    float *weight, *bias;   /* [d] each */
} tfm__layer_norm;

tfm_status tfm__layer_norm_new(int64_t d, float eps, tfm__layer_norm **out);

/* out [rows, d] = LayerNorm(x [rows, d]); out may be x. */
void tfm__layer_norm_run(const tfm__layer_norm *n, const float *x,
                         int64_t rows, float *out);

#endif
