/* transformer-train's checkpoint directory (train_checkpoint.h). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

int is_step_name(const char *name)
{
    if (strncmp(name, "step-", 5) != 0)
        return 0;
    const char *p = name + 5;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    return digits >= 8 && digits <= 19 &&
           (strcmp(p, ".model.safetensors") == 0 ||
            strcmp(p, ".optim.safetensors") == 0);
}

/* Adds name to rs->owned (once; it must be a step file's name). */
static void own(run_state *rs, const char *name)
{
    if (!is_step_name(name) || strlen(name) >= STEP_NAME_SIZE)
        return;
    for (int i = 0; i < rs->n_owned; i++)
        if (strcmp(rs->owned[i], name) == 0)
            return;
    if (rs->n_owned < MAX_OWNED)
        strcpy(rs->owned[rs->n_owned++], name);
}

/* Adds the '/'-separated names of list to rs->owned. */
static void own_list(run_state *rs, const char *list)
{
    while (list && *list) {
        const char *end = strchr(list, '/');
        const size_t n = end ? (size_t)(end - list) : strlen(list);
        char name[STEP_NAME_SIZE];
        if (n < sizeof name) {
            memcpy(name, list, n);
            name[n] = '\0';
            own(rs, name);
        }
        list = end ? end + 1 : NULL;
    }
}

/* Removes the files of rs->owned other than model_name and optim_name,
 * then makes those two rs->owned. */
static void prune(const char *dir, run_state *rs, const char *model_name,
                  const char *optim_name)
{
    for (int i = 0; i < rs->n_owned; i++) {
        char path[4096];
        if (strcmp(rs->owned[i], model_name) != 0 &&
            strcmp(rs->owned[i], optim_name) != 0 &&
            !join(path, sizeof path, dir, rs->owned[i]))
            (void)unlink(path);
    }
    rs->n_owned = 0;
    own(rs, model_name);
    own(rs, optim_name);
}

int save_checkpoint(const train_options *o, const char *dir,
                    const tfm_module *model, const tfm_optimizer *opt,
                    const char *vocab, run_state *rs)
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
    /* what this pointer supersedes, so that a kill before the removal
     * below leaves them listed for the next run to remove */
    char previous[MAX_OWNED * STEP_NAME_SIZE] = "";
    for (int i = 0; i < rs->n_owned; i++)
        if (strcmp(rs->owned[i], model_name) != 0 &&
            strcmp(rs->owned[i], optim_name) != 0) {
            if (previous[0])
                strcat(previous, "/");
            strcat(previous, rs->owned[i]);
        }
    if (previous[0])
        META("previous", previous);
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
    prune(dir, rs, model_name, optim_name);
    return 0;
}

/* Reads the pointer of dir: the recipe into o (for the options not given
 * on the command line; a given recipe option is an error, --steps may be
 * raised), the run state, and the two file names. */
int read_checkpoint(const char *dir, train_options *o, const int *given,
                    run_state *rs, char *model_path, char *optim_path,
                    size_t size)
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
    if (!bad && (!is_step_name(mname) || !is_step_name(oname) ||
                 strstr(mname, ".model.") == NULL ||
                 strstr(oname, ".optim.") == NULL ||
                 join(model_path, size, dir, mname) ||
                 join(optim_path, size, dir, oname)))
        bad = fail("--resume: bad file names in %s (not step files)", path);
    if (!bad) {
        rs->n_owned = 0;
        own(rs, mname);
        own(rs, oname);
        own_list(rs, tfm_safetensors_metadata(f, "previous"));
    }
    tfm_safetensors_close(f);
    if (!bad && rs->step > o->steps)
        bad = fail("--steps %" PRId64 " is below the checkpoint's step %"
                   PRId64, o->steps, rs->step);
    return bad;
}

int checkpoint_files(const char *dir, run_state *rs, int *found,
                     int64_t *step)
{
    char path[4096];
    *found = 0;
    if (join(path, sizeof path, dir, "checkpoint.safetensors"))
        return fail("checkpoint path too long");
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return 0;
    *found = 1;
    tfm_safetensors *f = NULL;
    if (tfm_safetensors_open(path, &f) != TFM_OK)
        return fail("%s is not a transformer-train checkpoint (%s); remove "
                    "it yourself if it is to go", path, tfm_last_error());
    const char *fmt = tfm_safetensors_metadata(f, "format");
    const char *st = tfm_safetensors_metadata(f, "step");
    int bad = 0;
    if (!fmt || strcmp(fmt, "transformer-train checkpoint") != 0 || !st ||
        parse_int64("checkpoint step", st, 0, step))
        bad = fail("%s is not a transformer-train checkpoint; remove it "
                   "yourself if it is to go", path);
    if (!bad) {
        own(rs, tfm_safetensors_metadata(f, "model") ?
                    tfm_safetensors_metadata(f, "model") : "");
        own(rs, tfm_safetensors_metadata(f, "optimizer") ?
                    tfm_safetensors_metadata(f, "optimizer") : "");
        own_list(rs, tfm_safetensors_metadata(f, "previous"));
    }
    tfm_safetensors_close(f);
    return bad;
}

