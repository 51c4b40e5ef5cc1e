/*
 * libtransformer: whole models, model files, KV-cache decoding and
 * generation.
 *
 * Three architectures share one configuration and one file format:
 *   decoder-only (GPT style, Radford et al. 2018/2019): token embedding
 *     + positional encoding + n_layers causal self-attention blocks
 *     + final LayerNorm + language-model head (tied to the token embedding
 *     or its own "lm_head.weight");
 *   encoder-only (BERT style, Devlin et al. 2019): the same without the
 *     causal mask (bidirectional), logits per position;
 *   encoder-decoder (Vaswani et al. 2017): source and target embeddings
 *     shared, an nn.Transformer in the middle, a head over the vocabulary.
 * The blocks are nn.TransformerEncoderLayer / DecoderLayer (layers.h), so a
 * decoder-only model's parameters are named
 *   "token_embedding.weight" [vocab_size, d_model]
 *   "position_embedding.weight" [context_length, d_model] (learned only)
 *   "layers.<i>.self_attn.in_proj_weight" ... (encoder layer names)
 *   "norm.weight", "norm.bias"            final LayerNorm
 *   "lm_head.weight" [vocab_size, d_model] (only when not tied)
 * an encoder-decoder model's "token_embedding.weight", "transformer.encoder.*",
 * "transformer.decoder.*", "lm_head.weight" (when not tied).
 *
 * Model files are safetensors files (safetensors.h) whose "__metadata__"
 * holds the configuration as strings, so a file describes itself:
 *   "format": "libtransformer", "tfm.architecture": "decoder_only" |
 *   "encoder_only" | "encoder_decoder", "tfm.vocab_size", "tfm.d_model",
 *   "tfm.n_heads", "tfm.n_layers" (or "tfm.n_encoder_layers" and
 *   "tfm.n_decoder_layers"), "tfm.d_ff", "tfm.context_length",
 *   "tfm.norm_first" ("true"/"false"), "tfm.activation" ("relu", "gelu",
 *   "gelu_tanh", "silu"), "tfm.layer_norm_eps", "tfm.positional" ("learned",
 *   "sinusoidal", "none"), "tfm.tied_embeddings", "tfm.embedding_scale",
 *   "tfm.bias" ("false" for the bias-free blocks of tfm_model_create_v2;
 *   absent: biases), "tfm.rms_norm" and "tfm.gated" ("true" for
 *   tfm_layer_options' rms_norm / gated; absent: false), the model parts
 *   of tfm_layer_options (each absent at its default):
 *   "tfm.type_vocab_size" (a whole number), "tfm.embedding_norm" and
 *   "tfm.head_transform" ("true"), "tfm.final_norm" ("false"),
 *   "tfm.head_bias" ("true": a logits bias without a head transform),
 *   "tfm.patch_size", "tfm.image_size", "tfm.num_channels" (whole numbers,
 *   an image model's; absent: 0); and for the
 *   tokenizer (tokenizer.h) "tfm.tokenizer": "char", "tfm.vocab".
 */
#ifndef TRANSFORMER_MODEL_H
#define TRANSFORMER_MODEL_H

#include "layers.h"
#include "attention.h"
#include "embedding.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Append-only. */
typedef enum tfm_architecture {
    TFM_ARCH_DECODER_ONLY = 1,
    TFM_ARCH_ENCODER_ONLY = 2,
    TFM_ARCH_ENCODER_DECODER = 3,
    TFM_ARCH_COUNT               /* since 1.2.0; grows, never store it */
} tfm_architecture;

/* Append-only. */
typedef enum tfm_positional {
    TFM_POSITIONAL_NONE = 0,
    TFM_POSITIONAL_LEARNED = 1,     /* "position_embedding.weight" table */
    TFM_POSITIONAL_SINUSOIDAL = 2,  /* embedding.h, interleaved sin/cos */
    TFM_POSITIONAL_SINUSOIDAL_CONCAT = 3, /* embedding.h: sin | cos halves */
    TFM_POSITIONAL_COUNT         /* since 1.2.0; grows, never store it */
} tfm_positional;

typedef struct tfm_model_config {
    tfm_architecture architecture;
    tfm_layer_config layer;      /* d_model, n_heads, d_ff, activation ... */
    int64_t vocab_size;
    int64_t n_layers;            /* decoder-only / encoder-only blocks */
    int64_t n_encoder_layers;    /* encoder-decoder only */
    int64_t n_decoder_layers;    /* encoder-decoder only */
    int64_t context_length;      /* longest sequence the model accepts */
    tfm_positional positional;
    int tied_embeddings;         /* head weight = token embedding */
    int embedding_scale;         /* multiply embeddings by sqrt(d_model) */
} tfm_model_config;

/* A model is a tfm_module of kind TFM_MODULE_DECODER_ONLY,
 * TFM_MODULE_ENCODER_ONLY or TFM_MODULE_ENCODER_DECODER, so the parameter
 * functions of module.h apply to it.
 *
 * Creates a model with zero parameters (LayerNorm scales one).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (unknown
 * architecture or positional kind, a size < 1, n_heads not dividing
 * d_model), TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY.  *out is freed with tfm_module_free. */
TFM_API tfm_status tfm_model_create(const tfm_model_config *config,
                                    tfm_module **out);

/* Since 1.1.0: tfm_model_options and its three functions, and
 * TFM_POSITIONAL_SINUSOIDAL_CONCAT.
 *
 * Options of a model beyond tfm_model_config (attention.h).  ABI: begins
 * with its size; set it with tfm_model_options_init; the library reads
 * only struct_size bytes (defaults for the rest).  `attention` is last so
 * that it may grow; its own struct_size is ignored here.  So this struct
 * takes no new members (docs/ABI.md, "Self-sized structs are not
 * nested"): later model options come in a struct of their own. */
typedef struct tfm_model_options {
    size_t struct_size;              /* sizeof(tfm_model_options) */
    double positional_base;          /* sinusoidal base; 0 = 10000 */
    tfm_attention_config attention;  /* every self-attention layer's */
} tfm_model_options;

/* Fills *options with the defaults (base 10000, plain attention) and sets
 * the struct sizes.  NULL is a no-op. */
TFM_API void tfm_model_options_init(tfm_model_options *options);

/* tfm_model_create with options (NULL = defaults).  Decoder-only and
 * encoder-only models take any attention variant; every block's
 * self-attention uses it (parameters "layers.<i>.self_attn.*", attention.h)
 * and tfm_kv_cache_* and tfm_model_generate honour it (KV-cache logits
 * equal a full pass).  Encoder-decoder models accept only the default
 * attention (TFM_ERR_UNSUPPORTED otherwise).
 * Model files record the options as metadata (absent keys = defaults):
 *   "tfm.positional_base", "tfm.attention.score" ("scaled_dot", "dot",
 *   "general", "additive", "learned_temperature"), "tfm.attention.scale",
 *   "tfm.attention.additive_dim", "tfm.attention.n_kv_heads",
 *   "tfm.attention.rope" ("none", "adjacent", "half"),
 *   "tfm.attention.rope_base", "tfm.attention.rope_dims",
 *   "tfm.attention.relative" ("none", "shaw", "t5", "alibi"),
 *   "tfm.attention.max_distance", "tfm.attention.relative_values",
 *   "tfm.attention.num_buckets", "tfm.attention.bidirectional",
 *   "tfm.attention.sparsity" ("none", "sliding_window", "dilated",
 *   "bigbird"), "tfm.attention.window", "tfm.attention.dilation",
 *   "tfm.attention.n_global", "tfm.attention.block_size",
 *   "tfm.attention.n_random_blocks", "tfm.attention.seed";
 *   "tfm.positional": "sinusoidal_concat" for TFM_POSITIONAL_SINUSOIDAL_CONCAT.
 * Values are written exactly as above (lowercase names, decimal numbers).
 * A key under "tfm.attention." that is not in this list is refused with
 * TFM_ERR_FORMAT (a misspelt key would otherwise load another model).
 * Errors: those of tfm_model_create and tfm_attention_create,
 * TFM_ERR_UNSUPPORTED (a variant with an encoder-decoder model); on error
 * *out is unchanged.  config and options are only read.  On success *out
 * is freed with tfm_module_free.
 * Deprecated since 1.2: tfm_model_create_v2 with layer_options NULL does
 * the same; this one stays exported and working (docs/ABI.md). */
