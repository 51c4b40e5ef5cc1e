/* Every kind's common half (tokenizer.h, since 1.2): special tokens matched
 * in the text, framing of one text or a pair, offsets and type ids, decode
 * with special tokens left out, token strings and roles.  The models
 * themselves are in tokenizer.c (char), tokenizer_bpe.c, .... */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "tokenizers/tokenizer_impl.h"

static const char *const ROLE_NAMES[TFM__ROLE_COUNT] = {
    "bos", "eos", "unk", "pad", "cls", "sep", "mask",
};

int tfm__role_index(const char *name)
{
    for (int r = 0; r < TFM__ROLE_COUNT; r++)
        if (strcmp(name, ROLE_NAMES[r]) == 0)
            return r;
    return -1;
}

int tfm__role_of_token(const char *content)
{
    static const struct { const char *name; int role; } NAMES[] = {
        { "[UNK]", TFM__ROLE_UNK }, { "<unk>", TFM__ROLE_UNK },
        { "[CLS]", TFM__ROLE_CLS }, { "[SEP]", TFM__ROLE_SEP },
        { "[PAD]", TFM__ROLE_PAD }, { "<pad>", TFM__ROLE_PAD },
        { "[MASK]", TFM__ROLE_MASK }, { "<mask>", TFM__ROLE_MASK },
        { "<s>", TFM__ROLE_BOS }, { "</s>", TFM__ROLE_EOS },
        { "<|endoftext|>", TFM__ROLE_EOS },
    };
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(content, NAMES[i].name) == 0)
            return NAMES[i].role;
    return -1;
}

/* ---- Growing arrays ---------------------------------------------------- */

tfm_status tfm__token_list_push(tfm__token_list *l, int32_t id, int64_t begin,
                                int64_t end)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 64;
        int32_t *ids = tfm__realloc(l->ids, (size_t)cap * sizeof *ids);
        if (!ids)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for %lld "
                             "tokens", (long long)cap);
        l->ids = ids;
        int64_t *off = tfm__realloc(l->offsets, (size_t)cap * 2 * sizeof *off);
        if (!off)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for %lld "
                             "tokens", (long long)cap);
        l->offsets = off;
        l->cap = cap;
    }
    l->ids[l->n] = id;
    l->offsets[2 * l->n] = begin;
    l->offsets[2 * l->n + 1] = end;
    l->n++;
    return TFM_OK;
}

void tfm__token_list_free(tfm__token_list *l)
{
    tfm__free(l->ids);
    tfm__free(l->offsets);
    memset(l, 0, sizeof *l);
}

tfm_status tfm__bytes_append(tfm__bytes *b, const char *data, size_t len)
{
    if (b->cap - b->n < len + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < len + 1)
            cap *= 2;
        char *p = tfm__realloc(b->data, cap);
        if (!p)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "out of memory for %zu bytes of text", cap);
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->n, data, len);
    b->n += len;
    return TFM_OK;
}

/* ---- Handles ----------------------------------------------------------- */

tfm_status tfm__tokenizer_wrap(const tfm__tokenizer_ops *ops, void *model,
                               tfm_tokenizer **out)
{
    tfm_tokenizer *t = tfm__tokenizer_alloc();
    if (!t) {
        ops->free(model);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "out of memory allocating the tokenizer");
    }
    t->ops = ops;
    t->model = model;
    *out = t;
    return TFM_OK;
}

tfm_status tfm__tokenizer_add_special(tfm_tokenizer *t, int32_t id,
                                      const char *content, size_t len,
                                      int role)
{
    const tfm__vocab *v = t->ops->vocab(t->model);
    if (id < 0 || id >= v->size)
        return tfm__fail(TFM_ERR_FORMAT, "special token id %d is outside the "
                         "vocabulary [0, %lld)", id, (long long)v->size);
    if (role >= 0)
        t->roles[role] = id;
    if (!content) {
        content = v->tokens[id];
        len = v->lengths[id];
    }
    for (int i = 0; i < t->n_specials; i++)
        if (t->specials[i].id == id)
            return TFM_OK;
    if (len == 0)
        return tfm__fail(TFM_ERR_FORMAT, "special token %d is empty", id);
    tfm__special *s = tfm__realloc(t->specials,
                                   (size_t)(t->n_specials + 1) * sizeof *s);
    if (!s)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    t->specials = s;
    char *copy = tfm__malloc(len + 1);
    if (!copy)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(copy, content, len);
    copy[len] = '\0';
    s[t->n_specials].id = id;
    s[t->n_specials].content = copy;
    s[t->n_specials].len = len;
    t->n_specials++;
    return TFM_OK;
}

