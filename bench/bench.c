/*
 * transformer-bench: times libtransformer and cblas_sgemm on given shapes.
 *
 * One configuration per invocation (bench/run.py starts one process per
 * measurement, alternating with PyTorch).  Each configuration is run
 * `--warmup` times untimed, then `--reps` times timed; the output is one CSV
 * line per measured row on stdout (after a header line unless
 * --no-header), with the median and minimum seconds, the FLOP count, the
 * GFLOP/s of the median, and the peak memory the timed calls added.
 *
 *   transformer-bench [options] info
 *   transformer-bench [options] sgemm M N K [nt]
 *   transformer-bench [options] mha B L D H
 *   transformer-bench [options] encoder B L D H [D_FF]
 *   transformer-bench [options] sdpa B H L D [causal]
 *   transformer-bench [options] decode D H LAYERS CONTEXT [VOCAB]
 *   transformer-bench [options] generate_batch D H LAYERS CONTEXT VOCAB
 *                               BATCH PROMPT NEW
 *   transformer-bench [options] decode_products D FF LAYERS BATCH [VOCAB]
 *   transformer-bench [options] sparse H L D dense|window|dilated|bigbird W
 *
 * Options: --threads N (default 1), --reps N (default 10), --warmup N
 * (default 1), --seed N, --no-header; for decode, --full-reps N and
 * --full-warmup N for the full-recompute row (default: --reps, --warmup).
 *
 * Peak memory: after the inputs, outputs and parameters exist and OpenBLAS
 * has run one GEMM (so its per-thread buffers are already touched), the
 * resident set is read (VmRSS) and the high-water mark reset (writing "5"
 * to /proc/self/clear_refs); after the warm-up and timed calls the
 * high-water mark (VmHWM) minus that baseline is the peak the calls added:
 * the library's workspace and any temporaries.  Where the reset is refused
 * the ru_maxrss difference is used instead (column mem_method).
 *
 * Threads: openblas_set_num_threads(N); then, when the library declares
 * tfm_set_num_threads (the build checks the headers and defines
 * TFM_BENCH_HAVE_SET_NUM_THREADS), tfm_set_num_threads(N), which runs
 * OpenBLAS single-threaded inside the library's own pool of N threads.  The
 * sgemm command sets OpenBLAS's count to N again afterwards.  Columns
 * blas_threads (openblas_get_num_threads() after the calls) and
 * tfm_threads (tfm_get_num_threads(), 0 without the API) show what ran.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <transformer/transformer.h>

/* ---- options and helpers ----------------------------------------------- */

static int opt_threads = 1;
static int opt_reps = 10;
static int opt_warmup = 1;
static uint64_t opt_seed = 1;
static int opt_header = 1;
static int opt_full_reps = -1;   /* decode: recompute row; -1: --reps */
static int opt_full_warmup = -1; /* decode: recompute row; -1: --warmup */

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "transformer-bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}

static void check(tfm_status st, const char *what)
{
    if (st != TFM_OK) {
        fprintf(stderr, "transformer-bench: %s: %s (%s)\n", what,
                tfm_status_string(st), tfm_last_error());
        exit(1);
    }
}

static int64_t parse_int(const char *s, const char *what)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 1)
        die("bad %s", what);
    return (int64_t)v;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng_state;

static float urand(void) /* uniform in [-1, 1), SplitMix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static void fill(float *p, int64_t n, float scale, float offset)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = offset + scale * urand();
}

static tfm_tensor *new_tensor(int rank, const int64_t *shape, float scale)
{
    tfm_tensor *t;
    check(tfm_tensor_create(rank, shape, &t), "tfm_tensor_create");
    fill(tfm_tensor_data(t), tfm_tensor_numel(t), scale, 0.0f);
    return t;
}

/* Sets every parameter of a module to random values: matrices uniform in
 * +-1/sqrt(fan_in), LayerNorm scales 1 +- 0.1, other vectors +-0.1. */
static void randomize(tfm_module *m)
{
    int n = tfm_module_parameter_count(m);
    for (int i = 0; i < n; i++) {
        const char *name = tfm_module_parameter_name(m, i);
        int rank;
        int64_t shape[TFM_MAX_RANK];
        check(tfm_module_parameter_shape(m, name, &rank, shape),
              "tfm_module_parameter_shape");
        tfm_tensor *t;
        check(tfm_tensor_create(rank, shape, &t), "tfm_tensor_create");
        size_t len = strlen(name);
        int is_norm_scale = strstr(name, "norm") && len >= 6 &&
                            strcmp(name + len - 6, "weight") == 0 && rank == 1;
        if (rank >= 2)
            fill(tfm_tensor_data(t), tfm_tensor_numel(t),
                 1.0f / sqrtf((float)shape[rank - 1]), 0.0f);
        else if (is_norm_scale)
            fill(tfm_tensor_data(t), tfm_tensor_numel(t), 0.1f, 1.0f);
        else
            fill(tfm_tensor_data(t), tfm_tensor_numel(t), 0.1f, 0.0f);
        check(tfm_module_set_parameter(m, name, t), name);
        tfm_tensor_free(t);
    }
}

/* The library's own thread count when it has the API, else OpenBLAS's.
 * tfm_set_num_threads runs OpenBLAS single-threaded inside its own pool
 * (module.h), so it is called after openblas_set_num_threads; the sgemm
 * command sets OpenBLAS's count again afterwards. */
static void set_threads(int n)
{
    openblas_set_num_threads(n);
#ifdef TFM_BENCH_HAVE_SET_NUM_THREADS
    tfm_set_num_threads(n);
#endif
}

