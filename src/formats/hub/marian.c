/* The Marian checkpoint family of the hub loader (hub_family.h): its
 * config reader, plan and ignored names, its hooks (the position table:
 * read or computed; the shapes of the tied copies it drops), and its row
 * tfm__hub_marian.
 *
 * Marian (model_type "marian"; transformers' modeling_marian.py
 * MarianMTModel, the opus-mt checkpoints) becomes an encoder-decoder,
 * post-norm model without final norms, with Marian's sinusoidal table as
 * learned positions and final_logits_bias as the logits' bias:
 * marian_plan below gives the names. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "formats/hub/hub_family.h"
#include "models/model_impl.h"
#include "base/tensor_impl.h"

/* The model of a Marian config.json (transformers' MarianConfig defaults
 * for absent keys: vocab_size 58101, decoder_vocab_size = vocab_size,
 * d_model 1024, encoder_layers and decoder_layers 12, encoder_ffn_dim and
 * decoder_ffn_dim 4096, encoder_attention_heads and
 * decoder_attention_heads 16, activation_function "gelu",
 * max_position_embeddings 1024, scale_embedding false,
 * share_encoder_decoder_embeddings and tie_word_embeddings true): an
 * encoder-decoder, post-norm model (modeling_marian.py's
 * MarianEncoderLayer / MarianDecoderLayer: LayerNorm after each residual,
 * eps 1e-5, nn.LayerNorm's default) without final norms, the embeddings
 * scaled by sqrt(d_model) when scale_embedding, the shared table as the
 * head and final_logits_bias as the logits' bias (tfm_layer_options'
 * final_norm 0 and head_bias).  Marian's sinusoidal positions
 * (MarianSinusoidalPositionalEmbedding: sin in the first half of the
 * columns, cos in the second, angle p / 10000^(2i/d)) are a table, read
 * from the checkpoint's "model.encoder.embed_positions.weight" (or
 * computed, when the checkpoint has none), so the model's positions are
 * learned ones.  What one model of ours cannot hold (separate source and
 * target vocabularies, unequal encoder and decoder widths) is refused,
 * named; the BART-era keys normalize_before, normalize_embedding,
 * add_final_layer_norm and static_position_embeddings are ignored, as
 * transformers' MarianModel ignores them. */
static tfm_status marian_config(const cJSON *root, tfm_model_config *c,
                                tfm_model_options *o, tfm_layer_options *lo)
{
    int64_t vocab = 0, dec_vocab = 0, d = 0, enc_layers = 0, dec_layers = 0;
    int64_t enc_ff = 0, dec_ff = 0, enc_heads = 0, dec_heads = 0;
    int64_t positions = 0;
    int scale = 0, shared = 1, tied = 1;
    const char *act_name;
    tfm_status st;
    if ((st = tfm__hub_cfg_int(root, "vocab_size", 58101, 1, &vocab)) ||
        (st = tfm__hub_cfg_int(root, "decoder_vocab_size", vocab, 1,
                               &dec_vocab)) ||
        (st = tfm__hub_cfg_int(root, "d_model", 1024, 1, &d)) ||
        (st = tfm__hub_cfg_int(root, "encoder_layers", 12, 1, &enc_layers)) ||
        (st = tfm__hub_cfg_int(root, "decoder_layers", 12, 1, &dec_layers)) ||
        (st = tfm__hub_cfg_int(root, "encoder_ffn_dim", 4096, 1, &enc_ff)) ||
        (st = tfm__hub_cfg_int(root, "decoder_ffn_dim", 4096, 1, &dec_ff)) ||
        (st = tfm__hub_cfg_int(root, "encoder_attention_heads", 16, 1,
                               &enc_heads)) ||
        (st = tfm__hub_cfg_int(root, "decoder_attention_heads", 16, 1,
                               &dec_heads)) ||
        (st = tfm__hub_cfg_int(root, "max_position_embeddings", 1024, 1,
                               &positions)) ||
        (st = tfm__hub_cfg_string(root, "activation_function", &act_name)) ||
        (st = tfm__hub_cfg_bool(root, "scale_embedding", 0, &scale)) ||
        (st = tfm__hub_cfg_bool(root, "share_encoder_decoder_embeddings", 1,
                                &shared)) ||
        (st = tfm__hub_cfg_bool(root, "tie_word_embeddings", 1, &tied)))
        return st;
    if (vocab > INT32_MAX || d > INT32_MAX || enc_ff > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" is over 2^31-1",
                         vocab > INT32_MAX ? "vocab_size"
                         : d > INT32_MAX   ? "d_model"
                                           : "encoder_ffn_dim");
    if (!shared || dec_vocab != vocab)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\": separate source and target "
                         "embeddings are not supported (one shared table "
                         "is)", !shared ? "share_encoder_decoder_embeddings"
                                        : "decoder_vocab_size");
    if (dec_ff != enc_ff || dec_heads != enc_heads)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\" %lld differs from \"%s\" %lld: "
                         "the encoder and decoder layers must have one "
                         "shape", dec_ff != enc_ff ? "decoder_ffn_dim"
                                                   : "decoder_attention_heads",
                         (long long)(dec_ff != enc_ff ? dec_ff : dec_heads),
                         dec_ff != enc_ff ? "encoder_ffn_dim"
                                          : "encoder_attention_heads",
                         (long long)(dec_ff != enc_ff ? enc_ff : enc_heads));
    if ((st = tfm__hub_cfg_divides(enc_heads, "encoder_attention_heads", d,
                                   "d_model")))
        return st;
    int act;
    if ((st = tfm__hub_cfg_activation(act_name, "gelu", "activation_function",
                                      "swish, silu, gelu, gelu_new, relu",
                                      &act)))
        return st;
    tfm__hub_decoder_config(c, d, enc_heads, enc_ff, act, 1e-5, vocab, 0,
                            positions, TFM_POSITIONAL_LEARNED, tied);
    c->architecture = TFM_ARCH_ENCODER_DECODER;
    c->layer.norm_first = 0;
    c->n_encoder_layers = enc_layers;
    c->n_decoder_layers = dec_layers;
    c->embedding_scale = scale;
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    lo->final_norm = 0;
    lo->head_bias = 1;
    return TFM_OK;
}

