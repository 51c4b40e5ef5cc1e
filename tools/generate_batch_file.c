/* transformer-generate's --batch-file reader (generate_batch_file.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PROGRAM "transformer-generate"
#include "cli_args.h"
#include "generate_batch_file.h"

/* The lines of path (without their \n or \r\n): *lines into *text. */
int read_lines(const char *path, char **text, char ***lines,
                      int64_t *n)
{
    size_t len = 0;
    char *buf = read_file(path, &len);
    if (!buf)
        return 1;
    int64_t count = 0;
    for (size_t i = 0; i < len; i++)
        count += buf[i] == '\n';
    count += len > 0 && buf[len - 1] != '\n';
    char **l = malloc((size_t)(count > 0 ? count : 1) * sizeof *l);
    if (!l) {
        free(buf);
        return fail("out of memory");
    }
    /* Lines are C strings from here on: a NUL is refused where it is,
     * not taken for the end of its line. */
    const char *nul = memchr(buf, '\0', len);
    if (nul) {
        int64_t line = 1;
        const char *start = buf;
        for (const char *p = buf; p < nul; p++)
            if (*p == '\n') {
                line++;
                start = p + 1;
            }
        fail("--batch-file '%s': line %lld holds a NUL character (U+0000) "
             "at byte %zu of the file (%zu of the line); prompts cannot hold "
             "NUL", path, (long long)line, (size_t)(nul - buf),
             (size_t)(nul - start));
        free(l);
        free(buf);
        return 1;
    }
    int64_t k = 0;
    for (char *p = buf; p < buf + len;) {
        char *end = memchr(p, '\n', (size_t)(buf + len - p));
        if (!end)
            end = buf + len;
        *end = '\0';
        if (end > p && end[-1] == '\r')
            end[-1] = '\0';
        l[k++] = p;
        p = end + 1;
    }
    *text = buf;
    *lines = l;
    *n = k;
    return 0;
}
