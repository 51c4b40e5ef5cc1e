/* UTF-8 decoding, validation and encoding (utf8.h; RFC 3629 section 3). */
#include "base/utf8.h"

const char *tfm__utf8_decode(const unsigned char *s, size_t len, uint32_t *cp,
                             size_t *n_bytes)
{
    /* The smallest code point each length may encode (shorter is an
     * overlong form). */
    static const uint32_t min_for_length[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    const unsigned char b = s[0];
    size_t n;
    uint32_t c;
    if (b < 0x80) {
        *cp = b;
        *n_bytes = 1;
        return NULL;
    }
    /* The lead byte gives the length: 110xxxxx, 1110xxxx, 11110xxx. */
    if (b < 0xC0)
        return "unexpected continuation byte";
    if (b < 0xE0) {
        n = 2;
        c = b & 0x1Fu;
    } else if (b < 0xF0) {
        n = 3;
        c = b & 0x0Fu;
    } else if (b < 0xF8) {
        n = 4;
        c = b & 0x07u;
    } else {
        return "invalid lead byte (a byte that never occurs in UTF-8)";
    }
    /* Each continuation byte 10xxxxxx adds six bits. */
    for (size_t i = 1; i < n; i++) {
        if (i >= len)
            return "truncated sequence";
        if ((s[i] & 0xC0u) != 0x80u)
            return "missing continuation byte";
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    if (c < min_for_length[n])
        return "overlong encoding";
    if (c >= 0xD800 && c <= 0xDFFF)
        return "UTF-16 surrogate";
    if (c > 0x10FFFF)
        return "code point above U+10FFFF";
    *cp = c;
    *n_bytes = n;
    return NULL;
}

const char *tfm__utf8_check(const unsigned char *s, size_t n, size_t *at)
{
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t len;
        const char *why = tfm__utf8_decode(s + i, n - i, &c, &len);
        if (why) {
            *at = i;
            return why;
        }
        i += len;
    }
    return NULL;
}

size_t tfm__utf8_encode(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}
