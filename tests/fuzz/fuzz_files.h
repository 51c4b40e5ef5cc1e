/* Shared by the harnesses whose input is several files of one directory
 * (fuzz_hub.c, fuzz_marian.c, fuzz_image.c, fuzz_optimizer.c,
 * fuzz_generation_config.c; and fuzz_batch_file.c, fuzz_checkpoint_pointer.c,
 * whose input is one whole file: files_write): the input split into parts, each part
 * written as a file of a private temporary directory made once per
 * process.  Header-only: each harness is one program.
 *
 * Parts are separated by the two bytes 0xFF 0xFF (as in
 * fuzz_tokenizer_files.c); a missing part is empty, and an empty part
 * stands for an absent file (files_put removes it). */
#ifndef TFM_FUZZ_FILES_H
#define TFM_FUZZ_FILES_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"

static char files_dir_name[256];

/* At exit: the directory's files (written by the harness only), then the
 * directory. */
static void files_remove_dir(void)
{
    DIR *d = opendir(files_dir_name);
    if (d) {
        char path[512];
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                snprintf(path, sizeof path, "%s/%s", files_dir_name,
                         e->d_name) < (int)sizeof path)
                unlink(path);
        closedir(d);
    }
    rmdir(files_dir_name);
}

/* The directory, made on first use ($TMPDIR or /tmp) and kept while the
 * process runs (libFuzzer runs millions of inputs in one process); removed
 * when it exits normally (a crash leaves it, with the crashing files). */
static inline const char *files_dir(void)
{
    if (!files_dir_name[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(files_dir_name, sizeof files_dir_name,
                 "%s/tfm_fuzz_files_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        CHECK(mkdtemp(files_dir_name) != NULL);
        atexit(files_remove_dir);
    }
    return files_dir_name;
}

/* dir/name into path. */
static inline void files_path(char *path, size_t cap, const char *name)
{
    CHECK(snprintf(path, cap, "%s/%s", files_dir(), name) < (int)cap);
}

/* Writes name with the bytes data[0 .. size) (an empty file for size 0)
 * into path (cap bytes). */
static inline void files_write(char *path, size_t cap, const char *name,
                               const uint8_t *data, size_t size)
{
    files_path(path, cap, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, size, f) == size);
    CHECK(fclose(f) == 0);
}

/* Writes name with the bytes data[0 .. size); size 0 removes it. */
static inline void files_put(const char *name, const uint8_t *data, size_t size)
{
    char path[512];
    if (size) {
        files_write(path, sizeof path, name, data, size);
        return;
    }
    files_path(path, sizeof path, name);
    unlink(path);
}

/* The next part of data[*pos ..], up to 0xFF 0xFF or the end; *pos moves
 * past it and its separator. */
static inline const uint8_t *files_part(const uint8_t *data, size_t size,
                                 size_t *pos, size_t *len)
{
    const uint8_t *p = data + *pos;
    size_t i = *pos;
    while (i < size && !(i + 1 < size && data[i] == 0xFF && data[i + 1] == 0xFF))
        i++;
    *len = i - *pos;
    *pos = i < size ? i + 2 : size;
    return p;
}

/* Writes the next n parts of the input as the files names[0 .. n). */
static inline void files_put_parts(const uint8_t *data, size_t size, size_t *pos,
                            const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const uint8_t *p = files_part(data, size, pos, &len);
        files_put(names[i], p, len);
    }
}

#endif /* TFM_FUZZ_FILES_H */
