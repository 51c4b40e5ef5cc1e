/* Internal: setting a module's parameters from a safetensors file. */
#ifndef TFM_SRC_CHECKPOINT_H
#define TFM_SRC_CHECKPOINT_H

#include "transformer/module.h"
#include "transformer/safetensors.h"

/* Reads every parameter of m from the tensor named prefix + name (F32, F16,
 * BF16 or F64, exact shape), checks them all, then sets them all: on
 * failure m is unchanged.  strict: no other tensor under prefix may exist.
 * Errors: TFM_ERR_FORMAT (missing, extra or misshapen tensor),
 * TFM_ERR_UNSUPPORTED, TFM_ERR_NON_FINITE, TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__load_parameters(tfm_module *m, const tfm_safetensors *f,
                                const char *prefix, int strict);

#endif
