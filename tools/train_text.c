/* transformer-train's vocabulary (train_text.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PROGRAM "transformer-train"
#include "cli_args.h"
#include "train_text.h"

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
