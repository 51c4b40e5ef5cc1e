/* transformer-train: trains a character-level model on a UTF-8 text file
 * with the library alone.
 *
 *   transformer-train --text FILE --out MODEL [OPTION]...
 *   transformer-train --text FILE --out MODEL --resume [--steps N] ...
 *
 * Objectives: "clm", a decoder-only (GPT-style) model predicting the next
 * character (Radford et al. 2018), or "mlm", an encoder-only model with
 * BERT's masked-language-model objective (Devlin et al. 2019;
 * tfm_masked_lm_inputs: 15 % of positions, 80/10/10; the mask token is
 * one id past the characters).  The recipe is nanoGPT's / llm.c's and
 * tools/train_charlm.py's: windows of context + 1 characters drawn
 * uniformly from the training split, AdamW (betas 0.9, 0.95; no weight
 * decay on parameters of fewer than two axes), linear warm-up then cosine
 * decay to min-lr-factor (tfm_lr_warmup_cosine), clipping by global norm,
 * GPT-2's initialisation (N(0, 0.02), residual projections
 * 0.02 / sqrt(2 n_layers)).
 *
 * The vocabulary is the text's characters in code-point order (id = rank),
 * as kjv_text.vocabulary; the validation split is the last val-fraction of
 * the characters.  Bits per character: the mean cross-entropy (nats) over
 * evaluation windows divided by ln 2, on eval-windows evenly spaced
 * windows (numpy.linspace(0, n - context - 1, windows), truncated), as
 * train_charlm.py's evaluate.
 *
 * Checkpoints (--checkpoint DIR, default MODEL.ckpt): after every
 * checkpoint-interval steps and at the end, the model
 * (step-<N>.model.safetensors, tfm_model_save) and the optimizer state
 * (step-<N>.optim.safetensors, tfm_optimizer_save), then the pointer
 * checkpoint.safetensors (metadata only: the step, both file names, the
 * batch generator's state and the whole recipe).  Each file is written
 * atomically (temporary file, fsync, rename: safetensors.h) and the
 * pointer last, so a kill at any moment leaves the previous pointer and
 * the files it names whole; older step files are removed once the new
 * pointer is in place; init.safetensors there holds the run's initial
 * weights.  --resume reads the pointer and continues the run
 * exactly: the recipe comes from the checkpoint (giving a recipe option
 * again is an error), so N steps in one go equal k steps, a kill, and
 * --resume, bit for bit (at the same thread count: the sums inside
 * OpenBLAS's products depend on it).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <transformer/transformer.h>

#define PROGRAM "transformer-train"
#include "cli_args.h"

#define LN2 0.69314718055994530942
#define IGNORE_INDEX (-100)
#define EVAL_BATCH 50

/* ---- Options ------------------------------------------------------------ */

typedef enum opt_type { T_INT, T_UINT, T_DOUBLE, T_CHOICE, T_STRING,
                        T_FLAG } opt_type;

typedef struct train_options {
    /* the run */
    const char *text, *out, *checkpoint, *log_file;
    int resume;
    int64_t threads, eval_interval, eval_windows, checkpoint_interval,
        log_interval, stop_after;
    /* the recipe (saved in checkpoints) */
    int objective;              /* 0 clm, 1 mlm */
    int64_t layers, d_model, heads, d_ff, context;
    int positions;              /* POSITIONS[] */
    int norm;                   /* 0 pre, 1 post */
    int activation;             /* ACTIVATIONS[] = tfm_activation */
    int init;                   /* 0 gpt2, 1 pytorch */
    double val_fraction;
    int optimizer;              /* OPTIMIZERS[] */
    double lr, beta1, beta2, eps, weight_decay, momentum;
    int64_t warmup;
    double min_lr_factor, clip, label_smoothing, mask_prob, dropout;
    int64_t batch_size, grad_accum, steps;
    uint64_t seed;
} train_options;

static const char *const OBJECTIVES[] = { "clm", "mlm", NULL };
static const char *const POSITIONS[] = { "learned", "sinusoidal", "rope",
                                         "alibi", NULL };
static const char *const NORMS[] = { "pre", "post", NULL };
static const char *const ACTIVATIONS[] = { "relu", "gelu", "gelu_tanh",
                                           "silu", NULL };
static const char *const INITS[] = { "gpt2", "pytorch", NULL };
static const char *const OPTIMIZERS[] = { "sgd", "adam", "adamw", NULL };

typedef struct opt_spec {
    const char *name;
    opt_type type;
    size_t offset;
    int64_t min;                 /* T_INT */
    const char *const *choices;  /* T_CHOICE */
    int recipe;                  /* saved in checkpoints, fixed on resume */
    const char *arg, *help;
} opt_spec;

#define OFF(f) offsetof(train_options, f)

