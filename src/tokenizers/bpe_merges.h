/* Internal: a BPE merge table, the pairs of vocabulary ids that merge, each
 * with its rank (its place in the merges list: lower merges first) and the
 * id it makes, and the vocabulary and merges of a tokenizer.json's "BPE"
 * model.  Shared by byte-level BPE (tokenizer_bpe.c: GPT-2) and
 * SentencePiece BPE read from a tokenizer.json (sentencepiece_json.c:
 * Llama), whose merges are ranked pairs, not piece scores.
 *
 * The table is open addressing on the key left << 32 | right, sized to a
 * power of two at least twice the merges it was made for. */
#ifndef TFM_SRC_BPE_MERGES_H
#define TFM_SRC_BPE_MERGES_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "transformer/status.h"
#include "tokenizers/vocab.h"

typedef struct tfm__merge {
    uint64_t key;      /* left << 32 | right; UINT64_MAX when empty */
    int32_t rank;
    int32_t merged;    /* the id of left's and right's strings joined */
} tfm__merge;

typedef struct tfm__merges {
    tfm__merge *slots; /* [n_slots] */
    size_t n_slots;    /* a power of two */
    int64_t n;         /* merges held */
} tfm__merges;

/* An empty table with room for capacity merges.  Errors:
 * TFM_ERR_OUT_OF_MEMORY (then *t is zeroed). */
tfm_status tfm__merges_init(tfm__merges *t, int64_t capacity);

/* Adds merge number rank of the tokens left and right (vocabulary strings
 * of v); a pair given again keeps its first, lower, rank.  `what` names
 * the file, `where` the line or entry, for messages.  Errors:
 * TFM_ERR_FORMAT (a token or the joined string not in v, more than
 * INT32_MAX merges or more than the table was made for),
 * TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__merges_add(tfm__merges *t, const tfm__vocab *v,
                           const char *left, size_t left_len,
                           const char *right, size_t right_len, int64_t rank,
                           const char *what, const char *where);

/* The merge of ids a and b, or NULL. */
const tfm__merge *tfm__merges_find(const tfm__merges *t, int32_t a,
                                   int32_t b);

/* Releases the table; leaves *t zeroed.  Safe on a zeroed table. */
void tfm__merges_free(tfm__merges *t);

/* The "vocab" of a tokenizer.json BPE model (or GPT-2's encoder.json,
 * Marian's vocab.json), a JSON object {token: id}.  Errors: TFM_ERR_FORMAT
 * (not an object, empty, an id that is not a non-negative integer or is
 * not below the number of tokens, an id or token given twice: the message
 * names the token), TFM_ERR_OUT_OF_MEMORY.
 * On failure *v may hold part of it: tfm__vocab_free it. */
tfm_status tfm__vocab_from_json(tfm__vocab *v, const cJSON *obj,
                                const char *what);

/* The "merges" of a tokenizer.json BPE model, in rank order, each
 * "left right" or ["left", "right"], into an empty table made here.
 * Errors: TFM_ERR_FORMAT (not an array, an entry of neither form, the
 * errors of tfm__merges_add), TFM_ERR_OUT_OF_MEMORY.  On failure *t may
 * hold part of it: tfm__merges_free it. */
tfm_status tfm__merges_from_json(tfm__merges *t, const tfm__vocab *v,
                                 const cJSON *merges, const char *what);

#endif
