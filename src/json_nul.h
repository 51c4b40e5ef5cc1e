/* Internal: NUL inside JSON strings.
 *
 * cJSON decodes the escape \u0000 (and keeps a raw 0 byte) inside a string,
 * and hands out C strings, which end there: "w\u0000x" reads as "w", so a
 * file would mean one thing to this library and another to other readers.
 * Every reader of JSON (safetensors headers, tokenizer files) refuses such
 * a string. */
#ifndef TFM_SRC_JSON_NUL_H
#define TFM_SRC_JSON_NUL_H

#include <stddef.h>

#include <cJSON.h>

#include "transformer/status.h"

/* TFM_OK, or TFM_ERR_FORMAT naming the member whose key or value holds a
 * NUL, when root was parsed from text[0..n-1].  what (may be NULL) starts
 * the message (a file name). */
tfm_status tfm__json_check_nul(const char *text, size_t n, const cJSON *root,
                               const char *what);

#endif
