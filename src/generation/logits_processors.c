/* The logits processors of generation (logits_processors.h). */
#include <math.h>
#include <string.h>

#include "generation/logits_processors.h"

void tfm__repetition_penalty(float *logits, const int32_t *seq, int64_t n,
                             float penalty, unsigned char *seen)
{
    for (int64_t i = 0; i < n; i++) {
        const int32_t id = seq[i];
        if (seen[id])
            continue;   /* HF gathers then scatters: once per token */
        seen[id] = 1;
        const float x = logits[id];
        logits[id] = x > 0.0f ? x / penalty : x * penalty;
    }
    for (int64_t i = 0; i < n; i++)
        seen[seq[i]] = 0;
}

void tfm__no_repeat_ngram(float *logits, const int32_t *seq, int64_t n,
                          int64_t size)
{
    if (size < 1 || n + 1 < size)
        return;
    /* The (size-1)-gram that the next token would complete. */
    const int32_t *tail = seq + n - (size - 1);
    for (int64_t i = 0; i + size <= n; i++)
        if (memcmp(seq + i, tail, (size_t)(size - 1) * sizeof *seq) == 0)
            logits[seq[i + size - 1]] = -INFINITY;
}