TFM_DEPRECATED("use tfm_model_create_v2 (layer_options NULL)")
TFM_API tfm_status tfm_model_create_ex(const tfm_model_config *config,
                                       const tfm_model_options *options,
                                       tfm_module **out);

/* tfm_model_create_ex with the layer options of layers.h: the growth
 * path of model construction (tfm_model_options takes no new members, see
 * above; options added later come through tfm_layer_options or a new
 * self-sized struct of their own).  layer_options NULL = the defaults;
 * layer_options->bias 0 builds every block without biases as PyTorch
 * 2.x's bias=False does (the attention's in_proj_bias and out_proj.bias,
 * the feed-forward's linear1.bias and linear2.bias, every LayerNorm's
 * bias, the final norm's included: LayerNorm(x) = (x - mean) /
 * sqrt(var + eps) * weight, Linear(x) = x W^T); the embeddings and the
 * LM head have no bias either way.  Model files record it as metadata
 * "tfm.bias" = "false" (absent: true), and layer_options->rms_norm and
 * ->gated as "tfm.rms_norm" / "tfm.gated" = "true", so tfm_model_save /
 * tfm_model_load round-trip such a model.  layer_options->attention must
 * be NULL: a model's attention variant is options->attention.
 * The model parts of layer_options (BERT's; Devlin et al. 2019,
 * transformers' BertEmbeddings and BertLMPredictionHead), for
 * decoder-only and encoder-only models: type_vocab_size > 0 adds
 * "token_type_embedding.weight" [type_vocab_size, d_model], whose row 0
 * is added to every position (token_type_ids of zeros); embedding_norm a
 * LayerNorm "embedding_norm.*" over the summed embeddings, before their
 * dropout; final_norm 0 drops the final "norm.*"; head_transform makes
 *   logits = LayerNorm(act(h W^T + b)) lm_head^T + lm_head_bias
 * ("head_transform.weight" [d_model, d_model], "head_transform.bias",
 * "head_norm.*" [d_model], "lm_head.bias" [vocab_size], initialised as
 * nn.Linear, LayerNorm and zeros).  head_bias alone adds "lm_head.bias"
 * [vocab_size] to the logits (Marian's final_logits_bias).  An
 * encoder-decoder model takes final_norm 0 (neither stack has its
 * "transformer.encoder.norm.*" / "transformer.decoder.norm.*") and
 * head_bias, and refuses the other parts.  Every step (logits, KV-cache
 * decoding, generation, beam search, backward) computes them.
 * layer_options' patch_size, image_size and num_channels (ViT's;
 * Dosovitskiy et al. 2021) make an encoder-only model of images: no token
 * table, "patch_embedding.*" (tfm_patch_embedding_create's parameters,
 * Conv2d's initialisation), "cls_token" [1, 1, d_model] (N(0, 1), as
 * torch.randn), learned positions with context_length = (image_size /
 * patch_size)^2 + 1, untied "lm_head.weight" [vocab_size, d_model] (the
 * labels; "lm_head.bias" with head_bias); it runs through
 * tfm_model_image_logits and tfm_model_image_backward.  Refused
 * (TFM_ERR_INVALID_ARGUMENT): another architecture, positions that are
 * not learned or another context_length, tied embeddings, an embedding
 * scale, BERT's token-type table, embedding norm or head transform.
 * Errors: those of tfm_model_create_ex, TFM_ERR_INVALID_ARGUMENT
 * (layer_options->struct_size too small, an attention variant in
 * layer_options, BERT's model parts on an encoder-decoder model, a
 * type_vocab_size outside 0 .. 2^31-1); on error *out is unchanged.  config, options and
 * layer_options are only read.  On success *out is freed with
 * tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_model_create_v2(const tfm_model_config *config,
                                       const tfm_model_options *options,
                                       const tfm_layer_options *layer_options,
                                       tfm_module **out);

/* 1 when the model's blocks have biases, 0 when they have none
 * (tfm_model_create_v2 with bias 0), -1 when model is NULL or not a model
 * (no error message is set).  Since 1.2. */
TFM_API int tfm_model_has_bias(const tfm_module *model);

/* Writes the tfm_layer_options the model was made with (bias, rms_norm,
 * gated; attention NULL) into *options, only its first
 * options->struct_size bytes (set it with tfm_layer_options_init), so an
 * older caller's smaller struct is filled as far as it goes.  Errors:
 * TFM_ERR_NULL_ARGUMENT (model or options), TFM_ERR_WRONG_KIND,
 * TFM_ERR_INVALID_ARGUMENT (struct_size smaller than struct_size itself);
 * on error *options is unchanged.  Since 1.2. */
TFM_API tfm_status tfm_model_get_layer_options(const tfm_module *model,
                                               tfm_layer_options *options);

/* Copies the model's options into *options (only its struct_size bytes).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND,
 * TFM_ERR_INVALID_ARGUMENT (struct_size too small). */
TFM_API tfm_status tfm_model_get_options(const tfm_module *model,
                                         tfm_model_options *options);

/* Copies the model's configuration into *config.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND (not a model). */
TFM_API tfm_status tfm_model_get_config(const tfm_module *model,
                                        tfm_model_config *config);

