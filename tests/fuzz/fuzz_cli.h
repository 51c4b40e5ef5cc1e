/* Shared by the harnesses of the CLIs' readers (fuzz_image.c,
 * fuzz_generation_config.c): tools/cli_args.h and tools/json_file.h
 * included with their messages (fail() and the notes, printed to stderr
 * by the CLIs) sent to /dev/null unless TFM_FUZZ_VERBOSE is set, so that
 * a fuzzing log holds the findings only.  Include it before the tools'
 * other headers, which then print to the same place; stderr is restored
 * by fuzz_cli_end.h after them (CHECK's reports must reach the log). */
#ifndef TFM_FUZZ_CLI_H
#define TFM_FUZZ_CLI_H

#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"

/* stderr of the CLI helpers: /dev/null, or stderr itself when verbose. */
static FILE *fuzz_cli_stderr(void)
{
    static FILE *quiet;
    if (getenv("TFM_FUZZ_VERBOSE"))
        return stderr;
    if (!quiet)
        quiet = fopen("/dev/null", "w");
    return quiet ? quiet : stderr;
}

#define PROGRAM "fuzz"
#undef stderr
#define stderr fuzz_cli_stderr()
#include "cli_args.h"
#include "json_file.h"

#endif /* TFM_FUZZ_CLI_H */
