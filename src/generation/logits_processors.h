/* Internal: the logits processors of generation (model.h, "Generation
 * with stop conditions"), each as Hugging Face transformers defines it in
 * generation/logits_process.py.  They work in place on one row of vocab
 * logits given the sequence so far (prompt and generated tokens). */
#ifndef TFM_SRC_LOGITS_PROCESSORS_H
#define TFM_SRC_LOGITS_PROCESSORS_H

#include <stdint.h>

/* CTRL's repetition penalty (Keskar et al. 2019, sec. 4.1;
 * RepetitionPenaltyLogitsProcessor): for each distinct id of seq[n],
 * x = x > 0 ? x / penalty : x * penalty.  seen[vocab] is scratch, all zero
 * on entry and on return.  Ids already checked. */
void tfm__repetition_penalty(float *logits, const int32_t *seq, int64_t n,
                             float penalty, unsigned char *seen);

/* NoRepeatNGramLogitsProcessor: with size s, every token t such that the
 * last s-1 ids of seq[n] followed by t occur as an s-gram in seq gets
 * -inf.  Nothing when n + 1 < s or s < 1. */
void tfm__no_repeat_ngram(float *logits, const int32_t *seq, int64_t n,
                          int64_t size);

#endif
