/* Shared by the harnesses whose input is several files of one directory
 * (fuzz_hub.c, fuzz_marian.c, fuzz_image.c, fuzz_optimizer.c,
 * fuzz_generation_config.c): the input split into parts, each part
 * written as a file of a private temporary directory made once per
 * process.  Header-only: each harness is one program.
 *
 * Parts are separated by the two bytes 0xFF 0xFF (as in
 * fuzz_tokenizer_files.c); a missing part is empty, and an empty part
 * stands for an absent file (files_put removes it). */
#ifndef TFM_FUZZ_FILES_H
#define TFM_FUZZ_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"

/* The directory, made on first use ($TMPDIR or /tmp), never removed while
 * the process runs: libFuzzer runs millions of inputs in one process. */
static inline const char *files_dir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/tfm_fuzz_files_XXXXXX",
                 tmp && tmp[0] ? tmp : "/tmp");
        CHECK(mkdtemp(dir) != NULL);
    }
    return dir;
}

/* dir/name into path. */
static inline void files_path(char *path, size_t cap, const char *name)
{
    CHECK(snprintf(path, cap, "%s/%s", files_dir(), name) < (int)cap);
}

/* Writes name with the bytes data[0 .. size); size 0 removes it. */
static inline void files_put(const char *name, const uint8_t *data, size_t size)
{
    char path[512];
    files_path(path, sizeof path, name);
    unlink(path);
    if (!size)
        return;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, size, f) == size);
    CHECK(fclose(f) == 0);
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
