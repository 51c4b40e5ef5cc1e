/* The weight storage kernels (src/kernels/quant.h) as a filter, for
 * tests/quant_reference.py (gguf-py's quantisers against ours):
 *
 *   quant_dump quantize TYPE ROW IN OUT   float32 rows of ROW values (IN,
 *                                         little-endian) -> stored bytes
 *   quant_dump widen TYPE ROW IN OUT      stored rows -> float32
 *
 * TYPE: f32 f16 bf16 q8_0 q4_0.  Exit status 0, or 1 with a message on
 * stderr (a refused row says "non-finite"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"

static int read_all(const char *path, unsigned char **data, long *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc((size_t)*size + 1);
    const int ok = *data && fread(*data, 1, (size_t)*size, f) == (size_t)*size;
    fclose(f);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const char *names[] = { "f32", "f16", "bf16", "q8_0", "q4_0" };
    static const int types[] = { TFM_DTYPE_F32, TFM_DTYPE_F16, TFM_DTYPE_BF16,
                                 TFM_DTYPE_Q8_0, TFM_DTYPE_Q4_0 };
    if (argc != 6) {
        fprintf(stderr, "usage: %s quantize|widen TYPE ROW IN OUT\n", argv[0]);
        return 1;
    }
    int dtype = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(argv[2], names[i]))
            dtype = types[i];
    const long row = atol(argv[3]);
    const int64_t rb = tfm__dtype_row_bytes(dtype, row);
    unsigned char *in = NULL;
    long size = 0;
    if (rb <= 0 || read_all(argv[4], &in, &size) != 0) {
        fprintf(stderr, "quant_dump: bad type, row or input\n");
        return 1;
    }
    const int quantize = !strcmp(argv[1], "quantize");
    const long in_row = quantize ? row * 4 : (long)rb;
    const long out_row = quantize ? (long)rb : row * 4;
    const long rows = size / in_row;
    unsigned char *out = malloc((size_t)(rows * out_row) + 1);
    if (!out || size % in_row)
        return 1;
    for (long r = 0; r < rows; r++) {
        if (quantize) {
            float *x = malloc((size_t)in_row);
            memcpy(x, in + r * in_row, (size_t)in_row);
            const tfm_status s =
                tfm__quantize_row(dtype, x, row, out + r * out_row);
            free(x);
            if (s == TFM_ERR_OVERFLOW) {
                /* Refused (a value or block scale past binary16): the
                 * row's bytes all 0xFF, which tests/quant_reference.py
                 * expects exactly where ggml would store an infinity. */
                memset(out + r * out_row, 0xFF, (size_t)out_row);
                continue;
            }
            if (s != TFM_OK) {
                fprintf(stderr, "quant_dump: row %ld: %s\n", r,
                        s == TFM_ERR_NON_FINITE ? "non-finite" : "refused");
                return 1;
            }
        } else {
            tfm__widen_row(dtype, in + r * in_row, row,
                           (float *)(void *)(out + r * out_row));
        }
    }
    FILE *f = fopen(argv[5], "wb");
    if (!f || fwrite(out, 1, (size_t)(rows * out_row), f) !=
                  (size_t)(rows * out_row) || fclose(f) != 0)
        return 1;
    free(in);
    free(out);
    return 0;
}
