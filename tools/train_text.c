/* transformer-train's vocabulary (train_text.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PROGRAM "transformer-train"
#include "cli_args.h"
#include "train_text.h"

/* UTF-8 decoding of one code point at s (n bytes left); returns its length,
 * 0 when invalid: a lead byte of 0xF8 and above, a missing continuation
 * byte, an overlong form (C0 80 is U+0000: it made a text "empty"), a
 * UTF-16 surrogate, a code point past U+10FFFF. */
static int utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    const int len = s[0] >= 0xF8   ? 0
                    : s[0] >= 0xF0 ? 4
                    : s[0] >= 0xE0 ? 3
                    : s[0] >= 0xC0 ? 2
                                   : 0;
    if (len == 0 || (size_t)len > n)
        return 0;
    uint32_t v = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (v < least[len] || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)
        return 0;
    *cp = v;
    return len;
}

/* The text's distinct characters in code-point order, as UTF-8 (malloc'd);
 * NULL when the text is not valid UTF-8 (message printed).  One pass
 * marks the code points seen in a bitmap of the Unicode range. */
char *vocabulary_of(const char *text, size_t len, const char *path)
{
    enum { N_CODE_POINTS = 0x110000 };
    uint64_t *seen = calloc(N_CODE_POINTS / 64, sizeof *seen);
    if (!seen) {
        fail("out of memory");
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c = 0;
        const int k = utf8_next((const unsigned char *)text + i, len - i, &c);
        if (k == 0 || c >= N_CODE_POINTS) {
            free(seen);
            fail("%s is not valid UTF-8 (byte %zu)", path, i);
            return NULL;
        }
        if (!(seen[c / 64] >> (c % 64) & 1)) {
            seen[c / 64] |= (uint64_t)1 << (c % 64);
            n++;
        }
        i += (size_t)k;
    }
    char *vocab = malloc(4 * n + 1);
    size_t m = 0;
    for (uint32_t c = 0; vocab && c < N_CODE_POINTS; c++) {
        if (!(seen[c / 64] >> (c % 64) & 1))
            continue;
        if (c < 0x80) {
            vocab[m++] = (char)c;
        } else if (c < 0x800) {
            vocab[m++] = (char)(0xC0 | (c >> 6));
            vocab[m++] = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            vocab[m++] = (char)(0xE0 | (c >> 12));
            vocab[m++] = (char)(0x80 | ((c >> 6) & 0x3F));
            vocab[m++] = (char)(0x80 | (c & 0x3F));
        } else {
            vocab[m++] = (char)(0xF0 | (c >> 18));
            vocab[m++] = (char)(0x80 | ((c >> 12) & 0x3F));
            vocab[m++] = (char)(0x80 | ((c >> 6) & 0x3F));
            vocab[m++] = (char)(0x80 | (c & 0x3F));
        }
    }
    free(seen);
    if (!vocab) {
        fail("out of memory");
        return NULL;
    }
    vocab[m] = '\0';
    return vocab;
}
