/* Weights stored in other types, and bound to file bytes (weight_bind.h;
 * the public calls of transformer/weights.h). */
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "transformer/names.h"
#include "kernels/quant.h"
#include "kernels/weight_store.h"
#include "nn/weight_bind.h"
#include "transformer/weights.h"

/* ---- Queries ----------------------------------------------------------- */

static int64_t rows_of(const tfm__param *p)
{
    return p->rank == 2 ? p->shape[0] : 1;
}

static int64_t cols_of(const tfm__param *p)
{
    return p->rank == 2 ? p->shape[1] : p->numel;
}

int tfm__param_dtype(const tfm__param *p)
{
    tfm__wview v;
    int64_t col;
    if (p->convertible && tfm__weight_store_find(p->data, &v, &col))
        return v.dtype;
    return TFM_DTYPE_F32;
}

/* Whether p is in the table (stored, or float32 used in place). */
static int is_stored(const tfm__param *p)
{
    tfm__wview v;
    int64_t col;
    return p->convertible && tfm__weight_store_find(p->data, &v, &col);
}

int tfm__module_has_stored(const tfm_module *m)
{
    for (int i = 0; m && i < m->n_params; i++)
        if (is_stored(&m->params[i]))
            return 1;
    return 0;
}

tfm_status tfm__module_check_float(const tfm_module *m, const char *what)
{
    for (int i = 0; m && i < m->n_params; i++)
        if (is_stored(&m->params[i])) {
            const int dt = tfm__param_dtype(&m->params[i]);
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: parameter %s is stored as %s%s; convert "
                             "it back with tfm_module_quantize(module, "
                             "TFM_DTYPE_F32)",
                             what, m->params[i].name,
                             tfm_enum_name(TFM_ENUM_DTYPE, dt),
                             dt == TFM_DTYPE_F32 ? " from a file mapping"
                                                 : "");
        }
    return TFM_OK;
}

void tfm__param_read(const tfm__param *p, float *out)
{
    if (!is_stored(p)) {
        memcpy(out, p->data, (size_t)p->numel * sizeof *out);
        return;
    }
    const int64_t rows = rows_of(p), cols = cols_of(p);
    for (int64_t r = 0; r < rows; r++)
        tfm__weight_read_row(p->data + r * cols, cols, out + r * cols);
}

/* ---- Preparing and committing a conversion ----------------------------- */

/* A conversion of one parameter, prepared whole before anything changes. */
typedef struct prepared {
    const tfm__param *p;
    int dtype;                /* the new type */
    /* dtype != F32: the new view and what holds its bytes.  dtype == F32:
     * the source to widen into p->data at commit (src_dtype bytes at src;
     * src NULL: p is float32 already and stays as it is). */
    tfm__wview view;
    tfm__weight_owner owner;
    int src_dtype;
    const unsigned char *src;
} prepared;

/* One row of p's current values (widened when stored) into row [cols]. */
static void current_row(const tfm__param *p, int64_t r, float *row)
{
    const int64_t cols = cols_of(p);
    tfm__weight_read_row(p->data + r * cols, cols, row);
}

static tfm_status row_error(tfm_status st, const tfm__param *p, int64_t r,
                            int dtype)
{
    if (st == TFM_ERR_NON_FINITE)
        return tfm__fail(st, "parameter %s has a non-finite value in row %lld",
                         p->name, (long long)r);
    if (st == TFM_ERR_OVERFLOW)
        return tfm__fail(st,
                         "parameter %s has values in row %lld too large "
                         "for %s (its binary16 %s would be infinite)",
                         p->name, (long long)r,
                         tfm_enum_name(TFM_ENUM_DTYPE, dtype),
                         dtype == TFM_DTYPE_F16 ? "values" : "block scale");
    return tfm__fail(st, "parameter %s cannot be stored as %s", p->name,
                     tfm_enum_name(TFM_ENUM_DTYPE, dtype));
}

/* Prepares p stored as dtype, from src (src_dtype bytes of p's shape; in
 * place when map is given and src_dtype == dtype) or, src NULL, from p's
 * current values.  Nothing of p changes. */
