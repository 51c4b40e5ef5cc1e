/* Internal: whole models (model.h), shared by the model's files
 * (model_create.c, model_forward.c, model_backward.c, model_image.c), its
 * file format, the KV cache and generation. */
#ifndef TFM_SRC_MODEL_IMPL_H
#define TFM_SRC_MODEL_IMPL_H

#include "nn/embedding_impl.h"
#include "nn/layer_norm.h"
#include "blocks/stack.h"
#include "transformer/model.h"

typedef struct tfm__model {
    tfm_module base;
    tfm_model_config config;
    tfm_model_options options;          /* read (tfm__model_options_read):
                                         * full size, base resolved */
    tfm__embedding *token_embedding;    /* [vocab_size, d_model] */
    tfm__embedding *position_embedding; /* learned positions or NULL */
    tfm__stack *stack;                  /* decoder-/encoder-only blocks,
                                         * with the final LayerNorm */
    tfm__stack *encoder, *decoder;      /* encoder-decoder only */
    float *lm_head;                     /* [vocab_size, d_model] */
    int bias;                           /* 0: no biases in the blocks
                                         * (tfm_model_create_v2) */
    int rms_norm, gated;                /* tfm_layer_options' */
    /* BERT's parts (tfm_layer_options' model members), NULL when absent: */
    tfm__embedding *token_type_embedding; /* [type_vocab_size, d_model] */
    tfm__layer_norm *embedding_norm;    /* over the summed embeddings */
    float *head_transform;              /* [d_model, d_model] */
    float *head_transform_bias;         /* [d_model] */
    tfm__layer_norm *head_norm;         /* after head_transform's act */
    float *lm_head_bias;                /* [vocab_size] */
    int final_norm;                     /* 0: the stack has no "norm." */
    /* ViT's parts (tfm_layer_options' patch_size > 0), NULL when absent;
     * an image model has no token_embedding: */
    struct tfm__patch_embedding *patch_embedding; /* [d, C, P, P] */
    float *cls_token;                   /* [1, 1, d_model] */
} tfm__model;

/* Checks that m is a model; `kinds` is a bit set of 1 << architecture. */
tfm_status tfm__model_check(const tfm_module *m, unsigned kinds,
                            const char *what);

/* tfm__model_check(m, kinds, "model"), then that the call's pointer
 * argument `arg` (an output or options struct the caller owns; only
 * compared with NULL) is given: TFM_ERR_NULL_ARGUMENT "<arg_name> is NULL"
 * when it is not.  The model's errors come first. */
tfm_status tfm__model_check_with(const tfm_module *m, unsigned kinds,
                                 const void *arg, const char *arg_name);

/* Copies pub (NULL = the defaults) into *out, reading only
 * pub->struct_size bytes (defaults for the rest), with both struct sizes
 * set to the full ones and a positional_base of 0 resolved to 10000.
 * Fails with TFM_ERR_INVALID_ARGUMENT when struct_size does not cover
 * struct_size and positional_base (message set). */
tfm_status tfm__model_options_read(const tfm_model_options *pub,
                                   tfm_model_options *out);

/* Validates a model configuration with read options (message set): the
 * architecture, sizes, positional encoding and base, and the attention
 * variant for the layers' n_heads and d_k (plain attention only for
 * encoder-decoder models: TFM_ERR_UNSUPPORTED). */
tfm_status tfm__model_config_check(const tfm_model_config *c,
                                   const tfm_model_options *o);

/* Key/value columns per position of a decoder-only or encoder-only
 * model's self-attention: n_kv_heads * d_k (d_model without GQA/MQA).
 * c and o already checked. */
int64_t tfm__model_kv_dim(const tfm_model_config *c,
                          const tfm_model_options *o);

/* Checks a generation call's token budget (generate.c, shared with
 * beam_search.c): max_new_tokens in lowest_max .. TFM_MAX_NEW_TOKENS
 * (generation allows 0, beam search 1) and min_new_tokens >= 0.
 * TFM_ERR_INVALID_ARGUMENT with the message set, else TFM_OK. */
tfm_status tfm__check_new_tokens(int64_t max_new_tokens,
                                 int64_t min_new_tokens, int64_t lowest_max);

/* x [B, L, d] = embeddings of ids [B, L] plus positions offset ..
 * offset+L-1 (ids already checked), plus token type 0's row and through
 * the embedding norm when the model has them. */
