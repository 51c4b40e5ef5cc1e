/* Internal: checkpoint directories in the Hugging Face hub layout
 * (model.h, tfm_model_load on a directory). */
#ifndef TFM_SRC_HUB_MODEL_H
#define TFM_SRC_HUB_MODEL_H

#include "transformer/module.h"

/* Loads the checkpoint directory dir (config.json, model.safetensors or
 * the shards of model.safetensors.index.json) as a model (model.h), its
 * weights kept in keep_dtype and bound in place when map_in_place
 * (tfm_load_options, transformer/weights.h; hub_plan.c: tfm__hub_plan_load).
 * On error *out is unchanged and the message names the file, key or
 * tensor. */
tfm_status tfm__hub_model_load(const char *dir, int keep_dtype,
                               int map_in_place, tfm_module **out);

#endif
