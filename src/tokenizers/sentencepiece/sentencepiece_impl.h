/* Internal to the SentencePiece tokenizer: its model (struct spm) and
 * what its parts share.  Included only by the tokenizer's own files:
 * tokenizer_sentencepiece.c (the tries, the encode/decode front behind
 * tokenizer_impl.h, loading), sentencepiece_normalize.c (the normalizer
 * and its precompiled charsmap), sentencepiece_bpe.c (BPE by score or by
 * ranked merges), sentencepiece_unigram.c (unigram Viterbi) and
 * sentencepiece_decode.c (sentencepiece's and Hugging Face's decoding).
 * The helpers the segmentation loops call are static inline here, so that
 * every file can inline them. */
#ifndef TFM_SRC_SENTENCEPIECE_IMPL_H
#define TFM_SRC_SENTENCEPIECE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "tokenizers/sentencepiece/sentencepiece.h"

static const char SPACE_SYMBOL[] = "\xe2\x96\x81";  /* U+2581 */
static const char REPLACEMENT[] = "\xef\xbf\xbd";   /* U+FFFD */

/* ---- A byte trie in a hash table ----------------------------------------
 * Node 0 is the root; the child of node n by byte c is found under the key
 * (n << 8 | c) + 1.  value[n] is the piece id ending at n, or -1. */
typedef struct spm_trie {
    uint64_t *keys;     /* [n_slots], 0 for an empty slot */
    int32_t *child;     /* [n_slots] */
    int32_t *value;     /* [n_nodes] */
    size_t n_slots, n_nodes;
} spm_trie;

static inline size_t trie_slot(const spm_trie *t, uint64_t key)
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

/* ---- Segmentation ---------------------------------------------------- */

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

static inline int segs_push(spm_segs *s, size_t begin, size_t len, int32_t id)
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

/* Longest user-defined piece at s[0 .. len-1], or 0. */
static inline size_t user_match(const spm *m, const unsigned char *s,
                                size_t len)
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

static inline size_t one_char_len(unsigned char c)
{
    static const unsigned char LEN[16] = { 1, 1, 1, 1, 1, 1, 1, 1,
                                           1, 1, 1, 1, 2, 2, 3, 4 };
    return LEN[c >> 4];
}

/* PieceToId: the piece's id (any type), else unk. */
static inline int32_t piece_id(const spm *m, const char *s, size_t len)
{
    int32_t id = tfm__vocab_find(&m->f.vocab, s, len);
    return id < 0 ? m->unk : id;
}

/* ---- The parts ------------------------------------------------------- */

/* Normalizer::Normalize (sentencepiece_normalize.c): text[0 .. len-1] ->
 * norm, and in o for each byte of norm (and one past the end) the byte of
 * text it comes from.  first: the text is not after a special token
 * (wants_prefix).  Errors: TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_normalize(const spm *m, const unsigned char *text,
                              size_t len, int first, tfm__bytes *norm,
                              spm_offsets *o);

/* bpe_model.cc's Encode (sentencepiece_bpe.c): the pieces of
 * norm[0 .. n-1] appended to out.  Errors: TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_encode_bpe(const spm *m, const char *norm, size_t n,
                               spm_segs *out);

/* unigram_model.cc's EncodeOptimized, the Viterbi segmentation
 * (sentencepiece_unigram.c): the pieces of norm[0 .. n-1] appended to out.
 * Errors: TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_encode_unigram(const spm *m, const char *norm, size_t n,
                                   spm_segs *out);

/* SentencePieceProcessor::Decode (sentencepiece_decode.c), appended to
 * out: ids[i] and, unless pieces is NULL, pieces[i] (lens[i] bytes)
 * describe token i.  Errors: TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_decode(const spm *m, const int32_t *ids,
                           const char *const *pieces, const uint32_t *lens,
                           int64_t n, tfm__bytes *out);

/* Hugging Face's decoders (m->decoder not TFM__SPM_DECODE_SENTENCEPIECE;
 * sentencepiece_decode.c), appended to out.  Errors:
 * TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_hf_decode(const spm *m, const int32_t *ids, int64_t n,
                              tfm__bytes *out);

#endif
