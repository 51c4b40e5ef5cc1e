/* Checkpoint directories in the Hugging Face hub layout (model.h:
 * tfm_model_load on a directory): the table of checkpoint families and the
 * loader that drives them.
 *
 * A directory holds config.json (the model's configuration, as
 * transformers' PretrainedConfig.save_pretrained writes it) and its
 * weights: model.safetensors, or shards named by the "weight_map" of
 * model.safetensors.index.json.  Loading:
 *   1. config.json is read (cJSON) and checked by its model_type's family;
 *      keys transformers gives a default take transformers' default when
 *      absent (hub_config.c);
 *   2. every shard is opened (mapped, headers validated; hub_shards.c) and
 *      each tensor the configuration needs is found with its stored shape
 *      and a float dtype, and no tensor is left over: all before the model
 *      is allocated (hub_plan.c);
 *   3. the model is created, then shard by shard each tensor is converted
 *      (F32, F16, BF16, F64 -> float32) straight into the parameter it
 *      becomes, transposed where the layouts differ, and the shard is
 *      closed before the next is touched.
 * So the weights are never held twice: peak memory is the float32 model
 * plus the pages of the one shard being read.
 *
 * Each family is a file holding its config reader, plan, ignored names and
 * its tfm__hub_family row (hub_family.h): gpt2.c (GPT-2), llama.c (Llama),
 * bert.c (BERT), marian.c (Marian), vit.c (ViT).  What a family needs
 * beyond those (Marian's position table) it does through the row's hooks,
 * called here at fixed points. */
#include <stdio.h>
#include <string.h>

#include <cJSON.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/hub/hub_family.h"
#include "formats/hub/hub_model.h"
#include "models/model_impl.h"
#include "transformer/model.h"

/* The checkpoint families read, in the order the refusal of another
 * model_type lists them. */
static const tfm__hub_family *const FAMILIES[] = {
    &tfm__hub_gpt2, &tfm__hub_llama, &tfm__hub_bert, &tfm__hub_marian,
    &tfm__hub_vit,
};

#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

/* The family of model_type, or NULL. */
static const tfm__hub_family *family_of(const char *type)
{
    for (size_t k = 0; k < N_FAMILIES; k++)
        if (strcmp(type, FAMILIES[k]->model_type) == 0)
            return FAMILIES[k];
    return NULL;
}

/* The families' model_types as the refusal names them, into buf (size
 * bytes): "gpt2", "llama", ... and "vit". */
static void family_names(char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < N_FAMILIES; k++) {
        const char *sep = k == 0 ? "" : k + 1 < N_FAMILIES ? ", " : " and ";
        const int w = snprintf(buf + n, size - n, "%s\"%s\"", sep,
                               FAMILIES[k]->model_type);
        if (w < 0 || (size_t)w >= size - n)
            return;
        n += (size_t)w;
    }
}