/* Loads a model file: reads the configuration from the metadata, creates
 * the model and sets every parameter from the tensor of the same name
 * (F32, F16 or BF16).  Every parameter must be present with its exact
 * shape, and the file must hold no other tensor.
 * Since 1.2, path may instead be a Hugging Face hub checkpoint directory
 * (what transformers' save_pretrained writes): config.json, read with
 * cJSON, and the weights in model.safetensors or in the shards named by
 * the "weight_map" of model.safetensors.index.json (F32, F16, BF16 or
 * F64, converted to float32).  Supported: "model_type" "gpt2" (Radford et
 * al. 2019; transformers' modeling_gpt2.py GPT2LMHeadModel), which becomes
 * a decoder-only model with pre-norm blocks, learned positions (wpe) and
 * the head tied to wte (an untied "lm_head.weight" when
 * "tie_word_embeddings" is false): n_embd = d_model, n_head, n_layer,
 * n_inner (null: 4 n_embd), n_positions = context_length, vocab_size,
 * layer_norm_epsilon, activation_function ("gelu_new" = tanh GELU).
 * GPT-2's Conv1D weights (c_attn, c_proj, c_fc; stored [in, out]) are
 * transposed into our [out, in] parameters while they are read, so the
 * weights are never held twice.  GPT2Config's defaults stand for absent
 * keys.  Every tensor is checked (present, shape, float dtype, nothing
 * left over but the tied "lm_head.weight" and the causal-mask buffers
 * "h.<i>.attn.bias" / "h.<i>.attn.masked_bias") before the model is
 * allocated.
 * "model_type" "llama" (Touvron et al. 2023; LlamaForCausalLM) becomes a
 * decoder-only model with RMSNorms, the gated SwiGLU feed-forward, no
 * biases, rotary positions on half-split pairs (rope_theta) and
 * grouped-query attention (num_key_value_heads); q_proj, k_proj and
 * v_proj fill the rows of in_proj_weight.  rope_scaling, attention_bias,
 * mlp_bias and a head_dim other than hidden_size / num_attention_heads
 * are refused (TFM_ERR_UNSUPPORTED).
 * "model_type" "bert" (Devlin et al. 2019; BertForMaskedLM, its tensors
 * under "bert." and "cls.predictions.") becomes an encoder-only,
 * post-norm model with learned positions and the model parts of
 * tfm_model_create_v2: the token-type table (row 0 used), the embedding
 * LayerNorm, no final norm and the masked-LM head transform with the
 * logits' bias; query, key and value fill the rows of in_proj_weight /
 * in_proj_bias; LayerNorms saved as ".gamma" / ".beta" are read as
 * transformers reads them; the pooler, the next-sentence head and the
 * position_ids buffer are ignored.  position_embedding_type other than
 * "absolute", is_decoder and add_cross_attention are refused
 * (TFM_ERR_UNSUPPORTED).
 * "model_type" "marian" (Junczys-Dowmunt et al. 2018; MarianMTModel, the
 * Helsinki-NLP opus-mt checkpoints, its tensors under "model.") becomes an
 * encoder-decoder, post-norm model without final norms (layer_options'
 * final_norm 0), SiLU ("swish"), embeddings scaled by sqrt(d_model)
 * (scale_embedding), the shared table as source and target embedding and
 * head, final_logits_bias as the logits' bias (head_bias) and Marian's
 * sinusoidal positions (sin in the first half of the columns, cos in the
 * second) as a learned table: "model.encoder.embed_positions.weight" when
 * the checkpoint has it, else computed; q_proj, k_proj and v_proj fill
 * the rows of in_proj_weight / in_proj_bias (encoder_attn's those of the
 * decoder's multihead_attn).  Separate source and target vocabularies
 * (share_encoder_decoder_embeddings false, another decoder_vocab_size) and
 * encoder and decoder layers of different widths or head counts are
 * refused (TFM_ERR_UNSUPPORTED).  Generation settings (decoder_start_token_id,
 * eos_token_id, bad_words_ids) are not part of the model: give them to
 * tfm_model_beam_search (decoder_start_token_id, eos_token_id,
 * suppress_tokens).
 * "model_type" "vit" (Dosovitskiy et al. 2021; ViTForImageClassification,
 * e.g. google/vit-base-patch16-224, its tensors under "vit." and
 * "classifier.") becomes an encoder-only, pre-norm image model
 * (tfm_layer_options' patch_size, image_size, num_channels; run it with
 * tfm_model_image_logits): the patch embedding's Conv2d weight [d, C, P,
 * P] as it is stored, the class token, the position table [N + 1, d]
 * (stored [1, N + 1, d]), query, key and value in the rows of
 * in_proj_weight / in_proj_bias, layernorm_before / layernorm_after as
 * norm1 / norm2, the final "vit.layernorm" and the classifier as the head
 * with its bias (vocab_size = the number of labels of "id2label").  The
 * pooler of ViTModel is ignored.  qkv_bias false is refused
 * (TFM_ERR_UNSUPPORTED), an image_size that is not a multiple of
 * patch_size is malformed (TFM_ERR_FORMAT).  The labels' names and the
 * image preprocessing (preprocessor_config.json) are the caller's.
 * The directory's tokenizer files are not read here (tfm_tokenizer_load
 * reads them).
 * Every file is opened without blocking and must be a regular file after
 * following links; a JSON file holds at most 16 MiB of valid UTF-8
 * (docs/USAGE.md, "Files that are read").  In a sharded checkpoint the
 * index decides: a tensor stored in two shards, or in a shard the index
 * does not list it under, is refused.  A parameter computed rather than
 * read (Marian's sinusoidal table without its stored copy) may hold no
 * more values than the checkpoint's weights.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_IO (a missing file, e.g. no
 * config.json or no weights in a directory; a FIFO, device or directory
 * where a file should be; a file over its cap), TFM_ERR_FORMAT
 * (malformed file or JSON, bytes that are not UTF-8 (with their offset),
 * missing or invalid configuration key, missing or extra tensor, wrong
 * shape, a learned attention temperature that is not > 0 so that no
 * forward pass could run), TFM_ERR_UNSUPPORTED (also: a "model_type"
 * other than "gpt2", "llama", "bert", "marian" and "vit", an unsupported
 * activation, a directory with only pytorch_model.bin), TFM_ERR_NON_FINITE,
 * TFM_ERR_OUT_OF_MEMORY; and those of tfm_model_create; the message names
 * the file, key or tensor.  On error *out is unchanged.  path is only
 * read; on success *out is owned by the caller and freed with
 * tfm_module_free. */
TFM_API tfm_status tfm_model_load(const char *path, tfm_module **out);

/* Writes the model's parameters and configuration to a model file (the
 * configuration keys above; extra metadata such as the tokenizer's may be
 * given as n_extra key/value pairs, keys[i] -> values[i], none of them
 * "format" nor a configuration key: since 1.2 those are refused rather
 * than written over the model's own).  The file is written atomically
 * (tfm_safetensors_writer_save).
 * Errors: TFM_ERR_NULL_ARGUMENT (also a NULL key or value),
 * TFM_ERR_WRONG_KIND, TFM_ERR_INVALID_ARGUMENT (a reserved key; a key or
 * value not valid UTF-8), TFM_ERR_IO, TFM_ERR_OUT_OF_MEMORY; on error
 * nothing is written. */
TFM_API tfm_status tfm_model_save(const tfm_module *model, const char *path,
                                  int n_extra, const char *const *keys,
                                  const char *const *values);

/* Decoder-only and encoder-only models: logits [B, L, vocab_size] for the
 * token ids [B, L] (row-major, B*L values), every position at once (causal
 * for decoder-only, bidirectional for encoder-only).  L must not exceed
 * context_length.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE (logits
 * not [batch, seq, vocab_size]), TFM_ERR_INVALID_ARGUMENT (an id out of
 * range, batch or seq < 1), TFM_ERR_CAPACITY (seq > context_length),
 * TFM_ERR_OUT_OF_MEMORY.  On error logits is unchanged. */
TFM_API tfm_status tfm_model_logits(const tfm_module *model,
                                    const int32_t *ids, int64_t batch,
                                    int64_t seq, tfm_tensor *logits);

/* Since 1.2: what Hugging Face's forward takes beside input_ids, for
 * tfm_model_logits_v2.  ABI: begins with its size; set it with
 * tfm_model_inputs_init; the library reads only struct_size bytes
 * (defaults for the rest), and only during the call. */
typedef struct tfm_model_inputs {
    size_t struct_size;            /* sizeof(tfm_model_inputs) */
    /* [B, L] segment ids in 0 .. type_vocab_size - 1, the rows of
     * "token_type_embedding.weight" added to each position (BERT's
     * token_type_ids: 0 for sentence A, 1 for B).  NULL (the default):
     * type 0 everywhere.  Only for a model with a token-type table. */
    const int32_t *token_type_ids;
    /* [B, L] of 1 (a token) and 0 (padding), Hugging Face's
     * attention_mask: no position attends to a padding key (a key padding
     * mask, with the causal mask of a decoder-only model).  The logits of
     * padding positions are computed too (from the tokens they see), as
     * transformers computes them; a position whose visible keys are all
     * padding (a sequence of padding only, the first positions of a
     * left-padded one under the causal mask) gets attention outputs of
     * zeros, where transformers' finite mask spreads it evenly over them.
     * NULL (the default): every position a token. */
    const int32_t *attention_mask;
} tfm_model_inputs;

