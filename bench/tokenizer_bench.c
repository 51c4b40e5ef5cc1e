/* Tokenizer encode throughput (docs/PERFORMANCE.md, "Tokenizers"):
 *
 *   transformer-tokenizer-bench TOKENIZER TEXT [REPS]
 *
 * Encodes every line of TEXT (one call per line, as a corpus of sentences
 * is tokenized), REPS times (default 5), and prints the best pass as
 * "MB/s,lines,bytes,tokens,seconds".  Timings only here, never in tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <transformer/transformer.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER TEXT [REPS]\n", argv[0]);
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    tfm_tokenizer *tok;
    if (tfm_tokenizer_load(argv[1], &tok) != TFM_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], tfm_last_error());
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size)
        return 1;
    fclose(f);
    int64_t cap = size + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    double best = 1e30;
    long lines = 0, tokens = 0;
    for (int r = 0; r < reps; r++) {
        lines = tokens = 0;
        double t0 = now();
        for (long pos = 0; pos < size;) {
            char *eol = memchr(text + pos, '\n', (size_t)(size - pos));
            long end = eol ? eol - text : size;
            int64_t n = 0;
            if (tfm_tokenizer_encode_v2(tok, text + pos, (size_t)(end - pos),
                                        NULL, 0, 0, ids, NULL, NULL, cap,
                                        &n) != TFM_OK) {
                fprintf(stderr, "encode: %s\n", tfm_last_error());
                return 1;
            }
            tokens += (long)n;
            lines++;
            pos = end + 1;
        }
        double dt = now() - t0;
        if (dt < best)
            best = dt;
    }
    printf("%.2f,%ld,%ld,%ld,%.4f\n", (double)size / best / 1e6, lines, size,
           tokens, best);
    free(ids);
    free(text);
    tfm_tokenizer_free(tok);
    return 0;
}
