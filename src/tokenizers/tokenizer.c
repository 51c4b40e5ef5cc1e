/* Character-level tokenizer (tokenizer.h): one token per Unicode code point.
 *
 * The vocabulary is kept twice: by id (code point and its UTF-8 bytes, for
 * decoding) and by code point (for encoding): a direct table for ASCII and
 * a sorted array searched by bisection for everything else.  UTF-8 is
 * decoded by our own strict decoder (Unicode 15, table 3-7): overlong
 * forms, surrogates, code points above U+10FFFF, stray continuation bytes
 * and truncated sequences are all refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transformer/safetensors.h"
#include "transformer/tokenizer.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/number_parse.h"
#include "tokenizers/tokenizer_impl.h"
#include "base/utf8.h"

#define ASCII_LIMIT 128

/* One vocabulary entry: its code point and UTF-8 bytes. */
typedef struct tfm__token {
    uint32_t code_point;
    uint8_t n_bytes;          /* 1..4 */
    char bytes[4];
} tfm__token;

/* A non-ASCII code point and its id, in the sorted lookup array. */
typedef struct tfm__lookup {
    uint32_t code_point;
    int32_t id;
} tfm__lookup;

/* struct tfm_tokenizer is in tokenizer_impl.h: the character-level model
 * lives in the handle; the other kinds behind its ops. */

/* Describes code point c for a message: "'x' (U+0078)", or only "U+000A"
 * for control characters, which would garble the message. */
static void describe_code_point(uint32_t c, char *buf, size_t size)
{
    if (c < 0x20 || (c >= 0x7F && c < 0xA0)) {
        snprintf(buf, size, "U+%04X", (unsigned)c);
        return;
    }
    char bytes[5];
    bytes[tfm__utf8_encode(c, bytes)] = '\0';
    snprintf(buf, size, "'%s' (U+%04X)", bytes, (unsigned)c);
}

/* ---- Lookup ----------------------------------------------------------- */

static int compare_lookup(const void *a, const void *b)
{
    uint32_t x = ((const tfm__lookup *)a)->code_point;
    uint32_t y = ((const tfm__lookup *)b)->code_point;
    return (x > y) - (x < y);
}