/* Fills *inputs with the defaults (no token types, no mask) and sets
 * struct_size.  NULL is a no-op.  Since 1.2. */
TFM_API void tfm_model_inputs_init(tfm_model_inputs *inputs);

/* tfm_model_logits with token_type_ids and an attention_mask (inputs NULL
 * or both NULL: tfm_model_logits itself), as BertModel / GPT2Model's
 * forward(input_ids, attention_mask, token_type_ids) (Devlin et al. 2019,
 * sec. 3.2: segment embeddings; padding masked out of the softmax).
 * Decoder-only and encoder-only models.  Errors: those of
 * tfm_model_logits, TFM_ERR_INVALID_ARGUMENT (struct_size too small,
 * token_type_ids for a model without a token-type table or out of its
 * range, an attention_mask value other than 0 and 1); on error logits is
 * unchanged.  Training (tfm_model_backward) takes neither yet.  Since
 * 1.2. */
TFM_API tfm_status tfm_model_logits_v2(const tfm_module *model,
                                       const int32_t *ids, int64_t batch,
                                       int64_t seq,
                                       const tfm_model_inputs *inputs,
                                       tfm_tensor *logits);

/* Image models (an encoder-only model made with tfm_layer_options'
 * patch_size > 0, e.g. a ViT checkpoint read by tfm_model_load): the
 * class logits [B, vocab_size] (vocab_size = num_labels) of the images
 * pixel_values [B, num_channels, image_size, image_size] (float32,
 * channels first, already normalised as the checkpoint's image processor
 * does).  As transformers' ViTForImageClassification (Dosovitskiy et al.
 * 2021, eq. 1-4): z0 = [cls_token; patches E] + positions, the
 * bidirectional blocks, the final norm, then logits = z_L[CLS]
 * lm_head^T + lm_head_bias.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND (not an encoder-only
 * model), TFM_ERR_UNSUPPORTED (a model of token ids), TFM_ERR_SHAPE
 * (pixel_values not [B, num_channels, image_size, image_size], logits not
 * [B, vocab_size]), TFM_ERR_NON_FINITE (a NaN or infinite pixel),
 * TFM_ERR_OUT_OF_MEMORY.  On error logits is unchanged; model and
 * pixel_values are only read.  An image model refuses tfm_model_logits,
 * tfm_model_backward, tfm_model_loss_backward and the generation calls
 * (TFM_ERR_UNSUPPORTED or TFM_ERR_WRONG_KIND); it trains through
 * tfm_model_image_backward.  Since 1.2. */
TFM_API tfm_status tfm_model_image_logits(const tfm_module *model,
                                          const tfm_tensor *pixel_values,
                                          tfm_tensor *logits);

/* The backward of tfm_model_image_logits (torch.autograd's, the dropout
 * masks of the latest forward): given grad_logits [B, vocab_size], the
 * gradient of a loss with respect to the class logits of pixel_values
 * [B, C, H, W] (e.g. tfm_cross_entropy's dlogits), accumulates (+=) the
 * gradient of every parameter: the classifier (lm_head.weight,
 * lm_head.bias), the blocks and their final norm (the class token's row
 * alone carries a gradient into them), the learned positions, cls_token
 * (summed over the batch) and the patch embedding (as
 * tfm_patch_embedding_backward).  The forward is recomputed once, keeping
 * the blocks' activations; tfm_module_train must have been called.  The
 * pixels get no gradient.  Errors: those of tfm_model_image_logits
 * (grad_logits for logits), TFM_ERR_NON_FINITE (grad_logits),
 * TFM_ERR_INVALID_ARGUMENT (no gradient memory), TFM_ERR_BUSY; the checks,
 * the busy guard and the scratch come before any write.  Since 1.2. */
TFM_API tfm_status tfm_model_image_backward(tfm_module *model,
                                            const tfm_tensor *pixel_values,
                                            const tfm_tensor *grad_logits);

/* Encoder-decoder models: logits [B, L, vocab_size] of the target ids
 * [B, L] (causal) given the source ids [B, S].  Errors: as
 * tfm_model_logits. */
TFM_API tfm_status tfm_model_seq2seq_logits(const tfm_module *model,
                                            const int32_t *src_ids,
                                            int64_t src_len,
                                            const int32_t *tgt_ids,
                                            int64_t tgt_len, int64_t batch,
                                            tfm_tensor *logits);

/* The backward of tfm_model_logits (torch.autograd's, dropout 0): given
 * grad_logits [B, L, vocab_size], the gradient of a loss with respect to
 * the logits of ids [B, L] (tfm_cross_entropy's or tfm_causal_lm_loss's
 * dlogits, or any other), accumulates (+=) the gradient of every
 * parameter: the head (lm_head.weight, or the token table when tied,
 * which then gets both its parts), the blocks and their final norm
 * (tfm_encoder_backward's rules), the token embedding (rows scatter-added
 * in order) and learned positions.  The forward is recomputed from ids,
 * once, keeping the blocks' activations for their backward;
 * tfm_module_train must have been called.  Errors: those of
 * tfm_model_logits (grad_logits for logits), TFM_ERR_NON_FINITE
 * (grad_logits), TFM_ERR_INVALID_ARGUMENT (no gradient memory),
 * TFM_ERR_BUSY.  The checks, the busy guard and the scratch come before
 * any write; an out-of-memory in the blocks' backward, after the head and
 * the blocks above accumulated their gradients, is the one exception.
 * Since 1.2. */
TFM_API tfm_status tfm_model_backward(tfm_module *model, const int32_t *ids,
                                      int64_t batch, int64_t seq,
                                      const tfm_tensor *grad_logits);

/* The backward of tfm_model_seq2seq_logits for an encoder-decoder model:
 * as tfm_model_backward, through the decoder stack, then the encoder stack
 * with the memory's gradient, into the shared token table (both the
 * source's and the target's rows) and positions.  Since 1.2. */
TFM_API tfm_status tfm_model_seq2seq_backward(
    tfm_module *model, const int32_t *src_ids, int64_t src_len,
    const int32_t *tgt_ids, int64_t tgt_len, int64_t batch,
    const tfm_tensor *grad_logits);

/* ---- KV cache (decoder-only models) ------------------------------------
 * Holds each layer's keys and values of the positions processed so far
 * (batch 1), so that each new token costs one position's work instead of
 * the whole sequence's.  Queries are aligned bottom-right: the n new
 * positions are the last n of the cached keys. */
typedef struct tfm_kv_cache tfm_kv_cache;

/* A cache for `model` holding up to `capacity` positions (at most the
 * model's context_length).  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_WRONG_KIND (not a decoder-only model), TFM_ERR_INVALID_ARGUMENT
 * (capacity < 1 or > context_length), TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY.  The cache refers to the model (module.h:
 * tfm_module_free says how either may be freed first). */
TFM_API tfm_status tfm_kv_cache_create(const tfm_module *model,
                                       int64_t capacity, tfm_kv_cache **out);

