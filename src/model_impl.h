/* Internal: whole models (model.h), shared by the model, its file format
 * and the KV cache. */
#ifndef TFM_SRC_MODEL_IMPL_H
#define TFM_SRC_MODEL_IMPL_H

#include "embedding_impl.h"
#include "stack.h"
#include "transformer/model.h"

typedef struct tfm__model {
    tfm_module base;
    tfm_model_config config;
    tfm__embedding *token_embedding;    /* [vocab_size, d_model] */
    tfm__embedding *position_embedding; /* learned positions or NULL */
    tfm__stack *stack;                  /* decoder-/encoder-only blocks,
                                         * with the final LayerNorm */
    tfm__stack *encoder, *decoder;      /* encoder-decoder only */
    float *lm_head;                     /* [vocab_size, d_model] */
} tfm__model;

/* Checks that m is a model; `kinds` is a bit set of 1 << architecture. */
tfm_status tfm__model_check(const tfm_module *m, unsigned kinds,
                            const char *what);

/* Validates a model configuration (message set). */
tfm_status tfm__model_config_check(const tfm_model_config *c);

/* x [B, L, d] = embeddings of ids [B, L] plus positions offset ..
 * offset+L-1 (ids already checked). */
void tfm__model_embed(const tfm__model *m, const int32_t *ids, int64_t B,
                      int64_t L, int64_t offset, float *x);

/* Checks n ids against the vocabulary (message set). */
tfm_status tfm__model_check_ids(const tfm__model *m, const int32_t *ids,
                                int64_t n, const char *what);

/* logits [rows, vocab] = h [rows, d] lm_head^T. */
void tfm__model_head(const tfm__model *m, const float *h, int64_t rows,
                     float *logits);

#endif