void tfm__model_embed(const tfm__model *m, const int32_t *ids, int64_t B,
                      int64_t L, int64_t offset, float *x);

/* Checks n ids against the vocabulary (message set). */
tfm_status tfm__model_check_ids(const tfm__model *m, const int32_t *ids,
                                int64_t n, const char *what);

/* logits [rows, vocab] = h [rows, d] lm_head^T (+ lm_head_bias), after
 * the head transform when the model has one (its scratch [rows, d] from
 * the workspace: TFM_ERR_OUT_OF_MEMORY with the message set, logits
 * untouched). */
tfm_status tfm__model_head(const tfm__model *m, const float *h, int64_t rows,
                           float *logits);

/* ---- The model's own files' shared parts: model_forward.c defines them
 * for model_backward.c and model_image.c (and model_backward.c's
 * tfm__model_check_grad_logits and tfm__model_head_backward for
 * model_forward.c and model_image.c).  A tfm__model argument is a
 * checked model; arrays are the caller's, row-major, read or written as
 * said; nothing here allocates. */

/* x [B, L, d] <- tfm__model_embed before the embedding norm: the summed
 * token, position (offset .. offset+L-1) and token-type embeddings of ids
 * [B, L] (checked), with token types `types` [B, L] (checked), NULL: type
 * 0 everywhere. */
void tfm__model_embed_sum(const tfm__model *m, const int32_t *ids,
                          const int32_t *types, int64_t B, int64_t L,
                          int64_t offset, float *x);

/* The head transform's pre-activation t [rows, d] = h [rows, d] W^T + b
 * (m has a head transform). */
void tfm__model_head_transform_linear(const tfm__model *m, const float *h,
                                      int64_t rows, float *t);

/* logits [rows, V] = h [rows, d] lm_head^T (+ lm_head_bias): the
 * vocabulary projection of the (transformed) hidden states. */
void tfm__model_head_project(const tfm__model *m, const float *h, int64_t rows,
                             float *logits);

/* batch and seq (named `what` in the message) within 1 .. context_length:
 * TFM_ERR_INVALID_ARGUMENT below 1, TFM_ERR_CAPACITY above (message set). */
tfm_status tfm__model_check_sizes(const tfm__model *m, int64_t batch,
                                  int64_t seq, const char *what);

/* The embeddings' dropout (module.h): x [n] <- dropout(x) in place with
 * the model's probability at site `site` of the call's key, in a forward;
 * the same on their gradient in a backward.  A no-op when the model's
 * dropout is off. */
void tfm__model_embed_dropout(const tfm__model *m, uint64_t key, uint64_t site,
                              float *x, int64_t n);

/* model is a decoder-only or encoder-only model (one stack) that takes
 * token ids: tfm_model_logits, tfm_model_backward, tfm_model_loss_backward.
 * TFM_ERR_NULL_ARGUMENT / TFM_ERR_WRONG_KIND (tfm__model_check), or
 * TFM_ERR_UNSUPPORTED for an image model (message set). */
tfm_status tfm__model_check_one_stack(const tfm_module *model);

/* An encoder-decoder call's model, sizes (tfm__model_check_sizes of
 * src_len and tgt_len), ids [batch, src_len] and [batch, tgt_len]
 * (tfm__model_check_ids), then the tensor shaped as its logits [batch,
 * tgt_len, V]: with what NULL, the forward's logits (tfm__check_shape);
 * else the backward's grad_logits, also finite
 * (tfm__model_check_grad_logits, messages prefixed by what).  The first
 * failure's status (message set). */
tfm_status tfm__model_check_seq2seq(const tfm_module *model,
                                    const int32_t *src_ids, int64_t src_len,
                                    const int32_t *tgt_ids, int64_t tgt_len,
                                    int64_t batch, const tfm_tensor *logits,
                                    const char *what);

/* grad_logits shaped as the logits (rank dims shape[0 .. rank-1]) and
 * finite: TFM_ERR_NULL_ARGUMENT, the errors of tfm__check_shape, or
 * TFM_ERR_NON_FINITE, messages prefixed by what (model_backward.c). */
tfm_status tfm__model_check_grad_logits(const tfm_tensor *grad_logits,
                                        int rank, const int64_t *shape,
                                        const char *what);

