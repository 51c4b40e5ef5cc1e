/*
 * libtransformer: scaled dot-product attention and multi-head attention.
 *
 * Source: Vaswani et al., "Attention Is All You Need" (2017), eq. (1)
 *   Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
 * and section 3.2.2 (multi-head attention)
 *   MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
 *   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).
 *
 * Shapes use B = batch, H = heads, L = query positions, S = key positions.
 *
 * Masks (tfm_attention_masks) decide which keys each query may attend to.
 * A masked-out logit is -infinity before the softmax, whatever the scores,
 * keys or values at that position hold (NaN and infinity included): values
 * in masked positions never affect the output.  The softmax subtracts each
 * row's maximum, so large logits do not overflow.  A query row whose keys
 * are all masked gets all-zero weights and an all-zero output, never NaN.
 * NaN in a visible query, key or value propagates to the outputs it touches.
 *
 * Attention variants (the section below tfm_sdpa): one tfm_attention_config
 * chooses the score, grouped-query / multi-query heads, RoPE, relative
 * positions and sparse patterns for multi-head attention
 * (tfm_mha_create_ex), the functional form (tfm_attention_forward),
 * encoder layers and models.
 */
#ifndef TRANSFORMER_ATTENTION_H
#define TRANSFORMER_ATTENTION_H

#include "module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Causal masking: query i may attend to key j only when j <= i + offset.
 * Append-only. */
typedef enum tfm_causal {
    TFM_CAUSAL_NONE = 0,
    /* offset 0: aligned at the top left, as PyTorch's is_causal=True.  For
     * L > S the last L - S queries see every key; for L < S the queries see
     * only the first keys. */
    TFM_CAUSAL_TOP_LEFT = 1,
    /* offset S - L: the L queries are the last L positions of the S keys, as
     * decoding with a KV cache needs (query i is position S - L + i). */
    TFM_CAUSAL_BOTTOM_RIGHT = 2,
    TFM_CAUSAL_COUNT             /* since 1.2.0; grows, never store it */
} tfm_causal;

/* How a mask tensor's values are read.  Append-only. */
typedef enum tfm_mask_kind {
    /* Boolean, nonzero = masked out (may NOT attend).  PyTorch's convention
     * for nn.MultiheadAttention's key_padding_mask and attn_mask. */
    TFM_MASK_BLOCK = 0,
    /* Boolean, nonzero = may attend.  PyTorch's convention for
     * F.scaled_dot_product_attention's boolean attn_mask. */
    TFM_MASK_ALLOW = 1,
    /* Float, added to the scaled logits (-inf masks a position out). */
    TFM_MASK_ADDITIVE = 2,
    TFM_MASK_KIND_COUNT          /* since 1.2.0; grows, never store it */
} tfm_mask_kind;

/* The masks of one attention call.  All of them combine: a key is visible
 * to a query only when every mask allows it, and additive values add up.
 * A zero-initialised struct means "no masks". */
typedef struct tfm_attention_masks {
    tfm_causal causal;
    /* [B, S] or NULL: per batch element, which keys are padding. */
    const tfm_tensor *key_padding_mask;
    tfm_mask_kind key_padding_kind;
    /* [L, S], [B, L, S] or [B, H, L, S] or NULL; [L, S] and [B, L, S] are
     * broadcast over the missing leading axes. */
    const tfm_tensor *attn_mask;
    tfm_mask_kind attn_mask_kind;
} tfm_attention_masks;

/* Scaled dot-product attention, eq. (1) above, per batch element and head:
 *   weights = softmax(scale * q k^T + masks) over the S keys,
 *   out     = weights v.
 * q [B, H, L, d_k], k [B, H, S, d_k], v [B, H, S, d_v], out [B, H, L, d_v]
 * (caller-allocated; written).  weights: NULL, or [B, H, L, S] to receive
 * the attention weights (each unmasked row sums to 1).  masks: NULL for
 * none.  scale: 0 means the default 1/sqrt(d_k); any other finite value is
 * used as given.
 * Errors: TFM_ERR_NULL_ARGUMENT (q, k, v or out NULL), TFM_ERR_SHAPE (ranks
 * or sizes disagree, or a mask has the wrong shape), TFM_ERR_INVALID_ARGUMENT
 * (unknown enum value, non-finite scale), TFM_ERR_OUT_OF_MEMORY.  On error
 * out and weights are unchanged. */
