/* Internal: the cross-entropy of training.h over raw rows, for callers
 * that hold their logits in scratch memory (model_backward.c:
 * tfm_model_loss_backward). */
#ifndef TFM_SRC_LOSS_H
#define TFM_SRC_LOSS_H

#include <stdint.h>

#include "transformer/training.h"

/* tfm_cross_entropy over logits [rows, classes] and targets [rows]
 * (checked as there: every logit finite, every target in range or
 * ignore_index, smoothing in [0, 1], a known reduction), all before
 * anything is written; dlogits (NULL: not wanted; it may be logits
 * itself, which is then overwritten) receives grad_scale times
 * d loss / d logits.  what names the caller in messages. */
tfm_status tfm__cross_entropy(const float *logits, int64_t rows,
                              int64_t classes, const int32_t *targets,
                              int32_t ignore_index, float label_smoothing,
                              tfm_reduction reduction, double grad_scale,
                              float *loss, float *dlogits, const char *what);

#endif
