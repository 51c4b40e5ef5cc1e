/* One-row products with a stored weight (issue 45): G weights/s of
 * tfm__linear_stored (src/kernels/quant_linear.c) for F32 (tfm__sgemm, i.e.
 * cblas_sgemv on float32 in memory), BF16, F16, Q8_0 and Q4_0 weights of
 * three shapes, next to the plain memory read rate (a sum over 512 MiB),
 * at one thread.  Each weight set is larger than the last-level cache
 * (several copies, used in turn), as a model's layers are in decoding.
 * Built from the kernels' sources (tests/CMakeLists.txt: tfm_quant_kernels);
 * not run by ctest.
 *
 *   transformer-quant-bench [--seconds S] [--path base|avx2|avx512]
 *                           [--widen-only]
 *
 * --widen-only times the widening loop alone (no sgemv). */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/gemm.h"
#include "kernels/quant.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static float next_value(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
}

/* Copies of the weight so that their bytes together exceed this: the
 * weight streams from memory, as in decoding. */
#define STREAM_BYTES ((int64_t)256 << 20)

static double memory_read(double seconds)
{
    const size_t n = ((size_t)512 << 20) / sizeof(float);
    float *a = malloc(n * sizeof(float));
    if (!a)
        return 0.0;
    for (size_t i = 0; i < n; i++)
        a[i] = 1.0f;
    double best = 0.0;
    const double end = now() + seconds;
    volatile float sink = 0.0f;
    do {
        const double t0 = now();
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        for (size_t i = 0; i < n; i += 8) {
            s0 += a[i];
            s1 += a[i + 1];
            s2 += a[i + 2];
            s3 += a[i + 3];
            s4 += a[i + 4];
            s5 += a[i + 5];
            s6 += a[i + 6];
            s7 += a[i + 7];
        }
        sink = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
        const double rate = (double)(n * sizeof(float)) / (now() - t0);
        best = rate > best ? rate : best;
    } while (now() < end);
    (void)sink;
    free(a);
    return best;
}

/* G weights per second of one-row products y = x W^T, W [out, in]. */
static double product_rate(int dtype, int64_t out, int64_t in,
                           double seconds, int widen_only)
{
    const int64_t rb = tfm__dtype_row_bytes(dtype, in);
    const int64_t bytes = rb * out;
    int64_t copies = STREAM_BYTES / bytes + 1;
    unsigned char *w = malloc((size_t)(bytes * copies));
    float *row = malloc(sizeof(float) * (size_t)in);
    float *x = malloc(sizeof(float) * (size_t)in);
    float *y = malloc(sizeof(float) * (size_t)out);
    float *wide = malloc(sizeof(float) * (size_t)(in * 64));
    if (!w || !row || !x || !y || !wide) {
        free(w), free(row), free(x), free(y), free(wide);
        return 0.0;
    }
    for (int64_t i = 0; i < in; i++)
        x[i] = next_value();
    for (int64_t r = 0; r < out; r++) {
        for (int64_t i = 0; i < in; i++)
            row[i] = next_value();
        if (tfm__quantize_row(dtype, row, in, w + r * rb) != TFM_OK)
            abort();
    }
    for (int64_t c = 1; c < copies; c++)
        memcpy(w + c * bytes, w, (size_t)bytes);
    int64_t calls = 0;
    double best = 0.0;
    const double end = now() + seconds;
    do {
        const double t0 = now();
        for (int64_t c = 0; c < copies; c++) {
            const tfm__wview v = { dtype, w + c * bytes, out, in, rb };
            if (widen_only) {
                for (int64_t r = 0; r < out; r += 64)
                    tfm__widen_row(dtype, v.data + r * rb,
                                   (out - r < 64 ? out - r : 64) * in, wide);
            } else {
                tfm__linear_stored(x, in, 1, in, &v, NULL, out, y, out);
            }
        }
        calls += copies;
        const double rate = (double)(out * in * copies) / (now() - t0);
        best = rate > best ? rate : best;
    } while (now() < end);
    free(w);
    free(row);
    free(x);
    free(y);
    free(wide);
    return best * 1e-9;
}

/* One-row products (sgemv) on a float32 panel of about 256 KiB that stays
 * in cache (widened once, multiplied again and again): the rate of the
 * product half of a stored-weight product, its widening left out. */