tfm_tokenizer_kind tfm_tokenizer_get_kind(const tfm_tokenizer *t)
{
    return t && t->ops ? t->ops->kind : TFM_TOKENIZER_CHAR;
}

int tfm_tokenizer_is_special(const tfm_tokenizer *t, int32_t id)
{
    if (!t)
        return 0;
    for (int i = 0; i < t->n_specials; i++)
        if (t->specials[i].id == id)
            return 1;
    return 0;
}

/* ---- Encode ------------------------------------------------------------ */

/* The character-level model, by way of its 1.0 function. */
static tfm_status encode_chars(const tfm_tokenizer *t, const char *text,
                               size_t len, int64_t base, tfm__token_list *out)
{
    int64_t n = 0;
    tfm_status st = tfm_tokenizer_encode(t, text, len, NULL, 0, &n);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY)
        return st;
    int32_t *ids = tfm__malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    st = tfm_tokenizer_encode(t, text, len, ids, n, &n);
    size_t pos = 0;
    for (int64_t i = 0; st == TFM_OK && i < n; i++) {
        unsigned char b = (unsigned char)text[pos];
        size_t w = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        st = tfm__token_list_push(out, ids[i], base + (int64_t)pos,
                                  base + (int64_t)(pos + w));
        pos += w;
    }
    tfm__free(ids);
    return st;
}

/* The model's tokens of text[0 .. len-1], which holds no special token. */
static tfm_status encode_plain(const tfm_tokenizer *t, const char *text,
                               size_t len, int64_t base, tfm__token_list *out)
{
    if (len == 0)
        return TFM_OK;
    if (!t->ops)
        return encode_chars(t, text, len, base, out);
    return t->ops->encode(t->model, text, len, base, out);
}

/* The earliest special token in text[from ..]; the longest one there when
 * several begin at the same byte.  Returns its index or -1. */
static int next_special(const tfm_tokenizer *t, const char *text, size_t len,
                        size_t from, size_t *at)
{
    for (size_t p = from; p < len; p++) {
        int best = -1;
        for (int i = 0; i < t->n_specials; i++) {
            const tfm__special *s = &t->specials[i];
            if (s->content[0] == text[p] && s->len <= len - p &&
                memcmp(s->content, text + p, s->len) == 0 &&
                (best < 0 || s->len > t->specials[best].len))
                best = i;
        }
        if (best >= 0) {
            *at = p;
            return best;
        }
    }
    return -1;
}

/* Tokens of one text, special tokens matched in it when split is set. */
static tfm_status encode_text(const tfm_tokenizer *t, const char *text,
                              size_t len, int split, tfm__token_list *out)
{
    size_t pos = 0;
    while (split && t->n_specials > 0) {
        size_t at;
        int k = next_special(t, text, len, pos, &at);
        if (k < 0)
            break;
        tfm_status st = encode_plain(t, text + pos, at - pos, (int64_t)pos,
                                     out);
        if (st != TFM_OK)
            return st;
        const tfm__special *s = &t->specials[k];
        st = tfm__token_list_push(out, s->id, (int64_t)at,
                                  (int64_t)(at + s->len));
        if (st != TFM_OK)
            return st;
        pos = at + s->len;
    }
    return encode_plain(t, text + pos, len - pos, (int64_t)pos, out);
}

/* Appends a token the framing adds: offsets [0, 0). */
static tfm_status add_framing(const tfm_tokenizer *t, int role,
                              tfm__token_list *out)
{
    if (t->roles[role] < 0)
        return TFM_OK;
    return tfm__token_list_push(out, t->roles[role], 0, 0);
}

tfm_status tfm__encode_check(const tfm_tokenizer *t, const char *text,
                             int64_t capacity, const int64_t *n_ids)
{
    if (!t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "tokenizer is NULL");
    if (!text)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "text is NULL");
    if (!n_ids)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "n_ids is NULL");
    if (capacity < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "capacity (%lld) is negative", (long long)capacity);
    return TFM_OK;
}

