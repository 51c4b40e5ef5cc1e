/*
 * libtransformer: LayerNorm, feed-forward, encoder and decoder layers and
 * stacks, the cross-attention block and the encoder-decoder Transformer.
 *
 * Source: Vaswani et al., "Attention Is All You Need" (2017), section 3.1
 * (encoder and decoder stacks: each sub-layer is LayerNorm(x + Sublayer(x)))
 * and eq. (2) (FFN(x) = max(0, x W1 + b1) W2 + b2); Ba et al., "Layer
 * Normalization" (2016); Xiong et al., "On Layer Normalization in the
 * Transformer Architecture" (2020) for the pre-norm variant
 * x + Sublayer(LayerNorm(x)); Hendrycks & Gimpel, "Gaussian Error Linear
 * Units" (2016) for GELU.
 *
 * The modules compute what PyTorch's nn.LayerNorm, nn.TransformerEncoderLayer,
 * nn.TransformerDecoderLayer, nn.TransformerEncoder, nn.TransformerDecoder
 * and nn.Transformer compute in evaluation mode, and in training mode with
 * their dropout (module.h: tfm_module_set_dropout, default 0), and use
 * their parameter names.  All activations are [B, L, d_model], batch
 * first.
 */
#ifndef TRANSFORMER_LAYERS_H
#define TRANSFORMER_LAYERS_H

#include "attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation of the feed-forward network.  Append-only. */
typedef enum tfm_activation {
    TFM_ACTIVATION_RELU = 0,      /* max(0, x) */
    TFM_ACTIVATION_GELU = 1,      /* x * 0.5 * (1 + erf(x / sqrt(2))), exact */
    TFM_ACTIVATION_GELU_TANH = 2, /* 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) */
    /* x * sigmoid(x) = x / (1 + exp(-x)): SiLU (Elfwing, Uchibe and Doya
     * 2018; Hendrycks & Gimpel's sigmoid-weighted unit), torch.nn.SiLU.
     * Since 1.2. */
    TFM_ACTIVATION_SILU = 3,
    TFM_ACTIVATION_COUNT          /* since 1.2.0; grows, never store it */
} tfm_activation;

/* Hyper-parameters of encoder and decoder layers, stacks and models.
 * Fill it with tfm_layer_config_default, then change fields. */
typedef struct tfm_layer_config {
    int64_t d_model;        /* width of every activation */
    int64_t n_heads;        /* attention heads; must divide d_model */
    int64_t d_ff;           /* hidden width of the feed-forward network */
    tfm_activation activation;
    float layer_norm_eps;   /* added to the variance inside the sqrt */
    int norm_first;         /* 0: post-norm (the paper), 1: pre-norm */
} tfm_layer_config;

/* PyTorch's defaults for the given width and heads: d_ff = 2048, ReLU,
 * layer_norm_eps = 1e-5, post-norm. */
TFM_API tfm_layer_config tfm_layer_config_default(int64_t d_model,
                                                  int64_t n_heads);

/* Options of the layers, stacks and nn.Transformer beyond tfm_layer_config
 * (tfm_encoder_layer_create_v2 and the other _v2 constructors below).
 * Self-sized (docs/ABI.md): set struct_size with tfm_layer_options_init,
 * which writes every default; the library reads only the first
 * struct_size bytes and takes its defaults for members a newer library
 * appends.  Since 1.2. */
