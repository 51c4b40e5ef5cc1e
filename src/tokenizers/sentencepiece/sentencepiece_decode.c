/* Decoding SentencePiece ids to text (sentencepiece_impl.h): as
 * sentencepiece 0.1.97's SentencePieceProcessor::Decode (byte pieces
 * gathered into UTF-8, U+2581 a space, the dummy prefix dropped), and as
 * Hugging Face's decoders of a tokenizer.json (Replace, ByteFallback,
 * Fuse, Strip; Metaspace).  docs/TOKENIZERS.md gives the rules. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"
#include "tokenizers/sentencepiece/sentencepiece_impl.h"

static const char UNK_SURFACE[] = " \xe2\x81\x87 "; /* " U+2047 " */

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
tfm_status tfm__spm_hf_decode(const spm *m, const int32_t *ids, int64_t n,
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
tfm_status tfm__spm_decode(const spm *m, const int32_t *ids,
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
