/* Whole models: their construction and options (model.h): decoder-only,
 * encoder-only, encoder-decoder and image models built under their module
 * names, the options and configuration checked, read and returned.
 *
 * A model is token embeddings [V, d] (+ learned or sinusoidal positions),
 * then blocks, then a head:
 *   decoder-only / encoder-only: one stack of encoder layers with a final
 *     LayerNorm (GPT / BERT blocks; decoder-only runs it under a causal
 *     mask, and over a KV cache in kv_cache.c);
 *   encoder-decoder: Vaswani et al.'s encoder and decoder stacks, the
 *     source through the encoder, the target through the decoder over the
 *     encoder's memory;
 * and the logits are h lm_head^T, lm_head [V, d] (the token embedding when
 * tied).  The forward is model_forward.c, the backward model_backward.c,
 * the image model's (ViT) calls model_image.c, generation generate.c, the
 * file format model_file.c. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "base/alloc.h"
#include "attention/attention_config.h"
#include "base/error.h"
#include "blocks/layer_config.h"
#include "models/model_impl.h"
#include "nn/patch_embedding.h"


#define SINUSOIDAL_BASE 10000.0

/* Bytes of tfm_model_options a caller must provide: struct_size and
 * positional_base. */
#define OPTIONS_MIN_SIZE                                                      \
    (offsetof(tfm_model_options, positional_base) + sizeof(double))

static void model_destroy(tfm_module *mod)
{
    tfm__model *m = (tfm__model *)mod;
    tfm_module_free(m->token_embedding ? &m->token_embedding->base : NULL);
    tfm_module_free(m->position_embedding ? &m->position_embedding->base
                                          : NULL);
    tfm_module_free(m->stack ? &m->stack->base : NULL);
    tfm_module_free(m->encoder ? &m->encoder->base : NULL);
    tfm_module_free(m->decoder ? &m->decoder->base : NULL);
    tfm_module_free(m->token_type_embedding ? &m->token_type_embedding->base
                                            : NULL);
    tfm_module_free(m->embedding_norm ? &m->embedding_norm->base : NULL);
    tfm_module_free(m->head_norm ? &m->head_norm->base : NULL);
    tfm_module_free(m->patch_embedding ? &m->patch_embedding->base : NULL);
}

/* Multiply-accumulates of one forward pass: the blocks' for batch B, L
 * target and S source positions, plus the head's B * L * d * V. */
static tfm_status model_macs(const tfm_module *mod, int64_t B, int64_t L,
                             int64_t S, int64_t *acc)
{
    const tfm__model *m = (const tfm__model *)mod;
    const tfm_model_config *c = &m->config;
    tfm_status st;
    if (c->architecture == TFM_ARCH_ENCODER_DECODER) {
        if ((st = tfm__stack_macs(m->encoder, B, S, S, acc)) ||
            (st = tfm__stack_macs(m->decoder, B, L, S, acc)))
            return st;
    } else if ((st = tfm__stack_macs(m->stack, B, L, L, acc))) {
        return st;
    }
    if (m->patch_embedding) { /* an image model: the patches (L - 1 of
                               * them) in, the class token's row out */
        const tfm__patch_embedding *pe = m->patch_embedding;
        const int64_t k = pe->in_channels * pe->patch_size * pe->patch_size;
        if (!tfm__macs_add(acc, B, L - 1, k, c->layer.d_model) ||
            !tfm__macs_add(acc, B, 1, c->layer.d_model, c->vocab_size))
            return tfm__fail(TFM_ERR_OVERFLOW, "MAC count overflows int64");
        return TFM_OK;
    }
    if ((m->head_transform &&
         !tfm__macs_add(acc, B, L, c->layer.d_model, c->layer.d_model)) ||
        !tfm__macs_add(acc, B, L, c->layer.d_model, c->vocab_size))
        return tfm__fail(TFM_ERR_OVERFLOW, "MAC count overflows int64");
    return TFM_OK;
}

static const tfm__module_ops model_ops = { model_destroy, model_macs };

/* The module kind tagging a model of architecture a. */
static tfm_module_kind kind_of(tfm_architecture a)
{
    return a == TFM_ARCH_DECODER_ONLY   ? TFM_MODULE_DECODER_ONLY
           : a == TFM_ARCH_ENCODER_ONLY ? TFM_MODULE_ENCODER_ONLY
                                        : TFM_MODULE_ENCODER_DECODER;
}