tfm_status tfm__hub_model_load(const char *dir, int keep_dtype,
                               int map_in_place, tfm_module **out)
{
    cJSON *config = NULL, *index = NULL;
    tfm__hub_shards s = { 0 };
    tfm__hub_plan p = { 0 };
    tfm_module *model = NULL;
    tfm_model_config c;
    tfm_model_options o;
    tfm_layer_options lo;
    tfm_model_options_init(&o);
    tfm_layer_options_init(&lo);
    const char *type = NULL;
    const tfm__hub_family *fam = NULL;
    tfm_status st = tfm__hub_read_json(dir, "config.json", &config);
    if (st == TFM_OK &&
        (st = tfm__hub_cfg_string(config, "model_type", &type)) == TFM_OK &&
        !type)
        st = tfm__fail(TFM_ERR_FORMAT,
                       "%.200s/config.json has no \"model_type\"", dir);
    if (st == TFM_OK) {
        fam = family_of(type);
        if (fam) {
            st = fam->config(config, &c, &o, &lo);
        } else {
            char names[256];
            family_names(names, sizeof names);
            st = tfm__fail(TFM_ERR_UNSUPPORTED,
                           "config.json \"model_type\" is \"%.60s\": this "
                           "library reads %s checkpoints", type, names);
        }
    }
    if (st == TFM_OK) /* the configuration's own contradictions, named */
        st = tfm__model_config_check(&c, &o);
    /* The plan's layer count: an encoder-decoder's larger stack (named
     * by its own key in the messages). */
    int64_t layers = 0;
    const char *layers_key = fam ? fam->layers_key : NULL;
    if (st == TFM_OK) {
        layers = c.n_layers;
        if (c.architecture == TFM_ARCH_ENCODER_DECODER) {
            const int dec = c.n_decoder_layers > c.n_encoder_layers;
            layers = dec ? c.n_decoder_layers : c.n_encoder_layers;
            if (dec)
                layers_key = fam->decoder_layers_key;
        }
    }
    if (st == TFM_OK && layers > (INT32_MAX - fam->outside) / fam->per_layer)
        st = tfm__fail(TFM_ERR_FORMAT, "config.json \"%s\" %lld is too "
                       "large", layers_key, (long long)layers);
    if (st == TFM_OK &&
        (st = tfm__hub_shards_list(dir, &s, &index)) == TFM_OK &&
        (st = tfm__hub_shards_open(dir, &s)) == TFM_OK)
        st = tfm__hub_shards_check_index(&s, index);
    if (st == TFM_OK) {
        /* More layers than the shards hold tensors is refused before the
         * plan (per_layer tensors a layer, about 400 bytes each) is
         * allocated, so the plan is never larger than per_layer times the
         * tensor count; a closer miss is named by its first missing tensor
         * (tfm__hub_plan_find). */
        int64_t stored = 0;
        for (int f = 0; f < s.n; f++)
            stored += tfm_safetensors_count(s.files[f]);
        if (layers > stored)
            st = tfm__fail(TFM_ERR_FORMAT,
                           "config.json \"%s\" %lld needs %lld tensors "
                           "or more, but the checkpoint holds %lld",
                           layers_key, (long long)layers,
                           (long long)(fam->per_layer * layers + 2),
                           (long long)stored);
    }
    if (st == TFM_OK) {
        p.cap = (int)(fam->per_layer * layers + fam->outside);
        p.n_layer = layers;
        p.t = tfm__calloc((size_t)p.cap, sizeof *p.t);
        if (!p.t)
            st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st == TFM_OK) {
        p.prefix = tfm__hub_shards_any_prefixed(&s, fam->prefix) ? fam->prefix
                                                                  : "";
        if (fam->before_plan)
            fam->before_plan(&p, &s);
        if ((st = fam->plan(&c, &o, &lo, &p)) == TFM_OK &&
            (st = tfm__hub_plan_find(&p, &s)) == TFM_OK)
            st = tfm__hub_plan_no_extra(&p, &s, fam->ignored);
        if (st == TFM_OK && fam->check_ignored)
            st = fam->check_ignored(&p, &s, &c);
    }
    if (st == TFM_OK && p.computed) {
        /* A parameter computed rather than read (Marian's sinusoidal
         * table, [max_position_embeddings, d]) is sized by config.json
         * alone: it may not exceed the weights the checkpoint holds, so
         * that a small directory cannot ask for a huge allocation. */
        const int64_t stored = tfm__hub_plan_stored_numel(&p);
        if (p.computed_numel > stored)
            st = tfm__fail(TFM_ERR_FORMAT,
                           "config.json asks for a computed parameter "
                           "\"%s\" of %lld values, more than the %lld "
                           "values of all the checkpoint's weights (is "
                           "max_position_embeddings right?)", p.computed,
                           (long long)p.computed_numel, (long long)stored);
    }
    if (st == TFM_OK &&
        (st = tfm_model_create_v2(&c, &o, &lo, &model)) == TFM_OK &&
        (st = tfm__hub_plan_covers(&p, model)) == TFM_OK)
        st = tfm__hub_plan_load(&p, &s, keep_dtype, map_in_place, model);
    if (st == TFM_OK && p.computed)
        fam->compute(&p, model);
    tfm__hub_shards_close(&s);
    tfm__free(p.t);
    cJSON_Delete(index);
    cJSON_Delete(config);
    if (st != TFM_OK) {
        tfm_module_free(model);
        return st;
    }
    *out = model;
    return TFM_OK;
}
