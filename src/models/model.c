/* Whole models: decoder-only, encoder-only and encoder-decoder (model.h).
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
 * tied).  Generation is in generate.c, the file format in model_file.c. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/activation.h"
#include "base/alloc.h"
#include "attention/attention_config.h"
#include "kernels/dropout.h"
#include "base/error.h"
#include "base/self_sized.h"
#include "base/gemm.h"
#include "blocks/layer_config.h"
#include "training/loss.h"
#include "models/model_impl.h"
#include "base/parallel.h"
#include "nn/patch_embedding.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

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
    tfm_status st = tfm__model_check(model, 0xE, "model");
    if (st != TFM_OK)
        return st;
    if (!options)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "options is NULL");
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
                                            .init = TFM__INIT_LINEAR };
        if (lo.head_transform) {
            specs[n++] = (tfm__param_spec){ "head_transform.weight", 2,
                                            { d, d }, &m->head_transform,
                                            .init = TFM__INIT_LINEAR };
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

tfm_status tfm_model_get_config(const tfm_module *model,
                                tfm_model_config *config)
{
    tfm_status st = tfm__model_check(model, 0xE, "model");
    if (st != TFM_OK)
        return st;
    if (!config)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "config is NULL");
    *config = ((const tfm__model *)model)->config;
    return TFM_OK;
}

tfm_status tfm_model_get_options(const tfm_module *model,
                                 tfm_model_options *options)
{
    tfm_status st = tfm__model_check(model, 0xE, "model");
    if (st != TFM_OK)
        return st;
    if (!options)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "options is NULL");
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

tfm_status tfm__model_check_ids(const tfm__model *m, const int32_t *ids,
                                int64_t n, const char *what)
{
    if (!ids)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", what);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->config.vocab_size)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s[%lld] = %d is outside the vocabulary 0..%lld",
                             what, (long long)i, (int)ids[i],
                             (long long)(m->config.vocab_size - 1));
    return TFM_OK;
}

/* tfm__model_embed before the embedding norm: the summed embeddings,
 * with token types `types` [B, L] (checked), NULL: type 0 everywhere. */
static void embed_sum(const tfm__model *m, const int32_t *ids,
                      const int32_t *types, int64_t B, int64_t L,
                      int64_t offset, float *x)
{
    const int64_t d = m->config.layer.d_model;
    const double base = m->options.positional_base;
    tfm__embedding_lookup(m->token_embedding, ids, B * L, x);
    if (m->config.positional == TFM_POSITIONAL_LEARNED)
        tfm__embedding_add_rows(m->position_embedding, x, B, L, offset);
    else if (m->config.positional == TFM_POSITIONAL_SINUSOIDAL)
        tfm__add_sinusoidal(x, B, L, d, offset, base,
                            TFM_SINUSOIDAL_INTERLEAVED);
    else if (m->config.positional == TFM_POSITIONAL_SINUSOIDAL_CONCAT)
        tfm__add_sinusoidal(x, B, L, d, offset, base, TFM_SINUSOIDAL_CONCAT);
    if (m->token_type_embedding && types)
        tfm__embedding_lookup_add(m->token_type_embedding, types, B * L, x);
    else if (m->token_type_embedding) /* type 0 at every position */
        tfm__embedding_add_rows(m->token_type_embedding, x, B * L, 1, 0);
}

/* tfm__model_embed with token types (NULL: type 0). */
static void embed_typed(const tfm__model *m, const int32_t *ids,
                        const int32_t *types, int64_t B, int64_t L,
                        int64_t offset, float *x)
{
    embed_sum(m, ids, types, B, L, offset, x);
    if (m->embedding_norm)
        tfm__layer_norm_run(m->embedding_norm, x, B * L, x);
}

void tfm__model_embed(const tfm__model *m, const int32_t *ids, int64_t B,
                      int64_t L, int64_t offset, float *x)
{
    embed_typed(m, ids, NULL, B, L, offset, x);
}

/* The head transform's pre-activation t = h W^T + b [rows, d]. */
static void head_transform_linear(const tfm__model *m, const float *h,
                                  int64_t rows, float *t)
{
    const int64_t d = m->config.layer.d_model;
    tfm__linear_parallel(h, d, rows, d, m->head_transform,
                         m->head_transform_bias, d, t, d);
}

/* The vocabulary projection of the (transformed) hidden states. */
static void head_project(const tfm__model *m, const float *h, int64_t rows,
                         float *logits)
{
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    tfm__linear(h, d, rows, d, m->lm_head, m->lm_head_bias, V, logits, V);
}