void tfm_model_options_init(tfm_model_options *options)
{
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->positional_base = SINUSOIDAL_BASE;
    tfm_attention_config_init(&options->attention);
}

/* The error of a struct_size too small for the first two fields. */
static tfm_status options_size_error(size_t struct_size)
{
    return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                     "options->struct_size (%zu) is smaller than the %zu "
                     "bytes of its first two fields; set it with "
                     "tfm_model_options_init", struct_size,
                     (size_t)OPTIONS_MIN_SIZE);
}

tfm_status tfm__model_options_read(const tfm_model_options *pub,
                                   tfm_model_options *out)
{
    tfm_model_options o;
    tfm_model_options_init(&o);
    if (pub) {
        if (pub->struct_size < OPTIONS_MIN_SIZE)
            return options_size_error(pub->struct_size);
        o.positional_base = pub->positional_base;
        /* The attention config is last: as many of its bytes as the
         * caller's struct_size covers (its own struct_size is ignored),
         * read as tfm_attention_config_read would, so that fields of a
         * newer library take their defaults. */
        const size_t at = offsetof(tfm_model_options, attention);
        const size_t need = offsetof(tfm_attention_config, score) +
                            sizeof(tfm_score);
        if (pub->struct_size >= at + need) {
            size_t n = pub->struct_size - at;
            tfm_attention_config a = o.attention;
            n = n < sizeof a ? n : sizeof a;
            memcpy(&a, &pub->attention, n);
            a.struct_size = n;
            tfm_status st = tfm__attention_config_read(&a, &o.attention);
            if (st != TFM_OK)
                return st;
        }
    }
    if (o.positional_base == 0.0)
        o.positional_base = SINUSOIDAL_BASE;
    *out = o;
    return TFM_OK;
}

int64_t tfm__model_kv_dim(const tfm_model_config *c,
                          const tfm_model_options *o)
{
    const int64_t h = c->layer.n_heads;
    const int64_t kv = o->attention.n_kv_heads ? o->attention.n_kv_heads : h;
    return kv * (c->layer.d_model / h);
}

tfm_status tfm__model_config_check(const tfm_model_config *c,
                                   const tfm_model_options *o)
{
    if (!c)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "config is NULL");
    if (c->architecture != TFM_ARCH_DECODER_ONLY &&
        c->architecture != TFM_ARCH_ENCODER_ONLY &&
        c->architecture != TFM_ARCH_ENCODER_DECODER)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "unknown architecture %d",
                         (int)c->architecture);
    /* The enums, then the sizes, then the layer and attention configs. */
    if (c->positional != TFM_POSITIONAL_NONE &&
        c->positional != TFM_POSITIONAL_LEARNED &&
        c->positional != TFM_POSITIONAL_SINUSOIDAL &&
        c->positional != TFM_POSITIONAL_SINUSOIDAL_CONCAT)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "unknown positional encoding %d", (int)c->positional);
    if (c->vocab_size < 1 || c->vocab_size > INT32_MAX)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "vocab_size %lld must be between 1 and 2^31-1",
                         (long long)c->vocab_size);
    if (c->context_length < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "context_length %lld must be at least 1",
                         (long long)c->context_length);
    if (!isfinite(o->positional_base) || o->positional_base <= 1.0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "positional_base %g must be finite and greater "
                         "than 1", o->positional_base);
    tfm_status st = tfm__layer_config_check(&c->layer);
    if (st != TFM_OK)
        return st;
    if (c->positional == TFM_POSITIONAL_SINUSOIDAL_CONCAT &&
        (st = tfm__sinusoidal_layout_check(TFM_SINUSOIDAL_CONCAT,
                                           c->layer.d_model)))
        return st;
    if (c->architecture == TFM_ARCH_ENCODER_DECODER &&
        !tfm__attention_config_is_default(&o->attention))
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "encoder-decoder models take only plain scaled "
                         "dot-product attention");
    const int64_t d_k = c->layer.d_model / c->layer.n_heads;
    return tfm__attention_config_check(&o->attention, c->layer.n_heads, d_k,
                                       d_k);
}

/* ViT's parts of tfm_layer_options (patch_size, image_size,
 * num_channels): all 0, or an encoder-only model with learned positions
 * for the class token and the patches, its own head and none of BERT's
 * token parts (message set). */