TFM_API tfm_status tfm_sdpa(const tfm_tensor *q, const tfm_tensor *k,
                            const tfm_tensor *v,
                            const tfm_attention_masks *masks, float scale,
                            tfm_tensor *out, tfm_tensor *weights);

/* The training forward of tfm_sdpa: the same out (the same bits), and
 * lse [B, H, L] (caller-allocated, written) receiving each query row's
 * log-sum-exp of its masked, scaled logits,
 *   lse[b, h, i] = log sum_j exp(scale q_i . k_j + masks_ij),
 * -inf for a row whose keys are all masked (PyTorch's
 * _scaled_dot_product_flash_attention returns the same logsumexp).  It is
 * what tfm_sdpa_backward needs to recompute the weights tile by tile
 * (FlashAttention-2, Dao 2023).  Arguments, errors and memory (linear in
 * L and S) as tfm_sdpa without weights; lse NULL is
 * TFM_ERR_NULL_ARGUMENT.  Since 1.2. */
TFM_API tfm_status tfm_sdpa_lse(const tfm_tensor *q, const tfm_tensor *k,
                                const tfm_tensor *v,
                                const tfm_attention_masks *masks, float scale,
                                tfm_tensor *out, tfm_tensor *lse);

/* The backward of tfm_sdpa (torch.autograd's gradients of
 * F.scaled_dot_product_attention), by FlashAttention-2's tiled algorithm
 * (Dao 2023, algorithm 2): per tile of queries and keys the weights are
 * recomputed from q, k and lse, P = exp(scale q k^T + masks - lse), and
 *   grad_v = P^T grad_out,  dP = grad_out v^T,
 *   dS = P * (dP - D),  D_i = sum_c grad_out_ic out_ic,
 *   grad_q = scale dS k,  grad_k = scale dS^T q,
 * each product one cblas_sgemm; no [L, S] matrix is built (scratch linear
 * in L and S).  q, k, v, masks, scale: those of the forward.  out [B, H,
 * L, d_v] and lse [B, H, L]: what tfm_sdpa_lse wrote for them, or both
 * NULL (the forward is then run again inside).  grad_out [B, H, L, d_v]:
 * the gradient of the loss with respect to out.  grad_q [B, H, L, d_k],
 * grad_k [B, H, S, d_k], grad_v [B, H, S, d_v]: caller-allocated, written
 * (overwritten, not accumulated); each may be NULL when not wanted.
 * Masked keys get no gradient, whatever their values; a query row whose
 * keys are all masked gets zero gradients (never NaN).  The results are
 * the same bits for every thread count.
 * Errors: TFM_ERR_NULL_ARGUMENT (q, k, v or grad_out NULL; only one of out
 * and lse), TFM_ERR_SHAPE, TFM_ERR_INVALID_ARGUMENT (as tfm_sdpa),
 * TFM_ERR_NON_FINITE (grad_out holds NaN or infinity),
 * TFM_ERR_OUT_OF_MEMORY.  On error no gradient is written.  Since 1.2. */
TFM_API tfm_status tfm_sdpa_backward(
    const tfm_tensor *q, const tfm_tensor *k, const tfm_tensor *v,
    const tfm_attention_masks *masks, float scale, const tfm_tensor *out,
    const tfm_tensor *lse, const tfm_tensor *grad_out, tfm_tensor *grad_q,
    tfm_tensor *grad_k, tfm_tensor *grad_v);

