/* Tokenizer vocabulary (vocab.h): tokens by id, ids by token. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "tokenizers/vocab.h"

uint64_t tfm__hash_bytes(const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void tfm__vocab_free(tfm__vocab *v)
{
    if (!v)
        return;
    if (v->tokens)
        for (int64_t i = 0; i < v->size; i++)
            tfm__free(v->tokens[i]);
    tfm__free(v->tokens);
    tfm__free(v->lengths);
    tfm__free(v->slots);
    memset(v, 0, sizeof *v);
}

tfm_status tfm__vocab_init(tfm__vocab *v, int64_t size)
{
    memset(v, 0, sizeof *v);
    if (size < 1 || size > INT32_MAX)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "vocabulary size %lld is outside [1, %d]",
                         (long long)size, INT32_MAX);
    size_t n_slots = 16;
    while (n_slots < (size_t)size * 2)
        n_slots *= 2;
    v->size = size;
    v->n_slots = n_slots;
    v->tokens = tfm__calloc((size_t)size, sizeof *v->tokens);
    v->lengths = tfm__calloc((size_t)size, sizeof *v->lengths);
    v->slots = tfm__malloc(n_slots * sizeof *v->slots);
    if (!v->tokens || !v->lengths || !v->slots) {
        tfm__vocab_free(v);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "out of memory for a vocabulary of %lld tokens",
                         (long long)size);
    }
    memset(v->slots, 0xff, n_slots * sizeof *v->slots);
    return TFM_OK;
}

/* Slot of the token, or of the empty slot where it would go. */
static size_t find_slot(const tfm__vocab *v, const char *bytes, size_t len)
{
    size_t mask = v->n_slots - 1;
    size_t i = (size_t)tfm__hash_bytes(bytes, len) & mask;
    for (;;) {
        int32_t id = v->slots[i];
        if (id < 0 || (v->lengths[id] == len &&
                       memcmp(v->tokens[id], bytes, len) == 0))
            return i;
        i = (i + 1) & mask;
    }
}

int32_t tfm__vocab_find(const tfm__vocab *v, const char *bytes, size_t len)
{
    return v->slots[find_slot(v, bytes, len)];
}

int64_t tfm__vocab_first_missing(const tfm__vocab *v)
{
    for (int64_t i = 0; i < v->size; i++)
        if (!v->tokens[i])
            return i;
    return -1;
}

tfm_status tfm__vocab_set(tfm__vocab *v, int64_t id, const char *bytes,
                          size_t len, const char *what)
{
    if (id < 0 || id >= v->size)
        return tfm__fail(TFM_ERR_FORMAT,
                         "%.200s: id %lld is outside [0, %lld) (ids must "
                         "number the tokens from 0 without gaps)",
                         what, (long long)id, (long long)v->size);
    if (v->tokens[id])
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: id %lld is given twice",
                         what, (long long)id);
    if (len > UINT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: token %lld is too long",
                         what, (long long)id);
    size_t slot = find_slot(v, bytes, len);
    if (v->slots[slot] >= 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "%.200s: token \"%.60s\" is given twice (ids %d and "
                         "%lld)",
                         what, v->tokens[v->slots[slot]], v->slots[slot],
                         (long long)id);
    char *copy = tfm__malloc(len + 1);
    if (!copy)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for a token");
    memcpy(copy, bytes, len);
    copy[len] = '\0';
    v->tokens[id] = copy;
    v->lengths[id] = (uint32_t)len;
    v->slots[slot] = (int32_t)id;
    return TFM_OK;
}