tfm_status tfm__model_head(const tfm__model *m, const float *h, int64_t rows,
                           float *logits)
{
    if (!m->head_transform) {
        head_project(m, h, rows, logits);
        return TFM_OK;
    }
    const int64_t d = m->config.layer.d_model;
    tfm__ws_mark mark = tfm__ws_save();
    float *t = tfm__ws_floats((size_t)(rows * d));
    if (!t) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate the head "
                         "transform's %lld x %lld scratch", (long long)rows,
                         (long long)d);
    }
    head_transform_linear(m, h, rows, t);
    tfm__activate(t, rows * d, m->config.layer.activation);
    tfm__layer_norm_run(m->head_norm, t, rows, t);
    head_project(m, t, rows, logits);
    tfm__ws_restore(mark);
    return TFM_OK;
}

/* batch and seq (named `what` in the message) within 1 .. context_length. */
static tfm_status check_sizes(const tfm__model *m, int64_t batch, int64_t seq,
                              const char *what)
{
    if (batch < 1 || seq < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "batch (%lld) and %s (%lld) must be at least 1",
                         (long long)batch, what, (long long)seq);
    if (seq > m->config.context_length)
        return tfm__fail(TFM_ERR_CAPACITY,
                         "%s %lld exceeds the context length %lld", what,
                         (long long)seq, (long long)m->config.context_length);
    return TFM_OK;
}

/* The embeddings' dropout (module.h): x [n] <- dropout(x) with the
 * model's probability at site `site` of the call's key, in a forward;
 * the same on their gradient in a backward. */
static void embed_dropout(const tfm__model *m, uint64_t key, uint64_t site,
                          float *x, int64_t n)
{
    const tfm__dropout d = tfm__dropout_at(m->base.dropout, key, site);
    if (tfm__dropout_on(&d))
        tfm__dropout_apply(&d, 0, x, n);
}

/* A decoder-only or encoder-only model (one stack): tfm_model_logits,
 * tfm_model_backward, tfm_model_loss_backward. */
static tfm_status check_one_stack(const tfm_module *model)
{
    tfm_status st = tfm__model_check(model, (1u << TFM_ARCH_DECODER_ONLY) |
                                                (1u << TFM_ARCH_ENCODER_ONLY),
                                     "model");
    if (st == TFM_OK && ((const tfm__model *)model)->patch_embedding)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "this is an image model (ViT): it takes pixel "
                         "values through tfm_model_image_logits (and "
                         "trains through tfm_model_image_backward), not "
                         "token ids");
    return st;
}

void tfm_model_inputs_init(tfm_model_inputs *inputs)
{
    if (!inputs)
        return;
    memset(inputs, 0, sizeof *inputs);
    inputs->struct_size = sizeof *inputs;
}

/* pub (NULL: none) read as far as its struct_size goes, and its arrays
 * checked against m and n = batch * seq positions (message set). */
static tfm_status inputs_read(const tfm__model *m,
                              const tfm_model_inputs *pub, int64_t n,
                              tfm_model_inputs *out)
{
    tfm_model_inputs_init(out);
    if (!pub)
        return TFM_OK;
    if (pub->struct_size < sizeof(size_t))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "inputs->struct_size (%zu) is too small: set it "
                         "with tfm_model_inputs_init", pub->struct_size);
    tfm__self_sized_copy(out, sizeof *out, pub, pub->struct_size);
    out->struct_size = sizeof *out;
    const int64_t types = m->token_type_embedding
                              ? m->token_type_embedding->n_rows
                              : 0;
    if (out->token_type_ids && !types)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "token_type_ids given, but the model has no "
                         "token-type table (type_vocab_size 0)");
    for (int64_t i = 0; out->token_type_ids && i < n; i++)
        if (out->token_type_ids[i] < 0 || out->token_type_ids[i] >= types)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "token_type_ids[%lld] = %d is outside 0..%lld",
                             (long long)i, (int)out->token_type_ids[i],
                             (long long)(types - 1));
    for (int64_t i = 0; out->attention_mask && i < n; i++)
        if (out->attention_mask[i] != 0 && out->attention_mask[i] != 1)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "attention_mask[%lld] = %d: it holds 1 (a "
                             "token) or 0 (padding)", (long long)i,
                             (int)out->attention_mask[i]);
    return TFM_OK;
}

tfm_status tfm_model_logits(const tfm_module *model, const int32_t *ids,
                            int64_t batch, int64_t seq, tfm_tensor *logits)
{
    return tfm_model_logits_v2(model, ids, batch, seq, NULL, logits);
}