/*
 * ---- Attention variants (since 1.1.0) ----------------------------------
 * Attention variants and positional information from the literature, as
 * options of the one attention kernel.
 *
 * A tfm_attention_config selects, independently of each other:
 *   - the scoring function s(q_i, k_j) of the logits (tfm_score);
 *   - the number of key/value heads (grouped-query and multi-query
 *     attention);
 *   - rotary position embeddings applied to queries and keys (tfm_rope);
 *   - a relative-position term of the logits (tfm_relative: Shaw et al.,
 *     T5 buckets, ALiBi);
 *   - a sparse pattern of visible keys (tfm_sparsity: sliding, dilated,
 *     global tokens, BigBird), computed from positions, never built as an
 *     L x S matrix.
 * The same config is accepted by the functional form (tfm_attention_*), by
 * multi-head attention (tfm_mha_create_ex), by encoder layers
 * (tfm_encoder_layer_create_ex) and by decoder-only and encoder-only models
 * (tfm_model_create_ex, and the model file's "tfm.attention.*" metadata,
 * model.h).  A zero-filled config after tfm_attention_config_init is plain
 * scaled dot-product attention, identical to tfm_sdpa / tfm_mha_create.
 *
 * Positions.  Query row i is at position p_i = i + (S - L when the causal
 * mode is TFM_CAUSAL_BOTTOM_RIGHT, else 0); key row j is at position j.
 * With a KV cache the n new queries are positions length .. length+n-1.
 * Relative terms use the distance j - p_i (key minus query).
 *
 * Logits of head h (before the masks and the softmax):
 *   a_ij = scale_h * s(q_i, k_j) + scale_h * q_i . r^K(j - p_i)   [Shaw]
 *          + b_h(j - p_i)                                 [T5 or ALiBi]
 * and the output  o_i = sum_j w_ij (v_j + r^V(j - p_i))   [Shaw values].
 *
 * Since 1.1.0: everything in this section and the _ex constructors next to
 * the functions they extend (tfm_mha_create_ex below,
 * tfm_encoder_layer_create_ex in layers.h, tfm_sinusoidal_encoding_ex in
 * embedding.h); until 1.2.0 they were declared in variants.h, which still
 * includes them.
 *
 * ABI: the struct begins with its own size.  Callers set it with
 * tfm_attention_config_init (which writes every default); the library
 * reads only the first struct_size bytes and takes defaults for fields a
 * newer library added after them.  The enums are append-only.
 *
 * Learned parameters (PyTorch-style names, present only for the variants
 * that use them; new modules start them at the values given below):
 *   "score_weight"            [H, d_k, d_k]   TFM_SCORE_GENERAL (zero)
 *   "additive_query"          [H, d_a, d_k]   TFM_SCORE_ADDITIVE (zero)
 *   "additive_key"            [H, d_a, d_k]   TFM_SCORE_ADDITIVE (zero)
 *   "additive_v"              [H, d_a]        TFM_SCORE_ADDITIVE (zero)
 *   "temperature"             [H]     TFM_SCORE_LEARNED_TEMPERATURE
 *                                     (starts at sqrt(d_k))
 *   "relative_key.weight"     [2 * max_distance + 1, d_k]  Shaw (zero)
 *   "relative_value.weight"   [2 * max_distance + 1, d_v]  Shaw with
 *                                                          relative_values
 *   "relative_attention_bias.weight" [num_buckets, H]  T5 (zero; the name
 *                                     and layout of Hugging Face's T5)
 */

/* Scoring function s(q, k) of one head.  Append-only. */
typedef enum tfm_score {
    /* q . k / sqrt(d_k): Vaswani et al. 2017, eq. (1).  The default. */
    TFM_SCORE_SCALED_DOT = 0,
    /* q . k, unscaled: Luong, Pham and Manning 2015, "dot" (eq. 8). */
    TFM_SCORE_DOT = 1,
    /* q^T W_h k with a learned W_h [d_k, d_k] per head ("score_weight"):
     * Luong et al. 2015, "general" (eq. 8).  Unscaled. */
    TFM_SCORE_GENERAL = 2,
    /* v_h^T tanh(W_q,h q + W_k,h k), W_q,h and W_k,h [d_a, d_k], v_h [d_a]
     * ("additive_query", "additive_key", "additive_v"): Bahdanau, Cho and
     * Bengio 2014, eq. (6) / appendix A.1.2.  Unscaled.  Costs L*S*d_a
     * tanh evaluations per head. */
    TFM_SCORE_ADDITIVE = 3,
    /* q . k / tau_h with a learned temperature tau_h > 0 per head
     * ("temperature", starting at sqrt(d_k), i.e. the default scaling).
     * A forward pass with a temperature <= 0 or non-finite fails with
     * TFM_ERR_INVALID_ARGUMENT. */
    TFM_SCORE_LEARNED_TEMPERATURE = 4,
    TFM_SCORE_COUNT              /* since 1.2.0; grows, never store it */
} tfm_score;