static tfm_status image_parts_check(const tfm_model_config *c,
                                    const tfm_layer_options *lo)
{
    if (lo->patch_size == 0 && lo->image_size == 0 && lo->num_channels == 0)
        return TFM_OK;
    if (c->architecture != TFM_ARCH_ENCODER_ONLY)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "patch_size, image_size and num_channels (an image "
                         "model) need an encoder-only architecture");
    if (lo->patch_size < 1 || lo->num_channels < 1 || lo->image_size < 1 ||
        lo->image_size % lo->patch_size != 0 || lo->image_size > INT32_MAX)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "an image model needs patch_size (%lld) >= 1, "
                         "num_channels (%lld) >= 1 and image_size (%lld) a "
                         "positive multiple of patch_size",
                         (long long)lo->patch_size,
                         (long long)lo->num_channels,
                         (long long)lo->image_size);
    const int64_t side = lo->image_size / lo->patch_size;
    if (c->positional != TFM_POSITIONAL_LEARNED ||
        c->context_length != side * side + 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "an image model has learned positions for its class "
                         "token and %lld patches: positional must be "
                         "learned and context_length %lld (it is %lld)",
                         (long long)(side * side), (long long)(side * side + 1),
                         (long long)c->context_length);
    if (c->tied_embeddings || c->embedding_scale || lo->type_vocab_size ||
        lo->embedding_norm || lo->head_transform)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "an image model has no token table: "
                         "tied_embeddings, embedding_scale, type_vocab_size, "
                         "embedding_norm and head_transform must be 0");
    return TFM_OK;
}

/* The model parts of tfm_layer_options: BERT's for one-stack models only
 * (an encoder-decoder model takes final_norm and head_bias, Marian's), a
 * type_vocab_size of 0 .. 2^31-1 (message set). */
static tfm_status model_parts_check(const tfm_model_config *c,
                                    const tfm_layer_options *lo)
{
    if (!tfm__layer_options_has_model_parts(lo))
        return TFM_OK;
    if (c->architecture == TFM_ARCH_ENCODER_DECODER &&
        (lo->type_vocab_size != 0 || lo->embedding_norm ||
         lo->head_transform))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "an encoder-decoder model takes no "
                         "type_vocab_size, embedding_norm or head_transform "
                         "(they must keep their defaults 0, 0, 0 in its "
                         "tfm_layer_options; final_norm and head_bias it "
                         "takes)");
    if (lo->type_vocab_size < 0 || lo->type_vocab_size > INT32_MAX)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "type_vocab_size %lld must be between 0 and 2^31-1",
                         (long long)lo->type_vocab_size);
    return image_parts_check(c, lo);
}

tfm_status tfm_model_create(const tfm_model_config *config, tfm_module **out)
{
    return tfm_model_create_ex(config, NULL, out);
}

/* Builds the modules under their PyTorch-style prefixes:
 * "token_embedding.", "position_embedding." (learned only), the blocks
 * ("layers.<i>." and "norm." at the top level for the one-stack models;
 * "transformer.encoder." and "transformer.decoder." otherwise) and
 * "lm_head.weight" unless tied. */
tfm_status tfm_model_create_ex(const tfm_model_config *config,
                               const tfm_model_options *options,
                               tfm_module **out)
{
    return tfm_model_create_v2(config, options, NULL, out);
}

int tfm_model_has_bias(const tfm_module *model)
{
    if (!model || (model->kind != TFM_MODULE_DECODER_ONLY &&
                   model->kind != TFM_MODULE_ENCODER_ONLY &&
                   model->kind != TFM_MODULE_ENCODER_DECODER))
        return -1;
    return ((const tfm__model *)model)->bias;
}

tfm_status tfm_model_get_layer_options(const tfm_module *model,
                                       tfm_layer_options *options)
{
    tfm_status st = tfm__model_check_with(model, 0xE, options, "options");
    if (st != TFM_OK)
        return st;
    const size_t size = options->struct_size;
    if (size < sizeof(size_t))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "options->struct_size (%zu) is too small: set it "
                         "with tfm_layer_options_init", size);
    const tfm__model *m = (const tfm__model *)model;
    tfm_layer_options o;
    tfm_layer_options_init(&o);
    o.bias = m->bias;
    o.rms_norm = m->rms_norm;
    o.gated = m->gated;
    o.type_vocab_size = m->token_type_embedding
                            ? m->token_type_embedding->n_rows
                            : 0;
    o.embedding_norm = m->embedding_norm != NULL;
    o.final_norm = m->final_norm;
    o.head_transform = m->head_transform != NULL;
    o.head_bias = m->lm_head_bias != NULL;
    if (m->patch_embedding) {
        o.patch_size = m->patch_embedding->patch_size;
        o.image_size = m->patch_embedding->image_size;
        o.num_channels = m->patch_embedding->in_channels;
    }
    memcpy(options, &o, size < sizeof o ? size : sizeof o);
    options->struct_size = size;
    return TFM_OK;
}

