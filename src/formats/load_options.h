/* Internal: tfm_load_options (transformer/weights.h) as the loaders read
 * them. */
#ifndef TFM_SRC_LOAD_OPTIONS_H
#define TFM_SRC_LOAD_OPTIONS_H

#include "transformer/weights.h"

/* *o = options (NULL: the defaults), checked: TFM_OK or
 * TFM_ERR_INVALID_ARGUMENT (struct_size, dtype; message set). */
tfm_status tfm__load_options_read(const tfm_load_options *options,
                                  tfm_load_options *o);

#endif
