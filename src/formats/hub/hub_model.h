/* Internal: checkpoint directories in the Hugging Face hub layout
 * (model.h, tfm_model_load on a directory). */
#ifndef TFM_SRC_HUB_MODEL_H
#define TFM_SRC_HUB_MODEL_H

#include "transformer/module.h"

/* Loads the checkpoint directory dir (config.json, model.safetensors or
 * the shards of model.safetensors.index.json) as a model (model.h).  On
 * error *out is unchanged and the message names the file, key or tensor. */
tfm_status tfm__hub_model_load(const char *dir, tfm_module **out);

#endif
