/* Internal: lookup tables and positional encodings for the models. */
#ifndef TFM_SRC_EMBEDDING_IMPL_H
#define TFM_SRC_EMBEDDING_IMPL_H

#include "module_impl.h"
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

/* x [B, L, d] += rows offset .. offset+L-1 (range already checked). */
void tfm__embedding_add_rows(const tfm__embedding *e, float *x, int64_t B,
                             int64_t L, int64_t offset);

/* x [B, L, d] += sinusoidal encoding of positions offset .. offset+L-1 in
 * the given layout (base > 1, layout checked). */
void tfm__add_sinusoidal(float *x, int64_t B, int64_t L, int64_t d,
                         int64_t offset, double base,
                         tfm_sinusoidal_layout layout);

/* Checks a layout for a d-wide encoding (message set). */
tfm_status tfm__sinusoidal_layout_check(tfm_sinusoidal_layout layout,
                                        int64_t d);

#endif
