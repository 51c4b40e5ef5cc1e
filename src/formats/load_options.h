/* Internal: tfm_load_options (transformer/weights.h) as the loaders read
 * them. */
#ifndef TFM_SRC_LOAD_OPTIONS_H
#define TFM_SRC_LOAD_OPTIONS_H

#include "transformer/module.h"
#include "transformer/weights.h"

/* *o = options (NULL: the defaults), checked: TFM_OK or
 * TFM_ERR_INVALID_ARGUMENT (struct_size, dtype; message set). */
tfm_status tfm__load_options_read(const tfm_load_options *options,
                                  tfm_load_options *o);

/* tfm_model_load (v1 nonzero: on error *out is left as it was, as 1.2
 * documents) and tfm_model_load_v2 with checked options o: dispatches a
 * hub directory, a GGUF file or a model file (formats/model_file.c). */
tfm_status tfm__model_load_with(const char *path, const tfm_load_options *o,
                                int v1, struct tfm_module **out);

#endif
