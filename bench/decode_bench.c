/*
 * libtransformer's side of bench/llama_compare.py (issue 45): what
 * llama-bench measures, on a model loaded from a hub directory or a GGUF
 * file, with the KV cache of tfm_kv_cache_decode.
 *
 *   transformer-decode-bench MODEL [--threads N] [--dtype f32|q8_0|q4_0]
 *       [--prompt P] [--gen N] [--reps R]
 *   transformer-decode-bench --memread [--threads N]
 *   transformer-decode-bench MODEL --check ID,ID,... N_GEN LOGITS.f32
 *       [--threads N] [--dtype ...]
 *
 * Timing mode (llama-bench's pp P and tg N tests): prefill = P token ids
 * (a seeded pseudo-random prompt) into an empty cache in one
 * tfm_kv_cache_decode call, the last position's logits only; decode = N
 * single-token tfm_kv_cache_decode calls from an empty cache, each token
 * the argmax of the previous logits.  Each is repeated R times after one
 * untimed warm-up, and the mean rate printed, as llama-bench reports
 * (avg_ts).  Prints one JSON object: load_s, param_bytes, prefill_tps,
 * decode_tps (and each repetition's), peak RSS is the caller's to take
 * (wait4).  Check mode: the logits of the prompt's last position written
 * as float32 to LOGITS.f32, and "greedy: ID ..." of N_GEN greedy ids.
 *
 * --dtype (f32, auto, bf16, f16, q8_0, q4_0) is tfm_model_load_v2's
 * (transformer/weights.h): weights converted while loading, float32 ones
 * kept in place in the file's mapping.  Exit status 1 on any failure, with the
 * library's message.  Not run by ctest.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <transformer/transformer.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(const char *what, tfm_status st) {
    fprintf(stderr, "decode_bench: %s: %s (%s)\n", what,
            tfm_status_string(st), tfm_last_error());
    return 1;
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* --memread: GB/s of summing a 1 GiB buffer (64-bit words, four sums),
 * split over `threads` threads, best of 5 passes: the rate a decode step
 * that reads its weights once could reach. */
typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} span;

static void *read_span(void *arg) {
    span *s = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= s->n; i += 4) {
        a += s->p[i];
        b += s->p[i + 1];
        c += s->p[i + 2];
        d += s->p[i + 3];
    }
    s->sum = a + b + c + d;
    return NULL;
}

static int memread(int threads) {
    size_t n = (size_t)1 << 27; /* 1 GiB of uint64 */
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf || threads > 64) return 1;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    uint64_t total = 0;
    for (int rep = 0; rep < 5; rep++) {
        span s[64];
        pthread_t th[64];
        double a = now();
        for (int t = 0; t < threads; t++) {
            s[t].p = buf + n / threads * t;
            s[t].n = n / threads;
            if (t && pthread_create(&th[t], NULL, read_span, &s[t])) return 1;
        }
        read_span(&s[0]);
        for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
        double gbs = (double)(n * sizeof *buf) / (now() - a) / 1e9;
        if (gbs > best) best = gbs;
        for (int t = 0; t < threads; t++) total += s[t].sum;
    }
    printf("{\"memread_gbs\": %.2f, \"threads\": %d, \"check\": %llu}\n",
           best, threads, (unsigned long long)(total & 1));
    free(buf);
    return 0;
}


