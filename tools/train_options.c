/* transformer-train's options (train_options.h). */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <transformer/transformer.h>

#define PROGRAM "transformer-train"
#include "cli_args.h"
#include "train_options.h"

static const char *const OBJECTIVES[] = { "clm", "mlm", NULL };
static const char *const POSITIONS[] = { "learned", "sinusoidal", "rope",
                                         "alibi", NULL };
static const char *const NORMS[] = { "pre", "post", NULL };
static const char *const ACTIVATIONS[] = { "relu", "gelu", "gelu_tanh",
                                           "silu", NULL };
static const char *const INITS[] = { "gpt2", "pytorch", NULL };
static const char *const OPTIMIZERS[] = { "sgd", "adam", "adamw", NULL };

#define OFF(f) offsetof(train_options, f)

const opt_spec SPECS[] = {
    { "text", T_STRING, OFF(text), 0, NULL, 0, "FILE",
      "UTF-8 training text (required)" },
    { "out", T_STRING, OFF(out), 0, NULL, 0, "MODEL",
      "model file written at the end (required)" },
    { "checkpoint", T_STRING, OFF(checkpoint), 0, NULL, 0, "DIR",
      "checkpoint directory (default MODEL.ckpt)" },
    { "resume", T_FLAG, OFF(resume), 0, NULL, 0, NULL,
      "continue from the checkpoint in DIR" },
    { "overwrite", T_FLAG, OFF(overwrite), 0, NULL, 0, NULL,
      "start a new run over the checkpoint in DIR (its step files go)" },
    { "log-file", T_STRING, OFF(log_file), 0, NULL, 0, "FILE",
      "append step,loss,lr of every step (CSV)" },
    { "objective", T_CHOICE, OFF(objective), 0, OBJECTIVES, 1, "clm|mlm",
      "next character (decoder-only) or masked LM (encoder-only)" },
    { "layers", T_INT, OFF(layers), 1, NULL, 1, "N", "blocks (4)" },
    { "d-model", T_INT, OFF(d_model), 1, NULL, 1, "N", "width (128)" },
    { "heads", T_INT, OFF(heads), 1, NULL, 1, "N",
      "attention heads, dividing d-model (4)" },
    { "d-ff", T_INT, OFF(d_ff), 1, NULL, 1, "N",
      "feed-forward width (512)" },
    { "context", T_INT, OFF(context), 1, NULL, 1, "N",
      "characters per window (128)" },
    { "positions", T_CHOICE, OFF(positions), 0, POSITIONS, 1,
      "learned|sinusoidal|rope|alibi", "positional encoding (learned)" },
    { "norm", T_CHOICE, OFF(norm), 0, NORMS, 1, "pre|post",
      "LayerNorm placement (pre)" },
    { "activation", T_CHOICE, OFF(activation), 0, ACTIVATIONS, 1,
      "relu|gelu|gelu_tanh|silu", "feed-forward activation (gelu)" },
    { "init", T_CHOICE, OFF(init), 0, INITS, 1, "gpt2|pytorch",
      "initialisation (gpt2)" },
    { "val-fraction", T_DOUBLE, OFF(val_fraction), 0, NULL, 1, "F",
      "share of the text held out, 0 < F < 1 (0.05)" },
    { "optimizer", T_CHOICE, OFF(optimizer), 0, OPTIMIZERS, 1,
      "sgd|adam|adamw", "optimizer (adamw)" },
    { "lr", T_DOUBLE, OFF(lr), 0, NULL, 1, "LR", "peak learning rate (3e-3)" },
    { "beta1", T_DOUBLE, OFF(beta1), 0, NULL, 1, "B", "Adam beta1 (0.9)" },
    { "beta2", T_DOUBLE, OFF(beta2), 0, NULL, 1, "B", "Adam beta2 (0.95)" },
    { "eps", T_DOUBLE, OFF(eps), 0, NULL, 1, "E", "Adam epsilon (1e-8)" },
    { "weight-decay", T_DOUBLE, OFF(weight_decay), 0, NULL, 1, "W",
      "on parameters of two axes or more (0.1)" },
    { "momentum", T_DOUBLE, OFF(momentum), 0, NULL, 1, "M",
      "SGD momentum (0)" },
    { "warmup", T_INT, OFF(warmup), 0, NULL, 1, "N",
      "linear warm-up steps (100)" },
    { "min-lr-factor", T_DOUBLE, OFF(min_lr_factor), 0, NULL, 1, "F",
      "cosine floor, a fraction of lr (0.1)" },
    { "clip", T_DOUBLE, OFF(clip), 0, NULL, 1, "C",
      "clip the global gradient norm to C; 0: off (1.0)" },
    { "label-smoothing", T_DOUBLE, OFF(label_smoothing), 0, NULL, 1, "E",
      "cross-entropy label smoothing (0)" },
    { "dropout", T_DOUBLE, OFF(dropout), 0, NULL, 1, "P",
      "dropout on attention weights, residual branches, feed-forward "
      "and embeddings (0)" },
    { "mask-prob", T_DOUBLE, OFF(mask_prob), 0, NULL, 1, "P",
      "mlm: share of positions predicted (0.15)" },
    { "batch-size", T_INT, OFF(batch_size), 1, NULL, 1, "N",
      "windows per micro-batch (32)" },
    { "grad-accum", T_INT, OFF(grad_accum), 1, NULL, 1, "N",
      "micro-batches per step (1)" },
    { "steps", T_INT, OFF(steps), 1, NULL, 1, "N",
      "optimizer steps in all (1500)" },
    { "seed", T_UINT, OFF(seed), 0, NULL, 1, "S",
      "initialisation and batches (1234)" },
    { "threads", T_INT, OFF(threads), 0, NULL, 0, "N",
      "threads (0: one per processor, the default)" },
    { "eval-interval", T_INT, OFF(eval_interval), 0, NULL, 0, "N",
      "validation every N steps; 0: only at the end (250)" },
    { "eval-windows", T_INT, OFF(eval_windows), 1, NULL, 0, "N",
      "validation windows (200)" },
    { "checkpoint-interval", T_INT, OFF(checkpoint_interval), 0, NULL, 0,
      "N", "checkpoint every N steps; 0: only at the end (250)" },
    { "log-interval", T_INT, OFF(log_interval), 1, NULL, 0, "N",
      "progress line every N steps (10)" },
    { "stop-after", T_INT, OFF(stop_after), 0, NULL, 0, "N",
      "end this run after N more steps, with a checkpoint; 0: no limit" },
};
_Static_assert(sizeof SPECS / sizeof SPECS[0] == N_SPECS,
               "N_SPECS (train_options.h) counts SPECS");

