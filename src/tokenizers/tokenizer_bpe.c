/* Byte-level BPE as GPT-2's (tokenizer.h): OpenAI's encoder.json +
 * vocab.bpe (Hugging Face: vocab.json + merges.txt, or a tokenizer.json).
 *
 * Source: Radford et al. 2019, "Language Models are Unsupervised Multitask
 * Learners" (section 2.2), and the algorithm of OpenAI's gpt-2 encoder.py:
 *  1. the text is cut into pieces by GPT-2's pattern (PCRE2, Unicode);
 *  2. each piece's bytes become vocabulary symbols, one per byte, through
 *     bytes_to_unicode (printable Latin-1 bytes stand for themselves, the
 *     other 68 for U+0100 onwards in byte order);
 *  3. while some adjacent pair of symbols is a merge, the pair of lowest
 *     rank (its line in vocab.bpe) is merged, at every place it occurs,
 *     left to right.
 * Step 3 runs on a binary heap of candidate pairs keyed by (rank, position)
 * over a linked list of symbols: O(n log n) for a piece of n bytes, where
 * encoder.py's rescans are O(n^2) (a megabyte of spaces is one piece).
 * Equal ranks are taken together, so that pairs a merge creates wait for
 * the rank's other places, exactly as encoder.py.
 *
 * Invalid UTF-8 (PCRE2_MATCH_INVALID_UTF): the pattern never matches an
 * invalid sequence, so the bytes between two matches are invalid; each such
 * run is one piece of its own, and decode(encode(s)) == s for every s. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/alloc.h"
#include "tokenizers/bpe_merges.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json_check.h"
#include "tokenizers/tokenizer_impl.h"
#include "base/utf8.h"

/* GPT-2's pre-tokenizer pattern (encoder.py). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
    "|\\s+(?!\\S)|\\s+";

typedef struct tfm__bpe {
    tfm__vocab vocab;        /* byte-level strings ("\u0120the") */
    char *raw;               /* the bytes each id stands for, concatenated */
    size_t *raw_off;         /* [size + 1] into raw */
    int32_t byte_id[256];    /* id of each single byte */
    tfm__merges merges;      /* bpe_merges.h */
    pcre2_code *pattern;
    int jit;                 /* pattern JIT-compiled: pcre2_jit_match */
    pcre2_general_context *gcx;
} tfm__bpe;

/* ---- bytes_to_unicode --------------------------------------------------- */

/* The code point standing for byte b (encoder.py's bytes_to_unicode). */
static uint32_t byte_char(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return (uint32_t)b;
    int n = 0;  /* b's place among the bytes not standing for themselves */
    for (int c = 0; c < b; c++)
        n += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) ||
               c >= 0xAE);
    return 256u + (uint32_t)n;
}

/* Inverse of byte_char: the byte, or -1. */
static int char_byte(uint32_t c)
{
    if (c < 256)
        return byte_char((int)c) == c ? (int)c : -1;
    if (c >= 256 + 68)
        return -1;
    for (int b = 0; b < 256; b++)
        if (byte_char(b) == c)
            return b;
    return -1;
}

/* The bytes a vocabulary string stands for into out (room for len bytes);
 * returns their number, or (size_t)-1 when a character is not one of the
 * 256 (then the string stands for itself, as Hugging Face's ByteLevel
 * decoder does for added tokens). */
static size_t unmap_bytes(const char *s, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        size_t k;
        if (tfm__utf8_decode((const unsigned char *)s + i, len - i, &c, &k))
            return (size_t)-1;
        i += k;
        int byte = char_byte(c);
        if (byte < 0)
            return (size_t)-1;
        out[n++] = (char)byte;
    }
    return n;
}

/* ---- Free, ops ---------------------------------------------------------- */

static void bpe_free(void *model)
{
    tfm__bpe *m = model;
    if (!m)
        return;
    tfm__vocab_free(&m->vocab);
    tfm__free(m->raw);
    tfm__free(m->raw_off);
    tfm__merges_free(&m->merges);
    pcre2_code_free(m->pattern);
    pcre2_general_context_free(m->gcx);
    tfm__free(m);
}

