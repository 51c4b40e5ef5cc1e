/* transformer-generate's command line (tools/generate_options.c). */
#ifndef TFM_TOOLS_GENERATE_OPTIONS_H
#define TFM_TOOLS_GENERATE_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include <transformer/transformer.h>

/* The environment variable naming the model when --model is not given. */
#define MODEL_ENV "TRANSFORMER_MODEL"

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
    /* --dtype: TFM_LOAD_DTYPE_AUTO or a TFM_DTYPE_*; dtype_option 0: not
     * given (float32 for model files and checkpoint directories, auto for
     * GGUF files: tfm_model_load's choice) */
    int dtype;
    int dtype_option;
    const char *save_model;          /* --save-model, or NULL */
} options;

/* getopt_long's values for the long-only options. */
enum { OPT_SAMPLE = 256, OPT_STOP, OPT_EOS, OPT_MIN_NEW, OPT_REPETITION,
       OPT_NO_REPEAT, OPT_PAST_CONTEXT, OPT_BATCH_FILE, OPT_FILL_MASK,
       OPT_TRANSLATE, OPT_NUM_BEAMS, OPT_CLASSIFY, OPT_DTYPE, OPT_SAVE_MODEL };

/* --help's text. */
void usage(FILE *out);
/* Parses the command line into *o; returns -1 to go on, else the exit
 * code (message printed). */
int parse_options(int argc, char **argv, options *o);

#endif
