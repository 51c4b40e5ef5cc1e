/* The ViT checkpoint family of the hub loader (hub_family.h): its config
 * reader, plan and ignored names, and its row tfm__hub_vit.
 *
 * ViT (model_type "vit"; Dosovitskiy et al. 2021, transformers'
 * modeling_vit.py ViTForImageClassification) becomes an encoder-only,
 * pre-norm model of images (tfm_layer_options' patch_size): the patch
 * embedding (the Conv2d's weight as it is), the class token, learned
 * positions, a final norm and the classifier as the head with its bias:
 * vit_plan below gives the names. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "formats/hub/hub_family.h"

/* The model of a ViT config.json (transformers' ViTConfig defaults for
 * absent keys: hidden_size 768, num_hidden_layers 12, num_attention_heads
 * 12, intermediate_size 3072, hidden_act "gelu", layer_norm_eps 1e-12,
 * image_size 224, patch_size 16, num_channels 3, qkv_bias true; the label
 * count is that of "id2label", else "num_labels", else 2 as
 * PretrainedConfig's): an encoder-only, pre-norm model of images
 * (tfm_layer_options' patch_size, image_size, num_channels; Dosovitskiy
 * et al. 2021 and modeling_vit.py ViTForImageClassification) with learned
 * positions for the class token and the patches, a final norm and the
 * classifier as the head with its bias (vocab_size = the label count).
 * qkv_bias false, a hidden_act we lack and an image_size that is not a
 * multiple of patch_size are refused, named. */
static tfm_status vit_config(const cJSON *root, tfm_model_config *c,
                             tfm_model_options *o, tfm_layer_options *lo)
{
    int64_t d = 0, layers = 0, heads = 0, ff = 0, image = 0, patch = 0;
    int64_t channels = 0, labels = 0;
    double eps = 0.0;
    int qkv_bias = 1;
    const char *act_name;
    tfm_status st;
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root,
                                                             "id2label");
    if (id2label && !cJSON_IsNull(id2label) && !cJSON_IsObject(id2label))
        return tfm__fail(TFM_ERR_FORMAT, "config.json \"id2label\" must be "
                         "an object of label names");
    if ((st = tfm__hub_cfg_int(root, "hidden_size", 768, 1, &d)) ||
        (st = tfm__hub_cfg_int(root, "num_hidden_layers", 12, 1, &layers)) ||
        (st = tfm__hub_cfg_int(root, "num_attention_heads", 12, 1, &heads)) ||
        (st = tfm__hub_cfg_int(root, "intermediate_size", 3072, 1, &ff)) ||
        (st = tfm__hub_cfg_positive(root, "layer_norm_eps", 1e-12, &eps)) ||
        (st = tfm__hub_cfg_string(root, "hidden_act", &act_name)) ||
        (st = tfm__hub_cfg_square(root, "image_size", 224, &image)) ||
        (st = tfm__hub_cfg_square(root, "patch_size", 16, &patch)) ||
        (st = tfm__hub_cfg_int(root, "num_channels", 3, 1, &channels)) ||
        (st = tfm__hub_cfg_bool(root, "qkv_bias", 1, &qkv_bias)) ||
        (st = tfm__hub_cfg_int(root, "num_labels", 2, 1, &labels)))
        return st;
    if (id2label && cJSON_IsObject(id2label)) {
        /* the keys are the class ids 0 .. n-1, each once (transformers
         * turns them into ints; the classifier's rows are those ids) */
        labels = cJSON_GetArraySize(id2label);
        for (const cJSON *e = id2label->child; e; e = e->next) {
            char *end = NULL;
            errno = 0;
            const long long k = strtoll(e->string, &end, 10);
            if (!e->string[0] || *end || errno || k < 0 || k >= labels ||
                !(e->string[0] >= '0' && e->string[0] <= '9'))
                return tfm__fail(TFM_ERR_FORMAT,
                                 "config.json \"id2label\" key \"%.40s\" is "
                                 "not a class id 0 .. %lld", e->string,
                                 (long long)(labels - 1));
        }
    }
    if (labels < 1)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "config.json \"id2label\" is "
                         "empty: a ViT without a classifier (ViTModel) is "
                         "not supported, ViTForImageClassification is");
    if (d > INT32_MAX || ff > INT32_MAX || image > INT32_MAX ||
        channels > INT32_MAX || labels > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" is over 2^31-1",
                         d > INT32_MAX        ? "hidden_size"
                         : ff > INT32_MAX     ? "intermediate_size"
                         : image > INT32_MAX  ? "image_size"
                         : channels > INT32_MAX ? "num_channels"
                                                : "id2label");
    if ((st = tfm__hub_cfg_divides(heads, "num_attention_heads", d,
                                   "hidden_size")))
        return st;
    if (image % patch != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"image_size\" %lld is not a multiple "
                         "of \"patch_size\" %lld", (long long)image,
                         (long long)patch);
    if (patch > 46340 || channels * patch * patch > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT, "config.json \"patch_size\" %lld "
                         "is too large", (long long)patch);
    if (!qkv_bias)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"qkv_bias\": false is not supported "
                         "(query, key and value with biases are)");
    if ((st = tfm__hub_cfg_float32(eps, "layer_norm_eps")))
        return st;
    int act;
    if ((st = tfm__hub_cfg_activation(act_name, "gelu", "hidden_act",
                                      "gelu, gelu_new, gelu_pytorch_tanh, "
                                      "relu, silu", &act)))
        return st;
    const int64_t side = image / patch;
    tfm__hub_decoder_config(c, d, heads, ff, act, eps, labels, layers,
                            side * side + 1, TFM_POSITIONAL_LEARNED, 0);
    c->architecture = TFM_ARCH_ENCODER_ONLY;
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    lo->head_bias = 1;
    lo->patch_size = patch;
    lo->image_size = image;
    lo->num_channels = channels;
    return TFM_OK;
}

