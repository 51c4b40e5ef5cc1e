/* SentencePiece tokenizers (tokenizer.h, sentencepiece.h), as
 * sentencepiece 0.1.97 runs them (Kudo and Richardson 2018,
 * "SentencePiece: A simple and language independent subword tokenizer"):
 * this file holds the model's checks and tries, loading (a .model file,
 * or the model a tokenizer.json gives), and the front behind
 * tokenizer_impl.h and sentencepiece.h that runs the parts: the
 * normalizer (sentencepiece_normalize.c), BPE merges by score or by rank
 * (sentencepiece_bpe.c, Llama's models, with byte fallback), the unigram
 * model's Viterbi segmentation (sentencepiece_unigram.c, T5's, Marian's)
 * and decoding (sentencepiece_decode.c); sentencepiece_impl.h is what they
 * share.  docs/TOKENIZERS.md gives the rules one by one. */
#include <float.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "tokenizers/sentencepiece/sentencepiece_impl.h"

/* ---- The tries ------------------------------------------------------- */

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
    tfm_status st = tfm__spm_normalize(m, (const unsigned char *)text, len,
                                       base == 0, &norm, &o);
    if (st == TFM_OK && norm.n > 0) {
        if (m->f.model_type == TFM__SPM_BPE) {
            st = tfm__spm_encode_bpe(m, norm.data, norm.n, &segs);
        } else if (!m->split_words) {
            st = tfm__spm_encode_unigram(m, norm.data, norm.n, &segs);
        } else {
            /* WhitespaceSplit: each "▁"-started word on its own (no piece
             * spans two words, as Hugging Face runs the model per word). */
            size_t begin = 0;
            for (size_t i = 1; st == TFM_OK && i <= norm.n; i++) {
                if (i < norm.n && !(i + 3 <= norm.n &&
                                    memcmp(norm.data + i, SPACE_SYMBOL, 3) == 0))
                    continue;
                const size_t first = segs.n;
                st = tfm__spm_encode_unigram(m, norm.data + begin, i - begin,
                                             &segs);
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

static tfm_status spm_decode(const void *model, const int32_t *ids,
                             int64_t n, tfm__bytes *out)
{
    const spm *m = model;
    if (m->decoder != TFM__SPM_DECODE_SENTENCEPIECE)
        return tfm__spm_hf_decode(m, ids, n, out);
    return tfm__spm_decode(m, ids, NULL, NULL, n, out);
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
    tfm_status st = tfm__spm_decode(m, ids, pieces, lens, n, out);
    tfm__free(ids);
    return st;
}

/* ---- Loading --------------------------------------------------------- */

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
    tfm_status st = tfm__read_file(path, TFM__FILE_MAX_TOKENIZER, &data, &len);
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