static int tfm_threads(void)
{
#ifdef TFM_BENCH_HAVE_SET_NUM_THREADS
    return tfm_get_num_threads();
#else
    return 0; /* no such API: OpenBLAS's threads are the only ones */
#endif
}

/* ---- memory ------------------------------------------------------------ */

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    size_t klen = strlen(key);
    long v = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtol(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

static long maxrss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

typedef struct memprobe {
    long base_kb;
    int hwm_reset;
} memprobe;

static memprobe mem_begin(void)
{
    memprobe p;
    FILE *f = fopen("/proc/self/clear_refs", "w");
    p.hwm_reset = 0;
    if (f) {
        p.hwm_reset = fputs("5", f) >= 0;
        if (fclose(f) != 0)
            p.hwm_reset = 0;
    }
    p.base_kb = p.hwm_reset ? status_kb("VmRSS") : maxrss_kb();
    if (p.base_kb < 0) {
        p.hwm_reset = 0;
        p.base_kb = maxrss_kb();
    }
    return p;
}

static double mem_end_mb(const memprobe *p)
{
    long peak = p->hwm_reset ? status_kb("VmHWM") : maxrss_kb();
    long d = peak - p->base_kb;
    return d > 0 ? (double)d / 1024.0 : 0.0;
}

/* OpenBLAS allocates and touches its per-thread GEMM buffers on first use;
 * run one GEMM with the chosen thread count before the memory baseline so
 * that this fixed cost is not charged to the first configuration. */
static void warm_openblas(void)
{
    const int n = 1024;
    float *a = malloc(sizeof(float) * n * n * 3);
    if (!a)
        die("%s", "out of memory");
    fill(a, (int64_t)n * n * 2, 1.0f, 0.0f);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a,
                n, a + (size_t)n * n, n, 0.0f, a + (size_t)2 * n * n, n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, 64, 1.0f, a,
                64, a + (size_t)n * n, 64, 0.0f, a + (size_t)2 * n * n, n);
    free(a);
}

/* ---- timing ------------------------------------------------------------ */

typedef void (*bench_fn)(void *ctx);

typedef struct result {
    double median, min, max;
    double mem_mb;
    int mem_hwm;
} result;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static result time_it(bench_fn fn, void *ctx)
{
    result r;
    double *t = malloc(sizeof(double) * (size_t)opt_reps);
    if (!t)
        die("%s", "out of memory");
    memprobe mp = mem_begin();
    for (int i = 0; i < opt_warmup; i++)
        fn(ctx);
    for (int i = 0; i < opt_reps; i++) {
        double t0 = now();
        fn(ctx);
        t[i] = now() - t0;
    }
    r.mem_mb = mem_end_mb(&mp);
    r.mem_hwm = mp.hwm_reset;
    r.median = median_of(t, opt_reps);
    r.min = t[0];
    r.max = t[opt_reps - 1];
    free(t);
    return r;
}

static void print_header(void)
{
    if (opt_header)
        printf("name,shape,threads,blas_threads,warmup,reps,median_s,min_s,"
               "max_s,gflop,gflops,peak_delta_mb,io_mb,mem_method,corename,"
               "tfm_threads\n");
}

static void print_row(const char *name, const char *shape, const result *r,
                      double flops, double io_bytes)
{
    printf("%s,%s,%d,%d,%d,%d,%.9g,%.9g,%.9g,%.6g,%.6g,%.3f,%.3f,%s,%s,%d\n",
           name, shape, opt_threads, openblas_get_num_threads(), opt_warmup,
           opt_reps, r->median, r->min, r->max, flops * 1e-9,
           r->median > 0 ? flops * 1e-9 / r->median : 0.0, r->mem_mb,
           io_bytes / (1024.0 * 1024.0), r->mem_hwm ? "vmhwm" : "maxrss",
           openblas_get_corename(), tfm_threads());
    fflush(stdout);
}

/* ---- sgemm ------------------------------------------------------------- */

typedef struct sgemm_ctx {
    int m, n, k, nt;
    float *a, *b, *c;
} sgemm_ctx;

static void sgemm_run(void *p)
{
    sgemm_ctx *s = p;
    if (s->nt) /* C = A B^T, as Q K^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->m, s->n, s->k,
                    1.0f, s->a, s->k, s->b, s->k, 0.0f, s->c, s->n);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->m, s->n,
                    s->k, 1.0f, s->a, s->k, s->b, s->n, 0.0f, s->c, s->n);
}

static void cmd_sgemm(int argc, char **argv)
{
    if (argc < 3 || argc > 4)
        die("%s", "usage: sgemm M N K [nt]");
    sgemm_ctx s;
    s.m = (int)parse_int(argv[0], "M");
    s.n = (int)parse_int(argv[1], "N");
    s.k = (int)parse_int(argv[2], "K");
    s.nt = argc == 4 && strcmp(argv[3], "nt") == 0;
    if (argc == 4 && !s.nt)
        die("unknown sgemm variant %s", argv[3]);
    s.a = malloc(sizeof(float) * (size_t)s.m * s.k);
    s.b = malloc(sizeof(float) * (size_t)s.k * s.n);
    s.c = malloc(sizeof(float) * (size_t)s.m * s.n);
    if (!s.a || !s.b || !s.c)
        die("%s", "out of memory");
    fill(s.a, (int64_t)s.m * s.k, 1.0f, 0.0f);
    fill(s.b, (int64_t)s.k * s.n, 1.0f, 0.0f);
    fill(s.c, (int64_t)s.m * s.n, 1.0f, 0.0f);
    openblas_set_num_threads(opt_threads); /* after tfm_set_num_threads */
    warm_openblas();
    result r = time_it(sgemm_run, &s);
    char shape[96];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d%s", s.m, s.n, s.k,
             s.nt ? " (A*B^T)" : "");
    print_header();
    print_row("sgemm", shape, &r, 2.0 * s.m * s.n * s.k,
              4.0 * ((double)s.m * s.k + (double)s.k * s.n +
                     (double)s.m * s.n));
    free(s.a);
    free(s.b);
    free(s.c);
}

