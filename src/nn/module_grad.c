/* Training mode and gradient storage of modules (module.h: tfm_module_train,
 * tfm_module_zero_grad, tfm_module_grad, tfm_module_get_grad) and the
 * guard that keeps two threads out of the same gradients.
 *
 * Each module that owns parameter storage gets, once, a zeroed gradient
 * block of the same layout (grad_storage).  A parameter-table entry finds
 * its gradient through the module whose storage holds its data (its home),
 * so entries copied into a parent's table before the gradients existed,
 * views (a layer's "linear1" over the feed-forward network's storage) and
 * tied weights all reach the same gradient memory. */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "nn/module_impl.h"
#include "nn/weight_bind.h"
#include "transformer/names.h"
#include "nn/tape.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

float *tfm__grad_of(const tfm_module *home, const float *data)
{
    if (!home || !home->grad_storage || !data || data < home->storage ||
        data >= home->storage + home->n_storage)
        return NULL;
    return home->grad_storage + (data - home->storage);
}

float *tfm__param_grad(const tfm__param *p)
{
    return p->grad ? p->grad : tfm__grad_of(p->home, p->data);
}

/* Sets the flag on m and points every entry of its table at its gradient. */
static void mark(tfm_module *m, int training)
{
    m->training = training;
    for (int i = 0; i < m->n_params; i++) {
        tfm__param *p = &m->params[i];
        float *g = tfm__grad_of(p->home, p->data);
        if (g)
            p->grad = g;
        if (p->home && p->home != m)
            p->home->training = training;
    }
}

static void mark_tree(tfm_module *m, int training)
{
    mark(m, training);
    if (!training)
        tfm__tape_drop(m);  /* evaluation mode keeps no forward */
    for (int i = 0; i < m->n_children; i++)
        mark_tree(m->children[i].module, training);
    /* Homes that are not children (a layer's feed-forward network) keep
     * their own table too. */
    for (int i = 0; i < m->n_params; i++) {
        tfm_module *h = m->params[i].home;
        if (h && h != m)
            mark(h, training);
    }
}

tfm_status tfm_module_train(tfm_module *module, int training)
{
    if (!module)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "module is NULL");
    tfm_status fl;
    if (training &&
        (fl = tfm__module_check_float(module, "tfm_module_train")) != TFM_OK)
        return fl;
    if (training) {
        /* Every home in the table (the module's table lists the parameters
         * of all its parts) without a gradient block gets one; all of them
         * or none. */
        const int n = module->n_params;
        tfm_module **homes = n ? tfm__calloc((size_t)n, sizeof *homes) : NULL;
        float **blocks = n ? tfm__calloc((size_t)n, sizeof *blocks) : NULL;
        if (n && (!homes || !blocks)) {
            tfm__free(homes);
            tfm__free(blocks);
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "cannot allocate the gradient table");
        }
        int k = 0;
        tfm_status st = TFM_OK;
        for (int i = 0; i < n && st == TFM_OK; i++) {
            tfm_module *h = module->params[i].home;
            if (!h || h->grad_storage || h->n_storage < 1)
                continue;
            int seen = 0;
            for (int j = 0; j < k && !seen; j++)
                seen = homes[j] == h;
            if (seen)
                continue;
            homes[k] = h;
            blocks[k] = tfm__calloc((size_t)h->n_storage, sizeof(float));
            if (!blocks[k])
                st = tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                               "cannot allocate gradients for %lld "
                               "parameters", (long long)h->n_storage);
            k++;
        }
        for (int j = 0; j < k; j++) {
            if (st == TFM_OK)
                homes[j]->grad_storage = blocks[j];
            else
                tfm__free(blocks[j]);
        }
        tfm__free(homes);
        tfm__free(blocks);
        if (st != TFM_OK)
            return st;
    }
    mark_tree(module, training != 0);
    return TFM_OK;
}

int tfm_module_is_training(const tfm_module *module)
{
    return module ? module->training : 0;
}

tfm_status tfm_module_zero_grad(tfm_module *module)
{
    if (!module)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "module is NULL");
    for (int i = 0; i < module->n_params; i++) {
        float *g = tfm__param_grad(&module->params[i]);
        if (g)
            memset(g, 0, (size_t)module->params[i].numel * sizeof(float));
    }
    return TFM_OK;
}

static tfm_status find_grad(const tfm_module *module, const char *name,
                            const tfm__param **p, float **grad)
{
    tfm_status st = tfm__module_find_param(module, name, p);
    if (st != TFM_OK)
        return st;
    *grad = tfm__param_grad(*p);
    if (!*grad)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "parameter \"%s\" has no gradient: put the module "
                         "in training mode (tfm_module_train) first", name);
    return TFM_OK;
}

tfm_status tfm_module_grad(tfm_module *module, const char *name, float **grad)
{
    const tfm__param *p = NULL;
    float *g = NULL;
    if (!grad)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "grad is NULL");
    tfm_status st = find_grad(module, name, &p, &g);
    if (st == TFM_OK)
        *grad = g;
    return st;
}