/* Rotary position embedding (Su et al. 2021, "RoFormer", eq. (34)):
 * queries and keys are rotated by position-dependent angles
 * theta_{p,i} = p * base^(-2i/rope_dims), i = 0 .. rope_dims/2 - 1, so
 * q_p . k_p' depends only on p - p'.  The two layouts checkpoints use differ
 * in which dimensions form rotation pair i.  Append-only. */
typedef enum tfm_rope {
    TFM_ROPE_NONE = 0,
    /* Adjacent pairs (2i, 2i+1): the paper, GPT-J, Meta's LLaMA. */
    TFM_ROPE_ADJACENT = 1,
    /* Half-split pairs (i, i + rope_dims/2): GPT-NeoX and Hugging Face's
     * LLaMA ("rotate_half"). */
    TFM_ROPE_HALF = 2,
    TFM_ROPE_COUNT               /* since 1.2.0; grows, never store it */
} tfm_rope;

/* Relative-position term of the logits.  Append-only. */
typedef enum tfm_relative {
    TFM_RELATIVE_NONE = 0,
    /* Shaw, Uszkoreit and Vaswani 2018, eqs. (3)-(5): learned vectors
     * r^K(d) = relative_key[clip(d, -k, k) + k] (and r^V on the values when
     * relative_values is set), k = max_distance, shared by all heads. */
    TFM_RELATIVE_SHAW = 1,
    /* Raffel et al. 2020 (T5), section 2.1: a learned scalar per head and
     * bucket, b_h(d) = relative_attention_bias[bucket(d), h], with
     * num_buckets buckets, exact for small |d| and logarithmic up to
     * max_distance (Hugging Face's _relative_position_bucket). */
    TFM_RELATIVE_T5 = 2,
    /* Press, Smith and Lewis 2022 (ALiBi), section 3: b_h(d) = -m_h |d|,
     * slopes m_h = 2^(-8h/n) for h = 1 .. n heads when n is a power of two;
     * otherwise the n' = 2^floor(log2 n) slopes followed by every other
     * slope of the 2n' sequence, as in the paper's reference code. */
    TFM_RELATIVE_ALIBI = 3,
    TFM_RELATIVE_COUNT           /* since 1.2.0; grows, never store it */
} tfm_relative;

/* Which keys a query may see, by position, on top of the masks.
 * Append-only. */
typedef enum tfm_sparsity {
    TFM_SPARSE_NONE = 0,
    /* Key j visible to query position p when |p - j| <= window (with a
     * causal mask: p - window <= j <= p).  Beltagy et al. 2020
     * (Longformer), section 3.1; Child et al. 2019 (local attention). */
    TFM_SPARSE_SLIDING_WINDOW = 1,
    /* Dilated sliding window: |p - j| <= window * dilation and
     * (p - j) divisible by dilation (Longformer, section 3.1). */
    TFM_SPARSE_DILATED = 2,
    /* BigBird (Zaheer et al. 2020, section 2, ITC variant) on blocks of
     * block_size positions: query block a sees key block b when
     * |a - b| <= window, or a < n_global or b < n_global (global blocks),
     * or b is one of the n_random_blocks random blocks of a.  Random block
     * r (0 .. n_random_blocks-1) of query block a is x mod n, where x is
     * the first output of SplitMix64 (tfm_rng, model.h) seeded with
     * (seed ^ (a * 0x9E3779B97F4A7C15)) + r (64-bit wrapping arithmetic),
     * and n is the number of key blocks (ceil(S/block_size)) without a
     * causal mask and a + 1 with one, so that under a causal mask a query's
     * blocks do not depend on the sequence length (KV-cache decoding agrees
     * with a full pass). */
    TFM_SPARSE_BIGBIRD = 3,
    TFM_SPARSE_COUNT             /* since 1.2.0; grows, never store it */
} tfm_sparsity;

