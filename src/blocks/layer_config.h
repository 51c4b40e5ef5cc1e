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

/* The parts of a layer beyond tfm_layer_config, as the bits the layer,
 * stack and model constructors take ("parts"): TFM__PART_BIAS (biases
 * everywhere; tfm_layer_options.bias), TFM__PART_RMS_NORM (every norm an
 * RMSNorm; .rms_norm), TFM__PART_GATED (gated feed-forward; .gated).  1 is
 * PyTorch's layer. */
/* Whether o asks for a whole model's parts (type_vocab_size,
 * embedding_norm, final_norm 0, head_transform); the _no_ form fails with
 * TFM_ERR_INVALID_ARGUMENT naming `what` when it does (message set). */
int tfm__layer_options_has_model_parts(const tfm_layer_options *o);
tfm_status tfm__layer_options_no_model_parts(const tfm_layer_options *o,
                                             const char *what);

/* The start of a block's public constructor with tfm_layer_options (what:
 * the block, as for tfm__layer_options_no_model_parts): fails with
 * TFM_ERR_NULL_ARGUMENT when out is NULL, then *o as
 * tfm__layer_options_read, then tfm__layer_options_no_model_parts(o, what)
 * (messages set). */
tfm_status tfm__layer_options_for_block(const tfm_layer_options *options,
                                        const char *what, tfm_module **out,
                                        tfm_layer_options *o);

enum { TFM__PART_BIAS = 1, TFM__PART_RMS_NORM = 2, TFM__PART_GATED = 4 };
unsigned tfm__layer_parts(const tfm_layer_options *o);

#endif
