/* transformer-generate: generation, translation, mask filling and image
 * classification with a model file or a Hugging Face checkpoint directory.
 *
 *   transformer-generate [--model FILE] [--prompt TEXT] [--max-tokens N]
 *                        [--temperature T] [--top-k K] [--top-p P]
 *                        [--seed S] [--sample] [--greedy] [--threads N]
 *                        [--stop TEXT]... [--eos-token-id ID]...
 *                        [--min-new-tokens N] [--repetition-penalty R]
 *                        [--no-repeat-ngram-size N] [--past-context MODE]
 *                        [--batch-file FILE] [--help] [--version]
 *
 * Loads a model and its tokenizer from one model file (the shipped
 * character-level model) or a checkpoint directory (GPT-2, Llama, BERT,
 * Marian, ViT), prints the prompt, then each generated token as soon as it is
 * produced, through a tfm_generator (model.h): tfm_generator_create
 * prefills the prompt (timed as the prefill), each tfm_generator_next
 * makes one token (timed as decoding) until a stop condition.  stdout is
 * therefore exactly the prompt followed by what tfm_model_generate_v2
 * returns for the same model, prompt and options (and a final newline);
 * timings,
 * a line describing the model (positional encoding and attention variant,
 * from the file's metadata: model.h, variants.h) and the OpenBLAS core go
 * to stderr.
 *
 * With --batch-file FILE every line of FILE is a prompt, and all of them
 * are generated together (tfm_model_generate_batch); stdout gets one line
 * per prompt, in order: the prompt and its generated text, with each
 * newline of them written as the two characters \n and each backslash as
 * \\, so that every result stays on its line.
 *
 * With --fill-mask TEXT the model is a masked LM (an encoder-only model,
 * e.g. a BERT checkpoint directory): TEXT is encoded with the
 * tokenizer's framing ([CLS] ... [SEP]), and for each [MASK] in it the
 * top predictions (5, or --top-k K) are printed, as Hugging Face's
 * fill-mask pipeline gives them: one line each, the probability (softmax
 * over the vocabulary), a tab, the token (decoded alone), a tab, and the
 * text with the mask replaced (special tokens left out when it has one
 * mask; with several, the others stay, as the pipeline shows them).
 *
 * With --translate TEXT the model is an encoder-decoder (a Marian /
 * opus-mt checkpoint directory): TEXT is the source, encoded with the
 * directory's tokenizer (</s> appended), and the translation is printed,
 * one line, special tokens left out, as transformers'
 * MarianMTModel.generate decodes it: beam search (tfm_model_beam_search)
 * with config.json's generation defaults -- generation_config.json's when
 * there is one -- num_beams (1 when absent; --num-beams N overrides),
 * max_new_tokens, else max_length (20 when absent) less the decoder start
 * (--max-tokens overrides; the context bounds it), decoder_start_token_id,
 * eos_token_id (or one --eos-token-id), forced_eos_token_id, and
 * suppress_tokens and bad_words_ids of single ids never generated
 * (Marian's pad); --min-new-tokens as in generation.
 *
 * With --classify IMAGE the model is an image classifier (a ViT
 * checkpoint directory): the PNG or JPEG file IMAGE is decoded by libpng
 * or libjpeg, resized (bilinear) and normalised as the directory's
 * preprocessor_config.json says (ViTImageProcessor's defaults when
 * absent), and the top 5 (or --top-k K) classes are printed, one line
 * each: the probability (softmax over the labels), a tab, the label from
 * config.json's id2label. */
#include <cJSON.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <transformer/transformer.h>

#include "base/number_parse.h"

/* OpenBLAS's name for the CPU kernels it picked (cblas.h of OpenBLAS). */
char *openblas_get_corename(void);

#ifndef TFM_DEFAULT_MODEL
#error "TFM_DEFAULT_MODEL (absolute path of the default model) must be defined"
#endif

#define PROGRAM "transformer-generate"
#define MODEL_ENV "TRANSFORMER_MODEL"

#include "cli_args.h"
#include "json_file.h"
#include "image_input.h"
#include "generation_config.h"

/* The most --stop and --eos-token-id options. */
#define MAX_LIST 64

typedef struct options {
    const char *model;
    const char *prompt;
    int64_t max_tokens;
    tfm_sampling sampling;
    uint64_t seed;
    int sampling_option;   /* --temperature, --top-k, --top-p, --seed or
                              --sample */
    int greedy_option;     /* --greedy */
    int64_t threads;       /* --threads: 0 = the library's default */
    int sample_option;     /* --sample */
    /* --stop, --eos-token-id, --min-new-tokens, --repetition-penalty,
     * --no-repeat-ngram-size (tfm_generate_options) */
    const char *stops[MAX_LIST];
    int64_t n_stops;
    int32_t eos[MAX_LIST];
    int64_t n_eos;
    int64_t min_new_tokens;
    float repetition_penalty;
    int64_t no_repeat_ngram_size;
    tfm_past_context past_context;   /* --past-context */
    const char *batch_file;          /* --batch-file, or NULL */
    const char *fill_mask;           /* --fill-mask, or NULL */
    int top_k_option;                /* --top-k given */
    const char *translate;           /* --translate, or NULL */
    const char *classify;            /* --classify, or NULL */
    int64_t num_beams;               /* --num-beams; 0: the checkpoint's */
    int max_tokens_option;           /* --max-tokens given */
} options;