typedef struct tfm_layer_options {
    size_t struct_size;       /* sizeof(tfm_layer_options) */
    /* PyTorch 2.x's bias argument of nn.TransformerEncoderLayer,
     * nn.TransformerDecoderLayer and nn.Transformer: 0 leaves out every
     * bias, the attention's in_proj_bias and out_proj.bias, the
     * feed-forward's linear1.bias and linear2.bias and the LayerNorms'
     * bias (torch passes bias=False to nn.LayerNorm too), so a layer
     * computes LayerNorm(x) = (x - mean) / sqrt(var + eps) * weight and
     * Linear(x) = x W^T, and has no "*.bias" parameter.  Default 1. */
    int bias;
    /* The self-attention variant of encoder layers and encoder stacks, as
     * tfm_encoder_layer_create_ex (NULL = plain attention); only read
     * during the call.  Decoder layers, decoder stacks and nn.Transformer
     * refuse a variant (TFM_ERR_UNSUPPORTED).  Default NULL. */
    const tfm_attention_config *attention;
    /* Nonzero: every norm of the layers (and the final norm of stacks and
     * models) is an RMSNorm (tfm_rms_norm_create, eps = layer_norm_eps,
     * no bias whatever `bias` says), as Llama's.  Default 0. */
    int rms_norm;
    /* Nonzero: the feed-forward networks are gated
     * (tfm_gated_feed_forward_create): linear2(act(linear1(x)) *
     * linear3(x)), SwiGLU with TFM_ACTIVATION_SILU, as Llama's.  Default
     * 0. */
    int gated;
    /* The members below are parts of whole models only
     * (tfm_model_create_v2, decoder-only and encoder-only architectures):
     * BERT's (Devlin et al. 2019; transformers' modeling_bert.py
     * BertEmbeddings and BertLMPredictionHead).  Layer, stack and
     * nn.Transformer constructors refuse any value but the default
     * (TFM_ERR_INVALID_ARGUMENT), as do encoder-decoder models (but for
     * final_norm and head_bias, which they take).  These
     * parts are LayerNorms with a bias and Linears with a bias (BERT's)
     * whatever `bias` and `rms_norm` say. */
    /* > 0: a token-type (segment) table "token_type_embedding.weight"
     * [type_vocab_size, d_model] whose row 0 is added to every position's
     * embedding (Hugging Face's default token_type_ids of zeros).
     * Default 0: none. */
    int64_t type_vocab_size;
    /* Nonzero: a LayerNorm "embedding_norm.weight" / ".bias" [d_model]
     * (eps layer_norm_eps) over the summed embeddings, before their
     * dropout.  Default 0. */
    int embedding_norm;
    /* 0: no final norm "norm.*" after the last block (BERT's post-norm
     * stack ends with its last layer's norm2).  Default 1. */
    int final_norm;
    /* Nonzero: the head transforms the hidden states before the
     * vocabulary projection and adds a bias to the logits,
     *   logits = LayerNorm(act(h W^T + b)) lm_head^T + lm_head_bias,
     * act the layers' activation: parameters "head_transform.weight"
     * [d_model, d_model], "head_transform.bias" [d_model],
     * "head_norm.weight" / ".bias" [d_model] (eps layer_norm_eps) and
     * "lm_head.bias" [vocab_size].  Default 0. */
    int head_transform;
    /* Since 1.2 (after head_transform): nonzero adds a bias to the
     * logits without a head transform, logits = h lm_head^T +
     * lm_head_bias ("lm_head.bias" [vocab_size], starts at 0): Marian's
     * final_logits_bias (transformers' modeling_marian.py).  Implied by
     * head_transform.  Unlike the parts above, encoder-decoder models
     * take it, and final_norm 0 (both stacks then end without their
     * "norm.*", as Marian's).  Default 0. */
    int head_bias;
    /* Since 1.2 (after head_bias): ViT's image input (Dosovitskiy et al.
     * 2021, eq. 1-4; transformers' modeling_vit.py ViTEmbeddings and
     * ViTForImageClassification), for encoder-only models only.
     * patch_size > 0 makes a model of images [B, num_channels,
     * image_size, image_size] (tfm_model_image_logits) instead of token
     * ids: no token table; a patch embedding "patch_embedding.weight"
     * [d_model, num_channels, P, P] and "patch_embedding.bias" [d_model]
     * (tfm_patch_embedding_create); a class token "cls_token" [1, 1,
     * d_model] put before the N = (image_size / P)^2 patches; learned
     * positions [N + 1, d_model] (context_length N + 1); the stack; and a
     * classifier on the class token's final state, "lm_head.weight"
     * [vocab_size = num_labels, d_model] with head_bias's "lm_head.bias".
     * image_size must be a positive multiple of patch_size and
     * num_channels >= 1 (both 0 when patch_size is 0).  Default 0: a model
     * of token ids. */
    int64_t patch_size;
    int64_t image_size;
    int64_t num_channels;
} tfm_layer_options;

/* Writes the defaults (bias 1, no variant, LayerNorm, plain feed-forward,
 * no model parts but the final norm) and struct_size.  NULL is a no-op.
 * Since 1.2. */
TFM_API void tfm_layer_options_init(tfm_layer_options *options);

/* ---- LayerNorm ---------------------------------------------------------
 * y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis, with
 * the biased variance (divided by d).  The mean is subtracted before the
 * variance is summed, so rows with a large mean keep their precision.
 * Parameters: "weight" [d] (starts at 1), "bias" [d] (starts at 0).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (d < 1, eps
 * negative or not finite), TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_layer_norm_create(int64_t d, float eps,
                                         tfm_module **out);

/* LayerNorm with or without its bias: bias nonzero is
 * tfm_layer_norm_create; bias 0 is PyTorch 2.1's nn.LayerNorm(d,
 * bias=False), y = (x - mean) / sqrt(var + eps) * weight, with the one
 * parameter "weight" [d] (starts at 1).  Errors: those of
 * tfm_layer_norm_create; on error *out is unchanged.  On success *out is
 * freed with tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_layer_norm_create_v2(int64_t d, float eps, int bias,
                                            tfm_module **out);

/* RMSNorm (Zhang & Sennrich, "Root Mean Square Layer Normalization",
 * 2019, eq. (4); torch.nn.RMSNorm(d, eps), Hugging Face's LlamaRMSNorm):
 * y = x / sqrt(mean(x^2) + eps) * weight over the last axis, no mean
 * subtracted and no bias; the one parameter "weight" [d] (starts at 1).
 * The module is of kind TFM_MODULE_LAYER_NORM and runs through
 * tfm_layer_norm_forward and tfm_layer_norm_backward, whose formulas lose
 * their mean terms (grad_input = rstd (gy - xhat mean(gy xhat))).  Unlike
 * torch's eps=None there is no default: pass the checkpoint's
 * rms_norm_eps.  Errors: TFM_ERR_NULL_ARGUMENT (out),
 * TFM_ERR_INVALID_ARGUMENT (d < 1, eps negative or not finite),
 * TFM_ERR_OUT_OF_MEMORY; on error *out is unchanged.  On success *out is
 * freed with tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_rms_norm_create(int64_t d, float eps,
                                       tfm_module **out);

/* 1 when norm is an RMSNorm (tfm_rms_norm_create), 0 for a LayerNorm, -1
 * when norm is NULL or not of kind TFM_MODULE_LAYER_NORM.  Since 1.2. */
TFM_API int tfm_layer_norm_is_rms(const tfm_module *norm);