/* ---- multi-head attention and encoder layer ---------------------------- */

typedef struct layer_ctx {
    tfm_module *m;
    tfm_tensor *x, *y;
    int encoder;
} layer_ctx;

static void layer_run(void *p)
{
    layer_ctx *c = p;
    if (c->encoder)
        check(tfm_encoder_layer_forward(c->m, c->x, NULL, c->y),
              "tfm_encoder_layer_forward");
    else
        check(tfm_mha_forward(c->m, c->x, c->x, c->x, NULL, c->y, NULL),
              "tfm_mha_forward");
}

static void cmd_layer(int argc, char **argv, int encoder)
{
    if (argc < 4 || argc > (encoder ? 5 : 4))
        die("%s", encoder ? "usage: encoder B L D H [D_FF]"
                          : "usage: mha B L D H");
    int64_t B = parse_int(argv[0], "B"), L = parse_int(argv[1], "L"),
            D = parse_int(argv[2], "D"), H = parse_int(argv[3], "H");
    int64_t dff = argc == 5 ? parse_int(argv[4], "D_FF") : 4 * D;
    layer_ctx c;
    c.encoder = encoder;
    if (encoder) {
        tfm_layer_config cfg = tfm_layer_config_default(D, H);
        cfg.d_ff = dff; /* ReLU, eps 1e-5, post-norm: PyTorch's defaults */
        check(tfm_encoder_layer_create(&cfg, &c.m), "tfm_encoder_layer_create");
    } else {
        check(tfm_mha_create(D, H, 0, 0, 1, &c.m), "tfm_mha_create");
    }
    randomize(c.m);
    int64_t shape[3] = { B, L, D };
    c.x = new_tensor(3, shape, 1.0f);
    c.y = new_tensor(3, shape, 0.0f);
    int64_t macs;
    check(tfm_module_forward_macs(c.m, B, L, L, &macs), "forward_macs");
    warm_openblas();
    result r = time_it(layer_run, &c);
    char sh[128];
    if (encoder)
        snprintf(sh, sizeof sh, "B=%lld L=%lld D=%lld H=%lld FF=%lld",
                 (long long)B, (long long)L, (long long)D, (long long)H,
                 (long long)dff);
    else
        snprintf(sh, sizeof sh, "B=%lld L=%lld D=%lld H=%lld", (long long)B,
                 (long long)L, (long long)D, (long long)H);
    print_header();
    print_row(encoder ? "encoder" : "mha", sh, &r, 2.0 * (double)macs,
              8.0 * (double)(B * L * D));
    tfm_tensor_free(c.x);
    tfm_tensor_free(c.y);
    tfm_module_free(c.m);
}

/* ---- attention core ---------------------------------------------------- */

typedef struct sdpa_ctx {
    tfm_tensor *q, *k, *v, *o;
    tfm_attention_masks masks;
} sdpa_ctx;

static void sdpa_run(void *p)
{
    sdpa_ctx *c = p;
    check(tfm_sdpa(c->q, c->k, c->v, &c->masks, 0.0f, c->o, NULL), "tfm_sdpa");
}

static void cmd_sdpa(int argc, char **argv)
{
    if (argc < 4 || argc > 5)
        die("%s", "usage: sdpa B H L D [causal]");
    int64_t B = parse_int(argv[0], "B"), H = parse_int(argv[1], "H"),
            L = parse_int(argv[2], "L"), D = parse_int(argv[3], "D");
    int causal = argc == 5 && strcmp(argv[4], "causal") == 0;
    if (argc == 5 && !causal)
        die("unknown sdpa variant %s", argv[4]);
    sdpa_ctx c;
    memset(&c, 0, sizeof c);
    c.masks.causal = causal ? TFM_CAUSAL_TOP_LEFT : TFM_CAUSAL_NONE;
    int64_t shape[4] = { B, H, L, D };
    c.q = new_tensor(4, shape, 1.0f);
    c.k = new_tensor(4, shape, 1.0f);
    c.v = new_tensor(4, shape, 1.0f);
    c.o = new_tensor(4, shape, 0.0f);
    warm_openblas();
    result r = time_it(sdpa_run, &c);
    double flops = 4.0 * (double)B * H * L * L * D * (causal ? 0.5 : 1.0);
    char sh[128];
    snprintf(sh, sizeof sh, "B=%lld H=%lld L=%lld d=%lld%s", (long long)B,
             (long long)H, (long long)L, (long long)D,
             causal ? " causal" : "");
    print_header();
    print_row(causal ? "sdpa_causal" : "sdpa", sh, &r, flops,
              16.0 * (double)(B * H * L * D));
    tfm_tensor_free(c.q);
    tfm_tensor_free(c.k);
    tfm_tensor_free(c.v);
    tfm_tensor_free(c.o);
}

/* ---- training: forward + backward + AdamW, and attention's backward ---- */

typedef struct train_ctx {
    tfm_module *m;
    tfm_optimizer *opt;
    tfm_tensor *x, *y, *g, *gx;
} train_ctx;

static void train_run(void *p)
{
    train_ctx *c = p;
    tfm_optimizer_zero_grad(c->opt);
    check(tfm_encoder_layer_forward(c->m, c->x, NULL, c->y),
          "tfm_encoder_layer_forward");
    check(tfm_encoder_layer_backward(c->m, c->x, NULL, c->g, c->gx),
          "tfm_encoder_layer_backward");
    check(tfm_optimizer_step(c->opt), "tfm_optimizer_step");
}

