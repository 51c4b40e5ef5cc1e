/* Lookup tables: token embeddings and learned positions (embedding.h). */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "kernels/weight_store.h"
#include "nn/embedding_impl.h"
#include "transformer/embedding.h"
#include "nn/module_impl.h"
#include "base/tensor_impl.h"

static tfm_status embedding_macs(const tfm_module *m, int64_t B, int64_t L,
                                 int64_t S, int64_t *acc)
{
    (void)m, (void)B, (void)L, (void)S, (void)acc;
    return TFM_OK; /* a lookup, no products */
}

static const tfm__module_ops embedding_ops = { NULL, embedding_macs };

tfm_status tfm_embedding_create(int64_t n_rows, int64_t d_model, int scale,
                                tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__embedding *e = NULL;
    tfm_status st = tfm__embedding_new(n_rows, d_model, scale, &e);
    if (st == TFM_OK)
        *out = &e->base;
    return st;
}

tfm_status tfm__embedding_new(int64_t n_rows, int64_t d_model, int scale,
                              tfm__embedding **out)
{
    if (n_rows < 1 || d_model < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_rows (%lld) and d_model (%lld) must be at least 1",
                         (long long)n_rows, (long long)d_model);
    tfm__embedding *e = (tfm__embedding *)tfm__module_alloc(
        sizeof *e, TFM_MODULE_EMBEDDING, &embedding_ops);
    if (!e)
        return TFM_ERR_OUT_OF_MEMORY;
    e->n_rows = n_rows;
    e->d_model = d_model;
    e->scale = scale != 0;
    tfm__param_spec spec = { "weight", 2, { n_rows, d_model }, &e->weight,
                             .init = TFM__INIT_NORMAL, .convertible = 1 };
    tfm_status st = tfm__module_own_params(&e->base, &spec, 1);
    if (st != TFM_OK) {
        tfm_module_free(&e->base);
        return st;
    }
    *out = e;
    return TFM_OK;
}

/* The module is an embedding (*out), ids [batch * seq] present, sizes
 * >= 1, every id a row of the table (before the output's shape, as the
 * forward always checked). */
static tfm_status check_ids(const tfm_module *m, const int32_t *ids,
                            int64_t batch, int64_t seq,
                            const tfm__embedding **out)
{
    tfm_status st = tfm__module_check(m, TFM_MODULE_EMBEDDING, "embedding");
    if (st != TFM_OK)
        return st;
    const tfm__embedding *e = (const tfm__embedding *)m;
    *out = e;
    if (!ids)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "ids is NULL");
    if (batch < 1 || seq < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "batch (%lld) and seq (%lld) must be at least 1",
                         (long long)batch, (long long)seq);
    const int64_t n = batch * seq;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->n_rows)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "id %d at position %lld is outside 0..%lld",
                             (int)ids[i], (long long)i,
                             (long long)(e->n_rows - 1));
    return TFM_OK;
}

tfm_status tfm_embedding_forward(const tfm_module *embedding,
                                 const int32_t *ids, int64_t batch,
                                 int64_t seq, tfm_tensor *out)
{
    const tfm__embedding *e = NULL;
    tfm_status st = check_ids(embedding, ids, batch, seq, &e);
    if (st != TFM_OK)
        return st;
    const int64_t shape[3] = { batch, seq, e->d_model };
    if ((st = tfm__check_shape(out, "out", 3, shape)) != TFM_OK)
        return st;
    tfm__embedding_lookup(e, ids, batch * seq, out->data);
    return TFM_OK;
}

tfm_status tfm_embedding_backward(tfm_module *embedding, const int32_t *ids,
                                  int64_t batch, int64_t seq,
                                  int64_t padding_idx,
                                  const tfm_tensor *grad_output)
{
    static const char what[] = "tfm_embedding_backward";
    const tfm__embedding *e = NULL;
    tfm_status st = check_ids(embedding, ids, batch, seq, &e);
    if (st != TFM_OK)
        return st;
    if (padding_idx < -1 || padding_idx >= e->n_rows)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: padding_idx %lld is outside -1..%lld", what,
                         (long long)padding_idx, (long long)(e->n_rows - 1));
    if (!grad_output)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: grad_output is NULL",
                         what);
    const int64_t shape[3] = { batch, seq, e->d_model };
    if ((st = tfm__check_shape(grad_output, "grad_output", 3, shape)))
        return st;
    const int64_t n = batch * seq;
    if (!tfm__all_finite(grad_output->data, grad_output->numel))
        return tfm__fail(TFM_ERR_NON_FINITE,
                         "%s: grad_output holds NaN or infinity", what);
    if ((st = tfm__module_enter_grads(embedding, what)))
        return st;
    tfm__embedding_lookup_backward(e, ids, n, padding_idx, grad_output->data);
    tfm__module_leave_grads(embedding);
    return TFM_OK;
}