static void defaults(train_options *o)
{
    memset(o, 0, sizeof *o);
    o->eval_interval = 250;
    o->eval_windows = 200;
    o->checkpoint_interval = 250;
    o->log_interval = 10;
    o->layers = 4;
    o->d_model = 128;
    o->heads = 4;
    o->d_ff = 512;
    o->context = 128;
    o->activation = TFM_ACTIVATION_GELU;
    o->val_fraction = 0.05;
    o->optimizer = TFM_OPTIMIZER_ADAMW;
    o->lr = 3e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->weight_decay = 0.1;
    o->warmup = 100;
    o->min_lr_factor = 0.1;
    o->clip = 1.0;
    o->mask_prob = 0.15;
    o->batch_size = 32;
    o->grad_accum = 1;
    o->steps = 1500;
    o->seed = 1234;
}

void usage(FILE *out)
{
    fprintf(out,
        "Usage: " PROGRAM " --text FILE --out MODEL [OPTION]...\n"
        "Train a character-level Transformer on a UTF-8 text file.\n\n");
    for (int i = 0; i < N_SPECS; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", SPECS[i].name,
                 SPECS[i].arg ? " " : "", SPECS[i].arg ? SPECS[i].arg : "");
        fprintf(out, "  %-34s %s\n", left, SPECS[i].help);
    }
    fprintf(out,
        "  %-34s %s\n  %-34s %s\n\n", "-h, --help", "show this help and exit",
        "-V, --version", "show the version and exit");
    fprintf(out,
        "Progress (step, loss, learning rate, tokens per second, ETA) and "
        "validation\nbits per character go to stderr.  With --resume the "
        "recipe (the options\nmarked in checkpoints: architecture, data, "
        "optimizer, schedule, batch, seed,\nsteps) comes from the "
        "checkpoint; only --steps may be raised with it, which\nchanges the "
        "schedule from then on.\n"
        "A new run over a checkpoint or a directory that is not empty is "
        "refused\nwithout --resume or --overwrite; only the step files "
        "the program wrote are\nremoved.  Sizes are at most 2147483647; "
        "the text may not hold NUL.\n");
}

/* Sets option s from its text; 0 or 1 (message printed). */
int set_option(train_options *o, const opt_spec *s, const char *v)
{
    char *base = (char *)o;
    char opt[64];
    snprintf(opt, sizeof opt, "--%s", s->name);
    switch (s->type) {
    case T_INT:
        return parse_int64(opt, v, s->min, (int64_t *)(base + s->offset));
    case T_UINT:
        return parse_uint64(opt, v, (uint64_t *)(base + s->offset));
    case T_DOUBLE: {
        double d = 0.0;
        if (parse_double(opt, v, &d))
            return 1;
        if (d < 0)
            return fail("%s: %s must not be negative", opt, v);
        *(double *)(base + s->offset) = d;
        return 0;
    }
    case T_CHOICE:
        for (int c = 0; s->choices[c]; c++)
            if (strcmp(s->choices[c], v) == 0) {
                *(int *)(base + s->offset) = c;
                return 0;
            }
        return fail("%s: '%s' is not one of %s", opt, v, s->arg);
    case T_STRING:
        *(const char **)(base + s->offset) = v;
        return 0;
    case T_FLAG:
        *(int *)(base + s->offset) = 1;
        return 0;
    }
    return 1;
}