/* Id of code point c, or -1 when it is not in the vocabulary. */
static int32_t lookup(const tfm_tokenizer *t, uint32_t c)
{
    if (c < ASCII_LIMIT)
        return t->ascii[c];
    int64_t lo = 0, hi = t->n_wide; /* search [lo, hi) */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        uint32_t m = t->wide[mid].code_point;
        if (m == c)
            return t->wide[mid].id;
        if (m < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* ---- Create, load, free ----------------------------------------------- */

static void destroy(tfm_tokenizer *tokenizer)
{
    if (tokenizer->ops)
        tokenizer->ops->free(tokenizer->model);
    for (int i = 0; i < tokenizer->n_specials; i++)
        tfm__free(tokenizer->specials[i].content);
    tfm__free(tokenizer->specials);
    tfm__free(tokenizer->tokens);
    tfm__free(tokenizer->wide);
    tfm__free(tokenizer);
}

static void destroy_zombie(tfm__lifetime *life)
{
    destroy((tfm_tokenizer *)(void *)life);
}

tfm_tokenizer *tfm__tokenizer_alloc(void)
{
    tfm_tokenizer *t = tfm__calloc(1, sizeof *t);
    if (!t)
        return NULL;
    tfm__lifetime_init(&t->life, destroy_zombie);
    for (int r = 0; r < TFM__ROLE_COUNT; r++)
        t->roles[r] = -1;
    return t;
}

void tfm_tokenizer_free(tfm_tokenizer *tokenizer)
{
    /* With a generator using it left, the generator's free destroys it. */
    if (tokenizer && tfm__lifetime_close(&tokenizer->life))
        destroy(tokenizer);
}

tfm_status tfm_tokenizer_create(const char *vocab, tfm_tokenizer **out)
{
    if (!vocab)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "vocab is NULL");
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    const unsigned char *s = (const unsigned char *)vocab;
    size_t len = strlen(vocab);
    if (len == 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "vocabulary is empty");

    /* Pass 1: validate, count tokens and non-ASCII ones. */
    int64_t count = 0, n_wide = 0;
    for (size_t pos = 0; pos < len;) {
        uint32_t c;
        size_t n;
        const char *why = tfm__utf8_decode(s + pos, len - pos, &c, &n);
        if (why)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "vocabulary is not valid UTF-8: %s at byte "
                             "offset %zu",
                             why, pos);
        count++;
        n_wide += c >= ASCII_LIMIT;
        pos += n;
    }
    if (count > INT32_MAX)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "vocabulary has %lld tokens, more than int32 ids "
                         "can number",
                         (long long)count);

    tfm_tokenizer *t = tfm__tokenizer_alloc();
    if (!t)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "out of memory allocating the tokenizer");
    t->vocab_size = count;
    t->n_wide = n_wide;
    t->tokens = tfm__malloc((size_t)count * sizeof *t->tokens);
    t->wide = tfm__malloc((size_t)(n_wide ? n_wide : 1) * sizeof *t->wide);
    if (!t->tokens || !t->wide) {
        tfm_tokenizer_free(t);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "out of memory allocating a vocabulary of %lld "
                         "tokens",
                         (long long)count);
    }
    for (int i = 0; i < ASCII_LIMIT; i++)
        t->ascii[i] = -1;

    /* Pass 2: fill both tables; ASCII duplicates show up at once. */
    int64_t id = 0, w = 0;
    for (size_t pos = 0; pos < len; id++) {
        uint32_t c;
        size_t n;
        (void)tfm__utf8_decode(s + pos, len - pos, &c, &n);
        tfm__token *tok = &t->tokens[id];
        tok->code_point = c;
        tok->n_bytes = (uint8_t)n;
        memcpy(tok->bytes, s + pos, n);
        if (c < ASCII_LIMIT) {
            if (t->ascii[c] >= 0) {
                char what[32];
                describe_code_point(c, what, sizeof what);
                tfm_status st = tfm__fail(
                    TFM_ERR_INVALID_ARGUMENT,
                    "vocabulary has character %s twice (ids %d and %lld)",
                    what, t->ascii[c], (long long)id);
                tfm_tokenizer_free(t);
                return st;
            }
            t->ascii[c] = (int32_t)id;
        } else {
            t->wide[w].code_point = c;
            t->wide[w].id = (int32_t)id;
            w++;
        }
        pos += n;
    }

    qsort(t->wide, (size_t)n_wide, sizeof *t->wide, compare_lookup);
    for (int64_t i = 1; i < n_wide; i++) {
        if (t->wide[i].code_point == t->wide[i - 1].code_point) {
            int32_t a = t->wide[i - 1].id, b = t->wide[i].id;
            char what[32];
            describe_code_point(t->wide[i].code_point, what, sizeof what);
            tfm_status st = tfm__fail(
                TFM_ERR_INVALID_ARGUMENT,
                "vocabulary has character %s twice (ids %d and %d)", what,
                a < b ? a : b, a < b ? b : a);
            tfm_tokenizer_free(t);
            return st;
        }
    }
    *out = t;
    return TFM_OK;
}

tfm_status tfm__tokenizer_load_path(const char *path, tfm_tokenizer **out)
{
    /* A directory or a vocabulary file (since 1.2): tokenizer_files.c. */
    tfm_status st = tfm__tokenizer_load_files(path, out);
    if (st != TFM_ERR_NOT_FOUND)
        return st;
    tfm_safetensors *file;
    st = tfm_safetensors_open(path, &file);
    if (st != TFM_OK)
        return st;

    const char *kind = tfm_safetensors_metadata(file, "tfm.tokenizer");
    const char *vocab = tfm_safetensors_metadata(file, "tfm.vocab");
    const char *size_text = tfm_safetensors_metadata(file, "tfm.vocab_size");
    tfm_tokenizer *t = NULL;
    if (!kind) {
        st = tfm__fail(TFM_ERR_FORMAT,
                       "%.200s: no \"tfm.tokenizer\" metadata (not a "
                       "model file with a tokenizer)",
                       path);
    } else if (strcmp(kind, "char") != 0) {
        st = tfm__fail(TFM_ERR_FORMAT,
                       "%.200s: unsupported tokenizer \"%.50s\" (only "
                       "\"char\" is known)",
                       path, kind);
    } else if (!vocab) {
        st = tfm__fail(TFM_ERR_FORMAT, "%.200s: no \"tfm.vocab\" metadata",
                       path);
    } else {
        st = tfm_tokenizer_create(vocab, &t);
    }
    if (st == TFM_OK && size_text) {
        /* The model's own vocabulary size, when given, must agree. */
        int64_t n;
        if (tfm__parse_int64(size_text, &n) != TFM__NUMBER_OK ||
            n != t->vocab_size) {
            st = tfm__fail(TFM_ERR_FORMAT,
                           "%.200s: \"tfm.vocab\" has %lld characters but "
                           "\"tfm.vocab_size\" is \"%.30s\"",
                           path, (long long)t->vocab_size, size_text);
            tfm_tokenizer_free(t);
        }
    }
    tfm_safetensors_close(file);
    if (st == TFM_OK)
        *out = t;
    return st;
}