int main(int argc, char **argv) {
    const char *path = NULL, *dtype = "f32", *check = NULL, *out = NULL;
    int threads = 1, reps = 3;
    int64_t prompt = 512, gen = 128;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--dtype") && i + 1 < argc) dtype = argv[++i];
        else if (!strcmp(a, "--prompt") && i + 1 < argc) prompt = atoll(argv[++i]);
        else if (!strcmp(a, "--gen") && i + 1 < argc) gen = atoll(argv[++i]);
        else if (!strcmp(a, "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--memread")) path = "-";
        else if (!strcmp(a, "--check") && i + 3 < argc) {
            check = argv[++i];
            gen = atoll(argv[++i]);
            out = argv[++i];
        } else if (!path && a[0] != '-') path = a;
        else {
            fprintf(stderr, "decode_bench: bad argument %s\n", a);
            return 1;
        }
    }
    if (!path || threads < 1 || reps < 1 || prompt < 1 || gen < 1) {
        fprintf(stderr, "usage: transformer-decode-bench MODEL [--threads N]"
                " [--dtype f32|q8_0|q4_0] [--prompt P] [--gen N] [--reps R]"
                " [--check ID,.. N_GEN LOGITS.f32]\n");
        return 1;
    }
    if (!strcmp(path, "-")) return memread(threads);
    tfm_set_num_threads(threads);

    double t0 = now();
    /* Loaded as a llama.cpp user loads: weights converted while loading
     * (tfm_model_load_v2), a GGUF file's kept as stored ("auto"), the
     * file mapped. */
    tfm_load_options lo;
    tfm_load_options_init(&lo);
    if (!strcmp(dtype, "f32")) lo.dtype = TFM_DTYPE_F32;
    else if (!strcmp(dtype, "auto")) lo.dtype = TFM_LOAD_DTYPE_AUTO;
    else if (!strcmp(dtype, "q8_0")) lo.dtype = TFM_DTYPE_Q8_0;
    else if (!strcmp(dtype, "q4_0")) lo.dtype = TFM_DTYPE_Q4_0;
    else if (!strcmp(dtype, "bf16")) lo.dtype = TFM_DTYPE_BF16;
    else if (!strcmp(dtype, "f16")) lo.dtype = TFM_DTYPE_F16;
    else {
        fprintf(stderr, "decode_bench: unknown dtype %s\n", dtype);
        return 1;
    }
    tfm_module *model = NULL;
    tfm_status st = tfm_model_load_v2(path, &lo, &model);
    if (st != TFM_OK) return fail("load", st);
    double load_s = now() - t0;
    int64_t bytes = tfm_module_parameter_bytes(model);

    tfm_model_config cfg;
    st = tfm_model_get_config(model, &cfg);
    if (st != TFM_OK) return fail("config", st);
    int64_t V = cfg.vocab_size;

    int32_t *ids = NULL;
    int64_t n_ids = 0;
    if (check) {
        ids = malloc(sizeof *ids * (strlen(check) + 1));
        for (const char *p = check; ids && *p;) {
            char *end;
            ids[n_ids++] = (int32_t)strtol(p, &end, 10);
            if (end == p) break;
            p = *end == ',' ? end + 1 : end;
        }
        prompt = n_ids;
    } else {
        ids = malloc(sizeof *ids * (size_t)prompt);
        uint64_t s = 0x9E3779B97F4A7C15u;
        for (int64_t i = 0; ids && i < prompt; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            ids[i] = (int32_t)((s >> 33) % (uint64_t)V);
        }
    }
    if (!ids || n_ids < 0) return 1;
    int64_t cap = prompt > gen ? prompt : gen;
    if (check) cap = prompt + gen;
    tfm_kv_cache *cache = NULL;
    st = tfm_kv_cache_create(model, cap, &cache);
    if (st != TFM_OK) return fail("kv cache", st);
    int64_t shape[2] = {1, V};
    tfm_tensor *logits = NULL;
    st = tfm_tensor_create(2, shape, &logits);
    if (st != TFM_OK) return fail("logits", st);
    const float *lg = tfm_tensor_data_const(logits);

    if (check) {
        st = tfm_kv_cache_decode(cache, ids, prompt, logits);
        if (st != TFM_OK) return fail("prefill", st);
        FILE *f = fopen(out, "wb");
        if (!f || fwrite(lg, sizeof(float), (size_t)V, f) != (size_t)V ||
            fclose(f))
            return 1;
        printf("greedy:");
        for (int64_t i = 0; i < gen; i++) {
            int32_t t = argmax(lg, V);
            printf(" %d", t);
            if (i + 1 < gen) {
                st = tfm_kv_cache_decode(cache, &t, 1, logits);
                if (st != TFM_OK) return fail("decode", st);
            }
        }
        printf("\n");
    } else {
        double *pp = calloc((size_t)reps, sizeof *pp);
        double *tg = calloc((size_t)reps, sizeof *tg);
        if (!pp || !tg) return 1;
        for (int r = -1; r < reps; r++) {  /* r = -1: the warm-up */
            tfm_kv_cache_reset(cache);
            double a = now();
            st = tfm_kv_cache_decode(cache, ids, prompt, logits);
            if (st != TFM_OK) return fail("prefill", st);
            double b = now();
            if (r >= 0) pp[r] = (double)prompt / (b - a);
            tfm_kv_cache_reset(cache);
            int32_t t = ids[0];
            a = now();
            for (int64_t i = 0; i < (r < 0 ? 2 : gen); i++) {
                st = tfm_kv_cache_decode(cache, &t, 1, logits);
                if (st != TFM_OK) return fail("decode", st);
                t = argmax(lg, V);
            }
            b = now();
            if (r >= 0) tg[r] = (double)gen / (b - a);
        }
        double spp = 0, stg = 0;
        for (int r = 0; r < reps; r++) spp += pp[r], stg += tg[r];
        printf("{\"load_s\": %.3f, \"param_bytes\": %lld, \"threads\": %d, "
               "\"dtype\": \"%s\", \"prompt\": %lld, \"gen\": %lld, "
               "\"prefill_tps\": %.3f, \"decode_tps\": %.3f, "
               "\"prefill_runs\": [", load_s, (long long)bytes, threads,
               dtype, (long long)prompt, (long long)gen, spp / reps,
               stg / reps);
        for (int r = 0; r < reps; r++) printf("%s%.3f", r ? ", " : "", pp[r]);
        printf("], \"decode_runs\": [");
        for (int r = 0; r < reps; r++) printf("%s%.3f", r ? ", " : "", tg[r]);
        printf("]}\n");
        free(pp);
        free(tg);
    }
    tfm_tensor_free(logits);
    tfm_kv_cache_free(cache);
    tfm_module_free(model);
    free(ids);
    return 0;
}
