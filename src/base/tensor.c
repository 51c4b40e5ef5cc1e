/* Tensors: float32, rank 1..4, row-major contiguous (tensor.h). */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/tensor_impl.h"

static tfm_status validate_shape(int rank, const int64_t *shape,
                                 int64_t *numel)
{
    if (!shape)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "shape is NULL");
    if (rank < 1 || rank > TFM_MAX_RANK)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "rank %d is not between 1 and %d", rank,
                         TFM_MAX_RANK);
    for (int i = 0; i < rank; i++)
        if (shape[i] < 1)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "dimension %d is %lld, must be at least 1", i,
                             (long long)shape[i]);
    if (!tfm__checked_numel(shape, rank, sizeof(float), numel))
        return tfm__fail(TFM_ERR_OVERFLOW,
                         "tensor size overflows (rank %d)", rank);
    return TFM_OK;
}

static tfm_status make_tensor(int rank, const int64_t *shape, float *data,
                              int zero, tfm_tensor **out)
{
    int64_t numel;
    tfm_status st;
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    if ((st = validate_shape(rank, shape, &numel)) != TFM_OK)
        return st;
    tfm_tensor *t = tfm__calloc(1, sizeof *t);
    if (!t)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate a tensor");
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
    t->numel = numel;
    if (data) {
        t->data = data;
    } else {
        t->data = zero ? tfm__calloc((size_t)numel, sizeof(float))
                       : tfm__malloc((size_t)numel * sizeof(float));
        if (!t->data) {
            tfm__free(t);
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "cannot allocate %lld floats", (long long)numel);
        }
        t->owns_data = 1;
    }
    *out = t;
    return TFM_OK;
}

tfm_status tfm_tensor_create(int rank, const int64_t *shape, tfm_tensor **out)
{
    return make_tensor(rank, shape, NULL, 1, out);
}

tfm_status tfm_tensor_create_copy(int rank, const int64_t *shape,
                                  const float *data, tfm_tensor **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    if (!data)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "data is NULL");
    tfm_tensor *t = NULL;
    tfm_status st = make_tensor(rank, shape, NULL, 0, &t);
    if (st != TFM_OK)
        return st;
    memcpy(t->data, data, (size_t)t->numel * sizeof(float));
    *out = t;
    return TFM_OK;
}

tfm_status tfm_tensor_wrap(int rank, const int64_t *shape, float *data,
                           tfm_tensor **out)
{
    if (!data)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "data is NULL");
    return make_tensor(rank, shape, data, 0, out);
}

void tfm_tensor_free(tfm_tensor *tensor)
{
    if (!tensor)
        return;
    if (tensor->owns_data)
        tfm__free(tensor->data);
    tfm__free(tensor);
}

int tfm_tensor_rank(const tfm_tensor *tensor)
{
    return tensor ? tensor->rank : 0;
}

int64_t tfm_tensor_dim(const tfm_tensor *tensor, int axis)
{
    if (!tensor)
        return 0;
    if (axis < 0)
        axis += tensor->rank;
    if (axis < 0 || axis >= tensor->rank)
        return 0;
    return tensor->shape[axis];
}

int64_t tfm_tensor_numel(const tfm_tensor *tensor)
{
    return tensor ? tensor->numel : 0;
}

float *tfm_tensor_data(tfm_tensor *tensor)
{
    return tensor ? tensor->data : NULL;
}

const float *tfm_tensor_data_const(const tfm_tensor *tensor)
{
    return tensor ? tensor->data : NULL;
}

static int same_shape(const tfm_tensor *a, const tfm_tensor *b)
{
    return a->rank == b->rank &&
           memcmp(a->shape, b->shape, (size_t)a->rank * sizeof(int64_t)) == 0;
}

static tfm_status check_same(const tfm_tensor *a, const char *an,
                             const tfm_tensor *b, const char *bn)
{
    if (!a || !b)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", !a ? an : bn);
    if (!same_shape(a, b)) {
        char sa[96], sb[96];
        tfm__format_shape(sa, sizeof sa, a->rank, a->shape);
        tfm__format_shape(sb, sizeof sb, b->rank, b->shape);
        return tfm__fail(TFM_ERR_SHAPE, "%s has shape %s but %s has shape %s",
                         an, sa, bn, sb);
    }
    return TFM_OK;
}

