/* The Llama checkpoint family of the hub loader (hub_family.h): its
 * config reader, plan and ignored names, and its row tfm__hub_llama.
 *
 * Llama (model_type "llama"; Touvron et al. 2023, transformers'
 * modeling_llama.py LlamaForCausalLM) becomes a decoder-only model with
 * RMSNorms, the gated SwiGLU feed-forward, no biases, rotary positions on
 * half-split pairs and grouped-query attention: llama_plan below gives the
 * names.  Its q, k and v projections fill the rows of the one packed
 * in_proj_weight (offsets in the plan); tfm__hub_plan_covers checks that
 * the pieces fill every parameter exactly. */
#include <string.h>

#include "base/error.h"
#include "formats/hub/hub_family.h"

/* The model of a Llama config.json (transformers' LlamaConfig defaults for
 * absent keys: vocab_size 32000, hidden_size 4096, intermediate_size
 * 11008, num_hidden_layers 32, num_attention_heads 32, num_key_value_heads
 * = num_attention_heads, hidden_act "silu", max_position_embeddings 2048,
 * rms_norm_eps 1e-6, tie_word_embeddings false, rope_theta 10000,
 * attention_bias and mlp_bias false, head_dim = hidden_size / heads,
 * rope_scaling null): a decoder-only, pre-norm model with RMSNorms, the
 * gated feed-forward, no biases, no position table and rotary positions on
 * half-split pairs (transformers' rotate_half) with grouped-query
 * attention.  What this library does not compute (rope_scaling, biases, a
 * head_dim other than hidden_size / heads) is refused, named. */
static tfm_status llama_config(const cJSON *root, tfm_model_config *c,
                               tfm_model_options *o, tfm_layer_options *lo)
{
    int64_t vocab = 0, d = 0, ff = 0, layers = 0, heads = 0, kv_heads = 0;
    int64_t positions = 0, head_dim = 0;
    double eps = 0, theta = 0;
    int tied = 0, attn_bias = 0, mlp_bias = 0;
    const char *act_name;
    tfm_status st;
    if ((st = tfm__hub_cfg_int(root, "vocab_size", 32000, 1, &vocab)) ||
        (st = tfm__hub_cfg_int(root, "hidden_size", 4096, 1, &d)) ||
        (st = tfm__hub_cfg_int(root, "intermediate_size", 11008, 1, &ff)) ||
        (st = tfm__hub_cfg_int(root, "num_hidden_layers", 32, 1, &layers)) ||
        (st = tfm__hub_cfg_int(root, "num_attention_heads", 32, 1, &heads)) ||
        (st = tfm__hub_cfg_int(root, "num_key_value_heads", heads, 1,
                               &kv_heads)) ||
        (st = tfm__hub_cfg_int(root, "max_position_embeddings", 2048, 1,
                               &positions)) ||
        (st = tfm__hub_cfg_positive(root, "rms_norm_eps", 1e-6, &eps)) ||
        (st = tfm__hub_cfg_positive(root, "rope_theta", 10000.0, &theta)) ||
        (st = tfm__hub_cfg_string(root, "hidden_act", &act_name)) ||
        (st = tfm__hub_cfg_bool(root, "tie_word_embeddings", 0, &tied)) ||
        (st = tfm__hub_cfg_bool(root, "attention_bias", 0, &attn_bias)) ||
        (st = tfm__hub_cfg_bool(root, "mlp_bias", 0, &mlp_bias)))
        return st;
    if (vocab > INT32_MAX || d > INT32_MAX || ff > INT32_MAX / 2)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" is over 2^31-1",
                         vocab > INT32_MAX ? "vocab_size"
                         : d > INT32_MAX   ? "hidden_size"
                                           : "intermediate_size");
    if ((st = tfm__hub_cfg_divides(heads, "num_attention_heads", d,
                                   "hidden_size")))
        return st;
    if ((st = tfm__hub_cfg_divides(kv_heads, "num_key_value_heads", heads,
                                   "num_attention_heads")))
        return st;
    if ((st = tfm__hub_cfg_int(root, "head_dim", d / heads, 1, &head_dim)))
        return st;
    if (head_dim != d / heads)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"head_dim\" %lld is not hidden_size / "
                         "num_attention_heads = %lld, which this library "
                         "needs", (long long)head_dim, (long long)(d / heads));
    if ((d / heads) % 2 != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "rotary positions need an even head_dim, not %lld",
                         (long long)(d / heads));
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(root,
                                                            "rope_scaling");
    if (scaling && !cJSON_IsNull(scaling))
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"rope_scaling\" is set: only plain "
                         "rotary positions (rope_scaling null) are "
                         "supported");
    /* transformers >= 5 writes {"rope_type", "rope_theta", ...} here in
     * place of the top-level rope_theta and rope_scaling. */
    const cJSON *rope = cJSON_GetObjectItemCaseSensitive(root,
                                                         "rope_parameters");
    if (rope && !cJSON_IsNull(rope)) {
        const char *type = NULL;
        if (!cJSON_IsObject(rope))
            return tfm__fail(TFM_ERR_FORMAT, "config.json "
                             "\"rope_parameters\" must be an object");
        if ((st = tfm__hub_cfg_string(rope, "rope_type", &type)))
            return st;
        if (type && strcmp(type, "default") != 0)
            return tfm__fail(TFM_ERR_UNSUPPORTED,
                             "config.json \"rope_parameters\" "
                             "\"rope_type\" \"%.40s\": only \"default\" "
                             "rotary positions are supported", type);
        if ((st = tfm__hub_cfg_positive(rope, "rope_theta", theta, &theta)))
            return st;
    }
    if (!(theta > 1.0))
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"rope_theta\" %g: rotary bases <= 1 "
                         "are not supported", theta);
    if ((st = tfm__hub_cfg_float32(eps, "rms_norm_eps")))
        return st;
    if (attn_bias || mlp_bias)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\": true is not supported",
                         attn_bias ? "attention_bias" : "mlp_bias");
    int act;
    if ((st = tfm__hub_cfg_activation(act_name, "silu", "hidden_act",
                                      "silu, gelu, gelu_pytorch_tanh, relu",
                                      &act)))
        return st;
    tfm__hub_decoder_config(c, d, heads, ff, act, eps, vocab, layers,
                            positions, TFM_POSITIONAL_NONE, tied);
    tfm__hub_llama_options(o, lo, kv_heads, theta, TFM_ROPE_HALF);
    return TFM_OK;
}