typedef struct tfm_attention_config {
    size_t struct_size;       /* sizeof(tfm_attention_config) */
    tfm_score score;
    /* Logit scale; 0 = the score's own (1/sqrt(d_k) for SCALED_DOT, 1 for
     * DOT, GENERAL and ADDITIVE).  Not allowed with LEARNED_TEMPERATURE. */
    float scale;
    int64_t additive_dim;     /* d_a of TFM_SCORE_ADDITIVE; 0 = d_k */
    /* Key/value heads: must divide n_heads; query head h uses key/value
     * head h / (n_heads / n_kv_heads).  0 = n_heads (standard attention);
     * 1 = multi-query attention (Shazeer 2019); between: grouped-query
     * attention (Ainslie et al. 2023).  The key and value projections then
     * have n_kv_heads * d_k rows, and a KV cache holds that many columns. */
    int64_t n_kv_heads;
    tfm_rope rope;
    double rope_base;         /* > 1; 0 = 10000 */
    int64_t rope_dims;        /* leading dims of each head rotated (even);
                               * 0 = d_k (GPT-NeoX's partial rotary) */
    tfm_relative relative;
    /* Shaw: clipping distance k (>= 1, required).  T5: max_distance
     * (0 = 128). */
    int64_t max_distance;
    int relative_values;      /* Shaw: also r^V on the values */
    int64_t num_buckets;      /* T5: 0 = 32 */
    int bidirectional;        /* T5: buckets for both signs of d (the
                               * encoder's); 0: as T5's decoder, d > 0 all
                               * in bucket 0 */
    tfm_sparsity sparsity;
    int64_t window;           /* SLIDING / DILATED: positions each side;
                               * BIGBIRD: blocks each side */
    int64_t dilation;         /* DILATED: >= 1 */
    /* Global tokens: the first n_global positions (BIGBIRD: blocks) see
     * every key and are seen by every query (still subject to the causal
     * mask).  Allowed with SLIDING, DILATED and BIGBIRD. */
    int64_t n_global;
    int64_t block_size;       /* BIGBIRD: >= 1 */
    int64_t n_random_blocks;  /* BIGBIRD: 0 .. 4096 */
    uint64_t seed;            /* BIGBIRD: random blocks */
} tfm_attention_config;

/* Fills *config with the defaults (plain scaled dot-product attention,
 * bidirectional T5 buckets, dilation 1) and sets struct_size.  NULL is a
 * no-op. */
TFM_API void tfm_attention_config_init(tfm_attention_config *config);

/* Creates a multi-head attention layer (PyTorch nn.MultiheadAttention):
 * d_model = embed_dim, n_heads must divide d_model (d_k = d_model/n_heads),
 * kdim / vdim are the widths of the key and value inputs (0 means d_model),
 * bias nonzero adds biases to the input and output projections.
 * Parameters (PyTorch names):
 *   kdim == vdim == d_model: "in_proj_weight" [3*d_model, d_model]
 *                            (rows: W_q, then W_k, then W_v)
 *   otherwise: "q_proj_weight" [d_model, d_model],
 *              "k_proj_weight" [d_model, kdim],
 *              "v_proj_weight" [d_model, vdim]
 *   with bias: "in_proj_bias" [3*d_model]
 *   "out_proj.weight" [d_model, d_model], with bias "out_proj.bias" [d_model]
 * Errors: TFM_ERR_NULL_ARGUMENT (out NULL), TFM_ERR_INVALID_ARGUMENT (a size
 * < 1, n_heads not dividing d_model), TFM_ERR_OVERFLOW,
 * TFM_ERR_OUT_OF_MEMORY.  On success *out is freed with tfm_module_free. */
TFM_API tfm_status tfm_mha_create(int64_t d_model, int64_t n_heads,
                                  int64_t kdim, int64_t vdim, int bias,
                                  tfm_module **out);

/* Multi-head attention (as tfm_mha_create) with a variant.  With
 * n_kv_heads < n_heads the packed "in_proj_weight" is
 * [d_model + 2 * n_kv_heads * d_k, d_model] (rows W_q, W_k, W_v) and
 * "in_proj_bias" likewise; unpacked "k_proj_weight" / "v_proj_weight" are
 * [n_kv_heads * d_k, kdim / vdim].  The variant's parameters (above) are
 * listed after the projections.  tfm_mha_forward runs it; its weights
 * output and masks are unchanged.  Source: Vaswani et al. 2017, 3.2.2,
 * with the variant's papers above; GQA/MQA as in Ainslie et al. 2023 and
 * Shazeer 2019.  Errors: those of tfm_mha_create and tfm_attention_create;
 * on error *out is unchanged.  On success *out is freed with
 * tfm_module_free.
 * Deprecated since 1.2: tfm_mha_create_v2 with options.attention does the
 * same; this one stays exported and working (docs/ABI.md). */
