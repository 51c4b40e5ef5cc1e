/* Modules: lifecycle, named parameters and cost (module.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "nn/module_impl.h"
#include "nn/tape.h"
#include "nn/weight_bind.h"
#include "base/tensor_impl.h"

static void destroy(tfm_module *module);

static void destroy_zombie(tfm__lifetime *life)
{
    destroy((tfm_module *)(void *)life);
}

tfm_module *tfm__module_alloc(size_t size, tfm_module_kind kind,
                              const tfm__module_ops *ops)
{
    tfm_module *m = tfm__calloc(1, size);
    if (!m) {
        tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate a module");
        return NULL;
    }
    tfm__lifetime_init(&m->life, destroy_zombie);
    m->kind = kind;
    m->ops = ops;
    return m;
}

static tfm_status reserve(tfm_module *m, int extra)
{
    if (m->n_params + extra <= m->cap_params)
        return TFM_OK;
    int cap = m->cap_params ? m->cap_params : 8;
    while (cap < m->n_params + extra)
        cap *= 2;
    tfm__param *p = tfm__realloc(m->params, (size_t)cap * sizeof *p);
    if (!p)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate the parameter table");
    m->params = p;
    m->cap_params = cap;
    return TFM_OK;
}

static tfm_status push_param(tfm_module *m, const char *prefix,
                             const tfm__param *from)
{
    const char *name = from->name;
    tfm_status st = reserve(m, 1);
    if (st != TFM_OK)
        return st;
    size_t len = strlen(prefix) + strlen(name) + 1;
    char *full = tfm__malloc(len);
    if (!full)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate a parameter name");
    snprintf(full, len, "%s%s", prefix, name);
    tfm__param *p = &m->params[m->n_params++];
    *p = *from;
    p->name = full;
    return TFM_OK;
}

/* The table entry of spec over data (numel given). */
static tfm__param param_of(const tfm__param_spec *spec, int64_t numel,
                           float *data)
{
    tfm__param p = {
        .name = (char *)spec->name, .rank = spec->rank, .numel = numel,
        .data = data, .home = NULL, .init = spec->init, .init_fan_in = spec->init_fan_in,
        .init_value = spec->init_value, .convertible = spec->convertible,
    };
    memcpy(p.shape, spec->shape, (size_t)spec->rank * sizeof *p.shape);
    return p;
}

/* Floats in a page (convertible parameters start and end on one). */
static int64_t page_floats(void)
{
    const long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (int64_t)page / (int64_t)sizeof(float) : 1024;
}

tfm_status tfm__module_own_params(tfm_module *m, const tfm__param_spec *specs,
                                  int n)
{
    int64_t total = 0, numel[32], offset[32];
    int any_convertible = 0;
    const int64_t page = page_floats();
    if (n > 32)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "too many parameters");
    for (int i = 0; i < n; i++) {
        if (!tfm__checked_numel(specs[i].shape, specs[i].rank, sizeof(float),
                                &numel[i]) ||
            total > INT64_MAX - numel[i] - 2 * page)
            return tfm__fail(TFM_ERR_OVERFLOW,
                             "parameter %s is too large", specs[i].name);
        /* A convertible weight starts on a page (nn/weight_bind.c releases
         * the pages it fills when it is stored in another type), unless it
         * follows another one, which it then continues without a gap (a
         * gated network's W1 | W3, multiplied as one matrix); the float32
         * parameter after a run of them starts on a fresh page. */
        const int run = i > 0 && specs[i - 1].convertible;
        if ((specs[i].convertible && !run) ||
            (!specs[i].convertible && i > 0 && specs[i - 1].convertible))
            total = (total + page - 1) / page * page;
        any_convertible |= specs[i].convertible;
        offset[i] = total;
        total += numel[i];
    }
    size_t bytes;
    if (!tfm__mul_size((size_t)total, sizeof(float), &bytes) ||
        (uint64_t)total > SIZE_MAX / sizeof(float))
        return tfm__fail(TFM_ERR_OVERFLOW, "parameters are too large");
    if (any_convertible && bytes > 0) {
        /* Zero pages on first touch: a loader that binds the weights
         * where they lie in a file never touches them. */
        m->storage = tfm__pages_alloc(bytes);
        m->storage_bytes = m->storage ? bytes : 0;
    } else {
        m->storage = tfm__calloc((size_t)total, sizeof(float));
    }
    if (!m->storage)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate %lld parameters", (long long)total);
    m->n_storage = total;
    for (int i = 0; i < n; i++) {
        float *p = m->storage + offset[i];
        tfm__param param = param_of(&specs[i], numel[i], p);
        param.home = m;
        tfm_status st = push_param(m, "", &param);
        if (st != TFM_OK)
            return st;
        *specs[i].ptr = p;
    }
    return TFM_OK;
}