tfm_status tfm_model_logits_v2(const tfm_module *model, const int32_t *ids,
                               int64_t batch, int64_t seq,
                               const tfm_model_inputs *inputs,
                               tfm_tensor *logits)
{
    TFM__PLAN_PIN();
    tfm_status st = check_one_stack(model);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t shape[3] = { batch, seq, V };
    tfm_model_inputs in;
    if ((st = check_sizes(m, batch, seq, "seq")) ||
        (st = tfm__model_check_ids(m, ids, batch * seq, "ids")) ||
        (st = inputs_read(m, inputs, batch * seq, &in)) ||
        (st = tfm__check_shape(logits, "logits", 3, shape)))
        return st;

    /* x [batch, seq, d]: the hidden states; out [batch, seq, V]: the
     * logits, copied to the caller only on success; keep [batch, seq]:
     * the attention mask as a key padding mask (1: may attend). */
    tfm__ws_mark mark = tfm__ws_save();
    float *x = tfm__ws_floats((size_t)(batch * seq * d));
    float *out = x ? tfm__ws_floats((size_t)(batch * seq * V)) : NULL;
    float *keep = out && in.attention_mask
                      ? tfm__ws_floats((size_t)(batch * seq))
                      : NULL;
    st = TFM_ERR_OUT_OF_MEMORY;
    if (out && (keep || !in.attention_mask)) {
        tfm__masks masks = { 0 };
        if (m->config.architecture == TFM_ARCH_DECODER_ONLY)
            masks.causal = TFM_CAUSAL_TOP_LEFT;
        if (keep) {
            for (int64_t i = 0; i < batch * seq; i++)
                keep[i] = (float)in.attention_mask[i];
            masks.key_padding = keep;
            masks.key_padding_kind = TFM_MASK_ALLOW;
        }
        const uint64_t key = tfm__dropout_forward_key((tfm_module *)model);
        embed_typed(m, ids, in.token_type_ids, batch, seq, 0, x);
        embed_dropout(m, key, TFM__DROP_EMBEDDING, x, batch * seq * d);
        st = tfm__stack_run(m->stack, x, batch, seq, NULL, 0, &masks, NULL,
                            tfm__dropout_site(key, TFM__DROP_STACK));
        if (st == TFM_OK)
            st = tfm__model_head(m, x, batch * seq, out);
        if (st == TFM_OK)
            memcpy(logits->data, out, (size_t)(batch * seq * V) * sizeof(float));
    }
    tfm__ws_restore(mark);
    return st;
}

static tfm_status check_image_call(const tfm_module *model,
                                   const tfm_tensor *pixel_values,
                                   int64_t *n_patches);

tfm_status tfm_model_image_logits(const tfm_module *model,
                                  const tfm_tensor *pixel_values,
                                  tfm_tensor *logits)
{
    TFM__PLAN_PIN();
    int64_t n = 0;
    tfm_status st = check_image_call(model, pixel_values, &n);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t B = pixel_values->shape[0], L = n + 1;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t shape[2] = { B, V };
    if ((st = tfm__check_shape(logits, "logits", 2, shape)))
        return st;

    /* patches [B*N, d]; x [B, N+1, d]: the class token and the patches,
     * then the blocks' states; cls [B, d]: the class tokens' final states;
     * out [B, V]: the logits, copied to the caller only on success. */
    tfm__ws_mark mark = tfm__ws_save();
    float *patches = tfm__ws_floats((size_t)(B * n * d));
    float *x = patches ? tfm__ws_floats((size_t)(B * L * d)) : NULL;
    float *cls = x ? tfm__ws_floats((size_t)(B * d)) : NULL;
    float *out = cls ? tfm__ws_floats((size_t)(B * V)) : NULL;
    st = out ? tfm__patch_embedding_run(m->patch_embedding, pixel_values,
                                        patches)
             : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate an image "
                         "model's scratch for %lld images", (long long)B);
    if (st == TFM_OK) {
        const size_t row = (size_t)d * sizeof(float);
        for (int64_t b = 0; b < B; b++) {
            memcpy(x + b * L * d, m->cls_token, row);
            memcpy(x + (b * L + 1) * d, patches + b * n * d, (size_t)n * row);
        }
        tfm__embedding_add_rows(m->position_embedding, x, B, L, 0);
        const tfm__masks none = { 0 };
        const uint64_t key = tfm__dropout_forward_key((tfm_module *)model);
        embed_dropout(m, key, TFM__DROP_EMBEDDING, x, B * L * d);
        st = tfm__stack_run(m->stack, x, B, L, NULL, 0, &none, NULL,
                            tfm__dropout_site(key, TFM__DROP_STACK));
    }
    if (st == TFM_OK) {
        for (int64_t b = 0; b < B; b++)
            memcpy(cls + b * d, x + b * L * d, (size_t)d * sizeof(float));
        st = tfm__model_head(m, cls, B, out);
    }
    if (st == TFM_OK)
        memcpy(logits->data, out, (size_t)(B * V) * sizeof(float));
    tfm__ws_restore(mark);
    return st;
}

