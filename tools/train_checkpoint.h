/* transformer-train's checkpoint directory (tools/train_checkpoint.c): the
 * step files, the pointer checkpoint.safetensors that names them, and
 * pruning of older step files. */
#ifndef TFM_TOOLS_TRAIN_CHECKPOINT_H
#define TFM_TOOLS_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <transformer/transformer.h>

#include "train_options.h"

/* The most step files a checkpoint pointer lists as superseded: the two
 * it replaced and the two those replaced (a kill between writing a
 * pointer and removing what it superseded leaves them listed). */
#define MAX_OWNED 4
/* Room for one step file's name: "step-<at least 8 digits>.<kind>
 * .safetensors". */
#define STEP_NAME_SIZE 64

typedef struct run_state {
    int64_t step;               /* optimizer steps done */
    tfm_rng rng;                /* batches (and mlm masks) */
    int64_t tokens;             /* training tokens seen */
    /* The step files this tool wrote that the next checkpoint supersedes:
     * the ones the pointer in place names, and those it lists as
     * "previous".  Only these are ever removed. */
    char owned[MAX_OWNED][STEP_NAME_SIZE];
    int n_owned;
} run_state;

/* Whether name is a step file's name as save_checkpoint makes them:
 * "step-" + 8 or more digits + ".model.safetensors" or
 * ".optim.safetensors". */
int is_step_name(const char *name);

/* Prints "PROGRAM: what: <tfm_last_error()>"; returns 1. */
int lib_fail(const char *what);
/* buf = dir/name; 1 when it does not fit. */
int join(char *buf, size_t size, const char *dir, const char *name);
/* Writes the step files of rs->step into dir, then the pointer (naming
 * them, and listing rs->owned as "previous"), then removes the step files
 * of rs->owned that are not the new ones, and makes the new ones
 * rs->owned; 0 or 1 (message printed).  Nothing else in dir is ever
 * removed: not a file whose name merely looks like a step file's, not a
 * temporary file of another process. */
int save_checkpoint(const train_options *o, const char *dir,
                    const tfm_module *model, const tfm_optimizer *opt,
                    const char *vocab, run_state *rs);
/* Reads the pointer of dir: the recipe into o (for the options not given
 * on the command line; a given recipe option is an error, --steps may be
 * raised), the run state (rs->owned: the files it names and lists as
 * "previous"), and the two file names; 0 or 1 (message printed).  Every
 * number strict (cli_args.h), every file name a step file's
 * (is_step_name). */
int read_checkpoint(const char *dir, train_options *o, const int *given,
                    run_state *rs, char *model_path, char *optim_path,
                    size_t size);

/* The files of a transformer-train checkpoint in dir, for starting over
 * it (--overwrite): its step files into rs->owned (removed after the new
 * run's first checkpoint).  *found = 1 when dir holds a pointer;
 * *step its step.  0, or 1 with a message when the pointer is not a
 * transformer-train checkpoint's. */
int checkpoint_files(const char *dir, run_state *rs, int *found,
                     int64_t *step);

/* Refuses (1, message printed) output paths that alias an input or each
 * other: --out, --log-file and the files the run writes into the
 * checkpoint directory, against --text (and each other), compared by
 * device and inode when the file exists (symbolic and hard links
 * included), else by the canonical path of their directory and name; and
 * --text, --out, --log-file against the step files in the checkpoint
 * directory, by name and by device and inode (a link to one). */
int check_aliases(const train_options *o, const char *ckpt_dir);

#endif