TFM_DEPRECATED("use tfm_mha_create_v2 (tfm_mha_options.attention)")
TFM_API tfm_status tfm_mha_create_ex(int64_t d_model, int64_t n_heads,
                                     int64_t kdim, int64_t vdim, int bias,
                                     const tfm_attention_config *config,
                                     tfm_module **out);

/* Multi-head attention forward pass.
 * query [B, L, d_model], key [B, S, kdim], value [B, S, vdim];
 * out [B, L, d_model] (caller-allocated; written; it may be the query
 * tensor itself).  masks: NULL or as for tfm_sdpa, with key_padding_mask
 * [B, S] and attn_mask [L, S], [B, L, S] or [B, n_heads, L, S].
 * weights: NULL, or [B, n_heads, L, S] for the weights of each head, or
 * [B, L, S] for their average over the heads (PyTorch's
 * average_attn_weights=True); for a module with add_bias_kv /
 * add_zero_attn (tfm_mha_create_v2) S + 1 columns for each (the extra
 * keys follow the S keys and are visible to every query).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_WRONG_KIND (not an MHA module),
 * TFM_ERR_SHAPE (e.g. "key has 5 columns, expected 8"),
 * TFM_ERR_INVALID_ARGUMENT (unknown enum value), TFM_ERR_OUT_OF_MEMORY.
 * On error out and weights are unchanged. */
TFM_API tfm_status tfm_mha_forward(const tfm_module *mha,
                                   const tfm_tensor *query,
                                   const tfm_tensor *key,
                                   const tfm_tensor *value,
                                   const tfm_attention_masks *masks,
                                   tfm_tensor *out, tfm_tensor *weights);

/* ---- Multi-head attention with PyTorch's extra key/value rows ----------
 * Options of tfm_mha_create_v2: the arguments of tfm_mha_create_ex and
 * nn.MultiheadAttention's add_bias_kv and add_zero_attn.  Self-sized
 * (docs/ABI.md): set struct_size with tfm_mha_options_init, which writes
 * every default; the library reads only the first struct_size bytes and
 * takes its defaults for members a newer library appends.  Since 1.2. */
typedef struct tfm_mha_options {
    size_t struct_size;       /* sizeof(tfm_mha_options) */
    int64_t kdim, vdim;       /* key / value input widths; 0 = d_model */
    int bias;                 /* projection biases; default 1 */
    /* PyTorch's add_bias_kv: learned rows "bias_k" and "bias_v" [1, 1,
     * kv_dim] (kv_dim = n_kv_heads * d_k, d_model without GQA; drawn as
     * torch's xavier_normal_ by tfm_module_reset_parameters, zero in a new
     * module) appended to every batch element's projected keys and values
     * after the S key rows, so attention sees S + 1 keys.  Default 0. */
    int add_bias_kv;
    /* PyTorch's add_zero_attn: an all-zero key row and value row appended
     * after those (after bias_k / bias_v), one more key.  Default 0. */
    int add_zero_attn;
    /* The attention variant (NULL = plain scaled dot-product attention);
     * only read during the call.  Extra rows are refused (TFM_ERR_INVALID_
     * ARGUMENT) with a variant that uses positions (RoPE, a relative term
     * or a sparse pattern): PyTorch gives the extra rows no position. */
    const tfm_attention_config *attention;
} tfm_mha_options;

/* Writes the defaults (kdim = vdim = 0, bias 1, no extra rows, no
 * variant) and struct_size.  NULL is a no-op.  Since 1.2. */
TFM_API void tfm_mha_options_init(tfm_mha_options *options);

/* Multi-head attention (as tfm_mha_create_ex) with options; options NULL
 * means the defaults (tfm_mha_create(d_model, n_heads, 0, 0, 1)).
 * Parameters: those of tfm_mha_create_ex, with add_bias_kv "bias_k" and
 * "bias_v" [1, 1, kv_dim] after "in_proj_bias" (PyTorch's state_dict
 * order).  Source: torch.nn.MultiheadAttention (PyTorch 1.13).
 * Errors: those of tfm_mha_create_ex; TFM_ERR_INVALID_ARGUMENT also for a
 * struct_size smaller than its first member or extra rows with a
 * positional variant.  On error *out is unchanged; on success it is freed
 * with tfm_module_free.  Since 1.2. */
