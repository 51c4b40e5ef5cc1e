/* Internal: a read-only private mapping of a whole file, shared by
 * reference count between the readers that opened it (a GGUF or
 * safetensors file) and the parameters used where they lie in it
 * (transformer/weights.h: tfm_load_options.mmap).  Unmapped when the last
 * reference is released.
 *
 * The file is opened by the library's file door (base/file.h: regular
 * files only, without blocking).  A page of a mapping past the end of a
 * file truncated after mapping raises SIGBUS when touched; the loaders
 * call tfm__mapping_check after binding, which compares the file's size
 * with the mapping's, so a model is never returned over a file already
 * shorter than its mapping (weights.h states what remains the caller's:
 * replacing model files by rename, never truncating them in place). */
#ifndef TFM_SRC_MAPPING_H
#define TFM_SRC_MAPPING_H

#include <stddef.h>

#include "transformer/status.h"

typedef struct tfm__mapping tfm__mapping;

/* Maps path (at least min_bytes long, else TFM_ERR_FORMAT "too short"):
 * TFM_OK with *out holding one reference, or TFM_ERR_IO (cannot open or
 * map; not a regular file), TFM_ERR_OUT_OF_MEMORY; messages name path. */
tfm_status tfm__mapping_open(const char *path, size_t min_bytes,
                             tfm__mapping **out);

/* Another reference to m (NULL: no-op); returns m. */
tfm__mapping *tfm__mapping_retain(tfm__mapping *m);

/* Drops a reference (NULL: no-op); the last one unmaps. */
void tfm__mapping_release(tfm__mapping *m);

const void *tfm__mapping_data(const tfm__mapping *m);
size_t tfm__mapping_size(const tfm__mapping *m);
const char *tfm__mapping_path(const tfm__mapping *m);

/* TFM_OK when the file is still at least as long as the mapping, else
 * TFM_ERR_IO naming the file (it was truncated while mapped). */
tfm_status tfm__mapping_check(const tfm__mapping *m);

#endif
