/*
 * libtransformer: losses and the masked-language-model objective.
 * Since 1.2.
 *
 *   float loss;
 *   tfm_tensor *dlogits;                          // the shape of logits
 *   tfm_tensor_create(2, (int64_t[]){ n, n_classes }, &dlogits);
 *   tfm_cross_entropy(logits, targets, TFM_IGNORE_INDEX, 0.1f,
 *                     TFM_REDUCTION_MEAN, &loss, dlogits);
 *   // dlogits is d loss / d logits: pass it to the model's backward
 *
 * Targets are int32 class indices (token ids), one per row of the logits;
 * a target equal to ignore_index contributes nothing (PyTorch's default
 * ignore_index is -100, TFM_IGNORE_INDEX).
 */
#ifndef TRANSFORMER_TRAINING_H
#define TRANSFORMER_TRAINING_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tfm_rng;     /* the seeded generator of model.h */

/* torch.nn.functional.cross_entropy's default ignore_index. */
#define TFM_IGNORE_INDEX (-100)

/* How per-target losses are combined (torch's `reduction`).  Append-only. */
typedef enum tfm_reduction {
    TFM_REDUCTION_MEAN = 0,     /* "mean": the sum over the targets that are
                                 * not ignored, divided by their count */
    TFM_REDUCTION_SUM = 1,      /* "sum" */
    TFM_REDUCTION_COUNT
} tfm_reduction;

/* ---- Cross-entropy ------------------------------------------------------
 * Source: torch.nn.functional.cross_entropy (PyTorch 1.13, class-index
 * targets, no class weights).  For a row x (C logits) with target t that
 * is not ignore_index, with log p = log_softmax(x) and smoothing e:
 *     l = (1 - e) * (-log p[t]) + (e / C) * sum_c (-log p[c])
 * (Szegedy et al. 2016, "Rethinking the Inception Architecture", section
 * 7; the uniform distribution over the C classes).  Rows whose target is
 * ignore_index contribute 0 to both terms, smoothing included.
 * TFM_REDUCTION_MEAN divides the sum of l by the number of rows that are
 * not ignored (torch's mean for class-index targets), TFM_REDUCTION_SUM
 * does not.  When every row is ignored the mean is 0 (torch gives NaN,
 * 0 / 0), and so is the gradient: a batch of padding then changes nothing.
 *
 * logits: rank 2 [N, C] or rank 3 [B, T, C] (the classes on the LAST axis:
 *         a language model's layout; torch wants [N, C] or [B, C, T], so
 *         torch's equivalent of [B, T, C] is logits.view(-1, C)).  The
 *         loss is computed in double precision.
 * targets: N (= B * T) int32 values, each ignore_index or in [0, C).
 * label_smoothing: in [0, 1].
 * *loss: the reduced loss.
 * dlogits: NULL, or a tensor of the logits' shape that receives (is
 *         written, not accumulated into) d loss / d logits:
 *         scale * (softmax(x) - (1 - e) * onehot(t) - e / C) on kept rows,
 *         0 on ignored rows; scale = 1 / (rows kept) for the mean, 1 for
 *         the sum.
 * Errors: TFM_ERR_NULL_ARGUMENT (logits, targets or loss), TFM_ERR_SHAPE
 * (rank not 2 or 3, dlogits of another shape), TFM_ERR_INVALID_ARGUMENT
 * (a target out of range and not ignore_index: the message gives the row;
 * label_smoothing outside [0, 1] or not finite; an unknown reduction),
 * TFM_ERR_NON_FINITE (a NaN or infinite logit, in any row, ignored
 * ones included: the message gives the row).  On error *loss and dlogits are unchanged. */
TFM_API tfm_status tfm_cross_entropy(const tfm_tensor *logits,
                                     const int32_t *targets,
                                     int32_t ignore_index,
                                     float label_smoothing,
                                     tfm_reduction reduction, float *loss,
                                     tfm_tensor *dlogits);

/* The causal language-model loss: cross-entropy of logits [B, T, V]
 * predicting the next token, i.e. logits[b, t] against ids[b, t + 1] for
 * t < T - 1 (Hugging Face's shift: logits[..., :-1, :] against
 * labels[..., 1:]); the last position of every sequence has no target.
 * ids: B * T int32 values (the model's input ids, or labels with
 * ignore_index at padding).  Reductions, smoothing and the gradient as
 * tfm_cross_entropy; dlogits (NULL or [B, T, V]) is 0 at each last
 * position and at ignored targets.
 * Errors: as tfm_cross_entropy; TFM_ERR_SHAPE also when logits are not
 * rank 3. */
TFM_API tfm_status tfm_causal_lm_loss(const tfm_tensor *logits,
                                      const int32_t *ids,
                                      int32_t ignore_index,
                                      float label_smoothing,
                                      tfm_reduction reduction, float *loss,
                                      tfm_tensor *dlogits);

/* ---- BERT's masked-language-model inputs ---------------------------------
 * Source: Devlin et al. 2019 (BERT), section 3.1 and appendix A.1, as
 * Hugging Face's DataCollatorForLanguageModeling applies it: each position
 * is chosen independently with probability mask_prob (BERT: 0.15); a
 * chosen position's target is its id, and its input becomes mask_id with
 * probability 0.8, a uniformly random id in [0, vocab_size) with
 * probability 0.1, and stays as it is with probability 0.1.  Positions not
 * chosen get the target ignore_index and keep their input.  Positions
 * whose id is one of never_mask[0 .. n_never_mask - 1] (e.g. [CLS],
 * [SEP], [PAD]) are never chosen.
 *
 * Draws, in position order, for each position that may be chosen: u1 =
 * tfm_rng_uniform (chosen when u1 < mask_prob); for a chosen one, u2 =
 * tfm_rng_uniform (mask when u2 < 0.8, random when u2 < 0.9, else keep)
 * and, for a random one, one raw 64-bit output r, the id being
 * floor(r * vocab_size / 2^64).  The same seed gives the same result on
 * every machine.
 *
 * ids: n input ids (read only; may equal inputs: done in place).
 * inputs, targets: n int32 each, written.
 * Errors: TFM_ERR_NULL_ARGUMENT (ids, inputs, targets, rng; never_mask
 * when n_never_mask > 0), TFM_ERR_INVALID_ARGUMENT (n < 0, vocab_size < 1,
 * mask_prob outside [0, 1], mask_id outside [0, vocab_size),
 * n_never_mask < 0).  On error nothing is written and rng is unchanged. */
TFM_API tfm_status tfm_masked_lm_inputs(const int32_t *ids, int64_t n,
                                        int32_t vocab_size, int32_t mask_id,
                                        float mask_prob,
                                        const int32_t *never_mask,
                                        int n_never_mask,
                                        int32_t ignore_index,
                                        struct tfm_rng *rng,
                                        int32_t *inputs, int32_t *targets);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_TRAINING_H */