/* The stored tensors of ViT c (ViTForImageClassification's names: ViTModel
 * under "vit.", the classifier never prefixed):
 *   embeddings.cls_token [1, 1, d]            -> cls_token
 *   embeddings.position_embeddings [1, N+1, d] -> position_embedding.weight
 *   embeddings.patch_embeddings.projection.weight [d, C, P, P]
 *                                             -> patch_embedding.weight
 *   embeddings.patch_embeddings.projection.bias -> patch_embedding.bias
 *   encoder.layer.<i>.layernorm_before.*      -> norm1.*
 *   encoder.layer.<i>.attention.attention.query.* [d, d] \
 *   encoder.layer.<i>.attention.attention.key.*           > rows of
 *   encoder.layer.<i>.attention.attention.value.*        /  in_proj_*
 *   encoder.layer.<i>.attention.output.dense.* -> self_attn.out_proj.*
 *   encoder.layer.<i>.layernorm_after.*       -> norm2.*
 *   encoder.layer.<i>.intermediate.dense.* [ff, d] -> linear1.*
 *   encoder.layer.<i>.output.dense.* [d, ff]  -> linear2.*
 *   layernorm.*                               -> norm.*
 *   classifier.weight [labels, d], .bias      -> lm_head.weight, .bias
 * No transposes: nn.Linear's and nn.Conv2d's layouts are ours. */
static tfm_status vit_plan(const tfm_model_config *c,
                           const tfm_model_options *o,
                           const tfm_layer_options *lo, tfm__hub_plan *p)
{
    (void)o;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t P = lo->patch_size;
    const int64_t cls[3] = { 1, 1, d };
    const int64_t pos[3] = { 1, c->context_length, d };
    const int64_t conv[4] = { d, lo->num_channels, P, P };
    tfm_status st;
    if ((st = tfm__hub_plan_add_shape(p, "embeddings.cls_token", "cls_token",
                                      3, cls)) ||
        (st = tfm__hub_plan_add_shape(p, "embeddings.position_embeddings",
                                      "position_embedding.weight", 3, pos)) ||
        (st = tfm__hub_plan_add_shape(p,
                                      "embeddings.patch_embeddings.projection."
                                      "weight",
                                      "patch_embedding.weight", 4, conv)))
        return st;
    const tfm__hub_plan_row E[] = {
        { "embeddings.patch_embeddings.projection.bias",
          "patch_embedding.bias", 0, 1, d, 0, 0 },
        { "layernorm.weight", "norm.weight", 0, 1, d, 0, 0 },
        { "layernorm.bias", "norm.bias", 0, 1, d, 0, 0 },
    };
    st = tfm__hub_plan_add_rows(p, NULL, 0, E, TFM__HUB_N_ROWS(E));
    for (int64_t i = 0; st == TFM_OK && i < c->n_layers; i++) {
        const tfm__hub_plan_row N1[2] = {
            { "layernorm_before.weight", "norm1.weight", 0, 1, d, 0, 0 },
            { "layernorm_before.bias", "norm1.bias", 0, 1, d, 0, 0 },
        };
        const tfm__hub_plan_row N2[2] = {
            { "layernorm_after.weight", "norm2.weight", 0, 1, d, 0, 0 },
            { "layernorm_after.bias", "norm2.bias", 0, 1, d, 0, 0 },
        };
        st = tfm__hub_plan_add_bert_layer(p, i, "attention.attention.", d, ff,
                                          N1, N2, 1);
    }
    const tfm__hub_plan_row H[] = {
        { "classifier.weight", "lm_head.weight", 0, 2, c->vocab_size, d, 0 },
        { "classifier.bias", "lm_head.bias", 0, 1, c->vocab_size, 0, 0 },
    };
    if (st == TFM_OK)
        st = tfm__hub_plan_add_unprefixed(p, H, TFM__HUB_N_ROWS(H));
    return st;
}

/* What a ViT checkpoint may hold that the classifier does not use:
 * ViTModel's pooler (add_pooling_layer) and the mask token of
 * ViTForMaskedImageModeling's embeddings (use_mask_token). */
static int vit_ignored(const tfm__hub_plan *p, const char *name)
{
    const char *rest = tfm__hub_unprefixed(p, name);
    return rest && (strncmp(rest, "pooler.", 7) == 0 ||
                    strcmp(rest, "embeddings.mask_token") == 0);
}

/* ViTForImageClassification saves ViTModel's tensors under "vit."; a plan
 * entry per layer (16) and 8 outside. */
const tfm__hub_family tfm__hub_vit = {
    .model_type = "vit", .prefix = "vit.", .layers_key = "num_hidden_layers",
    .per_layer = 16, .outside = 8, .config = vit_config, .plan = vit_plan,
    .ignored = vit_ignored,
};