static const opt_spec SPECS[] = {
    { "text", T_STRING, OFF(text), 0, NULL, 0, "FILE",
      "UTF-8 training text (required)" },
    { "out", T_STRING, OFF(out), 0, NULL, 0, "MODEL",
      "model file written at the end (required)" },
    { "checkpoint", T_STRING, OFF(checkpoint), 0, NULL, 0, "DIR",
      "checkpoint directory (default MODEL.ckpt)" },
    { "resume", T_FLAG, OFF(resume), 0, NULL, 0, NULL,
      "continue from the checkpoint in DIR" },
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
#define N_SPECS ((int)(sizeof SPECS / sizeof SPECS[0]))

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

static void usage(FILE *out)
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
        "schedule from then on.\n");
}

/* Sets option s from its text; 0 or 1 (message printed). */
static int set_option(train_options *o, const opt_spec *s, const char *v)
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
static void format_option(const train_options *o, const opt_spec *s,
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
static int check_recipe(const train_options *o)
{
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
static int parse_options(int argc, char **argv, train_options *o, int *given)
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

/* ---- Text and vocabulary ---------------------------------------------- */

/* UTF-8 decoding of one code point at s (n bytes left); returns its length,
 * 0 when invalid (the tokenizer reports where). */
static int utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    const int len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (len == 0 || (size_t)len > n)
        return 0;
    uint32_t v = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

/* The text's distinct characters in code-point order, as UTF-8 (malloc'd);
 * NULL when the text is not valid UTF-8 (message printed).  One pass
 * marks the code points seen in a bitmap of the Unicode range. */
static char *vocabulary_of(const char *text, size_t len, const char *path)
{
    enum { N_CODE_POINTS = 0x110000 };
    uint64_t *seen = calloc(N_CODE_POINTS / 64, sizeof *seen);
    if (!seen) {
        fail("out of memory");
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c = 0;
        const int k = utf8_next((const unsigned char *)text + i, len - i, &c);
        if (k == 0 || c >= N_CODE_POINTS) {
            free(seen);
            fail("%s is not valid UTF-8 (byte %zu)", path, i);
            return NULL;
        }
        if (!(seen[c / 64] >> (c % 64) & 1)) {
            seen[c / 64] |= (uint64_t)1 << (c % 64);
            n++;
        }
        i += (size_t)k;
    }
    char *vocab = malloc(4 * n + 1);
    size_t m = 0;
    for (uint32_t c = 0; vocab && c < N_CODE_POINTS; c++) {
        if (!(seen[c / 64] >> (c % 64) & 1))
            continue;
        if (c < 0x80) {
            vocab[m++] = (char)c;
        } else if (c < 0x800) {
            vocab[m++] = (char)(0xC0 | (c >> 6));
            vocab[m++] = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            vocab[m++] = (char)(0xE0 | (c >> 12));
            vocab[m++] = (char)(0x80 | ((c >> 6) & 0x3F));
            vocab[m++] = (char)(0x80 | (c & 0x3F));
        } else {
            vocab[m++] = (char)(0xF0 | (c >> 18));
            vocab[m++] = (char)(0x80 | ((c >> 12) & 0x3F));
            vocab[m++] = (char)(0x80 | ((c >> 6) & 0x3F));
            vocab[m++] = (char)(0x80 | (c & 0x3F));
        }
    }
    free(seen);
    if (!vocab) {
        fail("out of memory");
        return NULL;
    }
    vocab[m] = '\0';
    return vocab;
}

/* ---- Checkpoints ---------------------------------------------------------- */

typedef struct run_state {
    int64_t step;               /* optimizer steps done */
    tfm_rng rng;                /* batches (and mlm masks) */
    int64_t tokens;             /* training tokens seen */
} run_state;

static int lib_fail(const char *what)
{
    return fail("%s: %s", what, tfm_last_error());
}

static int join(char *buf, size_t size, const char *dir, const char *name)
{
    const int n = snprintf(buf, size, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= size;
}

/* Removes the step files of dir other than keep's, and leftover
 * temporary files of interrupted writes. */
static void prune(const char *dir, int64_t keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char mine[64];
    snprintf(mine, sizeof mine, "step-%08" PRId64 ".", keep);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const int step_file = strncmp(e->d_name, "step-", 5) == 0 &&
                              strncmp(e->d_name, mine, strlen(mine)) != 0;
        const int tmp_file = strstr(e->d_name, ".safetensors.tmp.") != NULL;
        char path[4096];
        if ((step_file || tmp_file) &&
            !join(path, sizeof path, dir, e->d_name))
            (void)unlink(path);
    }
    closedir(d);
}

static int save_checkpoint(const train_options *o, const char *dir,
                           const tfm_module *model, const tfm_optimizer *opt,
                           const char *vocab, const run_state *rs)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return fail("cannot create %s: %s", dir, strerror(errno));
    char model_name[64], optim_name[64], path[4096];
    snprintf(model_name, sizeof model_name,
             "step-%08" PRId64 ".model.safetensors", rs->step);
    snprintf(optim_name, sizeof optim_name,
             "step-%08" PRId64 ".optim.safetensors", rs->step);
    const char *keys[] = { "tfm.tokenizer", "tfm.vocab" };
    const char *values[] = { "char", vocab };
    if (join(path, sizeof path, dir, model_name))
        return fail("checkpoint path too long");
    if (tfm_model_save(model, path, 2, keys, values) != TFM_OK)
        return lib_fail("writing the checkpoint's model");
    if (join(path, sizeof path, dir, optim_name))
        return fail("checkpoint path too long");
    if (tfm_optimizer_save(opt, path) != TFM_OK)
        return lib_fail("writing the checkpoint's optimizer state");
    tfm_safetensors_writer *w = NULL;
    if (tfm_safetensors_writer_create(&w) != TFM_OK)
        return lib_fail("writing the checkpoint");
    char num[64];
    tfm_status st = TFM_OK;
#define META(k, v) if (st == TFM_OK) st = tfm_safetensors_writer_set_metadata(w, k, v)
    META("format", "transformer-train checkpoint");
    snprintf(num, sizeof num, "%" PRId64, rs->step);
    META("step", num);
    snprintf(num, sizeof num, "%" PRIu64, rs->rng.state);
    META("rng", num);
    snprintf(num, sizeof num, "%" PRId64, rs->tokens);
    META("tokens", num);
    META("model", model_name);
    META("optimizer", optim_name);
    for (int i = 0; i < N_SPECS; i++) {
        if (!SPECS[i].recipe)
            continue;
        char key[80], value[64];
        snprintf(key, sizeof key, "recipe.%s", SPECS[i].name);
        format_option(o, &SPECS[i], value, sizeof value);
        META(key, value);
    }
#undef META
    if (st == TFM_OK && join(path, sizeof path, dir, "checkpoint.safetensors"))
        st = TFM_ERR_INVALID_ARGUMENT;
    if (st == TFM_OK)
        st = tfm_safetensors_writer_save(w, path);
    tfm_safetensors_writer_free(w);
    if (st != TFM_OK)
        return lib_fail("writing the checkpoint");
    prune(dir, rs->step);
    return 0;
}

/* Reads the pointer of dir: the recipe into o (for the options not given
 * on the command line; a given recipe option is an error, --steps may be
 * raised), the run state, and the two file names. */
static int read_checkpoint(const char *dir, train_options *o,
                           const int *given, run_state *rs,
                           char *model_path, char *optim_path, size_t size)
{
    char path[4096];
    if (join(path, sizeof path, dir, "checkpoint.safetensors"))
        return fail("checkpoint path too long");
    tfm_safetensors *f = NULL;
    if (tfm_safetensors_open(path, &f) != TFM_OK)
        return fail("--resume: no readable checkpoint in %s (%s)", dir,
                    tfm_last_error());
    int bad = 0;
    const char *fmt = tfm_safetensors_metadata(f, "format");
    if (!fmt || strcmp(fmt, "transformer-train checkpoint") != 0)
        bad = fail("--resume: %s is not a transformer-train checkpoint", path);
    for (int i = 0; !bad && i < N_SPECS; i++) {
        if (!SPECS[i].recipe)
            continue;
        char key[80];
        snprintf(key, sizeof key, "recipe.%s", SPECS[i].name);
        const char *v = tfm_safetensors_metadata(f, key);
        if (!v && strcmp(SPECS[i].name, "dropout") == 0)
            continue;   /* checkpoints from before --dropout: 0 */
        if (!v) {
            bad = fail("--resume: the checkpoint lacks \"%s\"", key);
            break;
        }
        if (given[i] && strcmp(SPECS[i].name, "steps") != 0) {
            bad = fail("--%s: fixed by the checkpoint (%s); --resume "
                       "continues the run as it was started", SPECS[i].name,
                       v);
            break;
        }
        if (given[i])
            continue;   /* --steps from the command line */
        bad = set_option(o, &SPECS[i], v);
    }
    const char *step = bad ? NULL : tfm_safetensors_metadata(f, "step");
    const char *rng = bad ? NULL : tfm_safetensors_metadata(f, "rng");
    const char *tokens = bad ? NULL : tfm_safetensors_metadata(f, "tokens");
    const char *mname = bad ? NULL : tfm_safetensors_metadata(f, "model");
    const char *oname = bad ? NULL : tfm_safetensors_metadata(f, "optimizer");
    if (!bad && (!step || !rng || !tokens || !mname || !oname))
        bad = fail("--resume: %s lacks its run state", path);
    if (!bad && (parse_int64("checkpoint step", step, 0, &rs->step) ||
                 parse_uint64("checkpoint rng", rng, &rs->rng.state) ||
                 parse_int64("checkpoint tokens", tokens, 0, &rs->tokens)))
        bad = 1;
    if (!bad && (strchr(mname, '/') || strchr(oname, '/') ||
                 join(model_path, size, dir, mname) ||
                 join(optim_path, size, dir, oname)))
        bad = fail("--resume: bad file names in %s", path);
    tfm_safetensors_close(f);
    if (!bad && rs->step > o->steps)
        bad = fail("--steps %" PRId64 " is below the checkpoint's step %"
                   PRId64, o->steps, rs->step);
    return bad;
}

/* ---- Model ------------------------------------------------------------------- */

/* Box-Muller normal from two 53-bit uniforms. */
static double normal(tfm_rng *rng)
{
    double u1 = (double)(tfm_rng_next(rng) >> 11) * 0x1.0p-53;
    const double u2 = (double)(tfm_rng_next(rng) >> 11) * 0x1.0p-53;
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static int ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* GPT-2's initialisation (train_charlm.py's init_weights): biases 0,
 * LayerNorm weights 1, residual output projections (out_proj, linear2)
 * N(0, 0.02 / sqrt(2 n_layers)), every other weight N(0, 0.02); drawn in
 * parameter order from rng. */
static int init_gpt2(tfm_module *model, int64_t n_layers, tfm_rng *rng)
{
    for (int i = 0; i < tfm_module_parameter_count(model); i++) {
        const char *name = tfm_module_parameter_name(model, i);
        float *data;
        int rank;
        int64_t shape[TFM_MAX_RANK], n = 1;
        if (tfm_module_parameter_data(model, name, &data) != TFM_OK ||
            tfm_module_parameter_shape(model, name, &rank, shape) != TFM_OK)
            return lib_fail("initialisation");
        for (int a = 0; a < rank; a++)
            n *= shape[a];
        if (ends_with(name, "bias") || strstr(name, "norm")) {
            const float v = ends_with(name, "bias") ? 0.0f : 1.0f;
            for (int64_t k = 0; k < n; k++)
                data[k] = v;
            continue;
        }
        const double std = ends_with(name, "out_proj.weight") ||
                                   ends_with(name, "linear2.weight")
                               ? 0.02 / sqrt(2.0 * (double)n_layers)
                               : 0.02;
        for (int64_t k = 0; k < n; k++)
            data[k] = (float)(std * normal(rng));
    }
    return 0;
}

static int create_model(const train_options *o, int64_t vocab_size,
                        tfm_module **out)
{
    tfm_model_config c;
    memset(&c, 0, sizeof c);
    c.architecture = o->objective == 0 ? TFM_ARCH_DECODER_ONLY
                                       : TFM_ARCH_ENCODER_ONLY;
    c.layer = tfm_layer_config_default(o->d_model, o->heads);
    c.layer.d_ff = o->d_ff;
    c.layer.activation = (tfm_activation)o->activation;
    c.layer.norm_first = o->norm == 0;
    c.vocab_size = vocab_size;
    c.n_layers = o->layers;
    c.context_length = o->context;
    c.positional = o->positions == 0   ? TFM_POSITIONAL_LEARNED
                   : o->positions == 1 ? TFM_POSITIONAL_SINUSOIDAL
                                       : TFM_POSITIONAL_NONE;
    c.tied_embeddings = 1;
    tfm_model_options mo;
    tfm_model_options_init(&mo);
    if (o->positions == 2)
        mo.attention.rope = TFM_ROPE_HALF;
    if (o->positions == 3)
        mo.attention.relative = TFM_RELATIVE_ALIBI;
    if (tfm_model_create_ex(&c, &mo, out) != TFM_OK)
        return lib_fail("creating the model");
    return 0;
}

static int create_optimizer(const train_options *o, tfm_module *model,
                            tfm_optimizer **out)
{
    tfm_optimizer_options oo;
    tfm_optimizer_options_init(&oo, (tfm_optimizer_kind)o->optimizer);
    oo.lr = o->lr;
    oo.weight_decay = o->weight_decay;
    if (o->optimizer == TFM_OPTIMIZER_SGD) {
        oo.momentum = o->momentum;
    } else {
        oo.beta1 = o->beta1;
        oo.beta2 = o->beta2;
        oo.eps = o->eps;
    }
    if (tfm_optimizer_create(model, &oo, out) != TFM_OK)
        return lib_fail("creating the optimizer");
    /* No weight decay on biases and LayerNorm weights (fewer than two
     * axes), as nanoGPT and train_charlm.py group them. */
    for (int i = 0; i < tfm_module_parameter_count(model); i++) {
        const char *name = tfm_module_parameter_name(model, i);
        int rank;
        int64_t shape[TFM_MAX_RANK];
        if (tfm_module_parameter_shape(model, name, &rank, shape) != TFM_OK ||
            (rank < 2 &&
             tfm_optimizer_set_weight_decay(*out, name, 0.0) != TFM_OK))
            return lib_fail("creating the optimizer");
    }
    return 0;
}

/* ---- Batches and losses ---------------------------------------------------- */

/* Index in [0, n) from one generator output: floor(r * n / 2^64). */
static int64_t draw_index(tfm_rng *rng, int64_t n)
{
    return (int64_t)(((unsigned __int128)tfm_rng_next(rng) * (uint64_t)n) >>
                     64);
}

typedef struct batch_bufs {
    int32_t *inputs, *targets;  /* [B, L] */
    tfm_tensor *logits;         /* the evaluation's */
} batch_bufs;

/* Fills inputs / targets of row b from the window data[start .. start+L]
 * (L + 1 ids). */
static int fill_row(const train_options *o, int64_t vocab_chars,
                    const int32_t *data, int64_t start, int64_t b,
                    batch_bufs *bb, tfm_rng *rng)
{
    const int64_t L = o->context;
    int32_t *in = bb->inputs + b * L, *tg = bb->targets + b * L;
    if (o->objective == 0) {
        memcpy(in, data + start, (size_t)L * sizeof *in);
        memcpy(tg, data + start + 1, (size_t)L * sizeof *tg);
        return 0;
    }
    if (tfm_masked_lm_inputs(data + start, L, (int32_t)(vocab_chars + 1),
                             (int32_t)vocab_chars, (float)o->mask_prob, NULL,
                             0, IGNORE_INDEX, rng, in, tg) != TFM_OK)
        return lib_fail("masking the batch");
    return 0;
}

/* Sum of the losses (nats) and count of predicted positions over windows
 * of data evenly spaced as numpy.linspace(0, n - L - 1, windows). */
static int evaluate(const train_options *o, tfm_module *model,
                    int64_t vocab_chars, const int32_t *data, int64_t n,
                    batch_bufs *bb, double *bpc)
{
    const int64_t L = o->context, W = o->eval_windows;
    tfm_rng mask_rng;
    tfm_rng_seed(&mask_rng, o->seed ^ 0xE7A1u);   /* the same masks each time */
    double total = 0.0;
    int64_t count = 0;
    for (int64_t w0 = 0; w0 < W; w0 += EVAL_BATCH) {
        const int64_t B = W - w0 < EVAL_BATCH ? W - w0 : EVAL_BATCH;
        for (int64_t b = 0; b < B; b++) {
            const int64_t i = w0 + b;
            const int64_t start =
                W == 1 ? 0
                       : (int64_t)((double)i * (double)(n - L - 1) /
                                   (double)(W - 1));
            if (fill_row(o, vocab_chars, data, start, b, bb, &mask_rng))
                return 1;
        }
        const int64_t shape[3] = { B, L, tfm_tensor_dim(bb->logits, 2) };
        tfm_tensor *logits = NULL;
        if (tfm_tensor_wrap(3, shape, tfm_tensor_data(bb->logits), &logits) !=
                TFM_OK ||
            tfm_model_logits(model, bb->inputs, B, L, logits) != TFM_OK) {
            tfm_tensor_free(logits);
            return lib_fail("evaluation");
        }
        float loss;
        const tfm_status st = tfm_cross_entropy(logits, bb->targets,
                                                IGNORE_INDEX, 0.0f,
                                                TFM_REDUCTION_SUM, &loss, NULL);
        tfm_tensor_free(logits);
        if (st != TFM_OK)
            return lib_fail("evaluation loss");
        total += loss;
        for (int64_t k = 0; k < B * L; k++)
            count += bb->targets[k] != IGNORE_INDEX;
    }
    *bpc = count > 0 ? total / (double)count / LN2 : 0.0;
    return 0;
}

static void format_duration(double s, char *buf, size_t size)
{
    if (!(s >= 0) || s > 1e8)
        snprintf(buf, size, "?");
    else if (s >= 3600)
        snprintf(buf, size, "%dh%02dm", (int)(s / 3600),
                 (int)fmod(s / 60, 60));
    else if (s >= 60)
        snprintf(buf, size, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, size, "%.1fs", s);
}

/* ---- Main ------------------------------------------------------------------------ */

typedef struct run {
    train_options o;
    char *text, *vocab;
    size_t text_len;
    int32_t *ids;
    int64_t n_ids, n_train, vocab_chars, vocab_size;
    tfm_tokenizer *tok;
    tfm_module *model;
    tfm_optimizer *opt;
    batch_bufs bb;
    char ckpt_dir[4096];
    FILE *log;                  /* --log-file, or NULL */
} run;

static void run_free(run *r)
{
    free(r->text);
    free(r->vocab);
    free(r->ids);
    tfm_tokenizer_free(r->tok);
    tfm_optimizer_free(r->opt);
    tfm_module_free(r->model);
    free(r->bb.inputs);
    free(r->bb.targets);
    tfm_tensor_free(r->bb.logits);
    if (r->log)
        fclose(r->log);
}

/* Encodes the text with r->tok into r->ids. */
static int encode_text(run *r, int resumed)
{
    int64_t n = 0;
    tfm_status st = tfm_tokenizer_encode(r->tok, r->text, r->text_len, NULL,
                                         0, &n);
    if (st == TFM_ERR_CAPACITY) {
        r->ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *r->ids);
        if (!r->ids)
            return fail("out of memory for %" PRId64 " characters", n);
        st = tfm_tokenizer_encode(r->tok, r->text, r->text_len, r->ids, n,
                                  &n);
    }
    if (st != TFM_OK) {
        if (resumed)
            return fail("%s has characters that the checkpoint's vocabulary "
                        "lacks: %s", r->o.text, tfm_last_error());
        return lib_fail(r->o.text);
    }
    r->n_ids = n;
    return 0;
}

