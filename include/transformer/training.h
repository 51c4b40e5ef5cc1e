/*
 * libtransformer: losses, the masked-language-model objective, optimizers,
 * gradient clipping and learning-rate schedules.
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
#include "module.h"

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

/* One training step's forward and backward with the cross-entropy loss
 * (Since 1.2), in one forward instead of tfm_model_logits then
 * tfm_model_backward's recomputation (model.h) (llm.c's gpt2_forward with targets,
 * then gpt2_backward): *loss = tfm_cross_entropy(logits of ids, targets,
 * ignore_index, label_smoothing, reduction) and every parameter's
 * gradient += grad_scale * d loss / d parameter, as tfm_model_backward
 * with that gradient of the logits (grad_scale: 1, or 1 / the number of
 * accumulated micro-batches, PyTorch's loss / n before backward()).
 * ids, targets: [batch, seq] int32 (targets each in [0, vocab_size) or
 * ignore_index; a language model's are ids shifted by one, ignore_index
 * at each sequence's last position).  The logits live in scratch memory
 * (batch * seq * vocab_size floats) for the call; the forward is the
 * training forward of tfm_model_backward, whose logits equal
 * tfm_model_logits' within rounding.  Errors: TFM_ERR_NULL_ARGUMENT
 * (model, ids, targets, loss), TFM_ERR_INVALID_ARGUMENT (a grad_scale
 * that is not finite, and tfm_cross_entropy's: a target out of range,
 * label_smoothing outside [0, 1], an unknown reduction), TFM_ERR_NON_FINITE
 * (a logit that is NaN or infinite: no gradient is written), and those of
 * tfm_model_backward.  On error *loss is unchanged and, but for
 * tfm_model_backward's one exception (out of memory inside the blocks'
 * backward), no gradient changed. */
TFM_API tfm_status tfm_model_loss_backward(tfm_module *model,
                                           const int32_t *ids, int64_t batch,
                                           int64_t seq,
                                           const int32_t *targets,
                                           int32_t ignore_index,
                                           float label_smoothing,
                                           tfm_reduction reduction,
                                           float grad_scale, float *loss);

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


/* ---- Optimizers ---------------------------------------------------------
 * Sources: torch.optim.SGD, Adam and AdamW of PyTorch 1.13 (the
 * single-tensor "for" loop, foreach=False), step by step in float32 with
 * the scalars (1 - beta1, lr / bias_correction1, ...) computed in double
 * as Python computes them:
 *   SGD:   d = g + wd p; buf = d at the first step, else
 *          buf = momentum buf + (1 - dampening) d; d = d + momentum buf
 *          (Nesterov) or d = buf (when momentum != 0); p -= lr d
 *   Adam:  g = g + wd p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *          (amsgrad: vmax = max(vmax, v), used for v below)
 *          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *   AdamW: p *= 1 - lr wd (decoupled weight decay, Loshchilov and Hutter
 *          2019), then Adam without the wd term.
 * maximize negates g first.  t counts the steps of each parameter.
 *
 * An optimizer works on a module's parameter table: every parameter of
 * the module and its children, each once (parameters sharing memory are
 * stepped once).  It reads the gradients that backward passes accumulated
 * (module.h: tfm_module_train allocates them; a parameter without
 * gradient storage is skipped, as torch skips p.grad None) and updates
 * the parameters in place.  The optimizer refers to the module (the one
 * the caller owns, when made on a child handle): freed first, the
 * module's memory stays until tfm_optimizer_free, and every call that
 * reads the module (all but set_lr and get_lr) refuses (module.h:
 * tfm_module_free has the rule).
 *
 *   tfm_optimizer_options o;
 *   tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAMW);   // torch defaults
 *   o.lr = 3e-4;
 *   tfm_optimizer *opt;
 *   tfm_optimizer_create(model, &o, &opt);
 *   for (int64_t s = 0; s < steps; s++) {
 *       tfm_optimizer_zero_grad(opt);
 *       ... forward, loss, backward (k times without zeroing: gradient
 *           accumulation; scale each loss by 1/k for a mean) ...
 *       double f, norm;
 *       tfm_lr_warmup_cosine(s, 100, steps, 0.0, &f);        // LambdaLR(s)
 *       tfm_optimizer_set_lr(opt, 3e-4 * f);
 *       tfm_optimizer_clip_grad_norm(opt, 1.0, 2.0, &norm);
 *       tfm_optimizer_step(opt);
 *   }
 *   tfm_optimizer_free(opt);
 *
 * Threads: an optimizer and its module are used by one thread at a time. */
typedef struct tfm_optimizer tfm_optimizer;

/* Append-only. */
typedef enum tfm_optimizer_kind {
    TFM_OPTIMIZER_SGD = 0,
    TFM_OPTIMIZER_ADAM = 1,
    TFM_OPTIMIZER_ADAMW = 2,
    TFM_OPTIMIZER_KIND_COUNT
} tfm_optimizer_kind;

/* Hyperparameters, with torch.optim's names.  Self-sized: the library
 * reads only struct_size bytes and takes the defaults of `kind` for the
 * fields beyond them; new fields are appended. */
