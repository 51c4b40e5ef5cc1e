/* Internal: multi-head attention for the layers that contain it. */
#ifndef TFM_SRC_MHA_H
#define TFM_SRC_MHA_H

#include "attention/attention_masks.h"
#include "kernels/dropout.h"
#include "nn/linear.h"
#include "nn/module_impl.h"
#include "attention/variant.h"

typedef struct tfm__mha {
    tfm_module base;
    int64_t d_model, n_heads, d_k, kdim, vdim;
    int64_t kv_dim;             /* n_kv_heads * d_k (= d_model unless GQA) */
    int bias;
    int packed;                 /* kdim == vdim == d: "in_proj_weight" */
    float *w_q, *w_k, *w_v;     /* [d, d], [kv_dim, kdim], [kv_dim, vdim] */
    float *b_q, *b_k, *b_v;     /* [d], [kv_dim], [kv_dim], or NULL */
    float *w_o, *b_o;           /* [d, d], [d] or NULL */
    tfm__variant var;           /* attention variant (variants.h) */
    tfm__linear_module *out_proj; /* sub-module: a view over w_o, b_o */
    /* PyTorch's add_bias_kv / add_zero_attn (mha_extra_kv.h): rows
     * appended to the keys and values of every call. */
    float *bias_k, *bias_v;     /* [kv_dim] each, or NULL */
    int add_zero_attn;
} tfm__mha;

/* Creates the module (attention.h: tfm_mha_create). */
tfm_status tfm__mha_new(int64_t d_model, int64_t n_heads, int64_t kdim,
                        int64_t vdim, int bias, tfm__mha **out);

/* The same with a variant (variants.h: tfm_mha_create_ex); config NULL =
 * the defaults.  The config is read (tfm__attention_config_read) and
 * checked here. */
tfm_status tfm__mha_new_ex(int64_t d_model, int64_t n_heads, int64_t kdim,
                           int64_t vdim, int bias,
                           const tfm_attention_config *config,
                           tfm__mha **out);

/* The same with tfm_mha_options (attention.h: tfm_mha_create_v2), read
 * and checked here; options NULL = the defaults. */
tfm_status tfm__mha_new_v2(int64_t d_model, int64_t n_heads,
                           const tfm_mha_options *options, tfm__mha **out);

/* Forward on raw row-major arrays: query [B, L, d], key [B, S, kdim],
 * (drop_key: the call's dropout key, dropout.h; 0 = none)
 * value [B, S, vdim] -> out [B, L, d] (out may alias query).  masks are
 * validated.  weights: NULL, or per head [B, H, L, S] (average 0), or
 * averaged [B, L, S] (average 1).  Under RoPE, query row i is at position
 * i (+ S - L with bottom-right causal alignment), key row j at j.  Fails
 * only with TFM_ERR_OUT_OF_MEMORY or TFM_ERR_INVALID_ARGUMENT (a learned
 * temperature <= 0), before writing anything. */
tfm_status tfm__mha_run(const tfm__mha *m, const float *query,
                        const float *key, const float *value, int64_t B,
                        int64_t L, int64_t S, const tfm__masks *masks,
                        float *out, float *weights, int average,
                        uint64_t drop_key);

/* The attention weights' dropout of a call of m with key drop_key (0:
 * none): m's probability, the key's TFM__DROP_ATTENTION site. */
tfm__dropout tfm__mha_dropout(const tfm__mha *m, uint64_t drop_key);

/* tfm__mha_run with F.multi_head_attention_forward's static_k / static_v
 * (attention.h: tfm_mha_forward_v2): NULL, or [B, H_kv, S, d_k] keys /
 * values used instead of projecting key / value (which are then not
 * read).  With the module's extra rows (add_bias_kv, add_zero_attn)
 * weights has S + tfm__mha_extra_rows(m) columns; masks are over the S
 * keys.  Fails as tfm__mha_run. */
