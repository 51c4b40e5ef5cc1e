/* The GPT-2 checkpoint family of the hub loader (hub_family.h): its
 * config reader, plan and ignored names, and its row tfm__hub_gpt2.
 *
 * GPT-2 (model_type "gpt2"; Radford et al. 2019, transformers'
 * modeling_gpt2.py GPT2Model / GPT2LMHeadModel) becomes a decoder-only
 * model with pre-norm blocks, learned positions and the head tied to the
 * token embedding:
 *   wte.weight [vocab, d]        -> token_embedding.weight
 *   wpe.weight [n_positions, d]  -> position_embedding.weight
 *   h.<i>.ln_1.*                 -> layers.<i>.norm1.*
 *   h.<i>.attn.c_attn.weight [d, 3d] (Conv1D: [in, out], q | k | v
 *                                   columns) -> self_attn.in_proj_weight
 *                                   [3d, d], transposed
 *   h.<i>.attn.c_attn.bias       -> self_attn.in_proj_bias
 *   h.<i>.attn.c_proj.weight [d, d] -> self_attn.out_proj.weight, transposed
 *   h.<i>.ln_2.*                 -> layers.<i>.norm2.*
 *   h.<i>.mlp.c_fc.weight [d, n_inner] -> linear1.weight, transposed
 *   h.<i>.mlp.c_proj.weight [n_inner, d] -> linear2.weight, transposed
 *   ln_f.*                       -> norm.*
 * GPT2LMHeadModel saves the same names under "transformer." and may carry
 * "lm_head.weight": ignored when the embeddings are tied (transformers
 * ties it to wte after loading), the head when tie_word_embeddings is
 * false.  The causal-mask buffers "h.<i>.attn.bias" and
 * "h.<i>.attn.masked_bias" of older saves are ignored.  The attention is
 * GPT-2's: scores q k^T / sqrt(d / n_head) under a causal mask. */
#include <string.h>

#include "base/error.h"
#include "formats/hub/hub_family.h"

/* The model configuration of a GPT-2 config.json (GPT2Config's defaults
 * for absent keys: vocab_size 50257, n_positions 1024, n_embd 768, n_layer
 * 12, n_head 12, n_inner null = 4 n_embd, activation_function "gelu_new",
 * layer_norm_epsilon 1e-5, tie_word_embeddings true). */
static tfm_status gpt2_config(const cJSON *root, tfm_model_config *c,
                              tfm_model_options *o, tfm_layer_options *lo)
{
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    int64_t vocab = 0, positions = 0, d = 0, layers = 0, heads = 0;
    int64_t inner = 0;
    double eps = 0;
    int tied = 1, scale = 1, by_layer = 0, cross = 0;
    const char *act_name;
    tfm_status st;
    if ((st = tfm__hub_cfg_int(root, "vocab_size", 50257, 1, &vocab)) ||
        (st = tfm__hub_cfg_int(root, "n_positions", 1024, 1, &positions)) ||
        (st = tfm__hub_cfg_int(root, "n_embd", 768, 1, &d)) ||
        (st = tfm__hub_cfg_int(root, "n_layer", 12, 1, &layers)) ||
        (st = tfm__hub_cfg_int(root, "n_head", 12, 1, &heads)) ||
        (st = tfm__hub_cfg_int(root, "n_inner", 4 * d, 1, &inner)) ||
        (st = tfm__hub_cfg_positive(root, "layer_norm_epsilon", 1e-5, &eps)) ||
        (st = tfm__hub_cfg_string(root, "activation_function", &act_name)) ||
        (st = tfm__hub_cfg_bool(root, "tie_word_embeddings", 1, &tied)) ||
        (st = tfm__hub_cfg_bool(root, "scale_attn_weights", 1, &scale)) ||
        (st = tfm__hub_cfg_bool(root, "scale_attn_by_inverse_layer_idx", 0,
                                &by_layer)) ||
        (st = tfm__hub_cfg_bool(root, "add_cross_attention", 0, &cross)))
        return st;
    if (vocab > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"vocab_size\" %lld is over 2^31-1",
                         (long long)vocab);
    if ((st = tfm__hub_cfg_divides(heads, "n_head", d, "n_embd")))
        return st;
    int act;
    if ((st = tfm__hub_cfg_activation(act_name, NULL, "activation_function",
                                      "gelu_new, gelu_pytorch_tanh, "
                                      "gelu_fast, gelu, relu, silu",
                                      &act)))
        return st;
    if (!scale || by_layer || cross)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\": %s is not supported",
                         !scale ? "scale_attn_weights"
                         : by_layer ? "scale_attn_by_inverse_layer_idx"
                                    : "add_cross_attention",
                         !scale ? "false" : "true");
    tfm__hub_decoder_config(c, d, heads, inner, act, eps, vocab, layers,
                            positions, TFM_POSITIONAL_LEARNED, tied);
    return TFM_OK;
}

