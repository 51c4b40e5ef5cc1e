/* Internal: lookup tables and positional encodings for the models. */
#ifndef TFM_SRC_EMBEDDING_IMPL_H
#define TFM_SRC_EMBEDDING_IMPL_H

#include "nn/module_impl.h"
#include "transformer/embedding.h"
#include "transformer/embedding.h"

typedef struct tfm__embedding {
    tfm_module base;
    int64_t n_rows, d_model;
    int scale;
    float *weight;          /* [n_rows, d_model] */
} tfm__embedding;

tfm_status tfm__embedding_new(int64_t n_rows, int64_t d_model, int scale,
                              tfm__embedding **out);

/* out [n, d] = rows ids[0..n-1] of the table (times sqrt(d) when scaled);
 * ids already checked. */
void tfm__embedding_lookup(const tfm__embedding *e, const int32_t *ids,
                           int64_t n, float *out);

/* x [n, d] += rows ids[0..n-1] of the table (unscaled; ids already
 * checked): BERT's token types, one per position. */
void tfm__embedding_lookup_add(const tfm__embedding *e, const int32_t *ids,
                               int64_t n, float *x);

/* x [B, L, d] += rows offset .. offset+L-1 (range already checked). */
void tfm__embedding_add_rows(const tfm__embedding *e, float *x, int64_t B,
                             int64_t L, int64_t offset);

/* The backward of tfm__embedding_lookup: the table's gradient row ids[i]
 * += grad [n, d] row i (times sqrt(d) when scaled), skipping padding_idx
 * (-1: none); in order, one thread.  The gradient memory exists and the
 * caller has entered it. */
void tfm__embedding_lookup_backward(const tfm__embedding *e,
                                    const int32_t *ids, int64_t n,
                                    int64_t padding_idx, const float *grad);

/* The backward of tfm__embedding_add_rows: the gradient's rows offset ..
 * offset+L-1 += the sum over the batch of grad [B, L, d]; as above. */
void tfm__embedding_add_rows_backward(const tfm__embedding *e,
                                      const float *grad, int64_t B, int64_t L,
                                      int64_t offset);

/* x [B, L, d] += sinusoidal encoding of positions offset .. offset+L-1 in
 * the given layout (base > 1, layout checked). */
void tfm__add_sinusoidal(float *x, int64_t B, int64_t L, int64_t d,
                         int64_t offset, double base,
                         tfm_sinusoidal_layout layout);

/* Checks a layout for a d-wide encoding (message set). */
tfm_status tfm__sinusoidal_layout_check(tfm_sinusoidal_layout layout,
                                        int64_t d);

#endif