tfm_status tfm__mha_run_static(const tfm__mha *m, const float *query,
                               const float *key, const float *value,
                               const float *static_k, const float *static_v,
                               int64_t B, int64_t L, int64_t S,
                               const tfm__masks *masks, float *out,
                               float *weights, int average,
                               uint64_t drop_key);

/* Self-attention of n new positions x [n, d] (batch 1) over a KV cache:
 * their keys (rotated for their positions under RoPE) and values are
 * written to rows past .. past+n-1 of k_cache and v_cache ([capacity,
 * m->kv_dim]), then the n queries (positions past .. past+n-1) attend to
 * rows 0 .. past+n-1 with bottom-right causal alignment and the variant.
 * origin: under RoPE, the absolute position of row 0 (queries and new keys
 * turn for origin + their row; a rolling cache's, kv_cache.c); 0 else.
 * out [n, d] may alias x.  Fails only with TFM_ERR_OUT_OF_MEMORY or
 * TFM_ERR_INVALID_ARGUMENT (a learned temperature <= 0), then before
 * writing out; the cache rows from past on may then hold the new keys and
 * values, which the caller's length (not advanced) leaves unused.
 * (tfm__mha_run_cached_seqs with one sequence.) */
tfm_status tfm__mha_run_cached(const tfm__mha *m, const float *x, int64_t n,
                               float *k_cache, float *v_cache, int64_t past,
                               int64_t origin, float *out);

/* One sequence's part of a cached self-attention over several sequences
 * (tfm__mha_run_cached_seqs): its n new rows (consecutive in x), its
 * cache holding `past` positions and its RoPE origin.  Layer `layer`'s
 * keys and values are keys / values + layer * layer_stride, [capacity,
 * kv_dim] each (tfm__stack_run_cached_seqs walks the layers).
 * v_nonfinite: NULL, or per layer the number of value rows holding a NaN
 * or an infinity written since the cache was empty (kv_cache.c keeps it):
 * the call adds its new rows' and, while a layer's count is 0, tells the
 * attention kernel that every value row is finite, which spares it a scan
 * of the whole cache per step. */
typedef struct tfm__cached_seq {
    int64_t n, past, origin;
    float *keys, *values;
    int64_t layer_stride;
    int64_t *v_nonfinite;
} tfm__cached_seq;

/* tfm__mha_run_cached for n_seqs sequences at once, x [rows, d] their new
 * rows one sequence after another (rows = the sum of seqs[i].n): the
 * projections of all rows are one matrix product each (the weights read
 * once for the batch), the attention of each sequence's queries is over
 * its own cache (layer `layer`'s).  out [rows, d] may alias x.  Fails as
 * tfm__mha_run_cached. */
tfm_status tfm__mha_run_cached_seqs(const tfm__mha *m, const float *x,
                                    int64_t n_seqs,
                                    const tfm__cached_seq *seqs,
                                    int64_t layer, float *out);

/* Cross-attention keys and values of one memory [S, kdim] for
 * tfm__mha_run_memory_kv: kv [S, 2 kv_dim], row s = [k_s | v_s], one
 * product memory [W_k; W_v]^T.  Packed weights only (kdim = vdim = d, a
 * decoder layer's multihead_attn).  Source:
 * transformers' generate for encoder-decoder models, which projects the
 * encoder's output once per layer (past_key_values' cross-attention
 * part). */
void tfm__mha_memory_kv(const tfm__mha *m, const float *memory, int64_t S,
                        float *kv);

/* Cross-attention of rows independent queries x [rows, d] (several beams'
 * new positions) over one memory's keys and values kv [S, 2 kv_dim]
 * (tfm__mha_memory_kv), no mask: tfm__mha_run's value for each row with
 * that memory.  Only for the default variant without extra rows (a
 * decoder layer's multihead_attn): the rows carry no positions.  out
 * [rows, d] may alias x.  Fails only with TFM_ERR_OUT_OF_MEMORY, before
 * writing out. */
tfm_status tfm__mha_run_memory_kv(const tfm__mha *m, const float *x,
                                  int64_t rows, const float *kv, int64_t S,
                                  float *out);

