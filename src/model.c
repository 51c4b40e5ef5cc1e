/* Whole models: decoder-only, encoder-only and encoder-decoder (model.h). */
#include <string.h>

#include "error.h"
#include "gemm.h"
#include "model_impl.h"
#include "tensor_impl.h"
#include "workspace.h"

#define SINUSOIDAL_BASE 10000.0

static void model_destroy(tfm_module *mod)
{
    tfm__model *m = (tfm__model *)mod;
    tfm_module_free(m->token_embedding ? &m->token_embedding->base : NULL);
    tfm_module_free(m->position_embedding ? &m->position_embedding->base
                                          : NULL);
    tfm_module_free(m->stack ? &m->stack->base : NULL);
    tfm_module_free(m->encoder ? &m->encoder->base : NULL);
    tfm_module_free(m->decoder ? &m->decoder->base : NULL);
}

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
    if (!tfm__macs_add(acc, B, L, c->layer.d_model, c->vocab_size))
        return tfm__fail(TFM_ERR_OVERFLOW, "MAC count overflows int64");
    return TFM_OK;
}

static const tfm__module_ops model_ops = { model_destroy, model_macs };

static tfm_module_kind kind_of(tfm_architecture a)
{
    return a == TFM_ARCH_DECODER_ONLY   ? TFM_MODULE_DECODER_ONLY
           : a == TFM_ARCH_ENCODER_ONLY ? TFM_MODULE_ENCODER_ONLY
                                        : TFM_MODULE_ENCODER_DECODER;
}

tfm_status tfm__model_config_check(const tfm_model_config *c)
{
    if (!c)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "config is NULL");
    if (c->architecture != TFM_ARCH_DECODER_ONLY &&
        c->architecture != TFM_ARCH_ENCODER_ONLY &&
        c->architecture != TFM_ARCH_ENCODER_DECODER)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "unknown architecture %d",
                         (int)c->architecture);
    if (c->positional != TFM_POSITIONAL_NONE &&
        c->positional != TFM_POSITIONAL_LEARNED &&
        c->positional != TFM_POSITIONAL_SINUSOIDAL)
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
    return tfm__config_check(&c->layer);
}

tfm_status tfm_model_create(const tfm_model_config *config, tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm_status st = tfm__model_config_check(config);
    if (st != TFM_OK)
        return st;
    const tfm_model_config *c = config;
    const int64_t d = c->layer.d_model;
    tfm__model *m = (tfm__model *)tfm__module_alloc(
        sizeof *m, kind_of(c->architecture), &model_ops);
    if (!m)
        return TFM_ERR_OUT_OF_MEMORY;
    m->config = *c;
    st = tfm__embedding_new(c->vocab_size, d, c->embedding_scale,
                            &m->token_embedding);
    if (!st)
        st = tfm__module_adopt(&m->base, "token_embedding.",
                               &m->token_embedding->base);
    if (!st && c->positional == TFM_POSITIONAL_LEARNED &&
        !(st = tfm__embedding_new(c->context_length, d, 0,
                                  &m->position_embedding)))
        st = tfm__module_adopt(&m->base, "position_embedding.",
                               &m->position_embedding->base);
    if (!st && c->architecture == TFM_ARCH_ENCODER_DECODER) {
        if (!(st = tfm__stack_new(&c->layer, c->n_encoder_layers, 1, 0,
                                  &m->encoder)) &&
            !(st = tfm__stack_new(&c->layer, c->n_decoder_layers, 1, 1,
                                  &m->decoder)) &&
            !(st = tfm__module_adopt(&m->base, "transformer.encoder.",
                                     &m->encoder->base)))
            st = tfm__module_adopt(&m->base, "transformer.decoder.",
                                   &m->decoder->base);
    } else if (!st) {
        if (!(st = tfm__stack_new(&c->layer, c->n_layers, 1, 0, &m->stack)))
            st = tfm__module_adopt(&m->base, "", &m->stack->base);
    }
    if (!st && c->tied_embeddings) {
        m->lm_head = m->token_embedding->weight;
    } else if (!st) {
        tfm__param_spec spec = { "lm_head.weight", 2, { c->vocab_size, d },
                                 &m->lm_head };
        st = tfm__module_own_params(&m->base, &spec, 1);
    }
    if (st != TFM_OK) {
        tfm_module_free(&m->base);
        return st;
    }
    *out = &m->base;
    return TFM_OK;
}

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

