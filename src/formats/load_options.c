/* tfm_model_load_v2 and its options (transformer/weights.h). */
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/self_sized.h"
#include "formats/load_options.h"
#include "kernels/quant.h"
#include "transformer/model.h"
#include "transformer/weights.h"

void tfm_load_options_init(tfm_load_options *options)
{
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->dtype = TFM_DTYPE_F32;
    options->mmap = 1;
}

tfm_status tfm__load_options_read(const tfm_load_options *options,
                                  tfm_load_options *o)
{
    tfm_load_options_init(o);
    if (!options)
        return TFM_OK;
    if (options->struct_size < offsetof(tfm_load_options, dtype) +
                                   sizeof options->dtype ||
        options->struct_size > sizeof *o)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_model_load_v2: options->struct_size %zu is "
                         "not a size of tfm_load_options (initialise it "
                         "with tfm_load_options_init)",
                         options->struct_size);
    memcpy(o, options, options->struct_size);
    o->struct_size = sizeof *o;
    if (o->dtype != TFM_LOAD_DTYPE_AUTO && !tfm__dtype_is_weight(o->dtype))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_model_load_v2: dtype %d is not "
                         "TFM_LOAD_DTYPE_AUTO, F32, BF16, F16, Q8_0 or Q4_0",
                         o->dtype);
    return TFM_OK;
}
