/* Internal: validation of a layer configuration (layers.h:
 * tfm_layer_config), shared by every layer, stack and model constructor. */
#ifndef TFM_SRC_LAYER_CONFIG_H
#define TFM_SRC_LAYER_CONFIG_H

#include "transformer/layers.h"

/* TFM_OK when d_model, n_heads and d_ff are >= 1, n_heads divides d_model,
 * the activation is known and layer_norm_eps is finite and >= 0; otherwise
 * TFM_ERR_NULL_ARGUMENT or TFM_ERR_INVALID_ARGUMENT (message set). */
tfm_status tfm__layer_config_check(const tfm_layer_config *config);

#endif