/* An encoder-decoder call's model, sizes and ids (message set). */
static tfm_status check_seq2seq(const tfm_module *model,
                                const int32_t *src_ids, int64_t src_len,
                                const int32_t *tgt_ids, int64_t tgt_len,
                                int64_t batch)
{
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_ENCODER_DECODER, "model");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    if ((st = check_sizes(m, batch, src_len, "src_len")) ||
        (st = check_sizes(m, batch, tgt_len, "tgt_len")) ||
        (st = tfm__model_check_ids(m, src_ids, batch * src_len, "src_ids")))
        return st;
    return tfm__model_check_ids(m, tgt_ids, batch * tgt_len, "tgt_ids");
}

tfm_status tfm_model_seq2seq_logits(const tfm_module *model,
                                    const int32_t *src_ids, int64_t src_len,
                                    const int32_t *tgt_ids, int64_t tgt_len,
                                    int64_t batch, tfm_tensor *logits)
{
    TFM__PLAN_PIN();
    tfm_status st = check_seq2seq(model, src_ids, src_len, tgt_ids, tgt_len,
                                  batch);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t B = batch, S = src_len, L = tgt_len;
    const int64_t shape[3] = { B, L, V };
    if ((st = tfm__check_shape(logits, "logits", 3, shape)))
        return st;

    /* memory [B, S, d]: the encoder's output; x [B, L, d]: the decoder's
     * hidden states; out [B, L, V]: the logits. */
    tfm__ws_mark mark = tfm__ws_save();
    float *memory = tfm__ws_floats((size_t)(B * S * d));
    float *x = memory ? tfm__ws_floats((size_t)(B * L * d)) : NULL;
    float *out = x ? tfm__ws_floats((size_t)(B * L * V)) : NULL;
    st = TFM_ERR_OUT_OF_MEMORY;
    if (out) {
        const tfm__masks none = { 0 };
        const tfm__masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
        const uint64_t key = tfm__dropout_forward_key((tfm_module *)model);
        tfm__model_embed(m, src_ids, B, S, 0, memory);
        tfm__model_embed(m, tgt_ids, B, L, 0, x);
        embed_dropout(m, key, TFM__DROP_EMBEDDING, memory, B * S * d);
        embed_dropout(m, key, TFM__DROP_TGT_EMBEDDING, x, B * L * d);
        st = tfm__stack_run(m->encoder, memory, B, S, NULL, 0, &none, NULL,
                            tfm__dropout_site(key, TFM__DROP_ENCODER));
        if (st == TFM_OK)
            st = tfm__stack_run(m->decoder, x, B, L, memory, S, &causal,
                                &none,
                                tfm__dropout_site(key, TFM__DROP_DECODER));
        if (st == TFM_OK)
            st = tfm__model_head(m, x, B * L, out);
        if (st == TFM_OK)
            memcpy(logits->data, out, (size_t)(B * L * V) * sizeof(float));
    }
    tfm__ws_restore(mark);
    return st;
}

/* ---- Backward --------------------------------------------------------- */

/* The head's weight gradient: lm_head's own, or the token embedding's
 * when tied. */
static float *head_grad(const tfm__model *m)
{
    const tfm_module *home = m->token_embedding &&
                                     m->lm_head == m->token_embedding->weight
                                 ? &m->token_embedding->base
                                 : &m->base;
    return tfm__grad_of(home, m->lm_head);
}

/* The backward of tfm__model_embed: x's gradient g [B, L, d] into the
 * token table's and the learned positions' gradients. */
static void embed_backward(const tfm__model *m, const int32_t *ids,
                           int64_t B, int64_t L, const float *g)
{
    tfm__embedding_lookup_backward(m->token_embedding, ids, B * L, -1, g);
    if (m->config.positional == TFM_POSITIONAL_LEARNED)
        tfm__embedding_add_rows_backward(m->position_embedding, g, B, L, 0);
}

/* The kept activations of the embedding norm and the head transform
 * (model_backward), each NULL when the model lacks the part: e [rows, d]
 * the summed embeddings before their norm; t [rows, d] the head
 * transform's pre-activation, a its activation, y the head norm's output;
 * acc [2 max(d, V)] the bias and norm sums' double scratch. */
typedef struct parts_kept {
    float *e, *t, *a, *y;
    double *acc;
} parts_kept;