tfm_status tfm_model_create_v2(const tfm_model_config *config,
                               const tfm_model_options *options,
                               const tfm_layer_options *layer_options,
                               tfm_module **out)
{
    if (!out || !config)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !out ? "out" : "config");
    tfm_model_options o;
    tfm_layer_options lo;
    tfm_status st = tfm__model_options_read(options, &o);
    if (st != TFM_OK ||
        (st = tfm__layer_options_read(layer_options, &lo)) != TFM_OK ||
        (st = tfm__model_config_check(config, &o)) != TFM_OK)
        return st;
    if (lo.attention)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "layer_options->attention must be NULL: a model's "
                         "attention variant is options->attention");
    const unsigned parts = tfm__layer_parts(&lo);
    const tfm_model_config *c = config;
    const int64_t d = c->layer.d_model;
    if ((st = model_parts_check(c, &lo)) != TFM_OK)
        return st;
    /* Plain attention takes the layers' own path (NULL). */
    const tfm_attention_config *attention =
        tfm__attention_config_is_default(&o.attention) ? NULL : &o.attention;
    tfm__model *m = (tfm__model *)tfm__module_alloc(
        sizeof *m, kind_of(c->architecture), &model_ops);
    if (!m)
        return TFM_ERR_OUT_OF_MEMORY;
    m->config = *c;
    m->options = o;
    m->bias = lo.bias != 0;
    m->rms_norm = lo.rms_norm != 0;
    m->gated = lo.gated != 0;
    m->final_norm = lo.final_norm != 0;
    if (lo.patch_size > 0) { /* an image model: patches, no token table */
        st = tfm__patch_embedding_new(d, lo.num_channels, lo.patch_size,
                                      lo.image_size, 1, &m->patch_embedding);
        if (!st)
            st = tfm__module_adopt(&m->base, "patch_embedding.",
                                   &m->patch_embedding->base);
    } else {
        st = tfm__embedding_new(c->vocab_size, d, c->embedding_scale,
                                &m->token_embedding);
        if (!st)
            st = tfm__module_adopt(&m->base, "token_embedding.",
                                   &m->token_embedding->base);
    }
    if (!st && c->positional == TFM_POSITIONAL_LEARNED &&
        !(st = tfm__embedding_new(c->context_length, d, 0,
                                  &m->position_embedding)))
        st = tfm__module_adopt(&m->base, "position_embedding.",
                               &m->position_embedding->base);
    if (!st && lo.type_vocab_size > 0 &&
        !(st = tfm__embedding_new(lo.type_vocab_size, d, 0,
                                  &m->token_type_embedding)))
        st = tfm__module_adopt(&m->base, "token_type_embedding.",
                               &m->token_type_embedding->base);
    if (!st && lo.embedding_norm &&
        !(st = tfm__layer_norm_new(d, c->layer.layer_norm_eps, 1, 0,
                                   &m->embedding_norm)))
        st = tfm__module_adopt(&m->base, "embedding_norm.",
                               &m->embedding_norm->base);
    if (!st && c->architecture == TFM_ARCH_ENCODER_DECODER) {
        if (!(st = tfm__stack_new_ex(&c->layer, NULL, parts,
                                     c->n_encoder_layers, m->final_norm, 0,
                                     &m->encoder)) &&
            !(st = tfm__stack_new_ex(&c->layer, NULL, parts,
                                     c->n_decoder_layers, m->final_norm, 1,
                                     &m->decoder)) &&
            !(st = tfm__module_adopt(&m->base, "transformer.encoder.",
                                     &m->encoder->base)))
            st = tfm__module_adopt(&m->base, "transformer.decoder.",
                                   &m->decoder->base);
    } else if (!st) {
        if (!(st = tfm__stack_new_ex(&c->layer, attention, parts,
                                     c->n_layers, m->final_norm, 0,
                                     &m->stack)))
            st = tfm__module_adopt(&m->base, "", &m->stack->base);
    }
    if (!st && lo.head_transform &&
        !(st = tfm__layer_norm_new(d, c->layer.layer_norm_eps, 1, 0,
                                   &m->head_norm)))
        st = tfm__module_adopt(&m->base, "head_norm.", &m->head_norm->base);
    if (!st) {
        /* The model's own parameters: the untied head, the head
         * transform's Linear and the logits' bias (nn.Linear's
         * initialisation for the Linears, zeros for the bias). */
        tfm__param_spec specs[5];
        int n = 0;
        if (m->patch_embedding) /* nn.Parameter(torch.randn(1, 1, d)) */
            specs[n++] = (tfm__param_spec){ "cls_token", 3, { 1, 1, d },
                                            &m->cls_token,
                                            .init = TFM__INIT_NORMAL };
        if (c->tied_embeddings)
            m->lm_head = m->token_embedding->weight;
        else
            specs[n++] = (tfm__param_spec){ "lm_head.weight", 2,
                                            { c->vocab_size, d },
                                            &m->lm_head,
                                            .init = TFM__INIT_LINEAR,
                                            .convertible = 1 };
        if (lo.head_transform) {
            specs[n++] = (tfm__param_spec){ "head_transform.weight", 2,
                                            { d, d }, &m->head_transform,
                                            .init = TFM__INIT_LINEAR,
                                            .convertible = 1 };
            specs[n++] = (tfm__param_spec){ "head_transform.bias", 1, { d },
                                            &m->head_transform_bias,
                                            .init = TFM__INIT_LINEAR_BIAS,
                                            .init_fan_in = d };
        }
        if (lo.head_transform || lo.head_bias) {
            specs[n++] = (tfm__param_spec){ "lm_head.bias", 1,
                                            { c->vocab_size },
                                            &m->lm_head_bias,
                                            .init = TFM__INIT_ZERO };
        }
        if (n > 0)
            st = tfm__module_own_params(&m->base, specs, n);
    }
    if (st != TFM_OK) {
        tfm_module_free(&m->base);
        return st;
    }
    *out = &m->base;
    return TFM_OK;
}