/* getopt_long's values for the long-only options. */
enum { OPT_SAMPLE = 256, OPT_STOP, OPT_EOS, OPT_MIN_NEW, OPT_REPETITION,
       OPT_NO_REPEAT, OPT_PAST_CONTEXT, OPT_BATCH_FILE, OPT_FILL_MASK,
       OPT_TRANSLATE, OPT_NUM_BEAMS, OPT_CLASSIFY };

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: " PROGRAM " [OPTION]...\n"
        "Generate text with a Transformer model: a model file (safetensors "
        "with\n"
        "tokenizer metadata, such as the shipped character-level model) or a "
        "Hugging\n"
        "Face checkpoint directory (GPT-2, Llama; BERT with --fill-mask, "
        "Marian with\n"
        "--translate, ViT with --classify).\n"
        "\n"
        "  -m, --model FILE|DIR   model file (safetensors with tokenizer\n"
        "                         metadata) or checkpoint directory; default:\n"
        "                         $" MODEL_ENV " if set,\n"
        "                         else " TFM_DEFAULT_MODEL "\n"
        "  -p, --prompt TEXT      text to continue (default \"In the "
        "beginning\")\n"
        "  -n, --max-tokens N     tokens to generate (default 200)\n"
        "  -t, --temperature T    sample with temperature T > 0 "
        "(default 1.0)\n"
        "  -k, --top-k K          sample among the K most likely (0: all; "
        "default 0)\n"
        "      --top-p P          sample among the most likely whose "
        "probability\n"
        "                         reaches P, 0 < P <= 1 (default 1.0)\n"
        "  -s, --seed S           random seed for sampling (default 42)\n"
        "      --sample           sample, with the defaults above for what "
        "is not given\n"
        "  -g, --greedy           always take the most likely token "
        "(the\n"
        "                         default; overrides the sampling options)\n"
        "  -j, --threads N        threads for the forward passes (0: one per\n"
        "                         online processor, the default; at most 64\n"
        "                         are used)\n"
        "      --max-new-tokens N the same as --max-tokens\n"
        "      --stop TEXT        stop once the generated text contains TEXT "
        "(may be\n"
        "                         given up to 64 times)\n"
        "      --eos-token-id ID  stop after token ID (may be given up to 64 "
        "times)\n"
        "      --min-new-tokens N no end-of-sequence token before N tokens\n"
        "      --repetition-penalty R  CTRL's penalty R > 0 on tokens already "
        "seen\n"
        "                         (1: none, the default)\n"
        "      --no-repeat-ngram-size N  no N-gram twice (0: no limit)\n"
        "      --past-context MODE  past the context length: auto (the\n"
        "                         default: a rolling cache, or for learned\n"
        "                         positions a re-encode of the last half\n"
        "                         window once per half window) or reencode\n"
        "                         (the whole window afresh for every token)\n"
        "      --batch-file FILE  generate for every line of FILE (a prompt "
        "each)\n"
        "                         together; one line out per prompt, in "
        "order,\n"
        "                         newlines written as \\n, backslashes as "
        "\\\\\n"
        "      --fill-mask TEXT   a masked LM (BERT) predicts each [MASK] in "
        "TEXT:\n"
        "                         the 5 (or --top-k K) most likely tokens, "
        "one line\n"
        "                         each: probability, token, filled text\n"
        "      --translate TEXT   an encoder-decoder checkpoint (Marian) "
        "translates\n"
        "                         TEXT with beam search; one line out\n"
        "      --num-beams N      beams of --translate (default: the "
        "checkpoint's\n"
        "                         num_beams, else 1 = greedy)\n"
        "      --classify IMAGE   an image classifier checkpoint (ViT) "
        "labels the\n"
        "                         PNG or JPEG file IMAGE: the 5 (or --top-k "
        "K) most\n"
        "                         likely labels, one line each: "
        "probability, label\n"
        "  -h, --help             show this help and exit\n"
        "  -V, --version          show the version and exit\n"
        "\n"
        "Decoding is greedy unless --sample, --temperature, --top-k, --top-p "
        "or --seed\n"
        "is given (the Python and Lua generate's do_sample rule).\n"
        "The text goes to stdout, each token as it is generated; "
        "prefill and\n"
        "decode speed and why generation stopped to stderr.  The prompt must "
        "fit in\n"
        "the model's context; generation continues past it (the window "
        "slides).\n"
        "\n"
        "The model file's metadata chooses the architecture, the positional "
        "encoding\n"
        "(\"tfm.positional\": learned, sinusoidal, sinusoidal_concat, none; "
        "base\n"
        "\"tfm.positional_base\") and the attention variant (\"tfm.attention.*"
        "\":\n"
        "grouped-query and multi-query heads, RoPE, ALiBi, T5 buckets, Shaw "
        "relative\n"
        "positions, sliding-window, dilated and BigBird patterns, other "
        "scores; see\n"
        "docs/VARIANTS.md).  Every variant decodes with the KV cache; the "
        "model line\n"
        "on stderr says which one the file selects.\n");
}

