/* transformer-generate's reports (generate_report.h). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

#define PROGRAM "transformer-generate"
#include "cli_args.h"
#include "generate_report.h"

typedef struct text {
    char buf[512];
    size_t len;
} text;

static void add(text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends to t (silently truncated at its size). */
static void add(text *t, const char *fmt, ...)
{
    if (t->len + 1 >= sizeof t->buf)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n < sizeof t->buf - t->len
                      ? (size_t)n
                      : sizeof t->buf - t->len - 1;
}

/* "positions: ...; attention: ..." for the model's options. */
static void describe(const tfm_model_config *c, const tfm_model_options *o,
                     text *t)
{
    const tfm_attention_config *a = &o->attention;
    /* Prose for people; the enums' names (names.h) are for files. */
    static const char *const positions[TFM_POSITIONAL_COUNT] = {
        [TFM_POSITIONAL_NONE] = "none",
        [TFM_POSITIONAL_LEARNED] = "learned",
        [TFM_POSITIONAL_SINUSOIDAL] = "sinusoidal interleaved",
        [TFM_POSITIONAL_SINUSOIDAL_CONCAT] = "sinusoidal sin|cos halves",
    };
    int p = (int)c->positional;
    add(t, "positions: %s",
        p >= 0 && p < TFM_POSITIONAL_COUNT && positions[p] ? positions[p]
                                                            : "?");
    if (c->positional == TFM_POSITIONAL_SINUSOIDAL ||
        c->positional == TFM_POSITIONAL_SINUSOIDAL_CONCAT)
        add(t, " (base %g)", o->positional_base);
    static const char *const scores[TFM_SCORE_COUNT] = {
        [TFM_SCORE_SCALED_DOT] = "scaled dot product",
        [TFM_SCORE_DOT] = "dot product",
        [TFM_SCORE_GENERAL] = "general (q^T W k)",
        [TFM_SCORE_ADDITIVE] = "additive",
        [TFM_SCORE_LEARNED_TEMPERATURE] = "learned temperature",
    };
    int s = (int)a->score;
    add(t, "; attention: %s",
        s >= 0 && s < TFM_SCORE_COUNT && scores[s] ? scores[s] : "?");
    if (a->scale != 0.0f)
        add(t, " (scale %g)", (double)a->scale);
    const int64_t h = c->layer.n_heads;
    if (a->n_kv_heads == 1)
        add(t, ", multi-query (1 key/value head)");
    else if (a->n_kv_heads > 0 && a->n_kv_heads < h)
        add(t, ", grouped-query (%lld key/value heads for %lld)",
            (long long)a->n_kv_heads, (long long)h);
    if (a->rope != TFM_ROPE_NONE)
        add(t, ", RoPE %s (base %g, %lld dims)",
            a->rope == TFM_ROPE_ADJACENT ? "adjacent pairs" : "half-split",
            a->rope_base != 0.0 ? a->rope_base : 10000.0,
            (long long)(a->rope_dims ? a->rope_dims : c->layer.d_model / h));
    if (a->relative == TFM_RELATIVE_SHAW)
        add(t, ", Shaw relative positions (k = %lld%s)",
            (long long)a->max_distance,
            a->relative_values ? ", keys and values" : "");
    else if (a->relative == TFM_RELATIVE_T5)
        add(t, ", T5 bias (%lld buckets, max distance %lld, %s)",
            (long long)(a->num_buckets ? a->num_buckets : 32),
            (long long)(a->max_distance ? a->max_distance : 128),
            a->bidirectional ? "bidirectional" : "one-sided");
    else if (a->relative == TFM_RELATIVE_ALIBI)
        add(t, ", ALiBi");
    if (a->sparsity == TFM_SPARSE_SLIDING_WINDOW)
        add(t, ", sliding window %lld", (long long)a->window);
    else if (a->sparsity == TFM_SPARSE_DILATED)
        add(t, ", dilated window %lld x %lld", (long long)a->window,
            (long long)a->dilation);
    else if (a->sparsity == TFM_SPARSE_BIGBIRD)
        add(t, ", BigBird (blocks of %lld, window %lld, %lld random, seed "
               "%llu)", (long long)a->block_size, (long long)a->window,
            (long long)a->n_random_blocks, (unsigned long long)a->seed);
    if (a->n_global > 0 && a->sparsity != TFM_SPARSE_NONE)
        add(t, ", %lld global %s%s", (long long)a->n_global,
            a->sparsity == TFM_SPARSE_BIGBIRD ? "block" : "token",
            a->n_global == 1 ? "" : "s");
}