/* The option's value as text (what set_option reads back). */
void format_option(const train_options *o, const opt_spec *s,
                          char *buf, size_t size)
{
    const char *base = (const char *)o;
    switch (s->type) {
    case T_INT:
        snprintf(buf, size, "%" PRId64, *(const int64_t *)(base + s->offset));
        break;
    case T_UINT:
        snprintf(buf, size, "%" PRIu64,
                 *(const uint64_t *)(base + s->offset));
        break;
    case T_DOUBLE:
        snprintf(buf, size, "%.17g", *(const double *)(base + s->offset));
        break;
    case T_CHOICE:
        snprintf(buf, size, "%s", s->choices[*(const int *)(base + s->offset)]);
        break;
    default:
        buf[0] = '\0';
    }
}

/* Cross-option checks of the recipe. */
int check_recipe(const train_options *o)
{
    /* Sizes: each at most 2^31 - 1 (a documented limit, --help), and the
     * products the run computes in int64 (tokens per step times steps;
     * steps times micro-batches: the dropout stream's counter) checked
     * for overflow rather than wrapped. */
    const struct { const char *name; int64_t v; } sizes[] = {
        { "--layers", o->layers }, { "--d-model", o->d_model },
        { "--heads", o->heads }, { "--d-ff", o->d_ff },
        { "--context", o->context }, { "--batch-size", o->batch_size },
        { "--grad-accum", o->grad_accum },
        { "--eval-windows", o->eval_windows },
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v > INT32_MAX)
            return fail("%s %" PRId64 " is over the limit of %d", sizes[i].name,
                        sizes[i].v, INT32_MAX);
    int64_t per_step, total, counters;
    if (__builtin_mul_overflow(o->batch_size, o->context, &per_step) ||
        __builtin_mul_overflow(per_step, o->grad_accum, &per_step) ||
        __builtin_mul_overflow(per_step, o->steps, &total) ||
        __builtin_mul_overflow(o->steps, o->grad_accum, &counters))
        return fail("--batch-size %" PRId64 " x --context %" PRId64
                    " x --grad-accum %" PRId64 " x --steps %" PRId64
                    " tokens overflow a 64-bit count", o->batch_size,
                    o->context, o->grad_accum, o->steps);
    if (o->d_model % o->heads != 0)
        return fail("--heads %" PRId64 " does not divide --d-model %" PRId64,
                    o->heads, o->d_model);
    if (o->positions == 2 && (o->d_model / o->heads) % 2 != 0)
        return fail("--positions rope needs an even head width (d-model / "
                    "heads = %" PRId64 ")", o->d_model / o->heads);
    if (!(o->val_fraction > 0 && o->val_fraction < 1))
        return fail("--val-fraction must be between 0 and 1");
    if (o->min_lr_factor > 1)
        return fail("--min-lr-factor must be at most 1");
    if (o->label_smoothing > 1)
        return fail("--label-smoothing must be at most 1");
    if (o->dropout >= 1)
        return fail("--dropout must be below 1");
    if (o->mask_prob <= 0 || o->mask_prob > 1)
        return fail("--mask-prob must be in (0, 1]");
    if (o->beta1 >= 1 || o->beta2 >= 1)
        return fail("--beta1 and --beta2 must be below 1");
    if (o->warmup > o->steps)
        return fail("--warmup %" PRId64 " exceeds --steps %" PRId64,
                    o->warmup, o->steps);
    return 0;
}

/* Returns -1 to go on, else the exit code.  given[i]: SPECS[i] was on the
 * command line. */
int parse_options(int argc, char **argv, train_options *o, int *given)
{
    struct option longs[N_SPECS + 3];
    for (int i = 0; i < N_SPECS; i++)
        longs[i] = (struct option){ SPECS[i].name,
                                    SPECS[i].type == T_FLAG ? no_argument
                                                            : required_argument,
                                    NULL, 256 + i };
    longs[N_SPECS] = (struct option){ "help", no_argument, NULL, 'h' };
    longs[N_SPECS + 1] = (struct option){ "version", no_argument, NULL, 'V' };
    longs[N_SPECS + 2] = (struct option){ NULL, 0, NULL, 0 };
    defaults(o);
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hV", longs, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == 'V') {
            printf(PROGRAM " (libtransformer) %s\n", tfm_version_string());
            return 0;
        }
        if (c == '?' || c == ':') {
            fail("%s '%s' (see --help)", c == ':' ? "missing value for"
                                                  : "unknown option",
                 argv[optind - 1]);
            return 2;
        }
        const int i = c - 256;
        if (set_option(o, &SPECS[i], optarg))
            return 2;
        given[i] = 1;
    }
    if (optind < argc) {
        fail("unexpected argument '%s' (see --help)", argv[optind]);
        return 2;
    }
    if (!o->text || !o->out) {
        fail("--text and --out are required (see --help)");
        return 2;
    }
    if (o->threads > 64) {
        fail("--threads: at most 64");
        return 2;
    }
    return -1;
}