/* A rolling cache (Since 1.2): as tfm_kv_cache_create, but once it is
 * full, tfm_kv_cache_decode of n <= capacity new positions first drops
 * the n oldest held ones (only when the call succeeds), so decoding goes
 * on past the context at the cost of a cache append.  The held positions
 * stay in order in a buffer of 2 * capacity rows, moved to its front once
 * per `capacity` positions.  With W = capacity and one new position per
 * call, the logits of the token at position t (0-based in the whole
 * sequence) equal row t of a full pass over the whole sequence in which
 * each query sees only the keys of positions t-W+1 .. t: Mistral's
 * sliding-window attention (Jiang et al. 2023, "Mistral 7B", sec. 2.1;
 * Hugging Face's MistralForCausalLM with sliding_window = W and its
 * rolling cache), with RoPE turned for the absolute positions t (keys keep
 * the rotation of their position; queries turn for theirs) and ALiBi, T5
 * and Shaw terms of the distances.  Not a full pass over the last W tokens
 * alone: in a model of several layers a cached key was computed from the
 * W tokens before its own position.  With n > 1 new positions past the
 * context each of them sees the positions held after the drop (the first
 * fewer than W).  Only for models whose attention depends on distances:
 * positional TFM_POSITIONAL_NONE (RoPE, relative terms or no positions),
 * no global tokens, no BigBird blocks.  Errors: those of
 * tfm_kv_cache_create, and TFM_ERR_UNSUPPORTED for a model with learned
 * or sinusoidal positions, global tokens or BigBird blocks. */
TFM_API tfm_status tfm_kv_cache_create_rolling(const tfm_module *model,
                                               int64_t capacity,
                                               tfm_kv_cache **out);

/* Frees the cache.  NULL is a no-op. */
TFM_API void tfm_kv_cache_free(tfm_kv_cache *cache);

/* Empties the cache for a new sequence.  NULL is a no-op. */
TFM_API void tfm_kv_cache_reset(tfm_kv_cache *cache);

/* Number of positions held (0 for NULL). */
TFM_API int64_t tfm_kv_cache_length(const tfm_kv_cache *cache);

/* Capacity in positions (0 for NULL). */
TFM_API int64_t tfm_kv_cache_capacity(const tfm_kv_cache *cache);

/* Appends n token ids (a prompt to prefill, or one generated token) and
 * writes the logits of each new position to logits [n, vocab_size], or,
 * when logits is [1, vocab_size] and n > 1, only the last position's.
 * Equals rows length..length+n-1 of tfm_model_logits on the whole sequence.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (n < 1, id out of
 * range; the model was freed), TFM_ERR_SHAPE, TFM_ERR_CAPACITY (length +
 * n > capacity; the cache is unchanged), TFM_ERR_OUT_OF_MEMORY (the cache
 * is unchanged). */
TFM_API tfm_status tfm_kv_cache_decode(tfm_kv_cache *cache,
                                       const int32_t *ids, int64_t n,
                                       tfm_tensor *logits);

/* ---- Sampling -----------------------------------------------------------
 * A seeded, reproducible random generator (SplitMix64, Steele et al. 2014)
 * and the usual decoding strategies: greedy (argmax, ties to the lowest
 * id), temperature (logits / T), top-k (Fan et al. 2018: keep the k most
 * likely), top-p / nucleus (Holtzman et al. 2020: keep the smallest set of
 * most likely tokens whose probability reaches p). */
typedef struct tfm_rng {
    uint64_t state;
} tfm_rng;

/* Seeds the generator; the same seed gives the same stream everywhere. */
TFM_API void tfm_rng_seed(tfm_rng *rng, uint64_t seed);

/* Next uniform float in [0, 1) (24 random bits).  rng must not be NULL. */
TFM_API float tfm_rng_uniform(tfm_rng *rng);

/* Next raw 64-bit output of the generator (SplitMix64: state +=
 * 0x9E3779B97F4A7C15, then Vigna's splitmix64.c mix), the value
 * tfm_rng_uniform takes its top 24 bits from; e.g. an index in [0, n) is
 * floor(r * n / 2^64).  rng NULL gives 0.  Since 1.2. */
TFM_API uint64_t tfm_rng_next(tfm_rng *rng);

typedef struct tfm_sampling {
    int greedy;         /* nonzero: argmax, the other fields ignored */
    float temperature;  /* > 0; 1 leaves the logits as they are */
    int64_t top_k;      /* 0: no limit */
    float top_p;        /* in (0, 1]; 1: no limit */
} tfm_sampling;

/* Greedy decoding: {1, 1.0f, 0, 1.0f}. */
TFM_API tfm_sampling tfm_sampling_default(void);

/* Draws a token id from logits[0 .. vocab_size-1].
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (vocab_size < 1,
 * temperature <= 0 or not finite, top_k < 0, top_p outside (0, 1]),
 * TFM_ERR_NON_FINITE (a NaN logit), TFM_ERR_OUT_OF_MEMORY. *id unchanged on
 * error. */
TFM_API tfm_status tfm_sample(const float *logits, int64_t vocab_size,
                              const tfm_sampling *sampling, tfm_rng *rng,
                              int32_t *id);

/* Since 1.2: the most tokens one tfm_model_generate call makes, 2^24
 * (16,777,216: a 64 MiB output).  The window slides, so the model itself
 * bounds no length; this bound keeps a size argument from a caller (a
 * binding's max_new_tokens=2**40) from becoming a huge allocation: larger
 * requests are refused before anything is allocated, here and in the
 * Python and Lua bindings, which size their output arrays from it. */
#define TFM_MAX_NEW_TOKENS 16777216 /* 2^24 */

/* Generates max_new tokens after the prompt with a decoder-only model and a
 * KV cache: prefill the prompt (one longer than the context: its last
 * context_length tokens, as tfm_generator_create), then one token per
 * step.  Once the sequence is longer than the context length, the window
 * slides: each further step encodes the last context_length tokens again
 * (positions 0 .. context_length-1), as a model trained on that length
 * expects.
 * out_ids receives max_new ids.  sampling NULL means greedy.  Errors:
 * those of tfm_kv_cache_create, tfm_kv_cache_decode and tfm_sample;
 * n_prompt < 1, max_new < 0 or max_new > TFM_MAX_NEW_TOKENS give
 * TFM_ERR_INVALID_ARGUMENT (before anything is allocated). */
TFM_API tfm_status tfm_model_generate(const tfm_module *model,
                                      const int32_t *prompt, int64_t n_prompt,
                                      int64_t max_new,
                                      const tfm_sampling *sampling,
                                      uint64_t seed, int32_t *out_ids);

/* ---- Generation with stop conditions and streaming (since 1.2) ---------
 * What Hugging Face's generate() does for one decoder-only sequence, in
 * its order (transformers' LogitsProcessorList as generate builds it):
 *   1. repetition_penalty (CTRL, Keskar et al. 2019, eq. in sec. 4.1; HF's
 *      RepetitionPenaltyLogitsProcessor): for every distinct token of the
 *      prompt and the tokens generated so far, a logit x becomes x / r if
 *      x > 0 and x * r otherwise;
 *   2. no_repeat_ngram_size n (HF's NoRepeatNGramLogitsProcessor): a token
 *      that would complete an n-gram already present in prompt + generated
 *      tokens gets -inf;
 *   3. min_new_tokens (HF's MinNewTokensLengthLogitsProcessor): while fewer
 *      than min_new_tokens tokens are generated, every EOS id gets -inf;
 *   4. tfm_sample with `sampling` (temperature, top-k, top-p, or greedy).
 * Generation stops after max_new_tokens tokens, after a token that is one
 * of eos_token_ids (the EOS token is returned, as HF does), or once the
 * decoded generated text contains one of stop_strings ending in the newest
 * token's text (matched on the bytes of the decoded text, so a stop string
 * may span several tokens; the prompt's text is not searched; the tokens
 * that complete it are returned, as HF's StopStringCriteria).  Past the
 * context length: past_context (tfm_past_context below; by default a
 * rolling cache or a half-window shift, not a re-encode per token). */