/* ---- Outputs that alias inputs ---------------------------------------- */

/* A file's identity: its device and inode when it exists, else the
 * canonical path of its directory joined with its name. */
typedef struct file_id {
    int exists;
    dev_t dev;
    ino_t ino;
    char path[4096];
} file_id;

static void identify(const char *path, file_id *id)
{
    memset(id, 0, sizeof *id);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        id->exists = 1;
        id->dev = sb.st_dev;
        id->ino = sb.st_ino;
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *name = slash ? slash + 1 : path;
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    char *real = realpath(dir, NULL);
    snprintf(id->path, sizeof id->path, "%s/%s", real ? real : dir, name);
    free(real);
}

static int same_file(const file_id *a, const file_id *b)
{
    if (a->exists != b->exists)
        return 0;
    return a->exists ? a->dev == b->dev && a->ino == b->ino
                     : strcmp(a->path, b->path) == 0;
}

int check_aliases(const train_options *o, const char *ckpt_dir)
{
    enum { N_PATHS = 5 };
    char ckpt_pointer[4096], ckpt_init[4096];
    if (join(ckpt_pointer, sizeof ckpt_pointer, ckpt_dir,
             "checkpoint.safetensors") ||
        join(ckpt_init, sizeof ckpt_init, ckpt_dir, "init.safetensors"))
        return fail("--checkpoint: path too long");
    /* inputs first, then outputs */
    const char *paths[N_PATHS] = { o->text, o->out, o->log_file,
                                   ckpt_pointer, ckpt_init };
    const char *what[N_PATHS] = { "--text", "--out", "--log-file",
                                  "the checkpoint's pointer",
                                  "the checkpoint's initial weights" };
    file_id *ids = malloc(N_PATHS * sizeof *ids);
    if (!ids)
        return fail("out of memory");
    for (int i = 0; i < N_PATHS; i++)
        if (paths[i])
            identify(paths[i], &ids[i]);
    int bad = 0;
    /* --out is replaced by a rename at the end of the run: refused now
     * when it names what a rename cannot or should not replace (a
     * directory, a FIFO, a device), not after the whole run */
    struct stat out_sb;
    if (o->out && stat(o->out, &out_sb) == 0 && !S_ISREG(out_sb.st_mode))
        bad = fail("cannot write --out %s: it is %s, not a regular file",
                   o->out, file_kind(out_sb.st_mode));
    for (int i = 0; i < N_PATHS && !bad; i++)
        for (int j = i + 1; j < N_PATHS && !bad; j++)
            if (paths[i] && paths[j] && same_file(&ids[i], &ids[j]))
                bad = fail("%s (%s) and %s (%s) are the same file: %s",
                           what[i], paths[i], what[j], paths[j],
                           i == 0 ? "the run would overwrite its training "
                                    "text"
                                  : "one output would overwrite the other");
    /* an input or output among the step files written in the checkpoint
     * directory */
    struct stat dir_sb;
    for (int i = 0; i < 3 && !bad; i++) {
        if (!paths[i] || stat(ckpt_dir, &dir_sb) != 0)
            continue;
        char copy[4096];
        char *real = realpath(paths[i], NULL);   /* links followed */
        snprintf(copy, sizeof copy, "%s", real ? real : paths[i]);
        free(real);
        char *slash = strrchr(copy, '/');
        const char *name = slash ? slash + 1 : copy;
        if (slash == copy)
            copy[1] = '\0';
        else if (slash)
            *slash = '\0';
        else
            strcpy(copy, ".");
        struct stat sb;
        if (is_step_name(name) && stat(copy, &sb) == 0 &&
            sb.st_dev == dir_sb.st_dev && sb.st_ino == dir_sb.st_ino)
            bad = fail("%s (%s) is among the checkpoint's step files in %s",
                       what[i], paths[i], ckpt_dir);
    }
    /* an input or output that is a step file under another name (a hard
     * link, or a symbolic one: stat follows it): --log-file appended into
     * the model file the pointer names */
    DIR *d = bad ? NULL : opendir(ckpt_dir);
    for (struct dirent *e; d && !bad && (e = readdir(d));) {
        char step[4096];
        struct stat sb;
        if (!is_step_name(e->d_name) ||
            join(step, sizeof step, ckpt_dir, e->d_name) ||
            stat(step, &sb) != 0)
            continue;
        for (int i = 0; i < 3 && !bad; i++)
            if (paths[i] && ids[i].exists && ids[i].dev == sb.st_dev &&
                ids[i].ino == sb.st_ino)
                bad = fail("%s (%s) is the checkpoint's step file %s (a "
                           "link to it)", what[i], paths[i], step);
    }
    if (d)
        closedir(d);
    free(ids);
    return bad;
}
