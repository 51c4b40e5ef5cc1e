/* SentencePiece tokenizers (tokenizer.h, sentencepiece.h): the normalizer,
 * BPE merges by score (Llama's models, with byte fallback), the unigram
 * model's Viterbi segmentation (T5's, Marian's), and decoding, as
 * sentencepiece 0.1.97 does them (Kudo and Richardson 2018, "SentencePiece:
 * A simple and language independent subword tokenizer"; Kudo 2018,
 * "Subword Regularization", section 3 for the unigram model; Sennrich et
 * al. 2016 for BPE).  docs/TOKENIZERS.md gives the rules one by one. */
#include <float.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "tokenizers/sentencepiece/sentencepiece.h"
#include "base/utf8.h"

#include <utf8proc.h>

static const char SPACE_SYMBOL[] = "\xe2\x96\x81";  /* U+2581 */
static const char REPLACEMENT[] = "\xef\xbf\xbd";   /* U+FFFD */
static const char UNK_SURFACE[] = " \xe2\x81\x87 "; /* " U+2047 " */

/* ---- A byte trie in a hash table ----------------------------------------
 * Node 0 is the root; the child of node n by byte c is found under the key
 * (n << 8 | c) + 1.  value[n] is the piece id ending at n, or -1. */
typedef struct spm_trie {
    uint64_t *keys;     /* [n_slots], 0 for an empty slot */
    int32_t *child;     /* [n_slots] */
    int32_t *value;     /* [n_nodes] */
    size_t n_slots, n_nodes;
} spm_trie;

static size_t trie_slot(const spm_trie *t, uint64_t key)
{
    size_t mask = t->n_slots - 1;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    while (t->keys[i] && t->keys[i] != key)
        i = (i + 1) & mask;
    return i;
}

static inline int32_t trie_child(const spm_trie *t, int32_t node,
                                 unsigned char c)
{
    uint64_t key = (((uint64_t)node << 8) | c) + 1;
    size_t i = trie_slot(t, key);
    return t->keys[i] ? t->child[i] : -1;
}

/* A trie of the pieces whose type keep(type) accepts. */
static tfm_status trie_build(spm_trie *t, const tfm__spm_file *f,
                             int (*keep)(int type))
{
    memset(t, 0, sizeof *t);
    size_t bytes = 1;
    for (int64_t i = 0; i < f->vocab.size; i++)
        if (keep(f->types[i]))
            bytes += f->vocab.lengths[i];
    size_t slots = 16;
    while (slots < 2 * bytes)
        slots *= 2;
    t->n_slots = slots;
    t->keys = tfm__calloc(slots, sizeof *t->keys);
    t->child = tfm__malloc(slots * sizeof *t->child);
    t->value = tfm__malloc(bytes * sizeof *t->value);
    if (!t->keys || !t->child || !t->value)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    t->n_nodes = 1;
    t->value[0] = -1;
    for (int64_t i = 0; i < f->vocab.size; i++) {
        if (!keep(f->types[i]))
            continue;
        const unsigned char *s = (const unsigned char *)f->vocab.tokens[i];
        int32_t node = 0;
        for (uint32_t k = 0; k < f->vocab.lengths[i]; k++) {
            uint64_t key = (((uint64_t)node << 8) | s[k]) + 1;
            size_t slot = trie_slot(t, key);
            if (!t->keys[slot]) {
                t->keys[slot] = key;
                t->child[slot] = (int32_t)t->n_nodes;
                t->value[t->n_nodes++] = -1;
            }
            node = t->child[slot];
        }
        t->value[node] = (int32_t)i;
    }
    return TFM_OK;
}

static void trie_free(spm_trie *t)
{
    tfm__free(t->keys);
    tfm__free(t->child);
    tfm__free(t->value);
    memset(t, 0, sizeof *t);
}

static int keep_pieces(int type)  /* the model's pieces_ */
{
    return type == TFM__SPM_NORMAL || type == TFM__SPM_USER_DEFINED ||
           type == TFM__SPM_UNUSED;
}

static int keep_user(int type)
{
    return type == TFM__SPM_USER_DEFINED;
}

/* ---- The model ------------------------------------------------------- */

typedef struct spm {
    tfm__spm_file f;
    int32_t unk;
    int32_t byte_id[256];     /* <0xNN> pieces with byte fallback, else -1 */
    float min_score, max_score;  /* over the NORMAL pieces */
    int has_unused, has_user;
    int split_at_space;       /* no piece spans a ▁ after another character */
    spm_trie pieces;          /* NORMAL, USER_DEFINED, UNUSED */
    spm_trie user;            /* USER_DEFINED: matched whole, never split */
    tfm__merges merges;       /* Hugging Face's ranked pairs, or empty */
    int prepend, fuse_unk;    /* tfm__spm_rules */
    int split_words, decoder, decoder_strip;
    /* precompiled charsmap: darts-clone double array + NUL-ended strings */
    uint32_t *units;
    size_t n_units;
    const char *norm;
    size_t norm_len;
} spm;

/* A growing array of size_t (the normalized text's byte origins). */
typedef struct spm_offsets {
    size_t *v;
    size_t n, cap;
} spm_offsets;

static int offsets_push(spm_offsets *o, size_t x)
{
    size_t *grown = tfm__grow(o->v, &o->cap, o->n, sizeof *o->v, 256);
    if (!grown)
        return 0;
    o->v = grown;
    o->v[o->n++] = x;
    return 1;
}

/* Longest rule of the charsmap at s[0 .. len-1]: its length (0: none) and
 * its replacement.  darts-clone's commonPrefixSearch: unit bits 0-7 label,
 * 8 has-leaf, 9 offset scale, 10-31 offset; a leaf unit's value (bits 0-30)
 * is the replacement's position in the strings. */