void tfm__model_embed(const tfm__model *m, const int32_t *ids, int64_t B,
                      int64_t L, int64_t offset, float *x)
{
    const int64_t d = m->config.layer.d_model;
    tfm__embedding_lookup(m->token_embedding, ids, B * L, x);
    if (m->config.positional == TFM_POSITIONAL_LEARNED)
        tfm__embedding_add_rows(m->position_embedding, x, B, L, offset);
    else if (m->config.positional == TFM_POSITIONAL_SINUSOIDAL)
        tfm__add_sinusoidal(x, B, L, d, offset, SINUSOIDAL_BASE);
}

void tfm__model_head(const tfm__model *m, const float *h, int64_t rows,
                     float *logits)
{
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    tfm__linear(h, d, rows, d, m->lm_head, NULL, V, logits, V);
}

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

tfm_status tfm_model_logits(const tfm_module *model, const int32_t *ids,
                            int64_t batch, int64_t seq, tfm_tensor *logits)
{
    unsigned kinds = (1u << TFM_ARCH_DECODER_ONLY) |
                     (1u << TFM_ARCH_ENCODER_ONLY);
    tfm_status st = tfm__model_check(model, kinds, "model");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t shape[3] = { batch, seq, V };
    if ((st = check_sizes(m, batch, seq, "seq")) ||
        (st = tfm__model_check_ids(m, ids, batch * seq, "ids")) ||
        (st = tfm__check_shape(logits, "logits", 3, shape)))
        return st;

    tfm__ws_mark mark = tfm__ws_save();
    float *x = tfm__ws_floats((size_t)(batch * seq * d));
    float *out = x ? tfm__ws_floats((size_t)(batch * seq * V)) : NULL;
    st = TFM_ERR_OUT_OF_MEMORY;
    if (out) {
        tfm__masks masks = { 0 };
        if (m->config.architecture == TFM_ARCH_DECODER_ONLY)
            masks.causal = TFM_CAUSAL_TOP_LEFT;
        tfm__model_embed(m, ids, batch, seq, 0, x);
        st = tfm__stack_run(m->stack, x, batch, seq, NULL, 0, &masks, NULL);
        if (st == TFM_OK) {
            tfm__model_head(m, x, batch * seq, out);
            memcpy(logits->data, out, (size_t)(batch * seq * V) * sizeof(float));
        }
    }
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm_model_seq2seq_logits(const tfm_module *model,
                                    const int32_t *src_ids, int64_t src_len,
                                    const int32_t *tgt_ids, int64_t tgt_len,
                                    int64_t batch, tfm_tensor *logits)
{
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_ENCODER_DECODER, "model");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t B = batch, S = src_len, L = tgt_len;
    const int64_t shape[3] = { B, L, V };
    if ((st = check_sizes(m, B, S, "src_len")) ||
        (st = check_sizes(m, B, L, "tgt_len")) ||
        (st = tfm__model_check_ids(m, src_ids, B * S, "src_ids")) ||
        (st = tfm__model_check_ids(m, tgt_ids, B * L, "tgt_ids")) ||
        (st = tfm__check_shape(logits, "logits", 3, shape)))
        return st;

    tfm__ws_mark mark = tfm__ws_save();
    float *memory = tfm__ws_floats((size_t)(B * S * d));
    float *x = memory ? tfm__ws_floats((size_t)(B * L * d)) : NULL;
    float *out = x ? tfm__ws_floats((size_t)(B * L * V)) : NULL;
    st = TFM_ERR_OUT_OF_MEMORY;
    if (out) {
        const tfm__masks none = { 0 };
        const tfm__masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
        tfm__model_embed(m, src_ids, B, S, 0, memory);
        tfm__model_embed(m, tgt_ids, B, L, 0, x);
        st = tfm__stack_run(m->encoder, memory, B, S, NULL, 0, &none, NULL);
        if (st == TFM_OK)
            st = tfm__stack_run(m->decoder, x, B, L, memory, S, &causal,
                                &none);
        if (st == TFM_OK) {
            tfm__model_head(m, x, B * L, out);
            memcpy(logits->data, out, (size_t)(B * L * V) * sizeof(float));
        }
    }
    tfm__ws_restore(mark);
    return st;
}