TFM_API tfm_status tfm_mha_create_v2(int64_t d_model, int64_t n_heads,
                                     const tfm_mha_options *options,
                                     tfm_module **out);

/* tfm_mha_forward with F.multi_head_attention_forward's static_k and
 * static_v (PyTorch 1.13): precomputed keys / values that replace the
 * projections of key / value.
 *   static_k: NULL or [B, H_kv, S, d_k] (H_kv = n_kv_heads, n_heads
 *             without GQA; PyTorch's [B * n_heads, S, d_k]), used as the
 *             projected keys as they are; key is then not read (may be
 *             NULL).
 *   static_v: NULL or [B, H_kv, S, d_k] likewise for the values.
 * S is static_k's rows, else static_v's, else key's; a projected key or
 * value must have S rows too.  Then, as PyTorch: with add_bias_kv (which
 * refuses static_k / static_v) bias_k / bias_v follow the S rows, with
 * add_zero_attn a zero row follows, so attention sees S' = S + (bias_kv)
 * + (zero_attn) keys.  masks are over the S keys (key_padding_mask [B,
 * S], attn_mask [L, S] ...); the extra keys are visible to every query,
 * as PyTorch pads its masks with zeros (a causal mode masks only among
 * the S keys, as PyTorch with a causal attn_mask).  weights: NULL,
 * [B, n_heads, L, S'] or [B, L, S'].  static_k / static_v are refused
 * with a positional variant (RoPE, relative term, sparse pattern).
 * Errors: those of tfm_mha_forward; TFM_ERR_INVALID_ARGUMENT (static rows
 * with add_bias_kv or a positional variant).  On error out and weights
 * are unchanged.  Since 1.2. */
TFM_API tfm_status tfm_mha_forward_v2(const tfm_module *mha,
                                      const tfm_tensor *query,
                                      const tfm_tensor *key,
                                      const tfm_tensor *value,
                                      const tfm_tensor *static_k,
                                      const tfm_tensor *static_v,
                                      const tfm_attention_masks *masks,
                                      tfm_tensor *out, tfm_tensor *weights);

/* The backward of tfm_mha_forward (torch.autograd's gradients of
 * nn.MultiheadAttention's output with respect to query, key, value and
 * every projection parameter).  With q = query W_q^T + b_q, k, v, the
 * heads' outputs ctx and out = ctx W_o^T + b_o as in the forward
 * (recomputed here: nothing is kept between the calls),
 *   out_proj.weight.grad += grad_output^T ctx, out_proj.bias.grad += sum,
 *   (dq, dk, dv) = the attention's backward (tfm_sdpa_backward's
 *     FlashAttention-2 algorithm: no [L, S] matrix, memory linear in L
 *     and S; masked keys get nothing, fully masked rows zero),
 *   in_proj (or q/k/v_proj) weight.grad += dq^T query, ... bias += sums,
 *   grad_query = dq W_q, grad_key = dk W_k, grad_value = dv W_v,
 * every product one cblas_sgemm.  Parameter gradients are accumulated
 * (+=) into the module's gradient memory (tfm_module_train first, module.h).
 * For self-attention (query, key and value the same tensor) the input's
 * gradient is grad_query + grad_key + grad_value, as autograd sums them.
 * query [B, L, d_model], key [B, S, kdim], value [B, S, vdim], masks:
 * those of the forward (NULL: none); grad_output [B, L, d_model];
 * grad_query, grad_key, grad_value: query's, key's and value's shapes
 * (caller-allocated, written) or NULL when not wanted, overlapping no
 * input and no other gradient.
 * Supported: every mask, kdim / vdim, bias or not, and every attention
 * variant (scaled dot product, grouped-query and
 * multi-query heads, ALiBi, every sparse pattern, RoPE in both layouts and
 * any rope_dims: the gradients of the rotated q and k turned back by the
 * transposed rotation, Su et al. 2021 eq. (34); the learned temperature,
 * logits q.k / tau_h, whose "temperature" gradient is -(1/tau_h) sum q.dq
 * over the head's rows; Luong's general score q^T W_h k, dq = dq' W_h^T
 * and W_h's gradient q^T dq' with q' = q W_h; Bahdanau's additive score,
 * whose "additive_query" / "additive_key" gradients are dq'^T q and dk'^T k
 * for q' = q W_q,h^T and k' = k W_k,h^T, and "additive_v"'s the sum of dS
 * tanh(q' + k'); Shaw's "relative_key.weight" and "relative_value.weight"
 * gradients, the logits' and the weights' gradients summed per clipped
 * distance; T5's "relative_attention_bias.weight" gradient, the logits'
 * gradients summed per bucket; each variant's parameter gradients
 * accumulated as the others).  add_bias_kv / add_zero_attn give
 * TFM_ERR_INVALID_ARGUMENT naming them.
 * Errors: TFM_ERR_NULL_ARGUMENT (mha, query, key, value or grad_output),
 * TFM_ERR_WRONG_KIND, TFM_ERR_SHAPE, TFM_ERR_NON_FINITE (grad_output holds
 * NaN or infinity), TFM_ERR_INVALID_ARGUMENT (as above; no gradient
 * memory; overlapping gradients; masks as tfm_mha_forward), TFM_ERR_BUSY
 * (another thread's backward pass writes the same gradients),
 * TFM_ERR_OUT_OF_MEMORY.  On error nothing is written.  Since 1.2. */
