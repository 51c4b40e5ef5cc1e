/* Dropout masks (dropout.h). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "dropout.h"
#include "error.h"
#include "module_impl.h"
#include "transformer/module.h"
#include "vmath.h"

tfm__dropout tfm__dropout_make(float p, uint64_t key)
{
    tfm__dropout d = { 0 };
    if (!(p > 0.0f) || key == 0)
        return d;
    d.p = p;
    d.key = key;
    if (p >= 1.0f) {
        d.p = 1.0f;
        d.threshold = (uint64_t)1 << 32;
        d.scale = 0.0f;
        return d;
    }
    d.threshold = (uint64_t)((double)p * 4294967296.0);
    /* torch: noise.bernoulli_(1 - p).div_(1 - p), a float tensor over the
     * double scalar: 1.0f / (float)(1 - p). */
    d.scale = 1.0f / (float)(1.0 - (double)p);
    return d;
}

TFM_CLONES void tfm__dropout_copy_rows(const tfm__dropout *d, uint64_t index0,
                                       uint64_t index_stride, const float *src,
                                       float *dst, int64_t rows, int64_t cols,
                                       int64_t ld)
{
    const uint64_t key = d->key, thr = d->threshold;
    const float scale = d->scale;
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t base = index0 + (uint64_t)r * index_stride;
        const float *s = src + r * ld;
        float *o = dst + r * ld;
        for (int64_t c = 0; c < cols; c++) {
            const int keep =
                (tfm__dropout_hash(key, base + (uint64_t)c) >> 32) >= thr;
            o[c] = keep ? s[c] * scale : 0.0f;
        }
    }
}

void tfm__dropout_apply_rows(const tfm__dropout *d, uint64_t index0,
                             uint64_t index_stride, float *x, int64_t rows,
                             int64_t cols, int64_t ld)
{
    tfm__dropout_copy_rows(d, index0, index_stride, x, x, rows, cols, ld);
}

void tfm__dropout_apply(const tfm__dropout *d, uint64_t index0, float *x,
                        int64_t n)
{
    tfm__dropout_copy_rows(d, index0, 0, x, x, 1, n, n);
}

/* ---- A module's stream and probability (module.h) ------------------- */

uint64_t tfm__dropout_forward_key(tfm_module *m)
{
    if (!m || !m->training)
        return 0;
    const uint64_t off = atomic_fetch_add(&m->dropout_offset, 1);
    uint64_t key = tfm__dropout_hash(m->dropout_seed, off);
    key = key ? key : 1;
    atomic_store(&m->dropout_last_key, key);
    return key;
}

uint64_t tfm__dropout_backward_key(const tfm_module *m)
{
    if (!m || !m->training)
        return 0;
    const uint64_t key = atomic_load(&((tfm_module *)m)->dropout_last_key);
    return key ? key : tfm__dropout_forward_key((tfm_module *)m);
}

static void set_p(tfm_module *m, float p)
{
    m->dropout = p;
    for (int i = 0; i < m->n_children; i++)
        set_p(m->children[i].module, p);
}

tfm_status tfm_module_set_dropout(tfm_module *module, float p)
{
    if (!module)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "module is NULL");
    if (!(p >= 0.0f && p <= 1.0f))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "dropout probability has to be between 0 and 1, "
                         "but got %g", (double)p);
    set_p(module, p);
    return TFM_OK;
}

float tfm_module_get_dropout(const tfm_module *module)
{
    return module ? module->dropout : 0.0f;
}

static void set_state(tfm_module *m, uint64_t seed, uint64_t offset)
{
    m->dropout_seed = seed;
    atomic_store(&m->dropout_offset, offset);
    atomic_store(&m->dropout_last_key, 0);
    for (int i = 0; i < m->n_children; i++)
        set_state(m->children[i].module, seed, offset);
}

tfm_status tfm_module_set_dropout_state(tfm_module *module, uint64_t seed,
                                        uint64_t offset)
{
    if (!module)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "module is NULL");
    set_state(module, seed, offset);
    return TFM_OK;
}

tfm_status tfm_module_get_dropout_state(const tfm_module *module,
                                        uint64_t *seed, uint64_t *offset)
{
    if (!module || !seed || !offset)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !module ? "module" : !seed ? "seed" : "offset");
    *seed = module->dropout_seed;
    *offset = atomic_load(&((tfm_module *)module)->dropout_offset);
    return TFM_OK;
}
