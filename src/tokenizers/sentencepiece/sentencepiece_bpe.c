/* SentencePiece's BPE (sentencepiece_impl.h), as sentencepiece 0.1.97's
 * bpe_model.cc: the adjacent pair whose merged piece scores highest merges
 * first (Llama's models), or with Hugging Face's ranked merges the pair of
 * lowest rank; a heap of candidate pairs, unused pieces split back into
 * the pieces they were merged from (Sennrich et al. 2016). */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "tokenizers/sentencepiece/sentencepiece_impl.h"

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
tfm_status tfm__spm_encode_bpe(const spm *m, const char *norm, size_t n,
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
