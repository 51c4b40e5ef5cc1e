/* Internal: the Linear module (layers.h: tfm_linear_create), also used as
 * a view over another module's weights ("linear1" of a feed-forward
 * network, "out_proj" of multi-head attention). */
#ifndef TFM_SRC_LINEAR_H
#define TFM_SRC_LINEAR_H

#include "nn/module_impl.h"

typedef struct tfm__linear_module {
    tfm_module base;
    int64_t in_features, out_features;
    float *weight;      /* [out_features, in_features] */
    float *bias;        /* [out_features] or NULL */
} tfm__linear_module;

/* A Linear module with its own zeroed weight and bias (bias nonzero). */
tfm_status tfm__linear_module_new(int64_t in_features, int64_t out_features,
                                  int bias, tfm__linear_module **out);

/* A Linear module whose "weight" and "bias" parameters are weight [out,
 * in] and bias [out] (or NULL) of another module: no storage of its own,
 * so that setting either parameter through it changes that module.  The
 * other module (home, whose storage holds them) owns it (tfm__module_add_child) and frees it
 * before its own storage. */
tfm_status tfm__linear_view_new(int64_t in_features, int64_t out_features,
                                float *weight, float *bias, tfm_module *home,
                                tfm__linear_module **out);

#endif
