/*
 * libtransformer: a character-level tokenizer.
 *
 * Each token is one Unicode code point; the vocabulary is the string of
 * those code points in id order (UTF-8), as stored in a model file's
 * "tfm.vocab" metadata with "tfm.tokenizer": "char".
 */
#ifndef TRANSFORMER_TOKENIZER_H
#define TRANSFORMER_TOKENIZER_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tfm_tokenizer tfm_tokenizer;

/* Builds a tokenizer from the vocabulary string (valid UTF-8, no code point
 * twice).  Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (empty,
 * invalid UTF-8, duplicate), TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_tokenizer_create(const char *vocab,
                                        tfm_tokenizer **out);

/* Reads "tfm.tokenizer" and "tfm.vocab" from a model file's metadata.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_IO, TFM_ERR_FORMAT (malformed file
 * or missing/unsupported tokenizer metadata), and those of
 * tfm_tokenizer_create. */
TFM_API tfm_status tfm_tokenizer_load(const char *path, tfm_tokenizer **out);

/* Frees the tokenizer.  NULL is a no-op. */
TFM_API void tfm_tokenizer_free(tfm_tokenizer *tokenizer);

/* Number of tokens (0 for NULL). */
TFM_API int64_t tfm_tokenizer_vocab_size(const tfm_tokenizer *tokenizer);

/* Encodes UTF-8 text (text_len bytes) into ids.  *n_ids receives the
 * number of tokens; when capacity is too small (or ids is NULL) nothing
 * is written, *n_ids still says how many are needed and the call returns
 * TFM_ERR_CAPACITY.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_INVALID_ARGUMENT (invalid UTF-8, or a character not in the
 * vocabulary: the message names it and its byte offset), TFM_ERR_CAPACITY. */
TFM_API tfm_status tfm_tokenizer_encode(const tfm_tokenizer *tokenizer,
                                        const char *text, size_t text_len,
                                        int32_t *ids, int64_t capacity,
                                        int64_t *n_ids);

/* Decodes ids into UTF-8 text, NUL-terminated.  *text_len receives the byte
 * length without the NUL; when capacity (bytes, including the NUL) is too
 * small nothing is written and TFM_ERR_CAPACITY says so, with *text_len set
 * to the length needed.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_INVALID_ARGUMENT (an id out of range), TFM_ERR_CAPACITY. */
TFM_API tfm_status tfm_tokenizer_decode(const tfm_tokenizer *tokenizer,
                                        const int32_t *ids, int64_t n_ids,
                                        char *text, size_t capacity,
                                        size_t *text_len);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_TOKENIZER_H */
