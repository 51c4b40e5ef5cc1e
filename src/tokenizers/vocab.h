/* Internal: a tokenizer vocabulary, token strings by id and ids by string.
 *
 * Ids run from 0 to size - 1, each given exactly once; tokens are byte
 * strings (any bytes, NUL included), each given exactly once.  Lookup by
 * string is an open-addressing hash table (FNV-1a, linear probing) sized to
 * at least twice the vocabulary, so a probe sequence stays short. */
#ifndef TFM_SRC_VOCAB_H
#define TFM_SRC_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "transformer/status.h"

typedef struct tfm__vocab {
    int64_t size;         /* number of ids */
    char **tokens;        /* [size]: bytes of each id, NUL-terminated; NULL
                             until set */
    uint32_t *lengths;    /* [size]: byte length of each token */
    int32_t *slots;       /* [n_slots]: an id, or -1 for an empty slot */
    size_t n_slots;       /* a power of two >= 2 * size */
} tfm__vocab;

/* Allocates an empty vocabulary of size ids (1 <= size <= INT32_MAX).
 * Errors: TFM_ERR_INVALID_ARGUMENT, TFM_ERR_OUT_OF_MEMORY.  On failure *v
 * is left zeroed, so tfm__vocab_free is always safe. */
tfm_status tfm__vocab_init(tfm__vocab *v, int64_t size);

/* Gives id the token bytes[0 .. len-1] (copied).  Errors:
 * TFM_ERR_FORMAT (id out of range, id given twice, token given twice: the
 * message names both ids; `what` names the file for messages),
 * TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__vocab_set(tfm__vocab *v, int64_t id, const char *bytes,
                          size_t len, const char *what);

/* The first id that was never set, or -1 when every id has its token. */
int64_t tfm__vocab_first_missing(const tfm__vocab *v);

/* Id of the token bytes[0 .. len-1], or -1. */
int32_t tfm__vocab_find(const tfm__vocab *v, const char *bytes, size_t len);

/* Releases everything; leaves *v zeroed.  Safe on a zeroed vocabulary. */
void tfm__vocab_free(tfm__vocab *v);

/* FNV-1a of bytes[0 .. len-1] (shared by the tokenizers' other tables). */
uint64_t tfm__hash_bytes(const void *bytes, size_t len);

#endif