tfm_status tfm_module_get_grad(const tfm_module *module, const char *name,
                               tfm_tensor *out)
{
    const tfm__param *p = NULL;
    float *g = NULL;
    tfm_status st = find_grad(module, name, &p, &g);
    if (st != TFM_OK)
        return st;
    if ((st = tfm__check_shape(out, "out", p->rank, p->shape)) != TFM_OK)
        return st;
    memcpy(out->data, g, (size_t)p->numel * sizeof(float));
    return TFM_OK;
}

tfm_status tfm_module_set_grad(tfm_module *module, const char *name,
                               const tfm_tensor *value)
{
    const tfm__param *p = NULL;
    float *g = NULL;
    tfm_status st = find_grad(module, name, &p, &g);
    if (st != TFM_OK)
        return st;
    if ((st = tfm__check_shape(value, "value", p->rank, p->shape)) != TFM_OK)
        return st;
    for (int64_t i = 0; i < p->numel; i++)
        if (!isfinite(value->data[i]))
            return tfm__fail(TFM_ERR_NON_FINITE,
                             "tfm_module_set_grad: the value for \"%s\" "
                             "holds %s at element %lld; the gradient is "
                             "unchanged", name,
                             isnan(value->data[i]) ? "NaN" : "an infinity",
                             (long long)i);
    /* Not during a backward pass writing the same gradients. */
    const tfm_module *home = p->home ? p->home : module;
    if ((st = tfm__module_enter(home, "tfm_module_set_grad")) != TFM_OK)
        return st;
    memcpy(g, value->data, (size_t)p->numel * sizeof(float));
    tfm__module_leave(home);
    return TFM_OK;
}

tfm_status tfm_module_parameter_data(tfm_module *module, const char *name,
                                     float **data)
{
    const tfm__param *p = NULL;
    if (!data)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "data is NULL");
    tfm_status st = tfm__module_find_param(module, name, &p);
    if (st == TFM_OK && tfm__param_dtype(p) != TFM_DTYPE_F32)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "parameter %s is stored as %s: it has no float32 "
                         "memory to point to (tfm_module_get_parameter "
                         "widens it)",
                         name, tfm_enum_name(TFM_ENUM_DTYPE,
                                             tfm__param_dtype(p)));
    if (st == TFM_OK && tfm__module_has_stored(module) &&
        (st = tfm__module_check_float(module, "tfm_module_parameter_data")) !=
            TFM_OK)
        return st;
    if (st == TFM_OK)
        *data = p->data;
    return st;
}

tfm_status tfm__module_enter(const tfm_module *m, const char *what)
{
    int expected = 0;
    int *busy = (int *)&m->busy;    /* the handle's own word, not const */
    if (!__atomic_compare_exchange_n(busy, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED))
        return tfm__fail(TFM_ERR_BUSY,
                         "%s: another thread is in a backward pass that "
                         "writes the same gradients (backward passes into "
                         "one module's gradients run one at a time)",
                         what);
    return TFM_OK;
}

void tfm__module_leave(const tfm_module *m)
{
    __atomic_store_n((int *)&m->busy, 0, __ATOMIC_RELEASE);
}

/* Whether p's home already appeared among m's entries before index i. */
static int home_seen(const tfm_module *m, int i)
{
    for (int k = 0; k < i; k++)
        if (m->params[k].home == m->params[i].home)
            return 1;
    return 0;
}

tfm_status tfm__module_enter_grads(const tfm_module *m, const char *what)
{
    for (int i = 0; i < m->n_params; i++)
        if (!tfm__param_grad(&m->params[i]))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: parameter \"%s\" has no gradient memory: "
                             "call tfm_module_train first", what,
                             m->params[i].name);
    for (int i = 0; i < m->n_params; i++) {
        const tfm_module *h = m->params[i].home;
        if (!h || home_seen(m, i))
            continue;
        tfm_status st = tfm__module_enter(h, what);
        if (st != TFM_OK) {
            for (int k = 0; k < i; k++)
                if (m->params[k].home && !home_seen(m, k))
                    tfm__module_leave(m->params[k].home);
            return st;
        }
    }
    return TFM_OK;
}

void tfm__module_leave_grads(const tfm_module *m)
{
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].home && !home_seen(m, i))
            tfm__module_leave(m->params[i].home);
}

tfm_status tfm__backward_begin(const tfm_module *m, const char *what,
                               float **const bufs[], const size_t sizes[],
                               int n, tfm__ws_mark *mark)
{
    *mark = tfm__ws_save();
    for (int i = 0; i < n; i++)
        if (!(*bufs[i] = tfm__ws_floats(sizes[i]))) {
            tfm__ws_restore(*mark);
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "%s: out of memory",
                             what);
        }
    tfm_status st = tfm__module_enter_grads(m, what);
    if (st != TFM_OK)
        tfm__ws_restore(*mark);
    return st;
}

void tfm__backward_end(const tfm_module *m, tfm__ws_mark mark)
{
    tfm__module_leave_grads(m);
    tfm__ws_restore(mark);
}
