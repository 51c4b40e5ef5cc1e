/* Internal: what cJSON lets through that other JSON readers read
 * differently, so that a file means one thing to every reader.
 *
 * NUL inside JSON strings:
 * cJSON decodes the escape \u0000 (and keeps a raw 0 byte) inside a string,
 * and hands out C strings, which end there: "w\u0000x" reads as "w", so a
 * file would mean one thing to this library and another to other readers.
 * Every reader of JSON (safetensors headers, tokenizer files) refuses such
 * a string. */
#ifndef TFM_SRC_JSON_CHECK_H
#define TFM_SRC_JSON_CHECK_H

#include <stddef.h>

#include <cJSON.h>

#include "transformer/status.h"

/* TFM_OK, or TFM_ERR_FORMAT naming the member whose key or value holds a
 * NUL, when root was parsed from text[0..n-1].  what (may be NULL) starts
 * the message (a file name). */
tfm_status tfm__json_check_nul(const char *text, size_t n, const cJSON *root,
                               const char *what);

/* Parses text[0..n-1] (a file's bytes) into *root, a JSON object the
 * caller frees with cJSON_Delete, refusing besides malformed JSON:
 *  - bytes that are not valid UTF-8 (RFC 8259 section 8.1; cJSON copies
 *    them into string values as they are), named by byte offset;
 *  - bytes other than JSON whitespace after the value (cJSON stops
 *    reading at the value's end; RFC 8259 and Python's json refuse them);
 *  - a key twice in one object, at any depth (cJSON's lookups find the
 *    first, Python's json and serde_json keep the last: transformers and
 *    tokenizers would read the other value);
 *  - a NUL in a string (tfm__json_check_nul);
 *  - a number out of the range of a double (cJSON reads 1e400 as
 *    infinity; JSON has no infinity), naming its member;
 *  - a value other than an object.
 * what (a file name) starts the messages.  TFM_ERR_FORMAT or
 * TFM_ERR_OUT_OF_MEMORY (message set); *root is untouched on error. */
tfm_status tfm__json_parse_object(const char *text, size_t n,
                                  const char *what, cJSON **root);

/* tfm__json_parse_object of the whole file at path (tfm__read_file, at
 * most max_bytes: TFM__FILE_MAX_CONFIG or TFM__FILE_MAX_TOKENIZER; path
 * starts the messages) into *root, the caller's to cJSON_Delete.  The
 * errors of tfm__read_file (TFM_ERR_IO, TFM_ERR_OUT_OF_MEMORY) and of
 * tfm__json_parse_object; *root is untouched on error.  The file's bytes
 * are freed before it returns. */
tfm_status tfm__json_read_object(const char *path, size_t max_bytes,
                                 cJSON **root);

#endif