/* Per generated token: id, and its index among the new tokens (0, 1, ...).
 * Return 0 to go on, a positive value to stop (tfm_model_generate_v2 then
 * succeeds with the tokens so far, reason TFM_STOP_CALLBACK), a negative
 * value to report a failure (the call fails with TFM_ERR_INVALID_ARGUMENT
 * naming the value, and writes nothing). */
typedef int (*tfm_token_callback)(void *user_data, int32_t id, int64_t index);

/* Why a generation ended. */
typedef enum tfm_stop_reason {
    TFM_STOP_NONE = 0,            /* not ended (a generator still running) */
    TFM_STOP_MAX_NEW_TOKENS = 1,  /* max_new_tokens generated */
    TFM_STOP_EOS = 2,             /* an EOS token was generated */
    TFM_STOP_STRING = 3,          /* a stop string was decoded */
    TFM_STOP_CALLBACK = 4         /* the callback asked to stop */
} tfm_stop_reason;

/* Generation past the context length W (tfm_generate_options.past_context;
 * Since 1.2).  Append-only.
 *   TFM_PAST_CONTEXT_AUTO (the default):
 *     - models whose attention depends on distances only (positional
 *       TFM_POSITIONAL_NONE, with RoPE, ALiBi, Shaw, T5 or no positions at
 *       all; no global tokens or BigBird blocks): a rolling cache.  Each
 *       new token drops the oldest cached position and costs one cache
 *       append, and its logits equal a full pass over the whole sequence
 *       in which each query sees only the last W keys (its own included),
 *       with RoPE and the relative terms at the absolute positions: the
 *       sliding-window attention of Mistral (Jiang et al. 2023, sec. 2.1)
 *       and Hugging Face's rolling cache for it.  This is not a full pass
 *       over the last W tokens alone: a cached key of a deeper layer was
 *       computed from the W tokens before it, not from the current window;
 *     - models with learned or sinusoidal positions (a position table of
 *       W rows): the half-window shift.  When the cache is full, the last
 *       ceil(W/2) tokens (the newest one included) are encoded afresh at
 *       positions 0 .., then the next tokens are cache appends until it is
 *       full again: one re-encode per W/2 tokens.  Each token's logits
 *       equal the last row of tfm_model_logits over exactly the tokens the
 *       cache then holds (between ceil(W/2) and W of them).
 *   TFM_PAST_CONTEXT_REENCODE: every token past the context encodes the
 *     last W tokens afresh at positions 0 .. W-1 (the behaviour of 1.0 and
 *     of tfm_model_generate): the most context for every token, at the
 *     cost of a full pass per token. */
typedef enum tfm_past_context {
    TFM_PAST_CONTEXT_AUTO = 0,
    TFM_PAST_CONTEXT_REENCODE = 1,
    TFM_PAST_CONTEXT_COUNT       /* grows, never store it */
} tfm_past_context;

/* Options of tfm_generator_create and tfm_model_generate_v2.  ABI: begins
 * with its size (docs/ABI.md); set it with tfm_generate_options_init; the
 * library reads only struct_size bytes (defaults for the rest), and only
 * during the call: arrays and strings are copied. */
typedef struct tfm_generate_options {
    size_t struct_size;            /* sizeof(tfm_generate_options) */
    int64_t max_new_tokens;        /* 0 .. TFM_MAX_NEW_TOKENS; default 100 */
    int64_t min_new_tokens;        /* >= 0; default 0 */
    tfm_sampling sampling;         /* default greedy (tfm_sampling_default) */
    uint64_t seed;                 /* of the generator; default 42 */
    const int32_t *eos_token_ids;  /* n_eos_token_ids ids in [0, vocab) */
    int64_t n_eos_token_ids;       /* default 0: none */
    const char *const *stop_strings; /* n_stop_strings non-empty UTF-8 */
    int64_t n_stop_strings;        /* default 0: none */
    const struct tfm_tokenizer *tokenizer; /* decodes for stop_strings (needed when
                                       n_stop_strings > 0; its vocabulary
                                       must be the model's) */
    float repetition_penalty;      /* > 0 and finite; default 1: none */
    int64_t no_repeat_ngram_size;  /* >= 0; default 0: none */
    tfm_token_callback callback;   /* tfm_model_generate_v2 only; NULL */
    void *callback_data;           /* passed to callback */
    /* Since 1.2 (after callback_data; older callers' struct_size leaves
     * it at the default): what happens once the sequence outgrows the
     * context (tfm_past_context). */
    tfm_past_context past_context;
    /* Since 1.2 (after past_context): prefix reuse across calls, as
     * llama.cpp's prompt cache and CTranslate2's static_prompt.  NULL (the
     * default): the generator makes its own cache.  Else a cache of this
     * model (tfm_kv_cache_create with capacity context_length, or
     * tfm_kv_cache_create_rolling with it; rolling exactly when the
     * generator's own would be: with TFM_PAST_CONTEXT_AUTO on a model
     * that rolls, not with REENCODE), which the generator uses in
     * place of its own: of the positions it holds, it keeps the longest
     * common prefix of their ids and the prompt's (at most n_prompt - 1,
     * as the last prompt token's logits are needed; none once a rolling
     * cache has dropped its first positions) and runs only the rest of
     * the prompt through the model; the generated tokens are appended
     * to it.  When the generation ends the cache holds the prompt and
     * the generated tokens but the last (the one not yet fed), unless it
     * went past the context (then what the shift or the re-encode left),
     * so a chat whose next prompt is the whole conversation so far
     * computes only its new turn.  The tokens and logits are those of a
     * generation without it (the cached keys and values of a position
     * depend only on the tokens up to it).  The caller owns the cache;
     * nothing else may use it while a generator does.  A call that fails
     * may leave it holding only the common prefix (still valid). */
    tfm_kv_cache *cache;
} tfm_generate_options;

/* Fills *options with the defaults above and sets struct_size.  NULL is a
 * no-op.  Since 1.2. */
TFM_API void tfm_generate_options_init(tfm_generate_options *options);

/* A generation in progress, one token per tfm_generator_next: the
 * streaming form of tfm_model_generate_v2 (the Python and Lua iterators
 * stand on it). */
typedef struct tfm_generator tfm_generator;

/* Checks the options, copies the prompt and prefills it into a KV cache.
 * Without options->cache the generator's own cache holds the positions
 * this generation feeds, n_prompt + max_new_tokens - 1 (the context
 * length at most, the prompt at least): memory grows with the request,
 * not the model's context.
 * A prompt longer than the context is taken as its last context_length
 * ids (as tfm_model_generate, transformer-generate, llama.cpp): all ids
 * are checked, then the cache, options->cache's prefix, processors and
 * new tokens are those of that tail alone.  Errors:
 * TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND (not a decoder-only model),
 * TFM_ERR_INVALID_ARGUMENT (an empty prompt, an id out of range, an EOS id
 * outside the vocabulary, max_new_tokens < 0 or > TFM_MAX_NEW_TOKENS,
 * min_new_tokens < 0, repetition_penalty not > 0 and finite,
 * no_repeat_ngram_size < 0, an empty stop string, stop strings without a
 * tokenizer or with one of another vocabulary size, struct_size too small,
 * the sampling errors of tfm_sample, an options->cache of another model,
 * of a capacity other than context_length, rolling with
 * TFM_PAST_CONTEXT_REENCODE, or not rolling with TFM_PAST_CONTEXT_AUTO on
 * a model that rolls), TFM_ERR_OUT_OF_MEMORY.  On error *out is unchanged.
 * The generator refers to the model, options->cache and (with stop
 * strings only) the tokenizer; module.h's tfm_module_free says how they
 * may be freed first.  Not thread-safe on one generator.  Since 1.2. */
