/*
 * libtransformer: modules, their parameters and their cost.
 *
 * Every layer and model is a tfm_module: an opaque handle made by a typed
 * constructor (tfm_mha_create, tfm_encoder_layer_create, ...; see
 * attention.h, layers.h, embedding.h) and freed by tfm_module_free.  A
 * typed forward function checks the handle's kind and returns
 * TFM_ERR_WRONG_KIND for a module of another kind.
 *
 * Parameters are named tensors with PyTorch's state_dict names, so that a
 * checkpoint maps onto a module without renaming, e.g. for an encoder layer
 * "self_attn.in_proj_weight" [3*d_model, d_model], "linear1.bias" [d_ff],
 * "norm2.weight" [d_model]; stacks prefix them with "layers.<i>.".  Linear
 * weights use nn.Linear's layout [out_features, in_features]: y = x W^T + b.
 *
 * Sub-modules have PyTorch's names too: an encoder layer's "self_attn"
 * (multi-head attention), "linear1", "linear2" (Linear), "norm1", "norm2"
 * (LayerNorm); tfm_module_child returns them as handles that share the
 * parent's parameters.
 *
 * A new module's linear weights and biases are zero and its LayerNorm
 * scales are one (as in 1.0): load real values with tfm_module_set_parameter
 * or from a file (model.h), or draw PyTorch's default initialisation with
 * tfm_module_reset_parameters.
 *
 * Threads: forward functions only read the module, and each call keeps its
 * scratch memory in the calling thread's own workspace, so any number of
 * threads may run forward passes on one module at once.  Setting parameters
 * while another thread runs a forward pass on the same module is not safe.
 */
#ifndef TRANSFORMER_MODULE_H
#define TRANSFORMER_MODULE_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tfm_module tfm_module;

struct tfm_rng;     /* the seeded generator of model.h */

/* Kinds of module.  Append-only. */
typedef enum tfm_module_kind {
    TFM_MODULE_MHA = 1,             /* multi-head attention (attention.h) */
    TFM_MODULE_LAYER_NORM = 2,      /* LayerNorm (layers.h) */
    TFM_MODULE_FEED_FORWARD = 3,    /* position-wise feed-forward */
    TFM_MODULE_ENCODER_LAYER = 4,   /* self-attention + feed-forward */
    TFM_MODULE_DECODER_LAYER = 5,   /* self-attn + cross-attn + feed-forward */
    TFM_MODULE_CROSS_ATTENTION = 6, /* cross-attention block */
    TFM_MODULE_ENCODER = 7,         /* stack of encoder layers */
    TFM_MODULE_DECODER = 8,         /* stack of decoder layers */
    TFM_MODULE_TRANSFORMER = 9,     /* encoder-decoder (nn.Transformer) */
    TFM_MODULE_EMBEDDING = 10,      /* lookup table (embedding.h) */
    TFM_MODULE_DECODER_ONLY = 11,   /* GPT-style model (model.h) */
    TFM_MODULE_ENCODER_ONLY = 12,   /* BERT-style model (model.h) */
    TFM_MODULE_ENCODER_DECODER = 13, /* sequence-to-sequence model */
    TFM_MODULE_ATTENTION = 14,      /* attention variant (attention.h) */
    TFM_MODULE_LINEAR = 15,         /* nn.Linear (layers.h), since 1.2 */
    TFM_MODULE_PATCH_EMBEDDING = 16, /* ViT's patches (layers.h), since 1.2 */
    TFM_MODULE_KIND_COUNT
} tfm_module_kind;