static const tfm__vocab *bpe_vocab(const void *model)
{
    return &((const tfm__bpe *)model)->vocab;
}

static tfm_status bpe_decode(const void *model, const int32_t *ids, int64_t n,
                             tfm__bytes *out)
{
    const tfm__bpe *m = model;
    for (int64_t i = 0; i < n; i++) {
        size_t a = m->raw_off[ids[i]], b = m->raw_off[ids[i] + 1];
        tfm_status st = tfm__bytes_append(out, m->raw + a, b - a);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* ---- Encode ------------------------------------------------------------- */

/* A candidate merge of the symbol at pos with the next one. */
typedef struct candidate {
    int32_t rank;
    int32_t pos;
} candidate;

/* Scratch for one piece: symbols by their first byte, and the heap. */
typedef struct scratch {
    int32_t *id, *next, *prev;  /* [cap]; id -1 for a symbol merged away */
    candidate *heap, *batch;    /* [cap] each */
    size_t cap;
} scratch;

static int before(candidate x, candidate y)
{
    return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos);
}

static void heap_push(candidate *h, size_t *n, candidate c)
{
    size_t i = (*n)++;
    while (i > 0 && before(c, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static candidate heap_pop(candidate *h, size_t *n)
{
    candidate top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(h[c + 1], h[c]))
            c++;
        if (!before(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* Pushes the pair starting at symbol pos, if it is a merge. */
static void push_pair(const tfm__bpe *m, scratch *s, size_t *n_heap,
                      int32_t pos)
{
    if (pos < 0 || s->next[pos] < 0)
        return;
    const tfm__merge *g = tfm__merges_find(&m->merges, s->id[pos], s->id[s->next[pos]]);
    if (g)
        heap_push(s->heap, n_heap, (candidate){ g->rank, pos });
}

/* tfm__realloc of old to `bytes`: the new block, or old itself (still
 * valid, still the caller's) with *failed set to 1 when it cannot grow. */
static void *regrow(void *old, size_t bytes, int *failed)
{
    void *p = tfm__realloc(old, bytes);
    if (!p) {
        *failed = 1;
        return old;
    }
    return p;
}

static tfm_status grow_scratch(scratch *s, size_t n)
{
    if (n <= s->cap)
        return TFM_OK;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n)
        cap *= 2;
    int failed = 0;
    s->id = regrow(s->id, cap * sizeof *s->id, &failed);
    s->next = regrow(s->next, cap * sizeof *s->next, &failed);
    s->prev = regrow(s->prev, cap * sizeof *s->prev, &failed);
    s->heap = regrow(s->heap, cap * sizeof *s->heap, &failed);
    s->batch = regrow(s->batch, cap * sizeof *s->batch, &failed);
    if (failed)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "out of memory for a piece of %zu bytes", n);
    s->cap = cap;
    return TFM_OK;
}

/* BPE of one piece p[0 .. n-1]; tokens appended with offsets base + ... */
static tfm_status encode_piece(const tfm__bpe *m, const unsigned char *p,
                               size_t n, int64_t base, scratch *s,
                               tfm__token_list *out)
{
    if (n == 1)
        return tfm__token_list_push(out, m->byte_id[p[0]], base, base + 1);
    tfm_status st = grow_scratch(s, n);
    if (st != TFM_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        s->id[i] = m->byte_id[p[i]];
        s->next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        s->prev[i] = (int32_t)i - 1;
    }
    size_t n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(m, s, &n_heap, (int32_t)i);
    while (n_heap > 0) {
        /* Every place of the lowest rank, left to right. */
        size_t n_batch = 0;
        int32_t rank = s->heap[0].rank;
        while (n_heap > 0 && s->heap[0].rank == rank)
            s->batch[n_batch++] = heap_pop(s->heap, &n_heap);
        for (size_t k = 0; k < n_batch; k++) {
            int32_t pos = s->batch[k].pos, right = s->next[pos];
            if (s->id[pos] < 0 || right < 0)
                continue;
            const tfm__merge *g = tfm__merges_find(&m->merges, s->id[pos], s->id[right]);
            if (!g || g->rank != rank)
                continue;  /* stale: a neighbour merged first */
            s->id[pos] = g->merged;
            s->id[right] = -1;
            s->next[pos] = s->next[right];
            if (s->next[right] >= 0)
                s->prev[s->next[right]] = pos;
            push_pair(m, s, &n_heap, s->prev[pos]);
            push_pair(m, s, &n_heap, pos);
        }
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) {
        int64_t end = s->next[i] >= 0 ? s->next[i] : (int64_t)n;
        st = tfm__token_list_push(out, s->id[i], base + i, base + end);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

static tfm_status bpe_encode(const void *model, const char *text, size_t len,
                             int64_t base, tfm__token_list *out)
{
    const tfm__bpe *m = model;
    pcre2_match_data *md =
        pcre2_match_data_create_from_pattern(m->pattern, m->gcx);
    if (!md)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for a match");
    const unsigned char *s = (const unsigned char *)text;
    scratch sc = { 0 };
    tfm_status st = TFM_OK;
    size_t pos = 0;
    while (st == TFM_OK && pos < len) {
        int rc = m->jit ? pcre2_jit_match(m->pattern, s, len, pos, 0, md, NULL)
                        : pcre2_match(m->pattern, s, len, pos, 0, md, NULL);
        size_t begin = len, end = len;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            begin = ov[0];
            end = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            st = tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                           "the pre-tokenizer failed (PCRE2 error %d) at byte "
                           "%zu", rc, pos);
            break;
        }
        if (begin > pos)  /* invalid UTF-8 before the match: a piece */
            st = encode_piece(m, s + pos, begin - pos, base + (int64_t)pos,
                              &sc, out);
        if (st == TFM_OK && end > begin)
            st = encode_piece(m, s + begin, end - begin,
                              base + (int64_t)begin, &sc, out);
        pos = end;
    }
    tfm__free(sc.id);
    tfm__free(sc.next);
    tfm__free(sc.prev);
    tfm__free(sc.heap);
    tfm__free(sc.batch);
    pcre2_match_data_free(md);
    return st;
}

static const tfm__tokenizer_ops BPE_OPS = {
    TFM_TOKENIZER_BYTE_BPE, bpe_free, bpe_encode, bpe_decode, bpe_vocab,
};

/* ---- Building --------------------------------------------------------- */

static void *pcre_alloc(size_t size, void *data)
{
    (void)data;
    return tfm__malloc(size);
}

static void pcre_free(void *p, void *data)
{
    (void)data;
    tfm__free(p);
}

/* After the vocabulary is set: byte tokens, raw bytes, pattern, and room
 * for n_merges merges (none made when n_merges < 0: the caller makes
 * them). */
static tfm_status bpe_prepare(tfm__bpe *m, int64_t n_merges, const char *what)
{
    const tfm__vocab *v = &m->vocab;
    for (int b = 0; b < 256; b++) {
        char utf8[4];
        size_t k = tfm__utf8_encode(byte_char(b), utf8);
        m->byte_id[b] = tfm__vocab_find(v, utf8, k);
        if (m->byte_id[b] < 0)
            return tfm__fail(TFM_ERR_FORMAT,
                             "%.200s: the vocabulary has no token for byte "
                             "0x%02X (\"%.*s\"), which byte-level BPE needs",
                             what, b, (int)k, utf8);
    }
    size_t total = 0;
    for (int64_t i = 0; i < v->size; i++)
        total += v->lengths[i];
    m->raw = tfm__malloc(total ? total : 1);
    m->raw_off = tfm__malloc((size_t)(v->size + 1) * sizeof *m->raw_off);
    if (!m->raw || !m->raw_off)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for BPE tables");
    if (n_merges >= 0) {
        tfm_status st = tfm__merges_init(&m->merges, n_merges);
        if (st != TFM_OK)
            return st;
    }
    size_t at = 0;
    for (int64_t i = 0; i < v->size; i++) {
        m->raw_off[i] = at;
        size_t k = unmap_bytes(v->tokens[i], v->lengths[i], m->raw + at);
        if (k == (size_t)-1) {
            memcpy(m->raw + at, v->tokens[i], v->lengths[i]);
            k = v->lengths[i];
        }
        at += k;
    }
    m->raw_off[v->size] = at;

    m->gcx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    if (!m->gcx)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for PCRE2");
    pcre2_compile_context *ccx = pcre2_compile_context_create(m->gcx);
    if (!ccx)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for PCRE2");
    int err;
    PCRE2_SIZE err_at;
    m->pattern = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                               &err, &err_at, ccx);
    pcre2_compile_context_free(ccx);
    if (!m->pattern)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "the pre-tokenizer pattern did not compile (PCRE2 "
                         "error %d)", err);
    /* The JIT is only faster; without it (no JIT on this CPU, out of
     * memory) the interpreter gives the same matches. */
    m->jit = pcre2_jit_compile(m->pattern, PCRE2_JIT_COMPLETE) == 0;
    return TFM_OK;
}

/* Merges from the text of vocab.bpe / merges.txt: an optional "#version"
 * line, then one "left right" per line. */
static tfm_status merges_from_text(tfm__bpe *m, const char *text, size_t len,
                                   const char *what)
{
    int64_t count = 0;
    for (size_t i = 0; i < len; i++)
        count += text[i] == '\n';
    tfm_status st = bpe_prepare(m, count + 1, what);
    if (st != TFM_OK)
        return st;
    int64_t line = 0, rank = 0;
    for (size_t pos = 0; pos < len;) {
        const char *eol = memchr(text + pos, '\n', len - pos);
        size_t end = eol ? (size_t)(eol - text) : len;
        const char *l = text + pos;
        size_t n = end - pos;
        if (n > 0 && l[n - 1] == '\r')
            n--;
        line++;
        pos = end + 1;
        if (n == 0 || (line == 1 && n >= 8 && memcmp(l, "#version", 8) == 0))
            continue;
        const char *sp = memchr(l, ' ', n);
        if (!sp || sp == l || sp == l + n - 1 ||
            memchr(sp + 1, ' ', (size_t)(l + n - sp - 1)))
            return tfm__fail(TFM_ERR_FORMAT,
                             "%.200s: line %lld is not two tokens separated "
                             "by one space",
                             what, (long long)line);
        char where[32];
        snprintf(where, sizeof where, "on line %lld", (long long)line);
        st = tfm__merges_add(&m->merges, &m->vocab, l, (size_t)(sp - l), sp + 1,
                       (size_t)(l + n - sp - 1), rank++, what, where);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* <|endoftext|> as GPT2Tokenizer sets it up: bos, eos and unk. */
static tfm_status add_endoftext(tfm_tokenizer *t)
{
    const tfm__bpe *m = t->model;
    int32_t id = tfm__vocab_find(&m->vocab, "<|endoftext|>", 13);
    tfm_status st = TFM_OK;
    if (id < 0)
        return TFM_OK;
    for (int r = TFM__ROLE_BOS; st == TFM_OK && r <= TFM__ROLE_UNK; r++)
        st = tfm__tokenizer_add_special(t, id, NULL, 0, r);
    return st;
}

tfm_status tfm__bpe_load_gpt2(const char *encoder_json, const char *vocab_bpe,
                              tfm_tokenizer **out)
{
    char *json = NULL, *merges = NULL;
    size_t json_len = 0, merges_len = 0;
    tfm_status st = tfm__read_file(encoder_json, TFM__FILE_MAX_TOKENIZER, &json,
                                    &json_len);
    if (st == TFM_OK)
        st = tfm__read_text_file(vocab_bpe, TFM__FILE_MAX_TOKENIZER, &merges,
                                 &merges_len);
    cJSON *root = NULL;
    if (st == TFM_OK) {
        st = tfm__json_parse_object(json, json_len, encoder_json, &root);
    }
    tfm__bpe *m = NULL;
    if (st == TFM_OK) {
        m = tfm__calloc(1, sizeof *m);
        if (!m)
            st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st == TFM_OK)
        st = tfm__vocab_from_json(&m->vocab, root, encoder_json);
    if (st == TFM_OK)
        st = merges_from_text(m, merges, merges_len, vocab_bpe);
    cJSON_Delete(root);
    tfm__free(json);
    tfm__free(merges);
    if (st != TFM_OK) {
        bpe_free(m);
        return st;
    }
    tfm_tokenizer *t;
    st = tfm__tokenizer_wrap(&BPE_OPS, m, &t);
    if (st != TFM_OK)
        return st;
    st = add_endoftext(t);
    if (st != TFM_OK) {
        tfm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TFM_OK;
}

/* The "model" object of a tokenizer.json whose type is "BPE": "vocab"
 * {token: id} and "merges", each "left right" or ["left", "right"]. */
tfm_status tfm__bpe_from_json(const cJSON *model, const char *path,
                              tfm_tokenizer **out)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: the BPE model has no "
                         "\"merges\" array", path);
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(model,
                                                       "continuing_subword_prefix");
    const cJSON *es = cJSON_GetObjectItemCaseSensitive(model,
                                                       "end_of_word_suffix");
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    const cJSON *bf = cJSON_GetObjectItemCaseSensitive(model, "byte_fallback");
    if ((cs && !cJSON_IsNull(cs) && !(cJSON_IsString(cs) && !cs->valuestring[0])) ||
        (es && !cJSON_IsNull(es) && !(cJSON_IsString(es) && !es->valuestring[0])) ||
        (dr && !cJSON_IsNull(dr)) || cJSON_IsTrue(bf))
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "%.200s: BPE with a subword prefix or suffix, dropout "
                         "or byte fallback is not supported (only GPT-2's "
                         "byte-level BPE)", path);
    (void)unk; /* byte-level BPE never needs it: every byte has a token */
    tfm__bpe *m = tfm__calloc(1, sizeof *m);
    if (!m)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    tfm_status st = tfm__vocab_from_json(
        &m->vocab, cJSON_GetObjectItemCaseSensitive(model, "vocab"), path);
    if (st == TFM_OK)
        st = bpe_prepare(m, -1, path);
    if (st == TFM_OK)
        st = tfm__merges_from_json(&m->merges, &m->vocab, merges, path);
    if (st != TFM_OK) {
        bpe_free(m);
        return st;
    }
    return tfm__tokenizer_wrap(&BPE_OPS, m, out);
}

tfm_status tfm__bpe_from_tables(tfm__vocab *vocab, int64_t n_merges,
                                tfm__bpe_merge_at merge_at, void *ctx,
                                const char *what, tfm_tokenizer **out)
{
    tfm__bpe *m = tfm__calloc(1, sizeof *m);
    if (!m) {
        tfm__vocab_free(vocab);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    m->vocab = *vocab;
    memset(vocab, 0, sizeof *vocab);
    tfm_status st = bpe_prepare(m, n_merges, what);
    for (int64_t i = 0; st == TFM_OK && i < n_merges; i++) {
        const char *l = NULL;
        size_t n = 0;
        if ((st = merge_at(ctx, i, &l, &n)) != TFM_OK)
            break;
        const char *sp = n ? memchr(l, ' ', n) : NULL;
        if (!sp || sp == l || sp == l + n - 1 ||
            memchr(sp + 1, ' ', (size_t)(l + n - sp - 1))) {
            st = tfm__fail(TFM_ERR_FORMAT, "%.200s: merge %lld is not two "
                           "tokens separated by one space", what,
                           (long long)i);
            break;
        }
        char where[40];
        snprintf(where, sizeof where, "in merge %lld", (long long)i);
        st = tfm__merges_add(&m->merges, &m->vocab, l, (size_t)(sp - l),
                             sp + 1, (size_t)(l + n - sp - 1), i, what,
                             where);
    }
    if (st != TFM_OK) {
        bpe_free(m);
        return st;
    }
    return tfm__tokenizer_wrap(&BPE_OPS, m, out);
}
