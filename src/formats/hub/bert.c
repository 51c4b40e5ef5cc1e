/* The BERT checkpoint family of the hub loader (hub_family.h): its
 * config reader, plan and ignored names, and its row tfm__hub_bert.
 *
 * BERT (model_type "bert"; Devlin et al. 2019, transformers'
 * modeling_bert.py BertForMaskedLM) becomes an encoder-only, post-norm
 * model with learned positions and BERT's model parts (tfm_layer_options:
 * token-type table, embedding LayerNorm, no final norm, the masked-LM
 * head transform and the logits' bias): bert_plan below gives the names.
 * Its query, key and value fill the rows of in_proj_weight and
 * in_proj_bias. */
#include <string.h>

#include "base/error.h"
#include "formats/hub/hub_family.h"

/* The model of a BERT config.json (transformers' BertConfig defaults for
 * absent keys: vocab_size 30522, hidden_size 768, num_hidden_layers 12,
 * num_attention_heads 12, intermediate_size 3072, hidden_act "gelu",
 * max_position_embeddings 512, type_vocab_size 2, layer_norm_eps 1e-12,
 * position_embedding_type "absolute", tie_word_embeddings true): an
 * encoder-only, post-norm model with learned positions, the token-type
 * table, the embedding LayerNorm, no final norm and BertLMPredictionHead's
 * head transform (tfm_layer_options' model parts).  A decoder BERT
 * (is_decoder, add_cross_attention) and relative position embeddings are
 * refused, named. */
static tfm_status bert_config(const cJSON *root, tfm_model_config *c,
                              tfm_model_options *o, tfm_layer_options *lo)
{
    int64_t vocab = 0, d = 0, ff = 0, layers = 0, heads = 0, positions = 0;
    int64_t types = 0;
    double eps = 0;
    int tied = 1, is_decoder = 0, cross = 0;
    const char *act_name, *position_type;
    tfm_status st;
    if ((st = tfm__hub_cfg_int(root, "vocab_size", 30522, 1, &vocab)) ||
        (st = tfm__hub_cfg_int(root, "hidden_size", 768, 1, &d)) ||
        (st = tfm__hub_cfg_int(root, "num_hidden_layers", 12, 1, &layers)) ||
        (st = tfm__hub_cfg_int(root, "num_attention_heads", 12, 1, &heads)) ||
        (st = tfm__hub_cfg_int(root, "intermediate_size", 3072, 1, &ff)) ||
        (st = tfm__hub_cfg_int(root, "max_position_embeddings", 512, 1,
                               &positions)) ||
        (st = tfm__hub_cfg_int(root, "type_vocab_size", 2, 1, &types)) ||
        (st = tfm__hub_cfg_positive(root, "layer_norm_eps", 1e-12, &eps)) ||
        (st = tfm__hub_cfg_string(root, "hidden_act", &act_name)) ||
        (st = tfm__hub_cfg_string(root, "position_embedding_type",
                                  &position_type)) ||
        (st = tfm__hub_cfg_bool(root, "tie_word_embeddings", 1, &tied)) ||
        (st = tfm__hub_cfg_bool(root, "is_decoder", 0, &is_decoder)) ||
        (st = tfm__hub_cfg_bool(root, "add_cross_attention", 0, &cross)))
        return st;
    if (vocab > INT32_MAX || d > INT32_MAX || ff > INT32_MAX ||
        types > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" is over 2^31-1",
                         vocab > INT32_MAX ? "vocab_size"
                         : d > INT32_MAX   ? "hidden_size"
                         : ff > INT32_MAX  ? "intermediate_size"
                                           : "type_vocab_size");
    if ((st = tfm__hub_cfg_divides(heads, "num_attention_heads", d,
                                   "hidden_size")))
        return st;
    if (position_type && strcmp(position_type, "absolute") != 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"position_embedding_type\" "
                         "\"%.40s\": only \"absolute\" is supported",
                         position_type);
    if (is_decoder || cross)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\": true is not supported (a "
                         "masked-LM encoder is)",
                         is_decoder ? "is_decoder" : "add_cross_attention");
    if ((st = tfm__hub_cfg_float32(eps, "layer_norm_eps")))
        return st;
    int act;
    if ((st = tfm__hub_cfg_activation(act_name, "gelu", "hidden_act",
                                      "gelu, gelu_new, gelu_pytorch_tanh, "
                                      "relu, silu", &act)))
        return st;
    tfm__hub_decoder_config(c, d, heads, ff, act, eps, vocab, layers,
                            positions, TFM_POSITIONAL_LEARNED, tied);
    c->architecture = TFM_ARCH_ENCODER_ONLY;
    c->layer.norm_first = 0;
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    lo->type_vocab_size = types;
    lo->embedding_norm = 1;
    lo->final_norm = 0;
    lo->head_transform = 1;
    return TFM_OK;
}

