/* libFuzzer harness: transformer-generate's --batch-file reader
 * (tools/generate_batch_file.c, read_lines).
 *
 * Every input is the file's bytes, written into a private directory (made
 * once per process).  Promises: read_lines returns 0 or 1; it fails
 * exactly when the file holds a NUL byte (issue 44, kind 7: refused, not
 * cut); on success the lines are the file split at '\n' (a final line
 * without one counts; a '\r' before a '\n' is dropped), in order, each
 * inside the text and without '\n', and the text is the file's bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <transformer/transformer.h>

#include "generate_batch_file.h"
#include "fuzz_util.h"
#include "fuzz_files.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    files_write(path, sizeof path, "prompts", data, size);

    char *text = NULL, **lines = NULL;
    int64_t n = -1;
    const int bad = read_lines(path, &text, &lines, &n);
    const int has_nul = size > 0 && memchr(data, 0, size) != NULL;
    CHECK(bad == has_nul);
    if (bad)
        return 0;
    /* the expected lines, from the input */
    int64_t expected = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && data[i] != '\n')
            continue;
        if (i == size && start == size)
            break;   /* no final line after a final '\n' (or empty file) */
        size_t end = i;
        if (i < size && end > start && data[end - 1] == '\r')
            end--;
        if (i == size && end > start && data[end - 1] == '\r')
            end--;   /* the reader drops it too */
        CHECK(expected < n);
        const char *l = lines[expected];
        CHECK(l >= text && l <= text + size);
        CHECK(strlen(l) == end - start);
        CHECK(memcmp(l, data + start, end - start) == 0);
        expected++;
        start = i + 1;
    }
    CHECK(expected == n);
    free(lines);
    free(text);
    return 0;
}