/* x [..., d] (any rank, last axis d), out of the same shape (may be x).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE. */
TFM_API tfm_status tfm_layer_norm_forward(const tfm_module *norm,
                                          const tfm_tensor *x,
                                          tfm_tensor *out);

/* The backward of tfm_layer_norm_forward (torch.autograd's gradients of
 * nn.LayerNorm; Ba et al. 2016), per row with xhat = (x - mean) / sqrt(var
 * + eps), rstd = 1 / sqrt(var + eps) and gy = grad_output * weight:
 *   grad_input = rstd (gy - mean(gy) - xhat mean(gy xhat)),
 *   weight.grad += sum over rows of grad_output xhat,
 *   bias.grad   += sum over rows of grad_output.
 * Parameter gradients are accumulated (+=) into the module's gradient
 * memory, as torch.autograd accumulates into .grad, so tfm_module_train
 * must have been called (module.h); the gradient of the input is written
 * to grad_input (NULL when not wanted).  Nothing is kept between the
 * forward and the backward pass: x is the forward's input, passed again,
 * and what the forward computed from it is recomputed.
 * x [..., d]: the forward's input; grad_output: x's shape, the gradient of
 * the loss with respect to the forward's output; grad_input: x's shape
 * (caller-allocated, written; may be x itself) or NULL.
 * Errors: TFM_ERR_NULL_ARGUMENT (norm, x or grad_output), TFM_ERR_WRONG_KIND,
 * TFM_ERR_SHAPE, TFM_ERR_NON_FINITE (grad_output holds NaN or infinity),
 * TFM_ERR_INVALID_ARGUMENT (no gradient memory; grad_input overlaps
 * grad_output), TFM_ERR_BUSY (another thread is in a backward pass that
 * writes the same gradients), TFM_ERR_OUT_OF_MEMORY.  On error nothing is
 * written.  Since 1.2. */
TFM_API tfm_status tfm_layer_norm_backward(tfm_module *norm,
                                           const tfm_tensor *x,
                                           const tfm_tensor *grad_output,
                                           tfm_tensor *grad_input);

/* ---- Linear (nn.Linear) -------------------------------------------------
 * y = x W^T + b, one cblas_sgemm (PyTorch: torch.nn.Linear).
 * Parameters: "weight" [out_features, in_features] (starts at 0), "bias"
 * [out_features] (starts at 0; only when bias is nonzero).  Layers show
 * their own linear parts as Linear sub-modules (module.h:
 * tfm_module_child).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (a width < 1),
 * TFM_ERR_OVERFLOW (a width beyond 2^31 - 1), TFM_ERR_OUT_OF_MEMORY.
 * Since 1.2. */
TFM_API tfm_status tfm_linear_create(int64_t in_features,
                                     int64_t out_features, int bias,
                                     tfm_module **out);

/* x [..., in_features] (rank 1 to 4) -> out [..., out_features], same
 * leading axes; out must not overlap x.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE,
 * TFM_ERR_INVALID_ARGUMENT (out overlaps x).  Since 1.2. */
TFM_API tfm_status tfm_linear_forward(const tfm_module *linear,
                                      const tfm_tensor *x, tfm_tensor *out);

/* The backward of tfm_linear_forward (torch.autograd's gradients of
 * nn.Linear):
 *   grad_input = grad_output W,  weight.grad += grad_output^T x,
 *   bias.grad += sum over rows of grad_output,
 * each product one cblas_sgemm.
 * Parameter gradients are accumulated (+=) into the module's gradient
 * memory, as torch.autograd accumulates into .grad, so tfm_module_train
 * must have been called (module.h); the gradient of the input is written
 * to grad_input (NULL when not wanted).  Nothing is kept between the
 * forward and the backward pass: x is the forward's input, passed again,
 * and what the forward computed from it is recomputed.
 * x [..., in_features] (rank 1 to 4): the forward's input; grad_output
 * [..., out_features], x's leading axes; grad_input: x's shape
 * (caller-allocated, written; may be x itself) or NULL.
 * Errors: TFM_ERR_NULL_ARGUMENT (linear, x or grad_output),
 * TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE, TFM_ERR_NON_FINITE (grad_output holds
 * NaN or infinity), TFM_ERR_INVALID_ARGUMENT (no gradient memory;
 * grad_input overlaps grad_output), TFM_ERR_BUSY (another thread is in a
 * backward pass that writes the same gradients: a layer containing this
 * Linear, or this Linear), TFM_ERR_OUT_OF_MEMORY.  On error nothing is
 * written.  Since 1.2. */
TFM_API tfm_status tfm_linear_backward(tfm_module *linear,
                                       const tfm_tensor *x,
                                       const tfm_tensor *grad_output,
                                       tfm_tensor *grad_input);

