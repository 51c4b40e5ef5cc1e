/* transformer-train's options: the run's (files, intervals) and the
 * recipe's (saved in checkpoints, fixed on --resume), one table (SPECS)
 * from which --help, the parser and the checkpoint's recipe.* metadata
 * are made (tools/train_options.c). */
#ifndef TFM_TOOLS_TRAIN_OPTIONS_H
#define TFM_TOOLS_TRAIN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum opt_type { T_INT, T_UINT, T_DOUBLE, T_CHOICE, T_STRING,
                        T_FLAG } opt_type;

typedef struct train_options {
    /* the run */
    const char *text, *out, *checkpoint, *log_file;
    int resume, overwrite;
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


typedef struct opt_spec {
    const char *name;
    opt_type type;
    size_t offset;
    int64_t min;                 /* T_INT */
    const char *const *choices;  /* T_CHOICE */
    int recipe;                  /* saved in checkpoints, fixed on resume */
    const char *arg, *help;
} opt_spec;


/* The options, in --help's order. */
enum { N_SPECS = 40 };
extern const opt_spec SPECS[N_SPECS];

/* --help's text. */
void usage(FILE *out);
/* Sets option s from its text; 0 or 1 (message printed). */
int set_option(train_options *o, const opt_spec *s, const char *v);
/* The option's value as text (what set_option reads back). */
void format_option(const train_options *o, const opt_spec *s, char *buf,
                   size_t size);
/* Cross-option checks of the recipe; 0 or 1 (message printed). */
int check_recipe(const train_options *o);
/* Returns -1 to go on, else the exit code.  given[i]: SPECS[i] was on the
 * command line. */
int parse_options(int argc, char **argv, train_options *o, int *given);

#endif