/* Each architecture a in `kinds` is bit 1 << a (0xE: all three). */
tfm_status tfm__model_check(const tfm_module *mod, unsigned kinds,
                            const char *what)
{
    if (!mod)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", what);
    for (int a = TFM_ARCH_DECODER_ONLY; a <= TFM_ARCH_ENCODER_DECODER; a++)
        if ((kinds & (1u << a)) && mod->kind == kind_of((tfm_architecture)a))
            return TFM_OK;
    return tfm__fail(TFM_ERR_WRONG_KIND,
                     "%s (a module of kind %d) is not a model of the "
                     "architecture this call needs", what, (int)mod->kind);
}

tfm_status tfm__model_check_with(const tfm_module *m, unsigned kinds,
                                 const void *arg, const char *arg_name)
{
    tfm_status st = tfm__model_check(m, kinds, "model");
    if (st != TFM_OK)
        return st;
    if (!arg)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", arg_name);
    return TFM_OK;
}

tfm_status tfm_model_get_config(const tfm_module *model,
                                tfm_model_config *config)
{
    tfm_status st = tfm__model_check_with(model, 0xE, config, "config");
    if (st != TFM_OK)
        return st;
    *config = ((const tfm__model *)model)->config;
    return TFM_OK;
}

tfm_status tfm_model_get_options(const tfm_module *model,
                                 tfm_model_options *options)
{
    tfm_status st = tfm__model_check_with(model, 0xE, options, "options");
    if (st != TFM_OK)
        return st;
    const size_t size = options->struct_size;
    if (size < OPTIONS_MIN_SIZE)
        return options_size_error(size);
    /* Copy at most the caller's struct_size bytes; the nested attention
     * config's own struct_size says how many of its bytes were written. */
    tfm_model_options o = ((const tfm__model *)model)->options;
    const size_t at = offsetof(tfm_model_options, attention);
    if (size > at) /* the attention bytes the caller's struct holds */
        o.attention.struct_size = size - at < sizeof o.attention
                                      ? size - at
                                      : sizeof o.attention;
    memcpy(options, &o, size < sizeof o ? size : sizeof o);
    options->struct_size = size;
    return TFM_OK;
}
