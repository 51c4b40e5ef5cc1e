/* Checkpoints: a module's parameters from a safetensors file, by name
 * (module.h: tfm_module_load_safetensors). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "formats/checkpoint.h"
#include "base/error.h"
#include "nn/module_impl.h"
#include "nn/weight_bind.h"
#include "base/tensor_impl.h"

static int has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* "<prefix><name>" into buf; 0 when it does not fit. */
static int full_name(char *buf, size_t size, const char *prefix,
                     const char *name)
{
    int n = snprintf(buf, size, "%s%s", prefix, name);
    return n >= 0 && (size_t)n < size;
}

static tfm_status check_extra(const tfm_module *m, const tfm_safetensors *f,
                              const char *prefix)
{
    const size_t plen = strlen(prefix);
    for (int64_t i = 0; i < tfm_safetensors_count(f); i++) {
        const char *name = tfm_safetensors_name(f, i);
        int rank;
        int64_t shape[TFM_MAX_RANK];
        if (has_prefix(name, prefix) &&
            tfm_module_parameter_shape(m, name + plen, &rank, shape) != TFM_OK)
            return tfm__fail(TFM_ERR_FORMAT,
                             "the file has a tensor \"%s\" that the module "
                             "does not have", name);
    }
    return TFM_OK;
}

/* Reads parameter p of m as file tensor prefix + p->name into *out. */
static tfm_status read_one(const tfm__param *p, const tfm_safetensors *f,
                           const char *prefix, tfm_tensor **out)
{
    char name[512];
    int frank;
    int64_t fshape[TFM_SAFETENSORS_MAX_RANK];
    if (!full_name(name, sizeof name, prefix, p->name))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "prefix is too long");
    if (tfm_safetensors_info(f, name, NULL, &frank, fshape) != TFM_OK)
        return tfm__fail(TFM_ERR_FORMAT, "the file lacks the parameter \"%s\"",
                         name);
    if (frank != p->rank ||
        memcmp(fshape, p->shape, (size_t)p->rank * sizeof *fshape) != 0) {
        char want[96], got[96];
        tfm__format_shape(want, sizeof want, p->rank, p->shape);
        tfm__format_shape(got, sizeof got, frank, fshape);
        return tfm__fail(TFM_ERR_FORMAT,
                         "parameter \"%s\" has shape %s in the file, "
                         "expected %s", name, got, want);
    }
    tfm_status st = tfm_safetensors_read(f, name, out);
    if (st != TFM_OK)
        return st;
    for (int64_t i = 0; i < p->numel; i++)
        if (!isfinite((*out)->data[i])) {
            tfm_tensor_free(*out);
            *out = NULL;
            return tfm__fail(TFM_ERR_NON_FINITE,
                             "%s has a non-finite value at element %lld",
                             name, (long long)i);
        }
    return TFM_OK;
}

tfm_status tfm__load_parameters(tfm_module *m, const tfm_safetensors *f,
                                const char *prefix, int strict)
{
    tfm_status st = strict ? check_extra(m, f, prefix) : TFM_OK;
    if (st == TFM_OK)
        st = tfm__module_check_float(m, "tfm_module_load_safetensors");
    if (st != TFM_OK)
        return st;
    tfm_tensor **values = tfm__calloc((size_t)m->n_params, sizeof *values);
    if (!values)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                         "cannot allocate %d parameter slots", m->n_params);
    for (int i = 0; st == TFM_OK && i < m->n_params; i++)
        st = read_one(&m->params[i], f, prefix, &values[i]);
    /* Everything read and checked: now set, which cannot fail. */
    for (int i = 0; st == TFM_OK && i < m->n_params; i++)
        memcpy(m->params[i].data, values[i]->data,
               (size_t)m->params[i].numel * sizeof(float));
    for (int i = 0; i < m->n_params; i++)
        tfm_tensor_free(values[i]);
    tfm__free(values);
    return st;
}

tfm_status tfm_module_load_safetensors(tfm_module *module, const char *path,
                                       const char *prefix, int strict)
{
    if (!module || !path)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !module ? "module" : "path");
    tfm_safetensors *f = NULL;
    tfm_status st = tfm_safetensors_open(path, &f);
    if (st == TFM_OK)
        st = tfm__load_parameters(module, f, prefix ? prefix : "", strict);
    tfm_safetensors_close(f);
    return st;
}