/* Returns -1 to go on, else the exit code. */
static int parse_options(int argc, char **argv, options *o)
{
    static const struct option longs[] = {
        { "model", required_argument, NULL, 'm' },
        { "prompt", required_argument, NULL, 'p' },
        { "max-tokens", required_argument, NULL, 'n' },
        { "temperature", required_argument, NULL, 't' },
        { "top-k", required_argument, NULL, 'k' },
        { "top-p", required_argument, NULL, 'P' },
        { "seed", required_argument, NULL, 's' },
        { "greedy", no_argument, NULL, 'g' },
        { "threads", required_argument, NULL, 'j' },
        { "sample", no_argument, NULL, OPT_SAMPLE },
        { "max-new-tokens", required_argument, NULL, 'n' },
        { "stop", required_argument, NULL, OPT_STOP },
        { "eos-token-id", required_argument, NULL, OPT_EOS },
        { "min-new-tokens", required_argument, NULL, OPT_MIN_NEW },
        { "repetition-penalty", required_argument, NULL, OPT_REPETITION },
        { "no-repeat-ngram-size", required_argument, NULL, OPT_NO_REPEAT },
        { "past-context", required_argument, NULL, OPT_PAST_CONTEXT },
        { "batch-file", required_argument, NULL, OPT_BATCH_FILE },
        { "fill-mask", required_argument, NULL, OPT_FILL_MASK },
        { "translate", required_argument, NULL, OPT_TRANSLATE },
        { "num-beams", required_argument, NULL, OPT_NUM_BEAMS },
        { "classify", required_argument, NULL, OPT_CLASSIFY },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    const char *env = getenv(MODEL_ENV);
    o->model = env && env[0] ? env : TFM_DEFAULT_MODEL;
    o->prompt = "In the beginning";
    o->max_tokens = 200;
    o->sampling = (tfm_sampling){ 0, 1.0f, 0, 1.0f };
    o->seed = 42;
    o->sampling_option = 0;
    o->greedy_option = 0;
    o->threads = 0;
    o->sample_option = 0;
    o->n_stops = 0;
    o->n_eos = 0;
    o->min_new_tokens = 0;
    o->repetition_penalty = 1.0f;
    o->no_repeat_ngram_size = 0;
    o->past_context = TFM_PAST_CONTEXT_AUTO;
    o->batch_file = NULL;
    o->fill_mask = NULL;
    o->top_k_option = 0;
    o->translate = NULL;
    o->classify = NULL;
    o->num_beams = 0;
    o->max_tokens_option = 0;

    int c;
    int64_t v;
    while ((c = getopt_long(argc, argv, "m:p:n:t:k:s:gj:hV", longs, NULL)) !=
           -1) {
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'p':
            o->prompt = optarg;
            break;
        case 'n':
            if (parse_int64("--max-tokens", optarg, 0, &o->max_tokens))
                return 1;
            o->max_tokens_option = 1;
            break;
        case 't':
            if (parse_float("--temperature", optarg, &o->sampling.temperature))
                return 1;
            if (!(o->sampling.temperature > 0.0f))
                return fail("--temperature: %s must be greater than 0",
                            optarg);
            o->sampling_option = 1;
            break;
        case 'k':
            if (parse_int64("--top-k", optarg, 0, &o->sampling.top_k))
                return 1;
            o->sampling_option = 1;
            o->top_k_option = 1;
            break;
        case 'P':
            if (parse_float("--top-p", optarg, &o->sampling.top_p))
                return 1;
            if (!(o->sampling.top_p > 0.0f && o->sampling.top_p <= 1.0f))
                return fail("--top-p: %s is outside (0, 1]", optarg);
            o->sampling_option = 1;
            break;
        case 's':
            if (parse_uint64("--seed", optarg, &o->seed))
                return 1;
            o->sampling_option = 1;
            break;
        case 'g':
            o->greedy_option = 1;
            break;
        case 'j':
            if (parse_int64("--threads", optarg, 0, &o->threads))
                return 1;
            if (o->threads > INT32_MAX)
                return fail("--threads: %s is too large", optarg);
            break;
        case OPT_SAMPLE:
            o->sampling_option = 1;
            o->sample_option = 1;
            break;
        case OPT_STOP:
            if (!optarg[0])
                return fail("--stop: the text must not be empty");
            if (o->n_stops == MAX_LIST)
                return fail("--stop: at most %d", MAX_LIST);
            o->stops[o->n_stops++] = optarg;
            break;
        case OPT_EOS:
            if (parse_int64("--eos-token-id", optarg, 0, &v))
                return 1;
            if (v > INT32_MAX)
                return fail("--eos-token-id: %s is too large", optarg);
            if (o->n_eos == MAX_LIST)
                return fail("--eos-token-id: at most %d", MAX_LIST);
            o->eos[o->n_eos++] = (int32_t)v;
            break;
        case OPT_MIN_NEW:
            if (parse_int64("--min-new-tokens", optarg, 0, &o->min_new_tokens))
                return 1;
            break;
        case OPT_REPETITION:
            if (parse_float("--repetition-penalty", optarg,
                            &o->repetition_penalty))
                return 1;
            if (!(o->repetition_penalty > 0.0f))
                return fail("--repetition-penalty: %s must be greater than 0",
                            optarg);
            break;
        case OPT_PAST_CONTEXT:
            if (strcmp(optarg, "auto") == 0)
                o->past_context = TFM_PAST_CONTEXT_AUTO;
            else if (strcmp(optarg, "reencode") == 0)
                o->past_context = TFM_PAST_CONTEXT_REENCODE;
            else
                return fail("--past-context: %s is not auto or reencode",
                            optarg);
            break;
        case OPT_BATCH_FILE:
            o->batch_file = optarg;
            break;
        case OPT_FILL_MASK:
            o->fill_mask = optarg;
            break;
        case OPT_TRANSLATE:
            o->translate = optarg;
            break;
        case OPT_CLASSIFY:
            o->classify = optarg;
            break;
        case OPT_NUM_BEAMS:
            if (parse_int64("--num-beams", optarg, 1, &o->num_beams))
                return 1;
            break;
        case OPT_NO_REPEAT:
            if (parse_int64("--no-repeat-ngram-size", optarg, 0,
                            &o->no_repeat_ngram_size))
                return 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf(PROGRAM " (libtransformer) %s\n", tfm_version_string());
            return 0;
        default: /* getopt_long has said what was wrong */
            fprintf(stderr, "Try '" PROGRAM " --help' for more "
                            "information.\n");
            return 1;
        }
    }
    if (optind < argc) {
        fail("unexpected argument '%s' (the prompt goes after --prompt)",
             argv[optind]);
        fprintf(stderr, "Try '" PROGRAM " --help' for more information.\n");
        return 1;
    }
    if (o->greedy_option && o->sample_option)
        return fail("--greedy and --sample contradict each other: give one "
                    "of them");
    o->sampling.greedy = o->greedy_option || !o->sampling_option;
    return -1;
}