static int setup(run *r, const int *given, run_state *rs)
{
    train_options *o = &r->o;
    if (o->checkpoint) {
        if (strlen(o->checkpoint) >= sizeof r->ckpt_dir)
            return fail("--checkpoint: path too long");
        strcpy(r->ckpt_dir, o->checkpoint);
    } else if (snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s.ckpt", o->out) >=
               (int)sizeof r->ckpt_dir) {
        return fail("--out: path too long");
    }
    char model_path[4096], optim_path[4096];
    if (o->resume && read_checkpoint(r->ckpt_dir, o, given, rs, model_path,
                                     optim_path, sizeof model_path))
        return 1;
    if (check_recipe(o))
        return 1;
    if (!(r->text = read_file(o->text, &r->text_len)))
        return 1;
    if (o->resume) {
        if (tfm_model_load(model_path, &r->model) != TFM_OK ||
            tfm_tokenizer_load(model_path, &r->tok) != TFM_OK)
            return fail("--resume: cannot read %s: %s", model_path,
                        tfm_last_error());
        if (encode_text(r, 1))
            return 1;
    } else {
        if (!(r->vocab = vocabulary_of(r->text, r->text_len, o->text)))
            return 1;
        if (r->vocab[0] == '\0')
            return fail("%s is empty", o->text);
        if (tfm_tokenizer_create(r->vocab, &r->tok) != TFM_OK)
            return lib_fail("building the vocabulary");
        if (encode_text(r, 0))
            return 1;
    }
    r->vocab_chars = tfm_tokenizer_vocab_size(r->tok);
    if (!r->vocab) {
        /* the checkpoint's vocabulary, for the files written later */
        size_t need = 0;
        int32_t *all = malloc((size_t)r->vocab_chars * sizeof *all);
        for (int64_t i = 0; all && i < r->vocab_chars; i++)
            all[i] = (int32_t)i;
        if (!all)
            return fail("out of memory");
        (void)tfm_tokenizer_decode(r->tok, all, r->vocab_chars, NULL, 0,
                                   &need);
        r->vocab = malloc(need + 1);
        if (!r->vocab ||
            tfm_tokenizer_decode(r->tok, all, r->vocab_chars, r->vocab,
                                 need + 1, &need) != TFM_OK) {
            free(all);
            return fail("reading the checkpoint's vocabulary");
        }
        free(all);
    }
    r->vocab_size = r->vocab_chars + (o->objective == 1);
    const int64_t n_val = (int64_t)llround((double)r->n_ids * o->val_fraction);
    r->n_train = r->n_ids - n_val;
    if (r->n_train < o->context + 2 || n_val < o->context + 2)
        return fail("the text is too short for --context %" PRId64 ": the "
                    "training split has %" PRId64 " characters and the "
                    "validation split %" PRId64 "; each needs at least %"
                    PRId64, o->context, r->n_train, n_val, o->context + 2);
    if (!o->resume) {
        tfm_rng init_rng;
        tfm_rng_seed(&init_rng, o->seed);
        if (create_model(o, r->vocab_size, &r->model))
            return 1;
        if (o->init == 0 ? init_gpt2(r->model, o->layers, &init_rng)
                         : tfm_module_reset_parameters(r->model, &init_rng) !=
                               TFM_OK)
            return o->init == 0 ? 1 : lib_fail("initialisation");
        tfm_rng_seed(&rs->rng, o->seed + 1);
    }
    if (tfm_module_train(r->model, 1) != TFM_OK ||
        tfm_module_set_dropout(r->model, (float)o->dropout) != TFM_OK)
        return lib_fail("training mode");
    if (create_optimizer(o, r->model, &r->opt))
        return 1;
    if (o->resume && tfm_optimizer_load(r->opt, optim_path) != TFM_OK)
        return fail("--resume: cannot read %s: %s", optim_path,
                    tfm_last_error());
    if (!o->resume) {
        /* The run's initial weights, kept beside its checkpoints (to
         * compare trainers from the same start, or to start again). */
        char path[4096];
        const char *keys[] = { "tfm.tokenizer", "tfm.vocab" };
        const char *values[] = { "char", r->vocab };
        if (mkdir(r->ckpt_dir, 0777) != 0 && errno != EEXIST)
            return fail("cannot create %s: %s", r->ckpt_dir, strerror(errno));
        if (join(path, sizeof path, r->ckpt_dir, "init.safetensors"))
            return fail("checkpoint path too long");
        if (tfm_model_save(r->model, path, 2, keys, values) != TFM_OK)
            return lib_fail("writing the initial weights");
    }
    if (o->log_file && !(r->log = fopen(o->log_file, "a")))
        return fail("cannot write %s: %s", o->log_file, strerror(errno));
    const int64_t B = o->batch_size > EVAL_BATCH ? o->batch_size : EVAL_BATCH;
    const int64_t shape[3] = { B, o->context, r->vocab_size };
    r->bb.inputs = malloc((size_t)(B * o->context) * sizeof(int32_t));
    r->bb.targets = malloc((size_t)(B * o->context) * sizeof(int32_t));
    if (!r->bb.inputs || !r->bb.targets ||
        tfm_tensor_create(3, shape, &r->bb.logits) != TFM_OK)
        return fail("out of memory for the batch");
    return 0;
}