tfm_status tfm_tokenizer_encode_v2(const tfm_tokenizer *tokenizer,
                                   const char *text, size_t text_len,
                                   const char *pair, size_t pair_len,
                                   unsigned flags, int32_t *ids,
                                   int32_t *type_ids, int64_t *offsets,
                                   int64_t capacity, int64_t *n_ids)
{
    tfm_status st = tfm__encode_check(tokenizer, text, capacity, n_ids);
    if (st != TFM_OK)
        return st;
    if (flags & ~(TFM_ENCODE_ADD_SPECIAL | TFM_ENCODE_SPLIT_SPECIAL))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "unknown encode flags 0x%x",
                         flags);
    const tfm_tokenizer *t = tokenizer;
    int split = (flags & TFM_ENCODE_SPLIT_SPECIAL) != 0;
    tfm__framing frame = (flags & TFM_ENCODE_ADD_SPECIAL) ? t->framing
                                                         : TFM__FRAME_NONE;
    /* The role framing adds before each text, and after it (after the
     * last text only, for Marian's). */
    int before = frame == TFM__FRAME_BOS ? TFM__ROLE_BOS : -1;
    int after = frame == TFM__FRAME_BERT  ? TFM__ROLE_SEP
                : frame == TFM__FRAME_EOS ||
                  frame == TFM__FRAME_EOS_END ? TFM__ROLE_EOS : -1;
    int after_first = frame == TFM__FRAME_EOS_END && pair ? -1 : after;
    tfm__token_list list = { 0 };
    int64_t first_len = 0;
    if (frame == TFM__FRAME_BERT)
        st = add_framing(t, TFM__ROLE_CLS, &list);
    if (st == TFM_OK && before >= 0)
        st = add_framing(t, before, &list);
    if (st == TFM_OK)
        st = encode_text(t, text, text_len, split, &list);
    if (st == TFM_OK && after_first >= 0)
        st = add_framing(t, after_first, &list);
    first_len = list.n;
    if (st == TFM_OK && pair) {
        if (before >= 0)
            st = add_framing(t, before, &list);
        if (st == TFM_OK)
            st = encode_text(t, pair, pair_len, split, &list);
        if (st == TFM_OK && after >= 0)
            st = add_framing(t, after, &list);
    }
    if (st != TFM_OK) {
        tfm__token_list_free(&list);
        return st;
    }
    if (list.n > 0 && (!ids || capacity < list.n)) {
        *n_ids = list.n;
        tfm__token_list_free(&list);
        return tfm__fail(TFM_ERR_CAPACITY,
                         "the text has %lld tokens, room for %lld",
                         (long long)*n_ids, ids ? (long long)capacity : 0LL);
    }
    if (list.n > 0) {
        memcpy(ids, list.ids, (size_t)list.n * sizeof *ids);
        if (offsets)
            memcpy(offsets, list.offsets, (size_t)list.n * 2 * sizeof *offsets);
        if (type_ids)
            for (int64_t i = 0; i < list.n; i++)
                type_ids[i] = i >= first_len;
    }
    *n_ids = list.n;
    tfm__token_list_free(&list);
    return TFM_OK;
}

/* ---- Decode, token strings, roles -------------------------------------- */

void tfm__clean_up_tokenization(tfm__bytes *b, size_t from)
{
    static const char *const FROM[] = { " .", " ?", " !", " ,", " ' ",
                                        " n't", " 'm", " 's", " 've",
                                        " 're" };
    static const char *const TO[] = { ".", "?", "!", ",", "'", "n't", "'m",
                                      "'s", "'ve", "'re" };
    for (size_t r = 0; r < sizeof FROM / sizeof FROM[0]; r++) {
        size_t fl = strlen(FROM[r]), tl = strlen(TO[r]), w = from;
        for (size_t p = from; p < b->n;) {
            if (p + fl <= b->n && memcmp(b->data + p, FROM[r], fl) == 0) {
                memmove(b->data + w, TO[r], tl);
                w += tl;
                p += fl;
            } else {
                b->data[w++] = b->data[p++];
            }
        }
        b->n = w;
    }
}

tfm_status tfm__decode_check(const tfm_tokenizer *t, const int32_t *ids,
                             int64_t n_ids, const char *text,
                             size_t capacity, const size_t *text_len)
{
    if (!t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "tokenizer is NULL");
    if (!ids && n_ids > 0)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "ids is NULL");
    if (!text && capacity > 0)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "text is NULL");
    if (!text_len)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "text_len is NULL");
    if (n_ids < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "n_ids (%lld) is negative",
                         (long long)n_ids);
    return TFM_OK;
}

