/* Layer configuration (layers.h: tfm_layer_config): its defaults and its
 * validation, shared by every layer, stack and model constructor. */
#include <math.h>
#include <string.h>

#include "kernels/activation.h"
#include "base/error.h"
#include "base/self_sized.h"
#include "blocks/layer_config.h"

tfm_status tfm__layer_config_check(const tfm_layer_config *c)
{
    if (!c)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "config is NULL");
    if (c->d_model < 1 || c->n_heads < 1 || c->d_ff < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "d_model (%lld), n_heads (%lld) and d_ff (%lld) must "
                         "be at least 1", (long long)c->d_model,
                         (long long)c->n_heads, (long long)c->d_ff);
    if (c->d_model % c->n_heads != 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_heads (%lld) does not divide d_model (%lld)",
                         (long long)c->n_heads, (long long)c->d_model);
    if (!tfm__activation_valid(c->activation))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "unknown activation %d",
                         (int)c->activation);
    if (!(c->layer_norm_eps >= 0.0f) || !isfinite(c->layer_norm_eps))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "layer_norm_eps %g must be finite and >= 0",
                         (double)c->layer_norm_eps);
    return TFM_OK;
}

tfm_layer_config tfm_layer_config_default(int64_t d_model, int64_t n_heads)
{
    return (tfm_layer_config){ .d_model = d_model, .n_heads = n_heads,
                               .d_ff = 2048,
                               .activation = TFM_ACTIVATION_RELU,
                               .layer_norm_eps = 1e-5f, .norm_first = 0 };
}

void tfm_layer_options_init(tfm_layer_options *options)
{
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->bias = 1;
    options->final_norm = 1;
}

int tfm__layer_options_has_model_parts(const tfm_layer_options *o)
{
    return o->type_vocab_size != 0 || o->embedding_norm ||
           !o->final_norm || o->head_transform || o->head_bias ||
           o->patch_size != 0 || o->image_size != 0 || o->num_channels != 0;
}

tfm_status tfm__layer_options_no_model_parts(const tfm_layer_options *o,
                                             const char *what)
{
    if (!tfm__layer_options_has_model_parts(o))
        return TFM_OK;
    return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                     "%s takes no model parts: type_vocab_size, "
                     "embedding_norm, final_norm, head_transform and "
                     "head_bias (and patch_size, image_size, "
                     "num_channels) must keep their defaults (0, 0, 1, 0, 0) "
                     "in its tfm_layer_options", what);
}

unsigned tfm__layer_parts(const tfm_layer_options *o)
{
    return (o->bias ? TFM__PART_BIAS : 0u) |
           (o->rms_norm ? TFM__PART_RMS_NORM : 0u) |
           (o->gated ? TFM__PART_GATED : 0u);
}

tfm_status tfm__layer_options_read(const tfm_layer_options *pub,
                                   tfm_layer_options *out)
{
    tfm_layer_options_init(out);
    return tfm__self_sized_read(out, sizeof *out, pub, sizeof(size_t),
                                "tfm_layer_options_init");
}

tfm_status tfm__layer_options_for_block(const tfm_layer_options *options,
                                        const char *what, tfm_module **out,
                                        tfm_layer_options *o)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm_status st = tfm__layer_options_read(options, o);
    if (st == TFM_OK)
        st = tfm__layer_options_no_model_parts(o, what);
    return st;
}