static size_t charsmap_match(const spm *m, const unsigned char *s, size_t len,
                             const char **repl, size_t *repl_len)
{
    size_t best = 0;
    size_t pos = 0;
    uint32_t unit = m->units[0];
    pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
    for (size_t i = 0; i < len; i++) {
        pos ^= s[i];
        if (pos >= m->n_units)
            break;
        unit = m->units[pos];
        if ((unit & ((1u << 31) | 0xffu)) != s[i])
            break;
        pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
        if (pos >= m->n_units)
            break;
        if ((unit >> 8) & 1) {
            size_t v = m->units[pos] & ((1u << 31) - 1);
            if (v < m->norm_len) {
                best = i + 1;
                *repl = m->norm + v;
                *repl_len = strnlen(m->norm + v, m->norm_len - v);
            }
        }
    }
    return best;
}

/* Longest user-defined piece at s[0 .. len-1], or 0. */
static size_t user_match(const spm *m, const unsigned char *s, size_t len)
{
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        node = trie_child(&m->user, node, s[i]);
        if (node < 0)
            break;
        if (m->user.value[node] >= 0)
            best = i + 1;
    }
    return best;
}

/* One character's worth of the input (Normalizer::NormalizePrefix): a
 * user-defined piece as is, else the longest charsmap rule, else one
 * UTF-8 character, else U+FFFD for one malformed byte.  Returns the bytes
 * consumed. */
static size_t normalize_prefix(const spm *m, const unsigned char *s,
                               size_t len, const char **out, size_t *out_len)
{
    if (m->has_user) {
        size_t n = user_match(m, s, len);
        if (n) {
            *out = (const char *)s;
            *out_len = n;
            return n;
        }
    }
    if (m->units) {
        size_t n = charsmap_match(m, s, len, out, out_len);
        if (n)
            return n;
    }
    uint32_t cp;
    size_t n;
    if (s[0] < 0x80) {
        n = 1;
    } else if (tfm__utf8_decode(s, len, &cp, &n) != NULL) {
        *out = REPLACEMENT;
        *out_len = 3;
        return 1;
    }
    *out = (const char *)s;
    *out_len = n;
    return n;
}

static int append_ws(const spm *m, tfm__bytes *norm, spm_offsets *o,
                     size_t consumed)
{
    if (m->f.escape_whitespaces) {
        if (tfm__bytes_append(norm, SPACE_SYMBOL, 3) != TFM_OK)
            return 0;
        return offsets_push(o, consumed) && offsets_push(o, consumed) &&
               offsets_push(o, consumed);
    }
    return tfm__bytes_append(norm, " ", 1) == TFM_OK &&
           offsets_push(o, consumed);
}

/* Hugging Face's Metaspace (prepend_scheme "always" / "first"): whether a
 * "▁" goes before the normalized text norm[0 .. n-1] (not empty): unless
 * it already starts with one (or a space, when spaces stay spaces), and
 * with "first" only before any special token (first is 0 for the text
 * after one). */
static int metaspace_prefix(const spm *m, const char *norm, size_t n,
                            int first)
{
    if (!m->f.add_dummy_prefix || m->prepend == TFM__SPM_PREPEND_DUMMY)
        return 0;
    if (m->prepend == TFM__SPM_PREPEND_FIRST && !first)
        return 0;
    return !(norm[0] == ' ' ||
             (n >= 3 && memcmp(norm, SPACE_SYMBOL, 3) == 0));
}

/* Hugging Face's WhitespaceSplit (split_words): a character with Unicode's
 * White_Space property (utf8proc's categories Zs, Zl, Zp, and the controls
 * U+0009 .. U+000D and U+0085) counts as a space. */
static void word_space(const spm *m, const char **r, size_t *rn)
{
    if (!m->split_words || *rn == 0)
        return;
    if (*rn == 1) {  /* ASCII: the controls U+0009 .. U+000D only */
        if ((*r)[0] >= 0x09 && (*r)[0] <= 0x0D)
            *r = " ";
        return;
    }
    uint32_t cp;
    size_t k;
    if (tfm__utf8_decode((const unsigned char *)*r, *rn, &cp, &k) != NULL ||
        k != *rn)
        return;
    const utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85 ||
        c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL ||
        c == UTF8PROC_CATEGORY_ZP) {
        *r = " ";
        *rn = 1;
    }
}

/* Normalizer::Normalize: text -> norm, and for each byte of norm (and one
 * past the end) the byte of text it comes from.  first: the text is not
 * after a special token (wants_prefix). */