typedef struct tfm_optimizer_options {
    size_t struct_size;         /* sizeof(tfm_optimizer_options) */
    tfm_optimizer_kind kind;
    double lr;                  /* >= 0; SGD 1e-3 (torch 1.13 requires
                                 * it; later versions default to 1e-3),
                                 * Adam and AdamW 1e-3 */
    double weight_decay;        /* >= 0; 0, AdamW 1e-2 */
    double momentum;            /* SGD: >= 0, default 0 */
    double dampening;           /* SGD: default 0 */
    int nesterov;               /* SGD: needs momentum > 0 and dampening 0 */
    double beta1, beta2;        /* Adam(W): in [0, 1); 0.9, 0.999 */
    double eps;                 /* Adam(W): >= 0; 1e-8 */
    int amsgrad;                /* Adam(W): Reddi et al. 2018; default 0 */
    int maximize;               /* every kind: default 0 */
} tfm_optimizer_options;

/* PyTorch's defaults for `kind` (above); sets struct_size.  NULL is a
 * no-op; an unknown kind gives SGD's defaults with that kind (refused by
 * tfm_optimizer_create). */
TFM_API void tfm_optimizer_options_init(tfm_optimizer_options *options,
                                        tfm_optimizer_kind kind);

/* Creates an optimizer over module's parameters; its state (SGD's
 * momentum_buffer; Adam's exp_avg, exp_avg_sq, max_exp_avg_sq with
 * amsgrad; the step count) starts at zero, as torch's first step makes it.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (unknown kind,
 * a value out of range as torch checks them, nesterov without momentum or
 * with dampening, struct_size too small to hold `kind`), TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY.  *out is freed with tfm_optimizer_free. */
TFM_API tfm_status tfm_optimizer_create(tfm_module *module,
                                        const tfm_optimizer_options *options,
                                        tfm_optimizer **out);

/* NULL is a no-op.  The module is not freed, unless tfm_module_free was
 * called on it already and this was the last handle referring to it. */
TFM_API void tfm_optimizer_free(tfm_optimizer *optimizer);

/* One update of every parameter that has gradient storage (above).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (no parameter
 * has gradient storage: the module was never put in training mode; the
 * module was freed: "the module this optimizer refers to has been
 * freed"), TFM_ERR_NON_FINITE (a NaN or infinite gradient: the message names the
 * parameter; no parameter and no state is changed). */
TFM_API tfm_status tfm_optimizer_step(tfm_optimizer *optimizer);

/* Sets every gradient of the optimizer's parameters to zero (torch's
 * zero_grad(set_to_none=False)).  Not calling it between backward passes
 * accumulates their gradients.  NULL is a no-op; once the module was
 * freed, nothing is done and the thread's message says so. */
TFM_API void tfm_optimizer_zero_grad(tfm_optimizer *optimizer);

/* The learning rate used by the next step (a scheduler's
 * param_group["lr"]).  set: lr >= 0 and finite, else
 * TFM_ERR_INVALID_ARGUMENT; get of NULL gives 0. */
TFM_API tfm_status tfm_optimizer_set_lr(tfm_optimizer *optimizer, double lr);
TFM_API double tfm_optimizer_get_lr(const tfm_optimizer *optimizer);

/* Gives one parameter (param: its name in the module, e.g.
 * "layers.0.norm1.weight"; a tied parameter's names are one parameter) a
 * weight decay of its own, as a torch.optim parameter group with that
 * weight_decay (e.g. nanoGPT's and GPT-2's no decay on biases and
 * LayerNorm weights).  Parameters start with the options' weight_decay;
 * it keeps its meaning (SGD and Adam: L2 added to the gradient; AdamW:
 * decoupled, p *= 1 - lr * weight_decay).  Not part of the state that
 * tfm_optimizer_save writes (torch keeps it in param_groups, not state):
 * set it again after creating an optimizer to load into.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (weight_decay
 * negative or not finite), TFM_ERR_NOT_FOUND (no such parameter); then
 * nothing changes.  Since 1.2. */
TFM_API tfm_status tfm_optimizer_set_weight_decay(tfm_optimizer *optimizer,
                                                  const char *param,
                                                  double weight_decay);

/* Gradient clipping by global norm, torch.nn.utils.clip_grad_norm_ of
 * PyTorch 1.13: total = the norm_type-norm of all the gradients together
 * (norm_type > 0, or INFINITY for the largest magnitude), computed in
 * double; when max_norm / (total + 1e-6) < 1 every gradient is multiplied
 * by that factor.  *total_norm (may be NULL) receives total.
 * Errors: TFM_ERR_NULL_ARGUMENT (optimizer), TFM_ERR_INVALID_ARGUMENT
 * (max_norm < 0 or NaN, norm_type <= 0 or NaN), TFM_ERR_NON_FINITE (a
 * gradient is NaN or infinite, as clip_grad_norm_(error_if_nonfinite=
 * True): nothing is changed). */