/* The stored tensors of Marian c (MarianMTModel's names: MarianModel's
 * under "model.", final_logits_bias and lm_head never prefixed):
 *   shared.weight [V, d]                    -> token_embedding.weight
 *   encoder.embed_positions.weight (if any) -> position_embedding.weight
 *   encoder.layers.<i>.self_attn.{q,k,v}_proj.* -> rows of
 *       transformer.encoder.layers.<i>.self_attn.in_proj_*
 *   encoder.layers.<i>.self_attn.out_proj.* -> ...self_attn.out_proj.*
 *   encoder.layers.<i>.self_attn_layer_norm.* -> ...norm1.*
 *   encoder.layers.<i>.fc1.*, fc2.*         -> ...linear1.*, linear2.*
 *   encoder.layers.<i>.final_layer_norm.*   -> ...norm2.*
 *   decoder.layers.<i>.self_attn.*, self_attn_layer_norm.* -> the same
 *       under transformer.decoder.layers.<i>. (norm1)
 *   decoder.layers.<i>.encoder_attn.{q,k,v,out}_proj.* -> multihead_attn.*
 *   decoder.layers.<i>.encoder_attn_layer_norm.* -> norm2.*
 *   decoder.layers.<i>.fc1.*, fc2.*, final_layer_norm.* -> linear1.*,
 *       linear2.*, norm3.*
 *   final_logits_bias [1, V]                -> lm_head.bias
 *   lm_head.weight (untied only)            -> lm_head.weight
 * No transposes: nn.Linear's layout is ours. */
static tfm_status marian_attention_rows(tfm__hub_plan *p, const char *stack,
                                        int64_t i, const char *stored,
                                        const char *ours, int64_t d)
{
    char s_name[TFM__HUB_NAME_SIZE], o_name[TFM__HUB_NAME_SIZE];
    const char *const qkv[3] = { "q_proj", "k_proj", "v_proj" };
    tfm_status st = TFM_OK;
    for (int k = 0; k < 4 && st == TFM_OK; k++) {
        for (int b = 0; b < 2 && st == TFM_OK; b++) {
            snprintf(s_name, sizeof s_name, "%s.layers.%lld.%s.%s.%s", stack,
                     (long long)i, stored, k < 3 ? qkv[k] : "out_proj",
                     b ? "bias" : "weight");
            snprintf(o_name, sizeof o_name,
                     "transformer.%s.layers.%lld.%s.%s%s", stack,
                     (long long)i, ours, k < 3 ? "in_proj_" : "out_proj.",
                     b ? "bias" : "weight");
            st = tfm__hub_plan_add(p, s_name, o_name, 0, b ? 1 : 2, d,
                                   b ? 0 : d);
            if (st == TFM_OK)
                p->t[p->n - 1].offset = k < 3 ? k * d * (b ? 1 : d) : 0;
        }
    }
    return st;
}