TFM_API tfm_status tfm_generator_create(const tfm_module *model,
                                        const int32_t *prompt,
                                        int64_t n_prompt,
                                        const tfm_generate_options *options,
                                        tfm_generator **out);

/* Generates the next token: *id receives it and *produced is 1; once the
 * generation has ended (tfm_generator_stop_reason says why) *produced is 0
 * and *id is unchanged.  Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NON_FINITE
 * (a NaN logit), TFM_ERR_INVALID_ARGUMENT (the tokenizer cannot decode
 * the token; the model, the tokenizer or options->cache was freed),
 * TFM_ERR_OUT_OF_MEMORY; on error nothing is written and the
 * generator is as before the call.  Since 1.2. */
TFM_API tfm_status tfm_generator_next(tfm_generator *generator, int32_t *id,
                                      int *produced);

/* Why the generation ended; TFM_STOP_NONE while it runs (and for NULL).
 * Since 1.2. */
TFM_API tfm_stop_reason tfm_generator_stop_reason(
    const tfm_generator *generator);

/* Tokens generated so far (0 for NULL).  Since 1.2. */
TFM_API int64_t tfm_generator_count(const tfm_generator *generator);

/* The prompt positions the generator took from options->cache instead of
 * running them through the model (the common prefix above; 0 without a
 * cache, and for NULL): llama.cpp's tokens_cached.  Since 1.2. */
TFM_API int64_t tfm_generator_reused_tokens(const tfm_generator *generator);

/* Frees the generator.  NULL is a no-op.  Since 1.2. */
TFM_API void tfm_generator_free(tfm_generator *generator);

/* Generates with the options (NULL: the defaults) until a stop condition:
 * out_ids (capacity ids, at least max_new_tokens) receives the *n_out new
 * ids; *reason (may be NULL) why it stopped.  options->callback, when set,
 * is called after each token.  Errors: those of tfm_generator_create and
 * tfm_generator_next, TFM_ERR_NULL_ARGUMENT (out_ids with max_new_tokens
 * > 0, n_out), TFM_ERR_CAPACITY (capacity < max_new_tokens),
 * TFM_ERR_INVALID_ARGUMENT (the callback returned a negative value).  On
 * error nothing is written to out_ids, *n_out or *reason.  Since 1.2. */
TFM_API tfm_status tfm_model_generate_v2(const tfm_module *model,
                                         const int32_t *prompt,
                                         int64_t n_prompt,
                                         const tfm_generate_options *options,
                                         int32_t *out_ids, int64_t capacity,
                                         int64_t *n_out,
                                         tfm_stop_reason *reason);

/* ---- Batched generation (since 1.2) -----------------------------------
 * Several prompts of different lengths generated together, each exactly
 * as tfm_model_generate_v2 generates it alone (the same options, the same
 * seed: every sequence has its own random generator seeded with
 * options->seed, its own processors, EOS, min_new_tokens, stop strings
 * and max_new_tokens, and finishes on its own).  What it buys is speed:
 * at each step the new tokens of all running sequences go through the
 * blocks together, so that every projection, feed-forward and the output
 * head is one matrix product of as many rows as running sequences (the
 * library's one GEMM, src/gemm.c), and the weights are read once per step
 * instead of once per sequence; attention is per sequence over its own
 * keys.  This is Hugging Face's generate() on a left-padded batch with
 * attention_mask (0 on the padding) and position_ids = cumsum(mask) - 1:
 * the padding never takes part, and each sequence's tokens sit at
 * positions 0, 1, ... of its own.  Here the padding is not stored: each
 * sequence's cache holds its own positions only (prompts are prefilled
 * one by one, as tfm_generator_create does).  A sequence's logits equal
 * those of generating it alone up to the rounding of a matrix product of
 * B rows instead of one (within 1e-5 on the shipped model; the tokens are
 * the same unless two logits are that close).  Past the context a
 * sequence goes on as tfm_generator does (past_context), the steps that
 * re-encode it alone.
 *
 * prompts [batch]: prompts[i] holds n_prompts[i] >= 1 ids in [0, vocab)
 * (longer than the context: its last context_length, as
 * tfm_generator_create).  options: as tfm_model_generate_v2 (NULL:
 * the defaults), except that callback and cache must be NULL.  Outputs
 * (caller-owned; M = options->max_new_tokens):
 *   out_ids [batch, M] row-major: sequence i's new ids in
 *     out_ids[i*M .. i*M + n_out[i] - 1] (ending with its EOS when one
 *     stopped it); the rest of each row is left as it was.  May be NULL
 *     when M is 0;
 *   n_out [batch]: each sequence's number of new ids, 0 .. M;
 *   reasons [batch] (may be NULL): why each one stopped.
 * Memory: one generator (a KV cache of context_length positions) per
 * sequence, made once per call; each step's scratch comes from the
 * calling thread's reusable workspace.
 * Errors: TFM_ERR_NULL_ARGUMENT (model, prompts, a prompts[i], n_prompts,
 * n_out, out_ids with M > 0), TFM_ERR_WRONG_KIND (not a decoder-only
 * model), TFM_ERR_INVALID_ARGUMENT (batch < 1, an empty prompt, an id out
 * of range, an EOS id outside the vocabulary, options->cache set, and
 * every other option error of tfm_generator_create), TFM_ERR_UNSUPPORTED
 * (options->callback set: a callback has no sequence argument),
 * TFM_ERR_OVERFLOW (batch, or batch * M, too large to size),
 * TFM_ERR_NON_FINITE (a NaN logit),
 * TFM_ERR_OUT_OF_MEMORY.  A prompt's error names its index.
 * On error nothing is written to out_ids, n_out or reasons.  The model is
 * only read.  Since 1.2. */
TFM_API tfm_status tfm_model_generate_batch(const tfm_module *model,
                                            const int32_t *const *prompts,
                                            const int64_t *n_prompts,
                                            int64_t batch,
                                            const tfm_generate_options *options,
                                            int32_t *out_ids, int64_t *n_out,
                                            tfm_stop_reason *reasons);