/* ---- Patch embedding (ViT) ----------------------------------------------
 * Cuts images into P x P patches and projects each to d_model
 * (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", eq. 1: the
 * patches x_p^i E; computed as PyTorch's torch.nn.Conv2d(in_channels,
 * d_model, kernel_size=P, stride=P) and transformers' ViTPatchEmbeddings):
 *   out[b, i*(W/P) + j, o] = bias[o] + sum over c, u, v of
 *       weight[o, c, u, v] * x[b, c, i*P + u, j*P + v],
 * the patches in row-major order (flatten(2).transpose(1, 2)).  The
 * strided convolution is one cblas_sgemm over the unfolded patches
 * ([B*N, C*P*P] in workspace memory) times weight^T.
 * Parameters, named as Conv2d's: "weight" [d_model, in_channels, P, P]
 * and "bias" [d_model] (only when bias is nonzero), both drawn as Conv2d
 * draws them by tfm_module_reset_parameters (U(+-1/sqrt(C P P))); they
 * start at 0.  image_size > 0 fixes the input to image_size x image_size
 * pixels (a multiple of P); 0 takes any height and width that are
 * multiples of P.
 * Errors: TFM_ERR_NULL_ARGUMENT (out), TFM_ERR_INVALID_ARGUMENT (d_model,
 * in_channels or patch_size < 1, image_size < 0 or not a multiple of
 * patch_size), TFM_ERR_OVERFLOW (sizes beyond 2^31 - 1),
 * TFM_ERR_OUT_OF_MEMORY.  On error *out is unchanged; on success it is
 * owned by the caller and freed with tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_patch_embedding_create(int64_t d_model,
                                              int64_t in_channels,
                                              int64_t patch_size,
                                              int64_t image_size, int bias,
                                              tfm_module **out);

/* x [B, C, H, W] (float pixels, channels first) -> out [B, N, d_model],
 * N = (H / P) (W / P); H and W multiples of P (equal to image_size when
 * the module has one).  out must not overlap x.  x and the module are only
 * read.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE (x not
 * rank 4 with C channels, H or W not a multiple of P or not image_size,
 * out not [B, N, d_model]), TFM_ERR_INVALID_ARGUMENT (out overlaps x),
 * TFM_ERR_OUT_OF_MEMORY (the unfolded patches).  On error out is
 * unchanged.  Since 1.2. */
TFM_API tfm_status tfm_patch_embedding_forward(const tfm_module *pe,
                                               const tfm_tensor *x,
                                               tfm_tensor *out);

/* The backward of tfm_patch_embedding_forward (torch.autograd's gradients
 * of Conv2d with kernel = stride = P), with cols [B*N, C*P*P] the unfolded
 * patches of x recomputed and g = grad_output as [B*N, d_model]:
 *   weight.grad += g^T cols (as [d, C, P, P]),
 *   bias.grad   += sum over rows of g,
 *   grad_input   = g weight folded back onto the pixels (patches do not
 *                  overlap, so each pixel gets one value).
 * Parameter gradients are accumulated (+=) into the module's gradient
 * memory, so tfm_module_train must have been called (module.h);
 * grad_input [B, C, H, W] (x's shape, not overlapping grad_output) is
 * written, or NULL when not wanted.
 * Errors: TFM_ERR_NULL_ARGUMENT (pe, x or grad_output),
 * TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE, TFM_ERR_NON_FINITE (grad_output),
 * TFM_ERR_INVALID_ARGUMENT (no gradient memory, grad_input overlaps
 * grad_output), TFM_ERR_BUSY, TFM_ERR_OUT_OF_MEMORY.  On error nothing is
 * written.  Since 1.2. */
TFM_API tfm_status tfm_patch_embedding_backward(tfm_module *pe,
                                                const tfm_tensor *x,
                                                const tfm_tensor *grad_output,
                                                tfm_tensor *grad_input);

/* ---- Position-wise feed-forward, eq. (2) -------------------------------
 * out = activation(x W1^T + b1) W2^T + b2.
 * Parameters: "linear1.weight" [d_ff, d_model], "linear1.bias" [d_ff],
 * "linear2.weight" [d_model, d_ff], "linear2.bias" [d_model].
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT, TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_feed_forward_create(int64_t d_model, int64_t d_ff,
                                           tfm_activation activation,
                                           tfm_module **out);

/* The feed-forward network with or without biases: bias nonzero is
 * tfm_feed_forward_create; bias 0 gives out = activation(x W1^T) W2^T
 * (PyTorch's two nn.Linear(..., bias=False)), parameters
 * "linear1.weight" [d_ff, d_model] and "linear2.weight" [d_model, d_ff]
 * only.  Errors: those of tfm_feed_forward_create; on error *out is
 * unchanged.  On success *out is freed with tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_feed_forward_create_v2(int64_t d_model, int64_t d_ff,
                                              tfm_activation activation,
                                              int bias, tfm_module **out);

/* The gated feed-forward network (Shazeer, "GLU Variants Improve
 * Transformer", 2020, eq. (6): FFN_SwiGLU with TFM_ACTIVATION_SILU; Hugging
 * Face's LlamaMLP, torchtune's FeedForward):
 *   out = (activation(x W1^T + b1) * (x W3^T + b3)) W2^T + b2,
 * "*" elementwise.  Parameters, in this order: "linear1.weight" [d_ff,
 * d_model] (the gate: Llama's gate_proj, Meta's w1), "linear3.weight"
 * [d_ff, d_model] (up_proj, w3), with bias nonzero "linear1.bias" [d_ff]
 * and "linear3.bias" [d_ff], then "linear2.weight" [d_model, d_ff]
 * (down_proj, w2) and "linear2.bias" [d_model]; sub-modules "linear1",
 * "linear2", "linear3".  The module is of kind TFM_MODULE_FEED_FORWARD and
 * runs through tfm_feed_forward_forward and tfm_feed_forward_backward (x W1^T
 * and x W3^T are one cblas_sgemm over the two weights, which lie next to
 * each other).  Dropout (tfm_module_set_dropout) applies to the gated
 * hidden layer.  Errors: TFM_ERR_NULL_ARGUMENT (out),
 * TFM_ERR_INVALID_ARGUMENT (a width < 1, unknown activation),
 * TFM_ERR_OVERFLOW (2 d_ff or d_model beyond 32 bits),
 * TFM_ERR_OUT_OF_MEMORY; on error *out is unchanged.  On success *out is
 * freed with tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_gated_feed_forward_create(int64_t d_model,
                                                 int64_t d_ff,
                                                 tfm_activation activation,
                                                 int bias, tfm_module **out);

/* 1 when ff is gated (tfm_gated_feed_forward_create), 0 when not, -1 when
 * ff is NULL or not of kind TFM_MODULE_FEED_FORWARD.  Since 1.2. */