static tfm_status prepare(const tfm__param *p, int dtype, const void *src,
                          int src_dtype, tfm__mapping *map, prepared *out)
{
    const int64_t rows = rows_of(p), cols = cols_of(p);
    *out = (prepared){ .p = p, .dtype = dtype, .src_dtype = src_dtype,
                       .src = src };
    if (dtype != TFM_DTYPE_F32 && !p->convertible)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "parameter %s cannot be stored as %s", p->name,
                         tfm_enum_name(TFM_ENUM_DTYPE, dtype));
    const int64_t row_bytes = tfm__dtype_row_bytes(dtype, cols);
    if (row_bytes < 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "parameter %s has rows of %lld values, not a "
                         "multiple of %d: it cannot be stored as %s",
                         p->name, (long long)cols, TFM__QK,
                         tfm_enum_name(TFM_ENUM_DTYPE, dtype));
    const tfm__ws_mark mark = tfm__ws_save();
    float *row = tfm__ws_floats((size_t)cols);
    if (!row)
        return TFM_ERR_OUT_OF_MEMORY;
    const int64_t src_row_bytes =
        src ? tfm__dtype_row_bytes(src_dtype, cols) : 0;
    tfm_status st = TFM_OK;
    /* Every source value is checked finite (widened row by row). */
    for (int64_t r = 0; src && st == TFM_OK && r < rows; r++) {
        tfm__widen_row(src_dtype, (const unsigned char *)src +
                                      r * src_row_bytes, cols, row);
        for (int64_t c = 0; c < cols; c++)
            if (!isfinite(row[c])) {
                st = row_error(TFM_ERR_NON_FINITE, p, r, dtype);
                break;
            }
    }
    if (st == TFM_OK && dtype != TFM_DTYPE_F32) {
        out->view = (tfm__wview){ dtype, NULL, rows, cols, row_bytes };
        if (src && src_dtype == dtype && map) {
            out->view.data = src;
            out->owner.map = tfm__mapping_retain(map);
        } else {
            size_t bytes;
            if (!tfm__mul_size((size_t)rows, (size_t)row_bytes, &bytes) ||
                !(out->owner.owned = tfm__malloc_large(bytes))) {
                st = tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                               "cannot allocate parameter %s as %s", p->name,
                               tfm_enum_name(TFM_ENUM_DTYPE, dtype));
            } else {
                out->owner.owned_size = bytes;
                unsigned char *dst = out->owner.owned;
                for (int64_t r = 0; st == TFM_OK && r < rows; r++) {
                    if (src && src_dtype == dtype) {
                        memcpy(dst + r * row_bytes,
                               (const unsigned char *)src + r * row_bytes,
                               (size_t)row_bytes);
                        continue;
                    }
                    if (src)
                        tfm__widen_row(src_dtype,
                                       (const unsigned char *)src +
                                           r * src_row_bytes,
                                       cols, row);
                    else
                        current_row(p, r, row);
                    tfm_status q = tfm__quantize_row(dtype, row, cols,
                                                     dst + r * row_bytes);
                    if (q != TFM_OK)
                        st = row_error(q, p, r, dtype);
                }
                out->view.data = dst;
            }
        }
    }
    tfm__ws_restore(mark);
    if (st != TFM_OK)
        tfm__weight_owner_release(&out->owner);
    return st;
}

/* The page-aligned part of p's float range (all of it: convertible
 * parameters lie on whole pages) is released. */
static void release_pages(const tfm__param *p)
{
    const long ps = sysconf(_SC_PAGESIZE);
    const size_t page = ps > 0 ? (size_t)ps : 4096;
    uintptr_t a = ((uintptr_t)p->data + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t b = ((uintptr_t)(p->data + p->numel)) & ~(uintptr_t)(page - 1);
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Commits a prepared conversion (after tfm__weight_store_reserve).
 * Cannot fail. */
static void commit(prepared *c)
{
    const tfm__param *p = c->p;
    tfm__weight_owner old = { 0 };
    if (c->dtype != TFM_DTYPE_F32) {
        tfm__weight_store_put(p->data, &c->view, c->owner, &old);
        release_pages(p);
    } else {
        const int64_t rows = rows_of(p), cols = cols_of(p);
        if (c->src) {
            const int64_t rb = tfm__dtype_row_bytes(c->src_dtype, cols);
            for (int64_t r = 0; r < rows; r++)
                tfm__widen_row(c->src_dtype, c->src + r * rb, cols,
                               p->data + r * cols);
        } else if (is_stored(p)) {
            /* Widen row by row into the float range (its released pages
             * come back as they are written). */
            for (int64_t r = 0; r < rows; r++)
                current_row(p, r, p->data + r * cols);
        }
        tfm__weight_store_take(p->data, &old);
    }
    tfm__weight_owner_release(&old);
}

/* ---- tfm_module_quantize and the loaders' binding ---------------------- */

tfm_status tfm_module_quantize(tfm_module *module, tfm_dtype dtype)
{
    if (!module)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "module is NULL");
    if (!tfm__dtype_is_weight((int)dtype))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_module_quantize: dtype %d is not F32, BF16, "
                         "F16, Q8_0 or Q4_0",
                         (int)dtype);
    if (module->training)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_module_quantize: the module is in training "
                         "mode (tfm_module_train(module, 0) first)");
    const int n = module->n_params;
    prepared *c = tfm__calloc(n > 0 ? (size_t)n : 1, sizeof *c);
    if (!c)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "tfm_module_quantize");
    int k = 0;
    tfm_status st = TFM_OK;
    for (int i = 0; st == TFM_OK && i < n; i++) {
        const tfm__param *p = &module->params[i];
        int seen = !p->convertible;
        for (int j = 0; !seen && j < k; j++)
            seen = c[j].p->data == p->data;
        if (seen || (tfm__param_dtype(p) == (int)dtype && !is_stored(p)))
            continue;
        if (tfm__param_dtype(p) == (int)dtype && dtype != TFM_DTYPE_F32)
            continue; /* already stored so */
        st = prepare(p, (int)dtype, NULL, 0, NULL, &c[k]);
        if (st == TFM_OK)
            k++;
    }
    if (st == TFM_OK)
        st = tfm__weight_store_reserve((size_t)k);
    for (int j = 0; j < k; j++) {
        if (st == TFM_OK)
            commit(&c[j]);
        else
            tfm__weight_owner_release(&c[j].owner);
    }
    tfm__free(c);
    return st;
}