/* A Marian layer's tensors but its attention: rows[k] ("stored",
 * "ours") of `stack`'s layer i, LayerNorms [d] and fc1 / fc2. */
static tfm_status marian_layer_rows(tfm__hub_plan *p, const char *stack,
                                    int64_t i, const char *const (*names)[2],
                                    int n, int64_t d, int64_t ff)
{
    char s_name[TFM__HUB_NAME_SIZE], o_name[TFM__HUB_NAME_SIZE];
    tfm_status st = TFM_OK;
    for (int k = 0; k < n && st == TFM_OK; k++) {
        const int fc1 = strcmp(names[k][0], "fc1") == 0;
        const int fc2 = strcmp(names[k][0], "fc2") == 0;
        for (int b = 0; b < 2 && st == TFM_OK; b++) {
            snprintf(s_name, sizeof s_name, "%s.layers.%lld.%s.%s", stack,
                     (long long)i, names[k][0], b ? "bias" : "weight");
            snprintf(o_name, sizeof o_name, "transformer.%s.layers.%lld.%s.%s",
                     stack, (long long)i, names[k][1], b ? "bias" : "weight");
            const int64_t rows = fc1 ? ff : d;
            const int64_t cols = !b && (fc1 || fc2) ? (fc2 ? ff : d) : 0;
            st = tfm__hub_plan_add(p, s_name, o_name, 0, cols ? 2 : 1, rows,
                                   cols);
        }
    }
    return st;
}

static tfm_status marian_plan(const tfm_model_config *c,
                              const tfm_model_options *o,
                              const tfm_layer_options *lo, tfm__hub_plan *p)
{
    (void)o;
    (void)lo;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t V = c->vocab_size;
    static const char *const ENC[][2] = {
        { "self_attn_layer_norm", "norm1" }, { "fc1", "linear1" },
        { "fc2", "linear2" }, { "final_layer_norm", "norm2" },
    };
    static const char *const DEC[][2] = {
        { "self_attn_layer_norm", "norm1" },
        { "encoder_attn_layer_norm", "norm2" }, { "fc1", "linear1" },
        { "fc2", "linear2" }, { "final_layer_norm", "norm3" },
    };
    /* the computed table [context_length, d], bounded by the loader */
    if (p->computed)
        p->computed_numel = c->context_length > INT64_MAX / d
                                ? INT64_MAX : c->context_length * d;
    tfm_status st = tfm__hub_plan_add(p, "shared.weight",
                                      "token_embedding.weight", 0, 2, V, d);
    if (st == TFM_OK && p->has_positions)
        st = tfm__hub_plan_add(p, "encoder.embed_positions.weight",
                               "position_embedding.weight", 0, 2,
                               c->context_length, d);
    for (int64_t i = 0; st == TFM_OK && i < c->n_encoder_layers; i++)
        if ((st = marian_attention_rows(p, "encoder", i, "self_attn",
                                        "self_attn", d)) == TFM_OK)
            st = marian_layer_rows(p, "encoder", i, ENC, 4, d, ff);
    for (int64_t i = 0; st == TFM_OK && i < c->n_decoder_layers; i++)
        if ((st = marian_attention_rows(p, "decoder", i, "self_attn",
                                        "self_attn", d)) == TFM_OK &&
            (st = marian_attention_rows(p, "decoder", i, "encoder_attn",
                                        "multihead_attn", d)) == TFM_OK)
            st = marian_layer_rows(p, "decoder", i, DEC, 5, d, ff);
    const tfm__hub_plan_row B[] = {
        { "final_logits_bias", "lm_head.bias", 0, 2, 1, V, 0 },
    };
    if (st == TFM_OK)
        st = tfm__hub_plan_add_unprefixed(p, B, TFM__HUB_N_ROWS(B));
    return st == TFM_OK ? tfm__hub_plan_add_head(p, c) : st;
}

/* What a Marian checkpoint may hold that the model does not use: the
 * tied copies of the shared table (the encoder's and decoder's
 * embed_tokens, the tied lm_head) and the decoder's copy of the position
 * table (transformers fills both tables from one formula).  Their shapes
 * are checked (marian_check_copies), their values not compared. */
static int marian_ignored(const tfm__hub_plan *p, const char *name)
{
    if (strcmp(name, "lm_head.weight") == 0)
        return 1; /* tied (not planned when untied) */
    if (!(name = tfm__hub_unprefixed(p, name)))
        return 0;
    return strcmp(name, "encoder.embed_tokens.weight") == 0 ||
           strcmp(name, "decoder.embed_tokens.weight") == 0 ||
           strcmp(name, "decoder.embed_positions.weight") == 0 ||
           (!p->has_positions &&
            strcmp(name, "encoder.embed_positions.weight") == 0);
}