int64_t tfm_tokenizer_vocab_size(const tfm_tokenizer *tokenizer)
{
    if (!tokenizer)
        return 0;
    if (tokenizer->ops)
        return tokenizer->ops->vocab(tokenizer->model)->size;
    return tokenizer->vocab_size;
}

/* ---- Encode, decode --------------------------------------------------- */

tfm_status tfm_tokenizer_encode(const tfm_tokenizer *tokenizer,
                                const char *text, size_t text_len,
                                int32_t *ids, int64_t capacity,
                                int64_t *n_ids)
{
    tfm_status st = tfm__encode_check(tokenizer, text, capacity, n_ids);
    if (st != TFM_OK)
        return st;
    if (tokenizer->ops)
        return tfm_tokenizer_encode_v2(tokenizer, text, text_len, NULL, 0, 0,
                                       ids, NULL, NULL, capacity, n_ids);

    /* Pass 1: validate everything and count, writing nothing. */
    const unsigned char *s = (const unsigned char *)text;
    int64_t count = 0;
    for (size_t pos = 0; pos < text_len; count++) {
        uint32_t c;
        size_t n;
        const char *why = tfm__utf8_decode(s + pos, text_len - pos, &c, &n);
        if (why)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "text is not valid UTF-8: %s at byte offset %zu",
                             why, pos);
        if (lookup(tokenizer, c) < 0) {
            char what[32];
            describe_code_point(c, what, sizeof what);
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "character %s at byte offset %zu is not in the "
                             "vocabulary",
                             what, pos);
        }
        pos += n;
    }
    if (count > 0 && (!ids || capacity < count)) {
        *n_ids = count;
        return tfm__fail(TFM_ERR_CAPACITY,
                         "text has %lld characters, room for %lld ids",
                         (long long)count, ids ? (long long)capacity : 0LL);
    }

    /* Pass 2: the text is known good. */
    int64_t k = 0;
    for (size_t pos = 0; pos < text_len; k++) {
        uint32_t c;
        size_t n;
        (void)tfm__utf8_decode(s + pos, text_len - pos, &c, &n);
        ids[k] = lookup(tokenizer, c);
        pos += n;
    }
    *n_ids = count;
    return TFM_OK;
}

tfm_status tfm_tokenizer_decode(const tfm_tokenizer *tokenizer,
                                const int32_t *ids, int64_t n_ids,
                                char *text, size_t capacity,
                                size_t *text_len)
{
    tfm_status st = tfm__decode_check(tokenizer, ids, n_ids, text, capacity,
                                      text_len);
    if (st != TFM_OK)
        return st;
    if (tokenizer->ops)
        return tfm_tokenizer_decode_v2(tokenizer, ids, n_ids, 0, text,
                                       capacity, text_len);

    size_t needed = 0; /* bytes without the NUL; at most 4 * n_ids */
    for (int64_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= tokenizer->vocab_size)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "id %d at position %lld is out of range "
                             "[0, %lld)",
                             ids[i], (long long)i,
                             (long long)tokenizer->vocab_size);
        needed += tokenizer->tokens[ids[i]].n_bytes;
    }
    if (capacity <= needed) {
        *text_len = needed;
        return tfm__fail(TFM_ERR_CAPACITY,
                         "text needs %zu bytes with its NUL, capacity is %zu",
                         needed + 1, capacity);
    }
    char *p = text;
    for (int64_t i = 0; i < n_ids; i++) {
        const tfm__token *tok = &tokenizer->tokens[ids[i]];
        memcpy(p, tok->bytes, tok->n_bytes);
        p += tok->n_bytes;
    }
    *p = '\0';
    *text_len = needed;
    return TFM_OK;
}
