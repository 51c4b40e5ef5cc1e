/* transformer-train's checkpoint directory (tools/train_checkpoint.c): the
 * step files, the pointer checkpoint.safetensors that names them, and
 * pruning of older step files. */
#ifndef TFM_TOOLS_TRAIN_CHECKPOINT_H
#define TFM_TOOLS_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <transformer/transformer.h>

#include "train_options.h"

typedef struct run_state {
    int64_t step;               /* optimizer steps done */
    tfm_rng rng;                /* batches (and mlm masks) */
    int64_t tokens;             /* training tokens seen */
} run_state;

/* Prints "PROGRAM: what: <tfm_last_error()>"; returns 1. */
int lib_fail(const char *what);
/* buf = dir/name; 1 when it does not fit. */
int join(char *buf, size_t size, const char *dir, const char *name);
/* Writes the step files of rs->step into dir, then the pointer, then
 * removes the older step files; 0 or 1 (message printed). */
int save_checkpoint(const train_options *o, const char *dir,
                    const tfm_module *model, const tfm_optimizer *opt,
                    const char *vocab, const run_state *rs);
/* Reads the pointer of dir: the recipe into o (for the options not given
 * on the command line; a given recipe option is an error, --steps may be
 * raised), the run state, and the two file names; 0 or 1 (message
 * printed). */
int read_checkpoint(const char *dir, train_options *o, const int *given,
                    run_state *rs, char *model_path, char *optim_path,
                    size_t size);

#endif
