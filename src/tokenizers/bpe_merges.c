/* BPE merge tables and a tokenizer.json's BPE vocabulary and merges
 * (bpe_merges.h).
 *
 * Source: the merges list of Sennrich et al. 2016 ("Neural Machine
 * Translation of Rare Words with Subword Units", section 3.2) as GPT-2's
 * vocab.bpe and Hugging Face tokenizers' BPE model (tokenizers/src/models/
 * bpe/serialization.rs) write it: one pair per entry, in the order learnt,
 * which is the order applied. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "tokenizers/bpe_merges.h"
#include "base/error.h"

static size_t merge_home(const tfm__merges *t, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (t->n_slots - 1);
}

tfm_status tfm__merges_init(tfm__merges *t, int64_t capacity)
{
    memset(t, 0, sizeof *t);
    size_t n_slots = 16;
    while (n_slots < (size_t)(capacity > 0 ? capacity : 0) * 2)
        n_slots *= 2;
    t->slots = tfm__malloc(n_slots * sizeof *t->slots);
    if (!t->slots)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for BPE merges");
    t->n_slots = n_slots;
    for (size_t i = 0; i < n_slots; i++)
        t->slots[i].key = UINT64_MAX;
    return TFM_OK;
}

tfm_status tfm__merges_add(tfm__merges *t, const tfm__vocab *v,
                           const char *left, size_t left_len,
                           const char *right, size_t right_len, int64_t rank,
                           const char *what, const char *where)
{
    int32_t a = tfm__vocab_find(v, left, left_len);
    int32_t b = tfm__vocab_find(v, right, right_len);
    if (a < 0 || b < 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "%.200s: merge %s names \"%.*s\", which is not in "
                         "the vocabulary",
                         what, where, a < 0 ? (int)(left_len > 60 ? 60 : left_len)
                                            : (int)(right_len > 60 ? 60 : right_len),
                         a < 0 ? left : right);
    char stack[256];
    char *joined = left_len + right_len <= sizeof stack
                       ? stack : tfm__malloc(left_len + right_len);
    if (!joined)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(joined, left, left_len);
    memcpy(joined + left_len, right, right_len);
    int32_t c = tfm__vocab_find(v, joined, left_len + right_len);
    if (joined != stack)
        tfm__free(joined);
    if (c < 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "%.200s: merge %s makes \"%.*s%.*s\", which is not "
                         "in the vocabulary",
                         what, where, (int)(left_len > 60 ? 60 : left_len),
                         left, (int)(right_len > 60 ? 60 : right_len), right);
    if (rank > INT32_MAX - 1 || (size_t)t->n + 1 > t->n_slots / 2)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: too many merges", what);
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = merge_home(t, key);
    while (t->slots[i].key != UINT64_MAX && t->slots[i].key != key)
        i = (i + 1) & (t->n_slots - 1);
    if (t->slots[i].key == key)
        return TFM_OK;  /* a repeated merge keeps its first (lower) rank */
    t->slots[i].key = key;
    t->slots[i].rank = (int32_t)rank;
    t->slots[i].merged = c;
    t->n++;
    return TFM_OK;
}

const tfm__merge *tfm__merges_find(const tfm__merges *t, int32_t a,
                                   int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = merge_home(t, key);; i = (i + 1) & (t->n_slots - 1)) {
        if (t->slots[i].key == key)
            return &t->slots[i];
        if (t->slots[i].key == UINT64_MAX)
            return NULL;
    }
}

void tfm__merges_free(tfm__merges *t)
{
    tfm__free(t->slots);
    memset(t, 0, sizeof *t);
}

tfm_status tfm__vocab_from_json(tfm__vocab *v, const cJSON *obj,
                                const char *what)
{
    if (!cJSON_IsObject(obj))
        return tfm__fail(TFM_ERR_FORMAT,
                         "%.200s: the vocabulary is not a JSON object", what);
    int64_t n = cJSON_GetArraySize(obj);
    if (n == 0)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: the vocabulary is empty",
                         what);
    tfm_status st = tfm__vocab_init(v, n);
    if (st != TFM_OK)
        return st;
    for (const cJSON *e = obj->child; e; e = e->next) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(d >= 0 && d <= INT32_MAX) || d != (double)(int64_t)d)
            return tfm__fail(TFM_ERR_FORMAT,
                             "%.200s: the id of \"%.60s\" is not a "
                             "non-negative integer",
                             what, e->string);
        /* The messages name the token, not only the id. */
        if (d >= (double)n)
            return tfm__fail(TFM_ERR_FORMAT,
                             "%.200s: the id %lld of \"%.60s\" is outside "
                             "[0, %lld) (ids must number the tokens from 0 "
                             "without gaps)",
                             what, (long long)d, e->string, (long long)n);
        if (v->tokens[(int64_t)d])
            return tfm__fail(TFM_ERR_FORMAT,
                             "%.200s: id %lld is given twice (\"%.60s\" and "
                             "\"%.60s\")",
                             what, (long long)d, v->tokens[(int64_t)d],
                             e->string);
        st = tfm__vocab_set(v, (int64_t)d, e->string, strlen(e->string), what);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

tfm_status tfm__merges_from_json(tfm__merges *t, const tfm__vocab *v,
                                 const cJSON *merges, const char *what)
{
    if (!cJSON_IsArray(merges))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: the BPE model has no "
                         "\"merges\" array", what);
    tfm_status st = tfm__merges_init(t, cJSON_GetArraySize(merges));
    int64_t rank = 0;
    for (const cJSON *e = merges->child; st == TFM_OK && e; e = e->next, rank++) {
        char where[40];
        snprintf(where, sizeof where, "number %lld", (long long)rank);
        const char *l = NULL, *r = NULL;
        size_t ln = 0, rn = 0;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (sp && sp != e->valuestring && sp[1] && !strchr(sp + 1, ' ')) {
                l = e->valuestring;
                ln = (size_t)(sp - l);
                r = sp + 1;
                rn = strlen(r);
            }
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(e->child) && cJSON_IsString(e->child->next)) {
            l = e->child->valuestring;
            ln = strlen(l);
            r = e->child->next->valuestring;
            rn = strlen(r);
        }
        if (!l)
            st = tfm__fail(TFM_ERR_FORMAT, "%.200s: merge %s is neither "
                           "\"left right\" nor [\"left\", \"right\"]",
                           what, where);
        else
            st = tfm__merges_add(t, v, l, ln, r, rn, rank, what, where);
    }
    return st;
}
