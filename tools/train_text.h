/* transformer-train's vocabulary: the text's distinct characters
 * (tools/train_text.c). */
#ifndef TFM_TOOLS_TRAIN_TEXT_H
#define TFM_TOOLS_TRAIN_TEXT_H

#include <stddef.h>

/* The text's distinct characters in code-point order, as UTF-8 (malloc'd);
 * NULL when the text is not valid UTF-8 (message printed, naming path and
 * the byte offset). */
char *vocabulary_of(const char *text, size_t len, const char *path);

#endif