/* ---- Beam search (since 1.2) -------------------------------------------
 * Hugging Face's beam search (transformers' generate with num_beams > 1:
 * BeamSearchScorer and BeamHypotheses, generation/beam_search.py) for one
 * prompt, with a decoder-only model over KV caches or an encoder-decoder
 * model (the source encoded once).  Each step:
 *   1. every running beam's next-token log-probabilities, log_softmax of
 *      its logits (float, double accumulation); while fewer than
 *      min_new_tokens tokens are generated, eos_token_id gets -inf (HF's
 *      MinNewTokensLengthLogitsProcessor);
 *   2. plus the beam's summed log-probability (float; at the first step
 *      beam 0 has 0 and the others -1e9, so that the identical beams do
 *      not repeat each other), then the 2 * num_beams best (beam, token)
 *      candidates over all beams: higher score first, equal scores in
 *      order of beam then token id (lower first);
 *   3. in that order: a candidate ending in eos_token_id among the first
 *      num_beams becomes a finished hypothesis (one below them is
 *      dropped); the others continue as the next beams, until num_beams
 *      of them;
 *   4. a finished hypothesis scores sum_logprobs / generated_len **
 *      length_penalty (generated_len counts the new tokens and the EOS,
 *      not the prompt; the length penalty idea is Wu et al. 2016, "Google's
 *      neural machine translation system", sec. 7, in HF's simpler form).
 *      The num_beams best are kept: a new one replaces the worst when it
 *      scores strictly higher;
 *   5. done (with num_beams finished hypotheses) per early_stopping:
 *      TFM_EARLY_STOPPING_TRUE at once; _FALSE when the worst kept score
 *      >= the best candidate's sum / generated_len ** length_penalty (HF's
 *      heuristic); _NEVER when no running beam can do better (with
 *      length_penalty > 0 the bound divides by max_new_tokens ** alpha).
 * After max_new_tokens steps (or when done) the running beams are offered
 * as hypotheses too (unless done), and the num_return_sequences best are
 * returned, best first (equal scores: the one kept later first, as HF's
 * sorted().pop()).  num_beams = 1 is greedy decoding (argmax, ties to
 * the lowest id) that stops at EOS, except with _NEVER. */

/* Values of tfm_beam_search_options.early_stopping: HF's early_stopping
 * True, False and "never". */
#define TFM_EARLY_STOPPING_FALSE 0
#define TFM_EARLY_STOPPING_TRUE 1
#define TFM_EARLY_STOPPING_NEVER 2

/* Options of tfm_model_beam_search.  ABI: begins with its size
 * (docs/ABI.md); set it with tfm_beam_search_options_init; the library
 * reads only struct_size bytes (defaults for the rest). */
typedef struct tfm_beam_search_options {
    size_t struct_size;            /* sizeof(tfm_beam_search_options) */
    int64_t num_beams;             /* 1 .. vocab_size; default 4 */
    int64_t max_new_tokens;        /* >= 1; default 20 */
    int64_t min_new_tokens;        /* >= 0; default 0 */
    double length_penalty;         /* finite; default 1.0 */
    int early_stopping;            /* TFM_EARLY_STOPPING_*; default FALSE */
    int64_t num_return_sequences;  /* 1 .. num_beams; default 1 */
    int32_t eos_token_id;          /* in [0, vocab) or -1: none (default) */
    int32_t pad_token_id;          /* fills out_ids after each sequence's
                                    * length; default -1 */
    int32_t decoder_start_token_id; /* encoder-decoder models: the first
                                    * target token, in [0, vocab)
                                    * (required); decoder-only: ignored;
                                    * default -1 */
    /* Since 1.2 (after decoder_start_token_id): ids never generated,
     * Hugging Face's suppress_tokens (SuppressTokensLogitsProcessor; and
     * bad_words_ids of single tokens, as Marian's [[pad_token_id]]): their
     * log-probabilities are set to -inf after the log-softmax, every step.
     * n_suppress_tokens ids in [0, vocab), read during the call only.
     * Default NULL, 0. */
    const int32_t *suppress_tokens;
    int64_t n_suppress_tokens;
    /* Since 1.2 (after n_suppress_tokens): Hugging Face's
     * forced_eos_token_id (ForcedEOSTokenLogitsProcessor; 0 in Marian's
     * configs): the last step a sequence may take (its max_new_tokens-th
     * token) is this id, every other log-probability -inf and its 0.  -1
     * (the default): none. */
    int32_t forced_eos_token_id;
    /* Since 1.2 (after forced_eos_token_id): Hugging Face's
     * renormalize_logits (LogitNormalization, the last processor): after
     * min_new_tokens, suppress_tokens and forced_eos_token_id each step's
     * log-probabilities are log-softmaxed again, so that the banned
     * tokens' probability is spread over the rest before the beam scores
     * are added.  Default 0 (off). */
    int renormalize_logits;
} tfm_beam_search_options;

/* Fills *options with the defaults above and sets struct_size.  NULL is a
 * no-op.  Since 1.2. */
TFM_API void tfm_beam_search_options_init(tfm_beam_search_options *options);

/* Beam search (above) after prompt [n_prompt] ids: for a decoder-only
 * model the prompt is the sequence's start (longer than the context: its
 * last context_length ids, as tfm_generator_create; past the context each
 * beam goes on as tfm_generator does with TFM_PAST_CONTEXT_AUTO: a
 * rolling cache for models without absolute positions, else the
 * half-window shift); for an encoder-decoder model it is the source, and
 * the target starts with decoder_start_token_id.  Only an encoder-decoder
 * model refuses a long prompt: its encoder reads the whole source, which
 * every target token attends to, so none can be dropped (n_prompt <=
 * context_length; split or cut a longer source yourself); its decoder's
 * positions end there too (max_new_tokens <= context_length: it reads the
 * start token and all new tokens but the last).  options NULL: defaults.
 * Outputs (caller-owned, R = options->num_return_sequences, M =
 * options->max_new_tokens), best first:
 *   out_ids [R, M] row-major: sequence r's new tokens (not the prompt nor
 *     the decoder start token; a finished one ends with its EOS) in
 *     out_ids[r*M .. r*M + out_lengths[r] - 1], the rest of the row
 *     pad_token_id;
 *   out_lengths [R]: each sequence's number of new tokens, 1 .. M;
 *   out_scores [R] (may be NULL): each sequence's score, its summed
 *     log-probability / out_lengths[r] ** length_penalty (HF's
 *     sequences_scores).
 * Memory: decoder-only, one KV cache per beam, made once per call (on
 * reorder a beam's first child keeps its parent's cache, further children
 * copy it); encoder-decoder, the encoder's output and every decoder
 * layer's cross-attention keys and values of it once ([n_layers, S,
 * 2 d_model], shared by the beams), and per beam the decoder's
 * self-attention keys and values of max_new_tokens positions, reordered
 * the same way (since 1.2; each step runs only the beams' new tokens).
 * Nothing is allocated per step.  Every matrix product is the library's
 * one GEMM (src/gemm.c).
 * Errors: TFM_ERR_NULL_ARGUMENT (model, prompt, out_ids, out_lengths;
 * suppress_tokens when n_suppress_tokens > 0),
 * TFM_ERR_WRONG_KIND (an encoder-only model), TFM_ERR_INVALID_ARGUMENT
 * (n_prompt < 1, a prompt id out of range, num_beams < 1 or > vocab_size,
 * num_return_sequences < 1 or > num_beams, max_new_tokens < 1 or >
 * TFM_MAX_NEW_TOKENS, min_new_tokens < 0, length_penalty not finite,
 * early_stopping unknown, eos_token_id not -1 nor in the vocabulary, no
 * valid decoder_start_token_id for an encoder-decoder model, a suppressed
 * id outside the vocabulary, n_suppress_tokens < 0, forced_eos_token_id
 * not -1 nor in the vocabulary, struct_size too small), TFM_ERR_CAPACITY
 * (an encoder-decoder source or max_new_tokens longer than the context),
 * TFM_ERR_NON_FINITE (a NaN logit), TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY.  On error nothing is written to out_ids,
 * out_lengths or out_scores.  The model is only read.  Since 1.2. */
TFM_API tfm_status tfm_model_beam_search(const tfm_module *model,
                                         const int32_t *prompt,
                                         int64_t n_prompt,
                                         const tfm_beam_search_options *options,
                                         int32_t *out_ids,
                                         int64_t *out_lengths,
                                         float *out_scores);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_MODEL_H */
