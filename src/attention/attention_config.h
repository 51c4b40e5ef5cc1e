/* Internal: reading, checking and writing tfm_attention_config
 * (variants.h) across ABI versions. */
#ifndef TFM_SRC_ATTENTION_CONFIG_H
#define TFM_SRC_ATTENTION_CONFIG_H

#include "transformer/attention.h"

/* Most random blocks per query block BigBird may draw (variants.h). */
#define TFM__MAX_RANDOM_BLOCKS 4096

/* Copies pub (NULL = the defaults) into *out, reading only
 * pub->struct_size bytes and taking defaults for the rest; out->struct_size
 * becomes sizeof *out.  Fails with TFM_ERR_INVALID_ARGUMENT when
 * struct_size does not cover struct_size and score (message set). */
tfm_status tfm__attention_config_read(const tfm_attention_config *pub,
                                      tfm_attention_config *out);

/* Validates a read config for a layer of n_heads query heads with widths
 * d_k and d_v (message set, naming the field). */
tfm_status tfm__attention_config_check(const tfm_attention_config *c,
                                       int64_t n_heads, int64_t d_k,
                                       int64_t d_v);

/* Writes c into pub, at most pub->struct_size bytes, keeping
 * pub->struct_size.  Fails like tfm__attention_config_read. */
tfm_status tfm__attention_config_write(const tfm_attention_config *c,
                                       tfm_attention_config *pub);

/* Nonzero when c is plain scaled dot-product attention. */
int tfm__attention_config_is_default(const tfm_attention_config *c);

#endif