static double cached_panel_rate(int64_t in, double seconds)
{
    int64_t rows = 256 * 1024 / 4 / in;
    rows = rows < 1 ? 1 : rows;
    float *p = malloc((size_t)(rows * in) * sizeof *p);
    float *x = malloc((size_t)in * sizeof *x), *y = malloc((size_t)rows * 4);
    if (!p || !x || !y)
        return 0.0;
    for (int64_t i = 0; i < rows * in; i++)
        p[i] = next_value();
    for (int64_t i = 0; i < in; i++)
        x[i] = next_value();
    int64_t n = 0;
    const double t0 = now();
    double t = t0;
    while (t - t0 < seconds) {
        for (int k = 0; k < 64; k++)
            tfm__sgemm(0, 1, 1, rows, in, 1.0f, x, in, p, in, 0.0f, y, rows);
        n += 64;
        t = now();
    }
    free(p);
    free(x);
    free(y);
    return (double)n * (double)(rows * in) / (t - t0);
}

int main(int argc, char **argv)
{
    double seconds = 1.0;
    int widen_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--widen-only")) {
            widen_only = 1;
        } else if (!strcmp(argv[i], "--path") && i + 1 < argc) {
            const char *p = argv[++i];
            const int path = !strcmp(p, "base")   ? TFM__WIDEN_BASE
                             : !strcmp(p, "avx2") ? TFM__WIDEN_AVX2
                                                  : TFM__WIDEN_AVX512;
            if (tfm__widen_use_path(path) < 0) {
                fprintf(stderr, "path %s: not supported here\n", p);
                return 1;
            }
        } else {
            fprintf(stderr, "usage: %s [--seconds S] [--path base|avx2|"
                            "avx512] [--widen-only]\n", argv[0]);
            return 2;
        }
    }
    tfm__blas_single_thread();
    char model[600] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                const char *c = strchr(line, ':');
                snprintf(model, sizeof model, "%s", c ? c + 2 : line);
                model[strcspn(model, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    int path = 0;
    for (int p = TFM__WIDEN_PATHS - 1; p >= 0; p--) {
        const int before = tfm__widen_use_path(p);
        if (before >= 0) { /* probe, then put the chosen one back */
            tfm__widen_use_path(before);
            path = before;
            break;
        }
    }
    printf("cpu: %s; widening path: %s; OpenBLAS %s (core %s), 1 thread\n",
           model, path == 2 ? "AVX-512" : path == 1 ? "AVX2" : "baseline",
           openblas_get_config(), openblas_get_corename());
    printf("memory read (sum over 512 MiB): %.1f GB/s\n",
           memory_read(seconds) * 1e-9);
    printf("sgemv on a cached 256 KiB float32 panel: %.1f (in 768), %.1f "
           "(in 3072) G weights/s\n",
           cached_panel_rate(768, seconds) * 1e-9,
           cached_panel_rate(3072, seconds) * 1e-9);
    const int64_t shapes[3][2] = { { 768, 3072 }, { 3072, 768 },
                                   { 2048, 2048 } };
    const int types[] = { TFM_DTYPE_F32, TFM_DTYPE_BF16, TFM_DTYPE_F16,
                          TFM_DTYPE_Q8_0, TFM_DTYPE_Q4_0 };
    const char *names[] = { "F32", "BF16", "F16", "Q8_0", "Q4_0" };
    printf("%s G weights/s (GB/s of stored bytes)\n",
           widen_only ? "widening alone:" : "one-row products:");
    printf("%-12s", "out x in");
    for (int t = 0; t < 5; t++)
        printf(" %16s", names[t]);
    printf("\n");
    for (int s = 0; s < 3; s++) {
        printf("%4lld x %-5lld", (long long)shapes[s][0],
               (long long)shapes[s][1]);
        for (int t = 0; t < 5; t++) {
            if (widen_only && types[t] == TFM_DTYPE_F32) {
                printf(" %16s", "-");
                continue;
            }
            const double g = product_rate(types[t], shapes[s][0],
                                          shapes[s][1], seconds, widen_only);
            const double per = (double)tfm__dtype_row_bytes(types[t], 32) / 32;
            printf("   %5.2f (%5.1f)", g, g * per);
            fflush(stdout);
        }
        printf("\n");
    }
    return 0;
}