tfm_status tfm_tokenizer_decode_v2(const tfm_tokenizer *tokenizer,
                                   const int32_t *ids, int64_t n_ids,
                                   unsigned flags, char *text,
                                   size_t capacity, size_t *text_len)
{
    const tfm_tokenizer *t = tokenizer;
    tfm_status st = tfm__decode_check(t, ids, n_ids, text, capacity, text_len);
    if (st != TFM_OK)
        return st;
    if (flags & ~TFM_DECODE_SKIP_SPECIAL)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "unknown decode flags 0x%x",
                         flags);
    if (!t->ops) /* character-level: no special tokens */
        return tfm_tokenizer_decode(t, ids, n_ids, text, capacity, text_len);
    int64_t size = t->ops->vocab(t->model)->size;
    int32_t *kept = tfm__malloc((size_t)(n_ids ? n_ids : 1) * sizeof *kept);
    if (!kept)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t n = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= size) {
            tfm__free(kept);
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "id %d at position %lld is out of range "
                             "[0, %lld)",
                             ids[i], (long long)i, (long long)size);
        }
        if (!(flags & TFM_DECODE_SKIP_SPECIAL) ||
            !tfm_tokenizer_is_special(t, ids[i]))
            kept[n++] = ids[i];
    }
    tfm__bytes out = { 0 };
    st = t->ops->decode(t->model, kept, n, &out);
    tfm__free(kept);
    if (st == TFM_OK && capacity <= out.n) {
        *text_len = out.n;
        st = tfm__fail(TFM_ERR_CAPACITY,
                       "text needs %zu bytes with its NUL, capacity is %zu",
                       out.n + 1, capacity);
    } else if (st == TFM_OK) {
        if (out.n)
            memcpy(text, out.data, out.n);
        text[out.n] = '\0';
        *text_len = out.n;
    }
    tfm__free(out.data);
    return st;
}

tfm_status tfm_tokenizer_token_to_id(const tfm_tokenizer *t,
                                     const char *token, int32_t *id)
{
    if (!t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "tokenizer is NULL");
    if (!token)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "token is NULL");
    if (!id)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "id is NULL");
    int32_t found = -1;
    if (t->ops) {
        found = tfm__vocab_find(t->ops->vocab(t->model), token, strlen(token));
    } else {
        int32_t one[2];
        int64_t n = 0;
        if (tfm_tokenizer_encode(t, token, strlen(token), one, 2, &n) ==
                TFM_OK && n == 1)
            found = one[0];
    }
    if (found < 0)
        return tfm__fail(TFM_ERR_NOT_FOUND,
                         "token \"%.100s\" is not in the vocabulary", token);
    *id = found;
    return TFM_OK;
}

tfm_status tfm_tokenizer_id_to_token(const tfm_tokenizer *t, int32_t id,
                                     char *token, size_t capacity,
                                     size_t *token_len)
{
    if (!t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "tokenizer is NULL");
    if (!token && capacity > 0)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "token is NULL");
    if (!token_len)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "token_len is NULL");
    int64_t size = tfm_tokenizer_vocab_size(t);
    if (id < 0 || id >= size)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "id %d is out of range [0, %lld)", id,
                         (long long)size);
    if (!t->ops)
        return tfm_tokenizer_decode(t, &id, 1, token, capacity, token_len);
    const tfm__vocab *v = t->ops->vocab(t->model);
    size_t len = v->lengths[id];
    if (capacity <= len) {
        *token_len = len;
        return tfm__fail(TFM_ERR_CAPACITY,
                         "token needs %zu bytes with its NUL, capacity is %zu",
                         len + 1, capacity);
    }
    memcpy(token, v->tokens[id], len + 1);
    *token_len = len;
    return TFM_OK;
}

tfm_status tfm_tokenizer_special_id(const tfm_tokenizer *t, const char *role,
                                    int32_t *id)
{
    if (!t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "tokenizer is NULL");
    if (!role)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "role is NULL");
    if (!id)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "id is NULL");
    int r = tfm__role_index(role);
    if (r < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "unknown role \"%.40s\" (bos, eos, unk, pad, cls, "
                         "sep or mask)", role);
    if (t->roles[r] < 0)
        return tfm__fail(TFM_ERR_NOT_FOUND, "this tokenizer has no %s token",
                         role);
    *id = t->roles[r];
    return TFM_OK;
}
