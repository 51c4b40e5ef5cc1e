/* transformer-generate's --batch-file reader (tools/generate_batch_file.c). */
#ifndef TFM_TOOLS_GENERATE_BATCH_FILE_H
#define TFM_TOOLS_GENERATE_BATCH_FILE_H

#include <stdint.h>

/* The lines of path (without their \n or \r\n): *lines (malloc'd, *n of
 * them) point into *text (malloc'd); free both.  1 with a message printed
 * when the file cannot be read or holds a NUL byte (the line and the
 * byte offset named). */
int read_lines(const char *path, char **text, char ***lines, int64_t *n);

#endif
