/* Internal: a whole file read into memory, for the readers of JSON and
 * text files (tokenizers, hub directories). */
#ifndef TFM_SRC_FILE_H
#define TFM_SRC_FILE_H

#include <stddef.h>

#include "transformer/status.h"

/* Whole file at path into a new NUL-terminated buffer *data of *len bytes
 * (the NUL not counted; freed with tfm__free).  TFM_ERR_IO (cannot open or
 * read), TFM_ERR_OUT_OF_MEMORY; message set, *data untouched on error. */
tfm_status tfm__read_file(const char *path, char **data, size_t *len);

#endif