/* One micro-batch: forward, loss (its mean), backward; *loss in nats. */
static int micro_batch(run *r, run_state *rs, double *loss)
{
    const train_options *o = &r->o;
    const int64_t B = o->batch_size, L = o->context;
    for (int64_t b = 0; b < B; b++) {
        const int64_t start = draw_index(&rs->rng, r->n_train - L);
        if (fill_row(o, r->vocab_chars, r->ids, start, b, &r->bb, &rs->rng))
            return 1;
    }
    /* One forward for the loss and the backward (tfm_model_loss_backward);
     * the gradient of the mean over the micro-batch, / grad_accum. */
    float l = 0.0f;
    tfm_status st = tfm_model_loss_backward(
        r->model, r->bb.inputs, B, L, r->bb.targets, IGNORE_INDEX,
        (float)o->label_smoothing, TFM_REDUCTION_MEAN,
        1.0f / (float)o->grad_accum, &l);
    if (st == TFM_ERR_NON_FINITE || (st == TFM_OK && !isfinite(l)))
        return fail("the loss is not finite at step %" PRId64 " (%s); "
                    "stopping: the last checkpoint is intact", rs->step + 1,
                    st == TFM_OK ? "NaN or infinite" : tfm_last_error());
    if (st != TFM_OK)
        return lib_fail("forward and backward pass");
    *loss = l;
    return 0;
}

