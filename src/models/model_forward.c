/* Whole models' forward (model.h): the embeddings (token, position and
 * type tables, the embedding norm and dropout), the blocks and the head
 * (its transform and the vocabulary projection) for tfm_model_logits and
 * tfm_model_seq2seq_logits, with the checks of a call's sizes, ids and
 * inputs that the backward passes share (model_impl.h). */
#include <string.h>

#include "kernels/activation.h"
#include "kernels/dropout.h"
#include "base/error.h"
#include "base/self_sized.h"
#include "kernels/linear.h"
#include "models/model_impl.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"


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

void tfm__model_embed_sum(const tfm__model *m, const int32_t *ids,
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
    tfm__model_embed_sum(m, ids, types, B, L, offset, x);
    if (m->embedding_norm)
        tfm__layer_norm_run(m->embedding_norm, x, B * L, x);
}

void tfm__model_embed(const tfm__model *m, const int32_t *ids, int64_t B,
                      int64_t L, int64_t offset, float *x)
{
    embed_typed(m, ids, NULL, B, L, offset, x);
}

void tfm__model_head_transform_linear(const tfm__model *m, const float *h,
                                      int64_t rows, float *t)
{
    const int64_t d = m->config.layer.d_model;
    tfm__linear_parallel(h, d, rows, d, m->head_transform,
                         m->head_transform_bias, d, t, d);
}

void tfm__model_head_project(const tfm__model *m, const float *h, int64_t rows,
                             float *logits)
{
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    /* Split over the library's threads like every projection: in a
     * decoding step the head is the largest single weight (GPT-2's tied
     * table is a third of the model), so one thread reading it alone
     * capped two threads' speed-up near 1.5x. */
    tfm__linear_parallel(h, d, rows, d, m->lm_head, m->lm_head_bias, V,
                         logits, V);
}

tfm_status tfm__model_head(const tfm__model *m, const float *h, int64_t rows,
                           float *logits)
{
    if (!m->head_transform) {
        tfm__model_head_project(m, h, rows, logits);
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
    tfm__model_head_transform_linear(m, h, rows, t);
    tfm__activate(t, rows * d, m->config.layer.activation);
    tfm__layer_norm_run(m->head_norm, t, rows, t);
    tfm__model_head_project(m, t, rows, logits);
    tfm__ws_restore(mark);
    return TFM_OK;
}

tfm_status tfm__model_check_sizes(const tfm__model *m, int64_t batch,
                                  int64_t seq, const char *what)
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

void tfm__model_embed_dropout(const tfm__model *m, uint64_t key, uint64_t site,
                              float *x, int64_t n)
{
    const tfm__dropout d = tfm__dropout_at(m->base.dropout, key, site);
    if (tfm__dropout_on(&d))
        tfm__dropout_apply(&d, 0, x, n);
}

tfm_status tfm__model_check_one_stack(const tfm_module *model)
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
    tfm_status st = tfm__model_check_one_stack(model);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t shape[3] = { batch, seq, V };
    tfm_model_inputs in;
    if ((st = tfm__model_check_sizes(m, batch, seq, "seq")) ||
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
        tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, x,
                                 batch * seq * d);
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

tfm_status tfm__model_check_seq2seq(const tfm_module *model,
                                    const int32_t *src_ids, int64_t src_len,
                                    const int32_t *tgt_ids, int64_t tgt_len,
                                    int64_t batch, const tfm_tensor *logits,
                                    const char *what)
{
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_ENCODER_DECODER, "model");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    if ((st = tfm__model_check_sizes(m, batch, src_len, "src_len")) ||
        (st = tfm__model_check_sizes(m, batch, tgt_len, "tgt_len")) ||
        (st = tfm__model_check_ids(m, src_ids, batch * src_len, "src_ids")) ||
        (st = tfm__model_check_ids(m, tgt_ids, batch * tgt_len, "tgt_ids")))
        return st;
    const int64_t shape[3] = { batch, tgt_len, m->config.vocab_size };
    return what ? tfm__model_check_grad_logits(logits, 3, shape, what)
                : tfm__check_shape(logits, "logits", 3, shape);
}

tfm_status tfm_model_seq2seq_logits(const tfm_module *model,
                                    const int32_t *src_ids, int64_t src_len,
                                    const int32_t *tgt_ids, int64_t tgt_len,
                                    int64_t batch, tfm_tensor *logits)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__model_check_seq2seq(model, src_ids, src_len, tgt_ids,
                                             tgt_len, batch, logits, NULL);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t B = batch, S = src_len, L = tgt_len;

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
        tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, memory,
                                 B * S * d);
        tfm__model_embed_dropout(m, key, TFM__DROP_TGT_EMBEDDING, x,
                                 B * L * d);
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