/* tfm__model_embed keeping e (model_backward). */
static void embed_keep(const tfm__model *m, const int32_t *ids, int64_t B,
                       int64_t L, const parts_kept *k, float *x)
{
    if (!m->embedding_norm) {
        embed_sum(m, ids, NULL, B, L, 0, x);
        return;
    }
    embed_sum(m, ids, NULL, B, L, 0, k->e);
    tfm__layer_norm_run(m->embedding_norm, k->e, B * L, x);
}

/* The backward of embed_keep but for the token table and positions: g
 * [rows, d], the gradient of the embeddings' output; returns that of
 * their sum (g itself, or k->e overwritten), after token type 0's row
 * got its sum over the rows. */
static const float *embed_parts_backward(const tfm__model *m,
                                         const parts_kept *k, int64_t rows,
                                         const float *g)
{
    if (m->embedding_norm) {
        const tfm_module *home = &m->embedding_norm->base;
        tfm__layer_norm_backward(m->embedding_norm, k->e, rows, g, k->e,
                                 tfm__grad_of(home, m->embedding_norm->weight),
                                 tfm__grad_of(home, m->embedding_norm->bias),
                                 k->acc);
        g = k->e;
    }
    if (m->token_type_embedding)
        tfm__embedding_add_rows_backward(m->token_type_embedding, g, rows, 1,
                                         0);
    return g;
}

/* The head transform of h [rows, d] keeping t, a and y (model_backward;
 * a no-op without one). */
static void head_transform_keep(const tfm__model *m, const float *h,
                                int64_t rows, const parts_kept *k)
{
    if (!m->head_transform)
        return;
    const int64_t n = rows * m->config.layer.d_model;
    head_transform_linear(m, h, rows, k->t);
    memcpy(k->a, k->t, (size_t)n * sizeof(float));
    tfm__activate(k->a, n, m->config.layer.activation);
    tfm__layer_norm_run(m->head_norm, k->a, rows, k->y);
}

/* The head's backward (its forward kept by head_transform_keep): dl [rows, V], the
 * logits' gradient, into the head's parameters and g [rows, d], the
 * gradient of the blocks' output h.  Overwrites k->y and k->a. */
static void head_backward(const tfm__model *m, const float *h, int64_t rows,
                          const parts_kept *k, const float *dl, float *g)
{
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    if (!m->head_transform) {
        /* logits = h lm_head^T (+ b): g = dl lm_head, the head's gradient
         * += dl^T h (the bias's the column sums of dl). */
        tfm__linear_backward(h, d, rows, d, m->lm_head, V, dl, V, g,
                             head_grad(m),
                             tfm__grad_of(&m->base, m->lm_head_bias),
                             k->acc);
        return;
    }
    /* logits = y lm_head^T + b, y = LN(a), a = act(t), t = h W^T + c:
     * dy into y, da into a, dt in place, dh into g. */
    const tfm_module *norm = &m->head_norm->base;
    tfm__linear_backward(k->y, d, rows, d, m->lm_head, V, dl, V, k->y,
                         head_grad(m), tfm__grad_of(&m->base, m->lm_head_bias),
                         k->acc);
    tfm__layer_norm_backward(m->head_norm, k->a, rows, k->y, k->a,
                             tfm__grad_of(norm, m->head_norm->weight),
                             tfm__grad_of(norm, m->head_norm->bias), k->acc);
    tfm__activation_backward(k->t, k->a, rows * d,
                             m->config.layer.activation);
    tfm__linear_backward(h, d, rows, d, m->head_transform, d, k->a, d, g,
                         tfm__grad_of(&m->base, m->head_transform),
                         tfm__grad_of(&m->base, m->head_transform_bias),
                         k->acc);
}

/* grad_logits [rows, V] finite, shaped as the logits. */
static tfm_status check_grad_logits(const tfm_tensor *grad_logits,
                                    const int64_t shape[3], const char *what)
{
    tfm_status st;
    if (!grad_logits)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: grad_logits is NULL",
                         what);
    if ((st = tfm__check_shape(grad_logits, "grad_logits", 3, shape)))
        return st;
    if (!tfm__all_finite(grad_logits->data, grad_logits->numel))
        return tfm__fail(TFM_ERR_NON_FINITE, "%s: grad_logits holds NaN or "
                         "infinity", what);
    return TFM_OK;
}

/* The cross-entropy of tfm_model_loss_backward (NULL in
 * tfm_model_backward, whose caller gives grad_logits). */
typedef struct model_loss {
    const int32_t *targets;
    int32_t ignore_index;
    float label_smoothing;
    tfm_reduction reduction;
    float grad_scale;
    float *loss;
} model_loss;