static tfm_status normalize(const spm *m, const unsigned char *text,
                            size_t len, int first, tfm__bytes *norm,
                            spm_offsets *o)
{
    size_t consumed = 0;
    const char *r;
    size_t rn;
    if (m->f.remove_extra_whitespaces) {
        while (consumed < len) {
            size_t n = normalize_prefix(m, text + consumed, len - consumed,
                                        &r, &rn);
            word_space(m, &r, &rn);
            if (!(rn == 1 && r[0] == ' '))
                break;
            consumed += n;
        }
    }
    if (consumed == len)
        return TFM_OK;  /* empty, or only whitespace */
    int ok = 1;
    const size_t start = consumed;
    if (!m->f.treat_whitespace_as_suffix && m->f.add_dummy_prefix &&
        m->prepend == TFM__SPM_PREPEND_DUMMY)
        ok = append_ws(m, norm, o, consumed);
    int prev_space = m->f.remove_extra_whitespaces;
    while (ok && consumed < len) {
        size_t n = normalize_prefix(m, text + consumed, len - consumed, &r,
                                    &rn);
        word_space(m, &r, &rn);
        while (prev_space && rn > 0 && r[0] == ' ') {
            r++;
            rn--;
        }
        if (rn > 0) {
            for (size_t k = 0; ok && k < rn; k++) {
                if (m->f.escape_whitespaces && r[k] == ' ') {
                    ok = tfm__bytes_append(norm, SPACE_SYMBOL, 3) == TFM_OK &&
                         offsets_push(o, consumed) &&
                         offsets_push(o, consumed) &&
                         offsets_push(o, consumed);
                } else {
                    ok = tfm__bytes_append(norm, r + k, 1) == TFM_OK &&
                         offsets_push(o, consumed);
                }
            }
            prev_space = r[rn - 1] == ' ';
        }
        consumed += n;
        if (!m->f.remove_extra_whitespaces)
            prev_space = 0;
    }
    if (ok && m->f.remove_extra_whitespaces) {
        const char *sp = m->f.escape_whitespaces ? SPACE_SYMBOL : " ";
        size_t sn = m->f.escape_whitespaces ? 3 : 1;
        while (norm->n >= sn && memcmp(norm->data + norm->n - sn, sp, sn) == 0) {
            norm->n -= sn;
            consumed = o->v[norm->n];
            o->n = norm->n;
        }
    }
    if (ok && m->f.treat_whitespace_as_suffix && m->f.add_dummy_prefix)
        ok = append_ws(m, norm, o, consumed);
    if (ok && norm->n > 0 && metaspace_prefix(m, norm->data, norm->n, first)) {
        /* Metaspace looks at the normalized text: "▁" goes first. */
        const size_t sn = m->f.escape_whitespaces ? 3 : 1;
        ok = tfm__bytes_append(norm, SPACE_SYMBOL, sn) == TFM_OK;
        for (size_t k = 0; ok && k < sn; k++)
            ok = offsets_push(o, start);
        if (ok) {
            memmove(norm->data + sn, norm->data, norm->n - sn);
            memcpy(norm->data, m->f.escape_whitespaces ? SPACE_SYMBOL : " ",
                   sn);
            memmove(o->v + sn, o->v, (o->n - sn) * sizeof *o->v);
            for (size_t k = 0; k < sn; k++)
                o->v[k] = start;
        }
    }
    if (ok)
        ok = offsets_push(o, consumed);
    return ok ? TFM_OK : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
}

static size_t one_char_len(unsigned char c)
{
    static const unsigned char LEN[16] = { 1, 1, 1, 1, 1, 1, 1, 1,
                                           1, 1, 1, 1, 2, 2, 3, 4 };
    return LEN[c >> 4];
}

/* The pieces of the segmentation: [begin, begin + len) of norm, and id. */
typedef struct spm_seg {
    size_t begin;
    uint32_t len;
    int32_t id;
} spm_seg;

typedef struct spm_segs {
    spm_seg *v;
    size_t n, cap;
} spm_segs;

static int segs_push(spm_segs *s, size_t begin, size_t len, int32_t id)
{
    spm_seg *grown = tfm__grow(s->v, &s->cap, s->n, sizeof *s->v, 64);
    if (!grown)
        return 0;
    s->v = grown;
    s->v[s->n].begin = begin;
    s->v[s->n].len = (uint32_t)len;
    s->v[s->n].id = id;
    s->n++;
    return 1;
}

/* PieceToId: the piece's id (any type), else unk. */
static int32_t piece_id(const spm *m, const char *s, size_t len)
{
    int32_t id = tfm__vocab_find(&m->f.vocab, s, len);
    return id < 0 ? m->unk : id;
}

/* ---- BPE (bpe_model.cc) ---------------------------------------------- */

typedef struct bpe_sym {
    int32_t prev, next;
    size_t begin;
    uint32_t len;    /* 0 once merged into its left neighbour */
    int32_t node;    /* its bytes' node in the pieces' trie, -1 if none */
    int freeze;
} bpe_sym;

typedef struct bpe_pair {
    double score;    /* the piece's score, or minus the merge's rank */
    int32_t left, right;
    uint32_t len;
    int32_t node;    /* the merged piece's trie node */
} bpe_pair;