/* ---- Generation ------------------------------------------------------- */

typedef struct timings {
    int64_t prefill_tokens;
    double prefill_s;        /* tfm_generator_create */
    int64_t tokens;          /* generated */
    int64_t slides;          /* steps that encoded a window afresh */
    int64_t rolled;          /* steps past the context on a rolling cache */
    int64_t kept;            /* tokens each slide encodes (ctx or ctx/2) */
    double decode_s;         /* every tfm_generator_next */
    tfm_stop_reason reason;
} timings;

/* Prints the text of id (flushed). */
static int emit(const tfm_tokenizer *tok, int32_t id)
{
    char text[64];
    size_t len;
    if (tfm_tokenizer_decode_v2(tok, &id, 1, 0, text, sizeof text, &len) !=
        TFM_OK)
        return fail("cannot decode token %d: %s", id, tfm_last_error());
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* The library's options for the command line's. */
static void generate_options(const options *o, const tfm_tokenizer *tok,
                             tfm_generate_options *g)
{
    tfm_generate_options_init(g);
    g->max_new_tokens = o->max_tokens;
    g->min_new_tokens = o->min_new_tokens;
    g->sampling = o->sampling;
    g->seed = o->seed;
    g->eos_token_ids = o->eos;
    g->n_eos_token_ids = o->n_eos;
    g->stop_strings = o->stops;
    g->n_stop_strings = o->n_stops;
    g->tokenizer = tok;
    g->repetition_penalty = o->repetition_penalty;
    g->no_repeat_ngram_size = o->no_repeat_ngram_size;
    g->past_context = o->past_context;
}

/* Generates with a tfm_generator, printing each token as it comes. */
static int generate(const tfm_module *model, const tfm_tokenizer *tok,
                    const int32_t *prompt, int64_t n_prompt,
                    const options *o, timings *tm)
{
    tfm_model_config cfg;
    if (tfm_model_get_config(model, &cfg) != TFM_OK)
        return fail("%s", tfm_last_error());
    tfm_generate_options g;
    generate_options(o, tok, &g);

    /* What the generator does past the context (model.h:
     * tfm_past_context): a model that takes a rolling cache rolls. */
    tfm_kv_cache *probe = NULL;
    const int rolls = g.past_context == TFM_PAST_CONTEXT_AUTO &&
                      tfm_kv_cache_create_rolling(model, 1, &probe) == TFM_OK;
    tfm_kv_cache_free(probe);
    const int64_t ctx = cfg.context_length;
    tm->kept = g.past_context == TFM_PAST_CONTEXT_REENCODE ? ctx
                                                          : ctx - ctx / 2;
    int64_t held = n_prompt < ctx ? n_prompt : ctx;   /* the cache's */

    tfm_generator *gen = NULL;
    double t0 = now_seconds();
    if (tfm_generator_create(model, prompt, n_prompt, &g, &gen) != TFM_OK)
        return fail("%s", tfm_last_error());
    tm->prefill_tokens = n_prompt;
    tm->prefill_s = now_seconds() - t0;
    int rc = 1;
    for (;;) {
        int32_t id;
        int produced;
        t0 = now_seconds();
        tfm_status st = tfm_generator_next(gen, &id, &produced);
        tm->decode_s += now_seconds() - t0;
        if (st != TFM_OK) {
            fputc('\n', stdout);
            fail("decoding failed: %s", tfm_last_error());
            goto done;
        }
        if (!produced)
            break;
        /* Every step after the first runs the previous token; once the
         * cache holds the context, that rolls it or re-encodes a window
         * (the generator's rule). */
        if (tm->tokens > 0) {
            if (held < ctx)
                held++;
            else if (rolls)
                tm->rolled++;
            else {
                tm->slides++;
                held = tm->kept;
            }
        }
        tm->tokens++;
        if (emit(tok, id))
            goto done;
    }
    tm->reason = tfm_generator_stop_reason(gen);
    rc = 0;
done:
    tfm_generator_free(gen);
    return rc;
}

/* ---- Describing the model -------------------------------------------- */

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
static void report_model(const tfm_module *model)
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

static void report(const tfm_module *model, const timings *tm,
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

/* ---- Batch mode (--batch-file) -------------------------------------- */

/* *ids (malloc'ed) and *n: the tokens of text[len]. */
static int encode(const tfm_tokenizer *tok, const char *text, size_t len,
                  int32_t **ids, int64_t *n)
{
    tfm_status st = tfm_tokenizer_encode(tok, text, len, NULL, 0, n);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY)
        return fail("the prompt cannot be encoded: %s", tfm_last_error());
    *ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof **ids);
    if (!*ids)
        return fail("out of memory");
    if (*n > 0 && tfm_tokenizer_encode(tok, text, len, *ids, *n, n) != TFM_OK)
        return fail("the prompt cannot be encoded: %s", tfm_last_error());
    return 0;
}