/* tfm_model_backward and tfm_model_loss_backward (checked but for the
 * sizes, ids and grad_logits): one forward keeping the blocks'
 * activations; with a loss, the head's logits and their cross-entropy
 * gradient (in scratch, before any gradient is written); then the head,
 * the blocks and the embeddings. */
static tfm_status model_backward(tfm_module *model, const int32_t *ids,
                                 int64_t batch, int64_t seq,
                                 const tfm_tensor *grad_logits,
                                 const model_loss *ls, const char *what)
{
    /* The loss's own forward draws a key; tfm_model_backward recomputes
     * the latest tfm_model_logits'. */
    uint64_t key = 0;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t shape[3] = { batch, seq, V };
    tfm_status st;
    if ((st = check_sizes(m, batch, seq, "seq")) ||
        (st = tfm__model_check_ids(m, ids, batch * seq, "ids")) ||
        (!ls && (st = check_grad_logits(grad_logits, shape, what))))
        return st;
    const int64_t rows = batch * seq, n = rows * d;
    int64_t cells;
    if (!tfm__checked_numel(shape, 3, sizeof(float), &cells))
        return tfm__fail(TFM_ERR_OVERFLOW, "%s: logits size overflows", what);
    /* x0: the embedded input; h: the blocks' output; g: the running
     * gradient; then those of the parts the model has (parts_kept); dl:
     * the logits' gradient (with a loss). */
    float *x0, *h, *g, *dl = NULL, *acc = NULL;
    parts_kept k = { 0 };
    float **bufs[9] = { &x0, &h, &g };
    size_t sizes[9] = { (size_t)n, (size_t)n, (size_t)n };
    int nb = 3;
    if (m->embedding_norm) {
        bufs[nb] = &k.e;
        sizes[nb++] = (size_t)n;
    }
    if (m->head_transform) {
        float **more[] = { &k.t, &k.a, &k.y };
        for (int i = 0; i < 3; i++) {
            bufs[nb] = more[i];
            sizes[nb++] = (size_t)n;
        }
    }
    if (m->embedding_norm || m->lm_head_bias) {
        bufs[nb] = &acc; /* 2 max(d, V) doubles */
        sizes[nb++] = (size_t)(4 * (d > V ? d : V));
    }
    if (ls) {
        bufs[nb] = &dl;
        sizes[nb++] = (size_t)cells;
    }
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(model, what, (float **const *)bufs, sizes,
                                  nb, &mark)))
        return st;
    k.acc = (double *)(void *)acc;
    tfm__masks masks = { 0 };
    if (m->config.architecture == TFM_ARCH_DECODER_ONLY)
        masks.causal = TFM_CAUSAL_TOP_LEFT;
    key = ls ? tfm__dropout_forward_key(model)
             : tfm__dropout_backward_key(model);
    embed_keep(m, ids, batch, seq, &k, x0);
    embed_dropout(m, key, TFM__DROP_EMBEDDING, x0, n);
    tfm__stack_kept kept;
    st = tfm__stack_forward_keep(m->stack, x0, batch, seq, NULL, 0, &masks,
                                 NULL, tfm__dropout_site(key, TFM__DROP_STACK),
                                 NULL, h, &kept);
    if (st == TFM_OK && ls) {
        head_transform_keep(m, h, rows, &k);
        head_project(m, m->head_transform ? k.y : h, rows, dl);
        st = tfm__cross_entropy(dl, rows, V, ls->targets, ls->ignore_index,
                                ls->label_smoothing, ls->reduction,
                                ls->grad_scale, ls->loss, dl, what);
    }
    if (st == TFM_OK) {
        if (!ls) /* the head's activations, which a loss has kept */
            head_transform_keep(m, h, rows, &k);
        head_backward(m, h, rows, &k, ls ? dl : grad_logits->data, g);
        st = tfm__stack_backward_kept(&kept, g);
    }
    if (st == TFM_OK) {
        embed_dropout(m, key, TFM__DROP_EMBEDDING, g, n);
        embed_backward(m, ids, batch, seq,
                       embed_parts_backward(m, &k, rows, g));
    }
    tfm__backward_end(model, mark);
    return st;
}

tfm_status tfm_model_backward(tfm_module *model, const int32_t *ids,
                              int64_t batch, int64_t seq,
                              const tfm_tensor *grad_logits)
{
    TFM__PLAN_PIN();
    tfm_status st = check_one_stack(model);
    if (st != TFM_OK)
        return st;
    return model_backward(model, ids, batch, seq, grad_logits, NULL,
                          "tfm_model_backward");
}

