/* Internal: setting the thread-local last-error message (status.h). */
#ifndef TFM_SRC_ERROR_H
#define TFM_SRC_ERROR_H

#include "transformer/status.h"

/* Formats the calling thread's last-error message (printf style) and
 * returns status, so that callers can write
 *   return tfm__fail(TFM_ERR_SHAPE, "key has %lld columns, expected %lld", ...); */
tfm_status tfm__fail(tfm_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