/* Frees the module and everything it owns.  NULL is a no-op; on a child
 * handle (tfm_module_child) it does nothing.
 *
 * Handles that refer to others, and the order of frees (since 1.2): an
 * optimizer refers to its module (training.h; made on a child handle, to
 * the module the caller owns), a KV cache to its model, a generator to
 * its model, to options->cache and, when it has stop strings, to
 * options->tokenizer (model.h).  Free them in any order, from any
 * threads.  Freeing an owner that such handles still refer to ends the
 * owner's handle for the caller (a later call through it or through a
 * child handle of it is a use after free, as always), but its memory
 * stays until the last of them is freed, as sqlite3_close_v2 leaves a
 * "zombie" connection; it is released exactly once.  Until then the
 * dependents' calls that need the owner refuse with
 * TFM_ERR_INVALID_ARGUMENT, nothing written, and say what was freed:
 *   tfm_optimizer_step, _zero_grad (void: nothing done, message set),
 *     _clip_grad_norm, _set_weight_decay, _get_state, _set_state, _save
 *     and _load: "the module this optimizer refers to has been freed"
 *     (set_lr and get_lr work);
 *   tfm_kv_cache_decode: "the model this KV cache refers to has been
 *     freed" (reset, length and capacity work);
 *   tfm_generator_next: "the model this generator refers to has been
 *     freed", "the tokenizer of its stop strings (options->tokenizer)
 *     has been freed", "the KV cache it uses (options->cache) has been
 *     freed" (stop_reason, count and reused_tokens work). */
TFM_API void tfm_module_free(tfm_module *module);

/* The module's kind, or 0 for NULL. */
TFM_API tfm_module_kind tfm_module_kind_of(const tfm_module *module);

/* Total number of scalar parameters (sum of the element counts of every
 * named parameter), 0 for NULL.  For multi-head attention with bias and
 * kdim = vdim = d_model: 4*d^2 + 4*d. */
TFM_API int64_t tfm_module_num_parameters(const tfm_module *module);

/* Number of named parameter tensors, 0 for NULL. */
TFM_API int tfm_module_parameter_count(const tfm_module *module);

/* Name of parameter `index` (0 .. count-1) in a fixed order, or NULL when
 * out of range.  Owned by the module. */
TFM_API const char *tfm_module_parameter_name(const tfm_module *module,
                                             int index);

/* Shape of the named parameter: *rank and shape[0..*rank-1] (shape must
 * hold TFM_MAX_RANK values).  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_NOT_FOUND (no such name). */
TFM_API tfm_status tfm_module_parameter_shape(const tfm_module *module,
                                              const char *name, int *rank,
                                              int64_t *shape);

/* Copies value into the named parameter.  value must have exactly the
 * parameter's shape and only finite values.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND, TFM_ERR_SHAPE,
 * TFM_ERR_NON_FINITE (the parameter is then unchanged). */
TFM_API tfm_status tfm_module_set_parameter(tfm_module *module,
                                            const char *name,
                                            const tfm_tensor *value);

/* Copies the named parameter into out, which must have its shape.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND, TFM_ERR_SHAPE. */
TFM_API tfm_status tfm_module_get_parameter(const tfm_module *module,
                                            const char *name,
                                            tfm_tensor *out);

/* ---- Sub-modules (since 1.2) ---------------------------------------------
 * A module made of others (a layer of its attention, Linear and LayerNorm
 * parts, a stack of its layers) lists them by PyTorch's module names, in
 * PyTorch's order (named_children):
 *   multi-head attention: "out_proj" (Linear [d_model, d_model])
 *   feed-forward:         "linear1", "linear2" (Linear)
 *   encoder layer:        "self_attn", "linear1", "linear2", "norm1",
 *                         "norm2"
 *   decoder layer:        "self_attn", "multihead_attn", "linear1",
 *                         "linear2", "norm1", "norm2", "norm3"
 *   cross-attention:      "multihead_attn", "norm"
 *   encoder, decoder:     "layers.0" .. "layers.<n-1>", then "norm" when
 *                         the stack has a final LayerNorm
 *   nn.Transformer:       "encoder", "decoder"
 *   models (model.h):     "token_embedding", "position_embedding" (when
 *                         learned), then the stack's children ("layers.<i>",
 *                         "norm") or "transformer.encoder",
 *                         "transformer.decoder"
 *   LayerNorm, Linear, embedding, attention variant: none.
 * (PyTorch's dropout modules have no counterpart: dropout is a
 * probability of the module that holds it, tfm_module_set_dropout.)
 *
 * A child handle is a part of its parent, not a copy: its parameters are
 * the parent's memory (tfm_module_set_parameter(child, "weight", w) changes
 * the parent's forward pass; the parent's "linear1.weight" is the child's
 * "weight"), and the typed forward function of its kind runs it
 * (tfm_mha_forward on "self_attn", tfm_linear_forward on "linear1").
 * Lifetime: the handle is borrowed.  It stays valid exactly as long as the
 * parent and must not be used after tfm_module_free(parent) (nor can
 * that be checked: looking a child up takes no reference; an optimizer
 * made on it does, on the parent, see tfm_module_free);
 * tfm_module_free(child) does nothing.  Looking children up never
 * allocates, and the same name always gives the same handle.  Threads: the
 * rule at the top of this header holds for a parent and its children
 * together (setting a child's parameter during a forward pass of its
 * parent is not safe). */