TFM_API int tfm_feed_forward_is_gated(const tfm_module *ff);

/* x [B, L, d_model] -> out [B, L, d_model] (may be x).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE,
 * TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_feed_forward_forward(const tfm_module *ff,
                                            const tfm_tensor *x,
                                            tfm_tensor *out);

/* The backward of tfm_feed_forward_forward (torch.autograd's gradients
 * of linear2(activation(linear1(x)))): with h = x W1^T + b1 recomputed,
 *   W2.grad += grad_output^T act(h),  b2.grad += sum grad_output,
 *   grad_h = (grad_output W2) * act'(h),
 *   W1.grad += grad_h^T x,  b1.grad += sum grad_h,  grad_input = grad_h W1,
 * every product one cblas_sgemm; act' as PyTorch differentiates ReLU
 * (0 at 0), GELU (both forms) and SiLU.
 * Parameter gradients are accumulated (+=) into the module's gradient
 * memory, as torch.autograd accumulates into .grad, so tfm_module_train
 * must have been called (module.h); the gradient of the input is written
 * to grad_input (NULL when not wanted).  Nothing is kept between the
 * forward and the backward pass: x is the forward's input, passed again,
 * and what the forward computed from it is recomputed.
 * x [B, L, d_model]: the forward's input; grad_output [B, L, d_model];
 * grad_input [B, L, d_model] (caller-allocated, written; may be x) or NULL.
 * Scratch: two [B L, d_ff] buffers from the thread's reusable workspace.
 * Errors: as tfm_linear_backward.  On error nothing is written.
 * Since 1.2. */
TFM_API tfm_status tfm_feed_forward_backward(tfm_module *ff,
                                             const tfm_tensor *x,
                                             const tfm_tensor *grad_output,
                                             tfm_tensor *grad_input);

/* ---- Encoder layer (nn.TransformerEncoderLayer) ------------------------
 * post-norm: x = norm1(x + SA(x)); x = norm2(x + FF(x))
 * pre-norm:  x = x + SA(norm1(x)); x = x + FF(norm2(x))
 * Parameters: "self_attn.in_proj_weight", "self_attn.in_proj_bias",
 * "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
 * "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
 * "norm1.bias", "norm2.weight", "norm2.bias".
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (a size < 1,
 * n_heads not dividing d_model, bad eps or activation), TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_encoder_layer_create(const tfm_layer_config *config,
                                            tfm_module **out);

/* The backward of tfm_encoder_layer_forward (torch.autograd's gradients
 * of nn.TransformerEncoderLayer with dropout 0): with the layer's
 * post-norm x1 = norm1(src + SA(src)), y = norm2(x1 + FF(x1)) or pre-norm
 * x1 = src + SA(norm1(src)), y = x1 + FF(norm2(x1)), the chain rule
 * through each residual block (post: g = LN'^T grad, grad_in = g +
 * f'^T g; pre: grad_in = grad + LN'^T f'^T grad) and, for SA, the sum of
 * the query, key and value gradients of tfm_mha_backward.  Every
 * parameter gradient is accumulated (+=) into the layer's gradient
 * memory, so tfm_module_train must have been called.  src and masks are
 * the forward's, passed again.  The activations are those a training-mode
 * tfm_encoder_layer_forward of the same src and masks kept in the layer
 * (module.h, "Training mode and gradients"), when it was the layer's
 * latest forward and nothing it read has changed since (src's and the
 * masks' values, the parameters, the dropout stream and probabilities);
 * otherwise the forward is recomputed here.  The result is the same bits
 * either way.
 * src [B, L, d_model]; masks as tfm_encoder_layer_forward (NULL: none);
 * grad_output [B, L, d_model]; grad_src [B, L, d_model] (written; may be
 * src, must not overlap grad_output) or NULL when not wanted.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND (not an encoder
 * layer), TFM_ERR_SHAPE, TFM_ERR_INVALID_ARGUMENT (no gradient memory, a
 * learned temperature <= 0, overlapping outputs),
 * TFM_ERR_NON_FINITE (grad_output), TFM_ERR_BUSY (another backward holds
 * the layer's gradients), TFM_ERR_OUT_OF_MEMORY.  The checks, the busy
 * guard and the layer's scratch come before the first write; an
 * out-of-memory inside the attention's backward, after the feed-forward
 * block's gradients were accumulated, is the one exception.
 * Since 1.2. */
TFM_API tfm_status tfm_encoder_layer_backward(
    tfm_module *layer, const tfm_tensor *src,
    const tfm_attention_masks *masks, const tfm_tensor *grad_output,
    tfm_tensor *grad_src);

/* An encoder layer (as tfm_encoder_layer_create: Vaswani et al. 2017,
 * 3.1) whose self-attention uses the variant (parameters "self_attn.*",
 * shapes as tfm_mha_create_ex); tfm_encoder_layer_forward runs it, with
 * query positions as above.  layer and config are only read.  Errors:
 * those of tfm_encoder_layer_create and tfm_attention_create; on error
 * *out is unchanged.  On success *out is freed with tfm_module_free.
 * Deprecated since 1.2: tfm_encoder_layer_create_v2 with
 * options->attention does the same; this one stays exported and working
 * (docs/ABI.md). */
