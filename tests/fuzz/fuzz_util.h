/* Shared by the libFuzzer harnesses: the CHECK macro, libFuzzer's entry
 * points and their common LLVMFuzzerInitialize.  Each harness is one
 * source file and one program (with libFuzzer, or with regress_main.c), so
 * defining LLVMFuzzerInitialize here gives each program exactly one. */
#ifndef TFM_FUZZ_UTIL_H
#define TFM_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <transformer/transformer.h>

/* A broken promise of the library: report it and abort (libFuzzer keeps
 * the input as a crash). */
#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: broken promise: %s (last error: %s)\n", \
                    __FILE__, __LINE__, #cond, tfm_last_error());          \
            abort();                                                       \
        }                                                                  \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* One thread: inputs are tiny, and a fuzzer wants each run reproducible
 * and its time spent in the code under test.  Called by libFuzzer once,
 * and by regress_main.c. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    tfm_set_num_threads(1);
    return 0;
}

#endif /* TFM_FUZZ_UTIL_H */