/* One training step of the post-norm encoder layer (ReLU): zero_grad, the
 * forward, the backward of loss = sum(g * y) (g given), an AdamW step
 * (torch.optim.AdamW's defaults).  FLOPs: three times the forward's, the
 * usual count of forward + backward. */
static void cmd_train(int argc, char **argv)
{
    if (argc < 4 || argc > 5)
        die("%s", "usage: train B L D H [D_FF]");
    int64_t B = parse_int(argv[0], "B"), L = parse_int(argv[1], "L"),
            D = parse_int(argv[2], "D"), H = parse_int(argv[3], "H");
    int64_t dff = argc == 5 ? parse_int(argv[4], "D_FF") : 4 * D;
    train_ctx c;
    tfm_layer_config cfg = tfm_layer_config_default(D, H);
    cfg.d_ff = dff;
    check(tfm_encoder_layer_create(&cfg, &c.m), "tfm_encoder_layer_create");
    randomize(c.m);
    check(tfm_module_train(c.m, 1), "tfm_module_train");
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAMW);
    check(tfm_optimizer_create(c.m, &o, &c.opt), "tfm_optimizer_create");
    int64_t shape[3] = { B, L, D };
    c.x = new_tensor(3, shape, 1.0f);
    c.y = new_tensor(3, shape, 0.0f);
    c.g = new_tensor(3, shape, 1.0f);
    c.gx = new_tensor(3, shape, 0.0f);
    int64_t macs;
    check(tfm_module_forward_macs(c.m, B, L, L, &macs), "forward_macs");
    warm_openblas();
    /* The gradients and AdamW's moments are resident before the memory
     * baseline, as on PyTorch's side (whose first step makes them): one
     * optimizer step on zero gradients writes every page of the moments,
     * zero_grad every page of the gradients; no forward runs, so the
     * workspace the steps use is still counted. */
    tfm_optimizer_zero_grad(c.opt);
    check(tfm_optimizer_step(c.opt), "tfm_optimizer_step");
    tfm_optimizer_zero_grad(c.opt);
    result r = time_it(train_run, &c);
    char sh[128];
    snprintf(sh, sizeof sh, "B=%lld L=%lld D=%lld H=%lld FF=%lld",
             (long long)B, (long long)L, (long long)D, (long long)H,
             (long long)dff);
    print_header();
    print_row("train", sh, &r, 3.0 * 2.0 * (double)macs,
              16.0 * (double)(B * L * D));
    tfm_optimizer_free(c.opt);
    tfm_tensor_free(c.x);
    tfm_tensor_free(c.y);
    tfm_tensor_free(c.g);
    tfm_tensor_free(c.gx);
    tfm_module_free(c.m);
}

typedef struct sdpa_bwd_ctx {
    tfm_tensor *q, *k, *v, *o, *lse, *go, *gq, *gk, *gv;
    tfm_attention_masks masks;
} sdpa_bwd_ctx;

static void sdpa_backward_run(void *p)
{
    sdpa_bwd_ctx *c = p;
    check(tfm_sdpa_backward(c->q, c->k, c->v, &c->masks, 0.0f, c->o, c->lse,
                            c->go, c->gq, c->gk, c->gv),
          "tfm_sdpa_backward");
}

/* tfm_sdpa_backward on [B, H, L, D] from the output and log-sum-exp of
 * tfm_sdpa_lse (computed once, outside the timing).  FLOPs: 2.5 times the
 * forward's 4 B H L^2 D (half of it causal), as FlashAttention-2 counts
 * them (five products of the forward's two sizes, one of them recomputing
 * the scores).  peak_delta_mb: the memory the backward adds beyond its
 * inputs, outputs and gradients, which exist before the timing. */
static void cmd_sdpa_backward(int argc, char **argv)
{
    if (argc < 4 || argc > 5)
        die("%s", "usage: sdpa_backward B H L D [causal]");
    int64_t B = parse_int(argv[0], "B"), H = parse_int(argv[1], "H"),
            L = parse_int(argv[2], "L"), D = parse_int(argv[3], "D");
    int causal = argc == 5 && strcmp(argv[4], "causal") == 0;
    if (argc == 5 && !causal)
        die("unknown sdpa_backward variant %s", argv[4]);
    sdpa_bwd_ctx c;
    memset(&c, 0, sizeof c);
    c.masks.causal = causal ? TFM_CAUSAL_TOP_LEFT : TFM_CAUSAL_NONE;
    int64_t shape[4] = { B, H, L, D }, lshape[3] = { B, H, L };
    c.q = new_tensor(4, shape, 1.0f);
    c.k = new_tensor(4, shape, 1.0f);
    c.v = new_tensor(4, shape, 1.0f);
    c.o = new_tensor(4, shape, 0.0f);
    c.go = new_tensor(4, shape, 1.0f);
    c.gq = new_tensor(4, shape, 0.0f);
    c.gk = new_tensor(4, shape, 0.0f);
    c.gv = new_tensor(4, shape, 0.0f);
    c.lse = new_tensor(3, lshape, 0.0f);
    check(tfm_sdpa_lse(c.q, c.k, c.v, &c.masks, 0.0f, c.o, c.lse),
          "tfm_sdpa_lse");
    warm_openblas();
    result r = time_it(sdpa_backward_run, &c);
    double flops = 2.5 * 4.0 * (double)B * H * L * L * D *
                   (causal ? 0.5 : 1.0);
    char sh[128];
    snprintf(sh, sizeof sh, "B=%lld H=%lld L=%lld d=%lld%s", (long long)B,
             (long long)H, (long long)L, (long long)D,
             causal ? " causal" : "");
    print_header();
    print_row(causal ? "sdpa_backward_causal" : "sdpa_backward", sh, &r,
              flops, 36.0 * (double)(B * H * L * D));
    tfm_tensor *t[9] = { c.q, c.k, c.v, c.o, c.lse, c.go, c.gq, c.gk, c.gv };
    for (int i = 0; i < 9; i++)
        tfm_tensor_free(t[i]);
}