tfm_status tfm__module_alias_param(tfm_module *m, const tfm__param_spec *spec,
                                   float *data, tfm_module *home)
{
    int64_t numel = 1;
    for (int i = 0; i < spec->rank; i++)
        numel *= spec->shape[i];
    tfm__param p = param_of(spec, numel, data);
    p.home = home;
    p.grad = tfm__grad_of(home, data);
    return push_param(m, "", &p);
}

tfm_status tfm__module_add_child(tfm_module *m, const char *name,
                                 tfm_module *child)
{
    size_t len = strlen(name) + 1;
    char *copy = tfm__malloc(len);
    tfm__child *c = copy ? tfm__realloc(m->children,
                                        (size_t)(m->n_children + 1) * sizeof *c)
                         : NULL;
    if (!c) {
        tfm__free(copy);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate the sub-module table");
    }
    memcpy(copy, name, len);
    m->children = c;
    c[m->n_children++] = (tfm__child){ copy, child };
    if (!child->owner)
        child->owner = m;
    return TFM_OK;
}

tfm_status tfm__module_adopt(tfm_module *m, const char *prefix,
                             tfm_module *child)
{
    tfm_status st = reserve(m, child->n_params);
    for (int i = 0; st == TFM_OK && i < child->n_params; i++) {
        st = push_param(m, prefix, &child->params[i]);
    }
    size_t len = strlen(prefix);
    if (st == TFM_OK && len == 0) {
        for (int i = 0; st == TFM_OK && i < child->n_children; i++)
            st = tfm__module_add_child(m, child->children[i].name,
                                       child->children[i].module);
    } else if (st == TFM_OK) {
        char name[64];
        if (len >= sizeof name)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "prefix too long");
        memcpy(name, prefix, len);
        name[len - (prefix[len - 1] == '.')] = '\0';
        st = tfm__module_add_child(m, name, child);
    }
    return st;
}

tfm_status tfm__module_check(const tfm_module *m, tfm_module_kind kind,
                             const char *what)
{
    if (!m)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", what);
    if (m->kind != kind)
        return tfm__fail(TFM_ERR_WRONG_KIND,
                         "%s is a module of kind %d, expected kind %d", what,
                         (int)m->kind, (int)kind);
    return TFM_OK;
}

tfm_status tfm__module_backward_check(const tfm_module *m,
                                      tfm_module_kind kind, const char *name,
                                      const char *what,
                                      tfm__module_x_check_fn check_x,
                                      const tfm_tensor *x,
                                      const tfm_tensor *grad_output,
                                      const tfm_tensor *grad_input)
{
    int64_t d_in = 0, d_out = 0;
    tfm_status st;
    if ((st = tfm__module_check(m, kind, name)) ||
        (st = check_x(m, x, what, &d_in, &d_out)))
        return st;
    return tfm__check_backward_rows(what, x, d_in, grad_output, d_out,
                                    grad_input);
}

/* ---- public API --------------------------------------------------------- */

tfm_module *tfm__module_retain(const tfm_module *m, const char *what)
{
    tfm_module *root = (tfm_module *)m;
    while (root->owner)
        root = root->owner;
    if (!tfm__lifetime_retain(&root->life)) {
        tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                  "%s: the module was already freed", what);
        return NULL;
    }
    return root;
}

void tfm__module_release(tfm_module *root)
{
    if (root)
        tfm__lifetime_release(&root->life);
}

int tfm__module_freed(const tfm_module *root)
{
    return tfm__lifetime_closed(&root->life);
}

/* Frees a module the caller owned (the kind's destroy frees its parts,
 * with tfm_module_free once their owner pointer is cleared). */
static void destroy(tfm_module *module)
{
    for (int i = 0; i < module->n_children; i++)
        if (module->children[i].module->owner == module)
            module->children[i].module->owner = NULL;
    if (module->ops && module->ops->destroy)
        module->ops->destroy(module);
    for (int i = 0; i < module->n_children; i++)
        tfm__free(module->children[i].name);
    tfm__free(module->children);
    tfm__weight_forget(module);
    for (int i = 0; i < module->n_params; i++)
        tfm__free(module->params[i].name);
    tfm__free(module->params);
    if (module->storage_bytes)
        tfm__pages_free(module->storage, module->storage_bytes);
    else
        tfm__free(module->storage);
    tfm__free(module->grad_storage);
    tfm__tape_free(module);
    tfm__free(module);
}

void tfm_module_free(tfm_module *module)
{
    if (!module || module->owner)
        return;         /* a part of another module: freed with it */
    /* With dependents left, the last one's release destroys it. */
    if (tfm__lifetime_close(&module->life))
        destroy(module);
}

tfm_module_kind tfm_module_kind_of(const tfm_module *module)
{
    return module ? module->kind : (tfm_module_kind)0;
}