/* Writes bytes with newlines as \n and backslashes as \\. */
static void put_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n')
            fputs("\\n", stdout);
        else if (s[i] == '\\')
            fputs("\\\\", stdout);
        else
            fputc(s[i], stdout);
    }
}

/* The lines of path (without their \n or \r\n): *lines into *text. */
static int read_lines(const char *path, char **text, char ***lines,
                      int64_t *n)
{
    size_t len = 0;
    char *buf = read_file(path, &len);
    if (!buf)
        return 1;
    int64_t count = 0;
    for (size_t i = 0; i < len; i++)
        count += buf[i] == '\n';
    count += len > 0 && buf[len - 1] != '\n';
    char **l = malloc((size_t)(count > 0 ? count : 1) * sizeof *l);
    if (!l) {
        free(buf);
        return fail("out of memory");
    }
    int64_t k = 0;
    for (char *p = buf; p < buf + len;) {
        char *end = memchr(p, '\n', (size_t)(buf + len - p));
        if (!end)
            end = buf + len;
        *end = '\0';
        if (end > p && end[-1] == '\r')
            end[-1] = '\0';
        l[k++] = p;
        p = end + 1;
    }
    *text = buf;
    *lines = l;
    *n = k;
    return 0;
}

/* --batch-file: every line a prompt, generated together; one line out per
 * prompt. */