void tfm__embedding_lookup_backward(const tfm__embedding *e,
                                    const int32_t *ids, int64_t n,
                                    int64_t padding_idx, const float *grad)
{
    const int64_t d = e->d_model;
    float *gw = tfm__grad_of(&e->base, e->weight);
    const float s = e->scale ? (float)sqrt((double)d) : 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] == padding_idx)
            continue;
        const float *src = grad + i * d;
        float *dst = gw + (int64_t)ids[i] * d;
        for (int64_t c = 0; c < d; c++)
            dst[c] += src[c] * s;
    }
}

/* dst [d] += the table row starting at row (widened when the table is
 * stored in another type: kernels/weight_store.h), 256 values at a time. */
static void add_row(float *dst, const float *row, int64_t d)
{
    float buf[256];
    for (int64_t c0 = 0; c0 < d; c0 += 256) {
        const int64_t len = d - c0 < 256 ? d - c0 : 256;
        tfm__weight_read_row(row + c0, len, buf);
        for (int64_t c = 0; c < len; c++)
            dst[c0 + c] += buf[c];
    }
}

void tfm__embedding_lookup(const tfm__embedding *e, const int32_t *ids,
                           int64_t n, float *out)
{
    const int64_t d = e->d_model;
    const float s = e->scale ? (float)sqrt((double)d) : 1.0f;
    for (int64_t i = 0; i < n; i++) {
        float *dst = out + i * d;
        tfm__weight_read_row(e->weight + (int64_t)ids[i] * d, d, dst);
        if (e->scale)
            for (int64_t c = 0; c < d; c++)
                dst[c] = dst[c] * s;
    }
}

void tfm__embedding_lookup_add(const tfm__embedding *e, const int32_t *ids,
                               int64_t n, float *x)
{
    const int64_t d = e->d_model;
    for (int64_t i = 0; i < n; i++)
        add_row(x + i * d, e->weight + (int64_t)ids[i] * d, d);
}

tfm_status tfm_embedding_add_positions(const tfm_module *positions,
                                       tfm_tensor *x, int64_t offset)
{
    tfm_status st =
        tfm__module_check(positions, TFM_MODULE_EMBEDDING, "positions");
    if (st != TFM_OK)
        return st;
    const tfm__embedding *e = (const tfm__embedding *)positions;
    const int64_t want[3] = { -1, -1, e->d_model };
    if ((st = tfm__check_shape(x, "x", 3, want)) != TFM_OK)
        return st;
    if (offset < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "offset %lld is negative",
                         (long long)offset);
    const int64_t B = x->shape[0], L = x->shape[1];
    if (offset > e->n_rows - L)
        return tfm__fail(TFM_ERR_CAPACITY,
                         "%lld positions from offset %lld exceed the table's "
                         "%lld rows", (long long)L, (long long)offset,
                         (long long)e->n_rows);
    tfm__embedding_add_rows(e, x->data, B, L, offset);
    return TFM_OK;
}

void tfm__embedding_add_rows(const tfm__embedding *e, float *x, int64_t B,
                             int64_t L, int64_t offset)
{
    const int64_t d = e->d_model;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++)
            add_row(x + (b * L + i) * d, e->weight + (offset + i) * d, d);
}

void tfm__embedding_add_rows_backward(const tfm__embedding *e,
                                      const float *grad, int64_t B, int64_t L,
                                      int64_t offset)
{
    const int64_t d = e->d_model;
    float *gw = tfm__grad_of(&e->base, e->weight);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++) {
            const float *src = grad + (b * L + i) * d;
            float *dst = gw + (offset + i) * d;
            for (int64_t c = 0; c < d; c++)
                dst[c] += src[c];
        }
}