/* Number of direct sub-modules (0 for NULL or a module without any).
 * Since 1.2. */
TFM_API int tfm_module_child_count(const tfm_module *module);

/* Name of sub-module `index` (0 .. count-1) in PyTorch's order, or NULL
 * when out of range.  Owned by the module.  Since 1.2. */
TFM_API const char *tfm_module_child_name(const tfm_module *module,
                                          int index);

/* *child = the sub-module called name: a direct child's name
 * ("self_attn", "layers.1") or a dotted path through children
 * ("layers.1.self_attn.out_proj", as nn.Module.get_submodule).  The handle
 * is borrowed (see above).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND (no such sub-module;
 * *child unchanged).  Since 1.2. */
TFM_API tfm_status tfm_module_child(tfm_module *module, const char *name,
                                    tfm_module **child);

/* Loads every parameter of the module from a safetensors file (for
 * instance a PyTorch state_dict written by tools/export_safetensors.py):
 * parameter NAME comes from the tensor named prefix + NAME (prefix NULL or
 * "" for none; e.g. "encoder." to load a sub-module's part of a
 * checkpoint), in F32, F16, BF16 or F64, with exactly the parameter's
 * shape and finite values.  strict nonzero: the file may hold no other
 * tensor whose name starts with prefix.  Everything is read and checked
 * before anything is set: on error the module is unchanged.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_IO, TFM_ERR_FORMAT (malformed
 * file; missing, extra or misshapen tensor), TFM_ERR_UNSUPPORTED (integer
 * dtype), TFM_ERR_NON_FINITE, TFM_ERR_OUT_OF_MEMORY.  Since 1.0.0. */
TFM_API tfm_status tfm_module_load_safetensors(tfm_module *module,
                                               const char *path,
                                               const char *prefix,
                                               int strict);

/* Draws every parameter of the module afresh with PyTorch's default
 * initialisation (the reset_parameters of the torch.nn module each
 * parameter belongs to, PyTorch 1.13), from rng (model.h: tfm_rng_seed;
 * the generator advances).  fan_in / fan_out are torch.nn.init's:
 * size(1) and size(0) times the product of the axes after the second.
 *   Multi-head attention (nn.MultiheadAttention._reset_parameters):
 *     "in_proj_weight", "q/k/v_proj_weight": xavier_uniform_,
 *         U(-a, a) with a = sqrt(6 / (fan_in + fan_out))
 *         ([3d, d]: a = sqrt(3 / (2d)));
 *     "in_proj_bias", "out_proj.bias": 0;
 *     "out_proj.weight": nn.Linear's, U(-1/sqrt(d), 1/sqrt(d)).
 *   Linear (TFM_MODULE_LINEAR) and the linear layers ("linear1.*",
 *     "linear2.*", "lm_head.weight"; nn.Linear, kaiming_uniform_(a =
 *     sqrt(5))): weight [out, in] and bias U(-1/sqrt(in), 1/sqrt(in)).
 *   LayerNorm: weight 1, bias 0.
 *   Embeddings (nn.Embedding): N(0, 1).
 *   nn.Transformer (TFM_MODULE_TRANSFORMER, and the "transformer.*" part
 *     of an encoder-decoder model, which is one; its _reset_parameters):
 *     every parameter with more than one axis is xavier_uniform_ instead
 *     (the projections and linear weights); biases and norms as above.
 *   Attention variants (attention.h; no torch.nn counterpart, chosen so):
 *     "score_weight" [H, d_k, d_k], "additive_query" / "additive_key"
 *     [H, d_a, d_k] and "additive_v" [H, d_a] as a per-head nn.Linear,
 *     U(-1/sqrt(n), 1/sqrt(n)) with n the last axis; "temperature" [H]
 *     sqrt(d_k) (the standard scaling); Shaw's "relative_key.weight" /
 *     "relative_value.weight" and T5's "relative_attention_bias.weight"
 *     as nn.Embedding, N(0, 1).
 * A sub-module (tfm_module_child) is reset as a module of its own kind,
 * in the parent's memory: the "out_proj" of multi-head attention as an
 * nn.Linear (bias U(-1/sqrt(d), 1/sqrt(d)), as torch's out_proj.
 * reset_parameters()), the "encoder" of nn.Transformer as an encoder.
 * Stacks draw each layer independently (PyTorch's nn.TransformerEncoder
 * deep-copies one layer, so its layers start equal; the distribution of
 * each is the same).  The values are a deterministic function of the
 * module's kind and shapes and the generator's state: parameters in
 * tfm_module_parameter_name order, elements in row-major order, uniform
 * values a + (b - a) u with u from 53 random bits, normal values from the
 * Box-Muller transform; they are not PyTorch's random stream, and may
 * differ between library versions.  Models loaded from files, and tied
 * embeddings, are redrawn like any other module.
 * Errors: TFM_ERR_NULL_ARGUMENT (module or rng NULL; nothing changed).
 * Since 1.2. */