/* ---- sparse attention patterns (variants.h) ----------------------------- */

typedef struct sparse_ctx {
    tfm_module *attn;
    tfm_tensor *q, *k, *v, *o;
    tfm_attention_masks masks;
} sparse_ctx;

static void sparse_run(void *p)
{
    sparse_ctx *c = p;
    check(tfm_attention_forward(c->attn, c->q, c->k, c->v, &c->masks, c->o,
                                NULL),
          "tfm_attention_forward");
}

/* sparse H L D PATTERN W: causal self-attention of one sequence under a
 * sliding window of W keys each side ("window"), a dilated window
 * ("dilated", dilation 2), BigBird with blocks of W and 1 window block,
 * 1 global block and 2 random blocks ("bigbird"), or no pattern ("dense",
 * W ignored).  FLOPs count only the visible query-key pairs, so GFLOP/s
 * compare patterns, and median_s / L (time per query) stays flat as L
 * grows when the cost is linear. */
static void cmd_sparse(int argc, char **argv)
{
    if (argc != 5)
        die("%s", "usage: sparse H L D dense|window|dilated|bigbird W");
    int64_t H = parse_int(argv[0], "H"), L = parse_int(argv[1], "L"),
            D = parse_int(argv[2], "D"), W = parse_int(argv[4], "W");
    const char *pat = argv[3];
    tfm_attention_config cfg;
    tfm_attention_config_init(&cfg);
    double pairs; /* visible (query, key) pairs, causal */
    if (strcmp(pat, "dense") == 0) {
        pairs = 0.5 * (double)L * (double)(L + 1);
    } else if (strcmp(pat, "window") == 0) {
        cfg.sparsity = TFM_SPARSE_SLIDING_WINDOW;
        cfg.window = W;
        pairs = (double)L * (double)(W + 1);
    } else if (strcmp(pat, "dilated") == 0) {
        cfg.sparsity = TFM_SPARSE_DILATED;
        cfg.window = W;
        cfg.dilation = 2;
        pairs = (double)L * (double)(W + 1);
    } else if (strcmp(pat, "bigbird") == 0) {
        cfg.sparsity = TFM_SPARSE_BIGBIRD;
        cfg.block_size = W;
        cfg.window = 1;
        cfg.n_global = 1;
        cfg.n_random_blocks = 2;
        cfg.seed = 1;
        pairs = (double)L * (double)(5 * W); /* at most, causal */
    } else {
        die("unknown sparse pattern %s", pat);
    }
    sparse_ctx c;
    memset(&c, 0, sizeof c);
    check(tfm_attention_create(D, D, H, &cfg, &c.attn), "tfm_attention_create");
    c.masks.causal = TFM_CAUSAL_TOP_LEFT;
    int64_t shape[4] = { 1, H, L, D };
    c.q = new_tensor(4, shape, 1.0f);
    c.k = new_tensor(4, shape, 1.0f);
    c.v = new_tensor(4, shape, 1.0f);
    c.o = new_tensor(4, shape, 0.0f);
    warm_openblas();
    result r = time_it(sparse_run, &c);
    char sh[128];
    snprintf(sh, sizeof sh, "H=%lld L=%lld d=%lld W=%lld", (long long)H,
             (long long)L, (long long)D, (long long)W);
    char name[64];
    snprintf(name, sizeof name, "sparse_%s", pat);
    print_header();
    print_row(name, sh, &r, 4.0 * (double)H * pairs * (double)D,
              16.0 * (double)(H * L * D));
    tfm_tensor_free(c.q);
    tfm_tensor_free(c.k);
    tfm_tensor_free(c.v);
    tfm_tensor_free(c.o);
    tfm_module_free(c.attn);
}

/* ---- KV-cache decode step against recomputing the sequence -------------- */

/* A decoder-only model's configuration: d_ff 4 D, learned positions, the
 * head tied to the token embedding. */
static tfm_model_config decoder_config(int64_t D, int64_t H, int64_t layers,
                                       int64_t ctx, int64_t V)
{
    tfm_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.architecture = TFM_ARCH_DECODER_ONLY;
    cfg.layer = tfm_layer_config_default(D, H);
    cfg.layer.d_ff = 4 * D;
    cfg.vocab_size = V;
    cfg.n_layers = layers;
    cfg.context_length = ctx;
    cfg.positional = TFM_POSITIONAL_LEARNED;
    cfg.tied_embeddings = 1;
    return cfg;
}

typedef struct recompute_ctx {
    tfm_module *model;
    const int32_t *ids;
    int64_t len;
    tfm_tensor *logits;
} recompute_ctx;

static void recompute_run(void *p)
{
    recompute_ctx *c = p;
    check(tfm_model_logits(c->model, c->ids, 1, c->len, c->logits),
          "tfm_model_logits");
}

