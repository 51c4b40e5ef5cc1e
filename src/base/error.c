/* Status strings and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>

#include "base/error.h"

#define TFM_ERROR_CAPACITY 512

static _Thread_local char last_error[TFM_ERROR_CAPACITY];

const char *tfm_status_string(tfm_status status)
{
    switch (status) {
    case TFM_OK: return "success";
    case TFM_ERR_NULL_ARGUMENT: return "null argument";
    case TFM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case TFM_ERR_SHAPE: return "shape mismatch";
    case TFM_ERR_OVERFLOW: return "size overflow";
    case TFM_ERR_OUT_OF_MEMORY: return "out of memory";
    case TFM_ERR_NOT_FOUND: return "not found";
    case TFM_ERR_WRONG_KIND: return "wrong kind of module";
    case TFM_ERR_IO: return "input/output error";
    case TFM_ERR_FORMAT: return "malformed file";
    case TFM_ERR_UNSUPPORTED: return "unsupported";
    case TFM_ERR_CAPACITY: return "capacity exceeded";
    case TFM_ERR_NON_FINITE: return "non-finite value";
    case TFM_ERR_BUSY: return "handle in use by another thread";
    case TFM_STATUS_COUNT: break;
    }
    return "unknown status";
}

const char *tfm_last_error(void)
{
    return last_error;
}

void tfm_clear_error(void)
{
    last_error[0] = '\0';
}

tfm_status tfm__fail(tfm_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}