TFM_API tfm_status tfm_optimizer_clip_grad_norm(tfm_optimizer *optimizer,
                                                double max_norm,
                                                double norm_type,
                                                double *total_norm);

/* ---- Optimizer state by name ----------------------------------------------
 * State names (torch's optimizer.state[p] keys): SGD "momentum_buffer"
 * (momentum != 0); Adam and AdamW "exp_avg", "exp_avg_sq",
 * "max_exp_avg_sq" (amsgrad); every kind "step" (a [1] tensor: the
 * parameter's step count, as torch 1.13 keeps it).  param is the
 * parameter's name in the module (e.g. "linear1.weight").  A state of the
 * parameter's shape is read or written whole; out / value must have the
 * parameter's shape ([1] for "step").
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND (no such parameter, or
 * a state this optimizer does not keep), TFM_ERR_SHAPE,
 * TFM_ERR_NON_FINITE (set: a non-finite value), TFM_ERR_INVALID_ARGUMENT
 * (set: a step that is negative or not an integer, or a negative value in
 * "exp_avg_sq" or "max_exp_avg_sq", which are means of squares: since
 * 1.3).  "step" reads back as a float, exact up to 2^24. */
TFM_API tfm_status tfm_optimizer_get_state(const tfm_optimizer *optimizer,
                                           const char *param,
                                           const char *state,
                                           tfm_tensor *out);
TFM_API tfm_status tfm_optimizer_set_state(tfm_optimizer *optimizer,
                                           const char *param,
                                           const char *state,
                                           const tfm_tensor *value);

/* Saves every state to a safetensors file, tensor "<param>.<state>" (e.g.
 * "linear1.weight.exp_avg", "linear1.weight.step"), float32, with metadata
 * "optimizer" ("sgd", "adam", "adamw"), "lr" (%.17g) and, since 1.3,
 * "<param>.step": the exact step count in decimal (the float32 tensor
 * "<param>.step" rounds it past 2^24; it stays for older readers).  Written atomically
 * (safetensors.h: a temporary file unique to the process and call,
 * fsync, rename).  Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_IO,
 * TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_optimizer_save(const tfm_optimizer *optimizer,
                                      const char *path);

/* Loads a file written by tfm_optimizer_save into an optimizer of the same
 * kind over a module with the same parameters: every state and the lr.
 * Everything is checked before anything changes: the file must hold
 * exactly this optimizer's states of exactly the module's parameters (no
 * tensor more, none missing, each float32 of the parameter's shape), every
 * value finite, second moments ("exp_avg_sq", "max_exp_avg_sq") not
 * negative, each step a whole number >= 0 (the exact "<param>.step"
 * metadata when present, else the float tensor: files before 1.3), and
 * "lr" a decimal number >= 0 in the strict syntax of the library's
 * numbers (no hexadecimal, no blanks).  Errors:
 * TFM_ERR_NULL_ARGUMENT, TFM_ERR_IO, TFM_ERR_FORMAT (another optimizer
 * kind, a state missing, extra or of another shape or dtype, a negative
 * second moment, a bad step or lr),
 * TFM_ERR_NON_FINITE, TFM_ERR_UNSUPPORTED, TFM_ERR_OUT_OF_MEMORY; the
 * optimizer is then unchanged. */
TFM_API tfm_status tfm_optimizer_load(tfm_optimizer *optimizer,
                                      const char *path);

/* ---- Learning-rate schedules ------------------------------------------------
 * Multipliers of a base learning rate as torch.optim.lr_scheduler.LambdaLR
 * applies them: lr = base_lr * factor(s), where s counts the scheduler's
 * step() calls (0 before the first optimizer step; torch's last_epoch),
 * so a loop sets lr from factor(s) before optimizer step s (s = 0, 1, ...).
 *
 * "Attention Is All You Need" (Vaswani et al. 2017, section 5.3, with base
 * lr 1): factor = d_model^-0.5 * min(n^-0.5, n * warmup^-1.5) with
 * n = max(s, 1) (the paper counts steps from 1; the Annotated Transformer
 * likewise treats s = 0 as 1).  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_INVALID_ARGUMENT (s < 0, d_model < 1, warmup_steps < 1). */
TFM_API tfm_status tfm_lr_inverse_sqrt_warmup(int64_t s, int64_t d_model,
                                              int64_t warmup_steps,
                                              double *factor);

/* Linear warm-up then cosine decay (Hugging Face's
 * get_cosine_schedule_with_warmup with num_cycles 0.5, floored at
 * min_factor): factor = s / warmup for s < warmup; then with
 * q = (s - warmup) / max(1, total - warmup), clamped to [0, 1],
 * factor = min_factor + (1 - min_factor) * 0.5 * (1 + cos(pi q)).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (s < 0,
 * warmup_steps < 0, total_steps < warmup_steps, min_factor outside
 * [0, 1]). */
TFM_API tfm_status tfm_lr_warmup_cosine(int64_t s, int64_t warmup_steps,
                                        int64_t total_steps,
                                        double min_factor, double *factor);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_TRAINING_H */
