/* transformer-train's checkpoint directory (train_checkpoint.h). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <transformer/transformer.h>

#define PROGRAM "transformer-train"
#include "cli_args.h"
#include "train_checkpoint.h"

int lib_fail(const char *what)
{
    return fail("%s: %s", what, tfm_last_error());
}

int join(char *buf, size_t size, const char *dir, const char *name)
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

int save_checkpoint(const train_options *o, const char *dir,
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
int read_checkpoint(const char *dir, train_options *o,
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