tfm_status tfm_model_loss_backward(tfm_module *model, const int32_t *ids,
                                   int64_t batch, int64_t seq,
                                   const int32_t *targets,
                                   int32_t ignore_index,
                                   float label_smoothing,
                                   tfm_reduction reduction, float grad_scale,
                                   float *loss)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_model_loss_backward";
    tfm_status st = check_one_stack(model);
    if (st != TFM_OK)
        return st;
    if (!targets || !loss)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: targets and loss are "
                         "required", what);
    if (!isfinite(grad_scale))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "%s: grad_scale %g is "
                         "not finite", what, (double)grad_scale);
    float l = 0.0f;
    const model_loss ls = { targets, ignore_index, label_smoothing,
                            reduction, grad_scale, &l };
    st = model_backward(model, ids, batch, seq, NULL, &ls, what);
    if (st == TFM_OK)
        *loss = l;
    return st;
}

/* The checks of tfm_model_image_logits (the model, an image model, its
 * pixels) shared with its backward; *n_patches gets N (message set). */
static tfm_status check_image_call(const tfm_module *model,
                                   const tfm_tensor *pixel_values,
                                   int64_t *n_patches)
{
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_ENCODER_ONLY, "model");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    if (!m->patch_embedding)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "this model takes token ids (tfm_model_logits), "
                         "not images: it has no patch embedding");
    if ((st = tfm__patch_embedding_check(m->patch_embedding, pixel_values,
                                         n_patches)))
        return st;
    if (!tfm__all_finite(pixel_values->data, pixel_values->numel))
        return tfm__fail(TFM_ERR_NON_FINITE,
                         "pixel_values hold NaN or infinity");
    return TFM_OK;
}

tfm_status tfm_model_image_backward(tfm_module *model,
                                    const tfm_tensor *pixel_values,
                                    const tfm_tensor *grad_logits)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_model_image_backward";
    int64_t n = 0;
    tfm_status st = check_image_call(model, pixel_values, &n);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const tfm__patch_embedding *pe = m->patch_embedding;
    const int64_t B = pixel_values->shape[0], L = n + 1;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t k_cols = pe->in_channels * pe->patch_size * pe->patch_size;
    const int64_t shape[2] = { B, V };
    if (!grad_logits)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: grad_logits is NULL",
                         what);
    if ((st = tfm__check_shape(grad_logits, "grad_logits", 2, shape)))
        return st;
    if (!tfm__all_finite(grad_logits->data, grad_logits->numel))
        return tfm__fail(TFM_ERR_NON_FINITE, "%s: grad_logits holds NaN or "
                         "infinity", what);
    /* patches [B*N, d]: the patch embedding's output, later its gradient;
     * x0, h, g [B, L, d]: the blocks' input, output and running gradient;
     * cls, gcls [B, d]: the class tokens' final states and their gradient;
     * cols [B*N, C P P]: the unfolded patches; acc: 2 max(d, V) doubles. */
    float *patches, *x0, *h, *g, *cls, *gcls, *cols, *acc;
    float **const bufs[] = { &patches, &x0, &h, &g, &cls, &gcls, &cols,
                             &acc };
    const size_t sizes[] = { (size_t)(B * n * d), (size_t)(B * L * d),
                             (size_t)(B * L * d), (size_t)(B * L * d),
                             (size_t)(B * d), (size_t)(B * d),
                             (size_t)(B * n * k_cols),
                             (size_t)(4 * (d > V ? d : V)) };
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(model, what, bufs, sizes, 8, &mark)))
        return st;
    /* The forward of tfm_model_image_logits again, keeping the blocks'
     * activations (the dropout masks of the latest forward). */
    const size_t row = (size_t)d * sizeof(float);
    st = tfm__patch_embedding_run(pe, pixel_values, patches);
    const uint64_t key = tfm__dropout_backward_key(model);
    const tfm__masks none = { 0 };
    tfm__stack_kept kept;
    if (st == TFM_OK) {
        for (int64_t b = 0; b < B; b++) {
            memcpy(x0 + b * L * d, m->cls_token, row);
            memcpy(x0 + (b * L + 1) * d, patches + b * n * d, (size_t)n * row);
        }
        tfm__embedding_add_rows(m->position_embedding, x0, B, L, 0);
        embed_dropout(m, key, TFM__DROP_EMBEDDING, x0, B * L * d);
        st = tfm__stack_forward_keep(m->stack, x0, B, L, NULL, 0, &none,
                                     NULL,
                                     tfm__dropout_site(key, TFM__DROP_STACK),
                                     NULL, h, &kept);
    }
    if (st == TFM_OK) {
        /* The head on the class tokens: its gradient into gcls, then into
         * row 0 of each image's states (the other rows get none). */
        parts_kept pk = { 0 };
        pk.acc = (double *)(void *)acc;
        for (int64_t b = 0; b < B; b++)
            memcpy(cls + b * d, h + b * L * d, row);
        head_backward(m, cls, B, &pk, grad_logits->data, gcls);
        memset(g, 0, (size_t)(B * L) * row);
        for (int64_t b = 0; b < B; b++)
            memcpy(g + b * L * d, gcls + b * d, row);
        st = tfm__stack_backward_kept(&kept, g);
    }
    if (st == TFM_OK) {
        embed_dropout(m, key, TFM__DROP_EMBEDDING, g, B * L * d);
        tfm__embedding_add_rows_backward(m->position_embedding, g, B, L, 0);
        float *gc = tfm__grad_of(&m->base, m->cls_token);
        for (int64_t b = 0; b < B; b++) {
            const float *gr = g + b * L * d;
            for (int64_t j = 0; j < d; j++)
                gc[j] += gr[j];
            memcpy(patches + b * n * d, gr + d, (size_t)n * row);
        }
        tfm__patch_embedding_backward_run(pe, pixel_values, patches, NULL,
                                          cols, (double *)(void *)acc);
    }
    tfm__backward_end(model, mark);
    return st;
}