/* The copies marian_ignored drops must still be what they copy: the tied
 * tables [V, d] and the decoder's position table [positions, d], of a
 * float dtype (transformers refuses a size mismatch of any of them). */
static tfm_status marian_check_copies(const tfm__hub_plan *p,
                                      const tfm__hub_shards *s,
                                      const tfm_model_config *c)
{
    const int64_t d = c->layer.d_model;
    const struct { const char *name; int prefixed; int64_t rows; } copies[] = {
        { "encoder.embed_tokens.weight", 1, c->vocab_size },
        { "decoder.embed_tokens.weight", 1, c->vocab_size },
        { "decoder.embed_positions.weight", 1, c->context_length },
        { "lm_head.weight", 0, c->vocab_size },
    };
    for (size_t k = 0; k < sizeof copies / sizeof copies[0]; k++) {
        char name[TFM__HUB_NAME_SIZE];
        snprintf(name, sizeof name, "%s%s",
                 copies[k].prefixed ? p->prefix : "", copies[k].name);
        const int f = tfm__hub_shards_find(s, name);
        if (f < 0 || (!c->tied_embeddings && !copies[k].prefixed))
            continue; /* absent, or the untied head (planned) */
        tfm_dtype dtype;
        int rank;
        int64_t shape[TFM_SAFETENSORS_MAX_RANK];
        tfm_safetensors_info(s->files[f], name, &dtype, &rank, shape);
        if ((dtype != TFM_DTYPE_F32 && dtype != TFM_DTYPE_F16 &&
             dtype != TFM_DTYPE_BF16 && dtype != TFM_DTYPE_F64) ||
            rank != 2 || shape[0] != copies[k].rows || shape[1] != d) {
            char has[96], want[96];
            const int64_t w[2] = { copies[k].rows, d };
            tfm__format_shape(has, sizeof has, rank, shape);
            tfm__format_shape(want, sizeof want, 2, w);
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor " TFM__HUB_QUOTED
                             " has shape %s (or an integer "
                             "dtype), but config.json gives %s float",
                             name, has, want);
        }
    }
    return TFM_OK;
}

/* Marian's sinusoidal table (MarianSinusoidalPositionalEmbedding) into
 * the model's learned positions, for a checkpoint without one: row p,
 * column i < ceil(d/2) = sin(p / 10000^(2i/d)), column ceil(d/2) + i =
 * cos(p / 10000^(2i/d)), angles in double precision. */
static void marian_positions(tfm_module *model)
{
    tfm__model *m = (tfm__model *)model;
    const int64_t d = m->config.layer.d_model;
    const int64_t half = (d + 1) / 2;
    float *w = m->position_embedding->weight;
    for (int64_t pos = 0; pos < m->config.context_length; pos++) {
        float *row = w + pos * d;
        for (int64_t j = 0; j < d; j += 2)
            row[j / 2] = (float)sin((double)pos /
                                    pow(10000.0, (double)j / (double)d));
        for (int64_t j = 1; j < d; j += 2)
            row[half + j / 2] = (float)cos(
                (double)pos / pow(10000.0, (double)(j - 1) / (double)d));
    }
}

/* before_plan: whether the checkpoint stores the encoder's position table
 * (read, then) or not (computed by marian_compute). */
static void marian_before_plan(tfm__hub_plan *p, const tfm__hub_shards *s)
{
    char name[TFM__HUB_NAME_SIZE];
    snprintf(name, sizeof name, "%sencoder.embed_positions.weight",
             p->prefix);
    p->has_positions = tfm__hub_shards_find(s, name) >= 0;
    if (!p->has_positions)
        p->computed = "position_embedding.weight";
}

/* compute: the position table a checkpoint without one lacks. */
static void marian_compute(const tfm__hub_plan *p, tfm_module *model)
{
    (void)p;
    marian_positions(model);
}

/* MarianMTModel saves MarianModel's tensors under "model."; a plan entry
 * per encoder layer (16) and decoder layer (26), the larger counted for
 * both (n_layers is the larger stack), and 4 outside. */
const tfm__hub_family tfm__hub_marian = {
    .model_type = "marian", .prefix = "model.", .layers_key = "encoder_layers",
    .decoder_layers_key = "decoder_layers", .per_layer = 42, .outside = 4,
    .config = marian_config, .plan = marian_plan, .ignored = marian_ignored,
    .before_plan = marian_before_plan, .check_ignored = marian_check_copies,
    .compute = marian_compute,
};