/* The kept activations of the embedding norm and the head transform
 * (model_backward.c), each NULL when the model lacks the part: e [rows, d]
 * the summed embeddings before their norm; t [rows, d] the head
 * transform's pre-activation, a its activation, y the head norm's output;
 * acc [2 max(d, V)] the bias and norm sums' double scratch.  The caller
 * owns every buffer (workspace scratch of the backward call). */
typedef struct tfm__model_parts_kept {
    float *e, *t, *a, *y;
    double *acc;
} tfm__model_parts_kept;

/* The head's backward (its forward kept in k by model_backward.c's
 * head_transform_keep; with no head transform only k->acc is read): dl
 * [rows, V], the logits' gradient, into the head's parameter gradients
 * (added) and g [rows, d] (overwritten), the gradient of the blocks'
 * output h [rows, d].  Overwrites k->y and k->a.  Cannot fail. */
void tfm__model_head_backward(const tfm__model *m, const float *h,
                              int64_t rows, const tfm__model_parts_kept *k,
                              const float *dl, float *g);

/* dst <- src: the positions src holds (keys and values of every layer),
 * its length and its RoPE origin.  Both caches of the same model and
 * capacity, both rolling or neither (kv_cache.c; the beams of a beam
 * search, beam_search.c). */
void tfm__kv_cache_copy(tfm_kv_cache *dst, const tfm_kv_cache *src);

/* Prefix reuse (tfm_generate_options.cache, generate.c): the number of
 * leading ids of ids[0 .. n) that the cache holds as its first positions
 * (0 for a rolling cache that has dropped its first positions);
 * truncate keeps the first `length` positions (no-op when it holds
 * fewer).  The model and whether the cache rolls. */
int64_t tfm__kv_cache_common_prefix(const tfm_kv_cache *c,
                                    const int32_t *ids, int64_t n);
void tfm__kv_cache_truncate(tfm_kv_cache *c, int64_t length);
const tfm__model *tfm__kv_cache_model(const tfm_kv_cache *c);
int tfm__kv_cache_rolls(const tfm_kv_cache *c);

/* TFM_OK, or TFM_ERR_INVALID_ARGUMENT ("<what>: the model this KV cache
 * refers to has been freed") once tfm_module_free was called on the
 * cache's model (kv_cache.c; base/lifetime.h). */
tfm_status tfm__kv_cache_check_model(const tfm_kv_cache *c, const char *what);

/* tfm_kv_cache_create_rolling (model.h) without its checks: for models
 * already checked, for which tfm__model_rolls holds (generate.c). */
tfm_status tfm__kv_cache_create_rolling(const tfm_module *model,
                                        int64_t capacity, tfm_kv_cache **out);

/* One new token for each of n distinct caches of one model (a batch
 * decoding step, generate_batch.c): ids[i] (checked) is appended to
 * caches[i] (a full rolling cache first drops its oldest position) and its
 * logits written to logits[i] [vocab].  The blocks' norms, projections,
 * feed-forward and the head run once on the n rows (one matrix product
 * each, the weights read once for the batch), attention per cache.  Row
 * i's logits equal tfm_kv_cache_decode of ids[i] alone on caches[i] up to
 * the rounding of a product of n rows instead of one.  Errors:
 * TFM_ERR_CAPACITY (a full cache that does not roll), out-of-memory, a
 * learned temperature <= 0; on error no cache has advanced. */
tfm_status tfm__kv_cache_decode_rows(tfm_kv_cache *const *caches,
                                     const int32_t *ids, int64_t n,
                                     float *const *logits);

/* The generator's internals that a batch of generators needs
 * (generate.c, for generate_batch.c). */
/* Copies pub (NULL: the defaults) as tfm_generator_create reads it. */
tfm_status tfm__generate_options_read(const tfm_generate_options *pub,
                                      tfm_generate_options *o);
/* When g's next step starts with one cache append of its last token (not
 * a re-encode past the context, and the generation runs): its cache, the
 * token in *id and where its logits go in *logits; else NULL. */
tfm_kv_cache *tfm__generator_pending(tfm_generator *g, int32_t *id,
                                     float **logits);
/* Marks that append done (*logits written, the cache advanced). */
void tfm__generator_fed(tfm_generator *g);
/* The tokens generated so far (tfm_generator_count of them). */
const int32_t *tfm__generator_ids(const tfm_generator *g);

/* Whether a model's attention depends on distances only (no learned or
 * sinusoidal positions, no global tokens or BigBird blocks), so that a
 * rolling cache keeps its meaning past the context. */
int tfm__model_rolls(const tfm__model *m);

#endif