/* Higher score first; the leftmost of equal scores. */
static int pair_before(const bpe_pair *a, const bpe_pair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct bpe_heap {
    bpe_pair *v;
    size_t n, cap;
} bpe_heap;

static int heap_push(bpe_heap *h, bpe_pair p)
{
    bpe_pair *grown = tfm__grow(h->v, &h->cap, h->n, sizeof *h->v, 256);
    if (!grown)
        return 0;
    h->v = grown;
    size_t i = h->n++;
    while (i > 0 && pair_before(&p, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = p;
    return 1;
}

static bpe_pair heap_pop(bpe_heap *h)
{
    bpe_pair top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && pair_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!pair_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

typedef struct bpe_state {
    const spm *m;
    const char *norm;
    bpe_sym *sym;
    bpe_heap heap;
    int32_t *rev_left;  /* [vocab]: an UNUSED piece's left part's length */
} bpe_state;

/* The pair's concatenation is looked up in the pieces' trie (NORMAL,
 * USER_DEFINED, UNUSED: the model's pieces_) from where the left symbol's
 * bytes end, so only the right symbol's bytes are walked. */
static int bpe_add_pair(bpe_state *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0 || s->sym[left].freeze || s->sym[right].freeze)
        return 1;
    const bpe_sym *r = &s->sym[right];
    int32_t node = s->sym[left].node;
    const unsigned char *p = (const unsigned char *)s->norm + r->begin;
    for (uint32_t k = 0; node >= 0 && k < r->len; k++)
        node = trie_child(&s->m->pieces, node, p[k]);
    int32_t id = node >= 0 ? s->m->pieces.value[node] : -1;
    if (id < 0)
        return 1;
    double score = s->m->f.scores[id];
    if (s->m->merges.n_slots) {
        /* Hugging Face's BPE: the pair of pieces must be a merge; the
         * lowest rank goes first. */
        int32_t a = s->sym[left].node >= 0
                        ? s->m->pieces.value[s->sym[left].node] : -1;
        int32_t b = r->node >= 0 ? s->m->pieces.value[r->node] : -1;
        const tfm__merge *g =
            a >= 0 && b >= 0 ? tfm__merges_find(&s->m->merges, a, b) : NULL;
        if (!g || g->merged != id)
            return 1;
        score = -(double)g->rank;
    }
    size_t len = (size_t)s->sym[left].len + r->len;
    bpe_pair pr = { score, left, right, (uint32_t)len, node };
    if (s->m->f.types[id] == TFM__SPM_UNUSED)
        s->rev_left[id] = (int32_t)s->sym[left].len;
    return heap_push(&s->heap, pr);
}

/* bpe_model.cc's resegment: an UNUSED piece splits back into the two it
 * was merged from. */
static int bpe_resegment(const bpe_state *s, size_t begin, size_t len,
                         spm_segs *out, int depth)
{
    int32_t id = piece_id(s->m, s->norm + begin, len);
    if (depth > 64 || s->m->f.types[id] != TFM__SPM_UNUSED ||
        s->rev_left[id] <= 0)
        return segs_push(out, begin, len, id);
    size_t l = (size_t)s->rev_left[id];
    return bpe_resegment(s, begin, l, out, depth + 1) &&
           bpe_resegment(s, begin + l, len - l, out, depth + 1);
}

/* BPE over norm[begin .. end-1], appended to out; s->sym and s->heap are
 * reused. */
static int bpe_run(bpe_state *s, size_t begin, size_t end, spm_segs *out)
{
    const spm *m = s->m;
    const char *norm = s->norm;
    int ok = 1;
    int32_t n_sym = 0;
    s->heap.n = 0;
    for (size_t pos = begin; pos < end;) {
        size_t len = 0;
        int freeze = 0;
        if (m->has_user)
            len = user_match(m, (const unsigned char *)norm + pos, end - pos);
        if (len)
            freeze = 1;
        else
            len = one_char_len((unsigned char)norm[pos]);
        if (len > end - pos)
            len = end - pos;
        bpe_sym *y = &s->sym[n_sym];
        y->prev = n_sym - 1;
        y->begin = pos;
        y->len = (uint32_t)len;
        y->freeze = freeze;
        y->node = 0;
        for (size_t k = 0; y->node >= 0 && k < len; k++)
            y->node = trie_child(&m->pieces, y->node,
                                 (unsigned char)norm[pos + k]);
        pos += len;
        y->next = pos < end ? n_sym + 1 : -1;
        n_sym++;
    }
    for (int32_t i = 1; ok && i < n_sym; i++)
        ok = bpe_add_pair(s, i - 1, i);
    while (ok && s->heap.n) {
        bpe_pair top = heap_pop(&s->heap);
        bpe_sym *l = &s->sym[top.left], *r = &s->sym[top.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != top.len)
            continue;
        l->len += r->len;
        l->node = top.node;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = top.left;
        r->len = 0;
        ok = bpe_add_pair(s, l->prev, top.left) &&
             bpe_add_pair(s, top.left, l->next);
    }
    for (int32_t i = 0; ok && n_sym > 0 && i != -1; i = s->sym[i].next)
        ok = bpe_resegment(s, s->sym[i].begin, s->sym[i].len, out, 0);
    return ok;
}

/* bpe_model.cc's Encode.  When no piece can span a "▁" that follows
 * another character (m->split_at_space), the text is cut before each such
 * "▁" and the parts are merged separately: no pair ever spans a cut, so
 * the merges, and the result, are the same, with smaller heaps. */
static tfm_status encode_bpe(const spm *m, const char *norm, size_t n,
                             spm_segs *out)
{
    bpe_state s = { m, norm, NULL, { 0 }, NULL };
    s.sym = tfm__malloc((n ? n : 1) * sizeof *s.sym);
    int ok = s.sym != NULL;
    if (ok && m->has_unused) {
        s.rev_left = tfm__calloc((size_t)m->f.vocab.size, sizeof *s.rev_left);
        ok = s.rev_left != NULL;
    }
    size_t begin = 0;
    if (ok && m->split_at_space) {
        /* 0xE2 is never a continuation byte: i is a character's start. */
        for (size_t i = 1; ok && i + 3 <= n; i++) {
            if (norm[i] == SPACE_SYMBOL[0] &&
                memcmp(norm + i, SPACE_SYMBOL, 3) == 0 &&
                !(i >= 3 && memcmp(norm + i - 3, SPACE_SYMBOL, 3) == 0)) {
                ok = bpe_run(&s, begin, i, out);
                begin = i;
            }
        }
    }
    if (ok && begin < n)
        ok = bpe_run(&s, begin, n, out);
    tfm__free(s.sym);
    tfm__free(s.heap.v);
    tfm__free(s.rev_left);
    return ok ? TFM_OK : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
}

/* ---- Unigram (unigram_model.cc, EncodeOptimized) --------------------- */

typedef struct uni_node {
    float score;       /* best path score ending here */
    int32_t id;
    int64_t starts_at; /* -1 until reached */
} uni_node;

static tfm_status encode_unigram(const spm *m, const char *norm, size_t n,
                                 spm_segs *out)
{
    uni_node *best = tfm__malloc((n + 1) * sizeof *best);
    if (!best)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i <= n; i++) {
        best[i].score = 0.0f;
        best[i].id = -1;
        best[i].starts_at = -1;
    }
    const float unk_score = m->min_score - 10.0f;  /* kUnkPenalty */
    const unsigned char *s = (const unsigned char *)norm;
    for (size_t at = 0; at < n;) {
        const float till_here = best[at].score;
        size_t mblen = one_char_len(s[at]);
        if (mblen > n - at)
            mblen = n - at;
        int has_single = 0;
        int32_t node = 0;
        for (size_t k = at; k < n; k++) {
            node = trie_child(&m->pieces, node, s[k]);
            if (node < 0)
                break;
            int32_t id = m->pieces.value[node];
            if (id < 0 || m->f.types[id] == TFM__SPM_UNUSED)
                continue;
            size_t end = k + 1, length = end - at;
            /* As the reference: a user-defined piece scores
             * length * max_score - 0.1 (float product, double difference),
             * the candidate is a double compared with the float stored. */
            double score = m->f.types[id] == TFM__SPM_USER_DEFINED
                               ? (double)((float)length * m->max_score) - 0.1
                               : (double)m->f.scores[id];
            double cand = score + (double)till_here;
            if (best[end].starts_at == -1 || cand > (double)best[end].score) {
                best[end].score = (float)cand;
                best[end].starts_at = (int64_t)at;
                best[end].id = id;
            }
            if (length == mblen)
                has_single = 1;
        }
        if (!has_single) {
            uni_node *t = &best[at + mblen];
            float cand = unk_score + till_here;
            if (t->starts_at == -1 || cand > t->score) {
                t->score = cand;
                t->starts_at = (int64_t)at;
                t->id = m->unk;
            }
        }
        at += mblen;
    }
    /* Backtrack, then reverse. */
    size_t first = out->n;
    int ok = 1;
    for (size_t end = n; ok && end > 0;) {
        size_t begin = (size_t)best[end].starts_at;
        ok = segs_push(out, begin, end - begin, best[end].id);
        end = begin;
    }
    for (size_t i = first, j = out->n; ok && j > i + 1; i++, j--) {
        spm_seg t = out->v[i];
        out->v[i] = out->v[j - 1];
        out->v[j - 1] = t;
    }
    tfm__free(best);
    return ok ? TFM_OK : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
}

/* ---- Encode, decode: the tokenizer_impl.h interface ------------------- */

/* SentencePieceProcessor::PopulateSentencePieceText: each token with its
 * piece as encode(out_type=str) gives it.  Unknown pieces become their
 * bytes with byte fallback (pieces <0xNN>; the last byte covers the
 * character, the others nothing), or a run of them one unknown token
 * without it, whose piece is the run's normalized text. */
static tfm_status spm_segment(const spm *m, const char *text, size_t len,
                              int64_t base, tfm__spm_emit emit, void *ctx)
{
    if (len > (size_t)INT32_MAX / 4)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "text of %zu bytes is too long for SentencePiece "
                         "(at most %d)", len, INT32_MAX / 4);
    tfm__bytes norm = { 0 };
    spm_offsets o = { 0 };
    spm_segs segs = { 0 };
    tfm_status st = normalize(m, (const unsigned char *)text, len, base == 0,
                              &norm, &o);
    if (st == TFM_OK && norm.n > 0) {
        if (m->f.model_type == TFM__SPM_BPE) {
            st = encode_bpe(m, norm.data, norm.n, &segs);
        } else if (!m->split_words) {
            st = encode_unigram(m, norm.data, norm.n, &segs);
        } else {
            /* WhitespaceSplit: each "▁"-started word on its own (no piece
             * spans two words, as Hugging Face runs the model per word). */
            size_t begin = 0;
            for (size_t i = 1; st == TFM_OK && i <= norm.n; i++) {
                if (i < norm.n && !(i + 3 <= norm.n &&
                                    memcmp(norm.data + i, SPACE_SYMBOL, 3) == 0))
                    continue;
                const size_t first = segs.n;
                st = encode_unigram(m, norm.data + begin, i - begin, &segs);
                for (size_t k = first; k < segs.n; k++)
                    segs.v[k].begin += begin;
                begin = i;
            }
        }
    }
    const tfm__vocab *v = &m->f.vocab;
    for (size_t i = 0; st == TFM_OK && i < segs.n; i++) {
        const spm_seg *g = &segs.v[i];
        int32_t id = g->id;
        int type = m->f.types[id];
        int64_t b = base + (int64_t)o.v[g->begin];
        int64_t e = base + (int64_t)o.v[g->begin + g->len];
        if (type == TFM__SPM_CONTROL) {
            st = emit(ctx, id, v->tokens[id], v->lengths[id], b, b);
        } else if (type == TFM__SPM_UNKNOWN && m->f.byte_fallback) {
            for (uint32_t k = 0; st == TFM_OK && k < g->len; k++) {
                int32_t byte = m->byte_id[(unsigned char)norm.data[g->begin + k]];
                st = emit(ctx, byte, v->tokens[byte], v->lengths[byte], b,
                          k + 1 == g->len ? e : b);
            }
        } else {
            size_t end = g->begin + g->len;
            while (type == TFM__SPM_UNKNOWN && m->fuse_unk && i + 1 < segs.n &&
                   m->f.types[segs.v[i + 1].id] == TFM__SPM_UNKNOWN) {
                i++;
                end = segs.v[i].begin + segs.v[i].len;
            }
            e = base + (int64_t)o.v[end];
            st = emit(ctx, id, norm.data + g->begin, end - g->begin, b, e);
        }
    }
    tfm__free(norm.data);
    tfm__free(o.v);
    tfm__free(segs.v);
    return st;
}

static tfm_status push_token(void *list, int32_t id, const char *piece,
                             size_t len, int64_t begin, int64_t end)
{
    (void)piece;
    (void)len;
    return tfm__token_list_push(list, id, begin, end);
}

static tfm_status spm_encode(const void *model, const char *text, size_t len,
                             int64_t base, tfm__token_list *out)
{
    return spm_segment(model, text, len, base, push_token, out);
}

/* Bytes of byte pieces: each UTF-8 character as is, each malformed byte
 * U+FFFD. */
static tfm_status flush_bytes(const unsigned char *b, size_t n,
                              tfm__bytes *out)
{
    tfm_status st = TFM_OK;
    for (size_t i = 0; st == TFM_OK && i < n;) {
        uint32_t cp;
        size_t k = 1;
        if (b[i] >= 0x80 && tfm__utf8_decode(b + i, n - i, &cp, &k) != NULL) {
            st = tfm__bytes_append(out, REPLACEMENT, 3);
            i++;
            continue;
        }
        st = tfm__bytes_append(out, (const char *)b + i, k);
        i += k;
    }
    return st;
}

/* A run of byte pieces as Hugging Face's ByteFallback decoder makes it:
 * the bytes when they are UTF-8, else one U+FFFD per byte. */
static tfm_status hf_flush_bytes(const unsigned char *b, size_t n,
                                 tfm__bytes *out)
{
    if (n == 0)
        return TFM_OK;
    size_t at;
    if (tfm__utf8_check(b, n, &at) == NULL)
        return tfm__bytes_append(out, (const char *)b, n);
    tfm_status st = TFM_OK;
    for (size_t i = 0; st == TFM_OK && i < n; i++)
        st = tfm__bytes_append(out, REPLACEMENT, 3);
    return st;
}

/* One piece's text with "▁" a space (drop: "▁" dropped instead) from
 * index `from` of out, then up to `strip` of its leading spaces removed. */
static tfm_status hf_piece(const char *p, size_t len, int drop, int strip,
                           tfm__bytes *out)
{
    const size_t from = out->n;
    tfm_status st = TFM_OK;
    size_t run = 0;
    for (size_t k = 0; st == TFM_OK && k <= len; k++) {
        if (k == len || (k + 3 <= len && memcmp(p + k, SPACE_SYMBOL, 3) == 0)) {
            st = tfm__bytes_append(out, p + run, k - run);
            if (st == TFM_OK && k < len && !drop)
                st = tfm__bytes_append(out, " ", 1);
            k += 2;
            run = k + 1;
        }
    }
    size_t cut = 0;
    while (st == TFM_OK && (int)cut < strip && from + cut < out->n &&
           out->data[from + cut] == ' ')
        cut++;
    if (cut) {
        memmove(out->data + from, out->data + from + cut, out->n - from - cut);
        out->n -= cut;
    }
    return st;
}

/* Hugging Face's decoders (tfm__spm_rules.decoder), special tokens
 * skipped (skip_special_tokens), the unknown token as its text:
 *   STRIP: Replace("▁", " "), ByteFallback, Fuse, Strip(" ", n): the
 *   pieces joined, then up to n leading spaces removed (without byte
 *   fallback there is no Fuse, and the Strip applies to each piece);
 *   METASPACE: "▁" a space, except in the first token, which loses every
 *   "▁" (unless prepend_scheme "never"). */
static tfm_status hf_decode(const spm *m, const int32_t *ids, int64_t n,
                            tfm__bytes *out)
{
    const int fused = m->decoder == TFM__SPM_DECODE_STRIP &&
                      m->f.byte_fallback;
    const size_t start = out->n;
    unsigned char *bytes = tfm__malloc((size_t)(n ? n : 1));
    if (!bytes)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    size_t n_bytes = 0;
    int64_t index = 0;   /* tokens decoded so far */
    tfm_status st = TFM_OK;
    for (int64_t i = 0; st == TFM_OK && i < n; i++) {
        const int32_t id = ids[i];
        const int type = m->f.types[id];
        if (type == TFM__SPM_CONTROL)
            continue;
        if (type == TFM__SPM_BYTE) {
            const char *p = m->f.vocab.tokens[id];
            unsigned v = 0;
            for (int k = 3; k < 5; k++)
                v = v * 16 + (unsigned)(p[k] <= '9' ? p[k] - '0'
                                                    : p[k] - 'A' + 10);
            bytes[n_bytes++] = (unsigned char)v;
            index++;
            continue;
        }
        st = hf_flush_bytes(bytes, n_bytes, out);
        n_bytes = 0;
        if (st != TFM_OK)
            break;
        const char *p = type == TFM__SPM_UNKNOWN && m->f.unk_surface
                            ? m->f.unk_surface : m->f.vocab.tokens[id];
        const size_t len = type == TFM__SPM_UNKNOWN && m->f.unk_surface
                               ? m->f.unk_surface_len
                               : m->f.vocab.lengths[id];
        if (m->decoder == TFM__SPM_DECODE_METASPACE)
            st = hf_piece(p, len, index == 0 && m->decoder_strip, 0, out);
        else
            st = hf_piece(p, len, 0, fused ? 0 : m->decoder_strip, out);
        index++;
    }
    if (st == TFM_OK)
        st = hf_flush_bytes(bytes, n_bytes, out);
    tfm__free(bytes);
    if (st == TFM_OK && fused) {
        size_t cut = 0;
        while ((int)cut < m->decoder_strip && start + cut < out->n &&
               out->data[start + cut] == ' ')
            cut++;
        if (cut) {
            memmove(out->data + start, out->data + start + cut,
                    out->n - start - cut);
            out->n -= cut;
        }
    }
    return st;
}

/* SentencePieceProcessor::Decode of pieces: control pieces are empty,
 * <unk> is the unknown surface, another piece the model lacks is itself,
 * byte pieces are gathered into UTF-8, U+2581 is a space, and at the start
 * one leading U+2581 is dropped (with add_dummy_prefix; every leading one
 * with remove_extra_whitespaces).  pieces[i] (lens[i] bytes) and ids[i]
 * (PieceToId) describe token i; pieces NULL: the ids' own pieces. */
static tfm_status decode_pieces(const spm *m, const int32_t *ids,
                                const char *const *pieces,
                                const uint32_t *lens, int64_t n,
                                tfm__bytes *out)
{
    size_t start = out->n;
    unsigned char *bytes = tfm__malloc((size_t)(n ? n : 1));
    if (!bytes)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    size_t n_bytes = 0;
    int is_bos_ws = 1, bos_ws_seen = 0;
    tfm_status st = TFM_OK;
    for (int64_t i = 0; st == TFM_OK && i < n; i++) {
        int32_t id = ids[i];
        int type = m->f.types[id];
        if (type == TFM__SPM_BYTE) {
            unsigned v = 0;
            const char *p = m->f.vocab.tokens[id];
            for (int k = 3; k < 5; k++)
                v = v * 16 + (unsigned)(p[k] <= '9' ? p[k] - '0'
                                                    : p[k] - 'A' + 10);
            bytes[n_bytes++] = (unsigned char)v;
            continue;
        }
        st = flush_bytes(bytes, n_bytes, out);
        n_bytes = 0;
        if (bos_ws_seen || out->n > start)
            is_bos_ws = 0;
        bos_ws_seen = 0;
        if (st != TFM_OK || type == TFM__SPM_CONTROL)
            continue;
        const char *p = pieces ? pieces[i] : m->f.vocab.tokens[id];
        size_t len = pieces ? lens[i] : m->f.vocab.lengths[id];
        if (type == TFM__SPM_UNKNOWN) {
            if (pieces && (len != m->f.vocab.lengths[id] ||
                           memcmp(p, m->f.vocab.tokens[id], len) != 0))
                st = tfm__bytes_append(out, p, len);  /* not <unk>: as is */
            else if (m->f.unk_surface)
                st = tfm__bytes_append(out, m->f.unk_surface,
                                       m->f.unk_surface_len);
            else
                st = tfm__bytes_append(out, UNK_SURFACE,
                                       sizeof UNK_SURFACE - 1);
            continue;
        }
        if (is_bos_ws &&
            (m->f.add_dummy_prefix || m->f.remove_extra_whitespaces) &&
            len >= 3 && memcmp(p, SPACE_SYMBOL, 3) == 0) {
            p += 3;
            len -= 3;
            bos_ws_seen = !m->f.remove_extra_whitespaces;
        }
        size_t run = 0;
        for (size_t k = 0; st == TFM_OK && k <= len; k++) {
            if (k == len || (k + 3 <= len && memcmp(p + k, SPACE_SYMBOL, 3) == 0)) {
                st = tfm__bytes_append(out, p + run, k - run);
                if (st == TFM_OK && k < len)
                    st = tfm__bytes_append(out, " ", 1);
                k += 2;
                run = k + 1;
            }
        }
    }
    if (st == TFM_OK)
        st = flush_bytes(bytes, n_bytes, out);
    tfm__free(bytes);
    return st;
}

static tfm_status spm_decode(const void *model, const int32_t *ids,
                             int64_t n, tfm__bytes *out)
{
    const spm *m = model;
    if (m->decoder != TFM__SPM_DECODE_SENTENCEPIECE)
        return hf_decode(m, ids, n, out);
    return decode_pieces(m, ids, NULL, NULL, n, out);
}

static const tfm__vocab *spm_vocab(const void *model)
{
    return &((const spm *)model)->f.vocab;
}

static void spm_free(void *model)
{
    spm *m = model;
    if (!m)
        return;
    tfm__spm_file_free(&m->f);
    tfm__merges_free(&m->merges);
    trie_free(&m->pieces);
    trie_free(&m->user);
    tfm__free(m->units);
    tfm__free(m);
}

static const tfm__tokenizer_ops SPM_OPS = {
    TFM_TOKENIZER_SENTENCEPIECE, spm_free, spm_encode, spm_decode, spm_vocab,
};

/* The model of a SentencePiece tokenizer read from a .model file, or
 * NULL (with the error set) for another. */
static const spm *spm_of(const tfm_tokenizer *t)
{
    if (!t || t->ops != &SPM_OPS ||
        ((const spm *)t->model)->decoder != TFM__SPM_DECODE_SENTENCEPIECE) {
        tfm__fail(TFM_ERR_INVALID_ARGUMENT, "not a SentencePiece model "
                  "read from a .model file");
        return NULL;
    }
    return t->model;
}

tfm_status tfm__spm_encode_pieces(const tfm_tokenizer *t, const char *text,
                                  size_t len, int64_t base,
                                  tfm__spm_emit emit, void *ctx)
{
    const spm *m = spm_of(t);
    if (!m)
        return TFM_ERR_INVALID_ARGUMENT;
    return spm_segment(m, text, len, base, emit, ctx);
}

tfm_status tfm__spm_decode_pieces(const tfm_tokenizer *t,
                                  const char *const *pieces,
                                  const uint32_t *lens, int64_t n,
                                  tfm__bytes *out)
{
    const spm *m = spm_of(t);
    if (!m)
        return TFM_ERR_INVALID_ARGUMENT;
    int32_t *ids = tfm__malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++)
        ids[i] = piece_id(m, pieces[i], lens[i]);
    tfm_status st = decode_pieces(m, ids, pieces, lens, n, out);
    tfm__free(ids);
    return st;
}