TFM_DEPRECATED("use tfm_encoder_layer_create_v2 (tfm_layer_options.attention)")
TFM_API tfm_status tfm_encoder_layer_create_ex(
    const tfm_layer_config *layer, const tfm_attention_config *config,
    tfm_module **out);

/* An encoder layer (as tfm_encoder_layer_create) with options: options
 * NULL means the defaults (tfm_encoder_layer_create); options->attention
 * is the self-attention variant (tfm_encoder_layer_create_ex); with
 * options->bias 0 the layer has no biases (PyTorch 2.x's
 * nn.TransformerEncoderLayer(bias=False)): its parameters are
 * "self_attn.in_proj_weight", "self_attn.out_proj.weight",
 * "linear1.weight", "linear2.weight", "norm1.weight", "norm2.weight" (and
 * the variant's), in that order, and it computes the layer above with
 * every bias taken as zero.  config and options are only read.
 * Errors: those of tfm_encoder_layer_create_ex; TFM_ERR_INVALID_ARGUMENT
 * also for an options->struct_size smaller than struct_size itself.  On
 * error *out is unchanged; on success it is freed with tfm_module_free.
 * Since 1.2. */
TFM_API tfm_status tfm_encoder_layer_create_v2(
    const tfm_layer_config *config, const tfm_layer_options *options,
    tfm_module **out);

/* src [B, L, d_model] -> out [B, L, d_model] (may be src).  masks: NULL or
 * the self-attention masks (key_padding_mask [B, L], attn_mask [L, L],
 * [B, L, L] or [B, n_heads, L, L], causal).  In training mode the layer
 * keeps this forward's activations, and copies of src and the masks, for
 * tfm_encoder_layer_backward (as torch.autograd keeps its graph; module.h,
 * "Training mode and gradients").
 * Errors: those of tfm_mha_forward. */
TFM_API tfm_status tfm_encoder_layer_forward(const tfm_module *layer,
                                             const tfm_tensor *src,
                                             const tfm_attention_masks *masks,
                                             tfm_tensor *out);

/* ---- Decoder layer (nn.TransformerDecoderLayer) ------------------------
 * post-norm: x = norm1(x + SA(x)); x = norm2(x + CA(x, memory));
 *            x = norm3(x + FF(x))
 * pre-norm:  x = x + SA(norm1(x)); x = x + CA(norm2(x), memory);
 *            x = x + FF(norm3(x))
 * Parameters: "self_attn.*", "multihead_attn.*" (the cross-attention, MHA
 * names), "linear1.*", "linear2.*", "norm1.*", "norm2.*", "norm3.*".
 * Errors: as tfm_encoder_layer_create. */
TFM_API tfm_status tfm_decoder_layer_create(const tfm_layer_config *config,
                                            tfm_module **out);

/* A decoder layer (as tfm_decoder_layer_create) with options (NULL =
 * the defaults).  options->bias 0: no biases (PyTorch 2.x's
 * nn.TransformerDecoderLayer(bias=False)); parameters
 * "self_attn.in_proj_weight", "self_attn.out_proj.weight",
 * "multihead_attn.in_proj_weight", "multihead_attn.out_proj.weight",
 * "linear1.weight", "linear2.weight", "norm1.weight", "norm2.weight",
 * "norm3.weight".  Errors: those of tfm_decoder_layer_create;
 * TFM_ERR_UNSUPPORTED for options->attention not NULL;
 * TFM_ERR_INVALID_ARGUMENT for a struct_size too small.  On error *out is
 * unchanged; on success it is freed with tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_decoder_layer_create_v2(
    const tfm_layer_config *config, const tfm_layer_options *options,
    tfm_module **out);

/* tgt [B, L, d_model], memory [B, S, d_model] -> out [B, L, d_model] (may
 * be tgt).  tgt_masks: self-attention masks over the L target positions
 * (usually causal).  memory_masks: cross-attention masks
 * (key_padding_mask [B, S], attn_mask [L, S] ...).  Either may be NULL.
 * Errors: those of tfm_mha_forward. */
TFM_API tfm_status tfm_decoder_layer_forward(
    const tfm_module *layer, const tfm_tensor *tgt, const tfm_tensor *memory,
    const tfm_attention_masks *tgt_masks,
    const tfm_attention_masks *memory_masks, tfm_tensor *out);

/* The backward of tfm_decoder_layer_forward (torch.autograd's gradients
 * of nn.TransformerDecoderLayer with dropout 0): with post-norm
 * x1 = norm1(tgt + SA(tgt)), x2 = norm2(x1 + CA(x1, memory)),
 * y = norm3(x2 + FF(x2)), or pre-norm x1 = tgt + SA(norm1(tgt)),
 * x2 = x1 + CA(norm2(x1), memory), y = x2 + FF(norm3(x2)), the chain rule
 * through each residual block as tfm_encoder_layer_backward, the
 * self-attention's input gradient the sum of its query, key and value
 * gradients and memory's the sum of the cross-attention's key and value
 * gradients (tfm_mha_backward).  Every parameter gradient is accumulated
 * (+=) into the layer's gradient memory, so tfm_module_train must have
 * been called.  tgt, memory and the masks are the forward's, passed
 * again; the activations are those the latest training-mode
 * tfm_decoder_layer_forward kept when it had the same inputs and nothing
 * it read has changed, else x1, x2 are recomputed (as
 * tfm_encoder_layer_backward: the same bits either way).
 * tgt [B, L, d_model]; memory [B, S, d_model]; tgt_masks, memory_masks as
 * tfm_decoder_layer_forward (NULL: none); grad_output [B, L, d_model];
 * grad_tgt [B, L, d_model] and grad_memory [B, S, d_model] are written
 * (each may be its input, must not overlap grad_output or each other) or
 * NULL when not wanted.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE,
 * TFM_ERR_INVALID_ARGUMENT (no gradient memory, overlapping outputs),
 * TFM_ERR_NON_FINITE (grad_output), TFM_ERR_BUSY (another backward holds
 * the layer's gradients), TFM_ERR_OUT_OF_MEMORY.  The checks, the busy
 * guard and the layer's scratch come before the first write; an
 * out-of-memory inside an attention's backward, after the blocks above it
 * accumulated their parameter gradients, is the one exception.
 * Since 1.2. */