static int train(run *r, run_state *rs)
{
    const train_options *o = &r->o;
    const int64_t first = rs->step;
    const int64_t last = o->stop_after > 0 && first + o->stop_after < o->steps
                             ? first + o->stop_after
                             : o->steps;
    const int64_t tokens_per_step = o->batch_size * o->context * o->grad_accum;
    fprintf(stderr,
            PROGRAM ": %s, %" PRId64 " characters (train %" PRId64
            ", validation %" PRId64 "), vocabulary %" PRId64 ", %" PRId64
            " parameters, %d thread%s; steps %" PRId64 " to %" PRId64
            " of %" PRId64 "\n",
            o->objective == 0 ? "decoder-only (clm)" : "encoder-only (mlm)",
            r->n_ids, r->n_train, r->n_ids - r->n_train, r->vocab_chars,
            tfm_module_num_parameters(r->model), tfm_get_num_threads(),
            tfm_get_num_threads() == 1 ? "" : "s", first + 1, last, o->steps);
    const double t0 = now_seconds();
    double run_loss = 0.0;
    int64_t run_n = 0;
    for (int64_t s = first; s < last; s++) {
        double factor = 1.0;
        if (tfm_lr_warmup_cosine(s, o->warmup, o->steps, o->min_lr_factor,
                                 &factor) != TFM_OK)
            return lib_fail("learning-rate schedule");
        const double lr = o->lr * factor;
        if (tfm_optimizer_set_lr(r->opt, lr) != TFM_OK)
            return lib_fail("learning rate");
        tfm_optimizer_zero_grad(r->opt);
        double loss = 0.0;
        for (int64_t a = 0; a < o->grad_accum; a++) {
            double l = 0.0;
            /* The dropout masks of micro-batch a of step s: key number
             * s * grad_accum + a of the stream seeded with --seed, so a
             * resumed run draws the same ones. */
            if (tfm_module_set_dropout_state(
                    r->model, (uint64_t)o->seed,
                    (uint64_t)(s * o->grad_accum + a)) != TFM_OK)
                return lib_fail("dropout");
            if (micro_batch(r, rs, &l))
                return 1;
            loss += l / (double)o->grad_accum;
        }
        if (o->clip > 0 &&
            tfm_optimizer_clip_grad_norm(r->opt, o->clip, 2.0, NULL) != TFM_OK)
            return fail("step %" PRId64 ": %s; stopping: the last checkpoint "
                        "is intact", s + 1, tfm_last_error());
        if (tfm_optimizer_step(r->opt) != TFM_OK)
            return fail("step %" PRId64 ": %s; stopping: the last checkpoint "
                        "is intact", s + 1, tfm_last_error());
        rs->step = s + 1;
        rs->tokens += tokens_per_step;
        if (r->log) {
            fprintf(r->log, "%" PRId64 ",%.9g,%.9g\n", rs->step, loss, lr);
            fflush(r->log);
        }
        run_loss += loss;
        run_n++;
        const double el = now_seconds() - t0;
        if (rs->step % o->log_interval == 0 || rs->step == last) {
            const double tps = (double)(rs->step - first) *
                               (double)tokens_per_step / el;
            char eta[32];
            format_duration(el / (double)(rs->step - first) *
                                (double)(o->steps - rs->step),
                            eta, sizeof eta);
            fprintf(stderr,
                    "step %" PRId64 "/%" PRId64 "  loss %.6f (%.4f bpc)  lr "
                    "%.3e  %.0f tok/s  ETA %s\n",
                    rs->step, o->steps, run_loss / (double)run_n,
                    run_loss / (double)run_n / LN2, lr, tps, eta);
            run_loss = 0.0;
            run_n = 0;
        }
        const int end = rs->step == last;
        if ((o->eval_interval > 0 && rs->step % o->eval_interval == 0) ||
            (end && rs->step == o->steps)) {
            double bpc;
            if (tfm_module_train(r->model, 0) != TFM_OK ||
                evaluate(o, r->model, r->vocab_chars, r->ids + r->n_train,
                         r->n_ids - r->n_train, &r->bb, &bpc) ||
                tfm_module_train(r->model, 1) != TFM_OK)
                return 1;
            fprintf(stderr, "step %" PRId64 ": validation %.4f bits per %s\n",
                    rs->step, bpc,
                    o->objective == 0 ? "character" : "masked character");
        }
        if ((o->checkpoint_interval > 0 &&
             rs->step % o->checkpoint_interval == 0) || end) {
            if (save_checkpoint(o, r->ckpt_dir, r->model, r->opt, r->vocab,
                                rs))
                return 1;
        }
    }
    const double el = now_seconds() - t0;
    char took[32];
    format_duration(el, took, sizeof took);
    fprintf(stderr,
            PROGRAM ": %" PRId64 " steps in %s (%.0f tok/s); checkpoint "
            "step %" PRId64 " in %s\n",
            rs->step - first, took,
            el > 0 ? (double)(rs->step - first) * (double)tokens_per_step / el
                   : 0.0,
            rs->step, r->ckpt_dir);
    return 0;
}