/* "<0xNN>" (upper-case hex, as ByteToPiece) -> NN, else -1. */
static int piece_byte(const char *p, size_t len)
{
    if (len != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
        return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = p[k];
        if (c >= '0' && c <= '9')
            v = v * 16 + (c - '0');
        else if (c >= 'A' && c <= 'F')
            v = v * 16 + (c - 'A' + 10);
        else
            return -1;
    }
    return v;
}

/* ModelInterface::InitializePieces' checks, the charsmap, the tries. */
static tfm_status spm_setup(spm *m, const char *path)
{
    tfm__spm_file *f = &m->f;
    if (f->model_type == TFM__SPM_WORD || f->model_type == TFM__SPM_CHAR)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: a SentencePiece %s "
                         "model (only unigram and BPE are supported)", path,
                         f->model_type == TFM__SPM_WORD ? "WORD" : "CHAR");
    if (f->model_type != TFM__SPM_UNIGRAM && f->model_type != TFM__SPM_BPE)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: unknown model_type %d",
                         path, f->model_type);
    if (f->has_denormalizer)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: a denormalizer_spec "
                         "with rules is not supported", path);
    m->unk = -1;
    for (int b = 0; b < 256; b++)
        m->byte_id[b] = -1;
    m->min_score = FLT_MAX;
    m->max_score = FLT_MIN;
    for (int64_t i = 0; i < f->vocab.size; i++) {
        int type = f->types[i];
        const char *p = f->vocab.tokens[i];
        if (type == TFM__SPM_UNKNOWN) {
            if (m->unk >= 0)
                return tfm__fail(TFM_ERR_FORMAT, "%.200s: two unknown pieces "
                                 "(%d and %lld)", path, m->unk, (long long)i);
            m->unk = (int32_t)i;
        } else if (type == TFM__SPM_BYTE) {
            if (!f->byte_fallback)
                return tfm__fail(TFM_ERR_FORMAT, "%.200s: byte piece \"%.20s\" "
                                 "although byte_fallback is false", path, p);
            int b = piece_byte(p, f->vocab.lengths[i]);
            if (b < 0)
                return tfm__fail(TFM_ERR_FORMAT, "%.200s: byte piece \"%.20s\" "
                                 "is not <0xNN>", path, p);
            m->byte_id[b] = (int32_t)i;
        } else if (type == TFM__SPM_NORMAL) {
            if (f->scores[i] < m->min_score)
                m->min_score = f->scores[i];
            if (f->scores[i] > m->max_score)
                m->max_score = f->scores[i];
        }
        m->has_unused |= type == TFM__SPM_UNUSED;
        m->has_user |= type == TFM__SPM_USER_DEFINED;
    }
    if (m->unk < 0)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: no unknown piece (type "
                         "UNKNOWN, usually <unk>)", path);
    if (f->byte_fallback)
        for (int b = 0; b < 256; b++)
            if (m->byte_id[b] < 0)
                return tfm__fail(TFM_ERR_FORMAT, "%.200s: byte_fallback is "
                                 "true but there is no piece <0x%02X>", path,
                                 b);
    if (f->charsmap) {
        uint32_t trie_size = 0;
        if (f->charsmap_len > 4)
            trie_size = (uint32_t)((unsigned char)f->charsmap[0] |
                                   (unsigned char)f->charsmap[1] << 8 |
                                   (unsigned char)f->charsmap[2] << 16 |
                                   (uint32_t)(unsigned char)f->charsmap[3] << 24);
        if (f->charsmap_len <= 4 || trie_size < 4 || trie_size % 4 ||
            trie_size > f->charsmap_len - 4)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: the normalizer's "
                             "precompiled_charsmap is broken", path);
        m->n_units = trie_size / 4;
        m->units = tfm__malloc(trie_size);
        if (!m->units)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
        for (size_t u = 0; u < m->n_units; u++) {
            const unsigned char *q =
                (const unsigned char *)f->charsmap + 4 + 4 * u;
            m->units[u] = (uint32_t)q[0] | (uint32_t)q[1] << 8 |
                          (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        }
        m->norm = f->charsmap + 4 + trie_size;
        m->norm_len = f->charsmap_len - 4 - trie_size;
    }
    /* A piece of pieces_ with a ▁ after a character that is not ▁ could
     * be merged across the start of a word; without one, BPE may work word
     * by word (encode_bpe). */
    m->split_at_space = 1;
    for (int64_t i = 0; m->split_at_space && i < f->vocab.size; i++) {
        if (!keep_pieces(f->types[i]))
            continue;
        const char *p = f->vocab.tokens[i];
        size_t len = f->vocab.lengths[i];
        for (size_t k = 1; k + 3 <= len; k++)
            if (memcmp(p + k, SPACE_SYMBOL, 3) == 0 &&
                !(k >= 3 && memcmp(p + k - 3, SPACE_SYMBOL, 3) == 0)) {
                m->split_at_space = 0;
                break;
            }
    }
    tfm_status st = trie_build(&m->pieces, f, keep_pieces);
    if (st == TFM_OK && m->has_user)
        st = trie_build(&m->user, f, keep_user);
    return st;
}

