/*
 * libtransformer: status codes and the thread-local error message.
 *
 * Every fallible function returns a tfm_status.  TFM_OK is zero; every other
 * value is an error, and the calling thread's last-error message
 * (tfm_last_error()) then says what was wrong in plain words, e.g.
 * "key has 5 columns, expected 8".  A call that fails leaves its outputs and
 * the handles it was given exactly as they were.
 *
 * The enum is append-only: values never change meaning and are never
 * reused; new codes are added before TFM_STATUS_COUNT.
 */
#ifndef TRANSFORMER_STATUS_H
#define TRANSFORMER_STATUS_H

#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tfm_status {
    TFM_OK = 0,                 /* success */
    TFM_ERR_NULL_ARGUMENT = 1,  /* a required pointer or handle was NULL */
    TFM_ERR_INVALID_ARGUMENT = 2, /* a value out of its allowed range
                                   * (e.g. n_heads not dividing d_model,
                                   * a zero size, an unknown enum value) */
    TFM_ERR_SHAPE = 3,          /* tensor shapes do not fit together */
    TFM_ERR_OVERFLOW = 4,       /* a size computation would overflow */
    TFM_ERR_OUT_OF_MEMORY = 5,  /* an allocation failed */
    TFM_ERR_NOT_FOUND = 6,      /* no parameter / tensor / key of that name */
    TFM_ERR_WRONG_KIND = 7,     /* the module handle is of another kind */
    TFM_ERR_IO = 8,             /* a file could not be opened/read/written */
    TFM_ERR_FORMAT = 9,         /* a file is malformed */
    TFM_ERR_UNSUPPORTED = 10,   /* valid but not supported (dtype, rank) */
    TFM_ERR_CAPACITY = 11,      /* a cache or context length is exceeded */
    TFM_ERR_NON_FINITE = 12,    /* NaN or infinity where finite values are
                                 * required (e.g. parameters) */
    TFM_ERR_BUSY = 13,          /* the handle is in use by another thread
                                 * (a backward pass writing the same
                                 * gradients); since 1.2 */
    TFM_STATUS_COUNT            /* not a status; one past the last code */
} tfm_status;

/* A short constant description of a status code ("shape mismatch").
 * Unknown values give "unknown status".  Static storage; never NULL. */
TFM_API const char *tfm_status_string(tfm_status status);

/* The message of the last error raised on the calling thread, e.g.
 * "key has 5 columns, expected 8".  Thread-local storage owned by the
 * library, valid until the next failing call on this thread.  An empty
 * string when no call on this thread has failed. Successful calls do not
 * clear it. */
TFM_API const char *tfm_last_error(void);

/* Clears the calling thread's last-error message. */
TFM_API void tfm_clear_error(void);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_STATUS_H */