/* MACs of one forward pass (module.h formula). */
tfm_status tfm__mha_macs(const tfm__mha *m, int64_t batch, int64_t L,
                         int64_t S, int64_t *acc);

/* The input checks of tfm_mha_forward_v2 and tfm_mha_backward: the module
 * (an MHA), query [B, L, d_model], key [B, S, kdim] or static_k [B, H_kv,
 * S, d_k], value [B, S, vdim] or static_v, static rows' restrictions, and
 * the masks, resolved into *mk; sets *B, *L, *S.  Messages name `what`. */
tfm_status tfm__mha_check_inputs(const char *what, const tfm_module *mha,
                                 const tfm_tensor *query,
                                 const tfm_tensor *key,
                                 const tfm_tensor *value,
                                 const tfm_tensor *static_k,
                                 const tfm_tensor *static_v,
                                 const tfm_attention_masks *masks,
                                 int64_t *B, int64_t *L, int64_t *S,
                                 tfm__masks *mk);

/* What the backward of one call needs, kept from its forward
 * (tfm__mha_forward_keep): the inputs (the caller's, kept alive), the
 * projections, the attention's output and per-row log-sum-exp, and the
 * backward's scratch, all in the calling thread's workspace above the
 * caller's mark (released when the caller restores it). */
typedef struct tfm__mha_kept {
    const float *query, *key, *value;
    int64_t B, L, S;
    const tfm__masks *masks;
    int fused;          /* self-attention: q, k, v side by side in q */
    int64_t ld, ldkv;   /* row strides of q and of k, v (k and v side by
                         * side, ldkv 2 kv, when both come from one
                         * memory through packed weights: tfm__mha_run's
                         * product, so the same bits) */
    float *q, *k, *v;   /* [B, L, d], [B, S, kv] (strides ld, ldkv) */
    float *ctx, *lse;   /* [B, L, d], [B, H, L] */
    float *dctx, *dq, *dk, *dv;  /* the same shapes (fused: dq holds all
                                  * three, stride ld) */
    double *acc;
    tfm__dropout drop;  /* the attention weights' (zeroed: none) */
} tfm__mha_kept;

/* The forward of tfm__mha_run (out [B, L, d], NULL: not wanted) keeping
 * in *kept what tfm__mha_backward_kept needs.  fuse_inputs: query, key and
 * value are one tensor (self-attention) whose one input gradient the
 * caller wants: the projections are one product, and the backward writes
 * their summed gradient to grad_query (grad_key, grad_value must be
 * NULL).  drop_key: the call's dropout key (dropout.h; 0: none).  Fails
 * with TFM_ERR_OUT_OF_MEMORY or TFM_ERR_INVALID_ARGUMENT (a variant or
 * option without a backward yet) before writing anything. */
tfm_status tfm__mha_forward_keep(const tfm__mha *m, const float *query,
                                 const float *key, const float *value,
                                 int64_t B, int64_t L, int64_t S,
                                 const tfm__masks *masks, int fuse_inputs,
                                 uint64_t drop_key, float *out,
                                 tfm__mha_kept *kept);

/* The backward of that call: accumulates the gradients of the
 * projections' weights and biases into m's gradient memory and writes
 * grad_query [B, L, d], grad_key [B, S, kdim], grad_value [B, S, vdim]
 * (each NULL: not wanted; none overlapping an input).  Fails with
 * TFM_ERR_OUT_OF_MEMORY or TFM_ERR_INVALID_ARGUMENT (a variant without a
 * backward) before writing anything. */
tfm_status tfm__mha_backward_kept(const tfm__mha *m,
                                  const tfm__mha_kept *kept,
                                  const float *grad_out, float *grad_query,
                                  float *grad_key, float *grad_value);

/* Both in one (mha_backward.c), inputs checked. */
tfm_status tfm__mha_backward(const tfm__mha *m, const float *query,
                             const float *key, const float *value, int64_t B,
                             int64_t L, int64_t S, const tfm__masks *masks,
                             const float *grad_out, float *grad_query,
                             float *grad_key, float *grad_value,
                             uint64_t drop_key);

#endif
