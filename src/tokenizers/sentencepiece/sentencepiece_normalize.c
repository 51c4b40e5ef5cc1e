/* The SentencePiece normalizer (sentencepiece_impl.h), as sentencepiece
 * 0.1.97's normalizer.cc: user-defined pieces kept whole, the
 * precompiled charsmap's rules (a darts-clone double array), whitespace
 * escaped to U+2581, the dummy prefix, extra whitespace removed, and
 * Hugging Face's Metaspace and WhitespaceSplit where a tokenizer.json asks
 * for them; each normalized byte remembers the input byte it comes from.
 * docs/TOKENIZERS.md gives the rules one by one. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"
#include "tokenizers/sentencepiece/sentencepiece_impl.h"

#include <utf8proc.h>

/* Appends x to o; 0 when out of memory. */
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
tfm_status tfm__spm_normalize(const spm *m, const unsigned char *text,
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