TFM_API tfm_status tfm_module_reset_parameters(tfm_module *module,
                                               struct tfm_rng *rng);

/* ---- Training mode and gradients (since 1.2) ------------------------------
 * As torch.nn.Module's train() / eval() and Parameter.grad.  The typed
 * backward function of a kind (tfm_linear_backward, ...) takes the
 * forward's inputs again with the gradient of its output, returns the
 * gradients with respect to the inputs and accumulates (adds) those of
 * the parameters into the module's gradient memory, as torch.autograd
 * accumulates into .grad.  What the forward computed is recomputed by the
 * backward, except for the encoder and decoder layers: in training mode
 * their forward keeps its activations in the layer (memory the layer
 * owns, reused by the next training forward, freed by evaluation mode or
 * tfm_module_free), and their backward uses them when given the same
 * inputs with nothing the forward read changed (inputs, masks,
 * parameters, dropout), once: a second backward recomputes.  Results are
 * the same bits whether or not a forward came first.
 * Gradients have each parameter's name, shape and row-major layout; a
 * sub-module's gradients are its parent's memory, exactly as its
 * parameters are ("layers.0.linear1.weight" of a stack is "weight" of
 * tfm_module_child(stack, "layers.0.linear1")).  Parameters shared between
 * names (tied embeddings) share one gradient.
 * The training flag is torch's module.training: in training mode the
 * forward passes apply dropout where the module's probability
 * (tfm_module_set_dropout, default 0) is above 0, and the backward passes
 * differentiate that same forward; in evaluation mode, or with
 * probability 0, a forward pass is the evaluation forward bit for bit.
 * Threads: backward passes that write the same gradients run one at a
 * time; a second thread's call meanwhile fails with TFM_ERR_BUSY and
 * changes nothing.  Forward passes follow the rule at the top of this
 * header; a layer keeps one training forward at a time, and a forward or
 * backward that finds another thread using it neither waits nor keeps (the
 * backward recomputes). */

/* Sets the training flag of the module and of every sub-module (torch's
 * module.train(mode)): training nonzero puts them in training mode, 0 in
 * evaluation mode (module.eval()).  The first call with training nonzero
 * allocates, zeroed, the gradient memory of every parameter of the module
 * (the module owns it; it is kept in evaluation mode and freed with the
 * module); a parent's parameters that are not the module's get theirs when
 * the parent is put in training mode.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_OUT_OF_MEMORY (no gradient
 * memory allocated, the flags unchanged).  Since 1.2. */
TFM_API tfm_status tfm_module_train(tfm_module *module, int training);

/* 1 when the module is in training mode, else 0 (also for NULL).  Since
 * 1.2. */
TFM_API int tfm_module_is_training(const tfm_module *module);

