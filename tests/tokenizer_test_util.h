/* Shared by the tokenizer suites (test_tokenizer_bpe.c,
 * test_tokenizer_wordpiece.c): a temporary directory for the vocabulary
 * files each test writes, loading it, and expected load failures.  Include
 * after <cmocka.h>. */
#ifndef TFM_TESTS_TOKENIZER_TEST_UTIL_H
#define TFM_TESTS_TOKENIZER_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transformer/tokenizer.h"

#define SENTINEL ((tfm_tokenizer *)0x1)

static char dir[256];

/* Makes the directory $TMPDIR/<prefix>XXXXXX; 0 on success (a group
 * setup's return value). */
static inline int make_dir(const char *prefix)
{
    snprintf(dir, sizeof dir, "%s/%sXXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", prefix);
    return mkdtemp(dir) ? 0 : -1;
}

static inline void write_file(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static inline void remove_file(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* The tokenizer of the directory. */
static inline tfm_tokenizer *load(void)
{
    tfm_tokenizer *t = NULL;
    if (tfm_tokenizer_load(dir, &t) != TFM_OK)
        fail_msg("load: %s", tfm_last_error());
    return t;
}

/* Loading path fails with status, a message with keyword, and the output
 * untouched. */
static inline void expect_load_fails(const char *path, tfm_status status,
                              const char *keyword)
{
    tfm_tokenizer *t = SENTINEL;
    assert_int_equal(tfm_tokenizer_load(path, &t), status);
    assert_ptr_equal(t, SENTINEL);
    if (!strstr(tfm_last_error(), keyword))
        fail_msg("error \"%s\" does not mention \"%s\"", tfm_last_error(),
                 keyword);
}

#endif
