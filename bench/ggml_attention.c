/* The rival of bench.c's sdpa rows: ggml's flash attention (the CPU
 * backend's ggml_flash_attn_ext, float32 queries, keys and values, float32
 * accumulation, the CPU backend's only precision) on the same shapes, timed the same way and printed in the
 * same CSV, so that bench/run.py --ggml alternates it with ours (issue 20).
 *
 *   ggml-attention [--threads T] [--reps R] [--warmup W] sdpa B H L D [causal]
 *
 * Built by bench/build_ggml.sh against a ggml source tree (GGML_SRC); not a
 * build dependency of the library.  Inputs: uniform in [-1, 1) from a fixed
 * generator; after the timed calls the first and last query rows of the
 * first head are checked against float64 attention (the run fails above
 * 1e-3: ggml did not compute what is timed).
 * The causal mask is ggml's additive float16 mask [L, L] (0 on and below the
 * diagonal, -inf above), the form llama.cpp passes; ggml skips the tiles it
 * masks entirely.  FLOPs: 4 B H L^2 D, half for causal, as bench.c counts
 * them.  Peak memory: VmHWM over the timed calls minus the resident set
 * before them (the inputs, output and mask are made before). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

static int opt_threads = 1, opt_reps = 5, opt_warmup = 1;

static void die(const char *msg)
{
    fprintf(stderr, "ggml-attention: %s\n", msg);
    exit(1);
}

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Uniform in [-1, 1): a 64-bit LCG's top 24 bits. */
static float next_uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(*s >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* Largest |ggml - float64| over row i of head 0, batch 0 (q, k, v
 * [B, H, L, D] row-major; out [B, L, H, D]). */
static double row_error(const float *q, const float *k, const float *v,
                        const float *out, long H, long L, long D, long i,
                        int causal)
{
    const long S = causal ? i + 1 : L;
    double *p = malloc(sizeof(double) * (size_t)S), m = -INFINITY, sum = 0;
    if (!p)
        die("out of memory");
    for (long j = 0; j < S; j++) {
        double dot = 0;
        for (long c = 0; c < D; c++)
            dot += (double)q[i * D + c] * k[j * D + c];
        p[j] = dot / sqrt((double)D);
        m = p[j] > m ? p[j] : m;
    }
    for (long j = 0; j < S; j++)
        sum += p[j] = exp(p[j] - m);
    double worst = 0;
    for (long c = 0; c < D; c++) {
        double o = 0;
        for (long j = 0; j < S; j++)
            o += p[j] / sum * v[j * D + c];
        double e = fabs(o - out[(i * H) * D + c]);
        worst = e > worst ? e : worst;
    }
    free(p);
    return worst;
}

static long parse_long(const char *s, const char *what, long min)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < min) {
        fprintf(stderr, "ggml-attention: bad %s '%s'\n", what, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        const int warm = strcmp(argv[i], "--warmup") == 0;
        long v = parse_long(argv[i + 1], argv[i], warm ? 0 : 1);
        if (strcmp(argv[i], "--threads") == 0)
            opt_threads = (int)v;
        else if (strcmp(argv[i], "--reps") == 0)
            opt_reps = (int)v;
        else if (warm)
            opt_warmup = (int)v;
        else
            die("unknown option");
    }
    argc -= i;
    argv += i;
    if (argc < 5 || argc > 6 || strcmp(argv[0], "sdpa") != 0)
        die("usage: ggml-attention [--threads T] [--reps R] [--warmup W] "
            "sdpa B H L D [causal]");
    const long B = parse_long(argv[1], "B", 1), H = parse_long(argv[2], "H", 1),
               L = parse_long(argv[3], "L", 1), D = parse_long(argv[4], "D", 1);
    const int causal = argc == 6 && strcmp(argv[5], "causal") == 0;
    if (argc == 6 && !causal)
        die("unknown sdpa variant");

    const size_t n = (size_t)(B * H * L * D);
    const size_t bytes = 4 * n * sizeof(float) +
                         (causal ? (size_t)(L * L) * 2 : 0) +
                         16 * ggml_tensor_overhead() + ggml_graph_overhead() +
                         (1 << 20);
    struct ggml_init_params ip = { bytes, NULL, false };
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx)
        die("out of memory");
    /* ggml's order: ne0 fastest.  q, k, v [D, L, H, B] = row-major
     * [B, H, L, D]. */
    struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, L, H, B);
    struct ggml_tensor *k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, L, H, B);
    struct ggml_tensor *v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, L, H, B);
    float *fq = q->data, *fk = k->data, *fv = v->data;
    uint64_t seed = 20261207;
    for (size_t j = 0; j < n; j++) {
        fq[j] = next_uniform(&seed);
        fk[j] = next_uniform(&seed);
        fv[j] = next_uniform(&seed);
    }
    struct ggml_tensor *mask = NULL;
    if (causal) {
        mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, L, L);
        ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f),
                    ninf = ggml_fp32_to_fp16(-INFINITY);
        ggml_fp16_t *m = mask->data;
        for (long r = 0; r < L; r++)
            for (long c = 0; c < L; c++)
                m[r * L + c] = c <= r ? zero : ninf;
    }
    struct ggml_tensor *out = ggml_flash_attn_ext(
        ctx, q, k, v, mask, 1.0f / sqrtf((float)D), 0.0f, 0.0f);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    struct ggml_cplan plan = ggml_graph_plan(gf, opt_threads, NULL);
    uint8_t *work = plan.work_size ? malloc(plan.work_size) : NULL;
    if (plan.work_size && !work)
        die("out of memory");
    plan.work_data = work;

    double *t = malloc(sizeof(double) * (size_t)opt_reps);
    if (!t)
        die("out of memory");
    FILE *cr = fopen("/proc/self/clear_refs", "w");
    int hwm = cr && fputs("5", cr) >= 0;
    if (cr && fclose(cr) != 0)
        hwm = 0;
    const long base = status_kb("VmRSS");
    for (int r = 0; r < opt_warmup; r++)
        if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS)
            die("ggml_graph_compute failed");
    for (int r = 0; r < opt_reps; r++) {
        double t0 = now();
        if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS)
            die("ggml_graph_compute failed");
        t[r] = now() - t0;
    }
    const long peak = hwm ? status_kb("VmHWM") : -1;
    const float *fo = out->data;
    if (row_error(fq, fk, fv, fo, H, L, D, 0, causal) > 1e-3 ||
        row_error(fq, fk, fv, fo, H, L, D, L - 1, causal) > 1e-3)
        die("ggml's output differs from float64 attention");
    qsort(t, (size_t)opt_reps, sizeof *t, cmp_double);
    const double med = opt_reps % 2 ? t[opt_reps / 2]
                                    : 0.5 * (t[opt_reps / 2 - 1] +
                                             t[opt_reps / 2]);
    const double flops = 4.0 * (double)B * H * L * L * D * (causal ? 0.5
                                                                   : 1.0);
    printf("name,shape,threads,blas_threads,warmup,reps,median_s,min_s,"
           "max_s,gflop,gflops,peak_delta_mb,io_mb,mem_method,corename,"
           "tfm_threads\n");
    printf("%s,B=%ld H=%ld L=%ld d=%ld%s,%d,0,%d,%d,%.9g,%.9g,%.9g,%.6g,"
           "%.6g,%.3f,%.3f,vmhwm,ggml,%d\n",
           causal ? "sdpa_causal" : "sdpa", B, H, L, D,
           causal ? " causal" : "", opt_threads, opt_warmup, opt_reps, med,
           t[0], t[opt_reps - 1], flops * 1e-9, flops * 1e-9 / med,
           peak > base ? (double)(peak - base) / 1024.0 : 0.0,
           16.0 * (double)n / (1024.0 * 1024.0), opt_threads);
    free(t);
    free(work);
    ggml_free(ctx);
    return 0;
}