/* Sets every gradient of the module's parameters to zero (torch's
 * module.zero_grad(set_to_none=False)); parameters without gradient memory
 * are skipped.  Backward passes accumulate: call this (or
 * tfm_optimizer_zero_grad) between steps.
 * Errors: TFM_ERR_NULL_ARGUMENT.  Since 1.2. */
TFM_API tfm_status tfm_module_zero_grad(tfm_module *module);

/* ---- Dropout (since 1.2) -------------------------------------------------
 * Srivastava et al. 2014, in torch.nn.Dropout's inverted form: in training
 * mode each element of a dropout site is zeroed with probability p and
 * the others are multiplied by 1 / (1 - p) (computed in float, as torch);
 * in evaluation mode nothing is dropped.  The sites are PyTorch's:
 *   multi-head attention: the attention weights after the softmax
 *     (nn.MultiheadAttention(dropout=p); the weights output of a
 *     training-mode call holds the dropped weights, as torch's);
 *   feed-forward: the hidden activations, linear2(dropout(act(linear1 x)));
 *   encoder / decoder layers: their self-attention's (and cross-
 *     attention's) weights, the feed-forward's hidden activations, and
 *     each residual branch before it is added (nn.TransformerEncoderLayer's
 *     dropout, dropout1, dropout2; the decoder's dropout3), with the
 *     layer's probability;
 *   cross-attention block: its attention's weights and its branch;
 *   stacks and nn.Transformer: their layers';
 *   models (model.h): their layers', and the embeddings (token plus
 *     position, scaled) before the first block (GPT-2's embd_pdrop), with
 *     the model's probability.
 * Masks are counter-based and regenerated, never stored: element i of a
 * site with key K is kept when the top 32 bits of output i + 1 of the
 * SplitMix64 generator seeded with K (tfm_rng) are at least floor(p 2^32).
 * A training-mode call draws its key from the module's stream: key =
 * output offset + 1 of SplitMix64 seeded with the stream's seed, then
 * offset + 1 (tfm_module_set_dropout_state), and every site derives its
 * own from it (docs/TRAINING.md gives the derivation and the element
 * order of each site), so a run is reproducible from (seed, offset).  A
 * public backward call (tfm_encoder_layer_backward, tfm_model_backward,
 * ...) recomputes its forward with the key of the module's latest
 * training-mode forward call, which is therefore the forward it
 * differentiates; tfm_model_loss_backward draws a key of its own. */

/* Sets the dropout probability p of the module and of every sub-module
 * (torch: every nn.Dropout's p, and nn.MultiheadAttention's dropout).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (p outside
 * [0, 1] or NaN; nothing changed).  Since 1.2. */
TFM_API tfm_status tfm_module_set_dropout(tfm_module *module, float p);

/* The module's dropout probability (0 for NULL).  Since 1.2. */
TFM_API float tfm_module_get_dropout(const tfm_module *module);

/* Sets the dropout stream of the module and of every sub-module: the next
 * training-mode call draws key number `offset` of the stream seeded with
 * `seed` (both 0 when a module is made), and a backward without a
 * forward since then draws it too.  tfm_module_get_dropout_state reads
 * the module's own (*offset: how many keys it has drawn), so saving it
 * with a checkpoint and setting it back resumes the same masks.
 * Errors: TFM_ERR_NULL_ARGUMENT.  Since 1.2. */
TFM_API tfm_status tfm_module_set_dropout_state(tfm_module *module,
                                                uint64_t seed,
                                                uint64_t offset);
TFM_API tfm_status tfm_module_get_dropout_state(const tfm_module *module,
                                                uint64_t *seed,
                                                uint64_t *offset);

/* *grad = the gradient memory of the named parameter, zero copy: the
 * parameter's element count (tfm_module_parameter_shape) of floats,
 * row-major, owned by the module and valid until it is freed; a caller may
 * read and write it (gradient clipping, accumulation by hand).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND (no such parameter),
 * TFM_ERR_INVALID_ARGUMENT (the module was never put in training mode:
 * no gradient memory); *grad unchanged.  Since 1.2. */
TFM_API tfm_status tfm_module_grad(tfm_module *module, const char *name,
                                   float **grad);