static void cmd_decode(int argc, char **argv)
{
    if (argc < 4 || argc > 5)
        die("%s", "usage: decode D H LAYERS CONTEXT [VOCAB]");
    int64_t D = parse_int(argv[0], "D"), H = parse_int(argv[1], "H"),
            layers = parse_int(argv[2], "LAYERS"),
            ctx = parse_int(argv[3], "CONTEXT");
    int64_t V = argc == 5 ? parse_int(argv[4], "VOCAB") : 256;
    int steps = opt_warmup + opt_reps;
    if (ctx < steps + 1)
        die("%s", "CONTEXT must exceed warmup + reps");

    tfm_model_config cfg =
        decoder_config(D, H, layers, ctx > 4096 ? ctx : 4096, V);
    tfm_module *model;
    check(tfm_model_create(&cfg, &model), "tfm_model_create");
    randomize(model);

    int32_t *ids = malloc(sizeof(int32_t) * (size_t)ctx);
    if (!ids)
        die("%s", "out of memory");
    for (int64_t i = 0; i < ctx; i++)
        ids[i] = (int32_t)((urand() * 0.5f + 0.5f) * (float)V) % (int32_t)V;

    char sh[160];
    snprintf(sh, sizeof sh, "D=%lld H=%lld layers=%lld ctx=%lld V=%lld",
             (long long)D, (long long)H, (long long)layers, (long long)ctx,
             (long long)V);
    print_header();
    warm_openblas();

    /* Recompute: the logits of the whole ctx-token sequence (first, while
     * the workspace is cold, so that its peak is measured). */
    int64_t fshape[3] = { 1, ctx, V };
    recompute_ctx rc = { model, ids, ctx, new_tensor(3, fshape, 0.0f) };
    int64_t macs;
    check(tfm_module_forward_macs(model, 1, ctx, ctx, &macs), "forward_macs");
    int reps = opt_reps, warmup = opt_warmup;
    if (opt_full_reps > 0)
        opt_reps = opt_full_reps;
    if (opt_full_warmup >= 0)
        opt_warmup = opt_full_warmup;
    result full = time_it(recompute_run, &rc);
    int full_reps = opt_reps, full_warmup = opt_warmup;
    opt_reps = reps;
    opt_warmup = warmup;
    tfm_tensor_free(rc.logits);

    /* Decode steps: prefill ctx - steps tokens, then `steps` one-token
     * steps (the warm-up ones first); the last step has ctx - 1 tokens
     * cached, so the timed steps see ctx-reps .. ctx-1 cached tokens. */
    tfm_kv_cache *cache;
    check(tfm_kv_cache_create(model, ctx, &cache), "tfm_kv_cache_create");
    int64_t lshape[2] = { 1, V };
    tfm_tensor *last = new_tensor(2, lshape, 0.0f);
    int64_t prefill = ctx - steps;
    check(tfm_kv_cache_decode(cache, ids, prefill, last), "prefill");
    double *t = malloc(sizeof(double) * (size_t)opt_reps);
    if (!t)
        die("%s", "out of memory");
    memprobe mp = mem_begin();
    for (int i = 0; i < steps; i++) {
        double t0 = now();
        check(tfm_kv_cache_decode(cache, ids + prefill + i, 1, last),
              "tfm_kv_cache_decode");
        double dt = now() - t0;
        if (i >= opt_warmup)
            t[i - opt_warmup] = dt;
    }
    result r;
    r.mem_mb = mem_end_mb(&mp);
    r.mem_hwm = mp.hwm_reset;
    r.median = median_of(t, opt_reps);
    r.min = t[0];
    r.max = t[opt_reps - 1];
    int64_t macs1;
    check(tfm_module_forward_macs(model, 1, 1, 1, &macs1), "forward_macs");
    /* one position's products, plus q.K^T and A.V over the cached keys */
    double step_flops = 2.0 * ((double)macs1 +
                               (double)layers * 2.0 * (double)(ctx - 1) * D);
    print_row("decode_step", sh, &r, step_flops,
              4.0 * (double)(2 * layers * ctx * D + V));
    opt_reps = full_reps;
    opt_warmup = full_warmup;
    print_row("decode_recompute", sh, &full, 2.0 * (double)macs,
              4.0 * (double)(ctx * V));
    opt_reps = reps;
    opt_warmup = warmup;
    tfm_kv_cache_free(cache);
    tfm_tensor_free(last);
    free(t);
    free(ids);
    tfm_module_free(model);
}

/* ---- The products of one decoding step, alone ------------------------- */

/* The weight products of one decoding step of a decoder-only model (per
 * layer in_proj [3D, D], out_proj [D, D], linear1 [FF, D], linear2
 * [D, FF]; then the head [VOCAB, D] when VOCAB > 0), as the library runs
 * them: BATCH new rows through cblas_sgemm (x W^T), or one row through
 * cblas_sgemv (W x), on random weights, and nothing else.  They bound
 * batched decoding from below (docs/PERFORMANCE.md, "Batched
 * generation"): a batch-BATCH step cannot take less than the first row,
 * a batch-1 step's products take the second. */
typedef struct products_ctx {
    int64_t layers, batch, n_shapes;
    int64_t out[5], in[5];
    float **w;          /* [layers * 4 + head] */
    float *x, *y;
    int gemv;
} products_ctx;

static void products_run(void *p)
{
    const products_ctx *c = p;
    for (int64_t l = 0, i = 0; l < c->layers + 1; l++)
        for (int64_t s = 0; s < (l < c->layers ? 4 : c->n_shapes - 4);
             s++, i++) {
            const int64_t k = l < c->layers ? s : 4 + s;
            const int o = (int)c->out[k], n = (int)c->in[k];
            if (c->gemv)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, o, n, 1.0f, c->w[i],
                            n, c->x, 1, 0.0f, c->y, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                            (int)c->batch, o, n, 1.0f, c->x, n, c->w[i], n,
                            0.0f, c->y, o);
        }
}

