/* The shared config.json readers of the hub loader (hub_family.h): a key
 * as a whole number, a square size, a positive number, a bool or a string,
 * with transformers' default when absent; transformers' activation names;
 * the decoder-only configuration every family starts from. */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "formats/hub/hub_family.h"

/* config.json's key (absent or null: def) as a whole number >= min. */
tfm_status tfm__hub_cfg_int(const cJSON *root, const char *key, int64_t def,
                            int64_t min, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return TFM_OK;
    }
    const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(x >= (double)min && x <= 9007199254740991.0 && x == floor(x)))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" must be a whole number >= %lld",
                         key, (long long)min);
    *out = (int64_t)x;
    return TFM_OK;
}

/* config.json's key that ViT's config takes as an int or a pair
 * (height, width), as a whole number >= 1 (absent or null: def): a pair
 * of two equal numbers is that number; a non-square pair is refused
 * (TFM_ERR_UNSUPPORTED). */
tfm_status tfm__hub_cfg_square(const cJSON *root, const char *key, int64_t def,
                               int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(v))
        return tfm__hub_cfg_int(root, key, def, 1, out);
    const cJSON *h = cJSON_GetArrayItem(v, 0), *w = cJSON_GetArrayItem(v, 1);
    const double y = cJSON_IsNumber(h) ? h->valuedouble : NAN;
    const double x = cJSON_IsNumber(w) ? w->valuedouble : NAN;
    if (cJSON_GetArraySize(v) != 2 || !(y >= 1 && y <= 9007199254740991.0 &&
                                        y == floor(y)) ||
        !(x >= 1 && x <= 9007199254740991.0 && x == floor(x)))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" must be a whole number >= 1 or "
                         "a pair of them (height, width)", key);
    if (x != y)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\" is [%.0f, %.0f]: only square "
                         "images and patches are supported", key, y, x);
    *out = (int64_t)x;
    return TFM_OK;
}

/* config.json's key (absent: def) as a finite number > 0. */
tfm_status tfm__hub_cfg_positive(const cJSON *root, const char *key,
                                 double def, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) {
        *out = def;
        return TFM_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        !(v->valuedouble > 0))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" must be a number > 0", key);
    *out = v->valuedouble;
    return TFM_OK;
}

/* config.json's key (absent: def) as true / false. */
tfm_status tfm__hub_cfg_bool(const cJSON *root, const char *key, int def,
                             int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) {
        *out = def;
        return TFM_OK;
    }
    if (!cJSON_IsBool(v))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" must be true or false", key);
    *out = cJSON_IsTrue(v);
    return TFM_OK;
}

/* config.json's key as a string, or NULL (absent). */
tfm_status tfm__hub_cfg_string(const cJSON *root, const char *key,
                               const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = NULL;
    if (!v)
        return TFM_OK;
    if (!cJSON_IsString(v))
        return tfm__fail(TFM_ERR_FORMAT, "config.json \"%s\" must be a string",
                         key);
    *out = v->valuestring;
    return TFM_OK;
}

/* key's value x is finite as a float32, else a failure naming it. */
tfm_status tfm__hub_cfg_float32(double x, const char *key)
{
    if (!isfinite((float)x))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" %g is beyond float32", key, x);
    return TFM_OK;
}

/* a_key's value a divides b_key's value b, else a failure naming both. */
tfm_status tfm__hub_cfg_divides(int64_t a, const char *a_key, int64_t b,
                                const char *b_key)
{
    if (b % a != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" %lld does not divide \"%s\" "
                         "%lld", a_key, (long long)a, b_key, (long long)b);
    return TFM_OK;
}

/* transformers' ACT2FN names -> our activations; -1 when unsupported. */
int tfm__hub_activation(const char *name)
{
    if (!name || strcmp(name, "gelu_new") == 0 ||
        strcmp(name, "gelu_pytorch_tanh") == 0 ||
        strcmp(name, "gelu_fast") == 0)
        return TFM_ACTIVATION_GELU_TANH; /* 0.5x(1+tanh(√(2/π)(x+0.044715x³))) */
    if (strcmp(name, "gelu") == 0)
        return TFM_ACTIVATION_GELU;
    if (strcmp(name, "relu") == 0)
        return TFM_ACTIVATION_RELU;
    if (strcmp(name, "silu") == 0 || strcmp(name, "swish") == 0)
        return TFM_ACTIVATION_SILU;
    return -1;
}

/* The activation act_name names (NULL: fallback) into *act, or a failure
 * naming key, the value and the supported names. */
tfm_status tfm__hub_cfg_activation(const char *act_name, const char *fallback,
                                   const char *key, const char *supported,
                                   int *act)
{
    *act = tfm__hub_activation(act_name ? act_name : fallback);
    if (*act < 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\" \"%.60s\" is not supported "
                         "(%s are)", key, act_name, supported);
    return TFM_OK;
}

/* The pre-norm decoder-only model both hub families become (GPT-2 with
 * learned positions, Llama with none): c from the checked config.json
 * values. */
void tfm__hub_decoder_config(tfm_model_config *c, int64_t d, int64_t heads,
                             int64_t d_ff, int act, double eps, int64_t vocab,
                             int64_t layers, int64_t positions,
                             tfm_positional positional, int tied)
{
    memset(c, 0, sizeof *c);
    c->architecture = TFM_ARCH_DECODER_ONLY;
    c->layer = tfm_layer_config_default(d, heads);
    c->layer.d_ff = d_ff;
    c->layer.activation = (tfm_activation)act;
    c->layer.layer_norm_eps = (float)eps;
    c->layer.norm_first = 1;
    c->vocab_size = vocab;
    c->n_layers = layers;
    c->context_length = positions;
    c->positional = positional;
    c->tied_embeddings = tied;
}
