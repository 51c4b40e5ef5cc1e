/* Model-file parameters in their stored types (model_file_weights.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/mapping.h"
#include "formats/model_file_weights.h"
#include "formats/safetensors_impl.h"
#include "kernels/quant.h"
#include "kernels/weight_store.h"
#include "nn/weight_bind.h"
#include "transformer/names.h"
#include "transformer/weights.h"

/* The block type the metadata gives tensor name: TFM_DTYPE_Q8_0 / Q4_0,
 * -1 when none, -2 when the key names something else. */
static int block_dtype(const tfm_safetensors *f, const char *name)
{
    char key[600];
    if (snprintf(key, sizeof key, TFM__DTYPE_KEY "%s", name) >=
        (int)sizeof key)
        return -2;
    const char *v = tfm_safetensors_metadata(f, key);
    if (!v)
        return -1;
    return strcmp(v, "Q8_0") == 0   ? TFM_DTYPE_Q8_0
           : strcmp(v, "Q4_0") == 0 ? TFM_DTYPE_Q4_0
                                    : -2;
}

int tfm__model_file_has_blocks(const tfm_safetensors *f)
{
    const int64_t n = tfm_safetensors_metadata_count(f);
    for (int64_t i = 0; i < n; i++)
        if (strncmp(tfm_safetensors_metadata_key(f, i), TFM__DTYPE_KEY,
                    sizeof TFM__DTYPE_KEY - 1) == 0)
            return 1;
    return 0;
}

tfm_status tfm__model_file_tensor_shape(const tfm_safetensors *f,
                                        const char *name, int *rank,
                                        int64_t *shape)
{
    tfm_dtype dt;
    tfm_status st = tfm_safetensors_info(f, name, &dt, rank, shape);
    if (st != TFM_OK)
        return st;
    const int bd = block_dtype(f, name);
    if (bd == -1)
        return TFM_OK;
    const int64_t block = bd == TFM_DTYPE_Q8_0 ? 34 : 18;
    if (bd == -2 || dt != TFM_DTYPE_U8 || *rank != 2 ||
        shape[1] % block != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor \"%s\": its " TFM__DTYPE_KEY " key does not "
                         "name Q8_0 or Q4_0 blocks of a U8 [rows, bytes] "
                         "tensor",
                         name);
    shape[1] = shape[1] / block * TFM__QK;
    return TFM_OK;
}

tfm_status tfm__model_file_add_params(tfm_safetensors_writer *w,
                                      const tfm_module *model)
{
    tfm_status st = TFM_OK;
    for (int i = 0; st == TFM_OK && i < model->n_params; i++) {
        const tfm__param *p = &model->params[i];
        const int dt = tfm__param_dtype(p);
        tfm__wview v;
        int64_t col = 0;
        if ((dt == TFM_DTYPE_Q8_0 || dt == TFM_DTYPE_Q4_0) &&
            tfm__weight_store_find(p->data, &v, &col)) {
            char key[600];
            snprintf(key, sizeof key, TFM__DTYPE_KEY "%s", p->name);
            st = tfm__safetensors_writer_add_bytes(w, p->name, v.rows,
                                                   v.row_bytes, v.data);
            if (st == TFM_OK)
                st = tfm_safetensors_writer_set_metadata(
                    w, key, tfm_enum_name(TFM_ENUM_DTYPE, dt));
            continue;
        }
        /* Float types: the values widened (exact), stored as the type. */
        tfm_tensor *t = NULL;
        if ((st = tfm_tensor_create(p->rank, p->shape, &t)) != TFM_OK)
            break;
        tfm__param_read(p, tfm_tensor_data(t));
        st = tfm_safetensors_writer_add_as(
            w, p->name, t,
            dt == TFM_DTYPE_F16 || dt == TFM_DTYPE_BF16 ? (tfm_dtype)dt
                                                        : TFM_DTYPE_F32);
        tfm_tensor_free(t);
    }
    return st;
}

tfm_status tfm__model_file_load_params(tfm_module *model,
                                       const tfm_safetensors *f,
                                       int keep_dtype, int map_in_place)
{
    tfm__mapping *map = map_in_place ? tfm__safetensors_mapping(f) : NULL;
    if (tfm_safetensors_count(f) != model->n_params)
        return tfm__fail(TFM_ERR_FORMAT,
                         "the file holds %lld tensors for the model's %d "
                         "parameters",
                         (long long)tfm_safetensors_count(f),
                         model->n_params);
    tfm_status st = TFM_OK;
    for (int i = 0; st == TFM_OK && i < model->n_params; i++) {
        const tfm__param *p = &model->params[i];
        int rank = 0;
        int64_t shape[TFM_SAFETENSORS_MAX_RANK];
        if ((st = tfm__model_file_tensor_shape(f, p->name, &rank, shape)) !=
            TFM_OK) {
            if (st == TFM_ERR_NOT_FOUND)
                st = tfm__fail(TFM_ERR_FORMAT,
                               "the file lacks the parameter \"%s\"",
                               p->name);
            break;
        }
        if (rank != p->rank ||
            memcmp(shape, p->shape, (size_t)rank * sizeof *shape) != 0) {
            st = tfm__fail(TFM_ERR_FORMAT,
                           "parameter \"%s\" has another shape in the file",
                           p->name);
            break;
        }
        int dtype = -1;
        const void *bytes = NULL;
        uint64_t nbytes = 0;
        st = tfm__safetensors_raw(f, p->name, &dtype, &bytes, &nbytes);
        const int bd = block_dtype(f, p->name);
        if (st == TFM_OK && bd >= 0)
            dtype = bd;
        if (st == TFM_OK && dtype != TFM_DTYPE_F32 &&
            dtype != TFM_DTYPE_F16 && dtype != TFM_DTYPE_BF16 && bd < 0) {
            /* F64 and the like: read as float32 by the safetensors
             * reader. */
            tfm_tensor *t = NULL;
            st = tfm_safetensors_read(f, p->name, &t);
            for (int64_t e = 0; st == TFM_OK && e < p->numel; e++)
                if (!isfinite(tfm_tensor_data(t)[e]))
                    st = tfm__fail(TFM_ERR_NON_FINITE,
                                   "%s has a non-finite value", p->name);
            if (st == TFM_OK)
                st = tfm__module_bind_param(model, p->name, TFM_DTYPE_F32,
                                            tfm_tensor_data(t),
                                            (uint64_t)p->numel * 4,
                                            keep_dtype, NULL);
            tfm_tensor_free(t);
            continue;
        }
        /* In place only where the element type's alignment holds. */
        const int aligned = ((uintptr_t)bytes % 4) == 0;
        if (st == TFM_OK)
            st = tfm__module_bind_param(model, p->name, dtype, bytes, nbytes,
                                        keep_dtype, aligned ? map : NULL);
    }
    return st;
}