static void cmd_decode_products(int argc, char **argv)
{
    if (argc < 4 || argc > 5)
        die("%s", "usage: decode_products D FF LAYERS BATCH [VOCAB]");
    products_ctx c;
    memset(&c, 0, sizeof c);
    const int64_t D = parse_int(argv[0], "D"), FF = parse_int(argv[1], "FF");
    c.layers = parse_int(argv[2], "LAYERS");
    c.batch = parse_int(argv[3], "BATCH");
    const int64_t V = argc == 5 ? parse_int(argv[4], "VOCAB") : 0;
    const int64_t out[5] = { 3 * D, D, FF, D, V }, in[5] = { D, D, D, FF, D };
    memcpy(c.out, out, sizeof out);
    memcpy(c.in, in, sizeof in);
    c.n_shapes = V > 0 ? 5 : 4;
    const int64_t n_w = c.layers * 4 + (V > 0);
    c.w = malloc(sizeof *c.w * (size_t)n_w);
    const int64_t widest = FF > 3 * D ? (FF > V ? FF : V)
                                      : (3 * D > V ? 3 * D : V);
    c.x = malloc(sizeof(float) * (size_t)(c.batch * (FF > D ? FF : D)));
    c.y = malloc(sizeof(float) * (size_t)(c.batch * widest));
    if (!c.w || !c.x || !c.y)
        die("%s", "out of memory");
    double macs = 0;
    for (int64_t i = 0; i < n_w; i++) {
        const int64_t k = i < c.layers * 4 ? i % 4 : 4;
        c.w[i] = malloc(sizeof(float) * (size_t)(out[k] * in[k]));
        if (!c.w[i])
            die("%s", "out of memory");
        fill(c.w[i], out[k] * in[k], 0.1f, -0.05f);
        macs += (double)(out[k] * in[k]);
    }
    fill(c.x, c.batch * (FF > D ? FF : D), 1.0f, -0.5f);
    warm_openblas();
    char sh[128];
    snprintf(sh, sizeof sh, "D=%lld FF=%lld layers=%lld batch=%lld vocab=%lld",
             (long long)D, (long long)FF, (long long)c.layers,
             (long long)c.batch, (long long)V);
    print_header();
    c.gemv = 0;
    result r = time_it(products_run, &c);
    print_row("decode_products_sgemm", sh, &r, 2.0 * macs * (double)c.batch,
              4.0 * macs);
    c.gemv = 1;
    r = time_it(products_run, &c);
    print_row("decode_products_sgemv", sh, &r, 2.0 * macs, 4.0 * macs);
    for (int64_t i = 0; i < n_w; i++)
        free(c.w[i]);
    free(c.w);
    free(c.x);
    free(c.y);
}

/* ---- Batched greedy generation (tfm_model_generate_batch) -------------- */

typedef struct batch_gen_ctx {
    tfm_module *model;
    const int32_t *const *prompts;
    const int64_t *n_prompts;
    int64_t batch;
    tfm_generate_options o;
    int32_t *out;
    int64_t *n_out;
} batch_gen_ctx;

static void batch_gen_run(void *p)
{
    batch_gen_ctx *c = p;
    check(tfm_model_generate_batch(c->model, c->prompts, c->n_prompts,
                                   c->batch, &c->o, c->out, c->n_out, NULL),
          "tfm_model_generate_batch");
}

/* Greedy generation of BATCH prompts of PROMPT tokens, NEW tokens each, on
 * a random decoder-only model (learned positions, d_ff 4 D, tied head).
 * Two rows: the whole call ("generate_batch", prefills included) and the
 * same call with one new token ("generate_batch_prefill"); the decoding
 * rate is batch * (NEW - 1) / (the difference of their medians). */
static void cmd_generate_batch(int argc, char **argv)
{
    if (argc != 8)
        die("%s", "usage: generate_batch D H LAYERS CONTEXT VOCAB BATCH "
                  "PROMPT NEW");
    int64_t D = parse_int(argv[0], "D"), H = parse_int(argv[1], "H"),
            layers = parse_int(argv[2], "LAYERS"),
            ctx = parse_int(argv[3], "CONTEXT"),
            V = parse_int(argv[4], "VOCAB"), B = parse_int(argv[5], "BATCH"),
            P = parse_int(argv[6], "PROMPT"), N = parse_int(argv[7], "NEW");
    if (P < 1 || N < 2 || P + N > ctx)
        die("%s", "need PROMPT >= 1, NEW >= 2, PROMPT + NEW <= CONTEXT");
    tfm_model_config cfg = decoder_config(D, H, layers, ctx, V);
    cfg.layer.norm_first = 1;
    cfg.layer.activation = TFM_ACTIVATION_GELU;
    tfm_module *model;
    check(tfm_model_create(&cfg, &model), "tfm_model_create");
    randomize(model);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * P));
    const int32_t **prompts = malloc(sizeof *prompts * (size_t)B);
    int64_t *lens = malloc(sizeof *lens * (size_t)B);
    batch_gen_ctx c = { model, NULL, lens, B, { 0 }, NULL, NULL };
    c.out = malloc(sizeof(int32_t) * (size_t)(B * N));
    c.n_out = malloc(sizeof(int64_t) * (size_t)B);
    if (!ids || !prompts || !lens || !c.out || !c.n_out)
        die("%s", "out of memory");
    for (int64_t i = 0; i < B * P; i++)
        ids[i] = (int32_t)((urand() * 0.5f + 0.5f) * (float)V) % (int32_t)V;
    for (int64_t b = 0; b < B; b++) {
        prompts[b] = ids + b * P;
        lens[b] = P;
    }
    c.prompts = prompts;
    tfm_generate_options_init(&c.o);
    char sh[160];
    snprintf(sh, sizeof sh, "D=%lld H=%lld layers=%lld ctx=%lld V=%lld "
             "batch=%lld prompt=%lld new=%lld", (long long)D, (long long)H,
             (long long)layers, (long long)ctx, (long long)V, (long long)B,
             (long long)P, (long long)N);
    print_header();
    warm_openblas();
    c.o.max_new_tokens = 1;
    result pre = time_it(batch_gen_run, &c);
    c.o.max_new_tokens = N;
    result all = time_it(batch_gen_run, &c);
    int64_t macs1;
    check(tfm_module_forward_macs(model, 1, 1, 1, &macs1), "forward_macs");
    print_row("generate_batch", sh, &all, 2.0 * (double)macs1 * (double)(B * N),
              4.0 * (double)(B * N));
    print_row("generate_batch_prefill", sh, &pre,
              2.0 * (double)macs1 * (double)(B * P), 4.0 * (double)B);
    free(ids);
    free(prompts);
    free(lens);
    free(c.out);
    free(c.n_out);
    tfm_module_free(model);
}

