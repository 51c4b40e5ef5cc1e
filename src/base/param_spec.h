/* Internal: a parameter's declaration, before any module holds it: its
 * name, shape, where its data pointer goes and how it is initialised.  A
 * module declares its own with tfm__module_own_params (nn/module_impl.h);
 * an attention variant lists its learned ones (attention/variant.h). */
#ifndef TFM_SRC_PARAM_SPEC_H
#define TFM_SRC_PARAM_SPEC_H

#include <stdint.h>

#include "transformer/tensor.h"

/* How tfm_module_reset_parameters (module.h) draws a parameter: PyTorch's
 * default initialisation of the torch.nn module the parameter belongs to
 * (init.c).  Zero-initialised specs get TFM__INIT_ZERO. */
typedef enum tfm__init {
    TFM__INIT_ZERO = 0,       /* 0 (nn.MultiheadAttention's biases) */
    TFM__INIT_ONE,            /* 1 (LayerNorm weight) */
    TFM__INIT_CONST,          /* init_value */
    TFM__INIT_LINEAR,         /* nn.Linear weight, kaiming_uniform_(a =
                               * sqrt(5)): U(+-1/sqrt(n)), n = last axis */
    TFM__INIT_LINEAR_BIAS,    /* nn.Linear bias: U(+-1/sqrt(init_fan_in)) */
    TFM__INIT_XAVIER_UNIFORM, /* U(+-sqrt(6 / (fan_in + fan_out))) */
    TFM__INIT_XAVIER_NORMAL,  /* N(0, 2 / (fan_in + fan_out)) */
    TFM__INIT_NORMAL          /* N(0, 1) (nn.Embedding) */
} tfm__init;

/* One parameter: shape [shape[0] .. shape[rank - 1]]; *ptr receives its
 * data pointer once its storage exists. */
typedef struct tfm__param_spec {
    const char *name;
    int rank;
    int64_t shape[TFM_MAX_RANK]; /* rank <= 4 */
    float **ptr;
    tfm__init init;             /* default initialisation (0: zeros) */
    int64_t init_fan_in;        /* for TFM__INIT_LINEAR_BIAS */
    float init_value;           /* for TFM__INIT_CONST */
    /* Nonzero for a weight that may be stored in 16, 8 or 4 bits
     * (transformer/weights.h): rank 2, read only through the Linear door
     * (kernels/linear.h) or the embedding row read
     * (kernels/weight_store.h).  Its storage starts and ends on a page
     * boundary, so that converting it releases its float32 pages. */
    int convertible;
} tfm__param_spec;

#endif
