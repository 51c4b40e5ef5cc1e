/* transformer-generate's command line (generate_options.h). */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

#define PROGRAM "transformer-generate"
#include "cli_args.h"
#include "generate_options.h"

#ifndef TFM_DEFAULT_MODEL
#error "TFM_DEFAULT_MODEL (absolute path of the default model) must be defined"
#endif

void usage(FILE *out)
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
        "      --dtype TYPE       keep the weights of the matrix products "
        "and the\n"
        "                         embeddings in TYPE: f32, bf16, f16, q8_0 "
        "or q4_0\n"
        "                         (llama.cpp's blocks of 32), or auto (each "
        "in the\n"
        "                         type its file stores it in); default: f32,"
        " and\n"
        "                         auto for a GGUF file\n"
        "      --save-model OUT   write the model, its weights in their "
        "--dtype, to the\n"
        "                         model file OUT (with the tokenizer of a "
        "model\n"
        "                         file) and exit\n"
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
        "decode speed and why generation stopped to stderr.  A prompt "
        "longer than the\n"
        "model's context is taken as tfm_model_generate takes one: its "
        "last context\n"
        "tokens are the model's input (a note on stderr); generation "
        "continues past\n"
        "the context (the window slides).  A --batch-file line may not "
        "hold NUL.\n"
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

/* --dtype's names (weights.h): 0 and *dtype set, or 1. */
static int parse_dtype(const char *name, int *dtype)
{
    static const struct { const char *name; int dtype; } names[] = {
        { "auto", TFM_LOAD_DTYPE_AUTO }, { "f32", TFM_DTYPE_F32 },
        { "float32", TFM_DTYPE_F32 },    { "bf16", TFM_DTYPE_BF16 },
        { "bfloat16", TFM_DTYPE_BF16 },  { "f16", TFM_DTYPE_F16 },
        { "float16", TFM_DTYPE_F16 },    { "q8_0", TFM_DTYPE_Q8_0 },
        { "q4_0", TFM_DTYPE_Q4_0 },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *dtype = names[i].dtype;
            return 0;
        }
    return 1;
}

/* Returns -1 to go on, else the exit code. */
int parse_options(int argc, char **argv, options *o)
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
        { "dtype", required_argument, NULL, OPT_DTYPE },
        { "save-model", required_argument, NULL, OPT_SAVE_MODEL },
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
    o->dtype = TFM_DTYPE_F32;
    o->dtype_option = 0;
    o->save_model = NULL;

    int c;
    int64_t v = 0;
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
        case OPT_DTYPE:
            if (parse_dtype(optarg, &o->dtype))
                return fail("--dtype: %s is not auto, f32, bf16, f16, q8_0 "
                            "or q4_0", optarg);
            o->dtype_option = 1;
            break;
        case OPT_SAVE_MODEL:
            o->save_model = optarg;
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