/* Copies the named parameter's gradient into out, which must have the
 * parameter's shape.
 * Errors: as tfm_module_grad, and TFM_ERR_SHAPE; out unchanged on error.
 * Since 1.2. */
TFM_API tfm_status tfm_module_get_grad(const tfm_module *module,
                                       const char *name, tfm_tensor *out);

/* Overwrites the named parameter's gradient with value (the parameter's
 * shape): gradients reduced by hand, e.g. averaged across the processes
 * of data-parallel training (Python's transformer.distributed).  Tied
 * names share one gradient.  Errors: as tfm_module_get_grad (value for
 * out), TFM_ERR_NON_FINITE (a NaN or infinite value), TFM_ERR_BUSY (a
 * backward pass on another thread is writing the module's gradients); on
 * error the gradient is unchanged.  Since 1.2. */
TFM_API tfm_status tfm_module_set_grad(tfm_module *module, const char *name,
                                       const tfm_tensor *value);

/* *data = the named parameter's memory, zero copy (row-major, its
 * element count of floats, owned by the module and valid until it is
 * freed).  Writing through it skips tfm_module_set_parameter's checks of
 * shape and finiteness.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_NOT_FOUND (*data unchanged).  Since 1.2. */
TFM_API tfm_status tfm_module_parameter_data(tfm_module *module,
                                             const char *name, float **data);

/* Multiply-accumulate count of one forward pass on `batch` sequences of
 * `tgt_len` query positions attending over `src_len` key positions
 * (src_len is ignored by modules without a second input; for an
 * encoder-decoder model src_len is the source length and tgt_len the
 * target length).  Only matrix products are counted; softmax, norms and
 * activations are not.  Formulas, per sequence (d = d_model, L = tgt_len,
 * S = src_len):
 *   multi-head attention: L*d*d + S*kdim*d + S*vdim*d (projections)
 *                         + 2*L*S*d (Q K^T and A V) + L*d*d (output);
 *                         for self-attention 4*d^2*L + 2*L^2*d
 *   feed-forward:         2*L*d*d_ff
 *   LayerNorm, embedding: 0
 *   encoder layer:        self-attention(L, L) + feed-forward(L)
 *   decoder layer:        self-attention(L, L) + cross-attention(L, S)
 *                         + feed-forward(L)
 *   cross-attention:      multi-head attention(L, S)
 *   stacks and models:    sum over their layers
 *   patch embedding:      L*C*P*P*d (L: the patches of one image)
 *   image model (ViT):    its patch embedding (L - 1 patches), its blocks
 *                         (L = context_length positions) and its head on
 *                         the class token's row alone
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (a size < 1),
 * TFM_ERR_OVERFLOW (*macs unchanged). */
TFM_API tfm_status tfm_module_forward_macs(const tfm_module *module,
                                           int64_t batch, int64_t tgt_len,
                                           int64_t src_len, int64_t *macs);

/* Sets how many threads a forward pass uses (n < 1: the number of online
 * processors, the default).  libtransformer parallelises its own work
 * (attention heads and query blocks, rows of products and feed-forward
 * networks) on a pool of this many threads and runs OpenBLAS single-threaded
 * inside them, so the two never oversubscribe the cores: the first forward
 * pass, and this call, set OpenBLAS's process-wide thread count to 1
 * (openblas_set_num_threads(1)).  Results do not depend on the thread count
 * beyond rounding in the order of sums inside OpenBLAS.  Safe to call from
 * any thread at any time: each call (a forward pass, a decoding step, a
 * generation) reads the count once when it starts and runs on that count
 * to its end, so its output is bit for bit the output at that count.
 * Never fails. */
TFM_API void tfm_set_num_threads(int n);

/* The thread count forward passes use (at least 1). */
TFM_API int tfm_get_num_threads(void);

/* Frees the calling thread's scratch workspace.  Forward passes keep their
 * scratch memory in a per-thread workspace that grows to the largest call
 * and is reused by later calls (no new pages are touched once it is warm);
 * it is freed when the thread exits, or earlier by this call.  Never
 * fails. */
TFM_API void tfm_workspace_release(void);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_MODULE_H */