TFM_API tfm_status tfm_decoder_layer_backward(
    tfm_module *layer, const tfm_tensor *tgt, const tfm_tensor *memory,
    const tfm_attention_masks *tgt_masks,
    const tfm_attention_masks *memory_masks, const tfm_tensor *grad_output,
    tfm_tensor *grad_tgt, tfm_tensor *grad_memory);

/* ---- Cross-attention block ---------------------------------------------
 * The decoder's second sub-layer on its own: queries from x, keys and
 * values from memory, with residual connection and LayerNorm:
 * post-norm: norm(x + MHA(x, memory, memory));
 * pre-norm:  x + MHA(norm(x), memory, memory).
 * Parameters: "multihead_attn.*" (MHA names), "norm.weight", "norm.bias".
 * config->d_ff and activation are ignored.
 * Errors: as tfm_encoder_layer_create. */
TFM_API tfm_status tfm_cross_attention_create(const tfm_layer_config *config,
                                              tfm_module **out);

/* x [B, L, d_model], memory [B, S, d_model] -> out [B, L, d_model] (may be
 * x).  masks: NULL or masks over the S memory positions.
 * Errors: those of tfm_mha_forward. */
TFM_API tfm_status tfm_cross_attention_forward(const tfm_module *block,
                                               const tfm_tensor *x,
                                               const tfm_tensor *memory,
                                               const tfm_attention_masks *masks,
                                               tfm_tensor *out);

/* The backward of tfm_cross_attention_forward (torch.autograd's, the
 * block being norm(x + MHA(x, memory, memory)) or x + MHA(norm(x),
 * memory, memory)): the residual block's chain rule as
 * tfm_encoder_layer_backward, memory's gradient the sum of the attention's
 * key and value gradients (tfm_mha_backward).  Every parameter gradient
 * is accumulated (+=) into the block's gradient memory (tfm_module_train
 * first).  x, memory and masks are the forward's, passed again.
 * x [B, L, d_model]; memory [B, S, d_model]; masks as the forward (NULL:
 * none); grad_output [B, L, d_model]; grad_x [B, L, d_model] and
 * grad_memory [B, S, d_model] are written (each may be its input, must
 * not overlap grad_output or each other) or NULL when not wanted.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE,
 * TFM_ERR_INVALID_ARGUMENT (no gradient memory, overlapping outputs),
 * TFM_ERR_NON_FINITE (grad_output), TFM_ERR_BUSY, TFM_ERR_OUT_OF_MEMORY;
 * on error nothing is written.  Since 1.2. */
TFM_API tfm_status tfm_cross_attention_backward(
    tfm_module *block, const tfm_tensor *x, const tfm_tensor *memory,
    const tfm_attention_masks *masks, const tfm_tensor *grad_output,
    tfm_tensor *grad_x, tfm_tensor *grad_memory);

/* ---- Encoder and decoder stacks (nn.TransformerEncoder / Decoder) ------
 * n_layers identical layers, then, when final_norm is nonzero, a LayerNorm.
 * Parameters: "layers.<i>.<layer parameter>" and, with final_norm,
 * "norm.weight", "norm.bias".
 * Errors: as tfm_encoder_layer_create, and TFM_ERR_INVALID_ARGUMENT for
 * n_layers < 1. */
TFM_API tfm_status tfm_encoder_create(const tfm_layer_config *config,
                                      int64_t n_layers, int final_norm,
                                      tfm_module **out);
TFM_API tfm_status tfm_decoder_create(const tfm_layer_config *config,
                                      int64_t n_layers, int final_norm,
                                      tfm_module **out);

/* The stacks with options (NULL = the defaults, tfm_encoder_create /
 * tfm_decoder_create): every layer as tfm_encoder_layer_create_v2 /
 * tfm_decoder_layer_create_v2 with these options, and with options->bias
 * 0 the final LayerNorm has no bias either ("norm.weight" only).  A
 * decoder stack refuses a variant (TFM_ERR_UNSUPPORTED).  Errors: those
 * of tfm_encoder_create and of the _v2 layer constructors.  On error *out
 * is unchanged; on success it is freed with tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_encoder_create_v2(const tfm_layer_config *config,
                                         int64_t n_layers, int final_norm,
                                         const tfm_layer_options *options,
                                         tfm_module **out);
TFM_API tfm_status tfm_decoder_create_v2(const tfm_layer_config *config,
                                         int64_t n_layers, int final_norm,
                                         const tfm_layer_options *options,
                                         tfm_module **out);

/* Same shapes, masks and errors as the single-layer forward functions;
 * every layer gets the same masks. */