tfm_status tfm__spm_tokenizer_new(tfm__spm_file *f, tfm__spm_rules *r,
                                  const char *path, tfm_tokenizer **out)
{
    spm *m = tfm__calloc(1, sizeof *m);
    if (!m) {
        tfm__spm_file_free(f);
        tfm__merges_free(&r->merges);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    m->f = *f;
    memset(f, 0, sizeof *f);
    m->merges = r->merges;
    memset(&r->merges, 0, sizeof r->merges);
    m->prepend = r->prepend;
    m->fuse_unk = r->fuse_unk;
    m->split_words = r->split_words;
    m->decoder = r->decoder;
    m->decoder_strip = r->decoder_strip;
    tfm_status st = spm_setup(m, path);
    if (st != TFM_OK) {
        spm_free(m);
        return st;
    }
    const tfm__spm_file *sf = &m->f;
    int64_t size = sf->vocab.size;
    int32_t unk = m->unk;
    tfm_tokenizer *t;
    st = tfm__tokenizer_wrap(&SPM_OPS, m, &t);  /* m is t's from here */
    if (st != TFM_OK)
        return st;
    /* Control and unknown pieces are special; the trainer's ids give the
     * roles (sentencepiece's bos_id() and so on). */
    for (int64_t i = 0; st == TFM_OK && i < size; i++) {
        int type = sf->types[i];
        if (type != TFM__SPM_CONTROL && type != TFM__SPM_UNKNOWN)
            continue;
        int role = -1;
        if (i == unk)
            role = TFM__ROLE_UNK;
        else if (i == sf->bos_id)
            role = TFM__ROLE_BOS;
        else if (i == sf->eos_id)
            role = TFM__ROLE_EOS;
        else if (i == sf->pad_id)
            role = TFM__ROLE_PAD;
        st = tfm__tokenizer_add_special(t, (int32_t)i, NULL, 0, role);
    }
    t->framing = r->framing;
    if (st != TFM_OK) {
        tfm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TFM_OK;
}

tfm_status tfm__spm_load(const char *path, tfm_tokenizer **out)
{
    char *data;
    size_t len;
    tfm_status st = tfm__read_file(path, &data, &len);
    if (st != TFM_OK)
        return st;
    tfm__spm_file f;
    st = tfm__spm_file_read((const unsigned char *)data, len, path, &f);
    tfm__free(data);
    if (st != TFM_OK)
        return st;
    tfm__spm_rules r = { .prepend = TFM__SPM_PREPEND_DUMMY, .fuse_unk = 1,
                         .framing = f.model_type == TFM__SPM_BPE
                                        ? TFM__FRAME_BOS : TFM__FRAME_EOS,
                         .decoder = TFM__SPM_DECODE_SENTENCEPIECE };
    return tfm__spm_tokenizer_new(&f, &r, path, out);
}
