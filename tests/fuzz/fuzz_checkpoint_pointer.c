/* libFuzzer harness: transformer-train's checkpoint pointer
 * (checkpoint.safetensors: metadata only, the step, the run state, the two
 * step files' names, the superseded ones and the recipe), read by
 * tools/train_checkpoint.c as --resume and --overwrite read it.
 *
 * Every input is the pointer file's bytes, written into a private
 * directory (made once per process).  Promises: read_checkpoint and
 * checkpoint_files return 0 or 1 (never crash, never leave the
 * sanitizers anything to report); on success the two paths are the
 * directory joined with step files' names (is_step_name), and every file
 * the run would ever remove (rs.owned) is a step file's name -- never
 * another file of the directory, whatever the pointer says (issue 44,
 * kind 3); the recipe read then passes or fails check_recipe without
 * overflow (kind 9). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <transformer/transformer.h>

#include "train_checkpoint.h"
#include "train_options.h"
#include "fuzz_util.h"
#include "fuzz_files.h"


static void check_owned(const run_state *rs)
{
    CHECK(rs->n_owned >= 0 && rs->n_owned <= MAX_OWNED);
    for (int i = 0; i < rs->n_owned; i++)
        CHECK(is_step_name(rs->owned[i]));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    files_write(path, sizeof path, "checkpoint.safetensors", data, size);
    const char *dir = files_dir();

    train_options o;
    memset(&o, 0, sizeof o);
    o.steps = 1500;
    int given[N_SPECS];
    memset(given, 0, sizeof given);
    run_state rs;
    memset(&rs, 0, sizeof rs);
    char model_path[4096], optim_path[4096];
    const int bad = read_checkpoint(dir, &o, given, &rs, model_path,
                                    optim_path, sizeof model_path);
    CHECK(bad == 0 || bad == 1);
    if (!bad) {
        const size_t n = strlen(dir);
        CHECK(strncmp(model_path, dir, n) == 0 && model_path[n] == '/');
        CHECK(strncmp(optim_path, dir, n) == 0 && optim_path[n] == '/');
        CHECK(is_step_name(model_path + n + 1));
        CHECK(is_step_name(optim_path + n + 1));
        CHECK(rs.step >= 0 && rs.tokens >= 0);
        check_owned(&rs);
        const int r = check_recipe(&o);
        CHECK(r == 0 || r == 1);
    }
    run_state fresh;
    memset(&fresh, 0, sizeof fresh);
    int found = 0;
    int64_t step = -1;
    const int r = checkpoint_files(dir, &fresh, &found, &step);
    CHECK(r == 0 || r == 1);
    CHECK(found == 1);
    if (r == 0)
        CHECK(step >= 0);
    check_owned(&fresh);
    return 0;
}