tfm_status tfm__param_convert(const tfm__param *p, int dtype)
{
    if (tfm__param_dtype(p) == dtype && (dtype != TFM_DTYPE_F32 ||
                                         !is_stored(p)))
        return TFM_OK;
    prepared c;
    tfm_status st = prepare(p, dtype, NULL, 0, NULL, &c);
    if (st == TFM_OK && (st = tfm__weight_store_reserve(1)) == TFM_OK)
        commit(&c);
    else
        tfm__weight_owner_release(&c.owner);
    return st;
}

tfm_status tfm__param_write(const tfm__param *p, const float *values)
{
    if (!is_stored(p)) {
        memcpy(p->data, values, (size_t)p->numel * sizeof(float));
        return TFM_OK;
    }
    prepared c;
    tfm_status st = prepare(p, tfm__param_dtype(p), values, TFM_DTYPE_F32,
                            NULL, &c);
    if (st == TFM_OK && (st = tfm__weight_store_reserve(1)) == TFM_OK)
        commit(&c);
    else
        tfm__weight_owner_release(&c.owner);
    return st;
}

tfm_status tfm__module_bind_param(tfm_module *m, const char *name, int dtype,
                                  const void *bytes, uint64_t nbytes,
                                  int keep_dtype, tfm__mapping *map)
{
    const tfm__param *p = NULL;
    tfm_status st = tfm__module_find_param(m, name, &p);
    if (st != TFM_OK)
        return st;
    const int64_t rows = rows_of(p), cols = cols_of(p);
    const int64_t rb = tfm__dtype_row_bytes(dtype, cols);
    if (rb < 0 || (uint64_t)rb * (uint64_t)rows != nbytes)
        return tfm__fail(TFM_ERR_FORMAT,
                         "parameter %s: %llu bytes of %s do not hold its "
                         "%lld x %lld values",
                         name, (unsigned long long)nbytes,
                         tfm_enum_name(TFM_ENUM_DTYPE, dtype),
                         (long long)rows, (long long)cols);
    /* A mapping already shorter than the file it mapped (truncated in
     * place) would fault when its pages are read: refused now. */
    if (map && (st = tfm__mapping_check(map)) != TFM_OK)
        return st;
    int target = keep_dtype == TFM_LOAD_DTYPE_AUTO ? dtype : keep_dtype;
    if (!p->convertible)
        target = TFM_DTYPE_F32;
    /* A float32 weight kept float32 from a mapping is used in place too. */
    prepared c;
    if (target == TFM_DTYPE_F32 && dtype == TFM_DTYPE_F32 && map &&
        p->convertible) {
        if ((st = prepare(p, TFM_DTYPE_F32, bytes, dtype, NULL, &c)) !=
            TFM_OK)
            return st;
        const tfm__wview v = { TFM_DTYPE_F32, bytes, rows, cols, rb };
        tfm__weight_owner owner = { .map = tfm__mapping_retain(map) }, old;
        if ((st = tfm__weight_store_reserve(1)) != TFM_OK) {
            tfm__weight_owner_release(&owner);
            return st;
        }
        tfm__weight_store_put(p->data, &v, owner, &old);
        tfm__weight_owner_release(&old);
        release_pages(p);
        return TFM_OK;
    }
    st = prepare(p, target, bytes, dtype, map, &c);
    if (st == TFM_OK && (st = tfm__weight_store_reserve(1)) == TFM_OK)
        commit(&c);
    else
        tfm__weight_owner_release(&c.owner);
    return st;
}

void tfm__weight_forget(tfm_module *m)
{
    for (int i = 0; i < m->n_params; i++) {
        const tfm__param *p = &m->params[i];
        if (p->home != m || !p->convertible)
            continue;
        tfm__weight_owner old;
        tfm__weight_store_take(p->data, &old);
        tfm__weight_owner_release(&old);
    }
}

/* ---- Queries of the public header -------------------------------------- */

tfm_status tfm_module_parameter_dtype(const tfm_module *module,
                                      const char *name, tfm_dtype *dtype)
{
    const tfm__param *p = NULL;
    if (!dtype)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "dtype is NULL");
    tfm_status st = tfm__module_find_param(module, name, &p);
    if (st == TFM_OK)
        *dtype = (tfm_dtype)tfm__param_dtype(p);
    return st;
}

int64_t tfm_module_parameter_bytes(const tfm_module *module)
{
    if (!module)
        return -1;
    int64_t total = 0;
    for (int i = 0; i < module->n_params; i++) {
        const tfm__param *p = &module->params[i];
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = module->params[j].data == p->data;
        if (seen)
            continue;
        const int64_t rb = tfm__dtype_row_bytes(tfm__param_dtype(p),
                                                cols_of(p));
        total += rb * rows_of(p);
    }
    return total;
}
