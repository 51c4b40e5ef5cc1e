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

#include "train_checkpoint.h"
#include "train_options.h"
#include "train_text.h"

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

/* A run without --resume: refused over an existing checkpoint (or a
 * directory that is not empty) unless --overwrite; with it, the old
 * checkpoint's step files are recorded in rs->owned, to be removed once
 * the new run's first checkpoint is in place. */
static int fresh_start(run *r, run_state *rs)
{
    int found = 0;
    int64_t step = 0;
    if (checkpoint_files(r->ckpt_dir, rs, &found, &step))
        return 1;
    if (found && !r->o.overwrite)
        return fail("%s holds a checkpoint (step %" PRId64 "): continue it "
                    "with --resume, or start over it with --overwrite",
                    r->ckpt_dir, step);
    DIR *d = found || r->o.overwrite ? NULL : opendir(r->ckpt_dir);
    int others = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        others += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    if (others)
        return fail("--checkpoint %s is not empty and holds no checkpoint: "
                    "give a new or empty directory, or --overwrite", r->ckpt_dir);
    return 0;
}

/* The model read from a checkpoint is the one its recipe makes: the same
 * architecture, sizes, options and parameter table (names and shapes) as
 * create_model's; 1 with a message otherwise. */
static int check_resumed_model(const train_options *o,
                               const tfm_module *loaded, int64_t vocab_size,
                               const char *path)
{
    tfm_module *ref = NULL;
    if (create_model(o, vocab_size, &ref))
        return 1;
    tfm_model_config a, b;
    tfm_model_options ao, bo;
    tfm_model_options_init(&ao);
    tfm_model_options_init(&bo);
    const char *differs = NULL;
    if (tfm_model_get_config(ref, &a) != TFM_OK ||
        tfm_model_get_options(ref, &ao) != TFM_OK ||
        tfm_model_get_config(loaded, &b) != TFM_OK ||
        tfm_model_get_options(loaded, &bo) != TFM_OK)
        differs = "its configuration cannot be read";
    else if (a.architecture != b.architecture)
        differs = "the architecture (--objective)";
    else if (a.n_layers != b.n_layers)
        differs = "the number of layers (--layers)";
    else if (a.layer.d_model != b.layer.d_model)
        differs = "the width (--d-model)";
    else if (a.layer.n_heads != b.layer.n_heads)
        differs = "the heads (--heads)";
    else if (a.layer.d_ff != b.layer.d_ff)
        differs = "the feed-forward width (--d-ff)";
    else if (a.layer.activation != b.layer.activation)
        differs = "the activation (--activation)";
    else if (a.layer.norm_first != b.layer.norm_first)
        differs = "the norm placement (--norm)";
    else if (a.context_length != b.context_length)
        differs = "the context (--context)";
    else if (a.positional != b.positional ||
             ao.attention.rope != bo.attention.rope ||
             ao.attention.relative != bo.attention.relative)
        differs = "the positions (--positions)";
    else if (a.vocab_size != b.vocab_size)
        differs = "the vocabulary";
    else if (tfm_module_parameter_count(ref) !=
             tfm_module_parameter_count(loaded))
        differs = "the parameters";
    for (int i = 0; !differs && i < tfm_module_parameter_count(ref); i++) {
        const char *name = tfm_module_parameter_name(ref, i);
        int ra, rb;
        int64_t sa[TFM_MAX_RANK], sb[TFM_MAX_RANK];
        if (strcmp(name, tfm_module_parameter_name(loaded, i)) != 0 ||
            tfm_module_parameter_shape(ref, name, &ra, sa) != TFM_OK ||
            tfm_module_parameter_shape(loaded, name, &rb, sb) != TFM_OK ||
            ra != rb || memcmp(sa, sb, (size_t)ra * sizeof *sa) != 0)
            differs = "the parameters";
    }
    tfm_module_free(ref);
    if (differs)
        return fail("--resume: %s is not the model of the checkpoint's "
                    "recipe: %s differ%s", path, differs,
                    differs[strlen(differs) - 1] == 's' ? "" : "s");
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
    if (o->resume && o->overwrite)
        return fail("--resume and --overwrite contradict each other: give "
                    "one of them");
    if (check_aliases(o, r->ckpt_dir) || (!o->resume && fresh_start(r, rs)))
        return 1;
    char model_path[4096], optim_path[4096];
    if (o->resume && read_checkpoint(r->ckpt_dir, o, given, rs, model_path,
                                     optim_path, sizeof model_path))
        return 1;
    if (check_recipe(o))
        return 1;
    if (!(r->text = read_file(o->text, &r->text_len)))
        return 1;
    /* The vocabulary is a C string: a NUL in the text is refused (as the
     * library's readers refuse one), not taken for its end. */
    const char *nul = memchr(r->text, '\0', r->text_len);
    if (nul) {
        int64_t line = 1;
        for (const char *p = r->text; p < nul; p++)
            line += *p == '\n';
        return fail("%s holds a NUL character (U+0000) at byte %zu (line %"
                    PRId64 "); training text cannot hold NUL", o->text,
                    (size_t)(nul - r->text), line);
    }
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
    if (o->resume && check_resumed_model(o, r->model, r->vocab_size,
                                         model_path))
        return 1;
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
    const int64_t B = o->batch_size > EVAL_BATCH ? o->batch_size : EVAL_BATCH;
    const int64_t shape[3] = { B, o->context, r->vocab_size };
    int64_t rows, logits;
    if (__builtin_mul_overflow(B, o->context, &rows) ||
        __builtin_mul_overflow(rows, r->vocab_size, &logits) ||
        (uint64_t)logits > SIZE_MAX / sizeof(float))
        return fail("--batch-size %" PRId64 " x --context %" PRId64 " x %"
                    PRId64 " tokens: the logits do not fit in memory",
                    o->batch_size, o->context, r->vocab_size);
    r->bb.inputs = malloc((size_t)(B * o->context) * sizeof(int32_t));
    r->bb.targets = malloc((size_t)(B * o->context) * sizeof(int32_t));
    if (!r->bb.inputs || !r->bb.targets ||
        tfm_tensor_create(3, shape, &r->bb.logits) != TFM_OK)
        return fail("out of memory for the batch");
    /* Last, once nothing else can fail: a refused start leaves no file
     * behind (an init.safetensors would make the checkpoint directory
     * "not empty" and refuse the next run). */
    if (o->log_file && !(r->log = open_append_regular(o->log_file)))
        return 1;
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
    const int64_t last = o->stop_after > 0 && o->stop_after < o->steps - first
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
