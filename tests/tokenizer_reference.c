/* Compares libtransformer's tokenizer with reference ids computed by an
 * independent implementation (tests/tokenizers/reference.js, or Debian's
 * python3-sentencepiece):
 *
 *   tokenizer_reference TOKENIZER REF.tsv [--split-special] [--add-special]
 *                       [--ids-only]
 *
 * REF.tsv holds one case per line: the text's bytes in hex, a tab, the
 * reference ids separated by spaces, and optionally a tab and the bytes of
 * the reference's decoding of those ids in hex (then decoding the ids must
 * give exactly those bytes; --ids-only skips that comparison, for a
 * reference whose decoding rules are not the tokenizer's).  Every case is
 * encoded; the ids must
 * be equal, the offsets must cover the text in order, and decoding must give
 * the text back (byte-level BPE, whose decode is exact; byte-level BPE's
 * tokens also tile the text).  Prints each
 * mismatch (at most 20) and a summary; exits 0 only when every case agrees
 * and there was at least one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER REF.tsv [--split-special] "
                "[--add-special] [--ids-only]\n", argv[0]);
        return 2;
    }
    unsigned flags = 0;
    int ids_only = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--split-special") == 0)
            flags |= TFM_ENCODE_SPLIT_SPECIAL;
        else if (strcmp(argv[i], "--add-special") == 0)
            flags |= TFM_ENCODE_ADD_SPECIAL;
        else if (strcmp(argv[i], "--ids-only") == 0)
            ids_only = 1;
    }
    tfm_tokenizer *tok;
    if (tfm_tokenizer_load(argv[1], &tok) != TFM_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], tfm_last_error());
        return 1;
    }
    int exact_decode = tfm_tokenizer_get_kind(tok) == TFM_TOKENIZER_BYTE_BPE;
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    size_t cap = 1 << 20;
    char *line = malloc(cap);
    char *text = malloc(cap);
    int32_t *want = malloc(cap * sizeof *want);
    int32_t *got = malloc(cap * sizeof *got);
    int64_t *off = malloc(2 * cap * sizeof *off);
    char *back = malloc(cap);
    char *decoded = malloc(cap);
    long cases = 0, bad = 0, tokens = 0;
    size_t bytes = 0;
    while (fgets(line, (int)cap, f)) {
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        size_t len = 0;
        for (char *p = line; p + 1 < tab; p += 2)
            text[len++] = (char)(hex_value(p[0]) * 16 + hex_value(p[1]));
        int64_t n_want = 0;
        char *p = tab + 1;
        while (*p && *p != '\n' && *p != '\t') {
            want[n_want++] = (int32_t)strtol(p, &p, 10);
            while (*p == ' ')
                p++;
        }
        /* An optional third column: the reference's decoding of its ids. */
        int has_decoded = *p == '\t' && !ids_only;
        size_t decoded_len = 0;
        if (has_decoded)
            for (p++; p[0] && p[0] != '\n' && p[1]; p += 2)
                decoded[decoded_len++] =
                    (char)(hex_value(p[0]) * 16 + hex_value(p[1]));
        int64_t n = 0;
        cases++;
        bytes += len;
        tokens += n_want;
        tfm_status st = tfm_tokenizer_encode_v2(tok, text, len, NULL, 0, flags,
                                                got, NULL, off, (int64_t)cap,
                                                &n);
        int ok = st == TFM_OK && n == n_want &&
                 memcmp(got, want, (size_t)n * sizeof *got) == 0;
        /* Offsets: inside the text, in order (tokens cut from one
         * character, as WordPiece's from a decomposed Hangul syllable,
         * share its bytes). */
        for (int64_t i = 0; ok && i < n; i++)
            ok = off[2 * i] <= off[2 * i + 1] &&
                 off[2 * i + 1] <= (int64_t)len &&
                 (i == 0 || (off[2 * i] >= off[2 * i - 2] &&
                             off[2 * i + 1] >= off[2 * i - 1]));
        if (ok && exact_decode && !(flags & TFM_ENCODE_ADD_SPECIAL)) {
            size_t back_len = 0;
            ok = tfm_tokenizer_decode(tok, got, n, back, cap, &back_len) ==
                     TFM_OK && back_len == len && memcmp(back, text, len) == 0;
            for (int64_t i = 0; ok && i + 1 < n; i++)
                ok = off[2 * i + 1] == off[2 * i + 2];
            ok = ok && (n == 0 || (off[0] == 0 && off[2 * n - 1] == (int64_t)len));
        }
        if (ok && has_decoded) {
            size_t back_len = 0;
            ok = tfm_tokenizer_decode(tok, want, n_want, back, cap,
                                      &back_len) == TFM_OK &&
                 back_len == decoded_len &&
                 memcmp(back, decoded, decoded_len) == 0;
            if (!ok)
                printf("DECODE MISMATCH case %ld: want \"%.*s\" got \"%.*s\"\n",
                       cases + 0, (int)(decoded_len > 200 ? 200 : decoded_len),
                       decoded, (int)(back_len > 200 ? 200 : back_len), back);
        }
        if (!ok) {
            bad++;
            if (bad <= 20) {
                printf("MISMATCH case %ld \"%.*s\"%s\n  want:", cases,
                       (int)(len > 200 ? 200 : len), text,
                       len > 200 ? "..." : "");
                for (int64_t i = 0; i < n_want && i < 60; i++)
                    printf(" %d", want[i]);
                printf("\n  got: ");
                if (st != TFM_OK)
                    printf(" error: %s", tfm_last_error());
                for (int64_t i = 0; st == TFM_OK && i < n && i < 60; i++)
                    printf(" %d", got[i]);
                printf("\n");
            }
        }
    }
    fclose(f);
    printf("%s on %s: %ld cases, %zu bytes, %ld reference tokens, %ld "
           "mismatches\n", argv[1], argv[2], cases, bytes, tokens, bad);
    free(line);
    free(text);
    free(want);
    free(got);
    free(off);
    free(back);
    free(decoded);
    tfm_tokenizer_free(tok);
    return bad == 0 && cases > 0 ? 0 : 1;
}