/* One line: the architecture and sizes, then describe()'s. */
void report_model(const tfm_module *model)
{
    tfm_model_config c;
    tfm_model_options o;
    tfm_model_options_init(&o);
    if (tfm_model_get_config(model, &c) != TFM_OK ||
        tfm_model_get_options(model, &o) != TFM_OK)
        return;
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    if (tfm_model_get_layer_options(model, &lo) != TFM_OK)
        return;
    text t = { { 0 }, 0 };
    if (c.architecture == TFM_ARCH_ENCODER_DECODER)
        add(&t, "model: %lld + %lld layers", (long long)c.n_encoder_layers,
            (long long)c.n_decoder_layers);
    else
        add(&t, "model: %lld layers", (long long)c.n_layers);
    add(&t, ", d_model %lld, %lld heads, context %lld; ",
        (long long)c.layer.d_model, (long long)c.layer.n_heads,
        (long long)c.context_length);
    /* the blocks: norm placement and kind, feed-forward, biases */
    static const char *const acts[TFM_ACTIVATION_COUNT] = {
        [TFM_ACTIVATION_RELU] = "ReLU", [TFM_ACTIVATION_GELU] = "GELU",
        [TFM_ACTIVATION_GELU_TANH] = "tanh GELU",
        [TFM_ACTIVATION_SILU] = "SiLU",
    };
    const int a = (int)c.layer.activation;
    add(&t, "blocks: %s %s (eps %g), %sfeed-forward %lld %s%s; ",
        c.layer.norm_first ? "pre-norm" : "post-norm",
        lo.rms_norm ? "RMSNorm" : "LayerNorm",
        (double)c.layer.layer_norm_eps, lo.gated ? "gated " : "",
        (long long)c.layer.d_ff,
        a >= 0 && a < TFM_ACTIVATION_COUNT && acts[a] ? acts[a] : "?",
        lo.bias ? "" : ", no biases");
    describe(&c, &o, &t);
    fprintf(stderr, "%s\n", t.buf);
}

void report(const tfm_module *model, const timings *tm,
                   const options *o)
{
    char rate[64];
    if (tm->prefill_s > 0)
        snprintf(rate, sizeof rate, "%.1f tokens/s",
                 (double)tm->prefill_tokens / tm->prefill_s);
    else
        snprintf(rate, sizeof rate, "- tokens/s");
    fprintf(stderr, "prefill: %lld tokens in %.3f ms (%s)\n",
            (long long)tm->prefill_tokens, 1e3 * tm->prefill_s, rate);
    if (tm->decode_s > 0 && tm->tokens > 0)
        snprintf(rate, sizeof rate, "%.1f tokens/s",
                 (double)tm->tokens / tm->decode_s);
    else
        snprintf(rate, sizeof rate, "- tokens/s");
    fprintf(stderr, "decode:  %lld tokens in %.3f ms (%s)",
            (long long)tm->tokens, 1e3 * tm->decode_s, rate);
    if (tm->slides)
        fprintf(stderr, ", %lld of them re-encoding the last %lld tokens",
                (long long)tm->slides, (long long)tm->kept);
    if (tm->rolled)
        fprintf(stderr, ", %lld of them on the rolling cache",
                (long long)tm->rolled);
    fputc('\n', stderr);
    static const char *const reasons[] = {
        "-", "max-tokens reached", "end-of-sequence token",
        "stop string", "callback" };
    fprintf(stderr, "stopped: %s\n",
            (int)tm->reason >= 0 && (int)tm->reason <= 4
                ? reasons[tm->reason] : "?");
    if (o->sampling.greedy)
        fprintf(stderr, "sampling: greedy\n");
    else
        fprintf(stderr,
                "sampling: temperature %g, top-k %lld, top-p %g, seed %llu\n",
                (double)o->sampling.temperature,
                (long long)o->sampling.top_k, (double)o->sampling.top_p,
                (unsigned long long)o->seed);
    report_model(model);
    fprintf(stderr, "threads: %d\n", tfm_get_num_threads());
    const char *core = openblas_get_corename();
    fprintf(stderr, "OpenBLAS core: %s\n", core ? core : "unknown");
}

/* Prints the decoded ids (tfm_tokenizer_decode_v2's flags); 1 on
 * error. */
int put_decoded(const tfm_tokenizer *tok, const int32_t *ids,
                       int64_t n, unsigned flags)
{
    size_t len = 0;
    tfm_status st = tfm_tokenizer_decode_v2(tok, ids, n, flags, NULL, 0,
                                            &len);
    char *text = st == TFM_ERR_CAPACITY ? malloc(len + 1) : NULL;
    if (!text || tfm_tokenizer_decode_v2(tok, ids, n, flags, text, len + 1,
                                         &len) != TFM_OK) {
        free(text);
        return fail("cannot decode: %s", st == TFM_ERR_CAPACITY
                                             ? tfm_last_error()
                                             : "out of memory");
    }
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}