/* ---- info -------------------------------------------------------------- */

static void cmd_info(void)
{
    printf("tfm_version=%s\n", tfm_version_string());
    printf("openblas_corename=%s\n", openblas_get_corename());
    printf("openblas_config=%s\n", openblas_get_config());
    printf("openblas_threads=%d\n", openblas_get_num_threads());
#ifdef TFM_BENCH_HAVE_SET_NUM_THREADS
    printf("tfm_set_num_threads=yes\n");
    printf("tfm_threads=%d\n", tfm_get_num_threads());
#else
    printf("tfm_set_num_threads=no\n");
#endif
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("OPENBLAS_CORETYPE=%s\n", ct ? ct : "");
    memprobe mp = mem_begin();
    printf("peak_reset=%s\n", mp.hwm_reset ? "vmhwm" : "maxrss");
}

/* ---- main -------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: transformer-bench [--threads N] [--reps N] [--warmup N]\n"
            "                         [--seed N] [--no-header]\n"
            "                         [--full-reps N] [--full-warmup N] COMMAND ARGS\n"
            "  info                          OpenBLAS core type, threads\n"
            "  sgemm M N K [nt]              cblas_sgemm, C = A B (nt: A B^T)\n"
            "  mha B L D H                   self-attention forward, no weights\n"
            "  encoder B L D H [D_FF]        post-norm encoder layer (ReLU)\n"
            "  sdpa B H L D [causal]         tfm_sdpa on [B,H,L,D], S = L\n"
            "  train B L D H [D_FF]          encoder layer forward + backward\n"
            "                                + AdamW step\n"
            "  sdpa_backward B H L D [causal] tfm_sdpa_backward, S = L\n"
            "  decode D H LAYERS CTX [VOCAB] KV-cache step vs full recompute\n"
            "  generate_batch D H LAYERS CTX VOCAB BATCH PROMPT NEW  batched "
            "greedy generation\n"
            "  decode_products D FF LAYERS BATCH [VOCAB]  a decoding step's\n"
            "                                weight products alone: BATCH rows\n"
            "                                by sgemm, and one row by sgemv\n"
            "  sparse H L D PATTERN W        causal attention under a sparse\n"
            "                                pattern (dense, window, dilated,\n"
            "                                bigbird) of width / block W\n"
            "Prints CSV: name,shape,threads,...,median_s,...,gflops,"
            "peak_delta_mb,...\n");
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--no-header") == 0) {
            opt_header = 0;
            continue;
        }
        if (strcmp(o, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc)
            die("missing value for %s", o);
        const char *v = argv[++i];
        if (strcmp(o, "--threads") == 0)
            opt_threads = (int)parse_int(v, "--threads");
        else if (strcmp(o, "--reps") == 0)
            opt_reps = (int)parse_int(v, "--reps");
        else if (strcmp(o, "--warmup") == 0)
            opt_warmup = strcmp(v, "0") == 0 ? 0
                                             : (int)parse_int(v, "--warmup");
        else if (strcmp(o, "--full-reps") == 0)
            opt_full_reps = (int)parse_int(v, "--full-reps");
        else if (strcmp(o, "--full-warmup") == 0)
            opt_full_warmup = strcmp(v, "0") == 0
                                  ? 0
                                  : (int)parse_int(v, "--full-warmup");
        else if (strcmp(o, "--seed") == 0)
            opt_seed = (uint64_t)parse_int(v, "--seed");
        else
            die("unknown option %s", o);
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    rng_state = opt_seed;
    set_threads(opt_threads);
    const char *cmd = argv[i++];
    int n = argc - i;
    char **a = argv + i;
    if (strcmp(cmd, "info") == 0)
        cmd_info();
    else if (strcmp(cmd, "sgemm") == 0)
        cmd_sgemm(n, a);
    else if (strcmp(cmd, "mha") == 0)
        cmd_layer(n, a, 0);
    else if (strcmp(cmd, "encoder") == 0)
        cmd_layer(n, a, 1);
    else if (strcmp(cmd, "sdpa") == 0)
        cmd_sdpa(n, a);
    else if (strcmp(cmd, "train") == 0)
        cmd_train(n, a);
    else if (strcmp(cmd, "sdpa_backward") == 0)
        cmd_sdpa_backward(n, a);
    else if (strcmp(cmd, "decode") == 0)
        cmd_decode(n, a);
    else if (strcmp(cmd, "generate_batch") == 0)
        cmd_generate_batch(n, a);
    else if (strcmp(cmd, "decode_products") == 0)
        cmd_decode_products(n, a);
    else if (strcmp(cmd, "sparse") == 0)
        cmd_sparse(n, a);
    else {
        usage(stderr);
        return 2;
    }
    return 0;
}
