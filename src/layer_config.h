/* Internal: validation of a layer configuration (layers.h:
 * tfm_layer_config), shared by every layer, stack and model constructor. */
#ifndef TFM_SRC_LAYER_CONFIG_H
#define TFM_SRC_LAYER_CONFIG_H

#include "transformer/layers.h"

/* TFM_OK when d_model, n_heads and d_ff are >= 1, n_heads divides d_model,
 * the activation is known and layer_norm_eps is finite and >= 0; otherwise
 * TFM_ERR_NULL_ARGUMENT or TFM_ERR_INVALID_ARGUMENT (message set). */
tfm_status tfm__layer_config_check(const tfm_layer_config *config);

/* *out = the caller's options (NULL: the defaults of
 * tfm_layer_options_init), reading only pub->struct_size bytes and taking
 * the defaults for the rest; out->struct_size = sizeof *out.  Fails with
 * TFM_ERR_INVALID_ARGUMENT when struct_size does not cover struct_size
 * itself (message set). */
tfm_status tfm__layer_options_read(const tfm_layer_options *pub,
                                   tfm_layer_options *out);

#endif