tfm_status tfm_tensor_copy(tfm_tensor *dst, const tfm_tensor *src)
{
    tfm_status st = check_same(dst, "dst", src, "src");
    if (st != TFM_OK)
        return st;
    if (dst->data != src->data)
        memmove(dst->data, src->data, (size_t)dst->numel * sizeof(float));
    return TFM_OK;
}

tfm_status tfm_tensor_add(tfm_tensor *x, const tfm_tensor *y)
{
    tfm_status st = check_same(x, "x", y, "y");
    if (st != TFM_OK)
        return st;
    for (int64_t i = 0; i < x->numel; i++)
        x->data[i] += y->data[i];
    return TFM_OK;
}

void tfm__format_shape(char *buf, size_t size, int rank, const int64_t *shape)
{
    size_t used = 0;
    int n = snprintf(buf, size, "[");
    used = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < rank && used < size; i++) {
        n = snprintf(buf + used, size - used, i ? ", %lld" : "%lld",
                     (long long)shape[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

tfm_status tfm__check_shape(const tfm_tensor *t, const char *what, int rank,
                            const int64_t *shape)
{
    if (!t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", what);
    int ok = t->rank == rank;
    for (int i = 0; ok && i < rank; i++)
        if (shape[i] >= 0 && t->shape[i] != shape[i])
            ok = 0;
    if (ok)
        return TFM_OK;
    char want[96], got[96];
    /* A wildcard prints as -1; say "any" in words instead. */
    tfm__format_shape(want, sizeof want, rank, shape);
    tfm__format_shape(got, sizeof got, t->rank, t->shape);
    return tfm__fail(TFM_ERR_SHAPE, "%s has shape %s, expected %s%s", what,
                     got, want, strstr(want, "-1") ? " (-1: any size)" : "");
}

tfm_status tfm__check_rows(const tfm_tensor *x, int64_t d_in,
                           const tfm_tensor *out, int64_t d_out)
{
    if (!x || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", !x ? "x" : "out");
    if (x->shape[x->rank - 1] != d_in)
        return tfm__fail(TFM_ERR_SHAPE, "x has %lld columns, expected %lld",
                         (long long)x->shape[x->rank - 1], (long long)d_in);
    int64_t want[TFM_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        want[i] = x->shape[i];
    want[x->rank - 1] = d_out;
    return tfm__check_shape(out, "out", x->rank, want);
}

int tfm__all_finite(const float *x, int64_t n)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}


tfm_status tfm__check_backward_rows(const char *what, const tfm_tensor *x,
                                    int64_t d_in,
                                    const tfm_tensor *grad_output,
                                    int64_t d_out,
                                    const tfm_tensor *grad_input)
{
    if (!x || !grad_output)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: %s is NULL", what,
                         !x ? "x" : "grad_output");
    if (x->shape[x->rank - 1] != d_in)
        return tfm__fail(TFM_ERR_SHAPE, "%s: x has %lld columns, expected "
                         "%lld", what, (long long)x->shape[x->rank - 1],
                         (long long)d_in);
    int64_t want[TFM_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        want[i] = x->shape[i];
    want[x->rank - 1] = d_out;
    tfm_status st = tfm__check_shape(grad_output, "grad_output", x->rank,
                                     want);
    if (st == TFM_OK && grad_input)
        st = tfm__check_shape(grad_input, "grad_input", x->rank, x->shape);
    if (st != TFM_OK)
        return st;
    if (grad_input && grad_input->data < grad_output->data + grad_output->numel &&
        grad_output->data < grad_input->data + grad_input->numel)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: grad_input must not overlap grad_output", what);
    if (!tfm__all_finite(grad_output->data, grad_output->numel))
        return tfm__fail(TFM_ERR_NON_FINITE,
                         "%s: grad_output holds NaN or infinity", what);
    return TFM_OK;
}