static int generate_file(const tfm_module *model, const tfm_tokenizer *tok,
                         const options *o)
{
    char *text = NULL, **lines = NULL;
    int64_t B = 0;
    if (read_lines(o->batch_file, &text, &lines, &B))
        return 1;
    int rc = 1;
    int32_t **ids = calloc((size_t)(B > 0 ? B : 1), sizeof *ids);
    int64_t *n_ids = calloc((size_t)(B > 0 ? B : 1), sizeof *n_ids);
    int64_t *n_out = calloc((size_t)(B > 0 ? B : 1), sizeof *n_out);
    tfm_stop_reason *why = calloc((size_t)(B > 0 ? B : 1), sizeof *why);
    int32_t *out = malloc((size_t)(B * o->max_tokens > 0 ? B * o->max_tokens
                                                         : 1) * sizeof *out);
    if (!ids || !n_ids || !n_out || !why || !out) {
        fail("out of memory");
        goto done;
    }
    if (B == 0) {
        fail("--batch-file '%s' has no lines", o->batch_file);
        goto done;
    }
    for (int64_t i = 0; i < B; i++) {
        if (encode(tok, lines[i], strlen(lines[i]), &ids[i], &n_ids[i]))
            goto done;
        if (n_ids[i] == 0) {
            fail("--batch-file '%s': line %lld is empty", o->batch_file,
                 (long long)(i + 1));
            goto done;
        }
    }
    tfm_generate_options g;
    generate_options(o, tok, &g);
    const double t0 = now_seconds();
    if (tfm_model_generate_batch(model, (const int32_t *const *)ids, n_ids,
                                 B, &g, out, n_out, why) != TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    const double seconds = now_seconds() - t0;
    int64_t total = 0, counts[5] = { 0 };
    for (int64_t i = 0; i < B; i++) {
        size_t len = 0, cap = (size_t)n_out[i] * 8 + 1;
        char *s = malloc(cap);
        if (!s) {
            fail("out of memory");
            goto done;
        }
        tfm_status st = tfm_tokenizer_decode_v2(tok, out + i * o->max_tokens,
                                                n_out[i], 0, s, cap, &len);
        if (st == TFM_ERR_CAPACITY) {
            char *more = realloc(s, len + 1);
            if (!more) {
                free(s);
                fail("out of memory");
                goto done;
            }
            s = more;
            st = tfm_tokenizer_decode_v2(tok, out + i * o->max_tokens,
                                         n_out[i], 0, s, len + 1, &len);
        }
        if (st != TFM_OK) {
            free(s);
            fail("cannot decode line %lld's tokens: %s", (long long)(i + 1),
                 tfm_last_error());
            goto done;
        }
        put_escaped(lines[i], strlen(lines[i]));
        put_escaped(s, len);
        fputc('\n', stdout);
        free(s);
        total += n_out[i];
        if ((int)why[i] >= 0 && (int)why[i] < 5)
            counts[why[i]]++;
    }
    fflush(stdout);
    fprintf(stderr, "batch: %lld prompts, %lld tokens generated in %.3f ms "
            "(%.1f tokens/s, prefills included)\n", (long long)B,
            (long long)total, 1e3 * seconds,
            seconds > 0 ? (double)total / seconds : 0.0);
    fprintf(stderr, "stopped: %lld at max-tokens, %lld at an end-of-sequence "
            "token, %lld at a stop string\n", (long long)counts[1],
            (long long)counts[2], (long long)counts[3]);
    report_model(model);
    fprintf(stderr, "threads: %d\n", tfm_get_num_threads());
    const char *core = openblas_get_corename();
    fprintf(stderr, "OpenBLAS core: %s\n", core ? core : "unknown");
    rc = 0;
done:
    if (ids)
        for (int64_t i = 0; i < B; i++)
            free(ids[i]);
    free(ids);
    free(n_ids);
    free(n_out);
    free(why);
    free(out);
    free(lines);
    free(text);
    return rc;
}

/* ---- Fill-mask ---------------------------------------------------------- */

/* Prints the decoded ids (tfm_tokenizer_decode_v2's flags); 1 on
 * error. */
static int put_decoded(const tfm_tokenizer *tok, const int32_t *ids,
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

/* --fill-mask: the top predictions of every [MASK] of o->fill_mask. */
static int fill_mask(const tfm_module *model, const tfm_tokenizer *tok,
                     const options *o, int64_t vocab)
{
    const int64_t top = o->top_k_option && o->sampling.top_k > 0
                            ? o->sampling.top_k
                            : 5;
    const int64_t k_max = top < vocab ? top : vocab;
    const unsigned flags = TFM_ENCODE_ADD_SPECIAL | TFM_ENCODE_SPLIT_SPECIAL;
    const char *text = o->fill_mask;
    int32_t mask;
    if (tfm_tokenizer_special_id(tok, "mask", &mask) != TFM_OK)
        return fail("the tokenizer has no mask token: %s", tfm_last_error());
    int64_t n = 0;
    tfm_status st = tfm_tokenizer_encode_v2(tok, text, strlen(text), NULL, 0,
                                            flags, NULL, NULL, NULL, 0, &n);
    if (st != TFM_ERR_CAPACITY && st != TFM_OK)
        return fail("the text cannot be encoded: %s", tfm_last_error());
    int rc = 1;
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    int64_t *best = malloc((size_t)k_max * sizeof *best);
    tfm_tensor *logits = NULL;
    if (!ids || !best) {
        fail("out of memory");
        goto done;
    }
    if (tfm_tokenizer_encode_v2(tok, text, strlen(text), NULL, 0, flags, ids,
                                NULL, NULL, n, &n) != TFM_OK) {
        fail("the text cannot be encoded: %s", tfm_last_error());
        goto done;
    }
    int64_t n_masks = 0;
    for (int64_t i = 0; i < n; i++)
        n_masks += ids[i] == mask;
    if (n_masks == 0) {
        fail("the text has no mask token; write it where the model is to "
             "predict, e.g. \"Paris is the [MASK] of France.\"");
        goto done;
    }
    if (tfm_tensor_create(3, (const int64_t[]){ 1, n, vocab }, &logits) !=
            TFM_OK ||
        tfm_model_logits(model, ids, 1, n, logits) != TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    const float *x = tfm_tensor_data_const(logits);
    int64_t seen = 0;
    for (int64_t at = 0; at < n; at++) {
        if (ids[at] != mask)
            continue;
        const float *row = x + at * vocab;
        /* softmax in double, then the k largest by selection (k small) */
        double hi = row[0], sum = 0;
        for (int64_t v = 1; v < vocab; v++)
            hi = row[v] > hi ? row[v] : hi;
        for (int64_t v = 0; v < vocab; v++)
            sum += exp((double)row[v] - hi);
        for (int64_t k = 0; k < k_max; k++) {
            int64_t arg = -1;
            for (int64_t v = 0; v < vocab; v++) {
                int taken = 0;
                for (int64_t j = 0; j < k && !taken; j++)
                    taken = best[j] == v;
                if (!taken && (arg < 0 || row[v] > row[arg]))
                    arg = v;
            }
            best[k] = arg;
        }
        if (n_masks > 1)
            printf("%s[MASK] %lld:\n", seen ? "\n" : "",
                   (long long)(seen + 1));
        for (int64_t k = 0; k < k_max; k++) {
            const int32_t id = (int32_t)best[k];
            printf("%.4f\t", exp((double)row[id] - hi) / sum);
            if (put_decoded(tok, &id, 1, TFM_DECODE_SKIP_SPECIAL))
                goto done;
            putchar('\t');
            ids[at] = id;
            /* as the pipeline: the other masks stay visible, with the
             * framing, when there are several */
            if (put_decoded(tok, ids, n,
                            n_masks == 1 ? TFM_DECODE_SKIP_SPECIAL : 0))
                goto done;
            ids[at] = mask;
            putchar('\n');
        }
        seen++;
    }
    fflush(stdout);
    rc = 0;
done:
    tfm_tensor_free(logits);
    free(best);
    free(ids);
    return rc;
}

/* ---- Translation ------------------------------------------------------- */

/* --translate: the beam search's best translation of o->translate. */
static int translate(const tfm_module *model, const tfm_tokenizer *tok,
                     const options *o, const tfm_model_config *cfg)
{
    generation_defaults g;
    if (read_generation_defaults(o->model, &g))
        return 1;
    int rc = 1;
    int32_t *ids = NULL, *out = NULL;
    if (g.decoder_start < 0) {
        fail("'%s': %s has no decoder_start_token_id nor bos_token_id (a "
             "whole number >= 0), which --translate needs", o->model, g.file);
        goto done;
    }
    if (g.n_eos > 1 && o->n_eos == 0) {
        fail("'%s': %s gives %d eos_token_id values; the beam search takes "
             "one: give it with --eos-token-id", o->model, g.file, g.n_eos);
        goto done;
    }
    if (o->n_eos > 1) {
        fail("--translate takes one --eos-token-id");
        goto done;
    }
    if (o->max_tokens_option && o->max_tokens > TFM_MAX_NEW_TOKENS) {
        fail("--max-tokens %lld is over %lld", (long long)o->max_tokens,
             (long long)TFM_MAX_NEW_TOKENS);
        goto done;
    }
    const char *text = o->translate;
    int64_t n = 0;
    const unsigned flags = TFM_ENCODE_ADD_SPECIAL;
    tfm_status st = tfm_tokenizer_encode_v2(tok, text, strlen(text), NULL, 0,
                                            flags, NULL, NULL, NULL, 0, &n);
    if (st != TFM_ERR_CAPACITY && st != TFM_OK) {
        fail("the text cannot be encoded: %s", tfm_last_error());
        goto done;
    }
    tfm_beam_search_options bo;
    tfm_beam_search_options_init(&bo);
    bo.num_beams = o->num_beams ? o->num_beams
                   : g.num_beams ? g.num_beams : 1;
    /* max_new_tokens, else max_length, which counts the decoder start
     * token (transformers' rule); the context bounds both */
    int64_t max_new = o->max_tokens_option   ? o->max_tokens
                      : g.max_new_tokens >= 0 ? g.max_new_tokens
                                              : g.max_length - 1;
    if (!o->max_tokens_option && max_new > cfg->context_length)
        max_new = cfg->context_length;
    if (max_new < 1) { /* nothing to generate: an empty translation */
        putchar('\n');
        rc = 0;
        goto done;
    }
    bo.max_new_tokens = max_new;
    /* --min-new-tokens, else min_new_tokens, else min_length, which counts
     * the decoder start token */
    bo.min_new_tokens = o->min_new_tokens     ? o->min_new_tokens
                        : g.min_new_tokens >= 0 ? g.min_new_tokens
                        : g.min_length > 0      ? g.min_length - 1
                                                : 0;
    bo.length_penalty = g.length_penalty;
    bo.early_stopping = g.early_stopping;
    bo.renormalize_logits = g.renormalize_logits;
    bo.eos_token_id = o->n_eos ? o->eos[0] : g.eos;
    bo.forced_eos_token_id = g.forced_eos;
    bo.decoder_start_token_id = g.decoder_start;
    bo.suppress_tokens = g.suppress;
    bo.n_suppress_tokens = g.n_suppress;
    ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    out = malloc((size_t)(max_new > 0 ? max_new : 1) * sizeof *out);
    int64_t length = 0;
    if (!ids || !out) {
        fail("out of memory");
        goto done;
    }
    if (tfm_tokenizer_encode_v2(tok, text, strlen(text), NULL, 0, flags, ids,
                                NULL, NULL, n, &n) != TFM_OK) {
        fail("the text cannot be encoded: %s", tfm_last_error());
        goto done;
    }
    const double t0 = now_seconds();
    if (tfm_model_beam_search(model, ids, n, &bo, out, &length, NULL) !=
        TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    const double dt = now_seconds() - t0;
    if (put_decoded(tok, out, length, TFM_DECODE_SKIP_SPECIAL))
        goto done;
    putchar('\n');
    fflush(stdout);
    fprintf(stderr, "translation: %lld source tokens, %lld target tokens, "
            "%lld beams, %.3f s\n", (long long)n, (long long)length,
            (long long)bo.num_beams, dt);
    rc = 0;
done:
    free(out);
    free(ids);
    free(g.suppress);
    return rc;
}

/* The model is of architecture `arch` (else "'MODEL' is not <what>") and
 * its vocabulary the tokenizer's; 1 with the message otherwise. */
static int check_model(const tfm_model_config *cfg, const tfm_tokenizer *tok,
                       const options *o, tfm_architecture arch,
                       const char *what)
{
    if (cfg->architecture != arch)
        return fail("'%s' is not %s", o->model, what);
    if (cfg->vocab_size != tfm_tokenizer_vocab_size(tok))
        return fail("'%s': the model has %lld tokens but the tokenizer %lld",
                    o->model, (long long)cfg->vocab_size,
                    (long long)tfm_tokenizer_vocab_size(tok));
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;

    tfm_set_num_threads((int)o.threads);   /* 0: one per processor */
    tfm_module *model = NULL;
    tfm_tokenizer *tok = NULL;
    int32_t *prompt = NULL;
    rc = 1;
    tfm_status st = tfm_model_load(o.model, &model);
    if (st != TFM_OK) {
        fail("cannot load model '%s': %s", o.model, tfm_last_error());
        if (st == TFM_ERR_IO)
            fprintf(stderr, "Give the model file with --model FILE or the "
                            MODEL_ENV " environment variable.\n");
        goto done;
    }
    if (o.classify) { /* an image model: no tokenizer */
        if (o.fill_mask || o.translate || o.batch_file) {
            fail("--classify takes an image, not --fill-mask, --translate "
                 "or --batch-file");
            goto done;
        }
        rc = classify_image(model, o.model, o.classify,
                            o.top_k_option && o.sampling.top_k > 0
                                ? o.sampling.top_k
                                : 5);
        goto done;
    }
    if (tfm_tokenizer_load(o.model, &tok) != TFM_OK) {
        fail("cannot load the tokenizer of '%s': %s", o.model,
             tfm_last_error());
        goto done;
    }
    tfm_model_config cfg;
    if (tfm_model_get_config(model, &cfg) != TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    if (o.fill_mask) {
        if (!check_model(&cfg, tok, &o, TFM_ARCH_ENCODER_ONLY,
                         "an encoder-only model (a masked LM such as BERT): "
                         "--fill-mask needs one"))
            rc = fill_mask(model, tok, &o, cfg.vocab_size);
        goto done;
    }
    if (o.translate) {
        if (o.sampling_option || o.n_stops || o.repetition_penalty != 1.0f ||
            o.no_repeat_ngram_size || o.batch_file || o.fill_mask) {
            fail("--translate is a beam search: it takes --num-beams, "
                 "--max-tokens, --min-new-tokens and one --eos-token-id, "
                 "not sampling, --stop, --repetition-penalty, "
                 "--no-repeat-ngram-size, --batch-file or --fill-mask");
            goto done;
        }
        if (!check_model(&cfg, tok, &o, TFM_ARCH_ENCODER_DECODER,
                         "an encoder-decoder model (a translation model such "
                         "as Marian): --translate needs one"))
            rc = translate(model, tok, &o, &cfg);
        goto done;
    }
    if (cfg.architecture != TFM_ARCH_DECODER_ONLY) {
        fail("'%s' is not a decoder-only model, it cannot generate text",
             o.model);
        goto done;
    }
    if (cfg.vocab_size != tfm_tokenizer_vocab_size(tok)) {
        fail("'%s': the model has %lld tokens but the tokenizer %lld",
             o.model, (long long)cfg.vocab_size,
             (long long)tfm_tokenizer_vocab_size(tok));
        goto done;
    }

    if (o.batch_file) {
        rc = generate_file(model, tok, &o);
        goto done;
    }

    size_t prompt_len = strlen(o.prompt);
    int64_t n_prompt = 0;
    st = tfm_tokenizer_encode(tok, o.prompt, prompt_len, NULL, 0,
                                         &n_prompt);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY) {
        fail("the prompt cannot be encoded: %s", tfm_last_error());
        goto done;
    }
    if (n_prompt == 0) {
        fail("the prompt is empty; give at least one character");
        goto done;
    }
    prompt = malloc((size_t)n_prompt * sizeof *prompt);
    if (!prompt) {
        fail("out of memory");
        goto done;
    }
    if (tfm_tokenizer_encode(tok, o.prompt, prompt_len, prompt, n_prompt,
                             &n_prompt) != TFM_OK) {
        fail("the prompt cannot be encoded: %s", tfm_last_error());
        goto done;
    }

    fputs(o.prompt, stdout);
    fflush(stdout);
    timings tm = { 0, 0.0, 0, 0, 0, 0, 0.0, TFM_STOP_MAX_NEW_TOKENS };
    if (generate(model, tok, prompt, n_prompt, &o, &tm))
        goto done;
    fputc('\n', stdout);
    fflush(stdout);
    report(model, &tm, &o);
    rc = 0;
done:
    free(prompt);
    tfm_tokenizer_free(tok);
    tfm_module_free(model);
    return rc;
}