void tfm__hub_llama_options(tfm_model_options *o, tfm_layer_options *lo,
                            int64_t kv_heads, double theta, int rope)
{
    tfm_model_options_init(o);
    o->attention.n_kv_heads = kv_heads;
    o->attention.rope = (tfm_rope)rope;
    o->attention.rope_base = theta;
    tfm_layer_options_init(lo);
    lo->bias = 0;
    lo->rms_norm = 1;
    lo->gated = 1;
}

/* The stored tensors of Llama c (LlamaForCausalLM's names, under
 * "model."):
 *   embed_tokens.weight [V, d]                -> token_embedding.weight
 *   layers.<i>.input_layernorm.weight         -> layers.<i>.norm1.weight
 *   layers.<i>.self_attn.q_proj.weight [d, d]  \
 *   layers.<i>.self_attn.k_proj.weight [kv, d]  > rows of
 *   layers.<i>.self_attn.v_proj.weight [kv, d] /  self_attn.in_proj_weight
 *   layers.<i>.self_attn.o_proj.weight        -> self_attn.out_proj.weight
 *   layers.<i>.post_attention_layernorm.weight -> layers.<i>.norm2.weight
 *   layers.<i>.mlp.gate_proj.weight [ff, d]   -> linear1.weight
 *   layers.<i>.mlp.up_proj.weight [ff, d]     -> linear3.weight
 *   layers.<i>.mlp.down_proj.weight [d, ff]   -> linear2.weight
 *   norm.weight                               -> norm.weight
 *   lm_head.weight [V, d] (never prefixed; untied only) -> lm_head.weight
 * kv = num_key_value_heads * head_dim.  No transposes: nn.Linear's layout
 * is ours. */
static tfm_status llama_plan(const tfm_model_config *c,
                             const tfm_model_options *o,
                             const tfm_layer_options *lo, tfm__hub_plan *p)
{
    (void)lo;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t kv = o->attention.n_kv_heads * (d / c->layer.n_heads);
    const int64_t V = c->vocab_size;
    tfm_status st;
    if ((st = tfm__hub_plan_add(p, "embed_tokens.weight",
                                "token_embedding.weight", 0, 2, V, d)))
        return st;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const tfm__hub_plan_row L[] = {
            { "input_layernorm.weight", "norm1.weight", 0, 1, d, 0, 0 },
            { "self_attn.q_proj.weight", "self_attn.in_proj_weight", 0, 2, d,
              d, 0 },
            { "self_attn.k_proj.weight", "self_attn.in_proj_weight", 0, 2, kv,
              d, d * d },
            { "self_attn.v_proj.weight", "self_attn.in_proj_weight", 0, 2, kv,
              d, (d + kv) * d },
            { "self_attn.o_proj.weight", "self_attn.out_proj.weight", 0, 2, d,
              d, 0 },
            { "post_attention_layernorm.weight", "norm2.weight", 0, 1, d, 0,
              0 },
            { "mlp.gate_proj.weight", "linear1.weight", 0, 2, ff, d, 0 },
            { "mlp.up_proj.weight", "linear3.weight", 0, 2, ff, d, 0 },
            { "mlp.down_proj.weight", "linear2.weight", 0, 2, d, ff, 0 },
        };
        if ((st = tfm__hub_plan_add_rows(p, "layers.", i, L,
                                         TFM__HUB_N_ROWS(L))))
            return st;
    }
    if ((st = tfm__hub_plan_add(p, "norm.weight", "norm.weight", 0, 1, d, 0)))
        return st;
    return tfm__hub_plan_add_head(p, c);
}

/* What a Llama checkpoint may hold that the model does not use: the tied
 * head, and the rotary inverse frequencies older saves kept as buffers. */
static int llama_ignored(const tfm__hub_plan *p, const char *name)
{
    if (strcmp(name, "lm_head.weight") == 0)
        return 1; /* tied (not planned when untied) */
    const char *rest = tfm__hub_unprefixed(p, name);
    return rest && strncmp(rest, "layers.", 7) == 0 &&
           tfm__hub_ends_with(name, ".self_attn.rotary_emb.inv_freq");
}

/* LlamaForCausalLM saves LlamaModel's tensors under "model."; a plan entry
 * per layer (9) and 3 outside. */
const tfm__hub_family tfm__hub_llama = {
    .model_type = "llama", .prefix = "model.",
    .layers_key = "num_hidden_layers", .per_layer = 9, .outside = 3,
    .config = llama_config, .plan = llama_plan, .ignored = llama_ignored,
};