tfm_status tfm_model_seq2seq_backward(tfm_module *model,
                                      const int32_t *src_ids, int64_t src_len,
                                      const int32_t *tgt_ids, int64_t tgt_len,
                                      int64_t batch,
                                      const tfm_tensor *grad_logits)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_model_seq2seq_backward";
    tfm_status st = check_seq2seq(model, src_ids, src_len, tgt_ids, tgt_len,
                                  batch);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t B = batch, S = src_len, L = tgt_len;
    const int64_t shape[3] = { B, L, V };
    if ((st = check_grad_logits(grad_logits, shape, what)))
        return st;
    const int64_t n_src = B * S * d, n_tgt = B * L * d;
    /* src0, tgt0: the embedded inputs; memory: the encoder's output; h:
     * the decoder's; g: the decoder's running gradient; gmem: memory's,
     * then src0's. */
    float *src0, *tgt0, *memory, *h, *g, *gmem, *acc = NULL;
    float **const bufs[] = { &src0, &tgt0, &memory, &h, &g, &gmem, &acc };
    const size_t sizes[] = { (size_t)n_src, (size_t)n_tgt, (size_t)n_src,
                             (size_t)n_tgt, (size_t)n_tgt, (size_t)n_src,
                             (size_t)(2 * V) /* V doubles: the bias's */ };
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(model, what, bufs, sizes,
                                  m->lm_head_bias ? 7 : 6, &mark)))
        return st;
    const tfm__masks none = { 0 };
    const tfm__masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
    tfm__model_embed(m, src_ids, B, S, 0, src0);
    tfm__model_embed(m, tgt_ids, B, L, 0, tgt0);
    memset(gmem, 0, (size_t)n_src * sizeof *gmem);
    const uint64_t key = tfm__dropout_backward_key(model);
    embed_dropout(m, key, TFM__DROP_EMBEDDING, src0, n_src);
    embed_dropout(m, key, TFM__DROP_TGT_EMBEDDING, tgt0, n_tgt);
    tfm__stack_kept enc, dec;
    st = tfm__stack_forward_keep(m->encoder, src0, B, S, NULL, 0, &none,
                                 NULL, tfm__dropout_site(key,
                                                         TFM__DROP_ENCODER),
                                 NULL, memory, &enc);
    if (st == TFM_OK)
        st = tfm__stack_forward_keep(
            m->decoder, tgt0, B, L, memory, S, &causal, &none,
            tfm__dropout_site(key, TFM__DROP_DECODER), gmem, h, &dec);
    if (st == TFM_OK) {
        tfm__linear_backward(h, d, B * L, d, m->lm_head, V,
                             grad_logits->data, V, g, head_grad(m),
                             tfm__grad_of(&m->base, m->lm_head_bias),
                             (double *)(void *)acc);
        st = tfm__stack_backward_kept(&dec, g);
    }
    if (st == TFM_OK)
        st = tfm__stack_backward_kept(&enc, gmem);
    if (st == TFM_OK) {
        embed_dropout(m, key, TFM__DROP_TGT_EMBEDDING, g, n_tgt);
        embed_dropout(m, key, TFM__DROP_EMBEDDING, gmem, n_src);
        embed_backward(m, tgt_ids, B, L, g);
        embed_backward(m, src_ids, B, S, gmem);
    }
    tfm__backward_end(model, mark);
    return st;
}