/* The stored tensors of BERT c (BertForMaskedLM's names: the encoder under
 * "bert.", the head under "cls.", never prefixed):
 *   embeddings.word_embeddings.weight [V, d] -> token_embedding.weight
 *   embeddings.position_embeddings.weight   -> position_embedding.weight
 *   embeddings.token_type_embeddings.weight -> token_type_embedding.weight
 *   embeddings.LayerNorm.*                  -> embedding_norm.*
 *   encoder.layer.<i>.attention.self.query.* [d, d] \
 *   encoder.layer.<i>.attention.self.key.*          > rows of
 *   encoder.layer.<i>.attention.self.value.*       /  self_attn.in_proj_*
 *   encoder.layer.<i>.attention.output.dense.*  -> self_attn.out_proj.*
 *   encoder.layer.<i>.attention.output.LayerNorm.* -> norm1.*
 *   encoder.layer.<i>.intermediate.dense.* [ff, d] -> linear1.*
 *   encoder.layer.<i>.output.dense.* [d, ff]    -> linear2.*
 *   encoder.layer.<i>.output.LayerNorm.*        -> norm2.*
 *   cls.predictions.transform.dense.*           -> head_transform.*
 *   cls.predictions.transform.LayerNorm.*       -> head_norm.*
 *   cls.predictions.bias [V]                    -> lm_head.bias
 *   cls.predictions.decoder.weight (untied only) -> lm_head.weight
 * LayerNorms saved with the old names ".gamma" / ".beta" are found under
 * them (tfm__hub_plan_find).  No transposes: nn.Linear's layout is ours. */
static tfm_status bert_plan(const tfm_model_config *c,
                            const tfm_model_options *o,
                            const tfm_layer_options *lo, tfm__hub_plan *p)
{
    (void)o;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t V = c->vocab_size;
    const tfm__hub_plan_row E[] = {
        { "embeddings.word_embeddings.weight", "token_embedding.weight", 0,
          2, V, d, 0 },
        { "embeddings.position_embeddings.weight",
          "position_embedding.weight", 0, 2, c->context_length, d, 0 },
        { "embeddings.token_type_embeddings.weight",
          "token_type_embedding.weight", 0, 2, lo->type_vocab_size, d, 0 },
        { "embeddings.LayerNorm.weight", "embedding_norm.weight", 0, 1, d, 0,
          0 },
        { "embeddings.LayerNorm.bias", "embedding_norm.bias", 0, 1, d, 0, 0 },
    };
    tfm_status st = tfm__hub_plan_add_rows(p, NULL, 0, E, TFM__HUB_N_ROWS(E));
    for (int64_t i = 0; st == TFM_OK && i < c->n_layers; i++) {
        const tfm__hub_plan_row N1[2] = {
            { "attention.output.LayerNorm.weight", "norm1.weight", 0, 1, d, 0,
              0 },
            { "attention.output.LayerNorm.bias", "norm1.bias", 0, 1, d, 0,
              0 },
        };
        const tfm__hub_plan_row N2[2] = {
            { "output.LayerNorm.weight", "norm2.weight", 0, 1, d, 0, 0 },
            { "output.LayerNorm.bias", "norm2.bias", 0, 1, d, 0, 0 },
        };
        st = tfm__hub_plan_add_bert_layer(p, i, "attention.self.", d, ff, N1,
                                          N2, 0);
    }
    /* The head: never prefixed, its decoder only when untied. */
    const tfm__hub_plan_row H[] = {
        { "cls.predictions.transform.dense.weight", "head_transform.weight",
          0, 2, d, d, 0 },
        { "cls.predictions.transform.dense.bias", "head_transform.bias", 0,
          1, d, 0, 0 },
        { "cls.predictions.transform.LayerNorm.weight", "head_norm.weight",
          0, 1, d, 0, 0 },
        { "cls.predictions.transform.LayerNorm.bias", "head_norm.bias", 0, 1,
          d, 0, 0 },
        { "cls.predictions.bias", "lm_head.bias", 0, 1, V, 0, 0 },
        { "cls.predictions.decoder.weight", "lm_head.weight", 0, 2, V, d, 0 },
    };
    if (st == TFM_OK)
        st = tfm__hub_plan_add_unprefixed(
            p, H, TFM__HUB_N_ROWS(H) - (c->tied_embeddings != 0));
    return st;
}

/* What a BERT checkpoint may hold that a masked-LM model does not use: the
 * tied decoder and its bias (the same tensor as cls.predictions.bias), the
 * pooler and the next-sentence head of BertForPreTraining, and the
 * position_ids buffer of older saves. */
static int bert_ignored(const tfm__hub_plan *p, const char *name)
{
    if (strcmp(name, "cls.predictions.decoder.weight") == 0 ||
        strcmp(name, "cls.predictions.decoder.bias") == 0 ||
        strncmp(name, "cls.seq_relationship.", 21) == 0)
        return 1;
    const char *rest = tfm__hub_unprefixed(p, name);
    return rest && (strncmp(rest, "pooler.", 7) == 0 ||
                    strcmp(rest, "embeddings.position_ids") == 0);
}

/* BertForMaskedLM saves BertModel's tensors under "bert."; a plan entry
 * per layer (16) and 11 outside. */
const tfm__hub_family tfm__hub_bert = {
    .model_type = "bert", .prefix = "bert.", .layers_key = "num_hidden_layers",
    .per_layer = 16, .outside = 11, .config = bert_config, .plan = bert_plan,
    .ignored = bert_ignored,
};