TFM_API tfm_status tfm_encoder_forward(const tfm_module *encoder,
                                       const tfm_tensor *src,
                                       const tfm_attention_masks *masks,
                                       tfm_tensor *out);
TFM_API tfm_status tfm_decoder_forward(const tfm_module *decoder,
                                       const tfm_tensor *tgt,
                                       const tfm_tensor *memory,
                                       const tfm_attention_masks *tgt_masks,
                                       const tfm_attention_masks *memory_masks,
                                       tfm_tensor *out);

/* The backward passes of the stacks (torch.autograd's gradients of
 * nn.TransformerEncoder / nn.TransformerDecoder with dropout 0, the final
 * LayerNorm included): one forward keeps each layer's input and the
 * activations its blocks' backward passes need (memory linear in the
 * layers, as torch.autograd keeps them, in the calling thread's
 * workspace, kept for the next call), then the final norm and the layers
 * go backward in reverse order as tfm_encoder_layer_backward /
 * tfm_decoder_layer_backward do.  Every parameter gradient
 * is accumulated (+=) into the stack's gradient memory (tfm_module_train
 * first); the decoder's memory gradient is the sum over its layers.
 * Arguments, outputs (each may be its input, NULL when not wanted) and
 * errors as the layers' backward passes; the checks, the busy guard and
 * the forward's activations come before the first write, and an
 * out-of-memory inside a layer's attention backward, after the layers
 * above it accumulated their gradients, is the one exception.
 * Since 1.2. */
TFM_API tfm_status tfm_encoder_backward(tfm_module *encoder,
                                        const tfm_tensor *src,
                                        const tfm_attention_masks *masks,
                                        const tfm_tensor *grad_output,
                                        tfm_tensor *grad_src);
TFM_API tfm_status tfm_decoder_backward(
    tfm_module *decoder, const tfm_tensor *tgt, const tfm_tensor *memory,
    const tfm_attention_masks *tgt_masks,
    const tfm_attention_masks *memory_masks, const tfm_tensor *grad_output,
    tfm_tensor *grad_tgt, tfm_tensor *grad_memory);

/* ---- Encoder-decoder Transformer (nn.Transformer) ----------------------
 * memory = encoder(src), out = decoder(tgt, memory); both stacks end with a
 * LayerNorm, as in nn.Transformer.  Parameters: "encoder.layers.<i>.*",
 * "encoder.norm.*", "decoder.layers.<i>.*", "decoder.norm.*".
 * Errors: as tfm_encoder_create. */
TFM_API tfm_status tfm_transformer_create(const tfm_layer_config *config,
                                          int64_t n_encoder_layers,
                                          int64_t n_decoder_layers,
                                          tfm_module **out);

/* nn.Transformer (as tfm_transformer_create) with options (NULL = the
 * defaults).  options->bias 0 is PyTorch 2.x's nn.Transformer(bias=False):
 * both stacks as tfm_encoder_create_v2 / tfm_decoder_create_v2 with bias
 * 0, the final norms included; no "*.bias" parameter.  Errors: those of
 * tfm_transformer_create; TFM_ERR_UNSUPPORTED for options->attention not
 * NULL; TFM_ERR_INVALID_ARGUMENT for a struct_size too small.  On error
 * *out is unchanged; on success it is freed with tfm_module_free.
 * Since 1.2. */
TFM_API tfm_status tfm_transformer_create_v2(const tfm_layer_config *config,
                                             int64_t n_encoder_layers,
                                             int64_t n_decoder_layers,
                                             const tfm_layer_options *options,
                                             tfm_module **out);

/* src [B, S, d_model], tgt [B, L, d_model] -> out [B, L, d_model].
 * src_masks: encoder self-attention (key_padding_mask [B, S], attn_mask
 * [S, S]...); tgt_masks: decoder self-attention over L; memory_masks:
 * cross-attention ([B, S] padding, [L, S] attn_mask).  Any may be NULL.
 * Errors: those of tfm_mha_forward. */
TFM_API tfm_status tfm_transformer_forward(
    const tfm_module *model, const tfm_tensor *src, const tfm_tensor *tgt,
    const tfm_attention_masks *src_masks,
    const tfm_attention_masks *tgt_masks,
    const tfm_attention_masks *memory_masks, tfm_tensor *out);

/* The backward of tfm_transformer_forward (torch.autograd's gradients of
 * nn.Transformer with dropout 0): the encoder's output (memory) is
 * recomputed, the decoder stack goes backward (tfm_decoder_backward),
 * giving tgt's gradient and memory's, which the encoder stack then takes
 * backward to src's.  Every parameter gradient of both stacks and their
 * final norms is accumulated (+=) (tfm_module_train first).  src, tgt
 * and the masks are the forward's; grad_output [B, L, d_model];
 * grad_src [B, S, d_model] and grad_tgt [B, L, d_model] are written
 * (each may be its input, must not overlap grad_output or each other) or
 * NULL when not wanted.  Errors and their guarantees as
 * tfm_decoder_backward.  Since 1.2. */
TFM_API tfm_status tfm_transformer_backward(
    tfm_module *model, const tfm_tensor *src, const tfm_tensor *tgt,
    const tfm_attention_masks *src_masks,
    const tfm_attention_masks *tgt_masks,
    const tfm_attention_masks *memory_masks, const tfm_tensor *grad_output,
    tfm_tensor *grad_src, tfm_tensor *grad_tgt);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_LAYERS_H */