int64_t tfm_module_num_parameters(const tfm_module *module)
{
    int64_t total = 0;
    for (int i = 0; module && i < module->n_params; i++)
        total += module->params[i].numel;
    return total;
}

int tfm_module_parameter_count(const tfm_module *module)
{
    return module ? module->n_params : 0;
}

const char *tfm_module_parameter_name(const tfm_module *module, int index)
{
    if (!module || index < 0 || index >= module->n_params)
        return NULL;
    return module->params[index].name;
}

tfm_status tfm__module_find_param(const tfm_module *m, const char *name,
                                  const tfm__param **out)
{
    if (!m)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "module is NULL");
    if (!name)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "parameter name is NULL");
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) {
            *out = &m->params[i];
            return TFM_OK;
        }
    return tfm__fail(TFM_ERR_NOT_FOUND, "the module has no parameter \"%s\"",
                     name);
}

tfm_status tfm_module_parameter_shape(const tfm_module *module,
                                      const char *name, int *rank,
                                      int64_t *shape)
{
    const tfm__param *p = NULL;
    if (!rank || !shape)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "rank or shape is NULL");
    tfm_status st = tfm__module_find_param(module, name, &p);
    if (st != TFM_OK)
        return st;
    *rank = p->rank;
    memcpy(shape, p->shape, (size_t)p->rank * sizeof *shape);
    return TFM_OK;
}

tfm_status tfm_module_set_parameter(tfm_module *module, const char *name,
                                    const tfm_tensor *value)
{
    const tfm__param *p = NULL;
    tfm_status st = tfm__module_find_param(module, name, &p);
    if (st != TFM_OK)
        return st;
    if (!value)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "value for \"%s\" is NULL",
                         name);
    if ((st = tfm__check_shape(value, name, p->rank, p->shape)) != TFM_OK)
        return st;
    for (int64_t i = 0; i < p->numel; i++)
        if (!isfinite(value->data[i]))
            return tfm__fail(TFM_ERR_NON_FINITE,
                             "%s has a non-finite value at element %lld",
                             name, (long long)i);
    return tfm__param_write(p, value->data);
}

tfm_status tfm_module_get_parameter(const tfm_module *module,
                                    const char *name, tfm_tensor *out)
{
    const tfm__param *p = NULL;
    tfm_status st = tfm__module_find_param(module, name, &p);
    if (st != TFM_OK)
        return st;
    if ((st = tfm__check_shape(out, "out", p->rank, p->shape)) != TFM_OK)
        return st;
    tfm__param_read(p, out->data);
    return TFM_OK;
}

int tfm_module_child_count(const tfm_module *module)
{
    return module ? module->n_children : 0;
}

const char *tfm_module_child_name(const tfm_module *module, int index)
{
    if (!module || index < 0 || index >= module->n_children)
        return NULL;
    return module->children[index].name;
}

tfm_status tfm_module_child(tfm_module *module, const char *name,
                            tfm_module **child)
{
    if (!module || !name || !child)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "module, name or child is NULL");
    const char *rest = name;
    tfm_module *m = module;
    while (*rest) {
        const tfm__child *found = NULL;
        size_t len = 0;
        /* The longest child name that is rest or a dotted prefix of it
         * ("layers.1" before "layers" in "layers.1.norm1"). */
        for (int i = 0; i < m->n_children; i++) {
            size_t n = strlen(m->children[i].name);
            if (n > len && strncmp(rest, m->children[i].name, n) == 0 &&
                (rest[n] == '\0' || rest[n] == '.')) {
                found = &m->children[i];
                len = n;
            }
        }
        if (!found)
            return tfm__fail(TFM_ERR_NOT_FOUND,
                             "the module has no sub-module \"%s\"", name);
        m = found->module;
        rest += len + (rest[len] == '.');
        if (rest[-1] == '.' && *rest == '\0')
            return tfm__fail(TFM_ERR_NOT_FOUND,
                             "the module has no sub-module \"%s\"", name);
    }
    if (m == module)
        return tfm__fail(TFM_ERR_NOT_FOUND,
                         "the module has no sub-module \"%s\"", name);
    *child = m;
    return TFM_OK;
}

tfm_status tfm_module_forward_macs(const tfm_module *module, int64_t batch,
                                   int64_t tgt_len, int64_t src_len,
                                   int64_t *macs)
{
    if (!module || !macs)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "module or macs is NULL");
    if (batch < 1 || tgt_len < 1 || src_len < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "batch, tgt_len and src_len must be at least 1");
    int64_t total = 0;
    tfm_status st = module->ops->macs(module, batch, tgt_len, src_len, &total);
    if (st != TFM_OK)
        return st;
    *macs = total;
    return TFM_OK;
}
