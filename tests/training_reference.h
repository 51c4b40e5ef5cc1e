/*
 * The reference file of test_training.c and test_optimizer.c
 * (tools/make_training_fixtures.py): opened once per suite, tensors read
 * by "<case prefix><name>".  Header-only, as test_util.h.
 */
#ifndef TFM_TEST_TRAINING_REFERENCE_H
#define TFM_TEST_TRAINING_REFERENCE_H

#include <stdio.h>

#include <transformer/safetensors.h>

static const char *g_path;      /* argv[1] or the committed file */
static tfm_safetensors *g_file;

static int setup(void **state)
{
    (void)state;
    return tfm_safetensors_open(g_path, &g_file) == TFM_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tfm_safetensors_close(g_file);
    return 0;
}

/* The named tensor (the caller frees it), or NULL when the file has no
 * such name. */
static tfm_tensor *ref(const char *prefix, const char *name)
{
    char key[80];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    tfm_tensor *t = NULL;
    if (tfm_safetensors_read(g_file, key, &t) != TFM_OK)
        return NULL;
    return t;
}

#endif