/* The stored tensors of GPT-2 c, by the prefix the checkpoint uses. */
static tfm_status gpt2_plan(const tfm_model_config *c,
                            const tfm_model_options *o,
                            const tfm_layer_options *lo, tfm__hub_plan *p)
{
    (void)o;
    (void)lo;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t V = c->vocab_size;
    tfm_status st;
    if ((st = tfm__hub_plan_add(p, "wte.weight", "token_embedding.weight", 0,
                                2, V, d)) ||
        (st = tfm__hub_plan_add(p, "wpe.weight", "position_embedding.weight",
                                0, 2, c->context_length, d)))
        return st;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const tfm__hub_plan_row L[] = {
            { "ln_1.weight", "norm1.weight", 0, 1, d, 0, 0 },
            { "ln_1.bias", "norm1.bias", 0, 1, d, 0, 0 },
            { "attn.c_attn.weight", "self_attn.in_proj_weight", 1, 2, d,
              3 * d, 0 },
            { "attn.c_attn.bias", "self_attn.in_proj_bias", 0, 1, 3 * d, 0,
              0 },
            { "attn.c_proj.weight", "self_attn.out_proj.weight", 1, 2, d, d,
              0 },
            { "attn.c_proj.bias", "self_attn.out_proj.bias", 0, 1, d, 0, 0 },
            { "ln_2.weight", "norm2.weight", 0, 1, d, 0, 0 },
            { "ln_2.bias", "norm2.bias", 0, 1, d, 0, 0 },
            { "mlp.c_fc.weight", "linear1.weight", 1, 2, d, ff, 0 },
            { "mlp.c_fc.bias", "linear1.bias", 0, 1, ff, 0, 0 },
            { "mlp.c_proj.weight", "linear2.weight", 1, 2, ff, d, 0 },
            { "mlp.c_proj.bias", "linear2.bias", 0, 1, d, 0, 0 },
        };
        if ((st = tfm__hub_plan_add_rows(p, "h.", i, L, TFM__HUB_N_ROWS(L))))
            return st;
    }
    if ((st =
             tfm__hub_plan_add(p, "ln_f.weight", "norm.weight", 0, 1, d, 0)) ||
        (st = tfm__hub_plan_add(p, "ln_f.bias", "norm.bias", 0, 1, d, 0)))
        return st;
    return tfm__hub_plan_add_head(p, c);
}

/* The tensors a GPT-2 checkpoint may hold that the model does not use:
 * the tied head and the attention-mask buffers of older saves. */
static int gpt2_ignored(const tfm__hub_plan *p, const char *name)
{
    if (strcmp(name, "lm_head.weight") == 0)
        return 1; /* tied: wte is the head (not planned when untied) */
    const char *rest = tfm__hub_unprefixed(p, name);
    if (!rest || strncmp(rest, "h.", 2) != 0)
        return 0;
    return tfm__hub_ends_with(name, ".attn.bias") ||
           tfm__hub_ends_with(name, ".attn.masked_bias");
}

/* GPT2LMHeadModel saves GPT2Model's tensors under "transformer."; a plan
 * entry per layer (12) and 5 outside. */
const tfm__hub_family tfm__hub_gpt2 = {
    .model_type = "gpt2", .prefix = "transformer.", .layers_key = "n_layer",
    .per_layer = 12, .outside = 5, .config = gpt2_config, .plan = gpt2_plan,
    .ignored = gpt2_ignored,
};