TFM_API tfm_status tfm_mha_backward(tfm_module *mha, const tfm_tensor *query,
                                    const tfm_tensor *key,
                                    const tfm_tensor *value,
                                    const tfm_attention_masks *masks,
                                    const tfm_tensor *grad_output,
                                    tfm_tensor *grad_query,
                                    tfm_tensor *grad_key,
                                    tfm_tensor *grad_value);

/* The functional form: attention on per-head tensors with a variant,
 * holding the variant's learned parameters (if any) as a module of kind
 * TFM_MODULE_ATTENTION.  d_k: query/key width per head, d_v: value width,
 * n_heads: query heads (key/value heads from config->n_kv_heads).
 * config NULL means the defaults.
 * Errors: TFM_ERR_NULL_ARGUMENT (out), TFM_ERR_INVALID_ARGUMENT (a size
 * < 1, an unknown enum value, n_kv_heads not dividing n_heads, odd
 * rope_dims or rope_dims > d_k, rope_base not finite or <= 1, Shaw
 * without max_distance >= 1, window, dilation, block_size, n_global or
 * n_random_blocks (at most 4096) out of range, n_global without a sparse
 * pattern, Shaw with the GENERAL or ADDITIVE score (its term needs the
 * untransformed query), T5 with fewer than 2 buckets (4 when
 * bidirectional) or a max_distance not beyond the exact buckets, a
 * non-finite or negative scale, struct_size smaller than the first two
 * fields); fields of variants not selected are ignored,
 * TFM_ERR_OVERFLOW, TFM_ERR_OUT_OF_MEMORY.  *out is freed with
 * tfm_module_free. */
TFM_API tfm_status tfm_attention_create(int64_t d_k, int64_t d_v,
                                        int64_t n_heads,
                                        const tfm_attention_config *config,
                                        tfm_module **out);

/* Attention of the variant, per batch element and head:
 *   q [B, H, L, d_k], k [B, H_kv, S, d_k], v [B, H_kv, S, d_v],
 *   out [B, H, L, d_v] (written), weights NULL or [B, H, L, S].
 * RoPE, when configured, rotates copies of q and k (the inputs are not
 * modified).  masks as for tfm_sdpa; they combine with the sparse pattern.
 * Errors: as tfm_sdpa, plus TFM_ERR_WRONG_KIND and TFM_ERR_INVALID_ARGUMENT
 * (a learned temperature <= 0).  On error out and weights are unchanged. */
TFM_API tfm_status tfm_attention_forward(const tfm_module *attention,
                                         const tfm_tensor *q,
                                         const tfm_tensor *k,
                                         const tfm_tensor *v,
                                         const tfm_attention_masks *masks,
                                         tfm_tensor *out, tfm_tensor *weights);

/* Copies the variant of an attention module, a multi-head attention
 * module or an encoder layer into *config (its struct_size is kept and
 * only that many bytes are written).  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_WRONG_KIND, TFM_ERR_INVALID_ARGUMENT (struct_size too small). */
TFM_API tfm_status tfm_attention_get_config(const tfm_module *module,
                                            tfm_attention_config *config);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_ATTENTION_H */
