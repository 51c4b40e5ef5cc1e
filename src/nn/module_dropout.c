/* A module's dropout: its probability and its counter-based stream
 * (module.h: tfm_module_set_dropout, tfm_module_set_dropout_state), and the
 * keys its training-mode calls draw from it (module_impl.h); the masks
 * themselves are kernels/dropout.c's. */
#include <stdatomic.h>

#include "base/error.h"
#include "kernels/dropout.h"
#include "nn/module_impl.h"
#include "transformer/module.h"

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