/* The final model file, with the tokenizer and the losses. */
static int finish(run *r, const run_state *rs)
{
    const train_options *o = &r->o;
    double train_bpc, val_bpc;
    if (tfm_module_train(r->model, 0) != TFM_OK ||
        evaluate(o, r->model, r->vocab_chars, r->ids, r->n_train, &r->bb,
                 &train_bpc) ||
        evaluate(o, r->model, r->vocab_chars, r->ids + r->n_train,
                 r->n_ids - r->n_train, &r->bb, &val_bpc))
        return 1;
    char steps[32], tb[32], vb[32];
    snprintf(steps, sizeof steps, "%" PRId64, rs->step);
    snprintf(tb, sizeof tb, "%.4f", train_bpc);
    snprintf(vb, sizeof vb, "%.4f", val_bpc);
    const char *keys[] = { "tfm.tokenizer", "tfm.vocab", "tfm.train_steps",
                           "tfm.train_loss_bpc", "tfm.val_loss_bpc",
                           "tfm.trained_by" };
    const char *values[] = { "char", r->vocab, steps, tb, vb, PROGRAM };
    if (tfm_model_save(r->model, o->out, 6, keys, values) != TFM_OK)
        return lib_fail(o->out);
    fprintf(stderr,
            PROGRAM ": train %.4f, validation %.4f bits per %s (%" PRId64
            " windows of %" PRId64 "); wrote %s\n",
            train_bpc, val_bpc,
            o->objective == 0 ? "character" : "masked character",
            o->eval_windows, o->context, o->out);
    return 0;
}

int main(int argc, char **argv)
{
    run r;
    memset(&r, 0, sizeof r);
    int given[N_SPECS];
    memset(given, 0, sizeof given);
    const int code = parse_options(argc, argv, &r.o, given);
    if (code >= 0)
        return code;
    if (r.o.threads > 0)
        tfm_set_num_threads((int)r.o.threads);
    run_state rs;
    memset(&rs, 0, sizeof rs);
    int bad = setup(&r, given, &rs);
    if (!bad)
        bad = train(&r, &rs);
    if (!bad && rs.step == r.o.steps)
        bad = finish(&r, &rs);
    run_free(&r);
    return bad ? 1 : 0;
}
